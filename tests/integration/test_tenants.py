"""Tenants: with API keys, each key keeps to itself. Its prompts' cached KV is not shared with another key (the
other key's cached_tokens stay 0), its stored responses are invisible to another key, another key cannot abort its
requests, and its KV events are not in another key's event stream. An admin key sees and acts on everything."""
import concurrent.futures
import threading
import time

import grpc
import openai
import pytest

import requests_shim as http
from conftest import Daemon, scaled

ALICE, BOB, ROOT_KEY = "alice-key-0123456789", "bob-key-0123456789", "root-key-0123456789"
PROMPT = " ".join(f"Line {i}: the green door of the old mill opens at dawn." for i in range(40))


@pytest.fixture(scope="module")
def d():
    daemon = Daemon(["--api-keys", f"{ALICE},{BOB}", "--admin-api-keys", ROOT_KEY])
    yield daemon
    daemon.stop()


def client(d, key):
    return openai.OpenAI(base_url=d.url + "/v1", api_key=key, max_retries=0, timeout=120)


def cached(d, key, **extra):
    c = client(d, key)
    r = c.completions.create(model=c.models.list().data[0].id, prompt=PROMPT, max_tokens=1, temperature=0,
                             extra_body=extra)
    return r.usage.prompt_tokens_details.cached_tokens


def test_prefix_cache_is_per_key(d):
    assert cached(d, ALICE) == 0
    assert cached(d, ALICE) >= 256
    assert cached(d, BOB) == 0  # bob cannot learn that alice sent this prompt
    assert cached(d, BOB) >= 256
    assert cached(d, ALICE, cache_salt="s") == 0  # a salt splits a key's space further


def test_stored_responses_are_per_key(d):
    a = client(d, ALICE)
    model = a.models.list().data[0].id
    r = a.responses.create(model=model, input="hello", max_output_tokens=2)
    auth = lambda k: {"Authorization": f"Bearer {k}"}
    assert http.get(d.url + f"/v1/responses/{r.id}", headers=auth(ALICE), timeout=10).status == 200
    assert http.get(d.url + f"/v1/responses/{r.id}", headers=auth(BOB), timeout=10).status == 404
    follow = http.post(d.url + "/v1/responses", {"input": "x", "previous_response_id": r.id}, headers=auth(BOB),
                       timeout=30)
    assert follow.status == 404 and follow.json()["error"]["param"] == "previous_response_id"
    assert http.request("DELETE", d.url + f"/v1/responses/{r.id}", headers=auth(BOB), timeout=10).status == 404
    assert http.get(d.url + f"/v1/responses/{r.id}", headers=auth(ROOT_KEY), timeout=10).status == 200
    assert client(d, ALICE).responses.create(model=model, input="and?", previous_response_id=r.id,
                                             max_output_tokens=2).output is not None


def test_abort_and_events_are_per_key(d, grpc_pb):
    m, g = grpc_pb
    ch = grpc.insecure_channel(f"127.0.0.1:{d.grpc_port}")
    stub = g.InferenceStub(ch)
    md = lambda k: (("authorization", f"Bearer {k}"),)
    req = m.GenerateRequest(request_id="alice-long", prompt=PROMPT,
                            sampling=m.SamplingParams(max_tokens=3000, ignore_eos=True))
    finals = []
    since = [stub.GetServerInfo(m.GetServerInfoRequest(), metadata=md(ROOT_KEY))]
    # An earlier test cached this prompt's full pages for alice, so its prefill may store no page: the request's
    # own pages (and their events) come from what it generates. 200 tokens fill at least one new page; on a busy
    # host the abort below could otherwise land before the first.
    streaming = threading.Event()
    generated = [0]

    def run():
        for resp in stub.Generate(req, timeout=scaled(120), metadata=md(ALICE)):
            if resp.HasField("chunk"):
                generated[0] += len(resp.chunk.token_ids)
                if generated[0] >= 200:
                    streaming.set()
            if resp.HasField("final"):
                finals.append(resp.final)

    t = threading.Thread(target=run)
    t.start()
    # A slow (sanitizer) build may take seconds to prefill; a stream that ended early ends the wait.
    deadline = time.time() + scaled(60)
    while not streaming.wait(1) and t.is_alive() and time.time() < deadline:
        pass
    assert streaming.is_set(), f"{generated[0]} tokens streamed, stream {'open' if t.is_alive() else 'ended'}"
    assert not stub.Abort(m.AbortRequest(request_id="alice-long"), metadata=md(BOB)).found
    time.sleep(0.3)
    assert t.is_alive()  # bob's abort did nothing
    assert stub.Abort(m.AbortRequest(request_id="alice-long"), metadata=md(ROOT_KEY)).found
    t.join(30)
    assert finals and finals[0].finish_reason == m.FINISH_REASON_ABORTED

    def events(key):
        # The stream replays every event since sequence 1, then waits for new ones until the deadline ends it: the
        # window must outlast the replay, which a sanitizer build, or a host busy with other work, sends several
        # times slower (3 s was once too short for a CI run beside a benchmark).
        seen = []
        try:
            for e in stub.SubscribeKvEvents(m.SubscribeKvEventsRequest(from_sequence=1), timeout=scaled(10),
                                            metadata=md(key)):
                seen.append(e)
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        return seen

    # The three windows at once: each lasts its whole deadline.
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        alice, bob, root = pool.map(events, (ALICE, BOB, ROOT_KEY))
    assert any(e.request_id == "alice-long" for e in alice)
    assert all(e.request_id and not e.request_id.startswith("alice") for e in bob)
    assert not any(e.request_id == "alice-long" for e in bob)
    assert any(e.request_id == "alice-long" for e in root) and len(root) >= len(alice) + len(bob)
    assert since  # the admin key is accepted everywhere
    ch.close()


def test_only_an_admin_key_may_raise_priority(d, grpc_pb):
    m, g = grpc_pb
    stub = g.InferenceStub(grpc.insecure_channel(f"127.0.0.1:{d.grpc_port}"))
    md = lambda k: (("authorization", f"Bearer {k}"),)

    def generate(key, priority):
        req = m.GenerateRequest(prompt="Hello", priority=priority, sampling=m.SamplingParams(max_tokens=1))
        return [r for r in stub.Generate(req, timeout=60, metadata=md(key)) if r.HasField("final")]

    with pytest.raises(grpc.RpcError) as refused:
        generate(ALICE, 5)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "admin key" in refused.value.details()
    assert len(generate(ALICE, -3)) == 1  # lowering one's own is anyone's
    assert len(generate(ROOT_KEY, 5)) == 1
