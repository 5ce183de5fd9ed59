#!/bin/sh
# prefill-memory.sh - peak memory and prefill speed of long prompts at
# several step budgets (cpmodel generate --chunk), on a synthetic model with a
# 16384-token context.  Prints a Markdown table.
#
#   tests/bench/prefill-memory.sh [BUILD] [VOCAB_GGUF]
#   KV=f32 tests/bench/prefill-memory.sh ...    (F32 K/V instead of F16)
#   SIZES="1000 4000" BUDGETS="128 512" ...   (a subset)
#
# BUILD defaults to build; VOCAB_GGUF (for realistic tokenization) defaults
# to the llama-spm vocabulary among the fixtures.  Needs GNU time.
set -eu
build=${1:-build}
vocab=${2:-${CP_FIXTURES:-../shared/models}/vocab/ggml-vocab-llama-spm.gguf}
cpmodel=$build/bin/cpmodel
dir=$build/bench
model=$dir/synth-ctx16k-f16.gguf
mkdir -p "$dir"

# 4 layers, 512 wide, 8 heads (4 KV heads, head size 64), ffn 1376.
n_layer=4 kv_dim=256
kv_bytes=2 kv_flag=
[ "${KV:-f16}" = f32 ] && kv_bytes=4 kv_flag=--kv-f32
[ -f "$model" ] || "$cpmodel" synth -o "$model" --layers $n_layer --embd 512 \
	--heads 8 --kv-heads 4 --ff 1376 --ctx 16384 --type f16 --seed 5 \
	--vocab-from "$vocab" >/dev/null

# Text of about n tokens: a fixed cycle of common words (15000 words make
# about 15.7k tokens, inside the 16384-token context).
prompt() {
	awk -v n="$1" 'BEGIN {
		split("the quick brown fox jumps over a lazy dog while seven " \
		    "small birds sing in an old tree near the river", w, " ");
		s = ""; for (i = 0; i < n; i++) s = s w[i % 20 + 1] " ";
		printf "%s", s }'
}

echo "| prompt tokens | budget | peak RSS MiB | KV cache MiB | RSS - KV MiB | prefill s | prefill t/s |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for words in ${SIZES:-1000 4000 15000}; do
	p=$(prompt $((words * 95 / 100)))
	ntok=$("$cpmodel" tokenize "$model" "$p" | wc -w)
	for budget in ${BUDGETS:-128 512 2048}; do
		out=$( { /usr/bin/time -f "TIME %e %M" "$cpmodel" generate "$model" \
			"$p" -n 1 --temp 0 --ids --chunk $budget $kv_flag \
			>/dev/null; } 2>&1 )
		secs=$(echo "$out" | awk '/^TIME/ {print $2}')
		rss_kib=$(echo "$out" | awk '/^TIME/ {print $3}')
		# K and V per token per layer: 2 * kv_dim * kv_bytes.
		kv_mib=$(awk -v t=$((ntok + 1)) -v l=$n_layer -v d=$kv_dim \
			-v b=$kv_bytes 'BEGIN { printf "%.1f", t * l * 2 * d * b / 1048576 }')
		awk -v r="$rss_kib" -v k="$kv_mib" -v s="$secs" -v n="$ntok" -v b="$budget" \
			'BEGIN { printf "| %d | %d | %.1f | %.1f | %.1f | %.2f | %.0f |\n",
			    n, b, r / 1024, k, r / 1024 - k, s, n / s }'
	done
done
