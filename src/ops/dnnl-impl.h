/* dnnl-impl.h: what src/ops/dnnl.c (the context), dnnl_conv.c (the
 * convolutions) and dnnl_gemm.c (the matrix products) share; only with
 * oneDNN (REMAT_HAVE_DNNL). */
#ifndef REMAT_OPS_DNNL_IMPL_H
#define REMAT_OPS_DNNL_IMPL_H

#include "dnnl.h"

#include <dnnl.h>
#include <pthread.h>

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
/* One OpenMP thread for the calling thread's oneDNN calls; the previous
 * count is restored by remat__dnnl_single_leave. nthreads-var is per
 * thread, so other threads (and the caller's own OpenMP code, after the
 * call) see no change. */
static inline int remat__dnnl_single_enter(void) {
    int t = omp_get_max_threads();
    if (t != 1) omp_set_num_threads(1);
    return t;
}
static inline void remat__dnnl_single_leave(int t) {
    if (t != 1) omp_set_num_threads(t);
}
#elif DNNL_CPU_RUNTIME == DNNL_RUNTIME_SEQ
static inline int remat__dnnl_single_enter(void) { return 1; }
static inline void remat__dnnl_single_leave(int t) { (void)t; }
#else
#error "remat needs oneDNN built with the OpenMP or the sequential CPU runtime (CMake: -DREMAT_DNNL=OFF)"
#endif

/* Bytes rounded up to 64, oneDNN's alignment for buffers. */
static inline size_t remat__dnnl_up(size_t b) { return (b + 63) & ~(size_t)63; }

struct conv_plan; /* dnnl_conv.c */
struct mm_plan;   /* dnnl_gemm.c */

/* Buckets of the convolution plans' table (by shape and thread count):
 * a kernel looks its plan up on every call, and a DenseNet has a hundred
 * shapes, each plan a separate block of about 20 KB, so that walking one
 * list of them was 6% of a bf16 densenet-bc step. */
enum { REMAT__DNNL_CONV_BUCKETS = 256 };

struct remat__dnnl {
    dnnl_engine_t eng;
    remat__products mode;
    pthread_mutex_t mu;
    struct conv_plan *plans; /* every plan, for freeing */
    struct conv_plan *conv_tab[REMAT__DNNL_CONV_BUCKETS];
    struct mm_plan *mms;
    dnnl_stream_t *streams; /* per pool thread, made on first use */
    int nstreams;
    remat_status status; /* first failure in a kernel */
};

/* A primitive descriptor's scratchpad bytes. */
size_t remat__dnnl_pd_scratch(const_dnnl_primitive_desc_t pd);
/* The primitive descriptor of op desc `od` with a user scratchpad (and a
 * sum post-op when sum); NULL on failure. */
dnnl_primitive_attr_t remat__dnnl_user_scratch_attr(int sum);
dnnl_primitive_desc_t remat__dnnl_make_pd(dnnl_engine_t eng, const_dnnl_op_desc_t od, const_dnnl_primitive_desc_t hint);
/* Its implementation's name ("jit:avx512_core", "ref:any"). */
const char *remat__dnnl_impl_of(const_dnnl_primitive_desc_t pd);
/* Whether the machine multiplies bf16 in hardware (AVX-512 BF16 or AMX),
 * as oneDNN sees it (DNNL_MAX_CPU_ISA caps it). */
int remat__dnnl_bf16_hardware(void);
/* Records the first failure in a kernel. */
void remat__dnnl_fail(remat__dnnl *d, const char *what);
/* Thread ith's stream, made on first use: with the context's lock held
 * (0 when it cannot be made), or taking it (and recording a failure). */
int remat__dnnl_stream_locked(remat__dnnl *d, int ith, dnnl_stream_t *stream);
int remat__dnnl_thread_stream(remat__dnnl *d, int ith, dnnl_stream_t *stream);
/* Runs prim with the arguments (arg id, memory desc, pointer); NULL
 * pointers are skipped. Returns 0 on failure (recorded). */
int remat__dnnl_run(remat__dnnl *d, dnnl_stream_t s, dnnl_primitive_t prim, int n, const int *ids,
                    const dnnl_memory_desc_t *const *mds, void *const *ptrs);
/* A scratchpad memory desc of `bytes` (a 1-D u8 array). */
dnnl_memory_desc_t remat__dnnl_scratch_md(size_t bytes);
/* The plans' destructors, for remat__dnnl_destroy. */
void remat__dnnl_conv_plans_free(remat__dnnl *d);
void remat__dnnl_mm_plans_free(remat__dnnl *d);

#endif /* REMAT_OPS_DNNL_IMPL_H */
