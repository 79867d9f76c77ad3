"""Function calling through the official openai client and gRPC against the real daemon (SmolLM2, ChatML with
Hermes-style <tool_call> blocks): tool_choice required / named / auto / none, parallel_tool_calls, streamed
delta.tool_calls, a two-turn round trip with a tool result, and the 400s for bad tools. Every call's arguments
are validated against the function's schema with the jsonschema package."""
import json

import grpc
import jsonschema
import openai
import pytest

import requests_shim as http

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 32}},
        "required": ["timezone"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The current weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "The local time in a timezone",
                                      "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


def check_calls(calls, names=("get_weather", "get_time")):
    assert calls
    for c in calls:
        assert c.type == "function"
        assert c.id.startswith("call_")
        assert c.function.name in names
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])
    assert len({c.id for c in calls}) == len(calls)


@pytest.mark.parametrize("temperature,seed", [(0, None), (1.0, 5)])
def test_required_calls_parse_and_validate(client, model_id, temperature, seed):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=300, temperature=temperature, top_p=0.9, seed=seed)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    check_calls(choice.message.tool_calls)


def test_named_choice_calls_that_function_once(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, max_tokens=200, temperature=0,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = r.choices[0].message.tool_calls
    assert len(calls) == 1
    check_calls(calls, names=("get_time",))
    assert r.choices[0].finish_reason == "tool_calls"


def test_parallel_false_gives_one_call(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=200, temperature=0)
    assert len(r.choices[0].message.tool_calls) == 1
    check_calls(r.choices[0].message.tool_calls)


def test_none_answers_in_text(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, tool_choice="none",
                                       max_tokens=20, temperature=0)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content


def call_bias(daemon):
    """logit_bias that makes the model start a <tool_call> block on its own (auto mode, a 135M model)."""
    ids = http.post(daemon.url + "/tokenize", {"content": "<tool_call>"}, timeout=10).json()["tokens"]
    return {str(t): 30 for t in ids}


def test_auto_call_started_by_the_model_is_constrained_and_parsed(client, model_id, daemon):
    r = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, tool_choice="auto",
                                       parallel_tool_calls=False, max_tokens=200, temperature=0,
                                       logit_bias=call_bias(daemon))
    assert r.choices[0].finish_reason == "tool_calls"
    assert len(r.choices[0].message.tool_calls) == 1
    check_calls(r.choices[0].message.tool_calls)


def test_auto_without_a_call_is_content(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Say hello."}],
                                       tools=TOOLS, max_tokens=16, temperature=0)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content


def stream_calls(stream):
    """Accumulates streamed delta.tool_calls as the OpenAI client's users do; returns (content, calls, finish)."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        for c in chunk.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    return content, [calls[k] for k in sorted(calls)], finish


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_streamed_tool_calls(client, model_id, daemon, choice):
    # auto: the bias keeps starting calls, so one call (parallel off) lets the output end.
    extra = {"logit_bias": call_bias(daemon), "parallel_tool_calls": False} if choice == "auto" else {}
    stream = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, tool_choice=choice,
                                            max_tokens=300, temperature=0, stream=True, **extra)
    content, calls, finish = stream_calls(stream)
    assert finish == "tool_calls"
    assert calls and not content.strip()
    for c in calls:
        assert c["id"].startswith("call_")
        jsonschema.validate(json.loads(c["arguments"]), SCHEMAS[c["name"]])


def test_stream_helper_of_the_client_assembles_the_calls(client, model_id):
    with client.chat.completions.stream(model=model_id, messages=ASK, tools=TOOLS, max_tokens=200, temperature=0,
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}}) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    check_calls(final.choices[0].message.tool_calls, names=("get_weather",))


def test_two_turn_round_trip(client, model_id):
    first = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, max_tokens=200,
                                           temperature=0, parallel_tool_calls=False,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    second = client.chat.completions.create(model=model_id, messages=history, tools=TOOLS, tool_choice="none",
                                            max_tokens=30, temperature=0)
    assert second.choices[0].message.content
    alone = client.chat.completions.create(model=model_id, messages=ASK, tools=TOOLS, tool_choice="none",
                                           max_tokens=1)
    assert second.usage.prompt_tokens > alone.usage.prompt_tokens + 20  # the call and its result are rendered
    # The history's call and result are in the prompt: a second call may follow the result.
    third = client.chat.completions.create(model=model_id, messages=history, tools=TOOLS, tool_choice="required",
                                           max_tokens=200, temperature=0)
    check_calls(third.choices[0].message.tool_calls)


def post(daemon, body):
    return http.post(daemon.url + "/v1/chat/completions", body, timeout=60)


def fn(name="f", parameters=None):
    f = {"name": name}
    if parameters is not None:
        f["parameters"] = parameters
    return {"type": "function", "function": f}


BAD = [
    ("tools", {"tools": [{"type": "function", "function": {"description": "no name"}}]}, "name"),
    ("tools", {"tools": [fn("bad name!")]}, "function name"),
    ("tools", {"tools": [fn("f"), fn("f")]}, "two tools"),
    ("tools", {"tools": [fn("f", {"type": "object", "not": {}})]}, "'not'"),
    ("tools", {"tools": [fn("f", [1])]}, "JSON schema"),
    ("tools", {"tools": [{"type": "retrieval"}]}, "function"),
    ("tools", {"tools": "get_weather"}, "list"),
    ("tool_choice", {"tools": [fn("f")], "tool_choice": {"type": "function", "function": {"name": "g"}}}, "'g'"),
    ("tool_choice", {"tools": [fn("f")], "tool_choice": "sometimes"}, "auto"),
    ("tool_choice", {"tool_choice": "required"}, "needs 'tools'"),
    ("parallel_tool_calls", {"tools": [fn("f")], "parallel_tool_calls": "yes"}, "boolean"),
    ("response_format", {"tools": [fn("f")], "response_format": {"type": "json_object"}}, "tool_choice is none"),
    ("messages", {"messages": [{"role": "tool", "content": "x"}]}, "tool_call_id"),
    ("messages", {"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "assistant"),
    ("messages", {"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]}, "name"),
]


@pytest.mark.parametrize("param,extra,needle", BAD, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(BAD)])
def test_bad_tools_are_400_with_param(daemon, param, extra, needle):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    r = post(daemon, body)
    assert r.status == 400, r.body
    err = r.json()["error"]
    assert err["param"] == param
    assert needle in err["message"], err["message"]
    assert post(daemon, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).status == 200


def test_completions_endpoint_refuses_tools(daemon):
    r = http.post(daemon.url + "/v1/completions", {"prompt": "hi", "max_tokens": 2, "tools": [fn("f")]}, timeout=60)
    assert r.status == 400 and r.json()["error"]["param"] == "tools"


# gRPC: the same function calling through tqserve.v1.Inference.Generate.

@pytest.fixture(scope="module")
def stub(daemon, grpc_pb):
    m, g = grpc_pb
    ch = grpc.insecure_channel(f"127.0.0.1:{daemon.grpc_port}")
    grpc.channel_ready_future(ch).result(timeout=20)
    yield m, g.InferenceStub(ch)
    ch.close()


def grpc_generate(m, s, messages, **kw):
    req = m.GenerateRequest(messages=m.ChatMessages(messages=messages),
                            sampling=m.SamplingParams(temperature=0, max_tokens=200), **kw)
    text, final = "", None
    for resp in s.Generate(req, timeout=120):
        if resp.HasField("chunk"):
            text += resp.chunk.text
        else:
            final = resp.final
    return text, final


def grpc_tools(m):
    return [m.Tool(name=t["function"]["name"], description=t["function"]["description"],
                   parameters=json.dumps(t["function"]["parameters"])) for t in TOOLS]


def test_grpc_required_and_round_trip(stub):
    m, s = stub
    ask = [m.ChatMessage(role="user", content=ASK[0]["content"])]
    text, final = grpc_generate(m, s, ask, tools=grpc_tools(m),
                                tool_choice=m.ToolChoice(mode=m.ToolChoice.MODE_NAMED, name="get_weather"))
    assert final.finish_reason == m.FINISH_REASON_TOOL_CALLS
    assert len(final.tool_calls) == 1 and not text.strip()
    call = final.tool_calls[0]
    assert call.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    history = ask + [m.ChatMessage(role="assistant", tool_calls=[call]),
                     m.ChatMessage(role="tool", tool_call_id=call.id, content='{"temperature": 21}')]
    text, final = grpc_generate(m, s, history, tools=grpc_tools(m),
                                tool_choice=m.ToolChoice(mode=m.ToolChoice.MODE_REQUIRED),
                                parallel_tool_calls=False)
    assert len(final.tool_calls) == 1
    jsonschema.validate(json.loads(final.tool_calls[0].arguments), SCHEMAS[final.tool_calls[0].name])


@pytest.mark.parametrize("kw,needle", [
    ({"tools": "bad"}, "function name"),
    ({"tools": "dup"}, "two tools"),
    ({"tool_choice": "missing"}, "'nope'"),
    ({"prompt": True}, "messages"),
])
def test_grpc_bad_tools(stub, kw, needle):
    m, s = stub
    args = {"tools": grpc_tools(m)}
    if kw.get("tools") == "bad":
        args["tools"] = [m.Tool(name="bad name")]
    if kw.get("tools") == "dup":
        args["tools"] = [m.Tool(name="f"), m.Tool(name="f")]
    if kw.get("tool_choice"):
        args["tool_choice"] = m.ToolChoice(mode=m.ToolChoice.MODE_NAMED, name="nope")
    if kw.get("prompt"):
        req = m.GenerateRequest(prompt="hi", sampling=m.SamplingParams(max_tokens=2), **args)
    else:
        req = m.GenerateRequest(messages=m.ChatMessages(messages=[m.ChatMessage(role="user", content="hi")]),
                                sampling=m.SamplingParams(max_tokens=2), **args)
    with pytest.raises(grpc.RpcError) as e:
        list(s.Generate(req, timeout=60))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in e.value.details(), e.value.details()
