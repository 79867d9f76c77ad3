#!/usr/bin/env python3
"""What structured output costs: decode speed with a json_schema constraint against the same requests without
one, side by side on one daemon, at batch 1 and batch 8; and the time a new schema adds to the first token.

  python3 bench/serving/structured_output.py [--reps 5] [--max-tokens 128] [--threads 2] [--json FILE]

Both sides send the same chat prompt and generate exactly --max-tokens tokens: the unconstrained side with
ignore_eos, the constrained side under a schema whose shortest valid output is longer than that (an array of at
least 1000 short strings), so neither stops early. Per run, B requests start together (batch B) and the
statistic is the output rate over the run's decode phase: all tokens after each request's first, divided by
the time from the last first token to the last token. Runs alternate plain / constrained; the table shows the
median of --reps runs with min-max, and the ratio of the medians (target: >= 0.90).

The first-token cost of a schema: TTFT of a request with a schema never seen before (a fresh property name
each time, so the compiler's cache cannot answer) minus TTFT of a request with a schema already compiled, the
median over --reps pairs. Only the Python standard library is used.
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.expanduser("~/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = [{"role": "user", "content": "List the fruits and vegetables you know, as JSON."}]


def long_schema(name="items"):
    return {"type": "object", "properties": {name: {"type": "array", "items": {"type": "string", "maxLength": 12},
                                                    "minItems": 1000}},
            "required": [name], "additionalProperties": False}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_chat(port, body):
    """Streams one chat request; returns (t_sent, [arrival time of each content chunk], completion tokens)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    arrivals, tokens = [], 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        for c in chunk.get("choices", []):
            if c.get("delta", {}).get("content"):
                arrivals.append(time.perf_counter())
    conn.close()
    return t0, arrivals, tokens


def body_for(args, constrained, schema=None):
    b = {"messages": PROMPT, "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
         "stream_options": {"include_usage": True}}
    if constrained:
        b["response_format"] = {"type": "json_schema",
                                "json_schema": {"name": "list", "schema": schema or long_schema(), "strict": True}}
    else:
        b["ignore_eos"] = True
    return b


def run_batch(port, body, batch, max_tokens):
    """Output tokens/s of the decode phase of `batch` requests sent together."""
    results = [None] * batch

    def one(i):
        results[i] = stream_chat(port, body)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(batch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _, arrivals, tokens in results:
        if tokens != max_tokens:
            raise RuntimeError(f"a request generated {tokens} tokens, not {max_tokens}")
    start = max(a[0] for _, a, _ in results)
    end = max(a[-1] for _, a, _ in results)
    return sum(tokens - 1 for _, _, tokens in results) / (end - start)


def ttft(port, body):
    t0, arrivals, _ = stream_chat(port, body)
    return arrivals[0] - t0


def spread(values):
    return f"{statistics.median(values):8.1f} ({min(values):.1f}-{max(values):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--bin", default=os.environ.get("TQSERVE_BIN", os.path.join(ROOT, "build", "tqserve")))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="tqserve-so-", suffix=".log", delete=False)
    proc = subprocess.Popen([args.bin, "serve", "--model", args.model, "--host", "127.0.0.1", "--http-port",
                             str(port), "--grpc-port", "0", "--threads", str(args.threads), "--ctx-size", "2048",
                             "--kv-cold-dir", tempfile.mkdtemp(prefix="tq-so-kv-")],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                sys.exit(f"tqserve did not become ready; log: {log.name}")
            time.sleep(0.2)

        # Warm-up: the schema compiled once, weights paged in.
        run_batch(port, body_for(args, True), 1, args.max_tokens)
        run_batch(port, body_for(args, False), 1, args.max_tokens)
        out = {"max_tokens": args.max_tokens, "threads": args.threads, "reps": args.reps, "batches": {}}
        print(f"decode output tokens/s, {args.max_tokens} tokens per request, {args.threads} threads, "
              f"median of {args.reps} runs (min-max)")
        print(f"{'batch':>5} | {'plain':>22} | {'json_schema':>22} | ratio")
        for batch in [int(b) for b in args.batches.split(",")]:
            plain, constrained = [], []
            for _ in range(args.reps):
                plain.append(run_batch(port, body_for(args, False), batch, args.max_tokens))
                constrained.append(run_batch(port, body_for(args, True), batch, args.max_tokens))
            ratio = statistics.median(constrained) / statistics.median(plain)
            print(f"{batch:>5} | {spread(plain):>22} | {spread(constrained):>22} | {ratio:.3f}")
            out["batches"][batch] = {"plain": plain, "json_schema": constrained, "ratio": ratio}

        cached, fresh = [], []
        for _ in range(args.reps):
            cached.append(ttft(port, body_for(args, True)))
            fresh.append(ttft(port, body_for(args, True, long_schema("k" + uuid.uuid4().hex[:8]))))
        cost = statistics.median(f - c for f, c in zip(fresh, cached))
        print(f"first token: cached schema {statistics.median(cached) * 1e3:.1f} ms, new schema "
              f"{statistics.median(fresh) * 1e3:.1f} ms: compiling a new schema adds {cost * 1e3:.1f} ms "
              f"(median of {args.reps} pairs)")
        out["ttft_cached_s"], out["ttft_new_schema_s"], out["compile_cost_s"] = cached, fresh, cost
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
