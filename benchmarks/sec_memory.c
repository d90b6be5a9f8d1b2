/* Section 3: tape memory per record.  The tape keeps its memory between
 * calls and only grows, so each row starts from ad_release(): the figures
 * are what this one gradient reserved, not what an earlier, larger one left.
 * The cotangents and the tape are both live during the reverse sweep, so
 * their sum is the peak. */
#include <stdlib.h>

#include "report.h"

#define TSV_HEADER                                                                     \
    "program\tn\tinputs\trecords\trecord_bytes\ttape_bytes\tadjoint_bytes\t"           \
    "tape_bytes_per_record\tpeak_bytes_per_record"

#define MIB (1024.0 * 1024.0)

static int take(mem_row *r)
{
    r->inputs = prog_inputs(r->prog, r->n);
    double *x = malloc(r->inputs * sizeof *x), *g = malloc(r->inputs * sizeof *g);
    double fx;
    ad_tape_stats st;
    int ok = x && g && ad_release() == AD_OK;
    if (ok) {
        prog_fill_inputs(r->prog, x, r->inputs);
        ok = ad_gradient(prog_objective(r->prog), &r->n, r->inputs, x, &fx, g) == AD_OK &&
             ad_tape_stats_get(&st) == AD_OK;
    }
    free(x);
    free(g);
    if (ok) {
        r->records = st.records;
        r->record_bytes = st.record_bytes;
        r->tape_bytes = st.tape_bytes;
        r->adjoint_bytes = st.adjoint_bytes;
    }
    return ok;
}

static double per_record(size_t bytes, const mem_row *r)
{
    return (double)bytes / (double)r->records;
}

void section_memory(const bench_ctx *b, mem_row *rows, size_t count)
{
    printf("\n== Memory per record, one gradient after ad_release() (ad_tape_stats_get) ==\n");
    printf("record: sizeof one record (2 arguments); tape, cotangents: bytes reserved; "
           "peak/rec = (tape + cotangents) / records\n");
    printf("%-20s %9s %9s %9s %7s %10s %10s %9s %9s\n", "program", "n", "inputs", "records",
           "record", "tape MiB", "adj MiB", "tape/rec", "peak/rec");
    FILE *f = tsv_open(b, "memory.tsv", TSV_HEADER);
    for (size_t i = 0; i < count; i++) {
        mem_row *r = &rows[i];
        if (!take(r)) {
            printf("%-20s %9zu  failed\n", prog_name(r->prog), r->n);
            r->records = 0;
            continue;
        }
        double tape = per_record(r->tape_bytes, r);
        double peak = per_record(r->tape_bytes + r->adjoint_bytes, r);
        printf("%-20s %9zu %9zu %9zu %7zu %10.1f %10.1f %9.1f %9.1f\n", prog_name(r->prog),
               r->n, r->inputs, r->records, r->record_bytes, (double)r->tape_bytes / MIB,
               (double)r->adjoint_bytes / MIB, tape, peak);
        if (f)
            fprintf(f, "%s\t%zu\t%zu\t%zu\t%zu\t%zu\t%zu\t%.3f\t%.3f\n", prog_name(r->prog),
                    r->n, r->inputs, r->records, r->record_bytes, r->tape_bytes,
                    r->adjoint_bytes, tape, peak);
    }
    tsv_close(f);
}
