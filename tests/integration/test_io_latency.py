"""kv.io_latency_us: the fault-injection knob of the chaos bench (bench/chaos) makes every cold read and write late."""
import os
import subprocess

import requests_shim as http
from conftest import BIN, Daemon, metric_value

WIKI = os.path.join(os.path.dirname(__file__), "..", "data", "wikitext-2-raw", "wiki.test.raw")


def cold_read_latency(d):
    text = http.get(d.url + "/metrics", timeout=10).body.decode()
    n = metric_value(text, "tqserve_kv_tier_read_latency_seconds_count", {"tier": "cold"})
    s = metric_value(text, "tqserve_kv_tier_read_latency_seconds_sum", {"tier": "cold"})
    return n, s


def run(d, prompt):
    r = http.post(d.url + "/v1/completions", {"prompt": prompt, "max_tokens": 8, "temperature": 0}, timeout=300)
    assert r.status == 200, r.body
    return r.json()["choices"][0]["text"]


def test_injected_latency_on_every_cold_read():
    with open(WIKI) as f:
        prompt = f.read()[:3000]  # ~800 tokens: SPARSE heads' pages go to the cold tier
    # A cold cache of 1 MiB cannot hold them, so attention reads them back from disk.
    d = Daemon(["--kv-io-latency-us", "20000", "--kv-cold-cache-bytes", "1MiB"])
    try:
        assert "injected latency of 20000 us on every read and write" in d.logs()
        slow_text = run(d, prompt)
        run(d, prompt)  # the second time from the prefix cache's cold pages
        n, s = cold_read_latency(d)
        assert n and n > 0, "no cold reads"
        assert s / n >= 0.020, f"mean cold read latency {s / n * 1000:.2f} ms, injected 20 ms"
    finally:
        assert d.stop() == 0, d.logs()
    # Without the option: same tokens, no injected latency.
    d = Daemon(["--kv-cold-cache-bytes", "1MiB"])
    try:
        assert "injected latency" not in d.logs()
        assert run(d, prompt) == slow_text
        n, s = cold_read_latency(d)
        assert n and s / n < 0.020, f"mean cold read latency {s / n * 1000:.2f} ms without injection"
    finally:
        assert d.stop() == 0, d.logs()


def test_latency_option_range():
    out = subprocess.run([str(BIN), "serve", "--kv-io-latency-us", "-1"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "kv.io_latency_us" in out.stderr + out.stdout
