/* conv_cudnn.cu: conv2d's cuDNN setup for k_conv.cu: per node, the
 * tensor, filter and convolution descriptors and the algorithm of each pass
 * (forward, backward data, backward filter), made once and cached.
 *
 * Algorithms come from cuDNN's _v7 heuristics, never from the timing-based
 * Find (whose choice can change from run to run with the timings): per
 * pass, the first result that succeeded, is deterministic, is not Winograd
 * (too inaccurate in fp32), uses a math type the session allows (FMA only,
 * unless cu->tf32) and needs at most a cap of workspace (twice the node's
 * tensors, at least 256 MiB); failing that, the deterministic algorithm
 * that needs the least workspace (see choose). Given the shapes, the
 * device, the cuDNN version and cu->tf32 the choice is fixed, so the
 * workspace functions (called once per node at session creation) and the
 * kernels agree on it.
 *
 * The per-node cache (descriptors, algorithms, math types, workspace
 * bytes) hangs from cu->conv, indexed by the node's position in cu->g, and
 * is freed by remat__cuda_conv_release at backend teardown.
 */
#include "conv_cudnn.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int n;           /* nodes of the graph it was made for */
    conv_entry *e;   /* (n) float32 entries */
    conv_entry *e16; /* (n) bf16 entries (conv16_ws and the bf16 kernels) */
} conv_cache;

static void entry_destroy(conv_entry *e) {
    if (e->x) cudnnDestroyTensorDescriptor(e->x);
    if (e->y) cudnnDestroyTensorDescriptor(e->y);
    if (e->b) cudnnDestroyTensorDescriptor(e->b);
    if (e->w) cudnnDestroyFilterDescriptor(e->w);
    if (e->conv) cudnnDestroyConvolutionDescriptor(e->conv);
    e->x = e->y = e->b = NULL;
    e->w = NULL;
    e->conv = NULL;
    e->ready = 0;
}

extern "C" void remat__cuda_conv_release(remat__cuda *cu) {
    conv_cache *c = (conv_cache *)cu->conv;
    if (!c) return;
    for (int i = 0; i < c->n; i++) entry_destroy(&c->e[i]), entry_destroy(&c->e16[i]);
    free(c->e);
    free(c->e16);
    free(c);
    cu->conv = NULL;
}

/* Math types an algorithm may use: FMA only when TF32 is off (cuDNN's
 * DEFAULT_MATH admits TF32 on Ampere and later); with TF32 on, anything but
 * ALLOW_CONVERSION, which may round float inputs to half. */
static int math_ok(const remat__cuda *cu, const conv_entry *e, cudnnMathType_t m) {
    if (e->half) return m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (!cu->tf32) return m == CUDNN_FMA_MATH;
    return m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

static cudnnMathType_t base_math(const remat__cuda *cu, const conv_entry *e) {
    if (e->half) return CUDNN_DEFAULT_MATH; /* bf16 products on tensor cores */
    return cu->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* Winograd algorithms are excluded: their transforms lose accuracy in
 * fp32 beyond the 1e-5 (of the largest magnitude) that results must keep
 * against the CPU kernels. Measured on an H100 against a double
 * reference: WINOGRAD_NONFUSED 5e-6 to 2e-5 on 3x3 kernels and 3e-3 on
 * 5x5 (FFT and GEMM variants: at most 2e-6). */
static int winograd(int pass, int algo) {
    switch (pass) {
    case PASS_FWD:
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case PASS_DATA:
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    default:
        return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
    }
}

/* The fields of cuDNN's three perf structs that the choice reads. */
typedef struct {
    int algo;
    cudnnStatus_t status;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;
    size_t memory;
} algo_perf;

#define MAX_ALGOS 8
static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= MAX_ALGOS && CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= MAX_ALGOS &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= MAX_ALGOS,
              "algo_perf arrays hold every algorithm of each pass");

/* The _v7 heuristics' ranking for a pass, at the math type now set on
 * e->conv, into out[0 .. *got). */
static cudnnStatus_t heuristics(remat__cuda *cu, const conv_entry *e, int pass, algo_perf *out, int *got) {
    cudnnStatus_t st;
    *got = 0;
    if (pass == PASS_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        st = cudnnGetConvolutionForwardAlgorithm_v7(cu->dnn, e->x, e->w, e->conv, e->y,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, got, p);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < *got; i++)
            out[i] = algo_perf{(int)p[i].algo, p[i].status, p[i].determinism, p[i].mathType, p[i].memory};
    } else if (pass == PASS_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        st = cudnnGetConvolutionBackwardDataAlgorithm_v7(cu->dnn, e->w, e->y, e->conv, e->x,
                                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, got, p);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < *got; i++)
            out[i] = algo_perf{(int)p[i].algo, p[i].status, p[i].determinism, p[i].mathType, p[i].memory};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(cu->dnn, e->x, e->y, e->conv, e->w,
                                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, got, p);
        for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < *got; i++)
            out[i] = algo_perf{(int)p[i].algo, p[i].status, p[i].determinism, p[i].mathType, p[i].memory};
    }
    return st;
}

/* Workspace bytes of algo for a pass at math type m (set on e->conv). */
static cudnnStatus_t ws_size(remat__cuda *cu, const conv_entry *e, int pass, int algo, cudnnMathType_t m,
                             size_t *bytes) {
    cudnnStatus_t st = cudnnSetConvolutionMathType(e->conv, m);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (pass == PASS_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(cu->dnn, e->x, e->w, e->conv, e->y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    if (pass == PASS_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(cu->dnn, e->w, e->y, e->conv, e->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(cu->dnn, e->x, e->y, e->conv, e->w,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

static const char *const pass_name[3] = {"forward", "backward data", "backward filter"};

/* Chooses a pass's algorithm: the heuristics' first result (queried with
 * the session's math type on the descriptor, so the ranking respects it)
 * that succeeded, is deterministic (BackwardData's ALGO_0 and
 * BackwardFilter's ALGO_0 and ALGO_3 sum with atomics), is not Winograd,
 * uses an allowed math type, and needs at most e->cap bytes by cuDNN's own
 * size query at that math type. Failing that, the deterministic algorithm
 * that needs the least: IMPLICIT_GEMM / ALGO_1 / ALGO_1, at the session's
 * math type or, if that asks for more than the cap (with TF32 on H100 they
 * can transpose to NHWC through a workspace), at FMA math, which is always
 * allowed; its size query decides its bytes whatever they are. */
static remat_status choose_least16(remat__cuda *cu, conv_entry *e, int pass, const algo_perf *perf, int got,
                                   const remat__kctx *k) {
    int best = -1;
    size_t bytes, least = 0;
    for (int i = 0; i < got; i++) {
        const algo_perf *p = &perf[i];
        if (p->status != CUDNN_STATUS_SUCCESS || p->determinism != CUDNN_DETERMINISTIC || winograd(pass, p->algo) ||
            !math_ok(cu, e, p->math))
            continue;
        if (ws_size(cu, e, pass, p->algo, p->math, &bytes) != CUDNN_STATUS_SUCCESS) continue;
        if (best < 0 || bytes < least) best = i, least = bytes;
    }
    if (best < 0) {
        (void)k;
        return remat__err(REMAT_UNSUPPORTED,
                          "conv2d: cuDNN offers no deterministic bf16 algorithm for the %s "
                          "pass (the node runs on float32 views)",
                          pass_name[pass]);
    }
    e->algo[pass] = perf[best].algo, e->math[pass] = perf[best].math, e->bytes[pass] = least;
    return REMAT_OK;
}

static remat_status choose(remat__cuda *cu, conv_entry *e, int pass, const remat__kctx *k) {
    static const int fallback[3] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};
    algo_perf perf[MAX_ALGOS];
    int got = 0;
    size_t bytes;
    char call[96];
    REMAT__CU_TRY(
        remat__cu_dnn_ok(cudnnSetConvolutionMathType(e->conv, base_math(cu, e)), k, "cudnnSetConvolutionMathType"));
    snprintf(call, sizeof call, "cudnnGetConvolution*Algorithm_v7 (%s)", pass_name[pass]);
    REMAT__CU_TRY(remat__cu_dnn_ok(heuristics(cu, e, pass, perf, &got), k, call));
    for (int i = 0; i < got; i++) {
        const algo_perf *p = &perf[i];
        if (p->status != CUDNN_STATUS_SUCCESS || p->determinism != CUDNN_DETERMINISTIC || winograd(pass, p->algo) ||
            !math_ok(cu, e, p->math) || p->memory > e->cap)
            continue;
        if (ws_size(cu, e, pass, p->algo, p->math, &bytes) != CUDNN_STATUS_SUCCESS || bytes > e->cap) continue;
        e->algo[pass] = p->algo, e->math[pass] = p->math, e->bytes[pass] = bytes;
        return REMAT_OK;
    }
    if (e->half) return choose_least16(cu, e, pass, perf, got, k);
    snprintf(call, sizeof call, "cudnnGetConvolution*WorkspaceSize (%s fallback)", pass_name[pass]);
    e->algo[pass] = fallback[pass], e->math[pass] = base_math(cu, e);
    cudnnStatus_t st = ws_size(cu, e, pass, fallback[pass], e->math[pass], &e->bytes[pass]);
    if ((st != CUDNN_STATUS_SUCCESS || e->bytes[pass] > e->cap) && e->math[pass] != CUDNN_FMA_MATH) {
        e->math[pass] = CUDNN_FMA_MATH;
        st = ws_size(cu, e, pass, fallback[pass], e->math[pass], &e->bytes[pass]);
    }
    return remat__cu_dnn_ok(st, k, call);
}

/* A convolution node's words for messages, as remat__node_label's (the
 * cache serves conv2d nodes only; a workspace query has no kernel context
 * to name it). */
static const char *conv_label(const remat__node *n, char *buf, size_t cap) {
    if (n->name) snprintf(buf, cap, "conv2d '%s'", n->name);
    else snprintf(buf, cap, "conv2d");
    return buf;
}

/* Descriptors and algorithms for node n of g, into e (not ready yet; on
 * failure e keeps whatever descriptors were made, for release). */
static remat_status entry_setup(remat__cuda *cu, const remat_graph *g, const remat__node *n, conv_entry *e,
                                const remat__kctx *k) {
    const remat__shape *xs = remat__in_shape(g, n, 0), *ws = remat__in_shape(g, n, 1);
    const remat__shape *ys = &n->shape;
    const int64_t d64[] = {xs->d[0], xs->d[1], xs->d[2], xs->d[3],    ws->d[0],   ws->d[2],
                           ws->d[3], ys->d[2], ys->d[3], n->iattr[0], n->iattr[1]};
    char lb[128];
    /* cuDNN's 4-D descriptors take int dimensions and strides. */
    for (size_t i = 0; i < sizeof d64 / sizeof d64[0]; i++)
        if (d64[i] > INT_MAX)
            return remat__err(REMAT_UNSUPPORTED, "%s: a size of %lld does not fit cuDNN's int sizes",
                              conv_label(n, lb, sizeof lb), (long long)d64[i]);
    if (remat__numel(xs) > INT_MAX || remat__numel(ys) > INT_MAX || remat__numel(ws) > INT_MAX)
        return remat__err(REMAT_UNSUPPORTED,
                          "%s: a tensor of more than 2^31 elements does not fit "
                          "cuDNN's int strides",
                          conv_label(n, lb, sizeof lb));
    const int N = (int)xs->d[0], C = (int)xs->d[1], H = (int)xs->d[2], W = (int)xs->d[3];
    const int O = (int)ws->d[0], KH = (int)ws->d[2], KW = (int)ws->d[3];
    const int OH = (int)ys->d[2], OW = (int)ys->d[3];
    const int s = (int)n->iattr[0], p = (int)n->iattr[1];
    e->bias = n->n_in == 3;
    const cudnnDataType_t t = e->half ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;

#define DNN(call) REMAT__CU_TRY(remat__cu_dnn_ok((call), k, #call))
    if (!e->x) DNN(cudnnCreateTensorDescriptor(&e->x));
    if (!e->y) DNN(cudnnCreateTensorDescriptor(&e->y));
    if (!e->w) DNN(cudnnCreateFilterDescriptor(&e->w));
    if (!e->conv) DNN(cudnnCreateConvolutionDescriptor(&e->conv));
    const cudnnTensorFormat_t f = e->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    DNN(cudnnSetTensor4dDescriptor(e->x, f, t, N, C, H, W));
    DNN(cudnnSetTensor4dDescriptor(e->y, f, t, N, O, OH, OW));
    DNN(cudnnSetFilter4dDescriptor(e->w, t, f, O, C, KH, KW));
    DNN(cudnnSetConvolution2dDescriptor(e->conv, p, p, s, s, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    if (e->bias && !e->half) { /* bf16: the bias is conv16_bias_kernel's */
        if (!e->b) DNN(cudnnCreateTensorDescriptor(&e->b));
        DNN(cudnnSetTensor4dDescriptor(e->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, O, 1, 1));
    }
    /* The shape rule's output size must be cuDNN's. */
    int on, oc, oh, ow;
    DNN(cudnnGetConvolution2dForwardOutputDim(e->conv, e->x, e->w, &on, &oc, &oh, &ow));
#undef DNN
    if (on != N || oc != O || oh != OH || ow != OW)
        return remat__err(REMAT_INTERNAL,
                          "%s: cuDNN's output (%d, %d, %d, %d) is not the node's "
                          "(%d, %d, %d, %d)",
                          conv_label(n, lb, sizeof lb), on, oc, oh, ow, N, O, OH, OW);
    const size_t tensors =
        ((size_t)remat__numel(xs) + (size_t)remat__numel(ws) + (size_t)remat__numel(ys)) * sizeof(float);
    e->cap = cu->least_ws ? 0 : 2 * tensors > CONV_WS_FLOOR ? 2 * tensors : CONV_WS_FLOOR;
    for (int pass = PASS_FWD; pass <= PASS_FILT; pass++) REMAT__CU_TRY(choose(cu, e, pass, k));
    e->ready = 1;
    return REMAT_OK;
}

/* The cache entry of node n of g, made (cache and entry) if missing. k is
 * NULL when called from a workspace function. */
extern "C" remat_status remat__conv_entry(remat__cuda *cu, const remat_graph *g, const remat__node *n,
                                          const remat__kctx *k, int half, conv_entry **out) {
    char lb[128];
    conv_cache *c = (conv_cache *)cu->conv;
    if (!c) {
        c = (conv_cache *)calloc(1, sizeof *c);
        if (!c) return remat__err(REMAT_NOMEM, "conv2d: out of host memory for the cuDNN cache");
        c->e = (conv_entry *)calloc(g->n > 0 ? (size_t)g->n : 1, sizeof *c->e);
        c->e16 = (conv_entry *)calloc(g->n > 0 ? (size_t)g->n : 1, sizeof *c->e16);
        if (!c->e || !c->e16) {
            free(c->e);
            free(c->e16);
            free(c);
            return remat__err(REMAT_NOMEM, "conv2d: out of host memory for the cuDNN cache");
        }
        c->n = g->n;
        cu->conv = c;
    }
    ptrdiff_t i = n - g->nodes;
    if (i < 0 || i >= c->n)
        return remat__err(REMAT_INTERNAL,
                          "%s: node %lld is outside the graph the cuDNN cache was "
                          "made for (%d nodes)",
                          conv_label(n, lb, sizeof lb), (long long)i, c->n);
    conv_entry *e = half ? &c->e16[i] : &c->e[i];
    e->half = half;
    e->nhwc = half && cu->conv16_nhwc;
    if (!e->ready) {
        remat_status st = entry_setup(cu, g, n, e, k);
        if (st != REMAT_OK) {
            if (!k) e->broken = 1;
            return st;
        }
    }
    if (k && e->broken)
        return remat__err(REMAT_INTERNAL,
                          "%s: cuDNN setup failed when the session sized this "
                          "node's workspace, which was planned as 0 bytes",
                          conv_label(n, lb, sizeof lb));
    *out = e;
    return REMAT_OK;
}
