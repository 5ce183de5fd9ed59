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
#  2. Symbols.  No object of libcpclient (BUILD/libclient/*.pic.o) refers
#     to or defines a symbol that libcpengine.a (engine/ and kernels/)
#     defines; cpq.o refers only to the engine symbols in CPQ_ALLOW.
#
# Usage: tools/check_layers.sh BUILD [INCDIRS...]; run by `make lint`,
# after the objects are built.  Prints each violation; exits 1 if any.

# cpq formats --chat prompts with the engine's chat templates
# (engine/chat.c): the one seam between the shell tool and the engine,
# until the templates move into the daemon with the chat API and this
# list empties.  Shell patterns; every other engine symbol fails.
CPQ_ALLOW='chat_*'
CPQ_ALLOW_HEADERS='chat.h'

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
		if [ "$f" = libclient/cpq.c ]; then
			case " $CPQ_ALLOW_HEADERS " in *" $name "*) continue ;; esac
		fi
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
cpq=$build/libclient/cpq.o
set -- "$build"/libclient/*.pic.o
set -f		# CPQ_ALLOW's patterns are matched, never expanded
for f in "$eng" "$cpq" "$1"; do
	if [ ! -f "$f" ]; then
		echo "check_layers.sh: $f missing: build first" >&2
		exit 2
	fi
done
syms -d "$eng" >"$tmp/eng"
syms -d "$@" >"$tmp/lib"
syms -u "$@" | comm -23 - "$tmp/lib" >"$tmp/lib.u"
{
	comm -12 "$tmp/lib.u" "$tmp/eng" |
	    sed 's/^/libcpclient refers to the engine symbol /'
	comm -12 "$tmp/lib" "$tmp/eng" |
	    sed 's/^/libcpclient defines the engine symbol /'
	syms -u "$cpq" | comm -23 - "$tmp/lib" | comm -12 - "$tmp/eng" |
	    while read -r s; do
		for p in $CPQ_ALLOW; do
			# shellcheck disable=SC2254	# p is a pattern
			case $s in $p) continue 2 ;; esac
		done
		echo "cpq.o refers to the engine symbol $s (not in CPQ_ALLOW)"
	done
} >>"$tmp/out"
if [ -s "$tmp/out" ]; then
	cat "$tmp/out"
	exit 1
fi
