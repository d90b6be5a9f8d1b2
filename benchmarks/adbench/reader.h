/* Reading ADBench's text files with the line each thing was on: what the
 * GMM and LSTM loaders (benchmarks/gmm/, benchmarks/lstm/) share.
 *
 * Errors are written to the caller's buffer as "name:line: message" and
 * returned as errno values; nothing here prints or exits.  Plain C11 with no
 * dualrev header, so that it builds beside any commit's library
 * (benchmarks/compare_first_order.sh). */
#ifndef ADB_READER_H
#define ADB_READER_H

#include <stddef.h>
#include <stdio.h>

#if defined(__GNUC__) || defined(__clang__)
#define ADB_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define ADB_PRINTF(f, a)
#endif

typedef struct adb_reader {
    FILE *f;
    const char *name;  /* the file, in messages */
    size_t line;       /* tokens: 1-based line of the next character; lines: lines read */
    size_t last;       /* line of the last token read */
    char *err;         /* err_size bytes, or NULL */
    size_t err_size;
} adb_reader;

/* A reader of whitespace-separated tokens (adb_next_token and the number
 * readers) or of lines (adb_next_line); both empty err. */
void adb_tokens(adb_reader *r, FILE *f, const char *name, char *err, size_t err_size);
void adb_lines(adb_reader *r, FILE *f, const char *name, char *err, size_t err_size);

/* Writes "name:line: message" to r->err; returns EINVAL, for
 * `return adb_fail(r, ...)`. */
ADB_PRINTF(2, 3) int adb_fail(const adb_reader *r, const char *fmt, ...);
/* Writes "name: message", about the file as a whole (memory, sizes given
 * by the caller); returns e. */
ADB_PRINTF(3, 4) int adb_error(const adb_reader *r, int e, const char *fmt, ...);

/* What the readers below return */
enum {
    ADB_END = 0,         /* the end of the file */
    ADB_GOT = 1,         /* the token, number or line */
    ADB_CUT = 2,         /* a line longer than the buffer, the rest dropped */
    ADB_TOO_LONG = -1,   /* a token longer than the buffer */
    ADB_NOT_NUMBER = -2  /* a token that is not a finite number */
};

/* Longer than any number written in full */
#define ADB_TOKEN_MAX 64

/* The next whitespace-separated token, of at most size - 1 characters. */
int adb_next_token(adb_reader *r, char *buf, size_t size);
/* The next token as a finite double; tok holds the token, for messages. */
int adb_next_double(adb_reader *r, double *v, char tok[ADB_TOKEN_MAX]);
/* The next token as an integer in [lo, hi]; `what` names it in errors.
 * Returns 0 or EINVAL. */
int adb_read_integer(adb_reader *r, long long *v, long long lo, long long hi, const char *what);
/* Whether only white space is left. */
int adb_at_end(adb_reader *r);

/* One line into buf, without its newline. */
int adb_next_line(adb_reader *r, char *buf, size_t size);

/* a * b, or SIZE_MAX if that overflows: for checking the sizes a file
 * claims before anything is allocated with them. */
size_t adb_mul_sat(size_t a, size_t b);

/* fopen for reading, its failure described in err ("path: reason") with
 * errno kept. */
FILE *adb_open(const char *path, char *err, size_t err_size);
/* fclose that keeps errno (a loader's, set by the read); returns st. */
int adb_close(FILE *f, int st);
/* A loader's result for an errno value e: 0, or -1 with errno = e. */
int adb_status(int e);

#endif
