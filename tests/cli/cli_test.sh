#!/usr/bin/env bash
# Command-line tests of build/bin/sitsrt and of the examples built against the installed
# package. Usage: cli_test.sh SITSRT_BINARY EXAMPLES_BUILD_DIR
set -uo pipefail
cli=$(realpath "$1")
examples=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
shared=${SITSRT_SHARED_DIR:-$here/../../../shared}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

check() {  # check NAME COMMAND...: passes when the command exits 0
  local name=$1
  shift
  if "$@" >"$work/out" 2>"$work/err"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name"
    sed 's/^/  stdout: /' "$work/out" | tail -5
    sed 's/^/  stderr: /' "$work/err" | tail -5
  fi
}

json_check() {  # json_check FILE PYTHON_EXPRESSION_OVER_lines (list of parsed JSON lines)
  python3 - "$1" "$2" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
try:  # one (pretty-printed) document, or JSON lines
    doc = json.loads(text)
    lines = [doc]
except json.JSONDecodeError:
    lines = [json.loads(l) for l in text.splitlines() if l.strip()]
    doc = None
ok = eval(sys.argv[2])
sys.exit(0 if ok else 1)
PY
}

check "top-level --help" "$cli" --help
for sub in run chat info graph bench logits perplexity make-model template "audit verify" "audit replay" "audit show"; do
  # shellcheck disable=SC2086
  check "$sub --help" "$cli" $sub --help
done
check "unknown command fails" bash -c "! '$cli' frobnicate"
check "unknown option fails with usage exit code" bash -c "'$cli' run --frobnicate; test \$? -eq 2"

model=$work/tiny.gguf
check "make-model" "$cli" make-model -o "$model" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --type q4_0 --seed 5
check "make-model is deterministic" bash -c "'$cli' make-model -o '$work/tiny2.gguf' --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --type q4_0 --seed 5 2>/dev/null && cmp '$model' '$work/tiny2.gguf'"

"$cli" info -m "$model" --json >"$work/info.json" 2>/dev/null
check "info --json" json_check "$work/info.json" \
  "doc['model']['n_layer'] == 2 and doc['parameters'] > 0 and 'q4_0' in doc['bytes_by_type'] and len(doc['tensors']) == 21"
check "info table" bash -c "'$cli' info '$model' | grep -q 'blk.1.ffn_down.weight'"

"$cli" graph -m "$model" --json >"$work/graph.json" 2>/dev/null
check "graph --json" json_check "$work/graph.json" "len(doc['nodes']) == 1 + 15 * 2 + 3 and doc['memory_plan']['arena_bytes'] > 0"
check "graph table" bash -c "'$cli' graph -m '$model' | grep -q 'attention'"
check "serve --help names the endpoints" bash -c "'$cli' serve --help | grep -q '/v1/chat/completions'"
check "serve --port 70000 is a usage error (exit 2)" bash -c "'$cli' serve -m '$model' --port 70000 2>/dev/null; test \$? -eq 2"
check "serve --api-key-file of a missing file is a usage error naming it" bash -c \
  "'$cli' serve -m '$model' --api-key-file '$work/no-keys' 2>'$work/e'; test \$? -eq 2 && grep -q 'no-keys' '$work/e'"
check "serve on a port in use fails naming it (exit 1)" bash -c \
  "python3 -c 'import socket,subprocess,sys; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); \
     r=subprocess.run([sys.argv[1],\"serve\",\"-m\",sys.argv[2],\"--port\",str(s.getsockname()[1])],capture_output=True,text=True); \
     sys.exit(0 if r.returncode==1 and \"cannot listen\" in r.stderr else 1)' '$cli' '$model'"
"$cli" graph -m "$model" --plan --json -t 2 >"$work/plan.json" 2>/dev/null
check "graph --plan --json" json_check "$work/plan.json" "doc['devices'][0]['name'] == 'cpu0' and doc['devices'][0]['weight_bytes'] > 0 and doc['stages'][0]['output_head'] and '2 threads' in doc['devices'][0]['detail']"
check "graph --plan table" bash -c "'$cli' graph -m '$model' --plan | grep -q 'cpu0'"

"$cli" logits -m "$model" --tokens 1,40,7 --all >"$work/logits.json" 2>/dev/null
check "logits --all: one row of n_vocab per token" json_check "$work/logits.json" \
  "doc['n_vocab'] == 300 and doc['tokens'] == [1, 40, 7] and len(doc['logits']) == 3 and all(len(r) == 300 for r in doc['logits'])"
check "logits rejects a bad token list" bash -c "'$cli' logits -m '$model' --tokens 1,x; test \$? -eq 2"

# Every architecture make-model writes loads, shows its own structure and generates.
for arch in mistral qwen2 qwen3 gemma3; do
  check "make-model --arch $arch" "$cli" make-model -o "$work/$arch.gguf" --arch "$arch" --dim 64 --layers 6 --heads 4 \
    --kv-heads 2 --ffn 96 --vocab 300 --sliding-window 8 --type q8_0
  check "run $arch" bash -c "'$cli' run -m '$work/$arch.gguf' -p 'hello' -n 4 --ignore-eos >/dev/null 2>&1"
done
# Q4_K_M (Q4_K + Q6_K) synthetic files of every architecture run (256-wide rows: whole K super-blocks).
for arch in llama mistral qwen2 qwen3 gemma3; do
  check "run $arch q4_k_m" bash -c "'$cli' make-model -o '$work/$arch-q4km.gguf' --arch $arch --dim 256 --layers 2 \
    --heads 4 --kv-heads 2 --ffn 512 --vocab 300 --type q4_k_m >/dev/null 2>&1 &&
    '$cli' info -m '$work/$arch-q4km.gguf' | grep -q q6_k &&
    '$cli' run -m '$work/$arch-q4km.gguf' -p 'hello' -n 4 --ignore-eos >/dev/null 2>&1"
done
check "graph: qwen2 has q/k/v biases" bash -c "'$cli' graph -m '$work/qwen2.gguf' | grep -q 'blk.0.k_bias'"
check "graph: qwen3 has per-head q/k norms" bash -c "'$cli' graph -m '$work/qwen3.gguf' | grep -q 'head_rms_norm.*blk.0.q_norm'"
check "graph: gemma3 has post norms, geglu, 5 windowed layers and 1 global" bash -c \
  "t=\$('$cli' graph -m '$work/gemma3.gguf'); grep -q post_ffw_norm <<<\"\$t\" && grep -q geglu_tanh <<<\"\$t\" && test \$(grep -c 'window=8' <<<\"\$t\") -eq 5 && grep -q 'embed_scale' <<<\"\$t\""
check "graph: mistral windows every layer" bash -c "test \$('$cli' graph -m '$work/mistral.gguf' | grep -c 'window=8') -eq 6"

"$cli" run -m "$model" -p "hello world" -n 12 --seed 3 --json --ignore-eos >"$work/run.jsonl" 2>/dev/null
check "run --json: one object per token + summary" json_check "$work/run.jsonl" \
  "len(lines) == 13 and all(set(['step','id','text','logprob','top']) <= set(l) for l in lines[:-1]) and all(set(t) == {'id','logprob'} for l in lines[:-1] for t in l['top']) and [l['step'] for l in lines[:-1]] == list(range(12)) and lines[-1]['type'] == 'summary' and ''.join(l['text'] for l in lines[:-1]) == lines[-1]['text']"
"$cli" run -m "$model" -p "hello world" -n 12 --seed 3 --json --ignore-eos >"$work/run2.jsonl" 2>/dev/null
check "run: same seed, same output" bash -c "diff <(grep -v summary '$work/run.jsonl' | sed 's/\"t\":[^,}]*//') <(grep -v summary '$work/run2.jsonl' | sed 's/\"t\":[^,}]*//')"

"$cli" bench -m "$model" -p 16 -n 8 -r 1 --json >"$work/bench.json" 2>/dev/null
check "bench --json" json_check "$work/bench.json" \
  "all(doc[k] > 0 for k in ['prefill_tokens_per_s','decode_tokens_per_s','weight_bytes_per_token','peak_rss_bytes','read_bandwidth_bytes_per_s'])"
"$cli" bench -m "$model" --concurrency 1,2,4 -p 16 -n 8 --json >"$work/bench-serving.json" 2>/dev/null
check "bench --concurrency --json: a level per concurrency and the serving limits" json_check "$work/bench-serving.json" \
  "[l['concurrency'] for l in doc['levels']] == [1, 2, 4] and all(l['aggregate_decode_tokens_per_s'] > 0 and l['generated_tokens'] == 8 * l['concurrency'] for l in doc['levels']) and doc['serving']['limits']['max_num_seqs'] == 4 and doc['serving']['finished'] >= 7 and not doc['serving']['limits']['prefix_caching'] and doc['serving']['prefix_cache_hits'] == 0"
# --reps with --concurrency: rounds of every level in turn; medians, and each round's own ratio.
"$cli" bench -m "$model" --concurrency 1,2 -p 16 -n 8 --reps 3 --no-bandwidth --json >"$work/bench-rounds.json" 2>/dev/null
check "bench --concurrency --reps: per-round figures, medians and same-round ratios" json_check "$work/bench-rounds.json" \
  "(lambda one, two: doc['rounds'] == 3 and all(len(l['rounds_decode_tokens_per_s']) == 3 and sorted(l['rounds_decode_tokens_per_s'])[1] == l['aggregate_decode_tokens_per_s'] for l in (one, two)) and one['rounds_speedup_vs_single_stream'] == [1.0] * 3 and all(abs(s - a / b) < 1e-9 for s, a, b in zip(two['rounds_speedup_vs_single_stream'], two['rounds_decode_tokens_per_s'], one['rounds_decode_tokens_per_s'])) and two['speedup_vs_single_stream'] == sorted(two['rounds_speedup_vs_single_stream'])[1])(*doc['levels'])"
"$cli" run -m "$model" -p "hello world" -n 6 --ignore-eos --k-type int8 --v-type int4 --max-num-seqs 3 --kv-block-size 8 --json >"$work/run-kv.jsonl" 2>/dev/null
check "run --k-type/--v-type and serving limits reach the summary's serving object" json_check "$work/run-kv.jsonl" \
  "(lambda s: s['limits']['max_num_seqs'] == 3 and s['limits']['kv_block_size'] == 8 and s['finished'] == 1 and s['kv_blocks_free'] == s['kv_blocks'])(lines[-1]['serving'])"
check "run --stats prints the serving limits on stderr" bash -c "'$cli' run -m '$model' -p hi -n 2 --stats 2>&1 >/dev/null | grep -q 'serving: max_num_seqs 16, .*tenant quotas none'"
check "run --tenant-max-seqs shows in --stats" bash -c "'$cli' run -m '$model' -p hi -n 2 --tenant-max-seqs 2 --stats 2>&1 >/dev/null | grep -q 'tenant quotas seqs 2, KV blocks unlimited (over quota: wait)'"
check "run --kv-type rejects an unknown type" bash -c "out=\$('$cli' run -m '$model' -p hi --kv-type int3 2>&1); test \$? -eq 2 && grep -q 'kv-type must be f32, f16, int8 or int4' <<<\"\$out\""
"$cli" bench -m "$model" -p 16 -n 8 -r 2 --no-bandwidth --profile --json >"$work/bench-profile.json" 2>/dev/null
# 2 reps x 7 decode steps (8 tokens, the last needs no forward pass); per step 2 layers x 7 matmul
# nodes (q, k, v, attn_out, gate, up, down; fused ones counted per node) and the head once.
check "bench --profile --json" json_check "$work/bench-profile.json" \
  "(lambda d: d['steps'] == 14 and {o['op']: o['calls'] for o in d['ops']}['matmul'] == 14 * 7 * 2 and {o['op']: o['calls'] for o in d['ops']}['matmul (output head)'] == 14 and all(o['seconds'] >= 0 for o in d['ops']) and sum(o['seconds'] for o in d['ops']) <= d['seconds'])(doc['profile']['decode'])"
# Per level: decode steps (one row per sequence, batched at 4 streams) apart from prompt chunks;
# every fed row counted once (4 prompts of 16 and 7 fed tokens each).
"$cli" bench -m "$model" --concurrency 1,4 -p 16 -n 8 --no-bandwidth --profile --json >"$work/bench-serving-profile.json" 2>/dev/null
check "bench --concurrency --profile --json" json_check "$work/bench-serving-profile.json" \
  "(lambda one, four: one['decode']['tokens'] == one['decode']['steps'] == 7 and four['decode']['tokens'] > four['decode']['steps'] and {o['op']: o['calls'] for o in four['decode']['ops']}['matmul'] == 14 * four['decode']['steps'] and four['decode']['tokens'] + four['prefill']['tokens'] == 4 * (16 + 7))(doc['levels'][0]['profile'], doc['levels'][1]['profile'])"

# Weight formats: an FP8 model from make-model runs; --weights converts at load and reports it.
fp8="$work/fp8.gguf"
check "make-model --type fp8" "$cli" make-model -o "$fp8" --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 --vocab 300 --type fp8
check "run an fp8 model" bash -c "'$cli' run -m '$fp8' -p hi -n 4 -q >/dev/null 2>&1"
"$cli" info -m "$fp8" --weights q4g128 --json >"$work/info-w.json" 2>/dev/null
check "info --weights --json" json_check "$work/info-w.json" \
  "doc['bytes_by_type']['fp8_e4m3']['tensors'] == 16 and doc['weights']['format'] == 'q4g128' and doc['weights']['converted_tensors'] == 15 and doc['weights']['convert_seconds'] >= 0"
"$cli" run -m "$model" -p "hi" -n 2 --json --weights fp8 >"$work/run-w.jsonl" 2>/dev/null
check "run --weights: summary reports the conversion" json_check "$work/run-w.jsonl" \
  "lines[-1]['weights']['format'] == 'fp8' and lines[-1]['weights']['converted_tensors'] + lines[-1]['weights']['kept_tensors'] == 15"
"$cli" bench -m "$model" -p 8 -n 4 -r 1 --no-bandwidth --json >"$work/bench-resident.json" 2>/dev/null
"$cli" bench -m "$model" -p 8 -n 4 -r 1 --no-bandwidth --mmap --json >"$work/bench-mmap.json" 2>/dev/null
check "bench: resident weights by default, copy time reported" json_check "$work/bench-resident.json" \
  "doc['weights']['mmapped'] == False and doc['weights']['copy_seconds'] > 0 and doc['weights']['repacked_tensors'] >= 0"
check "bench --mmap: read in place" json_check "$work/bench-mmap.json" \
  "doc['weights']['mmapped'] == True and doc['weights']['copy_seconds'] == 0 and doc['weights']['repacked_tensors'] == 0"
kmix="$work/q4_k_m.gguf"
check "make-model --type q4_k_m" "$cli" make-model -o "$kmix" --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab 300 --type q4_k_m
"$cli" run -m "$kmix" -p "hi" -n 2 --json --weights q8 >"$work/run-k.jsonl" 2>/dev/null
check "run a q4_k_m model with --weights q8" json_check "$work/run-k.jsonl" \
  "lines[-1]['weights']['format'] == 'q8' and lines[-1]['weights']['converted_tensors'] == 15"
check "bad --weights: exit 1 naming the option and the values" bash -c \
  "'$cli' run -m '$model' -p hi -n 2 --weights int3 2>'$work/w.err'; test \$? -eq 1 && grep -q \"weights 'int3' is not one of as-stored, f16, bf16, q8, q4, fp8, q4g128\" '$work/w.err'"

# Malformed models: non-zero exit and exactly one error line naming the file.
head -c 1000 "$model" >"$work/truncated.gguf"
printf 'GGUF\x01\x00\x00\x00' >"$work/version1.gguf"
printf 'NOPE and some more bytes here' >"$work/badmagic.gguf"
for bad in truncated version1 badmagic; do
  check "malformed $bad: exit 1, one line naming the file" bash -c \
    "'$cli' run -m '$work/$bad.gguf' -p hi -n 2 2>'$work/$bad.err'; rc=\$?; test \$rc -eq 1 && test \$(wc -l <'$work/$bad.err') -eq 1 && grep -q '$bad.gguf' '$work/$bad.err'"
done
check "missing file: exit 1" bash -c "'$cli' info -m '$work/none.gguf' 2>/dev/null; test \$? -eq 1"

# template: a chat template over a conversation, printed byte for byte; a template error exits 1
# naming the file and line:column, a usage mistake exits 2.
printf '%s\n' '{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}' \
  '{%- if add_generation_prompt %}<assistant>{% endif %}{{ eos_token }}' >"$work/chat.jinja"
printf '%s' '[{"role": "user", "content": "hi é"}]' >"$work/messages.json"
check "template renders exactly" bash -c "'$cli' template --template '$work/chat.jinja' --messages '$work/messages.json' \
  --add-generation-prompt --eos-token '</s>' | cmp - <(printf '<user>hi é<assistant></s>')"
check "template reads messages from standard input" bash -c "'$cli' template --template '$work/chat.jinja' --messages - \
  <'$work/messages.json' | cmp - <(printf '<user>hi é')"
"$cli" template --template "$work/chat.jinja" --messages "$work/messages.json" --json >"$work/template.json" 2>/dev/null
check "template --json" json_check "$work/template.json" "doc['text'] == '<user>hi é' and doc['origin'].endswith('chat.jinja')"
printf '%s\n' 'ok' '{{ raise_exception("roles must alternate") }}' >"$work/raise.jinja"
check "template: raise_exception exits 1 naming file and position" bash -c "'$cli' template --template '$work/raise.jinja' \
  --messages '$work/messages.json' 2>'$work/raise.err'; test \$? -eq 1 && grep -q 'raise.jinja:2:4: raise_exception: roles must alternate' '$work/raise.err'"
printf '%s' '{% extends "base" %}' >"$work/extends.jinja"
check "template: an unsupported construct exits 1 naming it" bash -c "'$cli' template --template '$work/extends.jinja' \
  --messages '$work/messages.json' 2>'$work/extends.err'; test \$? -eq 1 && grep -q 'extends.jinja:1:4: .*extends' '$work/extends.err'"
check "template: a model without a chat template exits 1" bash -c "'$cli' template -m '$model' --messages '$work/messages.json' \
  2>'$work/notemplate.err'; test \$? -eq 1 && grep -q 'no chat template' '$work/notemplate.err'"
check "template: no --messages is a usage error" bash -c "'$cli' template --template '$work/chat.jinja'; test \$? -eq 2"
check "template: -m and --template together is a usage error" bash -c "'$cli' template -m '$model' --template '$work/chat.jinja' \
  --messages '$work/messages.json'; test \$? -eq 2"

# tokenize: the model's tokenizer, ids round-trip through --json's decode, --batch, errors.
check "tokenize --json round trip" bash -c "'$cli' tokenize '$model' --text 'hello world' --bos --json >'$work/tok.json'"
check "tokenize --json fields" json_check "$work/tok.json" "doc['decoded'] == 'hello world' and len(doc['ids']) > 1"
check "tokenize --batch" bash -c "echo '[\"a b\", \"\"]' | '$cli' tokenize '$model' --batch >'$work/tokb.json'"
check "tokenize --batch: one object per string" json_check "$work/tokb.json" "len(doc) == 2 and doc[1]['ids'] == []"
# Carriage returns: --batch (escaped in JSON) gives the ids --text gives; a raw CR inside a JSON
# string is not JSON and is refused with the parser's reason. {"hex": ...} passes raw bytes.
python3 -c 'import json; print(json.dumps(["a\r\nb\rc\r"]))' >"$work/cr.json"
printf '["a\rb"]' >"$work/cr-raw.json"
echo '[{"hex": "61ff62"}, "a"]' >"$work/hex-in.json"
"$cli" tokenize "$model" --text $'a\r\nb\rc\r' >"$work/cr-text.txt"
check "tokenize --batch with carriage returns" bash -c "'$cli' tokenize '$model' --batch <'$work/cr.json' >'$work/cr-batch.json'"
check "tokenize --batch keeps carriage returns as --text does" python3 -c "
import json, sys
doc = json.load(open('$work/cr-batch.json'))
text_ids = [int(x) for x in open('$work/cr-text.txt').read().split()]
sys.exit(0 if doc[0]['ids'] == text_ids and doc[0]['decoded'].lstrip() == 'a\r\nb\rc\r' else 1)"
check "tokenize --batch: a raw CR in a JSON string exits 2 (usage) saying it must be escaped" bash -c \
  "'$cli' tokenize '$model' --batch <'$work/cr-raw.json' 2>'$work/cr.err'; test \$? -eq 2 && grep -q 'must be escaped' '$work/cr.err'"
check "tokenize --batch: {\"hex\": ...} elements" bash -c "'$cli' tokenize '$model' --batch <'$work/hex-in.json' >'$work/hex.json'"
check "tokenize --batch: hex bytes decode with U+FFFD for the invalid one" json_check "$work/hex.json" \
  "len(doc) == 2 and doc[0]['decoded'].lstrip() == 'a\\ufffdb'"
check "tokenize: malformed tokenizer.json exits 1 naming the file" bash -c \
  "echo '{\"model\": ' >'$work/tokenizer.json'; '$cli' tokenize '$work/tokenizer.json' --text x 2>'$work/tj.err'; test \$? -eq 1 && grep -q 'tokenizer.json' '$work/tj.err'"

# Chat: run --chat and sitsrt chat through a template given with --chat-template-file (the tiny
# model has none), the audit records of chat requests, and the errors.
printf "%s" "{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}" >"$work/chat.jinja"
check "run --chat --echo prints the rendered prompt" bash -c "'$cli' run -m '$model' --chat-template-file '$work/chat.jinja' --chat --system 'Be brief.' -p 'hi' -n 2 --temp 0 --echo -q | head -c 40 | grep -q '^<|system|>Be brief.'"
check "run --chat feeds the rendering's ids" bash -c "'$cli' run -m '$model' --chat-template-file '$work/chat.jinja' --chat -p 'hi' -n 2 --temp 0 --json | tail -n 1 >'$work/chat-run.json' && '$cli' tokenize '$model' --text \"\$(printf '<|user|>hi\\n<|assistant|>')\" --bos --json >'$work/chat-ids.json' && python3 -c \"import json; a = json.load(open('$work/chat-run.json')); b = json.load(open('$work/chat-ids.json')); assert a['prompt_tokens'] == b['ids'], (a['prompt_tokens'], b['ids'])\""
check "sitsrt chat: turns, /clear and /exit from a pipe, one audited request per turn" bash -c "printf 'hello\nagain\n/clear\n/help\n/exit\nnever read\n' | '$cli' chat -m '$model' --chat-template-file '$work/chat.jinja' -n 3 --temp 0 -q --audit-log '$work/chat.jsonl' >'$work/chat.out' 2>'$work/chat.err' && grep -q 'conversation cleared' '$work/chat.err' && '$cli' audit verify '$work/chat.jsonl' >/dev/null"
check "sitsrt chat: the audit log holds each turn's messages" python3 -c "
import json
reqs = [json.loads(l) for l in open('$work/chat.jsonl') if '\"type\":\"request\"' in l]
assert len(reqs) == 2, len(reqs)
assert [m['role'] for m in reqs[1]['chat']['messages']] == ['user', 'assistant', 'user'], reqs[1]['chat']
assert reqs[1]['chat']['messages'][2]['content'] == 'again' and len(reqs[1]['chat']['template_sha256']) == 64
"
check "run --chat on a model without a chat template exits 1 saying so" bash -c "'$cli' run -m '$model' --chat -p hi 2>'$work/nochat.err'; test \$? -eq 1 && grep -q 'no chat template' '$work/nochat.err'"
check "sitsrt chat on a model without a chat template exits 1" bash -c "echo hi | '$cli' chat -m '$model' 2>'$work/nochat2.err'; test \$? -eq 1 && grep -q 'no chat template' '$work/nochat2.err'"
check "--system without --chat is a usage error" bash -c "'$cli' run -m '$model' -p hi --system x; test \$? -eq 2"
printf '{%% for m in messages %%}{{ m | frobnicate }}{%% endfor %%}' >"$work/bad.jinja"
check "an unsupported template construct fails naming it and its position" bash -c "'$cli' run -m '$model' --chat-template-file '$work/bad.jinja' --chat -p hi 2>'$work/bad.err'; test \$? -eq 1 && grep -q 'frobnicate' '$work/bad.err' && grep -q ':1:' '$work/bad.err'"

# Options parse into their real types with range checks: nothing is cut to 32 bits or accepted
# out of range (each exits 2 naming the option, and leaves no audit log behind).
for bad in "-n 4294967301" "-n 1000000000000" "-t 4294967297" "--top-k 4294967297" "--repeat-last-n 4294967297" \
  "--top-logprobs 4294967299" "--temp -1" "--temp nan" "--top-k -5" "--top-p 1.5" "--min-p -0.5" "--seed -1" \
  "--repeat-penalty 0" "-n 12x" "--audit-rotate-bytes -5 --audit-log $work/bad-option.jsonl"; do
  check "run $bad: usage error naming the option" bash -c \
    "'$cli' run -m '$model' -p hi $bad 2>'$work/opt.err'; test \$? -eq 2 && grep -q \"option '--\" '$work/opt.err'"
done
check "a refused option writes no audit log" test ! -e "$work/bad-option.jsonl"
check "run -n at the int32 limit is accepted" "$cli" run -m "$model" -p hi -n 2147483647 --ignore-eos -c 8 -q
check "run -f of a directory is refused" bash -c "'$cli' run -m '$model' -f '$work' 2>'$work/f.err'; test \$? -eq 2 && grep -q 'not a regular file' '$work/f.err'"
check "run -f of a missing file is refused" bash -c "'$cli' run -m '$model' -f '$work/none.txt' 2>'$work/f.err'; test \$? -eq 2 && grep -q 'does not exist' '$work/f.err'"
check "run -f - reads standard input" bash -c "echo 'hello' | '$cli' run -m '$model' -f - -n 2 --temp 0 --json | tail -n 1 | grep -q summary"

# The real model against the llama.cpp / llama2.c reference continuations.
if [ -f "$shared/models/stories260K.gguf" ] && [ -f "$shared/refdata/stories260K_greedy.json" ]; then
  while IFS=$'\t' read -r prompt expected; do
    "$cli" run -m "$shared/models/stories260K.gguf" -p "$prompt" -n 64 --temp 0 -q >"$work/story.txt" 2>/dev/null
    check "stories260K greedy: '$prompt'" python3 -c "
import sys; out = open('$work/story.txt').read(); exp = sys.argv[1].encode().decode('unicode_escape')
sys.exit(0 if out == exp + '\n' else 1)" "$expected"
  done < <(python3 -c "
import json
for r in json.load(open('$shared/refdata/stories260K_greedy.json'))['results']:
    print(r['prompt'] + '\t' + r['generated_text'].encode('unicode_escape').decode())")
else
  echo "skipped: stories260K reference checks ($shared/models is absent)"
fi

# Audit logs: run -> verify (clean) -> tamper one byte -> verify fails naming the line -> replay.
audit_flow() {  # audit_flow MODEL TAG
  local m=$1 tag=$2 log=$work/$2.audit.jsonl
  check "$tag: run --audit-log" "$cli" run -m "$m" -p "Once upon a time" -n 24 --seed 11 --temp 0.8 --deterministic \
    --audit-log "$log" --audit-level topk -q
  check "$tag: verify clean" bash -c "'$cli' audit verify '$log' | grep -q '^clean'"
  check "$tag: show" bash -c "'$cli' audit show '$log' --color never | grep -q '^-- end'"
  check "$tag: replay bit-exact" bash -c "'$cli' audit replay '$log' -m '$m' -t 1 | grep -q '1 bit-exact, 0 mismatched'"
  cp "$log" "$work/$tag.tampered.jsonl"
  # flip one byte of the 4th line (a token record's logprob digits or text)
  python3 - "$work/$tag.tampered.jsonl" <<'PY'
import sys
p = sys.argv[1]; lines = open(p, 'rb').read().split(b'\n')
i = lines[3].index(b'"lp":') + 7
lines[3] = lines[3][:i] + bytes([lines[3][i] ^ 1]) + lines[3][i + 1:]
open(p, 'wb').write(b'\n'.join(lines))
PY
  check "$tag: verify of a tampered log fails naming line 4" bash -c \
    "'$cli' audit verify '$work/$tag.tampered.jsonl' >'$work/v.out'; test \$? -eq 1 && grep -q 'tampered.jsonl:4: modified' '$work/v.out'"
  if [ "$m" != "$model" ]; then
    check "$tag: replay refuses another model" bash -c "'$cli' audit replay '$log' -m '$model' 2>&1 | grep -q 'refusing to replay'"
  fi
}
if [ -f "$shared/models/stories260K.gguf" ]; then
  audit_flow "$shared/models/stories260K.gguf" stories
  # A log recorded by an earlier version (89bf78b, before the backend seam; cpu_isa avx2, which
  # replay reinstates) still verifies and replays bit for bit.
  old_log=$here/../data/audit/stories260K-89bf78b.jsonl
  check "stories: a log of 89bf78b verifies" bash -c "'$cli' audit verify '$old_log' | grep -q '^clean'"
  check "stories: a log of 89bf78b replays bit-exact" bash -c \
    "'$cli' audit replay '$old_log' -m '$shared/models/stories260K.gguf' -t 1 | grep -q '1 bit-exact, 0 mismatched'"
else
  echo "skipped: audit flow on stories260K ($shared/models is absent)"
fi
audit_flow "$model" tiny-audit
printf 'k3y\n' >"$work/key"
check "audit: HMAC log verifies with its key only" bash -c "'$cli' run -m '$model' -p hi -n 4 -q --audit-log '$work/h.jsonl' --audit-key-file '$work/key' >/dev/null \
  && '$cli' audit verify '$work/h.jsonl' --key-file '$work/key' >/dev/null && printf 'other' >'$work/key2' \
  && ! '$cli' audit verify '$work/h.jsonl' --key-file '$work/key2' >/dev/null && ! '$cli' audit verify '$work/h.jsonl' >/dev/null"
"$cli" run -m "$model" -p hi -n 5 -q --ignore-eos --otlp-trace "$work/trace.jsonl" --audit-level topk >/dev/null 2>&1
check "run --otlp-trace: one OTLP/JSON span with 5 token events" json_check "$work/trace.jsonl" \
  "len(doc['resourceSpans'][0]['scopeSpans'][0]['spans'][0]['events']) == 5"
check "audit: an existing log is never overwritten" bash -c "'$cli' run -m '$model' -p hi -n 2 -q --audit-log '$work/h.jsonl' 2>/dev/null; test \$? -eq 1"
check "audit: --audit-append continues a log across runs (HMAC key kept) and verify sees every request" bash -c "
  for i in 1 2 3; do '$cli' run -m '$model' -p hi -n 2 -q --audit-log '$work/ap.jsonl' --audit-append --audit-key-file '$work/key' --audit-rotate-bytes 3000 >/dev/null || exit 1; done
  '$cli' audit verify '$work/ap.jsonl' --key-file '$work/key' | grep -q '^clean: .* 0 request(s) without' \
  && test \$(cat '$work/ap.jsonl'* | grep -c '\"type\":\"end\"') -eq 3"
check "audit: --audit-append refuses a log whose tail is tampered, naming file and line" bash -c "
  last=\$(ls '$work'/ap.jsonl* | sort -V | tail -1); sed -i '\$ s/\"finish\":\"length\"/\"finish\":\"lengtX\"/' \"\$last\"
  '$cli' run -m '$model' -p hi -n 2 -q --audit-log '$work/ap.jsonl' --audit-append --audit-key-file '$work/key' 2>'$work/ap.err'; test \$? -eq 1 \
  && grep -q 'cannot append to the audit log: line [0-9]*: modified' '$work/ap.err'"
check "audit: --audit-append without --audit-log is a usage error" bash -c "'$cli' run -m '$model' -p hi -n 1 --audit-append 2>/dev/null; test \$? -eq 2"

# sitsrt perplexity: the llama-perplexity report, --json, and KL-divergence base files.
text=$here/../data/text/architecture-notes.txt
stories=$shared/models/stories260K.gguf
if [ -f "$stories" ]; then
  ppl=("$cli" perplexity -t 2 -c 128 --chunks 4)
  check "perplexity: running estimates and the final estimate" bash -c "$(printf '%q ' "${ppl[@]}") -m '$stories' -f '$text' \
    >'$work/ppl.txt' 2>/dev/null && grep -q '^\[1\][0-9.]*,\[2\][0-9.]*,\[3\][0-9.]*,\[4\][0-9.]*,$' '$work/ppl.txt' \
    && grep -q '^Final estimate: PPL = [0-9.]* +/- [0-9.]*$' '$work/ppl.txt'"
  "${ppl[@]}" -m "$stories" -f "$text" --json >"$work/ppl.json" 2>/dev/null
  check "perplexity --json: fields" json_check "$work/ppl.json" \
    "doc['n_ctx'] == 128 and doc['first_scored'] == 64 and doc['chunks'] == 4 and doc['scored'] == 4 * 63 \
and doc['evaluated_tokens'] == 4 * 127 and len(doc['chunk_ppl']) == 4 and doc['ppl'] == doc['chunk_ppl'][-1] \
and 1 < doc['ppl'] < 1e5 and doc['ppl_error'] > 0 and doc['add_bos'] and len(doc['model_sha256']) == 64 \
and doc['engine']['activations'] == 'int8' and doc['tokens_per_second'] > 0 and 'kl_divergence' not in doc"
  check "perplexity: the text and JSON reports agree" bash -c "grep -q \"PPL = \$(python3 -c \"import json; print('%.4f' % json.load(open('$work/ppl.json'))['ppl'])\")\" '$work/ppl.txt'"
  "${ppl[@]}" -m "$stories" -f "$text" --activations f32 --kl-divergence-base "$work/base.kld" --json >"$work/base.json" 2>/dev/null
  check "perplexity --kl-divergence-base: writes the base (no .part left)" json_check "$work/base.json" \
    "doc['kl_divergence_base']['mode'] == 'written' and doc['kl_divergence_base']['rows'] == 4 * 63 \
and doc['kl_divergence_base']['bytes'] == __import__('os').path.getsize('$work/base.kld') \
and not __import__('os').path.exists('$work/base.kld.part')"
  "$cli" perplexity -t 2 -m "$stories" --activations f32 --kl-divergence --kl-divergence-base "$work/base.kld" --json \
    >"$work/self.json" 2>/dev/null
  check "perplexity --kl-divergence: a run against its own base is ~0 (uint16 rounding only)" python3 -c "
import json
doc = json.load(open('$work/self.json'))
k = doc['kl_divergence']
assert doc['kl_divergence_base']['mode'] == 'read' and k['count'] == 252
assert 0 <= k['kld']['value'] < 1e-6 and k['kld_quantiles']['max'] < 1e-5, k['kld']
assert k['same_top']['value'] == 1.0 and k['rms_p_diff']['value'] < 1e-5
assert abs(k['ppl']['value'] / k['ppl_base']['value'] - 1) < 1e-5 and abs(k['ppl']['value'] - doc['ppl']) < 1e-9
"
  for centering in on off; do
    flag=(); [ "$centering" = off ] && flag=(--no-kv-centering)
    "$cli" perplexity -t 2 -m "$stories" --activations f32 --kv-type int4 "${flag[@]}" --kl-divergence \
      --kl-divergence-base "$work/base.kld" --json >"$work/int4-$centering.json" 2>/dev/null
  done
  check "perplexity --kv-type int4: K centered unless --no-kv-centering, both scored against the base" python3 -c "
import json
on, off = (json.load(open('$work/int4-%s.json' % c)) for c in ('on', 'off'))
assert on['engine']['kv_cache_type'] == 'k=int4+hadamard+centered,v=int4+hadamard,recent=32', on['engine']
assert off['engine']['kv_cache_type'] == 'k=int4+hadamard,v=int4+hadamard,recent=32', off['engine']
for d in (on, off): assert 0 < d['kl_divergence']['kld']['value'] < 1, d['kl_divergence']['kld']
"
  if [ -f "$shared/models/stories260K-Q8_0.gguf" ]; then
    "$cli" perplexity -t 2 -m "$shared/models/stories260K-Q8_0.gguf" --kl-divergence --kl-divergence-base "$work/base.kld" \
      -f "$text" >"$work/q8.txt" 2>/dev/null
    check "perplexity --kl-divergence: Q8_0 against the F32 base (text report)" bash -c \
      "grep -q '^Mean    KLD: ' '$work/q8.txt' && grep -q '^Same top p: ' '$work/q8.txt' && grep -q '^Mean PPL(base) ' '$work/q8.txt' \
&& grep -q '^RMS Δp    : ' '$work/q8.txt' && grep -q '^99.0%   KLD: ' '$work/q8.txt' && grep -q '^   4 ' '$work/q8.txt'"
  fi
  "$cli" perplexity -t 2 -c 8 --chunks 2 -m "$model" -f "$text" --kl-divergence-base "$work/tiny.kld" >/dev/null 2>&1
  check "perplexity: a base of another vocabulary is refused naming the file and n_vocab" bash -c \
    "'$cli' perplexity -m '$stories' --kl-divergence --kl-divergence-base '$work/tiny.kld' 2>&1 >/dev/null | grep -q \"tiny.kld: .*'n_vocab'\"; test \${PIPESTATUS[0]} -eq 1"
  check "perplexity: tokens of another text are refused naming the file and field" bash -c \
    "'$cli' perplexity -m '$stories' --kl-divergence --kl-divergence-base '$work/base.kld' -f '$here/cli_test.sh' 2>&1 | grep -q \"base.kld: .*'tokens'\""
  check "perplexity: another -c than the base's is refused" bash -c \
    "'$cli' perplexity -m '$stories' -c 64 --kl-divergence --kl-divergence-base '$work/base.kld' 2>&1 | grep -q \"'n_ctx'\""
  head -c 5000 "$work/base.kld" >"$work/cut.kld"
  check "perplexity: a truncated base is an error naming the file" bash -c \
    "'$cli' perplexity -m '$stories' --kl-divergence --kl-divergence-base '$work/cut.kld' 2>&1 | grep -q 'cut.kld: .*truncated'"
  printf 'not a base file, just some bytes that are long enough to fill the fixed header of one, and then some more of them' \
    >"$work/junk.kld"
  check "perplexity: a file that is no base is refused naming its magic" bash -c \
    "'$cli' perplexity -m '$stories' --kl-divergence --kl-divergence-base '$work/junk.kld' 2>&1 | grep -q \"junk.kld: .*'magic'\""
  check "perplexity: too short a text names the tokens needed" bash -c \
    "'$cli' perplexity -m '$stories' -f '$here/../fuzz/dict/gguf.dict' -c 4096 2>&1 | grep -q 'needs at least 8192'"
  check "perplexity: --kl-divergence needs a base (usage error)" bash -c \
    "'$cli' perplexity -m '$stories' --kl-divergence; test \$? -eq 2"
else
  echo "skipped: perplexity checks on stories260K ($shared/models is absent)"
fi

# Hostile paths, non-regular inputs, resource limits, verifier verdicts (docs/hardening.md).
# shellcheck source=reliability_test.sh
. "$here/reliability_test.sh"

if [ -n "$examples" ]; then
  check "installed example: stream" bash -c "'$examples/sitsrt_stream' '$model' 'abc' | grep -q 'tokens'"
  check "installed example: token table" bash -c "'$examples/sitsrt_token_table' '$model' 'abc' 5 | grep -c . | grep -qx 6"
fi

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
