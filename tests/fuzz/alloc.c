/* Allocation failure at every count (issue 30): `fuzz --alloc N` runs
 * every N-th seed's campaign beside the differential checks, `--alloc-only
 * N` alone.  A campaign takes one of the calls below and one mode, in turn
 * with the seeds, "warm" (the thread's tapes kept from the call before) or
 * "fresh" (ad_release before every call):
 *
 *   sparse      ad_sparse_hessian of the program's output 0 at x
 *   values      ad_sparse_hessian_values into the structure the baseline
 *               ad_sparse_hessian gave (an empty one where it failed)
 *   sum1, sum2  ad_gradient_sum of NTERMS terms, term i the program's
 *               output 0 at x + i/8, on 1 and 2 threads (2 only without
 *               checkpointed-loop instructions, whose interpreter keeps
 *               the step in a global)
 *   loop-grad,  ad_gradient and ad_hvp through ad_checkpointed_loop: of
 *   loop-hvp    the sum of stateN of a loop of LOOP_STEPS steps and
 *               LOOP_SNAPS snapshots, state0 = x, params = x, step
 *               s_i + 1/8 y_(i mod m)(s) q_i, y the program's outputs; or,
 *               for a program with loops of its own, of the program
 *
 * The call is made without injection twice (the baseline: the same bits
 * both times), then with the calling thread's allocations failing from the
 * k-th on (lib/drivers/testing.h, ad_test_fail_alloc_after), k = 0, 1,
 * 2, ... until a call runs without an injected failure (a probe
 * allocation after the call tells).  Each injected call must return
 * AD_ENOMEM with NaN outputs (fx, grad, hv, H's values; ad_sparse_hessian's
 * H empty, ad_sparse_hessian_values's structure unchanged), AD_ENOMEM only
 * where the countdown ran out, or else the baseline's status and bits (a
 * failure absorbed, or none).  One exception the injection explains: a
 * nested ad_gradient (OP_NEST) that fails gives its NaN to the program as
 * a constant, and the call then succeeds with other values.  The next
 * call, without injection, must give the baseline's status and bits.
 * Leaks: in the sanitizer build LeakSanitizer is asked every LEAK_EVERY
 * campaigns and at the end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"    /* ad_alloc, ad_free: the probe */
#include "testing.h"  /* ad_test_fail_alloc_after */

#include "check.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_LSAN 1
#endif
#endif
#ifdef FUZZ_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#define NTERMS 6
#define LOOP_STEPS 5
#define LOOP_SNAPS 2
/* Allocation points per campaign: a call that makes more (loops nested in
 * loops, replayed at every sweep) is followed up to the cap, and counted;
 * FUZZ_ALLOC_CAP=K sets another cap, 0 none. */
#define ALLOC_CAP 1000
#define LEAK_EVERY 16  /* campaigns between two leak checks (each stops the world) */

enum { A_SPARSE, A_VALUES, A_SUM1, A_SUM2, A_LOOP_GRAD, A_LOOP_HVP, A_APIS };
static const char *const api_names[A_APIS] = {"ad_sparse_hessian", "ad_sparse_hessian_values",
                                              "ad_gradient_sum(1 thread)",
                                              "ad_gradient_sum(2 threads)",
                                              "ad_gradient(ad_checkpointed_loop)",
                                              "ad_hvp(ad_checkpointed_loop)"};

static long st_programs, st_calls, st_points[A_APIS], st_nested, st_failures, st_leaks, st_cut,
    st_enomem;
static uint64_t since_check[LEAK_EVERY];  /* the seeds since the last leak check */
static int nsince;

/* ---- the objectives ---- */

static ad_real sum_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    ad_real *s = malloc((n + 1) * sizeof *s);
    for (size_t j = 0; j < n; j++)
        s[j] = ad_add(x[j], 0.125 * (double)i);
    ad_real r = fuzz_objective(s, n, ctx);
    free(s);
    return r;
}

static void loop_step(size_t k, const ad_real *state, ad_real *next, size_t n,
                      const ad_real *params, size_t np, void *ctx)
{
    const prog *p = ctx;
    ad_real *y = malloc(((size_t)p->m + 1) * sizeof *y);
    (void)k, (void)np;
    fuzz_function(state, n, y, (size_t)p->m, ctx);
    for (size_t i = 0; i < n; i++)
        next[i] = ad_add(state[i], ad_mul(0.125, ad_mul(y[i % (size_t)p->m], params[i])));
    free(y);
}

static ad_real loop_objective(const ad_real *x, size_t n, void *ctx)
{
    ad_real *s = malloc((n + 1) * sizeof *s);
    ad_status kept = ad_checkpointed_loop(loop_step, ctx, LOOP_STEPS, LOOP_SNAPS, n, x, n, x, s);
    (void)kept;  /* the recording keeps the error and the driver reports it */
    ad_real r = ad_sum(n, s);
    free(s);
    return r;
}

/* ---- one call, its outputs serialised ---- */

typedef struct result {
    ad_status st;
    int len;
    double *v;      /* fx, grad (n), then hv (n) or H: nnz, row_ptr, col, val */
    int nan_ok;     /* every output NaN, and H as a failure leaves it */
} result;

typedef struct campaign {
    const prog *p;
    int n;
    double *x;
    ad_csr fixed;   /* the structure ad_sparse_hessian_values fills (ours) */
    int has_nest;
    int own_loops;  /* the program has checkpointed loops of its own */
} campaign;

static int all_nan(const double *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] == a[i])
            return 0;
    return 1;
}

static void put(result *r, double v) { r->v[r->len++] = v; }

static void call(campaign *cp, int api, result *r)
{
    const prog *p = cp->p;
    size_t n = (size_t)cp->n;
    double fx = -12345.0, *g = malloc((n + 1) * sizeof *g), *hv = malloc((n + 1) * sizeof *hv);
    ad_csr H;
    memset(&H, 0xa5, sizeof H);  /* anything a failed call does not clear shows */
    for (size_t i = 0; i <= n; i++)
        g[i] = hv[i] = -12345.0;
    size_t cap = 2 * n + 4 + 3 * (size_t)cp->fixed.nnz + n * n * 3 + 8;
    r->len = 0;
    switch (api) {
    case A_SPARSE:
        r->st = ad_sparse_hessian(fuzz_objective, (void *)p, n, cp->x, &fx, g, &H);
        if (r->st == AD_OK)
            cap += 3 * H.nnz;
        break;
    case A_VALUES:
        for (size_t e = 0; e < cp->fixed.nnz; e++)
            cp->fixed.val[e] = -12345.0;
        r->st = ad_sparse_hessian_values(fuzz_objective, (void *)p, n, cp->x, &fx, g, &cp->fixed);
        break;
    case A_SUM1:
    case A_SUM2:
        r->st = ad_gradient_sum(sum_term, (void *)p, NTERMS, n, cp->x, &fx, g, api == A_SUM1 ? 1 : 2);
        break;
    case A_LOOP_GRAD:
        r->st = ad_gradient(cp->own_loops ? fuzz_objective : loop_objective, (void *)p, n, cp->x, &fx, g);
        break;
    default:
        r->st = ad_hvp(cp->own_loops ? fuzz_objective : loop_objective, (void *)p, n, cp->x, p->v, &fx, g, hv);
        break;
    }
    r->v = malloc(cap * sizeof *r->v);
    put(r, fx);
    for (size_t i = 0; i < n; i++)
        put(r, g[i]);
    r->nan_ok = fx != fx && all_nan(g, n);
    if (api == A_LOOP_HVP) {
        for (size_t i = 0; i < n; i++)
            put(r, hv[i]);
        r->nan_ok &= all_nan(hv, n);
    }
    if (api == A_SPARSE) {
        if (r->st == AD_OK) {
            put(r, (double)H.nnz);
            for (size_t i = 0; i <= n; i++)
                put(r, (double)H.row_ptr[i]);
            for (size_t e = 0; e < H.nnz; e++)
                put(r, (double)H.col[e]), put(r, H.val[e]);
            ad_csr_free(&H);
        } else {
            r->nan_ok &= !H.rows && !H.cols && !H.nnz && !H.row_ptr && !H.col && !H.val;
        }
    }
    if (api == A_VALUES) {  /* the structure is ours: it must not move */
        const ad_csr *F = &cp->fixed;
        put(r, (double)F->nnz);
        for (size_t i = 0; i <= n; i++)
            put(r, (double)F->row_ptr[i]);
        for (size_t e = 0; e < F->nnz; e++)
            put(r, (double)F->col[e]), put(r, F->val[e]);
        r->nan_ok &= all_nan(F->val, F->nnz);
    }
    free(g), free(hv);
}

static int same_result(const result *a, const result *b)
{
    if (a->st != b->st || a->len != b->len)
        return 0;
    for (int i = 0; i < a->len; i++) {
        double x = a->v[i], y = b->v[i];
        if (!((x != x && y != y) || !memcmp(&x, &y, sizeof x)))
            return 0;
    }
    return 1;
}

/* ---- the campaign ---- */

static int has_op(const prog *p, int op)
{
    for (int j = 0; j < p->ncode; j++)
        if (p->code[j].op == op)
            return 1;
    for (int s = 0; s < p->nsubs; s++)
        if (has_op(&p->subs[s], op))
            return 1;
    return 0;
}

static int quiet;  /* shrinking: count failures, print nothing */

static int report_failure(uint64_t seed, int api, int fresh, long k, const char *what,
                          ad_status got, ad_status want)
{
    if (!quiet)
        printf("ALLOC FAIL seed=%llu %s (%s) k=%ld: %s (status %s, expected %s)\n",
               (unsigned long long)seed, api_names[api], fresh ? "fresh" : "warm", k, what,
               ad_strerror(got), ad_strerror(want));
    return 1;
}

/* Whether this thread's k-th allocation from the arming was reached: the
 * probe fails where the countdown ran out (an injected failure, or exactly
 * k allocations). */
static int countdown_reached(void)
{
    void *q = ad_alloc(1);
    ad_free(q);
    return q == NULL;
}

static long alloc_cap(void)
{
    const char *env = getenv("FUZZ_ALLOC_CAP");
    return env ? atol(env) : ALLOC_CAP;
}

static int run_api(campaign *cp, int api, int fresh, uint64_t seed)
{
    result base, again, r, next;
    int fails = 0;
    long points = 0;
    if (fresh && ad_release() != AD_OK)
        fails += report_failure(seed, api, fresh, -1, "ad_release failed", AD_EBUSY, AD_OK);
    call(cp, api, &base);
    call(cp, api, &again);
    if (!same_result(&base, &again))
        fails += report_failure(seed, api, fresh, -1, "baseline not the same bits twice", again.st,
                                base.st);
    free(again.v);
    long cap = alloc_cap();
    for (long k = 0;; k++) {
        if (cap > 0 && k >= cap) {
            st_cut++;
            break;
        }
        if (fresh && ad_release() != AD_OK)
            fails += report_failure(seed, api, fresh, k, "ad_release failed", AD_EBUSY, AD_OK);
        int before = fuzz_interp_errors;
        ad_test_fail_alloc_after(k);
        call(cp, api, &r);
        int reached = countdown_reached();
        ad_test_fail_alloc_after(-1);
        int nested = fuzz_interp_errors != before;
        st_calls++;
        if (r.st == AD_ENOMEM) {
            st_enomem++;
            if (!reached)
                fails += report_failure(seed, api, fresh, k, "AD_ENOMEM without an injected failure",
                                        r.st, base.st);
            if (!r.nan_ok)
                fails += report_failure(seed, api, fresh, k, "outputs of a failed call not NaN / H not empty",
                                        r.st, base.st);
        } else if (same_result(&r, &base)) {
            /* no failure, or one the library absorbed */
        } else if (nested && cp->has_nest && r.st == AD_OK) {
            st_nested++;  /* a nested ad_gradient failed: its NaN is a constant of the program */
        } else {
            fails += report_failure(seed, api, fresh, k,
                                    r.st == base.st ? "not the baseline's bits" : "status",
                                    r.st, base.st);
            if (r.st != AD_OK && !r.nan_ok)
                fails += report_failure(seed, api, fresh, k, "outputs of a failed call not NaN",
                                        r.st, base.st);
        }
        if (reached)
            st_points[api]++, points++;
        free(r.v);
        /* the next call, without injection: the baseline again */
        before = fuzz_interp_errors;
        call(cp, api, &next);
        st_calls++;
        if (!same_result(&next, &base))
            fails += report_failure(seed, api, fresh, k, "the call after a failure differs from the baseline",
                                    next.st, base.st);
        free(next.v);
        if (!reached || fails)
            break;
    }
    free(base.v);
    if (getenv("FUZZ_DEBUG"))
        fprintf(stderr, "alloc seed=%llu %s (%s): %ld points\n", (unsigned long long)seed, api_names[api],
                fresh ? "fresh" : "warm", points);
    return fails;
}

static int campaign_run(const prog *p, uint64_t seed, uint64_t turn)
{
    campaign cp;
    memset(&cp, 0, sizeof cp);
    cp.p = p;
    cp.n = p->n;
    cp.x = p->x;
    cp.has_nest = has_op(p, OP_NEST);
    cp.own_loops = prog_has_loop(p);
    int n = p->n, fails = 0;
    /* the structure for ad_sparse_hessian_values: the baseline's, copied */
    double fx, *g = malloc(((size_t)n + 1) * sizeof *g);
    ad_csr H;
    ad_status s = ad_sparse_hessian(fuzz_objective, (void *)p, (size_t)n, p->x, &fx, g, &H);
    size_t nnz = s == AD_OK ? H.nnz : 0;
    cp.fixed.rows = cp.fixed.cols = (size_t)n;
    cp.fixed.nnz = nnz;
    cp.fixed.row_ptr = calloc((size_t)n + 1, sizeof *cp.fixed.row_ptr);
    cp.fixed.col = malloc((nnz + 1) * sizeof *cp.fixed.col);
    cp.fixed.val = malloc((nnz + 1) * sizeof *cp.fixed.val);
    if (s == AD_OK) {
        memcpy(cp.fixed.row_ptr, H.row_ptr, ((size_t)n + 1) * sizeof *H.row_ptr);
        if (nnz)
            memcpy(cp.fixed.col, H.col, nnz * sizeof *H.col);
        ad_csr_free(&H);
    }
    free(g);
    /* one call and one mode per program, in turn with the seeds: the
     * campaigns of a run cover every pair */
    int threads2 = !cp.own_loops, api = (int)(turn % A_APIS), fresh = (int)(turn / A_APIS % 2);
    while ((api == A_SUM2 && !threads2) || (api >= A_LOOP_GRAD && n == 0 && !cp.own_loops))
        api = (api + 1) % A_APIS;
    fails += run_api(&cp, api, fresh, seed);
    if (threads2 && (api == A_SUM1 || api == A_SUM2)) {
        /* one thread's results are two threads' (docs/api.md) */
        result a, b;
        call(&cp, A_SUM1, &a);
        call(&cp, A_SUM2, &b);
        if (!same_result(&a, &b))
            fails += report_failure(seed, A_SUM2, 0, -1, "not the bits of 1 thread", b.st, a.st);
        free(a.v), free(b.v);
    }
    free(cp.fixed.row_ptr), free(cp.fixed.col), free(cp.fixed.val);
    return fails;
}

/* The program shrunk while its campaign still fails. */
static void alloc_shrink(prog *p, uint64_t seed, uint64_t turn)
{
    quiet = 1;
    for (int round = 0, progress = 1; round < 8 && progress; round++) {
        progress = 0;
        for (int j = p->ncode - 1; j >= 0; j--) {
            if (j >= p->ncode)
                continue;
            prog t;
            prog_copy(&t, p);
            if (!prog_delete(&t, j) || !campaign_run(&t, seed, turn)) {
                prog_free(&t);
                continue;
            }
            prog_free(p);
            *p = t;
            progress = 1;
        }
    }
    quiet = 0;
}

/* LeakSanitizer, asked for the campaigns since the last check (in the
 * sanitizer build); 1 if it found a leak. */
static int leak_check(void)
{
    int leak = 0;
#ifdef FUZZ_LSAN
    if (nsince && __lsan_do_recoverable_leak_check()) {
        printf("ALLOC FAIL: leak (LeakSanitizer's report above) in the campaigns of seeds");
        for (int q = 0; q < nsince; q++)
            printf(" %llu", (unsigned long long)since_check[q]);
        printf("\n");
        st_leaks++;
        leak = 1;
    }
#endif
    nsince = 0;
    return leak;
}

int alloc_campaign(const prog *p, uint64_t seed, uint64_t turn, int verbose)
{
    st_programs++;
    int fails = campaign_run(p, seed, turn), leak = 0;
    since_check[nsince++] = seed;
    if (nsince == LEAK_EVERY || verbose)
        leak = leak_check();  /* names the seeds; shrinking would not see it */
    st_failures += fails > 0;
    if (fails || verbose) {
        prog t;
        prog_copy(&t, p);
        if (fails)
            alloc_shrink(&t, seed, turn);
        printf("  %s program (allocation failure):\n", fails ? "shrunk" : "the");
        prog_print(&t, stdout);
        prog_free(&t);
        fflush(stdout);
    }
    return fails > 0 || leak;
}

int alloc_summary(void)
{
    if (!st_programs)
        return 0;
    int leak = leak_check();
    printf("fuzz: allocation failure: %ld programs, %ld calls; failure points:", st_programs, st_calls);
    for (int a = 0; a < A_APIS; a++)
        printf(" %s %ld%s", api_names[a], st_points[a], a + 1 < A_APIS ? "," : "");
    printf("; %ld injected calls AD_ENOMEM; %ld campaigns cut at %ld allocation points (FUZZ_ALLOC_CAP); %ld calls absorbed a "
           "failure in a nested ad_gradient; %ld programs failed, %ld leak checks found leaks\n",
           st_enomem, st_cut, alloc_cap(), st_nested, st_failures, st_leaks);
    return leak;
}
