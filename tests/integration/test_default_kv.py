"""The KV cache a user gets without KV flags: the start-up line, and the cold tier in the default cache directory
(~/.cache/tqserve/kv, created 0700) or, where that cannot be used, RAM tiers with one warning and a metric."""
import os
import stat

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
