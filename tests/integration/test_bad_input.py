"""Bad requests get a clear 4xx with an OpenAI-shaped error body, and the daemon keeps serving."""
import pytest

import requests_shim as http


def error_of(r):
    body = r.json()
    assert set(body["error"]) >= {"message", "type", "code"}, body
    return body["error"]


CASES = [
    ("malformed JSON", "/v1/completions", b'{"prompt": "x", ', 400, None),
    ("body not an object", "/v1/completions", b"[1, 2]", 400, None),
    ("prompt wrong type", "/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("missing prompt", "/v1/completions", {"max_tokens": 3}, 400, "prompt"),
    ("temperature wrong type", "/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    ("temperature out of range", "/v1/completions", {"prompt": "x", "temperature": 9}, 400, "temperature"),
    ("negative max_tokens", "/v1/completions", {"prompt": "x", "max_tokens": -5}, 400, "max_tokens"),
    ("zero max_tokens", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("top_p zero", "/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
    ("n too big", "/v1/completions", {"prompt": "x", "n": 1000}, 400, "n"),
    ("stop not strings", "/v1/completions", {"prompt": "x", "stop": [1]}, 400, "stop"),
    ("token id out of vocab", "/v1/completions", {"prompt": [1, 99999999]}, 400, "prompt"),
    ("unknown model", "/v1/completions", {"prompt": "x", "model": "gpt-17"}, 404, "model"),
    ("empty messages", "/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("bad role", "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages"),
    ("invalid UTF-8", "/v1/completions", b'{"prompt": "\xff\xfe bad"}', 400, None),
    ("unknown route", "/v1/audio/speech", {"input": "x"}, 404, None),
]


@pytest.mark.parametrize("what,path,body,status,param", CASES, ids=[c[0] for c in CASES])
def test_bad_request(daemon, what, path, body, status, param):
    r = http.post(daemon.url + path, body)
    assert r.status == status, (what, r.status, r.body)
    err = error_of(r)
    if param:
        assert err.get("param") == param, err


def test_too_long_prompt(daemon):
    r = http.post(daemon.url + "/v1/completions", {"prompt": "word " * 5000, "max_tokens": 1})
    assert r.status == 400
    assert "tokens" in error_of(r)["message"]


def test_huge_body_is_413(daemon):
    r = http.post(daemon.url + "/v1/completions", b'{"prompt": "' + b"a" * (5 << 20) + b'"}')
    assert r.status == 413
    error_of(r)


def test_wrong_method(daemon):
    assert http.get(daemon.url + "/v1/completions").status == 405


def test_still_serving_after_bad_input(daemon):
    r = http.post(daemon.url + "/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    assert r.status == 200, r.body
    assert r.json()["usage"]["completion_tokens"] == 2
