/* max_batch.c: `remat plan --max-batch`: how big a batch fits a memory
 * budget. Three answers: the largest batch whose training step fits with
 * store-all (`all`, nothing recomputed), with recomputation (`optimal`, at
 * any cost), and with recomputation costing at most --max-overhead percent
 * of the step; with --host-budget two more, the same two for `optimal`
 * with offload (its exposed copy time counted in the overhead).
 *
 * "Fits" is what a user meets: a session created with the strategy, the
 * budget and the optimizer succeeds; REMAT_BUDGET is "does not fit" and any
 * other error stops the search. Each answer is searched by doubling from
 * the start batch until a batch fails, then bisection between the last
 * batch that qualified and the first that did not; the SCAN_ABOVE batches
 * above the result are then planned too, and whenever one qualifies it
 * becomes the result and the scan goes on above it. So every answer
 * qualifies and the SCAN_ABOVE batches after it do not. That is the whole
 * claim: store-all's memory grows with the batch, but optimal's plans and
 * their extra compute come from a search over candidates and need not be
 * monotone in the batch, so a larger batch far above the answer could
 * qualify and would not be seen. Plans are memoized per (strategy, batch):
 * the optimal searches share theirs.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

enum {
    SCAN_ABOVE = 4,  /* batches planned above each answer */
    MAX_PROBES = 256 /* plans in one search, all answers together */
};

/* One planned (strategy, batch). */
typedef struct {
    remat_strategy strategy;
    int host; /* planned with the host budget (offload) */
    int64_t batch;
    int fits;
    remat_plan_summary p; /* when it fits */
} probe;

typedef enum { WANT_ALL, WANT_OPTIMAL, WANT_OVERHEAD, WANT_OFFLOAD, WANT_OFFLOAD_OVERHEAD } want;

typedef struct {
    const remat_model_opts *mo;
    const remat_session_opts *so; /* budget, optimizer, device, cost model */
    double max_overhead;          /* percent */
    int in_seconds;               /* overhead in predicted seconds, else FLOPs */
    int64_t bound;                /* the largest batch searched */
    probe probes[MAX_PROBES];
    int n;
} search;

/* The answer for one criterion. */
typedef struct {
    int64_t batch;   /* 0: not even batch 1 qualifies */
    const probe *at; /* its plan; NULL when batch is 0 */
    int at_bound;    /* the search's bound qualified: larger were not tried */
} answer;

/* Recomputation and exposed copies (offload) as a percentage of the step
 * without them: predicted seconds with a calibrated cost model, FLOPs
 * otherwise (the copies' stall is in the cost model's units: FLOPs at a
 * nominal rate when it is not calibrated). */
static double overhead(const search *s, const remat_plan_summary *p) {
    if (s->in_seconds) {
        double extra = p->extra_seconds + p->stall_seconds, base = p->seconds - extra;
        return base > 0 ? 100.0 * extra / base : 0.0;
    }
    return p->flops > 0 ? 100.0 * (p->extra_flops + p->stall_seconds) / p->flops : 0.0;
}

/* The most elements one tensor of the step takes per sample: the largest
 * growth of a node's element count from batch 1 to batch 2 (parameters do
 * not grow). 0 on success, else the model's error is printed. */
static int per_sample_elements(const remat_model_opts *mo, int64_t *out) {
    int64_t counts[2] = {0, 0}, *numel[2] = {NULL, NULL};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        remat_model_opts o = *mo;
        o.batch = k + 1;
        remat_graph *g = NULL;
        remat_model m;
        if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &o, &m) != REMAT_OK) {
            rc = cli_fail("%s", remat_last_error());
        } else {
            counts[k] = remat_graph_node_count(g);
            numel[k] = calloc((size_t)counts[k] + 1, sizeof *numel[k]);
            if (!numel[k]) rc = cli_fail("out of memory");
            for (int v = 0; rc == 0 && v < counts[k]; v++) {
                int64_t dims[REMAT_MAX_DIMS], e = 1;
                int nd = remat_node_shape(g, v, dims);
                for (int d = 0; d < nd; d++) e *= dims[d];
                numel[k][v] = e;
            }
        }
        remat_graph_destroy(g);
    }
    int64_t most = 1;
    for (int v = 0; rc == 0 && v < counts[0]; v++) {
        /* the same nodes at both batches, unless a model changes its graph
         * with the batch: then every node's whole count bounds it */
        int64_t e = counts[0] == counts[1] ? numel[1][v] - numel[0][v] : numel[0][v];
        if (e > most) most = e;
    }
    free(numel[0]), free(numel[1]);
    *out = most;
    return rc;
}

/* Plans (strategy, batch) once; prints a line of progress. 0 on success
 * (*out set, fitting or not); 1 after printing an error that is not the
 * budget's. */
static int plan_batch(search *s, remat_strategy st, int host, int64_t batch, const probe **out) {
    for (int i = 0; i < s->n; i++)
        if (s->probes[i].strategy == st && s->probes[i].host == host && s->probes[i].batch == batch) {
            *out = &s->probes[i];
            return 0;
        }
    if (s->n == MAX_PROBES) return cli_fail("--max-batch: stopped after %d plans", MAX_PROBES);
    probe *pr = &s->probes[s->n];
    memset(pr, 0, sizeof *pr);
    pr->strategy = st;
    pr->host = host;
    pr->batch = batch;
    double t0 = cli_now();
    remat_model_opts mo = *s->mo;
    mo.batch = batch;
    remat_session_opts so = *s->so;
    so.strategy = st;
    so.plan_only = 1;
    so.host_budget = host ? s->so->host_budget : 0;
    const char *name = host ? "offload" : remat_strategy_str(st);
    remat_graph *g = NULL;
    remat_session *ses = NULL;
    remat_model m;
    remat_status rc = remat_graph_create(&g);
    if (rc == REMAT_OK) rc = remat_model_build(g, &mo, &m);
    if (rc == REMAT_OK) rc = remat_session_create(&ses, g, m.loss, &so);
    if (rc == REMAT_OK) rc = remat_session_plan(ses, &pr->p);
    remat_session_destroy(ses);
    remat_graph_destroy(g);
    if (rc != REMAT_OK && rc != REMAT_BUDGET)
        return cli_fail("%s at batch %lld: %s", name, (long long)batch, remat_last_error());
    pr->fits = rc == REMAT_OK;
    s->n++;
    char b[32];
    if (pr->fits)
        fprintf(stderr, "remat: plan %-7s batch %8lld: fits, holds %s, extra %.1f%% (%.2f s)\n", name, (long long)batch,
                cli_fmt_bytes(pr->p.held_bytes, b, sizeof b), overhead(s, &pr->p), cli_now() - t0);
    else
        fprintf(stderr, "remat: plan %-7s batch %8lld: does not fit (%.2f s)\n", name, (long long)batch,
                cli_now() - t0);
    *out = pr;
    return 0;
}

/* Whether batch qualifies for w; 0 on success, 1 on an error (printed). */
static int qualifies(search *s, want w, int64_t batch, int *ok, const probe **at) {
    const probe *pr = NULL;
    int host = w == WANT_OFFLOAD || w == WANT_OFFLOAD_OVERHEAD;
    if (plan_batch(s, w == WANT_ALL ? REMAT_STRATEGY_ALL : REMAT_STRATEGY_OPTIMAL, host, batch, &pr)) return 1;
    int capped = w == WANT_OVERHEAD || w == WANT_OFFLOAD_OVERHEAD;
    *ok = pr->fits && (!capped || overhead(s, &pr->p) <= s->max_overhead);
    *at = pr;
    return 0;
}

/* The largest batch that qualifies for w (see the top of the file). */
static int find_largest(search *s, want w, int64_t start, answer *out) {
    const probe *pr = NULL, *best = NULL;
    int ok;
    int64_t lo = 0, hi = start; /* lo qualifies (0 trivially), hi does not */
    if (qualifies(s, w, start, &ok, &pr)) return 1;
    if (ok) {
        lo = start, best = pr, hi = s->bound + 1; /* past the bound: treated as failing */
        while (lo < s->bound) {
            int64_t b = lo > s->bound / 2 ? s->bound : 2 * lo;
            if (qualifies(s, w, b, &ok, &pr)) return 1;
            if (!ok) {
                hi = b;
                break;
            }
            lo = b, best = pr;
        }
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (qualifies(s, w, mid, &ok, &pr)) return 1;
        if (ok) lo = mid, best = pr;
        else hi = mid;
    }
    for (int64_t b = lo + 1; b <= lo + SCAN_ABOVE && b <= s->bound; b++) {
        if (qualifies(s, w, b, &ok, &pr)) return 1;
        if (ok) lo = b, best = pr; /* not monotone: go on above it */
    }
    out->batch = lo;
    out->at = best;
    out->at_bound = lo == s->bound;
    return 0;
}

static void answer_json(cJSON *o, const char *key, const search *s, const answer *a, const char *strategy) {
    cJSON *e = cJSON_AddObjectToObject(o, key);
    cJSON_AddStringToObject(e, "strategy", strategy);
    cJSON_AddNumberToObject(e, "batch", (double)a->batch);
    if (!a->at) return;
    const remat_plan_summary *p = &a->at->p;
    cJSON_AddNumberToObject(e, "held_bytes", (double)p->held_bytes);
    cJSON_AddNumberToObject(e, "extra_percent", overhead(s, p));
    cJSON_AddNumberToObject(e, "step_flops", p->flops);
    cJSON_AddNumberToObject(e, "extra_flops", p->extra_flops);
    if (p->calibrated) {
        cJSON_AddNumberToObject(e, "predicted_seconds", p->seconds);
        cJSON_AddNumberToObject(e, "extra_seconds", p->extra_seconds);
    }
    cJSON_AddNumberToObject(e, "recomputations", (double)p->recomputations);
    cJSON_AddStringToObject(e, "planner", p->planner);
    if (*p->candidate) cJSON_AddStringToObject(e, "candidate", p->candidate);
    if (p->offloaded_values) {
        cJSON_AddNumberToObject(e, "offloaded_values", (double)p->offloaded_values);
        cJSON_AddNumberToObject(e, "host_bytes", (double)p->host_bytes);
        cJSON_AddNumberToObject(e, "exposed_copy_cost", p->stall_seconds);
    }
    cJSON_AddBoolToObject(e, "at_search_bound", a->at_bound);
}

/* none: what it means that not even batch 1 qualifies. */
static void answer_line(const char *label, const search *s, const answer *a, const char *none) {
    char b[32];
    if (!a->at) {
        printf("  %-26s none: %s\n", label, none);
        return;
    }
    char h[48] = "";
    if (a->at->p.offloaded_values) snprintf(h, sizeof h, ", host %s", cli_fmt_bytes(a->at->p.host_bytes, b, sizeof b));
    printf("  %-26s batch %8lld  holds %12zu B (%s)%s, extra %.1f%%%s\n", label, (long long)a->batch,
           a->at->p.held_bytes, cli_fmt_bytes(a->at->p.held_bytes, b, sizeof b), h, overhead(s, &a->at->p),
           a->at_bound ? " (the search's bound)" : "");
}

/* The answers as text: store-all, optimal, optimal within the overhead,
 * and with a host budget the two with offload. */
static void print_text(const remat_model_opts *mo, const remat_session_opts *so, const search *s, const char *optim,
                       double max_overhead, const char *cost_used, int64_t start, double secs,
                       const answer *const ans[5]) {
    const answer all = *ans[0], opt = *ans[1], within = *ans[2], off = *ans[3], off_within = *ans[4];
    int host = so->host_budget > 0;
    char b[32];
    char label[64];
    printf("model %s, device %s, optimizer %s, budget %s (%zu B): the largest batch that fits\n", mo->name,
           remat_device_str(so->device), optim, cli_fmt_bytes(so->budget, b, sizeof b), so->budget);
    const char *none = "batch 1 does not fit (remat plan --batch 1 says why)";
    answer_line("store-all (all)", s, &all, none);
    answer_line("recomputation (optimal)", s, &opt, none);
    snprintf(label, sizeof label, "optimal, extra <= %g%%", max_overhead);
    answer_line(label, s, &within, "batch 1 does not fit or needs more extra compute");
    if (host) {
        char hb[32];
        snprintf(label, sizeof label, "with offload (optimal)");
        answer_line(label, s, &off, none);
        snprintf(label, sizeof label, "offload, extra <= %g%%", max_overhead);
        answer_line(label, s, &off_within, "batch 1 does not fit or needs more extra compute");
        printf("offload: host budget %s; extra includes the copies' exposed time\n",
               cli_fmt_bytes(so->host_budget, hb, sizeof hb));
    }
    if (all.batch > 0)
        printf("recomputation fits %.2fx store-all's batch (%.2fx within %g%%)\n",
               (double)opt.batch / (double)all.batch, (double)within.batch / (double)all.batch, max_overhead);
    if (s->in_seconds)
        printf("extra = predicted recomputation seconds / the step's seconds without it (cost model %s)\n",
               cost_used ? cost_used : "given");
    else
        printf("extra = recomputed FLOPs / the step's FLOPs without recomputation (no calibrated cost "
               "model: `remat calibrate` measures one)\n");
    printf("search: doubling from batch %lld, then bisection; each answer qualifies and the %d batches above "
           "it do not (larger ones were not planned: optimal's fit and extra need not be monotone in the "
           "batch); %d plans in %.1f s\n",
           (long long)start, SCAN_ABOVE, s->n, secs);
}

int cli_plan_max_batch(const remat_model_opts *mo, int64_t start, const remat_session_opts *so, const char *optim,
                       double max_overhead, const char *cost_used, int json) {
    search *s = calloc(1, sizeof *s);
    if (!s) return cli_fail("out of memory");
    s->mo = mo;
    s->so = so;
    s->max_overhead = max_overhead;
    s->in_seconds = remat_cost_model_calibrated(so->cost_model);
    int rc = 1;
    int64_t per_sample = 1;
    if (per_sample_elements(mo, &per_sample)) goto done;
    /* no tensor of the step past 2^31 elements */
    s->bound = ((int64_t)1 << 31) / per_sample;
    if (s->bound < 1) s->bound = 1;
    if (start > s->bound) {
        rc = cli_usage_error("plan",
                             "--batch %lld is above --max-batch's bound of %lld (a tensor of the step would "
                             "pass 2^31 elements)",
                             (long long)start, (long long)s->bound);
        goto done;
    }
    double t0 = cli_now();
    answer all, opt, within, off = {0}, off_within = {0};
    int host = so->host_budget > 0;
    if (find_largest(s, WANT_ALL, start, &all) || find_largest(s, WANT_OPTIMAL, start, &opt) ||
        find_largest(s, WANT_OVERHEAD, start, &within) || (host && find_largest(s, WANT_OFFLOAD, start, &off)) ||
        (host && find_largest(s, WANT_OFFLOAD_OVERHEAD, start, &off_within)))
        goto done;
    double secs = cli_now() - t0;
    const char *unit = s->in_seconds ? "seconds" : "flops";
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", mo->name);
        cJSON_AddStringToObject(o, "device", remat_device_str(so->device));
        cJSON_AddStringToObject(o, "optimizer", optim);
        cJSON_AddNumberToObject(o, "budget_bytes", (double)so->budget);
        cJSON_AddNumberToObject(o, "max_overhead_percent", max_overhead);
        cJSON_AddStringToObject(o, "overhead_unit", unit);
        cJSON_AddNumberToObject(o, "start_batch", (double)start);
        cJSON_AddNumberToObject(o, "search_bound", (double)s->bound);
        cJSON_AddNumberToObject(o, "checked_above", SCAN_ABOVE);
        cJSON_AddNumberToObject(o, "plans", s->n);
        cJSON_AddNumberToObject(o, "search_seconds", secs);
        answer_json(o, "store_all", s, &all, "all");
        answer_json(o, "optimal", s, &opt, "optimal");
        answer_json(o, "within_overhead", s, &within, "optimal");
        if (host) {
            cJSON_AddNumberToObject(o, "host_budget_bytes", (double)so->host_budget);
            answer_json(o, "offload", s, &off, "optimal");
            answer_json(o, "offload_within_overhead", s, &off_within, "optimal");
        }
        cli_json_print(o);
    } else {
        const answer *ans[5] = {&all, &opt, &within, &off, &off_within};
        print_text(mo, so, s, optim, max_overhead, cost_used, start, secs, ans);
    }
    rc = 0;
done:
    free(s);
    return rc;
}
