/* test_memplan.c: the memory plan's placement, checked independently of
 * how it was made.
 *
 * For every model of the zoo (at tiny sizes) and the test models, under
 * all, manual, sqrt and optimal at 3 budgets between its floor and what
 * store-all holds, the training step's memory plan is checked by a
 * brute-force checker written here (not the library's
 * remat__memplan_verify): no two events whose lifetimes overlap share a
 * byte, every event lies inside the arena at an aligned offset, the arena
 * is the size the plan summary predicts and at least the peak of the
 * values, and what the session holds after a step is exactly the plan's
 * arena plus its resident blocks. The library's own verifier must agree,
 * and must refuse a placement with two overlapping events planted in it.
 */
#include "../src/exec/session.h"
#include "check.h"
#include "testmodels.h"

#include <stdlib.h>
#include <string.h>

static remat_status build(const char *name, remat_graph *g, remat_model *m) {
    if (strcmp(name, "bnnet") == 0) return build_bnnet(g, m, 8);
    if (strcmp(name, "resblocks") == 0) return build_resblocks(g, m, 8);
    if (strcmp(name, "branches") == 0) return build_branches(g, m, 8);
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    remat_status st = remat_model_opts_for(&mo, name);
    if (st != REMAT_OK) return st;
    mo.batch = 16;
    if (strstr(name, "resnet") || strcmp(name, "densenet-bc") == 0) {
        mo.batch = 2, mo.height = 16, mo.width = 16, mo.classes = 10, mo.base_channels = 4;
        if (strcmp(name, "densenet-bc") == 0) mo.depth = 16;
    } else if (strcmp(name, "gpt2") == 0) {
        mo.batch = 2, mo.layers = 2, mo.embd = 16, mo.heads = 2, mo.context = 8, mo.vocab = 32;
    }
    return remat_model_build(g, &mo, m);
}

/* The independent checker: every pair of events. */
static void check_placement(const remat__memplan *m, const char *what) {
    int bad = 0;
    size_t top = 0;
    for (int32_t i = 0; i < m->n && bad < 3; i++) {
        const remat__mev *a = &m->ev[i];
        if (!a->bytes) continue;
        CHECK_MSG(a->t0 < a->t1, "%s: event %d has an empty lifetime [%d, %d)", what, i, a->t0, a->t1);
        if (a->off < 0 || a->off % 256 || (size_t)a->off + a->bytes > m->arena) {
            bad++;
            CHECK_MSG(0, "%s: event %d (%zu bytes at %lld) is outside the %zu-byte arena or unaligned", what, i,
                      a->bytes, (long long)a->off, m->arena);
        }
        if ((size_t)a->off + a->bytes > top) top = (size_t)a->off + a->bytes;
        for (int32_t j = i + 1; j < m->n; j++) {
            const remat__mev *b = &m->ev[j];
            if (!b->bytes || a->t1 <= b->t0 || b->t1 <= a->t0) continue; /* never live together */
            if ((size_t)a->off < (size_t)b->off + b->bytes && (size_t)b->off < (size_t)a->off + a->bytes) {
                bad++;
                CHECK_MSG(0, "%s: events %d and %d are live together and share bytes", what, i, j);
                break;
            }
        }
    }
    /* The arena is what the placement uses, rounded to the alignment. */
    CHECK_MSG(m->arena >= top && m->arena - top < 256, "%s: arena %zu for a placement reaching %zu", what, m->arena,
              top);
    CHECK_MSG(remat__memplan_verify(m) == REMAT_OK, "%s: the library's verifier disagrees: %s", what,
              remat_last_error());
}

/* The library's verifier fails when it should: two live events planted on
 * the same bytes. */
static void verifier_fails(const remat__memplan *m0) {
    remat__memplan m = *m0;
    m.ev = malloc((size_t)m0->n * sizeof *m.ev);
    memcpy(m.ev, m0->ev, (size_t)m0->n * sizeof *m.ev);
    int planted = 0;
    for (int32_t i = 0; i < m.n && !planted; i++)
        for (int32_t j = i + 1; j < m.n && !planted; j++) {
            remat__mev *a = &m.ev[i], *b = &m.ev[j];
            if (!a->bytes || !b->bytes || a->t1 <= b->t0 || b->t1 <= a->t0 || a->off == b->off) continue;
            b->off = a->off; /* now they overlap */
            planted = (size_t)b->off + b->bytes <= m.arena;
            if (!planted) b->off = m0->ev[j].off;
        }
    CHECK(planted);
    CHECK(!planted || remat__memplan_verify(&m) == REMAT_INTERNAL);
    free(m.ev);
}

static void one(const remat_graph *g, const remat_model *mdl, const char *name, remat_strategy st, size_t budget) {
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    so.strategy = st;
    so.budget = budget;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
    so.optim = &oo;
    remat_session *s = NULL;
    remat_status rc = remat_session_create(&s, g, mdl->loss, &so);
    char what[128];
    snprintf(what, sizeof what, "%s %s@%zu", name, remat_strategy_str(st), budget);
    CHECK_MSG(rc == REMAT_OK, "%s: %s", what, remat_last_error());
    if (rc != REMAT_OK) return;
    const remat__memplan *m = &s->train.mem;
    check_placement(m, what);
    remat_plan_summary p;
    CHECK_OK(remat_session_plan(s, &p));
    size_t values_peak = p.predicted.peak[REMAT_MEM_TOTAL] - p.predicted.live[REMAT_MEM_TOTAL];
    CHECK_MSG(p.arena_bytes == m->arena && m->arena >= values_peak, "%s: arena %zu, summary %zu, peak of values %zu",
              what, m->arena, p.arena_bytes, values_peak);
    if (budget) CHECK_MSG(p.held_bytes <= budget, "%s: holds %zu above the budget", what, p.held_bytes);
    /* a step: what the session holds is the plan's arena and its blocks */
    int64_t xd[4], yd[4], nx = 1, ny = 1;
    for (int i = 0, nd = remat_node_shape(g, mdl->input, xd); i < nd; i++) nx *= xd[i];
    for (int i = 0, nd = remat_node_shape(g, mdl->labels, yd); i < nd; i++) ny *= yd[i];
    void *x = calloc((size_t)nx, 4), *y = calloc((size_t)ny, 4);
    remat_session_bind(s, mdl->input, x);
    remat_session_bind(s, mdl->labels, y);
    CHECK_OK(remat_session_step(s, NULL));
    CHECK_MSG(remat_session_held_bytes(s) == p.held_bytes, "%s: holds %zu after a step, planned %zu", what,
              remat_session_held_bytes(s), p.held_bytes);
    if (st == REMAT_STRATEGY_ALL && strcmp(name, "cnn") == 0) verifier_fails(m);
    printf("  %-30s %6d events, arena %9zu B = %.4f x the peak of values (%s)\n", what, m->n, m->arena,
           values_peak ? (double)m->arena / (double)values_peak : 1.0, m->placer);
    free(x), free(y);
    remat_session_destroy(s);
}

/* The smallest budget optimal fits, from its message. */
static size_t floor_budget(const remat_graph *g, const remat_model *m) {
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    so.strategy = REMAT_STRATEGY_OPTIMAL;
    so.budget = 1;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
    so.optim = &oo;
    remat_session *s = NULL;
    CHECK(remat_session_create(&s, g, m->loss, &so) == REMAT_BUDGET);
    remat_session_destroy(s);
    const char *p = strstr(remat_last_error(), "smallest feasible budget is ");
    CHECK_MSG(p != NULL, "%s", remat_last_error());
    return p ? (size_t)strtoull(p + strlen("smallest feasible budget is "), NULL, 10) : 0;
}

int main(void) {
    const char *models[] = {"mlp",  "cnn",   "resnet18",  "resnet50",  "siamese-resnet50", "densenet-bc",
                            "gpt2", "bnnet", "resblocks", "branches"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        remat_graph *g;
        remat_model m;
        CHECK_OK(remat_graph_create(&g));
        CHECK_OK(build(models[i], g, &m));
        printf("%s\n", models[i]);
        for (int st = REMAT_STRATEGY_ALL; st <= REMAT_STRATEGY_SQRT; st++) one(g, &m, models[i], st, 0);
        /* optimal between its floor and what store-all holds */
        remat_session_opts so;
        remat_session_opts_default(&so);
        so.threads = 2;
        remat_optim_opts oo;
        remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
        so.optim = &oo;
        remat_session *s = NULL;
        remat_plan_summary p = {0};
        CHECK_OK(remat_session_create(&s, g, m.loss, &so));
        if (s) CHECK_OK(remat_session_plan(s, &p));
        remat_session_destroy(s);
        size_t lo = floor_budget(g, &m);
        for (int b = 0; b < 3; b++) one(g, &m, models[i], REMAT_STRATEGY_OPTIMAL, lo + (p.held_bytes - lo) * b / 2);
        remat_graph_destroy(g);
    }
    return check_exit("test_memplan");
}
