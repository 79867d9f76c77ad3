"""server.idle_timeout_s: a connection that sends nothing (no request, half a request, no TLS handshake) is
closed after the idle time, while a long generation on a quiet connection is not cut short."""
import socket
import tempfile
import time

import pytest

import requests_shim as http
from conftest import Daemon, scaled
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
    r = http.post(quick_idle.url + "/v1/completions", {"prompt": "Count:", "max_tokens": 400, "ignore_eos": True},
                  timeout=scaled(120))
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


def test_connections_over_the_cap_get_503_at_once():
    """server.max_connections: idle connections up to the cap hold their slots; the next one is answered 503 and
    closed without a thread; a slot freed is usable again; the refusals are logged once per 10 s, not each."""
    cap = 4
    d = Daemon(extra_args=["--max-connections", str(cap)])
    held = []
    try:
        # The readiness probe's own connection has closed; give the server time to count it gone (loaded CI).
        time.sleep(1.0)
        for _ in range(cap):
            held.append(socket.create_connection(("127.0.0.1", d.http_port), timeout=10))
        time.sleep(1.0)  # the accept thread has taken them
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", d.http_port), timeout=10) as s:
                t0 = time.time()
                reply = b""
                while chunk := s.recv(4096):
                    reply += chunk
                assert reply.startswith(b"HTTP/1.1 503"), reply[:100]
                assert b"server.max_connections" in reply
                assert time.time() - t0 < 2
        # The held connections still work: a request on one of them is served.
        held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert held[0].recv(4096).startswith(b"HTTP/1.1 200")
        # Free a slot: a new connection is served again.
        held.pop().close()
        deadline = time.time() + 5
        status = None
        while time.time() < deadline:
            try:
                status = http.get(d.url + "/health").status
            except OSError:
                status = None
            if status == 200:
                break
            time.sleep(0.1)
        assert status == 200
        assert d.logs().count("connection(s) refused") == 1, d.logs()
    finally:
        for s in held:
            s.close()
        assert d.stop() == 0, d.logs()


def test_a_trickling_request_is_cut_at_the_read_timeout():
    """server.read_timeout_s: a request sent a byte at a time, each within the idle time, is cut once it has taken
    longer than the read timeout; the idle timeout alone (60 s here) would never end it."""
    d = Daemon(extra_args=["--read-timeout", "1"])
    try:
        request = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        with socket.create_connection(("127.0.0.1", d.http_port), timeout=30) as s:
            t0 = time.time()
            closed_after = None
            for byte in request:
                try:
                    s.sendall(bytes([byte]))
                except OSError:  # reset by the server
                    closed_after = time.time() - t0
                    break
                time.sleep(0.1)
                s.setblocking(False)
                try:
                    data = s.recv(4096)
                    if data == b"":
                        closed_after = time.time() - t0
                        break
                except BlockingIOError:
                    pass
                except OSError:  # reset by the server
                    closed_after = time.time() - t0
                    break
                finally:
                    s.setblocking(True)
            assert closed_after is not None, "the server kept reading the trickle"
            assert 0.9 <= closed_after < 4, closed_after
        assert http.get(d.url + "/health").status == 200
    finally:
        assert d.stop() == 0, d.logs()


def test_grpc_calls_over_the_cap_and_large_messages_are_refused(grpc_pb):
    """The gRPC front end has HTTP's bounds: calls in flight (a thread each) at most server.max_connections, more get
    RESOURCE_EXHAUSTED at once and the rest still run; a message larger than limits.max_body_bytes is refused."""
    import threading

    import grpc
    m, g = grpc_pb
    d = Daemon(extra_args=["--max-connections", "2", "--max-body-bytes", "64KiB"])
    try:
        stub = g.InferenceStub(grpc.insecure_channel(f"127.0.0.1:{d.grpc_port}"))
        results, lock = [], threading.Lock()

        def call(i):
            req = m.GenerateRequest(prompt=f"Story {i}:", sampling=m.SamplingParams(max_tokens=64, ignore_eos=True))
            try:
                n = sum(1 for r in stub.Generate(req, timeout=120) if r.HasField("final"))
                outcome = "ok" if n == 1 else "no final"
            except grpc.RpcError as e:
                outcome = e.code()
            with lock:
                results.append(outcome)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results.count("ok") >= 1, results
        assert results.count(grpc.StatusCode.RESOURCE_EXHAUSTED) >= 1, results
        assert all(r in ("ok", grpc.StatusCode.RESOURCE_EXHAUSTED) for r in results), results
        # Served again once the calls are done.
        req = m.GenerateRequest(prompt="Again", sampling=m.SamplingParams(max_tokens=2))
        assert sum(1 for r in stub.Generate(req, timeout=60) if r.HasField("final")) == 1
        with pytest.raises(grpc.RpcError) as large:
            list(stub.Generate(m.GenerateRequest(prompt="x" * (80 << 10)), timeout=60))
        assert large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, large.value
        assert http.get(d.url + "/health").status == 200
    finally:
        assert d.stop() == 0, d.logs()
