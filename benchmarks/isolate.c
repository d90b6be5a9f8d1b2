/* run_isolated: fork, run, send the result back through a pipe. */
#define _DEFAULT_SOURCE /* wait4 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isolate.h"

long bench_proc_kb(const char *path, const char *field)
{
    FILE *f = fopen(path, "r");
    char line[256];
    size_t len = strlen(field);
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, len) == 0 && line[len] == ':') {
            kb = strtol(line + len + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

typedef struct {
    void (*fn)(void *ctx, void *result);
    void *ctx, *result;
} one_result;

static void call_one(void *p)
{
    one_result *o = p;
    o->fn(o->ctx, o->result);
}

int run_isolated(void (*fn)(void *ctx, void *result), void *ctx, void *result, size_t size)
{
    one_result o = {fn, ctx, result};
    bench_part part = {result, size};
    return run_isolated_parts(call_one, &o, &part, 1, NULL);
}

#if defined(__unix__) || defined(__APPLE__)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static int read_all(int fd, char *buf, size_t size)
{
    while (size) {
        ssize_t got = read(fd, buf, size);
        if (got <= 0)
            return -1;
        buf += got;
        size -= (size_t)got;
    }
    return 0;
}

static int write_all(int fd, const char *buf, size_t size)
{
    while (size) {
        ssize_t put = write(fd, buf, size);
        if (put <= 0)
            return -1;
        buf += put;
        size -= (size_t)put;
    }
    return 0;
}

static void child(int fd, void (*fn)(void *), void *ctx, const bench_part *parts, size_t nparts)
{
    fn(ctx);
    for (size_t i = 0; i < nparts; i++)
        if (write_all(fd, parts[i].data, parts[i].size) != 0)
            _exit(1);
    _exit(0); /* not exit(): the parent's stdio buffers must not be flushed twice */
}

int run_isolated_parts(void (*fn)(void *ctx), void *ctx, const bench_part *parts, size_t nparts,
                       long *maxrss_kb)
{
    int fds[2];
    if (maxrss_kb)
        *maxrss_kb = -1;
    fflush(NULL);
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        child(fds[1], fn, ctx, parts, nparts);
    }
    close(fds[1]);
    int ok = pid > 0;
    for (size_t i = 0; ok && i < nparts; i++)
        ok = read_all(fds[0], parts[i].data, parts[i].size) == 0;
    close(fds[0]);
    int status = 0;
    struct rusage ru;
    if (pid > 0 && wait4(pid, &status, 0, &ru) == pid) {
        if (maxrss_kb)
            *maxrss_kb = ru.ru_maxrss; /* Linux: kB */
    } else {
        ok = 0;
    }
    return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

#else

int run_isolated_parts(void (*fn)(void *ctx), void *ctx, const bench_part *parts, size_t nparts,
                       long *maxrss_kb)
{
    (void)parts;
    (void)nparts;
    if (maxrss_kb)
        *maxrss_kb = -1;
    fn(ctx);
    return 0;
}

#endif
