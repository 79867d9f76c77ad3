#!/usr/bin/env bash
# tqserve eval / calibrate end to end on the default model (skips without it) and WikiText-2 (tests/data).
# Usage: eval_cli_test.sh path/to/tqserve
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bin=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
text="$root/tests/data/wikitext-2-raw/wiki.test.raw"
model="${TQ_MODEL_DIR:-$HOME/.cache/tqserve/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$text" ] || { echo "FAIL: $text is absent (it ships in tests/data)"; exit 1; }
[ -f "$model" ] || skip_test "needs $model (scripts/fetch-model.sh)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
json() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }

expect_rc 0 "eval ppl --json" -- "$bin" eval ppl -m "$model" -f "$text" --ctx 256 --chunks 1 -t 2 --json
echo "$out" | sed -n '/^{/,$p' > "$tmp/ppl.json"
ppl=$(json "$tmp/ppl.json" "d['ppl']")
python3 -c "import sys; sys.exit(0 if 5 < $ppl < 100 else 1)" && pass "ppl $ppl is plausible" || fail "ppl $ppl"
[ "$(json "$tmp/ppl.json" "d['tokens']")" = 127 ] && pass "scores ctx/2 - 1 tokens" || fail "token count"
# Progress: a line with chunks done and an ETA on a terminal (script(1) gives the command a pty), none when piped.
grep -q $'\r' <<<"$out" && fail "progress printed into a pipe: $out" || pass "no progress line when piped"
expect_rc 0 "eval ppl on a terminal" -- script -qec "'$bin' eval ppl -m '$model' -f '$text' --ctx 128 --chunks 2 -t 2" \
  /dev/null
expect_out "ppl: chunk 2/2 (100%)" "a terminal shows the chunks done"
expect_out "ETA" "and the time left"
expect_rc 0 "eval niah on a terminal" -- script -qec "'$bin' eval niah -m '$model' -f '$text' --lengths 256 \
  --depths 0.5 --trials 2 -t 2" /dev/null
expect_out "niah: needle 2/2 (100%)" "eval niah shows the needles done"
expect_out "found " "and the needles found so far"
# The completion prompt (what a base model without a chat template gets by default) on the same model: it runs,
# says which style it used, and the 6x preset is named in the JSON.
expect_rc 0 "eval niah --style completion" -- "$bin" eval niah -m "$model" -f "$text" --lengths 256 --depths 0.5 \
  --trials 2 -t 2 --style completion --kv-preset 6x --json
echo "$out" | sed -n '/^{/,$p' > "$tmp/niah.json"
[ "$(json "$tmp/niah.json" "d['style']")" = completion ] && pass "niah JSON names the completion style" \
  || fail "niah style: $(cat "$tmp/niah.json")"
[ "$(json "$tmp/niah.json" "d['kv_preset']")" = 6x ] && pass "niah JSON names the preset" || fail "niah preset"
[ "$(json "$tmp/niah.json" "sum(c['trials'] for c in d['cells'])")" = 2 ] && pass "two needles asked" \
  || fail "niah trials"
expect_rc 2 "unknown niah style" -- "$bin" eval niah -m "$model" -f "$text" --style riddle
expect_rc 0 "calibrate on a terminal" -- script -qec "'$bin' calibrate -m '$model' -f '$text' --ctx 128 --chunks 2 \
  -t 2 -o '$tmp/progress-profile.json'" /dev/null
expect_out "calibrate: chunk 2/2 (100%)" "calibrate (concentration) shows the chunks done"
# Model load: the bytes read and checked (the file's checksum is part of the prefix cache's fingerprint).
size_mib=$(( $(stat -c %s "$model") >> 20 ))
expect_rc 0 "generate on a terminal" -- script -qec "'$bin' generate -m '$model' -p Hi -n 2 -t 2" /dev/null
expect_out "model: MiB checked $size_mib/$size_mib (100%)" "model load shows the MiB read and checked"
expect_rc 0 "generate piped" -- "$bin" generate -m "$model" -p Hi -n 2 -t 2
grep -q "MiB checked" <<<"$out" && fail "load progress printed into a pipe: $out" || pass "no load progress when piped"

expect_rc 0 "eval kld tq4 vs f16" -- "$bin" eval kld -m "$model" -f "$text" --ctx 256 --chunks 1 -t 2 \
  --kv-k tq4 --kv-v tq4 --json --dump-rows "$tmp/rows.bin"
echo "$out" | sed -n '/^{/,$p' > "$tmp/kld.json"
python3 -c "import json; d=json.load(open('$tmp/kld.json')); assert d['kld_mean'] > 0 and d['same_top'] < 1 and d['bits_per_value'] == 4.25, d" \
  && pass "kld of tq4 is positive" || fail "kld json: $(cat "$tmp/kld.json")"
# --dump-rows: every coded page's 128 rows, K and V, of 30 layers x 3 KV heads x 2 full pages (256 tokens), each
# a record of 4 int32 (layer, head, side, head_dim 64) and 64 finite f32 that are not all zero.
python3 - "$tmp/rows.bin" <<'PY' && pass "--dump-rows writes every coded row" || fail "--dump-rows file"
import math, struct, sys
data = open(sys.argv[1], "rb").read()
rec = 16 + 64 * 4
assert len(data) == 2 * 30 * 3 * 2 * 128 * rec, len(data)
seen = {}
for off in range(0, len(data), rec):
    layer, head, side, d = struct.unpack_from("4i", data, off)
    assert 0 <= layer < 30 and 0 <= head < 3 and side in (0, 1) and d == 64, (layer, head, side, d)
    y = struct.unpack_from("64f", data, off + 16)
    assert all(math.isfinite(v) for v in y) and any(v != 0 for v in y)
    seen[(layer, head, side)] = seen.get((layer, head, side), 0) + 1
assert len(seen) == 180 and set(seen.values()) == {256}, seen
PY
expect_rc 1 "--dump-rows into a missing directory" -- "$bin" eval kld -m "$model" -f "$text" --ctx 256 --chunks 1 \
  -t 2 --kv-k tq4 --kv-v tq4 --dump-rows "$tmp/none/rows.bin"
expect_out "cannot write --dump-rows file" "names the file it cannot write"

expect_rc 0 "calibrate" -- "$bin" calibrate -m "$model" -f "$text" --ctx 256 --chunks 1 -t 2 -o "$tmp/profile.json"
[ "$(json "$tmp/profile.json" "len(d['score']) * len(d['score'][0])")" = 90 ] && pass "profile has 30x3 heads" \
  || fail "profile shape"
expect_rc 0 "eval ppl with the longdoc preset" -- "$bin" eval ppl -m "$model" -f "$text" --ctx 256 --chunks 1 -t 2 \
  --kv-preset longdoc --kv-profile "$tmp/profile.json" --json
echo "$out" | sed -n '/^{/,$p' > "$tmp/preset.json"
[ "$(json "$tmp/preset.json" "[d['heads_by_class'][k] for k in ('hot', 'active', 'sparse')]")" = "[9, 54, 27]" ] \
  && pass "longdoc splits 90 heads 9/54/27" || fail "classes: $(cat "$tmp/preset.json")"

# Sensitivity: 90 heads x (tq4, int8) single-head runs on one chunk of 192 tokens (queries from position 128 on read
# the head's first page compressed; a query's own page is exact).
expect_rc 1 "sensitivity on a one-page chunk" -- "$bin" calibrate --method sensitivity -m "$model" -f "$text" \
  --ctx 128 --chunks 1 -t 2 -o "$tmp/sens128.json"
expect_out "needs --ctx above 128" "says a one-page chunk measures nothing"
expect_rc 0 "calibrate --method sensitivity" -- "$bin" calibrate --method sensitivity -m "$model" -f "$text" \
  --ctx 192 --chunks 1 --skip-chunks 2 -t 2 -o "$tmp/sens.json"
python3 - "$tmp/sens.json" <<'PY' && pass "sensitivity profile: 30x3 scores = tq4 KLD - int8 KLD" \
  || fail "sensitivity profile: $(cat "$tmp/sens.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["method"] == "sensitivity" and d["format"] == "tq4" and d["baseline_format"] == "int8", d
assert d["queries"] == 95 and len(d["score"]) == 30 and all(len(r) == 3 for r in d["score"])
k = [x for r in d["kld"] for x in r]; b = [x for r in d["kld_baseline"] for x in r]; s = [x for r in d["score"] for x in r]
assert all(x > 0 for x in k + b), "every head's KV change costs some KLD"
assert all(abs(si - (ki - bi)) < 1e-12 for si, ki, bi in zip(s, k, b))
assert sum(k) > sum(b), "tq4 costs more than int8 overall"
PY
expect_rc 0 "eval ppl with longdoc on the sensitivity profile" -- "$bin" eval ppl -m "$model" -f "$text" --ctx 256 \
  --chunks 1 -t 2 --kv-preset longdoc --kv-profile "$tmp/sens.json" --json
echo "$out" | sed -n '/^{/,$p' > "$tmp/sens_preset.json"
[ "$(json "$tmp/sens_preset.json" "[d['heads_by_class'][k] for k in ('hot', 'active', 'sparse')]")" = "[9, 54, 27]" ] \
  && pass "longdoc on the sensitivity profile splits 9/54/27" || fail "classes: $(cat "$tmp/sens_preset.json")"
expect_rc 0 "explicit shares preset" -- "$bin" eval ppl -m "$model" -f "$text" --ctx 256 --chunks 1 -t 2 \
  --kv-preset 89:0:1 --kv-profile "$tmp/sens.json" --json
echo "$out" | sed -n '/^{/,$p' > "$tmp/shares.json"
[ "$(json "$tmp/shares.json" "[d['heads_by_class'][k] for k in ('hot', 'active', 'sparse')]")" = "[89, 0, 1]" ] \
  && pass "89:0:1 leaves one head SPARSE" || fail "classes: $(cat "$tmp/shares.json")"
expect_rc 2 "unknown calibration method" -- "$bin" calibrate --method entropy -m "$model" -f "$text" -o "$tmp/x.json"
tiny="$root/tests/data/models/stories260K.gguf"
expect_rc 1 "sensitivity on head_dim 8" -- "$bin" calibrate --method sensitivity -m "$tiny" -f "$text" --ctx 256 \
  --chunks 1 -o "$tmp/x.json"
expect_out "does not support head_dim 8" "says the page formats need a larger head"

expect_rc 0 "bench decode" -- "$bin" bench decode -m "$model" -t 2 --ctx 64,160 --formats f16,tq4 --steps 2 --json
echo "$out" | sed -n '/^\[/,$p' > "$tmp/decode.json"
python3 -c "import json; d=json.load(open('$tmp/decode.json')); assert len(d) == 4 and all(r['tokens_per_second'] > 0 for r in d) and d[0]['ratio_vs_first'] == 1, d" \
  && pass "bench decode reports every (format, ctx)" || fail "bench decode json: $(cat "$tmp/decode.json")"

# stdout alone is the JSON, also with a cold tier, which logs its I/O backend: every log line goes to stderr.
set +e
"$bin" bench decode -m "$model" -t 2 --ctx 160 --formats tq4 --steps 1 --rounds 1 --kv-cold-dir "$tmp/cold" --json \
  > "$tmp/cold.json" 2> "$tmp/cold.err"
set -e
python3 -c "import json; d=json.load(open('$tmp/cold.json')); assert [r['config'] for r in d] == ['tq4', 'tq4@cold'], d" \
  && pass "bench decode --json with a cold tier: stdout is JSON" || fail "stdout: $(head -c 300 "$tmp/cold.json")"
grep -q "cold tier" "$tmp/cold.err" && pass "the cold tier's log lines go to stderr" || fail "stderr: $(cat "$tmp/cold.err")"

expect_rc 1 "unknown preset" -- "$bin" eval ppl -m "$model" -f "$text" --chunks 1 --kv-preset fastest
expect_out "unknown KV preset" "names the problem"
expect_rc 1 "ranked preset without a profile" -- "$bin" eval ppl -m "$model" -f "$text" --chunks 1 --kv-preset chat
expect_out "needs a head profile" "says a profile is needed"
expect_rc 1 "missing text file" -- "$bin" eval ppl -m "$model" -f "$tmp/none.txt"
# Format names come from the option table (the same check as `serve`): a usage error naming the option.
expect_rc 2 "unknown format" -- "$bin" eval ppl -m "$model" -f "$text" --kv-k tq9 --kv-v tq9 --chunks 1
expect_out "option kv.k_format (flag --kv-k): 'tq9' is not one of" "names the option and the formats"
# ... read from the same sources as `serve`: the environment too.
expect_rc 2 "unknown format from the environment" -- env TQ_KV_K_FORMAT=tq9 "$bin" eval ppl -m "$model" -f "$text" --chunks 1
expect_out "TQ_KV_K_FORMAT" "names the variable"
finish
