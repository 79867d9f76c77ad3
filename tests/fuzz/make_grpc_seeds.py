"""Writes the seed inputs of grpc_request_fuzz into tests/fuzz/corpus/grpc_request_fuzz/: a caller byte (bit 0 set
= an admin key) and a serialized tqserve.v1.GenerateRequest. Run with the test venv's python (grpcio-tools):
    ~/.cache/tqserve/venv/bin/python tests/fuzz/make_grpc_seeds.py"""
import pathlib
import sys
import tempfile

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parents[2]
out = tempfile.mkdtemp(prefix="tq-seeds-")
assert protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={out}",
                    str(ROOT / "proto/tqserve/v1/inference.proto")]) == 0
sys.path.insert(0, out)
from tqserve.v1 import inference_pb2 as m  # noqa: E402

S = m.SamplingParams
seeds = {
    "prompt": (0, m.GenerateRequest(request_id="r-1", prompt="Once upon a time",
                                    sampling=S(max_tokens=8, temperature=0.7, top_p=0.9, stop=["."], seed=3))),
    "prompt-tokens": (0, m.GenerateRequest(prompt_tokens=m.TokenIds(ids=[1, 2, 3, 400]),
                                           sampling=S(stop_token_ids=[2], logprobs=True, top_logprobs=3))),
    "chat-tools": (0, m.GenerateRequest(
        messages=m.ChatMessages(messages=[
            m.ChatMessage(role="user", content="Weather?"),
            m.ChatMessage(role="assistant", tool_calls=[m.ToolCall(id="c1", name="f", arguments='{"x":1}')]),
            m.ChatMessage(role="tool", tool_call_id="c1", content="sunny")]),
        tools=[m.Tool(name="f", description="d",
                      parameters='{"type":"object","properties":{"x":{"type":"integer"}}}')],
        tool_choice=m.ToolChoice(mode=m.ToolChoice.MODE_REQUIRED), parallel_tool_calls=False, cache_salt="s")),
    "schema": (0, m.GenerateRequest(prompt="JSON:", sampling=S(
        logit_bias={5: -100.0},
        response_format=m.ResponseFormat(type=m.ResponseFormat.TYPE_JSON_SCHEMA, strict=True,
                                         source='{"type":"object","properties":{"a":{"enum":[1,"x"]}}}')))),
    "regex-admin-priority": (1, m.GenerateRequest(prompt="Hi", priority=5, sampling=S(
        response_format=m.ResponseFormat(type=m.ResponseFormat.TYPE_REGEX, source="[a-z]{1,4}")))),
}
dest = ROOT / "tests/fuzz/corpus/grpc_request_fuzz"
dest.mkdir(parents=True, exist_ok=True)
for name, (caller, req) in seeds.items():
    (dest / name).write_bytes(bytes([caller]) + req.SerializeToString())
print(f"wrote {len(seeds)} seeds to {dest}")
