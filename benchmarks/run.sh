#!/bin/sh
# Builds dualrev-bench, ba-bench, gmm-bench and lstm-bench, runs them, keeps their tables and TSV files in
# benchmarks/results/, and plots them when gnuplot is installed.
#   benchmarks/run.sh [dualrev-bench options, e.g. --max-n 100000]
# BUILD_DIR: the meson build directory (default: build; set up if missing).
# PLOT_TERM: svg (default) or png.
set -eu
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
root=$(dirname -- "$here")
build=${BUILD_DIR:-$root/build}
out=$here/results

if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root"
fi
ninja -C "$build" benchmarks/dualrev-bench benchmarks/ba-bench benchmarks/gmm-bench \
    benchmarks/lstm-bench
mkdir -p "$out"

# tee shows the table as it grows; the status file keeps the program's exit
# status, which a plain pipe would lose.
{
    st=0
    "$build/benchmarks/dualrev-bench" --out "$out" "$@" || st=$?
    echo "$st" >"$out/status"
} |
    tee "$out/table.txt"
status=$(cat "$out/status")
rm -f "$out/status"

# Then ADBench bundle adjustment, on its own data (ba_bench.c); its table
# goes to results/ba.txt.
echo
ba_status=0
"$build/benchmarks/ba-bench" >"$out/ba.txt" || ba_status=$?
cat "$out/ba.txt"
[ "$ba_status" -eq 0 ] || status=$ba_status

# Then ADBench GMM (gmm_bench.c; about 4 minutes, most of it ADOL-C on
# d64_K100), shown as it goes; its table goes to results/gmm.txt.
echo
{
    st=0
    "$build/benchmarks/gmm-bench" || st=$?
    echo "$st" >"$out/status"
} |
    tee "$out/gmm.txt"
gmm_status=$(cat "$out/status")
rm -f "$out/status"
[ "$gmm_status" -eq 0 ] || status=$gmm_status

# Then ADBench LSTM (lstm_bench.c); its table goes to results/lstm.txt.
echo
lstm_status=0
"$build/benchmarks/lstm-bench" >"$out/lstm.txt" || lstm_status=$?
cat "$out/lstm.txt"
[ "$lstm_status" -eq 0 ] || status=$lstm_status

if command -v gnuplot >/dev/null 2>&1; then
    gnuplot -e "dir='$out'; term='${PLOT_TERM:-svg}'" "$here/plot.gp"
    echo "plot: $out/bench.${PLOT_TERM:-svg}"
else
    echo "gnuplot not found: no plot; the TSV files are in $out"
fi
exit "$status"
