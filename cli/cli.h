/* cli.h: shared pieces of the `remat` command line. */
#ifndef REMAT_CLI_H
#define REMAT_CLI_H

#include "remat.h"

#include <stdio.h>

/* Prints "remat: <msg>" to stderr and returns 1 (the exit code for errors);
 * 2 is used for usage errors. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses "512MiB", "2GiB", "1.5GB", "4096" into bytes; 0 on success. */
int cli_parse_size(const char *s, size_t *out);
/* Parses a whole decimal integer / a finite float; 0 on success. */
int cli_parse_i64(const char *s, int64_t *out);
int cli_parse_float(const char *s, float *out);
/* Formats bytes as "12.3 MiB". */
const char *cli_fmt_bytes(size_t b, char *buf, size_t cap);

/* The model's input shape for a data set name; 0 on success. */
int cli_data_shape(const char *data, int64_t *c, int64_t *h, int64_t *w);

int cmd_train(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

/* The cost model to use: the file given, else the cached calibration if
 * there is one; NULL (FLOPs alone) otherwise. *used names the file. */
const remat_cost_model *cli_cost_model(remat_cost_model *m, const char *path, const char **used);

#endif
