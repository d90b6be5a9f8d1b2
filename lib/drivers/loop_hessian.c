/* dualrev: a checkpointed loop in a sparse Hessian (ad_sparse_hessian,
 * ad_sparse_hessian_values): edge pushing carried through the steps.
 *
 * Write s_k for the state before step k, p for the params, and
 * E_k = [J_s J_p; 0 I] for step k's Jacobian with respect to (s_k, p),
 * extended by the params' identity.  The caller's sweep reaches the loop
 * with the outputs' cotangents ybar and the set of outputs it reached.
 * Taking the steps from the last down (loop.c's reverse schedule), this
 * file carries over (state, params):
 *   lam  the cotangents (lam_N = ybar; lam_k = E_k^T lam_{k+1});
 *   R    the loop's Jacobian rows of the reached outputs (R_N = I on
 *        them; R_k = R_{k+1} E_k);
 *   W    the interactions, a symmetric matrix kept as its lower triangle
 *        (W_N = 0; W_k = E_k^T W_{k+1} E_k + sum_i lam_i H_k,i, H_k,i the
 *        Hessian of step k's output i);
 *   reach which entries the reached outputs reach (the columns of R).
 * At the end R is the loop's Jacobian, lam (params: summed over steps)
 * its cotangents and W its Hessian weighted by ybar: what edge pushing
 * (edge_push.c) asks of a block.  Step k's J_s, J_p come from
 * ad_sparse_jacobian of its reached outputs, and the weighted Hessian and
 * lam_k from ad_sparse_hessian of z = sum lam_i y_i over the reached
 * outputs (ad_dot_rd), both one nesting level down: each keeps the
 * structure the step's records reach, so W and R have the structure of
 * the loop written out, to the pair, with no entry for an output the
 * caller's sweep did not reach.
 *
 * R and W are lists of (row << 32 | column, value), sorted and merged
 * after each step (a radix sort on the keys). */
#include <math.h>
#include <string.h>

#include "loop_hessian.h"
#include "status.h"

typedef struct cell {
    uint64_t key;  /* row << 32 | column */
    double v;
} cell;

typedef struct list {
    cell *c;
    size_t len, cap;
} list;

struct ad_loop_edges {
    size_t n, np, nx;
    double *lam;           /* nx: the states' cotangents, then the params' (summed) */
    unsigned char *reach;  /* nx: reached states, then params (kept once reached) */
    uint32_t *live;        /* the state entries the step's outputs are reached at */
    size_t nlive;
    uint32_t *rowof;       /* n: row of J for a state entry, or UINT32_MAX */
    double *wlive;         /* nlive: their cotangents */
    ad_real *ybuf;         /* n: a step's outputs */
    list R, W, tmp;        /* tmp: the sort's other half, and a product's cells */
    int over;              /* a step's sweep overflowed: the results are NaN */
};

static void list_free(list *l)
{
    ad_free(l->c);
    memset(l, 0, sizeof *l);
}

void ad_loop_edges_free(ad_loop_edges *E)
{
    if (!E)
        return;
    ad_free(E->lam);
    ad_free(E->reach);
    ad_free(E->live);
    ad_free(E->rowof);
    ad_free(E->wlive);
    ad_free(E->ybuf);
    list_free(&E->R);
    list_free(&E->W);
    list_free(&E->tmp);
    ad_free(E);
}

static int push_cell(list *l, uint32_t r, uint32_t c, double v)
{
    if (ad_grow((void **)&l->c, &l->cap, l->len + 1, sizeof *l->c, l->len) != AD_OK)
        return 0;
    l->c[l->len++] = (cell){(uint64_t)r << 32 | c, v};
    return 1;
}

ad_loop_edges *ad_loop_edges_new(size_t n, size_t np, const unsigned char *outs,
                                 const double *ybar, ad_status *s)
{
    size_t nx = n + np;
    *s = AD_ERANGE;
    if (nx >= UINT32_MAX || nx > SIZE_MAX / 16)
        return NULL;
    *s = AD_ENOMEM;
    ad_loop_edges *E = ad_alloc(sizeof *E);
    if (!E)
        return NULL;
    memset(E, 0, sizeof *E);
    E->n = n;
    E->np = np;
    E->nx = nx;
    E->lam = ad_alloc(nx * sizeof *E->lam);
    E->reach = ad_alloc(nx);
    E->live = ad_alloc(n * sizeof *E->live);
    E->rowof = ad_alloc(n * sizeof *E->rowof);
    E->wlive = ad_alloc(n * sizeof *E->wlive);
    E->ybuf = ad_alloc(n * sizeof *E->ybuf);
    if (!E->lam || !E->reach || !E->live || !E->rowof || !E->wlive || !E->ybuf) {
        ad_loop_edges_free(E);
        return NULL;
    }
    memset(E->lam, 0, nx * sizeof *E->lam);
    memset(E->reach, 0, nx);
    for (size_t i = 0; i < n; i++) {
        E->lam[i] = ybar[i];
        E->reach[i] = outs[i] != 0;
        if (outs[i] && !push_cell(&E->R, (uint32_t)i, (uint32_t)i, 1.0)) {
            ad_loop_edges_free(E);
            return NULL;
        }
    }
    *s = AD_OK;
    return E;
}

int ad_loop_edges_overflowed(const ad_loop_edges *E)
{
    return E->over;
}

/* ---- sorting and merging the cells ---- */

/* l sorted by key (LSD radix, a byte at a time, skipping bytes all keys
 * share), tmp as the other half; then equal keys merged. */
static int sort_merge(list *l, list *tmp)
{
    if (l->len < 2)
        return 1;
    if (ad_reserve((void **)&tmp->c, &tmp->cap, l->len, sizeof *tmp->c) != AD_OK)
        return 0;
    uint64_t all_or = 0, all_and = ~(uint64_t)0;
    for (size_t q = 0; q < l->len; q++) {
        all_or |= l->c[q].key;
        all_and &= l->c[q].key;
    }
    cell *a = l->c, *b = tmp->c;
    for (unsigned shift = 0; shift < 64; shift += 8) {
        if ((((all_or ^ all_and) >> shift) & 0xff) == 0)
            continue;  /* every key has the same byte here */
        size_t count[257] = {0};
        for (size_t q = 0; q < l->len; q++)
            count[((a[q].key >> shift) & 0xff) + 1]++;
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (size_t q = 0; q < l->len; q++)
            b[count[(a[q].key >> shift) & 0xff]++] = a[q];
        cell *x = a;
        a = b;
        b = x;
    }
    if (a != l->c) {  /* the sorted cells are in tmp's array: swap the arrays */
        cell *x = l->c;
        size_t cap = l->cap;
        l->c = tmp->c;
        l->cap = tmp->cap;
        tmp->c = x;
        tmp->cap = cap;
    }
    size_t out = 0;
    for (size_t q = 0; q < l->len; q++) {
        if (out && l->c[out - 1].key == l->c[q].key)
            l->c[out - 1].v += l->c[q].v;
        else
            l->c[out++] = l->c[q];
    }
    l->len = out;
    return 1;
}

/* ---- one step ---- */

typedef struct step_call {
    ad_loop_edges *E;
    ad_step_fn step;
    void *ctx;
    size_t k;
} step_call;

/* The step on x = (state, params), its outputs in E->ybuf. */
static void run_step(const step_call *c, const ad_real *x)
{
    ad_loop_edges *E = c->E;
    for (size_t i = 0; i < E->n; i++)
        E->ybuf[i] = ad_const(NAN);  /* what the step leaves unwritten */
    c->step(c->k, x, E->ybuf, E->n, x + E->n, E->np, c->ctx);
}

/* The reached outputs, for the step's Jacobian. */
static void reached_outputs(const ad_real *x, size_t nx, ad_real *y, size_t m, void *ctx)
{
    const step_call *c = ctx;
    (void)nx;
    run_step(c, x);
    for (size_t r = 0; r < m; r++)
        y[r] = c->E->ybuf[c->E->live[r]];
}

/* z = sum lam_i y_i over the reached outputs. */
static ad_real weighted(const ad_real *x, size_t nx, void *ctx)
{
    const step_call *c = ctx;
    ad_loop_edges *E = c->E;
    (void)nx;
    run_step(c, x);
    for (size_t r = 0; r < E->nlive; r++)  /* gathered in place: ybuf is the step's again next call */
        E->ybuf[r] = E->ybuf[E->live[r]];
    return ad_dot_rd(E->nlive, E->ybuf, E->wlive);
}

/* Row u of E_k: J's row of state entry u, or the identity of param u. */
static size_t erow(const ad_loop_edges *E, const ad_csr *J, uint32_t u, const size_t **col,
                   const double **val, size_t *self)
{
    if (u >= E->n) {
        *self = u;
        *col = self;
        static const double one = 1.0;
        *val = &one;
        return 1;
    }
    uint32_t r = E->rowof[u];
    if (r == UINT32_MAX)
        return 0;
    *col = J->col + J->row_ptr[r];
    *val = J->val + J->row_ptr[r];
    return J->row_ptr[r + 1] - J->row_ptr[r];
}

/* R E_k into tmp, then R. */
static int pull_rows(ad_loop_edges *E, const ad_csr *J)
{
    list *R = &E->R, *T = &E->tmp;
    T->len = 0;
    for (size_t q = 0; q < R->len; q++) {
        uint32_t o = (uint32_t)(R->c[q].key >> 32), u = (uint32_t)R->c[q].key;
        const size_t *col;
        const double *val;
        size_t self, len = erow(E, J, u, &col, &val, &self);
        for (size_t a = 0; a < len; a++)
            if (!push_cell(T, o, (uint32_t)col[a], val[a] * R->c[q].v))
                return 0;
    }
    list x = *R;
    *R = *T;
    *T = x;
    return sort_merge(R, T);
}

/* Lower-triangle W_{a,b} += v (a, b in either order). */
static int add_lower(list *l, size_t a, size_t b, double v)
{
    return a >= b ? push_cell(l, (uint32_t)a, (uint32_t)b, v) : push_cell(l, (uint32_t)b, (uint32_t)a, v);
}

/* E_k^T W E_k + H into tmp, then W.  A pair (u, v), u > v, of weight w
 * gives each pair of their rows' entries e_a, e_b the term e_a (e_b w),
 * twice where a = b; a diagonal (u, u) each unordered pair of u's row's
 * entries once (as edge_push.c's push). */
static int pull_pairs(ad_loop_edges *E, const ad_csr *J, const ad_csr *H)
{
    list *W = &E->W, *T = &E->tmp;
    T->len = 0;
    for (size_t q = 0; q < W->len; q++) {
        uint32_t u = (uint32_t)(W->c[q].key >> 32), v = (uint32_t)W->c[q].key;
        double w = W->c[q].v;
        const size_t *cu, *cv;
        const double *eu, *ev;
        size_t su, sv, lu = erow(E, J, u, &cu, &eu, &su);
        if (u == v) {
            for (size_t a = 0; a < lu; a++)
                for (size_t b = 0; b <= a; b++)
                    if (!add_lower(T, cu[a], cu[b], eu[a] * (eu[b] * w)))
                        return 0;
            continue;
        }
        size_t lv = erow(E, J, v, &cv, &ev, &sv);
        for (size_t a = 0; a < lu; a++)
            for (size_t b = 0; b < lv; b++)
                if (!add_lower(T, cu[a], cv[b], (cu[a] == cv[b] ? 2.0 : 1.0) * (eu[a] * (ev[b] * w))))
                    return 0;
    }
    for (size_t r = 0; r < H->rows; r++)
        for (size_t e = H->row_ptr[r]; e < H->row_ptr[r + 1]; e++)
            if (!push_cell(T, (uint32_t)r, (uint32_t)H->col[e], H->val[e]))
                return 0;
    list x = *W;
    *W = *T;
    *T = x;
    return sort_merge(W, T);
}

/* A step's sweep that overflowed: the results NaN, the caller's sweep
 * told by ad_loop_edges_overflowed. */
static void overflowed(ad_loop_edges *E)
{
    E->over = 1;
    ad_fill_nan(E->lam, E->nx);
    for (size_t q = 0; q < E->R.len; q++)
        E->R.c[q].v = NAN;
    for (size_t q = 0; q < E->W.len; q++)
        E->W.c[q].v = NAN;
}

ad_status ad_loop_edges_step(ad_loop_edges *E, ad_step_fn step, void *ctx, size_t k,
                             const double *state, const double *params)
{
    size_t n = E->n, np = E->np, nx = E->nx;
    if (E->over)
        return AD_OK;
    E->nlive = 0;
    for (size_t i = 0; i < n; i++) {
        E->rowof[i] = UINT32_MAX;
        if (E->reach[i]) {
            E->rowof[i] = (uint32_t)E->nlive;
            E->wlive[E->nlive] = E->lam[i];
            E->live[E->nlive++] = (uint32_t)i;
        }
    }
    if (!E->nlive) {
        memset(E->lam, 0, n * sizeof *E->lam);
        return AD_OK;  /* nothing reaches further back */
    }
    double *x = ad_alloc((2 * nx + 1) * sizeof *x), *g = x ? x + nx : NULL;
    if (!x)
        return AD_ENOMEM;
    memcpy(x, state, n * sizeof *x);
    memcpy(x + n, params, np * sizeof *x);
    step_call c = {E, step, ctx, k};
    ad_csr J, H;
    double *y = ad_alloc(E->nlive * sizeof *y), fz;
    ad_status s = y ? ad_sparse_jacobian(reached_outputs, &c, nx, x, E->nlive, y, &J) : AD_ENOMEM;
    if (s == AD_OK) {
        s = ad_sparse_hessian(weighted, &c, nx, x, &fz, g, &H);
        if (s != AD_OK)
            ad_csr_free(&J);
    }
    ad_free(y);
    if (s == AD_EOVERFLOW) {
        overflowed(E);
        ad_free(x);
        return AD_OK;
    }
    if (s == AD_OK) {
        s = pull_rows(E, &J) && pull_pairs(E, &J, &H) ? AD_OK : AD_ENOMEM;
        /* the reach: what the reached outputs' rows touch */
        memset(E->reach, 0, n);
        for (size_t e = 0; e < J.nnz; e++)
            E->reach[J.col[e]] = 1;
        memcpy(E->lam, g, n * sizeof *g);
        for (size_t a = 0; a < np; a++)
            E->lam[n + a] += g[n + a];
        ad_csr_free(&H);
        ad_csr_free(&J);
    }
    ad_free(x);
    return s;
}

void ad_loop_edges_emit(const ad_loop_edges *E, const uint32_t *ids,
                        void (*each)(void *cx, uint32_t o, size_t arg, double d),
                        void (*each2)(void *cx, size_t a, size_t b, double v), void *cx,
                        double *xbar, unsigned char *args)
{
    for (size_t q = 0; q < E->R.len; q++) {
        uint32_t o = (uint32_t)(E->R.c[q].key >> 32), a = (uint32_t)E->R.c[q].key;
        if (ids[a])
            each(cx, o, a, E->R.c[q].v);
    }
    for (size_t q = 0; q < E->W.len; q++) {
        uint32_t a = (uint32_t)(E->W.c[q].key >> 32), b = (uint32_t)E->W.c[q].key;
        if (ids[a] && ids[b])
            each2(cx, b, a, E->W.c[q].v);
    }
    memcpy(xbar, E->lam, E->nx * sizeof *xbar);
    for (size_t a = 0; a < E->nx; a++)
        args[a] = (unsigned char)(E->reach[a] && ids[a]);
}
