/* conv1x1.h: what k_conv.cu needs of k_conv1x1.cu, the 1x1 convolutions
 * that run as cuBLAS products instead of through cuDNN (CUDA C++).
 *
 * The rule (remat__conv1x1_gemm) reads the node's shapes only, so a node
 * takes the same path, and computes the same bits, in every schedule, at
 * every budget, with or without a device to plan for.
 */
#ifndef REMAT_CONV1X1_H
#define REMAT_CONV1X1_H

#include "cuda-impl.h"

extern "C" {
/* 1: node n of g (a conv2d) runs as products: a 1x1 kernel, padding 0,
 * any stride, and every tensor under 2^31 elements (cuBLAS's int sizes). */
int remat__conv1x1_gemm(const remat_graph *g, const remat__node *n);
/* Workspace bytes of the forward and of backward's dx and dW (256-byte
 * multiples; backward's db partials are k_conv.cu's and reuse offset 0
 * after the products). Exact, from the shapes, with or without a device. */
size_t remat__conv1x1_fwd_ws(const remat_graph *g, const remat__node *n);
size_t remat__conv1x1_bwd_ws(const remat_graph *g, const remat__node *n);
/* y = conv(x, w) (the bias is k_conv.cu's, added after). */
remat_status remat__conv1x1_forward(const remat__kctx *k);
/* dx += conv's input gradient, dW += its weight gradient, each only when
 * its din is non-NULL (db is k_conv.cu's). */
remat_status remat__conv1x1_backward(const remat__kctx *k);
/* The bf16 policy's (kctx.dt set): the same products on bf16 operands
 * with float32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F); x bf16 or
 * float32 (xf32: rounded to bf16 in the workspace), y and dy bf16, W
 * float32 rounded to bf16 per call. Workspace bytes (256-byte multiples;
 * backward's db partials are k_conv.cu's, at offset 0 after the
 * products), then the kernels: y = bf16(W X) (no bias); dx += bf16(W^T dy)
 * added in float32 (rounded again when dx is bf16); dW += bf16(the float32
 * sum over every image of dy X^T). */
size_t remat__conv1x1_fwd16_ws(const remat_graph *g, const remat__node *n, int xf32);
size_t remat__conv1x1_bwd16_ws(const remat_graph *g, const remat__node *n, int xf32);
remat_status remat__conv1x1_forward16(const remat__kctx *k);
remat_status remat__conv1x1_backward16(const remat__kctx *k);
}

#endif
