/* What the MPI tests (test_mpi.c, test_mpi_comm.c) share: a check that
 * counts its failures and names the rank, and comparisons of results
 * across ranks.  Each test defines `rank` and `failures`; main adds the
 * failures up over the ranks. */
#ifndef DUALREV_TESTS_MPI_CHECK_H
#define DUALREV_TESTS_MPI_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <dualrev.h>
#include <mpi.h>

static int rank, world;
static int failures;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            failures++;                                                               \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", rank, __FILE__,    \
                    __LINE__, #cond);                                                 \
        }                                                                             \
    } while (0)

static inline int same_bits(const double *a, const double *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

static inline int all_nan(const double *a, size_t n)
{
    for (size_t j = 0; j < n; j++)
        if (!isnan(a[j]))
            return 0;
    return 1;
}

/* Whether s is the same on every rank of comm. */
static inline int same_everywhere(MPI_Comm comm, ad_status s)
{
    int mine[2] = {(int)s, -(int)s}, most[2];
    MPI_Allreduce(mine, most, 2, MPI_INT, MPI_MAX, comm);
    return most[0] == -most[1];
}

#endif
