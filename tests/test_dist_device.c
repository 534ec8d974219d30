/* test_dist_device.c: data parallelism on a device (issue 21): ranks that
 * share one GPU give the same bits as one rank.
 *
 *   mpirun -np 2 test_dist_device --device cuda [--steps N]
 *
 * The world is split into groups of 1, 2, ... ranks (remat_comm_split) and
 * every group trains the same jobs on the device: cnn (its three dropouts
 * on) and a BatchNorm network (two BatchNorms, a dropout), global batch 64
 * in micro-batches of 16, under `all` and `sqrt`, SGD with momentum, on
 * synthetic data that depends on the step and the global sample only (no
 * data set needed on the GPU's machine). Each job's losses, final weights
 * and BatchNorm buffers are hashed; every hash of a model must be the
 * same whatever the plan and the number of ranks. At every step, on every
 * rank, the memory plan's prediction equals what the device's allocator
 * measured, per category (the communication block included; the host
 * staging is host memory, outside them), and the session holds what it
 * reports.
 *
 * On the CPU (--device cpu, ctest sets REMAT_DP_STAGING=host) it runs the
 * GPU's host-staged reduction, which is how this program is tested where
 * there is no GPU. --device cuda without a GPU: exit 77 on every rank
 * (mpirun then exits 77: skipped).
 */
#include "remat.h"

#include "check.h"
#include "testmodels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 64
#define MICRO 16
#define PIXELS (28 * 28)

static remat_device device = REMAT_DEVICE_CPU;

typedef struct {
    uint64_t h;
} fnv;

static void fnv_add(fnv *f, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) f->h = (f->h ^ b[i]) * 0x100000001b3ull;
}

static remat_status build(int bn, remat_graph *g, remat_model *m) {
    if (bn) return build_bncnn(g, m, MICRO);
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    remat_model_opts_for(&mo, "cnn");
    mo.batch = MICRO; /* dropout_scale 1: cnn's dropouts are on */
    return remat_model_build(g, &mo, m);
}

/* A sample's pixels and label at a step: a function of (step, global
 * sample, pixel) only, so every rank count sees the same batch. */
static uint32_t mix(uint32_t a) {
    a ^= a >> 16, a *= 0x7feb352du, a ^= a >> 15, a *= 0x846ca68bu, a ^= a >> 16;
    return a;
}

static void fill(int step, int64_t first_sample, int64_t n, float *x, int32_t *y) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t s = mix((uint32_t)step * 1000003u + (uint32_t)(first_sample + i));
        y[i] = (int32_t)(s % 10);
        for (int p = 0; p < PIXELS; p++) {
            uint32_t r = mix(s ^ (uint32_t)p * 0x9e3779b9u);
            /* the label shows in the image, so the loss moves */
            x[i * PIXELS + p] = (float)(r >> 8) / 16777216.0f - 0.5f + (p % 10 == y[i] ? 0.5f : 0.0f);
        }
    }
}

typedef struct {
    int bn;
    remat_strategy strategy;
    const char *name;
} job;

static const job jobs[] = {
    {0, REMAT_STRATEGY_ALL, "cnn all"},
    {0, REMAT_STRATEGY_SQRT, "cnn sqrt"},
    {1, REMAT_STRATEGY_ALL, "bncnn all"},
    {1, REMAT_STRATEGY_SQRT, "bncnn sqrt"},
};
#define N_JOBS ((int)(sizeof jobs / sizeof jobs[0]))

/* Trains job j on the ranks of c for `steps` steps; its hash (0: failed). */
static uint64_t run_job(remat_comm *c, const job *j, int steps) {
    fnv f = {0xcbf29ce484222325ull};
    remat_graph *g = NULL;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(j->bn, g, &m));
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 0.05f, oo.momentum = 0.9f, oo.weight_decay = 1e-4f;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.device = device;
    so.threads = 1;
    so.seed = 7;
    so.comm = c;
    so.micro_batches = BATCH / MICRO;
    so.optim = &oo;
    so.strategy = j->strategy;
    so.bucket_bytes = j->bn ? 2048 : 256 << 10; /* several buckets */
    remat_session *s = NULL;
    remat_status st = remat_session_create(&s, g, m.loss, &so);
    CHECK_MSG(st == REMAT_OK, "%s on %d ranks: %s", j->name, remat_comm_size(c), remat_last_error());
    if (st != REMAT_OK) {
        remat_graph_destroy(g);
        return 0;
    }
    remat_dist_info di;
    CHECK_OK(remat_session_dist(s, &di));
    CHECK(di.ranks == remat_comm_size(c) && di.micro_batches == BATCH / MICRO && di.buckets > 1);
    CHECK_MSG(di.host_staging == (device != REMAT_DEVICE_CPU || getenv("REMAT_DP_STAGING")) &&
                  (di.host_staging_bytes > 0) == (di.host_staging && di.ranks > 1),
              "%s: host staging %d, %zu bytes", j->name, di.host_staging, di.host_staging_bytes);
    int64_t rows = di.local_micro_batches * MICRO, first = di.first_micro_batch * MICRO;
    float *x = malloc((size_t)rows * PIXELS * sizeof *x);
    int32_t *y = malloc((size_t)rows * sizeof *y);
    CHECK_OK(remat_session_bind(s, m.input, x));
    CHECK_OK(remat_session_bind(s, m.labels, y));
    int truth_failures = 0;
    for (int t = 0; t < steps && x && y; t++) {
        fill(t, first, rows, x, y);
        remat_mem_stats pred, meas;
        float loss = 0.0f;
        CHECK_OK(remat_session_predict(s, &pred));
        st = remat_session_step(s, &loss);
        CHECK_MSG(st == REMAT_OK, "%s, step %d: %s", j->name, t, remat_last_error());
        if (st != REMAT_OK) break;
        CHECK_OK(remat_session_update(s));
        remat_session_mem(s, &meas);
        for (int k = 0; k < REMAT_MEM_COUNT && truth_failures < 4; k++)
            if (pred.peak[k] != meas.peak[k]) {
                truth_failures++;
                CHECK_MSG(0, "%s, rank %d of %d, step %d: %s predicted %zu, measured %zu", j->name, di.rank, di.ranks,
                          t, remat_mem_str((remat_mem)k), pred.peak[k], meas.peak[k]);
            }
        CHECK_MSG(meas.live[REMAT_MEM_COMM] == di.comm_bytes, "%s: %zu bytes of communication live, block of %zu",
                  j->name, meas.live[REMAT_MEM_COMM], di.comm_bytes);
        CHECK_MSG(loss == loss, "%s, step %d: the loss is NaN", j->name, t);
        fnv_add(&f, &loss, sizeof loss);
    }
    remat_plan_summary ps;
    CHECK_OK(remat_session_plan(s, &ps));
    CHECK_MSG(remat_session_held_bytes(s) == ps.held_bytes, "%s: holds %zu, the plan says %zu", j->name,
              remat_session_held_bytes(s), ps.held_bytes);
    int np = remat_session_param_count(s);
    for (int i = 0; i < np; i++) {
        remat_param_info pi;
        remat_session_param(s, i, &pi);
        float *v = malloc((size_t)pi.numel * sizeof *v);
        if (!v) continue;
        CHECK_OK(remat_session_read_param(s, i, REMAT_PARAM_VALUE, v));
        fnv_add(&f, v, (size_t)pi.numel * sizeof *v);
        if (strstr(pi.name, "running_mean")) CHECK_MSG(v[0] != 0.0f, "%s: %s never updated", j->name, pi.name);
        free(v);
    }
    remat_session_bind(s, m.input, NULL);
    remat_session_bind(s, m.labels, NULL);
    free(x), free(y);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return f.h ? f.h : 1;
}

int main(int argc, char **argv) {
    int steps = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc &&
                 remat_device_parse(argv[i + 1], &device) == REMAT_OK)
            i++;
        else return fprintf(stderr, "usage: test_dist_device [--device cpu|cuda] [--steps N]\n"), 2;
    }
    remat_comm *world = NULL;
    if (remat_comm_create_env(&world) != REMAT_OK) return fprintf(stderr, "%s\n", remat_last_error()), 1;
    int rank = remat_comm_rank(world), size = remat_comm_size(world);
    /* every rank sees the same machine: skipped together */
    if (remat_device_available(device) != REMAT_OK) {
        if (rank == 0) printf("test_dist_device: skipped: %s\n", remat_last_error());
        remat_comm_destroy(world);
        return 77;
    }
    remat_set_blas_threads(1);
    if (rank == 0)
        printf("test_dist_device: %d rank%s (%s) on the %s, %d steps%s\n", size, size == 1 ? "" : "s",
               remat_comm_kind(world), remat_device_str(device), steps,
               getenv("REMAT_DP_STAGING") ? ", REMAT_DP_STAGING=host" : "");
    int nsizes = 0;
    while ((1 << nsizes) <= size) nsizes++;
    uint64_t *mine = calloc((size_t)(N_JOBS * nsizes), sizeof *mine);
    uint64_t *all = calloc((size_t)(N_JOBS * nsizes * size), sizeof *all);
    for (int si = 0; si < nsizes; si++) {
        int gsize = 1 << si, groups = size / gsize, color = rank / gsize;
        remat_comm *c = NULL;
        CHECK_OK(remat_comm_split(world, color, &c));
        if (!c) continue;
        for (int j = 0; j < N_JOBS; j++)
            if (j % groups == color) mine[j * nsizes + si] = run_job(c, &jobs[j], steps);
        remat_comm_destroy(c);
    }
    CHECK_OK(remat_comm_allgather(world, mine, (size_t)(N_JOBS * nsizes) * sizeof *mine, all));
    uint64_t ref[2] = {0, 0};
    for (int j = 0; j < N_JOBS; j++) {
        if (rank == 0) printf("  %-12s", jobs[j].name);
        for (int si = 0; si < nsizes; si++) {
            uint64_t h = 0;
            for (int r = 0; r < size && !h; r++) h = all[(size_t)r * N_JOBS * nsizes + j * nsizes + si];
            if (rank == 0) printf(" %d:%016llx", 1 << si, (unsigned long long)h);
            CHECK_MSG(h != 0, "%s on %d ranks did not run", jobs[j].name, 1 << si);
            if (!ref[jobs[j].bn]) ref[jobs[j].bn] = h;
            CHECK_MSG(h == ref[jobs[j].bn], "%s on %d ranks: hash %016llx, not %016llx", jobs[j].name, 1 << si,
                      (unsigned long long)h, (unsigned long long)ref[jobs[j].bn]);
        }
        if (rank == 0) printf("\n");
    }
    free(mine), free(all);
    int failed = check_failures != 0, any = 0;
    int *every = calloc((size_t)size, sizeof *every);
    if (every && remat_comm_allgather(world, &failed, sizeof failed, every) == REMAT_OK)
        for (int r = 0; r < size; r++) any |= every[r];
    free(every);
    remat_comm_destroy(world);
    if (rank != 0) return failed;
    printf("all ranks: %s\n", any ? "some checks failed" : "every check passed");
    return check_exit("test_dist_device") | any;
}
