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
 * Under the bf16 policy, with x stored in bf16 (so y, dy and dx are), the
 * kernels take them as stored (bf16_ws): each (n, c) plane of x and dy is
 * widened into the thread's float32 plane of the workspace and read there
 * by the same loops, y is rounded where it is written and dx added as the
 * float32 view's accumulation would add it: the views' bits, with a plane
 * per thread in place of whole views. The parameters and buffers stay
 * float32.
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

/* The HW elements at `off` of a value stored in float32, or (bf) in bf16
 * widened into buf. */
static const float *plane(const void *v, int bf, int64_t off, int64_t HW, float *buf) {
    if (!bf) return (const float *)v + off;
    remat__pw16_convert(buf, (const uint16_t *)v + off, HW, REMAT__CVT_UP);
    return buf;
}

/* Channel sums are in double, in remat__sum_partials' interleaved
 * partials (remat-impl.h) carried from plane to plane. */
/* Training statistics of channel c: mean and biased variance, two passes. */
static void channel_stats(const void *x, int bf, float *buf, int64_t N, int64_t C, int64_t HW, int64_t c, double *mean,
                          double *var) {
    double M = (double)(N * HW), acc[REMAT__PARTIALS] = {0};
    for (int64_t n = 0; n < N; n++) remat__sum_partials(plane(x, bf, (n * C + c) * HW, HW, buf), HW, acc);
    double mu = remat__partials_total(acc) / M, q[REMAT__PARTIALS] = {0};
    for (int64_t n = 0; n < N; n++) {
        const float *xc = plane(x, bf, (n * C + c) * HW, HW, buf);
        int64_t i = 0;
        for (; i + REMAT__PARTIALS <= HW; i += REMAT__PARTIALS)
            for (int j = 0; j < REMAT__PARTIALS; j++) {
                double d = (double)xc[i + j] - mu;
                q[j] += d * d;
            }
        for (int j = 0; i + j < HW; j++) {
            double d = (double)xc[i + j] - mu;
            q[j] += d * d;
        }
    }
    *mean = mu;
    *var = remat__partials_total(q) / M;
}

/* sum dy and sum dy * xhat over channel c, xhat = (x - mu) * is. */
static void channel_dsums(const void *x, const void *dy, int bf, float *buf, int64_t N, int64_t C, int64_t HW,
                          int64_t c, double mu, double is, double *sdy, double *sdx) {
    double ay[REMAT__PARTIALS] = {0}, ax[REMAT__PARTIALS] = {0};
    for (int64_t n = 0; n < N; n++) {
        const float *xc = plane(x, bf, (n * C + c) * HW, HW, buf), *dyc = plane(dy, bf, (n * C + c) * HW, HW, buf + HW);
        int64_t i = 0;
        for (; i + REMAT__PARTIALS <= HW; i += REMAT__PARTIALS)
            for (int j = 0; j < REMAT__PARTIALS; j++) {
                ay[j] += (double)dyc[i + j];
                ax[j] += (double)dyc[i + j] * (((double)xc[i + j] - mu) * is);
            }
        for (int j = 0; i + j < HW; j++) {
            ay[j] += (double)dyc[i + j];
            ax[j] += (double)dyc[i + j] * (((double)xc[i + j] - mu) * is);
        }
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
    float *buf = bf ? (float *)k->ws + (size_t)ith * (size_t)HW : NULL; /* bf16: this thread's plane */
    int64_t lo, hi;
    remat__split(C, ith, nth, &lo, &hi);
    for (int64_t c = lo; c < hi; c++) {
        if (!k->train) {
            amean[c] = rmean[c];
            ainvstd[c] = (float)(1.0 / sqrt((double)rvar[c] + eps));
        } else if (k->first) {
            double mu, var;
            channel_stats(x, bf, buf, N, C, HW, c, &mu, &var);
            amean[c] = (float)mu;
            ainvstd[c] = (float)(1.0 / sqrt(var + eps));
            if (k->stats) /* (2, C): committed after the step, in micro-batch order */
                k->stats[c] = mu, k->stats[C + c] = var;
            else commit_channel(rmean, rvar, c, mu, var, mom, M);
        } /* else: a recomputation; aux already holds this step's statistics */
        float mu = amean[c], sc = ainvstd[c] * gamma[c], b = beta[c];
        for (int64_t n = 0; n < N; n++) {
            int64_t off = (n * C + c) * HW;
            const float *xc = plane(x, bf, off, HW, buf);
            float *yc = bf ? buf : (float *)y + off; /* bf16: over the widened plane, then rounded */
            for (int64_t i = 0; i < HW; i++) yc[i] = (xc[i] - mu) * sc + b;
            if (bf) remat__pw16_convert((uint16_t *)y + off, buf, HW, REMAT__CVT_DOWN);
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
    float *buf = bf ? (float *)k->ws + 2 * (size_t)ith * (size_t)HW : NULL; /* bf16: x's and dy's planes */
    int64_t lo, hi;
    remat__split(C, ith, nth, &lo, &hi);
    for (int64_t c = lo; c < hi; c++) {
        double mu = amean[c], is = ainvstd[c], sdy, sdx;
        channel_dsums(x, dy, bf, buf, N, C, HW, c, mu, is, &sdy, &sdx);
        if (dgamma) dgamma[c] += (float)sdx;
        if (dbeta) dbeta[c] += (float)sdy;
        if (!dx) continue;
        /* dx = gamma * is * (dy - mean(dy) - xhat * mean(dy * xhat)), in
         * float per element (the sums above are double) */
        const float a = (float)((double)gamma[c] * is), muf = amean[c], isf = ainvstd[c];
        const float mdy = k->train ? (float)(sdy / (double)M) : 0.0f;
        const float mdx = k->train ? (float)(sdx / (double)M) : 0.0f;
        for (int64_t n = 0; n < N; n++) {
            int64_t off = (n * C + c) * HW;
            const float *xc = plane(x, bf, off, HW, buf), *dyc = plane(dy, bf, off, HW, buf + HW);
            if (!bf) {
                float *dxc = (float *)dx + off;
                for (int64_t i = 0; i < HW; i++) {
                    float xhat = (xc[i] - muf) * isf;
                    dxc[i] += a * (dyc[i] - mdy - xhat * mdx);
                }
                continue;
            }
            /* the view: its zero plus the term (over dy's plane, element
             * by element), rounded, added, rounded (REMAT__CVT_ACC_BF16) */
            float *tc = buf + HW;
            for (int64_t i = 0; i < HW; i++) {
                float xhat = (xc[i] - muf) * isf, t = 0.0f;
                t += a * (dyc[i] - mdy - xhat * mdx);
                tc[i] = t;
            }
            remat__pw16_convert((uint16_t *)dx + off, tc, HW, REMAT__CVT_ACC_BF16);
        }
    }
}

/* Under bf16 with x stored in bf16: the kernels above take x, y, dy and dx
 * as they are stored, with a float32 plane per thread (forward) and two
 * (backward). */
static int bn_bf16_ws(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd,
                      size_t *bwd) {
    for (int i = 1; i < 5; i++)
        if (dt[n->in[i]] != REMAT_F32) return 0;
    if (dt[n->in[0]] != REMAT_BF16) return 0;
    const remat__shape *x = remat__in_shape(g, n, 0);
    size_t hw = (size_t)(x->d[2] * x->d[3]) * sizeof(float);
    *fwd = (size_t)nth * hw;
    *bwd = 2 * (size_t)nth * hw;
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
