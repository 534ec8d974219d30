/* dnnl.h: CPU products through oneDNN (src/ops/dnnl.c, dnnl_conv.c, dnnl_gemm.c).
 *
 * Convolutions (forward, backward-data, backward-weights) run as oneDNN's
 * direct primitives in the layouts it prefers (reordered into and out of
 * planned workspace), and matrix products as oneDNN's matmul primitive,
 * both with the instruction set oneDNN picks at run time (DNNL_MAX_CPU_ISA
 * caps it). Every primitive's scratchpad is user-managed
 * (dnnl_scratchpad_mode_user), its bytes queried when the op's workspace
 * is sized and part of that workspace, so oneDNN allocates nothing while
 * a kernel runs; what it keeps is its primitives (JIT code and
 * descriptors, made on first use, held by the context: see
 * docs/architecture.md, "What the plan does not hold").
 * Which product runs where is a rule on the op's shape and thread count
 * (remat__dnnl_conv_plan, remat__dnnl_gemm_use), never a timing, so a
 * node computes the same bits in every schedule.
 *
 * Threading: remat's pool splits the work (images, rows) as for BLAS, and
 * each pool thread runs oneDNN single-threaded on its part. Debian's
 * oneDNN runs on OpenMP; the thread's own OpenMP thread count (an ICV of
 * the calling thread, not of the process) is set to 1 around each call and
 * restored after it, so a caller's OpenMP setting is never changed.
 *
 * Without oneDNN (REMAT_DNNL off) every function here answers "not used"
 * and the kernels keep im2col + OpenBLAS.
 */
#ifndef REMAT_OPS_DNNL_H
#define REMAT_OPS_DNNL_H

#include "../remat-impl.h"

/* A convolution's sizes: x (N, C, H, W), weight (O, C, KH, KW), output
 * (N, O, OH, OW), stride s, padding p on every side, bias or not. With
 * bf16 (the bf16 policy's products, run natively): oneDNN multiplies bf16
 * and accumulates in float32; y and dy are bf16, x and dx bf16 when xbf16
 * (else float32, rounded through bf16 on the way in); the float32 weights
 * and bias are rounded through bf16 per call, and each of dx, dw, db is
 * rounded through bf16 before it is added (the float32 views' semantics,
 * exec/views.c). Without bf16 every tensor is float32. */
typedef struct {
    int64_t N, C, H, W, O, KH, KW, OH, OW, s, p;
    int bias;
    int bf16, xbf16;
} remat__conv_dims;

/* Which products a process uses: REMAT_PRODUCTS=dnnl sends every product
 * oneDNN can run through oneDNN, =blas none, unset (or auto) follows the
 * measured rule. Read when a session (its oneDNN context) is created and
 * when workspace is sized, which happen together. */
typedef enum { REMAT__PRODUCTS_AUTO, REMAT__PRODUCTS_DNNL, REMAT__PRODUCTS_BLAS } remat__products;
remat__products remat__products_mode(void);

/* The per-session oneDNN context: an engine, one stream per pool thread,
 * and the primitives made so far, keyed by convolution shape and thread
 * count (made on first use, kept until destroy). Owned by the CPU backend
 * and handed to kernels in remat__kctx.dnnl. Thread-safe. */
typedef struct remat__dnnl remat__dnnl;
/* *out = NULL (and REMAT_OK) when oneDNN is not built in. */
remat_status remat__dnnl_create(remat__dnnl **out);
void remat__dnnl_destroy(remat__dnnl *d);
/* A oneDNN failure during a kernel (out of memory making a primitive):
 * REMAT_OK, or the first failure's status after remat__err. */
remat_status remat__dnnl_status(remat__dnnl *d);

/* Whether the convolution runs through oneDNN on nth threads, and its
 * workspace bytes if so (forward and backward). Depends on the dims, nth,
 * the process's mode and the machine's ISA only. A bf16 convolution runs
 * through oneDNN by the rule only where the machine multiplies bf16 in
 * hardware (AVX-512 BF16, AMX); elsewhere only when REMAT_PRODUCTS=dnnl
 * (oneDNN then emulates it, slower than float32: the tests' path). */
int remat__dnnl_conv_use(const remat__conv_dims *cd, int nth, size_t *fwd_ws, size_t *bwd_ws);

/* The same answer for a kernel, from the context's plans (made on first
 * use, with their primitives). 0 when d is NULL. */
int remat__dnnl_conv_uses(remat__dnnl *d, const remat__conv_dims *cd, int nth);

/* The kernels, called by every pool thread (ith of nth) with ws of the
 * sizes above. forward writes y; backward ACCUMULATES into dx, dw, db
 * where they are not NULL. Both may call remat__pool_barrier(pool). */
void remat__dnnl_conv_forward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w, const float *b,
                              void *y, void *ws, remat__pool *pool, int ith, int nth);
void remat__dnnl_conv_backward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w,
                               const void *dy, void *dx, float *dw, float *db, void *ws, remat__pool *pool, int ith,
                               int nth);

/* A row-major product C (M, N) = op(A) op(B), added into C when beta1
 * (else overwriting it), op transposing A when ta, B when tb; A is
 * (M, K) after op, B (K, N). */
typedef struct {
    int ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    int beta1;
} remat__mm;

/* The float32 rule on a product's shape: oneDNN where every side is at
 * least 256 (REMAT_PRODUCTS unset). */
int remat__dnnl_gemm_use(int64_t M, int64_t N, int64_t K);
/* Whether a float32 product runs through oneDNN (the process's mode, the
 * rule, and oneDNN having a kernel for it that takes all its memory from
 * the scratchpad: its brgemm kernels), with that scratchpad's bytes in
 * *scratch (0 when not). Asked afresh (planning) or of a context, which
 * keeps the shape's primitive (made on first use): the same answer. */
int remat__dnnl_f32_gemm_use(const remat__mm *mm, size_t *scratch);
int remat__dnnl_f32_gemm_scratch(remat__dnnl *d, const remat__mm *mm, size_t *scratch);
/* The float32 product on the calling thread alone (thread ith of the
 * pool): through oneDNN with `scratch` (remat__dnnl_f32_gemm_scratch's
 * bytes, planned) when it says so, else cblas_sgemm. `d` may be NULL
 * (then cblas). */
void remat__gemm(remat__dnnl *d, int ith, const remat__mm *mm, const float *A, const float *B, float *C, void *scratch);

/* bf16 products (the bf16 policy's linear layers, run natively): C (M, N)
 * = op(A) op(B), overwritten, with A and B bf16, row-major (op: transposed
 * when mm->ta, mm->tb; mm->beta1 must be 0), on the calling thread alone,
 * through oneDNN's matmul primitive (made per shape on first use, kept in
 * the context). C is float32 (REMAT__MM_F32), or bf16 rounded once from
 * the float32 sum, with a bf16 bias of N added first under
 * REMAT__MM_BF16_BIAS (the forward's epilogue done by the product).
 * remat__dnnl_bf16_gemm_use: whether the process runs bf16 products
 * through oneDNN (the rule: on a machine that multiplies bf16 in hardware,
 * or REMAT_PRODUCTS=dnnl; never with REMAT_PRODUCTS=blas) and oneDNN has a
 * kernel for this one here (not its reference loops), with its
 * scratchpad's bytes in *scratch. Returns 0 on a failure (recorded). */
typedef enum { REMAT__MM_F32, REMAT__MM_BF16, REMAT__MM_BF16_BIAS } remat__mm_out;
int remat__dnnl_bf16_gemm_use(const remat__mm *mm, remat__mm_out out, size_t *scratch);
/* The same answer from a context, which keeps the shape's primitive (made
 * on first use): what a kernel asks on every call. */
int remat__dnnl_bf16_gemm_scratch(remat__dnnl *d, const remat__mm *mm, remat__mm_out out, size_t *scratch);
int remat__dnnl_bf16_gemm(remat__dnnl *d, int ith, const remat__mm *mm, remat__mm_out out, const uint16_t *A,
                          const uint16_t *B, const uint16_t *bias, void *C, void *scratch);
/* remat__dnnl_bf16_gemm_scratch's answer without recording a failure
 * where oneDNN has no kernel (0 then): for a rule asked on every call. */
int remat__dnnl_bf16_gemm_have(remat__dnnl *d, const remat__mm *mm, remat__mm_out out, size_t *scratch);

/* The bf16 policy's 1x1 convolutions (stride 1, no padding, no bias, x in
 * bf16) as bf16 products on NCHW (dnnl_conv1x1.c), where oneDNN has them:
 * remat__dnnl_conv_use and its kernels take this path first. _use asks
 * with a fresh engine (planning); the kernels ask the context (the same
 * answer) and return 0, having done nothing, where the rule says no, else
 * run as remat__dnnl_conv_forward's and _backward's and return 1. */
int remat__dnnl_conv1x1_use(const remat__conv_dims *cd, int nth, size_t *fwd_ws, size_t *bwd_ws);
int remat__dnnl_conv1x1_forward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w, void *y,
                                void *ws, remat__pool *pool, int ith, int nth);
int remat__dnnl_conv1x1_backward(remat__dnnl *d, const remat__conv_dims *cd, const void *x, const float *w,
                                 const void *dy, void *dx, float *dw, void *ws, remat__pool *pool, int ith, int nth);

/* "oneDNN 2.6.3 (OMP), ISA avx512_core_bf16" or "oneDNN off", in buf. */
const char *remat__dnnl_describe(char *buf, size_t cap);

#endif /* REMAT_OPS_DNNL_H */
