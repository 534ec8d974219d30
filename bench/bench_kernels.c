/* bench_kernels.c: throughput of remat's CPU kernels against the GEMM peak
 * of this machine, measured in one run; for convolutions and linear layers,
 * oneDNN (src/ops/dnnl.h) against im2col+OpenBLAS side by side.
 *
 * For each shape it first checks the op's kernels against a plain
 * reference (the definition, in double), then times them on the
 * executor's thread pool exactly as the executor calls them (workspace of
 * the op's own size, BLAS single-threaded inside each pool thread) and
 * prints GFLOP/s and the fraction of the GEMM peak, which is measured the
 * same way: every pool thread runs its own single-threaded cblas_sgemm of
 * 1024^3 (remat's threading), and one cblas_sgemm with OpenBLAS's own
 * threads for comparison. Rounds interleave the shapes; each figure is the
 * best of its rounds (the machine may be shared).
 *
 *   bench_kernels [--threads T] [--rounds R] [--only SUBSTRING] [--no-check | --check-only] [--cpu]
 *
 * --check-only runs the reference checks and stops (the test suite's
 * bench_kernels_check).
 *
 * --cpu times with the thread's CPU clock instead of the wall clock (use
 * with --threads 1 on a shared machine).
 *
 * Convolutions and linear layers run both ways in every round: with
 * REMAT_PRODUCTS=blas (im2col + OpenBLAS, cblas_sgemm) and with
 * REMAT_PRODUCTS=dnnl (oneDNN wherever it has the product), each with its
 * own oneDNN context and workspace; the table gives each one's median over
 * the rounds, its fraction of the GEMM peak, the ratio of the medians
 * (blas time / dnnl time: above 1, oneDNN is faster) and what the rule
 * (REMAT_PRODUCTS unset) picks. Both are checked against the reference.
 */
#include "../src/plan/schedule.h"
#include "../src/ops/dnnl.h"
#include "../src/core/bf16.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Wall time, or with --cpu the calling thread's CPU time: on a shared
 * machine that leaves out the time the thread waited for a core (only
 * meaningful with --threads 1, where the caller does all the work). */
static int use_cpu_clock;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *x, int64_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
    }
}

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* ------------------------------------------------------------ GEMM peak */

typedef struct {
    int n;
    float *a, *b, *c; /* per thread: (n, n) each */
} gemm_ctx;

static void gemm_task(void *ctx, int ith, int nth) {
    (void)nth;
    gemm_ctx *g = ctx;
    size_t nn = (size_t)g->n * (size_t)g->n;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.0f, g->a + ith * nn, g->n,
                g->b + ith * nn, g->n, 0.0f, g->c + ith * nn, g->n);
}

/* ------------------------------------------------------------ op cases */

/* One op on one shape: a tiny graph holding the op's node and its inputs. */
typedef struct {
    const char *name;
    remat_graph *g;
    remat_node node;
    double flops_fwd, flops_bwd; /* per call */
    int nin;
    float *in[REMAT__MAX_IN], *out, *aux, *dout, *din[REMAT__MAX_IN];
    double best_fwd, best_bwd;
    int product;        /* a convolution or linear layer: timed both ways */
    double t[3][2][64]; /* [blas, dnnl, bf16][fwd, bwd][round] */
    /* --bf16, products: x, y, dy, dx stored bf16 and the dtypes by node
     * id, for the bf16 kernels (kctx.dt) */
    uint16_t *xb, *yb, *dyb, *dxb;
    uint8_t *dt;
} kcase;

/* The products' mode for the next run_case (REMAT_PRODUCTS, 0 blas, 1 dnnl,
 * 2 the rule) and a oneDNN context made under each. */
static const char *const mode_env[3] = {"blas", "dnnl", "auto"};
static remat__dnnl *mode_ctx[3];
static int cur_mode = 2;
static int nthreads_global = 1;

static void set_mode(int m) {
    cur_mode = m;
    setenv("REMAT_PRODUCTS", mode_env[m < 3 ? m : 1], 1); /* 3: bf16 through oneDNN */
}

static kcase cases[64];
static int ncases;

static remat_node conv_node(remat_graph *g, int64_t n, int64_t c, int64_t h, int64_t o, int k, int s, int p, int bias) {
    int64_t xd[4] = {n, c, h, h};
    remat_node x = remat_input(g, "x", REMAT_F32, 4, xd);
    return remat_conv2d(g, "conv", x, o, k, s, p, bias);
}

static void free_cases(void) {
    for (int i = 0; i < ncases; i++) {
        kcase *c = &cases[i];
        for (int k = 0; k < c->nin; k++) free(c->in[k]), free(c->din[k]);
        free(c->out), free(c->dout), free(c->aux);
        free(c->xb), free(c->yb), free(c->dyb), free(c->dxb), free(c->dt);
        remat_graph_destroy(c->g);
    }
    ncases = 0;
}

static void add_case(const char *name, remat_graph *g, remat_node node) {
    if (remat_graph_status(g) != REMAT_OK) {
        fprintf(stderr, "bench_kernels: %s: %s\n", name, remat_graph_error(g));
        exit(1);
    }
    kcase *c = &cases[ncases++];
    memset(c, 0, sizeof *c);
    c->name = name;
    c->g = g;
    c->node = node;
    const remat__node *n = &g->nodes[node];
    const remat__op *op = remat__ops[n->op];
    c->nin = n->n_in;
    c->product = n->op == REMAT__OP_CONV2D || n->op == REMAT__OP_LINEAR;
    c->flops_fwd = op->flops ? op->flops(g, n) : (double)remat__numel(&n->shape);
    c->flops_bwd = 2.0 * c->flops_fwd;
    for (int i = 0; i < n->n_in; i++) {
        int64_t ne = remat__numel(&g->nodes[n->in[i]].shape);
        c->in[i] = xalloc((size_t)ne * 4);
        c->din[i] = xalloc((size_t)ne * 4);
        fill(c->in[i], ne, (uint32_t)(i + 1));
    }
    int64_t ne = remat__numel(&n->shape);
    c->out = xalloc((size_t)ne * 4);
    c->dout = xalloc((size_t)ne * 4);
    fill(c->dout, ne, 99);
    size_t ab = op->aux_bytes ? op->aux_bytes(g, n) : 0;
    c->aux = xalloc(ab + 64);
}

/* The bf16 copies of a product case's tensors (--bf16). */
static void add_bf16(kcase *c) {
    const remat_graph *g = c->g;
    const remat__node *n = &g->nodes[c->node];
    int64_t nx = remat__numel(&g->nodes[n->in[0]].shape), ny = remat__numel(&n->shape);
    c->xb = xalloc((size_t)nx * 2), c->dxb = xalloc((size_t)nx * 2);
    c->yb = xalloc((size_t)ny * 2), c->dyb = xalloc((size_t)ny * 2);
    for (int64_t i = 0; i < nx; i++) c->xb[i] = remat__bf16_of(c->in[0][i]);
    for (int64_t i = 0; i < ny; i++) c->dyb[i] = remat__bf16_of(c->dout[i]);
    c->dt = xalloc((size_t)g->n);
    memset(c->dt, REMAT_F32, (size_t)g->n);
    c->dt[n->in[0]] = c->dt[c->node] = REMAT_BF16;
    size_t f, b;
    set_mode(1);
    if (!remat__ops[n->op]->bf16_ws(g, n, c->dt, remat__node_threads(g, n, nthreads_global), &f, &b)) {
        printf("%s: oneDNN has no bf16 kernel for it here\n", c->name);
        free(c->dt), c->dt = NULL;
    }
    set_mode(2);
}

typedef struct {
    const remat__kctx *k;
    int fwd;
} run_ctx;

static void run_task(void *ctx, int ith, int nth) {
    const run_ctx *r = ctx;
    const remat__op *op = remat__ops[r->k->node->op];
    (r->fwd ? op->forward : op->backward)(r->k, ith, nth);
}

/* Runs forward (fwd = 1) or backward of a case on `nth` threads of the
 * pool with its own workspace; returns seconds. */
static double run_case(kcase *c, remat__pool *pool, int fwd, int zero_din) {
    const remat_graph *g = c->g;
    const remat__node *n = &g->nodes[c->node];
    const remat__op *op = remat__ops[n->op];
    int nth = remat__node_threads(g, n, remat__pool_size(pool));
    size_t wb = fwd ? (op->fwd_ws ? op->fwd_ws(g, n, nth) : 0) : (op->bwd_ws ? op->bwd_ws(g, n, nth) : 0);
    int bf16 = cur_mode == 3;
    size_t wbf[2];
    if (bf16 && !op->bf16_ws(g, n, c->dt, nth, &wbf[0], &wbf[1])) {
        fprintf(stderr, "bench_kernels: %s: no bf16 kernel here\n", c->name);
        exit(1);
    }
    if (bf16) wb = wbf[fwd ? 0 : 1];
    void *ws = xalloc(wb + 64);
    remat__tensor ins[REMAT__MAX_IN], out = {bf16 ? (void *)c->yb : c->out, &n->shape};
    remat__kctx k = {.node = n,
                     .out = &out,
                     .aux = c->aux,
                     .dout = bf16 ? (const float *)c->dyb : c->dout,
                     .train = 1,
                     .first = 1,
                     .seed = 1,
                     .step = 0,
                     .node_id = c->node,
                     .pool = pool,
                     .ws = ws,
                     .dnnl = mode_ctx[bf16 ? 1 : cur_mode],
                     .dt = bf16 ? c->dt : NULL};
    for (int i = 0; i < n->n_in; i++) {
        ins[i] = (remat__tensor){bf16 && i == 0 ? (void *)c->xb : c->in[i], &g->nodes[n->in[i]].shape};
        k.in[i] = &ins[i];
        int wants = g->nodes[n->in[i]].leaf != REMAT__LEAF_INPUT || i == 0;
        k.din[i] = fwd || !wants ? NULL : (bf16 && i == 0 ? (float *)c->dxb : c->din[i]);
        if (!fwd && zero_din && k.din[i])
            memset(k.din[i], 0, (size_t)remat__numel(&g->nodes[n->in[i]].shape) * (bf16 && i == 0 ? 2 : 4));
    }
    run_ctx r = {&k, fwd};
    double t0 = now_s();
    if (nth == 1) {
        k.pool = NULL;
        run_task(&r, 0, 1);
    } else {
        remat__pool_run(pool, run_task, &r);
    }
    double t = now_s() - t0;
    free(ws);
    if (remat__dnnl_status(k.dnnl) != REMAT_OK) {
        fprintf(stderr, "bench_kernels: %s: %s\n", c->name, remat_last_error());
        exit(1);
    }
    return t;
}

/* ------------------------------------------------- reference linear */

/* y = x W^T + b, dx = dy W, dW = dy^T x in double, on a few rows and
 * output features. */
static double check_linear(kcase *c, remat__pool *pool) {
    const remat_graph *g = c->g;
    const remat__node *nd = &g->nodes[c->node];
    int64_t N = g->nodes[nd->in[0]].shape.d[1] ? g->nodes[nd->in[0]].shape.d[0] : 0;
    int64_t IN = g->nodes[nd->in[0]].shape.d[1], OUT = nd->shape.d[1];
    run_case(c, pool, 1, 0);
    run_case(c, pool, 0, 1);
    const float *x = c->in[0], *w = c->in[1], *b = nd->n_in == 3 ? c->in[2] : NULL, *dy = c->dout;
    double err = 0.0;
    for (int64_t n = 0; n < N; n += N / 5 + 1)
        for (int64_t o = 0; o < OUT; o += OUT / 7 + 1) {
            double acc = b ? b[o] : 0.0;
            for (int64_t i = 0; i < IN; i++) acc += (double)x[n * IN + i] * w[o * IN + i];
            double e = fabs(acc - c->out[n * OUT + o]) / (1.0 + fabs(acc));
            if (e > err) err = e;
        }
    for (int64_t n = 0; n < N; n += N / 5 + 1)
        for (int64_t i = 0; i < IN; i += IN / 7 + 1) {
            double acc = 0.0;
            for (int64_t o = 0; o < OUT; o++) acc += (double)dy[n * OUT + o] * w[o * IN + i];
            double e = fabs(acc - c->din[0][n * IN + i]) / (1.0 + fabs(acc));
            if (e > err) err = e;
        }
    for (int64_t o = 0; o < OUT; o += OUT / 7 + 1)
        for (int64_t i = 0; i < IN; i += IN / 7 + 1) {
            double acc = 0.0;
            for (int64_t n = 0; n < N; n++) acc += (double)dy[n * OUT + o] * x[n * IN + i];
            double e = fabs(acc - c->din[1][o * IN + i]) / (1.0 + fabs(acc));
            if (e > err) err = e;
        }
    return err;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double s[64];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* ------------------------------------------------- reference conv2d */

/* The definition, in double: y[n,o,i,j] = b[o] + sum x[n,c,i*s-p+u,j*s-p+v] w[o,c,u,v];
 * dx, dw, db by the same sums. */
static double check_conv(kcase *c, remat__pool *pool) {
    const remat_graph *g = c->g;
    const remat__node *nd = &g->nodes[c->node];
    const remat__shape *xs = &g->nodes[nd->in[0]].shape, *wsh = &g->nodes[nd->in[1]].shape;
    int64_t N = xs->d[0], C = xs->d[1], H = xs->d[2], W = xs->d[3];
    int64_t O = wsh->d[0], KH = wsh->d[2], KW = wsh->d[3], s = nd->iattr[0], p = nd->iattr[1];
    int64_t OH = nd->shape.d[2], OW = nd->shape.d[3];
    int bias = nd->n_in == 3;
    run_case(c, pool, 1, 0);
    run_case(c, pool, 0, 1);
    const float *x = c->in[0], *w = c->in[1], *b = bias ? c->in[2] : NULL, *dy = c->dout;
    double err = 0.0;
    int64_t nchk = N < 2 ? N : 2; /* the first images are enough to catch an indexing slip */
    double *dx = calloc((size_t)(C * H * W), sizeof *dx);
    for (int64_t n = 0; n < nchk; n++) {
        memset(dx, 0, (size_t)(C * H * W) * sizeof *dx);
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    double acc = b ? b[o] : 0.0, gy = dy[((n * O + o) * OH + i) * OW + j];
                    for (int64_t ci = 0; ci < C; ci++)
                        for (int64_t u = 0; u < KH; u++)
                            for (int64_t v = 0; v < KW; v++) {
                                int64_t ih = i * s - p + u, iw = j * s - p + v;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                double wv = w[((o * C + ci) * KH + u) * KW + v];
                                acc += x[((n * C + ci) * H + ih) * W + iw] * wv;
                                dx[(ci * H + ih) * W + iw] += gy * wv;
                            }
                    double e = fabs(acc - c->out[((n * O + o) * OH + i) * OW + j]) / (1.0 + fabs(acc));
                    if (e > err) err = e;
                }
        for (int64_t e = 0; e < C * H * W; e++) {
            double d = fabs(dx[e] - c->din[0][n * C * H * W + e]) / (1.0 + fabs(dx[e]));
            if (d > err) err = d;
        }
    }
    free(dx);
    /* dw over all images, for a few output channels */
    for (int64_t o = 0; o < O; o += O / 3 + 1)
        for (int64_t ci = 0; ci < C; ci += C / 3 + 1)
            for (int64_t u = 0; u < KH; u++)
                for (int64_t v = 0; v < KW; v++) {
                    double acc = 0.0, mag = 0.0;
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t i = 0; i < OH; i++)
                            for (int64_t j = 0; j < OW; j++) {
                                int64_t ih = i * s - p + u, iw = j * s - p + v;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                double t =
                                    (double)dy[((n * O + o) * OH + i) * OW + j] * x[((n * C + ci) * H + ih) * W + iw];
                                acc += t;
                                mag += fabs(t);
                            }
                    /* relative to the sum of the terms' magnitudes: a sum of
                     * N*OH*OW terms that mostly cancel loses digits in any
                     * float32 order */
                    double d = fabs(acc - c->din[1][((o * C + ci) * KH + u) * KW + v]) / (1.0 + mag) * 1e2;
                    if (d > err) err = d;
                }
    return err;
}

/* ------------------------------------------- reference pooling and relu */

/* PyTorch's max pooling rule, plainly: the running maximum starts at -inf
 * with the window's first in-bounds element; a later element replaces it if
 * strictly greater or NaN. */
static int64_t ref_argmax(const float *xp, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p, int64_t oh,
                          int64_t ow, float *val) {
    int64_t h0 = oh * s - p, w0 = ow * s - p, h1 = h0 + k < H ? h0 + k : H, w1 = w0 + k < W ? w0 + k : W;
    if (h0 < 0) h0 = 0;
    if (w0 < 0) w0 = 0;
    int64_t best = h0 * W + w0;
    float m = -INFINITY;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            float v = xp[ih * W + iw];
            if (v > m || isnan(v)) m = v, best = ih * W + iw;
        }
    *val = m;
    return best;
}

/* Inputs with ties, signed zeros, NaNs and infinities; gradients that
 * already hold -0 and other values. */
static void fill_tricky(float *x, int64_t n, uint32_t seed) {
    static const float special[] = {0.0f, -0.0f, 1.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN};
    fill(x, n, seed);
    uint32_t r = seed;
    for (int64_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        if ((r >> 24) < 64) x[i] = special[(r >> 8) % 8];
        else if ((r >> 24) < 128) x[i] = (float)((int)(r >> 8) % 3); /* ties */
    }
}

static int same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

/* Checks a maxpool or relu case bitwise against the reference. */
static int check_pointwise(kcase *c, remat__pool *pool) {
    const remat_graph *g = c->g;
    const remat__node *nd = &g->nodes[c->node];
    int64_t nx = remat__numel(&g->nodes[nd->in[0]].shape), ny = remat__numel(&nd->shape);
    fill_tricky(c->in[0], nx, 7);
    fill_tricky(c->dout, ny, 8);
    float *ry = xalloc((size_t)ny * 4), *rdx = xalloc((size_t)nx * 4), *d0 = xalloc((size_t)nx * 4);
    fill_tricky(d0, nx, 9);
    for (int64_t i = 0; i < nx; i++) d0[i] = isnan(d0[i]) ? -0.0f : d0[i];
    memcpy(rdx, d0, (size_t)nx * 4);
    if (nd->op == REMAT__OP_RELU) {
        /* PyTorch's relu: NaN stays NaN, and its gradient passes where the
         * output is not <= 0 (NaN included) */
        for (int64_t i = 0; i < ny; i++) ry[i] = c->in[0][i] <= 0.0f ? 0.0f : c->in[0][i];
        for (int64_t i = 0; i < ny; i++)
            if (!(ry[i] <= 0.0f)) rdx[i] += c->dout[i];
    } else {
        const remat__shape *xs = &g->nodes[nd->in[0]].shape;
        int64_t planes = xs->d[0] * xs->d[1], H = xs->d[2], W = xs->d[3], OH = nd->shape.d[2], OW = nd->shape.d[3];
        for (int64_t pl = 0; pl < planes; pl++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t i = ref_argmax(c->in[0] + pl * H * W, H, W, nd->iattr[0], nd->iattr[1], nd->iattr[2], oh,
                                           ow, &ry[(pl * OH + oh) * OW + ow]);
                    rdx[pl * H * W + i] += c->dout[(pl * OH + oh) * OW + ow];
                }
    }
    run_case(c, pool, 1, 0);
    memcpy(c->din[0], d0, (size_t)nx * 4);
    run_case(c, pool, 0, 0);
    int ok = same_bits(ry, c->out, ny) && same_bits(rdx, c->din[0], nx);
    free(ry), free(rdx), free(d0);
    fill(c->in[0], nx, 1);
    fill(c->dout, ny, 99);
    return ok;
}

/* What REMAT_PRODUCTS unset picks for a case on the pool's threads: for a
 * convolution, oneDNN's direct primitives or im2col; for a linear layer,
 * whether its forward product goes to oneDNN (its matmul primitive). */
static int rule_picks(const kcase *c) {
    const remat_graph *g = c->g;
    const remat__node *n = &g->nodes[c->node];
    const remat__shape *x = &g->nodes[n->in[0]].shape;
    if (n->op == REMAT__OP_LINEAR) return remat__dnnl_gemm_use(x->d[0], n->shape.d[1], x->d[1]);
    const remat__shape *w = &g->nodes[n->in[1]].shape;
    remat__conv_dims cd = {x->d[0],       x->d[1],       x->d[2],     x->d[3],     w->d[0],      w->d[2], w->d[3],
                           n->shape.d[2], n->shape.d[3], n->iattr[0], n->iattr[1], n->n_in == 3, 0,       0};
    size_t f, b;
    set_mode(2);
    return remat__dnnl_conv_use(&cd, remat__node_threads(g, n, nthreads_global), &f, &b);
}

/* --bf16: each product through oneDNN's bf16 kernels (what the bf16
 * policy runs natively) against the float32 kernel its rule picks (what
 * the policy's float32 views run, their conversions not counted). */
static void bf16_table(int rounds, double peak) {
    printf("\nbf16 products, median of %d rounds: %%peak (float32 GEMM peak) of the float32 kernel the rule "
           "picks (fp32) and of oneDNN's bf16 kernel (bf16), ratio = fp32 time / bf16 time, and what the bf16 "
           "policy runs (native: bf16 kernels, views: float32 views)\n",
           rounds);
    printf("%-34s %7s %7s %6s %7s %7s %6s %6s\n", "op", "fwd fp32", "bf16", "ratio", "bwd fp32", "bf16", "ratio",
           "policy");
    for (int i = 0; i < ncases; i++) {
        kcase *c = &cases[i];
        if (!c->dt) continue;
        int dn = rule_picks(c);
        double tm[2][2];
        for (int d = 0; d < 2; d++) tm[0][d] = median(c->t[dn][d], rounds), tm[1][d] = median(c->t[2][d], rounds);
        const remat__node *n = &c->g->nodes[c->node];
        size_t f, b;
        set_mode(2);
        int native = remat__ops[n->op]->bf16_ws(c->g, n, c->dt, remat__node_threads(c->g, n, nthreads_global), &f, &b);
        printf("%-34s %6.0f%% %6.0f%% %6.2f %6.0f%% %6.0f%% %6.2f %6s\n", c->name,
               100.0 * c->flops_fwd / tm[0][0] / 1e9 / peak, 100.0 * c->flops_fwd / tm[1][0] / 1e9 / peak,
               tm[0][0] / tm[1][0], 100.0 * c->flops_bwd / tm[0][1] / 1e9 / peak,
               100.0 * c->flops_bwd / tm[1][1] / 1e9 / peak, tm[0][1] / tm[1][1], native ? "native" : "views");
    }
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
    int threads = 2, rounds = 5, check = 1, check_only = 0, with_bf16 = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--no-check")) check = 0;
        else if (!strcmp(argv[i], "--check-only")) check_only = 1;
        else if (!strcmp(argv[i], "--cpu")) use_cpu_clock = 1;
        else if (!strcmp(argv[i], "--bf16")) with_bf16 = 1;
        else {
            fprintf(stderr, "usage: bench_kernels [--threads T] [--rounds R] [--only SUBSTRING] [--no-check | "
                            "--check-only] [--cpu] [--bf16]\n");
            return 2;
        }
    }
    if (threads < 1) threads = 1;
    if (rounds < 1) rounds = 1;
    if (rounds > 64) rounds = 64;
    for (int m = 0; m < 3; m++) {
        set_mode(m);
        if (remat__dnnl_create(&mode_ctx[m]) != REMAT_OK) return 1;
    }
    set_mode(2);
    if (use_cpu_clock && threads != 1) {
        fprintf(stderr, "bench_kernels: --cpu needs --threads 1\n");
        return 2;
    }
    remat__pool *pool;
    if (remat__pool_create(&pool, threads) != REMAT_OK) return 1;
    nthreads_global = threads;

    struct {
        const char *name;
        int64_t n, c, h, o;
        int k, s, p, bias;
    } convs[] = {
        {"cnn conv 1->32 3x3 28x28 b128", 128, 1, 28, 32, 3, 1, 1, 1},
        {"cnn conv 32->64 3x3 28x28 b128", 128, 32, 28, 64, 3, 1, 1, 1},
        {"cnn conv 64->64 3x3 14x14 b128", 128, 64, 14, 64, 3, 1, 1, 1},
        {"cnn conv 3->32 3x3 32x32 b128", 128, 3, 32, 32, 3, 1, 1, 1},
        {"r50 stem 3->64 7x7/2 224 b16", 16, 3, 224, 64, 7, 2, 3, 0},
        {"r50 conv 64->64 3x3 56x56 b16", 16, 64, 56, 64, 3, 1, 1, 0},
        {"r50 conv 256->64 1x1 56x56 b16", 16, 256, 56, 64, 1, 1, 0, 0},
        {"r50 conv 64->256 1x1 56x56 b16", 16, 64, 56, 256, 1, 1, 0, 0},
        {"r50 conv 128->128 3x3/2 56 b16", 16, 128, 56, 128, 3, 2, 1, 0},
        {"r50 conv 256->256 3x3 14x14 b16", 16, 256, 14, 256, 3, 1, 1, 0},
        {"r50 conv 1024->256 1x1 14 b16", 16, 1024, 14, 256, 1, 1, 0, 0},
        {"r50 conv 512->512 3x3 7x7 b16", 16, 512, 7, 512, 3, 1, 1, 0},
        {"dn conv 128->32 3x3 32x32 b64", 64, 128, 32, 32, 3, 1, 1, 0},
        {"dn conv 256->128 1x1 16x16 b64", 64, 256, 16, 128, 1, 1, 0, 0},
        /* DenseNet-BC (k 12): a dense layer's bottleneck and its 3x3 */
        {"dnbc conv 120->48 1x1 32x32 b64", 64, 120, 32, 48, 1, 1, 0, 0},
        {"dnbc conv 48->12 3x3 32x32 b64", 64, 48, 32, 12, 3, 1, 1, 0},
        {"dnbc conv 48->12 3x3 8x8 b64", 64, 48, 8, 12, 3, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
        if (only && !strstr(convs[i].name, only)) continue;
        remat_graph *g;
        remat_graph_create(&g);
        remat_node nd = conv_node(g, convs[i].n, convs[i].c, convs[i].h, convs[i].o, convs[i].k, convs[i].s, convs[i].p,
                                  convs[i].bias);
        add_case(convs[i].name, g, nd);
        if (with_bf16) add_bf16(&cases[ncases - 1]);
    }
    struct {
        const char *name;
        int64_t n, in, out;
    } lins[] = {
        {"cnn fc 3136->256 b128", 128, 3136, 256},      {"cnn fc 256->10 b128", 128, 256, 10},
        {"vgg fc 512->512 b128", 128, 512, 512},        {"gpt2 qkv 768->2304 b4x256", 1024, 768, 2304},
        {"gpt2 proj 768->768 b4x256", 1024, 768, 768},  {"gpt2 mlp 768->3072 b4x256", 1024, 768, 3072},
        {"gpt2 mlp 3072->768 b4x256", 1024, 3072, 768},
    };
    for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) {
        if (only && !strstr(lins[i].name, only)) continue;
        remat_graph *g;
        remat_graph_create(&g);
        int64_t xd[2] = {lins[i].n, lins[i].in};
        remat_node x = remat_input(g, "x", REMAT_F32, 2, xd);
        add_case(lins[i].name, g, remat_linear(g, "fc", x, lins[i].out, 1));
        if (with_bf16) add_bf16(&cases[ncases - 1]);
    }
    /* Memory-bound ops: their "FLOPs" are the op table's. */
    struct {
        const char *name;
        int kind; /* 0 relu, 1 maxpool 2/2, 2 batchnorm, 3 dropout, 4 maxpool 3/2 p1, 5 maxpool 3/1 p1 */
        int64_t n, c, h;
    } pts[] = {
        {"relu (128,64,28,28)", 0, 128, 64, 28},
        {"maxpool 2/2 (128,64,28,28)", 1, 128, 64, 28},
        {"dropout .25 (128,64,14,14)", 3, 128, 64, 14},
        {"batchnorm (16,64,56,56)", 2, 16, 64, 56},
        {"maxpool 3/2 p1 (16,64,112,112)", 4, 16, 64, 112},
        {"maxpool 3/1 p1 (1,3,600,600)", 5, 1, 3, 600}, /* rows longer than a chunk */
    };
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
        if (only && !strstr(pts[i].name, only)) continue;
        remat_graph *g;
        remat_graph_create(&g);
        int64_t xd[4] = {pts[i].n, pts[i].c, pts[i].h, pts[i].h};
        remat_node x = remat_input(g, "x", REMAT_F32, 4, xd), y;
        switch (pts[i].kind) {
        case 0: y = remat_relu(g, x); break;
        case 1: y = remat_maxpool2d(g, x, 2, 2, 0); break;
        case 2: y = remat_batchnorm2d(g, "bn", x); break;
        case 3: y = remat_dropout(g, x, 0.25f); break;
        case 4: y = remat_maxpool2d(g, x, 3, 2, 1); break;
        default: y = remat_maxpool2d(g, x, 3, 1, 1); break;
        }
        add_case(pts[i].name, g, y);
    }

    if (check) {
        int bad = 0;
        for (int m = 0; m < 2; m++) {
            set_mode(m);
            for (int i = 0; i < ncases; i++) {
                int op = cases[i].g->nodes[cases[i].node].op;
                if (!cases[i].product) continue;
                double e = op == REMAT__OP_CONV2D ? check_conv(&cases[i], pool) : check_linear(&cases[i], pool);
                if (e > 1e-4) {
                    fprintf(stderr, "bench_kernels: %s (%s) differs from the reference (relative error %.3g)\n",
                            cases[i].name, mode_env[m], e);
                    bad = 1;
                }
            }
        }
        set_mode(2);
        for (int i = 0; i < ncases; i++) {
            int op = cases[i].g->nodes[cases[i].node].op;
            if (op != REMAT__OP_RELU && op != REMAT__OP_MAXPOOL2D) continue;
            if (!check_pointwise(&cases[i], pool)) {
                fprintf(stderr, "bench_kernels: %s differs bitwise from the reference\n", cases[i].name);
                bad = 1;
            }
        }
        if (bad) return 1;
        printf("kernels agree with the references: convolution and linear, im2col+OpenBLAS and oneDNN "
               "(relative error <= 1e-4), max pooling and "
               "relu (bitwise, with ties, signed zeros, NaNs and infinities)\n");
    }
    if (check_only) {
        for (int m = 0; m < 3; m++) remat__dnnl_destroy(mode_ctx[m]);
        remat__pool_destroy(pool);
        free_cases();
        return check ? 0 : 2;
    }

    /* GEMM peak, both threading models. */
    gemm_ctx gc = {1024, NULL, NULL, NULL};
    size_t nn = (size_t)gc.n * (size_t)gc.n;
    gc.a = xalloc(nn * 4 * (size_t)threads);
    gc.b = xalloc(nn * 4 * (size_t)threads);
    gc.c = xalloc(nn * 4 * (size_t)threads);
    fill(gc.a, (int64_t)nn * threads, 1);
    fill(gc.b, (int64_t)nn * threads, 2);
    int big = 2048;
    float *A = xalloc((size_t)big * big * 4), *B = xalloc((size_t)big * big * 4), *Cm = xalloc((size_t)big * big * 4);
    fill(A, (int64_t)big * big, 3);
    fill(B, (int64_t)big * big, 4);
    double best_pool = 1e30, best_ob = 1e30;
    openblas_set_num_threads(1);

    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        remat__pool_run(pool, gemm_task, &gc);
        double t = now_s() - t0;
        if (t < best_pool) best_pool = t;
        openblas_set_num_threads(threads);
        t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, big, big, big, 1.0f, A, big, B, big, 0.0f, Cm, big);
        t = now_s() - t0;
        openblas_set_num_threads(1);
        if (t < best_ob) best_ob = t;
        for (int i = 0; i < ncases; i++) {
            kcase *c = &cases[i];
            if (r == 0) c->best_fwd = c->best_bwd = 1e30;
            if (c->product) {
                for (int m = 0; m < 2 + (c->dt != NULL); m++) {
                    set_mode(m < 2 ? m : 3);
                    c->t[m][0][r] = run_case(c, pool, 1, 0);
                    c->t[m][1][r] = run_case(c, pool, 0, 1);
                }
                set_mode(2);
                continue;
            }
            t = run_case(c, pool, 1, 0);
            if (t < c->best_fwd) c->best_fwd = t;
            t = run_case(c, pool, 0, 1);
            if (t < c->best_bwd) c->best_bwd = t;
        }
    }
    double peak = 2.0 * (double)gc.n * gc.n * gc.n * threads / best_pool / 1e9;
    double peak_ob = 2.0 * (double)big * big * big / best_ob / 1e9;
    printf("threads %d, best of %d rounds, %s time\n", threads, rounds, use_cpu_clock ? "CPU" : "wall");
    printf(
        "GEMM peak: %d x sgemm 1024^3 on the pool %.1f GFLOP/s; one sgemm 2048^3 on %d OpenBLAS threads %.1f GFLOP/s\n",
        threads, peak, threads, peak_ob);
    char dv[128];
    printf("OpenBLAS core %s; %s\n", openblas_get_corename(), remat__dnnl_describe(dv, sizeof dv));
    printf("\nproducts, median of %d rounds: %%peak of im2col+OpenBLAS (blas) and oneDNN (dnnl), ratio = blas "
           "time / dnnl time, and what the rule picks\n",
           rounds);
    printf("%-34s %7s %7s %6s %7s %7s %6s %5s\n", "op", "fwd blas", "dnnl", "ratio", "bwd blas", "dnnl", "ratio",
           "rule");
    for (int i = 0; i < ncases; i++) {
        kcase *c = &cases[i];
        if (!c->product) continue;
        double tm[2][2];
        for (int m = 0; m < 2; m++)
            for (int d = 0; d < 2; d++) tm[m][d] = median(c->t[m][d], rounds);
        double pf[2], pb[2];
        for (int m = 0; m < 2; m++) {
            pf[m] = 100.0 * c->flops_fwd / tm[m][0] / 1e9 / peak;
            pb[m] = 100.0 * c->flops_bwd / tm[m][1] / 1e9 / peak;
        }
        printf("%-34s %6.0f%% %6.0f%% %6.2f %6.0f%% %6.0f%% %6.2f %5s\n", c->name, pf[0], pf[1], tm[0][0] / tm[1][0],
               pb[0], pb[1], tm[0][1] / tm[1][1], rule_picks(c) ? "dnnl" : "blas");
    }
    if (with_bf16) bf16_table(rounds, peak);
    printf("\nother kernels, best of %d rounds\n", rounds);
    printf("%-34s %10s %9s %7s %10s %9s %7s\n", "op", "fwd ms", "GFLOP/s", "%peak", "bwd ms", "GFLOP/s", "%peak");
    for (int i = 0; i < ncases; i++) {
        kcase *c = &cases[i];
        if (c->product) continue;
        double gf = c->flops_fwd / c->best_fwd / 1e9, gb = c->flops_bwd / c->best_bwd / 1e9;
        printf("%-34s %10.2f %9.1f %6.0f%% %10.2f %9.1f %6.0f%%\n", c->name, c->best_fwd * 1e3, gf, 100.0 * gf / peak,
               c->best_bwd * 1e3, gb, 100.0 * gb / peak);
    }
    printf("(backward FLOPs counted as twice the forward's: dx and dw; the first cnn conv has no dx in a "
           "model, here it does)\n");
    for (int m = 0; m < 3; m++) remat__dnnl_destroy(mode_ctx[m]);
    remat__pool_destroy(pool);
    free_cases();
    free(gc.a), free(gc.b), free(gc.c), free(A), free(B), free(Cm);
    return 0;
}
