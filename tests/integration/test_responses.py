"""POST /v1/responses through the official openai client (responses.create, streaming events, the stream helper),
with instructions and message items, text.format json_schema, function tools and their round trip, stored
responses (previous_response_id, GET and DELETE, count and TTL bounds, metrics), and the 400s."""
import json
import time

import jsonschema
import openai
import pytest

import requests_shim as http
from conftest import Daemon, metric_value, scaled

LONG_CONTEXT = " ".join(f"Fact {i}: the blue house on street {i} has {i % 7 + 2} windows." for i in range(30))
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}]


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


def test_create_with_instructions_and_items(client, model_id):
    r = client.responses.create(model=model_id, instructions="Answer in one word.", temperature=0,
                                max_output_tokens=16,
                                input=[{"role": "developer", "content": "Be polite."},
                                       {"role": "user", "content": [{"type": "input_text",
                                                                     "text": "What is the capital of France?"}]}])
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.status in ("completed", "incomplete")
    assert r.output_text
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 16
    assert r.instructions == "Answer in one word."


def test_string_input_and_incomplete(client, model_id):
    r = client.responses.create(model=model_id, input="Count from one to fifty.", max_output_tokens=4,
                                temperature=0)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 4


def test_streamed_events_in_order(client, model_id):
    events = list(client.responses.create(model=model_id, input="Say hello.", max_output_tokens=12,
                                          temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[1] == "response.in_progress"
    assert types[-1] in ("response.completed", "response.incomplete")
    assert "response.output_text.delta" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text
    order = [t for t in types if t.startswith("response.output_item") or t.startswith("response.content_part")]
    assert order == ["response.output_item.added", "response.content_part.added", "response.content_part.done",
                     "response.output_item.done"]


def test_stream_helper(client, model_id):
    # The helper wants response.completed: a short schema makes the output end on its own.
    with client.responses.stream(model=model_id, input="Is the sky blue?", max_output_tokens=40, temperature=0,
                                 text={"format": {"type": "json_schema", "name": "a", "strict": True,
                                                  "schema": {"type": "object", "properties": {"yes": {"type": "boolean"}},
                                                             "required": ["yes"], "additionalProperties": False}}}) as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert text == final.output_text


def test_json_schema_text_format(client, model_id):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.responses.create(model=model_id, input="A person as JSON.", temperature=0, max_output_tokens=100,
                                text={"format": {"type": "json_schema", "name": "person", "schema": schema,
                                                 "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)


def test_function_call_round_trip(client, model_id):
    first = client.responses.create(model=model_id, input="What is the weather in Oslo?", tools=TOOLS,
                                    tool_choice="required", parallel_tool_calls=False, temperature=0,
                                    max_output_tokens=100)
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    second = client.responses.create(model=model_id, previous_response_id=first.id, tools=TOOLS, tool_choice="none",
                                     temperature=0, max_output_tokens=20,
                                     input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                             "output": json.dumps({"temperature": -3})}])
    assert second.output_text
    assert second.previous_response_id == first.id


def test_streamed_function_call_events(client, model_id):
    events = list(client.responses.create(model=model_id, input="Weather in Paris?", tools=TOOLS,
                                          tool_choice={"type": "function", "name": "get_weather"},
                                          temperature=0, max_output_tokens=100, stream=True))
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types and "response.function_call_arguments.done" in types
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    jsonschema.validate(json.loads(args), WEATHER)
    final = events[-1].response
    assert [o.type for o in final.output] == ["function_call"]


def test_previous_response_reuses_the_kv_and_is_stored(client, model_id, daemon):
    first = client.responses.create(model=model_id, input=LONG_CONTEXT + " How many windows has house 3?",
                                    temperature=0, max_output_tokens=16)
    follow = client.responses.create(model=model_id, previous_response_id=first.id, input="And house 4?",
                                     temperature=0, max_output_tokens=8)
    assert follow.usage.input_tokens > first.usage.input_tokens
    # The previous turn's prompt (and output) pages come from the prefix cache.
    assert follow.usage.input_tokens_details.cached_tokens >= 256
    got = http.get(daemon.url + f"/v1/responses/{first.id}", timeout=10)
    assert got.status == 200 and got.json()["id"] == first.id
    assert http.request("DELETE", daemon.url + f"/v1/responses/{first.id}", timeout=10).json()["deleted"]
    assert http.get(daemon.url + f"/v1/responses/{first.id}", timeout=10).status == 404
    r = http.post(daemon.url + "/v1/responses", {"input": "x", "previous_response_id": first.id}, timeout=10)
    assert r.status == 404 and r.json()["error"]["param"] == "previous_response_id"


def test_store_false_is_not_kept(client, model_id, daemon):
    r = client.responses.create(model=model_id, input="hi", max_output_tokens=2, store=False)
    assert r.store is False
    assert http.get(daemon.url + f"/v1/responses/{r.id}", timeout=10).status == 404


def test_store_bounds_and_metrics():
    ttl = scaled(2)  # the three creations must fit in it, on a slow (sanitizer) daemon too
    d = Daemon(["--responses-max-count", "2", "--responses-ttl", str(ttl)])
    try:
        c = openai.OpenAI(base_url=d.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        model = c.models.list().data[0].id
        ids = [c.responses.create(model=model, input=f"hi {i}", max_output_tokens=2).id for i in range(3)]
        assert http.get(d.url + f"/v1/responses/{ids[0]}", timeout=10).status == 404  # evicted (count)
        assert http.get(d.url + f"/v1/responses/{ids[2]}", timeout=10).status == 200
        metrics = http.get(d.url + "/metrics").body.decode()
        assert metric_value(metrics, "tqserve_responses_stored") == 2
        assert metric_value(metrics, "tqserve_responses_evicted_total") >= 1
        assert metric_value(metrics, "tqserve_responses_stored_bytes") > 0
        time.sleep(ttl + 0.5)
        assert http.get(d.url + f"/v1/responses/{ids[2]}", timeout=10).status == 404  # expired (TTL)
    finally:
        d.stop()


@pytest.mark.parametrize("body,param,needle", [
    ({}, "input", "required"),
    ({"input": []}, "input", "non-empty"),
    ({"input": [{"type": "input_image"}]}, "input", "not supported"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input", "robot"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools", "function tools"),
    ({"input": "x", "tools": [{"type": "function", "name": "bad name"}]}, "tools", "function name"),
    ({"input": "x", "tools": [{"type": "function", "name": "f", "returns": {}}]}, "tools", "'returns'"),
    ({"input": "x", "tool_choice": {"type": "function", "name": "nope"}, "tools": TOOLS}, "tool_choice", "'nope'"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "schema": {"not": {}}}}}, "text",
     "'not'"),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, "text", "json_schema"),
    ({"input": "x", "reasoning": {"effort": "high"}}, "reasoning", "not supported"),
    ({"input": "x", "truncation": "auto"}, "truncation", "disabled"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "at least 1"),
    ({"input": "x", "temperature": 3}, "temperature", "[0"),
    ({"input": "x", "foo": 1}, "foo", "unknown field"),
    ({"input": "x", "metadata": {"k": 1}}, "metadata", "strings"),
])
def test_bad_input(daemon, body, param, needle):
    r = http.post(daemon.url + "/v1/responses", body, timeout=60)
    assert r.status == 400, r.body
    err = r.json()["error"]
    assert err["param"] == param and needle in err["message"], err
    assert http.post(daemon.url + "/v1/responses", {"input": "ok", "max_output_tokens": 2}, timeout=60).status == 200
