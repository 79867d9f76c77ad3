"""Batch invariance: a request's tokens and log-probabilities are bit for bit the same whether it runs alone or
beside others, and however its prompt is chunked. Models of the block-32 types have it with the default kernels;
K-quant models with engine.batch_invariant (--batch-invariant true), without which their decode-sized products
take direct tiles whose last bits differ from the panel's, and the int8 activations downstream turn that into
log-probabilities that move by up to ~0.2 nats (docs/serving.md, "Batch invariance")."""
import pathlib
import threading

import openai
import pytest

from conftest import Daemon, default_model

WIKI = pathlib.Path(__file__).resolve().parents[2] / "tests/data/wikitext-2-raw/wiki.test.raw"


MODELS = {
    # The block-32 types' direct tiles sum as the panel tiles do: invariant with the default kernels.
    "smollm2-default": ("SmolLM2-135M-Instruct.Q4_1.gguf", []),
    # Q4_K / Q6_K: the mode keeps decode-sized products on the panel tiles.
    "gemma3-batch-invariant": ("gemma-3-270m-q4_k_m.gguf", ["--batch-invariant", "true"]),
}


@pytest.fixture(scope="module", params=list(MODELS))
def daemon_under_test(request):
    name, args = MODELS[request.param]
    path = pathlib.Path(default_model()).parent / name
    if not path.exists():
        pytest.fail(f"{path} is absent (scripts/fetch-model.sh fetches it)")
    # No prefix cache: every run computes its prompt; a small step budget cuts the concurrent prompts into chunks
    # that differ from the lone runs'.
    d = Daemon(extra_args=["--model", str(path), *args, "--kv-prefix-cache-bytes", "0", "--max-batch-tokens", "96"])
    yield d
    assert d.stop() == 0, d.logs()


def test_alone_and_beside_others_are_bitwise_equal(daemon_under_test):
    client = openai.OpenAI(base_url=daemon_under_test.url + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    text = WIKI.read_text(encoding="utf-8")
    prompts = [text[i * 3000:i * 3000 + 900] for i in range(6)]

    def run(prompt):
        r = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0, logprobs=5,
                                      extra_body={"ignore_eos": True})
        lp = r.choices[0].logprobs
        return lp.tokens, lp.token_logprobs

    alone = [run(p) for p in prompts]
    together = [None] * len(prompts)

    def worker(i):
        together[i] = run(prompts[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (a, b) in enumerate(zip(alone, together)):
        assert b is not None, f"prompt {i} got no answer"
        assert a[0] == b[0], f"prompt {i}: tokens differ alone {a[0]} and together {b[0]}"
        assert a[1] == b[1], f"prompt {i}: log-probabilities differ alone {a[1]} and together {b[1]}"


def test_the_mode_is_refused_off_the_cpu():
    with pytest.raises(RuntimeError) as e:
        Daemon(extra_args=["--batch-invariant", "true", "--device", "cuda"])
    assert "batch-invariant" in str(e.value)
