/* batchnorm.c: BatchNorm2d over NCHW images, with PyTorch's semantics.
 *
 * Inputs: x (N, C, H, W), weight gamma (C), bias beta (C), and the buffers
 * running_mean (C) and running_var (C); fattr[0] = eps, fattr[1] = momentum.
 * With M = N*H*W elements per channel:
 *   training: mean, var = batch mean and biased variance over (N, H, W)
 *   eval:     mean, var = running_mean, running_var
 *   y = (x - mean) * invstd * gamma + beta,   invstd = 1/sqrt(var + eps)
 * The aux value holds mean[C] then invstd[C] as floats, and the output is
 * always computed from those rounded values, so a recomputation (k->first
 * false) that reads them back instead of recomputing the statistics gives
 * bitwise the same output. Only the first training-mode execution of the
 * node in a step commits the running statistics:
 *   running_mean = (1-m) running_mean + m mean
 *   running_var  = (1-m) running_var  + m var * M/(M-1)
 * (with M = 1 the unbiased variance is undefined; running_var is left as it
 * is there, where PyTorch's module refuses the batch). In a data-parallel
 * step (kctx.stats set) the first execution exports mean and var instead,
 * in double, and bn_commit applies them later, micro-batch by micro-batch
 * in global order, with the same arithmetic (commit_channel), so the
 * buffers are bitwise those of one process running every micro-batch.
 * Backward, with xhat = (x - mean) * invstd:
 *   dgamma += sum dy xhat
 *   dbeta  += sum dy
 *   dx     += gamma invstd / M (M dy - sum dy - xhat sum dy xhat)  (training)
 *   dx     += gamma invstd dy                                      (eval)
 * Statistics and sums run in double. Work is split by channels, so every
 * channel is reduced by one thread in one fixed order: results do not
 * depend on the thread count or on timing.
 *
 * Each (n, c) plane goes through pw16's kernels (src/ops/pw16.h: the
 * sums in double, y and dx in float32, vectorized at run time where the
 * machine has AVX2 or AVX-512, with the scalar loops' arithmetic lane by
 * lane, so their bits). Under the bf16 policy, with x stored in bf16 (so
 * y, dy and dx are), they read and write the planes as stored (bf16_ws,
 * no workspace): y rounded where it is written and dx added as the
 * float32 view's accumulation would add it, the views' bits. The
 * parameters and buffers stay float32.
 */
#include "../remat-impl.h"
#include "pw16.h"

#include <math.h>

static const char *const per_channel_name[5] = {"input", "weight", "bias", "running_mean", "running_var"};

static remat_status bn_shape(const remat_graph *g, remat__node *n) {
    const remat__shape *x = remat__in_shape(g, n, 0);
    char lb[128], xs[64], ps[64];
    if (x->ndim != 4 || g->nodes[n->in[0]].dtype != REMAT_F32)
        return remat__err(REMAT_SHAPE, "%s: input %s must be a 4-D float32 tensor (N, C, H, W)",
                          remat__node_label(n, lb, sizeof lb), remat__shape_str(x, xs, sizeof xs));
    int64_t C = x->d[1];
    for (int i = 1; i < 5; i++) {
        const remat__shape *p = remat__in_shape(g, n, i);
        if (p->ndim != 1 || p->d[0] != C || g->nodes[n->in[i]].dtype != REMAT_F32)
            return remat__err(REMAT_SHAPE, "%s: %s %s does not match input %s (expected float32 (%lld))",
                              remat__node_label(n, lb, sizeof lb), per_channel_name[i],
                              remat__shape_str(p, ps, sizeof ps), remat__shape_str(x, xs, sizeof xs), (long long)C);
    }
    /* The running statistics are updated in place: they must be session state. */
    for (int i = 3; i < 5; i++)
        if (g->nodes[n->in[i]].leaf != REMAT__LEAF_BUFFER)
            return remat__err(REMAT_INVALID, "%s: %s must be a buffer (remat_buffer)",
                              remat__node_label(n, lb, sizeof lb), per_channel_name[i]);
    float eps = n->fattr[0], mom = n->fattr[1];
    if (!(eps >= 0.0f) || isinf(eps))
        return remat__err(REMAT_INVALID, "%s: eps %g must be finite and >= 0", remat__node_label(n, lb, sizeof lb),
                          (double)eps);
    if (!isfinite(mom))
        return remat__err(REMAT_INVALID, "%s: momentum %g must be finite", remat__node_label(n, lb, sizeof lb),
                          (double)mom);
    n->shape = *x;
    n->dtype = REMAT_F32;
    return REMAT_OK;
}

static size_t bn_aux_bytes(const remat_graph *g, const remat__node *n) {
    (void)g;
    return 2 * (size_t)n->shape.d[1] * sizeof(float);
}

/* The (n, c) plane at element offset off of a value as stored. */
static const void *at(const void *v, int bf, int64_t off) {
    return bf ? (const void *)((const uint16_t *)v + off) : (const void *)((const float *)v + off);
}

/* Channel sums are in double, in remat__sum_partials' interleaved
 * partials (remat-impl.h) carried from plane to plane, read as stored
 * by pw16's kernels (vectorized where the machine has AVX2 or AVX-512:
 * the same additions lane by lane, so the same bits). */
/* Training statistics of channel c: mean and biased variance, two passes. */
static void channel_stats(const void *x, int bf, int64_t N, int64_t C, int64_t HW, int64_t c, double *mean,
                          double *var) {
    const remat__pw16_kernels *K = remat__pw16_best();
    double M = (double)(N * HW), acc[REMAT__PARTIALS] = {0};
    for (int64_t n = 0; n < N; n++) K->stat_sum(at(x, bf, (n * C + c) * HW), bf, HW, acc);
    double mu = remat__partials_total(acc) / M, q[REMAT__PARTIALS] = {0};
    for (int64_t n = 0; n < N; n++) K->stat_sq(at(x, bf, (n * C + c) * HW), bf, HW, mu, q);
    *mean = mu;
    *var = remat__partials_total(q) / M;
}

/* sum dy and sum dy * xhat over channel c, xhat = (x - mu) * is. */
static void channel_dsums(const void *x, const void *dy, int bf, int64_t N, int64_t C, int64_t HW, int64_t c, double mu,
                          double is, double *sdy, double *sdx) {
    const remat__pw16_kernels *K = remat__pw16_best();
    double ay[REMAT__PARTIALS] = {0}, ax[REMAT__PARTIALS] = {0};
    for (int64_t n = 0; n < N; n++) {
        int64_t off = (n * C + c) * HW;
        K->stat_dsum(at(x, bf, off), at(dy, bf, off), bf, HW, mu, is, ay, ax);
    }
    *sdy = remat__partials_total(ay);
    *sdx = remat__partials_total(ax);
}

/* The running statistics' update from a batch's mean and biased variance
 * over M elements per channel: the one formula, for the kernel and for
 * bn_commit. */
static void commit_channel(float *rmean, float *rvar, int64_t c, double mu, double var, double mom, int64_t M) {
    rmean[c] = (float)((1.0 - mom) * (double)rmean[c] + mom * mu);
    if (M > 1) rvar[c] = (float)((1.0 - mom) * (double)rvar[c] + mom * var * (double)M / (double)(M - 1));
}

/* Is x (so y, dy and dx) stored in bf16 (kctx.dt)? */
static int bn_bf16(const remat__kctx *k) { return k->dt && k->dt[k->node->in[0]] == REMAT_BF16; }

static void bn_forward(const remat__kctx *k, int ith, int nth) {
    const void *x = k->in[0]->data;      // (N, C, H, W)
    const float *gamma = k->in[1]->data; // (C)
    const float *beta = k->in[2]->data;  // (C)
    float *rmean = k->in[3]->data;       // (C), updated in place
    float *rvar = k->in[4]->data;        // (C), updated in place
    void *y = k->out->data;              // (N, C, H, W)
    const remat__shape *s = k->in[0]->shape;
    int64_t N = s->d[0], C = s->d[1], HW = s->d[2] * s->d[3], M = N * HW;
    float *amean = k->aux, *ainvstd = k->aux + C; // (C), (C)
    double eps = k->node->fattr[0], mom = k->node->fattr[1];
    int bf = bn_bf16(k);
    const remat__pw16_kernels *K = remat__pw16_best();
    int64_t lo, hi;
    remat__split(C, ith, nth, &lo, &hi);
    for (int64_t c = lo; c < hi; c++) {
        if (!k->train) {
            amean[c] = rmean[c];
            ainvstd[c] = (float)(1.0 / sqrt((double)rvar[c] + eps));
        } else if (k->first) {
            double mu, var;
            channel_stats(x, bf, N, C, HW, c, &mu, &var);
            amean[c] = (float)mu;
            ainvstd[c] = (float)(1.0 / sqrt(var + eps));
            if (k->stats) /* (2, C): committed after the step, in micro-batch order */
                k->stats[c] = mu, k->stats[C + c] = var;
            else commit_channel(rmean, rvar, c, mu, var, mom, M);
        } /* else: a recomputation; aux already holds this step's statistics */
        float mu = amean[c], sc = ainvstd[c] * gamma[c], b = beta[c];
        for (int64_t n = 0; n < N; n++) {
            int64_t off = (n * C + c) * HW;
            K->bn_apply(at(x, bf, off), (void *)at(y, bf, off), bf, HW, mu, sc, b);
        }
    }
}

static void bn_backward(const remat__kctx *k, int ith, int nth) {
    const void *x = k->in[0]->data;      // (N, C, H, W)
    const float *gamma = k->in[1]->data; // (C)
    const void *dy = k->dout;            // (N, C, H, W)
    void *dx = k->din[0];
    float *dgamma = k->din[1], *dbeta = k->din[2];
    const remat__shape *s = k->in[0]->shape;
    int64_t N = s->d[0], C = s->d[1], HW = s->d[2] * s->d[3], M = N * HW;
    const float *amean = k->aux, *ainvstd = k->aux + C; // (C), (C)
    if (!dx && !dgamma && !dbeta) return;
    int bf = bn_bf16(k);
    const remat__pw16_kernels *K = remat__pw16_best();
    int64_t lo, hi;
    remat__split(C, ith, nth, &lo, &hi);
    for (int64_t c = lo; c < hi; c++) {
        double mu = amean[c], is = ainvstd[c], sdy, sdx;
        channel_dsums(x, dy, bf, N, C, HW, c, mu, is, &sdy, &sdx);
        if (dgamma) dgamma[c] += (float)sdx;
        if (dbeta) dbeta[c] += (float)sdy;
        if (!dx) continue;
        /* dx = gamma * is * (dy - mean(dy) - xhat * mean(dy * xhat)), in
         * float per element (the sums above are double); bf16: added as
         * the float32 view's accumulation adds (remat__pw16_acc) */
        const float cf[5] = {amean[c], ainvstd[c], (float)((double)gamma[c] * is),
                             k->train ? (float)(sdy / (double)M) : 0.0f, k->train ? (float)(sdx / (double)M) : 0.0f};
        for (int64_t n = 0; n < N; n++) {
            int64_t off = (n * C + c) * HW;
            K->bn_dx(at(x, bf, off), at(dy, bf, off), (void *)at(dx, bf, off), bf, HW, cf);
        }
    }
}

/* Under bf16 with x stored in bf16: the kernels above take x, y, dy and dx
 * as they are stored, with no workspace. */
static int bn_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                      size_t *bwd) {
    for (int i = 1; i < 5; i++)
        if (dt[n->in[i]] != REMAT_F32) return 0;
    if (dt[n->in[0]] != REMAT_BF16) return 0;
    (void)g, (void)nth;
    *fwd = *bwd = 0;
    return 1;
}

static size_t bn_stats_bytes(const remat_graph *g, const remat__node *n) {
    (void)g;
    return 2 * (size_t)n->shape.d[1] * sizeof(double);
}

/* stats: (2, C) doubles, the batch's mean then biased variance. */
static void bn_commit(const remat_graph *g, const remat__node *n, float *const *in, const double *stats) {
    const remat__shape *s = remat__in_shape(g, n, 0);
    int64_t C = s->d[1], M = s->d[0] * s->d[2] * s->d[3];
    for (int64_t c = 0; c < C; c++) commit_channel(in[3], in[4], c, stats[c], stats[C + c], n->fattr[1], M);
}

static double bn_flops(const remat_graph *g, const remat__node *n) {
    (void)g;
    return 8.0 * (double)remat__numel(&n->shape);
}

const remat__op remat__op_batchnorm2d = {
    .autocast = REMAT__AC_FIRST,
    .name = "batchnorm2d",
    .min_in = 5,
    .max_in = 5,
    .shape = bn_shape,
    .forward = bn_forward,
    .backward = bn_backward,
    .saves = REMAT__SAVE_IN(0) | REMAT__SAVE_IN(1) | REMAT__SAVE_AUX,
    .flags = REMAT__OP_STATEFUL,
    .aux_bytes = bn_aux_bytes,
    .bf16_ws = bn_bf16_ws,
    .flops = bn_flops,
    .stats_bytes = bn_stats_bytes,
    .commit = bn_commit,
    .family = REMAT_FAMILY_NORM,
    .cuda = REMAT__CUDA(batchnorm2d),
};
