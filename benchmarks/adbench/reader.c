/* Reading ADBench's text files: see reader.h. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader.h"

/* ---- the reader and its messages ---- */

static void start(adb_reader *r, FILE *f, const char *name, char *err, size_t err_size,
                  size_t line)
{
    *r = (adb_reader){f, name, line, line, err, err_size};
    if (err && err_size)
        err[0] = '\0';
}

void adb_tokens(adb_reader *r, FILE *f, const char *name, char *err, size_t err_size)
{
    start(r, f, name, err, err_size, 1);
}

/* adb_next_line counts a line as it reads it */
void adb_lines(adb_reader *r, FILE *f, const char *name, char *err, size_t err_size)
{
    start(r, f, name, err, err_size, 0);
}

/* The prefix already written (len of it), then the message as far as it
 * fits. */
ADB_PRINTF(3, 0) static void say(const adb_reader *r, int len, const char *fmt, va_list ap)
{
    if (len >= 0 && (size_t)len < r->err_size)
        vsnprintf(r->err + len, r->err_size - (size_t)len, fmt, ap);
}

int adb_fail(const adb_reader *r, const char *fmt, ...)
{
    if (r->err) {
        va_list ap;
        va_start(ap, fmt);
        say(r, snprintf(r->err, r->err_size, "%s:%zu: ", r->name, r->line), fmt, ap);
        va_end(ap);
    }
    return EINVAL;
}

int adb_error(const adb_reader *r, int e, const char *fmt, ...)
{
    if (r->err) {
        va_list ap;
        va_start(ap, fmt);
        say(r, snprintf(r->err, r->err_size, "%s: ", r->name), fmt, ap);
        va_end(ap);
    }
    return e;
}

/* ---- tokens ---- */

int adb_next_token(adb_reader *r, char *buf, size_t size)
{
    int c;
    while ((c = getc(r->f)) != EOF && isspace(c))
        r->line += c == '\n';
    if (c == EOF) {
        r->line = r->last;  /* name the last line that had something */
        return ADB_END;
    }
    r->last = r->line;
    size_t len = 0;
    do {
        if (len + 1 >= size)
            return ADB_TOO_LONG;
        buf[len++] = (char)c;
    } while ((c = getc(r->f)) != EOF && !isspace(c));
    if (c != EOF)
        ungetc(c, r->f);  /* a newline is counted when the next token is sought */
    buf[len] = '\0';
    return ADB_GOT;
}

int adb_next_double(adb_reader *r, double *v, char tok[ADB_TOKEN_MAX])
{
    char *end;
    int got = adb_next_token(r, tok, ADB_TOKEN_MAX);
    if (got != ADB_GOT)
        return got;
    *v = strtod(tok, &end);
    return !*end && end != tok && isfinite(*v) ? ADB_GOT : ADB_NOT_NUMBER;
}

int adb_read_integer(adb_reader *r, long long *v, long long lo, long long hi, const char *what)
{
    char tok[ADB_TOKEN_MAX], *end;
    int got = adb_next_token(r, tok, sizeof tok);
    if (got == ADB_END)
        return adb_fail(r, "the file ends here; %s expected next", what);
    errno = 0;
    *v = got == ADB_GOT ? strtoll(tok, &end, 10) : 0;
    if (got != ADB_GOT || *end || end == tok || errno || *v < lo || *v > hi)
        return adb_fail(r, "%s: expected an integer in [%lld, %lld], found \"%s\"", what, lo, hi,
                        got == ADB_GOT ? tok : "(too long)");
    return 0;
}

int adb_at_end(adb_reader *r)
{
    char tok[ADB_TOKEN_MAX];
    return adb_next_token(r, tok, sizeof tok) == ADB_END;
}

/* ---- lines ---- */

int adb_next_line(adb_reader *r, char *buf, size_t size)
{
    int c, cut = 0;
    if (!fgets(buf, (int)size, r->f))
        return ADB_END;
    r->line++;
    size_t len = strlen(buf);
    if (len && buf[len - 1] == '\n')
        buf[--len] = '\0';
    else
        while ((c = getc(r->f)) != EOF && c != '\n')
            cut = 1;
    return cut ? ADB_CUT : ADB_GOT;
}

/* ---- sizes and files ---- */

size_t adb_mul_sat(size_t a, size_t b)
{
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

FILE *adb_open(const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "r");
    if (!f && err) {
        int e = errno;
        snprintf(err, err_size, "%s: %s", path, strerror(e));
        errno = e;
    }
    return f;
}

int adb_close(FILE *f, int st)
{
    int e = errno;
    fclose(f);
    errno = e;
    return st;
}

int adb_status(int e)
{
    if (!e)
        return 0;
    errno = e;
    return -1;
}
