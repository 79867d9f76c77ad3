"""limits.request_timeout_s and gRPC client deadlines: the request is aborted in the engine and the client gets
504 / finish_reason "timeout" / DEADLINE_EXCEEDED; the daemon keeps serving."""
import http.client
import json
import time

import grpc
import openai
import pytest

import requests_shim as http_shim
from conftest import Daemon, metric_value

LONG = {"max_tokens": 1500, "ignore_eos": True}


@pytest.fixture(scope="module")
def limited():
    d = Daemon(extra_args=["--request-timeout", "1.5"])
    yield d
    assert d.stop() == 0, d.logs()


def scrape(d):
    return http_shim.get(d.url + "/metrics").body.decode()


def wait_idle(d, seconds=10):
    """Waits until the engine runs nothing: an aborted request's sequence is gone within a step."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        text = scrape(d)
        if metric_value(text, "tqserve_num_requests_running") == 0 and metric_value(text, "tqserve_kv_cache_bytes") == 0:
            return True
        time.sleep(0.1)
    return False


def test_non_streamed_gets_504(limited):
    client = openai.OpenAI(base_url=limited.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    model = client.models.list().data[0].id
    t0 = time.time()
    with pytest.raises(openai.APIStatusError) as e:
        client.completions.create(model=model, prompt="Count:", max_tokens=1500, extra_body={"ignore_eos": True})
    assert e.value.status_code == 504
    err = e.value.response.json()["error"]
    assert err["type"] == "timeout_error" and "limits.request_timeout_s" in err["message"]
    assert time.time() - t0 < 10
    assert wait_idle(limited)
    assert metric_value(scrape(limited), "tqserve_requests_total",
                        {"endpoint": "/v1/completions", "outcome": "timeout"}) >= 1


def test_streamed_ends_with_timeout_chunk_then_done(limited):
    conn = http.client.HTTPConnection("127.0.0.1", limited.http_port, timeout=60)
    body = json.dumps({"messages": [{"role": "user", "content": "Tell a story"}], "stream": True, "n": 2, **LONG})
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    finish, events, done = {}, 0, False
    for raw in resp:
        line = raw.decode().strip()
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            events += 1
            for c in json.loads(line[6:])["choices"]:
                if c.get("finish_reason"):
                    finish[c["index"]] = c["finish_reason"]
    conn.close()
    assert done and events > 2
    assert finish == {0: "timeout", 1: "timeout"}
    assert wait_idle(limited)


def test_short_request_is_unaffected(limited):
    r = http_shim.post(limited.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 3})
    assert r.status == 200, r.body
    assert r.json()["choices"][0]["finish_reason"] == "length"


def test_grpc_server_limit_is_deadline_exceeded(limited, grpc_pb):
    m, g = grpc_pb
    with grpc.insecure_channel(f"127.0.0.1:{limited.grpc_port}") as ch:
        stub = g.InferenceStub(ch)
        chunks = 0
        with pytest.raises(grpc.RpcError) as e:
            for resp in stub.Generate(m.GenerateRequest(prompt="Count:", sampling=m.SamplingParams(**LONG)),
                                      timeout=60):
                chunks += resp.HasField("chunk")
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "limits.request_timeout_s" in e.value.details()
        assert chunks > 0
    assert wait_idle(limited)


def test_grpc_client_deadline_aborts_in_the_engine(daemon, grpc_pb):
    """The module-wide daemon has no server limit: only the client's 0.5 s deadline applies."""
    m, g = grpc_pb
    before = metric_value(scrape(daemon), "tqserve_requests_total",
                          {"endpoint": "grpc.Generate", "outcome": "timeout"}) or 0
    with grpc.insecure_channel(f"127.0.0.1:{daemon.grpc_port}") as ch:
        stub = g.InferenceStub(ch)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(m.GenerateRequest(prompt="Count:", sampling=m.SamplingParams(**LONG)), timeout=0.5))
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert wait_idle(daemon)
    deadline = time.time() + 5
    while time.time() < deadline:
        after = metric_value(scrape(daemon), "tqserve_requests_total",
                             {"endpoint": "grpc.Generate", "outcome": "timeout"}) or 0
        if after == before + 1:
            break
        time.sleep(0.1)
    assert after == before + 1
