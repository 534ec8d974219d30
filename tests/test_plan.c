/* test_plan.c: checkpointing invariants.
 *
 * Plan invariance: for cnn (dropout on), bnnet (BatchNorm), mlp and
 * heavy-mul, every strategy gives bitwise the same losses, gradients,
 * running statistics and weights over 5 optimizer steps as `all`.
 * Memory truth: at every step of every model x strategy, the executor's
 * measured peak per category equals the simulator's prediction.
 * The trap: checkpointing cnn's first block, whose input is the data batch,
 * leaves its conv weights' gradients bitwise unchanged.
 * Budgets: one byte below the predicted peak fails before any step, naming
 * the bytes required; the predicted peak itself fits.
 */
#include "check.h"
#include "testmodels.h"
#include "../src/remat-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 5

typedef struct {
    float losses[STEPS];
    int n;
    float **params; /* per parameter and buffer: data after the steps */
    float **grads;  /* per parameter: gradient of the last step (NULL for buffers) */
    int64_t *numel;
    size_t peak_act, peak_total;
    int64_t recomputations;
} result;

static remat_status build(const char *name, remat_graph *g, remat_model *m, int ckpt_blocks) {
    if (strcmp(name, "bnnet") == 0) {
        remat_status st = build_bnnet(g, m, 8);
        /* a manual boundary at the first block's pooled output */
        for (remat_node n = 0; st == REMAT_OK && n < remat_graph_node_count(g); n++)
            if (strcmp(remat_node_op(g, n), "maxpool2d") == 0) remat_checkpoint(g, n);
        return st;
    }
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    mo.name = name;
    mo.batch = 8;
    mo.checkpoint_blocks = ckpt_blocks;
    return remat_model_build(g, &mo, m);
}

static void run(const char *name, remat_strategy strategy, int ckpt_blocks, result *r) {
    memset(r, 0, sizeof *r);
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(name, g, &m, ckpt_blocks));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    so.seed = 5;
    so.strategy = strategy;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    if (!s) {
        remat_graph_destroy(g);
        return;
    }
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 0.01f, oo.momentum = 0.9f, oo.weight_decay = 1e-4f;
    if (strncmp(name, "heavy", 5) == 0) oo.lr = 1e-9f; /* d loss / d a is ~1e5 */
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    int64_t xd[4];
    int nd = remat_node_shape(g, m.input, xd);
    int64_t nx = 1;
    for (int i = 0; i < nd; i++) nx *= xd[i];
    float *x = malloc((size_t)nx * sizeof *x);
    int32_t y[8];
    float t[1] = {0.5f};
    int heavy = strncmp(name, "heavy", 5) == 0;
    remat_session_bind(s, m.input, x);
    remat_session_bind(s, m.labels, heavy ? (const void *)t : (const void *)y);
    remat_plan_summary plan;
    CHECK_OK(remat_session_plan(s, &plan));
    r->recomputations = plan.recomputations;
    for (int step = 0; step < STEPS; step++) {
        for (int64_t i = 0; i < nx; i++) x[i] = heavy ? 1.0f : (float)((i * 31 + step * 7) % 23) / 11.0f - 1.0f;
        for (int i = 0; i < 8; i++) y[i] = (i * 3 + step) % 10;
        remat_mem_stats pred, meas;
        CHECK_OK(remat_session_predict(s, &pred));
        CHECK_OK(remat_session_step(s, &r->losses[step]));
        remat_session_mem(s, &meas);
        for (int c = 0; c < REMAT_MEM_COUNT; c++)
            CHECK_MSG(pred.peak[c] == meas.peak[c], "%s/%s step %d %s: predicted %zu, measured %zu", name,
                      remat_strategy_str(strategy), step, remat_mem_str((remat_mem)c), pred.peak[c], meas.peak[c]);
        CHECK(meas.live[REMAT_MEM_ACT] == 0 && meas.live[REMAT_MEM_TRANSIENT] == 0);
        r->peak_act = meas.peak[REMAT_MEM_ACT];
        r->peak_total = meas.peak[REMAT_MEM_TOTAL];
        if (step + 1 < STEPS) CHECK_OK(remat_session_update(s));
    }
    r->n = remat_session_param_count(s);
    r->params = calloc((size_t)r->n, sizeof *r->params);
    r->grads = calloc((size_t)r->n, sizeof *r->grads);
    r->numel = calloc((size_t)r->n, sizeof *r->numel);
    for (int i = 0; i < r->n; i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        size_t bytes = (size_t)p.numel * sizeof(float);
        r->numel[i] = p.numel;
        r->params[i] = malloc(bytes);
        memcpy(r->params[i], p.data, bytes);
        if (p.grad) {
            r->grads[i] = malloc(bytes);
            memcpy(r->grads[i], p.grad, bytes);
        }
    }
    free(x);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

static void free_result(result *r) {
    for (int i = 0; i < r->n; i++) free(r->params[i]), free(r->grads[i]);
    free(r->params), free(r->grads), free(r->numel);
}

/* Bitwise equality of losses, weights, buffers and gradients. */
static void same(const char *name, const char *what, const result *a, const result *b) {
    CHECK_MSG(memcmp(a->losses, b->losses, sizeof a->losses) == 0, "%s %s: losses differ (%.9g vs %.9g)", name, what,
              (double)a->losses[STEPS - 1], (double)b->losses[STEPS - 1]);
    CHECK(a->n == b->n && a->n > 0);
    for (int i = 0; i < a->n && i < b->n; i++) {
        size_t bytes = (size_t)a->numel[i] * sizeof(float);
        CHECK(a->numel[i] == b->numel[i]);
        CHECK_MSG(memcmp(a->params[i], b->params[i], bytes) == 0, "%s %s: parameter %d differs", name, what, i);
        CHECK((a->grads[i] == NULL) == (b->grads[i] == NULL));
        if (a->grads[i] && b->grads[i])
            CHECK_MSG(memcmp(a->grads[i], b->grads[i], bytes) == 0, "%s %s: gradient %d differs", name, what, i);
    }
}

static void invariance(const char *name) {
    result base;
    run(name, REMAT_STRATEGY_ALL, -1, &base);
    CHECK(base.recomputations == 0);
    for (int st = REMAT_STRATEGY_MANUAL; st <= REMAT_STRATEGY_SQRT; st++) {
        result r;
        run(name, (remat_strategy)st, -1, &r);
        same(name, remat_strategy_str((remat_strategy)st), &base, &r);
        CHECK_MSG(r.losses[STEPS - 1] == r.losses[STEPS - 1], "%s: the loss is not a number", name);
        CHECK_MSG(r.recomputations > 0, "%s %s recomputes nothing", name, remat_strategy_str((remat_strategy)st));
        CHECK_MSG(r.peak_act < base.peak_act, "%s %s: activations %zu not below all's %zu", name,
                  remat_strategy_str((remat_strategy)st), r.peak_act, base.peak_act);
        printf("%-9s %-6s: loss %.9g after %d steps (bitwise equal to all), activations %zu B (all: %zu B), "
               "peak %zu B (all: %zu B), %lld recomputations\n",
               name, remat_strategy_str((remat_strategy)st), (double)r.losses[STEPS - 1], STEPS, r.peak_act,
               base.peak_act, r.peak_total, base.peak_total, (long long)r.recomputations);
        free_result(&r);
    }
    free_result(&base);
}

/* The trap that started this project: in PyTorch, checkpointing (reentrant)
 * a block whose input does not require grad silently drops the gradients of
 * the block's parameters. Here the first block of cnn takes the data batch;
 * its parameters get exactly the gradients they get without checkpointing. */
static void trap(void) {
    result base, r;
    run("cnn", REMAT_STRATEGY_ALL, 1, &base);
    run("cnn", REMAT_STRATEGY_MANUAL, 1, &r);
    CHECK(r.recomputations > 0);
    same("cnn, first block checkpointed", "manual", &base, &r);
    /* features.0.weight is parameter 0: its gradient is nonzero */
    double norm = 0;
    for (int64_t i = 0; r.n && i < r.numel[0]; i++) norm += (double)r.grads[0][i] * r.grads[0][i];
    CHECK_MSG(norm > 0, "features.0.weight got no gradient");
    printf("trap: cnn with its first block checkpointed: features.0.weight gradient norm^2 %.6g, bitwise equal\n",
           norm);
    free_result(&base);
    free_result(&r);
}

/* A chain of 64 products x = x * a over 16-vectors, with a boundary after
 * every 16 (flat), or additionally every 4 inside scopes (nested). */
static remat_graph *chain(int nested, remat_node *loss, remat_node *x0, remat_node *t) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t d = 16;
    *x0 = remat_input(g, "x", REMAT_F32, 1, &d);
    *t = remat_input(g, "t", REMAT_F32, 1, &d);
    remat_node a = remat_param(g, "a", 1, &d, REMAT_INIT_ONES, 0);
    remat_node x = *x0;
    for (int seg = 0; seg < 4; seg++) {
        if (nested) remat_checkpoint_begin(g);
        for (int i = 1; i <= 16; i++) {
            x = remat_mul(g, x, a);
            if (nested && i % 4 == 0 && i < 16) remat_checkpoint(g, x);
        }
        x = nested ? remat_checkpoint_end(g, x) : remat_checkpoint(g, x);
    }
    *loss = remat_mse(g, x, *t);
    CHECK_OK(remat_graph_status(g));
    return g;
}

static void nested(void) {
    float xv[16], tv[16], loss[3];
    size_t act[3];
    int64_t rec[3];
    float *grads[3];
    for (int i = 0; i < 16; i++) xv[i] = 1.0f + 0.01f * (float)i, tv[i] = 0.5f;
    for (int k = 0; k < 3; k++) { /* all, flat manual, nested manual */
        remat_node l, x0, t;
        remat_graph *g = chain(k == 2, &l, &x0, &t);
        remat_session_opts so;
        remat_session_opts_default(&so);
        so.threads = 1;
        so.strategy = k == 0 ? REMAT_STRATEGY_ALL : REMAT_STRATEGY_MANUAL;
        remat_session *s = NULL;
        CHECK_OK(remat_session_create(&s, g, l, &so));
        remat_param_info pa;
        remat_session_param(s, 0, &pa);
        for (int i = 0; i < 16; i++) pa.data[i] = 1.0f - 0.001f * (float)i;
        remat_session_bind(s, x0, xv);
        remat_session_bind(s, t, tv);
        remat_mem_stats pred, meas;
        CHECK_OK(remat_session_predict(s, &pred));
        CHECK_OK(remat_session_step(s, &loss[k]));
        remat_session_mem(s, &meas);
        for (int c = 0; c < REMAT_MEM_COUNT; c++) CHECK(pred.peak[c] == meas.peak[c]);
        remat_plan_summary p;
        CHECK_OK(remat_session_plan(s, &p));
        act[k] = meas.peak[REMAT_MEM_ACT];
        rec[k] = p.recomputations;
        grads[k] = malloc(16 * sizeof(float));
        memcpy(grads[k], pa.grad, 16 * sizeof(float));
        remat_session_destroy(s);
        remat_graph_destroy(g);
    }
    printf("nested: activations all %zu B, flat %zu B, nested %zu B; recomputations %lld, %lld, %lld\n", act[0], act[1],
           act[2], (long long)rec[0], (long long)rec[1], (long long)rec[2]);
    for (int k = 1; k < 3; k++) {
        CHECK(loss[k] == loss[0] && memcmp(grads[k], grads[0], 16 * sizeof(float)) == 0);
        CHECK(act[k] < act[k - 1]);
    }
    /* flat recomputes 15 products in each of 4 segments; nested recomputes
     * each segment's 15 once more and the inner segments' 3 products again */
    CHECK(rec[1] == 4 * 15);
    CHECK_MSG(rec[2] > rec[1], "nested recomputes %lld, flat %lld", (long long)rec[2], (long long)rec[1]);
    for (int k = 0; k < 3; k++) free(grads[k]);
}

static void budgets(void) {
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build("cnn", g, &m, -1));
    for (int st = REMAT_STRATEGY_ALL; st <= REMAT_STRATEGY_SQRT; st++) {
        remat_session_opts so;
        remat_session_opts_default(&so);
        so.threads = 1;
        so.strategy = (remat_strategy)st;
        remat_session *s = NULL;
        CHECK_OK(remat_session_create(&s, g, m.loss, &so));
        remat_optim_opts oo;
        remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
        CHECK_OK(remat_session_set_optimizer(s, &oo));
        remat_plan_summary ps;
        CHECK_OK(remat_session_plan(s, &ps));
        size_t need = ps.held_bytes; /* the arena and the resident blocks */
        CHECK(need >= ps.predicted.peak[REMAT_MEM_TOTAL]);
        remat_session_destroy(s);
        /* exactly what the step holds fits */
        so.budget = need;
        CHECK_OK(remat_session_create(&s, g, m.loss, &so));
        CHECK_OK(remat_session_set_optimizer(s, &oo));
        remat_session_destroy(s);
        /* one byte less fails when the optimizer state is added, naming the bytes */
        so.budget = need - 1;
        s = NULL;
        remat_status rc = remat_session_create(&s, g, m.loss, &so);
        if (rc == REMAT_OK) rc = remat_session_set_optimizer(s, &oo);
        char want[64];
        snprintf(want, sizeof want, "holds %zu bytes", need);
        CHECK_MSG(rc == REMAT_BUDGET && strstr(remat_last_error(), want), "%s: %s",
                  remat_strategy_str((remat_strategy)st), remat_last_error());
        remat_session_destroy(s);
        /* far too little fails at creation already */
        so.budget = 1000;
        s = NULL;
        CHECK(remat_session_create(&s, g, m.loss, &so) == REMAT_BUDGET && s == NULL);
    }
    remat_graph_destroy(g);
}

/* Convolutions of g whose CUDA workspace is cuDNN's choice: all but the
 * 1x1 ones with padding 0, which run as cuBLAS products sized from the
 * shapes (src/cuda/conv1x1.h). */
static int dnn_convs(const remat_graph *g, int *gemm) {
    int convs = 0;
    *gemm = 0;
    for (remat_node n = 0; n < remat_graph_node_count(g); n++) {
        if (strcmp(remat_node_op(g, n), "conv2d") != 0) continue;
        const remat__shape *w = remat__in_shape(g, &g->nodes[n], 1);
        int prod = w->d[2] == 1 && w->d[3] == 1 && g->nodes[n].iattr[1] == 0;
        convs += !prod, *gemm += prod;
    }
    return convs;
}

/* A plan for a GPU that is not here (built with CUDA, no device): a
 * plan-only session is made without the device, the workspaces of
 * cuDNN's convolutions estimated and counted as such (cnn: all 3x3;
 * resnet50: its 1x1 ones are products, known from the shapes, and not
 * counted); a session that would run is refused. */
static void deviceless_model(const char *name, int with_1x1) {
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(name, g, &m, -1));
    int gemm, convs = dnn_convs(g, &gemm);
    CHECK_MSG(convs > 0 && (gemm > 0) == with_1x1, "%s: %d cuDNN convolutions, %d 1x1", name, convs, gemm);
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.device = REMAT_DEVICE_CUDA;
    remat_session *s = NULL;
    CHECK(remat_session_create(&s, g, m.loss, &so) == REMAT_UNSUPPORTED && s == NULL);
    so.plan_only = 1;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    remat_plan_summary p = {0};
    if (s) CHECK_OK(remat_session_plan(s, &p));
    CHECK_MSG(p.estimated_nodes == convs, "%s: estimated %lld nodes, %d cuDNN convolutions", name,
              (long long)p.estimated_nodes, convs);
    CHECK(p.predicted.peak[REMAT_MEM_WORKSPACE] >= ((size_t)256 << 20)); /* at most the cap, which it counts */
    printf("deviceless: %s: a cuda plan without a GPU, %lld convolutions' workspaces estimated, holds %zu B\n", name,
           (long long)p.estimated_nodes, p.held_bytes);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

static void deviceless(void) {
    if (remat_device_available(REMAT_DEVICE_CUDA) == REMAT_OK || strstr(remat_last_error(), "without CUDA")) {
        printf("deviceless: skipped (%s)\n",
               remat_device_available(REMAT_DEVICE_CUDA) == REMAT_OK ? "a GPU is here" : "built without CUDA");
        return;
    }
    deviceless_model("cnn", 0);
    deviceless_model("resnet50", 1);
}

int main(void) {
    deviceless();
    const char *models[] = {"cnn", "bnnet", "mlp", "heavy-mul"};
    for (int i = 0; i < 4; i++) invariance(models[i]);
    trap();
    nested();
    budgets();
    return check_exit("test_plan");
}
