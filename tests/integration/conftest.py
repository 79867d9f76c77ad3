"""Fixtures that start the real tqserve daemon on free ports with the default model."""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import requests_shim as http

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("TQ_TEST_BINARY_DIR", ROOT / "build")) / "tqserve"


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
    def __init__(self, extra_args=(), env=None):
        if not os.path.exists(default_model()):
            pytest.skip(f"{default_model()} is absent (run scripts/fetch-model.sh)")
        self.http_port, self.grpc_port = free_ports(2)
        self.log = tempfile.NamedTemporaryFile(prefix="tqserve-", suffix=".log", delete=False)
        clean_env = {k: v for k, v in os.environ.items() if not k.startswith("TQ_") or k == "TQ_MODEL_DIR"}
        clean_env.update(env or {})
        self.proc = subprocess.Popen(
            [str(BIN), "serve", "--host", "127.0.0.1", "--http-port", str(self.http_port), "--grpc-port",
             str(self.grpc_port), "--threads", "2", "--ctx-size", "2048", *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, env=clean_env)
        self.url = f"http://127.0.0.1:{self.http_port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tqserve exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if http.get(self.url + "/ready").status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("tqserve did not become ready:\n" + self.logs())

    def logs(self):
        with open(self.log.name) as f:
            return f.read()

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    rc = d.stop()
    assert rc == 0, d.logs()
