"""A real Prometheus server (Debian's `prometheus`) scrapes the daemon every second; tqserve's gauges and counters
are read back through Prometheus's HTTP API (/api/v1/query)."""
import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

import requests_shim as http
from conftest import free_ports


@pytest.fixture(scope="module")
def prometheus(daemon):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus server is not installed (Debian package prometheus, scripts/install-deps.sh)")
    (port,) = free_ports(1)
    work = tempfile.mkdtemp(prefix="tq-prometheus-")
    config = f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tqserve
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: ["127.0.0.1:{daemon.http_port}"]
"""
    with open(f"{work}/prometheus.yml", "w") as f:
        f.write(config)
    log = open(f"{work}/prometheus.log", "w")
    proc = subprocess.Popen([binary, f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/data",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def logs():
        with open(f"{work}/prometheus.log") as f:
            return f.read()

    try:
        deadline = time.time() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{logs()}")
            try:
                if http.get(url + "/-/ready").status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("prometheus did not become ready:\n" + logs())
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def query(url, expr):
    """The instant vector of `expr` as [(labels, value)]."""
    with urllib.request.urlopen(url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def wait_for(url, expr, predicate, seconds=30):
    deadline = time.time() + seconds
    result = []
    while time.time() < deadline:
        result = query(url, expr)
        if result and predicate(result):
            return result
        time.sleep(0.5)
    raise AssertionError(f"{expr}: {result} after {seconds} s")


def test_prometheus_scrapes_the_daemon(daemon, prometheus):
    up = wait_for(prometheus, 'up{job="tqserve"}', lambda r: r[0][1] == 1)
    assert up[0][0]["instance"] == f"127.0.0.1:{daemon.http_port}"
    running = wait_for(prometheus, 'tqserve_num_requests_running{job="tqserve"}', lambda r: True)
    assert running[0][1] >= 0
    # A counter moves after one request, as Prometheus sees it at its next scrape.
    expr = 'sum(tqserve_requests_total{job="tqserve",endpoint="/v1/completions",outcome="success"})'
    before = query(prometheus, expr)
    before = before[0][1] if before else 0
    r = http.post(daemon.url + "/v1/completions", {"prompt": "Hello", "max_tokens": 3})
    assert r.status == 200, r.body
    wait_for(prometheus, expr, lambda res: res[0][1] >= before + 1)
    wait_for(prometheus, 'tqserve_generation_tokens_total{job="tqserve"}', lambda res: res[0][1] >= 3)
    # Prometheus parsed every histogram the daemon exposes.
    wait_for(prometheus, 'tqserve_e2e_request_latency_seconds_count{job="tqserve"}', lambda res: res[0][1] >= 1)
