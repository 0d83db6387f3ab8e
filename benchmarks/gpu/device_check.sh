#!/usr/bin/env bash
# The CUDA backend's device check: one command for a machine with one GPU (an H200 here), the
# CUDA toolkit (compute-sanitizer, cuBLASLt) and none of our packages. Run it from the repository
# root with the bundle scripts/cuda-bundle.sh builds on a development machine (build/cuda-bundle,
# carried with the working tree; its binaries run through the bundle's own loader and libraries).
#   1. every [cuda] test: cuda_formats_test, cuda_backend_test, cuda_backend_model_test
#   2. compute-sanitizer --tool memcheck on the kernel tests; the same tokens and logprobs with and
#      without programmatic dependent launch
#   3. bench_cuda: read bandwidth and a cuBLASLt BF16 GEMM as ceilings, every decode kernel on
#      Llama-3-8B layer shapes at batch 1 and 16 (GB/s, % of bandwidth), a prefill shape (TFLOP/s)
#   4. end to end: a Llama-3-8B-shaped random model (make-model on the device) in FP8 (one scale
#      per output row, as FP8 checkpoints: prompts run FP8 x FP8 through cuBLASLt on Hopper) and
#      in INT4 g128, decode tok/s at batch 1 and 16 (sitsrt bench --device cuda; decode steps
#      replay CUDA graphs; batch 16 on the split tensor-core decode), prefill tok/s at batch 1, and
#      INT4 at batch 1 without graphs (--no-device-graphs) and without programmatic dependent
#      launch (SITSRT_CUDA_PDL=0), and at batch 16 unsplit (SITSRT_CUDA_MMA_SPLIT=0; last, the
#      first to go when the budget runs short)
# Logs and JSON go to $OUT (the device tool's output folder) or /tmp/sitsrt-device-check; the
# summary table comes last and grows in $OUT/summary.md step by step (a run cut short keeps what
# it finished). The whole check keeps to SITSRT_DEVICE_BUDGET seconds (default 540, under the
# device tool's 600 per command): each step's limit is cut to what is left, and steps that would
# start with under 15 s left are skipped. Exits 1 when a test or memcheck failed, 2 without a bundle.
set -uo pipefail
cd "$(dirname "$0")/../.."
bundle="$PWD/${SITSRT_CUDA_BUNDLE:-build/cuda-bundle}"
out=${OUT:-/tmp/sitsrt-device-check}
work=${SITSRT_DEVICE_WORK:-/tmp/sitsrt-device-work}
mkdir -p "$out" "$work"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
loader="$bundle/lib/ld-linux-x86-64.so.2"
libs="$bundle/lib:$cuda_home/lib64:$cuda_home/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SITSRT_SHARED_DIR="$bundle/shared"
run() { "$loader" --library-path "$libs" "$@"; }
# Every step has a time limit (exit 124 when it is hit), so one hang cannot take the device
# tool's whole command: the steps after it still run and the summary still comes.
budget=${SITSRT_DEVICE_BUDGET:-540}
limited() {
  local seconds=$1 left=$((budget - SECONDS - 10)); shift
  [ "$left" -ge 15 ] || { echo "device_check: skipped (time budget spent): $*" >&2; return 125; }
  [ "$seconds" -le "$left" ] || seconds=$left
  timeout --kill-after=10 "$seconds" "$@"
}
limited_run() { local seconds=$1; shift; limited "$seconds" "$loader" --library-path "$libs" "$@"; }
[ -x "$loader" ] || { echo "device_check: no bundle at $bundle (scripts/cuda-bundle.sh builds it)" >&2; exit 2; }

start=$SECONDS
status=0
summary=("| step | result | seconds | detail |" "|---|---|---|---|")
note() {
  summary+=("| $1 | $2 | $3 | $4 |")
  echo "== $1: $2 ($3 s) $4"
  printf '%s\n' "${summary[@]}" >"$out/summary.md"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$out/gpu.txt"

# 1. The tests. A binary that skipped everything (exit 77) saw no device: a failure here.
for t in cuda_formats_test cuda_backend_test cuda_backend_model_test; do
  t0=$SECONDS
  limited_run 150 "$bundle/bin/$t" >"$out/$t.log" 2>&1
  rc=$?
  counts=$(grep -E "^(test cases|All tests passed)" "$out/$t.log" | tail -n 1)
  skips=$(grep -c "^SKIPPED" "$out/$t.log")
  if [ $rc -eq 0 ]; then result=passed; else result="FAILED (exit $rc)"; status=1; fi
  note "test $t" "$result" $((SECONDS - t0)) "$counts; $skips skipped"
done

if grep -q "^SKIPPED: \[cuda\] no CUDA device" "$out/cuda_backend_test.log"; then
  echo "device_check: the tests see no CUDA device ($(grep -m1 '^SKIPPED' "$out/cuda_backend_test.log")); stopping" >&2
  printf '%s\n' "${summary[@]}" | tee "$out/summary.md"
  exit 1
fi

# 2. memcheck on the kernel tests (the model test's attention case included; the prefill GEMM
#    case is left out: its time under memcheck goes to cuBLASLt's kernels, not ours). Under
#    memcheck the tests leave out their largest shapes (SITSRT_TEST_SMALL_SHAPES, every kernel
#    and format still runs); step 1 ran them all.
sanitizer="$cuda_home/bin/compute-sanitizer"
[ -x "$sanitizer" ] || sanitizer=$(command -v compute-sanitizer || echo "$sanitizer")
t0=$SECONDS
export SITSRT_TEST_SMALL_SHAPES=1
limited 150 "$sanitizer" --tool memcheck --error-exitcode 9 --print-limit 20 "$loader" --library-path "$libs" \
  "$bundle/bin/cuda_backend_test" "~*prefill GEMM*" >"$out/memcheck_kernels.log" 2>&1
rc1=$?
limited 90 "$sanitizer" --tool memcheck --error-exitcode 9 --print-limit 20 "$loader" --library-path "$libs" \
  "$bundle/bin/cuda_backend_model_test" "cuda paged attention*" >"$out/memcheck_attention.log" 2>&1
rc2=$?
unset SITSRT_TEST_SMALL_SHAPES
errors=$(grep -h "ERROR SUMMARY" "$out/memcheck_kernels.log" "$out/memcheck_attention.log" | tr '\n' ' ')
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]; then result=clean; else result="FAILED (exit $rc1 / $rc2)"; status=1; fi
note "memcheck" "$result" $((SECONDS - t0)) "$errors"

# 2b. Programmatic dependent launch changes no bit: greedy tokens, logprobs and alternatives of
#     stories260K on the GPU (decode graphs on) with it and without it (SITSRT_CUDA_PDL=0).
t0=$SECONDS
for pdl in 1 0; do
  export SITSRT_CUDA_PDL=$pdl
  limited_run 60 "$bundle/bin/sitsrt" run -m "$bundle/shared/models/stories260K.gguf" --device cuda -n 96 --temp 0 \
    -p "Once upon a time" --json 2>"$out/pdl_$pdl.log" | grep '"type":"token"' | sed 's/"t":[0-9.e+-]*,//' \
    >"$out/pdl_$pdl.jsonl"
  unset SITSRT_CUDA_PDL
done
tokens=$(wc -l <"$out/pdl_1.jsonl")
if [ "$tokens" -gt 0 ] && cmp -s "$out/pdl_1.jsonl" "$out/pdl_0.jsonl"; then
  result="same bits"
else
  result="DIFFERENT or FAILED"
  status=1
fi
note "PDL on = off" "$result" $((SECONDS - t0)) "$tokens tokens compared"

# 3. Kernels against the ceilings.
t0=$SECONDS
limited_run 150 "$bundle/bin/bench_cuda" >"$out/bench_cuda.md" 2>&1
rc=$?
note "bench_cuda" "$([ $rc -eq 0 ] && echo done || echo "FAILED (exit $rc)")" $((SECONDS - t0)) \
  "$(grep '^ceilings' "$out/bench_cuda.md")"

# 4. End to end on the 8B shape, one format at a time (the files are 8.5 and 4.3 GB). paths: the
#    matmul kernels a run's JSON counts (prefill FP8 x FP8 / BF16, decode tensor / CUDA cores) and
#    its prompt attentions (tiled on the tensor cores / a block per row).
paths() {
  local f=$1 p8 pb dt dc at ar ru
  p8=$(grep -o '"device_prefill_fp8_matmuls": [0-9]*' "$f" | head -n 1 | awk '{print $2}')
  pb=$(grep -o '"device_prefill_bf16_matmuls": [0-9]*' "$f" | head -n 1 | awk '{print $2}')
  dt=$(grep -o '"device_decode_tensor_core_matmuls": [0-9]*' "$f" | head -n 1 | awk '{print $2}')
  dc=$(grep -o '"device_decode_cuda_core_matmuls": [0-9]*' "$f" | head -n 1 | awk '{print $2}')
  at=$(grep -o '"device_prefill_tiled_attentions": [0-9]*' "$f" | head -n 1 | awk '{print $2}')
  ar=$(grep -o '"device_prefill_row_attentions": [0-9]*' "$f" | head -n 1 | awk '{print $2}')
  ru=$(grep -o '"device_prefill_fp8_activation_reuses": [0-9]*' "$f" | head -n 1 | awk '{print $2}')
  echo "matmuls: prefill fp8 ${p8:-?} (activations in place ${ru:-?}) bf16 ${pb:-?}, decode tensor cores ${dt:-?}" \
    "cuda cores ${dc:-?}; prompt attentions: tiled ${at:-?} per row ${ar:-?}"
}
for format in fp8-channel q4g128; do
  t0=$SECONDS
  model="$work/llama3-8b-shape-$format.gguf"
  limited_run 120 "$bundle/bin/sitsrt" make-model -o "$model" --dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 \
    --vocab 128256 --ctx 1024 --type "$format" -t "$(nproc)" >"$out/make_model_$format.log" 2>&1
  made=$((SECONDS - t0))
  # batch 1 with decode graphs (the default), 16 streams, and for INT4 batch 1 launched from the
  # host (--no-device-graphs) and without programmatic dependent launch (SITSRT_CUDA_PDL=0) to
  # measure what each saves
  batches="1 16"
  [ "$format" = q4g128 ] && batches="1 16 1-eager 1-no-pdl 16-unsplit"
  for batch in $batches; do
    t1=$SECONDS
    if [ "${batch%-unsplit}" != 16 ]; then
      flags=""
      [ "$batch" = 1-eager ] && flags="--no-device-graphs"
      export SITSRT_CUDA_PDL=1
      [ "$batch" = 1-no-pdl ] && export SITSRT_CUDA_PDL=0
      limited_run 90 "$bundle/bin/sitsrt" bench -m "$model" --device cuda -c 1024 -p 128 -n 64 -r 1 --no-bandwidth --json $flags \
        >"$out/e2e_${format}_b${batch}.json" 2>"$out/e2e_${format}_b${batch}.log"
      rc=$?
      unset SITSRT_CUDA_PDL
      rate=$(grep -o '"decode_tokens_per_s": [0-9.]*' "$out/e2e_${format}_b${batch}.json" | awk '{print $2}')
      prefill=$(grep -o '"prefill_tokens_per_s": [0-9.]*' "$out/e2e_${format}_b${batch}.json" | awk '{print $2}')
      prefill="${prefill:-?} tok/s ($(paths "$out/e2e_${format}_b${batch}.json"))"
    else
      export SITSRT_CUDA_MMA_SPLIT=1
      [ "$batch" = 16-unsplit ] && export SITSRT_CUDA_MMA_SPLIT=0
      limited_run 90 "$bundle/bin/sitsrt" bench -m "$model" --device cuda -c 1024 -p 128 -n 64 --concurrency 16 --json \
        >"$out/e2e_${format}_b${batch}.json" 2>"$out/e2e_${format}_b${batch}.log"
      rc=$?
      unset SITSRT_CUDA_MMA_SPLIT
      rate=$(grep -o '"aggregate_decode_tokens_per_s": [0-9.]*' "$out/e2e_${format}_b${batch}.json" | head -n 1 | awk '{print $2}')
      prefill="- ($(paths "$out/e2e_${format}_b${batch}.json"))"
    fi
    note "e2e 8B-shape $format batch $batch" "$([ $rc -eq 0 ] && echo "${rate:-?} tok/s" || echo "FAILED (exit $rc)")" \
      $((SECONDS - t1)) "make-model ${made} s; prefill $prefill"
  done
  rm -f "$model"
done

echo
echo "device check: $((SECONDS - start)) s on $(head -n 1 "$out/gpu.txt")"
printf '%s\n' "${summary[@]}" | tee "$out/summary.md"
echo
cat "$out/bench_cuda.md"
exit $status
