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
