#!/usr/bin/env bash
# The main job on the embedded default: build the CLI, write the default model (random
# weights, made by `sitsrt make-model`; not a trained model) and generate from it.
# Pass a real GGUF instead with:  build/bin/sitsrt run -m MODEL.gguf -p "..." -n 64
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSITSRT_BUILD_TESTS=OFF
cmake --build build --target sitsrt_cli
model=build/models/default-q8_0.gguf
if [ ! -f "$model" ]; then
  mkdir -p build/models
  build/bin/sitsrt make-model -o "$model" --dim 256 --layers 4 --heads 8 --kv-heads 4 --ffn 704 \
    --vocab 2048 --type q8_0 --seed 1234
fi
build/bin/sitsrt run -m "$model" -p "${1:-Once upon a time}" -n 64 --seed 42
