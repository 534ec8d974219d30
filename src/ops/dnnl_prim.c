/* dnnl_prim.c: what oneDNN's convolutions (dnnl_conv.c) and matrix
 * products (dnnl_gemm.c) share: the products' mode (REMAT_PRODUCTS), the
 * context's failure record and per-thread streams, primitive descriptors
 * with a user-managed scratchpad, and running a primitive. The context's
 * life (dnnl.c) calls the two; they call this, never the context's life.
 */
#include "dnnl.h"

#include <stdlib.h>

remat__products remat__products_mode(void) {
    const char *e = getenv("REMAT_PRODUCTS");
    if (e && !strcmp(e, "dnnl")) return REMAT__PRODUCTS_DNNL;
    if (e && !strcmp(e, "blas")) return REMAT__PRODUCTS_BLAS;
    return REMAT__PRODUCTS_AUTO;
}

#ifdef REMAT_HAVE_DNNL

#include "dnnl-impl.h"

void remat__dnnl_fail(remat__dnnl *d, const char *what) {
    if (d->status == REMAT_OK) d->status = remat__err(REMAT_INTERNAL, "oneDNN: %s failed", what);
}

/* Thread ith's stream, made on first use; the context's lock held. 0
 * when it cannot be made. */
int remat__dnnl_stream_locked(remat__dnnl *d, int ith, dnnl_stream_t *stream) {
    if (ith >= d->nstreams) {
        dnnl_stream_t *s = realloc(d->streams, (size_t)(ith + 1) * sizeof *s);
        if (!s) return 0;
        for (int i = d->nstreams; i <= ith; i++) s[i] = NULL;
        d->streams = s;
        d->nstreams = ith + 1;
    }
    if (!d->streams[ith] && dnnl_stream_create(&d->streams[ith], d->eng, dnnl_stream_default_flags) != dnnl_success)
        d->streams[ith] = NULL;
    *stream = d->streams[ith];
    return *stream != NULL;
}

/* The same, taking the lock; records a failure. */
int remat__dnnl_thread_stream(remat__dnnl *d, int ith, dnnl_stream_t *stream) {
    pthread_mutex_lock(&d->mu);
    int ok = remat__dnnl_stream_locked(d, ith, stream);
    if (!ok) remat__dnnl_fail(d, "creating a stream");
    pthread_mutex_unlock(&d->mu);
    return ok;
}

size_t remat__dnnl_pd_scratch(const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *m = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return m ? dnnl_memory_desc_get_size(m) : 0;
}

dnnl_primitive_attr_t remat__dnnl_user_scratch_attr(int sum) {
    dnnl_primitive_attr_t a = NULL;
    if (dnnl_primitive_attr_create(&a) != dnnl_success) return NULL;
    dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user);
    if (sum) {
        dnnl_post_ops_t po;
        if (dnnl_post_ops_create(&po) != dnnl_success) {
            dnnl_primitive_attr_destroy(a);
            return NULL;
        }
        dnnl_post_ops_append_sum(po, 1.0f);
        dnnl_primitive_attr_set_post_ops(a, po);
        dnnl_post_ops_destroy(po);
    }
    return a;
}

/* The primitive descriptor of op desc `od`; NULL on failure. */
dnnl_primitive_desc_t remat__dnnl_make_pd(dnnl_engine_t eng, const_dnnl_op_desc_t od,
                                          const_dnnl_primitive_desc_t hint) {
    dnnl_primitive_attr_t a = remat__dnnl_user_scratch_attr(0);
    dnnl_primitive_desc_t pd = NULL;
    if (!a || dnnl_primitive_desc_create(&pd, od, a, eng, hint) != dnnl_success) pd = NULL;
    dnnl_primitive_attr_destroy(a);
    return pd;
}

const char *remat__dnnl_impl_of(const_dnnl_primitive_desc_t pd) {
    const char *s = "";
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s) s = "";
    return s;
}

/* Whether the machine multiplies bf16 in hardware (AVX-512 BF16 or AMX),
 * as oneDNN sees it (DNNL_MAX_CPU_ISA caps it). */
int remat__dnnl_bf16_hardware(void) {
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

/* Runs prim with the arguments (arg id, memory desc, pointer); NULL
 * pointers are skipped. Returns 0 on failure. */
int remat__dnnl_run(remat__dnnl *d, dnnl_stream_t s, dnnl_primitive_t prim, int n, const int *ids,
                    const dnnl_memory_desc_t *const *mds, void *const *ptrs) {
    dnnl_memory_t mem[8];
    dnnl_exec_arg_t a[8] = {{0, NULL}};
    int k = 0, ok = 1;
    for (int i = 0; i < n && ok; i++) {
        if (!ptrs[i]) continue;
        ok = dnnl_memory_create(&mem[k], mds[i], d->eng, ptrs[i]) == dnnl_success;
        if (ok) a[k] = (dnnl_exec_arg_t){ids[i], mem[k]}, k++;
    }
    if (ok) ok = dnnl_primitive_execute(prim, s, k, a) == dnnl_success;
    for (int i = 0; i < k; i++) dnnl_memory_destroy(mem[i]);
    if (!ok) remat__dnnl_fail(d, "running a primitive");
    return ok;
}

/* A scratchpad memory desc of `bytes` (a 1-D u8 array). */
dnnl_memory_desc_t remat__dnnl_scratch_md(size_t bytes) {
    dnnl_memory_desc_t m;
    dnnl_dims_t dm = {(dnnl_dim_t)(bytes ? bytes : 1)};
    dnnl_memory_desc_init_by_tag(&m, 1, dm, dnnl_u8, dnnl_a);
    return m;
}

#endif /* REMAT_HAVE_DNNL */
