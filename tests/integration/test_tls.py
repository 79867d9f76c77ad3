"""TLS on both front ends (server.tls_cert_file, server.tls_key_file) with a self-signed certificate made here:
the openai client over HTTPS (httpx2, the HTTP library of the pinned openai package, verifying against the
certificate), grpcio over ssl_channel_credentials; plaintext is refused; bad TLS options stop start-up with exit 1
and a log line naming the option."""
import http.client as http_client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time

import grpc
import httpx2
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import requests_shim as http
from conftest import BIN, Daemon, metric_value


def make_cert(directory, name):
    """A self-signed P-256 certificate for localhost and 127.0.0.1: (cert path, key path)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = os.path.join(directory, f"{name}.crt"), os.path.join(directory, f"{name}.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="tq-tls-")
    yield d, make_cert(d, "server")
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_daemon(certs):
    _, (cert, key) = certs
    d = Daemon(extra_args=["--tls-cert-file", cert, "--tls-key-file", key], ca_file=cert)
    yield d
    assert d.stop() == 0, d.logs()


def test_openai_client_over_https(tls_daemon, certs):
    _, (cert, _) = certs
    assert tls_daemon.url.startswith("https://")
    with httpx2.Client(verify=ssl.create_default_context(cafile=cert), timeout=60) as h:
        client = openai.OpenAI(base_url=tls_daemon.url + "/v1", api_key="unused", max_retries=0, http_client=h)
        model = client.models.list().data[0].id
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hi"}],
                                           max_tokens=4, temperature=0)
        assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens <= 4
        stream = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4,
                                           temperature=0, stream=True)
        text = "".join(c.choices[0].text for c in stream if c.choices)
        assert "Paris" in text
    assert "(TLS; model id" in tls_daemon.logs()


def test_grpc_over_tls(tls_daemon, certs, grpc_pb):
    _, (cert, _) = certs
    m, g = grpc_pb
    with open(cert, "rb") as f:
        credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
    with grpc.secure_channel(f"127.0.0.1:{tls_daemon.grpc_port}", credentials,
                             options=[("grpc.ssl_target_name_override", "localhost")]) as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=20)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        responses = list(g.InferenceStub(ch).Generate(
            m.GenerateRequest(prompt="The capital of France is", sampling=m.SamplingParams(temperature=0, max_tokens=4)),
            timeout=60))
        assert "Paris" in "".join(r.chunk.text for r in responses if r.HasField("chunk"))
        assert responses[-1].final.usage.completion_tokens == 4


def test_plaintext_is_refused(tls_daemon, grpc_pb):
    with pytest.raises(OSError):
        http.get(f"http://127.0.0.1:{tls_daemon.http_port}/ready", timeout=10)
    m, g = grpc_pb
    with grpc.insecure_channel(f"127.0.0.1:{tls_daemon.grpc_port}") as ch:
        with pytest.raises(grpc.RpcError) as e:
            g.InferenceStub(ch).GetServerInfo(m.GetServerInfoRequest(), timeout=5)
        assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def run_serve(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQ_") or k == "TQ_MODEL_DIR"}
    return subprocess.run([str(BIN), "serve", "--http-port", "1", "--grpc-port", "0", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_bad_tls_options_stop_start_up(certs):
    d, (cert, key) = certs
    _, other_key = make_cert(d, "other")
    cases = [
        (["--tls-cert-file", cert], "server.tls_key_file"),
        (["--tls-key-file", key], "server.tls_cert_file"),
        (["--tls-cert-file", os.path.join(d, "absent.crt"), "--tls-key-file", key], "server.tls_cert_file"),
        (["--tls-cert-file", cert, "--tls-key-file", os.path.join(d, "server.crt.missing")], "server.tls_key_file"),
        (["--tls-cert-file", key, "--tls-key-file", key], "server.tls_cert_file"),
        (["--tls-cert-file", cert, "--tls-key-file", other_key], "server.tls_key_file"),
    ]
    for args, expected in cases:
        r = run_serve(*args)
        assert r.returncode == 1, (args, r.returncode, r.stdout, r.stderr)
        assert expected in r.stdout + r.stderr, (args, r.stdout, r.stderr)


def test_client_leaving_a_tls_stream_is_noticed(tls_daemon):
    """A streamed request whose TLS client goes away mid-stream is aborted (the running gauge returns to 0)."""
    def running():
        conn = http_client.HTTPSConnection("127.0.0.1", tls_daemon.http_port, context=tls_daemon.ssl_context)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        return metric_value(text, "tqserve_num_requests_running")

    conn = http_client.HTTPSConnection("127.0.0.1", tls_daemon.http_port, context=tls_daemon.ssl_context, timeout=60)
    body = json.dumps({"prompt": "Tell me a long story", "max_tokens": 1500, "stream": True, "ignore_eos": True})
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    resp.fp.readline()  # the first event: the sequence runs
    assert running() == 1
    conn.sock.shutdown(socket.SHUT_RDWR)
    resp.close()
    conn.close()
    deadline = time.time() + 20
    while time.time() < deadline and running() != 0:
        time.sleep(0.1)
    assert running() == 0
