/* dnnl_gemm.c: matrix products (see dnnl.h) through oneDNN's matmul
 * primitive, made per shape on first use and kept in the context, with
 * its scratchpad in the op's planned workspace: the float32 products of
 * linear layers where a rule on the shape says oneDNN (else cblas_sgemm),
 * and the bf16 policy's bf16 products.
 *
 * Why matmul and not dnnl_sgemm: sgemm allocates its packing buffers
 * itself on every call (about 1.6 MB for a 256x768x768 product, 15.7 MB
 * for GPT-2's 768x50257 head, per thread), memory no plan sees; a matmul
 * primitive with a user scratchpad takes none. Only implementations that
 * keep every temporary in the scratchpad are taken: oneDNN's brgemm
 * kernels ("brg:", AVX-512 and up). Where oneDNN has only its gemm-based
 * matmul (which calls the same allocating driver) or its reference loops,
 * the float32 product stays on cblas_sgemm: below AVX-512, and in oneDNN
 * 2.6 for every operand that is not dense (a thread's rows of dW read a
 * strided, transposed slice of dy). The bf16 products take the gemm-based
 * matmul there (their other way is float32 views, other bits), and it
 * allocates outside the plan: open, docs/architecture.md.
 */
#include "dnnl.h"

#include <cblas.h>
#include <stdlib.h>

static void cblas_gemm(int transa, int transb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

#ifndef REMAT_HAVE_DNNL

int remat__dnnl_gemm_use(int64_t M, int64_t N, int64_t K) {
    (void)M, (void)N, (void)K;
    return 0;
}
int remat__dnnl_f32_gemm_use(const remat__mm *mm, size_t *scratch) {
    (void)mm;
    *scratch = 0;
    return 0;
}
int remat__dnnl_f32_gemm_scratch(remat__dnnl *d, const remat__mm *mm, size_t *scratch) {
    (void)d, (void)mm;
    *scratch = 0;
    return 0;
}
int remat__dnnl_bf16_gemm_use(const remat__mm *mm, remat__mm_out out, size_t *scratch) {
    (void)mm, (void)out;
    *scratch = 0;
    return 0;
}
int remat__dnnl_bf16_gemm_scratch(remat__dnnl *d, const remat__mm *mm, remat__mm_out out, size_t *scratch) {
    (void)d, (void)mm, (void)out;
    *scratch = 0;
    return 0;
}
int remat__dnnl_bf16_gemm(remat__dnnl *d, int ith, const remat__mm *mm, remat__mm_out out, const uint16_t *A,
                          const uint16_t *B, const uint16_t *bias, void *C, void *scratch) {
    (void)d, (void)ith, (void)mm, (void)out, (void)A, (void)B, (void)bias, (void)C, (void)scratch;
    return 0;
}
int remat__dnnl_bf16_gemm_have(remat__dnnl *d, const remat__mm *mm, remat__mm_out out, size_t *scratch) {
    (void)d, (void)mm, (void)out;
    *scratch = 0;
    return 0;
}
void remat__gemm(remat__dnnl *d, int ith, const remat__mm *mm, const float *A, const float *B, float *C,
                 void *scratch) {
    (void)d, (void)ith, (void)scratch;
    cblas_gemm(mm->ta, mm->tb, mm->M, mm->N, mm->K, A, mm->lda, B, mm->ldb, mm->beta1 ? 1.0f : 0.0f, C, mm->ldc);
}

#else /* REMAT_HAVE_DNNL */

#include "dnnl-impl.h"

/* A product's primitive, per shape and element types (bf16 inputs with
 * the result `out` says, or float32 throughout). */
typedef struct mm_plan {
    remat__mm s;
    int f32;
    remat__mm_out out;
    dnnl_memory_desc_t a, b, c, bias;
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

/* Whether the implementation keeps its temporaries in the scratchpad:
 * bf16, anything but the reference loops (as before this file took
 * float32 products); float32, only the brgemm kernels, since the
 * gemm-based matmul allocates sgemm's packing buffers itself. */
static int impl_ok(const_dnnl_primitive_desc_t pd, int f32) {
    const char *impl = remat__dnnl_impl_of(pd);
    return f32 ? !strncmp(impl, "brg", 3) : !strstr(impl, "ref");
}

/* The product's descriptors, its scratchpad's bytes, and its primitive
 * when prims; 0 when oneDNN has no implementation for it that impl_ok
 * takes. */
static int mm_make(dnnl_engine_t eng, mm_plan *p, int prims) {
    const remat__mm *m = &p->s;
    dnnl_data_type_t in = p->f32 ? dnnl_f32 : dnnl_bf16;
    dnnl_dims_t ad = {m->M, m->K}, bd = {m->K, m->N}, cd = {m->M, m->N};
    dnnl_dims_t as = {m->ta ? 1 : m->lda, m->ta ? m->lda : 1}, bs = {m->tb ? 1 : m->ldb, m->tb ? m->ldb : 1};
    dnnl_dims_t cs = {m->ldc, 1}, biasd = {1, m->N};
    dnnl_matmul_desc_t md;
    int bias = p->out == REMAT__MM_BF16_BIAS;
    if (dnnl_memory_desc_init_by_strides(&p->a, 2, ad, in, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&p->b, 2, bd, in, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&p->c, 2, cd, p->out == REMAT__MM_F32 ? dnnl_f32 : dnnl_bf16, cs) !=
            dnnl_success ||
        (bias && dnnl_memory_desc_init_by_tag(&p->bias, 2, biasd, dnnl_bf16, dnnl_ab) != dnnl_success) ||
        dnnl_matmul_desc_init(&md, &p->a, &p->b, bias ? &p->bias : NULL, &p->c) != dnnl_success)
        return 0;
    dnnl_primitive_attr_t a = remat__dnnl_user_scratch_attr(m->beta1); /* C += with a sum post-op */
    dnnl_primitive_desc_t pd = NULL;
    if (!a || dnnl_primitive_desc_create(&pd, &md, a, eng, NULL) != dnnl_success) pd = NULL;
    dnnl_primitive_attr_destroy(a);
    if (!pd) return 0;
    int ok = impl_ok(pd, p->f32);
    p->scratch = remat__dnnl_pd_scratch(pd);
    if (ok && prims) ok = dnnl_primitive_create(&p->prim, pd) == dnnl_success;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

static int bf16_products(remat__products mode) {
    return mode == REMAT__PRODUCTS_DNNL || (mode == REMAT__PRODUCTS_AUTO && remat__dnnl_bf16_hardware());
}

/* Whether oneDNN has the product, asked with a fresh engine (planning),
 * and its scratchpad. */
static int mm_use(const remat__mm *mm, int f32, remat__mm_out out, size_t *scratch) {
    *scratch = 0;
    if (mm->M < 1 || mm->N < 1 || mm->K < 1) return 0;
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
    mm_plan p = {.s = *mm, .f32 = f32, .out = out};
    int t = remat__dnnl_single_enter();
    int ok = mm_make(eng, &p, 0);
    remat__dnnl_single_leave(t);
    dnnl_engine_destroy(eng);
    if (ok) *scratch = remat__dnnl_up(p.scratch);
    return ok;
}

int remat__dnnl_bf16_gemm_use(const remat__mm *mm, remat__mm_out out, size_t *scratch) {
    *scratch = 0;
    return !mm->beta1 && bf16_products(remat__products_mode()) && mm_use(mm, 0, out, scratch);
}

/* The float32 rule: oneDNN where the process's mode and the shape say so
 * (remat__dnnl_gemm_use) and beta is 0 or 1. */
static int f32_wanted(remat__products mode, const remat__mm *mm) {
    return mode == REMAT__PRODUCTS_DNNL || (mode == REMAT__PRODUCTS_AUTO && remat__dnnl_gemm_use(mm->M, mm->N, mm->K));
}

int remat__dnnl_f32_gemm_use(const remat__mm *mm, size_t *scratch) {
    *scratch = 0;
    return f32_wanted(remat__products_mode(), mm) && mm_use(mm, 1, REMAT__MM_F32, scratch);
}

static int same_mm(const remat__mm *a, const remat__mm *b) {
    return a->ta == b->ta && a->tb == b->tb && a->M == b->M && a->N == b->N && a->K == b->K && a->lda == b->lda &&
           a->ldb == b->ldb && a->ldc == b->ldc && a->beta1 == b->beta1;
}

/* The product's plan, made on first use; NULL when oneDNN has none here
 * (recorded as a failure when `must`: a kernel was planned for it). A
 * product oneDNN has no kernel for is remembered too (prim NULL), so that
 * a kernel asking on every call does not describe it to oneDNN again. */
static mm_plan *get_mm(remat__dnnl *d, const remat__mm *key, int f32, remat__mm_out out, int must) {
    pthread_mutex_lock(&d->mu);
    mm_plan *p = d->mms;
    for (; p; p = p->next)
        if (p->f32 == f32 && p->out == out && same_mm(&p->s, key)) break;
    if (!p && (p = calloc(1, sizeof *p))) {
        p->s = *key;
        p->f32 = f32;
        p->out = out;
        int t = remat__dnnl_single_enter();
        if (!mm_make(d->eng, p, 1) && p->prim) dnnl_primitive_destroy(p->prim), p->prim = NULL;
        remat__dnnl_single_leave(t);
        p->next = d->mms;
        d->mms = p;
    }
    if (p && !p->prim) p = NULL;
    if (!p && must) remat__dnnl_fail(d, "making a product's primitive");
    pthread_mutex_unlock(&d->mu);
    return p;
}

int remat__dnnl_bf16_gemm_scratch(remat__dnnl *d, const remat__mm *mm, remat__mm_out out, size_t *scratch) {
    mm_plan *p = get_mm(d, mm, 0, out, 1);
    *scratch = p ? remat__dnnl_up(p->scratch) : 0;
    return p != NULL;
}

int remat__dnnl_bf16_gemm_have(remat__dnnl *d, const remat__mm *mm, remat__mm_out out, size_t *scratch) {
    *scratch = 0;
    if (!d || mm->beta1 || !bf16_products(d->mode)) return 0;
    mm_plan *p = get_mm(d, mm, 0, out, 0);
    if (p) *scratch = remat__dnnl_up(p->scratch);
    return p != NULL;
}

int remat__dnnl_f32_gemm_scratch(remat__dnnl *d, const remat__mm *mm, size_t *scratch) {
    *scratch = 0;
    if (!d || mm->M < 1 || mm->N < 1 || mm->K < 1 || !f32_wanted(d->mode, mm)) return 0;
    mm_plan *p = get_mm(d, mm, 1, REMAT__MM_F32, 0);
    if (p) *scratch = remat__dnnl_up(p->scratch);
    return p != NULL;
}

/* Runs plan p on thread ith: C = A B (+ bias) (+ C), with its
 * scratchpad. */
static int mm_run(remat__dnnl *d, int ith, const mm_plan *p, const void *A, const void *B, const void *bias, void *C,
                  void *scratch) {
    dnnl_stream_t s;
    if (!remat__dnnl_thread_stream(d, ith, &s)) return 0;
    int t = remat__dnnl_single_enter();
    dnnl_memory_desc_t smd = remat__dnnl_scratch_md(p->scratch);
    int ids[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[] = {&p->a, &p->b, &p->c, &smd, &p->bias};
    void *ptrs[] = {(void *)A, (void *)B, C, p->scratch ? scratch : NULL, (void *)bias};
    int ok = remat__dnnl_run(d, s, p->prim, p->out == REMAT__MM_BF16_BIAS ? 5 : 4, ids, mds, ptrs);
    remat__dnnl_single_leave(t);
    return ok;
}

int remat__dnnl_bf16_gemm(remat__dnnl *d, int ith, const remat__mm *mm, remat__mm_out out, const uint16_t *A,
                          const uint16_t *B, const uint16_t *bias, void *C, void *scratch) {
    if (mm->M < 1 || mm->N < 1) return 1;
    mm_plan *p = get_mm(d, mm, 0, out, 1);
    return p && mm_run(d, ith, p, A, B, bias, C, scratch);
}

/* oneDNN where every side of the product is at least 256 (GPT-2's
 * layers at 4x256 tokens: 1.0-1.36x); OpenBLAS for the thinner products
 * of a classifier's head at batch 128 (oneDNN 0.6-0.8x there). */
int remat__dnnl_gemm_use(int64_t M, int64_t N, int64_t K) { return M >= 256 && N >= 256 && K >= 256; }

void remat__gemm(remat__dnnl *d, int ith, const remat__mm *mm, const float *A, const float *B, float *C,
                 void *scratch) {
    if (mm->M < 1 || mm->N < 1) return;
    mm_plan *p = d && mm->K >= 1 && f32_wanted(d->mode, mm) ? get_mm(d, mm, 1, REMAT__MM_F32, 0) : NULL;
    if (p) {
        mm_run(d, ith, p, A, B, NULL, C, scratch);
        return;
    }
    cblas_gemm(mm->ta, mm->tb, mm->M, mm->N, mm->K, A, mm->lda, B, mm->ldb, mm->beta1 ? 1.0f : 0.0f, C, mm->ldc);
}

#endif /* REMAT_HAVE_DNNL */
