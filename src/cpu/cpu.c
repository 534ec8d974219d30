/* cpu.c: the CPU backend, the reference.
 *
 * Memory is host memory (blocks of 2 MiB pages where large, advised as
 * transparent huge pages: a step then neither maps nor faults memory in),
 * copies are memcpy, kernels run on the context's thread pool (small nodes
 * on the calling thread), and everything is done by the time a call
 * returns, so sync has nothing to wait for. Kernels call BLAS from every
 * pool thread, so BLAS itself should run one thread per call: that is a
 * process-wide setting of OpenBLAS, which a session never changes behind
 * the caller's back; remat_set_blas_threads is the caller's call.
 * Products that go through oneDNN (src/ops/dnnl.h) use the context's
 * oneDNN engine and primitives, one oneDNN thread per pool thread.
 * Conversions between bf16 and float32 (the bf16 policy's views) run on
 * the vector kernels src/ops/pw16.h chose for this CPU.
 */
#include "../exec/backend.h"
#include "../ops/dnnl.h"
#include "../ops/pw16.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    remat__pool *pool;
    remat__dnnl *dnnl; /* NULL without oneDNN */
} cpu;

#define HUGE_PAGE ((size_t)2 << 20)

static remat_status cpu_create(void **ctx, const remat_session_opts *o, const remat_graph *g) {
    (void)g;
    cpu *c = calloc(1, sizeof *c);
    if (!c) return remat__err(REMAT_NOMEM, "out of memory creating a session");
    int nth = o->threads;
    if (nth <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        nth = nc > 0 ? (int)nc : 1;
    }
    remat_status st = remat__pool_create(&c->pool, nth);
    if (st == REMAT_OK) st = remat__dnnl_create(&c->dnnl);
    if (st != REMAT_OK) {
        remat__pool_destroy(c->pool);
        free(c);
        return st;
    }
    *ctx = c;
    return REMAT_OK;
}

static void cpu_destroy(void *ctx) {
    cpu *c = ctx;
    if (!c) return;
    remat__dnnl_destroy(c->dnnl);
    remat__pool_destroy(c->pool);
    free(c);
}

static remat_status cpu_alloc(void *ctx, size_t bytes, void **out) {
    (void)ctx;
    size_t align = bytes >= HUGE_PAGE ? HUGE_PAGE : 256;
    void *p = NULL;
    if (posix_memalign(&p, align, bytes ? bytes : 1) != 0)
        return remat__err(REMAT_NOMEM, "out of memory allocating %zu bytes", bytes);
#ifdef MADV_HUGEPAGE
    if (align == HUGE_PAGE) madvise(p, bytes, MADV_HUGEPAGE); /* fewer faults and TLB misses; advice only */
#endif
    *out = p;
    return REMAT_OK;
}

static void cpu_release(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static remat_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
    return REMAT_OK;
}

typedef struct {
    unsigned char *dst;
    size_t bytes;
} zero_job;

static void zero_task(void *arg, int ith, int nth) {
    const zero_job *j = arg;
    size_t lo = j->bytes * (size_t)ith / (size_t)nth, hi = j->bytes * (size_t)(ith + 1) / (size_t)nth;
    memset(j->dst + lo, 0, hi - lo);
}

/* A gradient's zeros before the backwards that accumulate into it: on the
 * pool from 1 MiB (one thread's memset leaves the others idle; the bytes
 * are the same either way). */
static remat_status cpu_zero(void *ctx, void *dst, size_t bytes) {
    cpu *c = ctx;
    zero_job j = {dst, bytes};
    if (bytes < ((size_t)1 << 20) || remat__pool_size(c->pool) < 2) zero_task(&j, 0, 1);
    else remat__pool_run(c->pool, zero_task, &j);
    return REMAT_OK;
}

static remat_status cpu_one(void *ctx, float *dst) {
    (void)ctx;
    *dst = 1.0f;
    return REMAT_OK;
}

static void run_fwd(void *k, int ith, int nth) {
    const remat__kctx *kc = k;
    remat__ops[kc->node->op]->forward(kc, ith, nth);
}

static void run_bwd(void *k, int ith, int nth) {
    const remat__kctx *kc = k;
    remat__ops[kc->node->op]->backward(kc, ith, nth);
}

static remat_status cpu_run(void *ctx, remat__kctx *k, int backward) {
    cpu *c = ctx;
    remat__task fn = backward ? run_bwd : run_fwd;
    /* The thread count depends on the node alone (its workspace was sized
     * for it): remat__node_threads. */
    int nt = remat__node_threads(k->graph, k->node, remat__pool_size(c->pool));
    k->dnnl = c->dnnl;
    if (nt <= 1) {
        k->pool = NULL; /* barriers are no-ops for one thread */
        fn(k, 0, 1);
    } else {
        k->pool = c->pool;
        remat__pool_run(c->pool, fn, k);
    }
    return remat__dnnl_status(c->dnnl);
}

/* torch.optim.SGD: g += wd*w; b = mu*b + (1-dampening)*g (b = g at the first
 * step); g = nesterov ? g + mu*b : b; w -= lr*g. */
static void sgd(const remat_optim_opts *o, int first, int64_t n, float *w, const float *grad, float *b) {
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        if (o->weight_decay != 0.0f) g = g + o->weight_decay * w[i];
        if (b) {
            b[i] = first ? g : o->momentum * b[i] + (1.0f - o->dampening) * g;
            g = o->nesterov ? g + o->momentum * b[i] : b[i];
        }
        w[i] = w[i] - o->lr * g;
    }
}

/* torch.optim.AdamW (non-amsgrad, single-tensor path): w *= 1 - lr*wd;
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps), on pw16's vector
 * kernels (remat__adamw_one: the same bits as element by element). */
static void adamw(const remat_optim_opts *o, int64_t t, int64_t n, float *w, const float *grad, float *m, float *v) {
    const remat__adamw_k k = {.decay = 1.0f - o->lr * o->weight_decay,
                              .b1c = 1.0f - o->beta1,
                              .b2 = o->beta2,
                              .b2c = 1.0f - o->beta2,
                              .bc2s = sqrtf(1.0f - powf(o->beta2, (float)t)),
                              .eps = o->eps,
                              .step = o->lr / (1.0f - powf(o->beta1, (float)t))};
    remat__pw16_best()->adamw(&k, n, w, grad, m, v);
}

typedef struct {
    const remat_optim_opts *o;
    int64_t t;
    int n;
    float *const *w, *const *g, *const *m, *const *v;
    const int64_t *numel;
} update_job;

/* The tensors' elements, taken as one sequence, are cut into one
 * contiguous range per thread. Each element's update reads only its own
 * state, so the result does not depend on the thread count. */
static void update_task(void *ctx, int ith, int nth) {
    const update_job *j = ctx;
    int64_t total = 0, lo, hi, off = 0;
    for (int i = 0; i < j->n; i++) total += j->numel[i];
    remat__split(total, ith, nth, &lo, &hi);
    for (int i = 0; i < j->n && off < hi; i++) {
        int64_t n = j->numel[i];
        int64_t a = lo > off ? lo - off : 0, b = hi - off < n ? hi - off : n;
        if (a < b) {
            if (j->o->kind == REMAT_OPTIM_SGD)
                sgd(j->o, j->t == 1, b - a, j->w[i] + a, j->g[i] + a, j->m[i] ? j->m[i] + a : NULL);
            else adamw(j->o, j->t, b - a, j->w[i] + a, j->g[i] + a, j->m[i] + a, j->v[i] + a);
        }
        off += n;
    }
}

static remat_status cpu_update(void *ctx, const remat_optim_opts *o, int64_t t, int n, float *const *w, float *const *g,
                               float *const *m, float *const *v, const int64_t *numel) {
    cpu *c = ctx;
    update_job j = {o, t, n, w, g, m, v, numel};
    remat__pool_run(c->pool, update_task, &j);
    return REMAT_OK;
}

/* ---------------------------------------------------------- finite check */

#define FINITE_CHUNK 4096
#define FINITE_PARALLEL ((int64_t)1 << 18) /* elements from which the pool shares the scan */

/* The index of the first NaN or infinity of x[0, n), or -1. Each chunk is
 * first tested without branches (x - x is 0 for a finite x and NaN for a
 * NaN or an infinity, so the loop vectorizes); only a chunk that holds one
 * is searched element by element. */
static int64_t first_nonfinite(const float *x, int64_t n) {
    for (int64_t c = 0; c < n; c += FINITE_CHUNK) {
        int64_t e = n - c < FINITE_CHUNK ? n - c : FINITE_CHUNK;
        int bad = 0;
        for (int64_t i = 0; i < e; i++) {
            float d = x[c + i] - x[c + i];
            bad |= d != d;
        }
        if (!bad) continue;
        for (int64_t i = 0; i < e; i++)
            if (!isfinite(x[c + i])) return c + i;
    }
    return -1;
}

typedef struct {
    const float *p;
    int64_t n;
    int64_t *first; /* per thread: the first bad index of its range, or -1 */
} finite_job;

static void finite_task(void *ctx, int ith, int nth) {
    const finite_job *j = ctx;
    int64_t lo, hi;
    remat__split(j->n, ith, nth, &lo, &hi);
    int64_t f = first_nonfinite(j->p + lo, hi - lo);
    j->first[ith] = f < 0 ? -1 : lo + f;
}

/* Large arrays are scanned by the pool, one contiguous range per thread in
 * index order, so the first index found by the lowest thread that finds
 * any is the first of the whole array, whatever the thread count. */
static remat_status cpu_finite(void *ctx, const float *p, size_t n, int64_t *first_bad) {
    cpu *c = ctx;
    int nth = remat__pool_size(c->pool);
    int64_t *first = (int64_t)n >= FINITE_PARALLEL && nth > 1 ? malloc((size_t)nth * sizeof *first) : NULL;
    if (!first) { /* small, one thread, or no memory for the per-thread results: one pass here */
        *first_bad = first_nonfinite(p, (int64_t)n);
        return REMAT_OK;
    }
    finite_job j = {p, (int64_t)n, first};
    remat__pool_run(c->pool, finite_task, &j);
    *first_bad = -1;
    for (int t = 0; t < nth && *first_bad < 0; t++) *first_bad = first[t];
    free(first);
    return REMAT_OK;
}

static remat_status cpu_sync(void *ctx) {
    (void)ctx;
    return REMAT_OK;
}

static remat__pool *cpu_pool(void *ctx) { return ((cpu *)ctx)->pool; }

typedef struct {
    void *dst;
    const void *src;
    int64_t n;
    remat__cvt kind;
} convert_job;

static void convert_task(void *arg, int ith, int nth) {
    const convert_job *j = arg;
    remat__pw16_best()->convert(j->dst, j->src, j->n * ith / nth, j->n * (ith + 1) / nth, j->kind);
}

/* Element by element, so the pool's split changes no bit. */
static remat_status cpu_convert(void *ctx, void *dst, const void *src, int64_t n, int kind) {
    cpu *c = ctx;
    convert_job j = {dst, src, n, (remat__cvt)kind};
    if (n < 65536) convert_task(&j, 0, 1);
    else remat__pool_run(c->pool, convert_task, &j);
    return REMAT_OK;
}

/* The CPU's "host" is its own memory: the copy is done when it returns. */
static remat_status cpu_offload(void *ctx, void *dst, const void *src, size_t bytes, int to_host) {
    (void)ctx, (void)to_host;
    if (bytes) memcpy(dst, src, bytes);
    return REMAT_OK;
}

static remat_status cpu_offload_wait(void *ctx) {
    (void)ctx;
    return REMAT_OK;
}

/* x = a + x: the same loop dp_reduce.c ran on host memory before the
 * backends had it. */
static remat_status cpu_add(void *ctx, float *x, const float *a, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) x[i] = a[i] + x[i];
    return REMAT_OK;
}

static remat_status cpu_div(void *ctx, float *x, float d, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) x[i] = x[i] / d;
    return REMAT_OK;
}

const remat__backend remat__backend_cpu = {
    .device = REMAT_DEVICE_CPU,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .one = cpu_one,
    .run = cpu_run,
    .update = cpu_update,
    .sync = cpu_sync,
    .pool = cpu_pool,
    .finite = cpu_finite,
    .convert = cpu_convert,
    .offload = cpu_offload,
    .offload_wait = cpu_offload_wait,
    .copy = cpu_copy,
    .add = cpu_add,
    .div = cpu_div,
};

void remat_set_blas_threads(int n) { openblas_set_num_threads(n > 0 ? n : 1); }

int remat_blas_threads(void) { return openblas_get_num_threads(); }

const remat__backend *remat__backend_of(remat_device d) {
    if (d == REMAT_DEVICE_CPU) return &remat__backend_cpu;
#ifdef REMAT_HAVE_CUDA
    if (d == REMAT_DEVICE_CUDA) return &remat__backend_cuda;
#endif
    return NULL;
}
