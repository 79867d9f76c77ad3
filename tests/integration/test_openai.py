"""The OpenAI-compatible HTTP API through the official openai Python client, against the real daemon."""
import openai
import pytest

import requests_shim as http


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model_id(client):
    models = client.models.list().data
    assert len(models) == 1
    return models[0].id


def test_completion_greedy(client, model_id):
    r = client.completions.create(model=model_id, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert r.object == "text_completion"
    assert len(r.choices) == 1
    assert "Paris" in r.choices[0].text
    assert r.usage.prompt_tokens == 5
    assert r.usage.completion_tokens == 8
    assert r.usage.total_tokens == 13
    assert r.choices[0].finish_reason == "length"


def test_chat_non_streaming(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "What is 2+2?"}],
                                       max_tokens=24, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert "4" in r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 24


def test_chat_streaming_with_usage(client, model_id):
    stream = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Say hello"}],
                                            max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    text, finish, usage, roles = "", None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert roles == ["assistant"]
    assert text
    assert finish in ("stop", "length")
    assert usage is not None and 0 < usage.completion_tokens <= 12


def test_streamed_text_equals_non_streamed(client, model_id):
    args = dict(model=model_id, prompt="Once upon a time", max_tokens=20, temperature=0)
    whole = client.completions.create(**args).choices[0].text
    parts = "".join(c.choices[0].text for c in client.completions.create(stream=True, **args) if c.choices)
    assert parts == whole


def test_n_choices_and_seed(client, model_id):
    args = dict(model=model_id, prompt="My favourite colour is", max_tokens=10, temperature=1.0)
    a = client.completions.create(n=3, seed=7, **args)
    assert sorted(c.index for c in a.choices) == [0, 1, 2]
    assert 3 <= a.usage.completion_tokens <= 30
    # A seed makes one request reproducible (batch composition can change float rounding, so this compares
    # requests that run alone).
    b = client.completions.create(seed=1234, **args).choices[0].text
    c = client.completions.create(seed=1234, **args).choices[0].text
    assert b == c


def test_stop_string(client, model_id):
    r = client.completions.create(model=model_id, prompt="1, 2, 3, 4,", max_tokens=30, temperature=0, stop=[" 7"])
    assert r.choices[0].finish_reason == "stop"
    assert " 7" not in r.choices[0].text
    assert "6" in r.choices[0].text


def test_logprobs(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) >= 1
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-4


def test_completion_logprobs_up_to_20(client, model_id):
    # The completions endpoint takes logprobs up to 20 (OpenAI's stops at 5; vLLM's at 20): the top entries come
    # sorted, the chosen token's log-probability among them; 21 is a 400 naming the field.
    r = client.completions.create(model=model_id, prompt="The capital of France is", max_tokens=3, temperature=0,
                                  logprobs=20)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 3
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        values = list(top.values())
        assert len(values) == 20
        assert values == sorted(values, reverse=True)
        assert abs(values[0] - logprob) < 1e-4
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model_id, prompt="x", max_tokens=1, logprobs=21)
    assert "logprobs" in str(e.value)


def test_tokenize_detokenize(daemon):
    ids = http.post(daemon.url + "/tokenize", {"content": "Hello world", "add_special": False}).json()["tokens"]
    assert len(ids) >= 2
    text = http.post(daemon.url + "/detokenize", {"tokens": ids}).json()["content"]
    assert text == "Hello world"
