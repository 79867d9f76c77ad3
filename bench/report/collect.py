#!/usr/bin/env python3
"""Runs the report's measurements with the project's own commands and writes every figure to one JSON file.

Called by bench/run-report.sh (which builds, fetches the model and makes the venvs). Each section runs the existing
commands (`tqserve eval|bench|formats --json`, bench/quality/*.py, bench/matmul/vs_llama.py, bench/serving/load.py)
and stores their JSON as printed; derived figures (ratios, memory budgets, the seeds' claims and verdicts) are
computed here from that JSON and stored beside it, so that render.py only formats what this file holds.
A section whose prerequisites are missing is recorded as skipped with the reason.

  collect.py --tqserve build/tqserve --model M.gguf --text wiki.test.raw --out report.json [--quick]
  collect.py ... --out report.json --redo speed[,serving...]

--redo measures the named sections again into an existing report.json (a section that failed, say) and keeps the
others as they are; report["redone"][section] records the commit, date and machine load of the new measurement,
and render.py prints it beside the section, since it may differ from the report's own commit.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import claims  # noqa: E402

# (name, tqserve flags) of the uniform formats and asymmetric/boundary configurations beyond presets.py's table.
EXTRA_CONFIGS = [
    ("uniform tq2", ["--kv-preset", "uniform:tq2"]),
    ("uniform tq2.5", ["--kv-preset", "uniform:tq2.5"]),
    ("tq4, boundary layers f16", ["--kv-k", "tq4", "--kv-v", "tq4", "--kv-boundary-layers", "1"]),
    ("tq3, boundary layers f16", ["--kv-k", "tq3", "--kv-v", "tq3", "--kv-boundary-layers", "1"]),
    ("preset 5x (tq3c)", ["--kv-preset", "5x"]),
    ("preset 6x (tq3c/tq2c)", ["--kv-preset", "6x"]),
]
LONG_CONFIGS = [
    ("uniform tq4", ["--kv-preset", "uniform:tq4"]),
    ("uniform tq3", ["--kv-preset", "uniform:tq3"]),
    ("uniform int8", ["--kv-preset", "uniform:int8"]),
    ("int8-K tq4-V", ["--kv-preset", "uniform:int8/tq4"]),
]
NIAH_CONFIGS = [("f16", "f16", "f16"), ("tq4", "tq4", "tq4"), ("tq3", "tq3", "tq3"), ("int8", "int8", "int8"),
                ("int8-K tq4-V", "int8", "tq4")]

SETTINGS = {
    # quick: a smoke run of every section's code path (~4 minutes on the 2-core Zen 1 VM; the full run's 13
    # presets.py rows, 6 extra rows and 2 long rows at 4096 took 11 minutes there).
    "quick": {"ctx": 512, "chunks": 2, "long_ctx": 2048, "long_chunks": 1, "long_configs": 1,
              "preset_configs": ["uniform f16", "uniform tq4", "uniform tq3", "longdoc", "auto"],
              "extra_configs": ["preset 6x (tq3c/tq2c)"],
              "gemma_ctx": 1024, "gemma_chunks": 1, "gemma_tq": ["f16/f16", "tq4/tq4"],
              "gemma_llama": ["f16/f16", "q4_0/q4_0"],
              "llama_kv": ["f16/f16", "q8_0/q8_0", "q4_0/q4_0"], "tq_vs_llama": ["f16/f16", "int8/int8", "tq4/tq4"],
              "niah_lengths": [512, 1024], "niah_depths": [0.0, 0.5, 1.0], "niah_trials": 1, "niah_configs": 2,
              "decode_ctx": [512, 1024], "decode_steps": 8, "decode_rounds": 2, "cold_steps": 8, "cold_rounds": 2,
              "llama_decode_formats": ["f16", "q8_0", "q4_0"], "vs_llama_reps": 2,
              "formats_vectors": 2000, "attention": ["--ctx", "2048", "--working-set-mib", "64", "--rounds", "2",
                                                     "--min-seconds", "0.05"],
              "encode": ["--min-seconds", "0.05", "--decode-ctx", "0"], "serving": False},
    "full": {"ctx": 512, "chunks": 8, "long_ctx": 4096, "long_chunks": 2, "long_configs": 4,
             "preset_configs": None, "extra_configs": None,
             "gemma_ctx": 1024, "gemma_chunks": 4, "gemma_tq": ["f16/f16", "int8/int8", "tq4/tq4", "tq3/tq3"],
             "gemma_llama": ["f16/f16", "q8_0/q8_0", "q4_0/q4_0"],
             "llama_kv": ["f16/f16", "q8_0/q8_0", "q5_0/q5_0", "q4_1/q4_1", "q4_0/q4_0", "iq4_nl/iq4_nl"],
             "tq_vs_llama": ["f16/f16", "int8/int8", "tq8/tq8", "tq4/tq4", "tq3/tq3", "f16/tq4"],
             "niah_lengths": [512, 1024, 2048, 4096], "niah_depths": [0.0, 0.25, 0.5, 0.75, 1.0], "niah_trials": 3,
             "niah_configs": 5, "decode_ctx": [512, 1024, 2048, 4096, 8192], "decode_steps": 16, "decode_rounds": 3,
             # The cold-tier columns compare two configurations within a 0.9x margin: 16-step rounds (0.15-0.2 s)
             # swung 0.86-1.09x between presets on the shared VM; 24 steps x 6 rounds held within a few percent.
             "cold_steps": 24, "cold_rounds": 6,
             "llama_decode_formats": ["f16", "q8_0", "q4_0"], "vs_llama_reps": 5, "formats_vectors": 20000,
             "attention": ["--ctx", "8192", "--working-set-mib", "512"], "encode": [], "serving": True},
}
BUDGET_MIB = int(os.environ.get("TQSERVE_REPORT_BUDGET_MIB", "256"))


def log(msg):
    print(f"[report {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# llama.cpp's OpenMP threads spin at every barrier; on a shared machine that costs it most of its speed (docs/serving.md).
LLAMA_ENV = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("TQSERVE_LLAMA_OMP_WAIT_POLICY", "PASSIVE"))


def run(cmd, **kw):
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def run_json(cmd, **kw):
    return json.loads(run(cmd, **kw))


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:  # noqa: BLE001 (a missing tool leaves the field empty)
        return ""


def meta(a):
    lscpu = sh("lscpu")
    field = lambda k: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith(k + ":")), "")
    mem_kib = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1))
    cache = os.path.join(os.path.dirname(a.tqserve), "CMakeCache.txt")
    cxx = ""
    if os.path.exists(cache):
        m = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.*)$", open(cache).read(), re.M)
        cxx = m.group(1) if m else ""
    libs = {}
    for name, cmd in [("grpc++", "pkg-config --modversion grpc++"), ("protobuf", "pkg-config --modversion protobuf"),
                      ("liburing", "pkg-config --modversion liburing"), ("highway", "pkg-config --modversion libhwy"),
                      ("openssl", "pkg-config --modversion openssl"),
                      ("boost", "dpkg-query -W -f '${Version}' libboost-dev"),
                      ("cmake", "cmake --version | head -n1"), ("python", "python3 --version"),
                      ("matplotlib", f"{sys.executable} -c 'import matplotlib; print(matplotlib.__version__)'")]:
        libs[name] = sh(cmd)
    if a.llama_python:
        libs["llama-cpp-python"] = sh(f"{a.llama_python} -c 'import llama_cpp; print(llama_cpp.__version__)'")
    return {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "commit": sh(f"git -C {ROOT} rev-parse HEAD"),
            "commit_dirty": bool(sh(f"git -C {ROOT} status --porcelain --untracked-files=no")),
            "tqserve_version": sh(f"{a.tqserve} --version").splitlines()[:3],
            "machine": {"cpu_model": field("Model name"), "cpus": field("CPU(s)"), "cores_online": os.cpu_count(),
                        "avx512f": "avx512f" in open("/proc/cpuinfo").read().split(),
                        "ram_gib": round(mem_kib / 1048576, 1), "kernel": platform.release(),
                        "load_average_at_start": list(os.getloadavg())},
            "compiler": {"path": cxx, "version": sh(f"{cxx} --version | head -n1") if cxx else ""},
            "libraries": libs, "llama_omp_wait_policy": LLAMA_ENV["OMP_WAIT_POLICY"], "model": os.path.basename(a.model), "text": a.text, "threads": a.threads}


def kld(a, flags, ctx, chunks, profile):
    cmd = [a.tqserve, "eval", "kld", "--model", a.model, "--file", a.text, "--threads", str(a.threads), "--ctx",
           str(ctx), "--chunks", str(chunks), "--json"] + (["--kv-profile", profile] if profile else []) + flags
    r = run_json(cmd)
    tiers = r["bytes_by_tier"]
    return {"ppl": r["ppl"], "ref_ppl": r["ref"]["ppl"], "delta_ppl_percent": r["delta_ppl_percent"],
            "kld_mean": r["kld_mean"], "kld_p99": r["kld_p99"], "same_top": r["same_top"],
            "bits_per_value": r["bits_per_value"], "kv_bytes_per_token": sum(tiers.values()) / ctx,
            "bytes_by_tier": tiers, "heads_by_class": r["heads_by_class"], "tokens": r["tokens"],
            "seconds": r["seconds"]}


def section_quality(a, s, rep):
    q = {"ctx": s["ctx"], "chunks": s["chunks"]}
    rep["quality"] = q
    profile = os.path.join(a.work, "profile.json")
    run([a.tqserve, "calibrate", "--model", a.model, "--file", a.text, "--threads", str(a.threads), "--ctx",
         str(s["ctx"]), "--chunks", str(s["chunks"]), "-o", profile])
    q["profile"] = "calibrated on the same chunks (tqserve calibrate)"
    rows = run_json([sys.executable, os.path.join(ROOT, "bench/quality/presets.py"), "--tqserve", a.tqserve,
                     "--model", a.model, "--file", a.text, "--ctx", str(s["ctx"]), "--chunks", str(s["chunks"]),
                     "--threads", str(a.threads), "--profile-concentration", profile, "--json"]
                    + (["--configs", ",".join(s["preset_configs"])] if s["preset_configs"] else []))
    for r in rows:
        r["source"] = "presets.py"
    save(a, rep)
    for name, flags in [c for c in EXTRA_CONFIGS if s["extra_configs"] is None or c[0] in s["extra_configs"]]:
        r = kld(a, flags, s["ctx"], s["chunks"], profile)
        r["config"], r["source"] = name, "tqserve eval kld"
        rows.append(r)
    q["configs"] = rows
    save(a, rep)
    longq = {"ctx": s["long_ctx"], "chunks": s["long_chunks"], "configs": []}
    q["long"] = longq
    for name, flags in LONG_CONFIGS[:s["long_configs"]]:
        r = kld(a, flags, s["long_ctx"], s["long_chunks"], "")
        r["config"] = name
        longq["configs"].append(r)
        save(a, rep)
    q["formats_measure"] = {}
    for dim in (64, 128):
        q["formats_measure"][str(dim)] = run_json([a.tqserve, "formats", "--measure", "--json", "--dim", str(dim),
                                                   "--vectors", str(s["formats_vectors"])])


def section_llama_quality(a, s, rep):
    if not a.llama_python:
        rep["quality_llama"] = {"skipped": "no llama-cpp-python venv (TQSERVE_LLAMA_VENV, default "
                                           "~/.cache/tqserve/llama-venv; see tests/golden/README.md)"}
        return
    rows = run_json([a.llama_python, os.path.join(ROOT, "bench/quality/ppl_vs_llama.py"), "--tqserve", a.tqserve,
                     "--model", a.model, "--file", a.text, "--ctx", str(s["ctx"]), "--chunks", str(s["chunks"]),
                     "--threads", str(a.threads), "--tq", *s["tq_vs_llama"], "--llama", *s["llama_kv"], "--json"],
                    env=LLAMA_ENV)
    rep["quality_llama"] = {"ctx": s["ctx"], "chunks": s["chunks"], "rows": rows}


def section_gemma(a, s, rep):
    """Gemma 3 270M (head_dim 256, sliding window 512): perplexity at a context past the window, next to llama.cpp."""
    if not a.gemma or not os.path.exists(a.gemma):
        rep["quality_gemma"] = {"skipped": "no Gemma 3 file (scripts/fetch-model.sh --gemma3)"}
        return
    if not a.llama_python:
        rep["quality_gemma"] = {"skipped": "no llama-cpp-python venv"}
        return
    rows = run_json([a.llama_python, os.path.join(ROOT, "bench/quality/ppl_vs_llama.py"), "--tqserve", a.tqserve,
                     "--model", a.gemma, "--file", a.text, "--ctx", str(s["gemma_ctx"]), "--chunks",
                     str(s["gemma_chunks"]), "--threads", str(a.threads), "--tq", *s["gemma_tq"], "--llama",
                     *s["gemma_llama"], "--json"], env=LLAMA_ENV)
    rep["quality_gemma"] = {"model": os.path.basename(a.gemma), "ctx": s["gemma_ctx"], "chunks": s["gemma_chunks"],
                            "rows": rows}


def section_niah(a, s, rep):
    n = {"lengths": s["niah_lengths"], "depths": s["niah_depths"], "trials": s["niah_trials"], "configs": []}
    rep["niah"] = n
    for name, k, v in NIAH_CONFIGS[:s["niah_configs"]]:
        r = run_json([a.tqserve, "eval", "niah", "--model", a.model, "--file", a.text, "--threads", str(a.threads),
                      "--kv-k", k, "--kv-v", v, "--lengths", ",".join(map(str, s["niah_lengths"])), "--depths",
                      ",".join(map(str, s["niah_depths"])), "--trials", str(s["niah_trials"]), "--json"])
        for c in r["cells"]:
            c.pop("last_answer", None)
        n["configs"].append({"config": name, "accuracy": r["accuracy"], "seconds": r["seconds"], "cells": r["cells"]})
        save(a, rep)


def section_memory(a, s, rep):
    """Derived from the quality section's measured page bytes: per token, the longest context and the 2k sequences
    that fit in a fixed budget. The quality runs have no cold directory, so every page is in RAM (hot or warm tier);
    for the ranked presets the HOT-class bytes alone are also given (the tier meant for GPU HBM, f16 heads)."""
    budget = BUDGET_MIB << 20
    rows = []
    for r in rep["quality"]["configs"]:
        per_tok = r["kv_bytes_per_token"]
        share = r.get("tier_share")
        if share is None:
            t = r["bytes_by_tier"]
            share = {k: v / (sum(t.values()) or 1) for k, v in t.items()}
        ranked = r["config"] in ("code", "longdoc", "chat", "auto") or r["config"].startswith("longdoc,")
        hot_per_tok = per_tok * share["hot"] if ranked else None
        rows.append({"config": r["config"], "bits_per_value": r["bits_per_value"], "bytes_per_token": per_tok,
                     "tier_share": share, "ranked_preset": ranked, "hot_bytes_per_token": hot_per_tok,
                     "vs_f16": None, "longest_ctx_in_budget": int(budget // per_tok),
                     "seqs_2k_in_budget": int(budget // (per_tok * 2048)),
                     "seqs_2k_in_budget_hot_only": int(budget // (hot_per_tok * 2048)) if hot_per_tok else None})
    f16 = next((r["bytes_per_token"] for r in rows if r["config"] == "uniform f16"), None)
    for r in rows:
        r["vs_f16"] = f16 / r["bytes_per_token"] if f16 else None
        r["hot_vs_f16"] = f16 / r["hot_bytes_per_token"] if f16 and r["hot_bytes_per_token"] else None
    rep["memory"] = {"budget_mib": BUDGET_MIB, "rows": rows}


COLD_SMALL_CACHE = 8 << 20  # bytes: far below the cold pages of one 4096-token sequence
COLD_PRESETS = ["code", "longdoc", "chat", "auto", "uniform:tq4"]  # cold-tier decode rows, beside uniform:f16


def section_speed(a, s, rep):
    sp = {}
    rep["speed"] = sp
    sp["decode"] = {"ctx": s["decode_ctx"], "steps": s["decode_steps"], "rounds": s["decode_rounds"],
                    "rows": run_json([a.tqserve, "bench", "decode", "--model", a.model, "-t", str(a.threads),
                                      "--ctx", ",".join(map(str, s["decode_ctx"])), "--formats", "f16,int8,tq4,tq3",
                                      "--steps", str(s["decode_steps"]), "--rounds", str(s["decode_rounds"]),
                                      "--json"])}
    save(a, rep)
    if not s["serving"]:
        sp["decode_cold"] = {"skipped": "quick mode (the cold-tier decode columns run in the full report)"}
    else:
        # Every preset at the long contexts (#5's target: 4096 and 8192), SPARSE pages on disk behind the
        # default cold cache, against all-f16 in RAM and against the same configuration in RAM.
        long_ctx = [c for c in s["decode_ctx"] if c >= 4096]
        profile = os.path.join(a.work, "profile.json")  # the quality section's; calibrated here for --redo speed
        if not os.path.exists(profile):
            run([a.tqserve, "calibrate", "--model", a.model, "--file", a.text, "--threads", str(a.threads),
                 "--ctx", str(s["ctx"]), "--chunks", str(s["chunks"]), "-o", profile])
        with tempfile.TemporaryDirectory(prefix="tq-report-cold-", dir=a.cold_parent) as d:
            sp["decode_cold"] = {"steps": s["cold_steps"], "rounds": s["cold_rounds"],
                                 "rows": run_json([a.tqserve, "bench", "decode", "--model", a.model, "-t",
                                                   str(a.threads), "--ctx", ",".join(map(str, long_ctx)),
                                                   "--formats", "uniform:f16," + ",".join(COLD_PRESETS),
                                                   "--kv-profile", profile, "--kv-cold-dir", d, "--steps",
                                                   str(s["cold_steps"]), "--rounds", str(s["cold_rounds"]),
                                                   "--json"])}
        save(a, rep)
        # The cold cache smaller than the working set (every step streams the cold pages from disk), beside
        # what the disk itself delivers at about the I/O size the cold tier issues: the disk-bound ceiling.
        with tempfile.TemporaryDirectory(prefix="tq-report-cold-", dir=a.cold_parent) as d:
            sp["decode_cold_small"] = {
                "cache_bytes": COLD_SMALL_CACHE,
                "rows": run_json([a.tqserve, "bench", "decode", "--model", a.model, "-t", str(a.threads), "--ctx",
                                  ",".join(map(str, long_ctx)), "--formats", "uniform:f16,uniform:tq4",
                                  "--kv-cold-dir", d, "--kv-cold-cache-bytes", str(COLD_SMALL_CACHE), "--steps",
                                  str(s["decode_steps"]), "--rounds", str(s["decode_rounds"]), "--json"])}
            disk_bin = os.path.join(os.path.dirname(a.tqserve), "bench/storage/bench_cold_tier")
            sp["disk"] = {"rows": run_json([disk_bin, "--dir", d, "--file-mb", "1024", "--seconds", "1", "--repeat",
                                            "3", "--sizes", "128", "--depths", "16,64", "--json"])}
        save(a, rep)
    if a.llama_python or a.llama_bench:
        # llama.cpp's own llama-bench where it was built (scripts/build-llama-server.sh): its threads spin as
        # llama.cpp runs by default; llama-cpp-python under PASSIVE waits measured a third slower.
        python = a.llama_python if not a.llama_bench else sys.executable
        bench = ["--llama-bench", a.llama_bench] if a.llama_bench else []
        env = LLAMA_ENV if not a.llama_bench else None
        sp["llama_by"] = "llama-bench" if a.llama_bench else f"llama-cpp-python, OMP_WAIT_POLICY={LLAMA_ENV['OMP_WAIT_POLICY']}"
        sp["llama_decode"] = run_json([python, os.path.join(ROOT, "bench/report/llama_decode.py"), "--model",
                                       a.model, "--threads", str(a.threads), "--ctx",
                                       ",".join(map(str, s["decode_ctx"])), "--formats",
                                       ",".join(s["llama_decode_formats"]), "--steps", str(s["decode_steps"]),
                                       "--rounds", str(s["decode_rounds"]), *bench], env=env)
        save(a, rep)
        speed_bin = os.path.join(os.path.dirname(a.tqserve), "bench/matmul/bench_model_speed")
        if os.access(speed_bin, os.X_OK):
            out = run([python, os.path.join(ROOT, "bench/matmul/vs_llama.py"), "--model", a.model,
                       "--threads", str(a.threads), "--bin", speed_bin, "--reps", str(s["vs_llama_reps"]), *bench],
                      env=env)
            sp["prompt_vs_llama"] = parse_vs_llama(out)
        else:
            sp["prompt_vs_llama"] = {"skipped": f"no {speed_bin}"}
    else:
        why = "no llama-cpp-python venv (TQSERVE_LLAMA_VENV)"
        sp["llama_decode"] = {"skipped": why}
        sp["prompt_vs_llama"] = {"skipped": why}
    save(a, rep)
    sp["attention"] = {"args": s["attention"],
                       "rows": run_json([a.tqserve, "bench", "attention", "--dim", "64", "--gqa", "3",
                                         *s["attention"], "--json"])}
    save(a, rep)
    sp["encode"] = {"args": s["encode"], "rows": run_json([a.tqserve, "bench", "encode", "--model", a.model,
                                                           "--threads", str(a.threads), *s["encode"], "--json"])}


def parse_vs_llama(out):
    """vs_llama.py prints a table; rows 'tqserve' and 'llama.cpp': prefill best / median, decode best / median."""
    res = {"text": out.strip().splitlines()}
    for line in out.splitlines():
        m = re.match(r"^(tqserve|llama\.cpp)\s+([\d.]+) /\s+([\d.]+)\s+([\d.]+) /\s+([\d.]+)", line)
        if m:
            res[m.group(1)] = {"prefill_best": float(m.group(2)), "prefill_median": float(m.group(3)),
                               "decode_best": float(m.group(4)), "decode_median": float(m.group(5))}
        m = re.match(r"^model .*prompt (\d+) tokens, decode (\d+) tokens", line)
        if m:
            res["prompt_tokens"], res["decode_tokens"] = int(m.group(1)), int(m.group(2))
    if "tqserve" in res and "llama.cpp" in res:
        res["prefill_ratio_best"] = res["tqserve"]["prefill_best"] / res["llama.cpp"]["prefill_best"]
        res["decode_ratio_best"] = res["tqserve"]["decode_best"] / res["llama.cpp"]["decode_best"]
        # The headline: the same statistic on both sides, the median repetition.
        res["prefill_ratio_median"] = res["tqserve"]["prefill_median"] / res["llama.cpp"]["prefill_median"]
        res["decode_ratio_median"] = res["tqserve"]["decode_median"] / res["llama.cpp"]["decode_median"]
    return res


def section_serving(a, s, rep):
    if not s["serving"]:
        rep["serving"] = {"skipped": "quick mode (the load sweep takes ~15 minutes; run bench/run-report.sh)"}
        return
    out = os.path.join(a.work, "load.json")
    cmd = [sys.executable, os.path.join(ROOT, "bench/serving/load.py"), "--model", a.model, "--threads",
           str(a.threads), "--tqserve-bin", a.tqserve, "--json", out]
    log("$ " + " ".join(cmd))
    # load.py exits 1 when a request failed; its JSON (with the error counts) is the result all the same.
    p = subprocess.run(cmd, capture_output=True, text=True)
    if not os.path.exists(out):
        raise RuntimeError(f"load.py exited {p.returncode} without results: {p.stderr.strip()[-300:]}")
    rep["serving"] = json.load(open(out))
    rep["serving"]["exit_code"] = p.returncode


def save(a, rep):
    tmp = a.out + ".part"
    with open(tmp, "w") as f:
        json.dump(rep, f, indent=1)
    os.replace(tmp, a.out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tqserve", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", default="", help="wiki.test.raw; empty: quality and NIAH are skipped")
    ap.add_argument("--llama-python", default="", help="a python with llama_cpp; empty: llama.cpp is skipped")
    ap.add_argument("--llama-bench", default="", help="llama.cpp's llama-bench: the speed section's llama.cpp side")
    ap.add_argument("--gemma", default="", help="Gemma 3 270M GGUF; empty: its section is skipped")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", default="", help="directory of the seed documents (for their names)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--redo", default="", help="comma-separated sections to measure again into an existing --out")
    a = ap.parse_args()
    a.tqserve = os.path.abspath(a.tqserve)
    a.work = tempfile.mkdtemp(prefix="tq-report-")
    a.cold_parent = os.environ.get("TMPDIR", "/tmp")
    mode = "quick" if a.quick else "full"
    s = SETTINGS[mode]
    t_start = time.time()
    sections = [("quality", section_quality), ("quality_llama", section_llama_quality),
                ("quality_gemma", section_gemma), ("niah", section_niah),
                ("memory", section_memory), ("speed", section_speed), ("serving", section_serving)]
    redo = [x for x in a.redo.split(",") if x]
    if redo:
        unknown = sorted(set(redo) - {name for name, _ in sections})
        if unknown:
            sys.exit(f"collect.py: unknown section(s) {', '.join(unknown)} for --redo")
        with open(a.out) as f:
            rep = json.load(f)
        if rep.get("mode") != mode:
            sys.exit(f"collect.py: {a.out} is a {rep.get('mode')} report; --redo must use the same mode")
        m = meta(a)
        for name in redo:
            rep.pop(name, None)
            rep.setdefault("redone", {})[name] = {k: m[k] for k in ("date_utc", "commit", "commit_dirty",
                                                                     "tqserve_version")}
            rep["redone"][name]["load_average_at_start"] = m["machine"]["load_average_at_start"]
            rep["redone"][name]["machine"] = m["machine"]  # the machine may differ from the full run's
        sections = [(name, fn) for name, fn in sections if name in redo]
    else:
        rep = {"mode": mode, "settings": s, "budget_mib": BUDGET_MIB, "meta": meta(a), "sections_seconds": {}}
    for name, fn in sections:
        if name in ("quality", "quality_llama", "quality_gemma", "niah", "memory") and not a.text:
            rep[name] = {"skipped": "no evaluation text (TQSERVE_TEXT)"}
            continue
        if name == "memory" and "configs" not in rep.get("quality", {}):
            rep[name] = {"skipped": "the quality section did not finish"}
            continue
        t0 = time.time()
        log(f"section {name}")
        try:
            fn(a, s, rep)
        except subprocess.CalledProcessError as e:
            err = (e.stderr or "").strip().splitlines()[-3:]
            rep.setdefault(name, {})["error"] = f"{' '.join(e.cmd[:4])}... exited {e.returncode}: {' | '.join(err)}"
            log(f"section {name} failed: {rep[name]['error']}")
        except Exception as e:  # noqa: BLE001 (a failed section is reported, the others still run)
            rep.setdefault(name, {})["error"] = f"{type(e).__name__}: {e}"
            log(f"section {name} failed: {rep[name]['error']}")
        rep["sections_seconds"][name] = round(time.time() - t0, 1)
        save(a, rep)
    rep["seeds"] = {"dir": a.seeds, "files": sorted(os.listdir(a.seeds)) if a.seeds and os.path.isdir(a.seeds) else [],
                    "note": "the claims are transcribed (translated) in bench/report/claims.py; their figures are "
                            "measured by this run"}
    try:
        rep["claims"] = claims.evaluate(rep, a.seeds)
    except Exception as e:  # noqa: BLE001 (the measurements are kept; the report says the claims failed)
        rep["claims"] = []
        rep["claims_error"] = f"{type(e).__name__}: {e}"
    if not redo:
        rep["total_seconds"] = round(time.time() - t_start, 1)
    save(a, rep)
    shutil.rmtree(a.work, ignore_errors=True)
    log(f"wrote {a.out} in {rep['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
