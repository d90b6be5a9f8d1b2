/* Formatting shared by the sections. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "report.h"

const char *fmt_ratio(char buf[16], double num, double den)
{
    double r = num / den;
    if (isnan(r))
        return "-";
    snprintf(buf, 16, r < 10.0 ? "%.2f" : r < 100.0 ? "%.1f" : "%.0f", r);
    return buf;
}

const char *fmt_fixed(char buf[16], double v)
{
    if (isnan(v))
        return "-";
    snprintf(buf, 16, "%.2f", v);
    return buf;
}

FILE *tsv_open(const bench_ctx *b, const char *name, const char *header)
{
    if (!b->out_dir)
        return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", b->out_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        return NULL;
    }
    fprintf(f, "%s\n", header);
    return f;
}

void tsv_num(FILE *f, double v, int last)
{
    if (isnan(v))
        fputs("-", f);
    else
        fprintf(f, "%.6g", v);
    fputc(last ? '\n' : '\t', f);
}

void tsv_close(FILE *f)
{
    if (f)
        fclose(f);
}

void measure_rows(const bench_ctx *b, grad_row *rows, size_t count, const char *tsv_name,
                  const char *tsv_header, void (*print)(const grad_row *),
                  void (*write)(FILE *, const grad_row *))
{
    FILE *f = tsv_open(b, tsv_name, tsv_header);
    for (size_t i = 0; i < count; i++) {
        measure_row(b, &rows[i]);
        print(&rows[i]);
        fflush(stdout);
        if (f)
            write(f, &rows[i]);
    }
    tsv_close(f);
}
