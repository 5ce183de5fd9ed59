#!/usr/bin/env bash
# tests/gpu/run.sh - cpd's whole GPU verification in one command, sized for
# one call of the device machine (no package registry there, ~8 minutes).
#
#   tests/gpu/run.sh prepare	here, once: the .deb files (make gpu-deps)
#				and the fixtures (build/fx) that the device
#				run carries; checks the 64 MiB carry limit and
#				prints the call to make (tests/gpu/README.md)
#   tests/gpu/run.sh		the run, on the device machine (or anywhere)
#
# The run: prints the GPU; finds Check, liburing and libyaml (pkg-config) or
# unpacks the carried .deb files under build/gpu-deps/root and points the
# build there; builds only what it needs (a CPU-only cpmodel first, so the
# big synthetic models can be written while the rest builds); runs
# check_cuda, check_cuda_kernels and check_cuda_backend with CP_FIXTURES on
# the carried fixtures; measures the device's memory bandwidth; then cpbench
# engine (pp512, tg128, CUDA backend) on a 110M-parameter synthetic model
# (F16, Q8_0) and a Llama-3-8B-shaped one (Q8_0, F16), reporting decode as a
# fraction of the measured read bandwidth; then cpd itself on the CUDA
# backend under cpbench serve (1 to 64 clients, and the mixed load).
# Results go under $OUT (the device tool returns what is written there;
# default build/gpu/out): summary.md (for BENCHMARKS.md), run.log, gpu.txt,
# build.log, tests.log, bench.log, serve.log.  Without a GPU it builds, runs the test programs (which skip)
# and stops with exit 77.
#
# Environment: GPU_DEADLINE (seconds for the whole run, default 480: phases
# that would not fit are skipped and say so), GPU_BIG=0 (no 8B-shaped
# models), GPU_BIG_LAYERS (default 32), GPU_ARCHS (default: the device's
# compute capability, else 90), JOBS, GPU_FORCE_DEPS=1 (use the carried
# .deb files even when the system has the libraries), GPU_SERVE_BACKEND
# (default cuda).
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
T0=$SECONDS
MIB=1048576
CARRY_LIMIT=$((64 * MIB))

B=build/gpu			# CUDA build
HB=build/gpu-host		# CPU-only build of cpmodel, for the synths
FX_CARRY=build/fx		# fixtures carried from the developer machine
DEBS=build/gpu-deps/debs
DEPS_ROOT=$ROOT/build/gpu-deps/root
OUT=${OUT:-$ROOT/build/gpu/out}
DEADLINE=${GPU_DEADLINE:-480}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
BIG=${GPU_BIG:-1}
BIG_LAYERS=${GPU_BIG_LAYERS:-32}

# Fixtures the GPU tests read (check_cuda_backend's cases), most valuable
# first; prepare drops from the end of DROP_ORDER while over the limit.
FIXTURES="aidreams260K.gguf stories260K-plctlab.gguf
synth/synth-tiny-F32.gguf synth/synth-tiny-F16.gguf synth/synth-tiny-BF16.gguf
synth/synth-tiny-Q8_0.gguf synth/synth-tiny-Q4_0.gguf synth/synth-tiny-Q4_1.gguf
synth/synth-tiny-Q5_0.gguf synth/synth-tiny-Q5_1.gguf synth/synth-tiny-Q2_K.gguf
synth/synth-tiny-Q3_K_M.gguf synth/synth-tiny-Q4_K_M.gguf
synth/synth-tiny-Q5_K_M.gguf synth/synth-tiny-Q6_K.gguf
synth/synth-gqa-Q4_0.gguf synth/synth-gqa-Q8_0.gguf
arch/arch-qwen2-Q8_0.gguf arch/arch-phi3-Q8_0.gguf arch/arch-gemma2-Q8_0.gguf
arch/arch-gemma3-Q8_0.gguf arch/arch-llama31-Q8_0.gguf arch/arch-gemma-Q8_0.gguf"
DROP_ORDER="synth/synth-gqa-Q8_0.gguf synth/synth-tiny-Q5_1.gguf
synth/synth-tiny-Q4_1.gguf synth/synth-tiny-BF16.gguf synth/synth-gqa-Q4_0.gguf
arch/arch-gemma-Q8_0.gguf arch/arch-llama31-Q8_0.gguf"

say() { printf '== [%3ds] %s\n' $((SECONDS - T0)) "$*"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }

# ---- prepare (developer machine) ------------------------------------------

# Bytes that travel: the tree (tracked and unignored files) and the carry.
carry_bytes() {
	local tree carried

	tree=$(git ls-files -co --exclude-standard -z 2>/dev/null |
	    du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f 1)
	carried=$(du -cb "$@" 2>/dev/null | tail -n 1 | cut -f 1)
	echo $((${tree:-0} + ${carried:-0}))
}

prepare() {
	local src=${CP_FIXTURES:-$ROOT/../shared/models} f total

	make --no-print-directory gpu-deps || {
		echo "prepare: make gpu-deps failed (apt-get download needs" \
		    "the package lists: apt-get update)"
		return 1
	}
	[ -d "$src" ] || { echo "prepare: no fixtures in $src"; return 1; }
	mkdir -p "$FX_CARRY/synth" "$FX_CARRY/arch"
	for f in $FIXTURES; do
		if [ ! -f "$src/$f" ]; then
			echo "prepare: $src/$f missing: not carried"
		elif ! cmp -s "$src/$f" "$FX_CARRY/$f"; then
			cp -f "$src/$f" "$FX_CARRY/$f" || return 1
		fi
	done
	# The device's copy of .git can be older than the tree sent with it:
	# the run reports the commit read here (and the files changed since).
	{
		git log -1 --format='%h %s'
		git status --porcelain | sed 's/^/  changed: /'
	} >"$FX_CARRY/TREE" 2>/dev/null
	total=$(carry_bytes "$FX_CARRY" "$DEBS")
	for f in $DROP_ORDER; do
		[ "$total" -le "$CARRY_LIMIT" ] && break
		echo "prepare: over 64 MiB: $f not carried"
		rm -f "$FX_CARRY/$f"
		total=$(carry_bytes "$FX_CARRY" "$DEBS")
	done
	echo "prepare: tree + $FX_CARRY + $DEBS = $((total / 1024)) KiB" \
	    "of $((CARRY_LIMIT / 1024)) KiB"
	[ "$total" -le "$CARRY_LIMIT" ] || {
		echo "prepare: still over the limit: carry less"
		return 1
	}
	cat <<'EOF'
prepare: ready.  The device call (run tool), then give_back:
  command:   tests/gpu/run.sh
  carry:     ["build/fx", "build/gpu-deps/debs"]
  timeout_s: 570
EOF
}

# ---- the run: dependencies --------------------------------------------------

MAKE_ARGS=()
MAKE="make"

# Unpack one .deb into dir without dpkg-deb (ar and tar only).
deb_extract() {
	local deb=$1 dir=$2 member

	if command -v dpkg-deb >/dev/null; then
		dpkg-deb -x "$deb" "$dir"
		return
	fi
	member=$(ar t "$deb" | grep '^data\.tar') || return 1
	case $member in
	*.xz) ar p "$deb" "$member" | tar -xJ -C "$dir" ;;
	*.zst) ar p "$deb" "$member" | zstd -dc | tar -x -C "$dir" ;;
	*.gz) ar p "$deb" "$member" | tar -xz -C "$dir" ;;
	*) ar p "$deb" "$member" | tar -x -C "$dir" ;;
	esac
}

deps_setup() {
	local lib=$DEPS_ROOT/usr/lib/x86_64-linux-gnu f

	if [ "${GPU_FORCE_DEPS:-0}" != 1 ] && command -v pkg-config >/dev/null &&
	    pkg-config --exists check liburing yaml-0.1; then
		say "deps: Check, liburing, libyaml from the system (pkg-config)"
		command -v make >/dev/null && return 0
	fi
	if [ ! -f "$DEPS_ROOT/usr/include/check.h" ] ||
	    [ ! -f "$DEPS_ROOT/usr/include/liburing.h" ]; then
		set -- "$DEBS"/*.deb
		if [ ! -e "$1" ]; then
			say "deps: ERROR: Check/liburing/libyaml missing and no" \
			    ".deb files in $DEBS (run 'tests/gpu/run.sh" \
			    "prepare' here and carry $DEBS)"
			return 1
		fi
		mkdir -p "$DEPS_ROOT"
		for f in "$@"; do
			deb_extract "$f" "$DEPS_ROOT" || {
				say "deps: ERROR: cannot unpack $f"
				return 1
			}
		done
	fi
	say "deps: private prefix $DEPS_ROOT (from $(find "$DEBS" -name '*.deb' |
	    wc -l) .deb files)"
	MAKE_ARGS=("CPPFLAGS=-isystem $DEPS_ROOT/usr/include"
	    "LDFLAGS=-L$lib -Wl,-rpath,$lib"
	    "CHECK_LDLIBS=-lcheck_pic -lsubunit -lrt -lm -pthread"
	    "DAEMON_LDLIBS=-luring -lyaml")
	export CPATH=$DEPS_ROOT/usr/include${CPATH:+:$CPATH}
	export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
	export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export PKG_CONFIG_PATH=$lib/pkgconfig
	if ! command -v make >/dev/null; then
		MAKE=$DEPS_ROOT/usr/bin/make
		say "deps: make from the private prefix"
	fi
}

mk() {
	"$MAKE" -j"$JOBS" --no-print-directory "${MAKE_ARGS[@]}" "$@" \
	    >>"$OUT/build.log" 2>&1
}

# ---- the run: building ------------------------------------------------------

NVCC=
ARCH=

find_nvcc() {
	NVCC=$(command -v nvcc 2>/dev/null)
	[ -n "$NVCC" ] || [ ! -x /usr/local/cuda/bin/nvcc ] ||
	    NVCC=/usr/local/cuda/bin/nvcc
	[ -n "$NVCC" ]
}

build_host() {
	say "build: cpmodel without CUDA ($HB)"
	mk BUILD=$HB CUDA=0 lib && mk BUILD=$HB CUDA=0 $HB/bin/cpmodel
}

build_cuda() {
	say "build: CUDA sm_$ARCH, engine, tests and cpbench ($B, -j$JOBS)"
	mk BUILD=$B CUDA_ARCHS="$ARCH" lib &&
	    mk BUILD=$B CUDA_ARCHS="$ARCH" $B/tests/check_cuda \
	    $B/tests/check_cuda_kernels $B/tests/check_cuda_backend \
	    $B/bin/cpbench $B/bin/cpmodel $B/bin/cpd || return 1
	grep -q 'CUDA backend on' "$OUT/build.log" || {
		say "build: ERROR: make built without CUDA"
		return 1
	}
	write_membw >"$B/membw.cu"
	"$NVCC" -O3 -std=c++17 -arch=sm_"$ARCH" -o "$B/membw" "$B/membw.cu" \
	    >>"$OUT/build.log" 2>&1
}

# ---- the run: synthetic models ----------------------------------------------

M110=$B/models/synth-110M
M8B=$B/models/synth-8B
PID_110=
PID_8B_Q8=
PID_8B_F16=
SYNTH_T0=0

# cpmodel synth shapes: stories110M's (llama2.c) and Llama-3-8B's.
synth_110m() {
	$HB/bin/cpmodel synth -o "$M110-$1.gguf" --layers 12 --embd 768 \
	    --heads 12 --kv-heads 12 --ff 2048 --vocab 32000 --ctx 2048 \
	    --type "$1" --seed 1 --name synth-110M
}

synth_8b() {
	$HB/bin/cpmodel synth -o "$M8B-$1.gguf" --layers "$BIG_LAYERS" \
	    --embd 4096 --heads 32 --kv-heads 8 --ff 14336 --vocab 128256 \
	    --ctx 8192 --rope-base 500000 --type "$1" --seed 1 --name synth-8B
}

start_synths() {
	local kb

	mkdir -p "$B/models"
	SYNTH_T0=$SECONDS
	(synth_110m f16 && synth_110m q8_0) >"$B/models/synth-110M.log" 2>&1 &
	PID_110=$!
	[ "$BIG" = 1 ] || return 0
	kb=$(df -Pk "$B/models" | awk 'NR == 2 { print $4 }')
	# Q8_0 ~ 8.5 GB, F16 ~ 16 GB at 32 layers.
	if [ "${kb:-0}" -lt $((BIG_LAYERS * 800 * 1024 + 4 * 1024 * 1024)) ]; then
		say "synth: only $((kb / 1024 / 1024)) GiB free: no 8B models"
		BIG=0
		return 0
	fi
	synth_8b q8_0 >"$B/models/synth-8B-q8_0.log" 2>&1 &
	PID_8B_Q8=$!
	if [ "$kb" -lt $((BIG_LAYERS * 800 * 1024 * 3 + 8 * 1024 * 1024)) ]; then
		say "synth: $((kb / 1024 / 1024)) GiB free: 8B in Q8_0 only"
		return 0
	fi
	synth_8b f16 >"$B/models/synth-8B-f16.log" 2>&1 &
	PID_8B_F16=$!
}

# Wait for a synth job while at least `need` seconds of the run would be left
# after it; 0 when it finished well, else kills it and returns 1.
wait_synth() {
	local pid=$1 need=$2 what=$3

	[ -n "$pid" ] || return 1
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$(left)" -lt "$need" ]; then
			say "synth: $what not written after $((SECONDS - \
			    SYNTH_T0)) s: stopped, its benchmark skipped"
			kill "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			NOTES+=("$what: not benchmarked: cpmodel synth did not finish in time")
			return 1
		fi
		sleep 2
	done
	wait "$pid" || {
		say "synth: $what failed (see bench.log)"
		NOTES+=("$what: cpmodel synth failed")
		return 1
	}
	say "synth: $what written ($((SECONDS - SYNTH_T0)) s since the start)"
}

stop_synths() {
	local p

	for p in $PID_110 $PID_8B_Q8 $PID_8B_F16; do
		kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
}

# ---- the run: tests ---------------------------------------------------------

FX=$ROOT/$B/fx
TESTS_FAILED=0
TEST_ROWS=()
NOTES=()

# The fixtures the tests see: the carried ones (or ../shared/models here),
# plus, when synth-gqa-F16.gguf did not fit the carry, a stand-in of its
# shape from cpmodel synth (the tests compare the CUDA backend with the CPU
# backend and with itself, so any weights of that shape and spread serve).
fixtures_setup() {
	local src f

	if [ -d "$FX_CARRY" ]; then
		src=$ROOT/$FX_CARRY
	else
		src=${CP_FIXTURES:-$ROOT/../shared/models}
	fi
	rm -rf "$FX"
	mkdir -p "$FX/synth"
	for f in $FIXTURES synth/synth-gqa-F16.gguf; do
		[ -f "$src/$f" ] && ln -s "$(cd "$(dirname "$src/$f")" &&
		    pwd)/$(basename "$f")" "$FX/$f"
	done
	say "fixtures: $(find "$FX" -name '*.gguf' | wc -l) files from $src"
	if [ ! -e "$FX/synth/synth-gqa-F16.gguf" ] &&
	    [ -x $HB/bin/cpmodel ]; then
		$HB/bin/cpmodel synth -o "$FX/synth/synth-gqa-F16.gguf" \
		    --layers 2 --embd 256 --heads 8 --kv-heads 2 --ff 768 \
		    --vocab 32000 --ctx 4096 --std 0.1 --seed 3 --type f16 \
		    --name synth-gqa-standin >/dev/null &&
		    NOTES+=("synth-gqa-F16.gguf (36 MB) does not fit the carry: check_cuda_backend ran a cpmodel-synth stand-in of its shape (2 layers, 256 wide, 8/2 heads, vocab 32000, N(0, 0.1^2) weights, F16)")
	fi
}

run_test() {
	local name=$1 tmo=$2 rc res last log=$B/tests/$1.out

	# Leave a minute for the summary, whatever the test does.
	[ "$tmo" -le $(($(left) - 60)) ] || tmo=$(($(left) - 60))
	[ "$tmo" -ge 30 ] || tmo=30
	say "test: $name (at most $tmo s)"
	(CP_FIXTURES=$FX TMPDIR=$ROOT/$B/tmp timeout -k 5 "$tmo" \
	    "$B/tests/$name") >"$log" 2>&1
	rc=$?
	last=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c 1-160)
	case $rc in
	0) res=PASS ;;
	77 ) if [ "$HAVE_GPU" = 1 ]; then
		res="SKIP, but nvidia-smi sees a GPU"
		TESTS_FAILED=1
	else
		res=SKIP
	fi ;;
	124 | 137) res="TIMEOUT ($tmo s)"; TESTS_FAILED=1 ;;
	*) res="FAIL (exit $rc)"; TESTS_FAILED=1 ;;
	esac
	{
		echo "==== $name: $res"
		cat "$log"
	} >>"$OUT/tests.log"
	grep -E '^[0-9]+%: Checks|:[FE]:|skipped' "$log" | cut -c 1-300
	say "test: $name: $res"
	TEST_ROWS+=("| $name | $res | ${last//|/\\|} |")
}

run_tests() {
	mkdir -p "$B/tmp"
	: >"$OUT/tests.log"
	run_test check_cuda 60
	run_test check_cuda_kernels 240
	run_test check_cuda_backend 360
}

# ---- the run: benchmarks ----------------------------------------------------

READ_BW=
BENCH_ROWS=()

membw() {
	local line

	say "membw: device memory bandwidth"
	line=$(timeout -k 5 60 "$B/membw" 4 2>&1 | tee -a "$OUT/bench.log")
	echo "$line" | grep -v '^MEMBW'
	READ_BW=$(echo "$line" | sed -n 's/^MEMBW .*read=\([0-9.]*\).*/\1/p')
	MEMBW_LINE=$(echo "$line" | grep '^membw:')
	[ -n "$READ_BW" ] || NOTES+=("membw failed: $(echo "$line" | tail -n 1)")
}

# cpbench engine on model $1 with $2 repetitions, within $3 seconds; $4 is
# the bytes of its token embedding table on the device, which decoding does
# not read (one row a token), so that the bytes a decode step reads are the
# device's weight bytes less those.
bench() {
	local f=$1 reps=$2 tmo=$3 emb=$4 name out err pp tg mib dec frac

	name=$(basename "$f" .gguf)
	out=$B/models/$name.json
	err=$B/models/$name.err
	say "bench: $name: cpbench engine -p 512 -n 128 -r $reps -b cuda"
	timeout -k 5 "$tmo" $B/bin/cpbench engine -m "$f" -p 512 -n 128 \
	    -r "$reps" -b cuda -o json >"$out" 2>"$err"
	local rc=$?
	{
		echo "==== $name (exit $rc)"
		cat "$err" "$out"
	} >>"$OUT/bench.log"
	if [ $rc -ne 0 ]; then
		say "bench: $name: FAILED (exit $rc): $(tail -n 1 "$err")"
		BENCH_ROWS+=("| $name | $(du -BM "$f" | cut -f 1) | - | failed (exit $rc) | | | |")
		return 1
	fi
	pp=$(sed -n 's/.*"test": "pp512".*"avg_ts": \([0-9.]*\), "stddev_ts": \([0-9.]*\).*/\1 ± \2/p' "$out")
	tg=$(sed -n 's/.*"test": "tg128".*"avg_ts": \([0-9.]*\), "stddev_ts": \([0-9.]*\).*/\1 ± \2/p' "$out")
	mib=$(sed -n 's/.*weights \([0-9.]*\) MiB.*/\1/p' "$err" | head -n 1)
	dec=$(awk -v t="${tg%% *}" -v m="${mib:-0}" -v e="$emb" \
	    'BEGIN { printf "%.0f", t * (m * 1048576 - e) / 1e9 }')
	frac=$(awk -v d="$dec" -v r="${READ_BW:-0}" \
	    'BEGIN { if (r > 0) printf "%.0f%%", 100 * d / r; else print "-" }')
	say "bench: $name: pp512 $pp t/s, tg128 $tg t/s, decode reads" \
	    "$dec GB/s of weights ($frac of the measured read bandwidth)"
	BENCH_ROWS+=("| $name | $(du -BM "$f" | cut -f 1) | ${mib:-?} MiB | $pp | $tg | $dec GB/s | $frac |")
}

run_benches() {
	wait_synth "$PID_110" 60 synth-110M && {
		bench "$M110-f16.gguf" 5 120 $((32000 * 768 * 2))
		bench "$M110-q8_0.gguf" 5 120 $((32000 * 768 * 2))
	}
	[ "$BIG" = 1 ] || return 0
	if [ -n "$PID_8B_F16" ] && wait_synth "$PID_8B_F16" 75 "synth-8B F16"
	then
		bench "$M8B-f16.gguf" 3 $(($(left) > 150 ? 150 : $(left) - 10)) \
		    $((128256 * 4096 * 2))
	fi
	if wait_synth "$PID_8B_Q8" 75 "synth-8B Q8_0"; then
		bench "$M8B-q8_0.gguf" 3 $(($(left) > 150 ? 150 : $(left) - 10)) \
		    $((128256 * 4096 * 2))
	fi
}

# ---- the run: the daemon on the GPU ------------------------------------------

# Start cpd on the CUDA backend with the flags $@ on socket $SOCK; 0 once it
# answers (its socket exists), else 1.
cpd_start() {
	rm -f "$SOCK"
	echo "==== cpd $*" >>"$OUT/serve.log"
	$B/bin/cpd -s "$SOCK" --backend "${GPU_SERVE_BACKEND:-cuda}" "$@" \
	    >>"$OUT/serve.log" 2>&1 &
	CPD_PID=$!
	for _ in $(seq 1 300); do
		[ -S "$SOCK" ] && return 0
		kill -0 "$CPD_PID" 2>/dev/null || break
		sleep 0.1
	done
	say "serve: cpd did not start (see serve.log)"
	cpd_stop
	return 1
}

cpd_stop() {
	[ -n "$CPD_PID" ] || return 0
	kill -TERM "$CPD_PID" 2>/dev/null
	wait "$CPD_PID" 2>/dev/null
	CPD_PID=
}

# cpbench serve $@ against the running cpd: its output in SERVE_OUT; the
# output and stderr also go to serve.log.
serve_run() {
	local rc

	SERVE_OUT=$(timeout -k 5 90 $B/bin/cpbench serve --socket "$SOCK" \
	    "$@" 2>>"$OUT/serve.log")
	rc=$?
	{
		echo "==== cpbench serve $* (exit $rc)"
		echo "$SERVE_OUT"
	} >>"$OUT/serve.log"
	[ $rc -eq 0 ] || SERVE_OUT="cpbench serve $* failed (exit $rc)"
	return $rc
}

# cpd serving through the CUDA backend on the 110M F16 model: N = 1, 4,
# 16 and 64 clients (16-token prompts, 64 tokens each: BENCHMARKS-serve.md's
# workload), then the mixed load of issue #7's table (4 streams, an
# 1800-token prompt, context 2048, with --baseline), the prompt 300 ms in
# rather than 2 s and the streams 1500 tokens long, so that on a GPU they
# are still streaming while it prefills.  GPU_SERVE_BACKEND=cpu runs the
# same on the CPU backend (to check this script without a GPU).
serve_benches() {
	local f=$M110-f16.gguf n

	SOCK=$B/cpd.sock
	: >"$OUT/serve.log"
	[ -f "$f" ] || return 0
	if [ "$(left)" -lt 100 ]; then
		NOTES+=("serve: skipped, $(left) s left")
		return 0
	fi
	say "serve: cpd --backend cuda, cpbench serve -c 1, 4, 16, 64"
	cpd_start -m "$f" -t 4 --per-uid-max-clients 128 \
	    --per-uid-max-requests 256 --kv-cache 8192 || return 1
	for n in 1 4 16 64; do
		if serve_run -c "$n" --prompt-len 16 --gen-len 64 -r 3 -o md
		then
			# the table: its header once, then a row per N
			while IFS= read -r line; do
				case $line in
				'| model'* | '| ---'*)
					[ ${#SERVE_ROWS[@]} -gt 0 ] ||
					    SERVE_HEAD_LINES+=("$line") ;;
				'|'*) SERVE_ROWS+=("$line") ;;
				esac
			done <<<"$SERVE_OUT"
		else
			NOTES+=("serve: $SERVE_OUT")
		fi
	done
	cpd_stop
	if [ "$(left)" -lt 60 ]; then
		NOTES+=("serve: mixed load skipped, $(left) s left")
		return 0
	fi
	say "serve: mixed load (4 streams, an 1800-token prompt), B = 64," \
	    "512, 2048"
	for n in 64 512 2048; do
		[ "$(left)" -ge 30 ] || break
		cpd_start -m "$f" -t 4 --kv-cache 8192 --context 2048 \
		    --max-batch-tokens "$n" --max-prefill-chunk "$n" || return 1
		serve_run -c 4 --prompt-len 16 --gen-len 1500 --long-prompt 1800 \
		    --long-every 300 --long-count 1 --baseline -o md
		MIXED_OUT+=$'\n\n'"max_batch_tokens $n:"$'\n\n'"$SERVE_OUT"
		cpd_stop
	done
}

# ---- the run: summary -------------------------------------------------------

summary() {
	local s=$OUT/summary.md r n

	{
		echo "# cpd GPU run, $(date -u '+%Y-%m-%d %H:%M UTC')"
		echo
		if [ -f "$FX_CARRY/TREE" ]; then
			echo "- tree (as prepared): $(head -n 1 "$FX_CARRY/TREE")"
			tail -n +2 "$FX_CARRY/TREE"
		else
			echo "- tree: $(git log -1 --format='%h %s' \
			    2>/dev/null || echo 'no git metadata')"
		fi
		echo "- GPU: ${GPU_LINE:-none}"
		echo "- host: $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo),"\
		    "$(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f 2 | sed 's/^ //')"
		echo "- nvcc: $("$NVCC" --version 2>/dev/null | tail -n 1)"
		echo "- ${MEMBW_LINE:-membw: not measured}"
		echo "- wall time: $((SECONDS - T0)) s"
		echo
		echo "| test program | result | last line |"
		echo "| --- | --- | --- |"
		for r in "${TEST_ROWS[@]}"; do echo "$r"; done
		if [ ${#BENCH_ROWS[@]} -gt 0 ]; then
			echo
			echo "cpbench engine, CUDA backend (quantized weights run" \
			    "dequantized to F16 on the device).  Decode reads =" \
			    "tg128 t/s x the weight bytes a step reads (those on" \
			    "the device less token_embd, of which a step reads" \
			    "one row), against membw's read bandwidth."
			echo
			echo "| model | file | weights on device | pp512 t/s | tg128 t/s | decode reads | of read BW |"
			echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
			for r in "${BENCH_ROWS[@]}"; do echo "$r"; done
		fi
		if [ ${#SERVE_ROWS[@]} -gt 0 ]; then
			echo
			echo "cpd --backend ${GPU_SERVE_BACKEND:-cuda} -t 4 on" \
			    "synth-110M-f16, driven by" \
			    "cpbench serve (commands in serve.log)."
			echo
			for r in "${SERVE_HEAD_LINES[@]}"; do echo "$r"; done
			for r in "${SERVE_ROWS[@]}"; do echo "$r"; done
		fi
		if [ -n "$MIXED_OUT" ]; then
			echo
			echo "Mixed load, cpd --backend" \
			    "${GPU_SERVE_BACKEND:-cuda} -t 4 --kv-cache 8192" \
			    "--context 2048 --max-batch-tokens B" \
			    "--max-prefill-chunk B," \
			    "cpbench serve -c 4 --prompt-len 16 --gen-len 1500" \
			    "--long-prompt 1800 --long-every 300 --long-count 1" \
			    "--baseline:"
			echo "$MIXED_OUT"
		fi
		if [ ${#NOTES[@]} -gt 0 ]; then
			echo
			for n in "${NOTES[@]}"; do echo "- $n"; done
		fi
	} >"$s"
	echo
	cat "$s"
}

# ---- the run ----------------------------------------------------------------

# Stop early: say why, show the end of the build log, write the summary.
fail() {
	say "ERROR: $1 (see build.log)"
	tail -n 40 "$OUT/build.log"
	NOTES+=("stopped: $1")
	summary
}

GPU_LINE=
MEMBW_LINE=
CPD_PID=
SOCK=
SERVE_OUT=
MIXED_OUT=
SERVE_HEAD_LINES=()
SERVE_ROWS=()
HAVE_GPU=0

main() {
	local cc

	mkdir -p "$OUT" "$B" || return 1
	: >"$OUT/build.log"
	: >"$OUT/bench.log"
	say "cpd GPU run in $ROOT; results in $OUT; deadline $DEADLINE s"
	{
		echo "## nvidia-smi"
		nvidia-smi 2>&1
		nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,clocks.max.mem,power.limit \
		    --format=csv 2>&1
		echo "## host"
		uname -a
		nproc
		grep -m 1 'model name' /proc/cpuinfo
		free -g
		df -h "$ROOT"
	} >"$OUT/gpu.txt" 2>&1
	if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
		HAVE_GPU=1
		GPU_LINE=$(nvidia-smi --query-gpu=name,memory.total,driver_version \
		    --format=csv,noheader 2>/dev/null | head -n 1)
		cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader \
		    2>/dev/null | head -n 1 | tr -d ' .')
		say "GPU: $GPU_LINE (sm_${cc:-?})"
	else
		say "GPU: none (nvidia-smi finds no device): build and skip"
	fi
	case ${cc:-} in
	[1-9][0-9] | [1-9][0-9][0-9]) ;;
	*) cc=90 ;;
	esac
	ARCH=${GPU_ARCHS:-$cc}
	find_nvcc || { fail "no nvcc on PATH or in /usr/local/cuda/bin"; return 1; }
	deps_setup || { fail "the libraries the tests link are missing"; return 1; }
	build_host || { fail "build of cpmodel (CPU only) failed"; return 1; }
	fixtures_setup
	[ "$HAVE_GPU" = 1 ] && start_synths
	build_cuda || { fail "CUDA build failed"; stop_synths; return 1; }
	run_tests
	if [ "$HAVE_GPU" = 0 ]; then
		summary
		say "no GPU on this machine: built, the GPU tests skipped;" \
		    "nothing to benchmark.  Exit 77."
		return 77
	fi
	membw
	run_benches
	serve_benches
	cpd_stop
	stop_synths
	for f in "$B"/models/*.log; do
		[ -f "$f" ] && { echo "==== $f"; cat "$f"; } >>"$OUT/bench.log"
	done
	summary
	say "done in $((SECONDS - T0)) s"
	[ $TESTS_FAILED = 0 ]
}

# The bandwidth probe, compiled by nvcc in build_cuda.
write_membw() {
	cat <<'EOF'
// membw.cu - device memory bandwidth, written by tests/gpu/run.sh: a copy
// kernel (each byte read once and written once), a read-only kernel (what
// decoding does to the weights) and cudaMemcpy device to device; 16-byte
// accesses, grid-stride loops, the best of 20 runs of each, timed with
// events.  GB/s = 1e9 bytes per second, counting bytes moved.
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

#define CK(call)							\
	do {								\
		cudaError_t e_ = (call);				\
		if (e_ != cudaSuccess) {				\
			fprintf(stderr, "membw: %s: %s\n", #call,	\
			    cudaGetErrorString(e_));			\
			return 1;					\
		}							\
	} while (0)

__global__ void
copy_kernel(const float4 *__restrict__ a, float4 *__restrict__ b, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += stride)
		b[i] = a[i];
}

// Sums everything; stores only when the sum is impossible for the zeroed
// input, so that the loads cannot be dropped and nothing is written.
__global__ void
read_kernel(const float4 *__restrict__ a, size_t n, float *out)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	float s = 0.0f;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += stride) {
		float4 v = a[i];

		s += v.x + v.y + v.z + v.w;
	}
	if (s == 1234.5f)
		*out = s;
}

int
main(int argc, char **argv)
{
	double gib = argc > 1 ? atof(argv[1]) : 4.0, best[3] = { 0, 0, 0 };
	size_t bytes = (size_t)(gib * 1073741824.0) / 4096 * 4096;
	size_t n = bytes / sizeof(float4);
	float4 *a = NULL, *b = NULL;
	float *out = NULL, ms;
	cudaEvent_t e0, e1;
	int sms = 0, blocks, rep, k;

	CK(cudaSetDevice(0));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	blocks = sms * 8;
	CK(cudaMalloc(&a, bytes));
	CK(cudaMalloc(&b, bytes));
	CK(cudaMalloc(&out, sizeof(float)));
	CK(cudaMemset(a, 0, bytes));
	CK(cudaMemset(b, 0, bytes));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (rep = 0; rep < 21; rep++)
		for (k = 0; k < 3; k++) {
			CK(cudaEventRecord(e0));
			if (k == 0)
				copy_kernel<<<blocks, 512>>>(a, b, n);
			else if (k == 1)
				read_kernel<<<blocks, 512>>>(a, n, out);
			else
				CK(cudaMemcpyAsync(b, a, bytes,
				    cudaMemcpyDeviceToDevice));
			CK(cudaGetLastError());
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (rep > 0) {	/* the first round warms up */
				double moved = (k == 1 ? 1.0 : 2.0) *
				    (double)bytes;
				double gbs = moved / (ms * 1e-3) / 1e9;

				if (gbs > best[k])
					best[k] = gbs;
			}
		}
	printf("membw: %d SMs, %.2f GiB buffers: copy %.0f GB/s (read + write), "
	    "read %.0f GB/s, cudaMemcpy d2d %.0f GB/s (read + write)\n", sms,
	    (double)bytes / 1073741824.0, best[0], best[1], best[2]);
	printf("MEMBW copy=%.1f read=%.1f d2d=%.1f\n", best[0], best[1],
	    best[2]);
	cudaFree(out);
	cudaFree(b);
	cudaFree(a);
	return 0;
}
EOF
}

case ${1:-run} in
prepare)
	prepare
	;;
run)
	mkdir -p "$OUT" || exit 1
	main 2>&1 | tee "$OUT/run.log"
	exit "${PIPESTATUS[0]}"
	;;
*)
	echo "usage: tests/gpu/run.sh [prepare]" >&2
	exit 2
	;;
esac
