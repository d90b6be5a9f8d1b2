/* Section 2: t_bad (paper, section 5.4).  Naive dual numbers need 2^n
 * backpropagator calls for it; dualrev must take constant time per
 * operation, whatever n. */
#include <math.h>

#include "report.h"

#define TSV_HEADER                                                                   \
    "n\trecords\tplain_ns_per_op\tdualrev_ns_per_op\tdualrev_over_plain\t"           \
    "peer_tape_grad_ns_per_op\tpeer_grad_ns_per_op\tcheck"

/* ns per operation of t_bad: n multiplications. */
static double per_op(const grad_row *r, const bench_time *t, int have)
{
    return have ? t->median_ns / (double)r->n : NAN;
}

static void print_header(const bench_ctx *b)
{
    printf("\n== t_bad: x_k = x_{k-1} * x_{k-1}, k = 1..n; ns per operation (median of %d) ==\n",
           b->plan.reps);
    printf("%9s %9s %9s %9s %7s | %10s %10s %8s | %s\n", "n", "records", "plain/op",
           "dualrev/op", "gr/pl", "ADOLC t+g", "ADOLC grad", "dr/(t+g)", "check");
}

static void print_row(const grad_row *r)
{
    char t[6][16];
    double pl = per_op(r, &r->plain, 1), dr = per_op(r, &r->dualrev, 1);
    double pt = per_op(r, &r->peer_tape, r->peer_ok), pg = per_op(r, &r->peer_grad, r->peer_ok);
    printf("%9zu %9zu %9s %10s %7s | %10s %10s %8s | %s\n", r->n, r->records,
           fmt_fixed(t[0], pl), fmt_fixed(t[1], dr), fmt_ratio(t[2], dr, pl), fmt_fixed(t[3], pt),
           fmt_fixed(t[4], pg), fmt_ratio(t[5], dr, pt), r->check);
}

static void write_row(FILE *f, const grad_row *r)
{
    double pl = per_op(r, &r->plain, 1), dr = per_op(r, &r->dualrev, 1);
    fprintf(f, "%zu\t%zu\t", r->n, r->records);
    tsv_num(f, pl, 0);
    tsv_num(f, dr, 0);
    tsv_num(f, dr / pl, 0);
    tsv_num(f, per_op(r, &r->peer_tape, r->peer_ok), 0);
    tsv_num(f, per_op(r, &r->peer_grad, r->peer_ok), 0);
    fprintf(f, "%s\n", r->check);
}

/* Constant time per operation shows as a flat ns/op across the sizes. */
static void print_spread(const grad_row *rows, size_t count)
{
    double lo = INFINITY, hi = 0.0;
    for (size_t i = 0; i < count; i++) {
        double v = per_op(&rows[i], &rows[i].dualrev, 1);
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    printf("dualrev ns/op from %.2f to %.2f over n = %zu..%zu (%.0fx in n): max/min = %.2f\n",
           lo, hi, rows[0].n, rows[count - 1].n,
           (double)rows[count - 1].n / (double)rows[0].n, hi / lo);
}

void section_tbad(const bench_ctx *b, grad_row *rows, size_t count)
{
    print_header(b);
    measure_rows(b, rows, count, "tbad.tsv", TSV_HEADER, print_row, write_row);
    if (count)
        print_spread(rows, count);
}
