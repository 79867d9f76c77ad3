"""server.idle_timeout_s: a connection that sends nothing (no request, half a request, no TLS handshake) is
closed after the idle time, while a long generation on a quiet connection is not cut short."""
import socket
import tempfile
import time

import pytest

import requests_shim as http
from conftest import Daemon
from test_tls import make_cert

IDLE_S = 1.0


@pytest.fixture(scope="module")
def quick_idle():
    d = Daemon(extra_args=["--idle-timeout", str(IDLE_S)])
    yield d
    assert d.stop() == 0, d.logs()


def seconds_until_closed(port, send=b"", limit=30):
    """Opens a TCP connection, sends `send`, then waits for the server to close it: the seconds it took."""
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as s:
        if send:
            s.sendall(send)
        t0 = time.time()
        while s.recv(4096):  # a response (e.g. an error) may come first; then the end of the stream
            pass
        return time.time() - t0


def test_silent_connection_is_closed(quick_idle):
    assert seconds_until_closed(quick_idle.http_port) < IDLE_S + 3


def test_half_sent_request_is_closed(quick_idle):
    assert seconds_until_closed(quick_idle.http_port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n") < IDLE_S + 3


def test_long_generation_outlives_the_idle_time(quick_idle):
    t0 = time.time()
    r = http.post(quick_idle.url + "/v1/completions", {"prompt": "Count:", "max_tokens": 400, "ignore_eos": True})
    assert r.status == 200, r.body
    assert r.json()["choices"][0]["finish_reason"] == "length"
    assert time.time() - t0 > IDLE_S, "too fast to show anything: raise max_tokens"


def test_missing_tls_handshake_is_closed():
    d = tempfile.mkdtemp(prefix="tq-idle-tls-")
    cert, key = make_cert(d, "server")
    daemon = Daemon(extra_args=["--idle-timeout", str(IDLE_S), "--tls-cert-file", cert, "--tls-key-file", key],
                    ca_file=cert)
    try:
        assert seconds_until_closed(daemon.http_port) < IDLE_S + 3
    finally:
        assert daemon.stop() == 0, daemon.logs()
