/* Section 1: the programs of the dual-numbers paper's Table 1. */
#include <math.h>

#include "report.h"

#define TSV_HEADER                                                                         \
    "program\tn\tinputs\trecords\tplain_ns\tdualrev_ns\tdualrev_min_ns\tdualrev_max_ns\t"  \
    "dualrev_over_plain\tpeer_tape_grad_ns\tpeer_grad_ns\tpeer_tape_grad_over_plain\t"     \
    "peer_grad_over_plain\tdualrev_over_peer_tape_grad\tdualrev_over_peer_grad\tcheck"

static double peer_ns(const grad_row *r, const bench_time *t)
{
    return r->peer_ok ? t->median_ns : NAN;
}

static void print_header(const bench_ctx *b)
{
    printf("== Table 1 programs: median time per gradient (%d reps, each >= %.0f ms) ==\n",
           b->plan.reps, b->plan.min_rep_ns / 1e6);
    printf("plain: the same source evaluated on double; dualrev: ad_gradient (record + reverse "
           "sweep); ns/rec: dualrev time per record\n");
    if (b->peer)
        printf("%s: t+g = trace_on..trace_off + gradient() per call; grad = gradient() alone on "
               "the tape recorded before\n", b->peer);
    printf("%-20s %8s %8s %8s %9s %9s %6s %7s | %10s %10s %8s %8s | %s\n", "program", "n",
           "inputs", "records", "plain", "dualrev", "ns/rec", "gr/pl", "ADOLC t+g", "ADOLC grad",
           "dr/(t+g)", "dr/grad", "check");
}

static void print_row(const grad_row *r)
{
    char t[7][16];
    double dr = r->dualrev.median_ns;
    printf("%-20s %8zu %8zu %8zu %9s %9s %6.2f %7s | %10s %10s %8s %8s | %s\n",
           prog_name(r->prog), r->n, r->inputs, r->records, fmt_time(t[0], r->plain.median_ns),
           fmt_time(t[1], dr), dr / (double)r->records,
           fmt_ratio(t[2], dr, r->plain.median_ns), fmt_time(t[3], peer_ns(r, &r->peer_tape)),
           fmt_time(t[4], peer_ns(r, &r->peer_grad)),
           fmt_ratio(t[5], dr, peer_ns(r, &r->peer_tape)),
           fmt_ratio(t[6], dr, peer_ns(r, &r->peer_grad)), r->check);
}

static void print_paper(void)
{
    printf("\nPaper Table 1 (Haskell, GHC 9.2.2, i9-10900K; us per gradient; sizes not stated), "
           "for orientation only:\n");
    printf("%-20s %10s %10s %7s\n", "program", "TH", "ad-4.5", "TH/ad");
    static const bench_prog table1[] = {PROG_SCALAR_MULT, PROG_DOT, PROG_SUM_MAT_VEC, PROG_ROTATE};
    for (size_t i = 0; i < sizeof table1 / sizeof *table1; i++) {
        bench_prog p = table1[i];
        double th = prog_paper_th_us(p), ad = prog_paper_ad_us(p);
        printf("%-20s %10.3f %10.3f %7.2f\n", prog_name(p), th, ad, th / ad);
    }
}

static void write_row(FILE *f, const grad_row *r)
{
    double pl = r->plain.median_ns, dr = r->dualrev.median_ns;
    double pt = peer_ns(r, &r->peer_tape), pg = peer_ns(r, &r->peer_grad);
    fprintf(f, "%s\t%zu\t%zu\t%zu\t", prog_name(r->prog), r->n, r->inputs, r->records);
    double cells[] = {pl, dr, r->dualrev.min_ns, r->dualrev.max_ns, dr / pl, pt, pg,
                      pt / pl, pg / pl, dr / pt, dr / pg};
    for (size_t i = 0; i < sizeof cells / sizeof *cells; i++)
        tsv_num(f, cells[i], 0);
    fprintf(f, "%s\n", r->check);
}

void section_programs(const bench_ctx *b, grad_row *rows, size_t count)
{
    print_header(b);
    measure_rows(b, rows, count, "programs.tsv", TSV_HEADER, print_row, write_row);
    print_paper();
}
