/* test_dist.c: data-parallel training (remat.h, "several processes"), run
 * by ctest under mpirun with 4 ranks and with 2 (tests/dist.cmake), and
 * alone as one rank.
 *
 * The world is split into groups of 1, 2, ... ranks (remat_comm_split),
 * and every group trains the same jobs: cnn (dropout on) and a BatchNorm
 * network on Fashion-MNIST, global batch 64 in micro-batches of 16, under
 * `all`, `sqrt` and `optimal` at two budgets (a group of one rank is
 * gradient accumulation). Each job's losses, test-set evaluation (shared
 * out over the group's ranks), final weights and BatchNorm buffers are
 * hashed; every hash of a model must be the same, whatever the plan and
 * the number of ranks. The jobs are dealt out so that every rank computes
 * about as much in each phase. Every job also checks memory truth on each
 * rank (predicted == measured per category, the communication block
 * included) and that the budgeted plans recompute and fit. Two jobs run
 * the GPU's host-staged reduction on the CPU (REMAT_DP_STAGING=host: each
 * bucket's sum downloaded, exchanged from host buffers and uploaded, the
 * BatchNorm statistics committed into host copies): the same hashes as
 * the direct path's, a smaller communication block (no receive buffer on
 * the device, the statistics of other ranks on the host), host staging
 * bytes outside every category.
 *
 * Then, with two ranks or more: the communicator's deterministic sum
 * against a tree computed here, agreement, a budget that fits no plan
 * (every rank fails, naming the bytes), ranks with different plans (every
 * rank fails, naming them), a group of 3 ranks, micro-batches that do not
 * split over the ranks.
 *
 * --abort: rank 1 ends the job (remat_comm_abort) in the middle of
 * training while the others are in a step; dist.cmake checks that mpirun
 * comes back non-zero within seconds (no rank left waiting).
 * --steps N (default 30), --quick (3 steps, for the sanitizer build).
 */
#include "remat.h"

#include "check.h"
#include "testmodels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MICRO 16

typedef struct {
    remat_comm *world;
    int rank, size;
    int steps;
    remat_dataset *train, *test;
} env;

/* ------------------------------------------------------------ hashing */

typedef struct {
    uint64_t h;
} fnv;

static void fnv_add(fnv *f, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) f->h = (f->h ^ b[i]) * 0x100000001b3ull;
}

/* ------------------------------------------------------------- models */

typedef enum { CNN = 0, BNCNN, N_MODELS } model_kind;
static const char *const model_names[N_MODELS] = {"cnn", "bncnn"};

static remat_status build(model_kind k, remat_graph *g, remat_model *m) {
    if (k == BNCNN) return build_bncnn(g, m, MICRO);
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    remat_model_opts_for(&mo, "cnn");
    mo.batch = MICRO; /* dropout_scale 1: cnn's three dropouts are on */
    return remat_model_build(g, &mo, m);
}

/* --------------------------------------------------------------- jobs */

/* A plan: a strategy, and for `optimal` a budget at `at` of the way from
 * the smallest that fits to what `all` holds. */
typedef struct {
    model_kind model;
    remat_strategy strategy;
    double at;
    const char *name;
    int staged; /* REMAT_DP_STAGING=host: the GPU's path, on the CPU */
} job;

static const job jobs[] = {
    {CNN, REMAT_STRATEGY_ALL, 0, "cnn all", 0},
    {CNN, REMAT_STRATEGY_SQRT, 0, "cnn sqrt", 0},
    {CNN, REMAT_STRATEGY_OPTIMAL, 0.2, "cnn optimal (floor + 20%)", 0},
    {CNN, REMAT_STRATEGY_OPTIMAL, 0.6, "cnn optimal (floor + 60%)", 0},
    {BNCNN, REMAT_STRATEGY_ALL, 0, "bncnn all", 0},
    {BNCNN, REMAT_STRATEGY_SQRT, 0, "bncnn sqrt", 0},
    {BNCNN, REMAT_STRATEGY_OPTIMAL, 0.3, "bncnn optimal (floor + 30%)", 0},
    {CNN, REMAT_STRATEGY_SQRT, 0, "cnn sqrt, host staging", 1},
    {BNCNN, REMAT_STRATEGY_OPTIMAL, 0.3, "bncnn optimal (+ 30%), host staging", 1},
};
#define N_JOBS ((int)(sizeof jobs / sizeof jobs[0]))

static void session_opts(remat_session_opts *so, remat_comm *c, const remat_optim_opts *oo) {
    remat_session_opts_default(so);
    so->threads = 1;
    so->seed = 7;
    so->comm = c;
    so->micro_batches = BATCH / MICRO;
    so->optim = oo;
    so->bucket_bytes = 256 << 10;
}

typedef struct {
    fnv *f;
    int steps;
} collect;

static void on_event(const remat_event *ev, void *user) {
    collect *c = user;
    if (ev->kind == REMAT_EVENT_STEP) {
        float l = (float)ev->loss;
        fnv_add(c->f, &l, sizeof l);
        c->steps++;
    } else if (ev->kind == REMAT_EVENT_EVAL) {
        fnv_add(c->f, &ev->loss, sizeof ev->loss);
        fnv_add(c->f, &ev->accuracy, sizeof ev->accuracy);
    }
}

/* The budget of a job: at `at` of the way from the smallest budget that
 * fits (which a refusal names) to what `all` holds, on these ranks. */
static size_t budget_of(remat_comm *c, const remat_graph *g, const remat_model *m, const remat_optim_opts *oo,
                        double at, size_t bucket) {
    remat_session_opts so;
    session_opts(&so, c, oo);
    so.bucket_bytes = bucket;
    so.strategy = REMAT_STRATEGY_ALL;
    so.plan_only = 1;
    remat_session *s = NULL;
    remat_plan_summary p;
    size_t all = 0, floor = 0;
    CHECK_OK(remat_session_create(&s, g, m->loss, &so));
    if (s && remat_session_plan(s, &p) == REMAT_OK) all = p.held_bytes;
    remat_session_destroy(s);
    s = NULL;
    so.strategy = REMAT_STRATEGY_OPTIMAL;
    so.budget = 1;
    CHECK(remat_session_create(&s, g, m->loss, &so) == REMAT_BUDGET);
    const char *at_floor = strstr(remat_last_error(), "smallest feasible budget is ");
    CHECK_MSG(at_floor && sscanf(at_floor, "smallest feasible budget is %zu", &floor) == 1, "%s", remat_last_error());
    remat_session_destroy(s);
    CHECK_MSG(floor > 0 && floor < all, "floor %zu, all %zu", floor, all);
    return floor + (size_t)(at * (double)(all - floor));
}

/* Trains job j on the ranks of c; returns its hash (0 on failure). */
static uint64_t run_job_here(const env *e, remat_comm *c, const job *j);

static uint64_t run_job(const env *e, remat_comm *c, const job *j) {
    if (j->staged) setenv("REMAT_DP_STAGING", "host", 1);
    uint64_t h = run_job_here(e, c, j);
    unsetenv("REMAT_DP_STAGING");
    return h;
}

static uint64_t run_job_here(const env *e, remat_comm *c, const job *j) {
    fnv f = {0xcbf29ce484222325ull};
    remat_graph *g = NULL;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(j->model, g, &m));
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 0.05f, oo.momentum = 0.9f, oo.weight_decay = 1e-4f;
    remat_session_opts so;
    session_opts(&so, c, &oo);
    so.bucket_bytes = j->model == BNCNN ? 2048 : 256 << 10; /* several buckets, even for the small network */
    so.strategy = j->strategy;
    if (j->at > 0) so.budget = budget_of(c, g, &m, &oo, j->at, so.bucket_bytes);
    remat_session *s = NULL;
    remat_status st = remat_session_create(&s, g, m.loss, &so);
    CHECK_MSG(st == REMAT_OK, "%s on %d ranks: %s", j->name, remat_comm_size(c), remat_last_error());
    if (st != REMAT_OK) {
        remat_graph_destroy(g);
        return 0;
    }
    remat_plan_summary ps;
    remat_dist_info di;
    CHECK_OK(remat_session_plan(s, &ps));
    CHECK_OK(remat_session_dist(s, &di));
    if (j->strategy != REMAT_STRATEGY_ALL) CHECK_MSG(ps.recomputations > 0, "%s recomputes nothing", j->name);
    if (so.budget)
        CHECK_MSG(ps.held_bytes <= so.budget, "%s: holds %zu > budget %zu", j->name, ps.held_bytes, so.budget);
    CHECK(di.ranks == remat_comm_size(c) && di.micro_batches == BATCH / MICRO);
    CHECK(di.local_micro_batches * di.ranks == di.micro_batches &&
          di.first_micro_batch == di.rank * di.local_micro_batches);
    /* staged with one micro-batch per rank and no statistics: nothing to
     * keep on the device (no tree to fold, the exchanges on the host) */
    int empty = j->staged && di.ranks > 1 && di.local_micro_batches == 1 && j->model == CNN;
    CHECK_MSG((di.comm_bytes > 0) != empty && di.buckets > 1, "%s: %zu communication bytes, %d buckets", j->name,
              di.comm_bytes, di.buckets);
    CHECK_MSG(di.host_staging == j->staged && (di.host_staging_bytes > 0) == (j->staged && di.ranks > 1),
              "%s: host staging %d, %zu bytes", j->name, di.host_staging, di.host_staging_bytes);
    if (j->staged && di.ranks > 1) { /* the direct path's block holds the receive buffer and every rank's statistics */
        unsetenv("REMAT_DP_STAGING");
        remat_session_opts po = so;
        po.plan_only = 1, po.budget = 0, po.strategy = REMAT_STRATEGY_ALL; /* the block is the plan's either way */
        remat_session *p = NULL;
        remat_dist_info dd;
        CHECK_OK(remat_session_create(&p, g, m.loss, &po));
        if (p && remat_session_dist(p, &dd) == REMAT_OK)
            CHECK_MSG(dd.comm_bytes > di.comm_bytes && !dd.host_staging && dd.host_staging_bytes == 0,
                      "%s: direct %zu communication bytes, staged %zu", j->name, dd.comm_bytes, di.comm_bytes);
        remat_session_destroy(p);
        setenv("REMAT_DP_STAGING", "host", 1);
    }

    collect col = {&f, 0};
    remat_train_opts to = {.steps = e->steps, .batch = BATCH, .seed = 11, .on_event = on_event, .user = &col};
    CHECK_OK(remat_train(s, &m, e->train, e->test, &to));
    CHECK_MSG(col.steps == e->steps, "%s: %d steps", j->name, col.steps);
    int np = remat_session_param_count(s);
    for (int i = 0; i < np; i++) {
        remat_param_info pi;
        remat_session_param(s, i, &pi);
        float *v = malloc((size_t)pi.numel * sizeof *v);
        if (!v) continue;
        CHECK_OK(remat_session_read_param(s, i, REMAT_PARAM_VALUE, v));
        fnv_add(&f, v, (size_t)pi.numel * sizeof *v);
        /* BatchNorm's running statistics moved: every micro-batch committed */
        if (strstr(pi.name, "running_mean")) CHECK_MSG(v[0] != 0.0f, "%s: %s never updated", j->name, pi.name);
        free(v);
    }

    /* Memory truth on this rank: one more step, predicted == measured for
     * every category, the communication block among them. */
    size_t sample = 28 * 28;
    float *x = calloc((size_t)(di.local_micro_batches * MICRO) * sample, sizeof *x);
    int32_t *y = calloc((size_t)(di.local_micro_batches * MICRO), sizeof *y);
    remat_mem_stats pred, meas;
    float loss = 0;
    CHECK_OK(remat_session_bind(s, m.input, x));
    CHECK_OK(remat_session_bind(s, m.labels, y));
    CHECK_OK(remat_session_predict(s, &pred));
    CHECK_OK(remat_session_step(s, &loss));
    remat_session_mem(s, &meas);
    for (int k = 0; k < REMAT_MEM_COUNT; k++)
        CHECK_MSG(pred.peak[k] == meas.peak[k], "%s, rank %d of %d: %s predicted %zu, measured %zu", j->name, di.rank,
                  di.ranks, remat_mem_str((remat_mem)k), pred.peak[k], meas.peak[k]);
    CHECK_MSG(meas.live[REMAT_MEM_COMM] == di.comm_bytes, "%s: %zu bytes of communication live, block of %zu", j->name,
              meas.live[REMAT_MEM_COMM], di.comm_bytes);
    if (so.budget) CHECK(remat_session_held_bytes(s) <= so.budget);
    remat_session_bind(s, m.input, NULL);
    remat_session_bind(s, m.labels, NULL);
    free(x), free(y);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return f.h ? f.h : 1;
}

/* Every job on groups of 1, 2, 4, ... ranks; every hash of a model equal. */
static void test_invariance(const env *e) {
    int nsizes = 0;
    while ((1 << nsizes) <= e->size) nsizes++;
    uint64_t *mine = calloc((size_t)(N_JOBS * nsizes), sizeof *mine);
    uint64_t *all = calloc((size_t)(N_JOBS * nsizes * e->size), sizeof *all);
    for (int si = 0; si < nsizes; si++) {
        int g = 1 << si, groups = e->size / g, color = e->rank / g;
        remat_comm *c = NULL;
        CHECK_OK(remat_comm_split(e->world, color, &c));
        if (!c) continue;
        CHECK(remat_comm_size(c) == g && remat_comm_rank(c) == e->rank % g);
        /* the jobs dealt out over the groups, each group its share */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int j = 0; j < N_JOBS; j++)
            if (j % groups == color) mine[j * nsizes + si] = run_job(e, c, &jobs[j]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (e->rank == 0)
            printf("groups of %d rank%s: %.1f s on rank 0\n", g, g == 1 ? "" : "s",
                   (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
        remat_comm_destroy(c);
    }
    CHECK_OK(remat_comm_allgather(e->world, mine, (size_t)(N_JOBS * nsizes) * sizeof *mine, all));
    uint64_t ref[N_MODELS] = {0};
    for (int j = 0; j < N_JOBS; j++) {
        if (e->rank == 0) printf("  %-36s", jobs[j].name);
        for (int si = 0; si < nsizes; si++) {
            uint64_t h = 0;
            for (int r = 0; r < e->size && !h; r++) h = all[(size_t)r * N_JOBS * nsizes + j * nsizes + si];
            if (e->rank == 0) printf(" %d:%016llx", 1 << si, (unsigned long long)h);
            CHECK_MSG(h != 0, "%s on %d ranks did not run", jobs[j].name, 1 << si);
            if (!ref[jobs[j].model]) ref[jobs[j].model] = h;
            CHECK_MSG(h == ref[jobs[j].model], "%s on %d ranks: hash %016llx, not %s's %016llx", jobs[j].name, 1 << si,
                      (unsigned long long)h, model_names[jobs[j].model], (unsigned long long)ref[jobs[j].model]);
        }
        if (e->rank == 0) printf("\n");
    }
    free(mine), free(all);
}

/* ---------------------------------------------------- the communicator */

/* The sum of a fixed binary tree over x[lo, hi) (halves at mid). */
static float tree_sum(const float *x, int lo, int hi) {
    if (hi - lo == 1) return x[lo];
    int mid = lo + (hi - lo) / 2;
    return tree_sum(x, lo, mid) + tree_sum(x, mid, hi);
}

static void test_comm(const env *e) {
    /* values whose sum depends on the order of the additions */
    enum { N = 5 };
    float x[N], *in = calloc((size_t)(N * e->size), sizeof *in), *out = calloc((size_t)(N * e->size), sizeof *out);
    for (int i = 0; i < N; i++) x[i] = (e->rank % 2 ? 1e8f : 1.0f) * (float)(i + 1) + 0.37f * (float)e->rank;
    CHECK_OK(remat_comm_allgather(e->world, x, sizeof x, in));
    CHECK_OK(remat_comm_sum(e->world, x, N));
    CHECK_OK(remat_comm_allgather(e->world, x, sizeof x, out));
    for (int i = 0; i < N; i++) {
        float col[64];
        for (int r = 0; r < e->size && r < 64; r++) col[r] = in[r * N + i];
        float want = tree_sum(col, 0, e->size);
        for (int r = 0; r < e->size; r++)
            CHECK_MSG(memcmp(&out[r * N + i], &want, sizeof want) == 0, "element %d on rank %d: %.9g, tree %.9g", i, r,
                      (double)out[r * N + i], (double)want);
    }
    free(in), free(out);
    /* agreement: all fine; then the last rank fails, and everyone says so */
    CHECK(remat_comm_agree(e->world, REMAT_OK) == REMAT_OK && !remat_comm_agreed_failure(e->world));
    remat_status st = e->rank == e->size - 1 ? remat_error(REMAT_IO, "disk on fire") : REMAT_OK;
    st = remat_comm_agree(e->world, st);
    char want[64];
    snprintf(want, sizeof want, "rank %d of %d (", e->size - 1, e->size);
    CHECK_MSG(st == REMAT_IO && (e->size == 1 || strstr(remat_last_error(), want)) &&
                  strstr(remat_last_error(), "disk on fire"),
              "agreement: %s", remat_last_error());
    CHECK(remat_comm_agreed_failure(e->world));
    CHECK(remat_comm_hosts(e->world) >= 1 && remat_comm_host(e->world)[0]);
}

/* ------------------------------------------------------------ failures */

/* A session on c with the given options must fail with want on every rank,
 * its message containing each of the strings. */
static void expect_fail(remat_comm *c, const remat_session_opts *so, remat_status want, const char *a, const char *b) {
    remat_graph *g = NULL;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(CNN, g, &m));
    remat_session *s = NULL;
    remat_status st = remat_session_create(&s, g, m.loss, so);
    CHECK_MSG(st == want && !s && strstr(remat_last_error(), a) && (!b || strstr(remat_last_error(), b)),
              "rank %d of %d: status %s, message: %s (expected %s with '%s')", remat_comm_rank(c), remat_comm_size(c),
              remat_status_str(st), remat_last_error(), remat_status_str(want), a);
    CHECK(remat_comm_agreed_failure(c) || remat_comm_size(c) == 1);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

static void test_failures(const env *e) {
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    remat_session_opts so;
    /* a budget no plan fits: every rank, naming the bytes it would take */
    session_opts(&so, e->world, &oo);
    so.strategy = REMAT_STRATEGY_OPTIMAL;
    so.budget = 1 << 20;
    expect_fail(e->world, &so, REMAT_BUDGET, "smallest feasible budget is", "bytes");
    so.strategy = REMAT_STRATEGY_SQRT;
    expect_fail(e->world, &so, REMAT_BUDGET, "holds", "above the budget of 1048576 bytes");
    /* ranks that would run different plans */
    session_opts(&so, e->world, &oo);
    so.strategy = e->rank == e->size - 1 ? REMAT_STRATEGY_SQRT : REMAT_STRATEGY_ALL;
    expect_fail(e->world, &so, REMAT_INVALID, "the ranks would run different plans", "hashes to");
    /* micro-batches that do not split over the ranks */
    session_opts(&so, e->world, &oo);
    so.micro_batches = e->size + 1;
    expect_fail(e->world, &so, REMAT_INVALID, "do not split evenly over", NULL);
    /* three ranks: not a power of two */
    if (e->size >= 4) {
        remat_comm *c = NULL;
        CHECK_OK(remat_comm_split(e->world, e->rank < 3 ? 0 : 1, &c));
        session_opts(&so, c, &oo);
        so.micro_batches = 6;
        if (e->rank < 3) expect_fail(c, &so, REMAT_INVALID, "power-of-two number of ranks", "not 3");
        remat_comm_destroy(c);
    }
}

/* Rank 1 ends the job in the middle of training; the others are in a
 * step, waiting for it. Never returns normally on rank 1. */
static int test_abort(const env *e) {
    remat_graph *g = NULL;
    remat_model m;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    remat_session_opts so;
    session_opts(&so, e->world, &oo);
    if (remat_graph_create(&g) != REMAT_OK || build(CNN, g, &m) != REMAT_OK) return 1;
    remat_session *s = NULL;
    if (remat_session_create(&s, g, m.loss, &so) != REMAT_OK) return fprintf(stderr, "%s\n", remat_last_error()), 1;
    remat_dist_info di;
    remat_session_dist(s, &di);
    float *x = calloc((size_t)(di.local_micro_batches * MICRO * 28 * 28), sizeof *x);
    int32_t *y = calloc((size_t)(di.local_micro_batches * MICRO), sizeof *y);
    remat_session_bind(s, m.input, x);
    remat_session_bind(s, m.labels, y);
    for (int step = 0; step < 1000; step++) {
        if (step == 2 && e->rank == 1) {
            fprintf(stderr, "test_dist: rank 1 fails alone at step 2 and ends the job\n");
            remat_comm_abort(e->world, 3);
        }
        float loss;
        if (remat_session_step(s, &loss) != REMAT_OK) return fprintf(stderr, "%s\n", remat_last_error()), 1;
    }
    fprintf(stderr, "test_dist: rank %d trained 1000 steps: the abort did not end it\n", e->rank);
    return 0; /* dist.cmake expects a failure */
}

int main(int argc, char **argv) {
    env e = {.steps = 30};
    int abort_test = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) e.steps = 3;
        else if (strcmp(argv[i], "--abort") == 0) abort_test = 1;
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) e.steps = atoi(argv[++i]);
        else return fprintf(stderr, "usage: test_dist [--quick | --steps N | --abort]\n"), 2;
    }
    remat_set_blas_threads(1);
    if (remat_comm_create_env(&e.world) != REMAT_OK) return fprintf(stderr, "%s\n", remat_last_error()), 1;
    e.rank = remat_comm_rank(e.world), e.size = remat_comm_size(e.world);
    if (e.rank == 0)
        printf("test_dist: %d rank%s (%s) on %d host%s, %d steps\n", e.size, e.size == 1 ? "" : "s",
               remat_comm_kind(e.world), remat_comm_hosts(e.world), remat_comm_hosts(e.world) == 1 ? "" : "s", e.steps);
    if (abort_test) {
        int rc = e.size < 2 ? fprintf(stderr, "--abort needs 2 ranks or more\n"), 2 : test_abort(&e);
        remat_comm_destroy(e.world);
        return rc;
    }
    CHECK_OK(remat_dataset_load(&e.train, "fashion-mnist", NULL, 1));
    CHECK_OK(remat_dataset_load(&e.test, "fashion-mnist", NULL, 0));
    if (e.test) CHECK_OK(remat_dataset_truncate(e.test, 300)); /* 19 batches of 16, the last partial */
    /* a rank without the data must not leave the others waiting */
    if (remat_comm_agree(e.world, e.train && e.test ? REMAT_OK : REMAT_NOT_FOUND) != REMAT_OK) {
        fprintf(stderr, "%s\n", remat_last_error());
        remat_comm_destroy(e.world);
        return 1;
    }
    test_comm(&e);
    test_invariance(&e);
    if (e.size > 1) test_failures(&e);
    remat_dataset_destroy(e.train);
    remat_dataset_destroy(e.test);
    /* every rank's checks */
    int failed = check_failures != 0, any = 0;
    int *all = calloc((size_t)e.size, sizeof *all);
    if (all && remat_comm_allgather(e.world, &failed, sizeof failed, all) == REMAT_OK)
        for (int r = 0; r < e.size; r++) any |= all[r];
    free(all);
    remat_comm_destroy(e.world);
    if (e.rank != 0) return failed;
    printf("all ranks: %s\n", any ? "some checks failed" : "every check passed");
    return check_exit("test_dist") | any;
}
