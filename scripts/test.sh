#!/usr/bin/env bash
# Builds everything and runs the whole test suite: unit and end-to-end tests (CTest), the CLI
# tests, and a build of the examples against the installed package (find_package(sitsrt)).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PWD/build/install"
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"
cmake --install build >/dev/null
cmake -S examples/minimal -B build/examples-installed -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/examples-installed
tests/cli/cli_test.sh build/bin/sitsrt build/examples-installed
