/* cmd_bench.c: `remat bench`: training steps per strategy, measured side by
 * side in one run.
 *
 * Every strategy (and `optimal` at each --budget) runs in its own child
 * process, forked before anything is built, with its own graph, session
 * and synthetic batch (the same for all: same seed, same weights). The
 * parent drives them in interleaved rounds: each round asks every child in
 * turn, through a pipe, for one training step, so that machine noise hits
 * the strategies alike, and only one child computes at a time. The child
 * times its step (forward, backward and update) itself and sends the time
 * back; at the end it reports its predicted and measured peaks and exits,
 * and the parent reads the child's peak resident set size from wait4, so
 * every row has its own process peak RSS. Rows give the median step time
 * after the warm-up steps and ratios against `all` (or the first row when
 * `all` is not benchmarked). The process machinery is procs.c.
 *
 * --batch is the global batch of a step, split into micro-batches
 * (--micro-batch, default batch / ranks). Under mpirun (cli_dist) there is
 * no fork (MPI does not survive one): every rank runs the rows one after
 * the other in its own process, each row's session over all the ranks,
 * and rank 0 prints per-rank peaks (the largest), step times (the slowest
 * rank's median) and the reductions' times: their own work, and the wait
 * after the backward pass that the overlap did not hide.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <unistd.h>

static void help(void) {
    printf("usage: remat bench [options]\n"
           "\n"
           "  --data NAME         input shape of: fashion-mnist | mnist | cifar10 | synthetic\n"
           "                      (default: the model's own); batches are always synthetic\n"
           "  --strategies LIST   comma-separated strategies (default all,sqrt; also manual)\n"
           "  --budget SIZE       also run `optimal` within this budget (repeatable)\n"
           "  --steps N           timed steps per strategy (default 10)\n"
           "  --warmup N          untimed steps first (default 2)\n"
           "  --save-init FILE    also write the initial weights (the same in every row) as\n"
           "                      safetensors, e.g. for PyTorch to start from\n"
           "  --profile           also time every op (forward, recompute, backward, free)\n"
           "                      over the timed steps and print where each row's time goes\n"
           "  --json              one JSON object per row (fields in the README)\n"
           "  --help              this text\n"
           "  --micro-batch M, --bucket SIZE, --no-overlap: as for remat train; under\n"
           "                      mpirun the rows run one after the other in each rank's\n"
           "                      process (peak RSS is then the process's so far)\n"
           "\n"
           "Each row runs in its own process, so its peak RSS is its own; the rows take\n"
           "their steps in interleaved rounds, one process computing at a time. With\n"
           "--device cuda each row also reports the bytes it holds on the GPU and the\n"
           "drop in the driver's free memory (cudaMemGetInfo) over its run.\n");
    cli_session_help(0);
    printf("\n");
    cli_model_help();
}

#define MAX_ROWS 8

/* What a child sends back: after setup, after each step, and at the end. */
typedef struct {
    int ok;
    double seconds;                  /* the step's time */
    size_t predicted, measured, act; /* peak bytes: total, total, activations */
    size_t held, arena;              /* bytes held (arena + resident blocks), the arena */
    size_t device_used;              /* drop in the device's free bytes since before the session */
    int64_t recomputations;
    double predicted_s;              /* calibrated: the cost model's step (forward,
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

typedef struct {
    remat_strategy strategy;
    size_t budget;
    cli_proc proc;         /* the row's process: commands in, replies out */
    int alive;
    reply last;            /* the final report, or the error */
    double *times;         /* steps */
    size_t rss;            /* ru_maxrss in bytes */
    prof_line *prof;       /* --profile: the child's per-op times */
    int nprof;
} row;

typedef struct {
    remat_model_opts mo;   /* batch: one micro-batch */
    remat_session_opts so; /* every row's, but for strategy and budget */
    remat_cost_model cm;
    int64_t batch;         /* the global batch of a step */
} config;


static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void set_error(reply *r, const char *msg) {
    r->ok = 0;
    snprintf(r->error, sizeof r->error, "%s", msg);
}

/* Sends the session's profile: a count, then that many lines. */
static int send_profile(int fd, const remat_session *s) {
    remat_profile_row pr[MAX_PROF];
    int n = remat_session_profile(s, pr, MAX_PROF);
    if (n > MAX_PROF) n = MAX_PROF;
    if (cli_write_all(fd, &n, sizeof n) != 0) return -1;
    for (int i = 0; i < n; i++) {
        prof_line l = {.seconds = pr[i].seconds, .count = pr[i].count};
        snprintf(l.op, sizeof l.op, "%s", pr[i].op);
        snprintf(l.kind, sizeof l.kind, "%s", pr[i].kind);
        if (cli_write_all(fd, &l, sizeof l) != 0) return -1;
    }
    return 0;
}

/* The optimizer every row trains with: SGD with momentum. */
static void bench_optim(remat_optim_opts *oo, const cli_synth *syn) {
    remat_optim_opts_default(oo, REMAT_OPTIM_SGD);
    oo->momentum = 0.9f;
    /* regression targets (heavy's scalar chain) blow up at ordinary rates */
    oo->lr = syn->y_int ? 1e-3f : 1e-9f;
}

/* Fills x and y with q synthetic micro-batches (global indices first..)
 * and binds them: the same batch for every step and row. */
static void bind_synthetic(remat_session *s, const remat_model *m, const cli_synth *syn, int64_t first, int64_t q,
                           void *x, void *y) {
    for (int64_t j = 0; j < q; j++)
        cli_synth_next((void *)syn, first + j, (char *)x + (size_t)(j * syn->nx) * 4,
                       y ? (char *)y + (size_t)(j * syn->ny) * 4 : NULL);
    remat_session_bind(s, m->input, x);
    if (y) remat_session_bind(s, m->labels, y);
}

/* The child: builds everything, then serves commands: 'S' one timed
 * training step, 'P' start profiling (clears the counts), 'R' the report,
 * 'F' the profile; end of input (or 'Q') ends it. */
/* What a row's process is given. */
typedef struct {
    const config *cf;
    const row *me;
} child_arg;

static void child(void *argp, int cmd, int res) {
    const child_arg *a = argp;
    const config *cf = a->cf;
    const row *me = a->me;
    reply r = {.ok = 1};
    size_t free0 = 0, total = 0; /* the device's free bytes before the session */
    remat_graph *g = NULL;
    remat_session *s = NULL;
    void *x = NULL, *y = NULL;
    remat_model m;
    cli_synth syn;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &cf->mo, &m) != REMAT_OK) {
        set_error(&r, remat_last_error());
    } else if (cli_synth_init(&syn, g, &m, &cf->mo, cf->so.seed)) {
        set_error(&r, "no synthetic data for this model");
    } else {
        remat_session_opts so = cf->so;
        so.strategy = me->strategy;
        so.budget = me->budget;
        if (so.cost_model) so.cost_model = &cf->cm;
        remat_optim_opts oo;
        bench_optim(&oo, &syn);
        int64_t q = so.micro_batches ? so.micro_batches : 1; /* one process: every micro-batch is its own */
        x = malloc((size_t)(q * syn.nx) * 4);
        y = syn.ny ? malloc((size_t)(q * syn.ny) * 4) : NULL;
        if (!x || (syn.ny && !y)) set_error(&r, "out of memory for a batch");
        else if (remat_device_available(so.device) != REMAT_OK ||
                 remat_device_memory(so.device, &free0, &total) != REMAT_OK ||
                 (so.optim = &oo, remat_session_create(&s, g, m.loss, &so)) != REMAT_OK)
            set_error(&r, remat_last_error());
        else
            bind_synthetic(s, &m, &syn, 0, q, x, y);
    }
    int setup_ok = r.ok;
    if (cli_write_all(res, &r, sizeof r) == 0 && setup_ok) {
        char c;
        while (cli_read_all(cmd, &c, 1) == 0 && c != 'Q') {
            reply q = {.ok = 1};
            if (c == 'P') {
                remat_session_set_profiling(s, 1);
                continue; /* no reply */
            }
            if (c == 'F') {
                if (send_profile(res, s) != 0) break;
                continue;
            }
            if (c == 'S') {
                float loss;
                double t0 = cli_now();
                if (remat_session_step(s, &loss) != REMAT_OK || remat_session_update(s) != REMAT_OK)
                    set_error(&q, remat_last_error());
                q.seconds = cli_now() - t0;
            } else {
                remat_mem_stats meas;
                remat_plan_summary p;
                remat_session_mem(s, &meas);
                if (remat_session_plan(s, &p) != REMAT_OK) {
                    set_error(&q, remat_last_error());
                } else {
                    q.predicted = p.predicted.peak[REMAT_MEM_TOTAL];
                    q.measured = meas.peak[REMAT_MEM_TOTAL];
                    q.act = meas.peak[REMAT_MEM_ACT];
                    q.recomputations = p.recomputations;
                    q.predicted_s = p.calibrated ? p.seconds + p.update_seconds : 0.0;
                    q.held = remat_session_held_bytes(s);
                    q.arena = p.arena_bytes;
                    size_t free1 = 0;
                    if (remat_device_memory(cf->so.device, &free1, &total) == REMAT_OK && free0 > free1)
                        q.device_used = free0 - free1;
                    snprintf(q.planner, sizeof q.planner, "%s", p.planner);
                }
            }
            if (cli_write_all(res, &q, sizeof q) != 0) break;
        }
    }
    remat_session_destroy(s);
    remat_graph_destroy(g);
    free(x), free(y);
}

/* Starts row k's process; 0 on success. */
static int spawn(const config *cf, row *rows, int k) {
    cli_proc others[MAX_ROWS];
    for (int j = 0; j < k; j++) others[j] = rows[j].proc;
    child_arg a = {cf, &rows[k]}; /* read by the child before this returns: fork copies it */
    if (cli_proc_start(&rows[k].proc, others, k, child, &a) != 0) return -1;
    rows[k].alive = 1;
    return 0;
}

/* Ends row r's process and collects its peak RSS. */
static void reap(row *r) {
    int sig;
    if (r->proc.pid <= 0) return;
    r->rss = cli_proc_end(&r->proc, &sig);
    if (sig) {
        r->last.ok = 0;
        snprintf(r->last.error, sizeof r->last.error, "the benchmark process died of signal %d (%s)", sig,
                 strsignal(sig));
    }
}

/* Sends a command and reads the reply; on a broken pipe, marks the row dead. */
static int ask(row *r, char c, reply *q) {
    if (cli_write_all(r->proc.cmd, &c, 1) != 0 || cli_read_all(r->proc.res, q, sizeof *q) != 0) {
        r->alive = 0;
        set_error(&r->last, "the benchmark process ended unexpectedly");
        return -1;
    }
    if (!q->ok) {
        r->alive = 0;
        r->last = *q;
        return -1;
    }
    return 0;
}

/* Reads a child's profile after its report ('F'); a failure leaves none. */
static void read_profile(row *r) {
    char c = 'F';
    int n = 0;
    if (cli_write_all(r->proc.cmd, &c, 1) != 0 || cli_read_all(r->proc.res, &n, sizeof n) != 0 || n < 0 || n > MAX_PROF) return;
    r->prof = calloc((size_t)n + 1, sizeof *r->prof);
    if (!r->prof) return;
    for (int i = 0; i < n; i++)
        if (cli_read_all(r->proc.res, &r->prof[i], sizeof r->prof[i]) != 0) return;
    r->nprof = n;
}

static int by_seconds(const void *a, const void *b) {
    const prof_line *x = a, *y = b;
    return (x->seconds < y->seconds) - (x->seconds > y->seconds);
}

static void row_name(const row *r, char *buf, size_t cap);

/* Where a row's step time goes: per op and kind, seconds per step and the
 * share of the executor's time, largest first; what the executor did not
 * run (zeroing the gradients, the optimizer update, timing) is the rest of
 * the median step. */
static void print_profile(row *r, int64_t steps, double median) {
    char name[48];
    row_name(r, name, sizeof name);
    qsort(r->prof, (size_t)r->nprof, sizeof *r->prof, by_seconds);
    double tot = 0.0;
    for (int i = 0; i < r->nprof; i++) tot += r->prof[i].seconds;
    tot /= (double)steps;
    printf("\nprofile of %s: %.4f s per step in the executor, %.4f s elsewhere (zeroing the gradients, the\n"
           "optimizer update)\n",
           name, tot, median > tot ? median - tot : 0.0);
    printf("  %-18s %-10s %10s %7s %8s\n", "op", "kind", "s/step", "share", "calls");
    for (int i = 0; i < r->nprof; i++) {
        double sps = r->prof[i].seconds / (double)steps;
        if (sps < 0.001 * tot) break; /* sorted: the rest are smaller */
        printf("  %-18s %-10s %10.5f %6.1f%% %8.0f\n", r->prof[i].op, r->prof[i].kind, sps, tot > 0 ? 100.0 * sps / tot : 0.0,
               (double)r->prof[i].count / (double)steps);
    }
}

static void row_name(const row *r, char *buf, size_t cap) {
    if (r->budget) {
        char b[32];
        snprintf(buf, cap, "optimal@%s", cli_fmt_bytes(r->budget, b, sizeof b));
    } else {
        snprintf(buf, cap, "%s", remat_strategy_str(r->strategy));
    }
}

/* A row's JSON object with the fields every row has. */
static cJSON *row_json(const config *cf, const row *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", cf->mo.name);
    cJSON_AddNumberToObject(o, "batch", (double)cf->batch);
    cJSON_AddNumberToObject(o, "micro_batch", (double)cf->mo.batch);
    cJSON_AddStringToObject(o, "strategy", remat_strategy_str(r->strategy));
    if (r->budget) cJSON_AddNumberToObject(o, "budget_bytes", (double)r->budget);
    return o;
}

/* --save-init: a short-lived process builds a session (its weights come
 * from the seed alone, the same in every row) and writes them, so that the
 * parent never allocates what the rows' RSS would then include. */
typedef struct {
    const config *cf;
    const char *path;
} init_arg;

static void save_init_child(void *argp, int cmd, int res) {
    (void)cmd;
    const init_arg *a = argp;
    reply r = {.ok = 1};
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    so.seed = a->cf->so.seed; /* on the CPU: initial weights do not depend on the device */
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &a->cf->mo, &m) != REMAT_OK ||
        remat_session_create(&s, g, m.loss, &so) != REMAT_OK || remat_safetensors_save(s, a->path) != REMAT_OK)
        set_error(&r, remat_last_error());
    (void)cli_write_all(res, &r, sizeof r);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

static int save_init(const config *cf, const char *path) {
    init_arg a = {cf, path};
    cli_proc p;
    if (cli_proc_start(&p, NULL, 0, save_init_child, &a) != 0) return cli_fail("cannot start a process");
    reply r;
    int ok = cli_read_all(p.res, &r, sizeof r) == 0, sig;
    cli_proc_end(&p, &sig);
    if (!ok) return cli_fail("writing the initial weights to %s: the process ended unexpectedly", path);
    if (!r.ok) return cli_fail("%s", r.error);
    return 0;
}


/* What the command line asks for. */
typedef struct {
    const char *data, *init_out;
    char list[256];
    int64_t steps, warmup;
    int json, profile, help;
    row rows[MAX_ROWS];
    int ns;
    config cf;
} bench_args;

/* The median of v[0..n), sorting v. */
static double median_of(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One process per row (forked), driven in interleaved rounds. */
/* Starts every row's process and waits for its setup; a row whose
 * process failed gets its error and is not run. */
static void start_rows(const config *cf, row *rows, int ns, int64_t steps) {
    for (int k = 0; k < ns; k++) {
        rows[k].proc.cmd = rows[k].proc.res = -1;
        rows[k].last.ok = 1;
        rows[k].times = calloc((size_t)steps, sizeof(double));
        if (!rows[k].times || spawn(cf, rows, k) != 0) {
            set_error(&rows[k].last, "cannot start a benchmark process");
            rows[k].alive = 0;
            continue;
        }
        reply r;
        if (cli_read_all(rows[k].proc.res, &r, sizeof r) != 0) {
            rows[k].alive = 0;
            set_error(&rows[k].last, "the benchmark process ended during setup");
        } else if (!r.ok) {
            rows[k].alive = 0;
            rows[k].last = r;
        }
        if (!rows[k].alive) reap(&rows[k]);
    }
}

/* The rounds, rows interleaved in each; then every row's result (and
 * profile), and its process reaped. */
static void run_rows(row *rows, int ns, int64_t warmup, int64_t steps, int profile) {
    for (int64_t round = 0; round < warmup + steps; round++)
        for (int k = 0; k < ns; k++) {
            reply q;
            if (profile && round == warmup && rows[k].alive) {
                char p = 'P';
                if (cli_write_all(rows[k].proc.cmd, &p, 1) != 0) rows[k].alive = 0;
            }
            if (!rows[k].alive || ask(&rows[k], 'S', &q) != 0) continue;
            if (round >= warmup) rows[k].times[round - warmup] = q.seconds;
        }
    for (int k = 0; k < ns; k++) {
        reply q;
        if (rows[k].alive && ask(&rows[k], 'R', &q) == 0) {
            rows[k].last = q;
            if (profile && q.ok) read_profile(&rows[k]);
        }
        reap(&rows[k]);
    }
}

/* What the rows are compared with: the row of `all` without a budget,
 * else the first row that ran; -1 when none ran. */
static int baseline(const row *rows, int ns) {
    for (int k = 0; k < ns; k++)
        if (rows[k].last.ok && rows[k].strategy == REMAT_STRATEGY_ALL && !rows[k].budget) return k;
    for (int k = 0; k < ns; k++)
        if (rows[k].last.ok) return k;
    return -1;
}

/* Row r as one JSON object, its ratios against row b. */
static void print_row_json(const bench_args *args, const row *r, const row *b, double med, double med_base,
                           const char *base_name, size_t base_rss) {
    const config *cf = &args->cf;
    cJSON *o = row_json(cf, r);
    cJSON_AddStringToObject(o, "planner", r->last.planner);
    cJSON_AddNumberToObject(o, "predicted_peak_bytes", (double)r->last.predicted);
    cJSON_AddNumberToObject(o, "measured_peak_bytes", (double)r->last.measured);
    cJSON_AddNumberToObject(o, "activation_bytes", (double)r->last.act);
    cJSON_AddStringToObject(o, "device", remat_device_str(cf->so.device));
    cJSON_AddNumberToObject(o, "held_bytes", (double)r->last.held);
    cJSON_AddNumberToObject(o, "arena_bytes", (double)r->last.arena);
    if (cf->so.device != REMAT_DEVICE_CPU) cJSON_AddNumberToObject(o, "device_used_bytes", (double)r->last.device_used);
    cJSON_AddNumberToObject(o, "process_peak_rss_bytes", (double)r->rss);
    cJSON_AddNumberToObject(o, "idle_process_rss_bytes", (double)base_rss);
    cJSON_AddNumberToObject(o, "recomputations", (double)r->last.recomputations);
    cJSON_AddNumberToObject(o, "warmup_steps", (double)args->warmup);
    cJSON_AddNumberToObject(o, "timed_steps", (double)args->steps);
    cJSON_AddNumberToObject(o, "median_step_seconds", med);
    cJSON *ts = cJSON_AddArrayToObject(o, "step_seconds"); /* sorted */
    for (int64_t i = 0; ts && i < args->steps; i++) cJSON_AddItemToArray(ts, cJSON_CreateNumber(r->times[i]));
    if (r->last.predicted_s > 0) {
        cJSON_AddNumberToObject(o, "predicted_step_seconds", r->last.predicted_s);
        cJSON_AddNumberToObject(o, "predicted_over_measured", r->last.predicted_s / med);
    }
    double rt = med / med_base;
    cJSON_AddStringToObject(o, "baseline", base_name);
    cJSON_AddNumberToObject(o, "time_ratio", rt);
    cJSON_AddNumberToObject(o, "overhead_percent", 100.0 * (rt - 1.0));
    cJSON_AddNumberToObject(o, "peak_ratio", (double)r->last.measured / (double)b->last.measured);
    cJSON_AddNumberToObject(o, "rss_ratio", b->rss ? (double)r->rss / (double)b->rss : 0.0);
    if (args->profile) {
        cJSON *a = cJSON_AddArrayToObject(o, "profile");
        for (int i = 0; a && i < r->nprof; i++) {
            cJSON *l = cJSON_CreateObject();
            cJSON_AddStringToObject(l, "op", r->prof[i].op);
            cJSON_AddStringToObject(l, "kind", r->prof[i].kind);
            cJSON_AddNumberToObject(l, "seconds_per_step", r->prof[i].seconds / (double)args->steps);
            cJSON_AddNumberToObject(l, "calls_per_step", (double)r->prof[i].count / (double)args->steps);
            cJSON_AddItemToArray(a, l);
        }
    }
    cli_json_print(o);
}

/* Row r as a line of the table, its ratios against row b. */
static void print_row_text(const config *cf, const row *r, const row *b, double med, double med_base) {
    char name[48], p1[32], p2[32], p3[32], p4[32], p5[32];
    row_name(r, name, sizeof name);
    printf("%-20s %12s %12s %12s %12s %12s %10lld %10.4f %9.3f %9.3f %9.3f\n", name,
           cli_fmt_bytes(r->last.predicted, p1, sizeof p1), cli_fmt_bytes(r->last.measured, p2, sizeof p2),
           cli_fmt_bytes(r->last.held, p5, sizeof p5),
           cli_fmt_bytes(cf->so.device == REMAT_DEVICE_CPU ? r->rss : r->last.device_used, p3, sizeof p3),
           cli_fmt_bytes(r->last.act, p4, sizeof p4), (long long)r->last.recomputations, med, med / med_base,
           (double)r->last.measured / (double)b->last.measured, b->rss ? (double)r->rss / (double)b->rss : 0.0);
}

/* The table's notes: predicted against measured step time, the profiles,
 * what the ratios are against. */
static void print_notes(const bench_args *args, row *rows, const double *med, const char *base_name,
                        size_t base_rss) {
    int ns = args->ns;
    for (int k = 0, head = 0; k < ns; k++) {
        if (!rows[k].last.ok || rows[k].last.predicted_s <= 0) continue;
        if (!head++) printf("\n%-20s %12s %12s %10s\n", "step time", "predicted", "measured", "ratio");
        char name[48];
        row_name(&rows[k], name, sizeof name);
        printf("%-20s %11.4fs %11.4fs %10.3f\n", name, rows[k].last.predicted_s, med[k],
               rows[k].last.predicted_s / med[k]);
    }
    if (args->profile)
        for (int k = 0; k < ns; k++)
            if (rows[k].last.ok && rows[k].nprof) print_profile(&rows[k], args->steps, med[k]); /* sorts its profile */
    if (*base_name) {
        char b[32];
        printf("(median of %lld steps after %lld warm-up; ratios against %s; peak RSS per process, of which "
               "%s before anything is built)\n",
               (long long)args->steps, (long long)args->warmup, base_name, cli_fmt_bytes(base_rss, b, sizeof b));
    }
}

static int bench_forked(bench_args *args) {
    const config *cf = &args->cf;
    row *rows = args->rows;
    int ns = args->ns, json = args->json;
    /* A child that finds its pipe closed must not kill the parent. */
    signal(SIGPIPE, SIG_IGN);
    if (args->init_out && save_init(cf, args->init_out)) return 1;
    size_t base_rss = cli_idle_rss();
    start_rows(cf, rows, ns, args->steps);
    if (!json)
        fprintf(stderr, "benchmarking %s, batch %lld: %d rows, %lld warm-up + %lld timed steps each, interleaved\n",
                cf->mo.name, (long long)cf->mo.batch, ns, (long long)args->warmup, (long long)args->steps);
    run_rows(rows, ns, args->warmup, args->steps, args->profile);
    int base = baseline(rows, ns), rc = 0;
    double med[MAX_ROWS] = {0};
    for (int k = 0; k < ns; k++)
        if (rows[k].last.ok) med[k] = median_of(rows[k].times, args->steps); /* sorts the times */
    char base_name[48] = "";
    if (base >= 0) row_name(&rows[base], base_name, sizeof base_name);
    if (!json)
        printf("%-20s %12s %12s %12s %12s %12s %10s %10s %9s %9s %9s\n", "strategy", "predicted", "measured", "held",
               cf->so.device == REMAT_DEVICE_CPU ? "peak RSS" : "GPU used", "activations", "recomputed", "step (s)",
               "time", "peak", "RSS");
    for (int k = 0; k < ns; k++) {
        const row *r = &rows[k];
        if (r->last.ok && json) print_row_json(args, r, &rows[base], med[k], med[base], base_name, base_rss);
        else if (r->last.ok) print_row_text(cf, r, &rows[base], med[k], med[base]);
        else if (json) {
            cJSON *o = row_json(cf, r);
            cJSON_AddStringToObject(o, "error", r->last.error);
            cli_json_print(o);
        } else {
            char name[48];
            row_name(r, name, sizeof name);
            printf("%-20s failed: %s\n", name, r->last.error);
        }
        if (!r->last.ok) rc = 1;
    }
    if (!json) print_notes(args, rows, med, base_name, base_rss);
    for (int k = 0; k < ns; k++) free(rows[k].times), free(rows[k].prof);
    if (rc) cli_fail("some rows failed (see above)");
    return rc;
}

/* ------------------------------------------------------ under mpirun */

/* What a rank reports of a row; rank 0 gathers them. */
typedef struct {
    int ok;
    double median, reduce, wait; /* seconds per step (medians): the step, the
                                  * reductions' own work, the wait after backward */
    double exposed, skew;        /* of the wait (medians): after the last rank's
                                  * backward (not hidden), before it (skew); -1:
                                  * several hosts */
    size_t predicted, measured, act, held, comm, rss;
    int64_t recomputations;
    int buckets, overlap;
    char planner[16];
    char error[480];
} rank_report;

/* Row r on this rank: a session over every rank, warm-up and timed steps.
 * A step that fails on this rank alone ends the job (returns 1); a session
 * the ranks could not make is a failed row on all of them. */
static int rank_row(const bench_args *args, const cli_dist *d, const remat_graph *g, const remat_model *m,
                    const cli_synth *syn, const row *r, rank_report *me) {
    remat_session_opts so = args->cf.so;
    so.strategy = r->strategy, so.budget = r->budget, so.comm = d->comm;
    if (so.cost_model) so.cost_model = &args->cf.cm;
    remat_optim_opts oo;
    bench_optim(&oo, syn);
    so.optim = &oo;
    memset(me, 0, sizeof *me);
    remat_session *s = NULL;
    if (remat_session_create(&s, g, m->loss, &so) != REMAT_OK) {
        snprintf(me->error, sizeof me->error, "%s", remat_last_error());
        return 0;
    }
    remat_dist_info di;
    remat_session_dist(s, &di);
    int64_t n = args->steps;
    void *x = malloc((size_t)(di.local_micro_batches * syn->nx) * 4);
    void *y = syn->ny ? malloc((size_t)(di.local_micro_batches * syn->ny) * 4) : NULL;
    double *t = calloc((size_t)(5 * n), sizeof *t); /* step, reduce, wait, exposed, skew */
    int rc = !x || (syn->ny && !y) || !t ? cli_fail("out of memory for a batch") : 0;
    if (!rc) bind_synthetic(s, m, syn, di.first_micro_batch, di.local_micro_batches, x, y);
    for (int64_t i = 0; i < args->warmup + n && !rc; i++) {
        float loss;
        double t0 = cli_now();
        if (remat_session_step(s, &loss) != REMAT_OK || remat_session_update(s) != REMAT_OK) {
            rc = cli_fail("%s", remat_last_error());
            break;
        }
        if (i < args->warmup) continue;
        remat_session_dist(s, &di);
        t[i - args->warmup] = cli_now() - t0;
        t[n + i - args->warmup] = di.reduce_seconds;
        t[2 * n + i - args->warmup] = di.wait_seconds;
        t[3 * n + i - args->warmup] = di.exposed_seconds;
        t[4 * n + i - args->warmup] = di.skew_seconds;
    }
    if (!rc) {
        remat_mem_stats meas;
        remat_plan_summary p;
        remat_session_mem(s, &meas);
        remat_session_plan(s, &p);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        *me = (rank_report){.ok = 1, .median = median_of(t, n), .reduce = median_of(t + n, n),
                            .wait = median_of(t + 2 * n, n), .exposed = median_of(t + 3 * n, n),
                            .skew = median_of(t + 4 * n, n), .predicted = p.predicted.peak[REMAT_MEM_TOTAL],
                            .measured = meas.peak[REMAT_MEM_TOTAL], .act = meas.peak[REMAT_MEM_ACT],
                            .held = remat_session_held_bytes(s), .comm = di.comm_bytes,
                            .rss = (size_t)ru.ru_maxrss * 1024, .recomputations = p.recomputations,
                            .buckets = di.buckets, .overlap = di.overlap};
        snprintf(me->planner, sizeof me->planner, "%s", p.planner);
    }
    free(x), free(y), free(t);
    remat_session_destroy(s);
    return rc;
}

/* Every row on every rank, one after the other; rank 0 prints. */
/* Row k over the R ranks' reports: the largest peak of any rank, the
 * slowest rank's times; a rank that failed makes the row failed. */
static rank_report worst_of(const rank_report *all, int k, int R) {
    rank_report w = all[(size_t)k * R];
    for (int i = 1; i < R; i++) {
        const rank_report *q = &all[(size_t)k * R + i];
        if (!q->ok) w = *q;
        if (!w.ok) continue;
        if (q->median > w.median) w.median = q->median;
        if (q->reduce > w.reduce) w.reduce = q->reduce;
        if (q->wait > w.wait) w.wait = q->wait;
        if (q->exposed > w.exposed) w.exposed = q->exposed;
        if (q->skew > w.skew) w.skew = q->skew;
        if (q->measured > w.measured) w.measured = q->measured;
        if (q->held > w.held) w.held = q->held;
        if (q->rss > w.rss) w.rss = q->rss;
    }
    return w;
}

/* Row k's figures over the ranks as one JSON object. */
static void print_rank_json(const bench_args *args, const cli_dist *d, int k, const rank_report *q,
                            const rank_report *all, double rt, const char *base_name) {
    const config *cf = &args->cf;
    int R = d->ranks;
    cJSON *o = row_json(cf, &args->rows[k]);
    cJSON_AddNumberToObject(o, "ranks", R);
    cJSON_AddNumberToObject(o, "hosts", d->hosts);
    cJSON_AddNumberToObject(o, "threads", cf->so.threads);
    cJSON_AddStringToObject(o, "planner", q->planner);
    cJSON_AddNumberToObject(o, "predicted_peak_bytes", (double)q->predicted);
    cJSON_AddNumberToObject(o, "measured_peak_bytes", (double)q->measured);
    cJSON_AddNumberToObject(o, "activation_bytes", (double)q->act);
    cJSON_AddNumberToObject(o, "held_bytes", (double)q->held);
    cJSON_AddNumberToObject(o, "comm_bytes", (double)q->comm);
    cJSON_AddNumberToObject(o, "process_peak_rss_bytes", (double)q->rss);
    cJSON_AddBoolToObject(o, "rss_includes_earlier_rows", k > 0);
    cJSON_AddNumberToObject(o, "recomputations", (double)q->recomputations);
    cJSON_AddNumberToObject(o, "buckets", q->buckets);
    cJSON_AddBoolToObject(o, "overlap", q->overlap);
    cJSON_AddNumberToObject(o, "warmup_steps", (double)args->warmup);
    cJSON_AddNumberToObject(o, "timed_steps", (double)args->steps);
    cJSON_AddNumberToObject(o, "median_step_seconds", q->median);
    cJSON *a = cJSON_AddArrayToObject(o, "rank_step_seconds");
    for (int i = 0; a && i < R; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(all[(size_t)k * R + i].median));
    cJSON_AddNumberToObject(o, "reduce_seconds", q->reduce);
    cJSON_AddNumberToObject(o, "wait_seconds", q->wait);
    if (q->exposed >= 0) {
        cJSON_AddNumberToObject(o, "exposed_seconds", q->exposed);
        cJSON_AddNumberToObject(o, "skew_seconds", q->skew);
    }
    cJSON_AddStringToObject(o, "baseline", base_name);
    cJSON_AddNumberToObject(o, "time_ratio", rt);
    cJSON_AddNumberToObject(o, "overhead_percent", 100.0 * (rt - 1.0));
    cli_json_print(o);
}

/* Rank 0's table (or JSON lines) of the rows over every rank; 1 when a
 * row failed. */
static int print_ranks(const bench_args *args, const cli_dist *d, const rank_report *all) {
    const config *cf = &args->cf;
    int ns = args->ns, R = d->ranks, base = -1, rc = 0;
    rank_report worst[MAX_ROWS];
    for (int k = 0; k < ns; k++) {
        worst[k] = worst_of(all, k, R);
        if (worst[k].ok && args->rows[k].strategy == REMAT_STRATEGY_ALL && !args->rows[k].budget && base < 0) base = k;
    }
    for (int k = 0; k < ns && base < 0; k++)
        if (worst[k].ok) base = k;
    char base_name[48] = "";
    if (base >= 0) row_name(&args->rows[base], base_name, sizeof base_name);
    if (!args->json)
        printf("%-20s %12s %12s %12s %12s %10s %10s %9s %10s %10s %11s %12s\n", "strategy", "held/rank", "measured",
               "activations", "comm", "recomputed", "step (s)", "time", "reduce (s)", "wait (s)", "exposed (s)",
               "peak RSS");
    for (int k = 0; k < ns; k++) {
        const rank_report *q = &worst[k];
        char name[48];
        row_name(&args->rows[k], name, sizeof name);
        if (!q->ok) {
            rc = 1;
            if (args->json) {
                cJSON *o = row_json(cf, &args->rows[k]);
                cJSON_AddStringToObject(o, "error", q->error);
                cli_json_print(o);
            } else {
                printf("%-20s failed: %s\n", name, q->error);
            }
            continue;
        }
        double rt = q->median / worst[base].median;
        if (args->json) {
            print_rank_json(args, d, k, q, all, rt, base_name);
        } else {
            char b1[32], b2[32], b3[32], b4[32], b5[32], ex[32] = "-";
            if (q->exposed >= 0) snprintf(ex, sizeof ex, "%.4f", q->exposed);
            printf("%-20s %12s %12s %12s %12s %10lld %10.4f %9.3f %10.4f %10.4f %11s %12s\n", name,
                   cli_fmt_bytes(q->held, b1, sizeof b1), cli_fmt_bytes(q->measured, b2, sizeof b2),
                   cli_fmt_bytes(q->act, b3, sizeof b3), cli_fmt_bytes(q->comm, b4, sizeof b4),
                   (long long)q->recomputations, q->median, rt, q->reduce, q->wait, ex,
                   cli_fmt_bytes(q->rss, b5, sizeof b5));
        }
    }
    if (!args->json && base >= 0)
        printf("(per rank: the largest peak of any rank, the slowest rank's median of %lld steps after %lld "
               "warm-up; reduce: the reductions' own work per step, wait: the time after this rank's backward "
               "pass until they completed, exposed: the part of it after the last rank's backward pass (what "
               "the backward pass did not hide; one host only); ratios against %s; peak RSS is the process's, "
               "earlier rows included)\n",
               (long long)args->steps, (long long)args->warmup, base_name);
    return rc;
}

/* The model, its synthetic data and (rank 0, with --save-init) the
 * initial weights: 0, or the exit status after printing why. */
static int setup_ranks(const bench_args *args, const cli_dist *d, remat_graph **g, remat_model *m, cli_synth *syn) {
    const config *cf = &args->cf;
    if (remat_graph_create(g) != REMAT_OK || remat_model_build(*g, &cf->mo, m) != REMAT_OK)
        return cli_fail("%s", remat_last_error());
    if (cli_synth_init(syn, *g, m, &cf->mo, cf->so.seed)) return 1;
    if (!args->init_out || d->rank != 0) return 0;
    /* the initial weights: the seed's alone, the same in every row */
    remat_session *s = NULL;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1, so.seed = cf->so.seed;
    int rc = 0;
    if (remat_session_create(&s, *g, m->loss, &so) != REMAT_OK || remat_safetensors_save(s, args->init_out) != REMAT_OK)
        rc = cli_fail("%s", remat_last_error());
    remat_session_destroy(s);
    return rc;
}

static int bench_ranks(bench_args *args, cli_dist *d) {
    const config *cf = &args->cf;
    int ns = args->ns, R = d->ranks;
    remat_graph *g = NULL;
    remat_model m;
    cli_synth syn;
    rank_report *all = calloc((size_t)(ns * R) + 1, sizeof *all);
    int rc = !all ? cli_fail("out of memory") : setup_ranks(args, d, &g, &m, &syn);
    if ((rc = cli_dist_agree(d, rc))) {
        remat_graph_destroy(g), free(all);
        return rc;
    }
    char line[200];
    if (!args->json && d->rank == 0)
        fprintf(stderr, "benchmarking %s, batch %lld (micro-batches of %lld): %s; %d rows, %lld warm-up + %lld timed "
                "steps each, one row after the other\n", cf->mo.name, (long long)cf->batch, (long long)cf->mo.batch,
                cli_dist_line(d, cf->so.threads, line, sizeof line), ns, (long long)args->warmup,
                (long long)args->steps);
    for (int k = 0; k < ns && !rc; k++) {
        rank_report me;
        rc = rank_row(args, d, g, &m, &syn, &args->rows[k], &me);
        if (rc) break; /* this rank alone: cli_dist_end ends the job */
        if (remat_comm_allgather(d->comm, &me, sizeof me, all + (size_t)k * R) != REMAT_OK)
            rc = cli_fail("%s", remat_last_error());
    }
    if (!rc && d->rank == 0) rc = print_ranks(args, d, all);
    if (!rc) rc = cli_dist_agree(d, 0); /* rank 0 printed */
    remat_graph_destroy(g);
    free(all);
    if (rc && d->rank == 0 && !args->json) cli_fail("some rows failed (see above)");
    return rc;
}

/* Options, rows and the model's check, on this rank: 0 or the exit status
 * after printing why. */
static int parse(bench_args *b, const cli_dist *d, int argc, char **argv) {
    size_t extra_budget[MAX_ROWS];
    int nb = 0;
    snprintf(b->list, sizeof b->list, "all,sqrt");
    b->steps = 10, b->warmup = 2;
    cli_model_args ma;
    cli_model_args_init(&ma);
    cli_session_args sa;
    cli_session_args_init(&sa);
    static const struct option opts[] = {
        CLI_MODEL_OPTIONS, CLI_SESSION_OPTIONS, CLI_DIST_OPTIONS,
        {"data", required_argument, 0, 'd'},    {"strategies", required_argument, 0, 's'},
        {"steps", required_argument, 0, 'n'},   {"warmup", required_argument, 0, 'w'},
        {"json", no_argument, 0, 'j'},          {"help", no_argument, 0, 'h'},
        {"budget", required_argument, 0, 'B'},  {"save-init", required_argument, 0, 'W'},
        {"profile", no_argument, 0, 'P'},       {0, 0, 0, 0}};
    cli_opts co = {.cmd = "bench", .ma = &ma, .sa = &sa, .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        int bad = 0;
        switch (c) {
        case 'd': b->data = optarg; break;
        case 's': bad = strlen(optarg) >= sizeof b->list; if (!bad) strcpy(b->list, optarg); break;
        case 'n': bad = cli_parse_i64(optarg, &b->steps) || b->steps < 1 || b->steps > 1000000; break;
        case 'w': bad = cli_parse_i64(optarg, &b->warmup) || b->warmup < 0 || b->warmup > 1000000; break;
        case 'j': b->json = 1; break;
        case 'P': b->profile = 1; break;
        case 'W': b->init_out = optarg; break;
        case 'B':
            if (nb == MAX_ROWS) return cli_usage_error("bench", "at most %d budgets", MAX_ROWS);
            bad = cli_parse_size(optarg, &extra_budget[nb]) || extra_budget[nb] == 0;
            nb++;
            break;
        case 'h': b->help = 1; return 0;
        }
        if (bad) return cli_bad_value(&co, optarg, "");
    }
    if (co.rc) return co.rc;
    if (b->data && strncmp(b->data, "tokens:", 7) == 0)
        return cli_usage_error("bench", "bench runs on synthetic batches; give a data set's name for its shape only");
    row *rows = b->rows;
    memset(rows, 0, sizeof b->rows);
    for (char *tok = strtok(b->list, ","); tok; tok = strtok(NULL, ",")) {
        if (b->ns == MAX_ROWS) return cli_usage_error("bench", "at most %d rows", MAX_ROWS);
        if (remat_strategy_parse(tok, &rows[b->ns].strategy) != REMAT_OK)
            return cli_usage_error("bench", "%s", remat_last_error());
        b->ns++;
    }
    for (int i = 0; i < nb; i++) {
        if (b->ns == MAX_ROWS) return cli_usage_error("bench", "at most %d rows (strategies and budgets)", MAX_ROWS);
        rows[b->ns].strategy = REMAT_STRATEGY_OPTIMAL;
        rows[b->ns++].budget = extra_budget[i];
    }
    if (b->ns == 0) return cli_usage_error("bench", "no strategy given");
    config *cf = &b->cf;
    /* The parent does not touch the device: a CUDA context does not survive
     * fork, so every row's process makes its own (and checks the device). */
    sa.check_device = 0;
    int u = cli_session_opts(&sa, "bench", &cf->so, &cf->cm, NULL);
    if (u) return u;
    u = cli_model_opts(&ma, b->data, "bench", &cf->mo);
    if (u) return u;
    /* --batch is the step's global batch; the graph is one micro-batch */
    cf->batch = cf->mo.batch;
    if ((u = cli_dist_micro_batch(d, &sa, cf->batch, "bench", &cf->mo.batch))) return u;
    if (ma.batch > 0) ma.batch = cf->mo.batch; /* what cli_model_check finds in the graph */
    cf->so.micro_batches = cf->batch / cf->mo.batch;
    if (cf->so.threads == 0) cf->so.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    /* the model must build, with every option showing, before any row starts */
    remat_graph *pg = NULL;
    remat_model pm;
    if (remat_graph_create(&pg) != REMAT_OK || remat_model_build(pg, &cf->mo, &pm) != REMAT_OK) {
        remat_graph_destroy(pg);
        return cli_fail("%s", remat_last_error());
    }
    u = cli_model_check(&ma, pg, &pm, "bench");
    remat_graph_destroy(pg);
    return u;
}

int cmd_bench(int argc, char **argv) {
    cli_dist d;
    if (cli_dist_begin(&d)) return 1;
    bench_args b;
    memset(&b, 0, sizeof b);
    int rc = parse(&b, &d, argc, argv);
    if (b.help && !rc) {
        if (d.rank == 0) help();
    } else if (!(rc = cli_dist_agree(&d, rc))) {
        /* MPI does not survive a fork: under mpirun the rows run here */
        rc = strcmp(remat_comm_kind(d.comm), "mpi") == 0 ? bench_ranks(&b, &d) : bench_forked(&b);
    }
    return cli_dist_end(&d, rc);
}
