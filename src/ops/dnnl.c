/* dnnl.c: the oneDNN context the CPU backend owns (see dnnl.h): an engine,
 * a stream per pool thread, the primitives made so far (convolutions:
 * dnnl_conv.c; matrix products: dnnl_gemm.c; what those two share:
 * dnnl_prim.c), made and freed here.
 * Without oneDNN (REMAT_DNNL off) there is no context and every product
 * is im2col + OpenBLAS or cblas_sgemm.
 */
#include "dnnl.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef REMAT_HAVE_DNNL

remat_status remat__dnnl_create(remat__dnnl **out) {
    *out = NULL;
    return REMAT_OK;
}
void remat__dnnl_destroy(remat__dnnl *d) { (void)d; }
remat_status remat__dnnl_status(remat__dnnl *d) {
    (void)d;
    return REMAT_OK;
}
const char *remat__dnnl_describe(char *buf, size_t cap) {
    snprintf(buf, cap, "oneDNN off");
    return buf;
}

#else /* REMAT_HAVE_DNNL */

#include "dnnl-impl.h"

remat_status remat__dnnl_create(remat__dnnl **out) {
    *out = NULL;
    remat__dnnl *d = calloc(1, sizeof *d);
    if (!d) return remat__err(REMAT_NOMEM, "out of memory creating the oneDNN context");
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success) {
        free(d);
        return remat__err(REMAT_INTERNAL, "oneDNN: could not create a CPU engine");
    }
    d->mode = remat__products_mode();
    pthread_mutex_init(&d->mu, NULL);
    *out = d;
    return REMAT_OK;
}

void remat__dnnl_destroy(remat__dnnl *d) {
    if (!d) return;
    remat__dnnl_conv_plans_free(d);
    remat__dnnl_mm_plans_free(d);
    for (int i = 0; i < d->nstreams; i++)
        if (d->streams[i]) dnnl_stream_destroy(d->streams[i]);
    free(d->streams);
    dnnl_engine_destroy(d->eng);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

remat_status remat__dnnl_status(remat__dnnl *d) { return d ? d->status : REMAT_OK; }

const char *remat__dnnl_describe(char *buf, size_t cap) {
    static const struct {
        dnnl_cpu_isa_t isa;
        const char *name;
    } isas[] = {{dnnl_cpu_isa_sse41, "sse41"},
                {dnnl_cpu_isa_avx, "avx"},
                {dnnl_cpu_isa_avx2, "avx2"},
                {dnnl_cpu_isa_avx512_core, "avx512_core"},
                {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
                {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
                {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"}};
    const dnnl_version_t *v = dnnl_version();
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const char *name = "other";
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
        if (isas[i].isa == isa) name = isas[i].name;
    snprintf(buf, cap, "oneDNN %d.%d.%d (%s), ISA %s", v->major, v->minor, v->patch,
             DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP ? "OpenMP" : "sequential", name);
    return buf;
}

#endif /* REMAT_HAVE_DNNL */
