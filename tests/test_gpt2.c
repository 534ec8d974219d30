/* test_gpt2.c: GPT-2 and its ops.
 *
 * 1. Against PyTorch: the tiny gpt2 of scripts/gen_fixtures_gpt2.py
 *    (layers 2, embd 24, heads 4, context 16, vocab 64, batch 2, dropout
 *    off) loads tests/fixtures/gpt2_tiny/weights.safetensors by name,
 *    steps once on batch.safetensors, and its loss and every parameter's
 *    gradient must match grads.safetensors (PyTorch in float64) under
 *    test_torch's rule: |remat - torch| <= 1e-5 * max|torch| per tensor,
 *    the loss within 1e-5 relative.
 * 2. Plan invariance: tiny gpt2 with dropout on, 2 SGD steps under the
 *    strategies all, manual (every block), sqrt and optimal (a budget
 *    between sqrt's peak and all's): bitwise the same losses, gradients
 *    and weights, and every measured peak equal to the prediction.
 * 3. Kernels: each transformer op at sizes where it runs on the thread
 *    pool gives bitwise the same output and gradients with 1, 2 and 3
 *    threads; attention and layernorm also match plain double-precision
 *    reference implementations written here.
 * 4. Errors: shape errors name the op and the shapes; an out-of-range
 *    embedding id gives a NaN loss (never a crash or a stray write); bad
 *    gpt2 sizes are refused.
 */
#include "../src/train/safetensors.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RTOL 1e-5

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static uint32_t rng = 1;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

static int64_t numel_of(const remat_graph *g, remat_node n) {
    int64_t d[REMAT_MAX_DIMS], k = 1;
    int nd = remat_node_shape(g, n, d);
    for (int i = 0; i < nd; i++) k *= d[i];
    return k;
}

static void tiny_opts(remat_model_opts *mo, float dropout_scale) {
    remat_model_opts_default(mo);
    CHECK_OK(remat_model_opts_for(mo, "gpt2"));
    mo->batch = 2;
    mo->layers = 2, mo->embd = 24, mo->heads = 4, mo->context = 16, mo->vocab = 64;
    mo->dropout_scale = dropout_scale;
}

/* ------------------------------------------------------ 1. against torch */

static const remat__st_tensor *get(const remat__st *f, const char *key, remat__st_tensor *t) {
    int i = remat__st_find(f, key);
    if (i < 0 || remat__st_get(f, i, t) != REMAT_OK) return NULL;
    return t;
}

static double worst_frac = 0.0; /* largest |remat - torch| / (RTOL * S) seen */

static void compare(const remat__st *f, const char *key, const float *c, int64_t n) {
    remat__st_tensor t;
    CHECK_MSG(get(f, key, &t) && strcmp(t.dtype, "F32") == 0 && (int64_t)(t.bytes / 4) == n,
              "fixture entry %s missing or of the wrong size", key);
    if (!get(f, key, &t) || (int64_t)(t.bytes / 4) != n) return;
    const float *r = t.data;
    double S = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) S = fmax(S, fabs(r[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)c[i] - r[i]));
    CHECK_MSG(S > 0.0, "%s: the reference is all zero", key);
    CHECK_MSG(worst <= RTOL * S, "%s: max |remat - torch| = %.3g above %.3g", key, worst, RTOL * S);
    if (S > 0.0) worst_frac = fmax(worst_frac, worst / (RTOL * S));
}

static void against_torch(void) {
    remat__st *wf = NULL, *bf = NULL, *gf = NULL;
    CHECK_OK(remat__st_open(&bf, "fixtures/gpt2_tiny/batch.safetensors"));
    CHECK_OK(remat__st_open(&gf, "fixtures/gpt2_tiny/grads.safetensors"));
    CHECK_OK(remat__st_open(&wf, "fixtures/gpt2_tiny/weights.safetensors"));
    remat_graph *g = NULL;
    remat_session *s = NULL;
    if (!bf || !gf || !wf) goto out;
    remat_model_opts mo;
    remat_model m;
    tiny_opts(&mo, 0.0f);
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    if (!s) goto out;
    /* every parameter in the file (strict), and nothing else: 28 tensors */
    CHECK_OK(remat_safetensors_load(s, "fixtures/gpt2_tiny/weights.safetensors", 1));
    CHECK(remat__st_count(wf) == remat_session_param_count(s));
    CHECK(remat_session_find_param(s, "lm_head.weight") < 0);
    remat__st_tensor in, tg;
    CHECK(get(bf, "input", &in) && strcmp(in.dtype, "I32") == 0 && in.ndim == 2 && in.dims[0] == 2 && in.dims[1] == 16);
    CHECK(get(bf, "target", &tg) && strcmp(tg.dtype, "I32") == 0 && tg.ndim == 1 && tg.dims[0] == 32);
    if (!get(bf, "input", &in) || !get(bf, "target", &tg) || in.bytes != 32 * 4 || tg.bytes != 32 * 4) goto out;
    int32_t x[32], y[32];
    memcpy(x, in.data, sizeof x), memcpy(y, tg.data, sizeof y);
    CHECK_OK(remat_session_bind(s, m.input, x));
    CHECK_OK(remat_session_bind(s, m.labels, y));
    float loss = 0.0f;
    CHECK_OK(remat_session_step(s, &loss));
    remat__st_tensor lt;
    CHECK(get(gf, "loss", &lt) && lt.bytes == 4);
    if (get(gf, "loss", &lt) && lt.bytes == 4) {
        double r = ((const float *)lt.data)[0];
        CHECK_MSG(fabs(loss - r) <= RTOL * fabs(r), "loss: remat %.9g, torch %.9g", (double)loss, r);
        printf("gpt2 tiny vs torch: loss %.9g (torch %.9g, relative error %.3g)\n", (double)loss, r,
               fabs(loss - r) / fabs(r));
    }
    int ngrad = 0;
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        if (!p.trainable) continue;
        char key[300];
        snprintf(key, sizeof key, "grad.%s", p.name);
        compare(gf, key, p.grad, p.numel);
        ngrad++;
    }
    CHECK(ngrad == 28);
    printf("gpt2 tiny vs torch: %d gradients, worst error %.3f of the bound 1e-5 * max|torch|\n", ngrad, worst_frac);
out:
    remat_session_destroy(s);
    remat_graph_destroy(g);
    remat__st_close(wf), remat__st_close(bf), remat__st_close(gf);
}

/* -------------------------------------------------- 2. plan invariance */

#define STEPS 2

typedef struct {
    float losses[STEPS];
    int n;
    float **params, **grads;
    int64_t *numel;
    size_t peak_total;
    int64_t recomputations;
} result;

static void free_result(result *r) {
    for (int i = 0; i < r->n; i++) free(r->params[i]), free(r->grads[i]);
    free(r->params), free(r->grads), free(r->numel);
    memset(r, 0, sizeof *r);
}

/* Runs STEPS SGD steps of tiny gpt2 (dropout on); budget 0 = none. */
static void run_gpt2(remat_strategy strategy, size_t budget, result *r) {
    memset(r, 0, sizeof *r);
    remat_model_opts mo;
    remat_model m;
    tiny_opts(&mo, 1.0f);
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2, so.seed = 7, so.strategy = strategy, so.budget = budget;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m.loss, &so));
    if (!s) {
        remat_graph_destroy(g);
        return;
    }
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 0.05f, oo.momentum = 0.9f;
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    remat_plan_summary plan;
    CHECK_OK(remat_session_plan(s, &plan));
    r->recomputations = plan.recomputations;
    int32_t x[32], y[32];
    CHECK_OK(remat_session_bind(s, m.input, x));
    CHECK_OK(remat_session_bind(s, m.labels, y));
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < 32; i++) x[i] = (i * 13 + step * 5) % 64, y[i] = (i * 29 + step * 3 + 1) % 64;
        remat_mem_stats pred, meas;
        CHECK_OK(remat_session_predict(s, &pred));
        CHECK_OK(remat_session_step(s, &r->losses[step]));
        remat_session_mem(s, &meas);
        for (int c = 0; c < REMAT_MEM_COUNT; c++)
            CHECK_MSG(pred.peak[c] == meas.peak[c], "gpt2 %s step %d %s: predicted %zu, measured %zu",
                      remat_strategy_str(strategy), step, remat_mem_str((remat_mem)c), pred.peak[c], meas.peak[c]);
        r->peak_total = meas.peak[REMAT_MEM_TOTAL];
        CHECK_OK(remat_session_update(s));
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
        r->params[i] = malloc(bytes), memcpy(r->params[i], p.data, bytes);
        if (p.grad) r->grads[i] = malloc(bytes), memcpy(r->grads[i], p.grad, bytes);
    }
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

static void same(const char *what, const result *a, const result *b) {
    CHECK_MSG(memcmp(a->losses, b->losses, sizeof a->losses) == 0, "gpt2 %s: losses differ (%.9g vs %.9g)", what,
              (double)a->losses[STEPS - 1], (double)b->losses[STEPS - 1]);
    CHECK(a->n == b->n && a->n == 28);
    for (int i = 0; i < a->n && i < b->n; i++) {
        size_t bytes = (size_t)a->numel[i] * sizeof(float);
        CHECK(a->numel[i] == b->numel[i] && a->grads[i] && b->grads[i]);
        CHECK_MSG(memcmp(a->params[i], b->params[i], bytes) == 0, "gpt2 %s: parameter %d differs", what, i);
        if (a->grads[i] && b->grads[i])
            CHECK_MSG(memcmp(a->grads[i], b->grads[i], bytes) == 0, "gpt2 %s: gradient %d differs", what, i);
    }
}

static void invariance(void) {
    result all, r;
    run_gpt2(REMAT_STRATEGY_ALL, 0, &all);
    CHECK(all.recomputations == 0);
    CHECK_MSG(all.losses[0] == all.losses[0] && all.losses[1] < all.losses[0] + 1.0f, "gpt2: losses %.9g, %.9g",
              (double)all.losses[0], (double)all.losses[1]);
    size_t sqrt_peak = 0;
    for (int st = REMAT_STRATEGY_MANUAL; st <= REMAT_STRATEGY_OPTIMAL; st++) {
        size_t budget = 0;
        if (st == REMAT_STRATEGY_OPTIMAL) budget = sqrt_peak + (all.peak_total - sqrt_peak) / 2;
        run_gpt2((remat_strategy)st, budget, &r);
        const char *name = remat_strategy_str((remat_strategy)st);
        same(name, &all, &r);
        CHECK_MSG(r.recomputations > 0, "gpt2 %s recomputes nothing", name);
        CHECK_MSG(r.peak_total < all.peak_total, "gpt2 %s: peak %zu not below all's %zu", name, r.peak_total,
                  all.peak_total);
        if (budget)
            CHECK_MSG(r.peak_total <= budget, "gpt2 optimal: peak %zu above the budget %zu", r.peak_total, budget);
        if (st == REMAT_STRATEGY_SQRT) sqrt_peak = r.peak_total;
        printf("gpt2 tiny %-7s: losses %.9g %.9g bitwise equal to all; peak %zu B (all %zu B%s), %lld recomputations\n",
               name, (double)r.losses[0], (double)r.losses[1], r.peak_total, all.peak_total,
               budget ? ", budget given" : "", (long long)r.recomputations);
        free_result(&r);
    }
    free_result(&all);
}

/* --------------------------------------------------------- 3. kernels */

typedef struct {
    remat_node out;
    remat_node ids; /* an int32 input (embedding), or REMAT_NONE */
    int64_t num;    /* ids are (i * 7) % num */
} opcase;

typedef struct {
    float loss;
    int64_t nout;
    float *out; /* the op's output */
    int n;
    float **params, **grads;
    int64_t *numel;
} opresult;

static void free_opresult(opresult *r) {
    for (int i = 0; i < r->n; i++) free(r->params[i]), free(r->grads[i]);
    free(r->params), free(r->grads), free(r->numel), free(r->out);
    memset(r, 0, sizeof *r);
}

static remat_node par(remat_graph *g, const char *name, int ndim, int64_t a, int64_t b, int64_t c) {
    int64_t d[3] = {a, b, c};
    return remat_param(g, name, ndim, d, REMAT_INIT_ZEROS, 0);
}

/* The op's output reduced by MSE against a fixed target; parameters and
 * the target from frand() restarted at the same seed on every run. */
static void run_op(void (*build)(remat_graph *, opcase *), int threads, opresult *r) {
    memset(r, 0, sizeof *r);
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    opcase c = {.out = REMAT_NONE, .ids = REMAT_NONE};
    build(g, &c);
    int64_t d[REMAT_MAX_DIMS];
    int nd = remat_node_shape(g, c.out, d);
    remat_node t = remat_input(g, "target", REMAT_F32, nd, d);
    remat_node loss = remat_mse(g, c.out, t);
    CHECK_MSG(remat_graph_status(g) == REMAT_OK, "%s", remat_graph_error(g));
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = threads;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, loss, &so));
    if (!s) {
        remat_graph_destroy(g);
        return;
    }
    rng = 99;
    r->nout = numel_of(g, c.out);
    float *tb = malloc((size_t)r->nout * sizeof *tb);
    for (int64_t i = 0; i < r->nout; i++) tb[i] = frand();
    int32_t *ib = NULL;
    remat_session_bind(s, t, tb);
    if (c.ids != REMAT_NONE) {
        int64_t n = numel_of(g, c.ids);
        ib = malloc((size_t)n * sizeof *ib);
        for (int64_t i = 0; i < n; i++) ib[i] = (int32_t)((i * 7) % c.num);
        remat_session_bind(s, c.ids, ib);
    }
    r->n = remat_session_param_count(s);
    r->params = calloc((size_t)r->n, sizeof *r->params);
    r->grads = calloc((size_t)r->n, sizeof *r->grads);
    r->numel = calloc((size_t)r->n, sizeof *r->numel);
    for (int i = 0; i < r->n; i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        for (int64_t j = 0; j < p.numel; j++) p.data[j] = 2.0f * frand();
    }
    CHECK_OK(remat_session_step(s, &r->loss));
    r->out = malloc((size_t)r->nout * sizeof *r->out);
    CHECK_OK(remat_session_forward(s, 1, NULL, c.out, r->out));
    for (int i = 0; i < r->n; i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        size_t bytes = (size_t)p.numel * sizeof(float);
        r->numel[i] = p.numel;
        r->params[i] = malloc(bytes), memcpy(r->params[i], p.data, bytes);
        r->grads[i] = malloc(bytes), memcpy(r->grads[i], p.grad, bytes);
    }
    free(tb), free(ib);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

enum { AB = 2, AT = 48, AC = 64, AH = 4 }; /* attention: B, T, C, heads */
static void b_attention(remat_graph *g, opcase *c) {
    c->out = remat_attention(g, par(g, "qkv", 3, AB, AT, 3 * AC), AH);
}
enum { LR = 64, LC = 96 };
static void b_layernorm(remat_graph *g, opcase *c) { /* parameters 0, 1, 2: x, w, b */
    remat_node x = par(g, "x", 2, LR, LC, 0), w = par(g, "w", 1, LC, 0, 0), b = par(g, "b", 1, LC, 0, 0);
    c->out = remat_layernorm_op(g, x, w, b, 1e-5f);
}
static void b_softmax(remat_graph *g, opcase *c) { c->out = remat_softmax(g, par(g, "x", 2, 40, 128, 0)); }
static void b_gelu(remat_graph *g, opcase *c) { c->out = remat_gelu(g, par(g, "x", 2, 80, 64, 0), 0); }
static void b_gelu_tanh(remat_graph *g, opcase *c) { c->out = remat_gelu(g, par(g, "x", 2, 80, 64, 0), 1); }
static void b_embedding(remat_graph *g, opcase *c) {
    int64_t d[2] = {4, 40};
    c->ids = remat_input(g, "ids", REMAT_I32, 2, d);
    c->num = 50;
    c->out = remat_embedding_op(g, c->ids, par(g, "w", 2, 50, 32, 0));
}
static void b_permute(remat_graph *g, opcase *c) {
    int perm[3] = {2, 0, 1};
    c->out = remat_permute(g, par(g, "x", 3, 8, 12, 50), 3, perm);
}
static void b_slice(remat_graph *g, opcase *c) { c->out = remat_slice(g, par(g, "x", 3, 12, 30, 20), 1, 5, 20); }
static void b_add_broadcast(remat_graph *g, opcase *c) {
    c->out = remat_add_broadcast(g, par(g, "x", 3, 6, 40, 24), par(g, "b", 2, 40, 24, 0));
}

static const struct {
    const char *name;
    void (*build)(remat_graph *, opcase *);
} kernels[] = {
    {"attention", b_attention}, {"layernorm", b_layernorm}, {"softmax", b_softmax},
    {"gelu", b_gelu},           {"gelu tanh", b_gelu_tanh}, {"embedding", b_embedding},
    {"permute", b_permute},     {"slice", b_slice},         {"add_broadcast", b_add_broadcast},
};

/* Plain attention in double: out (B, T, C) and, from dout, dqkv. */
static void attention_ref(const float *qkv, const double *dout, double *out, double *dqkv) {
    int64_t D = AC / AH;
    double scale = 1.0 / sqrt((double)D), *p = malloc(AT * sizeof *p), *dp = malloc(AT * sizeof *dp);
    for (int64_t i = 0; i < AB * AT * 3 * AC; i++) dqkv[i] = 0.0;
    for (int64_t b = 0; b < AB; b++)
        for (int64_t h = 0; h < AH; h++)
            for (int64_t i = 0; i < AT; i++) {
                const float *q = qkv + (b * AT + i) * 3 * AC + h * D;
                double m = -INFINITY, s = 0.0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *k = qkv + (b * AT + j) * 3 * AC + AC + h * D;
                    double v = 0.0;
                    for (int64_t e = 0; e < D; e++) v += (double)q[e] * k[e];
                    p[j] = v * scale;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j <= i; j++) s += (p[j] = exp(p[j] - m));
                for (int64_t j = 0; j <= i; j++) p[j] /= s;
                const double *go = dout + (b * AT + i) * AC + h * D;
                double dsum = 0.0;
                for (int64_t e = 0; e < D; e++) {
                    double o = 0.0;
                    for (int64_t j = 0; j <= i; j++) o += p[j] * qkv[(b * AT + j) * 3 * AC + 2 * AC + h * D + e];
                    out[(b * AT + i) * AC + h * D + e] = o;
                }
                for (int64_t j = 0; j <= i; j++) {
                    const float *v = qkv + (b * AT + j) * 3 * AC + 2 * AC + h * D;
                    double *dv = dqkv + (b * AT + j) * 3 * AC + 2 * AC + h * D;
                    dp[j] = 0.0;
                    for (int64_t e = 0; e < D; e++) dp[j] += go[e] * v[e], dv[e] += p[j] * go[e];
                    dsum += p[j] * dp[j];
                }
                for (int64_t j = 0; j <= i; j++) {
                    double ds = p[j] * (dp[j] - dsum) * scale;
                    const float *k = qkv + (b * AT + j) * 3 * AC + AC + h * D;
                    double *dq = dqkv + (b * AT + i) * 3 * AC + h * D, *dk = dqkv + (b * AT + j) * 3 * AC + AC + h * D;
                    for (int64_t e = 0; e < D; e++) dq[e] += ds * k[e], dk[e] += ds * q[e];
                }
            }
    free(p), free(dp);
}

/* Plain layernorm in double: out, and dx, dw, db from dout. */
static void layernorm_ref(const float *x, const float *w, const float *b, const double *dout, double *out, double *dx,
                          double *dw, double *db) {
    for (int64_t c = 0; c < LC; c++) dw[c] = db[c] = 0.0;
    for (int64_t r = 0; r < LR; r++) {
        const float *xr = x + r * LC;
        double mu = 0.0, var = 0.0;
        for (int64_t c = 0; c < LC; c++) mu += xr[c];
        mu /= LC;
        for (int64_t c = 0; c < LC; c++) var += (xr[c] - mu) * (xr[c] - mu);
        double rs = 1.0 / sqrt(var / LC + 1e-5), sg = 0.0, sgx = 0.0;
        for (int64_t c = 0; c < LC; c++) {
            double xh = (xr[c] - mu) * rs, gr = dout[r * LC + c];
            out[r * LC + c] = xh * w[c] + b[c];
            dw[c] += gr * xh, db[c] += gr;
            sg += gr * w[c], sgx += gr * w[c] * xh;
        }
        for (int64_t c = 0; c < LC; c++) {
            double xh = (xr[c] - mu) * rs;
            dx[r * LC + c] = rs * (dout[r * LC + c] * w[c] - sg / LC - xh * sgx / LC);
        }
    }
}

/* max |a - b| <= tol * max |b| */
static void close_to(const char *what, const float *a, const double *b, int64_t n, double tol) {
    double S = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) S = fmax(S, fabs(b[i])), worst = fmax(worst, fabs(a[i] - b[i]));
    CHECK_MSG(S > 0.0 && worst <= tol * S, "%s: max error %.3g against the reference (scale %.3g)", what, worst, S);
}

/* The MSE gradient the op's output received, from the target of run_op. */
static double *mse_dout(const float *out, int64_t n) {
    double *d = malloc((size_t)n * sizeof *d);
    rng = 99;
    for (int64_t i = 0; i < n; i++) d[i] = 2.0 * ((double)out[i] - frand()) / (double)n;
    return d;
}

static void kernels_check(void) {
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        opresult r1, r;
        run_op(kernels[k].build, 1, &r1);
        CHECK_MSG(r1.nout >= 4096, "%s: %lld output elements run on one thread", kernels[k].name, (long long)r1.nout);
        for (int nth = 2; nth <= 3; nth++) {
            run_op(kernels[k].build, nth, &r);
            CHECK_MSG(r.nout == r1.nout && memcmp(r.out, r1.out, (size_t)r.nout * 4) == 0,
                      "%s: output with %d threads differs from 1 thread", kernels[k].name, nth);
            CHECK(r.n == r1.n);
            for (int i = 0; i < r.n && i < r1.n; i++)
                CHECK_MSG(memcmp(r.grads[i], r1.grads[i], (size_t)r.numel[i] * 4) == 0,
                          "%s: gradient %d with %d threads differs from 1 thread", kernels[k].name, i, nth);
            free_opresult(&r);
        }
        if (strcmp(kernels[k].name, "attention") == 0) {
            int64_t no = AB * AT * AC, ni = 3 * no;
            double *dout = mse_dout(r1.out, no), *out = malloc(no * sizeof *out), *dq = malloc(ni * sizeof *dq);
            attention_ref(r1.params[0], dout, out, dq);
            close_to("attention output", r1.out, out, no, 1e-5);
            close_to("attention dqkv", r1.grads[0], dq, ni, 1e-5);
            free(dout), free(out), free(dq);
        }
        if (strcmp(kernels[k].name, "layernorm") == 0) {
            int64_t n = LR * LC;
            double *dout = mse_dout(r1.out, n), *out = malloc(n * sizeof *out), *dx = malloc(n * sizeof *dx);
            double dw[LC], db[LC];
            layernorm_ref(r1.params[0], r1.params[1], r1.params[2], dout, out, dx, dw, db);
            close_to("layernorm output", r1.out, out, n, 1e-5);
            close_to("layernorm dx", r1.grads[0], dx, n, 1e-5);
            close_to("layernorm dweight", r1.grads[1], dw, LC, 1e-5);
            close_to("layernorm dbias", r1.grads[2], db, LC, 1e-5);
            free(dout), free(out), free(dx);
        }
        printf("kernel %-13s: 1, 2 and 3 threads bitwise equal (%lld outputs)\n", kernels[k].name, (long long)r1.nout);
        free_opresult(&r1);
    }
}

/* ----------------------------------------------------------- 4. errors */

typedef remat_node (*bad_fn)(remat_graph *g);

static remat_node in(remat_graph *g, const char *name, remat_dtype t, int nd, int64_t a, int64_t b, int64_t c) {
    int64_t d[3] = {a, b, c};
    return remat_input(g, name, t, nd, d);
}
static remat_node bad_ln(remat_graph *g) {
    return remat_layernorm_op(g, in(g, "x", REMAT_F32, 3, 2, 3, 5), in(g, "w", REMAT_F32, 1, 4, 0, 0),
                              in(g, "b", REMAT_F32, 1, 5, 0, 0), 1e-5f);
}
static remat_node bad_gelu(remat_graph *g) { return remat_gelu(g, in(g, "x", REMAT_I32, 2, 7, 3, 0), 0); }
static remat_node bad_emb(remat_graph *g) {
    return remat_embedding_op(g, in(g, "ids", REMAT_F32, 2, 2, 9, 0), in(g, "w", REMAT_F32, 2, 10, 4, 0));
}
static remat_node bad_emb_w(remat_graph *g) {
    return remat_embedding_op(g, in(g, "ids", REMAT_I32, 2, 2, 9, 0), in(g, "w", REMAT_F32, 3, 10, 4, 2));
}
static remat_node bad_softmax(remat_graph *g) { return remat_softmax(g, in(g, "x", REMAT_I32, 2, 6, 11, 0)); }
static remat_node bad_attn_3c(remat_graph *g) { return remat_attention(g, in(g, "x", REMAT_F32, 3, 2, 4, 17), 1); }
static remat_node bad_attn_heads(remat_graph *g) { return remat_attention(g, in(g, "x", REMAT_F32, 3, 2, 4, 18), 4); }
static remat_node bad_permute(remat_graph *g) {
    int perm[3] = {0, 0, 1};
    return remat_permute(g, in(g, "x", REMAT_F32, 3, 2, 3, 4), 3, perm);
}
static remat_node bad_transpose(remat_graph *g) { return remat_transpose(g, in(g, "x", REMAT_F32, 2, 2, 7, 0), 0, 2); }
static remat_node bad_slice(remat_graph *g) { return remat_slice(g, in(g, "x", REMAT_F32, 3, 3, 5, 2), 1, 3, 3); }
static remat_node bad_addb(remat_graph *g) {
    return remat_add_broadcast(g, in(g, "x", REMAT_F32, 3, 2, 3, 4), in(g, "b", REMAT_F32, 2, 4, 3, 0));
}

static void errors(void) {
    static const struct {
        bad_fn fn;
        const char *op, *s1, *s2;
    } cases[] = {
        {bad_ln, "layernorm", "(2, 3, 5)", "(4)"},
        {bad_gelu, "gelu", "(7, 3)", "float32"},
        {bad_emb, "embedding", "(2, 9)", "int32"},
        {bad_emb_w, "embedding", "(10, 4, 2)", "(num, dim)"},
        {bad_softmax, "softmax", "(6, 11)", "float32"},
        {bad_attn_3c, "attention", "(2, 4, 17)", "3C"},
        {bad_attn_heads, "attention", "(2, 4, 18)", "4 heads"},
        {bad_permute, "permute", "(2, 3, 4)", "(0, 0, 1)"},
        {bad_transpose, "permute", "(2, 7)", "permutation"},
        {bad_slice, "slice", "(3, 5, 2)", "[3, 6)"},
        {bad_addb, "add_broadcast", "(2, 3, 4)", "(4, 3)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        remat_graph *g;
        CHECK_OK(remat_graph_create(&g));
        remat_node n = cases[i].fn(g);
        const char *e = remat_graph_error(g);
        CHECK_MSG(n == REMAT_NONE && remat_graph_status(g) != REMAT_OK && has(e, cases[i].op) && has(e, cases[i].s1) &&
                      has(e, cases[i].s2),
                  "%s error case %zu: message '%s'", cases[i].op, i, e);
        remat_graph_destroy(g);
    }

    /* An out-of-range id: NaN loss, no gradient from it, nothing else touched. */
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t idd[1] = {4}, td[2] = {4, 3};
    remat_node ids = remat_input(g, "ids", REMAT_I32, 1, idd);
    remat_node e = remat_embedding(g, "emb", ids, 5, 3);
    remat_node t = remat_input(g, "t", REMAT_F32, 2, td);
    remat_node loss = remat_mse(g, e, t);
    CHECK_OK(remat_graph_status(g));
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, loss, NULL));
    if (s) {
        int32_t idv[4] = {1, 5, -1, 4};
        float tv[12] = {0};
        remat_session_bind(s, ids, idv);
        remat_session_bind(s, t, tv);
        float l = 0.0f;
        CHECK_OK(remat_session_step(s, &l));
        CHECK_MSG(isnan(l), "an out-of-range id gave loss %g, not NaN", (double)l);
        remat_param_info p;
        CHECK_OK(remat_session_param(s, remat_session_find_param(s, "emb.weight"), &p));
        int rows_touched = 0;
        for (int r = 0; r < 5; r++) {
            int nz = 0;
            for (int j = 0; j < 3; j++) nz |= p.grad[r * 3 + j] != 0.0f;
            rows_touched += nz;
        }
        /* rows 1 and 4 (the good ids) get gradients; rows 0, 2, 3 and the bad ids nothing */
        CHECK(p.grad[0] == 0.0f && p.grad[6] == 0.0f && p.grad[9] == 0.0f && rows_touched == 2);
        remat_session_destroy(s);
    }
    remat_graph_destroy(g);

    /* gpt2 sizes */
    remat_model_opts mo;
    remat_model m;
    tiny_opts(&mo, 0.0f);
    mo.heads = 5;
    CHECK_OK(remat_graph_create(&g));
    CHECK(remat_model_build(g, &mo, &m) == REMAT_INVALID && has(remat_last_error(), "heads 5") &&
          has(remat_last_error(), "embd 24"));
    remat_graph_destroy(g);
    /* gpt2-small's preset sizes, and its graph (no session: 124M parameters) */
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, "gpt2-small"));
    CHECK(mo.layers == 12 && mo.embd == 768 && mo.heads == 12 && mo.context == 1024 && mo.vocab == 50257);
    mo.batch = 1, mo.context = 8; /* ignored: gpt2-small forces its sizes */
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    int64_t d[2];
    CHECK(remat_node_shape(g, m.logits, d) == 2 && d[0] == 1024 && d[1] == 50257);
    int64_t nparam = 0;
    for (remat_node n = 0; n < remat_graph_node_count(g); n++)
        if (strcmp(remat_node_op(g, n), "param") == 0) nparam += numel_of(g, n);
    CHECK_MSG(nparam == 124439808, "gpt2-small has %lld parameters", (long long)nparam);
    remat_graph_destroy(g);
}

int main(void) {
    against_torch();
    invariance();
    kernels_check();
    errors();
    return check_exit("test_gpt2");
}
