/* dtr_search.c: the DTR planner's search (remat__dtr_plan): the
 * simulations of dtr.c swept downward over the budgets for every
 * (heuristic, policy) pair, the cheapest schedule kept (dtr.c's header
 * comment says why a downward sweep sees every outcome).
 */
#include "dtr-impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned heuristics, policies;
    int max_runs;     /* <= 0: no limit */
    int64_t max_work; /* < 0: no limit */
    opbuf cur, best;
    int have;
    double cost;
    int64_t peak, sim_budget;
    int h, p;
    int n_sims, limited;
} search;

/* Sweeps every (heuristic, policy) pair downward from budget to above
 * known_bad (budgets <= known_bad are known to fail: at least floor - 1),
 * round robin (one simulation per pair per round, so that a work limit cuts
 * all pairs alike), keeping the cheapest schedule in s->best. With
 * first_fit, returns at the first success, setting *fit_peak to its peak. */
static remat_status sweep(dtr *d, search *s, int64_t budget, int64_t known_bad, int first_fit, int64_t *fit_peak) {
    struct {
        int h, p, runs, done;
        int64_t b;
    } q[REMAT__DTR_H_COUNT * REMAT__DTR_POLICY_COUNT];
    /* The pairs that most often win on random DAGs go first (they matter
     * when a work limit stops the search). */
    static const int order[REMAT__DTR_H_COUNT] = {REMAT__DTR_H_NEXT,  REMAT__DTR_H_DTR,  REMAT__DTR_H_NOSTALE,
                                                  REMAT__DTR_H_ANC,   REMAT__DTR_H_SIZE, REMAT__DTR_H_BELADY,
                                                  REMAT__DTR_H_LOCAL, REMAT__DTR_H_LRU};
    int nq = 0;
    for (int p = 0; p < REMAT__DTR_POLICY_COUNT; p++)
        for (int k = 0; k < REMAT__DTR_H_COUNT; k++) {
            int h = order[k];
            if ((s->policies & (1u << p)) && (s->heuristics & (1u << h)))
                q[nq].h = h, q[nq].p = p, q[nq].runs = 0, q[nq].b = budget, q[nq].done = budget <= known_bad, nq++;
        }
    for (int alive = 1; alive;) {
        alive = 0;
        for (int i = 0; i < nq; i++) {
            if (q[i].done) continue;
            if (s->max_work >= 0 && d->work >= s->max_work) {
                s->limited = 1;
                return REMAT_OK;
            }
            sim_out so;
            remat_status st = remat__dtr_simulate(d, q[i].h, q[i].p, q[i].b, s->max_work, &s->limited, &s->cur, &so);
            s->n_sims++, q[i].runs++;
            if (st != REMAT_OK) return st;
            if (so.ok) {
                if (first_fit) {
                    *fit_peak = so.peak;
                    return REMAT_OK;
                }
                if (!s->have || so.cost < s->cost || (so.cost == s->cost && so.peak < s->peak)) {
                    opbuf t = s->best;
                    s->best = s->cur, s->cur = t;
                    s->have = 1, s->cost = so.cost, s->peak = so.peak, s->sim_budget = q[i].b;
                    s->h = q[i].h, s->p = q[i].p;
                }
                if (so.cost <= d->base_cost) return REMAT_OK; /* nothing is cheaper */
            }
            q[i].b = so.span - 1;
            if (q[i].b <= known_bad) {
                q[i].done = 1;
            } else if (s->max_runs > 0 && q[i].runs == s->max_runs) {
                q[i].done = 1, s->limited = 1;
            } else {
                alive = 1;
            }
        }
    }
    return REMAT_OK;
}

remat_status remat__dtr_plan(const remat__dtr_node *nodes, int n, int64_t budget, const remat__dtr_opts *opts,
                             remat__dtr_result *out) {
    if (!out) return remat__err(REMAT_INVALID, "dtr planner: NULL result");
    memset(out, 0, sizeof *out);
    out->floor_node = -1;
    remat_status st = remat__dtr_validate(nodes, n, budget);
    if (st != REMAT_OK) return st;
    dtr d;
    st = remat__dtr_init(&d, nodes, n);
    if (st != REMAT_OK) return st;
    search s = {0};
    const unsigned all_h = (1u << REMAT__DTR_H_COUNT) - 1, all_p = (1u << REMAT__DTR_POLICY_COUNT) - 1;
    s.heuristics = opts && (opts->heuristics & all_h) ? opts->heuristics & all_h : all_h;
    s.policies = opts && (opts->policies & all_p) ? opts->policies & all_p : all_p;
    s.max_runs = opts ? opts->max_runs : 0;
    s.max_work = !opts || opts->max_work == 0 ? REMAT__DTR_DEFAULT_WORK : opts->max_work;
    out->floor = d.floor, out->floor_node = d.floor_node;

    st = sweep(&d, &s, budget, d.floor - 1, 0, NULL);
    if (st != REMAT_OK) goto done;
    if (s.have) {
        out->ops = s.best.v, out->n_ops = s.best.n;
        s.best.v = NULL;
        out->cost = s.cost, out->peak = s.peak, out->sim_budget = s.sim_budget;
        out->heuristic = s.h, out->policy = s.p;
        goto done;
    }
    /* Nothing fits: bisect for the smallest budget that does. Each pair
     * fits at its own peak with no eviction (a run at the total size). The
     * sweep from lo has seen every outcome at or below lo fail, so the
     * sweep from mid stops there. */
    int64_t hi = INT64_MAX;
    for (int p = 0; p < REMAT__DTR_POLICY_COUNT; p++) {
        if (!(s.policies & (1u << p))) continue;
        for (int h = 0; h < REMAT__DTR_H_COUNT; h++) {
            if (!(s.heuristics & (1u << h))) continue;
            sim_out so;
            st = remat__dtr_simulate(&d, h, p, d.total_size, -1, &s.limited, &s.cur, &so);
            s.n_sims++;
            if (st != REMAT_OK) goto done;
            if (so.ok && so.peak < hi) hi = so.peak;
        }
    }
    int64_t lo = budget > d.floor - 1 ? budget : d.floor - 1; /* fails */
    d.work = 0;                                               /* the bisection has a work allowance of its own */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2, fit = -1;
        st = sweep(&d, &s, mid, lo, 1, &fit);
        if (st != REMAT_OK) goto done;
        if (fit >= 0) hi = fit;
        else lo = mid;
    }
    out->min_budget = hi;
    if (budget < d.floor)
        st = remat__err(REMAT_BUDGET,
                        "dtr planner: budget %lld is below %lld, what node %d needs with its inputs resident, "
                        "so no schedule fits; this planner needs %lld",
                        (long long)budget, (long long)d.floor, (int)d.floor_node, (long long)hi);
    else
        st = remat__err(REMAT_BUDGET,
                        "dtr planner: no schedule found within budget %lld; this planner needs %lld "
                        "(no schedule fits below %lld, what node %d needs with its inputs resident)",
                        (long long)budget, (long long)hi, (long long)d.floor, (int)d.floor_node);
done:
    out->n_sims = s.n_sims, out->limited = s.limited;
    free(s.cur.v), free(s.best.v);
    remat__dtr_free(&d);
    return st;
}

void remat__dtr_result_free(remat__dtr_result *out) {
    if (!out) return;
    free(out->ops);
    memset(out, 0, sizeof *out);
    out->floor_node = -1;
}

const char *remat__dtr_heuristic_name(int h) {
    static const char *const names[REMAT__DTR_H_COUNT] = {"dtr", "anc",  "local", "nostale",
                                                          "lru", "size", "next",  "belady"};
    return h >= 0 && h < REMAT__DTR_H_COUNT ? names[h] : "unknown";
}

const char *remat__dtr_policy_name(int p) {
    return p == REMAT__DTR_EAGER ? "eager" : p == REMAT__DTR_LAZY ? "lazy" : "unknown";
}
