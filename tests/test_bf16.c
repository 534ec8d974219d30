/* test_bf16.c: the bf16 precision policy (remat_precision).
 *
 * - Rounding: remat__bf16_of against a reference written another way (the
 *   nearest of the two bf16 neighbours, compared in double; ties to the
 *   even one), on special values and 2^20 random bit patterns; widening
 *   is exact.
 * - The op table: every op with kernels has a rule; the dtypes the rules
 *   give on cnn (convolutions and what follows them bf16, the loss
 *   float32) and gpt2 (the residual stream float32, as a float32 plus a
 *   bf16 is; products bf16).
 * - Dropout keeps the same elements in bf16 as in fp32 (its bf16 run in
 *   slices: REMAT__SHIM_SLICE), and a fetched bf16 value comes back as
 *   float32.
 * - Promises: on cnn, resnet18 and gpt2 (tiny), in bf16, all, sqrt and
 *   optimal at 3 budgets between its floor and what all holds give the
 *   same losses, gradients, BatchNorm statistics and weights bit for bit
 *   over 4 SGD steps, and at every step the predicted peak of every
 *   category equals the measured one.
 * - Planning for a CUDA device that is not here (plan_only, as `remat plan
 *   --device cuda --precision bf16` on a machine without one), the native
 *   CUDA bf16 kernels' workspaces (linear's bf16 products, none for the
 *   elementwise ops) replace the float32 views': the predicted workspace
 *   and total peaks fall below those of the same plan with every CUDA
 *   node on views (REMAT_CUDA_BF16=views). Skipped without CUDA in the
 *   build.
 * - What it buys: bf16's activations are at most 70% of fp32's (store-all;
 *   what stays float32 is the values the rules keep there: a residual
 *   stream, statistics and attention's probabilities in aux), and its first
 *   loss is fp32's within 2%.
 * - Against PyTorch's CPU autocast (scripts/gen_fixtures_bf16.py, from the
 *   same weights and batch): the loss within 1%, and every parameter's
 *   gradient within 3% of the tensor's largest magnitude of autocast's,
 *   or no farther from it than float32 PyTorch is (which can be far: a
 *   gradient that is a cancelling sum is another number in bf16). gpt2's
 *   attention is one op here (F.scaled_dot_product_attention's semantics:
 *   float32 inside, from bf16 q, k and v), where the reference rounds the
 *   scores and the probabilities to bf16 in between, so its gradients sit
 *   about as far from the reference as float32's do.
 */
#include "../src/core/bf16.h"
#include "../src/ops/dnnl.h"
#include "../src/plan/schedule.h"
#include "../src/train/safetensors.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 4

/* ------------------------------------------------------------ rounding */

static double bf16_value(uint16_t b) {
    int sign = b >> 15, e = (b >> 7) & 0xff, m = b & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134); /* e == 255: 2^128 and above */
    return sign ? -v : v;
}

/* The nearest bf16 of a finite f, found by comparing its two neighbours. */
static uint16_t reference(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    if ((u & 0xffffu) == 0) return lo;
    double x = f, dl = fabs(x - bf16_value(lo)), dh = fabs(bf16_value(hi) - x);
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

static void rounding(void) {
    static const struct {
        uint32_t f;
        uint16_t b;
    } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x3f808000u, 0x3f80}, /* a tie to the even below */
        {0x3f818000u, 0x3f82}, /* a tie to the even above */
        {0x3f808001u, 0x3f81}, /* just above a tie */
        {0x80000000u, 0x8000}, /* -0 */
        {0x00000001u, 0x0000}, /* the smallest subnormal */
        {0x7f800000u, 0x7f80}, /* inf */
        {0xff800000u, 0xff80}, /* -inf */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds past the largest bf16 */
        {0x7f7f7fffu, 0x7f7f}, /* below the midpoint: the largest bf16 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f;
        memcpy(&f, &cases[i].f, sizeof f);
        CHECK_MSG(remat__bf16_of(f) == cases[i].b, "bf16 of 0x%08x: 0x%04x, expected 0x%04x", cases[i].f,
                  remat__bf16_of(f), cases[i].b);
    }
    float nan = NAN, neg = -NAN;
    CHECK(isnan(remat__f32_of(remat__bf16_of(nan))) && isnan(remat__f32_of(remat__bf16_of(neg))));
    CHECK((remat__bf16_of(neg) & 0x8000) && !(remat__bf16_of(nan) & 0x8000));
    uint32_t x = 12345u;
    int bad = 0;
    for (int i = 0; i < (1 << 20); i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        float f;
        memcpy(&f, &x, sizeof f);
        if (!isfinite(f)) continue;
        uint16_t b = remat__bf16_of(f);
        if (b != reference(f) && bad++ < 3)
            CHECK_MSG(0, "bf16 of 0x%08x: 0x%04x, reference 0x%04x", x, b, reference(f));
        if ((b & 0x7f80) != 0x7f80) CHECK(bf16_value(b) == (double)remat__f32_of(b)); /* widening is exact */
    }
    CHECK_MSG(bad == 0, "%d of 2^20 random floats round differently from the reference", bad);
    printf("rounding: special values and 2^20 random floats as the reference\n");
}

/* --------------------------------------------------------------- rules */

static remat_status build(const char *name, remat_graph *g, remat_model *m) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    remat_status st = remat_model_opts_for(&mo, name);
    if (st != REMAT_OK) return st;
    mo.batch = 4;
    if (strstr(name, "resnet")) mo.height = 16, mo.width = 16, mo.classes = 10, mo.base_channels = 4;
    if (strcmp(name, "gpt2") == 0) mo.layers = 2, mo.embd = 16, mo.heads = 2, mo.context = 8, mo.vocab = 32;
    return remat_model_build(g, &mo, m);
}

static remat_session *session(const remat_graph *g, remat_node loss, remat_precision p, remat_strategy st,
                              size_t budget) {
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2;
    so.seed = 3;
    so.precision = p;
    so.strategy = st;
    so.budget = budget;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, loss, &so));
    return s;
}

static void rules(void) {
    for (int op = 0; op < REMAT__N_OPS; op++)
        if (remat__ops[op]->forward)
            CHECK_MSG(remat__ops[op]->autocast != REMAT__AC_NONE, "op '%s' has no bf16 rule", remat__ops[op]->name);
    const char *models[] = {"cnn", "gpt2"};
    for (int k = 0; k < 2; k++) {
        remat_graph *g;
        remat_model m;
        CHECK_OK(remat_graph_create(&g));
        CHECK_OK(build(models[k], g, &m));
        remat_session *s = session(g, m.loss, REMAT_PRECISION_BF16, REMAT_STRATEGY_ALL, 0);
        int seen_low = 0, seen_f32_add = 0;
        for (int32_t u = 0; s && u < g->n; u++) {
            const remat__node *n = &g->nodes[u];
            if (n->leaf != REMAT__LEAF_NONE) continue;
            remat_dtype d = (remat_dtype)remat_session_value_dtype(s, u);
            int rule = remat__ops[n->op]->autocast;
            if (rule == REMAT__AC_LOW) {
                CHECK(d == REMAT_BF16);
                seen_low++;
            }
            if (rule == REMAT__AC_FP32) CHECK_MSG(d == REMAT_F32, "%s: a loss stored as %d", models[k], (int)d);
            if (n->op == REMAT__OP_ADD && k == 1) seen_f32_add += d == REMAT_F32; /* the residual stream */
            if (n->op == REMAT__OP_RELU && k == 0) CHECK(d == REMAT_BF16);        /* after a bf16 convolution */
        }
        CHECK(seen_low > 0 && (k == 0 || seen_f32_add > 0));
        printf("rules: %s: %d products in bf16%s\n", models[k], seen_low, k ? ", the residual adds in float32" : "");
        /* which run on bf16 kernels (the rest on float32 views) */
        remat__prog p;
        int native = 0, kinds = 0; /* convolutions and linear layers: oneDNN's bf16 products */
        CHECK_OK(remat__prog_init(&p, g, 2, REMAT_DEVICE_CPU, NULL));
        CHECK_OK(remat__prog_set_precision(&p, REMAT_PRECISION_BF16));
        for (int32_t u = 0; p.native && u < g->n; u++) {
            int op = g->nodes[u].op, product = op == REMAT__OP_CONV2D || op == REMAT__OP_LINEAR;
            kinds += g->nodes[u].leaf == REMAT__LEAF_NONE && product;
            native += product && p.native[u];
            if (g->nodes[u].leaf == REMAT__LEAF_NONE && op == REMAT__OP_CROSS_ENTROPY) /* bf16 logits, row by row */
                CHECK_MSG(p.native[u], "%s: the loss reads its bf16 logits through a float32 view", models[k]);
        }
        remat__prog_free(&p);
        char isa[128];
        const char *mode = getenv("REMAT_PRODUCTS");
        int forced = mode && !strcmp(mode, "dnnl") && !getenv("DNNL_MAX_CPU_ISA") &&
                     strcmp(remat__dnnl_describe(isa, sizeof isa), "oneDNN off");
        printf("rules: %s: %d of %d convolutions and linear layers on bf16 kernels (%s)\n", models[k], native, kinds,
               isa);
        if (forced)
            CHECK_MSG(native == kinds,
                      "%s: REMAT_PRODUCTS=dnnl, yet %d of %d convolutions and linear layers on bf16 "
                      "kernels",
                      models[k], native, kinds);
        remat_session_destroy(s);
        remat_graph_destroy(g);
    }
}

/* Runs node n's forward or backward on one thread over units [u0, u0+c)
 * of its tensors (elements, or planes with planewise), as the bf16 views
 * run a block: a node and tensors of that block's shapes. */
static void run_block(const remat_graph *g, const remat__node *n, int planewise, int64_t u0, int64_t c, int64_t units,
                      float **in, float *out, const float *dout, float **din, int backward) {
    remat__node fake = *n;
    remat__shape sh[REMAT__MAX_IN];
    remat__tensor ti[REMAT__MAX_IN], to;
    int64_t per_out = remat__numel(&n->shape) / units;
    fake.shape = n->shape;
    if (planewise) fake.shape.d[0] = c, fake.shape.d[1] = 1;
    else fake.shape = (remat__shape){.ndim = 1, .d = {c}};
    remat__kctx k = {.graph = g,
                     .node = &fake,
                     .train = 1,
                     .first = 1,
                     .seed = 7,
                     .step = 1,
                     .node_id = 1,
                     .elem0 = u0 * per_out,
                     .out = &to,
                     .dout = backward ? dout + u0 * per_out : NULL};
    for (int i = 0; i < n->n_in; i++) {
        const remat__shape *full = &g->nodes[n->in[i]].shape;
        int64_t per = remat__numel(full) / units;
        sh[i] = *full;
        if (planewise) sh[i].d[0] = c, sh[i].d[1] = 1;
        else sh[i] = (remat__shape){.ndim = 1, .d = {c}};
        ti[i] = (remat__tensor){in[i] + u0 * per, &sh[i]};
        k.in[i] = &ti[i];
        k.din[i] = backward ? din[i] + u0 * per : NULL;
    }
    to = (remat__tensor){out + u0 * per_out, &fake.shape};
    unsigned char ws[1]; /* these ops take no workspace */
    k.ws = ws;
    (backward ? remat__ops[n->op]->backward : remat__ops[n->op]->forward)(&k, 0, 1);
}

/* What REMAT__OP_ELEMENTWISE and REMAT__OP_PLANEWISE promise, which the
 * bf16 views rely on: the op run a block of units at a time (blocks of 3
 * elements or 2 planes) gives the bits it gives whole, forward and
 * backward (gradients added into values already there). */
static void block_claims(void) {
    for (int kind = 0; kind < 7; kind++) {
        remat_graph *g;
        CHECK_OK(remat_graph_create(&g));
        int64_t xd[4] = {2, 3, 9, 7};
        remat_node x = remat_input(g, "x", REMAT_F32, 4, xd), x2 = remat_input(g, "x2", REMAT_F32, 4, xd), y;
        switch (kind) {
        case 0: y = remat_maxpool2d(g, x, 3, 2, 1); break;
        case 1: y = remat_avgpool2d(g, x, 2, 2, 0); break;
        case 2: y = remat_global_avgpool(g, x); break;
        case 3: y = remat_relu(g, x); break;
        case 4: y = remat_gelu(g, x, 1); break;
        case 5: y = remat_add(g, x, x2); break;
        default: y = remat_dropout(g, x, 0.3f); break;
        }
        CHECK_OK(remat_graph_status(g));
        const remat__node *n = &g->nodes[y];
        int planewise = (remat__ops[n->op]->flags & REMAT__OP_PLANEWISE) != 0;
        CHECK_MSG(planewise || (remat__ops[n->op]->flags & REMAT__OP_ELEMENTWISE), "%s: neither flag",
                  remat__ops[n->op]->name);
        int64_t units = planewise ? 6 : remat__numel(&n->shape), step = planewise ? 2 : 3, ny = remat__numel(&n->shape);
        int64_t nx = remat__numel(&g->nodes[x].shape);
        float *in[2], *din[2][2], *out[2], *dout = malloc((size_t)ny * 4);
        for (int i = 0; i < 2; i++) {
            in[i] = malloc((size_t)nx * 4);
            for (int64_t e = 0; e < nx; e++) in[i][e] = (float)((e * 7 + i * 3) % 23) / 5.0f - 2.0f;
        }
        for (int64_t e = 0; e < ny; e++) dout[e] = (float)(e % 5) - 1.5f;
        for (int r = 0; r < 2; r++) {
            out[r] = malloc((size_t)ny * 4);
            for (int i = 0; i < 2; i++) {
                din[r][i] = malloc((size_t)nx * 4);
                for (int64_t e = 0; e < nx; e++) din[r][i][e] = 0.25f * (float)(e % 3);
            }
            for (int b = 0; b < 2; b++)
                for (int64_t u0 = 0; u0 < units; u0 += r ? step : units) {
                    int64_t c = r ? (units - u0 < step ? units - u0 : step) : units;
                    run_block(g, n, planewise, u0, c, units, in, out[r], dout, din[r], b);
                }
        }
        int same = !memcmp(out[0], out[1], (size_t)ny * 4);
        for (int i = 0; i < n->n_in; i++) same &= !memcmp(din[0][i], din[1][i], (size_t)nx * 4);
        CHECK_MSG(same, "%s: run in blocks of %lld %s it differs from whole", remat__ops[n->op]->name, (long long)step,
                  planewise ? "planes" : "elements");
        for (int r = 0; r < 2; r++) free(out[r]), free(din[r][0]), free(din[r][1]);
        free(in[0]), free(in[1]), free(dout);
        remat_graph_destroy(g);
    }
    printf("blocks: the poolings by planes, relu, gelu, add and dropout by elements, the bits they give whole\n");
}

static void ce_run(const remat__kctx *k, int backward) {
    (backward ? remat__ops[k->node->op]->backward : remat__ops[k->node->op]->forward)(k, 0, 1);
}

/* cross_entropy on bf16 logits, read a row at a time (kctx.dt), gives the
 * bits the executor's float32 view of the whole tensor gives: the loss,
 * and the gradient rounded into a bf16 gradient that already holds
 * values; a label out of range included. */
static void ce_rows(void) {
    enum { N = 5, C = 37 };
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t zd[2] = {N, C}, yd[1] = {N};
    remat_node z = remat_input(g, "z", REMAT_F32, 2, zd), y = remat_input(g, "y", REMAT_I32, 1, yd);
    remat_node l = remat_cross_entropy(g, z, y);
    CHECK_OK(remat_graph_status(g));
    const remat__node *n = &g->nodes[l];
    uint8_t dt[8];
    memset(dt, REMAT_F32, sizeof dt);
    dt[z] = REMAT_BF16, dt[y] = REMAT_I32;
    size_t fb, bb;
    CHECK(remat__ops[n->op]->bf16_ws(g, n, dt, 1, &fb, &bb));
    uint16_t zb[N * C], gb[N * C], gv[N * C];
    float zf[N * C], gf[N * C], loss[2], dloss = 1.5f;
    int32_t lab[N] = {3, 0, 36, 12, -1}; /* -1: out of range, a NaN loss */
    for (int i = 0; i < N * C; i++) {
        zb[i] = remat__bf16_of((float)((i * 37 % 101) - 50) / 9.0f), zf[i] = remat__f32_of(zb[i]);
        gb[i] = gv[i] = remat__bf16_of((float)(i % 7) / 3.0f - 1.0f);
    }
    unsigned char *ws = malloc(fb > bb ? fb : bb);
    remat__tensor ti[2] = {{zb, &g->nodes[z].shape}, {lab, &g->nodes[y].shape}}, to = {&loss[0], &n->shape};
    remat__kctx k = {.graph = g,
                     .node = n,
                     .in = {&ti[0], &ti[1]},
                     .out = &to,
                     .ws = ws,
                     .dt = dt,
                     .train = 1,
                     .dout = &dloss,
                     .din = {(float *)gb, NULL}};
    ce_run(&k, 0), ce_run(&k, 1);
    ti[0].data = zf, to.data = &loss[1], k.dt = NULL, k.din[0] = gf; /* the view's way */
    memset(gf, 0, sizeof gf);
    ce_run(&k, 0), ce_run(&k, 1);
    remat__convert_range(gv, gf, 0, N * C, REMAT__CVT_ACC_BF16);
    CHECK_MSG(!memcmp(&loss[0], &loss[1], 4) && !memcmp(gb, gv, sizeof gb),
              "cross_entropy: bf16 logits row by row differ from the float32 view (loss %.9g against %.9g)", loss[0],
              loss[1]);
    printf("cross_entropy: bf16 logits read row by row give the float32 view's bits (loss %.6f, %d gradients)\n",
           loss[0], N * C);
    free(ws);
    remat_graph_destroy(g);
}

/* layernorm on a bf16 x (kctx.dt: x, y, dy and dx in place) gives the
 * bits the float32 views give: y, the statistics, dx added into a bf16
 * gradient that already holds values, and the float32 weight and bias
 * gradients; on 1 and 3 threads (rows and columns split). */
static void ln_native(void) {
    enum { R = 7, C = 19 };
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[2] = {R, C};
    remat_node x = remat_input(g, "x", REMAT_F32, 2, xd), l = remat_layernorm(g, "ln", x);
    CHECK_OK(remat_graph_status(g));
    const remat__node *n = &g->nodes[l];
    uint8_t dt[8];
    memset(dt, REMAT_F32, sizeof dt);
    dt[x] = dt[l] = REMAT_BF16;
    size_t fb = 1, bb = 0;
    CHECK(remat__ops[n->op]->bf16_ws(g, n, dt, 3, &fb, &bb) && fb == 0 && bb == 2 * C * sizeof(double));
    uint16_t xb[R * C], yb[R * C], dyb[R * C], dxb[R * C], dxv[R * C], yv[R * C];
    float xf[R * C], yf[R * C], dyf[R * C], dxf[R * C], w[C], b[C], dw[2][C], db[2][C], aux[2][2 * R];
    for (int i = 0; i < R * C; i++) {
        xb[i] = remat__bf16_of((float)((i * 37 % 101) - 50) / 9.0f), xf[i] = remat__f32_of(xb[i]);
        dyb[i] = remat__bf16_of((float)(i % 7) / 3.0f - 1.0f), dyf[i] = remat__f32_of(dyb[i]);
        dxb[i] = dxv[i] = remat__bf16_of((float)(i % 5) / 4.0f - 0.5f);
    }
    for (int c = 0; c < C; c++) w[c] = 0.5f + (float)c / 8.0f, b[c] = (float)c / 16.0f - 0.5f;
    for (int nth = 1; nth <= 3; nth += 2) {
        for (int c = 0; c < C; c++) dw[0][c] = dw[1][c] = 0.25f, db[0][c] = db[1][c] = -0.125f;
        double ws[2 * C];
        remat__tensor ti[3] = {
            {xb, &g->nodes[x].shape}, {w, &g->nodes[n->in[1]].shape}, {b, &g->nodes[n->in[2]].shape}};
        remat__tensor to = {yb, &n->shape};
        remat__kctx k = {.graph = g,
                         .node = n,
                         .in = {&ti[0], &ti[1], &ti[2]},
                         .out = &to,
                         .aux = aux[0],
                         .ws = ws,
                         .dt = dt,
                         .train = 1,
                         .dout = (float *)dyb,
                         .din = {(float *)dxb, dw[0], db[0]}};
        for (int ith = 0; ith < nth; ith++) remat__ops[n->op]->forward(&k, ith, nth);
        for (int ith = 0; ith < nth; ith++) remat__ops[n->op]->backward(&k, ith, nth);
        /* the views' way */
        ti[0].data = xf, to.data = yf, k.aux = aux[1], k.dt = NULL, k.dout = dyf, k.din[0] = dxf;
        k.din[1] = dw[1], k.din[2] = db[1];
        memset(dxf, 0, sizeof dxf);
        for (int ith = 0; ith < nth; ith++) remat__ops[n->op]->forward(&k, ith, nth);
        for (int ith = 0; ith < nth; ith++) remat__ops[n->op]->backward(&k, ith, nth);
        remat__convert_range(yv, yf, 0, R * C, REMAT__CVT_DOWN);
        remat__convert_range(dxv, dxf, 0, R * C, REMAT__CVT_ACC_BF16);
        CHECK_MSG(!memcmp(yb, yv, sizeof yb) && !memcmp(aux[0], aux[1], sizeof aux[0]) &&
                      !memcmp(dxb, dxv, sizeof dxb) && !memcmp(dw[0], dw[1], sizeof dw[0]) &&
                      !memcmp(db[0], db[1], sizeof db[0]),
                  "layernorm on %d threads: bf16 in place differs from the float32 views", nth);
    }
    printf("layernorm: bf16 x, y, dy and dx in place give the float32 views' bits (%d x %d, 1 and 3 threads)\n", R, C);
    remat_graph_destroy(g);
}

/* batchnorm2d on a bf16 x, plane by plane (kctx.dt), gives the float32
 * views' bits: y, the statistics, the running statistics it commits, dx
 * added into a bf16 gradient that holds values, and the float32 weight
 * and bias gradients; in training (a first execution, then a
 * recomputation) and in eval, on 1 and 3 threads. */
static void bn_native(void) {
    enum { N = 3, C = 5, H = 4, W = 3, E = N * C * H * W };
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[4] = {N, C, H, W};
    remat_node x = remat_input(g, "x", REMAT_F32, 4, xd), b = remat_batchnorm2d(g, "bn", x);
    CHECK_OK(remat_graph_status(g));
    const remat__node *n = &g->nodes[b];
    uint8_t dt[16];
    memset(dt, REMAT_F32, sizeof dt);
    dt[x] = dt[b] = REMAT_BF16;
    size_t fb = 0, bb = 0;
    fb = bb = 1;
    CHECK(remat__ops[n->op]->bf16_ws(g, n, dt, 3, &fb, &bb) && fb == 0 && bb == 0); /* no workspace */
    uint16_t xb[E], yb[E], dyb[E], dxb[E], dxv[E], yv[E];
    float xf[E], yf[E], dyf[E], dxf[E], p[2][4][C], dp[2][2][C], aux[2][2 * C];
    for (int i = 0; i < E; i++) {
        xb[i] = remat__bf16_of((float)((i * 37 % 101) - 50) / 9.0f), xf[i] = remat__f32_of(xb[i]);
        dyb[i] = remat__bf16_of((float)(i % 7) / 3.0f - 1.0f), dyf[i] = remat__f32_of(dyb[i]);
        dxb[i] = dxv[i] = remat__bf16_of((float)(i % 5) / 4.0f - 0.5f);
    }
    int ok = 1;
    for (int mode = 0; mode < 3; mode++) /* training first, a recomputation, eval */
        for (int nth = 1; nth <= 3; nth += 2) {
            for (int v = 0; v < 2; v++)
                for (int c = 0; c < C; c++) {
                    p[v][0][c] = 0.5f + (float)c / 8.0f, p[v][1][c] = (float)c / 16.0f - 0.5f; /* gamma, beta */
                    p[v][2][c] = (float)c / 10.0f, p[v][3][c] = 1.0f + (float)c / 7.0f;        /* running stats */
                    dp[v][0][c] = 0.25f, dp[v][1][c] = -0.125f;
                }
            remat__tensor ti[5], to = {yb, &n->shape};
            for (int i = 0; i < 5; i++)
                ti[i] = (remat__tensor){i ? (void *)p[0][i - 1] : (void *)xb, &g->nodes[n->in[i]].shape};
            remat__kctx k = {.graph = g,
                             .node = n,
                             .in = {&ti[0], &ti[1], &ti[2], &ti[3], &ti[4]},
                             .out = &to,
                             .aux = aux[0],
                             .ws = NULL,
                             .dt = dt,
                             .train = mode < 2,
                             .first = mode == 0,
                             .dout = (float *)dyb,
                             .din = {(float *)dxb, dp[0][0], dp[0][1]}};
            if (mode == 1) memcpy(aux[0], aux[1], sizeof aux[0]); /* a recomputation reads the first's statistics */
            for (int ith = 0; ith < nth; ith++) remat__ops[n->op]->forward(&k, ith, nth);
            for (int ith = 0; ith < nth; ith++) remat__ops[n->op]->backward(&k, ith, nth);
            /* the views' way */
            for (int i = 1; i < 5; i++) ti[i].data = p[1][i - 1];
            ti[0].data = xf, to.data = yf, k.aux = aux[1], k.dt = NULL, k.dout = dyf, k.din[0] = dxf;
            k.din[1] = dp[1][0], k.din[2] = dp[1][1], k.ws = NULL;
            memset(dxf, 0, sizeof dxf);
            for (int ith = 0; ith < nth; ith++) remat__ops[n->op]->forward(&k, ith, nth);
            for (int ith = 0; ith < nth; ith++) remat__ops[n->op]->backward(&k, ith, nth);
            remat__convert_range(yv, yf, 0, E, REMAT__CVT_DOWN);
            remat__convert_range(dxv, dxf, 0, E, REMAT__CVT_ACC_BF16);
            int same = !memcmp(yb, yv, sizeof yb) && !memcmp(aux[0], aux[1], sizeof aux[0]) &&
                       !memcmp(dxb, dxv, sizeof dxb) && !memcmp(p[0], p[1], sizeof p[0]) &&
                       !memcmp(dp[0], dp[1], sizeof dp[0]);
            CHECK_MSG(same, "batchnorm2d (%s, %d threads): bf16 plane by plane differs from the float32 views",
                      mode == 0   ? "training"
                      : mode == 1 ? "recomputation"
                                  : "eval",
                      nth);
            ok &= same;
        }
    if (ok)
        printf("batchnorm2d: bf16 x, y, dy and dx plane by plane give the float32 views' bits (training, "
               "recomputation, eval; 1 and 3 threads)\n");
    remat_graph_destroy(g);
}

/* max |c - r| over n floats, and r's largest magnitude. */
static double dist(const float *c, const float *r, int64_t n, double *S) {
    double d = 0;
    *S = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)c[i] - r[i])), *S = fmax(*S, fabs((double)r[i]));
    return d;
}

/* Dropout on a bf16 value keeps and drops the elements fp32's does: the
 * mask is a function of (seed, step, node, element), not of the dtype. A
 * linear layer (bf16 under bf16) and gelu feed a dropout of 131072
 * elements, so that bf16 runs the two elementwise ops in two slices
 * (REMAT__SHIM_SLICE) where fp32 runs them whole: the same mask, values
 * and the layer's weight gradient within bf16's precision of fp32's, and
 * a fetched bf16 value comes back as float32. */
#define DROP_ROWS 64
#define DROP_COLS 2048
static void dropout_masks(void) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[2] = {DROP_ROWS, 32}, td[2] = {DROP_ROWS, DROP_COLS};
    remat_node x = remat_input(g, "x", REMAT_F32, 2, xd), t = remat_input(g, "t", REMAT_F32, 2, td);
    remat_node h = remat_gelu(g, remat_linear(g, "fc", x, DROP_COLS, 1), 1); /* never exactly 0 here */
    remat_node d = remat_dropout(g, h, 0.5f);
    remat_node loss = remat_mse(g, d, t);
    CHECK_OK(remat_graph_status(g));
    const int64_t n = DROP_ROWS * DROP_COLS, nw = DROP_COLS * 32;
    CHECK(n > 2 * REMAT__SHIM_SLICE - 1);
    float *xv = malloc(DROP_ROWS * 32 * sizeof *xv), *tv = calloc((size_t)n, sizeof *tv);
    float *out = malloc(2 * (size_t)n * sizeof *out), *gw = malloc(2 * (size_t)nw * sizeof *gw);
    float *hv = malloc(2 * (size_t)n * sizeof *hv); /* dropout's input: an element is dropped where it is not 0 */
    for (int i = 0; i < DROP_ROWS * 32; i++) xv[i] = (float)((i * 37) % 19) / 9.0f - 1.0f;
    for (int p = 0; p < 2; p++) {
        remat_session *s = session(g, loss, p ? REMAT_PRECISION_BF16 : REMAT_PRECISION_FP32, REMAT_STRATEGY_ALL, 0);
        if (!s) continue;
        remat_session_bind(s, x, xv);
        remat_session_bind(s, t, tv);
        float l;
        CHECK_OK(remat_session_forward(s, 1, &l, h, hv + p * n));
        CHECK_OK(remat_session_forward(s, 1, &l, d, out + p * n));
        CHECK_OK(remat_session_step(s, &l));
        remat_param_info pi;
        remat_session_param(s, remat_session_find_param(s, "fc.weight"), &pi);
        memcpy(gw + p * nw, pi.grad, (size_t)nw * sizeof *gw);
        remat_session_destroy(s);
    }
    int64_t kept = 0, differ = 0;
    double S, off = dist(out + n, out, n, &S), Sg, offg = dist(gw + nw, gw, nw, &Sg);
    for (int64_t i = 0; i < n; i++) {
        kept += out[i] != 0.0f;
        if (hv[i] != 0.0f && hv[n + i] != 0.0f) differ += (out[i] == 0.0f) != (out[n + i] == 0.0f);
    }
    CHECK_MSG(differ == 0 && kept > n / 3 && kept < 2 * n / 3,
              "dropout: %lld of %lld elements kept in fp32, %lld "
              "differ in bf16",
              (long long)kept, (long long)n, (long long)differ);
    CHECK_MSG(off <= 0.02 * S && offg <= 0.03 * Sg,
              "dropout: bf16's values %.3g from fp32's (largest %.3g), "
              "fc.weight's gradient %.3g (largest %.3g)",
              off, S, offg, Sg);
    printf("dropout: %lld of %lld elements kept in fp32, %lld kept or dropped otherwise in bf16 (in slices); values "
           "within %.2g, fc's gradient within %.2g of their largest magnitude\n",
           (long long)kept, (long long)n, (long long)differ, off / S, offg / Sg);
    free(xv), free(tv), free(out), free(gw), free(hv);
    remat_graph_destroy(g);
}

/* ------------------------------------------------------------ promises */

typedef struct {
    float loss[STEPS];
    int n;
    float **w, **gr; /* parameters and buffers after the steps; the first step's gradients */
    int64_t *numel;
    size_t act; /* the activations' measured peak */
} result;

static void result_free(result *r) {
    for (int i = 0; i < r->n; i++) free(r->w[i]), free(r->gr[i]);
    free(r->w), free(r->gr), free(r->numel);
    memset(r, 0, sizeof *r);
}

static void bind_batch(remat_session *s, const remat_graph *g, const remat_model *m, int step, float *x, int32_t *y,
                       int64_t nx, int64_t ny) {
    int tokens = remat_node_dtype(g, m->input) == REMAT_I32;
    for (int64_t i = 0; i < nx; i++) {
        if (tokens) ((int32_t *)x)[i] = (int32_t)((i * 7 + step * 3) % 10);
        else x[i] = (float)((i * 31 + step * 7) % 23) / 11.0f - 1.0f;
    }
    for (int64_t i = 0; i < ny; i++) y[i] = (int32_t)((i * 3 + step) % 10);
    remat_session_bind(s, m->input, x);
    remat_session_bind(s, m->labels, y);
}

static int64_t numel_of(const remat_graph *g, remat_node n) {
    int64_t d[4], k = 1;
    for (int i = 0, nd = remat_node_shape(g, n, d); i < nd; i++) k *= d[i];
    return k;
}

static void steps(const char *name, remat_precision p, remat_strategy st, size_t budget, result *r) {
    memset(r, 0, sizeof *r);
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(name, g, &m));
    remat_session *s = session(g, m.loss, p, st, budget);
    if (!s) {
        remat_graph_destroy(g);
        return;
    }
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 0.05f, oo.momentum = 0.9f;
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    int64_t nx = numel_of(g, m.input), ny = numel_of(g, m.labels);
    float *x = malloc((size_t)nx * sizeof *x);
    int32_t *y = malloc((size_t)ny * sizeof *y);
    r->n = remat_session_param_count(s);
    r->w = calloc((size_t)r->n, sizeof *r->w);
    r->gr = calloc((size_t)r->n, sizeof *r->gr);
    r->numel = calloc((size_t)r->n, sizeof *r->numel);
    for (int step = 0; step < STEPS; step++) {
        bind_batch(s, g, &m, step, x, y, nx, ny);
        remat_mem_stats pred, meas;
        CHECK_OK(remat_session_predict(s, &pred));
        CHECK_OK(remat_session_step(s, &r->loss[step]));
        remat_session_mem(s, &meas);
        for (int c = 0; c < REMAT_MEM_COUNT; c++)
            CHECK_MSG(pred.peak[c] == meas.peak[c], "%s %s/%s step %d %s: predicted %zu, measured %zu", name,
                      remat_precision_str(p), remat_strategy_str(st), step, remat_mem_str((remat_mem)c), pred.peak[c],
                      meas.peak[c]);
        r->act = meas.peak[REMAT_MEM_ACT];
        for (int i = 0; i < r->n && step == 0; i++) {
            remat_param_info pi;
            remat_session_param(s, i, &pi);
            r->numel[i] = pi.numel;
            if (!pi.grad) continue;
            r->gr[i] = malloc((size_t)pi.numel * sizeof(float));
            memcpy(r->gr[i], pi.grad, (size_t)pi.numel * sizeof(float));
        }
        CHECK_OK(remat_session_update(s));
    }
    for (int i = 0; i < r->n; i++) {
        remat_param_info pi;
        remat_session_param(s, i, &pi);
        r->w[i] = malloc((size_t)pi.numel * sizeof(float));
        memcpy(r->w[i], pi.data, (size_t)pi.numel * sizeof(float));
    }
    free(x), free(y);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

static void same(const char *name, const char *what, const result *a, const result *b) {
    CHECK_MSG(!memcmp(a->loss, b->loss, sizeof a->loss), "%s bf16 %s: losses differ (%.9g vs %.9g)", name, what,
              (double)a->loss[STEPS - 1], (double)b->loss[STEPS - 1]);
    CHECK(a->n == b->n && a->n > 0);
    for (int i = 0; i < a->n && i < b->n; i++) {
        size_t bytes = (size_t)a->numel[i] * sizeof(float);
        CHECK_MSG(!memcmp(a->w[i], b->w[i], bytes), "%s bf16 %s: parameter or buffer %d differs", name, what, i);
        if (a->gr[i] && b->gr[i])
            CHECK_MSG(!memcmp(a->gr[i], b->gr[i], bytes), "%s bf16 %s: gradient %d differs", name, what, i);
    }
}

/* The bf16 floor of optimal, and what all holds: the budgets between. */
static void budgets_of(const char *name, size_t out[3]) {
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(name, g, &m));
    remat_session *s = session(g, m.loss, REMAT_PRECISION_BF16, REMAT_STRATEGY_ALL, 0);
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.momentum = 0.9f;
    remat_plan_summary ps = {0};
    if (s) {
        CHECK_OK(remat_session_set_optimizer(s, &oo));
        CHECK_OK(remat_session_plan(s, &ps));
    }
    remat_session_destroy(s);
    size_t floor = 0;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 2, so.precision = REMAT_PRECISION_BF16, so.strategy = REMAT_STRATEGY_OPTIMAL;
    so.budget = 1, so.floor_out = &floor, so.optim = &oo;
    s = NULL;
    CHECK(remat_session_create(&s, g, m.loss, &so) == REMAT_BUDGET && floor > 0 && floor <= ps.held_bytes);
    for (int k = 0; k < 3; k++) out[k] = floor + (ps.held_bytes - floor) * (size_t)k / 3;
    remat_graph_destroy(g);
}

static void promises(const char *name) {
    result all, f32;
    steps(name, REMAT_PRECISION_BF16, REMAT_STRATEGY_ALL, 0, &all);
    steps(name, REMAT_PRECISION_FP32, REMAT_STRATEGY_ALL, 0, &f32);
    result r;
    steps(name, REMAT_PRECISION_BF16, REMAT_STRATEGY_SQRT, 0, &r);
    same(name, "sqrt", &all, &r);
    result_free(&r);
    size_t b[3];
    budgets_of(name, b);
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "optimal at %zu B", b[k]);
        steps(name, REMAT_PRECISION_BF16, REMAT_STRATEGY_OPTIMAL, b[k], &r);
        same(name, what, &all, &r);
        result_free(&r);
    }
    CHECK_MSG(all.act * 10 <= f32.act * 7, "%s: bf16 activations %zu B, fp32 %zu B", name, all.act, f32.act);
    double dl = fabs((double)all.loss[0] - f32.loss[0]) / fabs((double)f32.loss[0]);
    CHECK_MSG(dl < 0.02, "%s: bf16 loss %.6g, fp32 %.6g", name, (double)all.loss[0], (double)f32.loss[0]);
    printf("%-8s bf16: all, sqrt, optimal at %zu/%zu/%zu B bitwise equal over %d steps, predicted == measured; "
           "activations %zu B = %.2f of fp32's; first loss %.6g (fp32 %.6g)\n",
           name, b[0], b[1], b[2], STEPS, all.act, (double)all.act / (double)f32.act, (double)all.loss[0],
           (double)f32.loss[0]);
    result_free(&all);
    result_free(&f32);
}

/* --------------------------------------------------- against autocast */

/* Model options from a fixture's metadata: the keys it has. */
static void fixture_opts(const remat__st *w, const char *model, remat_model_opts *o) {
    remat_model_opts_default(o);
    CHECK_OK(remat_model_opts_for(o, model));
    o->dropout_scale = 0.0f;
    const struct {
        const char *key;
        int64_t *at;
    } keys[] = {{"batch", &o->batch}, {"channels", &o->channels}, {"height", &o->height},
                {"width", &o->width}, {"classes", &o->classes},   {"base_channels", &o->base_channels},
                {"depth", &o->depth}, {"layers", &o->layers},     {"embd", &o->embd},
                {"heads", &o->heads}, {"context", &o->context},   {"vocab", &o->vocab}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = remat__st_metadata(w, keys[i].key);
        if (v) *keys[i].at = strtoll(v, NULL, 10);
    }
}

static const float *tensor(const remat__st *f, const char *key, size_t bytes) {
    int i = remat__st_find(f, key);
    remat__st_tensor t;
    CHECK_MSG(i >= 0 && remat__st_get(f, i, &t) == REMAT_OK && t.bytes == bytes, "%s: no %s of %zu bytes",
              remat__st_path(f), key, bytes);
    return i >= 0 && remat__st_get(f, i, &t) == REMAT_OK && t.bytes == bytes ? t.data : NULL;
}

/* remat in bf16 from the fixture's weights and batch, against PyTorch's
 * autocast (scripts/gen_fixtures_bf16.py): the loss, and every
 * parameter's gradient, each within BF16_TOL of its largest magnitude or
 * no farther from autocast than float32 PyTorch is (f32dist). */
#define BF16_TOL 0.03
static void against_autocast(const char *model, const char *dir) {
    char path[512];
    remat__st *w = NULL, *b = NULL, *ac = NULL;
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    CHECK_OK(remat__st_open(&w, path));
    snprintf(path, sizeof path, "%s/batch.safetensors", dir);
    CHECK_OK(remat__st_open(&b, path));
    snprintf(path, sizeof path, "%s/autocast.safetensors", dir);
    CHECK_OK(remat__st_open(&ac, path));
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    remat_model_opts mo;
    if (!w || !b || !ac) goto out;
    fixture_opts(w, model, &mo);
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    s = session(g, m.loss, REMAT_PRECISION_BF16, REMAT_STRATEGY_ALL, 0);
    if (!s) goto out;
    snprintf(path, sizeof path, "%s/weights.safetensors", dir);
    CHECK_OK(remat_safetensors_load(s, path, 1));
    const float *x = tensor(b, "input", (size_t)numel_of(g, m.input) * 4);
    const float *t = tensor(b, "target", (size_t)numel_of(g, m.labels) * 4);
    if (!x || !t) goto out;
    remat_session_bind(s, m.input, x);
    remat_session_bind(s, m.labels, t);
    float loss = NAN;
    CHECK_OK(remat_session_step(s, &loss));
    double S = 0, worst = 0, worst32 = 0;
    const float *rl = tensor(ac, "loss", 4);
    double dl = rl ? dist(&loss, rl, 1, &S) : INFINITY;
    CHECK_MSG(dl <= 0.01 * S, "%s: bf16 loss %.6g, autocast %.6g", model, (double)loss, rl ? (double)rl[0] : NAN);
    int n = 0, nearer = 0;
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p;
        remat_session_param(s, i, &p);
        if (!p.trainable) continue;
        char key[300];
        snprintf(key, sizeof key, "grad.%s", p.name);
        const float *r = tensor(ac, key, (size_t)p.numel * 4);
        snprintf(key, sizeof key, "f32dist.grad.%s", p.name);
        int k = remat__st_find(ac, key);
        remat__st_tensor fd;
        if (!r || k < 0 || remat__st_get(ac, k, &fd) != REMAT_OK) continue;
        double d = dist(p.grad, r, p.numel, &S), d32 = ((const double *)fd.data)[0];
        CHECK_MSG(d <= BF16_TOL * S || d <= d32,
                  "%s: gradient of %s is %.3g from autocast's (largest %.3g); "
                  "float32 PyTorch is %.3g from it",
                  model, p.name, d, S, d32);
        n++, nearer += d <= d32;
        if (S > 0) worst = fmax(worst, d / S), worst32 = fmax(worst32, d32 / S);
    }
    CHECK(n > 0);
    printf("%-8s against PyTorch autocast: loss %.6g (autocast %.6g); %d gradients, up to %.3g of their largest "
           "magnitude off (float32 PyTorch: up to %.3g), %d of them nearer to autocast than float32 is\n",
           model, (double)loss, rl ? (double)rl[0] : NAN, n, worst, worst32, nearer);
out:
    remat_session_destroy(s);
    remat_graph_destroy(g);
    remat__st_close(w), remat__st_close(b), remat__st_close(ac);
}

/* The predicted peaks of a plan-only CUDA session in bf16, store-all:
 * REMAT_OK, or REMAT_UNSUPPORTED in a build without CUDA. */
static remat_status cuda_plan(const remat_graph *g, remat_node loss, const char *mode, remat_plan_summary *ps) {
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.plan_only = 1, so.device = REMAT_DEVICE_CUDA, so.precision = REMAT_PRECISION_BF16;
    so.strategy = REMAT_STRATEGY_ALL;
    if (mode) setenv("REMAT_CUDA_BF16", mode, 1);
    remat_session *s = NULL;
    remat_status st = remat_session_create(&s, g, loss, &so);
    unsetenv("REMAT_CUDA_BF16");
    if (st == REMAT_OK) st = remat_session_plan(s, ps);
    remat_session_destroy(s);
    return st;
}

static void cuda_plan_only(void) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[2] = {512, 256}, w1[2] = {1024, 256}, b1 = 1024, w2[2] = {1024, 1024}, w3[2] = {10, 1024}, b3 = 10,
            yd[2] = {512, 10};
    remat_node x = remat_input(g, "x", REMAT_F32, 2, xd);
    remat_node h = remat_linear_op(g, x, remat_param(g, "w1", 2, w1, REMAT_INIT_UNIFORM, 0.1f),
                                   remat_param(g, "b1", 1, &b1, REMAT_INIT_ZEROS, 0.0f));
    h = remat_dropout(g, remat_relu(g, h), 0.1f);
    remat_node h2 = remat_gelu(g,
                               remat_linear_op(g, h, remat_param(g, "w2", 2, w2, REMAT_INIT_UNIFORM, 0.1f),
                                               remat_param(g, "b2", 1, &b1, REMAT_INIT_ZEROS, 0.0f)),
                               1);
    remat_node y = remat_linear_op(g, remat_add(g, h2, h), remat_param(g, "w3", 2, w3, REMAT_INIT_UNIFORM, 0.1f),
                                   remat_param(g, "b3", 1, &b3, REMAT_INIT_ZEROS, 0.0f));
    remat_node loss = remat_mse(g, y, remat_input(g, "t", REMAT_F32, 2, yd));
    CHECK_MSG(remat_graph_status(g) == REMAT_OK, "%s", remat_graph_error(g));
    remat_plan_summary nat, views;
    remat_status st = cuda_plan(g, loss, NULL, &nat);
    if (st == REMAT_UNSUPPORTED) {
        printf("cuda plan-only bf16: skipped (%s)\n", remat_last_error());
        remat_graph_destroy(g);
        return;
    }
    CHECK_MSG(st == REMAT_OK, "plan-only CUDA session in bf16: %s", remat_last_error());
    CHECK_OK(cuda_plan(g, loss, "views", &views));
    size_t nw = nat.predicted.peak[REMAT_MEM_WORKSPACE], vw = views.predicted.peak[REMAT_MEM_WORKSPACE];
    size_t nt = nat.predicted.peak[REMAT_MEM_TOTAL], vt = views.predicted.peak[REMAT_MEM_TOTAL];
    CHECK_MSG(st != REMAT_OK || (nw < vw && nt < vt),
              "plan-only CUDA bf16: native kernels' workspace %zu B, total "
              "%zu B; on views %zu B, %zu B (expected less)",
              nw, nt, vw, vt);
    CHECK(nat.predicted.peak[REMAT_MEM_ACT] == views.predicted.peak[REMAT_MEM_ACT]); /* same values, same dtypes */
    printf("cuda plan-only bf16: workspace %zu B with the native kernels, %zu B on views; total %zu B, %zu B\n", nw, vw,
           nt, vt);
    remat_graph_destroy(g);
}

int main(void) {
    rounding();
    cuda_plan_only();
    rules();
    ce_rows();
    ln_native();
    bn_native();
    block_claims();
    dropout_masks();
    against_autocast("cnn", "fixtures/bf16_cnn");
    against_autocast("resnet18", "fixtures/cnn_models/resnet18");
    against_autocast("gpt2", "fixtures/gpt2_tiny");
    const char *models[] = {"cnn", "resnet18", "gpt2"};
    for (int i = 0; i < 3; i++) promises(models[i]);
    return check_exit("test_bf16");
}
