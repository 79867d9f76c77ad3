"""Bodies of the right JSON shape with a field of an unexpected type (found by tests/fuzz/http_request_fuzz):
each gets a 400 naming the field, and the daemon keeps serving."""
import pytest

import requests_shim as http

CASES = [
    ("content part type not a string", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"type": 1, "text": "Hi"}]}]}, "messages"),
    ("content part without type", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}, "messages"),
    ("add_special not a boolean", "/tokenize", {"content": "Hi", "add_special": "yes"}, "add_special"),
]


@pytest.mark.parametrize("name,path,body,param", CASES, ids=[c[0] for c in CASES])
def test_wrong_type_is_a_400(daemon, name, path, body, param):
    r = http.post(daemon.url + path, body)
    assert r.status == 400, (name, r.status, r.body)
    assert r.json()["error"]["param"] == param
    assert http.get(daemon.url + "/health").status == 200
