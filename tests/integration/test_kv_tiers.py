"""The KV tiers through the real daemon: a cold directory on the build disk, SPARSE heads' pages written there and
read back, per-tier and per-class metrics (promtool-clean), GetServerInfo's tiers and classes, and the
SubscribeKvEvents stream (stored and evicted pages, replay from a sequence number)."""
import os
import shutil
import subprocess
import tempfile
import threading
import time

import grpc
import pytest
from conftest import BIN, Daemon, default_model, free_ports, metric_value
from openai import OpenAI

import requests_shim as http

LONG_PROMPT = " ".join(f"Item {i}: the cold tier keeps pages on disk and reads them ahead." for i in range(60))


@pytest.fixture(scope="module")
def cold_dir():
    d = tempfile.mkdtemp(prefix="tq-cold-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def tiered(cold_dir):
    # Every head SPARSE (tq4) except the f16 boundary layers (HOT); a cold cache far smaller than the pages, so
    # attention reads the disk.
    d = Daemon(["--kv-preset", "uniform:tq4", "--kv-boundary-layers", "2", "--kv-cold-dir", cold_dir,
                "--kv-cold-cache-bytes", "1MiB", "--kv-io-backend", "auto"])
    yield d
    rc = d.stop()
    assert rc == 0, d.logs()


@pytest.fixture(scope="module")
def channel(tiered):
    ch = grpc.insecure_channel(f"127.0.0.1:{tiered.grpc_port}")
    grpc.channel_ready_future(ch).result(timeout=20)
    yield ch
    ch.close()


def complete(daemon, max_tokens=24):
    client = OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)
    return client.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt=LONG_PROMPT, max_tokens=max_tokens, temperature=0)


def test_cold_pages_are_written_and_read_back(tiered):
    out = complete(tiered)
    assert out.usage.prompt_tokens > 512 and out.choices[0].text
    metrics = http.get(tiered.url + "/metrics").body.decode()
    assert metric_value(metrics, "tqserve_kv_tier_writes_total", {"tier": "cold"}) > 0
    assert metric_value(metrics, "tqserve_kv_tier_reads_total", {"tier": "cold"}) > 0
    assert metric_value(metrics, "tqserve_kv_tier_read_latency_seconds_count", {"tier": "cold"}) > 0
    assert metric_value(metrics, "tqserve_kv_class_heads", {"class": "sparse"}) == 26 * 3
    assert metric_value(metrics, "tqserve_kv_class_heads", {"class": "hot"}) == 4 * 3
    assert metric_value(metrics, "tqserve_kv_compression_ratio") > 1.5
    assert metric_value(metrics, "tqserve_kv_tier_errors_total", {"tier": "cold", "kind": "data_loss"}) == 0
    # The request finished: what stays is the prefix cache's, on the cold tier (its HOT pages move there right
    # after the request ends).
    deadline = time.time() + 10
    while time.time() < deadline:
        metrics = http.get(tiered.url + "/metrics").body.decode()
        entries = metric_value(metrics, "tqserve_kv_prefix_cache_entries")
        if metric_value(metrics, "tqserve_kv_tier_pages", {"tier": "hot"}) == 0:
            break
        time.sleep(0.1)
    assert entries >= 4
    assert metric_value(metrics, "tqserve_kv_tier_pages", {"tier": "cold"}) == entries * 90
    assert metric_value(metrics, "tqserve_kv_tier_pages", {"tier": "hot"}) == 0


def test_the_same_prompt_again_reuses_the_cached_prefix(tiered):
    out = complete(tiered)
    assert out.usage.prompt_tokens_details.cached_tokens >= 512
    metrics = http.get(tiered.url + "/metrics").body.decode()
    assert metric_value(metrics, "tqserve_kv_prefix_cache_hits_total") >= 1
    assert metric_value(metrics, "tqserve_kv_prefix_cache_hit_tokens_total") >= 512


def test_same_text_as_the_ram_tiers(tiered):
    ram = Daemon(["--kv-preset", "uniform:tq4", "--kv-boundary-layers", "2", "--kv-cold-dir", ""])
    try:
        assert complete(ram).choices[0].text == complete(tiered).choices[0].text
    finally:
        assert ram.stop() == 0


def test_tier_metrics_pass_promtool(tiered):
    complete(tiered, max_tokens=4)
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is absent (Debian package prometheus)")
    text = http.get(tiered.url + "/metrics").body.decode()
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_server_info_lists_tiers_and_classes(grpc_pb, channel):
    m, g = grpc_pb
    info = g.InferenceStub(channel).GetServerInfo(m.GetServerInfoRequest())
    tiers = {t.tier: t for t in info.tiers}
    assert set(tiers) == {"hot", "warm", "cold"}
    assert tiers["cold"].bytes_capacity == 16 << 30
    classes = {c.precision_class: c for c in info.classes}
    assert classes["SPARSE"].format == "tq4" and classes["SPARSE"].heads == 78
    assert classes["HOT"].format == "f16" and classes["HOT"].heads == 12


def test_kv_events_stream_and_replay(grpc_pb, channel, tiered):
    m, g = grpc_pb
    stub = g.InferenceStub(channel)
    events, started = [], threading.Event()

    def listen():
        call = stub.SubscribeKvEvents(m.SubscribeKvEventsRequest(from_sequence=0), timeout=120)
        started.set()
        try:
            for ev in call:
                events.append(ev)
                if sum(e.kind == m.KV_EVENT_KIND_STORED for e in events) >= 90 * 4:
                    call.cancel()
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.CANCELLED

    t = threading.Thread(target=listen)
    t.start()
    started.wait(10)
    time.sleep(0.5)  # the subscription is live before the request starts
    # A prompt no earlier test sent (a cached prefix would store nothing new).
    client = OpenAI(base_url=tiered.url + "/v1", api_key="unused", max_retries=0)
    client.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt="Events. " + LONG_PROMPT, max_tokens=4,
                              temperature=0)
    t.join(60)
    assert not t.is_alive()
    stored = [e for e in events if e.kind == m.KV_EVENT_KIND_STORED]
    # 4 full pages (512 of the prompt's > 512 tokens) per (layer, KV head): 90 x 4 pages stored.
    assert len(stored) >= 90 * 4
    assert {e.tier for e in stored} == {"hot", "cold"}
    assert all(e.format == "tq4" for e in stored if e.tier == "cold")
    assert all(e.request_id for e in stored)
    seqs = [e.sequence_number for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gaps
    # Replay: from a past sequence number, the same events again.
    replay = []
    call = stub.SubscribeKvEvents(m.SubscribeKvEventsRequest(from_sequence=seqs[0]), timeout=30)
    for ev in call:
        replay.append(ev)
        if len(replay) == 10:
            call.cancel()
            break
    assert [e.page_id for e in replay] == [e.page_id for e in events[:10]]


@pytest.mark.parametrize("kind,reason", [("file", "is not a directory"), ("symlink", "is a symbolic link")])
def test_a_bad_cold_dir_stops_start_up_with_the_reason(tmp_path, kind, reason):
    if not os.path.exists(default_model()):
        pytest.skip(f"{default_model()} is absent (run scripts/fetch-model.sh)")
    target = tmp_path / "target"
    if kind == "file":
        target.write_text("not a directory")
        bad = target
    else:
        target.mkdir()
        bad = tmp_path / "link"
        bad.symlink_to(target)
    http_port, grpc_port = free_ports(2)
    r = subprocess.run([str(BIN), "serve", "--host", "127.0.0.1", "--http-port", str(http_port), "--grpc-port",
                        str(grpc_port), "--threads", "2", "--ctx-size", "512", "--kv-preset", "uniform:tq4",
                        "--kv-cold-dir", str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert reason in r.stdout + r.stderr and str(bad) in r.stdout + r.stderr, r.stdout + r.stderr
