"""LoRA adapters through the front ends: named at start-up (--lora), chosen per request ("model": "MODEL:NAME" with
the official openai client, `lora` on gRPC), listed by /v1/models, loaded and unloaded at run time by an admin
(/v1/admin/lora), kept apart in the prefix cache, and refused with a clear error when the file does not fit the
model, while the base model keeps serving. Adapters are seeded files from tests/golden/make_lora.py."""
import subprocess
import sys

import grpc
import openai
import pytest

import requests_shim as http
from conftest import BIN, ROOT, Daemon, default_model, free_ports

MAKE_LORA = ROOT / "tests" / "golden" / "make_lora.py"
PROMPT = "The capital of France is"
# Over two 128-token pages of prompt, so that whole pages can be cached.
LONG = " ".join(f"Item {i} is a small blue stone found near the river." for i in range(30))
ADMIN = "sk-admin-lora"
TENANT = "sk-tenant-lora"


def make_lora(path, *extra):
    subprocess.run([sys.executable, str(MAKE_LORA), default_model(), str(path), "--rank", "8", "--alpha", "16",
                    "--type", "f16", "--scale", "0.5", *extra], check=True, capture_output=True, timeout=120)
    return path


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora")
    return {
        "style": make_lora(d / "style.gguf", "--seed", "1"),
        "other": make_lora(d / "other.gguf", "--seed", "2", "--targets", "attn_v,ffn_down"),
        "wrong_arch": make_lora(d / "qwen.gguf", "--arch", "qwen2"),
        "truncated": make_lora(d / "cut.gguf", "--truncate", "5000"),
    }


@pytest.fixture(scope="module")
def daemon(adapters):
    d = Daemon(["--lora", f"style={adapters['style']}", "--api-keys", TENANT, "--admin-api-keys", ADMIN])
    yield d
    assert d.stop() == 0, d.logs()


def client(daemon, key=ADMIN):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key=key, max_retries=0, timeout=120)


def complete(daemon, model, prompt=PROMPT, key=ADMIN, max_tokens=8):
    return client(daemon, key).completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0)


def base_id(daemon):
    return client(daemon).models.list().data[0].id


def admin(daemon, method, path, body=None, key=ADMIN):
    return http.request(method.upper(), daemon.url + path, body, headers={"Authorization": f"Bearer {key}"})


def test_models_lists_the_adapter(daemon):
    models = client(daemon).models.list().data
    base = models[0].id
    ids = [m.id for m in models]
    assert ids == [base, f"{base}:style"]
    extra = models[1].model_extra
    assert extra["parent"] == base and extra["lora"]["name"] == "style" and extra["lora"]["rank"] == 8


def test_adapter_changes_the_output_and_is_echoed(daemon):
    base = base_id(daemon)
    plain = complete(daemon, base)
    styled = complete(daemon, f"{base}:style")
    assert styled.model == f"{base}:style" and plain.model == base
    assert styled.choices[0].text != plain.choices[0].text
    # The adapter's own name works too, and is deterministic.
    assert complete(daemon, "style").choices[0].text == styled.choices[0].text
    # Chat completions take it the same way.
    chat = client(daemon).chat.completions.create(model=f"{base}:style", max_tokens=4, temperature=0,
                                                  messages=[{"role": "user", "content": "Hi"}])
    assert chat.model == f"{base}:style"


def test_unknown_adapter_is_not_found(daemon):
    base = base_id(daemon)
    with pytest.raises(openai.NotFoundError) as e:
        complete(daemon, f"{base}:nope")
    assert "is not served here" in str(e.value) and f"{base}:style" in str(e.value)


def test_prefix_cache_is_kept_apart_per_adapter(daemon):
    base = base_id(daemon)

    def cached(model):
        r = client(daemon).completions.create(model=model, prompt=LONG, max_tokens=1, temperature=0)
        return r.usage.prompt_tokens_details.cached_tokens

    assert cached(base) == 0
    assert cached(base) >= 128
    assert cached(f"{base}:style") == 0  # the base's pages are not the adapter's
    assert cached(f"{base}:style") >= 128


def test_runtime_load_use_unload(daemon, adapters):
    base = base_id(daemon)
    r = admin(daemon, "post", "/v1/admin/lora", {"name": "other", "path": str(adapters["other"]), "scale": 0.5})
    assert r.status == 200, r.body
    assert r.json()["matrices"] == 2 * 30 and r.json()["rank"] == 8
    listed = admin(daemon, "get", "/v1/admin/lora").json()["data"]
    assert sorted(a["name"] for a in listed) == ["other", "style"]
    assert complete(daemon, f"{base}:other").choices[0].text != complete(daemon, base).choices[0].text
    dup = admin(daemon, "post", "/v1/admin/lora", {"name": "other", "path": str(adapters["other"])})
    assert dup.status == 409
    assert admin(daemon, "delete", "/v1/admin/lora/other").status == 200
    assert admin(daemon, "delete", "/v1/admin/lora/other").status == 404
    with pytest.raises(openai.NotFoundError):
        complete(daemon, f"{base}:other")


@pytest.mark.parametrize("which,message", [("wrong_arch", "adapts a 'qwen2' model"), ("truncated", "LoRA adapter")])
def test_bad_adapter_files_are_refused_and_the_base_keeps_serving(daemon, adapters, which, message):
    r = admin(daemon, "post", "/v1/admin/lora", {"name": "bad", "path": str(adapters[which])})
    assert r.status == 400, r.body
    assert message in r.json()["error"]["message"]
    missing = admin(daemon, "post", "/v1/admin/lora", {"name": "bad", "path": "/nonexistent/x.gguf"})
    assert missing.status in (400, 404)
    assert complete(daemon, base_id(daemon)).choices[0].text


def test_admin_routes_need_an_admin_key(daemon, adapters):
    r = admin(daemon, "post", "/v1/admin/lora", {"name": "t", "path": str(adapters["other"])}, key=TENANT)
    assert r.status == 403
    assert admin(daemon, "get", "/v1/admin/lora", key=TENANT).status == 403
    # A tenant may still use a loaded adapter.
    assert complete(daemon, f"{base_id(daemon)}:style", key=TENANT).choices[0].text


def test_grpc_takes_the_adapter(daemon, grpc_pb):
    m, g = grpc_pb
    stub = g.InferenceStub(grpc.insecure_channel(f"127.0.0.1:{daemon.grpc_port}"))
    meta = [("authorization", f"Bearer {ADMIN}")]

    def text(**kw):
        req = m.GenerateRequest(prompt=PROMPT, sampling=m.SamplingParams(temperature=0, max_tokens=8), **kw)
        return "".join(r.chunk.text for r in stub.Generate(req, timeout=60, metadata=meta) if r.HasField("chunk"))

    styled = text(lora="style")
    assert styled != text()
    assert text(model=f"{base_id(daemon)}:style") == styled
    with pytest.raises(grpc.RpcError) as e:
        text(lora="nope")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        text(model=base_id(daemon), lora="style")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bad_start_up_adapter_stops_the_daemon_with_the_reason(adapters):
    http_port, grpc_port = free_ports(2)
    r = subprocess.run([str(BIN), "serve", "--model", default_model(), "--http-port", str(http_port), "--grpc-port",
                        str(grpc_port), "--lora", f"bad={adapters['wrong_arch']}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "adapts a 'qwen2' model" in r.stderr + r.stdout
    r = subprocess.run([str(BIN), "serve", "--model", default_model(), "--lora", "no-equals-sign"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "expected name=path[:scale]" in r.stderr + r.stdout
