#!/usr/bin/env bash
# Runs a libFuzzer target under ASan+UBSan for a time budget.
#   scripts/fuzz.sh --list            the target names
#   scripts/fuzz.sh TARGET SECONDS    build (clang) and fuzz one target; prints the exec count
#   scripts/fuzz.sh --all SECONDS     every target, as many at once as there are cores
# Corpora live in build-fuzz/corpus/TARGET, seeded from the shared models and generated files.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
targets=(gguf safetensors tokenizer bpe audit_verify audit_reader hf_config kld_base chat_template openai_request)
if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${targets[@]}"
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh --list | TARGET SECONDS | --all SECONDS" >&2
  exit 2
fi
scripts/install-deps.sh clang libclang-rt-14-dev
selected=("$1")
[ "$1" = "--all" ] && selected=("${targets[@]}")
seconds=$2
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DSITSRT_BUILD_FUZZERS=ON -DSITSRT_BUILD_TESTS=OFF -DSITSRT_BUILD_CLI=ON \
  -DSITSRT_BUILD_EXAMPLES=OFF -DSITSRT_BUILD_BENCHMARKS=OFF -DSITSRT_WITH_CUDA=OFF >/dev/null
shared=$(realpath ../shared 2>/dev/null || true)
# Seeds (a tiny model, audit logs, a KLD base) come from a sitsrt CLI: the release build's when
# there is one (scripts/test.sh, which CI runs first), else this build's, which then compiles the
# whole library under the fuzz flags (the targets themselves link only the layers they parse).
cli=${SITSRT_CLI:-build/bin/sitsrt}
if [ ! -x "$cli" ]; then
  cmake --build build-fuzz --target sitsrt_cli >/dev/null
  cli=build-fuzz/bin/sitsrt
fi
for target in "${selected[@]}"; do
  case " ${targets[*]} " in *" $target "*) ;; *) echo "unknown target '$target' (see --list)" >&2; exit 2 ;; esac
  cmake --build build-fuzz --target "${target}_fuzz" >/dev/null
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus"
  tiny=build-fuzz/tiny.gguf
  [ -f "$tiny" ] || "$cli" make-model -o "$tiny" --dim 32 --layers 1 --heads 2 --kv-heads 1 \
    --ffn 32 --vocab 260 --type q4_0 >/dev/null 2>&1
  case $target in
    gguf)
      [ -d "$shared/models" ] && cp -n "$shared"/models/*.gguf "$corpus"/ 2>/dev/null || true
      cp -n "$tiny" tests/data/malformed/*.gguf "$corpus"/ ;;
    safetensors)  # first byte 0: a safetensors file, 1: an index JSON
      for f in tests/data/malformed/*.safetensors; do
        { printf '\x00'; cat "$f"; } >"$corpus/$(basename "$f")"
      done
      for f in tests/data/malformed/st_index_*/model.safetensors.index.json; do
        { printf '\x01'; cat "$f"; } >"$corpus/$(basename "$(dirname "$f")").json"
      done ;;
    hf_config)  # the malformed corpus's configs and every family the reference tests write
      for f in tests/data/malformed/hf_*/config.json; do cp "$f" "$corpus/$(basename "$(dirname "$f")").json"; done
      python3 -c "
import json, sys
sys.path.insert(0, 'tests/reference')
from hf_checkpoints import VARIANTS, config_for
for v in VARIANTS:
    open('$corpus/' + v + '.json', 'w').write(json.dumps(config_for(v, 'bf16')))
" 2>/dev/null || true ;;
    openai_request)  # first byte: bit 0 = chat; bodies of both endpoints
      printf '\x00{"model":"m","prompt":"Once","max_tokens":5,"stop":["a"],"logprobs":2,"stream":true,"stream_options":{"include_usage":true}}' >"$corpus/completion"
      printf '\x00{"model":"m","prompt":[1,2,3],"seed":7,"temperature":0.5,"top_p":0.9}' >"$corpus/tokens"
      printf '\x01{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi \xff"}]}],"logprobs":true,"top_logprobs":3}' >"$corpus/chat" ;;
    chat_template)  # the public templates of tests/data
      cp -n tests/data/chat_templates/*.jinja "$corpus"/ ;;
    audit_verify)  # first byte: 0 plain SHA-256 chain, 1 HMAC under the target's fixed key
      if [ ! -f "$corpus/plain" ]; then
        rm -f build-fuzz/seed.jsonl* && printf 'fuzz-key' >build-fuzz/seed.key
        "$cli" run -m "$tiny" -p "seed" -n 4 -q --audit-log build-fuzz/seed.jsonl \
          --audit-level topk >/dev/null
        { printf '\x00'; cat build-fuzz/seed.jsonl; } >"$corpus/plain"
        rm -f build-fuzz/seed.jsonl* && "$cli" run -m "$tiny" -p "seed" -n 4 -q \
          --audit-log build-fuzz/seed.jsonl --audit-key-file build-fuzz/seed.key --audit-rotate-bytes 1500 >/dev/null
        { printf '\x01'; cat build-fuzz/seed.jsonl; for r in build-fuzz/seed.jsonl.*; do
            printf '\n#--\n'; cat "$r"; done; } >"$corpus/hmac-rotated"
      fi ;;
    kld_base)  # first byte: bit 0 = repair the checksums before parsing
      if [ ! -f "$corpus/base" ]; then
        printf 'Once upon a time there was a little dog. It liked to run. %.0s' $(seq 40) >build-fuzz/seed.txt
        rm -f build-fuzz/seed.kld && "$cli" perplexity -m "$tiny" -f build-fuzz/seed.txt -c 8 \
          --chunks 2 --kl-divergence-base build-fuzz/seed.kld >/dev/null 2>&1
        { printf '\x00'; cat build-fuzz/seed.kld; } >"$corpus/base"
        { printf '\x01'; cat build-fuzz/seed.kld; } >"$corpus/base-repaired"
      fi ;;
    audit_reader)  # first byte even: a key file; odd: an audit log file (replay/show reader)
      printf '\x00k3y\n' >"$corpus/key"
      printf '\x00\n' >"$corpus/key-empty"
      if [ ! -f "$corpus/log" ]; then
        rm -f build-fuzz/seed.jsonl* && "$cli" run -m "$tiny" -p "seed" -n 4 -q \
          --audit-log build-fuzz/seed.jsonl --audit-level topk >/dev/null
        { printf '\x01'; cat build-fuzz/seed.jsonl; } >"$corpus/log"
        { printf '\x01'; head -c 300 build-fuzz/seed.jsonl; } >"$corpus/log-torn"
      fi ;;
    *)
      printf 'Once upon a time' >"$corpus/ascii"
      printf '\x10<|im_start|>user\nI'"'"'m 12345 <tag>x' >"$corpus/special"
      printf 'caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87  \t\n' >"$corpus/utf8"
      printf '\xff\xfe\xc0\xaf\xed\xa0\x80' >"$corpus/invalid" ;;
  esac
done
# Each fuzzer is one process on one core: they run $(nproc) at a time (the seeds above came from
# one CLI in turn), each for its full budget; results are reported in target order.
run_fuzzer() {
  local target=$1 dict=tests/fuzz/dict/$1.dict dict_arg=()
  [ -f "$dict" ] && dict_arg=(-dict="$dict")
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    "build-fuzz/fuzz/${target}_fuzz" "${dict_arg[@]}" "build-fuzz/corpus/$target" -max_total_time="$seconds" \
    -rss_limit_mb=2048 -timeout=10 -max_len=1048576 -print_final_stats=1 >"build-fuzz/$target.log" 2>&1
  echo $? >"build-fuzz/$target.status"
}
pids=()
for target in "${selected[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
  rm -f "build-fuzz/$target.status"
  run_fuzzer "$target" &
  pids+=($!)
done
wait "${pids[@]}" || true
failed=0
for target in "${selected[@]}"; do
  log=build-fuzz/$target.log
  if [ "$(cat "build-fuzz/$target.status" 2>/dev/null)" != 0 ]; then
    tail -40 "$log"
    echo "fuzz $target: FAILED"
    failed=1
    continue
  fi
  execs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  echo "fuzz $target: ${execs:-?} executions in ${seconds}s, no crash"
done
exit "$failed"
