/* Output: readable times for the tables, and the TSV files for plot.gp. */
#ifndef BENCH_REPORT_H
#define BENCH_REPORT_H

#include <stdio.h>

#include "bench.h"

/* A ratio, or "-" when either side is missing (NaN). */
const char *fmt_ratio(char buf[16], double num, double den);

/* v with two decimals, or "-" when missing (NaN). */
const char *fmt_fixed(char buf[16], double v);

/* Opens out_dir/name and writes the header line; NULL when b has no
 * out_dir or the file cannot be opened (said on stderr). */
FILE *tsv_open(const bench_ctx *b, const char *name, const char *header);

/* A number for a TSV cell; missing values (NaN) become "-". */
void tsv_num(FILE *f, double v, int last);

void tsv_close(FILE *f);

/* Measures each row, prints it as soon as it is done, and writes it to
 * out_dir/tsv_name (when there is an out_dir): the loop of the gradient
 * sections. */
void measure_rows(const bench_ctx *b, grad_row *rows, size_t count, const char *tsv_name,
                  const char *tsv_header, void (*print)(const grad_row *),
                  void (*write)(FILE *, const grad_row *));

#endif
