#!/usr/bin/env python3
"""tqserve against llama.cpp at real model sizes: prompt processing and decode at depth, per KV type, on the same
GGUF files and threads, with the same statistic on both sides (the median of the repetitions, and their range),
and the peak RSS of each process. Prints a table; --json writes every row, --plot a chart.

  python3 bench/models/vs_llama.py --model M.gguf [--model M2.gguf ...] --llama-bench LLAMA_BENCH
      [--threads 2] [--prompt 512] [--depths 0,4096,16384,32768] [--decode 32] [--reps 5]
      [--ours f16,int8,tq4,tq3,default] [--theirs f16,q8_0,q4_0] [--tqserve build/tqserve] [--json OUT] [--plot PNG]

Files with real shapes: bench/models/make_shape.py. llama-bench: scripts/build-llama-server.sh builds it beside
llama-server.

What runs, per model:
- prompt: llama-bench `-p PROMPT -n 0 -r REPS` (f16 KV) and `tqserve bench decode --prompt PROMPT --ctx 0`
  (f16 KV): one batch of PROMPT tokens into an empty context, REPS times.
- decode at each depth D, per KV type: llama-bench `-p 0 -n DECODE -d D -r REPS -ctk T -ctv T` (it fills D tokens
  once, restores that state before each repetition and times DECODE tokens) and
  `tqserve bench decode --ctx D --steps DECODE --rounds REPS --formats T` (fills D tokens once; each round
  decodes DECODE more, so round r starts at D + r * DECODE: at most REPS * DECODE tokens deeper than llama.cpp).
  Ours: every layer in the type, or "default", the server's default preset (docs/kv.md). Our context is filled by
  the forward pass up to --prefill-max tokens and beyond that with seeded random K/V rows stored as a prefill
  stores them (`bench decode --fill random`: the decode kernels' work does not depend on the values; measured
  equal within noise at 4096 on the 1B shape, 9.7 vs 10.0 tok/s f16 and 10.8 vs 10.9 tq4), so that 16k-32k depths
  of a 1B-8B model take minutes here; llama-bench always runs its own prefill (untimed on both sides).
- llama.cpp at its best: f16 KV runs with flash attention off and on, and the faster counts (on this class of CPU
  off is faster at depth); quantized V needs flash attention, so q8_0 and q4_0 run with it on.
- one process per (engine, type, depth), so that its peak RSS (wait4's ru_maxrss, weights mapped and touched
  included on both sides) is that configuration's alone.
The engines alternate configuration by configuration, so that machine noise hits both alike.

Ratios printed: each of our rows against llama.cpp's f16 row at the same depth, and for the compressed types
against llama.cpp's q8_0. Exit 1 when a run fails.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_measured(cmd):
    """Runs cmd; returns (stdout, peak RSS MiB). Raises on a non-zero exit, with its stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {err.read().decode()[-2000:]}")
        return out.read().decode(), usage.ru_maxrss / 1024.0


def summary(samples):
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples)}


def llama(a, model, *, prompt=0, decode=0, depth=0, kv="f16", fa=0):
    cmd = [a.llama_bench, "-m", model, "-t", str(a.threads), "-p", str(prompt), "-n", str(decode), "-d", str(depth),
           "-r", str(a.reps), "-ctk", kv, "-ctv", kv, "-fa", str(fa), "-o", "json"]
    out, rss = run_measured(cmd)
    rows = [r for r in json.loads(out) if r["n_prompt"] == prompt and r["n_gen"] == decode]
    if len(rows) != 1:
        raise RuntimeError(f"llama-bench printed no row for pp {prompt} tg {decode}: {out[:500]}")
    return {**summary(rows[0]["samples_ts"]), "rss_mib": rss, "flash_attn": fa}


def llama_best(a, model, kv, **kw):
    """llama.cpp's best configuration for a KV type: f16 tries flash attention off and on, quantized V needs on."""
    tries = [llama(a, model, kv=kv, fa=fa, **kw) for fa in ((0, 1) if kv == "f16" else (1,))]
    return max(tries, key=lambda r: r["median"])


def ours(a, model, fmt, *, depth=0, prompt=0):
    cmd = [a.tqserve, "bench", "decode", "-m", model, "-t", str(a.threads), "--ctx", str(depth), "--formats", fmt,
           "--steps", str(1 if prompt else a.decode), "--rounds", str(a.reps), "--json",
           "--fill", "random" if depth > a.prefill_max else "prefill"]
    if prompt:
        cmd += ["--prompt", str(prompt)]
    out, rss = run_measured(cmd)
    rows = json.loads(out)
    row = next(r for r in rows if r["phase"] == ("prompt" if prompt else "decode"))
    return {**summary(row["rounds_tokens_per_second"]), "rss_mib": rss,
            "kv_bits_per_value": rows[-1].get("kv_bits_per_value")}


def measure(a, model):
    name = os.path.basename(model)
    rows = []

    def add(engine, phase, kv, depth, r):
        rows.append({"model": name, "engine": engine, "phase": phase, "kv": kv, "depth": depth, **r})
        print(f"{name} {engine:9} {phase:6} {kv:8} d{depth:<6} {r['median']:8.2f} tok/s "
              f"[{r['min']:.2f}-{r['max']:.2f}] {r['rss_mib']:7.0f} MiB", file=sys.stderr, flush=True)

    if a.prompt:
        add("llama.cpp", "prompt", "f16", 0, llama_best(a, model, "f16", prompt=a.prompt))
        add("tqserve", "prompt", "f16", 0, ours(a, model, "f16", prompt=a.prompt))
    for depth in a.depths:
        theirs, mine = list(a.theirs), list(a.ours)
        while theirs or mine:  # alternate the engines configuration by configuration
            if theirs:
                kv = theirs.pop(0)
                add("llama.cpp", "decode", kv, depth, llama_best(a, model, kv, decode=a.decode, depth=depth))
            if mine:
                kv = mine.pop(0)
                add("tqserve", "decode", kv, depth, ours(a, model, kv, depth=depth))
    return rows


def ratio(rows, row, engine, kv):
    ref = next((r for r in rows if r["model"] == row["model"] and r["engine"] == engine and r["kv"] == kv
                and r["phase"] == row["phase"] and r["depth"] == row["depth"]), None)
    return f"{row['median'] / ref['median']:.2f}x" if ref else "-"


def table(rows, a):
    print(f"tqserve vs llama.cpp (llama-bench), {a.threads} threads, median of {a.reps} repetitions [min-max]; "
          f"prompt {a.prompt} tokens, decode {a.decode} tokens at each depth")
    print(f"{'model':34} {'phase':6} {'depth':>6} {'engine':9} {'kv':8} {'tok/s':>8} {'range':>15} {'RSS MiB':>8} "
          f"{'vs ll f16':>9} {'vs ll q8_0':>10}")
    for r in rows:
        mine = r["engine"] == "tqserve"
        compressed = mine and r["kv"] not in ("f16", "f32")
        print(f"{r['model'][:34]:34} {r['phase']:6} {r['depth']:>6} {r['engine']:9} {r['kv']:8} {r['median']:8.2f} "
              f"{r['min']:7.2f}-{r['max']:<7.2f} {r['rss_mib']:8.0f} "
              f"{ratio(rows, r, 'llama.cpp', 'f16') if mine else '':>9} "
              f"{ratio(rows, r, 'llama.cpp', 'q8_0') if compressed else '':>10}")


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        series = {}
        for r in rows:
            if r["model"] == model and r["phase"] == "decode":
                series.setdefault((r["engine"], r["kv"]), []).append((r["depth"], r["median"], r["min"], r["max"]))
        for (engine, kv), pts in sorted(series.items()):
            pts.sort()
            xs = [p[0] for p in pts]
            ax.errorbar(xs, [p[1] for p in pts], yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                        marker="o" if engine == "tqserve" else "s", linestyle="-" if engine == "tqserve" else "--",
                        label=f"{engine} {kv}", capsize=2)
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("depth (tokens)")
        ax.set_ylabel("decode tok/s (median)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--tqserve", default=os.path.join(ROOT, "build", "tqserve"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens (0: no prompt test)")
    ap.add_argument("--depths", default="0,4096,16384,32768")
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ours", default="f16,int8,tq4,tq3,default")
    ap.add_argument("--prefill-max", type=int, default=4096,
                    help="our context is filled by the forward pass up to this depth, by random K/V rows beyond")
    ap.add_argument("--theirs", default="f16,q8_0,q4_0")
    ap.add_argument("--json", default="")
    ap.add_argument("--plot", default="")
    a = ap.parse_args()
    a.depths = [int(d) for d in a.depths.split(",") if d != ""]
    a.ours = [f for f in a.ours.split(",") if f]
    a.theirs = [f for f in a.theirs.split(",") if f]
    for path in a.model + [a.llama_bench, a.tqserve]:
        if not os.path.exists(path):
            print(f"vs_llama: {path} is absent", file=sys.stderr)
            return 1
    rows = []
    try:
        for model in a.model:
            rows += measure(a, model)
    except RuntimeError as e:
        print(f"vs_llama: {e}", file=sys.stderr)
        return 1
    table(rows, a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"threads": a.threads, "reps": a.reps, "prompt": a.prompt, "decode": a.decode, "rows": rows}, f,
                      indent=1)
    if a.plot:
        plot(rows, a.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
