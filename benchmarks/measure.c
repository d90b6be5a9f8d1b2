/* Timing one program at one size: plain double, dualrev's ad_gradient, and
 * the peer's taping + gradient and gradient alone. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "isolate.h"
#include "peer.h"

/* The plain evaluations' results end here, so none can be optimised away. */
static volatile double sink;

typedef struct job {
    bench_prog prog;
    size_t n, inputs;
    const double *x;
    double *g;
    double fx;
    int failed;
} job;

static void run_plain(void *ctx, size_t iters)
{
    job *j = ctx;
    prog_plain_fn f = prog_plain(j->prog);
    double acc = 0.0;
    for (size_t i = 0; i < iters; i++) {
        bench_clobber(j->x);
        acc += f(j->x, j->inputs, &j->n);
    }
    sink = acc;
}

static void run_dualrev(void *ctx, size_t iters)
{
    job *j = ctx;
    ad_objective f = prog_objective(j->prog);
    for (size_t i = 0; i < iters; i++)
        if (ad_gradient(f, &j->n, j->inputs, j->x, &j->fx, j->g) != AD_OK)
            j->failed = 1;
}

static void run_peer_tape(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++)
        if (peer_tape_gradient(j->prog, j->n, j->x, j->inputs, &j->fx, j->g) != 0)
            j->failed = 1;
}

static void run_peer_grad(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++)
        if (peer_gradient(j->x, j->inputs, j->g) != 0)
            j->failed = 1;
}

/* One gradient, checked, and the records it took. */
static const char *first_gradient(job *j, grad_row *r)
{
    ad_status s = ad_gradient(prog_objective(j->prog), &j->n, j->inputs, j->x, &j->fx, j->g);
    if (s != AD_OK)
        return ad_strerror(s);
    ad_tape_stats st;
    if (ad_tape_stats_get(&st) != AD_OK)
        return "ad_tape_stats_get failed";
    r->records = st.records;
    r->tape_bytes = st.records * st.record_bytes;
    const char *bad = check_gradient(j->prog, j->n, j->x, j->inputs, j->fx, j->g);
    return bad ? bad : "ok";
}

typedef struct peer_result {
    int ok;
    bench_time tape, grad;
} peer_result;

typedef struct peer_job {
    const bench_ctx *b;
    const grad_row *r;
    job *j;
    const double *g;  /* dualrev's gradient, which the peer's must match */
} peer_job;

/* The peer on the same program and inputs. */
static void measure_peer(void *ctx, void *result)
{
    const peer_job *pj = ctx;
    const grad_row *r = pj->r;
    peer_result *out = result;
    job j = *pj->j;
    double *h = malloc(j.inputs * sizeof *h);
    j.g = h;
    out->ok = h && peer_prepare(r->prog, r->n, j.x, j.inputs, r->records) == 0 &&
              peer_tape_gradient(r->prog, r->n, j.x, j.inputs, &j.fx, h) == 0;
    const char *disagree = out->ok ? check_agree(pj->g, h, j.inputs) : "peer failed";
    if (disagree) {
        fprintf(stderr, "%s on %s n=%zu: %s\n", pj->b->peer, prog_name(r->prog), r->n, disagree);
        out->ok = 0;
    }
    if (out->ok) {
        out->tape = bench_measure(&pj->b->plan, run_peer_tape, &j);
        out->grad = bench_measure(&pj->b->plan, run_peer_grad, &j);
        out->ok = !j.failed;
    }
    free(h);
}

/* ADOL-C keeps one location store per process, which only grows, and each
 * gradient() costs time in proportion to its size: after dot of 10^4, a
 * 40-operation tape took 100 us instead of a few.  So each row's peer runs in
 * a child process of its own, where the peer starts as fresh as in a program
 * that differentiates this one function. */
static void measure_peer_isolated(const bench_ctx *b, grad_row *r, job *j, const double *g)
{
    peer_job pj = {b, r, j, g};
    peer_result res = {0};
    r->peer_ok = run_isolated(measure_peer, &pj, &res, sizeof res) == 0 && res.ok;
    r->peer_tape = res.tape;
    r->peer_grad = res.grad;
}

void measure_row(const bench_ctx *b, grad_row *r)
{
    r->inputs = prog_inputs(r->prog, r->n);
    double *x = malloc(r->inputs * sizeof *x), *g = malloc(r->inputs * sizeof *g);
    if (!x || !g) {
        fprintf(stderr, "out of memory for %s n=%zu\n", prog_name(r->prog), r->n);
        exit(1);
    }
    prog_fill_inputs(r->prog, x, r->inputs);
    job j = {r->prog, r->n, r->inputs, x, g, 0.0, 0};
    r->check = first_gradient(&j, r);
    const bench_body body[2] = {run_plain, run_dualrev};
    void *const ctx[2] = {&j, &j};
    bench_time t[2];
    bench_measure_side_by_side(&b->plan, 2, body, ctx, t);  /* their ratio is reported */
    r->plain = t[0];
    r->dualrev = t[1];
    if (j.failed)
        r->check = "a timed gradient failed";
    r->peer_ok = 0;
    if (b->peer && r->with_peer)
        measure_peer_isolated(b, r, &j, g);
    free(x);
    free(g);
}
