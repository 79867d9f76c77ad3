"""The KV cache a user gets without KV flags: the start-up line, and the cold tier in the default cache directory
(~/.cache/tqserve/kv, created 0700) or, where that cannot be used, RAM tiers with one warning and a metric."""
import os
import stat
import subprocess

import pytest

from conftest import Daemon, default_model, metric_value

import requests_shim as http


def test_default_cold_dir_is_made_private_under_home(tmp_path):
    d = Daemon(["--model", default_model()], env={"HOME": str(tmp_path)})
    try:
        kv = tmp_path / ".cache" / "tqserve" / "kv"
        assert kv.is_dir(), d.logs()
        assert stat.S_IMODE(os.stat(kv).st_mode) == 0o700
        assert (kv / "LOCK").read_text().strip() == str(d.proc.pid)
        logs = d.logs()
        assert f"cold 16.0 GiB in {kv}" in logs, logs
        line = next(l for l in logs.splitlines() if "KV cache:" in l)
        assert "bits per value" in line and "MiB per 2048-token sequence" in line and "less than f16" in line, line
        metrics = http.get(d.url + "/metrics").body.decode()
        assert metric_value(metrics, "tqserve_kv_cold_tier_unavailable") == 0
    finally:
        assert d.stop() == 0, d.logs()


def test_an_unusable_default_cold_dir_falls_back_to_ram_with_one_warning(tmp_path):
    (tmp_path / ".cache").write_text("a file where the cache directory should be")
    d = Daemon(["--model", default_model()], env={"HOME": str(tmp_path)})
    try:
        logs = d.logs()
        warnings = [l for l in logs.splitlines() if "KV cold tier off" in l]
        assert len(warnings) == 1, logs
        assert ".cache" in warnings[0]
        assert "no cold tier (unavailable:" in logs, logs
        metrics = http.get(d.url + "/metrics").body.decode()
        assert metric_value(metrics, "tqserve_kv_cold_tier_unavailable") == 1
        r = http.post(d.url + "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
        assert r.status == 200, r.body
    finally:
        assert d.stop() == 0, d.logs()


def test_a_second_daemon_on_the_default_dir_runs_on_ram(tmp_path):
    first = Daemon(["--model", default_model()], env={"HOME": str(tmp_path)})
    try:
        second = Daemon(["--model", default_model()], env={"HOME": str(tmp_path)})
        try:
            logs = second.logs()
            assert "in use by another process (pid " + str(first.proc.pid) in logs, logs
            metrics = http.get(second.url + "/metrics").body.decode()
            assert metric_value(metrics, "tqserve_kv_cold_tier_unavailable") == 1
        finally:
            assert second.stop() == 0, second.logs()
    finally:
        assert first.stop() == 0, first.logs()


def tmpfs_wrap(mountpoint, size, fill):
    """A command prefix that runs the daemon in its own user and mount namespaces with a tmpfs of `size` at
    `mountpoint` (filled to the last byte when `fill`): a real full disk, without root."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available for a tmpfs of our own: {probe.stderr.strip()}")
    mountpoint.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o size={size},mode=0700 tq-test "$0" || exit 1\n'
    if fill:
        script += 'cat /dev/zero > "$0/fill" 2>/dev/null\n'
    return ["unshare", "-rm", "sh", "-c", script + 'exec "$@"', str(mountpoint)]


def test_a_full_default_cold_dir_falls_back_to_ram(tmp_path):
    wrap = tmpfs_wrap(tmp_path / ".cache", "1m", fill=True)
    d = Daemon(["--model", default_model()], env={"HOME": str(tmp_path)}, wrap=wrap)
    try:
        logs = d.logs()
        warnings = [l for l in logs.splitlines() if "KV cold tier off" in l]
        assert len(warnings) == 1, logs
        assert "is full: 0 bytes free" in warnings[0], warnings[0]
        metrics = http.get(d.url + "/metrics").body.decode()
        assert metric_value(metrics, "tqserve_kv_cold_tier_unavailable") == 1
        assert metric_value(metrics, "tqserve_kv_tier_capacity_bytes", {"tier": "cold"}) in (None, 0)
        r = http.post(d.url + "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
        assert r.status == 200, r.body
    finally:
        assert d.stop() == 0, d.logs()


def test_a_full_named_cold_dir_is_refused_at_start(tmp_path):
    cold = tmp_path / "kv"
    wrap = tmpfs_wrap(cold, "1m", fill=True)
    with pytest.raises(RuntimeError) as exited:
        Daemon(["--model", default_model(), "--kv-cold-dir", str(cold)], wrap=wrap)
    assert "exited with 1" in str(exited.value), exited.value
    assert f"the file system under {cold} is full" in str(exited.value), exited.value


def test_a_small_cold_dir_caps_the_cold_budget(tmp_path):
    cold = tmp_path / "kv"
    wrap = tmpfs_wrap(cold, "8m", fill=False)
    d = Daemon(["--model", default_model(), "--kv-cold-dir", str(cold), "--kv-cold-bytes", "64MiB"], wrap=wrap)
    try:
        logs = d.logs()
        capped = [l for l in logs.splitlines() if "kv.cold_bytes is 64 MiB" in l]
        assert len(capped) == 1 and "has 8 MiB free" in capped[0], logs
        metrics = http.get(d.url + "/metrics").body.decode()
        capacity = metric_value(metrics, "tqserve_kv_tier_capacity_bytes", {"tier": "cold"})
        assert 0 < capacity <= 8 << 20, capacity
        assert metric_value(metrics, "tqserve_kv_cold_tier_unavailable") == 0
        prompt = "The cold tier holds the inner layers' pages. " * 40
        r = http.post(d.url + "/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0})
        assert r.status == 200, r.body
        metrics = http.get(d.url + "/metrics").body.decode()
        assert metric_value(metrics, "tqserve_kv_tier_pages", {"tier": "cold"}) > 0
    finally:
        assert d.stop() == 0, d.logs()
