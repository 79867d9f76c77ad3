"""POST /v1/embeddings through the official openai client (float and base64), its 400s, and gRPC Embed, against
the real daemon: unit-length vectors of the model's width, in input order, the same for an input alone or in a
batch, and closer for sentences that mean the same."""
import base64
import math
import struct

import grpc
import openai
import pytest

import requests_shim as http
from conftest import scaled

SENTENCES = ["The cat sat on the mat.", "A kitten rested on the rug.", "Stock markets fell sharply today."]


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=scaled(120))


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def test_batch_is_unit_vectors_in_order_and_semantic(client, model_id):
    r = client.embeddings.create(model=model_id, input=SENTENCES, encoding_format="float")
    assert [d.index for d in r.data] == [0, 1, 2]
    vecs = [d.embedding for d in r.data]
    assert all(len(v) == 576 for v in vecs)  # SmolLM2-135M's width
    assert all(abs(dot(v, v) - 1) < 1e-4 for v in vecs)
    assert dot(vecs[0], vecs[1]) > dot(vecs[0], vecs[2])
    assert r.usage.prompt_tokens == r.usage.total_tokens > 0
    alone = client.embeddings.create(model=model_id, input=SENTENCES[2], encoding_format="float").data[0].embedding
    assert max(abs(a - b) for a, b in zip(alone, vecs[2])) < 1e-4


def test_base64_matches_float(client, model_id):
    f = client.embeddings.create(model=model_id, input=SENTENCES[0], encoding_format="float").data[0].embedding
    raw = http.post(client.base_url.__str__().rstrip("/") + "/embeddings",
                    {"input": SENTENCES[0], "encoding_format": "base64"}, timeout=60).json()
    b = base64.b64decode(raw["data"][0]["embedding"])
    values = struct.unpack(f"<{len(b) // 4}f", b)
    assert max(abs(x - y) for x, y in zip(values, f)) < 1e-6
    # The client's default asks for base64 and decodes it itself.
    default = client.embeddings.create(model=model_id, input=SENTENCES[0]).data[0].embedding
    assert max(abs(x - y) for x, y in zip(default, f)) < 1e-6


def test_token_inputs_and_long_inputs(client, model_id, daemon):
    ids = http.post(daemon.url + "/tokenize", {"content": SENTENCES[1]}, timeout=10).json()["tokens"]
    by_ids = client.embeddings.create(model=model_id, input=[ids], encoding_format="float").data[0].embedding
    by_text = client.embeddings.create(model=model_id, input=SENTENCES[1], encoding_format="float").data[0].embedding
    assert dot(by_ids, by_text) > 0.99
    long_text = " ".join(SENTENCES * 80)  # several prefill chunks
    a = client.embeddings.create(model=model_id, input=long_text, encoding_format="float")
    b = client.embeddings.create(model=model_id, input=long_text, encoding_format="float")
    assert a.usage.prompt_tokens > 1024
    assert abs(dot(a.data[0].embedding, a.data[0].embedding) - 1) < 1e-4
    assert max(abs(x - y) for x, y in zip(a.data[0].embedding, b.data[0].embedding)) < 1e-4


@pytest.mark.parametrize("body,param,needle", [
    ({}, "input", "required"),
    ({"input": []}, "input", "must be"),
    ({"input": ""}, "input", "empty"),
    ({"input": [[1, 99999999]]}, "input", "token ids"),
    ({"input": ["x"] * 65}, "input", "at most 64"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format", "float or base64"),
    ({"input": "x", "dimensions": 12}, "dimensions", "576"),
    ({"input": "x", "foo": 1}, "foo", "unknown field"),
    ({"input": "x", "model": "other"}, "model", "not served"),
])
def test_bad_input(daemon, body, param, needle):
    r = http.post(daemon.url + "/v1/embeddings", body, timeout=60)
    assert r.status in (400, 404)
    err = r.json()["error"]
    assert err["param"] == param and needle in err["message"], err
    assert http.post(daemon.url + "/v1/embeddings", {"input": "ok"}, timeout=60).status == 200


def test_grpc_embed(daemon, grpc_pb, client, model_id):
    m, g = grpc_pb
    ch = grpc.insecure_channel(f"127.0.0.1:{daemon.grpc_port}")
    stub = g.InferenceStub(ch)
    r = stub.Embed(m.EmbedRequest(texts=SENTENCES), timeout=60)
    assert len(r.embeddings) == 3 and r.usage.prompt_tokens > 0
    http_vecs = client.embeddings.create(model=model_id, input=SENTENCES, encoding_format="float").data
    for got, want in zip(r.embeddings, http_vecs):
        assert max(abs(x - y) for x, y in zip(got.values, want.embedding)) < 1e-4
    with pytest.raises(grpc.RpcError) as e:
        stub.Embed(m.EmbedRequest(), timeout=60)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ch.close()
