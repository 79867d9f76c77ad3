#!/usr/bin/env python3
"""Decode speed with LoRA adapters: the base model alone, every request on one adapter, requests spread over four.

  python3 bench/serving/lora_decode.py [--model M.gguf] [--clients 4] [--max-tokens 128] [--rounds 5]
                                       [--rank 16] [--targets attn_q,attn_k,...] [--servers tqserve,llama-server]
                                       [--json FILE]

One tqserve daemon (build/tqserve serve, --threads 2) is started with four seeded adapters written by
tests/golden/make_lora.py (F16, rank --rank, on every attention and FFN matrix: the usual fine-tuning targets).
Each round runs three cases back to back, so that the machine's drift hits them alike:
  base  every client's requests name the base model,
  one   every request names adapter a0,
  four  client k's requests name adapter a(k mod 4): one batch carries four adapters at once.
llama-server (scripts/build-llama-server.sh builds it) gets the same four files (--lora ... --lora-init-without-apply,
--parallel --clients, the same threads) and the same cases through its per-request field
"lora": [{"id": k, "scale": 1}] (the adapters not named get scale 0); its base case runs on a second llama-server
with no adapters loaded (its best configuration for the base: see server_for). Both run in every round.
A case is --clients closed-loop clients (load.py's streaming client), each sending --requests-per-client
greedy requests of --max-tokens tokens (ignore_eos) on a short prompt (numbered, so that no server reuses another
request's prompt KV); its figure is generated tokens/s: the tokens after each request's first, summed, over the
case's wall time (which includes each prompt's prefill). The table gives the median of the rounds with the
lowest and highest, and the ratios one/base and four/base taken within each round (median and range).

What it shows: the adapters' cost per decode step. The product W x + s B (A x) adds 2 r (rows + cols) multiply-adds
per adapted matrix and token, and a batch that mixes adapters computes each row's delta with its own A and B.
"""
import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from load import DEFAULT_MODEL, Server, free_port, stream_chat  # noqa: E402

MODEL_ID = "bench-model"
ADAPTERS = 4
PROMPT = ("Write a long story about a lighthouse keeper who finds a message in a bottle, the storm that follows, "
          "and the ship that comes to the island at dawn.")


def make_adapters(args, out_dir):
    paths = []
    for k in range(ADAPTERS):
        path = os.path.join(out_dir, "a%d.gguf" % k)
        subprocess.run([sys.executable, os.path.join(ROOT, "tests/golden/make_lora.py"), args.model, path,
                        "--rank", str(args.rank), "--seed", str(k + 1), "--type", "f16", "--targets", args.targets,
                        "--scale", "0.5"], check=True, stdout=subprocess.DEVNULL)
        paths.append(path)
    return paths


def start_server(args, adapters, log_dir):
    port = free_port()
    lora = ",".join("a%d=%s" % (k, p) for k, p in enumerate(adapters))
    cmd = [args.tqserve_bin, "serve", "--model", args.model, "--http-port", str(port), "--grpc-port", "0",
           "--host", "127.0.0.1", "--threads", str(args.threads), "--ctx-size", "2048",
           "--max-running", str(max(args.clients, 8)), "--model-id", MODEL_ID, "--log-level", "warn",
           "--lora", lora] + args.tqserve_arg
    srv = Server("tqserve", cmd, port, "/ready", os.path.join(log_dir, "tqserve.log"), MODEL_ID)
    srv.start()
    return srv


def start_llama(args, adapters, log_dir):
    """llama-server with the adapters loaded at scale 0 (or none: its base case, see below)."""
    port = free_port()
    cmd = [args.llama_server_bin, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
           "-t", str(args.threads), "-tb", str(args.threads), "-c", str(2048 * args.clients),
           "-np", str(args.clients), "-cb", "-ngl", "0", "--alias", MODEL_ID, "--no-webui"]
    if adapters:
        cmd += ["--lora", ",".join(adapters), "--lora-init-without-apply"]
    name = "llama-server" if adapters else "llama-server-base"
    srv = Server(name, cmd, port, "/health", os.path.join(log_dir, name + ".log"), MODEL_ID)
    srv.start()
    return srv


def adapter_of(case, client):
    """The adapter index a client's requests use in a case, None for the base model."""
    if case == "base":
        return None
    return 0 if case == "one" else client % ADAPTERS


def request_for(srv, case, client):
    """(model, extra body fields): tqserve names the adapter in model, llama-server in its lora field."""
    k = adapter_of(case, client)
    if srv.name == "tqserve":
        return (MODEL_ID if k is None else MODEL_ID + ":a%d" % k), None
    return MODEL_ID, (None if k is None else {"lora": [{"id": k, "scale": 1.0}]})


def server_for(running, name, case):
    """llama-server's base case runs on a second llama-server without adapters: with adapters loaded at scale 0 it
    decoded the base model slower than with one adapter applied (SmolLM2: 78 against 95 tok/s), so the loaded
    server is not its best configuration for the base."""
    if name == "llama-server" and case == "base":
        return running["llama-server-base"]
    return running[name]


_serial = itertools.count()


async def run_case(srv, case, args):
    results = []

    async def client(k):
        model, extra = request_for(srv, case, k)
        for _ in range(args.requests_per_client):
            # Every prompt starts with its own number: no server reuses an earlier request's prompt KV (llama-server
            # keeps each slot's last prompt and would skip the prefill of a repeated one; our prefix cache works
            # in whole pages), so both prefill every prompt.
            messages = [{"role": "user", "content": "Request %d. %s" % (next(_serial), PROMPT)}]
            results.append(await stream_chat(srv.port, model, messages, args.max_tokens, extra=extra))

    t0 = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(args.clients)))
    wall = time.perf_counter() - t0
    # A shape file's random weights may pick tokens that print nothing (padding of its vocabulary): counted by the
    # usage chunk, they are decoded tokens all the same.
    bad = [r.error for r in results
           if not r.ok and not (r.error == "no content tokens" and r.tokens >= args.max_tokens)]
    if bad:
        raise RuntimeError("%s: %d of %d requests failed, first: %s" % (case, len(bad), len(results), bad[0]))
    decoded = sum(r.tokens - 1 for r in results)
    return decoded / wall


def spread(values):
    return "%.1f [%.1f-%.1f]" % (statistics.median(values), min(values), max(values))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--targets", default="attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down")
    p.add_argument("--tqserve-bin", default=os.environ.get("TQSERVE_BIN", os.path.join(ROOT, "build/tqserve")))
    p.add_argument("--tqserve-arg", action="append", default=[], help="extra tqserve serve argument (repeatable)")
    p.add_argument("--servers", default="tqserve", help="tqserve, llama-server or both (comma-separated)")
    p.add_argument("--llama-server-bin", default=os.environ.get("TQSERVE_LLAMA_SERVER", ""),
                   help="default: the path scripts/build-llama-server.sh prints (it builds it once)")
    p.add_argument("--json", default="", help="write the results here")
    args = p.parse_args()
    for path, what in ((args.model, "model"), (args.tqserve_bin, "tqserve binary")):
        if not os.path.exists(path):
            print("lora_decode: the %s %s is absent" % (what, path), file=sys.stderr)
            return 1

    servers = [x for x in args.servers.split(",") if x]
    if "llama-server" in servers and not args.llama_server_bin:
        args.llama_server_bin = subprocess.run(["bash", os.path.join(ROOT, "scripts/build-llama-server.sh")],
                                               check=True, capture_output=True, text=True).stdout.strip()
    cases = ("base", "one", "four")
    speeds = {(n, c): [] for n in servers for c in cases}
    with tempfile.TemporaryDirectory(prefix="tq-lora-bench-") as tmp:
        adapters = make_adapters(args, tmp)
        running = {}
        try:
            for n in servers:
                running[n] = (start_server if n == "tqserve" else start_llama)(args, adapters, tmp)
                if n == "llama-server":
                    running[n + "-base"] = start_llama(args, [], tmp)
                for c in cases:  # warm-up: every adapter touched once
                    asyncio.run(run_case(server_for(running, n, c), c, args))
            for rnd in range(args.rounds):
                for n in servers:
                    for c in cases:
                        speeds[(n, c)].append(asyncio.run(run_case(server_for(running, n, c), c, args)))
                    print("round %d %s: %s" % (rnd + 1, n, "  ".join(
                        "%s %.1f" % (c, speeds[(n, c)][-1]) for c in cases)), flush=True)
        except Exception:
            for n in running:
                print(open(os.path.join(tmp, n + ".log")).read()[-3000:], file=sys.stderr)
            raise
        finally:
            for srv in running.values():
                srv.stop()

    print()
    print("model %s, %d threads, %d clients x %d requests x %d tokens, %d adapters (F16, rank %d) on %s, %d rounds"
          % (os.path.basename(args.model), args.threads, args.clients, args.requests_per_client, args.max_tokens,
             ADAPTERS, args.rank, args.targets, args.rounds))
    print("| server | case | generated tok/s, median [min-max] | / its base, median [min-max] |")
    print("|---|---|---|---|")
    ratios = {}
    for n in servers:
        for c in cases:
            r = [s / b for s, b in zip(speeds[(n, c)], speeds[(n, "base")])]
            ratios["%s/%s" % (n, c)] = r
            print("| %s | %s | %s | %s |" % (n, c, spread(speeds[(n, c)]), "%.3f [%.3f-%.3f]" % (
                statistics.median(r), min(r), max(r))))
    if len(servers) == 2:
        for c in cases:
            r = [a / b for a, b in zip(speeds[(servers[0], c)], speeds[(servers[1], c)])]
            print("%s / %s, %s: %.2fx [%.2f-%.2f]" % (servers[0], servers[1], c, statistics.median(r), min(r), max(r)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "tok_s": {"%s/%s" % k: v for k, v in speeds.items()}, "ratio": ratios},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
