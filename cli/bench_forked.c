/* bench_forked.c: `remat bench` in one process per row, driven by the
 * parent.
 *
 * Every strategy (and `optimal` at each --budget) runs in its own child
 * process (bench_child.c), forked before anything is built. The parent
 * drives them in interleaved rounds: each round asks every child in turn,
 * through a pipe, for one training step, so that machine noise hits the
 * strategies alike, and only one child computes at a time. The child times
 * its step itself and sends the time back; at the end it reports its
 * predicted and measured peaks and exits, and the parent reads the child's
 * peak resident set size from wait4, so every row has its own process peak
 * RSS. Rows give the median step time after the warm-up steps and ratios
 * against `all` (or the first row when `all` is not benchmarked). The
 * process machinery is procs.c. The row names, JSON fields and median here
 * are also the mpirun table's (bench_ranks.c).
 */
#include "bench.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n), sorting v. */
double bench_median(double *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* "sqrt" or "optimal@512.0 MiB". */
void bench_row_name(const row *r, char *buf, size_t cap) {
    if (r->budget) {
        char b[32];
        snprintf(buf, cap, "optimal@%s", cli_fmt_bytes(r->budget, b, sizeof b));
    } else {
        snprintf(buf, cap, "%s", remat_strategy_str(r->strategy));
    }
}

/* A row's JSON object with the fields every row has. */
cJSON *bench_row_json(const config *cf, const row *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", cf->mo.name);
    cJSON_AddNumberToObject(o, "batch", (double)cf->batch);
    cJSON_AddNumberToObject(o, "micro_batch", (double)cf->mo.batch);
    cJSON_AddStringToObject(o, "strategy", remat_strategy_str(r->strategy));
    if (r->budget) cJSON_AddNumberToObject(o, "budget_bytes", (double)r->budget);
    return o;
}

/* Starts row k's process; 0 on success. */
static int spawn(const config *cf, row *rows, int k) {
    cli_proc others[MAX_ROWS];
    for (int j = 0; j < k; j++) others[j] = rows[j].proc;
    child_arg a = {cf, &rows[k]}; /* read by the child before this returns: fork copies it */
    if (cli_proc_start(&rows[k].proc, others, k, bench_child, &a) != 0) return -1;
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
        bench_set_error(&r->last, "the benchmark process ended unexpectedly");
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
    if (cli_write_all(r->proc.cmd, &c, 1) != 0 || cli_read_all(r->proc.res, &n, sizeof n) != 0 || n < 0 || n > MAX_PROF)
        return;
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

/* Where a row's step time goes: per op and kind, seconds per step and the
 * share of the executor's time, largest first; what the executor did not
 * run (zeroing the gradients, the optimizer update, timing) is the rest of
 * the median step. */
static void print_profile(row *r, int64_t steps, double median) {
    char name[48];
    bench_row_name(r, name, sizeof name);
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
        printf("  %-18s %-10s %10.5f %6.1f%% %8.0f\n", r->prof[i].op, r->prof[i].kind, sps,
               tot > 0 ? 100.0 * sps / tot : 0.0, (double)r->prof[i].count / (double)steps);
    }
}

/* --save-init: writes the initial weights from a short-lived process
 * (bench_save_init_child); 0, or the exit status after printing why. */
static int save_init(const config *cf, const char *path) {
    init_arg a = {cf, path};
    cli_proc p;
    if (cli_proc_start(&p, NULL, 0, bench_save_init_child, &a) != 0) return cli_fail("cannot start a process");
    reply r;
    int ok = cli_read_all(p.res, &r, sizeof r) == 0, sig;
    cli_proc_end(&p, &sig);
    if (!ok) return cli_fail("writing the initial weights to %s: the process ended unexpectedly", path);
    if (!r.ok) return cli_fail("%s", r.error);
    return 0;
}

/* Starts every row's process and waits for its setup; a row whose
 * process failed gets its error and is not run. */
static void start_rows(const config *cf, row *rows, int ns, int64_t steps) {
    for (int k = 0; k < ns; k++) {
        rows[k].proc.cmd = rows[k].proc.res = -1;
        rows[k].last.ok = 1;
        rows[k].times = calloc((size_t)steps, sizeof(double));
        if (!rows[k].times || spawn(cf, rows, k) != 0) {
            bench_set_error(&rows[k].last, "cannot start a benchmark process");
            rows[k].alive = 0;
            continue;
        }
        reply r;
        if (cli_read_all(rows[k].proc.res, &r, sizeof r) != 0) {
            rows[k].alive = 0;
            bench_set_error(&rows[k].last, "the benchmark process ended during setup");
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
    cJSON *o = bench_row_json(cf, r);
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
    bench_row_name(r, name, sizeof name);
    printf("%-20s %12s %12s %12s %12s %12s %10lld %10.4f %9.3f %9.3f %9.3f\n", name,
           cli_fmt_bytes(r->last.predicted, p1, sizeof p1), cli_fmt_bytes(r->last.measured, p2, sizeof p2),
           cli_fmt_bytes(r->last.held, p5, sizeof p5),
           cli_fmt_bytes(cf->so.device == REMAT_DEVICE_CPU ? r->rss : r->last.device_used, p3, sizeof p3),
           cli_fmt_bytes(r->last.act, p4, sizeof p4), (long long)r->last.recomputations, med, med / med_base,
           (double)r->last.measured / (double)b->last.measured, b->rss ? (double)r->rss / (double)b->rss : 0.0);
}

/* The table's notes: predicted against measured step time, the profiles,
 * what the ratios are against. */
static void print_notes(const bench_args *args, row *rows, const double *med, const char *base_name, size_t base_rss) {
    int ns = args->ns;
    for (int k = 0, head = 0; k < ns; k++) {
        if (!rows[k].last.ok || rows[k].last.predicted_s <= 0) continue;
        if (!head++) printf("\n%-20s %12s %12s %10s\n", "step time", "predicted", "measured", "ratio");
        char name[48];
        bench_row_name(&rows[k], name, sizeof name);
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

/* The rows, one forked process each, and their table (or JSON lines). */
int bench_forked(bench_args *args) {
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
        if (rows[k].last.ok) med[k] = bench_median(rows[k].times, args->steps); /* sorts the times */
    char base_name[48] = "";
    if (base >= 0) bench_row_name(&rows[base], base_name, sizeof base_name);
    if (!json)
        printf("%-20s %12s %12s %12s %12s %12s %10s %10s %9s %9s %9s\n", "strategy", "predicted", "measured", "held",
               cf->so.device == REMAT_DEVICE_CPU ? "peak RSS" : "GPU used", "activations", "recomputed", "step (s)",
               "time", "peak", "RSS");
    for (int k = 0; k < ns; k++) {
        const row *r = &rows[k];
        if (r->last.ok && json) print_row_json(args, r, &rows[base], med[k], med[base], base_name, base_rss);
        else if (r->last.ok) print_row_text(cf, r, &rows[base], med[k], med[base]);
        else if (json) {
            cJSON *o = bench_row_json(cf, r);
            cJSON_AddStringToObject(o, "error", r->last.error);
            cli_json_print(o);
        } else {
            char name[48];
            bench_row_name(r, name, sizeof name);
            printf("%-20s failed: %s\n", name, r->last.error);
        }
        if (!r->last.ok) rc = 1;
    }
    if (!json) print_notes(args, rows, med, base_name, base_rss);
    for (int k = 0; k < ns; k++) free(rows[k].times), free(rows[k].prof);
    if (rc) cli_fail("some rows failed (see above)");
    return rc;
}
