/* ADBench LSTM for dualrev: loader, reference files and the objective,
 * shared by tests/test_lstm.c and benchmarks/lstm_bench.c.
 *
 * The objective (ADBench; /work/shared/adbench/README.md, "LSTM") is the
 * loss of an l-layer LSTM with diagonal weights predicting each character
 * (b bits) of a c-character text from the one before.  It is a function of
 * params = [main (8 l b), extra (3 b)]; the initial state and the text are
 * data.  Its definition is in lstm_objective.h, written once for any number
 * type and instantiated here for double and ad_real. */
#ifndef LSTM_H
#define LSTM_H

#include <stddef.h>
#include <stdio.h>

#include "dualrev.h"

typedef struct lstm_problem {
    size_t l, c, b;      /* layers, characters, bits per character */
    double *main_params; /* 8 l b: layer j at 8 b j, [Wf Wi Wo Wc] then [bf bi bo bc] */
    double *extra;       /* 3 b: [in_w out_w out_b] */
    double *state;       /* 2 l b: layer j at 2 b j, [h c]; every call starts from it */
    double *seq;         /* c b: the text, one character (b bits, 0 or 1) per row */
} lstm_problem;

/* Loaders fill err (when not NULL) with a message naming the file, the line
 * and what was expected there, and set errno: the one from fopen, EINVAL for
 * a malformed file, ENOMEM.  They return 0, or -1 with the output zeroed;
 * they never exit or print. */
#define LSTM_ERR_SIZE 256

/* Reads an ADBench LSTM input file: "l c b", then main, extra, state and
 * seq, whitespace separated (ADBench's blank lines between blocks are not
 * required). */
int lstm_load(const char *path, lstm_problem *p, char err[LSTM_ERR_SIZE]);
/* The same from an open stream; name is used in messages. */
int lstm_read(FILE *f, const char *name, lstm_problem *p, char err[LSTM_ERR_SIZE]);
void lstm_free(lstm_problem *p);

size_t lstm_inputs(const lstm_problem *p);  /* 8 l b + 3 b */

/* The parameter vector [main, extra] of the problem (lstm_inputs values). */
void lstm_pack(const lstm_problem *p, double *params);

/* A reference result: the numbers of the file's non-'#' lines are the
 * objective, possibly repeated, then the gradient's entries.  That fits both
 * ADBench layouts: the "manual" files ("# l c b = ..." header, the objective
 * twice, the gradient) and the expected values of ADBench's test (the
 * objective once, to 8 digits, then the gradient). */
typedef struct lstm_reference {
    size_t l, c, b;     /* from a "# l c b = ..." header; 0 without one */
    double objective;
    size_t objectives;  /* how many times the file gives it (1 or 2) */
    size_t count;       /* gradient entries */
    double *grad;
} lstm_reference;

/* inputs: the gradient's length, lstm_inputs of the problem it is for. */
int lstm_load_reference(const char *path, size_t inputs, lstm_reference *ref,
                        char err[LSTM_ERR_SIZE]);
int lstm_read_reference(FILE *f, const char *name, size_t inputs, lstm_reference *ref,
                        char err[LSTM_ERR_SIZE]);
void lstm_reference_free(lstm_reference *ref);

/* Whether a reference belongs to a problem: its gradient's length, and its
 * header's sizes when it has one. */
int lstm_reference_matches(const lstm_reference *ref, const lstm_problem *p);

/* Scratch for one evaluation, either number type, so that the objective
 * itself never allocates: one lstm_work per thread. */
typedef struct lstm_work {
    void *scratch;  /* numbers (double or ad_real) */
} lstm_work;

/* Returns 0, or -1 (out of memory) with w zeroed. */
int lstm_work_init(lstm_work *w, const lstm_problem *p);
void lstm_work_free(lstm_work *w);

typedef struct lstm_eval {
    const lstm_problem *p;
    lstm_work *w;
} lstm_eval;

/* The objective in plain double (the same source as lstm_objective_ad). */
double lstm_objective(const lstm_eval *e, const double *params);

/* The objective as an ad_objective; ctx is a const lstm_eval *, and n must
 * be lstm_inputs(e->p). */
ad_real lstm_objective_ad(const ad_real *params, size_t n, void *ctx);

/* The same as an ad_function of one output (m = 1), for ad_linearize. */
void lstm_function_ad(const ad_real *params, size_t n, ad_real *y, size_t m, void *ctx);

#endif
