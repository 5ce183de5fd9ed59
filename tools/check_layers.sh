#!/bin/sh
# check_layers.sh - fails when a layer of the tree reaches above itself.
#
# The layers: kernels/ (leaf math) < engine/ < daemon/; libclient/ (the
# client library and cpq) stands apart and knows only the wire format.
#
#  1. Includes.  A file under kernels/ includes only kernels/ headers; one
#     under engine/ only engine/ and kernels/ headers; one under libclient/
#     only libclient/ headers.  The Makefile puts every folder on the quote
#     search path (INCDIRS), so "model.h" reaches engine/model.h from
#     anywhere: each quoted include is resolved as the compiler does (the
#     including file's folder, then INCDIRS in order) and the folder it
#     lands in is checked.
#  2. Symbols.  No object built from libclient/ (libcpclient's
#     BUILD/libclient/*.pic.o, cpq's BUILD/libclient/cpq*.o, the
#     front-ends' BUILD/libclient/statfmt.o and cpd-http's
#     BUILD/libclient/http/*.o) refers to or defines a symbol that
#     libcpengine.a (engine/ and kernels/) or libcpdaemon.a (daemon/)
#     defines.  cpq and cpd-http render no chat template: the daemon does.
#
# Usage: tools/check_layers.sh BUILD [INCDIRS...]; run by `make lint`,
# after the objects are built.  Prints each violation; exits 1 if any.

set -u
LC_ALL=C
export LC_ALL
build=${1:?usage: check_layers.sh BUILD [INCDIRS...]}
shift
[ $# -gt 0 ] || set -- engine kernels/cpu kernels/cuda libclient daemon
incdirs=$*

# The top folder of path $1, relative to the tree.
layer() {
	case $1 in
	kernels/*) echo kernels ;;
	engine/*) echo engine ;;
	libclient/*) echo libclient ;;
	daemon/*) echo daemon ;;
	*) echo other ;;
	esac
}

# The file "$2" included from $1 resolves to, relative to the tree, or
# nothing (a system or generated header).
resolve() {
	for d in "$(dirname "$1")" $incdirs; do
		if [ -f "$d/$2" ]; then
			realpath -m --relative-to=. "$d/$2"
			return
		fi
	done
}

# Layers the files of layer $1 may include.
allowed() {
	case $1 in
	kernels) echo kernels ;;
	engine) echo engine kernels ;;
	libclient) echo libclient ;;
	esac
}

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/out"

for f in $(find kernels engine libclient -type f \( -name '*.c' -o \
    -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort); do
	from=$(layer "$f")
	grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
	    sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/' |
	    while read -r line name; do
		to=$(resolve "$f" "$name")
		[ -n "$to" ] || continue
		case " $(allowed "$from") " in *" $(layer "$to") "*) continue ;; esac
		echo "$f:$line: includes $to: $from/ may not include $(layer "$to")/"
	done >>"$tmp/out"
done

# Global symbols defined (-d) or referred to (-u) by the objects $2...
syms() {
	flag=$1
	shift
	if [ "$flag" = -d ]; then
		nm -g --defined-only "$@"
	else
		nm -u "$@"
	fi 2>/dev/null | awk 'NF >= 2 && $NF !~ /:$/ { print $NF }' | sort -u
}

eng=$build/lib/libcpengine.a
if [ ! -f "$eng" ]; then
	echo "check_layers.sh: $eng missing: build first" >&2
	exit 2
fi
dmn=$build/lib/libcpdaemon.a
if [ ! -f "$dmn" ]; then
	echo "check_layers.sh: $dmn missing: build first" >&2
	exit 2
fi
# libcpclient's objects, then cpq's and the other front-ends' (every other
# object of libclient/ and its subfolders).
set -- "$build"/libclient/*.pic.o
nlib=$#
for f in "$build"/libclient/*.o "$build"/libclient/*/*.o; do
	[ -f "$f" ] || continue
	case $f in *.pic.o) ;; *) set -- "$@" "$f" ;; esac
done
if [ "$nlib" -eq 0 ] || [ ! -f "$1" ] || [ $# -eq "$nlib" ]; then
	echo "check_layers.sh: objects of $build/libclient missing: build" \
	    "first" >&2
	exit 2
fi
syms -d "$eng" >"$tmp/eng"
syms -d "$dmn" >"$tmp/dmn"
for f in "$@"; do
	obj=${f#"$build"/}
	for lib in eng dmn; do
		what=engine
		[ $lib = dmn ] && what=daemon
		syms -u "$f" | comm -12 - "$tmp/$lib" |
		    sed "s|^|$obj refers to the $what symbol |"
		syms -d "$f" | comm -12 - "$tmp/$lib" |
		    sed "s|^|$obj defines the $what symbol |"
	done
done >>"$tmp/out"
if [ -s "$tmp/out" ]; then
	cat "$tmp/out"
	exit 1
fi
