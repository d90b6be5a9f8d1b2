#!/bin/sh
# mpi_ranks.sh EXE [ROUNDS] [ARGS...]: an MPI benchmark (mpi-sum-bench,
# mpi-heat-bench) on 1 rank, then on 2 ranks, alternately, ROUNDS times
# (default 3), so that load from the rest of the machine falls on both
# alike; ARGS go to every run (mpi-sum-bench: --threads 1, one thread a
# rank).  OMP_NUM_THREADS=1, for any library that would start threads.
# Each run prints its medians and checks its results (the same bits as
# one process, or the one-process gradient); the script fails if a run
# does.
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
