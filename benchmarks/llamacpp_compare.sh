#!/usr/bin/env bash
# Prefill and decode tok/s of sitsrt against llama.cpp on the same machine, in alternated rounds.
# llama.cpp comes from the llama-cpp-python source package on PyPI (it carries llama.cpp's
# sources); its llama-bench is built once into a cache folder and never committed or linked.
#
#   benchmarks/llamacpp_compare.sh [--level avx512vnni|avx2] [--isa LEVEL] [--threads N]
#                                  [--rounds N] [--model GGUF] [--sitsrt BIN] [--cache DIR] [--json]
#
# --level   the instruction set both sides use: llama.cpp built for it (avx512vnni: AVX-512
#           F/BW/DQ/VL/VNNI/BF16/VBMI, an AMD EPYC Zen 4's set; avx2: AVX2/FMA/F16C, a Zen 3's),
#           sitsrt run with --isa LEVEL (default avx512vnni). llama.cpp's AMX build is not used:
#           at llama-cpp-python 0.3.36 it stopped with SIGILL in its AMX matmul on the Intel
#           machines here (no AMX permission requested), so AMX is compared by --isa auto alone.
# --isa     sitsrt's kernel level when it should differ from --level (auto: AMX where present)
# --model   default: the 0.35B synthetic Q4_0 model of issue 19 (make-model --dim 1024
#           --layers 24 --heads 16 --kv-heads 8 --ffn 2816 --vocab 32000 --type q4_0)
# Measures prompt 512 (one pass on both sides: llama.cpp's ubatch 512, sitsrt -b 512) and 128
# generated tokens from an empty context (llama-bench's tg128; sitsrt after a 1-token prompt),
# each side's median of 3 per round. Prints a table (or one JSON object) with
# the per-round ratios. Exit status 3 when llama.cpp cannot be fetched, built or run.
set -euo pipefail
cd "$(dirname "$0")/.."

level=avx512vnni threads=2 rounds=3 model="" sitsrt=build/bin/sitsrt cache=build/llamacpp json=0 isa=""
version=0.3.36  # llama-cpp-python release (pins the llama.cpp sources measured)
while [ $# -gt 0 ]; do
  case $1 in
    --level) level=$2; shift ;;
    --threads) threads=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --model) model=$2; shift ;;
    --sitsrt) sitsrt=$2; shift ;;
    --cache) cache=$2; shift ;;
    --isa) isa=$2; shift ;;
    --json) json=1 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "llamacpp_compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$isa" ] || isa=$level
[ -x "$sitsrt" ] || { echo "llamacpp_compare: $sitsrt not built (ninja -C build bin/sitsrt)" >&2; exit 2; }
mkdir -p "$cache"
log() { echo "$@" >&2; }

# llama-bench, built once per level.
case $level in
  avx512vnni) flags=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON) ;;
  avx2) flags=(-DGGML_AVX512=OFF) ;;
  *) echo "llamacpp_compare: --level is avx512vnni or avx2, not $level" >&2; exit 2 ;;
esac
flags+=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
  -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF)
flavour=$level
bench="$cache/build-$flavour/bin/llama-bench"
if [ ! -x "$bench" ]; then
  src="$cache/llama_cpp_python-$version/vendor/llama.cpp"
  if [ ! -d "$src" ]; then
    log "fetching llama-cpp-python $version (llama.cpp sources) from PyPI"
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$cache" >&2 ||
      { log "llamacpp_compare: could not fetch llama-cpp-python $version from PyPI"; exit 3; }
    tar -xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
  fi
  log "building llama-bench ($flavour; a few minutes)"
  cmake -S "$src" -B "$cache/build-$flavour" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >"$cache/cmake-$flavour.log" 2>&1 &&
    ninja -C "$cache/build-$flavour" llama-bench >"$cache/build-$flavour.log" 2>&1 ||
    { log "llamacpp_compare: llama.cpp did not build (logs in $cache)"; exit 3; }
fi

if [ -z "$model" ]; then
  model="$cache/s035-q4_0.gguf"
  [ -f "$model" ] || "$sitsrt" make-model --dim 1024 --layers 24 --heads 16 --kv-heads 8 --ffn 2816 --vocab 32000 \
    --type q4_0 -o "$model" >&2
fi

results=$(mktemp)
trap 'rm -f "$results" "$results.l" "$results.s" "$results.d" "$results.e"' EXIT
for r in $(seq "$rounds"); do
  log "round $r of $rounds"
  "$bench" -m "$model" -t "$threads" -p 512 -n 128 -r 3 -o json >"$results.l" 2>/dev/null ||
    { log "llamacpp_compare: llama-bench failed on $model"; exit 3; }
  # Prefill as pp512, then decode as tg128: from an empty context (a 1-token prompt), not after
  # the 512 prompt tokens, whose attention llama-bench's tg128 does not pay.
  "$sitsrt" bench -m "$model" -t "$threads" -p 512 -n 2 -b 512 -r 3 --no-bandwidth --isa "$isa" --json \
    >"$results.s" 2>"$results.e" || { log "llamacpp_compare: sitsrt bench failed: $(tail -1 "$results.e")"; exit 1; }
  "$sitsrt" bench -m "$model" -t "$threads" -p 1 -n 128 -r 3 --no-bandwidth --isa "$isa" --json \
    >"$results.d" 2>"$results.e" || { log "llamacpp_compare: sitsrt bench failed: $(tail -1 "$results.e")"; exit 1; }
  python3 - "$results.l" "$results.s" "$results.d" "$r" >>"$results" <<'EOF'
import json, sys
llama = json.load(open(sys.argv[1]))
ours = json.load(open(sys.argv[2]))
ours_decode = json.load(open(sys.argv[3]))
row = {"round": int(sys.argv[4])}
for t in llama:
    key = "prefill" if t["n_prompt"] > 0 else "decode"
    row["llamacpp_" + key] = t["avg_ts"]
row["sitsrt_prefill"] = ours["prefill_tokens_per_s"]
row["sitsrt_decode"] = ours_decode["decode_tokens_per_s"]
print(json.dumps(row))
EOF
  rm -f "$results.l" "$results.s" "$results.d" "$results.e"
done

python3 - "$results" "$json" "$threads" "$isa" "$flavour" "$model" "$version" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
out = {"threads": int(sys.argv[3]), "sitsrt_isa": sys.argv[4], "llamacpp_build": sys.argv[5], "model": sys.argv[6],
       "llamacpp_source": "llama-cpp-python " + sys.argv[7], "rounds": rows}
for r in rows:
    r["prefill_ratio"] = r["sitsrt_prefill"] / r["llamacpp_prefill"]
    r["decode_ratio"] = r["sitsrt_decode"] / r["llamacpp_decode"]
if sys.argv[2] == "1":
    print(json.dumps(out, indent=1))
    sys.exit(0)
print(f"sitsrt (--isa {out['sitsrt_isa']}) vs llama.cpp ({out['llamacpp_build']} build, {out['llamacpp_source']}), "
      f"{out['threads']} threads, {out['model']}")
print(f"{'round':>5} {'prefill 512 tok/s: sitsrt':>26} {'llama.cpp':>10} {'ratio':>6}   "
      f"{'decode tok/s: sitsrt':>21} {'llama.cpp':>10} {'ratio':>6}")
for r in rows:
    print(f"{r['round']:>5} {r['sitsrt_prefill']:>26.1f} {r['llamacpp_prefill']:>10.1f} {r['prefill_ratio']:>6.2f}   "
          f"{r['sitsrt_decode']:>21.1f} {r['llamacpp_decode']:>10.1f} {r['decode_ratio']:>6.2f}")
EOF
