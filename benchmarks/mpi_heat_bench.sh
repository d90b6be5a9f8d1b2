#!/bin/sh
# mpi_heat_bench.sh EXE [ROUNDS] [ARGS...]: mpi-heat-bench on 1 rank, then
# on 2 ranks, alternately, ROUNDS times (default 3), one thread per rank
# (OMP_NUM_THREADS=1; the benchmark starts no threads of its own), so that
# load from the rest of the machine falls on both alike.  Each run prints
# its medians and checks its gradient against the one-process one; the
# script fails if a run does.  ARGS go to every run (--cells N --steps S
# --snapshots C --reps R).
set -eu
exe=$1
rounds=${2:-3}
shift 2 2>/dev/null || shift $#
flags=""
if mpirun --version 2>/dev/null | grep -q 'Open MPI'; then
    flags="--allow-run-as-root --oversubscribe"
fi
export OMP_NUM_THREADS=1
i=0
while [ "$i" -lt "$rounds" ]; do
    for k in 1 2; do
        # shellcheck disable=SC2086
        mpirun $flags -n "$k" "$exe" "$@"
    done
    i=$((i + 1))
done
