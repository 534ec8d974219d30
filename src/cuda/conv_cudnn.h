/* conv_cudnn.h: what k_conv.cu needs of conv_cudnn.cu (CUDA C++): a
 * conv2d node's cached cuDNN descriptors and algorithms.
 */
#ifndef REMAT_CONV_CUDNN_H
#define REMAT_CONV_CUDNN_H

#include "cuda-impl.h"

/* Largest cuDNN workspace an algorithm may ask for: twice the bytes of the
 * convolution's own tensors (x, w, y), and at least CONV_WS_FLOOR. The
 * workspace is planned memory, taken from the budget while the kernel runs,
 * so it must stay in proportion to the tensors: the fast engines on H100
 * transpose x and dy (TF32 1x1 stride-2 backward: x + dy bytes, 294 MiB at
 * ResNet-50 b64), and a fixed cap would bar them at larger batches, while
 * FFT variants can ask for many times the tensors (2.3 GiB for the 1x1
 * 512->2048 layer at 7x7, b64, whose tensors take 31 MiB). The floor
 * admits the FFT algorithms that the heuristics rank first on mid-sized
 * layers (205 MiB for 128 channels at 28x28, b64). Measured on
 * an H100 (cuDNN 9.14): each of the 12 distinct ResNet-50 b64 layer shapes
 * gets the heuristics' first deterministic non-Winograd choice under this
 * cap, in both math modes. */
#define CONV_WS_FLOOR ((size_t)256 << 20)

enum { PASS_FWD, PASS_DATA, PASS_FILT };

typedef struct {
    int ready;  /* descriptors made and algorithms chosen */
    int broken; /* setup failed when a workspace was sized: the planned
                 * bytes (0) cannot be trusted by a later kernel */
    int bias;
    int half;                        /* bf16 x, w, y (the bf16 policy's native kernels), float32
                                      * convolution; else float32 throughout */
    int nhwc;                        /* bf16 only: x, y and w channels-last (cu->conv16_nhwc) */
    cudnnTensorDescriptor_t x, y, b; /* (N, C, H, W), (N, O, OH, OW), (1, O, 1, 1); nhwc: stored
                                      * (N, H, W, C) and (N, OH, OW, O) */
    cudnnFilterDescriptor_t w;       /* (O, C, KH, KW); nhwc: stored (O, KH, KW, C) */
    cudnnConvolutionDescriptor_t conv;
    /* Per pass (PASS_FWD, PASS_DATA, PASS_FILT): the algorithm (a
     * cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t), its math type (set on
     * conv before each call: the passes may differ) and workspace bytes. */
    int algo[3];
    cudnnMathType_t math[3];
    size_t bytes[3];
    size_t cap; /* largest workspace an algorithm may take (see CONV_WS_FLOOR) */
} conv_entry;

static inline size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

extern "C" {
/* The cache entry of node n of g (half: the bf16 entry), made (cache and
 * entry) if missing; k is NULL when called from a workspace function.
 * REMAT_UNSUPPORTED for shapes cuDNN's int sizes cannot take,
 * REMAT_INTERNAL when setup failed. */
remat_status remat__conv_entry(remat__cuda *cu, const remat_graph *g, const remat__node *n, const remat__kctx *k,
                               int half, conv_entry **out);
}

#endif
