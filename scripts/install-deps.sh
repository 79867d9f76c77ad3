#!/usr/bin/env bash
# Installs every Debian 12 package tqserve builds and tests against.
# Idempotent: when everything is already installed it only runs dpkg-query and exits.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache git ca-certificates curl unzip
  python3 python3-venv python3-pip
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libboost-dev libboost-system-dev
  liburing-dev
  libspdlog-dev libfmt-dev
  prometheus-cpp-dev
  nlohmann-json3-dev
  libyaml-cpp-dev
  libcli11-dev
  libhwy-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  prometheus
  fio
  chromium chromium-driver
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
