/* test_offload.c: offload to host memory as a planner choice.
 *
 * (1) the copy timeline against a case worked out by hand (serialized
 * copies, a stall, bytes in flight); (2) the chain simulator with offload
 * against a hand-computed schedule; (3) the offload DP with no host
 * budget equals rotor's DP at every budget, and with one never costs more
 * and somewhere costs less; (4) on small chains the DP equals the least
 * simulated cost over every schedule of its class (every persistent
 * schedule with keep, recompute or offload per stage, an offloaded Fe_i
 * followed by Fe_{i+1}), enumerated and simulated one by one, at every
 * device and host budget. Integer sizes and costs, unit slots, a link of
 * 1 byte/s: every figure is exact.
 */
#include "check.h"
#include "plan/offload.h"
#include "remat.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static int64_t rnd_in(int64_t lo, int64_t hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

static void test_timeline(void) {
    double dur[4] = {2, 3, 1, 4};
    remat__copy c[3] = {
        {REMAT__COPY_OUT, 5, 100, 0, 2}, /* [2, 7]: op 2 waits until 7 */
        {REMAT__COPY_OUT, 2, 50, 1, 3},  /* engine busy until 7: [7, 9]; op 3 waits until 9 */
        {REMAT__COPY_IN, 1, 30, 2, 4},   /* [9, 10], before the end */
    };
    remat__span op[4], cp[3];
    int64_t held[4];
    double span = 0, stall = 0;
    CHECK_OK(remat__copy_timeline(dur, 4, c, 3, op, cp, held, &span, &stall));
    double want_op[4][2] = {{0, 2}, {2, 5}, {7, 8}, {9, 13}}, want_cp[3][2] = {{2, 7}, {7, 9}, {9, 10}};
    for (int k = 0; k < 4; k++)
        CHECK_MSG(op[k].start == want_op[k][0] && op[k].end == want_op[k][1], "op %d: [%g, %g]", k, op[k].start,
                  op[k].end);
    for (int q = 0; q < 3; q++)
        CHECK_MSG(cp[q].start == want_cp[q][0] && cp[q].end == want_cp[q][1], "copy %d: [%g, %g]", q, cp[q].start,
                  cp[q].end);
    CHECK(span == 13 && stall == 3);
    /* op 1 runs beside copy 0 (100), op 2 beside copy 1 (50), op 3 holds the in copy (30) */
    CHECK(held[0] == 0 && held[1] == 100 && held[2] == 50 && held[3] == 30);
    /* the engine serves copies in order; a copy must precede what waits for it */
    remat__copy bad[2] = {{REMAT__COPY_OUT, 1, 1, 1, 3}, {REMAT__COPY_OUT, 1, 1, 0, 2}};
    CHECK(remat__copy_timeline(dur, 4, bad, 2, NULL, NULL, NULL, &span, &stall) == REMAT_INVALID);
    remat__copy late = {REMAT__COPY_IN, 1, 1, 2, 2};
    CHECK(remat__copy_timeline(dur, 4, &late, 1, NULL, NULL, NULL, &span, &stall) == REMAT_INVALID);
}

static remat__stage_ex stage(double f, double b, int64_t in, int64_t saved) {
    remat__stage_ex s = {.forward = f, .input = in, .n_options = 1};
    s.opt[0] = (remat__stage_option){.saved = saved, .backward = b};
    return s;
}

#define OFF REMAT__OFFLOAD_OPTION
static const remat__link unit_link = {1, 1}; /* 1 byte/s, 1 s latency */

/* Three stages; Fe_0 offloads 4 bytes (a 5 s copy) beside Fe_1 (3 s) and
 * back beside B_1 (2 s): 2 + 3 s exposed; 11 bytes at the peak (B_1 with
 * the copy back in flight) where keeping everything holds 13. */
static void test_simulate(void) {
    remat__stage_ex st[3] = {stage(2, 4, 1, 5), stage(3, 2, 1, 3), stage(1, 2, 1, 2)};
    remat_chain_op ops[7] = {{REMAT_CHAIN_FE, 0, OFF}, {REMAT_CHAIN_FE, 1, 0}, {REMAT_CHAIN_FE, 2, 0},
                             {REMAT_CHAIN_LOSS, 3, 0}, {REMAT_CHAIN_B, 2, 0},  {REMAT_CHAIN_B, 1, 0},
                             {REMAT_CHAIN_B, 0, OFF}};
    remat__offload_result r;
    CHECK_OK(remat__offload_simulate(st, 3, 1, unit_link, ops, 7, &r));
    CHECK_MSG(r.compute == 14 && r.stall == 5 && r.cost == 19, "compute %g stall %g", r.compute, r.stall);
    CHECK_MSG(r.peak == 11 && r.host_peak == 4 && r.host_out == 4 && r.offloaded == 1, "peak %" PRId64 " host %" PRId64,
              r.peak, r.host_peak);
    ops[0].option = ops[6].option = 0;
    CHECK_OK(remat__offload_simulate(st, 3, 1, unit_link, ops, 7, &r));
    CHECK(r.peak == 13 && r.stall == 0 && r.cost == 14 && r.host_peak == 0);
    /* the last stage cannot offload; an offloaded xbar cannot be freed by Fn */
    ops[2].option = OFF;
    CHECK(remat__offload_simulate(st, 3, 1, unit_link, ops, 7, &r) == REMAT_INVALID);
}

typedef struct {
    int L;
    int64_t output;
    remat__stage_ex st[8];
} chain;

static void random_chain(chain *c, int L, int64_t hi, int options) {
    memset(c, 0, sizeof *c);
    c->L = L, c->output = rnd_in(1, hi);
    for (int i = L - 1; i >= 0; i--) {
        int64_t out = i + 1 < L ? c->st[i + 1].input : c->output;
        remat__stage_ex *s = &c->st[i];
        *s = stage((double)rnd_in(1, 6), (double)rnd_in(1, 8), rnd_in(1, hi), out + rnd_in(0, 2 * hi));
        if (options && rnd_in(0, 1)) {
            s->n_options = 2;
            s->opt[1] = (remat__stage_option){rnd_in(out, s->opt[0].saved), s->opt[0].backward + (double)rnd_in(1, 4),
                                              rnd_in(0, hi), rnd_in(0, hi)};
            s->fwd_tmp = rnd_in(0, hi);
        }
    }
}

static int64_t store_all_peak(const chain *c) {
    remat_chain_op ops[32];
    int n = 0;
    for (int i = 0; i < c->L; i++) ops[n++] = (remat_chain_op){REMAT_CHAIN_FE, i, 0};
    ops[n++] = (remat_chain_op){REMAT_CHAIN_LOSS, c->L, 0};
    for (int i = c->L - 1; i >= 0; i--) ops[n++] = (remat_chain_op){REMAT_CHAIN_B, i, 0};
    double cost;
    int64_t peak = -1;
    CHECK_OK(remat__chain_simulate_ex(c->st, c->L, c->output, ops, n, &cost, &peak));
    return peak;
}

/* cost of the offload plan at (M, H), or -1 when nothing fits */
static double offload_cost(const chain *c, int64_t M, int64_t H, remat__offload_result *r) {
    remat_chain_plan *p = NULL;
    remat_status rc = remat__offload_solve(c->st, c->L, c->output, unit_link, M, H, (int)M, (int)H, &p, r);
    CHECK_MSG(rc == REMAT_OK || rc == REMAT_BUDGET, "M=%" PRId64 " H=%" PRId64 ": %s", M, H, remat_last_error());
    double cost = rc == REMAT_OK ? remat_chain_plan_cost(p) : -1;
    remat_chain_plan_destroy(p);
    return cost;
}

static double rotor_cost(const chain *c, int64_t M) {
    remat_chain_plan *p = NULL;
    remat_status rc = remat__chain_solve_ex(c->st, c->L, c->output, M, (int)M, &p);
    double cost = rc == REMAT_OK ? remat_chain_plan_cost(p) : -1;
    remat_chain_plan_destroy(p);
    return cost;
}

/* (3): rotor's cost at every budget with no host memory; never more, and
 * on some budgets less, with it. */
static void test_never_worse(void) {
    int better = 0, budgets = 0;
    for (int it = 0; it < 24; it++) {
        chain c;
        random_chain(&c, (int)rnd_in(3, 7), 8, it % 2);
        int64_t top = store_all_peak(&c);
        for (int64_t M = 1; M <= top; M++) {
            double r = rotor_cost(&c, M), z = offload_cost(&c, M, 0, NULL);
            CHECK_MSG(r == z, "chain %d M=%" PRId64 ": rotor %g, offload with no host %g", it, M, r, z);
            for (int64_t H = 4; H <= 64; H *= 4) {
                double o = offload_cost(&c, M, H, NULL);
                CHECK_MSG(r < 0 || (o >= 0 && o <= r), "chain %d M=%" PRId64 " H=%" PRId64 ": rotor %g, offload %g", it,
                          M, H, r, o);
                better += r >= 0 && o >= 0 && o < r;
                better += r < 0 && o >= 0; /* fits only with offload */
            }
            budgets++;
        }
    }
    printf("  never worse: %d budgets x 3 host budgets; offload cheaper or the only fit on %d\n", budgets, better);
    CHECK(better > 0);
}

/* ------------------------------------------------------- (4) exhaustive */

typedef struct {
    int kind; /* 0 an interval, 2 emit B */
    int i, l, option;
} etask;

typedef struct {
    const chain *c;
    double *cost;
    int64_t *peak, *host;
    int n, cap;
} found;

static void record(found *f, const remat_chain_op *ops, int n) {
    remat__offload_result r;
    CHECK_OK(remat__offload_simulate(f->c->st, f->c->L, f->c->output, unit_link, ops, n, &r));
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 1024;
        f->cost = realloc(f->cost, (size_t)f->cap * sizeof *f->cost);
        f->peak = realloc(f->peak, (size_t)f->cap * sizeof *f->peak);
        f->host = realloc(f->host, (size_t)f->cap * sizeof *f->host);
    }
    f->cost[f->n] = r.cost, f->peak[f->n] = r.peak, f->host[f->n] = r.host_peak, f->n++;
}

/* Every persistent schedule: the tasks pending (stk, top) after ops. */
static void explore(found *f, remat_chain_op *ops, int n, const etask *in, int top) {
    if (top == 0) {
        record(f, ops, n);
        return;
    }
    etask stk[64];
    memcpy(stk, in, (size_t)top * sizeof *stk);
    etask k = stk[--top];
    int L = f->c->L;
    if (k.kind == 2) {
        ops[n] = (remat_chain_op){REMAT_CHAIN_B, k.i, k.option};
        explore(f, ops, n + 1, stk, top);
        return;
    }
    if (k.i == L) {
        ops[n] = (remat_chain_op){REMAT_CHAIN_LOSS, L, 0};
        explore(f, ops, n + 1, stk, top);
        return;
    }
    for (int j = k.i + 1; j <= k.l; j++) { /* leaf at j */
        int m = n;
        ops[m++] = (remat_chain_op){REMAT_CHAIN_CF, k.i, 0};
        for (int q = k.i + 1; q < j; q++) ops[m++] = (remat_chain_op){REMAT_CHAIN_FN, q, 0};
        stk[top] = (etask){0, k.i, j - 1, 0}, stk[top + 1] = (etask){0, j, k.l, 0};
        explore(f, ops, m, stk, top + 2);
    }
    const remat__stage_ex *s = &f->c->st[k.i];
    int can_off = k.i < k.l && k.i <= L - 2 && s->opt[0].saved > f->c->st[k.i + 1].input;
    for (int o = 0; o < s->n_options + can_off; o++) {
        int opt = o < s->n_options ? o : OFF;
        ops[n] = (remat_chain_op){REMAT_CHAIN_FE, k.i, opt};
        if (k.i == k.l) {
            ops[n + 1] = (remat_chain_op){REMAT_CHAIN_B, k.i, opt};
            explore(f, ops, n + 2, stk, top);
            continue;
        }
        stk[top] = (etask){2, k.i, k.i, opt};
        stk[top + 1] = (etask){0, k.i + 1, k.l, 0};
        explore(f, ops, n + 1, stk, top + 2);
    }
}

/* Does the plan checkpoint (CF) right after an offloaded Fe? */
static int offload_then_cf(const remat_chain_plan *p) {
    for (int t = 0; t + 1 < remat_chain_plan_length(p); t++) {
        remat_chain_op a = remat_chain_plan_op(p, t), b = remat_chain_plan_op(p, t + 1);
        if (a.kind == REMAT_CHAIN_FE && a.option == OFF && b.kind == REMAT_CHAIN_CF) return 1;
    }
    return 0;
}

static double best_of(const found *f, int64_t M, int64_t H) {
    double best = -1;
    for (int q = 0; q < f->n; q++)
        if (f->peak[q] <= M && f->host[q] <= H && (best < 0 || f->cost[q] < best)) best = f->cost[q];
    return best;
}

static void test_exhaustive(void) {
    int pairs = 0, offloaded = 0, leaf_after = 0;
    for (int it = 0; it < 24; it++) {
        chain c;
        random_chain(&c, it < 12 ? 4 : 5, 5, it % 3 == 0);
        remat_chain_op ops[64];
        etask root = {0, 0, c.L, 0};
        found all = {.c = &c};
        explore(&all, ops, 0, &root, 1);
        int64_t top = store_all_peak(&c);
        for (int64_t M = 1; M <= top; M++)
            for (int64_t H = 0; H <= 12; H += 3) {
                remat__offload_result r = {0};
                remat_chain_plan *p = NULL;
                double ex = best_of(&all, M, H), dp = -1;
                remat_status rc = remat__offload_solve(c.st, c.L, c.output, unit_link, M, H, (int)M, (int)H, &p, &r);
                CHECK_MSG(rc == REMAT_OK || rc == REMAT_BUDGET, "%s", remat_last_error());
                if (rc == REMAT_OK) dp = remat_chain_plan_cost(p);
                CHECK_MSG(ex == dp, "chain %d M=%" PRId64 " H=%" PRId64 ": exhaustive %g, DP %g", it, M, H, ex, dp);
                offloaded += dp >= 0 && r.offloaded > 0;
                leaf_after += dp >= 0 && offload_then_cf(p);
                remat_chain_plan_destroy(p);
                pairs++;
            }
        free(all.cost), free(all.peak), free(all.host);
    }
    printf("  exhaustive: %d (chain, budget, host budget) triples equal; the plan offloads on %d, with a "
           "checkpoint right after an offloaded Fe on %d\n",
           pairs, offloaded, leaf_after);
    CHECK(offloaded > 0 && leaf_after > 0);
}

/* (5) the public API on a model: no host memory is the plan without
 * offload; with it, never costlier, within both budgets, and offloading
 * somewhere; a budget below the resident blocks is refused. */
static void test_session(void) {
    remat_graph *g = NULL;
    remat_model m;
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, "resnet18")); /* 3x224x224 */
    mo.batch = 2;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.plan_only = 1, so.strategy = REMAT_STRATEGY_ALL;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    remat_plan_summary ps;
    CHECK_OK(remat_session_plan(s, &ps));
    remat_offload_opts oo;
    remat_offload_opts_default(&oo);
    remat_offload_summary r;
    size_t blocks = ps.held_bytes - ps.arena_bytes;
    oo.budget = blocks / 2;
    CHECK(remat_session_offload(s, &oo, &r) == REMAT_BUDGET);
    int offloaded = 0;
    for (int k = 1; k <= 12; k++) {
        oo.budget = blocks + ps.arena_bytes * (size_t)k / 12;
        oo.host_budget = 0;
        CHECK_OK(remat_session_offload(s, &oo, &r));
        CHECK(r.fits == r.fits_without && r.offloaded == 0 && r.host_peak == 0);
        CHECK(!r.fits || (r.cost == r.cost_without && r.device_peak == r.device_peak_without));
        oo.host_budget = (size_t)1 << 30;
        CHECK_OK(remat_session_offload(s, &oo, &r));
        CHECK_MSG(r.fits >= r.fits_without && (!r.fits_without || r.cost <= r.cost_without),
                  "budget %zu: with %g, without %g", oo.budget, r.cost, r.cost_without);
        CHECK(!r.fits || (r.device_peak <= r.chain_budget && r.host_peak <= oo.host_budget));
        CHECK(r.chain_budget == oo.budget - blocks && r.stall >= 0 && r.stall <= r.cost);
        offloaded += r.offloaded > 0;
        printf("  resnet18 b2, %5.1f MiB for the chain: %s%s, cost %.4g (without %.4g), %d stages offloaded\n",
               (double)r.chain_budget / 1048576, r.fits ? "fits" : "does not fit",
               r.fits_without ? "" : " (not without offload)", r.cost, r.cost_without, r.offloaded);
    }
    CHECK(offloaded > 0);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

int main(void) {
    test_timeline();
    test_simulate();
    test_never_worse();
    test_exhaustive();
    test_session();
    return check_exit("test_offload");
}
