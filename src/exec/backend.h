/* backend.h: what a device gives the executor.
 *
 * A backend supplies memory in large blocks (the session's arena and its
 * blocks of parameters, gradients and optimizer state: never one
 * allocation per value), explicit copies for bound inputs and fetched
 * outputs, kernels (found per backend in the op table entry), the
 * optimizer update, and one synchronization point. The executor and the
 * session call nothing device-specific besides these. The CPU backend
 * (src/cpu/cpu.c) is the reference; the CUDA backend is src/cuda/backend.cu.
 *
 * Ordering: calls on one context are executed in the order they are made
 * (a CUDA backend enqueues them on one stream). A download's bytes are in
 * its destination once the next sync returns; a source given to upload may
 * be reused as soon as upload returns, one given to upload_bound only
 * after the next sync.
 */
#ifndef REMAT_BACKEND_H
#define REMAT_BACKEND_H

#include "../remat-impl.h"
#include "../core/bf16.h"

typedef struct {
    remat_device device;
    /* Makes the context of one session; *ctx is also what device kernels
     * see as k->dev and workspace functions as dev. threads: CPU kernel
     * threads (the CPU backend's pool). */
    remat_status (*create)(void **ctx, const remat_session_opts *o, const remat_graph *g);
    void (*destroy)(void *ctx);
    /* A block of device memory, 256-byte aligned, of exactly `bytes`
     * (what remat_session_held_bytes reports). */
    remat_status (*alloc)(void *ctx, size_t bytes, void **out);
    void (*release)(void *ctx, void *p);
    remat_status (*upload)(void *ctx, void *dst, const void *src, size_t bytes);
    remat_status (*download)(void *ctx, void *dst, const void *src, size_t bytes);
    remat_status (*zero)(void *ctx, void *dst, size_t bytes);
    /* dst (one float) = 1: the seed of the loss's gradient. */
    remat_status (*one)(void *ctx, float *dst);
    /* Runs node k->node's forward (backward = 0) or backward kernel. */
    remat_status (*run)(void *ctx, remat__kctx *k, int backward);
    /* One optimizer update of n tensors: w[i], g[i], m[i], v[i] of numel[i]
     * elements (m and v NULL where the optimizer keeps none); t is the
     * update's 1-based count. */
    remat_status (*update)(void *ctx, const remat_optim_opts *o, int64_t t, int n, float *const *w, float *const *g,
                           float *const *m, float *const *v, const int64_t *numel);
    /* Waits until everything enqueued has run; reports a failure of any
     * of it. */
    remat_status (*sync)(void *ctx);
    /* The pool of CPU threads, or NULL (device backends). */
    remat__pool *(*pool)(void *ctx);
    /* *first_bad = the index of the first of the n floats at p (memory of
     * this context) that is a NaN or an infinity, or -1 when all are
     * finite. Waits for the work in flight (p is read after it). */
    remat_status (*finite)(void *ctx, const float *p, size_t n, int64_t *first_bad);
    /* n elements of src converted into dst as `kind` says
     * (core/bf16.h: remat__cvt), both memory of this context: the bf16
     * policy's views around a kernel. NULL: the device has no bf16 yet. */
    remat_status (*convert)(void *ctx, void *dst, const void *src, int64_t n, int kind);
    /* upload of a bound input's bytes (the caller's data, which stays
     * unchanged until the step's sync): a device may read src as late as
     * the next sync, not copy it first (CUDA: page-locked src is
     * transferred straight from it). NULL: upload. */
    remat_status (*upload_bound)(void *ctx, void *dst, const void *src, size_t bytes);
    /* The next run's input ahead of it (exec/prefetch.c), slot by slot:
     * prefetch starts copying `bytes` of src (host, unchanged until the
     * next sync) into dst (memory of this context) on a second stream,
     * after the last prefetched read of that slot, and the next sync waits
     * for it too; prefetched copies the slot's src into dst, in the run's
     * order, once the slot's copy has landed. NULL: no second stream. */
    remat_status (*prefetch)(void *ctx, int slot, void *dst, const void *src, size_t bytes);
    remat_status (*prefetched)(void *ctx, int slot, void *dst, const void *src, size_t bytes);
    /* Offload (REMAT__I_OUT, REMAT__I_IN): copies `bytes` from src to dst,
     * one of them memory of this context and the other host memory from
     * remat_host_alloc (to_host: dst is the host's), on a copy engine
     * beside the kernels: it starts once everything enqueued before it
     * has run. offload_wait makes everything enqueued after it wait until
     * every copy so far has landed (the next sync waits for them too).
     * NULL: the device cannot offload. */
    remat_status (*offload)(void *ctx, void *dst, const void *src, size_t bytes, int to_host);
    remat_status (*offload_wait)(void *ctx);
    /* Data parallelism's arithmetic on memory of this context
     * (dist/dp_reduce.c, dp_step.c), element by element in float32 with
     * each operation rounded on its own, so every backend gives the CPU's
     * bits: copy: dst = src (bytes); add: x[i] = a[i] + x[i] (a node of
     * the tree over the micro-batches = its left child + its right
     * child); div: x[i] = x[i] / d (the mean over the micro-batches).
     * NULL: micro-batches do not run on this device. */
    remat_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    remat_status (*add)(void *ctx, float *x, const float *a, int64_t n);
    remat_status (*div)(void *ctx, float *x, float d, int64_t n);
} remat__backend;

/* The backend of a device, or NULL when this build has none. */
const remat__backend *remat__backend_of(remat_device d);

extern const remat__backend remat__backend_cpu;
#ifdef REMAT_HAVE_CUDA
extern const remat__backend remat__backend_cuda;
remat_status remat__cuda_available(void);
remat_status remat__cuda_memory(size_t *free_bytes, size_t *total_bytes);
/* remat_host_alloc's and remat_host_free's CUDA side: page-locked host
 * memory (NULL when it cannot be had: no device, out of memory), and
 * whether p lies in page-locked host memory. */
void *remat__cuda_host_alloc(size_t bytes);
int remat__cuda_host_pinned(const void *p);
void remat__cuda_host_free(void *p);
#endif

#endif
