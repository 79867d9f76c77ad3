"""Metrics, client disconnects, API keys, limits and the SIGTERM drain, against the real daemon."""
import http.client
import json
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest

import requests_shim as http_shim
from conftest import Daemon, metric_value, scaled


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_metrics_pass_promtool(daemon):
    http_shim.post(daemon.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    text = http_shim.get(daemon.url + "/metrics").body.decode()
    for name in ("tqserve_num_requests_running", "tqserve_num_requests_waiting", "tqserve_kv_cache_usage_ratio",
                 "tqserve_time_to_first_token_seconds_bucket", "tqserve_e2e_request_latency_seconds_count",
                 "tqserve_generation_tokens_total"):
        assert name in text, name
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_client_disconnect_frees_kv(daemon):
    def kv_bytes():
        return metric(http_shim.get(daemon.url + "/metrics").body.decode(), "tqserve_kv_cache_bytes")

    baseline = kv_bytes()
    conn = http.client.HTTPConnection("127.0.0.1", daemon.http_port, timeout=60)
    body = json.dumps({"prompt": "Tell me a long story", "max_tokens": 1500, "stream": True, "ignore_eos": True})
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    resp.fp.readline()  # the first event arrived: the sequence is running
    deadline = time.time() + 10
    while time.time() < deadline and kv_bytes() <= baseline:
        time.sleep(0.05)
    assert kv_bytes() > baseline
    # The client disappears mid-stream (shutdown: the response object still holds a reference to the socket).
    conn.sock.shutdown(socket.SHUT_RDWR)
    resp.close()
    conn.close()
    deadline = time.time() + 20
    while time.time() < deadline and kv_bytes() != baseline:
        time.sleep(0.1)
    assert kv_bytes() == baseline
    text = http_shim.get(daemon.url + "/metrics").body.decode()
    assert 'outcome="aborted"' in text


def wait_running(d, n, headers=None):
    """Waits until the daemon runs n requests (a loaded machine may take a while to send one)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        m = http_shim.get(d.url + "/metrics", headers=headers or {}).body.decode()
        if (metric_value(m, "tqserve_num_requests_running") or 0) >= n:
            return
        time.sleep(0.05)


def test_api_keys_and_concurrency_limit():
    d = Daemon(extra_args=["--api-keys", "k1,k2", "--max-concurrent-requests", "1"])
    try:
        body = {"prompt": "Hi", "max_tokens": 1}
        r = http_shim.post(d.url + "/v1/completions", body)
        assert r.status == 401
        r = http_shim.post(d.url + "/v1/completions", body, headers={"Authorization": "Bearer wrong"})
        assert r.status == 401
        r = http_shim.post(d.url + "/v1/completions", body, headers={"Authorization": "Bearer k2"})
        assert r.status == 200, r.body
        assert http_shim.get(d.url + "/health").status == 200  # probes need no key
        # A long request holds the only slot; a second one gets 429.
        auth = {"Authorization": "Bearer k1"}
        long_body = {"prompt": "Count:", "max_tokens": 400, "ignore_eos": True}
        t = threading.Thread(target=lambda: http_shim.post(d.url + "/v1/completions", long_body, headers=auth))
        t.start()
        wait_running(d, 1, headers=auth)
        r = http_shim.post(d.url + "/v1/completions", body, headers=auth)
        assert r.status == 429, r.body
        t.join()
    finally:
        assert d.stop() == 0


def test_sigterm_drains_streams():
    d = Daemon(extra_args=["--drain-timeout", "3"])
    results = [None] * 8

    def stream(i):
        conn = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=60)
        body = json.dumps({"prompt": f"Story {i}:", "max_tokens": 4000, "stream": True, "ignore_eos": True})
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        finish, done = None, False
        for raw in resp:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                for c in json.loads(line[6:])["choices"]:
                    finish = c.get("finish_reason") or finish
        results[i] = (resp.status, finish, done)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(2)
    d.proc.send_signal(15)
    time.sleep(0.3)
    try:
        assert http_shim.get(d.url + "/ready").status == 503
        assert http_shim.post(d.url + "/v1/completions", {"prompt": "x", "max_tokens": 1}).status == 503
    except OSError:
        pass  # the listener may already be closed if the drain finished
    for t in threads:
        t.join(30)
    assert d.proc.wait(30) == 0, d.logs()
    for i, r in enumerate(results):
        assert r is not None, f"stream {i} never finished"
        status, finish, done = r
        assert status == 200 and done, r
        assert finish in ("shutdown", "length", "stop"), r
    assert "drained" in d.logs()


def test_concurrency_limit_covers_grpc(grpc_pb):
    import grpc
    m, g = grpc_pb
    d = Daemon(extra_args=["--max-concurrent-requests", "1"])
    try:
        long_body = {"prompt": "Count:", "max_tokens": 400, "ignore_eos": True}
        statuses = []
        t = threading.Thread(target=lambda: statuses.append(
            http_shim.post(d.url + "/v1/completions", long_body, timeout=scaled(120)).status))
        t.start()
        wait_running(d, 1)
        with grpc.insecure_channel(f"127.0.0.1:{d.grpc_port}") as ch:
            stub = g.InferenceStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                list(stub.Generate(m.GenerateRequest(prompt="x", sampling=m.SamplingParams(max_tokens=1)), timeout=30))
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        t.join()
        assert statuses == [200], "the HTTP request holding the slot did not finish"
    finally:
        assert d.stop() == 0


def test_ready_is_503_while_the_model_loads():
    """The HTTP listener starts before the model loads: probes get 503 {"status": "loading"} until it is ready."""
    import json
    import os
    import subprocess
    import tempfile
    import time

    from conftest import BIN, default_model, free_ports
    if not os.path.exists(default_model()):
        pytest.skip(f"{default_model()} is absent (run scripts/fetch-model.sh)")
    port, = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQ_") or k == "TQ_MODEL_DIR"}
    log = tempfile.NamedTemporaryFile(prefix="tqserve-", suffix=".log", delete=False)
    proc = subprocess.Popen([str(BIN), "serve", "--host", "127.0.0.1", "--http-port", str(port), "--grpc-port", "0",
                             "--threads", "2"], stdout=log, stderr=subprocess.STDOUT, env=env)
    seen = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                r = http_shim.get(f"http://127.0.0.1:{port}/ready", timeout=5)
            except OSError:
                time.sleep(0.002)
                continue
            seen.append((r.status, r.body))
            if r.status == 200:
                break
        assert seen and seen[-1][0] == 200, seen[-3:]
        loading = [json.loads(b) for s, b in seen if s == 503]
        assert loading, "no 503 seen before ready (the model loaded before the listener answered once)"
        assert all(b["status"] == "loading" for b in loading)
        # /health answers 200 (alive) all along; a generation before ready would have been 503 too.
        assert http_shim.get(f"http://127.0.0.1:{port}/health").status == 200
    finally:
        proc.terminate()
        proc.wait(30)
