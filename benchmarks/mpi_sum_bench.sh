#!/bin/sh
# mpi_sum_bench.sh EXE [ROUNDS] [ARGS...]: mpi-sum-bench on 1 rank, then on
# 2 ranks, alternately, ROUNDS times (default 3), one thread per rank, so
# that load from the rest of the machine falls on both alike.  Each run
# prints its median; the ratio is 1-rank median / 2-rank median.
set -eu
exe=$1
rounds=${2:-3}
shift 2 2>/dev/null || shift $#
flags=""
if mpirun --version 2>/dev/null | grep -q 'Open MPI'; then
    flags="--allow-run-as-root --oversubscribe"
fi
i=0
while [ "$i" -lt "$rounds" ]; do
    for k in 1 2; do
        # shellcheck disable=SC2086
        mpirun $flags -n "$k" "$exe" --threads 1 "$@"
    done
    i=$((i + 1))
done
