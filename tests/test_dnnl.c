/* test_dnnl.c: convolutions and linear layers through oneDNN
 * (src/ops/dnnl.h) against the definition in double, on every conv and
 * linear shape of tests/opcases.h and on shapes that make a thread's
 * images several chunks with a smaller last one, on 1, 2 and 3 threads.
 *
 * REMAT_PRODUCTS=dnnl is set here, so every shape oneDNN has a direct
 * convolution for goes through it (the test checks it does); ctest runs
 * this program once with the machine's best instruction set and once with
 * DNNL_MAX_CPU_ISA=AVX2. Backward must add into gradients that already
 * hold values; two runs with fresh contexts must agree bitwise; the
 * workspace is exactly the planned bytes (a guard page of poison after it
 * must survive).
 */
#include "check.h"
#include "opcases.h"
#include "../src/ops/dnnl.h"
#include "../src/core/bf16.h"

#include <stdlib.h>
#include <string.h>

static void fill(float *x, int64_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
    }
}

typedef struct {
    const remat__kctx *k;
    int fwd;
} task;

static void run_task(void *ctx, int ith, int nth) {
    const task *t = ctx;
    const remat__op *op = remat__ops[t->k->node->op];
    (t->fwd ? op->forward : op->backward)(t->k, ith, nth);
}

#define GUARD 256

/* Runs node n's forward then backward on nth threads with a fresh oneDNN
 * context; out (numel of n) and din[i] (pre-filled by the caller) receive
 * the results. */
static void run_node(const remat_graph *g, const remat__node *n, int nth, float **in, float *out, const float *dout,
                     float **din) {
    const remat__op *op = remat__ops[n->op];
    remat__pool *pool = NULL;
    remat__dnnl *dn = NULL;
    CHECK_OK(remat__pool_create(&pool, nth));
    CHECK_OK(remat__dnnl_create(&dn));
    if (!pool) return;
    remat__tensor ins[REMAT__MAX_IN], o = {out, &n->shape};
    for (int pass = 0; pass < 2; pass++) {
        size_t wb = pass == 0 ? (op->fwd_ws ? op->fwd_ws(g, n, nth) : 0) : (op->bwd_ws ? op->bwd_ws(g, n, nth) : 0);
        unsigned char *ws = malloc(wb + GUARD);
        memset(ws + wb, 0xA5, GUARD);
        remat__kctx k = {.graph = g,
                         .node = n,
                         .out = &o,
                         .dout = pass ? dout : NULL,
                         .train = 1,
                         .first = 1,
                         .pool = nth > 1 ? pool : NULL,
                         .ws = ws,
                         .dnnl = dn};
        for (int i = 0; i < n->n_in; i++) {
            ins[i] = (remat__tensor){in[i], &g->nodes[n->in[i]].shape};
            k.in[i] = &ins[i];
            k.din[i] = pass ? din[i] : NULL;
        }
        task t = {&k, pass == 0};
        if (nth > 1) remat__pool_run(pool, run_task, &t);
        else run_task(&t, 0, 1);
        int intact = 1;
        for (int i = 0; i < GUARD; i++) intact &= ws[wb + i] == 0xA5;
        CHECK_MSG(intact, "%s on %d threads wrote past its %zu planned workspace bytes", op->name, nth, wb);
        free(ws);
    }
    CHECK_OK(remat__dnnl_status(dn));
    remat__dnnl_destroy(dn);
    remat__pool_destroy(pool);
}

static double rel(double ref, float got) { return fabs(ref - (double)got) / (1.0 + fabs(ref)); }

/* The definition of conv2d and its gradients in double; din[i] += ... */
static double check_conv(const remat_graph *g, const remat__node *nd, float **in, const float *y, const float *dy,
                         float **din0, float **din) {
    const remat__shape *xs = &g->nodes[nd->in[0]].shape, *wsh = &g->nodes[nd->in[1]].shape;
    int64_t N = xs->d[0], C = xs->d[1], H = xs->d[2], W = xs->d[3];
    int64_t O = wsh->d[0], KH = wsh->d[2], KW = wsh->d[3], s = nd->iattr[0], p = nd->iattr[1];
    int64_t OH = nd->shape.d[2], OW = nd->shape.d[3];
    const float *x = in[0], *w = in[1], *b = nd->n_in == 3 ? in[2] : NULL;
    double *dx = calloc((size_t)(N * C * H * W), sizeof *dx), *dw = calloc((size_t)(O * C * KH * KW), sizeof *dw);
    double *db = calloc((size_t)O, sizeof *db), err = 0.0;
    double *mw = calloc((size_t)(O * C * KH * KW), sizeof *mw), *mb = calloc((size_t)O, sizeof *mb);
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    double acc = b ? b[o] : 0.0, gy = dy[((n * O + o) * OH + i) * OW + j];
                    db[o] += gy;
                    mb[o] += fabs(gy);
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t u = 0; u < KH; u++)
                            for (int64_t v = 0; v < KW; v++) {
                                int64_t ih = i * s - p + u, iw = j * s - p + v;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                int64_t xi = ((n * C + c) * H + ih) * W + iw, wi = ((o * C + c) * KH + u) * KW + v;
                                acc += (double)x[xi] * w[wi];
                                dx[xi] += gy * w[wi];
                                dw[wi] += gy * x[xi];
                                mw[wi] += fabs(gy * x[xi]);
                            }
                    double e = rel(acc, y[((n * O + o) * OH + i) * OW + j]);
                    if (e > err) err = e;
                }
    /* dW and db sum N*OH*OW terms that mostly cancel: their error is
     * measured against the sum of the terms' magnitudes (times 100, so
     * that 1e-4 still means 1e-6 of it) */
    double *refs[3] = {dx, dw, db}, *mags[3] = {NULL, mw, mb};
    for (int i = 0; i < nd->n_in; i++)
        for (int64_t e = 0; e < remat__numel(&g->nodes[nd->in[i]].shape); e++) {
            double r = refs[i][e] + din0[i][e];
            double d = mags[i] ? fabs(r - din[i][e]) / (1.0 + fabs(din0[i][e]) + mags[i][e]) * 1e2 : rel(r, din[i][e]);
            if (d > err) err = d;
        }
    free(dx), free(dw), free(db), free(mw), free(mb);
    return err;
}

static double check_linear(const remat_graph *g, const remat__node *nd, float **in, const float *y, const float *dy,
                           float **din0, float **din) {
    int64_t N = g->nodes[nd->in[0]].shape.d[0], IN = g->nodes[nd->in[0]].shape.d[1], OUT = nd->shape.d[1];
    const float *x = in[0], *w = in[1], *b = nd->n_in == 3 ? in[2] : NULL;
    double err = 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OUT; o++) {
            double acc = b ? b[o] : 0.0;
            for (int64_t i = 0; i < IN; i++) acc += (double)x[n * IN + i] * w[o * IN + i];
            double e = rel(acc, y[n * OUT + o]);
            if (e > err) err = e;
        }
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < IN; i++) {
            double acc = din0[0][n * IN + i];
            for (int64_t o = 0; o < OUT; o++) acc += (double)dy[n * OUT + o] * w[o * IN + i];
            double e = rel(acc, din[0][n * IN + i]);
            if (e > err) err = e;
        }
    for (int64_t o = 0; o < OUT; o++) {
        for (int64_t i = 0; i < IN; i++) {
            double acc = din0[1][o * IN + i];
            for (int64_t n = 0; n < N; n++) acc += (double)dy[n * OUT + o] * x[n * IN + i];
            double e = rel(acc, din[1][o * IN + i]);
            if (e > err) err = e;
        }
        if (b) {
            double acc = din0[2][o];
            for (int64_t n = 0; n < N; n++) acc += dy[n * OUT + o];
            double e = rel(acc, din[2][o]);
            if (e > err) err = e;
        }
    }
    return err;
}

static int have_dnnl;
static int require_dnnl = 1; /* 0: the shape may fall back to im2col (no direct kernel on every ISA) */

/* Checks node `node` of g on 1, 2 and 3 threads. */
static void check_node(const char *label, remat_graph *g, remat_node node) {
    CHECK_MSG(remat_graph_status(g) == REMAT_OK, "%s: %s", label, remat_graph_error(g));
    if (remat_graph_status(g) != REMAT_OK) return;
    const remat__node *n = &g->nodes[node];
    int conv = n->op == REMAT__OP_CONV2D;
    int nin = n->n_in;
    float *in[REMAT__MAX_IN], *din0[REMAT__MAX_IN], *din[REMAT__MAX_IN], *din2[REMAT__MAX_IN];
    for (int i = 0; i < nin; i++) {
        int64_t ne = remat__numel(&g->nodes[n->in[i]].shape);
        in[i] = malloc((size_t)ne * 4), din0[i] = malloc((size_t)ne * 4);
        din[i] = malloc((size_t)ne * 4), din2[i] = malloc((size_t)ne * 4);
        fill(in[i], ne, (uint32_t)(i + 1));
        fill(din0[i], ne, (uint32_t)(i + 11)); /* backward adds to what is there */
    }
    int64_t ny = remat__numel(&n->shape);
    float *y = malloc((size_t)ny * 4), *y2 = malloc((size_t)ny * 4), *dy = malloc((size_t)ny * 4);
    fill(dy, ny, 99);
    for (int nth = 1; nth <= 3; nth++) {
        if (conv && have_dnnl) {
            const remat__shape *xs = &g->nodes[n->in[0]].shape, *wsh = &g->nodes[n->in[1]].shape;
            remat__conv_dims cd = {
                xs->d[0],      xs->d[1],      xs->d[2],    xs->d[3],    wsh->d[0], wsh->d[2], wsh->d[3],
                n->shape.d[2], n->shape.d[3], n->iattr[0], n->iattr[1], nin == 3,  0,         0};
            size_t f, b;
            int used = remat__dnnl_conv_use(&cd, nth, &f, &b);
            CHECK_MSG(used || !require_dnnl, "%s on %d threads does not go through oneDNN", label, nth);
            if (!used) printf("%-40s %d threads: no direct oneDNN kernel here, im2col\n", label, nth);
        }
        for (int rep = 0; rep < 2; rep++) {
            float **d = rep ? din2 : din;
            for (int i = 0; i < nin; i++) memcpy(d[i], din0[i], (size_t)remat__numel(&g->nodes[n->in[i]].shape) * 4);
            run_node(g, n, nth, in, rep ? y2 : y, dy, d);
        }
        double e = conv ? check_conv(g, n, in, y, dy, din0, din) : check_linear(g, n, in, y, dy, din0, din);
        CHECK_MSG(e <= 1e-4, "%s on %d threads: relative error %.3g against the definition", label, nth, e);
        int same = !memcmp(y, y2, (size_t)ny * 4);
        for (int i = 0; i < nin; i++)
            same &= !memcmp(din[i], din2[i], (size_t)remat__numel(&g->nodes[n->in[i]].shape) * 4);
        CHECK_MSG(same, "%s on %d threads: two runs differ", label, nth);
        printf("%-40s %d threads: relative error %.2g%s\n", label, nth, e, same ? ", bitwise repeatable" : "");
    }
    for (int i = 0; i < nin; i++) free(in[i]), free(din0[i]), free(din[i]), free(din2[i]);
    free(y), free(y2), free(dy);
}

static void conv_case(const char *label, int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int k, int s, int p,
                      int bias) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[4] = {n, c, h, w}, wd[4] = {o, c, k, k}, bd[1] = {o};
    remat_node x = remat_param(g, "x", 4, xd, REMAT_INIT_UNIFORM, 1.0f);
    remat_node wt = remat_param(g, "w", 4, wd, REMAT_INIT_UNIFORM, 1.0f);
    remat_node b = bias ? remat_param(g, "b", 1, bd, REMAT_INIT_UNIFORM, 1.0f) : REMAT_NONE;
    check_node(label, g, remat_conv2d_op(g, x, wt, b, s, p));
    remat_graph_destroy(g);
}

/* ------------------------------------------------ bf16 (native kernels) */

/* x rounded through bf16 (what a bf16 product reads of a float32 value). */
static double rb(float x) { return (double)remat__bf16_round(x); }

/* Runs node n's forward (pass 0) or backward on nth threads with its
 * bf16 kernels (kctx.dt = dt) and a workspace of `bytes` followed by a
 * guard of poison, which must survive. */
static void run_bf16_pass(const char *label, const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth,
                          remat__pool *pool, remat__dnnl *dn, remat__tensor *ti, remat__tensor *to, const void *dout,
                          void *const *din, int pass, size_t bytes) {
    unsigned char *ws = malloc(bytes + GUARD);
    memset(ws + bytes, 0xA5, GUARD);
    remat__kctx k = {.graph = g,
                     .node = n,
                     .out = to,
                     .train = 1,
                     .first = 1,
                     .ws = ws,
                     .pool = nth > 1 ? pool : NULL,
                     .dnnl = dn,
                     .dt = dt};
    for (int i = 0; i < n->n_in; i++) {
        k.in[i] = &ti[i];
        if (pass) k.din[i] = din[i];
    }
    if (pass) k.dout = dout;
    task t = {&k, pass == 0};
    if (nth > 1) remat__pool_run(pool, run_task, &t);
    else run_task(&t, 0, 1);
    int intact = 1;
    for (int i = 0; i < GUARD; i++) intact &= ws[bytes + i] == 0xA5;
    CHECK_MSG(intact, "%s on %d threads wrote past its %zu planned workspace bytes", label, nth, bytes);
    free(ws);
}

/* A convolution under the bf16 policy through oneDNN's bf16 primitives
 * (kctx.dt set, as the executor sets it where conv2d's bf16_ws says so):
 * x stored bf16 (xbf16) or float32, y and dy bf16, weights and bias
 * float32. Against the definition in double on the bf16-rounded inputs:
 * y within bf16's rounding (2^-7 of 1 + |y|), dx as bf16(dx0 + bf16(sum))
 * and dW, db as dw0 + bf16(sum) within the same; two runs bitwise equal;
 * the workspace exactly the planned bytes. */
static void bf16_conv_case(const char *label, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int K, int s,
                           int p, int bias, int xbf16) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[4] = {N, C, H, W}, wd[4] = {O, C, K, K}, bd[1] = {O};
    remat_node xn = remat_param(g, "x", 4, xd, REMAT_INIT_UNIFORM, 1.0f);
    remat_node wn = remat_param(g, "w", 4, wd, REMAT_INIT_UNIFORM, 1.0f);
    remat_node bn = bias ? remat_param(g, "b", 1, bd, REMAT_INIT_UNIFORM, 1.0f) : REMAT_NONE;
    remat_node yn = remat_conv2d_op(g, xn, wn, bn, s, p);
    CHECK_OK(remat_graph_status(g));
    const remat__node *n = &g->nodes[yn];
    const remat__op *op = remat__ops[n->op];
    uint8_t *dt = calloc((size_t)g->n, 1);
    for (int32_t u = 0; u < g->n; u++) dt[u] = REMAT_F32;
    dt[yn] = REMAT_BF16, dt[xn] = xbf16 ? REMAT_BF16 : REMAT_F32;
    int64_t OH = n->shape.d[2], OW = n->shape.d[3], nx = N * C * H * W, nw = O * C * K * K, ny = N * O * OH * OW;
    float *xf = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4), *b = malloc((size_t)O * 4);
    float *dyf = malloc((size_t)ny * 4), *dx0 = malloc((size_t)nx * 4), *dw0 = malloc((size_t)nw * 4);
    float *db0 = malloc((size_t)O * 4);
    fill(xf, nx, 1), fill(w, nw, 2), fill(b, O, 3), fill(dyf, ny, 99), fill(dx0, nx, 11), fill(dw0, nw, 12);
    fill(db0, O, 13);
    uint16_t *xb = malloc((size_t)nx * 2), *dyb = malloc((size_t)ny * 2), *dx0b = malloc((size_t)nx * 2);
    for (int64_t i = 0; i < nx; i++) xb[i] = remat__bf16_of(xf[i]), dx0b[i] = remat__bf16_of(dx0[i]);
    for (int64_t i = 0; i < ny; i++) dyb[i] = remat__bf16_of(dyf[i]);
    /* the reference, in double, on what the kernels read */
    double *ry = calloc((size_t)ny, 8), *rdx = calloc((size_t)nx, 8), *rdw = calloc((size_t)nw, 8);
    double *rdb = calloc((size_t)O, 8), *mdw = calloc((size_t)nw, 8), *mdb = calloc((size_t)O, 8);
    for (int64_t i = 0; i < N * O * OH * OW; i++) {
        int64_t j = i % OW, ii = i / OW % OH, o = i / (OW * OH) % O, nn = i / (OW * OH * O);
        double acc = bias ? rb(b[o]) : 0.0, gy = remat__f32_of(dyb[i]);
        rdb[o] += gy, mdb[o] += fabs(gy);
        for (int64_t c = 0; c < C; c++)
            for (int u = 0; u < K; u++)
                for (int v = 0; v < K; v++) {
                    int64_t ih = ii * s - p + u, iw = j * s - p + v;
                    if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                    int64_t xi = ((nn * C + c) * H + ih) * W + iw, wi = ((o * C + c) * K + u) * K + v;
                    acc += rb(xf[xi]) * rb(w[wi]);
                    rdx[xi] += gy * rb(w[wi]);
                    rdw[wi] += gy * rb(xf[xi]), mdw[wi] += fabs(gy * rb(xf[xi]));
                }
        ry[i] = acc;
    }
    size_t wf = 0, wb = 0;
    int native = op->bf16_ws(g, n, dt, 2, &wf, &wb);
    CHECK_MSG(native, "%s: conv2d's bf16 kernels are not used under REMAT_PRODUCTS=dnnl", label);
    for (int nth = 1; nth <= 3 && native; nth++) {
        CHECK(op->bf16_ws(g, n, dt, nth, &wf, &wb));
        uint16_t *y[2], *dxb[2];
        float *dw[2], *dxf[2], *db[2];
        for (int rep = 0; rep < 2; rep++) {
            remat__pool *pool = NULL;
            remat__dnnl *dn = NULL;
            CHECK_OK(remat__pool_create(&pool, nth));
            CHECK_OK(remat__dnnl_create(&dn));
            y[rep] = malloc((size_t)ny * 2), dxb[rep] = malloc((size_t)nx * 2), dxf[rep] = malloc((size_t)nx * 4);
            dw[rep] = malloc((size_t)nw * 4), db[rep] = malloc((size_t)O * 4);
            memcpy(dxb[rep], dx0b, (size_t)nx * 2), memcpy(dxf[rep], dx0, (size_t)nx * 4);
            memcpy(dw[rep], dw0, (size_t)nw * 4), memcpy(db[rep], db0, (size_t)O * 4);
            remat__tensor ti[3] = {{xbf16 ? (void *)xb : (void *)xf, &g->nodes[xn].shape},
                                   {w, &g->nodes[wn].shape},
                                   {b, bias ? &g->nodes[bn].shape : NULL}};
            remat__tensor to = {y[rep], &n->shape};
            void *din[3] = {xbf16 ? (void *)dxb[rep] : (void *)dxf[rep], dw[rep], db[rep]};
            for (int pass = 0; pass < 2; pass++)
                run_bf16_pass(label, g, n, dt, nth, pool, dn, ti, &to, dyb, din, pass, pass ? wb : wf);
            CHECK_OK(remat__dnnl_status(dn));
            remat__dnnl_destroy(dn);
            remat__pool_destroy(pool);
        }
        double e = 0.0;
        for (int64_t i = 0; i < ny; i++) e = fmax(e, rel(ry[i], remat__f32_of(y[0][i])));
        for (int64_t i = 0; i < nx; i++) {
            double r = xbf16 ? rb((float)(remat__f32_of(dx0b[i]) + rb((float)rdx[i]))) : dx0[i] + rb((float)rdx[i]);
            e = fmax(e, rel(r, xbf16 ? remat__f32_of(dxb[0][i]) : dxf[0][i]));
        }
        for (int64_t i = 0; i < nw; i++) e = fmax(e, fabs(dw0[i] + rdw[i] - dw[0][i]) / (1.0 + fabs(dw0[i]) + mdw[i]));
        for (int64_t o = 0; o < O && bias; o++)
            e = fmax(e, fabs(db0[o] + rdb[o] - db[0][o]) / (1.0 + fabs(db0[o]) + mdb[o]));
        int same = !memcmp(y[0], y[1], (size_t)ny * 2) && !memcmp(dw[0], dw[1], (size_t)nw * 4) &&
                   !memcmp(db[0], db[1], (size_t)O * 4) && !memcmp(dxb[0], dxb[1], (size_t)nx * 2) &&
                   !memcmp(dxf[0], dxf[1], (size_t)nx * 4);
        CHECK_MSG(e <= 1.0 / 128, "%s on %d threads: relative error %.3g against the definition", label, nth, e);
        CHECK_MSG(same, "%s on %d threads: two runs differ", label, nth);
        printf("%-40s %d threads: relative error %.2g (bf16)%s\n", label, nth, e, same ? ", bitwise repeatable" : "");
        for (int rep = 0; rep < 2; rep++) free(y[rep]), free(dxb[rep]), free(dxf[rep]), free(dw[rep]), free(db[rep]);
    }
    free(xf), free(w), free(b), free(dyf), free(dx0), free(dw0), free(db0), free(xb), free(dyb), free(dx0b);
    free(ry), free(rdx), free(rdw), free(rdb), free(mdw), free(mdb), free(dt);
    remat_graph_destroy(g);
}

/* A linear layer under the bf16 policy through oneDNN's bf16 products,
 * x bf16 (xbf16) or float32: y, dx, dW, db against the definition on the
 * bf16-rounded inputs, as bf16_conv_case does. */
static void bf16_linear_case(const char *label, int64_t N, int64_t IN, int64_t OUT, int xbf16) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[2] = {N, IN}, wd[2] = {OUT, IN}, bd[1] = {OUT};
    remat_node xn = remat_param(g, "x", 2, xd, REMAT_INIT_UNIFORM, 1.0f);
    remat_node wn = remat_param(g, "w", 2, wd, REMAT_INIT_UNIFORM, 1.0f);
    remat_node bn = remat_param(g, "b", 1, bd, REMAT_INIT_UNIFORM, 1.0f);
    remat_node yn = remat_linear_op(g, xn, wn, bn);
    CHECK_OK(remat_graph_status(g));
    const remat__node *n = &g->nodes[yn];
    const remat__op *op = remat__ops[n->op];
    uint8_t *dt = malloc((size_t)g->n);
    memset(dt, REMAT_F32, (size_t)g->n);
    dt[yn] = REMAT_BF16, dt[xn] = xbf16 ? REMAT_BF16 : REMAT_F32;
    int64_t nx = N * IN, nw = OUT * IN, ny = N * OUT;
    float *xf = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4), *b = malloc((size_t)OUT * 4);
    float *dyf = malloc((size_t)ny * 4), *dx0 = malloc((size_t)nx * 4), *dw0 = malloc((size_t)nw * 4);
    float *db0 = malloc((size_t)OUT * 4);
    fill(xf, nx, 1), fill(w, nw, 2), fill(b, OUT, 3), fill(dyf, ny, 99), fill(dx0, nx, 11), fill(dw0, nw, 12);
    fill(db0, OUT, 13);
    uint16_t *xb = malloc((size_t)nx * 2), *dyb = malloc((size_t)ny * 2), *dx0b = malloc((size_t)nx * 2);
    for (int64_t i = 0; i < nx; i++) xb[i] = remat__bf16_of(xf[i]), dx0b[i] = remat__bf16_of(dx0[i]);
    for (int64_t i = 0; i < ny; i++) dyb[i] = remat__bf16_of(dyf[i]);
    size_t wf, wb;
    CHECK_MSG(op->bf16_ws(g, n, dt, 1, &wf, &wb), "%s: linear's bf16 kernels are not used under REMAT_PRODUCTS=dnnl",
              label);
    for (int nth = 1; nth <= 3 && op->bf16_ws(g, n, dt, nth, &wf, &wb); nth++) {
        remat__pool *pool = NULL;
        remat__dnnl *dn = NULL;
        CHECK_OK(remat__pool_create(&pool, nth));
        CHECK_OK(remat__dnnl_create(&dn));
        uint16_t *y = malloc((size_t)ny * 2), *dxb = malloc((size_t)nx * 2);
        float *dxf = malloc((size_t)nx * 4), *dw = malloc((size_t)nw * 4), *db = malloc((size_t)OUT * 4);
        memcpy(dxb, dx0b, (size_t)nx * 2), memcpy(dxf, dx0, (size_t)nx * 4), memcpy(dw, dw0, (size_t)nw * 4);
        memcpy(db, db0, (size_t)OUT * 4);
        remat__tensor ti[3] = {
            {xbf16 ? (void *)xb : (void *)xf, &g->nodes[xn].shape}, {w, &g->nodes[wn].shape}, {b, &g->nodes[bn].shape}};
        remat__tensor to = {y, &n->shape};
        void *din[3] = {xbf16 ? (void *)dxb : (void *)dxf, dw, db};
        for (int pass = 0; pass < 2; pass++)
            run_bf16_pass(label, g, n, dt, nth, pool, dn, ti, &to, dyb, din, pass, pass ? wb : wf);
        CHECK_OK(remat__dnnl_status(dn));
        double e = 0.0;
        for (int64_t r = 0; r < N; r++)
            for (int64_t o = 0; o < OUT; o++) {
                double acc = rb(b[o]);
                for (int64_t i = 0; i < IN; i++) acc += rb(xf[r * IN + i]) * rb(w[o * IN + i]);
                e = fmax(e, rel(acc, remat__f32_of(y[r * OUT + o])));
            }
        for (int64_t r = 0; r < N; r++)
            for (int64_t i = 0; i < IN; i++) {
                double acc = 0.0;
                for (int64_t o = 0; o < OUT; o++) acc += (double)remat__f32_of(dyb[r * OUT + o]) * rb(w[o * IN + i]);
                int64_t j = r * IN + i;
                double ref = xbf16 ? rb((float)(remat__f32_of(dx0b[j]) + rb((float)acc))) : dx0[j] + rb((float)acc);
                e = fmax(e, rel(ref, xbf16 ? remat__f32_of(dxb[j]) : dxf[j]));
            }
        for (int64_t o = 0; o < OUT; o++) {
            double sb = 0.0, mb = 0.0;
            for (int64_t i = 0; i < IN; i++) {
                double acc = 0.0, mag = 0.0;
                for (int64_t r = 0; r < N; r++) {
                    double t = (double)remat__f32_of(dyb[r * OUT + o]) * rb(xf[r * IN + i]);
                    acc += t, mag += fabs(t);
                }
                e = fmax(e, fabs(dw0[o * IN + i] + acc - dw[o * IN + i]) / (1.0 + fabs(dw0[o * IN + i]) + mag));
            }
            for (int64_t r = 0; r < N; r++)
                sb += remat__f32_of(dyb[r * OUT + o]), mb += fabs(remat__f32_of(dyb[r * OUT + o]));
            e = fmax(e, fabs(db0[o] + sb - db[o]) / (1.0 + fabs(db0[o]) + mb));
        }
        CHECK_MSG(e <= 1.0 / 128, "%s on %d threads: relative error %.3g against the definition", label, nth, e);
        printf("%-40s %d threads: relative error %.2g (bf16)\n", label, nth, e);
        free(y), free(dxb), free(dxf), free(dw), free(db);
        remat__dnnl_destroy(dn);
        remat__pool_destroy(pool);
    }
    free(xf), free(w), free(b), free(dyf), free(dx0), free(dw0), free(db0), free(xb), free(dyb), free(dx0b), free(dt);
    remat_graph_destroy(g);
}

int main(void) {
    setenv("REMAT_PRODUCTS", "dnnl", 1);
    char desc[128];
    remat__dnnl_describe(desc, sizeof desc);
    have_dnnl = strcmp(desc, "oneDNN off") != 0;
    printf("%s%s\n", desc, getenv("DNNL_MAX_CPU_ISA") ? " (DNNL_MAX_CPU_ISA set)" : "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(cases[i].op, "conv2d") && strcmp(cases[i].op, "linear")) continue;
        gcase c = {0};
        c.extra = REMAT_NONE;
        CHECK_OK(remat_graph_create(&c.g));
        cases[i].build(&c);
        char label[64];
        snprintf(label, sizeof label, "opcases %s #%zu", cases[i].op, i);
        check_node(label, c.g, c.out);
        remat_graph_destroy(c.g);
    }
    /* A thread's images in several chunks with a smaller last one
     * (about 1 MiB of input and output per chunk): 64x64 images one per
     * chunk; 24x24 images in chunks of 7 and 4 on one thread, 6 and 5 on
     * two, 4 and 3 on three. */
    conv_case("conv 16->32 3x3 64x64 b5", 5, 16, 64, 64, 32, 3, 1, 1, 1);
    conv_case("conv 32->32 3x3 24x24 b11", 11, 32, 24, 24, 32, 3, 1, 1, 1);
    conv_case("conv 32->16 3x3/2 p1 15x13 b5", 5, 32, 15, 13, 16, 3, 2, 1, 0);
    conv_case("conv 24->40 1x1 9x9 b4 (padded blocks)", 4, 24, 9, 9, 40, 1, 1, 0, 1);
    require_dnnl = 0; /* a stem: oneDNN's AVX2 kernels have no direct backward for it */
    conv_case("conv 3->16 7x7/2 p3 20x20 b2", 2, 3, 20, 20, 16, 7, 2, 3, 0);
    /* bf16 products, where oneDNN has them (AVX-512 and above; oneDNN
     * 2.6 has no bf16 convolution for AVX2) */
    if (have_dnnl && !getenv("DNNL_MAX_CPU_ISA")) {
        bf16_conv_case("bf16 conv 32->32 3x3 24x24 b11", 11, 32, 24, 24, 32, 3, 1, 1, 1, 1);
        bf16_conv_case("bf16 conv 3->16 7x7/2 p3 20x20 b3 (f32 x)", 3, 3, 20, 20, 16, 7, 2, 3, 1, 0);
        bf16_conv_case("bf16 conv 32->16 3x3/2 p1 15x13 b5", 5, 32, 15, 13, 16, 3, 2, 1, 0, 1);
        bf16_conv_case("bf16 conv 24->40 1x1 9x9 b4", 4, 24, 9, 9, 40, 1, 1, 0, 1, 1);
        /* no bias, x bf16: products on NCHW (dnnl_conv1x1.c); one image
         * (fewer than the threads), and several per thread */
        bf16_conv_case("bf16 conv 24->40 1x1 9x9 b4 (products)", 4, 24, 9, 9, 40, 1, 1, 0, 0, 1);
        bf16_conv_case("bf16 conv 48->12 1x1 5x7 b1 (products)", 1, 48, 5, 7, 12, 1, 1, 0, 0, 1);
        bf16_conv_case("bf16 conv 16->64 1x1 6x6 b7 (products)", 7, 16, 6, 6, 64, 1, 1, 0, 0, 1);
        remat__conv_dims cd = {.N = 4,
                               .C = 24,
                               .H = 9,
                               .W = 9,
                               .O = 40,
                               .KH = 1,
                               .KW = 1,
                               .OH = 9,
                               .OW = 9,
                               .s = 1,
                               .bf16 = 1,
                               .xbf16 = 1};
        size_t f1, b1;
        CHECK_MSG(remat__dnnl_conv1x1_use(&cd, 2, &f1, &b1), "a 1x1 bf16 convolution without bias is no product");
        cd.bias = 1;
        CHECK_MSG(!remat__dnnl_conv1x1_use(&cd, 2, &f1, &b1), "a 1x1 bf16 convolution with a bias is a product");
        cd.bias = 0, cd.xbf16 = 0;
        CHECK_MSG(!remat__dnnl_conv1x1_use(&cd, 2, &f1, &b1), "a 1x1 convolution of float32 x is a product");
        bf16_linear_case("bf16 linear 40->24 b7", 7, 40, 24, 1);
        bf16_linear_case("bf16 linear 33->65 b5 (f32 x)", 5, 33, 65, 0);
    }
    return check_exit("test_dnnl");
}
