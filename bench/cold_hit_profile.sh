#!/usr/bin/env bash
# Where the cold tier's hit path spends a decode step: profiles `tqserve bench decode` with every head's pages
# in the cold tier (uniform:FMT, the working set cached) and prints, for the cold configuration's decode phase
# (the samples after the last prefill matmul sample and after the first cold-cache sample), the share of samples
# in the cold tier's own code (pinning, the cache, its maps and list, read-ahead, locks, the scheduler).
# Usage: bench/cold_hit_profile.sh [TQSERVE] [CTX] [FORMAT]   (needs perf; cold pages under a temporary dir)
set -euo pipefail
bin=${1:-build/tqserve}
ctx=${2:-4096}
fmt=${3:-tq4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/cold"
perf record -q -e cpu-clock -F 2000 -o "$work/perf.data" "$bin" bench decode -t 2 --ctx "$ctx" \
  --formats "uniform:$fmt" --kv-cold-dir "$work/cold" --steps 100 --rounds 1 2>&1 | grep "tok/s" || true
perf script -i "$work/perf.data" -F time,ip,sym 2>/dev/null >"$work/samples.txt"
python3 - "$work/samples.txt" <<'PY'
import collections, re, sys
rows = []
for line in open(sys.argv[1]):
    m = re.match(r'\s*([\d.]+):\s+\S+\s+(.*)$', line)
    if m:
        rows.append((float(m.group(1)), m.group(2)))
last_prefill = max(t for t, s in rows if 'Tile<' in s)
decode = [(t, s) for t, s in rows if t > last_prefill + 0.05]
first_cold = min(t for t, s in decode if re.search(r'KvPageStore::Pin|ColdPageCache::Get', s))
cold = [s for t, s in decode if t >= first_cold]
own = re.compile(r'Pin|ColdPageCache|_Hashtable|_List_node|lll_lock|futex|__schedule|KvPageStore::Prefetch|_Sp_counted')
mine = [re.sub(r'\s*\(.*', '', s)[:80] for s in cold if own.search(s)]
print(f"cold decode phase: {len(cold)} samples, cold tier's own code {len(mine)} ({100 * len(mine) / len(cold):.1f}%)")
for name, n in collections.Counter(mine).most_common(10):
    print(f"  {100 * n / len(cold):5.2f}%  {name}")
PY
