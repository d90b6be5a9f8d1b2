/* Section 7: GMM's inner loop on tapes of growing size.  A record costs
 * more once the tape outgrows the caches: the forward pass waits for the
 * lines it writes, the reverse sweep for the ones it reads.  This measures
 * by how much, on the loop that makes up ADBench GMM d64_K100's gradient
 * (gmm-bench), from a tape that the first-level cache holds to one that
 * only memory does. */
#include <math.h>

#include "report.h"

#define TSV_HEADER                                                                   \
    "n\trecords\ttape_mib\tplain_ns_per_rec\tdualrev_ns_per_rec\tdualrev_over_plain\t" \
    "peer_tape_grad_over_plain\tdualrev_over_peer_tape_grad\tcheck"

#define MIB (1024.0 * 1024.0)

/* ns per dualrev record; the plain time and the peer's are divided by the
 * same count, so that the columns compare. */
static double per_rec(const grad_row *r, const bench_time *t, int have)
{
    return have ? t->median_ns / (double)r->records : NAN;
}

static void print_header(const bench_ctx *b)
{
    printf("\n== GMM's inner loop, Q (mu - x_i) for n points, d = 64: cost per record as the "
           "tape grows (median of %d) ==\n", b->plan.reps);
    printf("%6s %9s %9s %8s %9s %7s | %9s %8s | %s\n", "n", "records", "tape MiB", "plain/rec",
           "dualrev/rec", "gr/pl", "ADOLC/pl", "dr/ADOLC", "check");
}

static void print_row(const grad_row *r)
{
    char t[5][16];
    double pl = per_rec(r, &r->plain, 1), dr = per_rec(r, &r->dualrev, 1);
    double pt = per_rec(r, &r->peer_tape, r->peer_ok);
    printf("%6zu %9zu %9.1f %8s %11s %7s | %9s %8s | %s\n", r->n, r->records,
           (double)r->tape_bytes / MIB, fmt_fixed(t[0], pl), fmt_fixed(t[1], dr),
           fmt_ratio(t[2], dr, pl), fmt_ratio(t[3], pt, pl), fmt_ratio(t[4], dr, pt), r->check);
}

static void write_row(FILE *f, const grad_row *r)
{
    double pl = per_rec(r, &r->plain, 1), dr = per_rec(r, &r->dualrev, 1);
    double pt = per_rec(r, &r->peer_tape, r->peer_ok);
    fprintf(f, "%zu\t%zu\t", r->n, r->records);
    tsv_num(f, (double)r->tape_bytes / MIB, 0);
    tsv_num(f, pl, 0);
    tsv_num(f, dr, 0);
    tsv_num(f, dr / pl, 0);
    tsv_num(f, pt / pl, 0);
    tsv_num(f, dr / pt, 0);
    fprintf(f, "%s\n", r->check);
}

void section_cache(const bench_ctx *b, grad_row *rows, size_t count)
{
    print_header(b);
    measure_rows(b, rows, count, "cache.tsv", TSV_HEADER, print_row, write_row);
}
