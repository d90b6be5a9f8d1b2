/* The oracle: the program linearised at the double run's values, with
 * every local partial (and second partial) derived independently in long
 * double, and forward-mode (dual-number, and hyper-dual for second order)
 * and reverse passes over it in long double.
 *
 * Why at the double run's values: the library differentiates the program
 * at the point the double arithmetic reached; a long double evaluation of
 * the primal would differentiate at a different point, and an
 * ill-conditioned primal (cancellation, tan near pi/2) would move it far.
 * The values themselves are checked bitwise against the double run. */
#ifndef FUZZ_ORACLE_H
#define FUZZ_ORACLE_H

#include "prog.h"

typedef long double ld;

typedef struct edge {
    int from;  /* an active slot (an input or an output of a record) */
    ld p;      /* the partial */
    ld err;    /* bound on the absolute error of the library's double partial */
    int zskip; /* a user rule's: a zero tangent or cotangent adds nothing */
    int sonly; /* structure only: reached, adds nothing (an external's
                  output and an argument its rule does not read) */
    int composite;    /* a primitive whose rule factors its terms (mat_sqnorm):
                         an infinite seed meets them in an order of its own */
    ld inner_f, inner_r;  /* scale of that rule's intermediates, per unit seed */
    ld inner_f_lo, inner_r_lo;  /* and the smallest nonzero ones */
    int alias;        /* the library gives the result the argument's ID (a branch,
                         x + c, x - c): its cotangent sums land in the argument's */
    int punc;  /* NaN from Inf - Inf inside a primitive's partial: another
                  grouping (its rule's) may give an infinity instead */
} edge;

typedef struct sec {
    int k, l;  /* positions in the slot's edges, k <= l; k < l stands for both orders */
    ld p2, err;
} sec;

typedef struct lin {
    int n, m, nslots;
    const prog *p;
    const double *val;
    int *e0, *h0;      /* slot s: edges [e0[s], e0[s+1]), seconds [h0[s], h0[s+1]) */
    edge *e;
    sec *h;
    int ne, nh, cap_e, cap_h;
    unsigned char *active;
    unsigned char *recd;  /* the library records it: active, or (a product
                             with a recorded matrix) fed by a record */
    uint32_t *imask;   /* inputs that reach slot s */
    uint32_t *smask;   /* inputs in slot s's sparse structure: imask, and an
                          external's outputs reach all its active arguments */
    uint32_t *omask;   /* outputs that slot s reaches */
    int nslots_built;  /* the slot being built */
    int *fan;          /* how many edges read slot s: a reverse sweep's sum */
    int big_second;    /* second partials too many to check (counted, not checked) */
} lin;

/* Quantities of one pass, per slot. */
typedef struct pass {
    ld *t, *M, *E;              /* value, magnitude (sum of |terms|), error bound */
    unsigned char *on, *unc;    /* structurally reached; classification uncertain */
    ld *lo, *hi;                /* per result: smallest and largest nonzero intermediate */
    unsigned char *over;        /* per result: a partial on the way overflows double */
    ld ghi;                     /* largest intermediate of the whole pass */
    int nres;
} pass;

void lin_build(lin *L, const prog *p, const double *val);
void lin_free(lin *L);
/* Whether instruction in's local partials at its output slot s (first or
 * second) are not finite at the values, whether or not it is recorded
 * (or, for pow and division, a second partial outside the normal doubles,
 * which the library makes NaN: docs/conventions.md); the largest of their
 * magnitudes (Inf for NaN). */
int oracle_singular(const lin *L, const insn *in, int s);
ld oracle_partial_max(const lin *L, const insn *in, int s);

void pass_forward(const lin *L, const double *seed, uint32_t seeded, pass *P);
void pass_reverse(const lin *L, const double *w, uint32_t seeded, pass *P);
void pass_second(const lin *L, const pass *U, const pass *V, pass *P);
void pass_free(pass *P);

/* Whether an entry with these intermediates is computed in range by a
 * sweep scaled by 2^512 or by an unscaled one. */
int range_scaled(ld lo, ld hi);
int range_unscaled(ld lo, ld hi);

#define ORACLE_EPS 0x1p-53L

#endif
