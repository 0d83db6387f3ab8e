# Reliability cases of docs/hardening.md ("Hostile paths and resource limits"): sourced by
# cli_test.sh, which provides $cli, $work, $model, check and json_check. Every scratch file
# lives under $work; resource limits are set with ulimit in subshells only.
rel=$work/rel
mkdir -p "$rel"

# 1. Output paths: no device node, FIFO, symlink or input is replaced; an existing file only with --force.
mkfifo "$rel/out.fifo"
ln -s "$model" "$rel/out.link"
mkdir "$rel/out.dir"
check "make-model -o FIFO: refused, still a FIFO" bash -c \
  "! timeout 10 '$cli' make-model -o '$rel/out.fifo' --dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 \
     2>'$rel/e' && grep -q 'is a FIFO; refusing to replace it' '$rel/e' && test -p '$rel/out.fifo'"
check "make-model -o SYMLINK: refused, the link and its target unchanged" bash -c \
  "cp '$model' '$rel/model.copy' && ! '$cli' make-model -o '$rel/out.link' --dim 64 --layers 1 \
     --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --force 2>'$rel/e' && grep -q 'is a symbolic link' '$rel/e' \
     && test -L '$rel/out.link' && cmp '$model' '$rel/model.copy'"
check "make-model -o DIR: refused" bash -c \
  "! '$cli' make-model -o '$rel/out.dir' --vocab 300 2>'$rel/e' && grep -q 'is a directory' '$rel/e' && test -d '$rel/out.dir'"
if [ "$(id -u)" -eq 0 ] && mknod "$rel/out.node" c 1 3 2>/dev/null; then
  check "make-model -o CHAR-DEVICE (mknod, root): refused, still a device node" bash -c \
    "! '$cli' make-model -o '$rel/out.node' --dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --force \
       2>'$rel/e' && grep -q 'is a character device' '$rel/e' && test -c '$rel/out.node'"
else
  echo "skipped: make-model over a device node (needs root and mknod)"
fi
printf 'precious' >"$rel/exists.gguf"
printf 'mine' >"$rel/exists.gguf.tmp"
check "make-model over an existing file: refused without --force (exit 1, content kept, OUT.tmp untouched)" bash -c \
  "'$cli' make-model -o '$rel/exists.gguf' --dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 2>'$rel/e'; \
   test \$? -eq 1 && grep -q 'already exists; refusing to overwrite it (pass --force to replace it)' '$rel/e' \
   && test \"\$(cat '$rel/exists.gguf')\" = precious && test \"\$(cat '$rel/exists.gguf.tmp')\" = mine"
check "make-model --force replaces an existing regular file, leaves no temporary file" bash -c \
  "'$cli' make-model -o '$rel/exists.gguf' --dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --force \
     2>/dev/null && '$cli' info '$rel/exists.gguf' >/dev/null && test \"\$(cat '$rel/exists.gguf.tmp')\" = mine \
   && test \$(ls '$rel' | grep -c '^exists.gguf') -eq 2"
hf=$rel/hf
cp -r "$here/../data/malformed/hf_valid_llama" "$hf"
cp "$hf/model.safetensors" "$rel/st.orig"
check "convert DIR -o DIR/model.safetensors: refused even with --force, the input intact" bash -c \
  "! '$cli' convert '$hf' -o '$hf/model.safetensors' --force 2>'$rel/e' && grep -q 'is an input of this conversion' '$rel/e' \
   && cmp '$hf/model.safetensors' '$rel/st.orig' && test \$(ls '$hf' | wc -l) -eq 2"
ln "$hf/config.json" "$rel/config-link.json"
check "convert -o a hard link to the input's config.json: refused" bash -c \
  "! '$cli' convert '$hf' -o '$rel/config-link.json' --force 2>'$rel/e' && grep -q 'is an input' '$rel/e'"
check "convert to a new file beside the input works; a second time needs --force" bash -c \
  "'$cli' convert '$hf' -o '$hf/out.gguf' 2>/dev/null && ! '$cli' convert '$hf' -o '$hf/out.gguf' 2>'$rel/e' \
   && grep -q 'already exists' '$rel/e' && '$cli' convert '$hf' -o '$hf/out.gguf' --force 2>/dev/null"

# 4. Non-regular inputs: refused at once (exit 1, or 2 for a key file), never a hang or an unbounded read.
mkfifo "$rel/in.fifo"
refused() {  # refused NAME EXIT_CODE MESSAGE COMMAND...: the command ends within 10 s with that code and message
  local name=$1 code=$2 message=$3
  shift 3
  check "$name" bash -c "timeout 10 \"\$@\" >/dev/null 2>'$rel/e'; test \$? -eq $code && grep -q -- '$message' '$rel/e'" _ "$@"
}
refused "run -m FIFO" 1 'in.fifo: is a FIFO, not a regular file' "$cli" run -m "$rel/in.fifo" -p hi -n 2
refused "info FIFO" 1 'in.fifo: is a FIFO, not a regular file' "$cli" info "$rel/in.fifo"
mkdir "$rel/hf-fifo"
cp "$hf/config.json" "$rel/hf-fifo/"
mkfifo "$rel/hf-fifo/model.safetensors"
refused "info HF_DIR with a FIFO model.safetensors" 1 'model.safetensors: is a FIFO' "$cli" info "$rel/hf-fifo"
refused "run --audit-key-file /dev/zero" 2 '/dev/zero: is a character device' \
  "$cli" run -m "$model" -p hi -n 2 --audit-log "$rel/k.jsonl" --audit-key-file /dev/zero
refused "run --audit-key-file FIFO" 2 'in.fifo: is a FIFO' \
  "$cli" run -m "$model" -p hi -n 2 --audit-log "$rel/k.jsonl" --audit-key-file "$rel/in.fifo"
truncate -s 1M "$rel/big.key"
refused "a 1 MiB key file is refused by size" 2 'larger than the 64 KiB (65536 bytes) a key file may have' \
  "$cli" audit verify "$model" --key-file "$rel/big.key"
refused "audit verify /dev/zero" 1 '/dev/zero: is a character device' "$cli" audit verify /dev/zero
refused "audit verify FIFO" 1 'in.fifo: is a FIFO' "$cli" audit verify "$rel/in.fifo"
refused "audit show FIFO" 1 'in.fifo: is a FIFO' "$cli" audit show "$rel/in.fifo"
refused "audit replay FIFO" 1 'in.fifo: is a FIFO' "$cli" audit replay "$rel/in.fifo" -m "$model"
check "no key-file run left a log behind" test ! -e "$rel/k.jsonl"

# 2. One --audit-log path, two writers: the second is told who holds it; a user's LOG.partial is untouched.
# (8 processes and 8 threads at once: tests/unit/audit_concurrency_test.cpp.)
printf 'mine' >"$rel/held.jsonl.partial"
check "a second writer on a held --audit-log fails naming the holder's pid; the log verifies" bash -c \
  "{ '$cli' run -m '$model' -p hi -n 1500 --ignore-eos --json --audit-log '$rel/held.jsonl' & holder=\$!; } | { \
     for i in \$(seq 500); do [ -e '$rel/held.jsonl' ] && break; sleep 0.01; done; \
     '$cli' run -m '$model' -p hi -n 2 -q --audit-log '$rel/held.jsonl' 2>'$rel/e'; echo \$? >'$rel/rc'; cat >/dev/null; }; \
   test \$(cat '$rel/rc') -eq 1 && grep -q 'audit log $rel/held.jsonl is in use by pid [0-9]' '$rel/e' \
   && '$cli' audit verify '$rel/held.jsonl' | grep -q '^clean' && test \"\$(cat '$rel/held.jsonl.partial')\" = mine \
   && test \$(ls '$rel' | grep -c 'held.jsonl.partial-') -eq 0"

# 6. Resource limits: clear errors naming the file and the reason, never a signal. Limits apply in
# subshells only; their output goes through a pipe so that the limit does not cut the message.
limited() {  # limited 'ULIMIT ARGS' OUT COMMAND...: runs the command under the limit; OUT gets stderr, $rel/rc its exit code
  local limit=$1 out=$2
  shift 2
  { (ulimit $limit; exec "$@" >/dev/null); echo $? >"$rel/rc"; } 2>&1 | cat >"$out"
}
export -f limited
check "ulimit -f: run --audit-log ends in 'File too large' (exit 1), not SIGXFSZ" bash -c \
  "rel='$rel'; limited '-f 100' '$rel/e' '$cli' run -m '$model' -p hi -n 3000 --ignore-eos -q --audit-log '$rel/fsize.jsonl' \
     --audit-level topk; test \$(cat '$rel/rc') -eq 1 && grep -q 'fsize.jsonl: writing the audit log failed (File too large)' '$rel/e'"
check "ulimit -f: make-model ends in 'File too large' (exit 1), leaves nothing behind" bash -c \
  "rel='$rel'; limited '-f 100' '$rel/e' '$cli' make-model -o '$rel/fsize.gguf' --dim 256 --layers 4 --vocab 2048; \
   test \$(cat '$rel/rc') -eq 1 && grep -q 'fsize.gguf: write failed: File too large' '$rel/e' \
   && test \$(ls '$rel' | grep -c '^fsize.gguf') -eq 0"
check "ulimit -f: convert ends in 'File too large' (exit 1), leaves nothing behind" bash -c \
  "rel='$rel'; limited '-f 1' '$rel/e' '$cli' convert '$hf' -o '$rel/fsize-hf.gguf' --type f32; \
   test \$(cat '$rel/rc') -eq 1 && grep -q 'fsize-hf.gguf: write failed: File too large' '$rel/e' \
   && test \$(ls '$rel' | grep -c '^fsize-hf.gguf') -eq 0"
check "ulimit -f 0: the audit log cannot be created: the real reason (File too large), no file, no side file" bash -c \
  "rel='$rel'; limited '-f 0' '$rel/e' '$cli' run -m '$model' -p hi -n 2 -q --audit-log '$rel/f0.jsonl'; \
   test \$(cat '$rel/rc') -eq 1 && grep -q 'f0.jsonl: cannot create audit log (File too large)' '$rel/e' \
   && test \$(ls '$rel' | grep -c '^f0.jsonl') -eq 0"
mkdir -p "$rel/full"
if unshare -m true 2>/dev/null; then  # root: a full 8 KiB tmpfs in a private mount namespace
  check "disk full at audit-log creation: 'No space left on device' (was 'Input/output error')" unshare -m bash -c \
    "mount -t tmpfs -o size=8k tmpfs '$rel/full' && head -c 8192 /dev/zero >'$rel/full/fill' 2>/dev/null; \
     '$cli' run -m '$model' -p hi -n 2 -q --audit-log '$rel/full/log.jsonl' 2>'$rel/e'; test \$? -eq 1 \
     && grep -q 'log.jsonl: cannot create audit log (No space left on device)' '$rel/e' && test \$(ls '$rel/full' | wc -l) -eq 1"
  check "disk full under --otlp-trace: exit 1 naming the reason, no truncated JSON left" unshare -m bash -c \
    "mount -t tmpfs -o size=8k tmpfs '$rel/full' && head -c 7000 /dev/zero >'$rel/full/fill'; \
     '$cli' run -m '$model' -p hi -n 40 --ignore-eos -q --audit-level topk --otlp-trace '$rel/full/trace.jsonl' \
       2>'$rel/e'; test \$? -eq 1 && grep -q 'trace.jsonl: writing the trace failed (No space left on device)' '$rel/e' \
     && test ! -s '$rel/full/trace.jsonl'"
else
  echo "skipped: full-disk cases (need unshare -m and mount, i.e. root)"
fi
check "--otlp-trace /dev/full: exit 1 with 'No space left on device' (was exit 0)" bash -c \
  "'$cli' run -m '$model' -p hi -n 5 -q --otlp-trace /dev/full 2>'$rel/e'; test \$? -eq 1 \
   && grep -q '/dev/full: writing the trace failed (No space left on device)' '$rel/e'"
refused "--otlp-trace FIFO without a reader: refused at once" 1 'a FIFO with no reader' \
  "$cli" run -m "$model" -p hi -n 2 -q --otlp-trace "$rel/in.fifo"
"$cli" make-model -o "$rel/vocab300k.gguf" --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 32 --vocab 300000 2>/dev/null
# The address space the binary needs to start at all grows with its own mappings (a build with the
# CUDA backend maps its device code too), so the limits below are set above that.
base=20000
{  # (the shell's own reports of the loads that crash at the lowest limits discarded)
  while [ $base -lt 400000 ] && ! (ulimit -v $base; exec "$cli" --help >/dev/null 2>&1); do base=$((base + 2000)); done
} 2>/dev/null
for kib in $((base + 2000)) $((base + 20000)) $((base + 60000)); do  # each fails somewhere else; every failure is named
  check "ulimit -v $kib: run fails with a clear out-of-memory error, never std::bad_alloc or a signal" bash -c \
    "rel='$rel'; limited '-v $kib' '$rel/e' '$cli' run -m '$rel/vocab300k.gguf' -p hi -n 1 -q -t 1; \
     test \$(cat '$rel/rc') -eq 1 && ! grep -q bad_alloc '$rel/e' \
     && grep -Eq 'out of memory while|cannot allocate|Cannot allocate memory' '$rel/e'"
done
# The limit at which the vocabulary read is what fails depends on the binary's own mappings: the
# first of these that gets that far.
check "ulimit -v: the std::bad_alloc of a model load becomes 'out of memory while reading the model'" bash -c \
  "rel='$rel'; for kib in $(seq -s ' ' $((base + 6000)) 5000 $((base + 46000))); do \
     limited \"-v \$kib\" '$rel/e' '$cli' run -m '$rel/vocab300k.gguf' -p hi -n 1 -q -t 1; \
     grep -q 'vocab300k.gguf: out of memory while reading the model' '$rel/e' || continue; \
     limited \"-v \$kib\" '$rel/e' '$cli' info '$rel/vocab300k.gguf' && grep -q 'error: out of memory (an allocation failed' '$rel/e' \
       && exit 0; exit 1; \
   done; exit 1"
check "--memory-budget 1K: the model is refused at load naming the budget" bash -c \
  "'$cli' run -m '$model' -p hi -n 2 -q --memory-budget 1K 2>'$rel/e'; test \$? -eq 1 && grep -q 'memory_budget_bytes 1024 ' '$rel/e'"
check "--memory-budget 2G and 1GiB run" bash -c \
  "'$cli' run -m '$model' -p hi -n 2 -q --memory-budget 2G >/dev/null && '$cli' run -m '$model' -p hi -n 2 -q --memory-budget 1GiB >/dev/null"
for bad in -5 10X 1.5G '' 99999999999999999999 20000000000T; do
  check "--memory-budget '$bad' is a usage error (exit 2)" bash -c \
    "'$cli' run -m '$model' -p hi -n 2 --memory-budget '$bad' 2>'$rel/e'; test \$? -eq 2 && grep -q 'memory-budget expects a byte count' '$rel/e'"
done

# 7. Strings from files are escaped in messages and `info` output.
"$cli" make-model -o "$rel/evil.gguf" --dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 \
  --name "$(printf 'evil\033[2J\033]0;pwned\007\302\233')" 2>/dev/null
check "info escapes terminal controls from the file (no ESC, BEL or CSI byte reaches the terminal)" bash -c \
  "'$cli' info '$rel/evil.gguf' >'$rel/o' && grep -aq \"'evil\\\\\\\\x1B\\[2J\\\\\\\\x1B\\]0;pwned\\\\\\\\x07\\\\\\\\xC2\\\\\\\\x9B'\" '$rel/o' \
   && ! grep -aq \$'\\033' '$rel/o' && ! grep -aq \$'\\007' '$rel/o' && ! grep -aq \$'\\302\\233' '$rel/o'"
check "info --json keeps the name exact (JSON-escaped)" json_check <("$cli" info "$rel/evil.gguf" --json 2>/dev/null) \
  "doc['metadata']['general.name'] == 'evil\x1b[2J\x1b]0;pwned\x07\x9b'"
check "an error message keeps what follows a NUL from the file, escaped, on one line" bash -c \
  "'$cli' run -m '$here/../data/malformed/gguf_architecture_control_chars.gguf' -p hi 2>'$rel/e'; test \$? -eq 1 \
   && grep -aq \"'lla\\\\\\\\0ma\\\\\\\\x1B\\[2J' is not supported\" '$rel/e' && test \$(wc -l <'$rel/e') -eq 1 \
   && ! grep -aq \$'\\033' '$rel/e'"

# 7. Verifier verdicts and exit codes: 0 clean, 1 tampered or not a log, 2 usage, 3 truncated tail only.
"$cli" run -m "$model" -p hi -n 6 --ignore-eos -q --audit-log "$rel/v.jsonl" --audit-level topk >/dev/null 2>&1
head -c -7 "$rel/v.jsonl" >"$rel/torn.jsonl"
printf 'hello' >"$rel/garbage.jsonl"
cp "$rel/v.jsonl" "$rel/stray.jsonl"
printf 'leftover' >"$rel/stray.jsonl.1"
verdict() {  # verdict NAME EXIT_CODE PATTERN ARGS...: `audit ARGS` exits so, its stdout+stderr matching PATTERN
  local name=$1 code=$2 pattern=$3
  shift 3
  check "$name" bash -c "'$cli' audit \"\$@\" >'$rel/o' 2>&1; test \$? -eq $code && grep -q -- '$pattern' '$rel/o'" _ "$@"
}
verdict "verify: a clean log exits 0" 0 '^clean' verify "$rel/v.jsonl"
verdict "verify: a torn last record exits 3 (truncated tail only)" 3 'truncated tail' verify "$rel/torn.jsonl"
verdict "verify: garbage without a header exits 1 as 'file order', not 'truncated tail'" 1 \
  'garbage.jsonl:1: file order: the file does not start with a file header record' verify "$rel/garbage.jsonl"
verdict "verify: a directory is an error, not 'the file is empty'" 1 'is a directory, not a regular file' verify "$rel"
verdict "verify: a stray LOG.1 is 'file order' naming it, not 'truncated tail'" 1 \
  'stray.jsonl.1:1: file order: the file does not start with a file header' verify "$rel/stray.jsonl"
verdict "verify: a usage error exits 2" 2 'no audit log given' verify
verdict "show: a clean log exits 0" 0 '^-- end' show "$rel/v.jsonl" --color never
verdict "show: a torn last record is said and exits 3" 3 'the last record is torn' show "$rel/torn.jsonl" --color never
verdict "show: garbage is refused (exit 1)" 1 'not an audit log file' show "$rel/garbage.jsonl"
printf '{"type":"file"}\n{"type":"token","text":5}\n' >"$rel/badfield.jsonl"
verdict "show: a record field of the wrong type is refused (exit 1)" 1 'badfield.jsonl:2: not an audit record' \
  show "$rel/badfield.jsonl"
verdict "show: a stray LOG.1 is refused (exit 1)" 1 'stray.jsonl.1:1: not an audit log file' show "$rel/stray.jsonl"

# 7. NaN weights: the error names the file and the tensor (was "sampler: no finite logit").
"$cli" make-model -o "$rel/nan.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --type f32 2>/dev/null
nan_at=$("$cli" info "$rel/nan.gguf" --json | python3 -c "
import json, sys
t = [t for t in json.load(sys.stdin)['tensors'] if t['name'] == 'blk.1.ffn_down.weight'][0]
print(t['offset'] + (3 * t['dims'][0] + 5) * 4)")
printf '\x00\x00\xc0\x7f' | dd of="$rel/nan.gguf" bs=1 seek="$nan_at" conv=notrunc 2>/dev/null
check "NaN weights: exit 1 naming the file, the tensor, its row and column" bash -c \
  "'$cli' run -m '$rel/nan.gguf' -p hi -n 3 2>'$rel/e'; test \$? -eq 1 \
   && grep -q \"nan.gguf: the model produced no finite logit at step 0 (every logit is NaN).*tensor 'blk.1.ffn_down.weight' holds NaN (row 3, column 5)\" '$rel/e'"

# 7. A prompt far beyond the context is refused before it is tokenized.
head -c 8388608 /dev/zero | tr '\0' 'a' >"$rel/8mb.txt"
check "an 8 MiB prompt is refused before tokenizing (exit 1, at once)" bash -c \
  "timeout 5 '$cli' run -m '$model' -f '$rel/8mb.txt' -n 2 -q 2>'$rel/e'; test \$? -eq 1 \
   && grep -q 'prompt of 8388608 bytes does not fit the context length .*refused before tokenizing' '$rel/e'"
