/* bench_ranks.c: `remat bench` under mpirun.
 *
 * --batch is the global batch of a step, split into micro-batches
 * (--micro-batch, default batch / ranks). Under mpirun (cli_dist) there is
 * no fork (MPI does not survive one): every rank runs the rows one after
 * the other in its own process, each row's session over all the ranks,
 * and rank 0 prints per-rank peaks (the largest), step times (the slowest
 * rank's median) and the reductions' times: their own work, and the wait
 * after the backward pass that the overlap did not hide.
 */
#include "bench.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

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
    if (so.cost_model) so.cost_model = args->cf.cm;
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
    if (!rc) bench_bind_synthetic(s, m, syn, di.first_micro_batch, di.local_micro_batches, x, y);
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
        *me = (rank_report){.ok = 1,
                            .median = bench_median(t, n),
                            .reduce = bench_median(t + n, n),
                            .wait = bench_median(t + 2 * n, n),
                            .exposed = bench_median(t + 3 * n, n),
                            .skew = bench_median(t + 4 * n, n),
                            .predicted = p.predicted.peak[REMAT_MEM_TOTAL],
                            .measured = meas.peak[REMAT_MEM_TOTAL],
                            .act = meas.peak[REMAT_MEM_ACT],
                            .held = remat_session_held_bytes(s),
                            .comm = di.comm_bytes,
                            .rss = (size_t)ru.ru_maxrss * 1024,
                            .recomputations = p.recomputations,
                            .buckets = di.buckets,
                            .overlap = di.overlap};
        snprintf(me->planner, sizeof me->planner, "%s", p.planner);
    }
    free(x), free(y), free(t);
    remat_session_destroy(s);
    return rc;
}

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
    cJSON *o = bench_row_json(cf, &args->rows[k]);
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
    if (base >= 0) bench_row_name(&args->rows[base], base_name, sizeof base_name);
    if (!args->json)
        printf("%-20s %12s %12s %12s %12s %10s %10s %9s %10s %10s %11s %12s\n", "strategy", "held/rank", "measured",
               "activations", "comm", "recomputed", "step (s)", "time", "reduce (s)", "wait (s)", "exposed (s)",
               "peak RSS");
    for (int k = 0; k < ns; k++) {
        const rank_report *q = &worst[k];
        char name[48];
        bench_row_name(&args->rows[k], name, sizeof name);
        if (!q->ok) {
            rc = 1;
            if (args->json) {
                cJSON *o = bench_row_json(cf, &args->rows[k]);
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

/* Every row on every rank, one after the other; rank 0 prints. */
int bench_ranks(bench_args *args, cli_dist *d) {
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
        fprintf(stderr,
                "benchmarking %s, batch %lld (micro-batches of %lld): %s; %d rows, %lld warm-up + %lld timed "
                "steps each, one row after the other\n",
                cf->mo.name, (long long)cf->batch, (long long)cf->mo.batch,
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
