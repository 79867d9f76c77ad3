#!/usr/bin/env bash
# Black-box checks of the tqserve binary's command line: --version, serve --print-config, config errors (exit 2).
# Usage: cli_test.sh path/to/tqserve
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bin=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# A clean environment: no TQ_* from the caller.
run() { env -u TQ_CONFIG $(env | grep -o '^TQ_[A-Z0-9_]*' | sed 's/^/-u /') "$@"; }

expect_rc 0 "--version" -- run "$bin" --version
expect_out "tqserve " "version line"
expect_out "commit:" "commit line"
expect_out "simd:" "simd targets"
expect_rc 2 "unknown --simd target" -- run "$bin" --simd NEON formats
expect_out "unknown SIMD target 'NEON'" "names the target"
expect_out "AVX2" "lists the compiled targets"
expect_rc 0 "--simd SSE4 runs the SSE4 kernels" -- run "$bin" --simd SSE4 bench encode --min-seconds 0.01 --decode-ctx 0 --json
expect_out '"simd_target": "SSE4"' "the encoder ran on SSE4"
expect_rc 0 "bench attention on 2 threads" -- run "$bin" bench attention --ctx 300 --working-set-mib 2 \
  --min-seconds 0.01 --rounds 1 --threads 2 --formats tq4 --json
expect_out '"threads": 2' "the run says its threads"
expect_out '"format": "tq4"' "the asked format is measured"
expect_out '"format": "f16"' "f16 is measured beside it"
expect_rc 0 "bench attention under --simd SSE4" -- run "$bin" --simd SSE4 bench attention --ctx 300 \
  --working-set-mib 2 --min-seconds 0.01 --rounds 1 --formats tq3 --json
expect_out '"simd_target": "SSE4"' "the run says its SIMD target"
expect_rc 0 "bench attention at the targets' shape" -- run "$bin" bench attention --ctx 8192 --dim 64 --gqa 3 \
  --working-set-mib 4 --min-seconds 0.01 --rounds 1 --formats tq3 tq4
expect_out "target: tq4 at least 1.5x f16: " "states the tq4 target beside its ratio"
expect_out "target: tq3 at least 1.7x f16: " "states the tq3 target beside its ratio"
expect_rc 0 "formats --measure" -- run "$bin" formats --measure --vectors 200 --dim 64
expect_out "not coded (plain f32 rows): exact" "f32 gets a line that says it is not measured"
expect_out "tq4 " "a coded format is measured"
expect_rc 0 "formats --measure --json" -- run "$bin" formats --measure --vectors 200 --json
expect_out '"coded": false' "the f32 row says it is not coded"
expect_out '"ip_err":' "coded rows carry their errors"
expect_rc 2 "bench attention --threads 0" -- run "$bin" bench attention --threads 0
expect_out "--threads" "names the option"

expect_rc 0 "serve --print-config" -- run "$bin" serve --print-config
expect_out "http_port: 8080  # default" "default http port"

cat > "$tmp/c.yaml" <<'YAML'
server:
  http_port: 9001
  grpc_port: 9002
log:
  level: debug
YAML
expect_rc 0 "precedence file < env < flag" -- \
  run env TQ_SERVER_GRPC_PORT=9102 TQ_LOG_LEVEL=warn "$bin" serve --config "$tmp/c.yaml" --log-level error --print-config
expect_out "http_port: 9001  # file" "file value"
expect_out "grpc_port: 9102  # env" "env beats file"
expect_out 'level: "error"  # flag' "flag beats env"

expect_rc 0 "config file from TQ_CONFIG" -- run env TQ_CONFIG="$tmp/c.yaml" "$bin" serve --print-config
expect_out "http_port: 9001  # file" "TQ_CONFIG file value"

expect_rc 2 "out-of-range flag" -- run "$bin" serve --http-port 70000 --print-config
expect_out "server.http_port" "names the option"
expect_out "[1, 65535]" "names the range"
expect_rc 2 "wrong type in env" -- run env TQ_ENGINE_THREADS=lots "$bin" serve --print-config
expect_out "TQ_ENGINE_THREADS" "names the variable"
expect_rc 2 "unknown env option" -- run env TQ_HTTP_PORT=1 "$bin" serve --print-config
expect_rc 2 "unknown flag" -- run "$bin" serve --no-such-flag
printf 'server:\n  htp_port: 1\n' > "$tmp/bad.yaml"
expect_rc 2 "unknown key in file" -- run "$bin" serve --config "$tmp/bad.yaml" --print-config
expect_out "server.htp_port" "names the unknown key"
expect_rc 2 "missing config file" -- run "$bin" serve --config "$tmp/none.yaml" --print-config
expect_rc 2 "no subcommand" -- run "$bin"
finish
