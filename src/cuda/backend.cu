/* backend.cu: the CUDA backend (exec/backend.h).
 *
 * One context per session: device 0, one non-blocking stream on which
 * every kernel, copy and library call of the session is enqueued in
 * schedule order, cuBLAS and cuDNN handles bound to it (cuBLAS without
 * TF32 unless the session asked; cuDNN's math type is set per call by the
 * convolution kernels). Device memory comes in a few large cudaMalloc
 * blocks (the arena and the resident blocks), never per value and never
 * managed. Host-device copies go through one pinned staging buffer,
 * asynchronously: an upload copies the caller's bytes into staging and
 * enqueues the transfer; a download enqueues the transfer into staging and
 * copies the bytes to the caller at the next sync, the one point where the
 * host waits for the stream. A bound input's upload skips the staging
 * copy when the caller's bytes are page-locked (remat_host_alloc): the
 * transfer reads them straight, which the binding allows (they stay
 * unchanged until the step's sync). The next run's inputs
 * (exec/prefetch.c) go on a second stream, made at the first: per slot,
 * an event when its copy has landed, which the compute stream waits on
 * before reading the slot, and one when that read is done, which the next
 * copy into the slot waits on; the sync waits for both streams. Offload
 * copies (a kept value to pinned host memory and back) go on the same
 * second stream, each after an event of the compute stream recorded when
 * it is issued; an event recorded after the latest is what offload_wait
 * makes the compute stream wait on.
 */
#include "cuda-impl.h"

extern "C" {
#include "../exec/backend.h"
}

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* A download waiting for the next sync. */
typedef struct {
    void *dst;
    size_t off, bytes;
} pending;

/* A prefetch slot: its events, and the pinned copy of a pageable source
 * (cap bytes, or NULL). */
typedef struct {
    cudaEvent_t landed, freed;
    unsigned char *host;
    size_t cap;
} pf_slot;

typedef struct {
    remat__cuda cu;                     /* first: kernels see &ctx->cu as k->dev */
    cudaStream_t copy;                  /* the prefetches' and offload's stream, made at the first (NULL: none yet) */
    cudaEvent_t off_issued, off_landed; /* offload: the compute stream at the latest copy's issue, and
                                         * the copy stream after it (NULL: none yet) */
    pf_slot *slots;
    int n_slots;
    unsigned char *staging; /* pinned, cap bytes; [0, used) belongs to copies in flight */
    size_t cap, used;
    pending *pend;
    int n_pend, cap_pend;
    unsigned long long *first_bad; /* device, one value: cuda_finite's result
                                    * (8 bytes outside the accounted blocks,
                                    * like the cuBLAS and cuDNN handles') */
} ctx;

/* ------------------------------------------------------------ availability */

extern "C" remat_status remat__cuda_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear it */
        return remat__err(REMAT_UNSUPPORTED, "no CUDA device can be used here: %s (%s)", cudaGetErrorString(e),
                          cudaGetErrorName(e));
    }
    if (n == 0) return remat__err(REMAT_UNSUPPORTED, "no CUDA device is visible here");
    return REMAT_OK;
}

extern "C" remat_status remat__cuda_memory(size_t *free_bytes, size_t *total_bytes) {
    return remat__cu_rt_ok(cudaMemGetInfo(free_bytes, total_bytes), NULL, "cudaMemGetInfo");
}

/* ----------------------------------------------------------------- context */

static void cuda_destroy(void *p) {
    ctx *c = (ctx *)p;
    if (!c) return;
    if (c->cu.stream) cudaStreamSynchronize(c->cu.stream);
    if (c->copy) cudaStreamSynchronize(c->copy);
    for (int i = 0; i < c->n_slots; i++) {
        cudaEventDestroy(c->slots[i].landed);
        cudaEventDestroy(c->slots[i].freed);
        if (c->slots[i].host) cudaFreeHost(c->slots[i].host);
    }
    free(c->slots);
    if (c->off_issued) cudaEventDestroy(c->off_issued);
    if (c->off_landed) cudaEventDestroy(c->off_landed);
    if (c->copy) cudaStreamDestroy(c->copy);
    remat__cuda_conv_release(&c->cu);
    if (c->cu.dnn) cudnnDestroy(c->cu.dnn);
    if (c->cu.blas) cublasDestroy(c->cu.blas);
    if (c->cu.stream) cudaStreamDestroy(c->cu.stream);
    if (c->staging) cudaFreeHost(c->staging);
    if (c->first_bad) cudaFree(c->first_bad);
    free(c->pend);
    free(c);
}

static remat_status cuda_create(void **out, const remat_session_opts *o, const remat_graph *g) {
    ctx *c = (ctx *)calloc(1, sizeof *c);
    if (!c) return remat__err(REMAT_NOMEM, "out of memory creating a CUDA session");
    remat__cuda *cu = &c->cu;
    cu->device = 0;
    cu->tf32 = o->tf32 != 0;
    cu->least_ws = o->least_workspace != 0;
    cu->g = g;
    cudaDeviceProp prop;
    remat__cuda_switches sw;
    remat_status st = remat__cuda_bf16_env(&sw);
    cu->conv16_nhwc = st == REMAT_OK && sw.conv_nhwc;
    if (st == REMAT_OK) st = remat__cu_rt_ok(cudaSetDevice(cu->device), NULL, "cudaSetDevice");
    if (st == REMAT_OK)
        st = remat__cu_rt_ok(cudaGetDeviceProperties(&prop, cu->device), NULL, "cudaGetDeviceProperties");
    if (st == REMAT_OK) {
        cu->sms = prop.multiProcessorCount;
        st = remat__cu_rt_ok(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking), NULL, "cudaStreamCreate");
    }
    if (st == REMAT_OK) st = remat__cu_blas_ok(cublasCreate(&cu->blas), NULL, "cublasCreate");
    if (st == REMAT_OK) st = remat__cu_blas_ok(cublasSetStream(cu->blas, cu->stream), NULL, "cublasSetStream");
    if (st == REMAT_OK)
        st = remat__cu_blas_ok(cublasSetMathMode(cu->blas, cu->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                               NULL, "cublasSetMathMode");
    if (st == REMAT_OK)
        st = remat__cu_blas_ok(cublasSetPointerMode(cu->blas, CUBLAS_POINTER_MODE_HOST), NULL, "cublasSetPointerMode");
    if (st == REMAT_OK) st = remat__cu_dnn_ok(cudnnCreate(&cu->dnn), NULL, "cudnnCreate");
    if (st == REMAT_OK) st = remat__cu_dnn_ok(cudnnSetStream(cu->dnn, cu->stream), NULL, "cudnnSetStream");
    if (st == REMAT_OK)
        st = remat__cu_rt_ok(cudaMalloc((void **)&c->first_bad, sizeof *c->first_bad), NULL,
                             "cudaMalloc (finite check)");
    if (st != REMAT_OK) {
        cuda_destroy(c);
        return st;
    }
    *out = c;
    return REMAT_OK;
}

static remat_status cuda_alloc(void *p, size_t bytes, void **out) {
    (void)p;
    *out = NULL;
    if (!bytes) return REMAT_OK;
    cudaError_t e = cudaMalloc(out, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return remat__err(e == cudaErrorMemoryAllocation ? REMAT_NOMEM : REMAT_INTERNAL,
                          "cudaMalloc of %zu bytes (%.1f MiB) failed: %s; the device has %zu bytes (%.1f MiB) free "
                          "of %zu",
                          bytes, (double)bytes / 1048576.0, cudaGetErrorString(e), fr, (double)fr / 1048576.0, tot);
    }
    return REMAT_OK;
}

static void cuda_release(void *p, void *mem) {
    (void)p;
    if (mem) cudaFree(mem);
}

/* ---------------------------------------------------------------- copies */

/* Waits for the stream, delivers the pending downloads and frees the
 * staging buffer for reuse. */
static remat_status cuda_sync(void *p) {
    ctx *c = (ctx *)p;
    remat_status st = remat__cu_rt_ok(cudaStreamSynchronize(c->cu.stream), NULL, "the step (cudaStreamSynchronize)");
    if (c->copy) {
        remat_status sc =
            remat__cu_rt_ok(cudaStreamSynchronize(c->copy), NULL, "the prefetches (cudaStreamSynchronize)");
        if (st == REMAT_OK) st = sc;
    }
    if (st == REMAT_OK) st = remat__cu_rt_ok(cudaGetLastError(), NULL, "a kernel of the step");
    for (int i = 0; i < c->n_pend && st == REMAT_OK; i++)
        memcpy(c->pend[i].dst, c->staging + c->pend[i].off, c->pend[i].bytes);
    c->n_pend = 0;
    c->used = 0;
    return st;
}

/* Reserves `bytes` of staging (256-byte aligned) for a copy in flight;
 * when full, waits for the stream, delivers what is pending and grows. */
static remat_status stage(ctx *c, size_t bytes, size_t *off) {
    size_t at = (c->used + 255) & ~(size_t)255;
    if (at + bytes > c->cap) {
        remat_status st = cuda_sync(c);
        if (st != REMAT_OK) return st;
        at = 0;
        if (bytes > c->cap) {
            size_t cap = c->cap ? c->cap : (size_t)1 << 20;
            while (cap < bytes) cap *= 2;
            if (c->staging) cudaFreeHost(c->staging);
            c->staging = NULL;
            c->cap = 0;
            st = remat__cu_rt_ok(cudaHostAlloc((void **)&c->staging, cap, cudaHostAllocDefault), NULL,
                                 "cudaHostAlloc (pinned staging)");
            if (st != REMAT_OK) return st;
            c->cap = cap;
        }
    }
    *off = at;
    c->used = at + bytes;
    return REMAT_OK;
}

static remat_status cuda_upload(void *p, void *dst, const void *src, size_t bytes) {
    ctx *c = (ctx *)p;
    if (!bytes) return REMAT_OK;
    size_t off;
    remat_status st = stage(c, bytes, &off);
    if (st != REMAT_OK) return st;
    memcpy(c->staging + off, src, bytes);
    return remat__cu_rt_ok(cudaMemcpyAsync(dst, c->staging + off, bytes, cudaMemcpyHostToDevice, c->cu.stream), NULL,
                           "cudaMemcpyAsync (upload)");
}

/* Whether p lies in page-locked host memory (cudaHostAlloc'd or
 * registered); 0 where the runtime cannot say (no device). */
extern "C" int remat__cuda_host_pinned(const void *p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* clear it */
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

extern "C" void *remat__cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void remat__cuda_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

/* A bound input: from page-locked bytes, one transfer straight from them
 * (they stay unchanged until the step's sync, as the binding promises);
 * otherwise through staging as any upload. The same bytes either way. */
static remat_status cuda_upload_bound(void *p, void *dst, const void *src, size_t bytes) {
    ctx *c = (ctx *)p;
    if (!bytes) return REMAT_OK;
    if (!remat__cuda_host_pinned(src)) return cuda_upload(p, dst, src, bytes);
    return remat__cu_rt_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->cu.stream), NULL,
                           "cudaMemcpyAsync (upload of a bound input)");
}

/* Slots [0, slot] exist, and the copy stream. */
static remat_status slot_ready(ctx *c, int slot) {
    if (!c->copy)
        REMAT__CU_TRY(remat__cu_rt_ok(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking), NULL,
                                      "cudaStreamCreate (prefetch)"));
    if (slot < c->n_slots) return REMAT_OK;
    pf_slot *p = (pf_slot *)realloc(c->slots, (size_t)(slot + 1) * sizeof *p);
    if (!p) return remat__err(REMAT_NOMEM, "out of memory for a prefetch slot");
    c->slots = p;
    while (c->n_slots <= slot) {
        pf_slot e = {NULL, NULL, NULL, 0};
        REMAT__CU_TRY(remat__cu_rt_ok(cudaEventCreateWithFlags(&e.landed, cudaEventDisableTiming), NULL,
                                      "cudaEventCreate (prefetch)"));
        remat_status st = remat__cu_rt_ok(cudaEventCreateWithFlags(&e.freed, cudaEventDisableTiming), NULL,
                                          "cudaEventCreate (prefetch)");
        if (st != REMAT_OK) {
            cudaEventDestroy(e.landed);
            return st;
        }
        c->slots[c->n_slots++] = e;
    }
    return REMAT_OK;
}

/* The next run's input into dst on the copy stream, after the slot's last
 * read (its freed event); a pageable source is first copied on the host
 * into the slot's pinned buffer, while the device computes (the previous
 * transfer from that buffer ended at the last sync). */
static remat_status cuda_prefetch(void *p, int slot, void *dst, const void *src, size_t bytes) {
    ctx *c = (ctx *)p;
    if (!bytes) return REMAT_OK;
    REMAT__CU_TRY(slot_ready(c, slot));
    pf_slot *e = &c->slots[slot];
    const void *from = src;
    if (!remat__cuda_host_pinned(src)) {
        if (e->cap < bytes) {
            if (e->host) cudaFreeHost(e->host);
            e->host = NULL, e->cap = 0;
            REMAT__CU_TRY(remat__cu_rt_ok(cudaHostAlloc((void **)&e->host, bytes, cudaHostAllocDefault), NULL,
                                          "cudaHostAlloc (prefetch)"));
            e->cap = bytes;
        }
        memcpy(e->host, src, bytes);
        from = e->host;
    }
    REMAT__CU_TRY(remat__cu_rt_ok(cudaStreamWaitEvent(c->copy, e->freed, 0), NULL, "cudaStreamWaitEvent (prefetch)"));
    REMAT__CU_TRY(remat__cu_rt_ok(cudaMemcpyAsync(dst, from, bytes, cudaMemcpyHostToDevice, c->copy), NULL,
                                  "cudaMemcpyAsync (prefetch)"));
    return remat__cu_rt_ok(cudaEventRecord(e->landed, c->copy), NULL, "cudaEventRecord (prefetch)");
}

/* dst = the slot's bytes (src), on the compute stream once they landed;
 * then the slot is free for the next copy. */
static remat_status cuda_prefetched(void *p, int slot, void *dst, const void *src, size_t bytes) {
    ctx *c = (ctx *)p;
    if (!bytes) return REMAT_OK;
    REMAT__CU_TRY(slot_ready(c, slot));
    pf_slot *e = &c->slots[slot];
    REMAT__CU_TRY(remat__cu_rt_ok(cudaStreamWaitEvent(c->cu.stream, e->landed, 0), NULL,
                                  "cudaStreamWaitEvent (prefetched input)"));
    REMAT__CU_TRY(remat__cu_rt_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->cu.stream), NULL,
                                  "cudaMemcpyAsync (prefetched input)"));
    return remat__cu_rt_ok(cudaEventRecord(e->freed, c->cu.stream), NULL, "cudaEventRecord (prefetched input)");
}

static remat_status cuda_download(void *p, void *dst, const void *src, size_t bytes) {
    ctx *c = (ctx *)p;
    if (!bytes) return REMAT_OK;
    size_t off;
    remat_status st = stage(c, bytes, &off);
    if (st != REMAT_OK) return st;
    if (c->n_pend == c->cap_pend) {
        int cap = c->cap_pend ? 2 * c->cap_pend : 16;
        pending *pe = (pending *)realloc(c->pend, (size_t)cap * sizeof *pe);
        if (!pe) return remat__err(REMAT_NOMEM, "out of memory queueing a download");
        c->pend = pe, c->cap_pend = cap;
    }
    c->pend[c->n_pend++] = (pending){dst, off, bytes};
    return remat__cu_rt_ok(cudaMemcpyAsync(c->staging + off, src, bytes, cudaMemcpyDeviceToHost, c->cu.stream), NULL,
                           "cudaMemcpyAsync (download)");
}

static remat_status cuda_zero(void *p, void *dst, size_t bytes) {
    ctx *c = (ctx *)p;
    if (!bytes) return REMAT_OK;
    return remat__cu_rt_ok(cudaMemsetAsync(dst, 0, bytes, c->cu.stream), NULL, "cudaMemsetAsync");
}

static remat_status cuda_one(void *p, float *dst) {
    static const float one = 1.0f;
    return cuda_upload(p, dst, &one, sizeof one);
}

/* ---------------------------------------------------------------- kernels */

static remat_status cuda_convert(void *p, void *dst, const void *src, int64_t n, int kind) {
    return remat__cuda_convert_on(&((ctx *)p)->cu, NULL, dst, src, n, (remat__cvt)kind);
}

static remat_status cuda_run(void *p, remat__kctx *k, int backward) {
    (void)p;
    const remat__dev_kernels *dk = k->op ? k->op->cuda : NULL;
    remat__dkernel fn = dk ? (backward ? dk->backward : dk->forward) : NULL;
    if (!fn) {
        char lb[128];
        return remat__err(REMAT_UNSUPPORTED, "%s: no CUDA %s kernel", remat__kctx_label(k, lb, sizeof lb),
                          backward ? "backward" : "forward");
    }
    return fn(k);
}

static remat_status cuda_update(void *p, const remat_optim_opts *o, int64_t t, int n, float *const *w, float *const *g,
                                float *const *m, float *const *v, const int64_t *numel) {
    ctx *c = (ctx *)p;
    for (int i = 0; i < n; i++) {
        remat_status st = o->kind == REMAT_OPTIM_SGD
                              ? remat__cuda_sgd(&c->cu, o, t == 1, numel[i], w[i], g[i], m[i])
                              : remat__cuda_adamw(&c->cu, o, t, numel[i], w[i], g[i], m[i], v[i]);
        if (st != REMAT_OK) return st;
    }
    return REMAT_OK;
}

static remat__pool *cuda_pool(void *p) {
    (void)p;
    return NULL;
}

/* ------------------------------------------------------------ finite check */

/* *first = min(*first, the least i < n with p[i] a NaN or an infinity).
 * Each thread walks its grid-stride indices upward and stops at its first
 * bad one (its least); the block keeps the least of its threads' (a tree
 * in shared memory) and merges it with an integer atomicMin, whose result
 * does not depend on the order the blocks arrive in. Launched with
 * REMAT__CU_THREADS (a power of two) threads per block. */
static __global__ void finite_kernel(const float *__restrict__ p, int64_t n, unsigned long long *first) {
    __shared__ unsigned long long least[REMAT__CU_THREADS];
    unsigned long long mine = ULLONG_MAX;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (!isfinite(p[i])) {
            mine = (unsigned long long)i;
            break;
        }
    least[threadIdx.x] = mine;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && least[threadIdx.x + s] < least[threadIdx.x]) least[threadIdx.x] = least[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0 && least[0] != ULLONG_MAX) atomicMin(first, least[0]);
}

/* Enqueued after the work in flight; the one value comes back through the
 * staging buffer at the sync. */
static remat_status cuda_finite(void *p, const float *x, size_t n, int64_t *first_bad) {
    ctx *c = (ctx *)p;
    *first_bad = -1;
    if (!n) return REMAT_OK;
    unsigned long long host = ULLONG_MAX;
    remat_status st = remat__cu_rt_ok(cudaMemsetAsync(c->first_bad, 0xff, sizeof *c->first_bad, c->cu.stream), NULL,
                                      "cudaMemsetAsync (finite check)");
    if (st != REMAT_OK) return st;
    finite_kernel<<<remat__cu_blocks(&c->cu, (int64_t)n), REMAT__CU_THREADS, 0, c->cu.stream>>>(x, (int64_t)n,
                                                                                                c->first_bad);
    st = remat__cu_launched(NULL, "finite_kernel");
    if (st == REMAT_OK) st = cuda_download(c, &host, c->first_bad, sizeof host);
    if (st == REMAT_OK) st = cuda_sync(c);
    if (st == REMAT_OK && host != ULLONG_MAX) *first_bad = (int64_t)host;
    return st;
}

/* ---------------------------------------------------------------- offload */

/* The copy stream and offload's two events. */
static remat_status offload_ready(ctx *c) {
    if (!c->copy)
        REMAT__CU_TRY(remat__cu_rt_ok(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking), NULL,
                                      "cudaStreamCreate (offload)"));
    if (!c->off_issued)
        REMAT__CU_TRY(remat__cu_rt_ok(cudaEventCreateWithFlags(&c->off_issued, cudaEventDisableTiming), NULL,
                                      "cudaEventCreate (offload)"));
    if (!c->off_landed)
        REMAT__CU_TRY(remat__cu_rt_ok(cudaEventCreateWithFlags(&c->off_landed, cudaEventDisableTiming), NULL,
                                      "cudaEventCreate (offload)"));
    return REMAT_OK;
}

/* A copy on the copy stream once the compute stream has run what is
 * enqueued on it now: the value was computed (out), its arena bytes were
 * given up by the values before it (in). */
static remat_status cuda_offload(void *p, void *dst, const void *src, size_t bytes, int to_host) {
    ctx *c = (ctx *)p;
    if (!bytes) return REMAT_OK;
    REMAT__CU_TRY(offload_ready(c));
    REMAT__CU_TRY(remat__cu_rt_ok(cudaEventRecord(c->off_issued, c->cu.stream), NULL, "cudaEventRecord (offload)"));
    REMAT__CU_TRY(
        remat__cu_rt_ok(cudaStreamWaitEvent(c->copy, c->off_issued, 0), NULL, "cudaStreamWaitEvent (offload)"));
    REMAT__CU_TRY(remat__cu_rt_ok(
        cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, c->copy), NULL,
        to_host ? "cudaMemcpyAsync (offload out)" : "cudaMemcpyAsync (offload in)"));
    return remat__cu_rt_ok(cudaEventRecord(c->off_landed, c->copy), NULL, "cudaEventRecord (offload)");
}

static remat_status cuda_offload_wait(void *p) {
    ctx *c = (ctx *)p;
    if (!c->off_landed) return REMAT_OK;
    return remat__cu_rt_ok(cudaStreamWaitEvent(c->cu.stream, c->off_landed, 0), NULL,
                           "cudaStreamWaitEvent (offload landed)");
}

/* ------------------------------------------------- data parallelism */

/* dp_reduce.c's fold and dp_step.c's mean on the device: element by
 * element, each operation rounded on its own (__fadd_rn, __fdiv_rn: never
 * contracted, IEEE division), so the bits are the CPU's x = a + x and
 * x / d. */
static __global__ void dp_add_kernel(float *__restrict__ x, const float *__restrict__ a, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(a[i], x[i]);
}

static __global__ void dp_div_kernel(float *__restrict__ x, float d, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fdiv_rn(x[i], d);
}

static remat_status cuda_copy(void *p, void *dst, const void *src, size_t bytes) {
    ctx *c = (ctx *)p;
    if (!bytes) return REMAT_OK;
    return remat__cu_rt_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->cu.stream), NULL,
                           "cudaMemcpyAsync (device to device)");
}

static remat_status cuda_add(void *p, float *x, const float *a, int64_t n) {
    ctx *c = (ctx *)p;
    if (n <= 0) return REMAT_OK;
    dp_add_kernel<<<remat__cu_blocks(&c->cu, n), REMAT__CU_THREADS, 0, c->cu.stream>>>(x, a, n);
    return remat__cu_launched(NULL, "dp_add_kernel");
}

static remat_status cuda_div(void *p, float *x, float d, int64_t n) {
    ctx *c = (ctx *)p;
    if (n <= 0) return REMAT_OK;
    dp_div_kernel<<<remat__cu_blocks(&c->cu, n), REMAT__CU_THREADS, 0, c->cu.stream>>>(x, d, n);
    return remat__cu_launched(NULL, "dp_div_kernel");
}

extern "C" const remat__backend remat__backend_cuda = {
    REMAT_DEVICE_CUDA, cuda_create,       cuda_destroy, cuda_alloc,        cuda_release,  cuda_upload,
    cuda_download,     cuda_zero,         cuda_one,     cuda_run,          cuda_update,   cuda_sync,
    cuda_pool,         cuda_finite,       cuda_convert, cuda_upload_bound, cuda_prefetch, cuda_prefetched,
    cuda_offload,      cuda_offload_wait, cuda_copy,    cuda_add,          cuda_div,
};
