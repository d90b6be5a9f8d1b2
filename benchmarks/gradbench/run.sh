#!/usr/bin/env bash
# dualrev beside GradBench's tools (README.md here): its CoDiPack tool on
# ht "jacobian" and kmeans "dir", its finite-differences tool on saddle and
# particle (nested derivatives).  Builds everything outside the repository
# (GB_WORK), makes the inputs, runs each harness pinned to one CPU, one at a
# time, validates the saddle and particle outputs with GradBench's own
# validator, and prints one table.  Our own script: GradBench's and
# CoDiPack's sources are read from GRADBENCH_DIR and CODIPACK_DIR, never
# copied here.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"   # benchmarks/gradbench
REPO="$(cd "$HERE/../.." && pwd)"

GRADBENCH_DIR="$(realpath -m -- "${GRADBENCH_DIR:-/tmp/gradbench}")"
CODIPACK_DIR="$(realpath -m -- "${CODIPACK_DIR:-/tmp/codipack-2.3.1}")"
DUALREV_INC="$(realpath -m -- "${DUALREV_INC:-$REPO/include}")"
DUALREV_LIB="$(realpath -m -- "${DUALREV_LIB:-$REPO/build}")"
GB_WORK="$(realpath -m -- "${GB_WORK:-/tmp/dualrev-gradbench}")"
EVALS="${EVALS:-ht kmeans saddle particle}"
CPU="${CPU:-1}"
export REPS="${REPS:-7}"          # timed batches per function (alternating)
export MIN_MS="${MIN_MS:-200}"    # CPU ms per batch, at least (one call if longer)
HT_INPUTS="${HT_INPUTS:-hand1_t26_c100 hand11_t26_c51200}"
KMEANS_SIZES="${KMEANS_SIZES:-10,1000,8 100,10000,16}"
NATIVE="${NATIVE:-yes}"           # GradBench's default for a local build: -march=native
NINJA="${NINJA:-yes}"             # run ninja in DUALREV_LIB first, when it is a meson build
PYTHON="${PYTHON:-/usr/bin/python3}"  # Debian's, where python3-numpy installs
wants() { case " $EVALS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
codipack=no
{ wants ht || wants kmeans; } && codipack=yes
CXX="${CXX:-g++}"
CC="${CC:-gcc}"

die() { echo "run.sh: $*" >&2; exit 1; }

case "$GB_WORK/" in
    "$REPO"/*) die "GB_WORK=$GB_WORK is inside the repository; choose a directory outside it" ;;
esac
for e in $EVALS; do
    case "$e" in ht | kmeans | saddle | particle) ;; *) die "unknown eval '$e' in EVALS" ;; esac
done
[ -f "$GRADBENCH_DIR/tools/finite/saddle.cpp" ] ||
    die "no GradBench at GRADBENCH_DIR=$GRADBENCH_DIR (git clone https://github.com/gradbench/gradbench)"
[ "$codipack" = no ] || [ -f "$CODIPACK_DIR/include/codi.hpp" ] ||
    die "no CoDiPack at CODIPACK_DIR=$CODIPACK_DIR (its include/codi.hpp)"
[ -f "$DUALREV_INC/dualrev.h" ] || die "no dualrev.h in DUALREV_INC=$DUALREV_INC"
[ -f /usr/include/nlohmann/json.hpp ] ||
    die "nlohmann/json.hpp missing: apt-get install nlohmann-json3-dev"
py_modules=numpy  # kmeans' inputs, GradBench's validator; ht's reader needs dataclasses_json
wants ht && py_modules="numpy, dataclasses_json"
"$PYTHON" -c "import $py_modules" 2>/dev/null ||
    die "$PYTHON lacks $py_modules (apt-get install python3-numpy python3-dataclasses-json)"

if [ "$NINJA" = yes ] && [ -f "$DUALREV_LIB/build.ninja" ]; then
    ninja -C "$DUALREV_LIB" >/dev/null || die "ninja -C $DUALREV_LIB failed"
fi
[ -f "$DUALREV_LIB/libdualrev.so" ] ||
    die "no libdualrev.so in DUALREV_LIB=$DUALREV_LIB (meson setup DIR && ninja -C DIR)"

# ---- build: always, so that the run measures the current dualrev ----
# GradBench's flags for its C++ tools (cpp/common.mk with MULTITHREADED=no,
# what `make -n -C tools/finite bin/saddle MULTITHREADED=no` shows; the
# CoDiPack tool's Makefile adds -DCODI_ForcedInlines=1); our C ports get
# the same optimisation flags.
arch=()
[ "$NATIVE" = yes ] && arch=(-march=native)
CXXFLAGS=(-std=c++17 -O3 -Wall "${arch[@]}" -Wno-unknown-pragmas)
CFLAGS=(-std=c11 -O3 "${arch[@]}" -Wall -Wextra -Wpedantic)
# GradBench's sources and CoDiPack as system headers: our code is held to
# -Wextra -Wpedantic, theirs only to their own -Wall.
INCS=(-isystem "$GRADBENCH_DIR/cpp" -isystem /usr/include/nlohmann -I"$HERE")
mkdir -p "$GB_WORK/build" "$GB_WORK/inputs"
B="$GB_WORK/build"
"$CC" "${CFLAGS[@]}" -I"$DUALREV_INC" -I"$HERE" -c "$HERE/common.c" -o "$B/common.o"
build_driver() {  # build_driver EVAL TOOL [flags]: bench_EVAL from EVAL.c and TOOL's EVAL.cpp
    local eval="$1" tool="$2"
    shift 2
    "$CC" "${CFLAGS[@]}" -I"$DUALREV_INC" -I"$HERE" -c "$HERE/$eval.c" -o "$B/$eval.o" &&
    "$CXX" "${CXXFLAGS[@]}" "$@" -Wextra -Wpedantic "${INCS[@]}" \
        -isystem "$GRADBENCH_DIR/tools/$tool" -c "$HERE/bench_$eval.cpp" -o "$B/bench_$eval.o" &&
    "$CXX" -o "$B/bench_$eval" "$B/bench_$eval.o" "$B/$eval.o" "$B/common.o" \
        -L"$DUALREV_LIB" -Wl,-rpath,"$DUALREV_LIB" -ldualrev -lm
}
pids=()
for e in $EVALS; do
    case "$e" in
    ht | kmeans)
        build_driver "$e" codipack -DCODI_ForcedInlines=1 -isystem "$CODIPACK_DIR/include" & ;;
    *) build_driver "$e" finite & ;;
    esac
    pids+=("$!")
done
for p in "${pids[@]}"; do wait "$p" || die "building a harness failed"; done

# ---- inputs ----
kmeans_args=()
for s in $KMEANS_SIZES; do kmeans_args+=("$s"); done
wants ht || HT_INPUTS=""
wants kmeans || kmeans_args=()
nested=()
for e in saddle particle; do wants "$e" && nested+=("--$e"); done
# shellcheck disable=SC2086
"$PYTHON" "$HERE/make_inputs.py" --gradbench "$GRADBENCH_DIR" --out "$GB_WORK/inputs" \
    --ht $HT_INPUTS --kmeans "${kmeans_args[@]}" "${nested[@]}" >/dev/null

# ---- run ----
commit() { git -C "$1" rev-parse HEAD 2>/dev/null || echo unknown; }
describe() { git -C "$1" describe --tags --always 2>/dev/null || echo unknown; }
pinned="$(sed -n 's/.*CoDiPack-\([0-9.]*\)\/include.*/v\1/p' "$GRADBENCH_DIR/tools/codipack/Dockerfile" | head -1)"
LOG="$GB_WORK/last_run.txt"
{
    echo "# dualrev $(commit "$REPO") ($(git -C "$REPO" status --porcelain -- lib include | wc -l) files changed in lib/ include/), library $DUALREV_LIB"
    echo "# GradBench $(commit "$GRADBENCH_DIR")"
    [ "$codipack" = no ] ||
        echo "# CoDiPack $(commit "$CODIPACK_DIR") ($(describe "$CODIPACK_DIR"); GradBench's Dockerfile pins ${pinned:-?})"
    codi_flags=""
    [ "$codipack" = no ] || codi_flags=" (CoDiPack's: -DCODI_ForcedInlines=1)"
    echo "# $("$CXX" --version | head -1); C++: ${CXXFLAGS[*]}$codi_flags; C: ${CFLAGS[*]}"
    echo "# CPU time, median of $REPS alternating batches of >= $MIN_MS ms each, pinned: taskset -c $CPU"
    for e in saddle particle; do
        if wants "$e"; then
            taskset -c "$CPU" "$B/bench_$e" "$GB_WORK/inputs/$e.json" default || echo "FAILED bench_$e"
        fi
    done
    for h in $HT_INPUTS; do
        taskset -c "$CPU" "$B/bench_ht" "$GB_WORK/inputs/ht_$h.json" "$h" || echo "FAILED bench_ht $h"
    done
    for s in "${kmeans_args[@]}"; do
        IFS=, read -r k n d <<<"$s"
        taskset -c "$CPU" "$B/bench_kmeans" "$GB_WORK/inputs/kmeans_k${k}_n${n}_d${d}.json" \
            "k=$k,n=$n,d=$d" || echo "FAILED bench_kmeans $s"
    done
} >"$LOG" 2>&1
# GradBench's own expected outputs and comparison on the outputs the
# saddle and particle harnesses printed (validate.py).
if wants saddle || wants particle; then
    "$PYTHON" "$HERE/validate.py" --gradbench "$GRADBENCH_DIR" "$LOG" >"$LOG.validate" 2>&1 ||
        echo "FAILED validate.py" >>"$LOG.validate"
    cat "$LOG.validate" >>"$LOG"
    rm -f "$LOG.validate"
fi

grep '^#' "$LOG" | grep -v ' median .* ms  min ' || true  # all but the spread lines
echo
awk -F'\t' '
    BEGIN { printf "%-18s %-19s %-30s %11s  %-45s %11s %7s  %s\n", "eval", "input", "dualrev",
            "dualrev_ms", "GradBench tool", "tool_ms", "ratio", "check" }
    $1 == "ROW" { printf "%-18s %-19s %-30s %11.3f  %-45s %11.3f %7.3f  %s\n", $2, $3, $4, $5, $6,
                  $7, ($7 > 0 ? $5 / $7 : 0), $8 }' "$LOG"
echo
echo "ratio = dualrev_ms / tool_ms.  Raw output, with every function's spread: $LOG"
if grep -q 'FAIL' "$LOG"; then
    grep 'FAIL' "$LOG" >&2
    exit 1
fi
