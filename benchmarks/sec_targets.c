/* Section 4: the targets, each judged on the figures above. */

#include "report.h"

#define GRAD_OVER_PLAIN_MAX 4.0
#define RECORD_BYTES_MAX 24.0
#define PEAK_BYTES_MAX 48.0

static void verdict(const char *target, int met, int measured)
{
    printf("[%s] %s\n", !measured ? "NOT MEASURED" : met ? "MET" : "MISSED", target);
}

/* Judged separately for the scalar-loop sources and the ad_dot sources. */
static void target_ratio(const grad_row *rows, size_t count, bench_prog dot, bench_prog smv,
                         const char *target)
{
    int met = 1, seen = 0;
    for (size_t i = 0; i < count; i++) {
        const grad_row *r = &rows[i];
        if (r->prog != dot && r->prog != smv)
            continue;
        double ratio = r->dualrev.median_ns / r->plain.median_ns;
        met &= ratio <= GRAD_OVER_PLAIN_MAX;
        seen = 1;
        printf("    %-20s n=%-8zu gradient/plain = %.2f\n", prog_name(r->prog), r->n, ratio);
    }
    verdict(target, met, seen);
}

static void target_peer(const bench_ctx *b, const grad_row *rows, size_t count)
{
    int met = 1, seen = 0;
    for (size_t i = 0; i < count; i++) {
        const grad_row *r = &rows[i];
        if (!b->peer || !r->with_peer)
            continue;
        if (!r->peer_ok) {  /* a row the peer could not run cannot count as won */
            printf("    %-20s n=%-8zu %s failed\n", prog_name(r->prog), r->n, b->peer);
            met = 0;
            continue;
        }
        double ratio = r->dualrev.median_ns / r->peer_tape.median_ns;
        met &= ratio < 1.0;
        seen = 1;
        printf("    %-20s n=%-8zu dualrev / ADOL-C (taping + gradient) = %.3f\n",
               prog_name(r->prog), r->n, ratio);
    }
    verdict("dualrev faster than ADOL-C (taping + gradient) on all four programs", met, seen);
}

static void target_memory(const mem_row *rows, size_t count)
{
    int rec_met = 1, peak_met = 1, seen = 0;
    for (size_t i = 0; i < count; i++) {
        const mem_row *r = &rows[i];
        if (!r->records)
            continue;
        double tape = (double)r->tape_bytes / (double)r->records;
        double peak = (double)(r->tape_bytes + r->adjoint_bytes) / (double)r->records;
        rec_met &= (double)r->record_bytes <= RECORD_BYTES_MAX;
        peak_met &= peak <= PEAK_BYTES_MAX;
        seen = 1;
        printf("    %-20s n=%-8zu record %zu B, reserved tape %.1f B/record, peak %.1f B/record\n",
               prog_name(r->prog), r->n, r->record_bytes, tape, peak);
    }
    verdict("<= 24 bytes of tape per binary record (the record's size)", rec_met, seen);
    verdict("peak (tape + cotangents) <= 48 bytes per record", peak_met, seen);
}

void section_targets(const bench_ctx *b, const grad_row *progs, size_t nprogs,
                     const mem_row *mem, size_t nmem)
{
    printf("\n== Targets of the issue ==\n");
    target_ratio(progs, nprogs, PROG_DOT, PROG_SUM_MAT_VEC,
                 "gradient <= 4x plain double on dot product and sum-mat-vec, scalar loops");
    target_ratio(progs, nprogs, PROG_DOT_ARRAY, PROG_SUM_MAT_VEC_ARRAY,
                 "gradient <= 4x plain double on dot product and sum-mat-vec, with ad_dot");
    target_peer(b, progs, nprogs);
    target_memory(mem, nmem);
}
