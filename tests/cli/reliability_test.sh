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
