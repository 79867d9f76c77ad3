#!/usr/bin/env python3
"""Load benchmark: tqserve vs llama.cpp's llama-server, same model, same threads, same workload, side by side.

  python3 bench/serving/load.py [--quick] [--concurrency 1,2,4,8,16,32] [--requests N] [--json FILE] [--nice -10]
  python3 bench/serving/load.py --soak 600 [--servers tqserve]       # RSS over time at 16 clients

On a machine shared with other work, --nice -10 (as root) keeps the others from taking the cores mid-run; the
table's `other` column shows how much CPU the rest of the machine used during each measurement.

The script starts each server itself (tqserve: build/tqserve serve; llama-server: scripts/build-llama-server.sh
builds it once), waits for readiness and drives /v1/chat/completions with streamed requests from closed-loop
clients: at concurrency C, C clients each send the next request of the workload as soon as their previous one
has ended. The workload is a deterministic mix (from --seed) of prompt lengths (~64, ~256, ~768 tokens) and
output lengths (max_tokens 32, 128, 256) with temperature 0 and ignore_eos, so both servers generate exactly
max_tokens tokens for each request. Each level runs on tqserve, then on a freshly started llama-server with
--parallel C slots (continuous batching on); tqserve runs once for the whole sweep.

Per request: TTFT (request sent -> first content token), TPOT ((last token - first token) / (tokens - 1)),
ITL (gaps between streamed content chunks), errors (HTTP status, error chunk, missing tokens, fewer tokens than
max_tokens). Per level: output tokens/s (all generated tokens / the level's wall time), goodput (requests/s that
meet both SLOs, --slo-ttft and --slo-tpot) and the server's CPU use (cores busy, from /proc/PID/stat).

Settings come from flags only (TQSERVE_* as defaults for the binaries: TQSERVE_BIN, TQSERVE_LLAMA_SERVER).
Only the Python standard library is used (a small asyncio HTTP/1.1 client, so that the client costs little CPU).
"""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.expanduser("~/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT_CLASSES = [(64, 0.5), (256, 0.35), (768, 0.15)]  # (approximate prompt tokens, weight)
OUTPUT_CLASSES = [(32, 0.3), (128, 0.45), (256, 0.25)]  # (max_tokens, weight)
WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact water room mother area money story month lot right study "
         "book job word business issue side kind head house service friend father power hour game line end member "
         "law car city community name president team minute idea kid body information back parent face others "
         "level office door health art war history party result change morning reason research girl guy moment "
         "air teacher force education river garden market letter winter summer light music paper table window "
         "train bridge forest island engine signal picture coffee bread animal ocean planet theory").split()
MODEL_ID = "bench-model"
SYSTEM = "You are a helpful assistant. Answer in plain English."


# ----------------------------------------------------------------------------------------------------------------
# Workload

def make_workload(seed, count, max_out_cap=None):
    """count requests: (messages, max_tokens, prompt class), the same for a given seed and count."""
    rng = random.Random(seed)
    reqs = []
    for i in range(count):
        p_len = rng.choices([c for c, _ in PROMPT_CLASSES], [w for _, w in PROMPT_CLASSES])[0]
        max_tokens = rng.choices([c for c, _ in OUTPUT_CLASSES], [w for _, w in OUTPUT_CLASSES])[0]
        if max_out_cap:
            max_tokens = min(max_tokens, max_out_cap)
        # ~1.3 tokens per word with these words and separators; the request number first so that no two prompts
        # share a prefix past the system message (neither server may reuse another request's prompt cache).
        words = " ".join(rng.choice(WORDS) for _ in range(int(p_len / 1.3)))
        user = "Note %d-%d. %s\nWrite a long story that uses these words." % (seed, i, words)
        reqs.append(([{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}], max_tokens, p_len))
    return reqs


# ----------------------------------------------------------------------------------------------------------------
# Minimal asyncio HTTP/1.1 client for one streamed POST (SSE over chunked transfer encoding, or a plain body).

class Result:
    __slots__ = ("ok", "error", "start", "first", "chunk_times", "end", "tokens", "prompt_tokens", "max_tokens",
                 "finish")

    def __init__(self, max_tokens):
        self.ok, self.error, self.first, self.end = False, "", None, None
        self.start = time.perf_counter()
        self.chunk_times, self.tokens, self.prompt_tokens, self.max_tokens, self.finish = [], 0, 0, max_tokens, None


async def _read_body_chunks(reader, headers):
    """Yields the body's bytes as they arrive (chunked, Content-Length, or up to EOF)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise ConnectionError("connection closed inside a chunked body")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            yield data


async def stream_chat(port, model, messages, max_tokens, ignore_eos_field=True, extra=None):
    """One streamed greedy chat request; extra: more body fields (e.g. llama-server's per-request lora)."""
    res = Result(max_tokens)
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    body.update(extra or {})
    if ignore_eos_field:
        body["ignore_eos"] = True
    payload = json.dumps(body).encode()
    writer = None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Accept: text/event-stream\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(payload)
                     + payload)
        res.start = time.perf_counter()
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.split(None, 2)
        status = int(parts[1]) if len(parts) >= 2 else 0
        headers = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        buf = b""
        async for data in _read_body_chunks(reader, headers):
            now = time.perf_counter()
            if status != 200:
                buf += data
                continue
            buf += data
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    d = line[5:].strip()
                    if d == b"[DONE]":
                        res.end = now
                        continue
                    j = json.loads(d)
                    if "error" in j:
                        res.error = "error chunk: %s" % str(j["error"])[:120]
                        continue
                    if j.get("usage"):
                        res.tokens = j["usage"].get("completion_tokens", res.tokens)
                        res.prompt_tokens = j["usage"].get("prompt_tokens", 0)
                    for ch in j.get("choices") or []:
                        text = (ch.get("delta") or {}).get("content")
                        if text:
                            if res.first is None:
                                res.first = now
                            res.chunk_times.append(now)
                        if ch.get("finish_reason"):
                            res.finish = ch["finish_reason"]
        if status != 200:
            res.error = "HTTP %d: %s" % (status, buf[:160].decode("utf-8", "replace"))
        elif res.error:
            pass
        elif res.first is None:
            res.error = "no content tokens"
        elif res.end is None:
            res.error = "stream ended without [DONE]"
        else:
            if not res.tokens:
                res.tokens = len(res.chunk_times)
            if res.tokens < max_tokens:
                res.error = "%d of %d tokens (finish_reason %s)" % (res.tokens, max_tokens, res.finish)
            else:
                res.ok = True
    except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as e:
        res.error = "%s: %s" % (type(e).__name__, e)
    finally:
        if res.end is None:
            res.end = time.perf_counter()
        if writer is not None:
            writer.close()
    return res


# ----------------------------------------------------------------------------------------------------------------
# Servers

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def cpu_seconds(pid):
    """User + system CPU seconds of the process (all threads)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def machine_busy_seconds():
    """CPU seconds all processes of the machine have been busy (user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds():
    t = os.times()
    return t.user + t.system


def wait_quiet(limit_s, max_cores=0.3):
    """Waits (at most limit_s) until the rest of the machine uses under max_cores over a 2 s window; returns the
    cores it used in the last window."""
    t_end = time.time() + limit_s
    while True:
        b0 = machine_busy_seconds()
        time.sleep(2.0)
        busy = (machine_busy_seconds() - b0) / 2.0
        if busy < max_cores or time.time() >= t_end:
            return busy


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Server:
    def __init__(self, name, cmd, port, ready_path, log_path, model_id, ignore_eos_field=True, env=None):
        self.name, self.cmd, self.port, self.ready_path, self.env = name, cmd, port, ready_path, env or {}
        self.log_path, self.model_id, self.ignore_eos_field = log_path, model_id, ignore_eos_field
        self.proc = None

    def start(self, timeout=120):
        self.log = open(self.log_path, "ab")
        self.log.write(("\n$ %s%s\n" % ("".join("%s=%s " % kv for kv in self.env.items()), " ".join(self.cmd))).encode())
        self.log.flush()
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, **self.env))
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d during start-up; see %s"
                                   % (self.name, self.proc.returncode, self.log_path))
            if http_status("http://127.0.0.1:%d%s" % (self.port, self.ready_path)) == 200:
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("%s not ready after %d s; see %s" % (self.name, timeout, self.log_path))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()
            self.log = None


def tqserve_server(args, concurrency, log_dir):
    port = free_port()
    cmd = [args.tqserve_bin, "serve", "--model", args.model, "--http-port", str(port), "--grpc-port", "0",
           "--host", "127.0.0.1", "--threads", str(args.threads), "--ctx-size", str(args.ctx_per_seq),
           "--max-running", str(max(concurrency, 32)), "--model-id", MODEL_ID, "--log-level", "warn"] + args.tqserve_arg
    return Server("tqserve", cmd, port, "/ready", os.path.join(log_dir, "tqserve.log"), MODEL_ID)


def llama_server(args, concurrency, log_dir, threads=None, name="llama-server"):
    port = free_port()
    threads = threads or args.threads
    cmd = [args.llama_server_bin, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
           "-t", str(threads), "-tb", str(threads), "-c", str(args.ctx_per_seq * concurrency),
           "-np", str(concurrency), "-cb", "-ngl", "0", "--alias", MODEL_ID, "--no-webui"] + args.llama_arg
    env = {"OMP_WAIT_POLICY": args.llama_omp_wait_policy.upper()} if args.llama_omp_wait_policy != "default" else {}
    return Server(name, cmd, port, "/health", os.path.join(log_dir, name.replace(":", "-t") + ".log"), MODEL_ID,
                  env=env)


def make_server(name, args, concurrency, log_dir):
    """tqserve, llama-server (--threads threads), or llama-server:T (T threads)."""
    if name == "tqserve":
        srv = tqserve_server(args, concurrency, log_dir)
    else:
        threads = int(name.split(":", 1)[1]) if ":" in name else None
        srv = llama_server(args, concurrency, log_dir, threads, name)
    return srv


# ----------------------------------------------------------------------------------------------------------------
# Running a level

async def run_clients(server, reqs, concurrency, deadline=None, loop_forever=False, on_result=None):
    results = []
    next_i = 0

    async def client():
        nonlocal next_i
        while True:
            if deadline is not None and time.perf_counter() >= deadline:
                return
            if next_i >= len(reqs):
                if not loop_forever:
                    return
                next_i = 0
            messages, max_tokens, _ = reqs[next_i]
            next_i += 1
            r = await stream_chat(server.port, server.model_id, messages, max_tokens, server.ignore_eos_field)
            results.append(r)
            if on_result:
                on_result(r)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return results


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(results, wall, cpu, slo_ttft, slo_tpot, others=0.0):
    ok = [r for r in results if r.ok]
    ttft = [r.first - r.start for r in ok]
    tpot = [(r.chunk_times[-1] - r.first) / (r.tokens - 1) for r in ok if r.tokens > 1]
    itl = [b - a for r in ok for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    good = [r for r in ok if r.first - r.start <= slo_ttft
            and (r.tokens <= 1 or (r.chunk_times[-1] - r.first) / (r.tokens - 1) <= slo_tpot)]
    out_tokens = sum(r.tokens for r in ok)
    errors = {}
    for r in results:
        if not r.ok:
            errors[r.error[:100]] = errors.get(r.error[:100], 0) + 1
    return {
        "requests": len(results), "errors": len(results) - len(ok), "error_kinds": errors,
        "wall_s": wall, "output_tokens": out_tokens, "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "chunks": sum(len(r.chunk_times) for r in ok),
        "output_tok_s": out_tokens / wall if wall > 0 else 0.0,
        "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99),
        "tpot_p50": pct(tpot, 50), "tpot_p99": pct(tpot, 99),
        "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99),
        "goodput_req_s": len(good) / wall if wall > 0 else 0.0,
        "good_frac": len(good) / len(results) if results else 0.0,
        "server_cores": cpu / wall if wall > 0 else 0.0,
        "other_cores": others,
    }


def run_level(server, reqs, concurrency, args):
    # Warm-up outside the measurement: one short request per client slot (pages the weights in, opens slots).
    warm = make_workload(args.seed + 1000, concurrency, max_out_cap=8)
    asyncio.run(run_clients(server, warm, concurrency))
    if args.wait_quiet > 0:
        busy = wait_quiet(args.wait_quiet)
        if busy >= 0.3:
            print("  (the machine is still busy: %.2f cores in use before the run)" % busy, flush=True)
    pid = server.proc.pid
    cpu0, rss0, busy0, own0 = cpu_seconds(pid), rss_kib(pid), machine_busy_seconds(), own_cpu_seconds()
    t0 = time.perf_counter()
    results = asyncio.run(run_clients(server, reqs, concurrency, deadline=t0 + args.level_timeout))
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    others = (machine_busy_seconds() - busy0 - cpu - (own_cpu_seconds() - own0)) / wall
    s = summarize(results, wall, cpu, args.slo_ttft, args.slo_tpot, max(others, 0.0))
    s["cut"] = len(reqs) - len(results)  # requests not started before --level-timeout
    s["rss_mib_before"], s["rss_mib_after"] = rss0 / 1024.0, rss_kib(pid) / 1024.0
    return s


# ----------------------------------------------------------------------------------------------------------------
# Output

def ms(x):
    return "%7.0f" % (x * 1000) if x == x else "    nan"


def print_table(levels, servers, args, out=sys.stdout):
    print("model %s, %d threads per server, SLO: TTFT <= %.1f s and TPOT <= %.0f ms; times in ms"
          % (os.path.basename(args.model), args.threads, args.slo_ttft, args.slo_tpot * 1000), file=out)
    hdr = ("%4s %-14s %5s %4s %4s %8s %7s %7s %7s %7s %7s %7s %6s %5s %5s %5s"
           % ("conc", "server", "reqs", "cut", "err", "out_tok/s", "TTFT50", "TTFT99", "TPOT50", "TPOT99", "ITL50", "ITL99",
              "good/s", "good%", "cores", "other"))
    print("cores: CPU cores the server kept busy; other: cores used by the rest of the machine meanwhile "
          "(not the\nservers, not this client): a busy machine makes the numbers unreliable", file=out)
    print(hdr, file=out)
    for c in sorted(levels):
        for name in servers:
            s = levels[c].get(name)
            if not s:
                continue
            print("%4d %-14s %5d %4d %4d %9.1f %s %s %s %s %s %s %6.2f %5.0f %5.2f %5.2f"
                  % (c, name, s["requests"], s["cut"], s["errors"], s["output_tok_s"], ms(s["ttft_p50"]), ms(s["ttft_p99"]),
                     ms(s["tpot_p50"]), ms(s["tpot_p99"]), ms(s["itl_p50"]), ms(s["itl_p99"]),
                     s["goodput_req_s"], 100 * s["good_frac"], s["server_cores"], s["other_cores"]),
                  file=out)
    for ref in [n for n in servers if n.startswith("llama-server")] if "tqserve" in servers else []:
        print("\ntqserve / %s:" % ref, file=out)
        print("%4s %10s %12s   (targets at 16: tok/s >= 1.50x, TTFT p99 <= 1.00x; errors 0)"
              % ("conc", "out_tok/s", "TTFT p99"), file=out)
        for c in sorted(levels):
            t, l = levels[c].get("tqserve"), levels[c].get(ref)
            if t and l and l["output_tok_s"] > 0 and l["ttft_p99"] > 0:
                print("%4d %9.2fx %11.2fx" % (c, t["output_tok_s"] / l["output_tok_s"], t["ttft_p99"] / l["ttft_p99"]),
                      file=out)
    errs = {(c, n): levels[c][n]["error_kinds"] for c in levels for n in levels[c] if levels[c][n]["error_kinds"]}
    for (c, n), kinds in sorted(errs.items()):
        for k, v in kinds.items():
            print("errors at %d, %s: %d x %s" % (c, n, v, k), file=out)
    print("total errors: %d" % sum(levels[c][n]["errors"] for c in levels for n in levels[c]), file=out)


def slope_per_min(samples):
    """Least-squares slope of (seconds, MiB) samples, in MiB per minute."""
    if len(samples) < 2:
        return 0.0
    xs = [t for t, _ in samples]
    ys = [v for _, v in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 60.0 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def soak(args, name, log_dir):
    server = make_server(name, args, args.soak_clients, log_dir)
    print("soak: %s, %d clients, %.0f s, RSS every %.0f s" % (server.name, args.soak_clients, args.soak,
                                                              args.soak_interval), flush=True)
    server.start()
    try:
        reqs = make_workload(args.seed, 512)
        pid = server.proc.pid
        samples = []
        done = []
        t0 = time.perf_counter()

        async def sampler(stop_at):
            while True:
                now = time.perf_counter()
                samples.append((now - t0, rss_kib(pid) / 1024.0))
                if args.verbose:
                    print("  t=%5.0f s RSS %.1f MiB, %d requests done" % (now - t0, samples[-1][1], len(done)),
                          flush=True)
                if now >= stop_at:
                    return
                await asyncio.sleep(min(args.soak_interval, max(stop_at - now, 0.01)))

        async def main():
            stop_at = t0 + args.soak
            s = asyncio.create_task(sampler(stop_at))
            res = await run_clients(server, reqs, args.soak_clients, deadline=stop_at, loop_forever=True,
                                    on_result=done.append)
            await s
            return res

        cpu0 = cpu_seconds(pid)
        results = asyncio.run(main())
        wall = time.perf_counter() - t0
        s = summarize(results, wall, cpu_seconds(pid) - cpu0, args.slo_ttft, args.slo_tpot)
        samples.append((wall, rss_kib(pid) / 1024.0))
    finally:
        server.stop()
    rss = [v for _, v in samples]
    half = [p for p in samples if p[0] >= wall / 2]
    report = {"server": server.name, "clients": args.soak_clients, "seconds": wall, "summary": s,
              "rss_samples_mib": samples, "rss_first_mib": rss[0], "rss_last_mib": rss[-1], "rss_max_mib": max(rss),
              "rss_slope_mib_per_min": slope_per_min(samples),
              "rss_slope_second_half_mib_per_min": slope_per_min(half)}
    print("soak %s: %.0f s, %d clients, %d requests, %d errors, %.1f output tok/s, TTFT p50/p99 %.0f/%.0f ms, "
          "TPOT p50/p99 %.0f/%.0f ms"
          % (server.name, wall, args.soak_clients, s["requests"], s["errors"], s["output_tok_s"], s["ttft_p50"] * 1e3,
             s["ttft_p99"] * 1e3, s["tpot_p50"] * 1e3, s["tpot_p99"] * 1e3))
    first_half = [v for t, v in samples if t < wall / 2]
    second_half = [v for t, v in samples if t >= wall / 2]
    report["rss_max_first_half_mib"] = max(first_half) if first_half else 0.0
    report["rss_max_second_half_mib"] = max(second_half) if second_half else 0.0
    print("RSS (MiB): first %.1f (before any request), last %.1f (after the clients stopped), max %.1f; max %.1f in "
          "the first half, %.1f in the second; slope %+.3f MiB/min overall, %+.3f MiB/min over the second half "
          "(%d samples)" % (report["rss_first_mib"], report["rss_last_mib"], report["rss_max_mib"],
                            report["rss_max_first_half_mib"], report["rss_max_second_half_mib"],
                            report["rss_slope_mib_per_min"], report["rss_slope_second_half_mib_per_min"],
                            len(samples)))
    print("RSS by minute (MiB): " + " ".join("%.0f" % v for t, v in samples if int(t) % 60 < args.soak_interval))
    for k, v in s["error_kinds"].items():
        print("errors: %d x %s" % (v, k))
    return report


# ----------------------------------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=2, help="forward-pass threads of each server")
    p.add_argument("--concurrency", default="1,2,4,8,16,32", help="comma-separated levels")
    p.add_argument("--requests", type=int, default=0,
                   help="requests per level; 0 = max(16, 3 x concurrency) (the sweep), 2 x concurrency (--quick)")
    p.add_argument("--servers", default="tqserve,llama-server",
                   help="comma-separated: tqserve, llama-server (--threads threads), llama-server:T (T threads)")
    p.add_argument("--level-timeout", type=float, default=300,
                   help="seconds after which a level starts no new request (those are counted as cut)")
    p.add_argument("--llama-omp-wait-policy", default="default", choices=["passive", "active", "default"],
                   help="OMP_WAIT_POLICY of llama-server; default: unset (its OpenMP threads spin at barriers, "
                        "which collapses its speed when other processes take the cores; passive helps there, "
                        "--nice helps more)")
    p.add_argument("--quick", action="store_true",
                   help="levels 1,4,16, 2 x concurrency requests of at most 32 tokens (< 2 minutes)")
    p.add_argument("--soak", type=float, default=0, help="seconds of a soak run instead of the sweep")
    p.add_argument("--soak-clients", type=int, default=16)
    p.add_argument("--soak-interval", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slo-ttft", type=float, default=2.0, help="SLO on time to first token, seconds")
    p.add_argument("--slo-tpot", type=float, default=0.1, help="SLO on time per output token, seconds")
    p.add_argument("--ctx-per-seq", type=int, default=2048, help="context per sequence (llama-server: per slot)")
    p.add_argument("--tqserve-bin", default=os.environ.get("TQSERVE_BIN", os.path.join(ROOT, "build/tqserve")))
    p.add_argument("--llama-server-bin", default=os.environ.get("TQSERVE_LLAMA_SERVER", ""),
                   help="default: the path scripts/build-llama-server.sh prints (it builds it once)")
    p.add_argument("--tqserve-arg", action="append", default=[], help="extra tqserve serve argument (repeatable)")
    p.add_argument("--llama-arg", action="append", default=[], help="extra llama-server argument (repeatable)")
    p.add_argument("--log-dir", default="", help="server logs (default: a new directory under /tmp)")
    p.add_argument("--json", default="", help="write the results here")
    p.add_argument("--wait-quiet", type=float, default=0,
                   help="before each measurement wait up to this many seconds for the rest of the machine to be idle")
    p.add_argument("--nice", type=int, default=0,
                   help="niceness of both servers and this client (negative, as root: other processes on the machine "
                        "take less of the CPU from the measurement)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()

    if args.nice:
        os.nice(args.nice)  # the servers inherit it
        old = set_autogroup_nice(args.nice)
    try:
        run(args, p)
    finally:
        if args.nice and old is not None:
            set_autogroup_nice(old)


def set_autogroup_nice(nice):
    """With scheduler autogroups, niceness counts only within the session's group; the group's own niceness
    (shared by this session's processes, servers included) decides its share against other sessions. Returns the
    group's previous niceness (None without autogroups)."""
    try:
        with open("/proc/self/autogroup") as f:
            old = int(f.read().split()[-1])
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
        return old
    except (OSError, ValueError):
        return None


def run(args, p):
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    for s in servers:
        if s not in ("tqserve", "llama-server") and not (s.startswith("llama-server:") and s[13:].isdigit()):
            sys.exit("unknown server %r (tqserve, llama-server, llama-server:THREADS)" % s)
    if "tqserve" in servers and not os.access(args.tqserve_bin, os.X_OK):
        sys.exit("no tqserve binary at %s (scripts/build.sh, or --tqserve-bin)" % args.tqserve_bin)
    if any(s.startswith("llama-server") for s in servers) and not args.llama_server_bin:
        args.llama_server_bin = subprocess.run(["bash", os.path.join(ROOT, "scripts/build-llama-server.sh")],
                                               check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    log_dir = args.log_dir or __import__("tempfile").mkdtemp(prefix="tqserve-load-")
    os.makedirs(log_dir, exist_ok=True)
    print("server logs in %s" % log_dir, flush=True)
    print("machine: %d cores, load average %s" % (os.cpu_count(), open("/proc/loadavg").read().split()[0]), flush=True)

    if args.soak:
        reports = [soak(args, s, log_dir) for s in servers]
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"mode": "soak", "args": vars(args), "reports": reports}, f, indent=1)
        sys.exit(1 if any(r["summary"]["errors"] for r in reports) else 0)

    if args.quick:
        levels_list = [1, 4, 16] if args.concurrency == p.get_default("concurrency") else \
            [int(x) for x in args.concurrency.split(",")]
        max_out_cap = 32
    else:
        levels_list = [int(x) for x in args.concurrency.split(",")]
        max_out_cap = None
    levels = {}
    tq = None
    try:
        if "tqserve" in servers:
            tq = make_server("tqserve", args, max(levels_list), log_dir)
            tq.start()
        for c in levels_list:
            n = args.requests or (2 * c if args.quick else max(16, 3 * c))
            reqs = make_workload(args.seed, n, max_out_cap)
            levels[c] = {}
            for name in servers:
                if name == "tqserve":
                    srv = tq
                else:
                    srv = make_server(name, args, c, log_dir)
                    srv.start()
                try:
                    t0 = time.time()
                    levels[c][name] = run_level(srv, reqs, c, args)
                    s = levels[c][name]
                    print("  %-14s concurrency %2d: %d of %d requests in %.1f s, %d errors, %.1f output tok/s, "
                          "%.2f other cores" % (name, c, s["requests"], n, time.time() - t0, s["errors"],
                                                s["output_tok_s"], s["other_cores"]), flush=True)
                finally:
                    if srv is not tq:
                        srv.stop()
    finally:
        if tq:
            tq.stop()
    print()
    print_table(levels, servers, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mode": "sweep", "args": vars(args), "levels": {str(c): v for c, v in levels.items()}}, f,
                      indent=1)
    sys.exit(1 if any(levels[c][n]["errors"] for c in levels for n in levels[c]) else 0)


if __name__ == "__main__":
    main()
