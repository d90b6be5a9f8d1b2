#!/bin/sh
# Long differential-fuzzing run: tests/fuzz/long_run.sh SECONDS [SEED] [BUILD_DIR]
#
# Runs the fuzz binary of BUILD_DIR (default: build) for SECONDS from SEED
# (default: the time of day, printed, so that a run can be repeated) and
# prints the seed of each failing program with its failures and a shrunk
# program; `fuzz --show SEED` replays one.  Exit status 1 if a failure is
# of no known-defect class (tests/fuzz/known.c).
set -eu
seconds=${1:?usage: long_run.sh SECONDS [SEED] [BUILD_DIR]}
seed=${2:-$(date +%s)}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${3:-$root/build}
exe=$build/tests/fuzz
if [ ! -x "$exe" ]; then
    echo "long_run.sh: $exe not built (meson setup $build -Dtests=enabled && ninja -C $build tests/fuzz)" >&2
    exit 2
fi
echo "long_run.sh: $seconds s from seed $seed with $exe"
exec "$exe" --seconds "$seconds" --seed "$seed"
