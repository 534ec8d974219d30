/* test_pw16.c: the bf16 policy's native elementwise CPU kernels
 * (src/ops/pw16.h), bit for bit.
 *
 * - Against the views: relu, add, mul, dropout (training, and eval) and
 *   gelu (both forms), and reshape, run through the op table with kctx.dt set (the
 *   values as stored, on 3 threads, on the kernels remat__pw16_best
 *   chose), give the bits the float32 views of exec/views.c give (the
 *   float32 kernel on widened copies, the output rounded, each bf16 input
 *   gradient computed into zeros and added with REMAT__CVT_ACC_BF16): the
 *   output, and input gradients that already hold values. Every dtype mix
 *   the policy makes (all bf16; a float32 and a bf16 input, float32 out),
 *   and add(x, x) and mul(x, x), one gradient for both inputs.
 * - maxpool2d and avgpool2d (3x3 stride 2 padding 1, and 2x2 stride 2),
 *   and global_avgpool, on bf16 x (3 threads, planes through the
 *   workspace their bf16_ws sized), against the same views.
 * - concat (4-D and 2-D; all bf16, bf16 and float32 inputs mixed, an
 *   input twice), slice (each dimension), permute (one keeping the last
 *   dimension, one moving it), add_broadcast and mse (either input or
 *   both bf16), softmax (rows through its workspace) and embedding (a
 *   bf16 table; ids repeated and out of range), on 1
 *   and 3 threads, against the same views: the output, and every input's
 *   gradient, whole (the views add a slice's zeroed gradient over all of
 *   x, so even the elements outside it are rounded again).
 * - Every vector level this CPU has (AVX2, AVX-512, AVX-512 BF16) against
 *   the scalar reference, on a range that starts off a vector boundary
 *   and ends in a tail, the same mixes; and its conversions (what the
 *   CPU backend's views and the bf16 planes of BatchNorm and the poolings
 *   convert with) against remat__convert_range, every kind.
 * - The plan: on cnn, resnet18 and gpt2 in bf16, every elementwise and
 *   plane-wise node with a bf16 value is native, the elementwise ones
 *   with no workspace in either pass (the views' bytes they took before,
 *   and the pools' planes now, are printed); on densenet-bc every concat
 *   with a bf16 input, with none.
 * The data: random bit patterns (NaNs, infinities and denormals among
 *   them), values near 1 whose sums and products round to even, and the
 *   edges (signed zeros, the smallest and largest denormals and normals,
 *   the largest finite, infinities, quiet and signalling NaNs). Where two
 *   NaNs meet in one operation the result's payload is whichever operand
 *   the compiler put first (x86 returns the first's), in the float32
 *   kernel and the views' accumulation as in these: so wherever two NaNs
 *   can meet (an output gradient and a gradient, gelu's derivative and
 *   its output gradient, two inputs) the data hold one NaN, x86's own
 *   (0xffc00000, what an invalid operation makes); relu's and dropout's
 *   input, which meets nothing, holds any NaN (quiet and signalling).
 */
#include "../src/ops/pw16.h"
#include "../src/plan/schedule.h"
#include "check.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1999 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static const uint16_t edges16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x8080, 0x7f7f, 0xff7f,
                                   0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x3f80, 0x3b80, 0x3c00, 0x3f81, 0xbf80};
static const uint32_t edges32[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x00008000u, 0x00018000u,
                                   0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f7f8000u, 0xff7f7fffu, 0x7f800000u,
                                   0xff800000u, 0x7fc00000u, 0x7f800001u, 0x3f800000u};

static int is_nan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* A float32 test value's bits; one_nan: every NaN 0xffc00000, the NaN
 * x86 makes of an invalid operation (inf - inf, 0 * inf). */
static uint32_t pick32(int one_nan) {
    uint32_t r = next() % 8, u;
    if (r == 0) u = edges32[next() % (sizeof edges32 / sizeof *edges32)];
    else if (r < 4) u = next() << 16 | next();                                        /* any pattern */
    else u = (next() & 1u) << 31 | (120u + next() % 16) << 23 | (next() & 0x7fffffu); /* near 1 */
    return one_nan && is_nan32(u) ? 0xffc00000u : u;
}

/* A bf16 test value: the same, rounded (or an edge as it is). */
static uint16_t pick16(int one_nan) {
    if (next() % 8 == 0) {
        uint16_t e = edges16[next() % (sizeof edges16 / sizeof *edges16)];
        return one_nan && is_nan32((uint32_t)e << 16) ? 0xffc0 : e;
    }
    uint32_t u = pick32(one_nan);
    return (uint16_t)(u >> 16); /* truncated: any upper half is a bf16 */
}

/* A value of n elements stored in bf16 or float32, filled. */
typedef struct {
    int b16;
    void *p;
} val;

static val make(int b16, int one_nan) {
    val v = {b16, malloc((size_t)N * (b16 ? 2 : 4))};
    for (int i = 0; i < N; i++)
        if (b16) ((uint16_t *)v.p)[i] = pick16(one_nan);
        else ((uint32_t *)v.p)[i] = pick32(one_nan);
    return v;
}

static val copy(val v) {
    val c = {v.b16, malloc((size_t)N * (v.b16 ? 2 : 4))};
    memcpy(c.p, v.p, (size_t)N * (v.b16 ? 2 : 4));
    return c;
}

static int same(val a, val b) {
    if (!memcmp(a.p, b.p, (size_t)N * (a.b16 ? 2 : 4))) return 1;
    for (int i = 0; i < N; i++) {
        uint32_t x = a.b16 ? ((uint16_t *)a.p)[i] : ((uint32_t *)a.p)[i];
        uint32_t y = b.b16 ? ((uint16_t *)b.p)[i] : ((uint32_t *)b.p)[i];
        if (x != y) {
            fprintf(stderr, "  element %d: %#x against %#x\n", i, x, y);
            break;
        }
    }
    return 0;
}

/* v as float32 (a bf16 widened): a view. */
static float *widen(val v) {
    float *f = malloc((size_t)N * 4);
    if (v.b16) remat__convert_range(f, v.p, 0, N, REMAT__CVT_UP);
    else memcpy(f, v.p, (size_t)N * 4);
    return f;
}

/* ------------------------------------------------ against the views */

/* One op's node on inputs of dtypes b16[0..1] (alias: one input twice). */
typedef struct {
    const char *name;
    int kind; /* 0 relu, 1 add, 2 mul, 3 dropout, 4 gelu, 5 reshape */
    int arg;  /* gelu: tanh form; dropout: eval */
} opcase;

static remat_node build(remat_graph *g, const opcase *c, int alias, remat_node *x) {
    int64_t d[1] = {N};
    x[0] = remat_input(g, "x0", REMAT_F32, 1, d);
    x[1] = alias ? x[0] : remat_input(g, "x1", REMAT_F32, 1, d);
    switch (c->kind) {
    case 0: return remat_relu(g, x[0]);
    case 1: return remat_add(g, x[0], x[1]);
    case 2: return remat_mul(g, x[0], x[1]);
    case 3: return remat_dropout(g, x[0], 0.3f);
    case 4: return remat_gelu(g, x[0], c->arg);
    default: {
        int64_t r[2] = {1, N};
        return remat_reshape(g, x[0], 2, r);
    }
    }
}

static void run(const remat__kctx *k, int backward, int nth) {
    const remat__op *op = remat__ops[k->node->op];
    for (int ith = 0; ith < nth; ith++) (backward ? op->backward : op->forward)(k, ith, nth);
}

/* The native forward and backward against the views', on dtypes b16 of
 * the inputs (the output's by the op's rule); 1 when the bits agree. */
static int versus_views(const opcase *c, const int b16[2], int alias) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    remat_node x[2], y = build(g, c, alias, x);
    CHECK_OK(remat_graph_status(g));
    const remat__node *n = &g->nodes[y];
    int n_in = n->n_in, two = c->kind == 1 || c->kind == 2;
    uint8_t dt[4];
    dt[x[0]] = b16[0] ? REMAT_BF16 : REMAT_F32;
    dt[x[1]] = b16[1] ? REMAT_BF16 : REMAT_F32;
    int out16 = two ? (b16[0] && b16[1]) : b16[0];
    dt[y] = out16 ? REMAT_BF16 : REMAT_F32;
    size_t fb = 1, bb = 1;
    CHECK(remat__ops[n->op]->bf16_ws(g, n, dt, 3, &fb, &bb) && fb == 0 && bb == 0);
    val in[2], din[2], dout = make(out16, 1), yv = {out16, malloc((size_t)N * (out16 ? 2 : 4))};
    for (int j = 0; j < n_in; j++) {
        in[j] = alias && j ? in[0] : make(b16[j], two || c->kind == 4);
        din[j] = alias && j ? din[0] : make(b16[j], 1);
    }
    val din0[2] = {copy(din[0]), n_in > 1 && !alias ? copy(din[1]) : copy(din[0])};
    remat__tensor ti[2], to = {yv.p, &n->shape};
    for (int j = 0; j < n_in; j++) ti[j] = (remat__tensor){in[j].p, &g->nodes[n->in[j]].shape};
    remat__kctx k = {.graph = g,
                     .node = n,
                     .in = {&ti[0], &ti[1]},
                     .out = &to,
                     .dt = dt,
                     .train = !c->arg || c->kind != 3,
                     .first = 1,
                     .seed = 11,
                     .step = 3,
                     .node_id = y,
                     .elem0 = 37,
                     .dout = dout.p};
    for (int j = 0; j < n_in; j++) k.din[j] = din[j].p;
    run(&k, 0, 3);
    run(&k, 1, 3);
    /* the views' way, on one thread */
    float *fin[2], *fy = malloc((size_t)N * 4), *fdout = widen(dout), *fdin[2];
    for (int j = 0; j < n_in; j++) {
        fin[j] = widen(in[j]);
        ti[j].data = fin[j];
        fdin[j] = b16[j] ? calloc(N, 4) : din0[alias ? 0 : j].p; /* a float32 gradient: in place */
        k.din[j] = fdin[j];
    }
    to.data = fy, k.dt = NULL, k.dout = fdout;
    run(&k, 0, 1);
    val yref = {out16, malloc((size_t)N * (out16 ? 2 : 4))};
    if (out16) remat__convert_range(yref.p, fy, 0, N, REMAT__CVT_DOWN);
    else memcpy(yref.p, fy, (size_t)N * 4);
    int ok = same(yv, yref);
    float *fys = widen(yv); /* the saved output's view (relu reads it) */
    to.data = fys;
    run(&k, 1, 1);
    for (int j = 0; j < n_in; j++)
        if (b16[j]) remat__convert_range(din0[alias ? 0 : j].p, fdin[j], 0, N, REMAT__CVT_ACC_BF16);
    ok &= same(din[0], din0[0]) && (n_in < 2 || alias || same(din[1], din0[1]));
    CHECK_MSG(ok, "%s%s (inputs %s, %s): native bf16 differs from the float32 views (output %s)", c->name,
              alias ? "(x, x)" : "", b16[0] ? "bf16" : "f32", b16[1] ? "bf16" : "f32",
              same(yv, yref) ? "same" : "differs");
    for (int j = 0; j < n_in; j++) {
        free(fin[j]);
        if (b16[j]) free(fdin[j]);
        if (!(alias && j)) free(in[j].p), free(din[j].p);
    }
    free(din0[0].p), free(din0[1].p), free(dout.p), free(yv.p), free(yref.p), free(fy), free(fys), free(fdout);
    remat_graph_destroy(g);
    return ok;
}

static void views(void) {
    static const opcase cases[] = {{"relu", 0, 0},           {"add", 1, 0},  {"mul", 2, 0},         {"dropout", 3, 0},
                                   {"dropout (eval)", 3, 1}, {"gelu", 4, 0}, {"gelu (tanh)", 4, 1}, {"reshape", 5, 0}};
    int ok = 1, runs = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int two = cases[c].kind == 1 || cases[c].kind == 2;
        static const int mixes[3][2] = {{1, 1}, {0, 1}, {1, 0}};
        for (int m = 0; m < (two ? 3 : 1); m++, runs++) ok &= versus_views(&cases[c], mixes[m], 0);
        if (two) ok &= versus_views(&cases[c], mixes[0], 1), runs++;
    }
    if (ok)
        printf("views: relu, add, mul, dropout, gelu and reshape on bf16 as stored (%s kernels, 3 threads) give the "
               "float32 "
               "views' bits (%d cases of %d elements)\n",
               remat__pw16_best()->isa, runs, N);
}

/* One pool node's native kernels against the views' on x of shape
 * (2, 3, 9, 7) (kind 0, 1: maxpool2d 3/2/1 and 2/2/0; 2, 3: avgpool2d the
 * same; 4: global_avgpool); 1 when the bits agree. */
static int pool_versus_views(int kind) {
    static const char *const names[] = {"maxpool2d 3x3/2 pad 1", "maxpool2d 2x2/2", "avgpool2d 3x3/2 pad 1",
                                        "avgpool2d 2x2/2", "global_avgpool"};
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[4] = {2, 3, 9, 7};
    remat_node x = remat_input(g, "x", REMAT_F32, 4, xd), y;
    int k3 = kind % 2 == 0;
    if (kind < 2) y = remat_maxpool2d(g, x, k3 ? 3 : 2, 2, k3);
    else if (kind < 4) y = remat_avgpool2d(g, x, k3 ? 3 : 2, 2, k3);
    else y = remat_global_avgpool(g, x);
    CHECK_OK(remat_graph_status(g));
    const remat__node *n = &g->nodes[y];
    uint8_t dt[2] = {REMAT_BF16, REMAT_BF16};
    size_t fb = 0, bb = 0;
    CHECK(remat__ops[n->op]->bf16_ws(g, n, dt, 3, &fb, &bb));
    int64_t nx = remat__numel(&g->nodes[x].shape), ny = remat__numel(&n->shape);
    uint16_t *xb = malloc((size_t)nx * 2), *yb = malloc((size_t)ny * 2), *yv = malloc((size_t)ny * 2);
    uint16_t *dyb = malloc((size_t)ny * 2), *dxb = malloc((size_t)nx * 2), *dxv = malloc((size_t)nx * 2);
    float *xf = malloc((size_t)nx * 4), *yf = malloc((size_t)ny * 4), *dyf = malloc((size_t)ny * 4);
    float *dxf = calloc((size_t)nx, 4);
    unsigned char *ws = malloc(fb > bb ? fb : bb ? bb : 1);
    for (int64_t i = 0; i < nx; i++) xb[i] = pick16(kind >= 2), dxb[i] = dxv[i] = pick16(1);
    for (int64_t i = 0; i < ny; i++) dyb[i] = pick16(1);
    remat__convert_range(xf, xb, 0, nx, REMAT__CVT_UP);
    remat__convert_range(dyf, dyb, 0, ny, REMAT__CVT_UP);
    remat__tensor ti = {xb, &g->nodes[x].shape}, to = {yb, &n->shape};
    remat__kctx k = {.graph = g,
                     .node = n,
                     .in = {&ti},
                     .out = &to,
                     .dt = dt,
                     .ws = ws,
                     .train = 1,
                     .dout = (float *)dyb,
                     .din = {(float *)dxb}};
    run(&k, 0, 3);
    run(&k, 1, 3);
    ti.data = xf, to.data = yf, k.dt = NULL, k.ws = NULL, k.dout = dyf, k.din[0] = dxf; /* the views' way */
    run(&k, 0, 1);
    run(&k, 1, 1);
    remat__convert_range(yv, yf, 0, ny, REMAT__CVT_DOWN);
    remat__convert_range(dxv, dxf, 0, nx, REMAT__CVT_ACC_BF16);
    int ok = !memcmp(yb, yv, (size_t)ny * 2) && !memcmp(dxb, dxv, (size_t)nx * 2);
    CHECK_MSG(ok, "%s: bf16 as stored differs from the float32 views (output %s)", names[kind],
              memcmp(yb, yv, (size_t)ny * 2) ? "differs" : "same");
    free(xb), free(yb), free(yv), free(dyb), free(dxb), free(dxv), free(xf), free(yf), free(dyf), free(dxf), free(ws);
    remat_graph_destroy(g);
    return ok;
}

static void pools(void) {
    int ok = 1;
    for (int rep = 0; rep < 4; rep++)
        for (int kind = 0; kind < 5; kind++) ok &= pool_versus_views(kind);
    if (ok)
        printf("pools: maxpool2d, avgpool2d (3x3/2 pad 1, 2x2/2) and global_avgpool on bf16 as stored (3 threads) "
               "give the float32 views' bits\n");
}

/* ------------------------------ concat, slice, permute, add_broadcast */

/* A moderate float32 (2^-4 <= |v| < 4, either sign): attention's
 * products and softmaxes of these stay finite, so its bits are compared
 * on numbers, not on NaNs. */
static uint32_t mild32(void) { return (next() & 1u) << 31 | (123u + next() % 6) << 23 | (next() & 0x7fffffu); }

/* A value of n elements in bf16 or float32, filled with test values
 * (data: 0 any, 1 x86's one NaN, 2 moderate numbers only). */
static void *fill(int b16, int64_t n, int data) {
    void *p = malloc((size_t)n * (b16 ? 2 : 4));
    for (int64_t i = 0; i < n; i++)
        if (data == 2 && b16) ((uint16_t *)p)[i] = (uint16_t)(mild32() >> 16);
        else if (data == 2) ((uint32_t *)p)[i] = mild32();
        else if (b16) ((uint16_t *)p)[i] = pick16(data);
        else ((uint32_t *)p)[i] = pick32(data);
    return p;
}

static void *dup_bytes(const void *p, size_t bytes) {
    void *c = malloc(bytes);
    memcpy(c, p, bytes);
    return c;
}

/* Node y of g on its values as stored (dt by node id, nth threads, the
 * workspace its bf16_ws sized) against the views' way (each bf16 input
 * widened, the float32 kernel on one thread, a bf16 output rounded, each
 * bf16 input's gradient computed into zeros per input and added with
 * REMAT__CVT_ACC_BF16 in input order; for a product, REMAT__AC_LOW, a
 * float32 input rounded through bf16 too and its gradient computed into
 * zeros and added with REMAT__CVT_ACC_F32); 1 when the output, the aux
 * and every input's gradient (already holding values) agree bit for bit.
 * data: what the inputs and gradients hold (fill's: 1, x86's one NaN,
 * where the op adds two values; 2, moderate numbers). */
static int node_versus_views(remat_graph *g, remat_node y, const uint8_t *dt, int nth, int data, const char *what) {
    const remat__node *n = &g->nodes[y];
    const remat__op *op = remat__ops[n->op];
    int product = op->autocast == REMAT__AC_LOW, gdata = data == 2 ? 2 : 1;
    enum { MAXN = 16 };
    CHECK_MSG(g->n <= MAXN, "%s: %d nodes, the test holds %d", what, (int)g->n, MAXN);
    if (g->n > MAXN) return 0;
    void *val[MAXN] = {0}, *din[MAXN] = {0}, *dref[MAXN] = {0};
    float *fval[MAXN] = {0}, *fdin[REMAT__MAX_IN] = {0};
    size_t bytes[MAXN] = {0};
    for (int i = 0; i < n->n_in; i++) {
        int32_t u = n->in[i];
        if (val[u]) continue;
        int64_t c = remat__numel(&g->nodes[u].shape);
        if (g->nodes[u].dtype == REMAT_I32) { /* embedding's ids: rows 0..num-1, and -1 and num (out of range) */
            int64_t num = g->nodes[n->in[1]].shape.d[0];
            int32_t *ids = malloc((size_t)c * 4);
            for (int64_t t = 0; t < c; t++) ids[t] = (int32_t)(next() % (uint32_t)(num + 2)) - 1;
            val[u] = ids, fval[u] = dup_bytes(ids, (size_t)c * 4);
            continue;
        }
        bytes[u] = (size_t)c * (dt[u] == REMAT_BF16 ? 2 : 4);
        val[u] = fill(dt[u] == REMAT_BF16, c, data);
        din[u] = fill(dt[u] == REMAT_BF16, c, gdata);
        for (int64_t e = 0; e < c; e += 4) /* -0 often: a gradient the views add 0 to becomes +0 */
            if (dt[u] == REMAT_BF16) ((uint16_t *)din[u])[e] = 0x8000;
            else ((uint32_t *)din[u])[e] = 0x80000000u;
        dref[u] = dup_bytes(din[u], bytes[u]);
        fval[u] = malloc((size_t)c * 4);
        if (dt[u] == REMAT_BF16) remat__convert_range(fval[u], val[u], 0, c, REMAT__CVT_UP);
        else if (product) remat__convert_range(fval[u], val[u], 0, c, REMAT__CVT_ROUND);
        else memcpy(fval[u], val[u], bytes[u]);
    }
    int64_t ny = remat__numel(&n->shape);
    int y16 = dt[y] == REMAT_BF16;
    size_t ybytes = (size_t)ny * (y16 ? 2 : 4), fb = 1, bb = 1;
    void *yv = malloc(ybytes), *dy = fill(y16, ny, gdata), *yref = malloc(ybytes);
    size_t abytes = op->aux_bytes ? op->aux_bytes(g, n) : 0;
    void *aux = calloc(abytes + 1, 1), *aref = calloc(abytes + 1, 1);
    int native = op->bf16_ws && op->bf16_ws(g, n, dt, nth, &fb, &bb);
    CHECK_MSG(native, "%s: no kernels on bf16 as stored", what);
    void *ws = malloc((fb > bb ? fb : bb) + 1);
    remat__tensor ti[REMAT__MAX_IN], to = {yv, &n->shape};
    remat__kctx k = {.graph = g,
                     .node = n,
                     .node_id = y,
                     .out = &to,
                     .aux = aux,
                     .dt = dt,
                     .ws = ws,
                     .train = 1,
                     .first = 1,
                     .dout = dy};
    for (int i = 0; i < n->n_in; i++) {
        ti[i] = (remat__tensor){val[n->in[i]], &g->nodes[n->in[i]].shape};
        k.in[i] = &ti[i];
        k.din[i] = din[n->in[i]];
    }
    if (native) run(&k, 0, nth), run(&k, 1, nth);
    /* the views' way, on one thread */
    float *fy = malloc((size_t)ny * 4), *fdy = malloc((size_t)ny * 4);
    if (y16) remat__convert_range(fdy, dy, 0, ny, REMAT__CVT_UP);
    else memcpy(fdy, dy, ybytes);
    size_t fws = op->fwd_ws ? op->fwd_ws(g, n, 1) : 0, bws = op->bwd_ws ? op->bwd_ws(g, n, 1) : 0;
    void *ws1 = malloc((fws > bws ? fws : bws) + 1);
    k.dt = NULL, k.ws = ws1, k.dout = fdy, to.data = fy, k.aux = aref;
    for (int i = 0; i < n->n_in; i++) {
        int32_t u = n->in[i];
        ti[i].data = fval[u];
        int zeroed = dt[u] == REMAT_BF16 || (product && dt[u] == REMAT_F32);
        fdin[i] = zeroed ? calloc((size_t)remat__numel(&g->nodes[u].shape), 4) : NULL;
        k.din[i] = fdin[i] ? fdin[i] : dref[u]; /* a float32 gradient: in place */
    }
    run(&k, 0, 1);
    if (y16) remat__convert_range(yref, fy, 0, ny, REMAT__CVT_DOWN);
    else memcpy(yref, fy, ybytes);
    if (y16) remat__convert_range(fy, yref, 0, ny, REMAT__CVT_UP); /* the saved output's view (softmax reads it) */
    run(&k, 1, 1);
    for (int i = 0; i < n->n_in; i++)
        if (fdin[i])
            remat__convert_range(dref[n->in[i]], fdin[i], 0, remat__numel(&g->nodes[n->in[i]].shape),
                                 dt[n->in[i]] == REMAT_BF16 ? REMAT__CVT_ACC_BF16 : REMAT__CVT_ACC_F32);
    int ok_y = !memcmp(yv, yref, ybytes) && !memcmp(aux, aref, abytes), ok_d = 1;
    for (int32_t u = 0; u < MAXN; u++) ok_d &= !din[u] || !memcmp(din[u], dref[u], bytes[u]);
    CHECK_MSG(ok_y && ok_d,
              "%s (%d threads): bf16 as stored differs from the float32 views (output and aux %s, gradients %s)", what,
              nth, ok_y ? "same" : "differ", ok_d ? "same" : "differ");
    for (int i = 0; i < n->n_in; i++) free(fdin[i]);
    for (int u = 0; u < MAXN; u++) free(val[u]), free(din[u]), free(dref[u]), free(fval[u]);
    free(yv), free(dy), free(yref), free(ws), free(fy), free(fdy), free(ws1), free(aux), free(aref);
    return native && ok_y && ok_d;
}

/* dtypes for a graph's inputs (bits of mask: input i bf16) and node y by
 * its op's rule (first input's, the widest, float32 for a loss, bf16 for
 * a product). */
static void set_dt(const remat_graph *g, remat_node y, unsigned mask, uint8_t *dt) {
    const remat__node *n = &g->nodes[y];
    int all = 1, k = 0;
    for (int32_t u = 0; u < y; u++)
        dt[u] = g->nodes[u].dtype != REMAT_F32 ? g->nodes[u].dtype : mask >> k++ & 1 ? REMAT_BF16 : REMAT_F32;
    for (int i = 0; i < n->n_in; i++) all &= dt[n->in[i]] == REMAT_BF16 || g->nodes[n->in[i]].dtype != REMAT_F32;
    int first = remat__ops[n->op]->autocast == REMAT__AC_FIRST;
    int f = 0; /* the first float input */
    while (f < n->n_in - 1 && g->nodes[n->in[f]].dtype != REMAT_F32) f++;
    if (remat__ops[n->op]->autocast == REMAT__AC_FP32) all = first = 0;   /* a loss: float32 */
    if (remat__ops[n->op]->autocast == REMAT__AC_LOW) all = 1, first = 0; /* a product: bf16 */
    dt[y] = (first ? dt[n->in[f]] == REMAT_BF16 : all) ? REMAT_BF16 : REMAT_F32;
}

static int copy_case(int kind, unsigned mask, int nth) {
    static const char *const names[] = {
        "concat 4-D",           "concat 4-D (x, y, x)", "concat 2-D",    "slice dim 0", "slice dim 1", "slice dim 2",
        "permute (0, 2, 1, 3)", "permute (3, 1, 0, 2)", "add_broadcast", "softmax",     "mse",         "embedding"};
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t a[4] = {2, 3, 4, 5}, b[4] = {2, 1, 4, 5}, c[4] = {2, 2, 4, 5}, m[2] = {3, 7}, q[2] = {3, 2};
    int64_t s[3] = {3, 7, 5}, bb[2] = {7, 5};
    remat_node x[3], y;
    if (kind <= 1) {
        x[0] = remat_input(g, "a", REMAT_F32, 4, a);
        x[1] = remat_input(g, "b", REMAT_F32, 4, b);
        x[2] = kind ? x[0] : remat_input(g, "c", REMAT_F32, 4, c);
        y = remat_concat(g, 3, x);
    } else if (kind == 2) {
        x[0] = remat_input(g, "a", REMAT_F32, 2, m);
        x[1] = remat_input(g, "b", REMAT_F32, 2, q);
        y = remat_concat(g, 2, x);
    } else if (kind <= 5) {
        x[0] = remat_input(g, "x", REMAT_F32, 3, s);
        y = remat_slice(g, x[0], kind - 3, 1, kind == 3 ? 2 : 3);
    } else if (kind <= 7) {
        static const int perms[2][4] = {{0, 2, 1, 3}, {3, 1, 0, 2}};
        x[0] = remat_input(g, "x", REMAT_F32, 4, a);
        y = remat_permute(g, x[0], 4, perms[kind - 6]);
    } else if (kind == 8) {
        x[0] = remat_input(g, "x", REMAT_F32, 3, s);
        x[1] = remat_input(g, "b", REMAT_F32, 2, bb);
        y = remat_add_broadcast(g, x[0], x[1]);
    } else if (kind == 9) {
        x[0] = remat_input(g, "x", REMAT_F32, 3, s);
        y = remat_softmax(g, x[0]);
    } else if (kind == 10) {
        x[0] = remat_input(g, "a", REMAT_F32, 3, s);
        x[1] = remat_input(g, "b", REMAT_F32, 3, s);
        y = remat_mse(g, x[0], x[1]);
    } else {
        int64_t w[2] = {16, 5};
        x[0] = remat_input(g, "ids", REMAT_I32, 2, m);
        x[1] = remat_input(g, "w", REMAT_F32, 2, w);
        y = remat_embedding_op(g, x[0], x[1]);
    }
    CHECK_OK(remat_graph_status(g));
    uint8_t dt[8];
    set_dt(g, y, mask, dt);
    char what[96];
    snprintf(what, sizeof what, "%s (inputs' bf16 mask %#x)", names[kind], mask);
    int ok = node_versus_views(g, y, dt, nth, kind >= 8, what);
    remat_graph_destroy(g);
    return ok;
}

static void copies(void) {
    int ok = 1, runs = 0;
    for (int rep = 0; rep < 3; rep++)
        for (int nth = 1; nth <= 3; nth += 2) {
            static const unsigned concat_mixes[] = {7, 5, 2, 6};
            for (size_t m = 0; m < sizeof concat_mixes / sizeof *concat_mixes; m++, runs++)
                ok &= copy_case(0, concat_mixes[m], nth);
            ok &= copy_case(1, 3, nth) & copy_case(1, 1, nth) & copy_case(2, 3, nth) & copy_case(2, 1, nth);
            for (int kind = 3; kind <= 7; kind++, runs++) ok &= copy_case(kind, 1, nth);
            for (unsigned mask = 1; mask <= 3; mask++, runs++) ok &= copy_case(8, mask, nth);
            ok &= copy_case(9, 1, nth);
            for (unsigned mask = 1; mask <= 3; mask++, runs++) ok &= copy_case(10, mask, nth);
            ok &= copy_case(11, 1, nth);
            runs += 6;
        }
    if (ok)
        printf("copies: concat (every dtype mix, an input twice), slice, permute, add_broadcast, mse (every "
               "mix), softmax and embedding (a bf16 table) on values as stored (1 and 3 threads) give the float32 "
               "views' bits (%d cases)\n",
               runs);
}

/* ---------------------------------------------------------- attention */

/* attention on qkv (B, T, 3C) of shape s (H heads), stored in bf16 (mask
 * 1) or float32 (0, rounded through bf16 as a product's view rounds it),
 * on nth threads, against the views: y, P and dqkv. */
static int attention_case(int s, unsigned mask, int nth, int data) {
    static const int64_t shapes[][4] = {{2, 5, 6, 2}, {2, 33, 48, 3}, {1, 70, 128, 2}}; /* B, T, C, H */
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t d[3] = {shapes[s][0], shapes[s][1], 3 * shapes[s][2]};
    remat_node x = remat_input(g, "qkv", REMAT_F32, 3, d), y = remat_attention(g, x, (int)shapes[s][3]);
    CHECK_OK(remat_graph_status(g));
    uint8_t dt[2];
    set_dt(g, y, mask, dt);
    char what[128];
    snprintf(what, sizeof what, "attention B %lld T %lld C %lld H %lld (qkv %s, %s)", (long long)shapes[s][0],
             (long long)shapes[s][1], (long long)shapes[s][2], (long long)shapes[s][3], mask ? "bf16" : "float32",
             data == 2 ? "moderate numbers" : "any bits");
    int ok = node_versus_views(g, y, dt, nth, data, what);
    remat_graph_destroy(g);
    return ok;
}

static void attention(void) {
    int ok = 1, runs = 0;
    for (int nth = 1; nth <= 3; nth += 2)
        for (int s = 0; s < 3; s++)
            for (unsigned mask = 0; mask <= 1; mask++, runs++) ok &= attention_case(s, mask, nth, 2);
    for (unsigned mask = 0; mask <= 1; mask++, runs++) ok &= attention_case(1, mask, 3, 1);
    if (ok)
        printf("attention: qkv (bf16, or float32 rounded) and dy as stored, y and dqkv written as stored (1 and 3 "
               "threads, heads of width 3, 16 and 64) give the float32 views' bits: y, P and dqkv (%d cases)\n",
               runs);
}

/* --------------------------------------------- levels against scalar */

typedef struct {
    const char *name;
    size_t at; /* offsetof the kernel in remat__pw16_kernels */
    int backward, two;
    int one_nan; /* the input's NaNs x86's own: two NaNs meet in it */
} kcase;

static remat__pw16_fn fn_of(const remat__pw16_kernels *K, size_t at) {
    remat__pw16_fn f;
    memcpy(&f, (const char *)K + at, sizeof f);
    return f;
}

/* Level K's kernel against the scalar one on elements [3, N - 5). */
static int level_case(const remat__pw16_kernels *K, const kcase *c, const int b16[2], int alias) {
    int out16 = c->two ? (b16[0] && b16[1]) : b16[0];
    val in[2], din[2][2], out[2], dout = make(out16, 1);
    for (int j = 0; j < 2; j++) in[j] = alias && j ? in[0] : make(b16[j], c->two || c->one_nan);
    out[0] = make(out16, c->two), out[1] = copy(out[0]);
    for (int j = 0; j < 2; j++) din[0][j] = make(b16[j], 1), din[1][j] = copy(din[0][j]);
    for (int r = 0; r < 2; r++) {
        remat__pw16 t = {
            .in = {in[0].p, in[1].p},
            .out = out[r].p,
            .dout = c->backward ? dout.p : NULL,
            .din = {c->backward ? din[r][0].p : NULL, c->backward ? (alias ? din[r][0].p : din[r][1].p) : NULL},
            .in16 = {b16[0], b16[1]},
            .out16 = out16,
            .n_in = c->two ? 2 : 1};
        if (c->backward && !c->two) t.din[1] = NULL;
        if (c->name[0] == 'r' && c->backward) t.out = out[0].p; /* relu's backward reads y */
        fn_of(r ? K : remat__pw16_level(REMAT__PW16_SCALAR), c->at)(&t, 3, N - 5);
    }
    int ok = same(out[0], out[1]) && same(din[0][0], din[1][0]) && same(din[0][1], din[1][1]);
    CHECK_MSG(ok, "%s %s%s (inputs %s, %s) differs from the scalar reference", K->isa, c->name, alias ? "(x, x)" : "",
              b16[0] ? "bf16" : "f32", b16[1] ? "bf16" : "f32");
    for (int j = 0; j < 2; j++) {
        if (!(alias && j)) free(in[j].p);
        free(out[j].p), free(din[0][j].p), free(din[1][j].p);
    }
    free(dout.p);
    return ok;
}

/* Level K's convert against remat__convert_range, every kind, on elements
 * [3, N - 5) (ACC_BF16 and ACC_F32 into values already there). */
static int convert_case(const remat__pw16_kernels *K, remat__cvt kind) {
    int dst16 = kind == REMAT__CVT_DOWN || kind == REMAT__CVT_ACC_BF16, src16 = kind == REMAT__CVT_UP;
    int acc = kind == REMAT__CVT_ACC_BF16 || kind == REMAT__CVT_ACC_F32;
    val src = make(src16, acc), d0 = make(dst16, acc), d1 = copy(d0);
    remat__convert_range(d0.p, src.p, 3, N - 5, kind);
    K->convert(d1.p, src.p, 3, N - 5, kind);
    int ok = same(d0, d1);
    CHECK_MSG(ok, "%s convert (kind %d) differs from remat__convert_range", K->isa, (int)kind);
    free(src.p), free(d0.p), free(d1.p);
    return ok;
}

/* Level K's exp_sub against the scalar one on n floats from element 3,
 * into another array and in place. */
static int exp_case(const remat__pw16_kernels *K, int64_t n, float m) {
    const remat__pw16_kernels *S = remat__pw16_level(REMAT__PW16_SCALAR);
    val x = make(0, 1), a = make(0, 1), b = copy(a), xa = copy(x), xb = copy(x);
    float *xp = (float *)x.p + 3;
    S->exp_sub((float *)a.p + 3, xp, m, n), K->exp_sub((float *)b.p + 3, xp, m, n);
    S->exp_sub((float *)xa.p + 3, (float *)xa.p + 3, m, n), K->exp_sub((float *)xb.p + 3, (float *)xb.p + 3, m, n);
    int ok = same(a, b) && same(xa, xb);
    CHECK_MSG(ok, "%s exp_sub (%lld elements, m %g) differs from the scalar reference", K->isa, (long long)n,
              (double)m);
    free(x.p), free(a.p), free(b.p), free(xa.p), free(xb.p);
    return ok;
}

/* Level K's philox16 against the scalar one (four remat__philox_x4) at
 * counters q from 0, across 2^32 (the counter's high word moves into the
 * fourth word) and near 2^64. */
static int philox_case(const remat__pw16_kernels *K) {
    const remat__pw16_kernels *S = remat__pw16_level(REMAT__PW16_SCALAR);
    static const uint64_t qs[] = {0, 4, 0xfffffff8ull, 0xfffffffcull, 0x123456789aull, 0xfffffffffffffff0ull};
    int ok = 1;
    for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) {
        uint32_t a[64], b[64], key[2] = {next(), next()}, c1 = next(), c2 = next(), c3 = next();
        S->philox16(qs[i], c1, c2, c3, key, a), K->philox16(qs[i], c1, c2, c3, key, b);
        ok &= !memcmp(a, b, sizeof a);
    }
    CHECK_MSG(ok, "%s philox16 differs from the scalar reference", K->isa);
    return ok;
}

/* Level K's adamw against the scalar one on n parameters from element 3
 * (random bits, x86's NaN among them), and on values such a step meets
 * (v >= 0). */
static int adamw_case(const remat__pw16_kernels *K, int64_t n, int mild) {
    const remat__pw16_kernels *S = remat__pw16_level(REMAT__PW16_SCALAR);
    const remat__adamw_k k = {0.9999f, 0.1f, 0.999f, 0.001f, 0.0447f, 1e-8f, 0.0011f};
    val w = make(0, 1), g = make(0, 1), m = make(0, 1), v = make(0, 1);
    if (mild)
        for (int64_t i = 0; i < N; i++) {
            float *f[] = {w.p, g.p, m.p, v.p};
            for (int j = 0; j < 4; j++) f[j][i] = (float)((int)(next() % 2001) - 1000) * 1e-3f;
            ((float *)v.p)[i] = fabsf(((float *)v.p)[i]);
        }
    val w2 = copy(w), m2 = copy(m), v2 = copy(v);
    S->adamw(&k, n, (float *)w.p + 3, (float *)g.p + 3, (float *)m.p + 3, (float *)v.p + 3);
    K->adamw(&k, n, (float *)w2.p + 3, (float *)g.p + 3, (float *)m2.p + 3, (float *)v2.p + 3);
    int ok = same(w, w2) && same(m, m2) && same(v, v2);
    CHECK_MSG(ok, "%s adamw (%lld parameters) differs from the scalar reference", K->isa, (long long)n);
    free(w.p), free(g.p), free(m.p), free(v.p), free(w2.p), free(m2.p), free(v2.p);
    return ok;
}

/* Level K's BatchNorm kernels against the scalar ones over n elements
 * from element 3 (a tail when n % 8): the sums into partials that already
 * hold values, y, and dx added into values already there.
 * Every NaN is x86's default one: which of two NaNs a sum keeps depends
 * on the order of its operands, which the compiler may swap (as for the
 * two-input kernels above). */
static int stat_case(const remat__pw16_kernels *K, int b16, int64_t n) {
    const remat__pw16_kernels *S = remat__pw16_level(REMAT__PW16_SCALAR);
    val x = make(b16, 1), dy = make(b16, 1);
    size_t es = b16 ? 2 : 4;
    const void *xp = (const char *)x.p + 3 * es, *dyp = (const char *)dy.p + 3 * es;
    double a[4][8], b[4][8];
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 8; j++) a[k][j] = b[k][j] = 0.25 * (j + 1) * (k + 1);
    S->stat_sum(xp, b16, n, a[0]), K->stat_sum(xp, b16, n, b[0]);
    S->stat_sq(xp, b16, n, 0.1875, a[1]), K->stat_sq(xp, b16, n, 0.1875, b[1]);
    S->stat_dsum(xp, dyp, b16, n, 0.1875, 1.3, a[2], a[3]), K->stat_dsum(xp, dyp, b16, n, 0.1875, 1.3, b[2], b[3]);
    val y[2] = {make(b16, 1), make(b16, 1)}, dx[2] = {make(b16, 1), make(b16, 1)};
    memcpy(y[1].p, y[0].p, (size_t)N * es), memcpy(dx[1].p, dx[0].p, (size_t)N * es);
    const float cf[5] = {0.1875f, 1.3f, 0.7f, -0.02f, 0.05f};
    S->bn_apply(xp, (char *)y[0].p + 3 * es, b16, n, 0.1875f, 1.3f, -0.4f);
    K->bn_apply(xp, (char *)y[1].p + 3 * es, b16, n, 0.1875f, 1.3f, -0.4f);
    S->bn_dx(xp, dyp, (char *)dx[0].p + 3 * es, b16, n, cf), K->bn_dx(xp, dyp, (char *)dx[1].p + 3 * es, b16, n, cf);
    int ok = !memcmp(a, b, sizeof a) && same(y[0], y[1]) && same(dx[0], dx[1]);
    CHECK_MSG(ok, "%s BatchNorm kernels (%s, %lld elements) differ from the scalar reference", K->isa,
              b16 ? "bf16" : "f32", (long long)n);
    free(x.p), free(dy.p), free(y[0].p), free(y[1].p), free(dx[0].p), free(dx[1].p);
    return ok;
}

/* Level K's acc_n (the copies' gradients) over n elements from element 3,
 * into values already there, against the scalar one and against the way
 * it was done before it had a kernel: a bf16 gradient widened into float32,
 * 0 + g, then remat__convert_range's REMAT__CVT_ACC_BF16. */
static int acc_case(const remat__pw16_kernels *K, int d16, int g16, int64_t n) {
    const remat__pw16_kernels *S = remat__pw16_level(REMAT__PW16_SCALAR);
    val g = make(g16, 1), d0 = make(d16, 1), d1 = copy(d0), d2 = copy(d0);
    size_t gs = g16 ? 2 : 4, ds = d16 ? 2 : 4;
    const void *gp = (const char *)g.p + 3 * gs;
    S->acc_n((char *)d0.p + 3 * ds, d16, gp, g16, n), K->acc_n((char *)d1.p + 3 * ds, d16, gp, g16, n);
    float *c = malloc((size_t)N * sizeof *c);
    for (int64_t i = 0; i < n; i++) c[i] = g16 ? remat__f32_of(((const uint16_t *)gp)[i]) : ((const float *)gp)[i];
    if (d16) {
        for (int64_t i = 0; i < n; i++) c[i] = 0.0f + c[i];
        remat__convert_range((char *)d2.p + 3 * ds, c, 0, n, REMAT__CVT_ACC_BF16);
    } else {
        for (int64_t i = 0; i < n; i++) ((float *)d2.p)[3 + i] += c[i];
    }
    int ok = same(d0, d1) && same(d0, d2);
    CHECK_MSG(ok,
              "%s acc_n (into %s from %s, %lld elements) differs from the scalar reference or the "
              "conversions' way",
              K->isa, d16 ? "bf16" : "f32", g16 ? "bf16" : "f32", (long long)n);
    free(c), free(g.p), free(d0.p), free(d1.p), free(d2.p);
    return ok;
}

static void levels(void) {
    static const kcase cases[] = {
        {"relu_fwd", offsetof(remat__pw16_kernels, relu_fwd), 0, 0, 0},
        {"relu_bwd", offsetof(remat__pw16_kernels, relu_bwd), 1, 0, 0},
        {"add_fwd", offsetof(remat__pw16_kernels, add_fwd), 0, 1, 0},
        {"add_bwd", offsetof(remat__pw16_kernels, add_bwd), 1, 1, 0},
        {"mul_fwd", offsetof(remat__pw16_kernels, mul_fwd), 0, 1, 0},
        {"mul_bwd", offsetof(remat__pw16_kernels, mul_bwd), 1, 1, 0},
        {"gelu_fwd", offsetof(remat__pw16_kernels, gelu_fwd), 0, 0, 1},
        {"gelu_bwd", offsetof(remat__pw16_kernels, gelu_bwd), 1, 0, 1},
    };
    static const int mixes[4][2] = {{1, 1}, {0, 1}, {1, 0}, {0, 0}};
    static const char *const names[] = {"scalar", "avx2", "avx512", "avx512bf16"};
    for (int l = 1; l < REMAT__PW16_LEVELS; l++) {
        const remat__pw16_kernels *K = remat__pw16_level(l);
        if (!K) {
            printf("levels: %s: not on this CPU (skipped)\n", names[l]);
            continue;
        }
        CHECK(!strcmp(K->isa, names[l]));
        int ok = 1;
        for (int rep = 0; rep < 8; rep++)
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
                for (int m = 0; m < (cases[c].two ? 4 : 2); m++) {
                    int b16[2] = {mixes[m][0], cases[c].two ? mixes[m][1] : mixes[m][0]};
                    ok &= level_case(K, &cases[c], b16, 0);
                    if (cases[c].two && m == 0) ok &= level_case(K, &cases[c], b16, 1);
                }
        for (int rep = 0; rep < 8; rep++)
            for (int kind = REMAT__CVT_UP; kind <= REMAT__CVT_ACC_BF16; kind++) ok &= convert_case(K, (remat__cvt)kind);
        static const int64_t lens[] = {0, 5, 8, 49, 784, N - 8};
        for (int b16 = 0; b16 < 2; b16++)
            for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) ok &= stat_case(K, b16, lens[i]);
        for (int m = 0; m < 4; m++)
            for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
                ok &= acc_case(K, mixes[m][0], mixes[m][1], lens[i]);
        ok &= philox_case(K);
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
            ok &= adamw_case(K, lens[i], 0) & adamw_case(K, lens[i], 1);
        static const float shifts[] = {0.0f, 1.5f, -3.25f, 80.0f};
        for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
            for (size_t j = 0; j < sizeof shifts / sizeof *shifts; j++) ok &= exp_case(K, lens[i], shifts[j]);
        if (ok)
            printf("levels: %s gives the scalar reference's bits (relu, add, mul, gelu's tanh form; forward, "
                   "backward; every mix; softmax's exponentials; dropout's Philox; AdamW; "
                   "the five conversions; BatchNorm's sums, y and dx; the copies' gradients)\n",
                   K->isa);
    }
}

/* remat__expf (core/expf.h), which gelu's tanh form exponentiates with:
 * within 2 ulp of double exp on its range (every 997th float of either
 * sign, from 0 to its ends, and the ends), +inf above 88, +0 below -87, a
 * NaN kept. */
static double exp_ulps(float x) {
    double t = exp((double)x);
    float tf = (float)t;
    return fabs((double)remat__expf(x) - t) / ((double)nextafterf(tf, INFINITY) - (double)tf);
}

static void expf_accuracy(void) {
    double worst = 0.0;
    float at = 0.0f, hi = REMAT__EXP_HI;
    uint32_t top;
    memcpy(&top, &hi, sizeof top);
    for (uint32_t u = 0; u <= top + 996; u += 997)
        for (int sign = 0; sign < 2; sign++) {
            float x;
            uint32_t b = (u > top ? top : u) | (uint32_t)sign << 31;
            memcpy(&x, &b, sizeof x);
            if (x < REMAT__EXP_LO) x = REMAT__EXP_LO;
            double e = exp_ulps(x);
            if (e > worst) worst = e, at = x;
        }
    CHECK_MSG(worst <= 2.0, "remat__expf is %.2f ulp from exp at %.9g", worst, (double)at);
    CHECK(remat__expf(nextafterf(REMAT__EXP_HI, INFINITY)) == INFINITY && remat__expf(INFINITY) == INFINITY);
    CHECK(remat__expf(nextafterf(REMAT__EXP_LO, -INFINITY)) == 0.0f && remat__expf(-INFINITY) == 0.0f);
    CHECK(isnan(remat__expf(NAN)) && remat__expf(0.0f) == 1.0f && remat__expf(-0.0f) == 1.0f);
    printf("remat__expf: at most %.3f ulp from double exp on [-87, 88] (worst at %.6g); ends and NaN as "
           "documented\n",
           worst, (double)at);
}

/* ------------------------------------------------------------ the plan */

/* The bytes node u's views would take, forward and backward (as if it had
 * no native kernels). */
static size_t views_of(remat__prog *p, int32_t u) {
    size_t views = 0;
    uint8_t native = p->native[u];
    p->native[u] = 0;
    for (int b = 0; b < 2; b++) {
        remat__shim sh;
        remat__shim_layout(p, u, b, &sh);
        views += sh.any ? sh.kernel : 0;
    }
    p->native[u] = native;
    return views;
}

/* The model mo's graph and its program under the bf16 policy on 2
 * threads, as a session would plan it (free both). */
static remat_graph *bf16_prog(const remat_model_opts *mo, remat__prog *p) {
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, mo, &m));
    CHECK_OK(remat__prog_init(p, g, 2, REMAT_DEVICE_CPU, NULL));
    CHECK_OK(remat__prog_set_precision(p, REMAT_PRECISION_BF16));
    return g;
}

static void plan(const char *name) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, name));
    mo.batch = 4;
    if (strstr(name, "resnet")) mo.height = 16, mo.width = 16, mo.classes = 10, mo.base_channels = 4;
    if (!strcmp(name, "gpt2")) mo.layers = 2, mo.embd = 16, mo.heads = 2, mo.context = 8, mo.vocab = 32;
    remat__prog p;
    remat_graph *g = bf16_prog(&mo, &p);
    int nodes = 0, ok = 1;
    size_t views = 0, own = 0;
    for (int32_t u = 0; p.native && u < g->n; u++) {
        const remat__node *n = &g->nodes[u];
        if (n->leaf != REMAT__LEAF_NONE || !(remat__ops[n->op]->flags & (REMAT__OP_ELEMENTWISE | REMAT__OP_PLANEWISE)))
            continue;
        int b16 = p.dt[u] == REMAT_BF16, elementwise = (remat__ops[n->op]->flags & REMAT__OP_ELEMENTWISE) != 0;
        for (int i = 0; i < n->n_in; i++) b16 |= p.dt[n->in[i]] == REMAT_BF16;
        if (!b16) continue;
        nodes++;
        size_t ws = remat__ws_bytes(&p, u, 0) + remat__ws_bytes(&p, u, 1);
        int good = p.native[u] && (!elementwise || !ws);
        CHECK_MSG(good, "%s: %s node %d has a bf16 value but runs on views%s", name, remat__ops[n->op]->name, (int)u,
                  p.native[u] ? " (or takes workspace)" : "");
        ok &= good;
        own += ws;
        views += views_of(&p, u);
    }
    CHECK_MSG(nodes > 0, "%s: no elementwise node with a bf16 value", name);
    if (ok)
        printf("plan: %s: %d elementwise and plane-wise nodes on bf16 as stored, workspace %zu B in all (their views "
               "took %zu B)\n",
               name, nodes, own, views);
    remat__prog_free(&p);
    remat_graph_destroy(g);
}

/* On densenet-bc (tiny) in bf16 every concat with a bf16 input is native
 * with no workspace; its views' bytes, which it took before, printed. */
static void plan_concat(void) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, "densenet-bc"));
    mo.batch = 2, mo.depth = 16, mo.base_channels = 4;
    remat__prog p;
    remat_graph *g = bf16_prog(&mo, &p);
    int nodes = 0, ok = 1;
    size_t views = 0;
    for (int32_t u = 0; p.native && u < g->n; u++) {
        const remat__node *n = &g->nodes[u];
        if (n->leaf != REMAT__LEAF_NONE || n->op != REMAT__OP_CONCAT) continue;
        int b16 = 0;
        for (int i = 0; i < n->n_in; i++) b16 |= p.dt[n->in[i]] == REMAT_BF16;
        if (!b16) continue;
        nodes++;
        int good = p.native[u] && !remat__ws_bytes(&p, u, 0) && !remat__ws_bytes(&p, u, 1);
        CHECK_MSG(good, "densenet-bc: concat node %d has a bf16 input but runs on views (or takes workspace)", (int)u);
        ok &= good;
        views += views_of(&p, u);
    }
    CHECK_MSG(nodes > 0, "densenet-bc: no concat with a bf16 input");
    if (ok)
        printf("plan: densenet-bc (depth 16, k 4, batch 2): %d concats on bf16 as stored, no workspace (their views "
               "took %zu B)\n",
               nodes, views);
    remat__prog_free(&p);
    remat_graph_destroy(g);
}

/* On gpt2 (tiny, and gpt2-small's shapes at batch 1) in bf16 every
 * attention node is native, its workspace (both passes) under the views'
 * it took before, both printed. */
static void plan_attention(int small) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, small ? "gpt2-small" : "gpt2"));
    mo.batch = small ? 1 : 4;
    if (!small) mo.layers = 2, mo.embd = 16, mo.heads = 2, mo.context = 8, mo.vocab = 32;
    remat__prog p;
    remat_graph *g = bf16_prog(&mo, &p);
    int nodes = 0, ok = 1;
    size_t views = 0, own = 0;
    for (int32_t u = 0; p.native && u < g->n; u++) {
        const remat__node *n = &g->nodes[u];
        if (n->leaf != REMAT__LEAF_NONE || n->op != REMAT__OP_ATTENTION) continue;
        nodes++;
        size_t ws = remat__ws_bytes(&p, u, 0) + remat__ws_bytes(&p, u, 1), v = views_of(&p, u);
        int good = p.native[u] && ws < v;
        CHECK_MSG(good, "%s: attention node %d runs on views (or takes %zu B of workspace, its views %zu)",
                  small ? "gpt2-small" : "gpt2", (int)u, ws, v);
        ok &= good;
        own += ws, views += v;
    }
    CHECK_MSG(nodes > 0, "gpt2: no attention node");
    if (ok)
        printf("plan: %s (batch %d, context %lld): %d attention nodes on bf16 as stored, workspace %zu B in all "
               "(their views took %zu B)\n",
               small ? "gpt2-small" : "gpt2 (tiny)", (int)mo.batch, (long long)mo.context, nodes, own, views);
    remat__prog_free(&p);
    remat_graph_destroy(g);
}

int main(void) {
    CHECK(remat__pw16_level(REMAT__PW16_SCALAR) != NULL && remat__pw16_best() != NULL);
    printf("chosen at run time: %s\n", remat__pw16_best()->isa);
    views();
    pools();
    copies();
    attention();
    levels();
    expf_accuracy();
    plan("cnn");
    plan("resnet18");
    plan("gpt2");
    plan_concat();
    plan_attention(0);
    plan_attention(1);
    return check_exit("test_pw16");
}
