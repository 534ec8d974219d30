/* cli.h: shared pieces of the `remat` command line. */
#ifndef REMAT_CLI_H
#define REMAT_CLI_H

#include "remat.h"

#include <stdio.h>

/* Prints "remat: <msg>" to stderr and returns 1 (the exit code for errors);
 * 2 is used for usage errors. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The optimizer `--optim NAME` names for train, plan and info: none, sgd
 * (momentum 0.9) or adamw, at PyTorch's defaults (train then applies its
 * rate, momentum and decay flags); *has is 0 for none. A usage error's
 * exit status for an unknown name (session_args.c), else 0. */
int cli_optim_named(const char *cmd, const char *name, remat_optim_opts *oo, int *has);
/* remat plan --graph (cmd_plan_graph.c). */
int cli_plan_graph(const char *path, const char *strategy, size_t budget, const char *optim, int json);
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

/* ---------------------------------------------------- model options
 * One parser for the options that describe a model, shared by train, info,
 * plan, bench and grad: put CLI_MODEL_OPTIONS in the getopt_long table,
 * hand every code from CLI_OPT_MODEL up to cli_model_arg, then call
 * cli_model_opts. */
enum {
    CLI_OPT_MODEL = 0x1000,
    CLI_OPT_BATCH,
    CLI_OPT_CLASSES,
    CLI_OPT_IMAGE,
    CLI_OPT_LAYERS,
    CLI_OPT_EMBD,
    CLI_OPT_HEADS,
    CLI_OPT_CONTEXT,
    CLI_OPT_VOCAB,
    CLI_OPT_BASE_CHANNELS,
    CLI_OPT_DEPTH,
    CLI_OPT_DROPOUT_SCALE,
    CLI_OPT_CHECKPOINT_BLOCKS,
    CLI_OPT_MODEL_END
};

#define CLI_MODEL_OPTIONS                                                                                              \
    {"model", required_argument, 0, CLI_OPT_MODEL}, {"batch", required_argument, 0, CLI_OPT_BATCH},                    \
        {"classes", required_argument, 0, CLI_OPT_CLASSES}, {"image", required_argument, 0, CLI_OPT_IMAGE},            \
        {"layers", required_argument, 0, CLI_OPT_LAYERS}, {"embd", required_argument, 0, CLI_OPT_EMBD},                \
        {"heads", required_argument, 0, CLI_OPT_HEADS}, {"context", required_argument, 0, CLI_OPT_CONTEXT},            \
        {"vocab", required_argument, 0, CLI_OPT_VOCAB},                                                                \
        {"base-channels", required_argument, 0, CLI_OPT_BASE_CHANNELS},                                                \
        {"depth", required_argument, 0, CLI_OPT_DEPTH},                                                                \
        {"dropout-scale", required_argument, 0, CLI_OPT_DROPOUT_SCALE}, {                                              \
        "checkpoint-blocks", required_argument, 0, CLI_OPT_CHECKPOINT_BLOCKS                                           \
    }

/* What the model options set; -1 (dropout_scale < 0) where not given. */
typedef struct {
    const char *model; /* default "cnn" */
    int64_t batch, classes, channels, height, width;
    int64_t layers, embd, heads, context, vocab, base_channels, depth, checkpoint_blocks;
    float dropout_scale;
} cli_model_args;

void cli_model_args_init(cli_model_args *a);
/* 1 if c is a model option's code (its value parsed into a, *bad set to 1
 * when the value is bad), 0 otherwise. */
int cli_model_arg(cli_model_args *a, int c, const char *arg, int *bad);
/* Fills mo: the model's own defaults (remat_model_opts_for), then the
 * input shape of the data set `data` (NULL, "synthetic" and "tokens:FILE"
 * keep the model's), then every option given. 0 on success; otherwise
 * prints a usage error for `cmd` and returns 2. */
int cli_model_opts(const cli_model_args *a, const char *data, const char *cmd, remat_model_opts *mo);
/* After remat_model_build: a usage error (returns 2) when an option given
 * does not show in the model's input (a preset such as gpt2-small that
 * keeps its own sizes, --image for a model without images); 0 otherwise. */
int cli_model_check(const cli_model_args *a, const remat_graph *g, const remat_model *m, const char *cmd);
/* Prints the model options' help, every model with its description. */
void cli_model_help(void);
/* "(8, 3, 32, 32)" for node n. */
const char *cli_shape_str(const remat_graph *g, remat_node n, char *buf, size_t cap);

/* ---------------------------------------------------- synthetic data
 * Random batches of the right shape and dtype for any model, a pure
 * function of (seed, step): float inputs uniform on [-1, 1), int32 inputs
 * (token ids) uniform on [0, vocab), int32 labels uniform on [0, the
 * logits' last dimension) (classes, or the vocabulary). */
typedef struct {
    int64_t nx, ny;   /* elements of the input and labels (0: none) */
    int x_int, y_int; /* int32 nodes */
    int64_t x_range, y_range;
    uint64_t seed;
} cli_synth;

int cli_synth_init(cli_synth *s, const remat_graph *g, const remat_model *m, const remat_model_opts *mo, uint64_t seed);
/* A remat_batch_fn; user is a cli_synth. */
remat_status cli_synth_next(void *user, int64_t step, void *input, void *labels);

/* ---------------------------------------------------- session options
 * Shared by every command that makes a session: put CLI_SESSION_OPTIONS
 * (and CLI_PLAN_OPTIONS where the command plans one training step: train,
 * grad, plan) in the getopt_long table, hand every code to
 * cli_session_arg, then call cli_session_opts. */
enum {
    CLI_OPT_THREADS = 0x1100,
    CLI_OPT_SEED,
    CLI_OPT_DEVICE,
    CLI_OPT_TF32,
    CLI_OPT_COST_MODEL,
    CLI_OPT_STRATEGY,
    CLI_OPT_BUDGET,
    CLI_OPT_MICRO_BATCH,
    CLI_OPT_BUCKET,
    CLI_OPT_NO_OVERLAP,
    CLI_OPT_PRECISION,
    CLI_OPT_HOST_BUDGET,
    CLI_OPT_PCIE_BANDWIDTH,
    CLI_OPT_PCIE_LATENCY,
    CLI_OPT_LEAST_WORKSPACE
};
#define CLI_SESSION_OPTIONS                                                                                            \
    {"threads", required_argument, 0, CLI_OPT_THREADS}, {"seed", required_argument, 0, CLI_OPT_SEED},                  \
        {"device", required_argument, 0, CLI_OPT_DEVICE}, {"tf32", no_argument, 0, CLI_OPT_TF32},                      \
        {"cost-model", required_argument, 0, CLI_OPT_COST_MODEL},                                                      \
        {"precision", required_argument, 0, CLI_OPT_PRECISION}, {                                                      \
        "least-workspace", no_argument, 0, CLI_OPT_LEAST_WORKSPACE                                                     \
    }
#define CLI_PLAN_OPTIONS                                                                                               \
    {"strategy", required_argument, 0, CLI_OPT_STRATEGY}, {"budget", required_argument, 0, CLI_OPT_BUDGET},            \
        {"host-budget", required_argument, 0, CLI_OPT_HOST_BUDGET},                                                    \
        {"pcie-bandwidth", required_argument, 0, CLI_OPT_PCIE_BANDWIDTH}, {                                            \
        "pcie-latency", required_argument, 0, CLI_OPT_PCIE_LATENCY                                                     \
    }
/* Micro-batches and ranks: train and bench. */
#define CLI_DIST_OPTIONS                                                                                               \
    {"micro-batch", required_argument, 0, CLI_OPT_MICRO_BATCH}, {"bucket", required_argument, 0, CLI_OPT_BUCKET}, {    \
        "no-overlap", no_argument, 0, CLI_OPT_NO_OVERLAP                                                               \
    }

typedef struct {
    int64_t threads, seed; /* default 0 (one per core), 42 */
    const char *device;    /* default "cpu" */
    const char *precision; /* default "fp32" */
    int tf32;
    int least_workspace;
    const char *cost_model;    /* NULL: the cached calibration, if any */
    const char *strategy;      /* default "auto" */
    size_t budget;             /* 0: none */
    size_t host_budget;        /* --host-budget: pinned host bytes for offload, 0: none */
    double pcie_gbps, pcie_us; /* --pcie-bandwidth, --pcie-latency; < 0 unless given */
    int check_device;          /* cli_session_opts checks the device is usable
                                * (default 1; bench's parent must not touch a
                                * GPU before it forks) */
    int64_t micro_batch;       /* 0: the batch over the ranks */
    size_t bucket;             /* 0: the library's default */
    int no_overlap;
} cli_session_args;

void cli_session_args_init(cli_session_args *a);
/* 1 if c is a session option's code (parsed into a; *bad set when the
 * value is bad), 0 otherwise. */
int cli_session_arg(cli_session_args *a, int c, const char *arg, int *bad);
/* The session options of the arguments: strategy, device (which must be
 * usable here), cost model (loaded into *cm, made by cli_cost_model_new
 * when *cm is NULL; NULL cm: none; *cost_used names its file or stays
 * NULL). 0 on success; otherwise prints the error for `cmd` and returns
 * its exit status. */
int cli_session_opts(const cli_session_args *a, const char *cmd, remat_session_opts *so, remat_cost_model **cm,
                     const char **cost_used);
/* The help lines of the session options (with strategy and budget when
 * plans). */
void cli_session_help(int plans);
/* The help lines of the micro-batch options (CLI_DIST_OPTIONS). */
void cli_dist_help(const char *cmd);

/* ---------------------------------------------------- ranks
 * A command started by mpirun runs on every rank; the ranks agree at known
 * points (after setup, after the session is made, after files are
 * written), so that a rank that fails there makes every rank stop, naming
 * it. A failure anywhere else ends the whole job (remat_comm_abort): the
 * other ranks may be waiting for this one. */
typedef struct {
    remat_comm *comm;
    int rank, ranks, hosts;
} cli_dist;

/* The ranks this process was started with (single when not by mpirun). 0,
 * or prints why not and returns 1. */
int cli_dist_begin(cli_dist *d);
/* A known point: every rank calls it with its exit status so far. Returns
 * rc when nonzero; 1 when another rank failed (after printing which and
 * why); 0 when every rank is fine. */
int cli_dist_agree(cli_dist *d, int rc);
/* Ends the command with exit status rc: finalizes MPI, or, for a failure
 * the other ranks do not know of, ends every rank (does not return). */
int cli_dist_end(cli_dist *d, int rc);
/* The micro-batch for a global batch over d's ranks: a->micro_batch, or
 * batch / ranks; a usage error for cmd (returns 2) when batch is not a
 * multiple of micro-batch x ranks. */
int cli_dist_micro_batch(const cli_dist *d, const cli_session_args *a, int64_t batch, const char *cmd, int64_t *micro);
/* "2 ranks on 1 host (vm), 1 thread per rank" */
const char *cli_dist_line(const cli_dist *d, int threads, char *buf, size_t cap);
/* "cpu, 2 threads" or "cuda (79.1 GiB free of 79.2 GiB)". */
const char *cli_device_line(const remat_session_opts *so, char *buf, size_t cap);

/* ------------------------------------------- child processes (procs.c)
 * A child forked to run fn(arg, cmd, res) and _exit: the parent writes
 * one-byte commands to cmd and reads fixed-size replies from res ('Q' or
 * end of input ends it). The child closes the pipes of `others`. */
#include <sys/types.h>
typedef struct {
    pid_t pid;
    int cmd, res; /* the parent's ends of the pipes, -1 when closed */
} cli_proc;
int cli_proc_start(cli_proc *p, const cli_proc *others, int n_others, void (*fn)(void *arg, int cmd, int res),
                   void *arg);
/* Asks the child to quit, waits for it and returns its peak RSS in bytes;
 * *signal_no is the signal that ended it, or 0. */
size_t cli_proc_end(cli_proc *p, int *signal_no);
/* The peak RSS of a child that does nothing (the program and its
 * libraries). */
size_t cli_idle_rss(void);
/* Whole reads and writes on a pipe; 0 on success. */
int cli_write_all(int fd, const void *buf, size_t n);
int cli_read_all(int fd, void *buf, size_t n);

/* The option loop every command shares. cli_next_opt runs getopt_long over
 * opts (shortopts starting with ':'), parses the model and session options
 * itself into ma and sa (either may be NULL), and returns the next code for
 * the command to handle; 0 at the end, with rc 0, or after printing a usage
 * error (a missing value, an unknown option, a model or session option's
 * bad value, a stray argument), with rc its exit status:
 *
 *     cli_opts co = {.cmd = "train", .ma = &ma, .sa = &sa, .opts = opts, .shortopts = ":h"};
 *     for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
 *         int bad = 0;
 *         switch (c) { case 'd': ...; }
 *         if (bad) return cli_bad_value(&co, optarg, "");
 *     }
 *     if (co.rc) return co.rc;
 */
#include <getopt.h>
typedef struct {
    const char *cmd;
    cli_model_args *ma;
    cli_session_args *sa;
    const struct option *opts;
    const char *shortopts;
    int started, idx, rc;
} cli_opts;
int cli_next_opt(cli_opts *o, int argc, char **argv);
/* A usage error for the option just returned with the value arg (why: an
 * explanation appended, or ""); returns its exit status. */
int cli_bad_value(cli_opts *o, const char *arg, const char *why);
/* Why cli_parse_float refused a value, for cli_bad_value's why. */
const char *cli_float_why(int code);

/* Prints a JSON object on one line of stdout and frees it. */
struct cJSON;
void cli_json_print(struct cJSON *o);

/* Seconds on a monotonic clock. */
double cli_now(void);

/* `remat plan --host-budget` (cmd_plan_offload.c): the chain with and
 * without offload at mo's batch, then the step's plan with it. 0, or the
 * exit status (reported). */
int cli_plan_offload(const remat_model_opts *mo, const remat_session_opts *so, const remat_offload_opts *oo, int json);

/* max_batch.c: the largest batch whose step fits so->budget with all, with
 * optimal, and with optimal costing at most max_overhead percent extra,
 * and with so->host_budget the same two with offload; searched from
 * `start`. Returns the exit status. */
int cli_plan_max_batch(const remat_model_opts *mo, int64_t start, const remat_session_opts *so, const char *optim,
                       double max_overhead, const char *cost_used, int json);

int cmd_train(int argc, char **argv);
int cmd_grad(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

/* The cost model to use: the file given, else the cached calibration if
 * there is one, loaded into m; NULL (FLOPs alone) otherwise. *used names
 * the file. */
const remat_cost_model *cli_cost_model(remat_cost_model *m, const char *path, const char **used);
/* An uncalibrated cost model (remat_cost_model_create) that the program
 * holds until it exits (freed then), for the commands' options to point
 * at; NULL (the library's error set) when none can be made. */
remat_cost_model *cli_cost_model_new(void);
/* The cached calibration's path (cost_model.c): $REMAT_COST_MODEL, else
 * $XDG_CACHE_HOME/remat/cost-model.json, else ~/.cache/remat/cost-model.json,
 * in buf (or the environment's string); NULL with no home. mkdirs creates
 * the folder. */
const char *cli_cost_model_path(char *buf, size_t cap, int mkdirs);

#endif
