#!/usr/bin/env bash
# Entrypoint of the tqserve container image (see Dockerfile and docs/deploy.md).
#   docker-entrypoint.sh [serve] [FLAGS...]  fetch the default model if it is needed and absent, then run the daemon
#   docker-entrypoint.sh fetch-model         fetch (or verify) the default model and exit (a Kubernetes initContainer)
#   docker-entrypoint.sh health              exit 0 when GET /health on the local HTTP port answers 200
#   docker-entrypoint.sh COMMAND...          any other command runs as given (e.g. `tqserve inspect`, `bash`)
# The default model is needed when neither --model / --config nor TQ_MODEL_PATH / TQ_CONFIG could name another one:
# with a config file the daemon decides, and this script fetches only if the default file is absent and the
# effective model.path (from `tqserve serve --print-config`) is empty.
# Settings (TQSERVE_*: the daemon's own TQ_* namespace refuses unknown names):
#   TQSERVE_FETCH_MODEL=0   never fetch at start (the model must already be in TQ_MODEL_DIR or named by the config)
#   TQSERVE_HEALTH_PORT     port for `health` (default: TQ_SERVER_HTTP_PORT, else 8080)
set -euo pipefail

# The image's layout; the overrides exist for scripts/validate-deploy.sh, which runs this script outside the image.
readonly bin=${TQSERVE_BIN:-/usr/local/bin/tqserve}
readonly scripts=${TQSERVE_SCRIPTS_DIR:-/opt/tqserve/scripts}
readonly baked_dir=${TQSERVE_BAKED_MODEL_DIR:-/opt/tqserve/models}

say() { echo "docker-entrypoint: $*" >&2; }

health() {
  local port=${TQSERVE_HEALTH_PORT:-${TQ_SERVER_HTTP_PORT:-8080}} status=""
  # bash's /dev/tcp: no HTTP client in the image. HTTP/1.0 so the server closes the connection after answering.
  { exec 3<> "/dev/tcp/127.0.0.1/$port"; } 2> /dev/null || return 1
  printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  IFS= read -r -t 5 status <&3 || return 1
  exec 3<&-
  [[ $status == "HTTP/1."?" 200"* ]]
}

default_model_name() {  # the first name="..." of fetch-model.sh: its no-argument case, the default model
  sed -n 's/^ *name="\(.*\)"$/\1/p' "$scripts/fetch-model.sh" | head -n 1
}

model_key() {
  awk -v k="$1:" '/^model:/ { m = 1; next } /^[^ ]/ { m = 0 } m && $1 == k { print $2 }' | tr -d '"'
}

ensure_model() {
  [ "${TQSERVE_FETCH_MODEL:-1}" = 0 ] && return 0
  local name dir path config
  name=$(default_model_name)
  # A baked image: use its model unless the volume already has one.
  if [ -z "${TQ_MODEL_PATH:-}" ] && [ -f "$baked_dir/$name" ] && [ ! -f "${TQ_MODEL_DIR:-}/$name" ]; then
    export TQ_MODEL_DIR=$baked_dir
  fi
  # Ask the daemon what it will load (file < env < flags), so a --model flag or a config file is honoured.
  if ! config=$("$bin" serve "$@" --print-config 2>&1); then
    echo "$config" >&2
    exit 2
  fi
  # print-config lines look like `  path: "/x/y.gguf"  # flag` under `model:`.
  path=$(model_key path <<< "$config")
  dir=$(model_key dir <<< "$config")
  [ -n "$path" ] && return 0
  [ -f "$dir/$name" ] && return 0
  say "the default model $name is not in $dir; fetching it (TQSERVE_FETCH_MODEL=0 turns this off)"
  TQ_MODEL_DIR=$dir bash "$scripts/fetch-model.sh" > /dev/null
}

cmd=${1:-serve}
case "$cmd" in
  health)
    health
    ;;
  fetch-model)
    bash "$scripts/fetch-model.sh"
    ;;
  serve | -*)
    [ "$cmd" = serve ] && [ $# -gt 0 ] && shift
    for a in "$@"; do
      if [ "$a" = --print-config ] || [ "$a" = --help ] || [ "$a" = -h ]; then exec "$bin" serve "$@"; fi
    done
    ensure_model "$@"
    exec "$bin" serve "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
