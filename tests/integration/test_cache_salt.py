"""cache_salt: requests share cached prompt KV only with requests of the same salt, on HTTP and gRPC, and the
separation holds across a restart (the salt is part of the cached pages' names on the cold tier)."""
import tempfile
import shutil
import time

import grpc
import openai
import pytest

import requests_shim as http
from conftest import Daemon, metric_value

# Over three 128-token pages of prompt, so that whole pages can be cached.
PROMPT = " ".join(f"Item {i} is a small blue stone found near the river." for i in range(40))


@pytest.fixture(scope="module")
def cold_dir():
    d = tempfile.mkdtemp(prefix="tq-salt-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def cached(daemon, salt=None, prompt=PROMPT):
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    extra = {} if salt is None else {"cache_salt": salt}
    r = client.completions.create(model=client.models.list().data[0].id, prompt=prompt, max_tokens=2,
                                  temperature=0, extra_body=extra)
    return r.usage.prompt_tokens_details.cached_tokens


def settle(daemon):
    """Waits until the finished requests' pages have left the hot tier for the cold one."""
    deadline = time.time() + 10
    while time.time() < deadline:
        metrics = http.get(daemon.url + "/metrics").body.decode()
        if metric_value(metrics, "tqserve_kv_tier_pages", {"tier": "hot"}) == 0:
            return
        time.sleep(0.1)


def test_salts_separate_cached_prefixes_and_survive_a_restart(cold_dir, grpc_pb):
    d = Daemon(["--kv-cold-dir", cold_dir])
    try:
        assert cached(d, "tenant-a") == 0
        assert cached(d, "tenant-a") >= 256          # same salt: the prefix is reused
        assert cached(d, "tenant-b") == 0            # another salt sees nothing
        assert cached(d) == 0                        # nor does the unsalted space
        assert cached(d) >= 256
        assert cached(d, "tenant-b") >= 256
        # gRPC takes the same salt.
        m, g = grpc_pb
        ch = grpc.insecure_channel(f"127.0.0.1:{d.grpc_port}")
        stub = g.InferenceStub(ch)
        req = m.GenerateRequest(prompt=PROMPT, cache_salt="tenant-a", sampling=m.SamplingParams(max_tokens=1))
        finals = [r.final for r in stub.Generate(req, timeout=60) if r.HasField("final")]
        assert finals[0].usage.cached_prompt_tokens >= 256
        req = m.GenerateRequest(prompt=PROMPT, cache_salt="tenant-c", sampling=m.SamplingParams(max_tokens=1))
        finals = [r.final for r in stub.Generate(req, timeout=60) if r.HasField("final")]
        assert finals[0].usage.cached_prompt_tokens == 0
        ch.close()
        settle(d)
    finally:
        d.kv_dir = None  # keep the cold directory for the restart
        assert d.stop() == 0
    d = Daemon(["--kv-cold-dir", cold_dir])
    try:
        assert cached(d, "tenant-a") >= 256  # recovered from the cold tier under its salt
        assert cached(d, "tenant-d") == 0
    finally:
        d.kv_dir = None
        d.stop()


@pytest.mark.parametrize("salt,needle", [(5, "string"), ("x" * 257, "256 bytes")])
def test_bad_salt_is_400(daemon, salt, needle):
    r = http.post(daemon.url + "/v1/completions", {"prompt": "hi", "max_tokens": 1, "cache_salt": salt}, timeout=60)
    assert r.status == 400
    assert r.json()["error"]["param"] == "cache_salt"
    assert needle in r.json()["error"]["message"]


def test_salt_on_streamed_chat(daemon):
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id

    def streamed(salt):
        stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}],
                                                max_tokens=1, temperature=0, stream=True,
                                                stream_options={"include_usage": True},
                                                extra_body={"cache_salt": salt})
        usage = [c.usage for c in stream if c.usage is not None][-1]
        return usage.prompt_tokens_details.cached_tokens

    assert streamed("stream-a") == 0
    assert streamed("stream-a") >= 256
    assert streamed("stream-b") == 0
