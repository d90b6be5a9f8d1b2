/* Running a measurement in a child process, so that whatever global state
 * it builds up (the peer's location store, a tape of gigabytes) dies with
 * it, and its peak memory is its own. */
#ifndef BENCH_ISOLATE_H
#define BENCH_ISOLATE_H

#include <stddef.h>

/* A buffer the child fills and the parent receives at the same address. */
typedef struct {
    void *data;
    size_t size;
} bench_part;

/* Runs fn(ctx) in a child process, then copies the nparts buffers it filled
 * back into this process.  *maxrss_kb (if not NULL) receives the child's
 * peak resident set in kB (ru_maxrss; -1 where unknown).  Returns 0 on
 * success, -1 if the child could not be run or did not report, in which
 * case the buffers may be half written.  Without fork(), runs fn here. */
int run_isolated_parts(void (*fn)(void *ctx), void *ctx, const bench_part *parts, size_t nparts,
                       long *maxrss_kb);

/* The same for fn(ctx, result) and one result of size bytes. */
int run_isolated(void (*fn)(void *ctx, void *result), void *ctx, void *result, size_t size);

/* A field of a /proc file in kB (path "/proc/self/status", field "VmHWM";
 * "/proc/meminfo", "MemAvailable"); -1 if unknown. */
long bench_proc_kb(const char *path, const char *field);

#endif
