/* test_dominance.c: `optimal` is never beaten by a plan remat itself builds,
 * on the zoo at the bench table's sizes.
 *
 * For each model (cnn b128, resnet18 b32, resnet50 b16, densenet-bc b64,
 * gpt2 at GPT-2 small's sizes with context 256 b4, siamese-resnet50 b8):
 *   - at what `sqrt`, and `manual` at every --checkpoint-blocks granularity
 *     (the first k blocks checkpointed, k = 1 .. all; every other k and
 *     all on the models of more than 16 blocks, densenet-bc and
 *     siamese-resnet50), hold during a step, `optimal` fits and
 *     recomputes no more than they do;
 *   - over 8 budgets from the smallest feasible one to what store-all
 *     holds, its recomputation never rises, and is zero at the last;
 *   - the smallest feasible budget named by a refusal is feasible, and one
 *     byte less is refused naming the same floor (asked at 1 byte, at the
 *     floor minus one and at half of it).
 * Costs are FLOPs (no cost model), the optimizer SGD with momentum as in
 * remat bench. Sessions are plan-only: nothing is allocated or run, so the
 * whole test is the planner's time. --quick (the sanitizer build) takes
 * cnn, resnet18 and gpt2 at smaller sizes and 4 budgets.
 */
#include "check.h"

#include "../src/remat-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    int64_t batch;
    int context; /* gpt2: 0 = the model's */
} row;

typedef struct {
    remat_status st;
    size_t held;
    double extra;
    char floor_msg[96]; /* the refusal's "smallest feasible budget is N bytes" */
    size_t floor;
    size_t bound;  /* no schedule holds less (remat_session_opts.bound_out) */
    char err[256]; /* remat_last_error() where it did not plan */
} plan;

static int quick;

static remat_status build(const row *r, int blocks, remat_graph *g, remat_model *m) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    remat_status st = remat_model_opts_for(&mo, r->name);
    if (st != REMAT_OK) return st;
    mo.batch = r->batch;
    if (r->context) mo.context = r->context;
    if (quick && strcmp(r->name, "gpt2") == 0) mo.layers = 4, mo.embd = 128, mo.heads = 4, mo.vocab = 512;
    mo.checkpoint_blocks = blocks;
    return remat_model_build(g, &mo, m);
}

static plan plan_of(const row *r, int blocks, remat_strategy strategy, size_t budget) {
    plan p = {0};
    remat_graph *g = NULL;
    remat_model m;
    remat_session *s = NULL;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(r, blocks, g, &m));
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.momentum = 0.9f;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    so.strategy = strategy;
    so.budget = budget;
    so.optim = &oo;
    so.plan_only = 1;
    so.bound_out = &p.bound;
    p.st = remat_session_create(&s, g, m.loss, &so);
    if (p.st == REMAT_OK) {
        remat_plan_summary sum;
        CHECK_OK(remat_session_plan(s, &sum));
        p.held = sum.held_bytes;
        p.extra = sum.extra_flops;
        CHECK_MSG(!budget || p.held <= budget, "%s: holds %zu above the budget %zu", r->name, p.held, budget);
    } else {
        snprintf(p.err, sizeof p.err, "%s", remat_last_error());
        const char *key = "smallest feasible budget is ", *at = strstr(remat_last_error(), key);
        if (at) {
            p.floor = (size_t)strtoull(at + strlen(key), NULL, 10);
            snprintf(p.floor_msg, sizeof p.floor_msg, "%s%zu bytes", key, p.floor);
        }
    }
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return p;
}

/* optimal's plans of the row being checked, by budget: planning is
 * deterministic, so a budget asked again (manual's coarser granularities
 * hold the same bytes on densenet-bc, the sweep's last budget is
 * store-all's) is answered from here, which keeps the test's time to the
 * distinct plans. */
static struct {
    const row *r;
    size_t budget[256];
    plan p[256];
    int n;
} memo;

static plan optimal_at(const row *r, size_t budget) {
    if (memo.r != r) memo.r = r, memo.n = 0;
    for (int i = 0; i < memo.n; i++)
        if (memo.budget[i] == budget) return memo.p[i];
    plan p = plan_of(r, -1, REMAT_STRATEGY_OPTIMAL, budget);
    if (memo.n < (int)(sizeof memo.budget / sizeof *memo.budget)) memo.budget[memo.n] = budget, memo.p[memo.n++] = p;
    return p;
}

/* Checkpoint marks of the model built with every block checkpointed. */
static int block_count(const row *r) {
    remat_graph *g = NULL;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(r, -1, g, &m));
    int n = 0;
    for (int v = 0; v < g->n; v++) n += g->nodes[v].checkpoint != 0;
    remat_graph_destroy(g);
    return n;
}

/* optimal at what `ref` holds: fits, recomputes no more. */
static void dominates(const row *r, const char *what, plan ref) {
    CHECK_MSG(ref.st == REMAT_OK, "%s: %s does not plan: %s", r->name, what, remat_last_error());
    if (ref.st != REMAT_OK) return;
    plan o = optimal_at(r, ref.held);
    CHECK_MSG(o.st == REMAT_OK, "%s: optimal refuses %s's %zu bytes: %s", r->name, what, ref.held, o.err);
    if (o.st != REMAT_OK) return;
    CHECK_MSG(o.extra <= ref.extra, "%s: at %s's %zu bytes optimal recomputes %.6g FLOP, %s %.6g", r->name, what,
              ref.held, o.extra, what, ref.extra);
    printf("  %-10s holds %11zu B, recomputes %9.4g GFLOP; optimal there %9.4g GFLOP (%.1f%% of it)\n", what, ref.held,
           ref.extra / 1e9, o.extra / 1e9, ref.extra > 0 ? 100.0 * o.extra / ref.extra : 100.0);
}

static void check_floor(const row *r, size_t *floor_out) {
    plan lo = optimal_at(r, 1);
    CHECK_MSG(lo.st == REMAT_BUDGET && lo.floor > 0, "%s: no floor named at 1 byte: %s", r->name, lo.err);
    *floor_out = lo.floor;
    if (!lo.floor) return;
    /* the lower bound of any schedule, named also in a refusal, is at most
     * the floor (bound.h) */
    CHECK_MSG(lo.bound > 0 && lo.bound <= lo.floor, "%s: bound %zu B above the floor %zu B", r->name, lo.bound,
              lo.floor);
    printf("  floor %zu B, %.4fx the least any schedule can hold (%zu B)\n", lo.floor,
           (double)lo.floor / (double)lo.bound, lo.bound);
    plan at = optimal_at(r, lo.floor);
    CHECK_MSG(at.st == REMAT_OK, "%s: the named floor %zu does not fit: %s", r->name, lo.floor, at.err);
    size_t below[2] = {lo.floor - 1, lo.floor / 2};
    for (int i = 0; i < 2; i++) {
        plan b = optimal_at(r, below[i]);
        CHECK_MSG(b.st == REMAT_BUDGET && strcmp(b.floor_msg, lo.floor_msg) == 0,
                  "%s at %zu: expected a refusal naming the floor %zu: %s", r->name, below[i], lo.floor, b.err);
    }
}

static void model(const row *r) {
    if (r->context) printf("%s, batch %lld, context %d\n", r->name, (long long)r->batch, r->context);
    else printf("%s, batch %lld\n", r->name, (long long)r->batch);
    plan all = plan_of(r, -1, REMAT_STRATEGY_ALL, 0);
    CHECK_OK(all.st);
    dominates(r, "sqrt", plan_of(r, -1, REMAT_STRATEGY_SQRT, 0));
    int nb = block_count(r), step = quick && nb > 4 ? nb / 4 : nb > 16 ? 2 : 1;
    CHECK_MSG(nb > 0, "%s: no checkpointed blocks", r->name);
    for (int k = 1; k <= nb; k = k < nb && k + step > nb ? nb : k + step) {
        char what[32];
        snprintf(what, sizeof what, "manual %d", k);
        dominates(r, what, plan_of(r, k, REMAT_STRATEGY_MANUAL, 0));
    }
    size_t floor = 0;
    check_floor(r, &floor);
    if (!floor) return;
    int n = quick ? 4 : 8;
    double prev = -1;
    printf("  sweep: floor %zu B .. store-all %zu B at %d budgets:", floor, all.held, n);
    for (int i = 0; i < n; i++) {
        size_t b = floor + (size_t)((double)(all.held - floor) * i / (n - 1));
        if (i == n - 1) b = all.held;
        plan o = optimal_at(r, b);
        CHECK_MSG(o.st == REMAT_OK, "%s @%zu: %s", r->name, b, o.err);
        if (o.st != REMAT_OK) continue;
        if (prev >= 0)
            CHECK_MSG(o.extra <= prev, "%s @%zu: recomputation rose from %.6g to %.6g FLOP", r->name, b, prev, o.extra);
        prev = o.extra;
        printf(" %.3g", o.extra / 1e9);
    }
    printf(" GFLOP\n");
    CHECK_MSG(prev == 0.0, "%s: recomputes %.6g FLOP at the store-all budget", r->name, prev);
}

int main(int argc, char **argv) {
    static const row rows[] = {{"cnn", 128, 0},        {"resnet18", 32, 0}, {"resnet50", 16, 0},
                               {"densenet-bc", 64, 0}, {"gpt2", 4, 256},    {"siamese-resnet50", 8, 0}};
    static const row quick_rows[] = {{"cnn", 32, 0}, {"resnet18", 4, 0}, {"gpt2", 2, 64}};
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const row *rs = quick ? quick_rows : rows;
    size_t n = quick ? sizeof quick_rows / sizeof *quick_rows : sizeof rows / sizeof *rows;
    for (size_t i = 0; i < n; i++) model(&rs[i]);
    return check_exit("test_dominance");
}
