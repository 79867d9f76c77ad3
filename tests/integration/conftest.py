"""Fixtures that start the real tqserve daemon on free ports with the default model."""
import http.client as http_client
import os
import pathlib
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import pytest
import requests_shim as http

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("TQ_TEST_BINARY_DIR", ROOT / "build")) / "tqserve"
# How much slower than a release build the daemon under test may be (scripts/sanitize.sh sets it for ASan and
# TSan builds): waits that only bound how long something takes are multiplied by it (scaled()); what a test
# asserts stays the same.
TIME_SCALE = max(1.0, float(os.environ.get("TQ_TEST_TIME_SCALE", "1")))


def scaled(seconds):
    """A wait of `seconds` on a release build, stretched for a slower (sanitizer) build of the daemon."""
    return seconds * TIME_SCALE


def default_model():
    base = os.environ.get("TQ_MODEL_DIR", os.path.expanduser("~/.cache/tqserve/models"))
    return os.path.join(base, "SmolLM2-135M-Instruct.Q4_1.gguf")


def free_ports(n):
    """n distinct free ports (all sockets are held open until every port is chosen)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Daemon:
    def __init__(self, extra_args=(), env=None, ca_file=None, wrap=()):
        """ca_file: the daemon serves TLS (its --tls-* flags are in extra_args); probe it trusting this CA.
        wrap: a command the daemon's command line is appended to (it must exec it, so signals reach the daemon)."""
        if not os.path.exists(default_model()):
            pytest.skip(f"{default_model()} is absent (run scripts/fetch-model.sh)")
        # The cold tier's default directory is ~/.cache/tqserve/kv: each daemon gets one of its own instead, unless
        # the test names one or sets HOME (tests of the default itself).
        self.kv_dir = None
        if "--kv-cold-dir" not in extra_args and "HOME" not in (env or {}):
            self.kv_dir = tempfile.mkdtemp(prefix="tq-kv-")
            extra_args = [*extra_args, "--kv-cold-dir", self.kv_dir]
        self.http_port, self.grpc_port = free_ports(2)
        self.log = tempfile.NamedTemporaryFile(prefix="tqserve-", suffix=".log", delete=False)
        clean_env = {k: v for k, v in os.environ.items() if not k.startswith("TQ_") or k == "TQ_MODEL_DIR"}
        clean_env.update(env or {})
        self.proc = subprocess.Popen(
            [*wrap, str(BIN), "serve", "--host", "127.0.0.1", "--http-port", str(self.http_port), "--grpc-port",
             str(self.grpc_port), "--threads", "2", "--ctx-size", "2048", *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, env=clean_env)
        scheme = "https" if ca_file else "http"
        self.ssl_context = ssl.create_default_context(cafile=ca_file) if ca_file else None

        def ready():
            if self.ssl_context is None:
                return http.get(self.url + "/ready", timeout=5).status == 200
            conn = http_client.HTTPSConnection("127.0.0.1", self.http_port, context=self.ssl_context, timeout=5)
            try:
                conn.request("GET", "/ready")
                return conn.getresponse().status == 200
            finally:
                conn.close()

        self.url = f"{scheme}://127.0.0.1:{self.http_port}"
        deadline = time.time() + scaled(60)
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tqserve exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.proc.kill()  # a daemon that never became ready must not outlive the test
        self.proc.wait()
        raise RuntimeError("tqserve did not become ready:\n" + self.logs())

    def logs(self):
        with open(self.log.name) as f:
            return f.read()

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(scaled(timeout))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.kv_dir:
            shutil.rmtree(self.kv_dir, ignore_errors=True)
        return self.proc.returncode


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    rc = d.stop()
    assert rc == 0, d.logs()


@pytest.fixture(scope="session")
def grpc_pb():
    """The tqserve.v1 messages and stubs, generated from proto/ with grpcio-tools: (inference_pb2, _pb2_grpc)."""
    import importlib

    from grpc_tools import protoc
    out = tempfile.mkdtemp(prefix="tq-grpc-")
    rc = protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={out}", f"--grpc_python_out={out}",
                      str(ROOT / "proto/tqserve/v1/inference.proto")])
    assert rc == 0
    sys.path.insert(0, out)
    return (importlib.import_module("tqserve.v1.inference_pb2"),
            importlib.import_module("tqserve.v1.inference_pb2_grpc"))


def metric_value(text, name, labels=None):
    """The value of the first sample of `name` in Prometheus text whose labels include `labels`; None if absent."""
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        sample, _, label_text = head.partition("{")
        if sample != name:
            continue
        if all(f'{k}="{v}"' in label_text for k, v in (labels or {}).items()):
            return float(value)
    return None


# ctest's SKIP_RETURN_CODE (TQ_SKIP_EXIT_CODE in cmake/tq_helpers.cmake): when every test that ran passed and some
# skipped, the session exits 77 so that ctest shows server_test as Skipped; `-rs` prints each reason, which
# scripts/test-skips.py lists (and fails on in CI).
SKIP_EXIT_CODE = 77


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if exitstatus == 0 and reporter is not None and reporter.stats.get("skipped"):
        session.exitstatus = SKIP_EXIT_CODE
