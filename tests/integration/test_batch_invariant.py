"""Batch invariance: a request's tokens and log-probabilities are bit for bit the same whether it runs alone or
beside others, and however its prompt is chunked (docs/serving.md, "Batch invariance"). Decode-sized products take
direct tiles and larger ones panel tiles; where their last bits differed, the int8 activations downstream turned
that into log-probabilities that moved by up to ~0.2 nats. Both weight families are checked: SmolLM2's block-32
Q4_1 and Gemma 3's K-quants (Q4_K, Q6_K)."""
import pathlib
import threading

import openai
import pytest

from conftest import Daemon, default_model

WIKI = pathlib.Path(__file__).resolve().parents[2] / "tests/data/wikitext-2-raw/wiki.test.raw"


MODELS = {
    "smollm2-q4_1": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-q4_k_m": "gemma-3-270m-q4_k_m.gguf",
}


@pytest.fixture(scope="module", params=list(MODELS))
def daemon_under_test(request):
    path = pathlib.Path(default_model()).parent / MODELS[request.param]
    if not path.exists():
        pytest.fail(f"{path} is absent (scripts/fetch-model.sh fetches it)")
    # No prefix cache: every run computes its prompt; a small step budget cuts the concurrent prompts into chunks
    # that differ from the lone runs'.
    d = Daemon(extra_args=["--model", str(path), "--kv-prefix-cache-bytes", "0", "--max-batch-tokens", "96"])
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

