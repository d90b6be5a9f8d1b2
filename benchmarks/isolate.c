/* run_isolated: fork, run, send the result back through a pipe. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#include "isolate.h"

#if defined(__unix__) || defined(__APPLE__)
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

static void child(int fd, void (*fn)(void *, void *), void *ctx, void *result, size_t size)
{
    fn(ctx, result);
    const char *p = result;
    while (size) {
        ssize_t put = write(fd, p, size);
        if (put <= 0)
            _exit(1);
        p += put;
        size -= (size_t)put;
    }
    _exit(0);  /* not exit(): the parent's stdio buffers must not be flushed twice */
}

int run_isolated(void (*fn)(void *ctx, void *result), void *ctx, void *result, size_t size)
{
    int fds[2];
    fflush(NULL);
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        child(fds[1], fn, ctx, result, size);
    }
    close(fds[1]);
    int ok = pid > 0 && read_all(fds[0], result, size) == 0;
    close(fds[0]);
    int status = 0;
    if (pid > 0)
        waitpid(pid, &status, 0);
    return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

#else

int run_isolated(void (*fn)(void *ctx, void *result), void *ctx, void *result, size_t size)
{
    (void)size;
    fn(ctx, result);
    return 0;
}

#endif
