/* test_cuda.c: the CUDA backend against the CPU, and remat's promises on
 * the GPU. Skipped (exit 77, one line saying why) where no GPU is visible.
 *
 * 1. Every op: each case of opcases.h, and larger ones that take the
 *    kernels' multi-block paths (cuDNN's algorithms, two-stage
 *    reductions, the 1x1 convolutions' products at strides 1 to 3 and
 *    their chunked gathers), run on the CPU and on the GPU from the same weights and
 *    inputs: the op's output (training and evaluation mode), the loss,
 *    every parameter's gradient and the buffers after a step agree within
 *    TOL of the largest magnitude. Dropout's output is bitwise the CPU's
 *    (the same Philox streams, so the same masks).
 * 2. Plan invariance on the GPU: cnn with dropout (batch 64), resnet50 and
 *    gpt2 with dropout at tiny sizes, 5 SGD steps under all, sqrt and optimal at 3
 *    budgets: losses, gradients, weights and BatchNorm statistics bitwise
 *    equal to store-all's.
 * 3. Memory truth on the GPU: at every step, the measured peak of each
 *    category equals the memory plan's prediction, the session holds
 *    exactly the bytes the plan says, within the budget; and the arena's
 *    allocation takes from cudaMemGetInfo's free bytes what the arena
 *    holds, up to the driver's allocation granularity.
 * 4. 2 and 3 again in bf16 (remat_precision: the CUDA backend's
 *    conversions, the float32 views, the elementwise ops in slices) on cnn
 *    and gpt2.
 * 6. The native bf16 kernels (remat__dev_kernels.bf16_ws: linear, conv2d
 *    and the elementwise ops on their stored dtypes, no float32 views):
 *    small graphs where each op reads bf16 values (after a linear layer;
 *    conv2d: float32 and bf16 inputs, strides, padding, 1x1), in
 *    bf16 on the GPU with native kernels, on the GPU with the elementwise
 *    ops on views (REMAT_CUDA_BF16=elementwise-views) and on the CPU. The elementwise ops' outputs,
 *    losses and gradients are bitwise the views' (dropout's slices
 *    included: 131072 elements, two views slices); everything is within
 *    TOL16 of the CPU's bf16 run.
 * 7. Micro-batches on one rank (issue 21): cnn and a tiny resnet50 with 4
 *    micro-batches, bitwise the same under all and sqrt, with small
 *    buckets and with the REDUCEs after the backward pass; within 2e-3 of
 *    the CPU's run; predicted == measured. (Several ranks on the GPU:
 *    test_dist_device under mpirun, tests/dist.cmake.)
 * 5. A batch in page-locked memory (remat_host_alloc), which the step
 *    uploads straight from, and each next batch copied ahead on the second
 *    stream (opts.prefetch, remat_session_bind_next: a larger block,
 *    counted, predicted == measured) give store-all's bits from malloc
 *    memory (part 2's runs); remat_host_alloc and remat_host_free work
 *    with and without a GPU, and opts.prefetch is ignored on the CPU
 *    (checked before the skip).
 */
#include "check.h"
#include "opcases.h"

#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

/* The precision of the sessions invariance() makes (part 4: bf16). */
static remat_precision precision = REMAT_PRECISION_FP32;
/* Whether train() binds page-locked batches, and names each next batch
 * ahead with remat_session_bind_next in a session with opts.prefetch
 * (part 5). */
static int pinned_batch = 0, prefetch_run = 0;
static int least_ws = 0; /* remat_session_opts.least_workspace of train() and floor_budget() */

static uint32_t rng_state = 777;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

/* max |a - b| / max |b|. */
static double rel_err(const float *a, const float *b, int64_t n) {
    double d = 0.0, m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e; /* NaN propagates */
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return m > 0.0 ? d / m : d;
}

static remat_session *make(const remat_graph *g, remat_node loss, remat_device dev, remat_strategy st, size_t budget) {
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.threads = 2;
    o.seed = 11;
    o.device = dev;
    o.strategy = st;
    o.budget = budget;
    remat_session *s = NULL;
    remat_status rc = remat_session_create(&s, g, loss, &o);
    CHECK_MSG(rc == REMAT_OK, "session on %s: %s", remat_device_str(dev), remat_last_error());
    return rc == REMAT_OK ? s : NULL;
}

/* ------------------------------------------------------------------ ops */

/* Larger cases: the sizes where the GPU kernels leave their one-block
 * paths. */
static void c_conv_big(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 8, 16, 32, 32), P(c->g, "w", 4, 32, 16, 3, 3),
                             P(c->g, "b", 1, 32, 0, 0, 0), 1, 1);
}
static void c_conv_stem(gcase *c) { /* resnet's 7x7 stride-2 stem */
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 4, 3, 64, 64), P(c->g, "w", 4, 16, 3, 7, 7), REMAT_NONE, 2, 3);
}
static void c_conv_1x1_big(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 8, 64, 14, 14), P(c->g, "w", 4, 128, 64, 1, 1), REMAT_NONE, 1, 0);
}
/* 1x1 convolutions with padding 0 run as cuBLAS products
 * (src/cuda/k_conv1x1.cu): stride 1 and 2 (ResNet's projections), odd
 * sizes whose strided pixels stop short of the edge, a bias, and a case
 * whose gathers come in chunks: 256 + 3840 channels of 7 x 7 take 802816
 * bytes an image, so 83 fill the 64 MiB chunk and 100 images make a
 * chunk of 83, then one of 17 (dW sums over 4900 pixels only, so both
 * devices' float sums stay well inside the tolerance). */
static void c_conv_1x1_bias(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 3, 24, 10, 10), P(c->g, "w", 4, 40, 24, 1, 1),
                             P(c->g, "b", 1, 40, 0, 0, 0), 1, 0);
}
static void c_conv_1x1_s2(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 4, 64, 14, 14), P(c->g, "w", 4, 128, 64, 1, 1), REMAT_NONE, 2, 0);
}
static void c_conv_1x1_s2_bias(gcase *c) { /* OH 5 from 9, OW 6 from 11 */
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 3, 16, 9, 11), P(c->g, "w", 4, 24, 16, 1, 1),
                             P(c->g, "b", 1, 24, 0, 0, 0), 2, 0);
}
static void c_conv_1x1_s3_bias(gcase *c) { /* OH 3 from 7, OW 4 from 10 */
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 2, 8, 7, 10), P(c->g, "w", 4, 12, 8, 1, 1),
                             P(c->g, "b", 1, 12, 0, 0, 0), 3, 0);
}
static void c_conv_1x1_chunks(gcase *c) { /* stride 2, 14 x 14 to 7 x 7 */
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 100, 256, 14, 14), P(c->g, "w", 4, 3840, 256, 1, 1),
                             P(c->g, "b", 1, 3840, 0, 0, 0), 2, 0);
}
static void c_bn_big(gcase *c) {
    int64_t C = 64;
    remat_node rm = remat_buffer(c->g, "rm", 1, &C, REMAT_INIT_ZEROS);
    remat_node rv = remat_buffer(c->g, "rv", 1, &C, REMAT_INIT_ONES);
    c->out = remat_batchnorm2d_op(c->g, P(c->g, "x", 4, 16, 64, 28, 28), P(c->g, "gamma", 1, 64, 0, 0, 0),
                                  P(c->g, "beta", 1, 64, 0, 0, 0), rm, rv, 1e-5f, 0.1f);
}
static void c_linear_big(gcase *c) {
    c->out = remat_linear_op(c->g, P(c->g, "x", 2, 256, 512, 0, 0), P(c->g, "w", 2, 1000, 512, 0, 0),
                             P(c->g, "b", 1, 1000, 0, 0, 0));
}
static void c_attention_big(gcase *c) { /* B 2, T 128, C 64, 4 heads */
    c->out = remat_attention(c->g, P(c->g, "qkv", 3, 2, 128, 192, 0), 4);
}
static void c_layernorm_big(gcase *c) {
    c->out = remat_layernorm_op(c->g, P(c->g, "x", 3, 4, 256, 768, 0), P(c->g, "w", 1, 768, 0, 0, 0),
                                P(c->g, "b", 1, 768, 0, 0, 0), 1e-5f);
}
static void c_softmax_big(gcase *c) { c->out = remat_softmax(c->g, P(c->g, "x", 2, 64, 3000, 0, 0)); }
static void c_ce_big(gcase *c) {
    int64_t n = 512;
    c->extra = remat_input(c->g, "labels", REMAT_I32, 1, &n);
    c->classes = 1000;
    c->out = remat_cross_entropy(c->g, P(c->g, "z", 2, 512, 1000, 0, 0), c->extra);
}
static void c_embedding_big(gcase *c) { /* 1024 ids over 300 rows: many repeats */
    int64_t d[2] = {8, 128};
    c->extra = remat_input(c->g, "ids", REMAT_I32, 2, d);
    c->classes = 300;
    c->out = remat_embedding_op(c->g, c->extra, P(c->g, "w", 2, 300, 64, 0, 0));
}
static void c_maxpool_big(gcase *c) {
    c->out = remat_maxpool2d(c->g, P(c->g, "x", 4, 4, 16, 32, 32), 3, 2, 1);
    c->kinks = 1;
}
static void c_gap_big(gcase *c) { c->out = remat_global_avgpool(c->g, P(c->g, "x", 4, 8, 256, 7, 7)); }
static void c_addb_big(gcase *c) {
    c->out = remat_add_broadcast(c->g, P(c->g, "x", 3, 8, 128, 256, 0), P(c->g, "b", 2, 128, 256, 0, 0));
}
static void c_permute_big(gcase *c) {
    int perm[4] = {0, 2, 1, 3};
    c->out = remat_permute(c->g, P(c->g, "x", 4, 4, 64, 12, 32), 4, perm);
}
static void c_gelu_big(gcase *c) { c->out = remat_gelu(c->g, P(c->g, "x", 2, 4096, 64, 0, 0), 1); }
static void c_dropout_big(gcase *c) { c->out = remat_dropout(c->g, P(c->g, "x", 2, 1000, 333, 0, 0), 0.1f); }
static void c_mse_big(gcase *c) {
    c->out = remat_mse(c->g, P(c->g, "a", 2, 1000, 300, 0, 0), P(c->g, "b", 2, 1000, 300, 0, 0));
}

static const struct {
    const char *op;
    void (*build)(gcase *);
} big[] = {
    {"conv2d", c_conv_big},         {"conv2d", c_conv_stem},
    {"conv2d", c_conv_1x1_big},     {"conv2d", c_conv_1x1_bias},
    {"conv2d", c_conv_1x1_s2},      {"conv2d", c_conv_1x1_s2_bias},
    {"conv2d", c_conv_1x1_s3_bias}, {"conv2d", c_conv_1x1_chunks},
    {"batchnorm2d", c_bn_big},      {"linear", c_linear_big},
    {"attention", c_attention_big}, {"layernorm", c_layernorm_big},
    {"softmax", c_softmax_big},     {"cross_entropy", c_ce_big},
    {"embedding", c_embedding_big}, {"maxpool2d", c_maxpool_big},
    {"global_avgpool", c_gap_big},  {"add_broadcast", c_addb_big},
    {"permute", c_permute_big},     {"gelu", c_gelu_big},
    {"dropout", c_dropout_big},     {"mse", c_mse_big},
};

/* Reads parameter i (value or gradient) of a session into a new array. */
static float *read_param(remat_session *s, int i, remat_param_part part, int64_t *numel) {
    remat_param_info pi;
    remat_session_param(s, i, &pi);
    float *x = malloc((size_t)pi.numel * sizeof *x + 1);
    CHECK_OK(remat_session_read_param(s, i, part, x));
    *numel = pi.numel;
    return x;
}

static double worst_seen = 0.0;

/* One case on both devices. */
static void compare(const char *opname, void (*build)(gcase *), int idx) {
    gcase c = {.extra = REMAT_NONE};
    CHECK_OK(remat_graph_create(&c.g));
    build(&c);
    remat_node loss = c.out, target = REMAT_NONE;
    int is_loss = remat__ops[c.g->nodes[c.out].op]->flags & REMAT__OP_LOSS;
    if (!is_loss) {
        int64_t dims[4];
        int nd = remat_node_shape(c.g, c.out, dims);
        target = remat_input(c.g, "target", REMAT_F32, nd, dims);
        loss = remat_mse(c.g, c.out, target);
    }
    CHECK_MSG(remat_graph_status(c.g) == REMAT_OK, "%s: %s", opname, remat_graph_error(c.g));
    remat_session *cpu = make(c.g, loss, REMAT_DEVICE_CPU, REMAT_STRATEGY_ALL, 0);
    remat_session *gpu = make(c.g, loss, REMAT_DEVICE_CUDA, REMAT_STRATEGY_ALL, 0);
    if (!cpu || !gpu) {
        remat_session_destroy(cpu), remat_session_destroy(gpu), remat_graph_destroy(c.g);
        return;
    }
    /* The same weights and inputs on both. */
    int np = remat_session_param_count(cpu);
    for (int p = 0; p < np; p++) {
        remat_param_info pi;
        remat_session_param(cpu, p, &pi);
        if (!pi.trainable) continue;
        float *w = malloc((size_t)pi.numel * sizeof *w);
        for (int64_t i = 0; i < pi.numel; i++) {
            if (c.kinks) { /* distinct values away from each other: ties are not compared */
                int64_t k = (i * 7919) % pi.numel;
                float v = 0.1f + 0.05f * (float)k;
                w[i] = k % 2 ? -v : v;
            } else {
                w[i] = frand();
            }
        }
        CHECK_OK(remat_session_write_param(cpu, p, w));
        CHECK_OK(remat_session_write_param(gpu, p, w));
        free(w);
    }
    float *tbuf = NULL;
    int32_t *lbuf = NULL;
    if (target != REMAT_NONE) {
        int64_t n = remat__numel(&c.g->nodes[target].shape);
        tbuf = malloc((size_t)n * sizeof *tbuf);
        for (int64_t i = 0; i < n; i++) tbuf[i] = frand();
        remat_session_bind(cpu, target, tbuf), remat_session_bind(gpu, target, tbuf);
    }
    if (c.extra != REMAT_NONE) {
        int64_t n = remat__numel(&c.g->nodes[c.extra].shape);
        lbuf = malloc((size_t)n * sizeof *lbuf);
        for (int64_t i = 0; i < n; i++) lbuf[i] = (int32_t)((i * 3 + i / 7) % c.classes);
        remat_session_bind(cpu, c.extra, lbuf), remat_session_bind(gpu, c.extra, lbuf);
    }
    int64_t on = remat__numel(&c.g->nodes[c.out].shape);
    float *ya = malloc((size_t)on * sizeof *ya + 4), *yb = malloc((size_t)on * sizeof *yb + 4);
    double worst = 0.0;
    const char *where = "";
    /* The op's output, training then evaluation mode. */
    for (int train = 1; train >= 0; train--) {
        float la = 0, lb = 0;
        CHECK_OK(remat_session_forward(cpu, train, &la, c.out, ya));
        CHECK_OK(remat_session_forward(gpu, train, &lb, c.out, yb));
        double e = rel_err(yb, ya, on);
        if (!(e <= worst)) worst = e, where = train ? "output (training)" : "output (evaluation)";
        if (strcmp(opname, "dropout") == 0 && train)
            CHECK_MSG(memcmp(ya, yb, (size_t)on * sizeof *ya) == 0,
                      "dropout case %d: the GPU's output is not "
                      "bitwise the CPU's (masks differ)",
                      idx);
    }
    /* A training step: loss, gradients, buffers. */
    float la = 0, lb = 0;
    CHECK_OK(remat_session_step(cpu, &la));
    CHECK_OK(remat_session_step(gpu, &lb));
    double e = rel_err(&lb, &la, 1);
    if (!(e <= worst)) worst = e, where = "loss";
    char pname[96] = "";
    for (int p = 0; p < np; p++) {
        remat_param_info pi;
        remat_session_param(cpu, p, &pi);
        int64_t n;
        float *a = read_param(cpu, p, pi.trainable ? REMAT_PARAM_GRAD : REMAT_PARAM_VALUE, &n);
        float *b = read_param(gpu, p, pi.trainable ? REMAT_PARAM_GRAD : REMAT_PARAM_VALUE, &n);
        e = rel_err(b, a, n);
        if (!(e <= worst)) {
            worst = e;
            snprintf(pname, sizeof pname, "%s of %s", pi.trainable ? "gradient" : "buffer", pi.name);
            where = pname;
        }
        free(a), free(b);
    }
    CHECK_MSG(worst <= TOL, "%s case %d: CUDA differs from the CPU by %.3g of the largest magnitude (%s)", opname, idx,
              worst, where);
    if (worst > worst_seen) worst_seen = worst;
    printf("cuda vs cpu %-15s case %2d: worst %.2e (%s)\n", opname, idx, worst, *where ? where : "-");
    free(ya), free(yb), free(tbuf), free(lbuf);
    remat_session_destroy(cpu);
    remat_session_destroy(gpu);
    remat_graph_destroy(c.g);
}

static void ops(void) {
    for (int ci = 0; ci < N_CASES; ci++) compare(cases[ci].op, cases[ci].build, ci);
    for (int ci = 0; ci < (int)(sizeof big / sizeof big[0]); ci++) compare(big[ci].op, big[ci].build, 100 + ci);
    printf("cuda vs cpu: every op within %.0e (worst %.2e)\n", TOL, worst_seen);
}

/* --------------------------------------------------- native bf16 kernels */

/* bf16 against bf16: the products round their operands and results to 8
 * bits of significand, in another order on each device. */
#define TOL16 3e-2

/* x (N, 64) -> linear (bf16) -> the op -> (its output); a second linear
 * for two-input ops. */
static remat_node lin16(remat_graph *g, const char *name, int64_t n, int64_t out) {
    char w[32], b[32];
    snprintf(w, sizeof w, "%s.w", name), snprintf(b, sizeof b, "%s.b", name);
    return remat_linear_op(g, P(g, name, 2, n, 64, 0, 0), P(g, w, 2, out, 64, 0, 0), P(g, b, 1, out, 0, 0, 0));
}
static void b_linear(gcase *c) { c->out = lin16(c->g, "x", 96, 80); }
static void b_linear2(gcase *c) { /* a bf16 input, its gradient in bf16 */
    remat_node h = lin16(c->g, "x", 96, 64);
    c->out = remat_linear_op(c->g, h, P(c->g, "w2", 2, 48, 64, 0, 0), REMAT_NONE);
}
static void b_relu(gcase *c) { c->out = remat_relu(c->g, lin16(c->g, "x", 96, 80)); }
static void b_add(gcase *c) { c->out = remat_add(c->g, lin16(c->g, "a", 96, 80), lin16(c->g, "b", 96, 80)); }
static void b_add_same(gcase *c) { /* one bf16 value twice: one gradient buffer */
    remat_node h = lin16(c->g, "a", 96, 80);
    c->out = remat_add(c->g, h, h);
}
static void b_add_mixed(gcase *c) { /* bf16 + float32: a float32 sum */
    c->out = remat_add(c->g, lin16(c->g, "a", 96, 80), P(c->g, "f", 2, 96, 80, 0, 0));
}
static void b_mul(gcase *c) { c->out = remat_mul(c->g, lin16(c->g, "a", 96, 80), lin16(c->g, "b", 96, 80)); }
static void b_gelu(gcase *c) { c->out = remat_gelu(c->g, lin16(c->g, "x", 96, 80), 0); }
static void b_gelu_tanh(gcase *c) { c->out = remat_gelu(c->g, lin16(c->g, "x", 96, 80), 1); }
static void b_dropout(gcase *c) { c->out = remat_dropout(c->g, lin16(c->g, "x", 64, 2048), 0.3f); }
static void b_reshape(gcase *c) {
    int64_t d[2] = {48, 160};
    c->out = remat_reshape(c->g, lin16(c->g, "x", 96, 80), 2, d);
}

/* conv2d under the bf16 policy (cuDNN, or cuBLAS for 1x1): a float32 x
 * (rounded per call) with a bias, padded, 40 images of 24 x 24 (db in two
 * chunks); stride 2; a bf16 x from a first convolution (dx in bf16); a
 * 1x1 layer after a 3x3 one (bf16 x); a 1x1 stride-2 layer on a float32
 * x (the gathers). */
static void b_conv(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 40, 8, 24, 24), P(c->g, "w", 4, 16, 8, 3, 3),
                             P(c->g, "b", 1, 16, 0, 0, 0), 1, 1);
}
static void b_conv1x1_s2(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 4, 16, 9, 9), P(c->g, "w", 4, 24, 16, 1, 1),
                             P(c->g, "b", 1, 24, 0, 0, 0), 2, 0);
}
static void b_conv_s2(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 4, 8, 15, 15), P(c->g, "w", 4, 16, 8, 5, 5), REMAT_NONE, 2, 2);
}
static void b_conv2(gcase *c) {
    remat_node h = remat_conv2d_op(c->g, P(c->g, "x", 4, 4, 8, 10, 10), P(c->g, "w1", 4, 16, 8, 3, 3),
                                   P(c->g, "b1", 1, 16, 0, 0, 0), 1, 1);
    c->out = remat_conv2d_op(c->g, h, P(c->g, "w2", 4, 32, 16, 3, 3), P(c->g, "b2", 1, 32, 0, 0, 0), 2, 1);
}
static void b_conv1x1(gcase *c) {
    remat_node h = remat_conv2d_op(c->g, P(c->g, "x", 4, 4, 8, 8, 8), P(c->g, "w1", 4, 16, 8, 3, 3), REMAT_NONE, 1, 1);
    c->out = remat_conv2d_op(c->g, h, P(c->g, "w2", 4, 32, 16, 1, 1), P(c->g, "b2", 1, 32, 0, 0, 0), 1, 0);
}

static const struct {
    const char *name;
    void (*build)(gcase *);
    int bitwise; /* elementwise: the native kernel gives the views' bits */
} cases16[] = {
    {"conv2d", b_conv, 0},
    {"conv2d (s2 5x5)", b_conv_s2, 0},
    {"conv2d (bf16 x)", b_conv2, 0},
    {"conv2d (1x1)", b_conv1x1, 0},
    {"conv2d (1x1 s2)", b_conv1x1_s2, 0},
    {"linear", b_linear, 0},
    {"linear (bf16 x)", b_linear2, 0},
    {"relu", b_relu, 1},
    {"add", b_add, 1},
    {"add (x, x)", b_add_same, 1},
    {"add (bf16, f32)", b_add_mixed, 1},
    {"mul", b_mul, 1},
    {"gelu", b_gelu, 1},
    {"gelu (tanh)", b_gelu_tanh, 1},
    {"dropout", b_dropout, 1},
    {"reshape", b_reshape, 1},
};

/* A bf16 session on dev; with REMAT_CUDA_BF16=elementwise-views when
 * views (the elementwise ops on float32 views, the rest native). */
static remat_session *make16(const remat_graph *g, remat_node loss, remat_device dev, int views) {
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.threads = 2;
    o.seed = 11;
    o.device = dev;
    o.precision = REMAT_PRECISION_BF16;
    if (views) setenv("REMAT_CUDA_BF16", "elementwise-views", 1);
    remat_session *s = NULL;
    remat_status rc = remat_session_create(&s, g, loss, &o);
    unsetenv("REMAT_CUDA_BF16");
    CHECK_MSG(rc == REMAT_OK, "bf16 session on %s: %s", remat_device_str(dev), remat_last_error());
    return rc == REMAT_OK ? s : NULL;
}

/* What one bf16 run gives: the op's output (training mode), the loss
 * after a step and every gradient, in one buffer. */
static float *run16(remat_session *s, remat_node out, int64_t on, remat_node target, const float *t, size_t *n) {
    int np = remat_session_param_count(s);
    size_t total = (size_t)on + 1;
    for (int p = 0; p < np; p++) {
        remat_param_info pi;
        remat_session_param(s, p, &pi);
        uint32_t st = 5u + 7u * (uint32_t)p; /* the same weights on every session */
        float *w = malloc((size_t)pi.numel * sizeof *w);
        for (int64_t i = 0; i < pi.numel; i++) {
            st = st * 1664525u + 1013904223u;
            w[i] = ((float)(st >> 8) / 8388608.0f - 1.0f) * 0.5f;
        }
        CHECK_OK(remat_session_write_param(s, p, w));
        free(w);
        total += (size_t)pi.numel;
    }
    float *r = calloc(total, sizeof *r), *at = r + on + 1;
    remat_session_bind(s, target, t);
    float l = 0.0f;
    CHECK_OK(remat_session_forward(s, 1, &l, out, r));
    CHECK_OK(remat_session_step(s, &r[on]));
    for (int p = 0; p < np; p++) {
        int64_t k;
        float *gr = read_param(s, p, REMAT_PARAM_GRAD, &k);
        memcpy(at, gr, (size_t)k * sizeof *gr);
        at += k;
        free(gr);
    }
    *n = total;
    return r;
}

static void native16(void) {
    double worst_all = 0.0;
    for (size_t ci = 0; ci < sizeof cases16 / sizeof cases16[0]; ci++) {
        gcase c = {.extra = REMAT_NONE};
        CHECK_OK(remat_graph_create(&c.g));
        cases16[ci].build(&c);
        int64_t dims[4];
        int nd = remat_node_shape(c.g, c.out, dims);
        remat_node target = remat_input(c.g, "target", REMAT_F32, nd, dims);
        remat_node loss = remat_mse(c.g, c.out, target);
        CHECK_MSG(remat_graph_status(c.g) == REMAT_OK, "%s: %s", cases16[ci].name, remat_graph_error(c.g));
        int64_t on = remat__numel(&c.g->nodes[c.out].shape);
        float *t = malloc((size_t)on * sizeof *t);
        for (int64_t i = 0; i < on; i++) t[i] = frand();
        remat_session *s[3] = {make16(c.g, loss, REMAT_DEVICE_CUDA, 0), make16(c.g, loss, REMAT_DEVICE_CUDA, 1),
                               make16(c.g, loss, REMAT_DEVICE_CPU, 0)};
        if (s[0] && s[1] && s[2]) {
            size_t n[3];
            float *r[3];
            for (int i = 0; i < 3; i++) r[i] = run16(s[i], c.out, on, target, t, &n[i]);
            if (cases16[ci].bitwise)
                CHECK_MSG(n[0] == n[1] && memcmp(r[0], r[1], n[0] * sizeof *r[0]) == 0,
                          "bf16 %s: the native CUDA kernel's output, loss or gradients are not bitwise the "
                          "float32 views'",
                          cases16[ci].name);
            double e = rel_err(r[0], r[2], (int64_t)on), eg = rel_err(r[0] + on, r[2] + on, (int64_t)(n[0] - on));
            if (eg > e) e = eg;
            CHECK_MSG(n[0] == n[2] && e <= TOL16,
                      "bf16 %s: native CUDA differs from the CPU by %.3g of the "
                      "largest magnitude",
                      cases16[ci].name, e);
            if (e > worst_all) worst_all = e;
            printf("cuda bf16 native vs cpu %-16s: worst %.2e%s\n", cases16[ci].name, e,
                   cases16[ci].bitwise ? ", bitwise the views'" : "");
            for (int i = 0; i < 3; i++) free(r[i]);
        }
        for (int i = 0; i < 3; i++) remat_session_destroy(s[i]);
        free(t);
        remat_graph_destroy(c.g);
    }
    printf("cuda bf16 native kernels: within %.0e of the CPU (worst %.2e)\n", TOL16, worst_all);
}

/* ------------------------------------------------ invariance and memory */

#define STEPS 5

typedef struct {
    float loss[STEPS];
    float *w, *gw; /* every parameter and buffer; every gradient */
    size_t nw, ngw;
    int64_t recomputations;
    size_t held;
    remat_status status;
} outcome;

/* Step k's batch: the input (floats, or token ids for a language model)
 * and the labels. */
typedef struct {
    float *x;
    int32_t *xi, *y;
} batch;

static void fill_batch(batch *b, int k, int64_t n, int64_t nl, int lm, int64_t vocab) {
    for (int64_t i = 0; i < n; i++) {
        b->x[i] = (float)((i * 37 + k * 11) % 29) / 14.0f - 1.0f;
        b->xi[i] = (int32_t)((i * 13 + k * 5) % vocab);
    }
    for (int64_t i = 0; i < nl; i++) b->y[i] = (int32_t)((i * 7 + k) % (lm ? vocab : 10));
}

/* Every parameter and buffer, and every gradient, of s into o. */
static void read_out(remat_session *s, outcome *o) {
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info pi;
        remat_session_param(s, i, &pi);
        int64_t k;
        float *v = read_param(s, i, REMAT_PARAM_VALUE, &k);
        o->w = realloc(o->w, (o->nw + (size_t)k) * sizeof *o->w);
        memcpy(o->w + o->nw, v, (size_t)k * sizeof *v);
        o->nw += (size_t)k;
        free(v);
        if (!pi.trainable) continue;
        v = read_param(s, i, REMAT_PARAM_GRAD, &k);
        o->gw = realloc(o->gw, (o->ngw + (size_t)k) * sizeof *o->gw);
        memcpy(o->gw + o->ngw, v, (size_t)k * sizeof *v);
        o->ngw += (size_t)k;
        free(v);
    }
}

/* A CUDA session for train(), with SGD and momentum; NULL (o->status
 * says why) when it cannot be made. */
static remat_session *train_session(const remat_graph *g, const remat_model *m, remat_strategy st, size_t budget,
                                    outcome *o) {
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.seed = 5;
    so.device = REMAT_DEVICE_CUDA;
    so.precision = precision;
    so.least_workspace = least_ws;
    so.strategy = st;
    so.budget = budget;
    so.prefetch = prefetch_run;
    remat_session *s = NULL;
    o->status = remat_session_create(&s, g, m->loss, &so);
    if (o->status != REMAT_OK) return NULL;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 0.05f, oo.momentum = 0.9f;
    o->status = remat_session_set_optimizer(s, &oo);
    if (o->status == REMAT_OK) return s;
    remat_session_destroy(s);
    return NULL;
}

/* Five SGD steps with momentum on a batch that changes every step, in
 * one of two buffers by turns: with prefetch_run, batch k + 1 is made
 * and named (remat_session_bind_next) before step k runs. */
static void train(const remat_graph *g, const remat_model *m, remat_strategy st, size_t budget, int lm, int64_t vocab,
                  outcome *o) {
    memset(o, 0, sizeof *o);
    remat_session *s = train_session(g, m, st, budget, o);
    if (!s) return;
    remat_plan_summary p;
    CHECK_OK(remat_session_plan(s, &p));
    o->recomputations = p.recomputations;
    o->held = p.held_bytes;
    int64_t xd[4], ld[4], n = 1, nl = 1;
    int nd = remat_node_shape(g, m->input, xd), ndl = remat_node_shape(g, m->labels, ld);
    for (int i = 0; i < nd; i++) n *= xd[i];
    for (int i = 0; i < ndl; i++) nl *= ld[i];
    const remat_device hd = pinned_batch ? REMAT_DEVICE_CUDA : REMAT_DEVICE_CPU; /* CPU: malloc */
    batch b[2];
    for (int i = 0; i < 2; i++) {
        b[i].x = remat_host_alloc(hd, (size_t)n * sizeof *b[i].x);
        b[i].xi = remat_host_alloc(hd, (size_t)n * sizeof *b[i].xi);
        b[i].y = remat_host_alloc(hd, (size_t)nl * sizeof *b[i].y);
    }
    for (int k = 0; k < STEPS; k++) {
        batch *cur = &b[k % 2], *next = &b[(k + 1) % 2];
        if (k == 0 || !prefetch_run) fill_batch(cur, k, n, nl, lm, vocab);
        remat_session_bind(s, m->input, lm ? (const void *)cur->xi : (const void *)cur->x);
        remat_session_bind(s, m->labels, cur->y);
        if (prefetch_run && k + 1 < STEPS) {
            fill_batch(next, k + 1, n, nl, lm, vocab);
            CHECK_OK(remat_session_bind_next(s, m->input, lm ? (const void *)next->xi : (const void *)next->x));
            CHECK_OK(remat_session_bind_next(s, m->labels, next->y));
        }
        remat_mem_stats pred, meas;
        CHECK_OK(remat_session_predict(s, &pred));
        CHECK_OK(remat_session_step(s, &o->loss[k]));
        remat_session_mem(s, &meas);
        for (int c = 0; c < REMAT_MEM_COUNT; c++)
            CHECK_MSG(pred.peak[c] == meas.peak[c], "%s: step %d: %s predicted %zu, measured %zu",
                      remat_strategy_str(st), k, remat_mem_str((remat_mem)c), pred.peak[c], meas.peak[c]);
        CHECK_MSG(remat_session_held_bytes(s) == p.held_bytes, "%s: holds %zu, the plan says %zu",
                  remat_strategy_str(st), remat_session_held_bytes(s), p.held_bytes);
        CHECK(!budget || remat_session_held_bytes(s) <= budget);
        CHECK_OK(remat_session_update(s));
    }
    read_out(s, o);
    remat_session_destroy(s);
    for (int i = 0; i < 2; i++) remat_host_free(hd, b[i].x), remat_host_free(hd, b[i].xi), remat_host_free(hd, b[i].y);
}

static void same(const char *name, const char *what, const outcome *a, const outcome *b) {
    CHECK_MSG(b->status == REMAT_OK, "%s %s: %s", name, what, remat_last_error());
    if (b->status != REMAT_OK) return;
    CHECK_MSG(memcmp(a->loss, b->loss, sizeof a->loss) == 0, "%s %s: losses differ", name, what);
    CHECK_MSG(a->nw == b->nw && memcmp(a->w, b->w, a->nw * sizeof *a->w) == 0,
              "%s %s: weights or running statistics differ", name, what);
    CHECK_MSG(a->ngw == b->ngw && memcmp(a->gw, b->gw, a->ngw * sizeof *a->gw) == 0, "%s %s: gradients differ", name,
              what);
}

/* Optimal's smallest feasible budget with the optimizer's state: the
 * floor a budget of 1 names (the parameter and gradient blocks and the
 * smallest arena), plus the optimizer's block (candidate schedules and
 * their arenas do not depend on the resident bytes). */
static size_t floor_budget(const remat_graph *g, const remat_model *m) {
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.device = REMAT_DEVICE_CUDA;
    so.precision = precision;
    so.least_workspace = least_ws;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, m->loss, &so));
    size_t optim = 0;
    if (s) {
        size_t before = remat_session_held_bytes(s); /* no step yet: the blocks alone */
        remat_optim_opts oo;
        remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
        oo.momentum = 0.9f;
        CHECK_OK(remat_session_set_optimizer(s, &oo));
        optim = remat_session_held_bytes(s) - before;
    }
    remat_session_destroy(s);
    so.strategy = REMAT_STRATEGY_OPTIMAL;
    so.budget = 1;
    s = NULL;
    CHECK(remat_session_create(&s, g, m->loss, &so) == REMAT_BUDGET);
    remat_session_destroy(s);
    const char *p = strstr(remat_last_error(), "smallest feasible budget is ");
    CHECK_MSG(p != NULL, "%s", remat_last_error());
    return p ? (size_t)strtoull(p + strlen("smallest feasible budget is "), NULL, 10) + optim : 0;
}

static void invariance(const char *name) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, name));
    int lm = strcmp(name, "gpt2") == 0;
    if (lm) {
        mo.batch = 2, mo.layers = 2, mo.embd = 32, mo.heads = 2, mo.context = 16, mo.vocab = 64;
    } else if (strcmp(name, "resnet50") == 0) {
        mo.batch = 4, mo.height = 32, mo.width = 32, mo.classes = 10, mo.base_channels = 8;
    } else {
        /* cnn's convolutions, at their fastest, take workspaces that
         * outweigh its activations (on an H200 with cuDNN 9: 63 MiB at batch
         * 64 against 29 MiB of activations), so that no plan holds less than
         * store-all: main() runs it with least_ws */
        mo.batch = 64;
    }
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    outcome all;
    train(g, &m, REMAT_STRATEGY_ALL, 0, lm, mo.vocab, &all);
    CHECK_MSG(all.status == REMAT_OK, "%s all: %s", name, remat_last_error());
    outcome sq;
    train(g, &m, REMAT_STRATEGY_SQRT, 0, lm, mo.vocab, &sq);
    same(name, "sqrt", &all, &sq);
    outcome pin;
    pinned_batch = 1;
    train(g, &m, REMAT_STRATEGY_ALL, 0, lm, mo.vocab, &pin);
    pinned_batch = 0;
    same(name, "all from a page-locked batch", &all, &pin);
    free(pin.w), free(pin.gw);
    outcome pre;
    prefetch_run = 1;
    train(g, &m, REMAT_STRATEGY_ALL, 0, lm, mo.vocab, &pre);
    prefetch_run = 0;
    same(name, "all with each next batch prefetched", &all, &pre);
    CHECK_MSG(pre.status != REMAT_OK || pre.held > all.held, "%s: with the prefetch block it holds %zu, without %zu",
              name, pre.held, all.held);
    free(pre.w), free(pre.gw);
    size_t lo = floor_budget(g, &m);
    CHECK_MSG(lo > 0 && lo < all.held, "%s: floor %zu, store-all holds %zu", name, lo, all.held);
    printf("gpu %-9s %s: all holds %zu B; sqrt %zu B (%lld recomputations)", name, remat_precision_str(precision),
           all.held, sq.held, (long long)sq.recomputations);
    for (int b = 0; b < 3; b++) {
        size_t budget = lo + (all.held - lo) * (size_t)b / 3;
        outcome opt;
        train(g, &m, REMAT_STRATEGY_OPTIMAL, budget, lm, mo.vocab, &opt);
        char what[64];
        snprintf(what, sizeof what, "optimal at %zu B", budget);
        same(name, what, &all, &opt);
        printf("; optimal@%zu %zu B (%lld)", budget, opt.held, (long long)opt.recomputations);
        free(opt.w), free(opt.gw);
    }
    printf(": bitwise equal over %d steps, predicted == measured\n", STEPS);
    free(all.w), free(all.gw), free(sq.w), free(sq.gw);
    remat_graph_destroy(g);
}

/* ---------------------------------------------------- micro-batches */

/* steps (at most STEPS) SGD steps of K micro-batches on one rank (dp.h:
 * the fold of each bucket into the tree over the micro-batches, on the
 * device, then the mean): the input bound to K micro-batches one after the
 * other, predicted == measured per category at every step on the GPU. */
static void dp_train(const remat_graph *g, const remat_model *m, remat_device dev, int64_t K, remat_strategy st,
                     size_t bucket, int at_end, int steps, outcome *o) {
    memset(o, 0, sizeof *o);
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.seed = 5;
    so.device = dev;
    so.strategy = st;
    so.micro_batches = K;
    so.bucket_bytes = bucket;
    so.reduce_after_backward = at_end;
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = 0.05f, oo.momentum = 0.9f;
    so.optim = &oo;
    remat_session *s = NULL;
    o->status = remat_session_create(&s, g, m->loss, &so);
    CHECK_MSG(o->status == REMAT_OK, "micro-batches on the %s: %s", remat_device_str(dev), remat_last_error());
    if (!s) return;
    remat_plan_summary p;
    remat_dist_info di;
    CHECK_OK(remat_session_plan(s, &p));
    CHECK_OK(remat_session_dist(s, &di));
    CHECK(di.micro_batches == K && di.local_micro_batches == K && di.buckets >= 1);
    CHECK(di.host_staging == (dev != REMAT_DEVICE_CPU) && di.host_staging_bytes == 0); /* one rank: nothing to stage */
    o->held = p.held_bytes;
    int64_t xd[4], ld[4], n = 1, nl = 1;
    int nd = remat_node_shape(g, m->input, xd), ndl = remat_node_shape(g, m->labels, ld);
    for (int i = 0; i < nd; i++) n *= xd[i];
    for (int i = 0; i < ndl; i++) nl *= ld[i];
    n *= K, nl *= K;
    batch b = {malloc((size_t)n * sizeof *b.x), malloc((size_t)n * sizeof *b.xi), malloc((size_t)nl * sizeof *b.y)};
    for (int k = 0; k < steps && b.x && b.xi && b.y; k++) {
        fill_batch(&b, k, n, nl, 0, 10);
        remat_session_bind(s, m->input, b.x);
        remat_session_bind(s, m->labels, b.y);
        remat_mem_stats pred, meas;
        CHECK_OK(remat_session_predict(s, &pred));
        CHECK_OK(remat_session_step(s, &o->loss[k]));
        remat_session_mem(s, &meas);
        for (int c = 0; c < REMAT_MEM_COUNT; c++)
            CHECK_MSG(pred.peak[c] == meas.peak[c], "micro-batches on the %s, step %d: %s predicted %zu, measured %zu",
                      remat_device_str(dev), k, remat_mem_str((remat_mem)c), pred.peak[c], meas.peak[c]);
        CHECK_MSG(meas.live[REMAT_MEM_COMM] == di.comm_bytes, "%zu bytes of communication live, block of %zu",
                  meas.live[REMAT_MEM_COMM], di.comm_bytes);
        CHECK_OK(remat_session_update(s));
    }
    read_out(s, o);
    remat_session_bind(s, m->input, NULL);
    remat_session_bind(s, m->labels, NULL);
    remat_session_destroy(s);
    free(b.x), free(b.xi), free(b.y);
}

/* One rank with K micro-batches on the GPU: the same bits whatever the
 * plan, the gradient buckets and when the REDUCEs run (each bucket's leaf
 * folded as its gradients become final, or all after the backward pass)
 * over STEPS steps; and after one step the CPU's loss, gradients, weights
 * and BatchNorm statistics within tol (float rounding only: the same
 * dropout masks, the same tree). cnn (three dropouts): tol 2e-3, measured
 * 2.6e-7 on an H200. A tiny resnet50 (BatchNorm committed once per
 * micro-batch, micro-batches of 4 images of 64x64): tol 5e-2. Its kernels'
 * float rounding alone, without micro-batches, already moves its gradients
 * by about 1e-2 of their largest (measured on an H200: the CPU's and the
 * GPU's losses 2e-5 apart at step 0 and 0.8% after one step at batch 16,
 * micro-batch 1); what the check is for, a micro-batch folded twice or
 * not at all, or statistics committed once instead of K times, moves them
 * by far more. After several steps SGD with momentum carries the
 * rounding further (3.7 times the CPU's loss by step 4 with micro-batches
 * of 2 images of 32x32), which says nothing about the kernels, so the CPU
 * is compared after one step. */
static void micro_batches(const char *name) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, name));
    int64_t K = 4;
    double tol = 2e-3;
    if (strcmp(name, "resnet50") == 0)
        mo.batch = 4, mo.height = 64, mo.width = 64, mo.classes = 10, mo.base_channels = 8, tol = 5e-2;
    else mo.batch = 16;
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    outcome gpu, split, late, one, cpu;
    dp_train(g, &m, REMAT_DEVICE_CUDA, K, REMAT_STRATEGY_ALL, 0, 0, STEPS, &gpu);
    dp_train(g, &m, REMAT_DEVICE_CUDA, K, REMAT_STRATEGY_SQRT, 4096, 0, STEPS, &split);
    dp_train(g, &m, REMAT_DEVICE_CUDA, K, REMAT_STRATEGY_ALL, 4096, 1, STEPS, &late);
    dp_train(g, &m, REMAT_DEVICE_CUDA, K, REMAT_STRATEGY_ALL, 0, 0, 1, &one);
    dp_train(g, &m, REMAT_DEVICE_CPU, K, REMAT_STRATEGY_ALL, 0, 0, 1, &cpu);
    same(name, "micro-batches, sqrt, 4 KiB buckets", &gpu, &split);
    same(name, "micro-batches, 4 KiB buckets reduced after the backward pass", &gpu, &late);
    double worst = 0.0;
    if (one.status == REMAT_OK && cpu.status == REMAT_OK) {
        double e = fabs((double)one.loss[0] - (double)cpu.loss[0]) / (1.0 + fabs((double)cpu.loss[0]));
        CHECK_MSG(e <= tol, "%s micro-batches: the loss %.7g on the GPU, %.7g on the CPU", name, (double)one.loss[0],
                  (double)cpu.loss[0]);
        double eg = one.ngw == cpu.ngw ? rel_err(one.gw, cpu.gw, (int64_t)one.ngw) : 1.0;
        CHECK_MSG(eg <= tol, "%s micro-batches: gradients within %.2e of the CPU's (tolerance %.0e)", name, eg, tol);
        double ew = one.nw == cpu.nw ? rel_err(one.w, cpu.w, (int64_t)one.nw) : 1.0;
        CHECK_MSG(ew <= tol, "%s micro-batches: weights and statistics within %.2e of the CPU's (tolerance %.0e)", name,
                  ew, tol);
        worst = e > eg ? e : eg;
        if (ew > worst) worst = ew;
    }
    printf("gpu %-9s %lld micro-batches: bitwise across plans and buckets over %d steps, one step within %.2e of "
           "the CPU, predicted == measured\n",
           name, (long long)K, STEPS, worst);
    free(gpu.w), free(gpu.gw), free(split.w), free(split.gw), free(late.w), free(late.gw), free(one.w), free(one.gw);
    free(cpu.w), free(cpu.gw);
    remat_graph_destroy(g);
}

/* The zoo's cnn at a batch, its options in *mo. */
static void cnn_graph(int64_t batch, remat_model_opts *mo, remat_graph **g, remat_model *m) {
    remat_model_opts_default(mo);
    CHECK_OK(remat_model_opts_for(mo, "cnn"));
    mo->batch = batch;
    CHECK_OK(remat_graph_create(g));
    CHECK_OK(remat_model_build(*g, mo, m));
}

/* The arena's allocation, seen by the driver. A first session loads the
 * kernels (lazily loaded modules take device memory on first use); a
 * second one is measured: creating it takes its resident blocks and the
 * cuBLAS and cuDNN handles, its first step the arena. */
static void driver_view(void) {
    remat_model_opts mo;
    remat_graph *g;
    remat_model m;
    cnn_graph(256, &mo, &g, &m);
    int64_t n = 256 * 28 * 28;
    float *x = calloc((size_t)n, sizeof *x);
    int32_t *y = calloc(256, sizeof *y);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(i % 17) / 17.0f;
    remat_session *s = make(g, m.loss, REMAT_DEVICE_CUDA, REMAT_STRATEGY_ALL, 0);
    if (s) {
        remat_session_bind(s, m.input, x), remat_session_bind(s, m.labels, y);
        CHECK_OK(remat_session_step(s, NULL));
    }
    remat_session_destroy(s);
    size_t f0, f1, f2, total;
    CHECK_OK(remat_device_memory(REMAT_DEVICE_CUDA, &f0, &total));
    s = make(g, m.loss, REMAT_DEVICE_CUDA, REMAT_STRATEGY_ALL, 0);
    CHECK_OK(remat_device_memory(REMAT_DEVICE_CUDA, &f1, &total));
    if (s) {
        remat_session_bind(s, m.input, x), remat_session_bind(s, m.labels, y);
        CHECK_OK(remat_session_step(s, NULL));
        CHECK_OK(remat_device_memory(REMAT_DEVICE_CUDA, &f2, &total));
        remat_plan_summary p;
        CHECK_OK(remat_session_plan(s, &p));
        size_t drop = f1 - f2, gran = (size_t)2 << 20;
        CHECK_MSG(drop >= p.arena_bytes && drop - p.arena_bytes < gran,
                  "the arena holds %zu bytes, cudaMemGetInfo's free bytes fell by %zu", p.arena_bytes, drop);
        printf("driver: cnn b256: the arena (workspaces included) holds %zu B; its allocation took %zu B of free "
               "device memory (granularity %zu B); creating the session took %zu B (resident blocks %zu B + "
               "cuBLAS/cuDNN handles)\n",
               p.arena_bytes, drop, gran, f0 - f1, p.held_bytes - p.arena_bytes);
    }
    remat_session_destroy(s);
    free(x), free(y);
    remat_graph_destroy(g);
}

/* remat_host_alloc's memory, pinned or not, is usable and freed (also
 * where no GPU is: then plain malloc). */
static void host_memory(void) {
    for (int d = 0; d < 2; d++) {
        size_t n = (size_t)3 << 20;
        const remat_device dev = d ? REMAT_DEVICE_CUDA : REMAT_DEVICE_CPU;
        unsigned char *p = remat_host_alloc(dev, n);
        CHECK(p != NULL);
        if (!p) continue;
        memset(p, 0x5a, n);
        CHECK(p[0] == 0x5a && p[n - 1] == 0x5a);
        remat_host_free(dev, p);
    }
    remat_host_free(REMAT_DEVICE_CUDA, NULL);
}

/* On the CPU opts.prefetch holds nothing more and remat_session_bind_next
 * changes nothing (an mlp's two steps, with and without); a node that is
 * not an input is refused. */
static void prefetch_cpu(void) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    CHECK_OK(remat_model_opts_for(&mo, "mlp"));
    mo.batch = 4;
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(remat_model_build(g, &mo, &m));
    int64_t d[REMAT_MAX_DIMS], n = 1, nl = 1;
    for (int i = 0, nd = remat_node_shape(g, m.input, d); i < nd; i++) n *= d[i];
    for (int i = 0, nd = remat_node_shape(g, m.labels, d); i < nd; i++) nl *= d[i];
    float *x = malloc((size_t)n * sizeof *x), loss[2][2] = {{0}};
    int32_t *y = malloc((size_t)nl * sizeof *y);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(i % 13) / 13.0f;
    for (int64_t i = 0; i < nl; i++) y[i] = (int32_t)(i % 2);
    size_t held[2] = {0, 1};
    for (int pf = 0; pf < 2; pf++) {
        remat_session_opts so;
        remat_session_opts_default(&so);
        so.threads = 2;
        so.seed = 11;
        so.prefetch = pf;
        remat_session *s = NULL;
        CHECK_OK(remat_session_create(&s, g, m.loss, &so));
        if (!s) continue;
        remat_session_bind(s, m.input, x), remat_session_bind(s, m.labels, y);
        for (int k = 0; k < 2; k++) {
            if (pf) CHECK_OK(remat_session_bind_next(s, m.input, x));
            CHECK_OK(remat_session_step(s, &loss[pf][k]));
        }
        held[pf] = remat_session_held_bytes(s);
        CHECK(remat_session_bind_next(s, m.loss, x) == REMAT_INVALID);
        remat_session_destroy(s);
    }
    CHECK_MSG(memcmp(loss[0], loss[1], sizeof loss[0]) == 0 && held[0] == held[1],
              "cpu: bind_next changed the losses or the bytes held");
    free(x), free(y);
    remat_graph_destroy(g);
}

/* remat_session_opts.least_workspace: cnn's store-all step at batch 64
 * holds no more with the least-workspace convolutions than with the
 * fastest (each algorithm's workspace is at most the fastest's), and its
 * smallest feasible budget is lower than what store-all holds with them.
 * The bits differ between the two (other algorithms); invariance() checks
 * that plans under one setting agree. */
static void least_workspace(void) {
    remat_model_opts mo;
    remat_graph *g;
    remat_model m;
    cnn_graph(64, &mo, &g, &m);
    outcome fast, least;
    train(g, &m, REMAT_STRATEGY_ALL, 0, 0, mo.vocab, &fast);
    least_ws = 1;
    train(g, &m, REMAT_STRATEGY_ALL, 0, 0, mo.vocab, &least);
    size_t lo = floor_budget(g, &m);
    least_ws = 0;
    size_t fast_lo = floor_budget(g, &m);
    CHECK_MSG(fast.status == REMAT_OK && least.status == REMAT_OK && least.held <= fast.held,
              "cnn b64 store-all: %zu B with the least workspaces, %zu B with the fastest", least.held, fast.held);
    CHECK_MSG(lo < least.held && lo <= fast_lo,
              "cnn b64 least workspaces: floor %zu B, store-all %zu B (fastest: "
              "floor %zu B)",
              lo, least.held, fast_lo);
    printf("gpu cnn b64 store-all holds %zu B with the fastest convolutions, %zu B with the least workspace; "
           "smallest budgets %zu B and %zu B\n",
           fast.held, least.held, fast_lo, lo);
    free(fast.w), free(fast.gw), free(least.w), free(least.gw);
    remat_graph_destroy(g);
}

int main(void) {
    host_memory();
    prefetch_cpu();
    remat_status st = remat_device_available(REMAT_DEVICE_CUDA);
    if (st != REMAT_OK) {
        printf("test_cuda: skipped: %s\n", remat_last_error());
        return check_exit("test_cuda") == 0 ? 77 : 1; /* host_memory's checks still count */
    }
    ops();
    native16();
    least_workspace();
    least_ws = 1;
    invariance("cnn");
    least_ws = 0;
    invariance("resnet50");
    invariance("gpt2");
    precision = REMAT_PRECISION_BF16;
    least_ws = 1;
    invariance("cnn");
    least_ws = 0;
    invariance("gpt2");
    precision = REMAT_PRECISION_FP32;
    micro_batches("cnn");
    micro_batches("resnet50");
    driver_view();
    return check_exit("test_cuda");
}
