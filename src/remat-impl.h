/* remat-impl.h: the internal contract shared by the library's layers.
 *
 * Public names are remat_, internal non-static names remat__. This header
 * declares the core services (errors, accounting allocator, Philox RNG,
 * thread pool), the op table and its kernel context, the graph's node
 * representation, and the schedule that the executor interprets.
 */
#ifndef REMAT_IMPL_H
#define REMAT_IMPL_H

#include "remat.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ core */

/* Seconds on the monotonic clock (profiles, timings). */
double remat__now(void);

/* Records a formatted message as this thread's last error and returns s. */
remat_status remat__err(remat_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Line and column (both 1-based, columns in bytes) of pos in text: where
 * a JSON reader (chain files, graph files) reports a syntax error. */
void remat__line_col(const char *text, const char *pos, int *line, int *col);

/* The accounting allocator: every byte remat holds for tensors goes through
 * one of these, tagged with a category. Not thread-safe: the executor
 * allocates from one thread, kernels never allocate. */
typedef struct {
    remat_mem_stats st;
    uint64_t n_allocs; /* allocations made, for tests */
} remat__alloc;

void remat__alloc_init(remat__alloc *a);
/* Returns 64-byte aligned memory, or NULL with the last error set. size 0
 * returns a valid unique pointer and counts 0 bytes. */
void *remat__alloc_get(remat__alloc *a, remat_mem cat, size_t bytes);
/* Zero-filled variant. */
void *remat__alloc_zeroed(remat__alloc *a, remat_mem cat, size_t bytes);
void remat__alloc_put(remat__alloc *a, remat_mem cat, void *p, size_t bytes);
/* Counts bytes held elsewhere (the executor's arena) as live, or no more. */
void remat__alloc_count(remat__alloc *a, remat_mem cat, size_t bytes);
void remat__alloc_uncount(remat__alloc *a, remat_mem cat, size_t bytes);
/* Starts a new peak window: peaks become the live values. */
void remat__alloc_reset_peaks(remat__alloc *a);

/* Philox4x32-10 (Salmon et al., SC'11): 4 words out per (counter, key),
 * and remat__u01, a uniform float from one word. */
#include "core/philox.h"

/* Reductions in double with a fixed rounding: element i of x goes to
 * partial sum acc[i % REMAT__PARTIALS] (the partials may carry over from
 * an earlier call, e.g. plane by plane), and remat__partials_total
 * combines them in a fixed order. Independent chains, so the compiler
 * keeps them in vector registers where one double chain was
 * latency-bound; the same bits for a given length whatever the thread
 * count. */
#define REMAT__PARTIALS 8
static inline void remat__sum_partials(const float *x, int64_t n, double acc[REMAT__PARTIALS]) {
    int64_t i = 0;
    for (; i + REMAT__PARTIALS <= n; i += REMAT__PARTIALS)
        for (int j = 0; j < REMAT__PARTIALS; j++) acc[j] += (double)x[i + j];
    for (int j = 0; i + j < n; j++) acc[j] += (double)x[i + j];
}
static inline double remat__partials_total(const double acc[REMAT__PARTIALS]) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* Thread pool: run(fn, ctx) calls fn(ctx, ith, nth) once per thread, the
 * caller being thread 0, and returns when all are done. Kernels may call
 * remat__pool_barrier from inside a run to separate phases. */
typedef struct remat__pool remat__pool;
typedef void (*remat__task)(void *ctx, int ith, int nth);
remat_status remat__pool_create(remat__pool **out, int nthreads);
void remat__pool_destroy(remat__pool *p);
int remat__pool_size(const remat__pool *p);
void remat__pool_run(remat__pool *p, remat__task fn, void *ctx);
void remat__pool_barrier(remat__pool *p);

/* Splits [0, n) into nth nearly equal parts; part ith is [*lo, *hi). */
static inline void remat__split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t q = n / nth, r = n % nth;
    *lo = ith * q + (ith < r ? ith : r);
    *hi = *lo + q + (ith < r ? 1 : 0);
}

/* ----------------------------------------------------------------- graph */

/* Inputs per node: DenseNet-BC's n-ary concat joins up to 17 tensors (at
 * depth 100; 31 layers per block, depth 190, fill 32). Only inputs below
 * REMAT__SAVE_IN_LIMIT can be saved for backward (see the save bits). */
#define REMAT__MAX_IN 32

typedef struct {
    int ndim;
    int64_t d[REMAT_MAX_DIMS];
} remat__shape;

static inline int64_t remat__numel(const remat__shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->d[i];
    return n;
}

typedef enum {
    REMAT__LEAF_NONE = 0, /* an op */
    REMAT__LEAF_INPUT,    /* data bound by the caller each step */
    REMAT__LEAF_PARAM,    /* trainable parameter */
    REMAT__LEAF_BUFFER,   /* non-trainable state */
} remat__leaf;

typedef struct remat__node {
    int op; /* index into remat__ops */
    remat__leaf leaf;
    char *name; /* owned; NULL for unnamed ops */
    int n_in;
    remat_node in[REMAT__MAX_IN];
    remat__shape shape; /* output shape */
    remat_dtype dtype;
    int64_t iattr[6]; /* op attributes (see each op) */
    float fattr[2];
    remat_init init; /* leaves: initializer */
    float init_a;
    uint8_t checkpoint; /* remat_checkpoint mark: 1 + scope depth, 0 = none */
    uint32_t saves;     /* what its backward reads (REMAT__SAVE_* bits):
                         * its op's mask, or a traced op's own */
} remat__node;

/* What the op table says of an op, for an op traced from another framework
 * (a graph file, graph/graph_json.c): per node, as recorded there. */
typedef struct {
    double cost[3]; /* forward, backward, recomputation (FLOPs, or
                     * seconds when the file's costs are seconds) */
    size_t aux;     /* bytes of the outputs besides the first that the
                     * backward reads (masks, indices, statistics) */
    size_t ws[2];   /* transient bytes of the forward and the backward */
    int64_t grad;   /* bytes of the gradient of its value, when they are
                     * not its value's (-1): a framework may hold a
                     * gradient for a value that takes no memory (a
                     * parameter read by several ops: PyTorch sums its
                     * gradient in a buffer until the last read) */
    remat_family family;
    uint8_t flags;  /* REMAT__OP_STATEFUL, REMAT__OP_RANDOM, REMAT__TRACED_GRAD_VIEWS,
                     * as recorded */
    int32_t id;     /* the op's (or a leaf's value's) id in the file */
    int32_t value;  /* the id in the file of the value this node holds
                     * (an op's first output, or the extra output it
                     * stands for) */
    int32_t over;   /* 1 + the node whose op writes this node's value in
                     * place (its memory then holds the new version:
                     * nothing reads this value after that op ran
                     * unless it is made again); 0: none */
    int32_t region; /* 1 + the checkpoint region its op ran in (a call
                     * of a module the framework's per-layer
                     * checkpointing wraps: the manual strategy); 0:
                     * none */
    int32_t held;   /* 1 + the node until whose forward the framework's
                     * code holds this node's value in the forward pass
                     * (past its last read there, whatever the plan);
                     * REMAT__HELD_TO_END: its caller holds it from when
                     * it is made to the step's end; 0: none */
    int32_t holds;  /* 1 + the first node whose value is held until this
                     * node's forward, chained through hold_next; 0: none */
    int32_t hold_next;
} remat__traced;

struct remat_graph {
    remat__node *nodes;
    int n, cap;
    int ckpt_depth;      /* open remat_checkpoint_begin scopes */
    remat_status status; /* first builder error */
    char error[512];
    remat__traced *traced; /* (cap) per node, for a graph read from a
                            * graph file; NULL for every other graph */
    int traced_seconds;    /* the traced costs are seconds, not FLOPs */
};

/* Adds a node (copying *proto), runs the op's shape rule and returns its id
 * or REMAT_NONE after recording the graph's first error. */
remat_node remat__graph_add(remat_graph *g, const remat__node *proto);

/* ------------------------------------------------------------------- ops */

/* A value held by the executor: a node's output, its aux, or a gradient. */
typedef struct {
    void *data;
    const remat__shape *shape;
} remat__tensor;

/* What a kernel sees. Forward reads in[] and writes out (and aux); backward
 * reads dout and whatever the op's `saves` mask promised (in[i], out, aux)
 * and ACCUMULATES into din[i] where din[i] != NULL (NULL: that input needs
 * no gradient). In backward every in[i] and out is present with a valid
 * shape, but its data is NULL unless the op saves it. */
struct remat__op;
typedef struct {
    const remat_graph *graph;
    const remat__node *node;
    const struct remat__op *op; /* the node's op (remat__ops[node->op]): a
                                 * backend finds its kernels, and a kernel
                                 * its name for messages, here */
    const remat__tensor *in[REMAT__MAX_IN];
    remat__tensor *out;
    float *aux;
    const float *dout;
    float *din[REMAT__MAX_IN];
    void *ws;                 /* workspace of the op's ws bytes for this pass */
    int train;                /* training-mode semantics */
    int first;                /* first execution of this node in the step: commit state */
    uint64_t seed;            /* dropout: Philox key */
    int64_t step;             /* dropout: step index */
    int32_t node_id;          /* dropout: node index */
    int64_t elem0;            /* dropout: the index of this tensor's element 0 in
                               * the global batch's (micro-batch k of a step:
                               * k * numel), so masks follow the sample */
    double *stats;            /* stateful ops, first training execution: when
                               * set, the statistics (op->stats_bytes) are written
                               * here instead of committed; a data-parallel step
                               * commits every micro-batch's in order (op->commit) */
    remat__pool *pool;        /* for remat__pool_barrier between phases */
    void *dev;                /* device kernels: the backend's context (src/cuda/
                               * cuda-impl.h: stream, cuBLAS and cuDNN handles) */
    struct remat__dnnl *dnnl; /* CPU kernels: the backend's oneDNN context
                               * (src/ops/dnnl.h); NULL without oneDNN, and then
                               * every product is cblas */
    const uint8_t *dt;        /* the bf16 policy's dtypes by node id when this
                               * node's kernels take its values in their stored
                               * dtypes (remat__op.bf16_ws said so); NULL: every
                               * tensor, dout and din is float32 */
} remat__kctx;

/* Kernel rules: every one of the nth threads must call remat__pool_barrier
 * the same number of times (none may return before a barrier the others
 * reach). Stateful ops (REMAT__OP_STATEFUL) update their buffer inputs in
 * place when k->first is set; when it is not (a recomputation), they read
 * the statistics of the first execution from aux, which a schedule must
 * therefore keep resident from a stateful node's first forward to its last
 * use in the step. */
typedef void (*remat__kernel)(const remat__kctx *k, int ith, int nth);

/* A device backend's kernels for one op. Every pointer in the kernel
 * context is device memory (in[i]->data, out->data, aux, dout, din[i],
 * ws); the shapes and the node are host memory. A kernel enqueues its work
 * on the backend's stream and returns without waiting; it returns
 * REMAT_INTERNAL (after remat__err naming the op and the failing call)
 * when a launch or a library call fails. Workspace functions give the
 * bytes of k->ws for a node; they are called once per node when a
 * session is created (the memory plan reads the results), with the
 * backend's context, or with NULL where a session plans for a device
 * that is not here (remat_session_opts.plan_only): a workspace function
 * that needs the device to answer (asks_device) then gives an estimate,
 * an upper bound of what it would give with one. Same semantics as the
 * CPU kernels: backward accumulates into din[i]; stateful ops commit only
 * when k->first. */
typedef remat_status (*remat__dkernel)(const remat__kctx *k);
typedef size_t (*remat__dws)(void *dev, const remat_graph *g, const remat__node *n);
typedef struct {
    remat__dkernel forward, backward;
    remat__dws fwd_ws, bwd_ws; /* NULL: no workspace */
    /* Whether node n's workspace depends on the device's libraries
     * (cuDNN's algorithms), so that without the device it is an estimate;
     * NULL: never (the shapes decide). */
    int (*asks_device)(const remat_graph *g, const remat__node *n);
    /* Under the bf16 policy: 1 when node n's kernels take its values in
     * their stored dtypes (dt, by node id; kctx.dt is set), with their
     * workspace bytes in *fwd and *bwd, which replace fwd_ws's and
     * bwd_ws's; 0 (or NULL) and the executor runs the float32 kernels on
     * views (exec/views.c), as remat__op.bf16_ws on the CPU. dev is
     * NULL in a plan for a device that is not here: then, where
     * asks_device says the workspace depends on the device, the bytes are
     * an upper bound, as fwd_ws's are. */
    int (*bf16_ws)(void *dev, const remat_graph *g, const remat__node *n, const uint8_t *dt, size_t *fwd, size_t *bwd);
} remat__dev_kernels;

/* Bits of remat__op.saves: what backward reads besides dout. Inputs 0..29
 * have a bit each; inputs 30 and 31 (only n-ary concat has them) cannot be
 * saved, and REMAT__SAVE_IN gives 0 for them so that a loop over a node's
 * inputs never reads the output's or aux's bit as an input's.
 * test_gradcheck checks every op's mask against its arity. */
#define REMAT__SAVE_IN_LIMIT 30
#define REMAT__SAVE_IN(i) ((i) < REMAT__SAVE_IN_LIMIT ? 1u << (i) : 0u)
#define REMAT__SAVE_OUT (1u << 30)
#define REMAT__SAVE_AUX (1u << 31)
#ifndef __cplusplus /* the CUDA kernels include this header as C++ */
_Static_assert(REMAT__SAVE_OUT == 1u << REMAT__SAVE_IN_LIMIT && REMAT__SAVE_AUX > REMAT__SAVE_OUT,
               "the input bits REMAT__SAVE_IN(0..29) lie below REMAT__SAVE_OUT and REMAT__SAVE_AUX");
#endif

/* Bits of remat__op.flags. */
#define REMAT__OP_STATEFUL (1u << 0)   /* commits state when k->first */
#define REMAT__OP_RANDOM (1u << 1)     /* draws from Philox */
#define REMAT__OP_LOSS (1u << 2)       /* scalar loss output */
#define REMAT__OP_NODIFF_IN1 (1u << 3) /* input 1 gets no gradient (labels) */
/* A traced op's backward makes its inputs' gradients as views into its
 * output's gradient (remat__traced.flags only: PyTorch's cat and stack). */
#define REMAT__TRACED_GRAD_VIEWS (1u << 7)
/* remat__traced.held of a value the framework's caller holds to the step's
 * end (a model's output kept through the backward). */
#define REMAT__HELD_TO_END (-1)
/* Element i of the output (and of each input gradient) depends on element
 * i of each input, output and output gradient alone; every one has the
 * node's element count, which the kernels read from the node's shape;
 * no aux, no workspace. The bf16 policy runs such a kernel slice by slice
 * (exec/views.c). */
#define REMAT__OP_ELEMENTWISE (1u << 4)
/* Each (n, c) plane of the 4-D input (N, C, ...) maps to the same plane of
 * the output (N, C, ...) alone, forward and backward; the kernels read
 * every size from the tensors' shapes and the node's attributes. The bf16
 * policy runs such a kernel a block of planes at a time. */
#define REMAT__OP_PLANEWISE (1u << 5)

/* An op's rule under REMAT_PRECISION_BF16 (PyTorch's CPU autocast): the
 * dtype it stores its output in. Kernels compute in float32 either way;
 * exec/views.c converts around them. */
enum {
    REMAT__AC_NONE = 0, /* leaves and plan-only ops (a kernel op must have a rule) */
    REMAT__AC_LOW,      /* products: bf16-rounded inputs, bf16 output */
    REMAT__AC_FP32,     /* losses: float32 output, bf16 inputs read as float32 */
    REMAT__AC_FIRST,    /* its first float input's dtype */
    REMAT__AC_PROMOTE   /* the widest of its float inputs' dtypes */
};

typedef struct remat__op {
    const char *name;
    int min_in, max_in;
    /* Checks inputs and attributes, sets n->shape and n->dtype. On error
     * returns a status after remat__err with a message that names the op,
     * the node and the shapes. */
    remat_status (*shape)(const remat_graph *g, remat__node *n);
    remat__kernel forward, backward; /* NULL for leaves */
    unsigned saves, flags;
    uint8_t autocast; /* REMAT__AC_*: its rule under the bf16 policy */
    /* Per-output-element bookkeeping, all may be NULL (meaning 0). */
    size_t (*aux_bytes)(const remat_graph *g, const remat__node *n);
    size_t (*fwd_ws)(const remat_graph *g, const remat__node *n, int nth);
    size_t (*bwd_ws)(const remat_graph *g, const remat__node *n, int nth);
    /* Under the bf16 policy on the CPU: 1 when the kernels take the node's
     * values in their stored dtypes (dt, by node id; kctx.dt is set), with
     * their workspace bytes; 0 (or NULL) and the executor runs them on
     * float32 views (exec/views.c). */
    int (*bf16_ws)(const remat_graph *g, const remat__node *n, const uint8_t *dt, int nth, size_t *fwd, size_t *bwd);
    double (*flops)(const remat_graph *g, const remat__node *n); /* forward */
    /* Stateful ops: the bytes of the statistics one training execution
     * exports (kctx.stats), and their commit into the state, the same
     * arithmetic as the kernel's own: in[i] is input i's data (the
     * buffers are updated in place). NULL for ops without state. */
    size_t (*stats_bytes)(const remat_graph *g, const remat__node *n);
    void (*commit)(const remat_graph *g, const remat__node *n, float *const *in, const double *stats);
    remat_family family; /* for the cost model's throughputs */
    /* The CUDA backend's kernels (src/cuda/), REMAT__CUDA(name): NULL in a
     * build without CUDA. test_gradcheck fails if an op with CPU kernels
     * lacks them in a CUDA build. */
    const remat__dev_kernels *cuda;
} remat__op;

/* "op 'name'" (or "op") of the node a kernel runs, into buf: what a kernel
 * names in its messages (remat__node_label's words from the context alone,
 * so that the kernels need neither the graph's code nor the op table's). */
static inline const char *remat__kctx_label(const remat__kctx *k, char *buf, size_t cap) {
    if (!k) return "the CUDA backend";
    const char *op = k->op ? k->op->name : "op";
    if (k->node && k->node->name) snprintf(buf, cap, "%s '%s'", op, k->node->name);
    else snprintf(buf, cap, "%s", op);
    return buf;
}

#ifdef REMAT_HAVE_CUDA
#define REMAT__CUDA(name) (&remat__cuda_##name)
#define REMAT__CUDA_DECL(id, name) extern const remat__dev_kernels remat__cuda_##name;
#else
#define REMAT__CUDA(name) NULL
#endif

/* Every op, once: X(ID, name). The op ids (REMAT__OP_<ID>), the op
 * table (src/ops/optable.c) and the declarations of each op's entry
 * (remat__op_<name>, defined in its op's file) and of its device kernels
 * (remat__cuda_<name>, in src/cuda/) all come from this list, so none can
 * miss an op. Leaves come first; they have no kernels. */
#define REMAT__LEAF_LIST(X) X(INPUT, input) X(PARAM, param) X(BUFFER, buffer)
// clang-format off
#define REMAT__KERNEL_OP_LIST(X)                                                                       \
    X(LINEAR, linear) X(CONV2D, conv2d) X(BATCHNORM2D, batchnorm2d) X(RELU, relu)                      \
    X(MAXPOOL2D, maxpool2d) X(AVGPOOL2D, avgpool2d) X(GLOBAL_AVGPOOL, global_avgpool)                  \
    X(DROPOUT, dropout) X(RESHAPE, reshape) X(ADD, add) X(CONCAT, concat)                              \
    X(CROSS_ENTROPY, cross_entropy) X(MSE, mse) X(MUL, mul) X(LAYERNORM, layernorm) X(GELU, gelu)      \
    X(EMBEDDING, embedding) X(SOFTMAX, softmax) X(ATTENTION, attention) X(PERMUTE, permute)            \
    X(SLICE, slice) X(ADD_BROADCAST, add_broadcast)
// clang-format on
/* Ops without kernels, which only the planner sees: an op traced from
 * another framework (ops/traced.c). */
#define REMAT__PLAN_OP_LIST(X) X(TRACED, traced)
#define REMAT__OP_LIST(X) REMAT__LEAF_LIST(X) REMAT__KERNEL_OP_LIST(X) REMAT__PLAN_OP_LIST(X)

enum {
#define REMAT__OP_ENUM(id, name) REMAT__OP_##id,
    REMAT__OP_LIST(REMAT__OP_ENUM)
#undef REMAT__OP_ENUM
        REMAT__N_OPS
};

/* The op table, indexed by op id. */
extern const remat__op *const remat__ops[REMAT__N_OPS];
/* Index of the op with this name, or -1. */
int remat__op_find(const char *name);

#define REMAT__OP_DECL(id, name) extern const remat__op remat__op_##name;
REMAT__OP_LIST(REMAT__OP_DECL)
#undef REMAT__OP_DECL
#ifdef REMAT_HAVE_CUDA
REMAT__KERNEL_OP_LIST(REMAT__CUDA_DECL)
#endif

static inline const remat__shape *remat__in_shape(const remat_graph *g, const remat__node *n, int i) {
    return &g->nodes[n->in[i]].shape;
}

/* Element size of a dtype in bytes. */
static inline size_t remat__dtype_size(remat_dtype t) { return t == REMAT_U8 ? 1 : t == REMAT_BF16 ? 2 : 4; }

/* A node's op family (the cost model's throughputs): its op's, or a
 * traced op's own. */
static inline remat_family remat__node_family(const remat_graph *g, const remat__node *n) {
    return g->traced ? g->traced[n - g->nodes].family : remat__ops[n->op]->family;
}

/* Bytes of a node's output value. */
static inline size_t remat__out_bytes(const remat__node *n) {
    return (size_t)remat__numel(&n->shape) * remat__dtype_size(n->dtype);
}

/* A node's forward FLOPs, from its op's entry (plan/cost.c). */
double remat__node_flops(const remat_graph *g, const remat__node *n);
/* A cost model (remat.h: opaque to callers). A plain value (no
 * pointers): the library copies it by assignment (a session's prog holds
 * its own). plan/cost.c reads and writes it, plan/cost_api.c is its
 * public functions. */
struct remat_cost_model {
    int calibrated;
    int threads;         /* CPU kernel threads of the measurement */
    remat_device device; /* where it was measured (REMAT_DEVICE_CPU) */
    double flops_per_s[REMAT_FAMILY_COUNT];
    /* seconds per trainable parameter element of a step's work outside
     * the graph (zeroing the gradients, the optimizer update), by
     * remat_optim_kind (SGD with momentum, AdamW); 0: not measured */
    double update_s_per_param[2];
    /* the link offload copies over (remat_calibrate_link): bytes/s each
     * way and seconds per copy; 0 bandwidth: not measured */
    double host_bandwidth, host_latency;
    int n_ops; /* measured shape classes, sorted by cls */
    remat_op_time ops[REMAT_COST_MAX_OPS];
};

/* Adds or replaces a measured shape class in a cost model (kept sorted);
 * REMAT_INVALID when it is full. */
remat_status remat__cost_model_put(remat_cost_model *m, const remat_op_time *t);
/* `code` (REMAT_FORMAT for a file, REMAT_INVALID for a caller's struct),
 * naming `where`, the field and its value, when a calibrated model holds
 * seconds or a throughput that could make a step's predicted cost
 * infinite (a NaN, an infinity, an op over 1e9 s, a throughput under
 * 1 FLOP/s); REMAT_OK otherwise. */
remat_status remat__cost_model_check(const remat_cost_model *m, const char *where, remat_status code);

/* ------------------------------------------- atomic writes (core/file.c)
 * Every file remat writes goes through remat__write_atomic (plan/cost.c
 * and the command line reach it as remat_file_write_atomic, remat.h). */

/* Writes the file's contents to fp; returns REMAT_OK, REMAT_IO for a
 * failed write (errno tells why; the caller names the file), or any
 * status after remat__err. */
typedef remat_status (*remat__writer)(FILE *fp, void *ctx);

/* Writes path atomically and durably: fn writes a new temporary file
 * ".<base>.tmp.<pid>.<random>" in path's folder (O_EXCL: unique), which is
 * flushed, fsync'ed and renamed over path, and the folder is fsync'ed.
 * Path either keeps its old contents or has all of the new ones, also
 * after a crash. On failure the temporary is removed and REMAT_IO names
 * path and the system's reason. Stale temporaries of the same name (their
 * process gone, or untouched for an hour) are removed first. */
remat_status remat__write_atomic(const char *path, remat__writer fn, void *ctx);

/* 1 if name is a temporary of remat__write_atomic: fills base (the target's
 * base name, cap bytes) and pid. */
int remat__tmp_parse(const char *name, char *base, size_t cap, long *pid);
/* Removes the stale temporaries in dir (see remat__write_atomic) whose
 * target's base name keep_base accepts; returns how many. */
int remat__remove_stale_tmp(const char *dir, int (*keep_base)(const char *base, const void *arg), const void *arg);

/* Who holds a lock (core/lock.c): pid 0 when its file does not say. */
typedef struct {
    long pid;
    char host[128];
} remat__lock_holder;
/* Takes an exclusive flock on the file `path` (created if missing)
 * without waiting and writes "pid <pid> host <host>" in it. 0: held, *fd
 * its descriptor (close it to release); 1: another open file holds it,
 * *holder says whose; -1: errno says why (ENOLCK, EOPNOTSUPP: a file
 * system without locks). A file removed or replaced at the path between
 * the open and the lock (a holder that removes it on release) is opened
 * again, so that two never hold one path. */
int remat__lock_take(const char *path, int *fd, remat__lock_holder *holder);

/* CPU threads a node's kernels run on (small ops run on the calling thread);
 * workspace sizes are computed for this count. */
int remat__node_threads(const remat_graph *g, const remat__node *n, int pool);

/* Shape-rule helper: formats "op 'name'" into buf for error messages
 * (ops/optable.c; a kernel has remat__kctx_label). */
const char *remat__node_label(const remat__node *n, char *buf, size_t cap);

/* The bf16 policy's switches for the CUDA kernels, from the environment
 * (core/switches.c): REMAT_CUDA_BF16 (unset; views: every kernel on
 * float32 views; elementwise-views: the elementwise ones) and
 * REMAT_CUDA_CONV16 (unset or nchw; nhwc: the convolutions' cuDNN calls on
 * channels-last copies). REMAT_INVALID, naming it, for any other value. */
typedef struct {
    enum { REMAT__CUDA_NATIVE, REMAT__CUDA_VIEWS, REMAT__CUDA_ELEMENTWISE_VIEWS } views;
    int conv_nhwc;
} remat__cuda_switches;
remat_status remat__cuda_bf16_env(remat__cuda_switches *s);
/* Formats a shape as "(8, 3, 32, 32)". */
const char *remat__shape_str(const remat__shape *s, char *buf, size_t cap);
/* The same of ndim sizes: "(2, 3)", "()" for a scalar. */
const char *remat__dims_str(int ndim, const int64_t *dims, char *buf, size_t cap);

#endif /* REMAT_IMPL_H */
