/* The oracle's local partials: derived here from the mathematics of each
 * operation, in long double at the double run's values, with the
 * conventions of docs/conventions.md where a derivative does not exist.
 * Each partial carries a bound on the error of a double formula for it:
 * U1 (U2 for second partials) rounding errors relative to the partial,
 * plus the partial's conditioning where the library must compute it from
 * a rounded intermediate (erf's x*x, pow's b - 1, digamma). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nest.h"
#include "oracle.h"

const unsigned char *lin_approx;

#define U1 8.0L
#define U2 32.0L
#define EPS ORACLE_EPS
#define PI_L 3.141592653589793238462643383279502884L
#define LN2_L 0.693147180559945309417232121458176568L
#define LN10_L 2.302585092994045684017991454684364208L

static ld sq(ld x) { return x * x; }

/* |p| f, 0 where p is 0 (f may be infinite: a partial of 0 has no error) */
static ld rel(ld p, ld f) { return p == 0 ? 0 : fabsl(p) * f; }

/* ---- building the edge lists ---- */

static int cur_first;  /* the first edge of the slot being built */

static void slot_begin(lin *L, int s)
{
    L->e0[s] = L->ne;
    L->h0[s] = L->nh;
    cur_first = L->ne;
}

static void slot_end(lin *L, int s)
{
    L->e0[s + 1] = L->ne;
    L->h0[s + 1] = L->nh;
    L->active[s] = L->ne > L->e0[s] || s < L->n;
    uint32_t im = s < L->n ? 1u << s : 0, sm = im;
    for (int i = L->e0[s]; i < L->ne; i++) {
        im |= L->imask[L->e[i].from];
        sm |= L->smask[L->e[i].from];
    }
    L->imask[s] = im;
    L->smask[s] |= sm;
}

/* An edge from slot `from` if it is active: its position, else -1. */
static int edge_add(lin *L, int from, ld p, ld err)
{
    if (from < 0 || !L->active[from])
        return -1;
    if (L->ne == L->cap_e) {
        L->cap_e = L->cap_e ? 2 * L->cap_e : 256;
        L->e = realloc(L->e, (size_t)L->cap_e * sizeof *L->e);
    }
    L->e[L->ne].from = from;
    L->e[L->ne].p = p;
    L->e[L->ne].err = fabsl(err);
    L->e[L->ne].zskip = 0;
    L->e[L->ne].punc = 0;
    L->e[L->ne].sonly = 0;
    L->e[L->ne].alias = 0;
    L->e[L->ne].composite = 0;
    L->e[L->ne].inner_f = L->e[L->ne].inner_r = 0;
    L->e[L->ne].inner_f_lo = L->e[L->ne].inner_r_lo = 0;
    return L->ne++ - cur_first;
}

static void sec_add(lin *L, int k, int l, ld p2, ld err)
{
    if (k < 0 || l < 0)
        return;
    if (L->nh == L->cap_h) {
        L->cap_h = L->cap_h ? 2 * L->cap_h : 256;
        L->h = realloc(L->h, (size_t)L->cap_h * sizeof *L->h);
    }
    L->h[L->nh].k = k < l ? k : l;
    L->h[L->nh].l = k < l ? l : k;
    L->h[L->nh].p2 = p2;
    L->h[L->nh].err = fabsl(err);
    L->nh++;
}

/* ---- digamma and trigamma in long double ---- */

/* psi(x) for x > 0: recurrence up to 20, then the asymptotic series. */
static ld psi_pos(ld x, ld *tri)
{
    ld acc = 0, acc1 = 0;
    while (x < 20) {
        acc -= 1 / x;
        acc1 += 1 / (x * x);
        x += 1;
    }
    ld r = 1 / (x * x);
    ld s = logl(x) - 0.5L / x -
           r * (1.0L / 12 - r * (1.0L / 120 - r * (1.0L / 252 - r * (1.0L / 240 - r * (1.0L / 132)))));
    ld t = 1 / x + r / 2 +
           r / x * (1.0L / 6 - r * (1.0L / 30 - r * (1.0L / 42 - r * (1.0L / 30 - r * 5.0L / 66))));
    *tri = t + acc1;
    return s + acc;
}

/* psi and psi' at a double x; NaN at the poles 0, -1, -2, ...  Negative x
 * by reflection, with pi x reduced exactly first (x - round(x) is exact). */
static ld digamma(double x, ld *tri)
{
    if (x != x || (x <= 0 && x == floor(x)) || x == -INFINITY) {
        *tri = NAN;
        return NAN;
    }
    if (x == INFINITY) {
        *tri = 0;
        return INFINITY;
    }
    if (x > 0)
        return psi_pos(x, tri);
    ld r = (ld)x - nearbyintl((ld)x), t1;
    ld s = sinl(PI_L * r), c = cosl(PI_L * r);
    ld p = psi_pos(1 - (ld)x, &t1);
    *tri = PI_L * PI_L / (s * s) - t1;
    return p - PI_L * c / s;
}

/* Distance from x to the nearest pole of the gamma functions (x itself
 * for x > 0). */
static ld pole_dist(double x)
{
    return x > 0 ? (ld)x : fabsl((ld)x - nearbyintl((ld)x));
}

/* ---- unary operations ---- */

typedef struct part {
    ld p, p2, err, err2;
} part;

static part unary(int op, double xd, double v)
{
    ld x = xd;
    part r = {0, 0, 0, 0};
    ld c2 = 0;  /* conditioning of the second partial, as a multiple of |p2| */
    switch (op) {
    case OP_NEG: r.p = -1; break;
    case OP_SQRT:
        if (x == 0) r.p = INFINITY, r.p2 = -INFINITY;
        else r.p = 0.5L / sqrtl(x), r.p2 = -0.25L / (x * sqrtl(x));
        break;
    case OP_CBRT:
        if (x == 0) { r.p = INFINITY, r.p2 = -INFINITY; break; }
        { ld c = cbrtl(x); r.p = 1 / (3 * c * c); r.p2 = -2 / (9 * c * c * c * c * c); }
        break;
    case OP_EXP: case OP_EXPM1: r.p = r.p2 = expl(x); break;
    case OP_LOG: case OP_LOG2: case OP_LOG10: {
        ld k = op == OP_LOG ? 1 : op == OP_LOG2 ? 1 / LN2_L : 1 / LN10_L;
        if (x == 0) r.p = INFINITY, r.p2 = -INFINITY;
        else r.p = k / x, r.p2 = -k / (x * x);
        break;
    }
    case OP_LOG1P:
        if (x == -1) r.p = INFINITY, r.p2 = -INFINITY;
        else r.p = 1 / (1 + x), r.p2 = -1 / sq(1 + x);
        break;
    case OP_SIN: r.p = cosl(x), r.p2 = -sinl(x); break;
    case OP_COS: r.p = -sinl(x), r.p2 = -cosl(x); break;
    case OP_TAN: { ld c = cosl(x); r.p = 1 / (c * c); r.p2 = 2 * sinl(x) / (c * c * c); break; }
    case OP_ASIN: case OP_ACOS: {
        ld k = op == OP_ASIN ? 1 : -1, d = (1 - x) * (1 + x);
        if (d == 0) r.p = k * INFINITY, r.p2 = k * x * INFINITY;
        else r.p = k / sqrtl(d), r.p2 = k * x / (d * sqrtl(d));
        break;
    }
    case OP_ATAN: r.p = 1 / (1 + x * x), r.p2 = -2 * x / sq(1 + x * x); break;
    case OP_SINH: r.p = coshl(x), r.p2 = sinhl(x); break;
    case OP_COSH: r.p = sinhl(x), r.p2 = coshl(x); break;
    case OP_TANH: { ld c = coshl(x); r.p = 1 / (c * c); r.p2 = -2 * tanhl(x) / (c * c); c2 = 2; break; }
    case OP_ASINH: { ld d = 1 + x * x; r.p = 1 / sqrtl(d); r.p2 = -x / (d * sqrtl(d)); break; }
    case OP_ACOSH: {
        ld d = (x - 1) * (x + 1);
        if (d == 0) r.p = INFINITY, r.p2 = -INFINITY;
        else r.p = 1 / sqrtl(d), r.p2 = -x / (d * sqrtl(d));
        break;
    }
    case OP_ATANH: {
        ld d = (1 - x) * (1 + x);
        if (d == 0) r.p = INFINITY, r.p2 = x * INFINITY;
        else r.p = 1 / d, r.p2 = 2 * x / (d * d);
        break;
    }
    case OP_FABS: r.p = x > 0 ? 1 : x < 0 ? -1 : 0; break;
    case OP_ERF: case OP_ERFC: {
        ld k = (op == OP_ERF ? 2 : -2) / sqrtl(PI_L), g = expl(-x * x);
        r.p = k * g;
        r.p2 = -2 * x * k * g;
        r.err = rel(U1 * EPS * r.p, x * x) + 4 * 0x1p-1074L;  /* exp of a rounded x*x, maybe subnormal */
        c2 = 2 * x * x;
        break;
    }
    case OP_LGAMMA: case OP_TGAMMA: {
        ld tri, ps = digamma(xd, &tri), d = pole_dist(xd);
        ld perr = fabsl(ps) + fabsl(x * tri);  /* digamma's conditioning */
        if (op == OP_LGAMMA) {
            r.p = ps, r.p2 = tri;
            r.err = U1 * EPS * perr;
            if (isnan(r.err) && !isnan(r.p))
                r.err = INFINITY;  /* at +-Inf: not checked */
        } else {
            ld g = tgammal(x);
            r.p = g * ps, r.p2 = g * (ps * ps + tri);
            r.err = U1 * EPS * fabsl(g) * (fabsl(ps) + perr);
            if (isfinite(ps))  /* v psi with v = Gamma(x) rounded to a subnormal */
                r.err += 4 * 0x1p-1074L * fabsl(ps);
        }
        c2 = 2 + fabsl(x) * (1 + 1 / d) + ps * ps;
        break;
    }
    default: abort();
    }
    /* A NaN value: so are the partials computed from it (conventions.md);
     * neg's is -1 whatever x is. */
    if (v != v && op != OP_NEG)
        r.p = r.p2 = NAN;
    r.err += U1 * EPS * fabsl(r.p);
    r.err2 = rel(U2 * EPS * r.p2, 2 + c2);
    return r;
}

/* ---- binary operations: p[0] = d/da, p[1] = d/db; h[0] aa, h[1] ab, h[2] bb ---- */

typedef struct part2 {
    ld p[2], h[3], err[2], err2[3];
} part2;

static void pow_parts(double ad, double bd, double v, part2 *r)
{
    ld a = ad, b = bd, lna = logl(a), ab = powl(a, b), ab1 = powl(a, b - 1);
    if (v != v && ad < 0 && bd != floor(bd))
        ab = ab1 = NAN;  /* not real: long double's b - 1 may round to an integer */
    else if (ad < 0 && bd == floor(bd) && isfinite(bd))
        /* b - 1 may round to b (|b| >= 2^64): its parity from b's */
        ab1 = powl(-a, b - 1) * (fmod(bd, 2.0) == 0.0 ? -1 : 1);
    r->p[0] = bd == 0 ? 0 : b * ab1;
    r->p[1] = ad == 0 ? 0 : ad < 0 ? NAN : lna * ab;
    r->h[0] = bd == 0 ? 0 : b * (b - 1) * powl(a, b - 2);
    r->h[1] = ad == 0 ? 0 : ad < 0 ? NAN : ab1 * (1 + b * lna);
    r->h[2] = ad == 0 ? 0 : ad < 0 ? NAN : lna * lna * ab;
    /* a^(b-1) from b - 1 rounded: relative error ln(a) (b - 1) eps */
    ld cond = fabsl((b - 1) * logl(fabsl(a))) + fabsl(b) + 2;
    if (!isfinite(cond))
        cond = 2;  /* a NaN, 0 or infinite a: a power is exact, or NaN */
    r->err[0] = rel(U1 * EPS * r->p[0], cond);
    /* Formulas through v = a^b rounded to a subnormal: its last place,
     * times log(a) (d/db) or b / a (d/da). */
    r->err[1] = isfinite(lna) ? 0x1p-1074L * (fabsl(lna) + 1) : 0;
    r->err[0] += isfinite(b / a) ? 0x1p-1074L * fabsl(b / a) : 0;
    /* the second partials through a^(b-2) or a^(b-1), b - 2 rounded too */
    ld cond2 = cond + fabsl((b - 2) * logl(fabsl(a)));
    if (!isfinite(cond2))
        cond2 = cond;
    for (int i = 0; i < 3; i++)
        r->err2[i] = rel(U2 * EPS * r->h[i], cond2 + 2);
    /* a^(b-1) (1 + b log a): the sum cancels where b log a is near -1 */
    if (isfinite(lna) && isfinite(ab1))
        r->err2[1] += U2 * EPS * fabsl(ab1) * (1 + fabsl(b * lna)) * (cond + 2);
}

static void atan2_parts(double ad, double bd, part2 *r)
{
    ld a = ad, b = bd;
    if (!isinf(ad) != !isinf(bd) && ad == ad && bd == bd)
        return;  /* one coordinate infinite: the limits, 0 (isinf may return the sign) */
    if ((ad == 0 && bd == 0) || (isinf(ad) && isinf(bd))) {
        r->p[0] = r->p[1] = r->h[0] = r->h[1] = r->h[2] = NAN;
        return;
    }
    ld q = a * a + b * b;
    r->p[0] = b / q, r->p[1] = -a / q;
    r->h[0] = -2 * a * b / (q * q), r->h[1] = (a * a - b * b) / (q * q), r->h[2] = 2 * a * b / (q * q);
    r->err2[1] = U2 * EPS / q;  /* a^2 - b^2 cancels */
    /* A formula through a / b (or b / a) rounds that ratio to a subnormal
     * when the point is far from the origin on one axis: as d/db a/b in
     * conventions.md, an absolute error of the ratio's last place over the
     * larger coordinate. */
    ld big = fabsl(a) > fabsl(b) ? fabsl(a) : fabsl(b);
    r->err[0] = r->err[1] = 4 * 0x1p-1074L / big;
}

static void hypot_parts(double ad, double bd, part2 *r)
{
    ld a = ad, b = bd;
    if (isinf(ad) || isinf(bd)) {  /* the limits, a NaN other argument included */
        r->p[0] = isinf(bd) ? (isinf(ad) ? NAN : 0) : ad > 0 ? 1 : -1;
        r->p[1] = isinf(ad) ? (isinf(bd) ? NAN : 0) : bd > 0 ? 1 : -1;
        if (isinf(ad) && isinf(bd))
            r->h[0] = r->h[1] = r->h[2] = NAN;
        return;
    }
    ld h = sqrtl(a * a + b * b);
    if (h == 0)
        return;  /* as fabs at 0 */
    r->p[0] = a / h, r->p[1] = b / h;
    ld h3 = h * h * h;
    r->h[0] = b * b / h3, r->h[1] = -a * b / h3, r->h[2] = a * a / h3;
}

static void select_parts(int op, double a, double b, double v, part2 *r)
{
    if (v != v)
        r->p[0] = r->p[1] = NAN;  /* both NaN: a NaN value, NaN partials */
    else if (b != b)
        r->p[0] = 1;
    else if (a != a)
        r->p[1] = 1;
    else if (a == b)
        r->p[0] = r->p[1] = 0.5L;
    else if ((op == OP_FMIN) == (a < b))
        r->p[0] = 1;
    else
        r->p[1] = 1;
}

static part2 binary(int op, double ad, double bd, double v)
{
    part2 r;
    memset(&r, 0, sizeof r);
    ld a = ad, b = bd;
    switch (op) {
    case OP_ADD: r.p[0] = 1, r.p[1] = 1; break;
    case OP_SUB: r.p[0] = 1, r.p[1] = -1; break;
    case OP_MUL: r.p[0] = b, r.p[1] = a, r.h[1] = 1; break;
    case OP_DIV:
        r.p[0] = 1 / b, r.p[1] = -a / (b * b);
        r.h[1] = -1 / (b * b), r.h[2] = 2 * a / (b * b * b);
        r.err[1] = 0x1p-1074L / fabsl(b);  /* a / b rounded to a subnormal */
        break;
    case OP_POW: pow_parts(ad, bd, v, &r); break;
    case OP_ATAN2: atan2_parts(ad, bd, &r); break;
    case OP_HYPOT: hypot_parts(ad, bd, &r); break;
    case OP_FMIN: case OP_FMAX: select_parts(op, ad, bd, v, &r); break;
    default: abort();
    }
    for (int i = 0; i < 2; i++)
        r.err[i] += U1 * EPS * fabsl(r.p[i]);
    for (int i = 0; i < 3; i++)
        r.err2[i] += U2 * EPS * fabsl(r.h[i]) * 2;
    return r;
}

void oracle_scalar_partials(const insn *in, double av, double bv, double v, ld *pa, ld *pb)
{
    if (in->op >= OP_FIRST_UNARY && in->op < OP_FIRST_BINARY) {
        *pa = unary(in->op, av, v).p;
        *pb = 0;
        return;
    }
    double a = in->mode == 2 ? in->k : av;
    double b = in->mode == 0 ? bv : in->mode == 1 ? in->k : av;
    part2 r = binary(in->op, a, b, v);
    *pa = in->mode == 2 ? 0 : r.p[0];
    *pb = in->mode == 1 ? 0 : r.p[1];
}

/* ---- array primitives ---- */

/* A product kept as m 2^e, so that no long double over- or underflows;
 * zeros, infinities and NaN counted apart, as IEEE would combine them. */
typedef struct xprod {
    ld m;
    long e;
    int zeros, infs, nan, neg;
} xprod;

static void xp_init(xprod *q) { memset(q, 0, sizeof *q); q->m = 1; }

static void xp_mul(xprod *q, double x)
{
    if (x != x) { q->nan = 1; return; }
    q->neg ^= signbit(x) != 0;
    if (x == 0) { q->zeros++; return; }
    if (isinf(x)) { q->infs++; return; }
    int e;
    q->m *= frexpl(fabsl((ld)x), &e);
    q->e += e;
    int e2;
    q->m = frexpl(q->m, &e2);
    q->e += e2;
}

static ld xp_value(const xprod *q)
{
    if (q->nan || (q->zeros && q->infs)) return NAN;
    ld s = q->neg ? -1 : 1;
    if (q->zeros) return s * 0;
    if (q->infs) return s * INFINITY;
    long e = q->e < -20000 ? -20000 : q->e > 20000 ? 20000 : q->e;
    return s * ldexpl(q->m, (int)e);
}

static void prod_edges(lin *L, const insn *in, const double *x, int n2nd)
{
    const int *g = L->p->args + in->arg;
    int n = in->len, *pos = malloc(((size_t)n + 1) * sizeof *pos);
    for (int k = 0; k < n; k++) {
        xprod q;
        xp_init(&q);
        for (int l = 0; l < n; l++)
            if (l != k)
                xp_mul(&q, x[l]);
        ld p = xp_value(&q);
        pos[k] = edge_add(L, g[k], p, U1 * EPS * (n + 2) * fabsl(p));
    }
    for (int k = 0; k < n && n <= n2nd; k++)
        for (int l = k + 1; l < n; l++) {
            if (pos[k] < 0 || pos[l] < 0)
                continue;
            xprod q;
            xp_init(&q);
            for (int t = 0; t < n; t++)
                if (t != k && t != l)
                    xp_mul(&q, x[t]);
            ld p2 = xp_value(&q);
            sec_add(L, pos[k], pos[l], p2, U2 * EPS * (n + 2) * fabsl(p2));
        }
    if (n > n2nd)
        L->big_second = 1;
    free(pos);
}

/* The softmax, with the conventions for NaN and infinite elements. */
static void lse_edges(lin *L, const insn *in, const double *x, int n2nd)
{
    const int *g = L->p->args + in->arg;
    int n = in->len, nan = 0, ninf = 0, nminf = 0;
    ld mx = -INFINITY, sum = 0;
    for (int k = 0; k < n; k++) {
        nan |= x[k] != x[k];
        ninf += x[k] == INFINITY;
        nminf += x[k] == -INFINITY;
        if (x[k] > mx) mx = x[k];
    }
    ld *s = malloc(((size_t)n + 1) * sizeof *s);
    int *pos = malloc(((size_t)n + 1) * sizeof *pos), conv = nan || ninf || nminf == n;
    for (int k = 0; k < n; k++)
        sum += conv ? 0 : expl((ld)x[k] - mx);
    ld spread = 0;
    for (int k = 0; k < n; k++) {
        s[k] = nan ? NAN : ninf ? (x[k] == INFINITY ? 1.0L / ninf : 0)
             : nminf == n ? 1.0L / n : expl((ld)x[k] - mx) / sum;
        if (!conv)
            spread += rel(s[k], fabsl((ld)x[k] - mx));
    }
    for (int k = 0; k < n; k++) {
        ld cond = conv ? 0 : n + 2 + fabsl((ld)x[k] - mx) + spread;
        pos[k] = edge_add(L, g[k], s[k], rel(U1 * EPS * s[k], cond + 1));
    }
    for (int k = 0; k < n && n <= n2nd; k++)
        for (int l = k; l < n; l++) {
            ld rest = 0;  /* 1 - s_k as the sum of the others: s_k near 1 cancels */
            for (int t = 0; k == l && !conv && t < n; t++)
                rest += t != k ? s[t] : 0;
            ld p2 = conv ? (nan ? NAN : 0) : k == l ? s[k] * rest : -s[k] * s[l];
            ld cond = conv ? 0 : n + 2 + fabsl((ld)x[k] - mx) + fabsl((ld)x[l] - mx) + spread;
            sec_add(L, pos[k], pos[l], p2, rel(U2 * EPS * (fabsl(s[k]) + fabsl(s[k] * s[l])), cond + 1));
        }
    if (n > n2nd)
        L->big_second = 1;
    free(s);
    free(pos);
}

/* Shape of a recorded matrix: LOWER (1) if every entry above the diagonal
 * is a constant zero, else UPPER (2) if every one below is, else FULL. */
static int mat_shape(const lin *L, const int *A, int R, int C)
{
    int lower = 1, upper = 1;
    for (int j = 0; j < R; j++)
        for (int l = 0; l < C; l++) {
            int z = !L->recd[A[j * C + l]] && L->val[A[j * C + l]] == 0;  /* a constant zero */
            if (l > j && !z) lower = 0;
            if (l < j && !z) upper = 0;
        }
    return lower ? 1 : upper ? 2 : 0;
}

static void row_range(int shape, int j, int C, int *lo, int *hi)
{
    *lo = shape == 2 ? (j < C ? j : C) : 0;
    *hi = shape == 1 ? (j + 1 < C ? j + 1 : C) : C;
}

/* One product row j of A (slots, or NULL for the constant matrix ac) with
 * x (slots xs, or the constants xc). */
static void matrow_edges(lin *L, const int *A, const double *ac, int shape, int j, int C,
                         const int *xs, const double *xc)
{
    int lo, hi;
    row_range(shape, j, C, &lo, &hi);
    for (int l = lo; l < hi; l++) {
        ld xv = xs ? L->val[xs[l]] : xc[l];
        ld av = A ? L->val[A[j * C + l]] : ac[j * C + l];
        int pa = A ? edge_add(L, A[j * C + l], xv, 0) : -1;
        int px = xs ? edge_add(L, xs[l], av, 0) : -1;
        sec_add(L, pa, px, 1, 0);
    }
}

/* |M x|^2: the partials 2 y_j x_l and 2 sum_j y_j A_jl, and the second
 * partials of a sum of squares of bilinear forms. */
static void matsq_edges(lin *L, const int *A, int shape, int R, int C, const int *xs,
                        const double *xc)
{
    ld *y = calloc((size_t)R + 1, sizeof *y), *Y = calloc((size_t)R + 1, sizeof *Y);
    ld *xv = calloc((size_t)C + 1, sizeof *xv);
    int *pa = malloc(((size_t)R * C + 1) * sizeof *pa), *px = malloc(((size_t)C + 1) * sizeof *px);
    for (int l = 0; l < C; l++)
        xv[l] = xs ? L->val[xs[l]] : xc[l];
    /* y = M x as the program's doubles (column order, bitwise ad_mat_vec):
     * the partials 2 y x are those of ad_sqnorm after ad_mat_vec, whose
     * intermediate y may overflow (conventions: Inf x 0 is NaN there). */
    for (int j = 0, lo, hi; j < R; j++) {
        row_range(shape, j, C, &lo, &hi);
        double yd = 0;
        for (int l = lo; l < hi; l++) {
            yd += L->val[A[j * C + l]] * (double)xv[l];
            Y[j] += fabsl(L->val[A[j * C + l]] * xv[l]);
        }
        y[j] = yd;
    }
    for (int j = 0, lo, hi; j < R; j++) {
        row_range(shape, j, C, &lo, &hi);
        for (int l = 0; l < C; l++)
            pa[j * C + l] = l >= lo && l < hi
                ? edge_add(L, A[j * C + l], 2 * y[j] * xv[l],
                           U1 * EPS * 2 * fabsl(xv[l]) * (fabsl(y[j]) + C * Y[j])) : -1;
    }
    for (int l = 0; l < C; l++) {
        ld p = 0, e = 0;
        int inside = 0;  /* x_l reaches s through an entry inside the shape */
        for (int j = 0, lo, hi; j < R; j++) {
            row_range(shape, j, C, &lo, &hi);
            if (l >= lo && l < hi) {
                p += 2 * y[j] * L->val[A[j * C + l]];
                e += 2 * fabsl(L->val[A[j * C + l]]) * (fabsl(y[j]) + C * Y[j]);
                inside = 1;
            }
        }
        px[l] = xs && inside ? edge_add(L, xs[l], p, U1 * EPS * (e + R * fabsl(p))) : -1;
    }
    /* An infinite y (M x overflowed), or a NaN partial from finite values
     * (Inf x 0, Inf - Inf in the expanded sum): the class of a result then
     * depends on how the rule groups its terms (2 y . (M x)' factored, or
     * term by term), so it is not predicted. */
    int nan_in = 0, inf_y = 0;
    ld ymax = 0, amax = 0, xmax = 0, ymin = INFINITY, fmin_ = INFINITY;
    for (int j = 0; j < R; j++) {
        nan_in |= y[j] != y[j], inf_y |= isinf(y[j]);
        ymax = fmaxl(ymax, 2 * fabsl(y[j]));
        if (y[j] != 0)
            ymin = fminl(ymin, 2 * fabsl(y[j]));
    }
    for (int i = 0; i < R * C; i++) {
        amax = fmaxl(amax, fabsl((ld)L->val[A[i]]));
        if (L->val[A[i]] != 0)
            fmin_ = fminl(fmin_, fabsl((ld)L->val[A[i]]));
    }
    for (int l = 0; l < C; l++) {
        xmax = fmaxl(xmax, fabsl(xv[l]));
        if (xv[l] != 0)
            fmin_ = fminl(fmin_, fabsl(xv[l]));
    }
    for (int i = cur_first; i < L->ne; i++) {
        if (!nan_in && (inf_y || L->e[i].p != L->e[i].p))
            L->e[i].punc = 1;
        /* The rule's own intermediates, (M x)' = M' x + M x' forward and
         * 2 y sbar backward, must fit the range too. */
        L->e[i].inner_f = fmaxl(amax, xmax);
        L->e[i].inner_r = ymax;
        L->e[i].inner_r_lo = isinf(ymin) ? 0 : ymin;
        L->e[i].inner_f_lo = isinf(fmin_) ? 0 : fmin_;
        L->e[i].composite = 1;
    }
    for (int j = 0, lo, hi; j < R; j++) {
        row_range(shape, j, C, &lo, &hi);
        for (int l = lo; l < hi; l++)
            for (int l2 = lo; l2 < hi; l2++) {
                ld av = L->val[A[j * C + l2]];
                if (l2 >= l)  /* A_jl A_jl' */
                    sec_add(L, pa[j * C + l], pa[j * C + l2], 2 * xv[l] * xv[l2], 0);
                /* A_jl x_l': 2 (x_l A_jl' + y_j [l = l']) */
                ld h = 2 * (xv[l] * av + (l == l2 ? y[j] : 0));
                sec_add(L, pa[j * C + l], px[l2], h, U2 * EPS * 2 * (fabsl(xv[l] * av) + C * Y[j]));
            }
    }
    for (int l = 0; l < C; l++)
        for (int l2 = l; l2 < C; l2++) {
            ld h = 0;
            for (int j = 0, lo, hi; j < R; j++) {
                row_range(shape, j, C, &lo, &hi);
                if (l >= lo && l < hi && l2 >= lo && l2 < hi)
                    h += 2 * (ld)L->val[A[j * C + l]] * L->val[A[j * C + l2]];
            }
            sec_add(L, px[l], px[l2], h, U2 * EPS * R * fabsl(h));
        }
    free(y), free(Y), free(xv), free(pa), free(px);
}

static void ext_edges(lin *L, const insn *in, int j)
{
    const int *g = L->p->args + in->arg;
    int n = in->len;
    if (n == 0)  /* OP_COLLECTIVE of no arguments: y_j = k (j + 1), a record of no partials */
        return;
    int a = j % n, b = (j + 1) % n, c = (j + 2) % n;
    ld s = in->op == OP_COLLECTIVE ? (ld)in->k : (ld)fuzz_ext_scale;
    ld pa = s * L->val[g[b]], pb = s * L->val[g[a]], pc = cosl((ld)L->val[g[c]]);
    int first = L->ne;
    int ka = edge_add(L, g[a], pa, U1 * EPS * fabsl(pa));
    int kb = edge_add(L, g[b], pb, U1 * EPS * fabsl(pb));
    int kc = edge_add(L, g[c], pc, U1 * EPS * fabsl(pc));
    /* Second partials (the rule with jvp has hvp): s between x_a and x_b
     * (both orders; 2s when a = b), -sin x_c on x_c. */
    ld hc = -sinl((ld)L->val[g[c]]);
    sec_add(L, ka, kb, s, 0);
    sec_add(L, kc, kc, hc, U2 * EPS * fabsl(hc));
    /* Its outputs reach every active argument (documented: the sparse
     * structure, and forward sweeps give them an exact zero tangent), though
     * output j's rule reads three of them. */
    for (int i = 0; i < n; i++)
        if (i != a && i != b && i != c && edge_add(L, g[i], 0, 0) >= 0)
            L->e[L->ne - 1].sonly = 1;
    for (int i = first; i < L->ne; i++)
        L->e[i].zskip = 1;
}

/* ---- recorded-matrix products and maps (OP_MAT_MUL, OP_MAT_MAP) ---- */

/* The partial and second partial of map op (prog.h: an ad_map_op, or the
 * user's function) at x, whose value is v: those of the scalar operation
 * (docs/api.md: the same partial, conventions included; RELU fmax(x, 0),
 * SQUARE x x), LOGISTIC's e / (1 + e)^2 with e = e^-|x|, the user's
 * cos x + 2 a x. */
static part map_part(int op, double xd, double v)
{
    static const int scalar[] = {OP_TANH, OP_EXP, OP_LOG, OP_SQRT, OP_SIN, OP_COS};
    part r = {0, 0, 0, 0};
    ld x = xd;
    if (op <= AD_MAP_COS)
        return unary(scalar[op], xd, v);
    if (op == AD_MAP_RELU) {
        part2 b = binary(OP_FMAX, xd, 0.0, v);
        r.p = b.p[0], r.err = b.err[0], r.p2 = b.h[0], r.err2 = b.err2[0];
        return r;
    }
    if (op == AD_MAP_SQUARE) {
        r.p = 2 * x, r.p2 = 2;
    } else if (op == AD_MAP_LOGISTIC) {
        ld e = expl(-fabsl(x));
        r.p = e / ((1 + e) * (1 + e));
        r.p2 = -r.p * tanhl(x / 2);
        r.err = U1 * EPS * fabsl(r.p);
        r.err2 = U2 * EPS * fabsl(r.p2) + U2 * EPS * fabsl(r.p);  /* tanh(x / 2) near 0 */
    } else {  /* the user's */
        ld a = fuzz_map_scale;
        r.p = cosl(x) + 2 * a * x;
        r.p2 = 2 * a - sinl(x);
        r.err = U1 * EPS * (fabsl(cosl(x)) + fabsl(2 * a * x));
        r.err2 = U2 * EPS * (2 * a + fabsl(sinl(x)));
    }
    if (v != v)  /* a NaN value: so are the partials computed from it */
        r.p = r.p2 = NAN;
    if (op == AD_MAP_SQUARE)
        r.err = U1 * EPS * fabsl(r.p);
    return r;
}

static void map_edge(lin *L, int op, int from, int s)
{
    part r = map_part(op, L->val[from], L->val[s]);
    int k = edge_add(L, from, r.p, r.err);
    sec_add(L, k, k, r.p2, r.err2);
}

/* A MAT_MUL's operands (prog.h): slots (args) or constants, NULL where
 * the other form is used; B is A for kind 3. */
typedef struct matmul_ops {
    const int *As, *Bs, *bs;
    const double *Ac, *Bc, *bc;
} matmul_ops;

static matmul_ops matmul_operands(const prog *p, const insn *in)
{
    matmul_ops r = {0};
    const int *g = p->args + in->arg;
    const double *c = p->consts + in->cst;
    int m = in->rows, k = in->len, n = in->cols, kind = in->mode & 3, at = 0, ct = 0;
    if (kind != 2)
        r.As = g, at += m * k;
    else
        r.Ac = c, ct += m * k;
    if (kind == 0 || kind == 2)
        r.Bs = g + at, at += k * n;
    else if (kind == 1)
        r.Bc = c + ct, ct += k * n;
    else
        r.Bs = r.As;
    if ((in->mode & 12) == 4)
        r.bs = g + at;
    else if (in->mode & 4)
        r.bc = c + ct;
    return r;
}

/* The slots output o of a MAT_MUL or MAT_MAP reads (the node's own
 * earlier outputs for a second stage); into buf (at most 2 * 3 + 2). */
static int matop_reads(const prog *p, const insn *in, int o, int *buf)
{
    int n = 0;
    if (in->op == OP_MAT_MAP) {
        buf[0] = p->args[in->arg + o];
        return 1;
    }
    matmul_ops M = matmul_operands(p, in);
    int m = in->rows, k = in->len, nc = in->cols, stage = in->mode >> 4 & 3, C0 = in->out;
    int i = (o % (m * nc)) / nc, j = o % nc;
    if (o < m * nc) {
        for (int l = 0; l < k; l++) {
            if (M.As)
                buf[n++] = M.As[i * k + l];
            if (M.Bs)
                buf[n++] = M.Bs[l * nc + j];
        }
        if (M.bs)
            buf[n++] = M.bs[i];
    } else if (stage == 3) {
        buf[n++] = C0 + o - m * nc;
    } else {
        for (int l = 0; l < (stage == 1 ? nc : k); l++) {
            if (stage == 1)
                buf[n++] = C0 + i * nc + l;
            else if (M.As)
                buf[n++] = M.As[i * k + l];
            buf[n++] = C0 + l * nc + j;
        }
    }
    return n;
}

/* Output o of a MAT_MUL: C(i, j) = sum_l A(i, l) B(l, j) + bias(i), the
 * partials B(l, j) and A(i, l) (the entries themselves, exact) and the mixed
 * second partial 1; then D = C C or A C from the node's own outputs C, or a
 * map of C. */
static void matmul_edges(lin *L, const insn *in, int o)
{
    matmul_ops M = matmul_operands(L->p, in);
    const double *val = L->val;
    int m = in->rows, k = in->len, n = in->cols, stage = in->mode >> 4 & 3, C0 = in->out;
    int i = (o % (m * n)) / n, j = o % n;
#define VA(i, l) (M.As ? (ld)val[M.As[(i) * k + (l)]] : (ld)M.Ac[(i) * k + (l)])
#define VB(l, j) (M.Bs ? (ld)val[M.Bs[(l) * n + (j)]] : (ld)M.Bc[(l) * n + (j)])
    if (o < m * n) {
        for (int l = 0; l < k; l++) {
            int pa = M.As ? edge_add(L, M.As[i * k + l], VB(l, j), 0) : -1;
            int pb = M.Bs ? edge_add(L, M.Bs[l * n + j], VA(i, l), 0) : -1;
            sec_add(L, pa, pb, 1, 0);
        }
        if (M.bs)
            edge_add(L, M.bs[i], 1, 0);
        return;
    }
    if (stage == 3) {
        map_edge(L, in->sub, C0 + o - m * n, in->out + o);
        return;
    }
    for (int l = 0; l < (stage == 1 ? n : k); l++) {
        int left = stage == 1 ? C0 + i * n + l : M.As ? M.As[i * k + l] : -1, right = C0 + l * n + j;
        ld lv = stage == 1 ? (ld)val[left] : VA(i, l);
        int pa = left >= 0 ? edge_add(L, left, val[right], 0) : -1;
        int pb = edge_add(L, right, lv, 0);
        sec_add(L, pa, pb, 1, 0);
    }
#undef VA
#undef VB
}

/* ---- one instruction ---- */

static void scalar_edges(lin *L, const insn *in, int s)
{
    const double *val = L->val;
    if (in->op == OP_BRANCH) {
        edge_add(L, branch_holds(in->mode, val[in->a], val[in->b]) ? in->c : in->d, 1, 0);
    } else if (in->op >= OP_FIRST_UNARY && in->op < OP_FIRST_BINARY) {
        part r = unary(in->op, val[in->a], val[s]);
        int k = edge_add(L, in->a, r.p, r.err);
        sec_add(L, k, k, r.p2, r.err2);
    } else if (in->op >= OP_FIRST_BINARY) {
        double a = in->mode == 2 ? in->k : val[in->a];
        double b = in->mode == 0 ? val[in->b] : in->mode == 1 ? in->k : val[in->a];
        part2 r = binary(in->op, a, b, val[s]);
        int ka = in->mode != 2 ? edge_add(L, in->a, r.p[0], r.err[0]) : -1;
        int kb = in->mode == 0 ? edge_add(L, in->b, r.p[1], r.err[1])
               : in->mode == 2 ? edge_add(L, in->a, r.p[1], r.err[1]) : -1;
        sec_add(L, ka, ka, r.h[0], r.err2[0]);
        sec_add(L, ka, kb, r.h[1], r.err2[1]);
        sec_add(L, kb, kb, r.h[2], r.err2[2]);
        /* k < l stands for both orders of a mixed partial: for the pair
         * (ka, kb) of one slot read twice that is still right. */
    }
}

static void array_edges(lin *L, const insn *in, int s, int n2nd)
{
    const int *g = L->p->args + in->arg;
    const double *c = L->p->consts + in->cst;
    int n = in->len, R = in->rows, o = s - in->out;
    double *x = malloc(((size_t)n + 1) * sizeof *x);
    for (int i = 0; i < n && in->op <= OP_LSE; i++)  /* args[0..n) are the elements */
        x[i] = L->val[g[i]];
    switch (in->op) {
    case OP_SUM: for (int i = 0; i < n; i++) edge_add(L, g[i], 1, 0); break;
    case OP_DOT:
        for (int i = 0; i < n && in->mode; i++) {  /* x with itself: a squared norm */
            int a = edge_add(L, g[i], 2 * (ld)x[i], 0);
            sec_add(L, a, a, 2, 0);
        }
        for (int i = 0; i < n && !in->mode; i++) {
            const int *y = g + n;
            int a = edge_add(L, g[i], L->val[y[i]], 0), b = edge_add(L, y[i], x[i], 0);
            sec_add(L, a, b, 1, 0);
        }
        break;
    case OP_DOT_RD: for (int i = 0; i < n; i++) edge_add(L, g[i], c[i], 0); break;
    case OP_SQNORM:
        for (int i = 0; i < n; i++) {
            int a = edge_add(L, g[i], 2 * (ld)x[i], 0);
            sec_add(L, a, a, 2, 0);
        }
        break;
    case OP_PROD: prod_edges(L, in, x, n2nd); break;
    case OP_LSE: lse_edges(L, in, x, n2nd); break;
    case OP_MATVEC: matrow_edges(L, NULL, c, 0, o, n, g, NULL); break;
    case OP_MATVEC_RR: matrow_edges(L, g, NULL, 0, o, n, g + R * n, NULL); break;
    case OP_AXPY: {
        int kx = edge_add(L, in->mode ? g[n + o] : g[o], in->k, 0);
        int ky = edge_add(L, g[n + o], 1, 0);
        if (kx < 0 && ky >= 0)
            L->e[L->ne - 1].alias = 1;  /* x constant: y keeps its ID */
        break;
    }
    case OP_MAT_VEC: {
        int shape = mat_shape(L, g, R, n), which = o / (R ? R : 1);
        const int *xs = in->mode == 1 ? NULL : g + R * n + which * n;
        matrow_edges(L, g, NULL, shape, o % (R ? R : 1), n, xs, in->mode == 1 ? c : NULL);
        break;
    }
    case OP_MAT_SQNORM:
        matsq_edges(L, g, mat_shape(L, g, R, n), R, n, in->mode == 1 ? NULL : g + R * n,
                    in->mode == 1 ? c : NULL);
        break;
    case OP_EXTERNAL: case OP_COLLECTIVE: ext_edges(L, in, o); break;
    case OP_MAT_MUL: matmul_edges(L, in, o); break;
    case OP_MAT_MAP: map_edge(L, in->sub, g[o], s); break;
    default: abort();
    }
    free(x);
}

static int mat_shape(const lin *L, const int *A, int R, int C);
static void row_range(int shape, int j, int C, int *lo, int *hi);

/* The inputs in the structure of everything in reads (for phantom records). */
static uint32_t args_smask(const lin *L, const insn *in, int o)
{
    uint32_t m = 0;
    const int *g = L->p->args + in->arg;
    if (in->op == OP_AXPY)
        return L->smask[g[in->len + o]] | L->smask[g[in->mode ? in->len + o : o]];
    if (in->op == OP_BRANCH)
        return L->smask[branch_holds(in->mode, L->val[in->a], L->val[in->b]) ? in->c : in->d];
    if (in->op < OP_FIRST_ARRAY)
        return L->smask[in->a] | (in->op >= OP_FIRST_BINARY && in->mode == 0 ? L->smask[in->b] : 0);
    if (in->op == OP_MAT_VEC || in->op == OP_MAT_SQNORM)
        return 0;  /* a phantom row read only constants: it reaches nothing */
    if (in->op == OP_MAT_MUL || in->op == OP_MAT_MAP) {  /* what the entry reads (its block's reach) */
        int buf[16], nr = matop_reads(L->p, in, o, buf);
        for (int t = 0; t < nr; t++)
            m |= L->smask[buf[t]];
        return m;
    }
    if (in->op == OP_MATVEC_RR) {  /* row o of A, and x */
        for (int l = 0; l < in->len; l++)
            m |= L->smask[g[o * in->len + l]] | L->smask[g[in->rows * in->len + l]];
        return m;
    }
    int na = in->op == OP_DOT && !in->mode ? 2 * in->len : in->len;
    for (int i = 0; i < na && in->arg + i < L->p->nargs; i++)
        m |= L->smask[L->p->args[in->arg + i]];
    return m;
}

/* Which outputs the library records: the active ones, and every output of
 * an operation that reads a record, although the oracle finds it constant
 * (a row of a product with a recorded matrix whose entries in that row are
 * all constant, and what is computed from it). */
static void mark_recorded(lin *L, const insn *in)
{
    int any = 0;
    if (in->op == OP_LOOPOUT) {  /* the library's loop: every output a record */
        for (int i = 0; in->steps > 0 && i < in->len; i++)
            any |= L->recd[L->p->args[in->arg + i]];
        L->recd[in->out] = L->active[in->out] || L->recd[in->a] || any;
        return;
    }
    if (in->op == OP_COLLECTIVE) {  /* active set: recorded, whatever it reads */
        for (int s = in->out; s < in->out + in->nout; s++) {
            L->recd[s] = 1;
            if (!L->active[s])  /* a phantom record: its structure is what it reads */
                L->smask[s] |= args_smask(L, in, s - in->out);
        }
        return;
    }
    if (in->op == OP_NESTIN || in->op == OP_NESTOUT) {  /* copies */
        L->recd[in->out] = L->active[in->out] || L->recd[in->a];
        return;
    }
    if (in->op == OP_BRANCH)
        any = L->recd[branch_holds(in->mode, L->val[in->a], L->val[in->b]) ? in->c : in->d];
    else if (in->op >= OP_FIRST_UNARY && in->op < OP_FIRST_ARRAY)
        any = L->recd[in->a] || (in->mode == 0 && in->op >= OP_FIRST_BINARY && L->recd[in->b]);
    else if (in->op >= OP_FIRST_ARRAY) {
        int na = in->len;
        switch (in->op) {
        case OP_DOT: na = in->mode ? in->len : 2 * in->len; break;
        case OP_AXPY: na = 2 * in->len; break;
        case OP_MATVEC_RR: na = in->rows * in->len + in->len; break;
        case OP_MAT_VEC: na = in->rows * in->len + (in->mode == 1 ? 0 : in->mode == 2 ? 2 * in->len : in->len); break;
        case OP_MAT_SQNORM: na = in->rows * in->len + (in->mode == 1 ? 0 : in->len); break;
        case OP_MAT_MUL: case OP_MAT_MAP: na = prog_nargs(in); break;  /* one block: all or none */
        default: break;
        }
        for (int i = 0; i < na; i++)
            any |= L->recd[L->p->args[in->arg + i]];
    }
    if (in->op == OP_MAT_VEC || in->op == OP_MAT_SQNORM) {
        /* a block for every row once the matrix itself is recorded */
        int m_active = 0, R = in->rows, C = in->len;
        const int *A = L->p->args + in->arg;
        for (int i = 0; i < R * C; i++)
            m_active |= L->recd[A[i]];
        if (m_active || in->mode == 1) {
            any = m_active && R > 0;
        } else {  /* a constant matrix: a dot record for each row whose x, inside the shape, is */
            int shape = mat_shape(L, A, R, C), nx = in->mode == 2 ? 2 : 1;
            for (int s = in->out; s < in->out + in->nout; s++) {
                int o = s - in->out, lo, hi, rec = 0;
                for (int j = 0; j < R; j++) {
                    if (in->op == OP_MAT_VEC && j != o % R)
                        continue;
                    row_range(shape, j, C, &lo, &hi);
                    for (int w = 0; w < nx; w++)
                        for (int l = lo; l < hi; l++)
                            if (in->op == OP_MAT_SQNORM || w == o / R)
                                rec |= L->recd[A[R * C + w * C + l]];
                }
                L->recd[s] = L->active[s] || rec;
            }
            return;
        }
    }
    const int *g = L->p->args + in->arg;
    for (int s = in->out; s < in->out + in->nout; s++) {
        int o = s - in->out, C = in->len, row = 0;
        if (in->op == OP_AXPY)  /* element o: x[o] (y[o] when x is y) and y[o] */
            any = L->recd[g[C + o]] || L->recd[g[in->mode ? C + o : o]];
        if (in->op == OP_MATVEC_RR) {  /* row o of A, and x */
            for (int l = 0; l < C; l++)
                row |= L->recd[g[o * C + l]] || L->recd[g[in->rows * C + l]];
            any = row;
        }
        L->recd[s] = L->active[s] || any;
        if (L->recd[s] && !L->active[s])  /* a phantom record: its structure is what it reads */
            L->smask[s] |= args_smask(L, in, s - in->out);
    }
}

/* |p| e, 0 where e is 0 (p may be infinite) */
static ld emag(ld p, ld e) { return e == 0 ? 0 : fabsl(p) * e; }

/* A program with nested calls written out (prog.c prog_unnest,
 * lin_approx set): the values of a written-out sweep are the library's
 * only to rounding (its own formulas for the partials, its own order of
 * the sums).  Ev[s] bounds |value here - exact| + |library's - exact|
 * (the operands' Ev propagated by the partials, and U1 roundings of its
 * own); a partial that is a function of such values takes the error their
 * Ev brings (the second partials times it), and where a value, an operand
 * or a partial on the way is not finite, or near the end of the range,
 * the class of what it reaches is not predicted (the library's values
 * there are its formulas', not ours: 0 x Inf on one side only).  A value
 * forced to a convention (NESTOUT mode 1) passes on a derivative that is
 * not predicted either.
 *
 * operand_err: the error an operand of a written-out sweep's instruction
 * brings: its own bound, and at least its rounding (a formula from a
 * rounded result, hypot's a / r, takes r's rounding, which a subnormal r
 * makes large). */
static ld operand_err(const ld *Ev, const double *val, int s, int approx)
{
    ld v = fabsl((ld)val[s]), r = v >= (ld)DBL_MIN ? 0x1p-53L * v : 0x1p-1075L;
    return approx && isfinite(v) && r > Ev[s] ? r : Ev[s];
}

static void approx_slot(lin *L, const insn *in, int s, ld *Ev)
{
    const double *val = L->val;
    int e0 = L->e0[s], e1 = L->ne, bad = !isfinite(val[s]), ap = lin_approx[s];
    ld E = 0;
    if (in->op >= OP_FIRST_UNARY && in->op < OP_FIRST_BINARY) {
        part r = unary(in->op, val[in->a], val[s]);
        ld ea = operand_err(Ev, val, in->a, ap);
        E = emag(r.p, ea);
        for (int e = e0; e < e1; e++)
            L->e[e].err += emag(r.p2, ea);
        bad |= !isfinite(val[in->a]);
    } else if (in->op >= OP_FIRST_BINARY && in->op < OP_FIRST_ARRAY) {
        double a = in->mode == 2 ? in->k : val[in->a];
        double b = in->mode == 0 ? val[in->b] : in->mode == 1 ? in->k : val[in->a];
        part2 r = binary(in->op, a, b, val[s]);
        ld ea = in->mode != 2 ? operand_err(Ev, val, in->a, ap) : 0;
        ld eb = in->mode == 0 ? operand_err(Ev, val, in->b, ap) : in->mode == 2 ? operand_err(Ev, val, in->a, ap) : 0;
        E = emag(r.p[0], ea) + emag(r.p[1], eb);
        ld err[2] = {emag(r.h[0], ea) + emag(r.h[1], eb), emag(r.h[1], ea) + emag(r.h[2], eb)};
        /* the edges in the order scalar_edges adds them: towards a (modes 0, 1), then b */
        int side = in->mode == 2 ? 1 : 0;
        for (int e = e0; e < e1; e++) {
            if (in->mode == 0 && side == 0 && L->e[e].from != in->a)
                side = 1;  /* a is constant: the only edge is b's */
            L->e[e].err += err[side];
            side = 1;
        }
        bad |= !isfinite(a) || !isfinite(b);
    } else if (in->op == OP_BRANCH) {
        E = Ev[branch_holds(in->mode, val[in->a], val[in->b]) ? in->c : in->d];
    } else if (in->op == OP_NESTIN) {
        E = Ev[in->a];
    } else if (in->op == OP_NESTOUT) {
        /* the library's value: exact (mode 0), or the convention (mode 1, below);
         * the derivative is the written-out one's, of another class where its
         * value is */
        int ca = isnan(val[in->a]) ? 1 : isinf(val[in->a]) ? 2 + (val[in->a] < 0) : 0;
        int cs = isnan(val[s]) ? 1 : isinf(val[s]) ? 2 + (val[s] < 0) : 0;
        bad |= ca != cs || !isfinite(val[in->a]) || in->mode == 1 ||
               fabsl((ld)val[in->a]) + Ev[in->a] >= (ld)DBL_MAX;
    } else if (in->op != OP_CONST && in->op != OP_NEST) {  /* an array: products of exact elements */
        for (int i = 0; i < prog_nargs(in); i++) {
            int a = L->p->args[in->arg + i];
            if (Ev[a] > 0)
                E = INFINITY;  /* not modelled: not predicted (below) */
            bad |= !isfinite(val[a]);
        }
        if (in->op == OP_PROD && lin_approx[s])  /* the library's prefix and suffix products: len roundings more */
            E += 2 * (in->len + 2) * EPS * fabsl((ld)val[s]);
    }
    if (lin_approx[s])
        E += U1 * EPS * fabsl((ld)val[s]);
    Ev[s] = E == E ? E : INFINITY;
    /* An error without a bound: the class and the value of what it
     * reaches are not predicted (an infinite error bound would make NaN
     * of the passes' 0 x Inf), nor of what reads it. */
    int unbounded = !isfinite(Ev[s]);
    for (int e = e0; e < e1; e++)
        if (!isfinite(L->e[e].err)) {
            L->e[e].err = 0;
            unbounded = 1;
        }
    if (!lin_approx[s] && in->op != OP_NESTOUT && !unbounded)
        return;
    for (int e = e0; e < e1; e++)
        bad |= !isfinite((double)L->e[e].p);
    bad |= unbounded || fabsl((ld)val[s]) + Ev[s] >= (ld)DBL_MAX;
    for (int e = e0; e < e1 && bad; e++)
        L->e[e].punc = 1;
}

void lin_build(lin *L, const prog *p, const double *val)
{
    memset(L, 0, sizeof *L);
    L->p = p;
    L->n = p->n, L->m = p->m, L->nslots = p->nslots;
    L->val = val;
    size_t ns = (size_t)p->nslots + 2;
    L->e0 = calloc(ns, sizeof *L->e0);
    L->h0 = calloc(ns, sizeof *L->h0);
    L->active = calloc(ns, 1);
    L->recd = calloc(ns, 1);
    L->fan = calloc(ns, sizeof *L->fan);
    L->imask = calloc(ns, sizeof *L->imask);
    L->smask = calloc(ns, sizeof *L->smask);
    L->omask = calloc(ns, sizeof *L->omask);
    ld *Ev = lin_approx ? calloc(ns, sizeof *Ev) : NULL;
    for (int s = 0; s < p->n; s++) {
        slot_begin(L, s);
        slot_end(L, s);
        L->recd[s] = 1;
    }
    for (int j = 0; j < p->ncode; j++) {
        const insn *in = &p->code[j];
        for (int s = in->out; s < in->out + in->nout; s++) {
            slot_begin(L, s);
            L->nslots_built = s;
            if (in->op >= OP_FIRST_ARRAY)
                array_edges(L, in, s, 64);
            else if (in->op == OP_LOOPOUT || in->op == OP_NESTIN || in->op == OP_NESTOUT)
                edge_add(L, in->a, 1, 0);
            else if (in->op != OP_CONST && in->op != OP_NEST)
                scalar_edges(L, in, s);
            int one = L->ne - L->e0[s] == 1;
            if (lin_approx)
                approx_slot(L, in, s, Ev);
            if (one && (in->op == OP_BRANCH || in->op == OP_LOOPOUT || in->op == OP_NESTIN ||
                        in->op == OP_NESTOUT || (in->op == OP_ADD && in->mode != 0) ||
                        (in->op == OP_SUB && in->mode == 1) ||
                        ((in->op == OP_ADD || in->op == OP_SUB) && in->mode == 0 && L->e[L->e0[s]].p == 1)))
                L->e[L->e0[s]].alias = 1;
            slot_end(L, s);
        }
        mark_recorded(L, in);
    }
    free(Ev);
    for (int j = 0; j < p->m; j++)
        L->omask[p->outs[j]] |= 1u << j;
    for (int i = 0; i < L->ne; i++)
        L->fan[L->e[i].from]++;
    if (getenv("FUZZ_DEBUG"))  /* the linearisation, for reading a failure */
        for (int s = 0; s < p->nslots; s++) {
            fprintf(stderr, "s%d = %.17g%s:", s, val[s], L->active[s] ? "" : " (constant)");
            for (int i = L->e0[s]; i < L->e0[s + 1]; i++)
                fprintf(stderr, " d/ds%d %.6Lg", L->e[i].from, L->e[i].p);
            fprintf(stderr, "\n");
        }
    for (int s = p->nslots - 1; s >= 0; s--)
        for (int i = L->e0[s]; i < L->e0[s + 1]; i++)
            L->omask[L->e[i].from] |= L->omask[s];
}

int oracle_singular(const lin *L, const insn *in, int s)
{
    const double *val = L->val;
    if (in->op >= OP_FIRST_UNARY && in->op < OP_FIRST_BINARY) {
        part r = unary(in->op, val[in->a], val[s]);
        return !isfinite((double)r.p) || !isfinite((double)r.p2);
    }
    if (in->op >= OP_FIRST_BINARY && in->op < OP_FIRST_ARRAY) {
        double a = in->mode == 2 ? in->k : val[in->a];
        double b = in->mode == 0 ? val[in->b] : in->mode == 1 ? in->k : val[in->a];
        part2 r = binary(in->op, a, b, val[s]);
        int bad = 0, two = in->op == OP_POW || in->op == OP_DIV;
        for (int i = 0; i < 2; i++)
            bad |= !isfinite((double)r.p[i]);
        for (int i = 0; i < 3; i++)  /* pow's and division's out of the normal range: NaN */
            bad |= !isfinite((double)r.h[i]) || (two && r.h[i] != 0 && fabsl(r.h[i]) < (ld)DBL_MIN);
        return bad;
    }
    if (insn_map_op(in) >= 0 && (in->op == OP_MAT_MAP || s - in->out >= in->rows * in->cols)) {
        int from = in->op == OP_MAT_MAP ? L->p->args[in->arg + s - in->out] : s - in->rows * in->cols;
        part r = map_part(insn_map_op(in), val[from], val[s]);
        if (!isfinite(val[from]) || !isfinite((double)r.p) || !isfinite((double)r.p2))
            return 1;
    }
    if (in->op == OP_MAT_MUL) {  /* wrapped entries, and C for a second stage */
        for (int i = 0; i < prog_nconsts(in); i++)
            if (!isfinite(L->p->consts[in->cst + i]))
                return 1;
        for (int t = in->out; s - in->out >= in->rows * in->cols && t < in->out + in->rows * in->cols; t++)
            if (!isfinite(val[t]))
                return 1;
    }
    if (in->op >= OP_FIRST_ARRAY) {  /* a non-finite element; a product's partials, large ones */
        int na = prog_nargs(in), prod = in->op == OP_PROD || in->op == OP_SQNORM || in->op == OP_DOT;
        for (int i = 0; i < na; i++) {
            double x = val[L->p->args[in->arg + i]];
            if (!isfinite(x) || (prod && fabs(x) >= 1e150))
                return 1;
        }
    }
    return 0;
}

ld oracle_partial_max(const lin *L, const insn *in, int s)
{
    const double *val = L->val;
    ld m = 0;
    if (in->op >= OP_FIRST_UNARY && in->op < OP_FIRST_BINARY) {
        part r = unary(in->op, val[in->a], val[s]);
        m = fmaxl(fabsl(r.p), fabsl(r.p2));
    } else if (in->op >= OP_FIRST_BINARY && in->op < OP_FIRST_ARRAY) {
        double a = in->mode == 2 ? in->k : val[in->a];
        double b = in->mode == 0 ? val[in->b] : in->mode == 1 ? in->k : val[in->a];
        part2 r = binary(in->op, a, b, val[s]);
        for (int i = 0; i < 2; i++)
            m = fmaxl(m, fabsl(r.p[i]));
        for (int i = 0; i < 3; i++)
            m = fmaxl(m, fabsl(r.h[i]));
    } else if (in->op >= OP_FIRST_ARRAY) {  /* the elements, as a product's partials */
        for (int i = 0; i < prog_nargs(in); i++)
            m = fmaxl(m, fabsl((ld)val[L->p->args[in->arg + i]]));
        for (int i = 0; in->op == OP_MAT_MUL && i < prog_nconsts(in); i++)
            m = fmaxl(m, fabsl((ld)L->p->consts[in->cst + i]));
        for (int t = in->out; in->op == OP_MAT_MUL && t < s; t++)  /* C, for a second stage */
            m = fmaxl(m, fabsl((ld)val[t]));
        if (insn_map_op(in) >= 0 && (in->op == OP_MAT_MAP || s - in->out >= in->rows * in->cols)) {
            int from = in->op == OP_MAT_MAP ? L->p->args[in->arg + s - in->out] : s - in->rows * in->cols;
            part r = map_part(insn_map_op(in), val[from], val[s]);
            m = fmaxl(m, fmaxl(fabsl(r.p), fabsl(r.p2)));
        }
    }
    return m != m ? INFINITY : m;
}

void lin_free(lin *L)
{
    free(L->e0), free(L->h0), free(L->e), free(L->h);
    free(L->active), free(L->recd), free(L->fan), free(L->imask), free(L->smask), free(L->omask);
    memset(L, 0, sizeof *L);
}
