#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages, only those missing.
# Extra package names given as arguments are installed too (e.g. clang for the fuzzers).
set -euo pipefail
packages=(cmake ninja-build g++ make libfmt-dev nlohmann-json3-dev catch2 libssl-dev libpcre2-dev pkg-config python3 python3-dev
          python3-venv libcpp-httplib-dev prometheus-cpp-dev "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
