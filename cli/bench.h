/* bench.h: what the parts of `remat bench` share: cmd_bench.c (options and
 * the dispatcher), bench_child.c (a row's session, in the process that runs
 * it), bench_forked.c (one forked process per row, driven by the parent)
 * and bench_ranks.c (the rows under mpirun). */
#ifndef REMAT_CLI_BENCH_H
#define REMAT_CLI_BENCH_H

#include "cli.h"

#define MAX_ROWS 8

/* What a child sends back: after setup, after each step, and at the end. */
typedef struct {
    int ok;
    double seconds;                  /* the step's time */
    size_t predicted, measured, act; /* peak bytes: total, total, activations */
    size_t held, arena;              /* bytes held (arena + resident blocks), the arena */
    size_t device_used;              /* drop in the device's free bytes since before the session */
    int64_t recomputations;
    double predicted_s; /* calibrated: the cost model's step (forward,
                         * backward, recomputation, update); else 0 */
    char planner[16];
    char error[480];
} reply;

/* One line of a child's profile, sent after its report. */
#define MAX_PROF 160
typedef struct {
    char op[24], kind[12];
    double seconds;
    int64_t count;
} prof_line;

/* One row of the table: a strategy (or `optimal` at a budget) and, when
 * forked, its process and what it reported. */
typedef struct {
    remat_strategy strategy;
    size_t budget;
    cli_proc proc; /* the row's process: commands in, replies out */
    int alive;
    reply last;      /* the final report, or the error */
    double *times;   /* steps */
    size_t rss;      /* ru_maxrss in bytes */
    prof_line *prof; /* --profile: the child's per-op times */
    int nprof;
} row;

/* What every row is built from. */
typedef struct {
    remat_model_opts mo;   /* batch: one micro-batch */
    remat_session_opts so; /* every row's, but for strategy and budget */
    remat_cost_model *cm;  /* cli_cost_model_new's */
    int64_t batch;         /* the global batch of a step */
} config;

/* What the command line asks for. */
typedef struct {
    const char *data, *init_out;
    char list[256];
    int64_t steps, warmup;
    int json, profile, prefetch, help;
    row rows[MAX_ROWS];
    int ns;
    config cf;
} bench_args;

/* What a row's process is given (bench_child's argument). */
typedef struct {
    const config *cf;
    const row *me;
} child_arg;

/* What the --save-init process is given (bench_save_init_child's argument). */
typedef struct {
    const config *cf;
    const char *path;
} init_arg;

/* ------------------------------------------------ bench_child.c */

/* Marks r failed with msg. */
void bench_set_error(reply *r, const char *msg);
/* The optimizer every row trains with: SGD with momentum. */
void bench_optim(remat_optim_opts *oo, const cli_synth *syn);
/* Fills x and y with q synthetic micro-batches (global indices first..)
 * and binds them: the same batch for every step and row. */
void bench_bind_synthetic(remat_session *s, const remat_model *m, const cli_synth *syn, int64_t first, int64_t q,
                          void *x, void *y);
/* A row's process (a cli_proc function; argp is a child_arg): builds the
 * row's session, then serves the parent's commands. */
void bench_child(void *argp, int cmd, int res);
/* The --save-init process (argp is an init_arg): writes the initial
 * weights and replies once. */
void bench_save_init_child(void *argp, int cmd, int res);

/* ----------------------------------------------- bench_forked.c */

/* The median of v[0..n), sorting v. */
double bench_median(double *v, int64_t n);
/* "sqrt" or "optimal@512.0 MiB". */
void bench_row_name(const row *r, char *buf, size_t cap);
/* A row's JSON object with the fields every row has; the caller prints it. */
struct cJSON *bench_row_json(const config *cf, const row *r);
/* The rows, one forked process each; returns the exit status. */
int bench_forked(bench_args *args);

/* ------------------------------------------------ bench_ranks.c */

/* The rows under mpirun, one after the other on every rank; rank 0 prints.
 * Returns the exit status. */
int bench_ranks(bench_args *args, cli_dist *d);

#endif
