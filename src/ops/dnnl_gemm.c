/* dnnl_gemm.c: matrix products (see dnnl.h): float32 products through
 * oneDNN's sgemm or cblas_sgemm by a rule on the shape, and the bf16
 * policy's bf16 products through oneDNN's matmul primitive, made per shape
 * on first use with a planned scratchpad.
 */
#include "dnnl.h"

#include <cblas.h>
#include <stdlib.h>

static void cblas_gemm(int transa, int transb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans, (int)M,
                (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

#ifndef REMAT_HAVE_DNNL

int remat__dnnl_gemm_use(int64_t M, int64_t N, int64_t K) {
    (void)M, (void)N, (void)K;
    return 0;
}
int remat__dnnl_bf16_gemm_use(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                              int64_t ldc, size_t *scratch) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)ldc;
    *scratch = 0;
    return 0;
}
int remat__dnnl_bf16_gemm_scratch(remat__dnnl *d, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                                  int64_t ldb, int64_t ldc, size_t *scratch) {
    (void)d, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)ldc;
    *scratch = 0;
    return 0;
}
int remat__dnnl_bf16_gemm(remat__dnnl *d, int ith, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C, int64_t ldc,
                          void *scratch) {
    (void)d, (void)ith, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
    (void)C, (void)ldc, (void)scratch;
    return 0;
}
void remat__gemm(const remat__dnnl *d, int transa, int transb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    (void)d;
    cblas_gemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#else /* REMAT_HAVE_DNNL */

#include "dnnl-impl.h"

/* A bf16 product's primitive (remat__dnnl_bf16_gemm), per shape. */
typedef struct mm_plan {
    int ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    dnnl_memory_desc_t a, b, c;
    dnnl_primitive_t prim;
    size_t scratch;
    struct mm_plan *next;
} mm_plan;

void remat__dnnl_mm_plans_free(remat__dnnl *d) {
    for (mm_plan *p = d->mms, *nx; p; p = nx) {
        nx = p->next;
        if (p->prim) dnnl_primitive_destroy(p->prim);
        free(p);
    }
}

/* The bf16 product's descriptors (and primitive when prims); 0 when
 * oneDNN has no kernel for it here but its reference loops. */
static int mm_make(dnnl_engine_t eng, mm_plan *p, int prims) {
    dnnl_dims_t ad = {p->M, p->K}, bd = {p->K, p->N}, cd = {p->M, p->N};
    dnnl_dims_t as = {p->ta ? 1 : p->lda, p->ta ? p->lda : 1}, bs = {p->tb ? 1 : p->ldb, p->tb ? p->ldb : 1};
    dnnl_dims_t cs = {p->ldc, 1};
    dnnl_matmul_desc_t md;
    if (dnnl_memory_desc_init_by_strides(&p->a, 2, ad, dnnl_bf16, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&p->b, 2, bd, dnnl_bf16, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&p->c, 2, cd, dnnl_f32, cs) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &p->a, &p->b, NULL, &p->c) != dnnl_success)
        return 0;
    dnnl_primitive_desc_t pd = remat__dnnl_make_pd(eng, &md, NULL);
    if (!pd) return 0;
    int ok = !strstr(remat__dnnl_impl_of(pd), "ref");
    p->scratch = remat__dnnl_pd_scratch(pd);
    if (ok && prims) ok = dnnl_primitive_create(&p->prim, pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

static int bf16_products(remat__products mode) {
    return mode == REMAT__PRODUCTS_DNNL || (mode == REMAT__PRODUCTS_AUTO && remat__dnnl_bf16_hardware());
}

int remat__dnnl_bf16_gemm_use(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                              int64_t ldc, size_t *scratch) {
    *scratch = 0;
    if (!bf16_products(remat__products_mode()) || M < 1 || N < 1 || K < 1) return 0;
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
    mm_plan p = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc};
    int t = remat__dnnl_single_enter();
    int ok = mm_make(eng, &p, 0);
    remat__dnnl_single_leave(t);
    dnnl_engine_destroy(eng);
    if (ok) *scratch = remat__dnnl_up(p.scratch);
    return ok;
}

/* The bf16 product's plan, made on first use; NULL after recording a
 * failure. */
static mm_plan *get_mm(remat__dnnl *d, const mm_plan *key) {
    pthread_mutex_lock(&d->mu);
    mm_plan *p = d->mms;
    for (; p; p = p->next)
        if (p->ta == key->ta && p->tb == key->tb && p->M == key->M && p->N == key->N && p->K == key->K &&
            p->lda == key->lda && p->ldb == key->ldb && p->ldc == key->ldc)
            break;
    if (!p && (p = malloc(sizeof *p))) {
        *p = *key;
        p->prim = NULL;
        int t = remat__dnnl_single_enter();
        int ok = mm_make(d->eng, p, 1);
        remat__dnnl_single_leave(t);
        if (ok) {
            p->next = d->mms;
            d->mms = p;
        } else {
            if (p->prim) dnnl_primitive_destroy(p->prim);
            free(p);
            p = NULL;
        }
    }
    if (!p) remat__dnnl_fail(d, "making a bf16 product's primitive");
    pthread_mutex_unlock(&d->mu);
    return p;
}

int remat__dnnl_bf16_gemm_scratch(remat__dnnl *d, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                                  int64_t ldb, int64_t ldc, size_t *scratch) {
    mm_plan key = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc};
    mm_plan *p = get_mm(d, &key);
    *scratch = p ? remat__dnnl_up(p->scratch) : 0;
    return p != NULL;
}

int remat__dnnl_bf16_gemm(remat__dnnl *d, int ith, int ta, int tb, int64_t M, int64_t N, int64_t K,
                          const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float *C, int64_t ldc,
                          void *scratch) {
    if (M < 1 || N < 1) return 1;
    mm_plan key = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc};
    mm_plan *p = get_mm(d, &key);
    dnnl_stream_t s;
    if (!p || !remat__dnnl_thread_stream(d, ith, &s)) return 0;
    int t = remat__dnnl_single_enter();
    dnnl_memory_desc_t smd = remat__dnnl_scratch_md(p->scratch);
    int ids[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    const dnnl_memory_desc_t *mds[] = {&p->a, &p->b, &p->c, &smd};
    void *ptrs[] = {(void *)A, (void *)B, C, p->scratch ? scratch : NULL};
    int ok = remat__dnnl_run(d, s, p->prim, 4, ids, mds, ptrs);
    remat__dnnl_single_leave(t);
    return ok;
}

/* oneDNN's sgemm where every side of the product is at least 256 (GPT-2's
 * layers at 4x256 tokens: 1.0-1.36x); OpenBLAS for the thinner products
 * of a classifier's head at batch 128 (oneDNN 0.6-0.8x there). */
int remat__dnnl_gemm_use(int64_t M, int64_t N, int64_t K) { return M >= 256 && N >= 256 && K >= 256; }

void remat__gemm(const remat__dnnl *d, int transa, int transb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    int use = d && d->mode != REMAT__PRODUCTS_BLAS &&
              (d->mode == REMAT__PRODUCTS_DNNL || remat__dnnl_gemm_use(M, N, K));
    if (!use) {
        cblas_gemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int t = remat__dnnl_single_enter();
    dnnl_sgemm(transa ? 'T' : 'N', transb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    remat__dnnl_single_leave(t);
}

#endif /* REMAT_HAVE_DNNL */
