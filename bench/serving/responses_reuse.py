#!/usr/bin/env python3
"""What previous_response_id saves: time to first token of a follow-up turn that continues a stored response
(the previous turn's KV comes back from the prefix cache) against the same conversation sent whole with a cache
salt never used before (so nothing is cached and every token is computed), side by side on one daemon.

  python3 bench/serving/responses_reuse.py [--reps 5] [--context-words 600] [--threads 2] [--json FILE]

Each repetition: turn 1 sends a long document and a question (store: true); then, alternating in order, (a) the
follow-up question with previous_response_id, and (b) the same three messages (document, turn 1's answer, the
follow-up) as input items with a fresh cache_salt. Both are streamed; TTFT is request sent -> first text delta.
Every repetition uses a new document (a different seed), so turn 1 itself is never a cache hit. The table shows the
median of --reps with min-max, the cached input tokens each side reported, and the ratio of the medians.
Only the Python standard library is used.
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.expanduser("~/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf")
WORDS = ("river stone garden window light paper music winter bridge forest island engine signal picture coffee "
         "bread animal ocean planet theory market letter summer table train house street city water").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    """Streams one /v1/responses request: (ttft seconds, the final response object)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/responses", json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    ttft, final = None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        ev = json.loads(line[6:])
        if ev["type"] == "response.output_text.delta" and ttft is None:
            ttft = time.perf_counter() - t0
        if ev["type"] in ("response.completed", "response.incomplete", "response.failed"):
            final = ev["response"]
    conn.close()
    return ttft, final


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--bin", default=os.environ.get("TQSERVE_BIN", os.path.join(ROOT, "build", "tqserve")))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--context-words", type=int, default=600)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="tqserve-rr-", suffix=".log", delete=False)
    proc = subprocess.Popen([args.bin, "serve", "--model", args.model, "--host", "127.0.0.1", "--http-port",
                             str(port), "--grpc-port", "0", "--threads", str(args.threads), "--ctx-size", "4096",
                             "--kv-cold-dir", tempfile.mkdtemp(prefix="tq-rr-kv-")],
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
        reuse, fresh, cached_reuse, cached_fresh, input_tokens = [], [], [], [], []
        for rep in range(args.reps + 1):  # the first is a warm-up
            rng = random.Random(rep)
            doc = " ".join(rng.choice(WORDS) for _ in range(args.context_words))
            question = "Summarize the text above in one sentence."
            _, first = post(port, {"input": doc + "\n\n" + question, "max_output_tokens": 24, "temperature": 0})
            answer = "".join(p["text"] for o in first["output"] if o["type"] == "message" for p in o["content"])
            follow = "Which word appears most often?"
            runs = [("reuse", {"previous_response_id": first["id"], "input": follow}),
                    ("fresh", {"cache_salt": uuid.uuid4().hex,
                               "input": [{"role": "user", "content": doc + "\n\n" + question},
                                         {"role": "assistant", "content": answer},
                                         {"role": "user", "content": follow}]})]
            if rep % 2:
                runs.reverse()
            for name, body in runs:
                ttft, final = post(port, {**body, "max_output_tokens": 8, "temperature": 0})
                if rep == 0:
                    continue
                cached = final["usage"]["input_tokens_details"]["cached_tokens"]
                (reuse if name == "reuse" else fresh).append(ttft)
                (cached_reuse if name == "reuse" else cached_fresh).append(cached)
                if name == "reuse":
                    input_tokens.append(final["usage"]["input_tokens"])
        ratio = statistics.median(fresh) / statistics.median(reuse)
        fmt = lambda v: f"{statistics.median(v) * 1e3:7.1f} ms ({min(v) * 1e3:.1f}-{max(v) * 1e3:.1f})"
        print(f"follow-up turn, {statistics.median(input_tokens):.0f} input tokens, {args.threads} threads, "
              f"median of {args.reps} (min-max)")
        print(f"  previous_response_id : TTFT {fmt(reuse)}, cached input tokens {statistics.median(cached_reuse):.0f}")
        print(f"  whole conversation   : TTFT {fmt(fresh)}, cached input tokens {statistics.median(cached_fresh):.0f}")
        print(f"  TTFT saved: {ratio:.2f}x faster first token with previous_response_id")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"reuse_ttft_s": reuse, "fresh_ttft_s": fresh, "cached_reuse": cached_reuse,
                           "cached_fresh": cached_fresh, "input_tokens": input_tokens, "ratio": ratio}, f, indent=1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
