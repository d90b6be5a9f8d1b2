/* Running a measurement in a child process, so that whatever global state
 * it builds up (the peer's location store, say) dies with it. */
#ifndef BENCH_ISOLATE_H
#define BENCH_ISOLATE_H

#include <stddef.h>

/* Runs fn(ctx, result) in a child process and copies the size bytes it left
 * in result back.  Returns 0 on success, -1 if the child could not be run or
 * did not report.  Without fork(), runs fn in this process. */
int run_isolated(void (*fn)(void *ctx, void *result), void *ctx, void *result, size_t size);

#endif
