#!/bin/sh
# Runs each test program given as an argument; exit 77 means skipped.
# Prints one line per program and a closing "N passed, N failed, N skipped".
pass=0 fail=0 skip=0 failed=
: "${BUILD:=build}"
mkdir -p "$BUILD/tmp" "$BUILD/test-logs"
TMPDIR=$(cd "$BUILD/tmp" && pwd)
export TMPDIR
for t in "$@"; do
	name=$(basename "$t")
	log="$BUILD/test-logs/$name.log"
	"$t" >"$log" 2>&1
	rc=$?
	case $rc in
	0) pass=$((pass + 1)); echo "PASS: $name" ;;
	77) skip=$((skip + 1)); echo "SKIP: $name ($(tail -n 1 "$log"))" ;;
	*) fail=$((fail + 1)); failed="$failed $name"; echo "FAIL: $name (exit $rc)"
	   sed 's/^/    /' "$log" | tail -n 40 ;;
	esac
done
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
