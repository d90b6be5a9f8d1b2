#!/usr/bin/env bash
# dualrev beside GradBench's CoDiPack tool on GradBench's ht "jacobian" and
# kmeans "dir" (README.md here).  Builds everything outside the repository
# (GB_WORK), makes the inputs, runs each harness pinned to one CPU, one at a
# time, and prints one table.  Our own script: GradBench's and CoDiPack's
# sources are read from GRADBENCH_DIR and CODIPACK_DIR, never copied here.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"   # benchmarks/gradbench
REPO="$(cd "$HERE/../.." && pwd)"

GRADBENCH_DIR="$(realpath -m -- "${GRADBENCH_DIR:-/tmp/gradbench}")"
CODIPACK_DIR="$(realpath -m -- "${CODIPACK_DIR:-/tmp/codipack-2.3.1}")"
DUALREV_INC="$(realpath -m -- "${DUALREV_INC:-$REPO/include}")"
DUALREV_LIB="$(realpath -m -- "${DUALREV_LIB:-$REPO/build}")"
GB_WORK="$(realpath -m -- "${GB_WORK:-/tmp/dualrev-gradbench}")"
CPU="${CPU:-1}"
export REPS="${REPS:-7}"          # timed batches per function (alternating)
export MIN_MS="${MIN_MS:-200}"    # CPU ms per batch, at least (one call if longer)
HT_INPUTS="${HT_INPUTS:-hand1_t26_c100 hand11_t26_c51200}"
KMEANS_SIZES="${KMEANS_SIZES:-10,1000,8 100,10000,16}"
NATIVE="${NATIVE:-yes}"           # GradBench's default for a local build: -march=native
NINJA="${NINJA:-yes}"             # run ninja in DUALREV_LIB first, when it is a meson build
PYTHON="${PYTHON:-/usr/bin/python3}"  # Debian's, where python3-numpy installs
CXX="${CXX:-g++}"
CC="${CC:-gcc}"

die() { echo "run.sh: $*" >&2; exit 1; }

case "$GB_WORK/" in
    "$REPO"/*) die "GB_WORK=$GB_WORK is inside the repository; choose a directory outside it" ;;
esac
[ -f "$GRADBENCH_DIR/tools/codipack/ht.cpp" ] ||
    die "no GradBench at GRADBENCH_DIR=$GRADBENCH_DIR (git clone https://github.com/gradbench/gradbench)"
[ -f "$CODIPACK_DIR/include/codi.hpp" ] ||
    die "no CoDiPack at CODIPACK_DIR=$CODIPACK_DIR (its include/codi.hpp)"
[ -f "$DUALREV_INC/dualrev.h" ] || die "no dualrev.h in DUALREV_INC=$DUALREV_INC"
[ -f /usr/include/nlohmann/json.hpp ] ||
    die "nlohmann/json.hpp missing: apt-get install nlohmann-json3-dev"
"$PYTHON" -c 'import numpy, dataclasses_json' 2>/dev/null ||
    die "$PYTHON lacks numpy or dataclasses_json: apt-get install python3-numpy python3-dataclasses-json"

if [ "$NINJA" = yes ] && [ -f "$DUALREV_LIB/build.ninja" ]; then
    ninja -C "$DUALREV_LIB" >/dev/null || die "ninja -C $DUALREV_LIB failed"
fi
[ -f "$DUALREV_LIB/libdualrev.so" ] ||
    die "no libdualrev.so in DUALREV_LIB=$DUALREV_LIB (meson setup DIR && ninja -C DIR)"

# ---- build: always, so that the run measures the current dualrev ----
# GradBench's flags for its C++ tools (cpp/common.mk with MULTITHREADED=no,
# tools/codipack/Makefile); our C ports get the same optimisation flags.
arch=()
[ "$NATIVE" = yes ] && arch=(-march=native)
CXXFLAGS=(-std=c++17 -O3 -Wall "${arch[@]}" -Wno-unknown-pragmas -DCODI_ForcedInlines=1)
CFLAGS=(-std=c11 -O3 "${arch[@]}" -Wall -Wextra -Wpedantic)
# GradBench's sources and CoDiPack as system headers: our code is held to
# -Wextra -Wpedantic, theirs only to their own -Wall.
INCS=(-isystem "$GRADBENCH_DIR/cpp" -isystem /usr/include/nlohmann -isystem "$CODIPACK_DIR/include"
      -I"$HERE")
mkdir -p "$GB_WORK/build" "$GB_WORK/inputs"
B="$GB_WORK/build"
for f in ht kmeans common; do
    "$CC" "${CFLAGS[@]}" -I"$DUALREV_INC" -I"$HERE" -c "$HERE/$f.c" -o "$B/$f.o"
done
build_driver() {  # build_driver NAME PORT
    "$CXX" "${CXXFLAGS[@]}" -Wextra -Wpedantic "${INCS[@]}" -isystem "$GRADBENCH_DIR/tools/codipack" \
        -c "$HERE/bench_$1.cpp" -o "$B/bench_$1.o"
    "$CXX" -o "$B/bench_$1" "$B/bench_$1.o" "$B/$2.o" "$B/common.o" \
        -L"$DUALREV_LIB" -Wl,-rpath,"$DUALREV_LIB" -ldualrev -lm
}
build_driver ht ht &
ht_pid=$!
build_driver kmeans kmeans &
kmeans_pid=$!
wait "$ht_pid" || die "building bench_ht failed"
wait "$kmeans_pid" || die "building bench_kmeans failed"

# ---- inputs ----
kmeans_args=()
for s in $KMEANS_SIZES; do kmeans_args+=("$s"); done
# shellcheck disable=SC2086
"$PYTHON" "$HERE/make_inputs.py" --gradbench "$GRADBENCH_DIR" --out "$GB_WORK/inputs" \
    --ht $HT_INPUTS --kmeans "${kmeans_args[@]}" >/dev/null

# ---- run ----
commit() { git -C "$1" rev-parse HEAD 2>/dev/null || echo unknown; }
describe() { git -C "$1" describe --tags --always 2>/dev/null || echo unknown; }
pinned="$(sed -n 's/.*CoDiPack-\([0-9.]*\)\/include.*/v\1/p' "$GRADBENCH_DIR/tools/codipack/Dockerfile" | head -1)"
LOG="$GB_WORK/last_run.txt"
{
    echo "# dualrev $(commit "$REPO") ($(git -C "$REPO" status --porcelain -- lib include | wc -l) files changed in lib/ include/), library $DUALREV_LIB"
    echo "# GradBench $(commit "$GRADBENCH_DIR")"
    echo "# CoDiPack $(commit "$CODIPACK_DIR") ($(describe "$CODIPACK_DIR"); GradBench's Dockerfile pins ${pinned:-?})"
    echo "# $("$CXX" --version | head -1); C++: ${CXXFLAGS[*]}; C: ${CFLAGS[*]}"
    echo "# CPU time, median of $REPS alternating batches of >= $MIN_MS ms each, pinned: taskset -c $CPU"
    for h in $HT_INPUTS; do
        taskset -c "$CPU" "$B/bench_ht" "$GB_WORK/inputs/ht_$h.json" "$h" || echo "FAILED bench_ht $h"
    done
    for s in $KMEANS_SIZES; do
        IFS=, read -r k n d <<<"$s"
        taskset -c "$CPU" "$B/bench_kmeans" "$GB_WORK/inputs/kmeans_k${k}_n${n}_d${d}.json" \
            "k=$k,n=$n,d=$d" || echo "FAILED bench_kmeans $s"
    done
} >"$LOG" 2>&1

grep '^#' "$LOG" | grep -v '^# [a-zA-Z].* median ' || true
echo
awk -F'\t' '
    BEGIN { printf "%-16s %-19s %-30s %11s  %-42s %11s %7s  %s\n", "eval", "input", "dualrev",
            "dualrev_ms", "CoDiPack", "codipack_ms", "ratio", "check" }
    $1 == "ROW" { printf "%-16s %-19s %-30s %11.3f  %-42s %11.3f %7.2f  %s\n", $2, $3, $4, $5, $6,
                  $7, ($7 > 0 ? $5 / $7 : 0), $8 }' "$LOG"
echo
echo "ratio = dualrev_ms / codipack_ms.  Raw output, with every function's spread: $LOG"
if grep -q 'FAIL' "$LOG"; then
    grep 'FAIL' "$LOG" >&2
    exit 1
fi
