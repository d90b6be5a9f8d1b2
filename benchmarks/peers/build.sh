#!/bin/bash
# Builds the three harnesses into PEERS_DIR/build (see README.md).  Our own
# code; the peers are fetched by fetch_peers.sh into PEERS_DIR, not vendored.
#
#   PEERS_DIR    the peers' clones and the build output, outside the
#                repository (default <repo>/../dualrev-peers)
#   DUALREV_LIB  directory holding libdualrev.so   (default <repo>/build)
#   DUALREV_INC  directory holding dualrev.hpp     (default <repo>/include)
#   CXX          compiler                          (default g++)
#
# A harness is rebuilt when it is missing or older than its sources, its
# tool's headers or library, this script, or when DUALREV_LIB / DUALREV_INC
# changed since the last build.  FORCE=1 rebuilds everything.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/peers_env.sh"
CXX="${CXX:-g++}"
HERE="$PEERS_HERE"
B="$PEERS_DIR/build"
SRC="$HERE/src"
CODI="$PEERS_DIR/CoDiPack"
ADEPT="$PEERS_DIR/Adept-2"

# Flags: -O3 -DNDEBUG, no -march (portable), same for every tool.
BASE=(-std=c++17 -O3 -DNDEBUG)
# CoDiPack: header only; forced inlining as its docs recommend
# (CODI_UseForcedInlines was renamed CODI_ForcedInlines in CoDiPack 2.0,
# documentation/user/Migration.md).  Everything else at CoDiPack's defaults.
CODI_FLAGS=(-I"$CODI/include" -DCODI_ForcedInlines=1)
# Adept: ADEPT_STACK_THREAD_UNSAFE is the docs' "Tips for the best
# performance" for a single thread (library and user code alike); no
# ADEPT_FAST_EXPONENTIAL (it changes exp's results), no BLAS/LAPACK
# (unused: scalar adouble only).
ADEPT_FLAGS=(-I"$ADEPT/include" -DADEPT_STACK_THREAD_UNSAFE)
DUALREV_FLAGS=(-I"$DUALREV_INC")
DUALREV_LINK=(-L"$DUALREV_LIB" -Wl,-rpath,"$DUALREV_LIB" -ldualrev -lm -ldl)

for d in "$CODI/include" "$ADEPT/adept"; do
    [ -d "$d" ] || {
        echo "missing $d: fetch the peers first (benchmarks/peers/fetch_peers.sh," \
            "same PEERS_DIR)" >&2
        exit 1
    }
done
[ -f "$DUALREV_INC/dualrev.hpp" ] || { echo "no dualrev.hpp in DUALREV_INC=$DUALREV_INC" >&2; exit 1; }
[ -e "$DUALREV_LIB/libdualrev.so" ] || {
    echo "no libdualrev.so in DUALREV_LIB=$DUALREV_LIB: DUALREV_LIB must be a build" \
        "directory that contains libdualrev.so (meson setup build && ninja -C build)" >&2
    exit 1
}
mkdir -p "$B"

COMMON=("$SRC/objectives.hpp" "$SRC/common.hpp" "$SRC/harness.hpp" "$HERE/build.sh")

# stale TARGET DEP... : true if TARGET is missing or older than any DEP
stale() {
    local t="$1"; shift
    [ -n "${FORCE:-}" ] && return 0
    [ -e "$t" ] || return 0
    local d
    for d in "$@"; do
        if [ -d "$d" ]; then
            [ -n "$(find -L "$d" -type f -newer "$t" -print -quit)" ] && return 0
        elif [ "$d" -nt "$t" ]; then
            return 0
        fi
    done
    return 1
}

quote() { echo "$*"; }

# --- Adept's library, compiled from its sources (adept/*.cpp) ---
if stale "$B/libadept.a" "$ADEPT/adept" "$ADEPT/include" "$HERE/build.sh"; then
    echo "building libadept.a"
    rm -rf "$B/adept-obj"; mkdir -p "$B/adept-obj"
    for f in "$ADEPT"/adept/*.cpp; do
        "$CXX" "${BASE[@]}" "${ADEPT_FLAGS[@]}" \
            -DCXX="\"$CXX\"" -DCXXFLAGS="\"$(quote "${BASE[@]}") -DADEPT_STACK_THREAD_UNSAFE\"" \
            -c "$f" -o "$B/adept-obj/$(basename "${f%.cpp}").o"
    done
    rm -f "$B/libadept.a"
    ar rcs "$B/libadept.a" "$B"/adept-obj/*.o
fi

# --- the harnesses ---
if stale "$B/bench_codipack" "$SRC/bench_codipack.cpp" "${COMMON[@]}" "$CODI/include"; then
    echo "building bench_codipack"
    F=("${BASE[@]}" "${CODI_FLAGS[@]}")
    "$CXX" "${F[@]}" -DPEERS_FLAGS="\"$(quote "${F[@]}")\"" \
        "$SRC/bench_codipack.cpp" -o "$B/bench_codipack"
fi

if stale "$B/bench_adept" "$SRC/bench_adept.cpp" "${COMMON[@]}" "$B/libadept.a"; then
    echo "building bench_adept"
    F=("${BASE[@]}" "${ADEPT_FLAGS[@]}")
    "$CXX" "${F[@]}" -DPEERS_FLAGS="\"$(quote "${F[@]}")\"" \
        "$SRC/bench_adept.cpp" "$B/libadept.a" -o "$B/bench_adept"
fi

PATHS="$DUALREV_LIB|$DUALREV_INC"
if [ "$(cat "$B/dualrev.paths" 2>/dev/null)" != "$PATHS" ] ||
    stale "$B/bench_dualrev" "$SRC/bench_dualrev.cpp" "${COMMON[@]}" "$DUALREV_INC" \
        "$DUALREV_LIB/libdualrev.so"; then
    echo "building bench_dualrev against DUALREV_INC=$DUALREV_INC DUALREV_LIB=$DUALREV_LIB"
    F=("${BASE[@]}" "${DUALREV_FLAGS[@]}")
    "$CXX" "${F[@]}" -DPEERS_FLAGS="\"$(quote "${F[@]}" "${DUALREV_LINK[@]}")\"" \
        "$SRC/bench_dualrev.cpp" "${DUALREV_LINK[@]}" -o "$B/bench_dualrev"
    echo "$PATHS" > "$B/dualrev.paths"
fi
