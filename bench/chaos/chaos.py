#!/usr/bin/env python3
"""Chaos harness for tqserve: faults under real streaming load, checked against a fault-free reference.

Runs the real daemon (a private copy of build/tqserve) with the default model and KV preset (compressed, cold tier
in a private temporary directory) and, for each fault, drives it with streaming /v1/completions clients (mixed
prompt lengths, greedy, `ignore_eos`, a fixed max_tokens), then checks:

  * every request ended either with its whole output or with a clear error (an HTTP status with an OpenAI error
    body, a named finish reason, or a connection error the fault itself explains: the daemon killed or gone);
  * no token is wrong against the reference run (below);
  * the daemon did not crash, and afterwards every slot and KV byte is back: no running or waiting request, no KV
    held by sequences, tier bytes equal to what the prefix cache keeps, descriptors back, and a burst of
    --max-concurrent-requests requests is admitted whole (no leaked admission slot answers 429);
  * the fault really happened (disk full seen, pread chosen, injected latency measured, aborts counted, ...).

Reference and "wrong tokens": the reference is made at concurrency 1 on a fresh daemon, and each request is
compared with it token by token. The CPU forward pass is batch-invariant (docs/serving.md, "Batch invariance"): a
request's tokens and log-probabilities do not depend on what ran beside it or on how its prompt was chunked, so
any difference from the reference, one token or one log-probability, is a wrong token, and the comparison sees KV
damage however small. --tie-nats and --lp-nats loosen the rule (for a build that is not invariant): requests are
then compared up to their first divergence, a near-tie (benign) when each run's token is among the other run's
top 20 with a log-probability within --tie-nats of that run's choice; anything else is a wrong token, and so is
a chosen token whose log-probability moved by more than --lp-nats before the divergence. Tokens after a near-tie
cannot be compared and are reported as "unverified", never as correct. `--faults drill` checks the check: a daemon whose
KV is 2-bit everywhere must come out wrong.

    python3 bench/chaos/chaos.py --short          # the CI mode: every fault, fewer clients (~4 min on 2 cores)
    python3 bench/chaos/chaos.py                  # 32 clients
    python3 bench/chaos/chaos.py --soak 30        # 30 minutes of 32 clients, RSS sampled, slope per hour
    python3 bench/chaos/chaos.py --determinism    # does a fault-free run reproduce itself?

Exit status 1 when any target fails, 77 when the model is absent (ctest's skip code), 2 for bad usage.
Only the Python standard library is used.
"""
import argparse
import ctypes
import http.client
import json
import os
import pathlib
import platform
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIP = 77
SLOT_LIMIT = 64          # --max-concurrent-requests of every daemon; the slot probe sends this many at once
CTX = 2048
# Log-probabilities of the top tokens asked for at every position: the near-tie check needs each run's choice
# among the other run's top entries, and where the distribution is flat (5 tokens within 0.3 nats) a top 5 often
# leaves it out even though it sits a few tenths of a nat below (seen in the 30-minute soak).
TOP_LOGPROBS = 20


# ----------------------------------------------------------------------------------------------------------------
# seccomp: `chaos.py --exec-seccomp PROGRAM ARGS...` installs a filter that makes io_uring_setup fail with EPERM
# (what container runtimes' default profiles do) and execs PROGRAM: the daemon runs with the real kernel filter.

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
NR_IO_URING_SETUP = 425  # the same number on x86_64 and aarch64 (generic table)


def exec_seccomp(argv):
    arch = AUDIT_ARCH.get(platform.machine())
    if arch is None:
        sys.exit(f"seccomp: unsupported architecture {platform.machine()}")
    # struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}
    BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
    SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO, EPERM = 0x7FFF0000, 0x00050000, 1
    insns = [
        (BPF_LD_W_ABS, 0, 0, 4),                     # A = seccomp_data.arch
        (BPF_JEQ_K, 1, 0, arch),                     # native arch: go on; else allow (skip the next)
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_LD_W_ABS, 0, 0, 0),                     # A = seccomp_data.nr
        (BPF_JEQ_K, 0, 1, NR_IO_URING_SETUP),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    code = b"".join(struct.pack("HBBI", *i) for i in insns)
    buf = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(insns), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        sys.exit(f"seccomp: PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        sys.exit(f"seccomp: PR_SET_SECCOMP failed: {os.strerror(ctypes.get_errno())}")
    os.execv(argv[0], argv)


# ----------------------------------------------------------------------------------------------------------------
# The daemon

def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Daemon:
    """One run of `tqserve serve` on free ports. wrapper: 'tmpfs:SIZE' (cold dir on a tmpfs of that size, in a
    user + mount namespace) or 'seccomp' (io_uring_setup denied)."""

    def __init__(self, ctx, name, cold_dir, args=(), wrapper=None):
        self.ctx, self.name, self.cold_dir, self.args, self.wrapper = ctx, name, cold_dir, list(args), wrapper
        self.proc = None
        self.log_path = None
        self.starts = 0

    def start(self):
        self.http_port, self.grpc_port = free_ports(2)
        self.starts += 1
        self.log_path = os.path.join(self.ctx.work, f"{self.name}-{self.starts}.log")
        cmd = [self.ctx.binary, "serve", "--model", self.ctx.model, "--host", "127.0.0.1",
               "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port), "--threads",
               str(self.ctx.threads), "--ctx-size", str(CTX), "--max-concurrent-requests", str(SLOT_LIMIT),
               "--kv-cold-dir", self.cold_dir, *self.args]
        if self.wrapper and self.wrapper.startswith("tmpfs:"):
            size = self.wrapper.split(":", 1)[1]
            os.makedirs(self.cold_dir, mode=0o700, exist_ok=True)
            script = f'mount -t tmpfs -o size={size},mode=0700 none "$0" && exec "$@"'
            cmd = ["unshare", "-rm", "sh", "-c", script, self.cold_dir, *cmd]
        elif self.wrapper == "seccomp":
            cmd = [sys.executable, os.path.abspath(__file__), "--exec-seccomp", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TQ_")}
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.pid = self.proc.pid
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}: tqserve exited with {self.proc.returncode}:\n{self.logs()[-3000:]}")
            try:
                if http_get(self.http_port, "/ready", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError(f"{self.name}: tqserve did not become ready:\n{self.logs()[-3000:]}")

    def logs(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def stop(self, timeout=60):
        """SIGTERM; returns (exit code, seconds to exit)."""
        if self.proc is None:
            return None, 0
        t0 = time.time()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode, time.time() - t0

    # ------------------------------------------------------------------ observation
    def metrics(self):
        status, body = http_get(self.http_port, "/metrics", timeout=10)
        out = {}
        for line in body.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            name, _, labels = head.partition("{")
            out[(name, labels.rstrip("}"))] = float(value)
        return out

    def kv_state(self):
        return json.loads(http_get(self.http_port, "/kv/state", timeout=10)[1])

    def proc_status(self):
        """(RSS MiB, threads, open descriptors) of the daemon."""
        rss = threads = 0
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        return rss, threads, len(os.listdir(f"/proc/{self.pid}/fd"))


def m(metrics, name, labels=""):
    return metrics.get((name, labels), 0.0)


def tier_sum(metrics):
    return sum(m(metrics, "tqserve_kv_tier_bytes", f'tier="{t}"') for t in ("hot", "warm", "cold"))


def outcome_count(metrics, outcome):
    return sum(v for (n, l), v in metrics.items() if n == "tqserve_requests_total" and f'outcome="{outcome}"' in l)


# ----------------------------------------------------------------------------------------------------------------
# Clients

def http_get(port, path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class Request:
    def __init__(self, rid, prompt, max_tokens):
        self.rid, self.prompt, self.max_tokens = rid, prompt, max_tokens

    def body(self, stream=True, max_tokens=None):
        b = {"prompt": self.prompt, "max_tokens": max_tokens or self.max_tokens, "temperature": 0,
             "ignore_eos": True, "logprobs": TOP_LOGPROBS}
        if stream:
            b.update(stream=True, stream_options={"include_usage": True})
        return json.dumps(b).encode()


class Result:
    def __init__(self, rid):
        self.rid = rid
        self.tokens, self.lps, self.top = [], [], []
        self.finish = None
        self.done = False        # [DONE] seen after a normal finish reason
        self.error = None        # kind
        self.message = ""
        self.clear = True        # the error says what happened
        self.expected = False    # the error is the fault's own doing (daemon killed, client hung up)
        self.cached = 0
        self.t0 = self.t1 = 0.0

    @property
    def ok(self):
        return self.error is None and self.done


def _http_error(res, status, data):
    res.error = f"http {status}"
    try:
        err = json.loads(data)["error"]
        res.error += f" {err.get('type', '?')}"
        res.message = err.get("message", "")
        res.clear = bool(res.message) and status != 500
    except (ValueError, KeyError, TypeError):
        res.message = data[:200].decode(errors="replace")
        res.clear = False


def _take_chunk(res, obj):
    if "error" in obj:
        err = obj["error"] or {}
        res.error = f"stream error {err.get('type', '?')}"
        res.message = err.get("message", "")
        res.clear = bool(res.message)
        return
    if obj.get("usage"):
        res.cached = ((obj["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")) or 0
    for ch in obj.get("choices", []):
        lp = ch.get("logprobs")
        if lp:
            res.tokens += lp["tokens"]
            res.lps += lp["token_logprobs"]
            res.top += lp["top_logprobs"]
        if ch.get("finish_reason"):
            res.finish = ch["finish_reason"]


def stream(port, req, timeout=600, max_tokens=None):
    """One streamed completion; every failure becomes res.error (never an exception)."""
    res = Result(req.rid)
    res.t0 = time.time()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", req.body(max_tokens=max_tokens),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            _http_error(res, r.status, r.read())
            return res
        while True:
            line = r.readline()
            if not line:
                res.error, res.clear = "stream ended without [DONE]", False
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                if res.finish in ("length", "stop"):
                    res.done = True
                elif res.error is None:
                    res.error = f"finish {res.finish}"  # timeout, shutdown, ...: named, so clear
                break
            _take_chunk(res, json.loads(data))
            if res.error:
                break
    except (OSError, http.client.HTTPException, ValueError) as e:
        res.error, res.message, res.clear = type(e).__name__, str(e)[:200], False
    finally:
        conn.close()
        res.t1 = time.time()
    return res


def run_load(get_port, requests, clients, stop=None, on_result=None, timeout=600):
    """Closed-loop clients over `requests` (each once). get_port() is read per request (a restarted daemon)."""
    results, lock, it = [], threading.Lock(), iter(list(requests))

    def worker():
        while stop is None or not stop.is_set():
            with lock:
                req = next(it, None)
            if req is None:
                return
            res = stream(get_port(), req, timeout=timeout)
            with lock:
                results.append(res)
            if on_result:
                on_result(res)

    ts = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def slot_probe(port, n=SLOT_LIMIT):
    """n requests at once, each one token: all must be admitted (a leaked concurrency slot answers 429)."""
    statuses = []
    lock = threading.Lock()
    body = json.dumps({"prompt": "Hello", "max_tokens": 1, "temperature": 0}).encode()

    def one():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            st = r.status
        except OSError as e:
            st = type(e).__name__
        finally:
            c.close()
        with lock:
            statuses.append(st)

    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(1 for s in statuses if s == 200), statuses


class RssSampler(threading.Thread):
    def __init__(self, daemon, every=1.0):
        super().__init__(daemon=True)
        self.d, self.every, self.samples, self._halt = daemon, every, [], threading.Event()
        self.with_kv = False

    def run(self):
        t0 = time.time()
        self.kv = []  # (t, RSS MiB, RAM tiers' high-water MiB, cold cache's high-water MiB, prefix cache MiB)
        hw_tiers = hw_cold = 0.0
        while not self._halt.is_set():
            try:
                t, rss = time.time() - t0, self.d.proc_status()[0]
                self.samples.append((t, rss))
                if self.with_kv:
                    mt = self.d.metrics()
                    ram = sum(m(mt, "tqserve_kv_tier_bytes", f'tier="{x}"') for x in ("hot", "warm")) / 2**20
                    hw_tiers = max(hw_tiers, ram)
                    hw_cold = max(hw_cold, m(mt, "tqserve_kv_cold_cache_bytes") / 2**20)
                    self.kv.append((t, rss, hw_tiers, hw_cold, m(mt, "tqserve_kv_prefix_cache_bytes") / 2**20))
            except OSError:
                pass
            self._halt.wait(self.every)

    def stop(self):
        self._halt.set()
        self.join()
        return self.samples


def slope_per_hour(samples):
    """Least-squares slope of RSS (MiB) over time, in MiB per hour."""
    if len(samples) < 3:
        return 0.0
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return 0.0 if den == 0 else sum((t - mt) * (r - mr) for t, r in samples) / den * 3600


# ----------------------------------------------------------------------------------------------------------------
# Workload and reference

def tokenize(port, text):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", "/tokenize", json.dumps({"content": text}).encode(), {"Content-Type": "application/json"})
        r = c.getresponse()
        return json.loads(r.read())["tokens"]
    finally:
        c.close()


def make_requests(port, n, max_tokens, seed=7):
    """n prompts of WikiText-2 token ids: lengths from a few tokens to ~1500, every one starting at its own offset;
    a quarter share one of two long prefixes (the prefix cache's pages, on disk across restarts)."""
    text = (ROOT / "tests/data/wikitext-2-raw/wiki.test.raw").read_text()[:400000]
    ids = tokenize(port, text)
    rng = random.Random(seed)
    lengths = [4, 12, 40, 120, 300, 600, 1000, 1500]
    weights = [10, 10, 15, 15, 15, 15, 10, 10]
    shared = [ids[1000:1000 + 640], ids[5000:5000 + 384]]
    reqs, offset = [], 20000
    for i in range(n):
        if i % 4 == 3:
            head = shared[(i // 4) % 2]
            tail = ids[offset:offset + rng.choice([8, 40, 150])]
            prompt = head + tail
            offset += len(tail) + 7
        else:
            ln = rng.choices(lengths, weights)[0]
            prompt = ids[offset:offset + ln]
            offset += ln + 13
        reqs.append(Request(i, prompt, max_tokens))
    rng.shuffle(reqs)
    return reqs


def compare(res, ref, tie_nats, lp_nats):
    """(status, position, wrong tokens, unverified tokens, max |logprob diff| before divergence).
    status: exact | tie | wrong | empty."""
    n = min(len(res.tokens), len(ref.tokens))
    dev = 0.0
    for i in range(n):
        a, b = ref.tokens[i], res.tokens[i]
        if a != b:
            rt, ft = ref.top[i] or {}, res.top[i] or {}
            if b in rt and a in ft and rt[a] - rt[b] <= tie_nats and ft[b] - ft[a] <= tie_nats:
                return "tie", i, 0, len(res.tokens) - i, dev
            return "wrong", i, len(res.tokens) - i, 0, dev
        d = abs(res.lps[i] - ref.lps[i])
        dev = max(dev, d)
        if d > lp_nats:
            return "wrong", i, len(res.tokens) - i, 0, dev
    if len(res.tokens) > len(ref.tokens) or (res.ok and len(res.tokens) != len(ref.tokens)):
        return "wrong", n, abs(len(res.tokens) - len(ref.tokens)), 0, dev
    return ("exact" if n else "empty"), n, 0, 0, dev


# ----------------------------------------------------------------------------------------------------------------
# One row of the table

class Row:
    def __init__(self, name):
        self.name = name
        self.results = []
        self.errors = {}          # kind -> count
        self.unclear = []         # (kind, message)
        self.wrong = 0            # wrong tokens
        self.wrong_reqs = []
        self.ties = 0             # requests whose output diverged from the reference at a near-tie
        self.unverified = 0       # tokens after such a divergence
        self.exact = 0
        self.compared_tokens = 0
        self.max_dev = 0.0
        self.crashes = 0
        self.slots_ok = None
        self.kv_ok = None
        self.settle_note = ""
        self.rss = []             # samples (t, MiB)
        self.rss_before = self.rss_after = 0.0
        self.failures = []        # why the row fails
        self.notes = []
        self.seconds = 0.0
        self.expect_wrong = False  # the drill: outputs are meant to be wrong, and must be found so

    def add(self, results, ref, args, count_ok=True):
        for r in results:
            self.results.append(r)
            if r.error:
                kind = r.error + (" (expected)" if r.expected else "")
                self.errors[kind] = self.errors.get(kind, 0) + 1
                if not r.clear and not r.expected:
                    self.unclear.append((r.error, r.message))
            st, pos, wrong, unver, dev = compare(r, ref[r.rid], args.tie_nats, args.lp_nats)
            self.max_dev = max(self.max_dev, dev)
            self.compared_tokens += pos
            if st == "wrong":
                self.wrong += wrong
                top = lambda x: {k: round(v, 3) for k, v in  # noqa: E731 (the first 5 of the top entries)
                                 list((x.top[pos] if pos < len(x.top) else {}).items())[:5]}
                self.wrong_reqs.append((r.rid, pos, " ".join(repr(t) for t in r.tokens[pos:pos + 3]) + f" {top(r)}",
                                        " ".join(repr(t) for t in ref[r.rid].tokens[pos:pos + 3]) +
                                        f" {top(ref[r.rid])}"))
            elif st == "tie":
                self.ties += 1
                self.unverified += unver
            elif st == "exact" and r.ok:
                self.exact += 1

    @property
    def requests(self):
        return len(self.results)

    @property
    def ok_count(self):
        return sum(1 for r in self.results if r.ok)

    def verdict(self):
        f = list(self.failures)
        if self.crashes:
            f.append(f"{self.crashes} crash(es)")
        if self.expect_wrong:
            if not self.wrong:
                f.append("the comparison found no wrong token in outputs of a damaged KV cache")
        elif self.wrong:
            f.append(f"{self.wrong} wrong token(s) in {len(self.wrong_reqs)} request(s): " +
                     "; ".join(f"req {rid} at {p}: got {g} want {w}" for rid, p, g, w in self.wrong_reqs[:4]))
        if self.unclear:
            f.append(f"{len(self.unclear)} unclear error(s): " +
                     "; ".join(f"{k}: {msg}" for k, msg in self.unclear[:4]))
        if self.slots_ok is False:
            f.append("slots not back: " + self.settle_note)
        if self.kv_ok is False:
            f.append("KV bytes not back: " + self.settle_note)
        return f


def settle(d, base_fds, timeout=30):
    """Waits until nothing is running or waiting, no KV is held by a sequence, the tiers hold only the prefix
    cache's pages and the descriptors are back to base; then the slot probe. (slots_ok, kv_ok, note)."""
    deadline = time.time() + timeout
    note = ""
    while True:
        mt = d.metrics()
        st = d.kv_state()
        _, threads, fds = d.proc_status()
        running, waiting = m(mt, "tqserve_num_requests_running"), m(mt, "tqserve_num_requests_waiting")
        seq_bytes = m(mt, "tqserve_kv_cache_bytes")
        tiers, prefix = tier_sum(mt), m(mt, "tqserve_kv_prefix_cache_bytes")
        slots_ok = running == 0 and waiting == 0 and st["running"] == 0 and st["waiting"] == 0 and fds <= base_fds
        kv_ok = seq_bytes == 0 and tiers == prefix
        note = (f"running {running:.0f} waiting {waiting:.0f} fds {fds} (base {base_fds}) threads {threads}; "
                f"sequence KV {seq_bytes:.0f} B, tiers {tiers:.0f} B vs prefix cache {prefix:.0f} B")
        if (slots_ok and kv_ok) or time.time() > deadline:
            break
        time.sleep(0.25)
    if slots_ok:
        admitted, statuses = slot_probe(d.http_port)
        if admitted != SLOT_LIMIT:
            slots_ok = False
            note += f"; slot probe: {admitted}/{SLOT_LIMIT} admitted ({sorted(set(map(str, statuses)))})"
        else:
            note += f"; slot probe {admitted}/{SLOT_LIMIT}"
    return slots_ok, kv_ok, note


class Harness:
    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="tq-chaos-")
        os.chmod(self.work, 0o700)
        src = pathlib.Path(args.binary)
        self.binary = os.path.join(self.work, "tqserve")  # build/ may be rebuilt while we run: run a copy
        shutil.copy2(src, self.binary)
        self.model = args.model
        self.threads = args.threads
        self.rows = []
        self.daemons = []

    def cold_dir(self, name):
        p = os.path.join(self.work, f"kv-{name}")
        return p

    def daemon(self, name, args=(), wrapper=None, cold_dir=None):
        d = Daemon(self, name, cold_dir if cold_dir is not None else self.cold_dir(name), args, wrapper)
        self.daemons.append(d)
        return d

    def reap(self):
        """A fault that failed half way may leave its daemon running: kill it."""
        for d in self.daemons:
            if d.alive():
                d.proc.kill()
                d.proc.wait()
        self.daemons = []

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    # -------------------------------------------------------------- reference
    def build_reference(self):
        d = self.daemon("reference").start()
        try:
            self.reqs = make_requests(d.http_port, self.args.requests, self.args.max_tokens)
            t0 = time.time()
            results = run_load(lambda: d.http_port, self.reqs, 1)
            bad = [r for r in results if not r.ok]
            if bad:
                raise RuntimeError(f"reference run: {len(bad)} request(s) failed: {bad[0].error} {bad[0].message}")
            self.ref = {r.rid: r for r in results}
            ptoks = sum(len(q.prompt) for q in self.reqs)
            lens = [len(q.prompt) for q in self.reqs]
            self.log(f"reference: {len(results)} requests at concurrency 1, prompts {min(lens)}"
                     f"-{max(lens)} tokens ({ptoks} in all), {self.args.max_tokens} "
                     f"tokens each, {time.time() - t0:.0f} s")
        finally:
            d.stop()

    # -------------------------------------------------------------- common frame of a fault
    def begin(self, row, d):
        """After start: one warm-up request and the slot probe, then the baselines."""
        stream(d.http_port, Request(-1, "Hello there", 4))
        slot_probe(d.http_port)
        time.sleep(0.5)
        row.base_fds = self.wait_fds(d)
        row.rss_before = d.proc_status()[0]
        row.sampler = RssSampler(d, 0.5)
        row.sampler.start()

    def rebase(self, row, d):
        """A restarted daemon is a new process: warm it up and take its descriptor baseline before the load."""
        stream(d.http_port, Request(-1, "Hello there", 4))
        slot_probe(d.http_port)
        time.sleep(0.5)
        row.base_fds = self.wait_fds(d)
        row.sampler.d = d

    def wait_fds(self, d, quiet=1.0):
        """Descriptors once they stop changing (closing connections)."""
        last, since = None, time.time()
        deadline = time.time() + 10
        while time.time() < deadline:
            fds = d.proc_status()[2]
            if fds != last:
                last, since = fds, time.time()
            elif time.time() - since >= quiet:
                break
            time.sleep(0.1)
        return last

    def end(self, row, d, settle_timeout=30):
        if not d.alive():
            row.crashes += 1
            row.failures.append(f"daemon exited with {d.proc.returncode}: {tail_of(d.logs())}")
            row.rss = row.sampler.stop()
            return
        row.slots_ok, row.kv_ok, row.settle_note = settle(d, row.base_fds, settle_timeout)
        row.rss = row.sampler.stop()
        row.rss_after = d.proc_status()[0]
        rc, _ = d.stop()
        if rc != 0:
            row.crashes += 1
            row.failures.append(f"exit code {rc} on SIGTERM: {tail_of(d.logs())}")

    def load(self, d, clients=None, reqs=None, **kw):
        return run_load(lambda: d.http_port, reqs or self.reqs, clients or self.args.clients, **kw)

    # -------------------------------------------------------------- faults
    def fault_none(self):
        """Control: the same load with no fault."""
        row = Row("none (control)")
        d = self.daemon("control").start()
        self.begin(row, d)
        row.add(self.load(d), self.ref, self.args)
        self.end(row, d)
        return row

    def fault_kill9(self):
        """kill -9 while cold pages are being written; restart on the same cold dir; rerun."""
        row = Row("kill -9 during cold writes")
        cold = self.cold_dir("kill9")
        kills = self.args.kills
        dropped_total, recovered = 0, []
        for k in range(kills):
            d = self.daemon(f"kill9-run{k + 1}", cold_dir=cold).start()
            if k == 0:
                self.begin(row, d)
            else:
                row.sampler.d = d
            writes0 = m(d.metrics(), "tqserve_kv_tier_writes_total", 'tier="cold"')
            done = []
            killed_at = [None]
            stop = threading.Event()
            target = max(2, len(self.reqs) * (k + 1) // (3 * kills))  # kill after this many finished

            def on_result(res, done=done):
                done.append(res)

            def killer(d=d):
                while len(done) < target and d.alive():
                    time.sleep(0.02)
                # A finished request's RAM pages reach the cold tier through the prefix cache's demotion, which
                # starts when it finishes: let a few hundred writes land first (else a kill at the very start of
                # the demotion leaves nothing a restart can reuse and the rerun cannot show a prefix hit), then
                # wait for a burst of cold writes to be in flight, and kill.
                w = m(d.metrics(), "tqserve_kv_tier_writes_total", 'tier="cold"')
                t_end = time.time() + 10
                while time.time() < t_end and d.alive():
                    if m(d.metrics(), "tqserve_kv_tier_writes_total", 'tier="cold"') >= w + 256:
                        break
                    time.sleep(0.005)
                w = m(d.metrics(), "tqserve_kv_tier_writes_total", 'tier="cold"')
                t_end = time.time() + 5
                while time.time() < t_end:
                    w2 = m(d.metrics(), "tqserve_kv_tier_writes_total", 'tier="cold"')
                    if w2 > w:
                        break
                    time.sleep(0.005)
                killed_at[0] = (time.time(), m(d.metrics(), "tqserve_kv_tier_writes_total", 'tier="cold"') - writes0)
                d.kill9()
                stop.set()

            kt = threading.Thread(target=killer)
            kt.start()
            results = self.load(d, stop=stop, on_result=on_result)
            kt.join()
            for r in results:  # a request that ended after the kill was cut by the kill itself
                if r.error and r.t1 >= killed_at[0][0] - 0.05:
                    r.expected = True
            row.add(results, self.ref, self.args)
            row.notes.append(f"kill {k + 1} after {len(done)} done, {killed_at[0][1]:.0f} cold writes")
            # restart on the same directory: it must start, dropping torn pages, and recover the rest
            d2 = self.daemon(f"kill9-restart{k + 1}", cold_dir=cold).start()
            logs = d2.logs()
            dropped = parse_int_after(logs, "(", " dropped as corrupt")
            pages = parse_int_before(logs, " pages in ")
            dropped_total += dropped or 0
            recovered.append(pages)
            mt = d2.metrics()
            if k == kills - 1:
                self.rebase(row, d2)
                res = self.load(d2)
                row.add(res, self.ref, self.args)
                mt = d2.metrics()
                hits = m(mt, "tqserve_kv_prefix_cache_hit_tokens_total")
                faults = m(mt, "tqserve_kv_read_faults_total")
                cached = sum(1 for r in res if r.cached > 0)
                row.notes.append(f"restarts recovered {recovered} cold pages, dropped {dropped_total} torn; rerun: "
                                 f"{cached} requests served {hits:.0f} cached tokens, {faults:.0f} KV read faults")
                if hits == 0:
                    row.failures.append("fault not exercised: no prefix-cache hit after restart")
                if killed_at[0][1] <= 0:
                    row.failures.append("fault not exercised: no cold write before the kill")
                self.end(row, d2)
            else:
                d2.stop()
        return row

    def fault_disk_full(self):
        row = Row(f"disk full (tmpfs {self.args.tmpfs})")
        d = self.daemon("diskfull", wrapper=f"tmpfs:{self.args.tmpfs}").start()
        self.begin(row, d)
        row.add(self.load(d), self.ref, self.args)
        mt = d.metrics()
        nospace = m(mt, "tqserve_kv_tier_errors_total", 'tier="cold",kind="no_space"')
        rehomed = m(mt, "tqserve_kv_rehomed_pages_total")
        fallback = m(mt, "tqserve_kv_fallback_pages_total")
        row.notes.append(f"cold no_space errors {nospace:.0f}, pages re-homed to RAM {rehomed:.0f}, "
                         f"placed in RAM by fallback {fallback:.0f}")
        if nospace == 0:
            row.failures.append("fault not exercised: the tmpfs never filled (no no_space error)")
        self.end(row, d)
        return row

    def fault_seccomp(self):
        row = Row("io_uring denied (seccomp)")
        d = self.daemon("seccomp", args=["--kv-io-backend", "auto"], wrapper="seccomp").start()
        self.begin(row, d)
        logs = d.logs()
        line = next((ln for ln in logs.splitlines() if "cold tier io backend" in ln), "")
        row.notes.append(line.split("  ", 1)[-1].strip()[:120])
        if "pread (auto; io_uring unavailable" not in line:
            row.failures.append(f"fault not exercised or not handled: backend line {line!r}")
        with open(f"/proc/{d.pid}/status") as f:
            if not any(ln.startswith("Seccomp:") and ln.split()[1] == "2" for ln in f):
                row.failures.append("the daemon runs without a seccomp filter")
        row.add(self.load(d), self.ref, self.args)
        if m(d.metrics(), "tqserve_kv_tier_writes_total", 'tier="cold"') == 0:
            row.failures.append("no cold writes through pread")
        self.end(row, d)
        return row

    def fault_slow_disk(self):
        us = self.args.latency_us
        row = Row(f"slow disk ({us / 1000:g} ms per I/O)")
        d = self.daemon("slowdisk", args=["--kv-io-latency-us", str(us), "--kv-cold-cache-bytes", "2MiB"]).start()
        self.begin(row, d)
        row.add(self.load(d), self.ref, self.args)
        mt = d.metrics()
        n = m(mt, "tqserve_kv_tier_read_latency_seconds_count", 'tier="cold"')
        s = m(mt, "tqserve_kv_tier_read_latency_seconds_sum", 'tier="cold"')
        mean_ms = s / n * 1000 if n else 0
        row.notes.append(f"{n:.0f} cold reads, mean latency {mean_ms:.1f} ms; prefetch late "
                         f"{m(mt, 'tqserve_kv_prefetch_late_total'):.0f}, stall "
                         f"{m(mt, 'tqserve_kv_prefetch_stall_seconds_total'):.1f} s")
        if n == 0 or mean_ms < us / 1000:
            row.failures.append(f"fault not exercised: {n:.0f} cold reads, mean {mean_ms:.2f} ms < {us / 1000:g} ms")
        self.end(row, d)
        return row

    def fault_disconnect(self):
        row = Row("client disconnect storm")
        d = self.daemon("disconnect").start()
        self.begin(row, d)
        n_storm = self.args.storm
        storm_conc = max(4, self.args.clients // 2)
        rng = random.Random(11)
        plan = [(rng.choice(self.reqs), rng.choice([0, 0, 1, 2, 4])) for _ in range(n_storm)]
        cut = {"before": 0, "mid": 0, "finished": 0}
        lock = threading.Lock()
        it = iter(plan)
        stop = threading.Event()

        def storm():
            while not stop.is_set():
                with lock:
                    item = next(it, None)
                if item is None:
                    return
                req, after = item
                s = socket.create_connection(("127.0.0.1", d.http_port), timeout=60)
                try:
                    body = req.body(max_tokens=256)
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body) + body)
                    chunks, buf = 0, b""
                    while chunks < after:
                        data = s.recv(4096)
                        if not data:
                            break
                        buf += data
                        chunks = buf.count(b"data: {")
                    if after > 0 and rng.random() < 0.5:  # half of them reset the connection
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    with lock:
                        cut["before" if after == 0 else "mid"] += 1
                except OSError:
                    pass
                finally:
                    s.close()

        ts = [threading.Thread(target=storm) for _ in range(storm_conc)]
        for t in ts:
            t.start()
        row.add(self.load(d), self.ref, self.args)
        for t in ts:
            t.join()
        mt = d.metrics()
        aborted = outcome_count(mt, "aborted")
        row.notes.append(f"{n_storm} storm clients hung up ({cut['before']} right after sending, {cut['mid']} "
                         f"after 1-4 chunks, half with RST); server counted {aborted:.0f} aborted")
        if aborted == 0:
            row.failures.append("fault not exercised: no request counted aborted")
        self.end(row, d)
        return row

    def fault_slow_readers(self):
        to = self.args.send_timeout
        row = Row(f"slow readers (send timeout {to:g} s)")
        d = self.daemon("slowread", args=["--send-timeout", str(to)]).start()
        self.begin(row, d)
        n_slow = self.args.slow
        socks, lock = [], threading.Lock()
        long_req = max(self.reqs, key=lambda q: -len(q.prompt))  # the shortest prompt: room for a long output
        slow_tokens = CTX - len(long_req.prompt) - 8

        def slow_client(i):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", d.http_port))
            body = long_req.body(max_tokens=slow_tokens)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            with lock:
                socks.append(s)

        for i in range(n_slow):
            slow_client(i)
        t_slow = time.time()
        stop_trickle = threading.Event()

        def trickle():  # half the slow clients read 64 bytes every 2 s, the others nothing at all
            while not stop_trickle.is_set():
                for s in socks[::2]:
                    try:
                        s.setblocking(False)
                        s.recv(64)
                    except OSError:
                        pass
                stop_trickle.wait(2)

        tt = threading.Thread(target=trickle)
        tt.start()
        row.add(self.load(d), self.ref, self.args)
        # the slow clients are still connected: the server must have let go of them by now (or soon)
        freed_after = None
        deadline = time.time() + to + max(30, 0)
        while time.time() < deadline:
            mt = d.metrics()
            if m(mt, "tqserve_num_requests_running") == 0 and m(mt, "tqserve_kv_cache_bytes") == 0:
                freed_after = time.time() - t_slow
                break
            time.sleep(0.25)
        stop_trickle.set()
        tt.join()
        closed = 0
        for s in socks:  # did the server close them? drain what is buffered and look for EOF/RST
            s.setblocking(True)
            s.settimeout(0.2)
            try:
                while True:
                    data = s.recv(1 << 16)
                    if not data:
                        closed += 1
                        break
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        mt = d.metrics()
        aborted = outcome_count(mt, "aborted")
        row.notes.append(f"{n_slow} slow readers ({(n_slow + 1) // 2} trickling 32 B/s, the rest stalled), "
                         f"{slow_tokens} tokens asked each: server freed them "
                         f"{'after %.1f s' % freed_after if freed_after else 'never'} with the clients still "
                         f"connected, {closed} connections closed by the server, {aborted:.0f} aborted")
        if freed_after is None:
            row.failures.append("slow readers still hold their slots and KV")
        if closed < n_slow // 2:
            row.failures.append(f"only {closed} of {n_slow} stalled connections closed by the server")
        for s in socks:
            s.close()
        self.end(row, d)
        return row

    def fault_sigterm(self):
        drain = self.args.drain_timeout
        row = Row(f"SIGTERM mid-stream (drain {drain:g} s)")
        cold = self.cold_dir("sigterm")
        d = self.daemon("sigterm", cold_dir=cold, args=["--drain-timeout", str(drain)]).start()
        self.begin(row, d)
        done = []
        term = {}

        def terminator():
            while len(done) < max(1, len(self.reqs) // 4):
                time.sleep(0.02)
            term["t"] = time.time()
            mt = d.metrics()
            term["in_flight"] = m(mt, "tqserve_num_requests_running") + m(mt, "tqserve_num_requests_waiting")
            d.proc.send_signal(signal.SIGTERM)
            try:
                d.proc.wait(drain + 30)
            except subprocess.TimeoutExpired:
                pass
            term["exit"] = time.time()
            term["rc"] = d.proc.poll()

        tt = threading.Thread(target=terminator)
        tt.start()
        results = self.load(d, on_result=done.append)
        tt.join()
        for r in results:
            if r.error and r.t0 >= term["t"]:
                # sent after SIGTERM: a 503 while draining is clear; after the exit nothing listens
                r.expected = r.error.startswith("http 503") or r.error == "ConnectionRefusedError"
        row.add(results, self.ref, self.args)
        exit_s = term["exit"] - term["t"]
        in_flight_ok = sum(1 for r in results if r.t0 < term["t"] and r.ok)
        in_flight_err = sum(1 for r in results if r.t0 < term["t"] and r.t1 > term["t"] and not r.ok)
        row.notes.append(f"SIGTERM with {term['in_flight']:.0f} in flight: exit {term['rc']} after {exit_s:.1f} s; "
                         f"{in_flight_ok} streams begun before it completed, {in_flight_err} ended with an error")
        if term["rc"] != 0:
            row.crashes += 1
            row.failures.append(f"exit code {term['rc']} after SIGTERM: {tail_of(d.logs())}")
        if exit_s > drain + 8:
            row.failures.append(f"exit took {exit_s:.1f} s, past the drain timeout {drain:g} s")
        d.log.close()
        # restart on the same cold dir: correct outputs from the pages the first run left
        d2 = self.daemon("sigterm-restart", cold_dir=cold).start()
        self.rebase(row, d2)
        res = self.load(d2)
        row.add(res, self.ref, self.args)
        hits = m(d2.metrics(), "tqserve_kv_prefix_cache_hit_tokens_total")
        row.notes.append(f"restart: {hits:.0f} cached prompt tokens served")
        if hits == 0:
            row.failures.append("restart after SIGTERM served nothing from the prefix cache")
        self.end(row, d2)
        return row

    def fault_kv_budget(self):
        b = self.args.kv_budget
        row = Row(f"KV budget exhausted (hot+warm {b}+{b}, no cold)")
        d = self.daemon("kvbudget", cold_dir="", args=["--kv-hot-bytes", b, "--kv-warm-bytes", b])
        d.start()
        self.begin(row, d)
        peak = {"waiting": 0, "running": 0}
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                try:
                    mt = d.metrics()
                    peak["waiting"] = max(peak["waiting"], m(mt, "tqserve_num_requests_waiting"))
                    peak["running"] = max(peak["running"], m(mt, "tqserve_num_requests_running"))
                except OSError:
                    pass
                stop.wait(0.25)

        wt = threading.Thread(target=watch)
        wt.start()
        row.add(self.load(d), self.ref, self.args)
        stop.set()
        wt.join()
        mt = d.metrics()
        pre = m(mt, "tqserve_preemptions_total")
        over = sum(m(mt, "tqserve_kv_tier_errors_total", f'tier="{t}",kind="over_budget"') for t in ("hot", "warm"))
        row.notes.append(f"peak running {peak['running']:.0f}, waiting {peak['waiting']:.0f}; preemptions {pre:.0f}; "
                         f"over_budget errors {over:.0f}")
        if peak["waiting"] == 0 and pre == 0:
            row.failures.append("fault not exercised: nothing waited and nothing was preempted")
        self.end(row, d)
        return row

    def fault_drill(self):
        """Not a fault of the daemon but of its KV on purpose: every head in tq2 (2-bit codes) against the default
        preset's reference. The comparison must call such outputs wrong, or it could not see damaged pages either."""
        row = Row("drill: KV damaged on purpose (uniform:tq2)")
        row.expect_wrong = True
        d = self.daemon("drill", args=["--kv-preset", "uniform:tq2"]).start()
        self.begin(row, d)
        row.add(self.load(d), self.ref, self.args)
        row.notes.append(f"{len(row.wrong_reqs)} of {row.requests} requests flagged wrong, {row.wrong} tokens")
        self.end(row, d)
        return row

    # -------------------------------------------------------------- soak
    def soak(self, minutes):
        row = Row(f"soak {minutes:g} min")
        d = self.daemon("soak").start()
        self.begin(row, d)
        row.sampler.every = self.args.soak_sample
        row.sampler.with_kv = True
        t_end = time.time() + minutes * 60
        rng = random.Random(3)
        lock = threading.Lock()
        results = []

        def worker(i):
            while time.time() < t_end:
                req = rng.choice(self.reqs)
                res = stream(d.http_port, req)
                with lock:
                    results.append(res)

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(self.args.clients)]
        t0 = time.time()
        for t in ts:
            t.start()
        last = time.time()
        while any(t.is_alive() for t in ts):
            time.sleep(1)
            if time.time() - last >= 60:
                last = time.time()
                rss = row.sampler.samples[-1][1] if row.sampler.samples else 0
                self.log(f"soak: {(time.time() - t0) / 60:.0f} min, {len(results)} requests, RSS {rss:.0f} MiB")
        for t in ts:
            t.join()
        elapsed = time.time() - t0
        row.add(results, self.ref, self.args)
        self.end(row, d)
        s = row.rss
        half = [x for x in s if x[0] >= s[-1][0] / 2] if s else []
        toks = sum(len(r.tokens) for r in results)
        row.soak = dict(seconds=elapsed, requests=len(results), tokens=toks,
                        slope=slope_per_hour(s), slope2=slope_per_hour(half),
                        first=s[0][1] if s else 0, last=s[-1][1] if s else 0,
                        max1=max((r for t, r in s if t < s[-1][0] / 2), default=0),
                        max2=max((r for _, r in half), default=0),
                        by_min=[r for t, r in s if abs(t / 60 - round(t / 60)) < self.args.soak_sample / 120])
        sk = row.soak
        # The KV arenas and the cold cache are RAM the daemon is meant to fill (the prefix cache keeps pages up to
        # its budget): RSS net of their high-water marks is what must stay flat.
        kv = row.sampler.kv
        net = [(t, rss - tiers - cold) for t, rss, tiers, cold, _ in kv]
        net2 = [x for x in net if x[0] >= net[-1][0] / 2] if net else []

        def on_minute(t):  # the samples nearest each whole minute
            return abs(t / 60 - round(t / 60)) < self.args.soak_sample / 120

        sk.update(net_slope=slope_per_hour(net), net_slope2=slope_per_hour(net2),
                  net_first=net2[0][1] if net2 else 0, net_last=net[-1][1] if net else 0,
                  tiers_last=kv[-1][2] if kv else 0, cold_last=kv[-1][3] if kv else 0,
                  prefix_by_min=[p for t, _, _, _, p in kv if on_minute(t)],
                  net_by_min=[r for t, r in net if on_minute(t)])
        if sk["net_slope2"] > self.args.rss_slope_limit:
            row.failures.append(f"RSS net of the KV arenas and cold cache grows {sk['net_slope2']:+.1f} MiB/h over "
                                f"the second half (limit {self.args.rss_slope_limit:g})")
        return row


def tail_of(text, n=6):
    return " | ".join(text.strip().splitlines()[-n:])[-800:]


def parse_int_after(text, left, right):
    for line in text.splitlines():
        if right in line:
            seg = line.split(right)[0].rsplit(left, 1)[-1]
            try:
                return int(seg)
            except ValueError:
                return None
    return None


def parse_int_before(text, right):
    for line in text.splitlines():
        if right in line and "cold tier:" in line:
            try:
                return int(line.split(right)[0].rsplit(" ", 1)[-1])
            except ValueError:
                return None
    return None


# ----------------------------------------------------------------------------------------------------------------
# Output

def fmt_errors(errs):
    if not errs:
        return "-"
    return ", ".join(f"{k} x{v}" for k, v in sorted(errs.items(), key=lambda kv: -kv[1]))


def print_table(rows, args, out=sys.stdout):
    p = lambda s="": print(s, file=out)  # noqa: E731
    p()
    p(f"chaos: {args.clients} clients, {args.requests} requests per run, {args.max_tokens} tokens each (greedy, "
      f"ignore_eos), prompts 4-~1500 tokens; reference at concurrency 1; "
      f"near-tie {args.tie_nats:g} nats, "
      f"logprob drift limit {args.lp_nats:g} nats")
    p("| fault | reqs | ok | errors by kind | unclear | wrong tok | exact / near-tie (unverified tok) | max dlogp "
      "| crashes | slots back | KV back | RSS MiB before/after | RSS slope MiB/h | s |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        yn = lambda v: "-" if v is None else ("yes" if v else "NO")  # noqa: E731
        p(f"| {r.name} | {r.requests} | {r.ok_count} | {fmt_errors(r.errors)} | {len(r.unclear)} | {r.wrong} | "
          f"{r.exact} / {r.ties} ({r.unverified}) | {r.max_dev:.3f} | {r.crashes} | {yn(r.slots_ok)} | "
          f"{yn(r.kv_ok)} | {r.rss_before:.0f} / {r.rss_after:.0f} | {slope_per_hour(r.rss):+.0f} | "
          f"{r.seconds:.0f} |")
    p()
    for r in rows:
        p(f"- {r.name}: " + "; ".join(r.notes + ([r.settle_note] if r.settle_note else [])))
    failed = [(r.name, f) for r in rows for f in r.verdict()]
    p()
    if failed:
        p("FAILED:")
        for name, f in failed:
            p(f"  {name}: {f}")
    else:
        p("all targets met: 0 crashes, 0 wrong tokens, every slot and KV byte returned, every error a clear one")
    return not failed


FAULTS = ["none", "kill9", "disk_full", "seccomp", "slow_disk", "disconnect", "slow_readers", "sigterm",
          "kv_budget"]
EXTRA = ["drill"]  # run only when named in --faults


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--exec-seccomp":
        exec_seccomp(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true", help="CI mode: 8 clients, 12 requests, 16 tokens each")
    ap.add_argument("--soak", type=float, metavar="MINUTES", help="continuous load for this long; RSS slope")
    ap.add_argument("--determinism", action="store_true",
                    help="run the fault-free load twice at concurrency 1 and twice at --clients; compare")
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help="comma-separated, from " + ",".join(FAULTS + EXTRA) + " (drill: the comparison's own check)")
    build_dir = pathlib.Path(os.environ.get("TQSERVE_BUILD_DIR", ROOT / "build"))
    ap.add_argument("--binary", default=os.environ.get("TQ_CHAOS_BINARY", str(build_dir / "tqserve")))
    ap.add_argument("--model", default=os.path.join(os.environ.get("TQ_MODEL_DIR",
                                                                   os.path.expanduser("~/.cache/tqserve/models")),
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clients", type=int)
    ap.add_argument("--requests", type=int)
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--kills", type=int, help="kill -9 / restart cycles")
    ap.add_argument("--tmpfs", default="3m", help="size of the tmpfs under the cold dir for the disk-full fault")
    ap.add_argument("--latency-us", type=int, default=5000, help="injected latency of every cold read and write")
    ap.add_argument("--storm", type=int, help="clients of the disconnect storm")
    ap.add_argument("--slow", type=int, help="slow readers")
    ap.add_argument("--send-timeout", type=float, default=3)
    ap.add_argument("--drain-timeout", type=float, default=20)
    ap.add_argument("--kv-budget", default="12MiB", help="hot and warm budgets of the KV-budget fault")
    ap.add_argument("--tie-nats", type=float, default=0.0,
                    help="a divergence counts as a near-tie when the two tokens are within this in both runs "
                         "(default 0: outputs must equal the reference exactly)")
    ap.add_argument("--lp-nats", type=float, default=0.0,
                    help="a chosen token's log-probability may move this much before the first divergence "
                         "(default 0)")
    ap.add_argument("--soak-sample", type=float, default=5, help="seconds between RSS samples in the soak")
    ap.add_argument("--rss-slope-limit", type=float, default=30,
                    help="soak fails when RSS grows faster than this (MiB/h) over its second half")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, cold dirs)")
    args = ap.parse_args()
    args.prefix_note = "1 GiB by default"
    short = args.short
    args.clients = args.clients or (8 if short else 32)
    args.requests = args.requests or (12 if short else 64)
    args.max_tokens = args.max_tokens or (16 if short else 48)
    args.kills = args.kills or (1 if short else 2)
    args.storm = args.storm or (16 if short else 64)
    args.slow = args.slow or (4 if short else 8)
    if not os.path.exists(args.model):
        print(f"chaos: {args.model} is absent (run scripts/fetch-model.sh); skipping")
        return SKIP
    if not os.path.exists(args.binary):
        print(f"chaos: no tqserve binary at {args.binary} (build first)", file=sys.stderr)
        return 2
    faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in faults if f not in FAULTS + EXTRA]
    if unknown:
        ap.error(f"unknown fault(s) {unknown}; known: {FAULTS}")

    h = Harness(args)
    t_all = time.time()
    ok = True
    try:
        h.log(f"work dir {h.work}; binary {args.binary} (copied); {os.cpu_count()} cores")
        h.build_reference()
        if args.determinism:
            return determinism(h)
        rows = []
        if args.soak:
            runs = [lambda: h.soak(args.soak)]
        else:
            runs = [getattr(h, "fault_" + f) for f in faults]
        for run in runs:
            t0 = time.time()
            try:
                row = run()
            except Exception as e:  # a harness or start-up failure is a failed row, not a lost table
                row = Row(getattr(run, "__name__", "fault").replace("fault_", ""))
                row.failures.append(f"{type(e).__name__}: {str(e)[-1500:]}")
            h.reap()
            row.seconds = time.time() - t0
            rows.append(row)
            h.log(f"{row.name}: {row.requests} requests, {row.ok_count} ok, {row.wrong} wrong tokens, "
                  f"{'FAILED: ' + '; '.join(row.verdict()) if row.verdict() else 'ok'} ({row.seconds:.0f} s)")
        ok = print_table(rows, args)
        if args.soak:
            print_soak(rows[0], args)
        print(f"\ntotal {time.time() - t_all:.0f} s")
        if args.json:
            with open(args.json, "w") as f:
                json.dump([row_json(r) for r in rows], f, indent=1)
    finally:
        h.reap()
        if args.keep:
            print(f"kept {h.work}")
        else:
            shutil.rmtree(h.work, ignore_errors=True)
    return 0 if ok else 1


def print_soak(row, args):
    sk = getattr(row, "soak", None)
    if not sk:
        return
    print(f"\nsoak: {sk['seconds']:.0f} s, {args.clients} clients, {sk['requests']} requests, "
          f"{row.ok_count} ok, {sum(row.errors.values())} errors, {row.wrong} wrong tokens, "
          f"{sk['tokens'] / sk['seconds']:.1f} output tok/s")
    print(f"RSS (MiB): {sk['first']:.1f} before the load, {sk['last']:.1f} at the end, max {sk['max1']:.1f} in the "
          f"first half and {sk['max2']:.1f} in the second; slope {sk['slope']:+.1f} MiB/h overall, "
          f"{sk['slope2']:+.1f} MiB/h over the second half ({len(row.rss)} samples every {args.soak_sample:g} s)")
    print("RSS by minute (MiB): " + " ".join(f"{r:.0f}" for r in sk["by_min"]))
    print(f"KV RAM the daemon fills on purpose, high-water at the end: RAM tiers {sk['tiers_last']:.1f} MiB (the "
          f"prefix cache's pages; budget {args.prefix_note}), cold cache {sk['cold_last']:.1f} MiB")
    print("prefix cache by minute (MiB): " + " ".join(f"{r:.0f}" for r in sk["prefix_by_min"]))
    print(f"RSS net of those: {sk['net_first']:.1f} MiB at the middle, {sk['net_last']:.1f} at the end; slope "
          f"{sk['net_slope']:+.1f} MiB/h overall, {sk['net_slope2']:+.1f} MiB/h over the second half")
    print("RSS net by minute (MiB): " + " ".join(f"{r:.0f}" for r in sk["net_by_min"]))


def row_json(r):
    return dict(name=r.name, requests=r.requests, ok=r.ok_count, errors=r.errors, unclear=r.unclear,
                wrong_tokens=r.wrong, wrong_requests=r.wrong_reqs, exact=r.exact, near_ties=r.ties,
                unverified_tokens=r.unverified, compared_tokens=r.compared_tokens, max_logprob_drift=r.max_dev,
                crashes=r.crashes, slots_back=r.slots_ok, kv_back=r.kv_ok, settle=r.settle_note,
                rss_before=r.rss_before, rss_after=r.rss_after, rss_slope_mib_per_hour=slope_per_hour(r.rss),
                rss=r.rss, notes=r.notes, failures=r.verdict(), seconds=r.seconds, soak=getattr(r, "soak", None))


def determinism(h):
    """Does a fault-free run reproduce itself? Two fresh daemons at concurrency 1, two at --clients."""
    args = h.args
    runs = {}
    for name, conc in (("c1-b", 1), (f"c{args.clients}-a", args.clients), (f"c{args.clients}-b", args.clients)):
        d = h.daemon("det-" + name).start()
        runs[name] = {r.rid: r for r in run_load(lambda: d.http_port, h.reqs, conc)}
        d.stop()
    runs["c1-a"] = h.ref
    names = ["c1-a", "c1-b", f"c{args.clients}-a", f"c{args.clients}-b"]
    print("\nrun pairs: requests identical token for token / diverged (at near-ties within --tie-nats, others); "
          "first divergence positions; max |dlogprob| before divergence")
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            a, b = runs[names[i]], runs[names[j]]
            same = ties = other = 0
            pos, dev, margins = [], 0.0, []
            for rid in a:
                st, p, _, _, dv = compare(b[rid], a[rid], args.tie_nats, 1e9)
                dev = max(dev, dv)
                if st == "exact":
                    same += 1
                else:
                    pos.append(p)
                    rt = a[rid].top[p] or {}
                    tok_a, tok_b = a[rid].tokens[p], b[rid].tokens[p]
                    margins.append(rt.get(tok_a, 0) - rt.get(tok_b, float("nan")))
                    ties += st == "tie"
                    other += st != "tie"
            print(f"  {names[i]} vs {names[j]}: {same}/{len(a)} identical, {ties} near-tie, {other} other; "
                  f"positions {sorted(pos)}; margins at divergence (nats) "
                  f"{[round(x, 4) for x in sorted(margins)]}; max |dlogp| {dev:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
