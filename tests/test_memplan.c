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
 *
 * Placement is also checked on hand-built lifetimes (events that are live
 * together for one tick, disjoint ones, a pattern where placing the
 * largest first wins): the arena worked out by hand, by the placement
 * named, with no two live events on the same bytes.
 *
 * The executor does not check its plan (it binds events, it does not
 * work sizes out again); the sanitizers' build does, from outside: there
 * the arena's bytes outside the events bound are poisoned, so a kernel
 * that writes a byte its plan did not give it is reported. `test_memplan
 * --short-event` makes one memory-plan event 4 bytes short and runs a
 * step; the suite's memplan_short_event (sanitizers' build only) passes
 * when AddressSanitizer reports the kernel's write past it.
 *
 * `test_memplan --quick` (the sanitizers' build, where a plan takes seconds)
 * plans optimal at the floor and the midpoint only (at store-all's budget
 * it recomputes nothing, as `all`, which runs already).
 *
 * With the heap counter preloaded (LD_PRELOAD=libremat-memtrack.so: the
 * suite's test_memplan_heap, outside the sanitizers' build, with
 * REMAT_EXPECT_HEAP set so that a missing counter fails), what the process
 * really holds, measured by the counter and not by the session's
 * bookkeeping: a session holds its plan's held bytes and at most what
 * oneDNN keeps of its own (its engine, 40 bytes, even with the products on
 * OpenBLAS), and a second step takes not one byte more, for every model x
 * strategy x budget. The suite runs it with REMAT_PRODUCTS=blas: with
 * oneDNN's products, its primitives and the objects it makes per call are
 * memory the plan does not see (on these tiny models up to 650 KB held and
 * 72 KB more per step: open, docs/architecture.md).
 */
#include "../src/session/session.h"
#include "check.h"
#include "testmodels.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* The heap counter (src/memtrack/memtrack.c) when it is preloaded: the
 * bytes of every aligned allocation the process holds, which is how the
 * CPU backend takes the arena and the resident blocks (and how oneDNN or a
 * kernel would take memory of its own); NULL functions when it is not. */
static struct {
    int64_t (*live)(void), (*peak)(void);
    void (*reset_peak)(void);
} heap;
static int64_t heap_extra_max; /* the most a session held beyond its plan (oneDNN's own) */
/* What a session may hold beyond its plan: oneDNN's engine (40 bytes on
 * oneDNN 3.0, dnnl_engine_create), made with the session whatever the
 * products; what else oneDNN keeps (its primitives) only with its products
 * (set in main from REMAT_PRODUCTS). */
static int64_t heap_own = 1 << 20;

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

/* ------------------------------------------------- placement by hand */

/* A memory plan of n events given as {bytes, take tick, give-back tick}
 * (ticks 0 .. 2n-1, each used once), placed; *m is freed by the caller. */
static void hand(remat__memplan *m, const int (*ev)[3], int n) {
    memset(m, 0, sizeof *m);
    m->ev = calloc((size_t)n, sizeof *m->ev);
    m->tick = malloc(2 * (size_t)n * sizeof *m->tick);
    m->n = n, m->ticks = 2 * n;
    for (int e = 0; e < n; e++) {
        m->ev[e] = (remat__mev){.bytes = (size_t)ev[e][0],
                                .off = -1,
                                .value = -1,
                                .ins = e,
                                .t0 = ev[e][1],
                                .t1 = ev[e][2],
                                .cat = REMAT_MEM_ACT};
        m->tick[ev[e][1]] = e;
        m->tick[ev[e][2]] = ~e;
    }
    CHECK_OK(remat__memplan_place(m));
}

/* Lifetimes that touch by one tick, that are disjoint, and a pattern where
 * placing the largest first beats placing in order: each placed without
 * two live events sharing a byte (the independent checker), in exactly
 * the arena worked out by hand, by the placement named. */
static void placement_by_hand(void) {
    static const struct {
        const char *what;
        int n;
        int ev[3][3];
        size_t arena;
        const char *placer; /* NULL: either */
    } cases[] = {
        /* A [0,2) and B [1,3) are live together at tick 1 only: neither
         * placement may put them on the same bytes (as by-size did when it
         * took lifetimes for disjoint one tick early) */
        {"touching by one tick", 2, {{256, 0, 2}, {512, 1, 3}}, 768, NULL},
        {"touching by one tick, larger first", 2, {{512, 0, 2}, {256, 1, 3}}, 768, NULL},
        /* A [0,1) is given back before B [2,3) is taken: one slot */
        {"disjoint", 2, {{512, 0, 1}, {512, 2, 3}}, 512, NULL},
        /* A [0,2), B [1,5), C [3,4): in order, C (512) finds A's 256-byte
         * hole too small and goes on top of B (arena 1024); largest first,
         * C at 0, A there before it, B above both: 768 */
        {"largest first wins", 3, {{256, 0, 2}, {256, 1, 5}, {512, 3, 4}}, 768, "by-size"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        remat__memplan m;
        hand(&m, (const int(*)[3])cases[c].ev, cases[c].n);
        check_placement(&m, cases[c].what);
        CHECK_MSG(m.arena == cases[c].arena, "%s: arena %zu, by hand %zu (%s)", cases[c].what, m.arena, cases[c].arena,
                  m.placer);
        CHECK_MSG(!cases[c].placer || strcmp(m.placer, cases[c].placer) == 0, "%s: placed %s", cases[c].what, m.placer);
        printf("  by hand: %-36s arena %5zu B (%s)\n", cases[c].what, m.arena, m.placer);
        remat__memplan_free(&m);
    }
}

/* Makes one memory-plan event 4 bytes short and runs a step with it
 * (--short-event): under AddressSanitizer the kernel that writes that
 * value writes past its event, into poisoned bytes, and is reported. */
static int short_event(void) {
    remat_graph *g;
    remat_model mdl;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build("mlp", g, &mdl));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, mdl.loss, &so));
    int64_t xd[4], yd[4], nx = 1, ny = 1;
    for (int i = 0, nd = remat_node_shape(g, mdl.input, xd); i < nd; i++) nx *= xd[i];
    for (int i = 0, nd = remat_node_shape(g, mdl.labels, yd); i < nd; i++) ny *= yd[i];
    void *x = calloc((size_t)nx, 4), *y = calloc((size_t)ny, 4);
    remat_session_bind(s, mdl.input, x);
    remat_session_bind(s, mdl.labels, y);
    CHECK_OK(remat_session_step(s, NULL));
    remat__memplan *m = &s->train.mem;
    int32_t e = 0; /* the first computed value's output */
    while (e < m->n && (m->ev[e].value < 0 || REMAT__VAL_KIND(m->ev[e].value) != REMAT__V_OUT ||
                        g->nodes[REMAT__VAL_NODE(m->ev[e].value)].leaf != REMAT__LEAF_NONE || m->ev[e].bytes < 8))
        e++;
    CHECK(e < m->n);
    m->ev[e].bytes -= 4; /* a deliberately wrong size */
    printf("a step with event %d (%zu bytes of node %d's output) 4 bytes short\n", e, m->ev[e].bytes + 4,
           REMAT__VAL_NODE(m->ev[e].value));
    fflush(stdout);
    remat_status st = remat_session_step(s, NULL);
    printf("the step ended: %s\n", remat_status_str(st));
    m->ev[e].bytes += 4;
    free(x), free(y);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return 0;
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
    int64_t heap_before = heap.live ? heap.live() : 0;
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
    if (heap.live) {
        /* the session's own: the plan's arena and blocks, and what oneDNN
         * keeps once made (its engine at creation, its primitives by the
         * first step); a later step takes nothing more */
        int64_t live = heap.live(), own = live - heap_before;
        heap.reset_peak();
        CHECK_OK(remat_session_step(s, NULL));
        int64_t more = heap.peak() - live;
        CHECK_MSG(own >= (int64_t)p.held_bytes && own - (int64_t)p.held_bytes <= heap_own && more == 0,
                  "%s: the heap counter saw the session hold %lld bytes (the plan: %zu) and a second step take %lld "
                  "more",
                  what, (long long)own, p.held_bytes, (long long)more);
        heap_extra_max = own - (int64_t)p.held_bytes > heap_extra_max ? own - (int64_t)p.held_bytes : heap_extra_max;
    }
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

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--short-event") == 0) return short_event();
    int budgets = argc > 1 && strcmp(argv[1], "--quick") == 0 ? 2 : 3;
    heap.live = (int64_t(*)(void))dlsym(RTLD_DEFAULT, "memtrack_live");
    heap.peak = (int64_t(*)(void))dlsym(RTLD_DEFAULT, "memtrack_peak");
    heap.reset_peak = (void (*)(void))dlsym(RTLD_DEFAULT, "memtrack_reset_peak");
    if (!heap.live || !heap.peak || !heap.reset_peak) heap.live = NULL;
    const char *products = getenv("REMAT_PRODUCTS");
    if (products && strcmp(products, "blas") == 0) heap_own = 64;
    const char *expect = getenv("REMAT_EXPECT_HEAP");
    CHECK_MSG(heap.live || !expect || !*expect, "REMAT_EXPECT_HEAP is set but the heap counter is not preloaded");
    printf("heap counter: %s\n", heap.live ? "preloaded: the held bytes are measured" : "not preloaded");
    placement_by_hand();
    const char *models[] = {"mlp",         "cnn",  "resnet18", "resnet50",  "siamese-resnet50",
                            "densenet-bc", "gpt2", "bnnet",    "resblocks", "branches"};
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
        for (int b = 0; b < budgets; b++)
            one(g, &m, models[i], REMAT_STRATEGY_OPTIMAL, lo + (p.held_bytes - lo) * b / 2);
        remat_graph_destroy(g);
    }
    if (heap.live)
        printf("heap counter: every second step took no byte beyond the plan's arena and blocks; a session held at "
               "most %lld bytes beyond its plan (oneDNN's engine and primitives)\n",
               (long long)heap_extra_max);
    return check_exit("test_memplan");
}
