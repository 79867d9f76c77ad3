#!/usr/bin/env python3
"""Writes docs/benchmarks.md and the PNG plots from the JSON collect.py wrote. Every number printed comes from that
JSON (no measurement and no typed-in figure here).

  render.py REPORT.json --md docs/benchmarks.md --plots docs/benchmarks
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def skipped(sec):
    if sec is None:
        return "_Not run._"
    if "skipped" in sec:
        return f"_Skipped: {sec['skipped']}._"
    if "error" in sec:
        return f"_Failed: `{sec['error']}`._"
    return ""


def table(head, rows):
    """A markdown table, after a blank line."""
    out = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def pct(x, signed=True):
    return "-" if x is None else (f"{x:+.2f}%" if signed else f"{x:.2f}%")


def vs_llama_table(rows):
    """The side-by-side table of bench/quality/ppl_vs_llama.py's rows (tqserve and llama.cpp KV types)."""
    return table(["engine", "K/V", "bits/value", "PPL", "vs own f16", "/ llama.cpp f16"],
                 [[r["engine"], r["kv"], f"{r['bits_per_value']:.2f}", f"{r['ppl']:.4f}",
                   pct(r.get("delta_vs_own_f16_percent")),
                   "-" if r.get("ratio_vs_llama_f16") is None else f"{r['ratio_vs_llama_f16']:.4f}"]
                  for r in rows])


def quality_md(rep, plots, md):
    q = rep.get("quality")
    md.append("## 1. Quality")
    note = skipped(q)
    if note:
        md.append(note)
    if not q or "configs" not in q:
        return
    md.append(f"SmolLM2 perplexity on wiki.test.raw, ctx {q['ctx']}, {q['chunks']} chunks, {rep['meta']['threads']} "
              "threads; delta PPL, KLD and same-top-token rate against f16 KV on the same chunks "
              "(`bench/quality/presets.py` plus `tqserve eval kld` for the extra rows). Presets use a head profile "
              f"{q.get('profile', '')}. B/token = encoded page bytes / ctx.")
    rows = [[r["config"], f"{r['bits_per_value']:.2f}", f"{r['ppl']:.4f}", pct(r["delta_ppl_percent"]),
             f"{r['kld_mean']:.5f}", f"{r['kld_p99']:.4f}", pct(100 * r["same_top"], False),
             f"{r['kv_bytes_per_token']:.0f}"] for r in q["configs"]]
    md.append(table(["config", "bits/value", "PPL", "dPPL", "KLD", "KLD p99", "same top", "B/token"], rows))
    lq = q.get("long", {})
    if lq.get("configs"):
        md.append(f"\nLong context: ctx {lq['ctx']}, {lq['chunks']} chunk(s), same measures:\n")
        md.append(table(["config", "bits/value", "PPL", "ref PPL (f16)", "dPPL", "KLD", "same top"],
                        [[r["config"], f"{r['bits_per_value']:.2f}", f"{r['ppl']:.4f}", f"{r['ref_ppl']:.4f}",
                          pct(r["delta_ppl_percent"]), f"{r['kld_mean']:.5f}",
                          pct(100 * r["same_top"], False)] for r in lq["configs"]]))
    if "error" in lq:
        md.append(f"_Long context failed: `{lq['error']}`._")
    ql = rep.get("quality_llama")
    md.append("\n### Next to llama.cpp's KV types")
    note = skipped(ql)
    if note:
        md.append(note)
    if ql and "rows" in ql:
        md.append(f"`bench/quality/ppl_vs_llama.py`, ctx {ql['ctx']}, {ql['chunks']} chunks, same threads "
                  "(llama.cpp through llama-cpp-python; its bits include block scales):\n")
        md.append(vs_llama_table(ql["rows"]))
    qg = rep.get("quality_gemma")
    md.append("\n### Gemma 3 270M (head_dim 256, sliding window 512)")
    note = skipped(qg)
    if note:
        md.append(note)
    if qg and "rows" in qg:
        md.append(f"`bench/quality/ppl_vs_llama.py` on {qg['model']}, ctx {qg['ctx']} (past the window), "
                  f"{qg['chunks']} chunk(s), same threads:\n")
        md.append(vs_llama_table(qg["rows"]))
    fm = q.get("formats_measure", {})
    if fm:
        md.append("\n### Formats on Gaussian vectors (`tqserve formats --measure --json`)\n")
        dims = sorted(fm, key=int)
        names = [r.get("format", r.get("name")) for r in fm[dims[0]]]
        rows = []
        for i, n in enumerate(names):
            if any(fm[d][i].get("coded") is False for d in dims):
                continue  # f32: plain rows, nothing coded to measure
            row = [n]
            for d in dims:
                r = fm[d][i]
                row += [f"{r['bits_per_value']:.3f}", f"{r['mse']:.3g}", f"{r['ip_err']:.3g}"]
            rows.append(row)
        head = ["format"] + [f"{h} d={d}" for d in dims for h in ("bits", "mse", "ip_err")]
        md.append(table(head, rows))
    # Pareto plot.
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    pts = [(r["bits_per_value"], r["delta_ppl_percent"], r["kld_mean"], r["config"], "tqserve") for r in q["configs"]]
    if ql and "rows" in ql:
        pts += [(r["bits_per_value"], r["delta_vs_own_f16_percent"], None, "llama.cpp " + r["kv"], "llama.cpp")
                for r in ql["rows"] if r["engine"] == "llama.cpp" and r.get("delta_vs_own_f16_percent") is not None]
    for ax, idx, label in ((axes[0], 1, "delta PPL vs f16 KV (%)"), (axes[1], 2, "KLD vs f16 KV (nats/token)")):
        for eng, mk, col in (("tqserve", "o", "tab:blue"), ("llama.cpp", "s", "tab:red")):
            sel = [p for p in pts if p[4] == eng and p[idx] is not None]
            ax.scatter([p[0] for p in sel], [max(p[idx], 1e-4) if idx == 2 else p[idx] for p in sel], marker=mk,
                       color=col, label=eng)
            for p in sel:
                ax.annotate(p[3].replace("uniform ", ""), (p[0], max(p[idx], 1e-4) if idx == 2 else p[idx]),
                            fontsize=6, xytext=(3, 3), textcoords="offset points")
        front, best = [], None
        for p in sorted([p for p in pts if p[idx] is not None], key=lambda p: p[0]):
            if best is None or p[idx] < best:
                front.append(p)
                best = p[idx]
        # The front: the lowest loss at or below each bit rate.
        fr = sorted(front, key=lambda p: p[0])
        ax.step([p[0] for p in fr], [max(p[idx], 1e-4) if idx == 2 else p[idx] for p in fr], where="post",
                color="gray", lw=0.8, label="Pareto front")
        ax.set_xlabel("KV bits per value")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if idx == 2:
            ax.set_yscale("log")
        else:
            ax.set_yscale("symlog", linthresh=1)
        ax.legend(fontsize=7)
    fig.suptitle(f"{rep['meta']['model']}, ctx {q['ctx']}, {q['chunks']} chunks ({rep['mode']} mode)")
    fig.tight_layout()
    fig.savefig(os.path.join(plots, "pareto.png"), dpi=110)
    plt.close(fig)
    md.append("\n![Pareto: delta PPL and KLD against bits per value](benchmarks/pareto.png)")


def niah_md(rep, plots, md):
    n = rep.get("niah")
    md.append("\n## 2. Needle in a haystack")
    note = skipped(n)
    if note:
        md.append(note)
    if not n or not n.get("configs"):
        return
    md.append(f"`tqserve eval niah`, lengths {n['lengths']}, depths {n['depths']}, {n['trials']} needle(s) per cell "
              "(accuracy: share of needles retrieved).\n")
    md.append(table(["config", "accuracy", "seconds"],
                    [[c["config"], pct(100 * c["accuracy"], False), f"{c['seconds']:.0f}"] for c in n["configs"]]))
    k = len(n["configs"])
    fig, axes = plt.subplots(1, k, figsize=(3.2 * k + 1, 3.4), squeeze=False, layout="constrained")
    for ax, c in zip(axes[0], n["configs"]):
        grid = [[0.0] * len(n["depths"]) for _ in n["lengths"]]
        for cell in c["cells"]:
            grid[n["lengths"].index(cell["length"])][n["depths"].index(cell["depth"])] = cell["accuracy"]
        im = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        ax.set_xticks(range(len(n["depths"])), [f"{d:g}" for d in n["depths"]])
        ax.set_yticks(range(len(n["lengths"])), [str(x) for x in n["lengths"]])
        ax.set_xlabel("needle depth")
        if ax is axes[0][0]:
            ax.set_ylabel("context (tokens)")
        ax.set_title(f"{c['config']}: {100 * c['accuracy']:.0f}%", fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="accuracy")
    fig.savefig(os.path.join(plots, "niah.png"), dpi=110)
    plt.close(fig)
    md.append("\n![NIAH heat maps](benchmarks/niah.png)")


def memory_md(rep, md):
    m = rep.get("memory")
    md.append("\n## 3. Memory")
    note = skipped(m)
    if note:
        md.append(note)
    if not m or "rows" not in m:
        return
    md.append(f"From the quality run's measured page bytes (all in RAM: the quality runs have no cold directory). "
              f"Budget {m['budget_mib']} MiB (`TQSERVE_REPORT_BUDGET_MIB`): the longest single context and the most "
              "2048-token sequences whose KV fits. For the ranked presets, \"HOT only\" counts the bytes of their "
              "HOT heads alone (f16, the tier meant for GPU HBM), the reading under which seed 000's preset savings "
              "could refer to accelerator memory.\n")
    md.append(table(["config", "bits/value", "B/token", "x smaller than f16", "longest ctx", "2k seqs",
                     "HOT B/token", "HOT x smaller", "2k seqs (HOT only)"],
                    [[r["config"], f"{r['bits_per_value']:.2f}", f"{r['bytes_per_token']:.0f}",
                      "-" if r["vs_f16"] is None else f"{r['vs_f16']:.2f}", r["longest_ctx_in_budget"],
                      r["seqs_2k_in_budget"],
                      "-" if r.get("hot_bytes_per_token") is None else f"{r['hot_bytes_per_token']:.0f}",
                      "-" if r.get("hot_vs_f16") is None else f"{r['hot_vs_f16']:.2f}",
                      "-" if r.get("seqs_2k_in_budget_hot_only") is None else r["seqs_2k_in_budget_hot_only"]]
                     for r in m["rows"]]))


def speed_md(rep, plots, md):
    sp = rep.get("speed")
    md.append("\n## 4. Speed")
    note = skipped(sp)
    if note:
        md.append(note)
    if not sp:
        return
    d = sp.get("decode", {})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if d.get("rows"):
        md.append(f"Decode tok/s against context, `tqserve bench decode` (every layer and head in the format, best "
                  f"of {d['rounds']} rounds of {d['steps']} steps, {rep['meta']['threads']} threads; ratio to f16):\n")
        cfgs = list(dict.fromkeys(r["config"] for r in d["rows"]))
        ctxs = sorted({r["ctx"] for r in d["rows"]})
        by = {(r["config"], r["ctx"]): r for r in d["rows"]}
        md.append(table(["ctx"] + cfgs, [[c] + [f"{by[(f, c)]['tokens_per_second']:.1f} "
                                              f"({by[(f, c)]['ratio_vs_first']:.2f}x)" for f in cfgs] for c in ctxs]))
        for f in cfgs:
            ax.plot(ctxs, [by[(f, c)]["tokens_per_second"] for c in ctxs], marker="o", label=f"tqserve {f}")
    ld = sp.get("llama_decode")
    by_what = sp.get("llama_by") or ("llama-cpp-python, OMP_WAIT_POLICY="
                                      f"{rep['meta'].get('llama_omp_wait_policy')}")
    md.append("\nllama.cpp, same model, threads, contexts, steps and rounds (`bench/report/llama_decode.py`, "
              f"{by_what}, flash attention on):\n")
    if isinstance(ld, list):
        fmts = list(dict.fromkeys(r["format"] for r in ld))
        ctxs = sorted({r["ctx"] for r in ld})
        by = {(r["format"], r["ctx"]): r for r in ld}
        md.append(table(["ctx"] + fmts, [[c] + [f"{by[(f, c)]['tokens_per_second']:.1f} "
                                              f"({by[(f, c)]['ratio_vs_first']:.2f}x)" for f in fmts] for c in ctxs]))
        for f in fmts:
            ax.plot(ctxs, [by[(f, c)]["tokens_per_second"] for c in ctxs], marker="s", ls="--",
                    label=f"llama.cpp {f}")
    else:
        md.append(skipped(ld))
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("decode tok/s")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"decode speed, {rep['meta']['threads']} threads ({rep['mode']} mode)")
    fig.tight_layout()
    fig.savefig(os.path.join(plots, "decode.png"), dpi=110)
    plt.close(fig)
    md.append("\n![decode tok/s against context](benchmarks/decode.png)")
    dc = sp.get("decode_cold", {})
    rounds = f", median of {dc['rounds']} rounds of {dc['steps']} steps" if "rounds" in dc else ""
    md.append(f"\nCold tier (SPARSE pages on disk behind the cold cache; `bench decode --kv-cold-dir`{rounds}; "
              "hits count visits of the cold cache: pages attention holds from the step before count none):")
    if dc.get("rows"):
        md.append("")
        md.append(table(["config", "ctx", "tok/s", "x f16", "x same in RAM", "cold hits/late/misses"],
                        [[r["config"], r["ctx"], f"{r['tokens_per_second']:.1f}", f"{r['ratio_vs_first']:.2f}",
                          "-" if "ratio_vs_ram" not in r else f"{r['ratio_vs_ram']:.2f}",
                          f"{r['cold_cache_hits']}/{r['cold_cache_late']}/{r['cold_cache_misses']}"]
                         for r in dc["rows"]]))
    else:
        md.append(skipped(dc))
    small, disk = sp.get("decode_cold_small", {}), sp.get("disk", {})
    if small.get("rows"):
        # The disk's rate at 128 KiB random reads (about the cold tier's I/O size), best engine and depth: the
        # tok/s a step that reads its cold pages from disk could reach if reading were all it did.
        best = max([max(c.get("uring_mb_s", 0), c.get("fio_mb_s", 0)) for c in disk.get("rows", [])] or [0])
        md.append(f"\nThe same with a {small['cache_bytes'] >> 20} MiB cold cache (smaller than the cold pages: every "
                  f"step streams them from disk); disk: 128 KiB random reads at depth 16 and 64, best of io_uring and "
                  f"fio {best:.0f} MB/s (`bench_cold_tier --json`):")
        md.append("")
        rows = []
        for r in small["rows"]:
            if not r.get("cold"):
                rows.append([r["config"], r["ctx"], f"{r['tokens_per_second']:.1f}", "-", "-", "-", "-"])
                continue
            per_step = r["cold_read_bytes"] / max(r.get("timed_steps", 1), 1) / 1e6
            ceiling = best / per_step if per_step > 0 else 0
            rows.append([r["config"], r["ctx"], f"{r['tokens_per_second']:.1f}",
                         "-" if "ratio_vs_ram" not in r else f"{r['ratio_vs_ram']:.2f}", f"{per_step:.1f}",
                         f"{r['cold_read_bytes_per_second'] / 1e6:.0f}",
                         f"{ceiling:.1f}" if ceiling else "-"])
        md.append(table(["config", "ctx", "tok/s", "x same in RAM", "MB read/step", "MB/s delivered",
                         "disk-bound tok/s"], rows))
    pv = sp.get("prompt_vs_llama", {})
    md.append("\nPrompt and decode tok/s next to llama.cpp (`bench/matmul/vs_llama.py`, best / median of the reps):")
    if "tqserve" in pv and "llama.cpp" in pv:
        md.append(f"\nprompt {pv.get('prompt_tokens')} tokens, decode {pv.get('decode_tokens')} tokens\n")
        md.append(table(["engine", "prompt tok/s best", "median", "decode tok/s best", "median"],
                        [[e, f"{pv[e]['prefill_best']:.1f}", f"{pv[e]['prefill_median']:.1f}",
                          f"{pv[e]['decode_best']:.1f}", f"{pv[e]['decode_median']:.1f}"]
                         for e in ("tqserve", "llama.cpp")]))
        md.append(f"\ntqserve / llama.cpp (median of each side): prompt {pv['prefill_ratio_median']:.2f}x, decode "
                  f"{pv['decode_ratio_median']:.2f}x")
    else:
        md.append(skipped(pv) or "_No result._")
    at = sp.get("attention", {})
    md.append("\nAttention kernel per format (`tqserve bench attention --dim 64 --gqa 3 "
              + " ".join(at.get("args", [])) + "`, single thread):")
    if at.get("rows"):
        keys = [k for k in ("format", "bits_per_value", "ns_per_token", "ratio_vs_f16", "hot_ns_per_token",
                            "bytes_per_token") if k in at["rows"][0]]
        md.append("")
        md.append(table(keys, [[(f"{r[k]:.3g}" if isinstance(r[k], float) else r[k]) for k in keys]
                               for r in at["rows"]]))
    else:
        md.append(skipped(at))
    en = sp.get("encode", {})
    md.append("\nPage encoder (`tqserve bench encode " + " ".join(en.get("args", [])) + "`):")
    if en.get("rows"):
        keys = [k for k in en["rows"][0] if isinstance(en["rows"][0][k], (int, float, str))][:8]
        md.append("")
        md.append(table(keys, [[(f"{r[k]:.3g}" if isinstance(r[k], float) else r[k]) for k in keys]
                               for r in en["rows"]]))
    else:
        md.append(skipped(en))


def serving_md(rep, plots, md):
    s = rep.get("serving")
    md.append("\n## 5. Serving")
    note = skipped(s)
    if note:
        md.append(note)
    if not s or "levels" not in s:
        return
    md.append("`bench/serving/load.py` sweep (docs/serving.md describes the workload):\n")
    rows, series = [], {}
    for conc, lv in sorted(s["levels"].items(), key=lambda kv: int(kv[0])):
        for name, r in lv.items():
            if not isinstance(r, dict):
                continue
            rows.append([conc, name, r.get("requests", "-"), r.get("errors", "-"),
                         f"{r['output_tok_s']:.1f}", f"{r['ttft_p50'] * 1000:.0f}", f"{r['ttft_p99'] * 1000:.0f}",
                         f"{r['tpot_p50'] * 1000:.0f}", f"{r['goodput_req_s']:.2f}"])
            series.setdefault(name, []).append((int(conc), r["output_tok_s"]))
    md.append(table(["conc", "server", "reqs", "errors", "out tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms",
                     "good/s"], rows))
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, pts in series.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("output tok/s")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(plots, "serving.png"), dpi=110)
    plt.close(fig)
    md.append("\n![serving sweep](benchmarks/serving.png)")


def fmt_measured(m):
    if m is None:
        return "-"
    if not isinstance(m, dict):
        return str(m)
    parts = []
    for k, v in m.items():
        parts.append(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}")
    return ", ".join(parts)


def claims_md(rep, md):
    md.append("\n## 6. The seeds' claims")
    md.append("Each quantitative claim of `../shared/seeds/` (000: the TurboQuant article with presets, 003: the "
              "3-bit article), the figure of this run that tests it, the rule, and the verdict. All computed by "
              "`bench/report/claims.py` from report.json.")
    sd = rep.get("seeds", {})
    if sd:
        found = ", ".join(sd["files"]) or "none (../shared absent): the claims are listed from claims.py all the same"
        md.append(f"Seed files found: {found}.")
    md.append("")
    if rep.get("claims_error"):
        md.append(f"_Evaluating the claims failed: `{rep['claims_error']}`._")
    md.append(table(["seed", "claim", "claimed", "measured here", "rule", "verdict"],
                    [[c["seed"], c["claim"], c["claimed"], fmt_measured(c["measured"]) +
                      (f" ({c['note']})" if c.get("note") else ""), c["rule"], f"**{c['verdict']}**"]
                     for c in rep.get("claims", [])]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--md", required=True)
    ap.add_argument("--plots", required=True)
    a = ap.parse_args()
    rep = json.load(open(a.report))
    os.makedirs(a.plots, exist_ok=True)
    m = rep["meta"]
    mc = m["machine"]
    md = ["# Benchmarks", "",
          f"Produced by `bench/run-report.sh{' --quick' if rep['mode'] == 'quick' else ''}` in **{rep['mode']} "
          f"mode** ({'few chunks, short contexts, no serving sweep: a smoke run, not the full report' if rep['mode'] == 'quick' else 'the full report'})"
          f" on {m['date_utc']}, in {rep.get('total_seconds', 0) / 60:.1f} minutes. Every number below is read from "
          "`docs/benchmarks/report.json`, written by the same run.", "",
          f"- commit `{m['commit']}`{' (with local changes)' if m['commit_dirty'] else ''}; "
          f"{'; '.join(m['tqserve_version'])}",
          f"- machine: {mc['cpu_model']}, {mc['cpus']} CPUs, {mc['ram_gib']} GiB RAM, Linux {mc['kernel']}; load "
          f"average at start {', '.join(f'{x:.1f}' for x in mc['load_average_at_start'])} (a shared machine: "
          "speed figures vary with it)",
          f"- compiler: {m['compiler']['version']} (`{m['compiler']['path']}`)",
          "- libraries: " + ", ".join(f"{k} {v}" for k, v in m["libraries"].items() if v),
          f"- model: {m['model']}; text: wikitext-2-raw wiki.test.raw; {m['threads']} threads",
          "- seconds per section: " + ", ".join(f"{k} {v:.0f}" for k, v in rep["sections_seconds"].items())]
    for name, r in rep.get("redone", {}).items():
        md.append(f"- section {name} measured again (`bench/run-report.sh --redo {name}`) at commit `{r['commit']}`"
                  f"{' (with local changes)' if r['commit_dirty'] else ''} on {r['date_utc']}, load average at start "
                  f"{', '.join(f'{x:.1f}' for x in r['load_average_at_start'])}"
                  + (f", on {r['machine']['cpu_model']} ({'AVX-512' if r['machine'].get('avx512f') else 'no AVX-512'})"
                     if r.get("machine") else "") + "; the rest of the report is from the commit above")
    md.append("")
    quality_md(rep, a.plots, md)
    niah_md(rep, a.plots, md)
    memory_md(rep, md)
    speed_md(rep, a.plots, md)
    serving_md(rep, a.plots, md)
    claims_md(rep, md)
    with open(a.md, "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
