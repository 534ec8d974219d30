/* remat.h: the one public header of libremat.
 *
 * remat trains neural networks inside a memory budget. A model and its loss
 * are described as a static graph through the builder calls below; remat
 * derives the backward pass, turns the step into a schedule (an instruction
 * list) and runs it with an executor that accounts every byte it allocates.
 *
 * Conventions:
 * - Every fallible call returns a remat_status; on failure a message naming
 *   the problem is available from remat_last_error() on the same thread.
 * - Every remat_x_create has a remat_x_destroy; destroy accepts NULL.
 * - Builder calls return a node id (>= 0) or REMAT_NONE. A failing builder
 *   call records the graph's first error (remat_graph_status), and builder
 *   calls given REMAT_NONE as an input return REMAT_NONE without adding a
 *   second error, so a whole model can be built and checked once at the end.
 * - Element counts are int64_t, byte counts size_t. Tensors are dense,
 *   row-major, NCHW for images.
 */
#ifndef REMAT_H
#define REMAT_H

#include <signal.h> /* sig_atomic_t */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ ABI
 *
 * Version: REMAT_VERSION is the release as a string; REMAT_VERSION_MAJOR,
 * _MINOR and _PATCH are its parts, for #if. The shared library's soname
 * follows the major number (libremat.so.1 while it is 1).
 *
 * What is stable within one major version: the names, parameters and
 * return types of the functions marked REMAT_API below, the values of the
 * enums (statuses, memory tags, dtypes, strategies, ...), the macros, and
 * the layout of the structs this header defines. Opaque handles
 * (remat_graph, remat_session, remat_cost_model, ...) have no layout to
 * rely on. A minor version may add functions, enum values at the end and
 * struct fields only where the struct says so (an _opts struct filled by
 * its _default function); it removes nothing. Anything else (a function
 * or a struct removed or changed) takes the next major version.
 *
 * 1.0: remat_cost_model became an opaque handle (remat_cost_model_create,
 * _destroy and its getters and setters), so that its table of shape
 * classes is not part of the ABI; it was a struct by value in 0.x.
 *
 * REMAT_API marks the public functions: libremat is built with hidden
 * visibility, so these and nothing else are exported by libremat.so
 * (tests/exports.cmake checks it). Internal names (remat__*, src/) are
 * not part of the ABI and are not reachable through the shared library.
 */
#define REMAT_VERSION "1.0.0"
#define REMAT_VERSION_MAJOR 1
#define REMAT_VERSION_MINOR 0
#define REMAT_VERSION_PATCH 0

#if defined(__GNUC__) || defined(__clang__)
#define REMAT_API __attribute__((visibility("default")))
#else
#define REMAT_API
#endif

/* ---------------------------------------------------------------- status */

/* X(name, code, description) */
#define REMAT_STATUS_LIST(X)                                                                                           \
    X(OK, 0, "ok")                                                                                                     \
    X(INVALID, -1, "invalid argument")                                                                                 \
    X(SHAPE, -2, "shape mismatch")                                                                                     \
    X(NOMEM, -3, "out of memory")                                                                                      \
    X(IO, -4, "input/output error")                                                                                    \
    X(FORMAT, -5, "malformed data")                                                                                    \
    X(NOT_FOUND, -6, "not found")                                                                                      \
    X(BUDGET, -7, "memory budget too small")                                                                           \
    X(UNSUPPORTED, -8, "unsupported")                                                                                  \
    X(INTERNAL, -9, "internal error")                                                                                  \
    X(STOPPED, -10, "stopped on request")

typedef enum {
#define REMAT__STATUS_ENUM(name, code, desc) REMAT_##name = code,
    REMAT_STATUS_LIST(REMAT__STATUS_ENUM)
#undef REMAT__STATUS_ENUM
} remat_status;

/* A static string describing the status code ("shape mismatch"). */
REMAT_API const char *remat_status_str(remat_status s);

/* The message left by the most recent failing call on this thread, such as
 * "conv2d 'features.0': input has 1 channels, weight expects 3". The string
 * is owned by the library and valid until the next failing call. */
REMAT_API const char *remat_last_error(void);
/* Sets this thread's last error to the formatted message and returns s:
 * for code built on libremat (a remat_batch_fn, a model builder) that
 * reports its failures the way the library does. */
REMAT_API remat_status remat_error(remat_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------- memory */

/* X(name, description). Every tensor remat allocates carries one tag. */
#define REMAT_MEM_LIST(X)                                                                                              \
    X(PARAM, "parameters")                                                                                             \
    X(GRAD, "gradients")                                                                                               \
    X(OPTIM, "optimizer state")                                                                                        \
    X(ACT, "activations")                                                                                              \
    X(TRANSIENT, "transient")                                                                                          \
    X(WORKSPACE, "workspace")                                                                                          \
    X(COMM, "communication")

typedef enum {
#define REMAT__MEM_ENUM(name, desc) REMAT_MEM_##name,
    REMAT_MEM_LIST(REMAT__MEM_ENUM)
#undef REMAT__MEM_ENUM
        REMAT_MEM_TOTAL, /* index of the all-categories entry in remat_mem_stats */
    REMAT_MEM_HOST,      /* offloaded values in the host's pinned memory: not
                          * device memory, so not in the total nor the budget
                          * (remat_session_opts.host_budget bounds it) */
    REMAT_MEM_COUNT
} remat_mem;

/* A static string naming a memory category ("activations", "total"). */
REMAT_API const char *remat_mem_str(remat_mem m);

/* Live and peak bytes per category; entry REMAT_MEM_TOTAL is the total of
 * the device's categories (those before it). The peak of the total is the
 * peak of the sum, not the sum of the peaks. Entry REMAT_MEM_HOST, after
 * it, counts host memory apart. */
typedef struct {
    size_t live[REMAT_MEM_COUNT];
    size_t peak[REMAT_MEM_COUNT];
} remat_mem_stats;

/* ----------------------------------------------------------------- graph */

typedef struct remat_graph remat_graph;
typedef int32_t remat_node;
#define REMAT_NONE ((remat_node)-1)
#define REMAT_MAX_DIMS 4

/* REMAT_U8: bytes, the dtype of the values of a graph read from a graph
 * file (remat_graph_read_json), whose sizes are given in bytes.
 * REMAT_BF16: bfloat16, how a session under REMAT_PRECISION_BF16 stores
 * the activations its precision policy makes bf16 (never a graph's own
 * dtype). */
typedef enum { REMAT_F32 = 0, REMAT_I32 = 1, REMAT_U8 = 2, REMAT_BF16 = 3 } remat_dtype;

/* How a parameter is initialized when a session is created. */
typedef enum {
    REMAT_INIT_ZEROS = 0,
    REMAT_INIT_ONES,
    REMAT_INIT_UNIFORM, /* U(-a, a) */
    REMAT_INIT_NORMAL   /* N(0, a^2): a is the standard deviation */
} remat_init;

/* Creates an empty graph; the caller owns it (remat_graph_destroy). */
REMAT_API remat_status remat_graph_create(remat_graph **out);
REMAT_API void remat_graph_destroy(remat_graph *g);

/* The first error met while building, REMAT_OK if none; its message is
 * remat_graph_error(g) (owned by the graph). */
REMAT_API remat_status remat_graph_status(const remat_graph *g);
REMAT_API const char *remat_graph_error(const remat_graph *g);
/* Records a builder error of the caller's own (a model builder's checks)
 * as the graph's first error, unless it has one already, and as this
 * thread's last error; returns the graph's status. */
REMAT_API remat_status remat_graph_fail(remat_graph *g, remat_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The first node named `name` (parameters, buffers, inputs and named op
 * nodes), or REMAT_NONE. */
REMAT_API remat_node remat_graph_find(const remat_graph *g, const char *name);
/* Names an op node (copied), for remat info, plans and error messages; op
 * names need not be unique. Leaves are named when created. */
REMAT_API remat_status remat_node_set_name(remat_graph *g, remat_node n, const char *name);

/* The most inputs one node takes (remat_concat's n). */
#define REMAT_MAX_INPUTS 32

/* Leaves. Names are copied. Parameter names are PyTorch state_dict names
 * ("features.0.weight"); they must be unique within the graph. */
REMAT_API remat_node remat_input(remat_graph *g, const char *name, remat_dtype dtype, int ndim, const int64_t *dims);
REMAT_API remat_node remat_param(remat_graph *g, const char *name, int ndim, const int64_t *dims, remat_init init,
                                 float a);
/* Non-trainable state saved with the model (BatchNorm running stats). */
REMAT_API remat_node remat_buffer(remat_graph *g, const char *name, int ndim, const int64_t *dims, remat_init init);

/* Ops on explicit nodes. `b` may be REMAT_NONE where a bias is optional. */
REMAT_API remat_node remat_linear_op(remat_graph *g, remat_node x, remat_node w,
                                     remat_node b); /* x (N,in) w (out,in) b (out) */
REMAT_API remat_node remat_conv2d_op(remat_graph *g, remat_node x, remat_node w, remat_node b, int stride, int padding);
REMAT_API remat_node remat_batchnorm2d_op(remat_graph *g, remat_node x, remat_node weight, remat_node bias,
                                          remat_node running_mean, remat_node running_var, float eps, float momentum);
REMAT_API remat_node remat_relu(remat_graph *g, remat_node x);
REMAT_API remat_node remat_maxpool2d(remat_graph *g, remat_node x, int kernel, int stride, int padding);
/* count_include_pad semantics, as PyTorch's default. */
REMAT_API remat_node remat_avgpool2d(remat_graph *g, remat_node x, int kernel, int stride, int padding);
REMAT_API remat_node remat_global_avgpool(remat_graph *g, remat_node x); /* ->(N,C,1,1) */
REMAT_API remat_node remat_dropout(remat_graph *g, remat_node x, float p);
REMAT_API remat_node remat_flatten(remat_graph *g, remat_node x); /* (N,...)->(N,rest) */
REMAT_API remat_node remat_reshape(remat_graph *g, remat_node x, int ndim, const int64_t *dims);
REMAT_API remat_node remat_add(remat_graph *g, remat_node a, remat_node b);
REMAT_API remat_node remat_mul(remat_graph *g, remat_node a, remat_node b);     /* elementwise */
REMAT_API remat_node remat_concat(remat_graph *g, int n, const remat_node *xs); /* dim 1 */
/* Mean cross-entropy of logits (N,C) against int32 labels (N). */
REMAT_API remat_node remat_cross_entropy(remat_graph *g, remat_node logits, remat_node labels);
/* Mean squared error over all elements. */
REMAT_API remat_node remat_mse(remat_graph *g, remat_node pred, remat_node target);

/* Marks x as a checkpoint boundary for the `manual` strategy and returns
 * it: its value is kept from the forward pass, and the nodes between two
 * boundaries are dropped after the forward pass and recomputed during the
 * backward pass. Nodes after the last boundary are kept. Other strategies
 * ignore the marks.
 *
 * Segments nest: between remat_checkpoint_begin and remat_checkpoint_end,
 * marks are inner boundaries. The forward pass drops the whole scope; when
 * the backward pass recomputes it, it keeps only the inner boundaries (and
 * the last inner segment), and recomputes each inner segment again when
 * its backward comes. remat_checkpoint_end(g, x) closes the scope and marks
 * its output x at the enclosing level. */
REMAT_API remat_node remat_checkpoint(remat_graph *g, remat_node x);
REMAT_API remat_status remat_checkpoint_begin(remat_graph *g);
REMAT_API remat_node remat_checkpoint_end(remat_graph *g, remat_node x);

/* Layers: create the parameters with PyTorch's default initializers, named
 * "<name>.weight", "<name>.bias" (and "<name>.running_mean", ...), then the
 * op. */
REMAT_API remat_node remat_linear(remat_graph *g, const char *name, remat_node x, int64_t out_features, int bias);
REMAT_API remat_node remat_conv2d(remat_graph *g, const char *name, remat_node x, int64_t out_channels, int kernel,
                                  int stride, int padding, int bias);
REMAT_API remat_node remat_batchnorm2d(remat_graph *g, const char *name, remat_node x);

/* ------------------------------------------------- transformer ops
 * PyTorch semantics, float32. */

/* LayerNorm over the last dimension: x (..., C), weight and bias (C). */
REMAT_API remat_node remat_layernorm_op(remat_graph *g, remat_node x, remat_node w, remat_node b, float eps);
/* nn.LayerNorm(C) on x's last dimension: "<name>.weight" (ones) and
 * "<name>.bias" (zeros), eps 1e-5. */
REMAT_API remat_node remat_layernorm(remat_graph *g, const char *name, remat_node x);
/* F.gelu: exact (erf), or approximate='tanh' when tanh_approx != 0. */
REMAT_API remat_node remat_gelu(remat_graph *g, remat_node x, int tanh_approx);
/* F.embedding: ids int32 (any shape, up to 3 dimensions), w (num, dim) ->
 * (..., dim). An id outside [0, num) yields a row of NaN (so a NaN loss)
 * and no gradient: validate ids before binding them. */
REMAT_API remat_node remat_embedding_op(remat_graph *g, remat_node ids, remat_node w);
/* nn.Embedding(num, dim): "<name>.weight" (num, dim), N(0, 1). */
REMAT_API remat_node remat_embedding(remat_graph *g, const char *name, remat_node ids, int64_t num, int64_t dim);
/* Softmax over the last dimension. */
REMAT_API remat_node remat_softmax(remat_graph *g, remat_node x);
/* Causal multi-head self-attention: qkv (B, T, 3C), q, k and v
 * concatenated on the last dimension (GPT-2's c_attn output), heads
 * dividing C -> (B, T, C); softmax(q k^T / sqrt(C / heads)) v per head
 * with position i attending to positions <= i. Keeps the (B, heads, T, T)
 * probabilities for backward. */
REMAT_API remat_node remat_attention(remat_graph *g, remat_node qkv, int heads);
/* torch.permute: output dimension i is input dimension perm[i]; ndim must
 * be the input's. A copy. */
REMAT_API remat_node remat_permute(remat_graph *g, remat_node x, int ndim, const int *perm);
REMAT_API remat_node remat_transpose(remat_graph *g, remat_node x, int d0, int d1);
/* x.narrow(dim, start, len): a copy. */
REMAT_API remat_node remat_slice(remat_graph *g, remat_node x, int dim, int64_t start, int64_t len);
/* x + b, b's shape being x's trailing dimensions (b repeats over the
 * leading ones, as in PyTorch broadcasting). */
REMAT_API remat_node remat_add_broadcast(remat_graph *g, remat_node x, remat_node b);
/* --------------------------------------------- end of transformer ops */

/* Introspection. remat_node_shape returns ndim and fills dims (may be NULL). */
REMAT_API int remat_graph_node_count(const remat_graph *g);
REMAT_API int remat_node_shape(const remat_graph *g, remat_node n, int64_t *dims);
REMAT_API const char *remat_node_op(const remat_graph *g, remat_node n);
REMAT_API const char *remat_node_name(const remat_graph *g, remat_node n); /* or "" */

/* --------------------------------------------------------------- session */

/* A session owns everything a training step needs: parameters, gradients,
 * optimizer state, a thread pool and the compiled schedules. */
typedef struct remat_session remat_session;

/* ---------------------------------------------------------------- devices */

/* Where a session's tensors live and its kernels run. The CPU is the
 * reference; CUDA runs the same schedules on an NVIDIA GPU (device memory
 * from the memory plan, cuBLAS and cuDNN, deterministic kernels). */
typedef enum { REMAT_DEVICE_CPU = 0, REMAT_DEVICE_CUDA = 1 } remat_device;

/* "cpu", "cuda". */
REMAT_API const char *remat_device_str(remat_device d);

/* The precision policy of a session. FP32: every value in float32 (the
 * default). BF16, as PyTorch's autocast: matrix products and convolutions
 * read bf16-rounded inputs (their weights' bf16 copies made per use, as
 * workspace) and store bf16 outputs, accumulating in float32; losses
 * compute and store float32; every other op stores its input's dtype (two
 * float inputs of different dtypes: float32), computing in float32
 * (normalization statistics, softmax, reductions); each gradient has its
 * value's dtype. Parameters, their gradients and the optimizer's state
 * stay float32 (master weights). The rule of each op is in the op table
 * (docs/precision.md lists it). */
typedef enum { REMAT_PRECISION_FP32 = 0, REMAT_PRECISION_BF16 = 1, REMAT_PRECISION_COUNT } remat_precision;
/* "fp32", "bf16". */
REMAT_API const char *remat_precision_str(remat_precision p);
/* Parses a precision name; REMAT_NOT_FOUND names the known ones. */
REMAT_API remat_status remat_precision_parse(const char *name, remat_precision *out);
/* Parses a device name; REMAT_NOT_FOUND names the known ones. */
REMAT_API remat_status remat_device_parse(const char *name, remat_device *out);
/* REMAT_OK when sessions can run on the device here; REMAT_UNSUPPORTED
 * with a message saying why not (built without CUDA, no GPU visible, a
 * driver older than the runtime). */
REMAT_API remat_status remat_device_available(remat_device d);
/* The device's memory as its driver sees it (cudaMemGetInfo for CUDA;
 * for the CPU, the system's available and total memory). */
REMAT_API remat_status remat_device_memory(remat_device d, size_t *free_bytes, size_t *total_bytes);
/* Host memory of `bytes` for data that will be bound to a session on
 * device d (remat_session_bind), or NULL when out of memory. On CUDA it is
 * page-locked (pinned), so that a step's upload of a bound input reads it
 * straight to the device, with no copy into the session's staging buffer
 * first; elsewhere (the CPU, no GPU here) it is plain malloc memory. The
 * caller owns it, frees it with remat_host_free, and keeps it bound no
 * longer than it lives; its bytes are host memory, outside the device
 * budget and its categories. */
REMAT_API void *remat_host_alloc(remat_device d, size_t bytes);
/* Frees what remat_host_alloc(d, ...) returned (NULL: nothing). For the
 * CPU it is free() and never starts the GPU's runtime. */
REMAT_API void remat_host_free(remat_device d, void *p);

/* ------------------------------------------------------------ cost model */

/* Op families, each with its own measured throughput. X(name, "name") */
#define REMAT_FAMILY_LIST(X)                                                                                           \
    X(LINEAR, "linear")                                                                                                \
    X(CONV, "conv")                                                                                                    \
    X(NORM, "norm")                                                                                                    \
    X(POINTWISE, "pointwise")                                                                                          \
    X(POOL, "pool")                                                                                                    \
    X(COPY, "copy")                                                                                                    \
    X(LOSS, "loss")

typedef enum {
#define REMAT__FAMILY_ENUM(name, str) REMAT_FAMILY_##name,
    REMAT_FAMILY_LIST(REMAT__FAMILY_ENUM)
#undef REMAT__FAMILY_ENUM
        REMAT_FAMILY_COUNT
} remat_family;

REMAT_API const char *remat_family_str(remat_family f);

/* A measured shape class: an op with given input and output shapes and
 * attributes (remat_node_cost_class), and the seconds of its forward, of
 * its backward and of a recomputation of its forward. A recomputation can
 * cost less than the first forward: BatchNorm's reads the statistics the
 * first one saved instead of reducing over the batch, and a recomputed
 * op's inputs were often just made. 0 in rec_s: not measured, fwd_s. */
typedef struct {
    uint64_t cls;
    int op; /* the op's index in the op table (its name in files) */
    double fwd_s, bwd_s, rec_s;
} remat_op_time;

/* The most shape classes one cost model holds. */
#define REMAT_COST_MAX_OPS 2048

/* The optimizers (remat_optim_opts below); a cost model measures the
 * update of each. */
typedef enum { REMAT_OPTIM_SGD = 0, REMAT_OPTIM_ADAMW = 1 } remat_optim_kind;

/* A cost model (opaque): the cost of a node under a calibration is its
 * shape class's measured forward, backward and recomputation seconds when
 * the class was measured (by remat_calibrate_graph), else its FLOPs (from
 * the op table; a backward counts twice its forward) over its family's
 * throughput. Uncalibrated, costs are FLOPs. A calibration holds for the
 * device and thread count it was measured with: remat_session_create
 * refuses one measured with others, naming both.
 *
 * Made by remat_cost_model_create, filled by remat_calibrate,
 * remat_calibrate_graph or remat_cost_model_load, read and changed through
 * the functions below, freed by remat_cost_model_destroy. A session
 * copies the one its options name, so it may be destroyed after
 * remat_session_create. */
typedef struct remat_cost_model remat_cost_model;

/* An uncalibrated model (costs in FLOPs, no throughput, no shape class,
 * no link). *out is the caller's, to remat_cost_model_destroy. */
REMAT_API remat_status remat_cost_model_create(remat_cost_model **out);
/* Frees m (NULL: nothing). */
REMAT_API void remat_cost_model_destroy(remat_cost_model *m);
/* Makes dst a copy of src (both the caller's). */
REMAT_API remat_status remat_cost_model_copy(remat_cost_model *dst, const remat_cost_model *src);
/* Whether m holds a calibration (costs in seconds), and of what: the
 * device and the CPU kernel threads it was measured with (0 and
 * REMAT_DEVICE_CPU when uncalibrated). */
REMAT_API int remat_cost_model_calibrated(const remat_cost_model *m);
REMAT_API int remat_cost_model_threads(const remat_cost_model *m);
REMAT_API remat_device remat_cost_model_device(const remat_cost_model *m);
/* A family's measured throughput in FLOP/s (0: not measured). */
REMAT_API double remat_cost_model_flops_per_s(const remat_cost_model *m, remat_family f);
/* Seconds per trainable parameter element of a step's work outside the
 * graph (zeroing the gradients, the optimizer update) with optimizer k
 * (SGD with momentum, AdamW); 0: not measured. The setter: REMAT_INVALID
 * for a value that is not a finite number from 0 to 1e9. */
REMAT_API double remat_cost_model_update_s(const remat_cost_model *m, remat_optim_kind k);
REMAT_API remat_status remat_cost_model_set_update_s(remat_cost_model *m, remat_optim_kind k, double seconds);
/* The link offload copies over (remat_calibrate_link): bytes/s each way
 * and seconds per copy; 0 bandwidth: not measured. The setter:
 * REMAT_INVALID outside 0 to 1e15 bytes/s and 0 to 1e9 s. */
REMAT_API void remat_cost_model_host_link(const remat_cost_model *m, double *bandwidth, double *latency);
REMAT_API remat_status remat_cost_model_set_host_link(remat_cost_model *m, double bandwidth, double latency);
/* The measured shape classes: their count, and class i (0 <= i < count;
 * sorted by class) copied into *out. */
REMAT_API int remat_cost_model_n_ops(const remat_cost_model *m);
REMAT_API remat_status remat_cost_model_op(const remat_cost_model *m, int i, remat_op_time *out);
/* Adds a shape class's times, or replaces the class's when m has it;
 * REMAT_INVALID for a time that is not a finite number of seconds from 0
 * to 1e9, an op outside the op table, or past REMAT_COST_MAX_OPS classes. */
REMAT_API remat_status remat_cost_model_set_op(remat_cost_model *m, const remat_op_time *t);

/* Measures each family's throughput on this machine's CPU with `threads`
 * kernel threads (0 = one per core) by timing training steps of small
 * graphs made of that family's ops; takes a few seconds. *out (made by
 * remat_cost_model_create) is replaced: a calibration with no shape
 * classes yet. */
REMAT_API remat_status remat_calibrate(remat_cost_model *out, int threads);
/* Measures the link offload copies over on device d: copies between the
 * device's memory and pinned host memory (remat_host_alloc) through the
 * backend's copy engine, both ways, 64 KiB to 64 MiB, each the median of
 * several after a warm-up; *bandwidth (bytes/s) and *latency (s per copy)
 * fit time = latency + bytes / bandwidth by least squares (latency at
 * least 0). On the CPU the "link" is a memcpy between two blocks (what
 * its offload does); on a GPU, PCIe or NVLink. A session with a
 * calibrated model that has them costs copies with them unless its
 * options give a link. */
REMAT_API remat_status remat_calibrate_link(remat_device d, double *bandwidth, double *latency);
/* Measures the shape classes of a graph's ops into a calibrated model
 * (with its thread count): `steps` timed store-all training steps (after
 * one warm-up) on synthetic inputs, each node's forward and backward timed by
 * the executor; a node's time is its median over the steps, a class's the
 * mean over its nodes.
 * Classes already in the model are replaced, others kept; also measures
 * the update's seconds per parameter (SGD with momentum and AdamW).
 * REMAT_INVALID past REMAT_COST_MAX_OPS classes. */
REMAT_API remat_status remat_calibrate_graph(remat_cost_model *m, const remat_graph *g, remat_node loss, int steps);
/* The shape class of node n: a hash of its op, input and output shapes,
 * dtypes and attributes (0 for parameters, buffers and inputs). */
REMAT_API uint64_t remat_node_cost_class(const remat_graph *g, remat_node n);
/* JSON: {"device": "cpu", "threads": t, "flops_per_s": {"linear": ...,
 * ...}, "update_s_per_param": {"sgd": s, "adamw": s}, "host_link":
 * {"bandwidth": bytes/s, "latency": s}, "ops": [{"op":
 * "conv2d", "class": "<16 hex digits>", "forward": s, "backward": s},
 * ...]}. A file without "threads" (an older calibration) is refused;
 * "ops", "update_s_per_param" and "host_link" may be absent. Written
 * atomically. */
REMAT_API remat_status remat_cost_model_save(const remat_cost_model *m, const char *path);
REMAT_API remat_status remat_cost_model_load(remat_cost_model *m, const char *path);

/* Which activations a training step keeps (the others are recomputed). */
typedef enum {
    REMAT_STRATEGY_AUTO = 0, /* optimal when a budget is given, else all */
    REMAT_STRATEGY_ALL,      /* keep everything backward needs */
    REMAT_STRATEGY_MANUAL,   /* keep the remat_checkpoint boundaries */
    REMAT_STRATEGY_SQRT,     /* ~sqrt(n) evenly spaced boundaries at articulation points */
    REMAT_STRATEGY_OPTIMAL,  /* least recomputation within the budget (rotor's DP over stages) */
    REMAT_STRATEGY_COUNT
} remat_strategy;

/* "auto", "all", "manual", "sqrt", "optimal". */
REMAT_API const char *remat_strategy_str(remat_strategy s);
/* A one-line description of a strategy (for help texts). */
REMAT_API const char *remat_strategy_summary(remat_strategy s);
/* Parses a strategy name; REMAT_NOT_FOUND names the known ones. */
REMAT_API remat_status remat_strategy_parse(const char *name, remat_strategy *out);

/* ------------------------------------------------------------- optimizer */

/* remat_optim_kind: with the cost model, above. */

/* PyTorch's torch.optim.SGD and torch.optim.AdamW semantics. */
typedef struct {
    remat_optim_kind kind;
    float lr;
    float weight_decay;
    float momentum;          /* SGD */
    float dampening;         /* SGD */
    int nesterov;            /* SGD */
    float beta1, beta2, eps; /* AdamW */
} remat_optim_opts;

/* PyTorch's defaults for the kind (lr 0.01 for SGD, 0.001 for AdamW). */
REMAT_API void remat_optim_opts_default(remat_optim_opts *o, remat_optim_kind kind);

/* The ranks of a data-parallel job (see "several processes" below). */
typedef struct remat_comm remat_comm;

typedef struct {
    int threads;                        /* kernel threads; 0 = one per core */
    uint64_t seed;                      /* parameter initialization and dropout */
    remat_strategy strategy;            /* default REMAT_STRATEGY_AUTO */
    size_t budget;                      /* peak bytes a step may hold, 0 = no limit */
    const remat_cost_model *cost_model; /* copied; NULL = FLOPs alone */
    remat_device device;                /* default REMAT_DEVICE_CPU */
    remat_precision precision;          /* default REMAT_PRECISION_FP32 */
    int tf32;                           /* CUDA: let cuBLAS and cuDNN use TF32 tensor
                                         * cores for float32 products (faster, about
                                         * 1e-3 relative error); off by default, as
                                         * in PyTorch for convolutions and matmuls */
    int least_workspace;                /* CUDA: each convolution takes the deterministic
                                         * cuDNN algorithm that needs the least
                                         * workspace (most often none) instead of the
                                         * fastest within its cap: a lower smallest
                                         * feasible budget where workspaces set the
                                         * peak (small models), slower convolutions and
                                         * other bits (every plan under one setting
                                         * gives the same bits); off by default */
    const remat_optim_opts *optim;      /* copied; the optimizer, whose state is
                                         * allocated with the parameters so that the
                                         * first plan and its budget count it; NULL:
                                         * none until remat_session_set_optimizer */
    int plan_only;                      /* plan without memory (and, for a device that
                                         * is not here, without the device: what its
                                         * libraries would choose is estimated,
                                         * remat_plan_summary.estimated_nodes): the
                                         * parameter, gradient and optimizer-state blocks are counted (in
                                         * the plan and its budget) but neither
                                         * allocated nor initialized, and no arena is
                                         * made; steps, forward passes, parameter reads
                                         * and writes and updates are refused. For
                                         * asking what a step would hold (remat plan,
                                         * batch searches) in milliseconds */
    /* Micro-batches and ranks ("several processes" below). The graph's
     * batch is one micro-batch; a step is micro_batches of them. */
    remat_comm *comm;            /* borrowed: the ranks this session trains
                                  * with, each with its own session of the same
                                  * graph and options; it must outlive the
                                  * session. NULL: this process alone */
    int64_t micro_batches;       /* micro-batches per optimizer step over all
                                  * ranks (global batch / micro-batch); 0: one
                                  * per rank. A multiple of the rank count */
    size_t bucket_bytes;         /* gradient bytes per reduction bucket (0:
                                  * 1 MiB) */
    int reduce_after_backward;   /* start every bucket's reduction after the
                                  * backward pass instead of as soon as its
                                  * gradients are final (no overlap: for
                                  * measuring what the overlap hides) */
    int recompute_once;          /* optimal: only schedules that recompute each
                                  * node at most once, as a framework that
                                  * keeps what it recomputed until its last use
                                  * runs them (the Python package's plans) */
    int no_split;                /* optimal: no schedules that free a value
                                  * held across the peak and make it again
                                  * for its later reads (splitting), for a
                                  * framework's applier that does not run
                                  * them (the Python package's plans) */
    size_t *bound_out;           /* borrowed, may be NULL: the least any
                                  * schedule of the training step holds
                                  * (remat_plan_summary.bound_bytes), also
                                  * when no plan fits the budget */
    size_t *floor_out;           /* borrowed, may be NULL: when the optimal
                                  * strategy finds no schedule within the
                                  * budget (REMAT_BUDGET), the smallest budget
                                  * that fits is written here */
    int prefetch;                /* on a GPU: hold one more block, of the
                                  * inputs' bytes (counted in the plan and its
                                  * budget, category communication), into which
                                  * remat_session_bind_next's data is copied on
                                  * a second stream while a run computes. The
                                  * CPU has nothing to overlap: ignored there */
    size_t host_budget;          /* optimal, with a budget: pinned host bytes
                                  * the step may offload kept values to (copied
                                  * out after their stage's forward and back
                                  * before its backward, on a copy engine:
                                  * the planner's third choice beside keeping
                                  * and recomputing, docs/planning.md); 0:
                                  * no offload. On the CPU the "host" is a
                                  * second block of the same memory, which
                                  * tests the schedule without saving any */
    double host_bandwidth;       /* the host link's bytes/s each way that the
                                  * planner costs copies at; 0: the cost
                                  * model's measured link, else
                                  * REMAT_PCIE_BANDWIDTH */
    double host_latency;         /* seconds per copy; < 0: the cost model's,
                                  * else REMAT_PCIE_LATENCY
                                  * (remat_session_opts_default sets -1) */
    int grads_resident;          /* a traced step (a graph file) whose framework
                                  * holds every parameter's gradient from the
                                  * step's start (gradient accumulation over
                                  * micro-steps, PyTorch's zero_grad(set_to_none=
                                  * False)): the gradients are counted from the
                                  * start, in the gradient block, and a backward
                                  * that makes one holds its new gradient as a
                                  * transient while the framework adds it in.
                                  * remat's own graphs always keep their
                                  * gradients so: ignored for them */
    size_t framework_comm_bytes; /* a traced step (a graph file, plan_only)
                                  * whose framework holds communication buffers
                                  * for the whole step (PyTorch
                                  * DistributedDataParallel's gradient
                                  * buckets): counted in the plan and its
                                  * budget, category communication. 0: none */
} remat_session_opts;

REMAT_API void remat_session_opts_default(remat_session_opts *o);

/* OpenBLAS's thread count, a process-wide setting. remat's CPU kernels
 * split their work over the session's own threads and call BLAS from each,
 * so a program should set 1 once at start (remat's command line does);
 * more threads per BLAS call oversubscribe the cores (the results are the
 * same). Sessions never change it themselves. */
REMAT_API void remat_set_blas_threads(int n);
REMAT_API int remat_blas_threads(void);

/* Compiles the graph for training with `loss` (a scalar node) under the
 * chosen strategy and allocates and initializes the parameters. Fails if a
 * trainable parameter does not influence the loss (naming it), or with
 * REMAT_BUDGET, naming the bytes required, if the step's predicted peak is
 * above the budget. The graph must outlive the session. */
REMAT_API remat_status remat_session_create(remat_session **out, const remat_graph *g, remat_node loss,
                                            const remat_session_opts *o);
REMAT_API void remat_session_destroy(remat_session *s);
/* The graph the session was created from (not owned by the session). */
REMAT_API const remat_graph *remat_session_graph(const remat_session *s);

/* Points an input node at caller memory (float or int32 per its dtype,
 * its full shape; for a training step with several micro-batches on this
 * rank, remat_dist_info.local_micro_batches of them one after the other,
 * of which forward passes read the first). The binding is borrowed: the session keeps the pointer,
 * not a copy, and reads (copies in) the data during each later step and
 * forward; the caller keeps it valid until it binds another buffer or
 * destroys the session. Library calls that bind buffers of their own
 * (remat_evaluate, remat_train, remat_train_stream, remat_train_tokens)
 * restore the caller's bindings before they return, on success and on
 * failure alike. */
REMAT_API remat_status remat_session_bind(remat_session *s, remat_node input, const void *data);
/* Names data as input's binding for the next run (step or forward), so
 * that a session made with opts.prefetch copies it to the device while the
 * current one computes: the next run that binds input to that same pointer
 * takes it from the device instead of uploading it. The copy starts when
 * the current run has enqueued its work, and serves the one run after it;
 * the caller keeps data's bytes unchanged from this call until that run
 * returns. Without opts.prefetch, or on the CPU: nothing happens (the next
 * run uploads as usual). The same bits either way. */
REMAT_API remat_status remat_session_bind_next(remat_session *s, remat_node input, const void *data);
/* The pointer input is bound to, or NULL (also for a node that is not an
 * input). */
REMAT_API const void *remat_session_binding(const remat_session *s, remat_node input);

/* One forward and backward pass in training mode: fills every parameter's
 * gradient (overwriting the previous ones) and writes the loss. With
 * micro-batches ("several processes" below) it is one optimizer step's
 * worth: this rank's micro-batches, one after the other (each input bound
 * to that many consecutive micro-batches), their gradients summed in the
 * fixed tree and across the ranks, and divided by the micro-batch count:
 * the gradient of the mean loss over the global batch, whose value is
 * *loss, the same bits on every rank. Collective when the session has
 * several ranks: every rank calls it. */
REMAT_API remat_status remat_session_step(remat_session *s, float *loss);

/* Forward only. train=1 uses training-mode ops (BatchNorm batch statistics
 * and running-statistics update, dropout active); train=0 evaluation mode.
 * `fetch` (or REMAT_NONE) is a node whose value is copied to `out`
 * (its numel floats). loss may be NULL. */
REMAT_API remat_status remat_session_forward(remat_session *s, int train, float *loss, remat_node fetch, float *out);

/* Parameters and buffers, in graph order. On the CPU, the pointers are
 * owned by the session and valid for its lifetime, and writing through
 * `data` sets weights. On a device, data and grad are NULL (the tensors
 * are device memory): use remat_session_read_param and
 * remat_session_write_param, which work on every device. */
typedef struct {
    const char *name;
    int ndim;
    int64_t dims[REMAT_MAX_DIMS];
    int64_t numel;
    int trainable; /* 0 for buffers */
    float *data;   /* CPU sessions only */
    float *grad;   /* CPU sessions only; NULL for buffers */
} remat_param_info;

/* What remat_session_read_param copies. */
typedef enum { REMAT_PARAM_VALUE = 0, REMAT_PARAM_GRAD = 1 } remat_param_part;

/* Copies parameter or buffer i's values (or, for a trainable parameter,
 * its gradient from the last step) into dst, numel floats owned by the
 * caller. Waits for the device's work in flight. */
REMAT_API remat_status remat_session_read_param(remat_session *s, int i, remat_param_part part, float *dst);
/* Sets parameter or buffer i from src (numel floats, copied). */
REMAT_API remat_status remat_session_write_param(remat_session *s, int i, const float *src);

REMAT_API int remat_session_param_count(const remat_session *s);
REMAT_API remat_status remat_session_param(const remat_session *s, int i, remat_param_info *out);
/* Index of the parameter or buffer with this name, or -1. */
REMAT_API int remat_session_find_param(const remat_session *s, const char *name);

/* Accounting. Peaks restart at the beginning of each step and forward. */
REMAT_API void remat_session_mem(const remat_session *s, remat_mem_stats *out);
/* Bytes the session holds on its device now: the arena its schedules'
 * values are placed in, and its blocks of parameters, gradients and
 * optimizer state, as allocated (what a budget bounds). */
REMAT_API size_t remat_session_held_bytes(const remat_session *s);
/* The simulator's prediction for one training step from the current state:
 * peak bytes per category (the executor's measured peaks equal these). */
REMAT_API remat_status remat_session_predict(const remat_session *s, remat_mem_stats *out);
/* Bytes that the training step keeps for backward in each node's output
 * (what `remat info` shows); 0 for nodes whose output is not kept. */
REMAT_API size_t remat_session_saved_bytes(const remat_session *s, remat_node n);
/* The dtype the session stores node n's value (and its gradient) in under
 * its precision policy: REMAT_BF16 or the graph's own; -1 for a node out
 * of range. */
REMAT_API int remat_session_value_dtype(const remat_session *s, remat_node n);
/* A summary of the training step's schedule. */
typedef struct {
    remat_strategy strategy;
    remat_mem_stats predicted; /* peaks per category (simulated) */
    size_t arena_bytes;        /* the step's values placed in one arena:
                                * at least their peak, more where the
                                * placement leaves gaps */
    size_t held_bytes;         /* arena + parameters, gradients and
                                * optimizer state as allocated: what the
                                * step holds, what the budget bounds */
    const char *placement;     /* static: the arena placement that won
                                * ("by-size" or "in-order") */
    int64_t instructions;      /* forward, backward and free instructions */
    int64_t forwards;          /* forward computations, recomputations included */
    int64_t recomputations;    /* forwards of a node after its first */
    int64_t recomputed_nodes;  /* distinct nodes recomputed */
    int64_t kept_boundaries;   /* nodes kept that recomputations start from */
    double flops;              /* forward + backward FLOPs without recomputation */
    double extra_flops;        /* FLOPs of the recomputations */
    int calibrated;            /* seconds below are seconds (else FLOPs) */
    double seconds;            /* predicted cost of the step's forward and
                                * backward, recomputation included (cost
                                * model) */
    double extra_seconds;      /* of which recomputation */
    double update_seconds;     /* calibrated, with an optimizer whose update
                                * was measured: the predicted update (else 0);
                                * a training step is seconds + this */
    const char *planner;       /* static: what made the schedule: "levels"
                                   (all, manual, sqrt), "chain" (rotor's DP
                                   over stages), "dtr" (the DAG fallback) or
                                   "keep-expensive" (linear/conv outputs
                                   kept, cheap values recomputed) */
    char candidate[48];        /* optimal: the candidate family and member
                                   that won ("chain 7/24", "sqrt 1/1"); ""
                                   for the other strategies */
    size_t host_bytes;         /* pinned host memory the step holds for
                                * offloaded values (their placed block):
                                * what opts.host_budget bounds; 0 without
                                * offload */
    int64_t offloaded_values;  /* values copied to the host and back per step */
    double stall_seconds;      /* predicted copy time not hidden behind
                                * compute, in the units of `seconds` (0
                                * without offload); included in `seconds` */
    size_t bound_bytes;        /* no schedule of this step holds less: at
                                * some instruction, the gradients and
                                * workspace every schedule holds there, the
                                * values it reads and makes, and the
                                * parameters, gradients and optimizer
                                * state (a lower bound, not a plan) */
    int64_t estimated_nodes;   /* nodes whose workspace bytes are estimates
                                   (upper bounds): a plan-only session for a
                                   device that is not here, whose libraries
                                   (cuDNN) could not be asked; 0 otherwise */
} remat_plan_summary;

REMAT_API remat_status remat_session_plan(const remat_session *s, remat_plan_summary *out);

/* Offload to pinned host memory, planned: rotor's chain model (the chain
 * `optimal` plans over) where each stage may also keep what its backward
 * reads on the host, copied out beside the next stage's forward and back
 * beside the next stage's backward on a copy engine; what a copy does not
 * hide counts as exposed time (docs/planning.md, "Offload"). Chain-model
 * figures: not simulated by the memory plan, and not executed (no
 * session runs offload; its schedules never hold any). */
typedef struct {
    size_t budget;      /* device bytes a step may hold (0: the session's) */
    size_t host_budget; /* pinned host bytes offload may hold; 0: none */
    double bandwidth;   /* host link, bytes/s each way; 0: the cost
                         * model's measured link, else REMAT_PCIE_BANDWIDTH */
    double latency;     /* seconds per copy; < 0: the cost model's, else
                         * REMAT_PCIE_LATENCY */
    double flops_per_s; /* an uncalibrated cost model's FLOPs per second,
                         * to cost copies in FLOPs; 0: the device's
                         * default (REMAT_CUDA_FLOPS, REMAT_CPU_FLOPS) */
    int slots;          /* device memory slots of the DP; 0: 500 or fewer
                         * (as the tables' size allows) */
    int host_slots;     /* host memory slots of the DP; 0: 16 */
} remat_offload_opts;

#define REMAT_PCIE_BANDWIDTH 25e9 /* bytes/s: PCIe 4.0 x16 pinned copies, nominal */
#define REMAT_PCIE_LATENCY 10e-6  /* s per copy, nominal */
#define REMAT_CUDA_FLOPS 15e12    /* FLOP/s: resnet50's fp32 step on the H100 (docs/benchmarks.md) */
#define REMAT_CPU_FLOPS 60e9      /* FLOP/s: the CPU kernels' order of magnitude (docs/benchmarks.md) */

REMAT_API void remat_offload_opts_default(remat_offload_opts *o);

typedef struct {
    int stages;             /* of the chain */
    int fits, fits_without; /* a chain plan fits the budget with offload / without */
    size_t chain_budget;    /* the budget less the parameters, gradients and
                             * optimizer state: what the chain model gets */
    size_t device_peak;     /* with offload: the chain model's peak (copies in flight included) */
    size_t device_peak_without;
    size_t host_peak;                       /* pinned host bytes at the peak */
    size_t host_copied;                     /* bytes copied out (and back) per step */
    int offloaded;                          /* stages whose kept values go to the host */
    double cost, cost_without;              /* the chain's step under the cost model (seconds
                                             * when calibrated, else FLOPs), exposed copies included */
    double stall;                           /* of cost: exposed copy time, same units */
    double stall_seconds;                   /* the same in seconds */
    double bandwidth, latency, flops_per_s; /* what was used (flops_per_s 0: calibrated) */
    char offloaded_nodes[512];              /* the first node of each offloaded stage, by
                                             * name ("layer1.0.conv1, ..."), "..." when longer */
} remat_offload_summary;

/* The chain plan with offload, and without, at opts' budgets. REMAT_BUDGET
 * only when the budget is below the parameters, gradients and optimizer
 * state; otherwise a chain that fits neither way is fits = fits_without
 * = 0. The session may plan any strategy (plan_only is enough). */
REMAT_API remat_status remat_session_offload(const remat_session *s, const remat_offload_opts *opts,
                                             remat_offload_summary *out);

/* The training step's instruction list, for printing. */
typedef struct {
    const char *kind; /* "forward", "recompute", "backward", "free" */
    remat_node node;
    const char *op;   /* the node's op */
    const char *what; /* free: "output", "aux" or "gradient"; else "" */
    int activation;   /* forward: the output is kept for backward */
} remat_instr_info;

REMAT_API int64_t remat_session_schedule_length(const remat_session *s);
REMAT_API remat_status remat_session_schedule_instr(const remat_session *s, int64_t i, remat_instr_info *out);

/* Per-op profile: while profiling is on, every instruction the executor
 * runs (in steps and forwards) adds its wall time to its op and kind.
 * Switching it on or off clears the counts. It costs two clock reads per
 * instruction. */
REMAT_API void remat_session_set_profiling(remat_session *s, int on);
typedef struct {
    const char *op;   /* static: the op's name */
    const char *kind; /* static: "forward", "recompute", "backward", "free" */
    double seconds;
    int64_t count;
} remat_profile_row;
/* Writes up to cap rows (op table order, then kind; only those that ran)
 * and returns how many there are in all. */
REMAT_API int remat_session_profile(const remat_session *s, remat_profile_row *rows, int cap);

/* Number of completed optimizer updates (the step index used by dropout). */
REMAT_API int64_t remat_session_step_index(const remat_session *s);

/* Sets the optimizer and (re)allocates its state, zeroed. Fails with
 * REMAT_BUDGET if the state makes the step's peak exceed the budget. */
REMAT_API remat_status remat_session_set_optimizer(remat_session *s, const remat_optim_opts *o);
/* Applies one update from the current gradients; advances the step index. */
REMAT_API remat_status remat_session_update(remat_session *s);
/* REMAT_OK when every parameter and buffer, and every trainable
 * parameter's gradient, is finite; otherwise REMAT_INVALID naming the
 * first tensor (in parameter order, values before gradient) that holds a
 * NaN or an infinity, with its index, the element and its value. One pass
 * over them on the session's device; the training loops call it after
 * every update. */
REMAT_API remat_status remat_session_check_finite(remat_session *s);

/* ------------------------------------------------------------------ data */

/* An in-memory labelled image data set (uint8 pixels, int labels). */
typedef struct remat_dataset remat_dataset;

/* Loads a data set by name: "fashion-mnist", "mnist" (IDX files, plain or
 * .gz) or "cifar10" (binary version) from dir; train=1 for the training
 * split. dir NULL means the default (Debian's dataset-fashion-mnist path for
 * fashion-mnist). */
REMAT_API remat_status remat_dataset_load(remat_dataset **out, const char *name, const char *dir, int train);
/* IDX image and label files (magic 0x803 and 0x801), plain or gzip. */
REMAT_API remat_status remat_dataset_load_idx(remat_dataset **out, const char *images_path, const char *labels_path);
/* CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes. */
REMAT_API remat_status remat_dataset_load_cifar10(remat_dataset **out, const char *const *paths, int n);
REMAT_API void remat_dataset_destroy(remat_dataset *d);

REMAT_API int64_t remat_dataset_size(const remat_dataset *d);
REMAT_API void remat_dataset_shape(const remat_dataset *d, int64_t chw[3]);
REMAT_API int remat_dataset_classes(const remat_dataset *d);
/* Keeps the first n samples, 1 <= n <= size. */
REMAT_API remat_status remat_dataset_truncate(remat_dataset *d, int64_t n);
/* Writes the samples index[0..n) (index NULL: samples 0..n-1) into x
 * (n,C,H,W) as normalized floats ((pixel/255 - mean) / std per channel) and
 * their labels into y (n); x or y may be NULL. */
REMAT_API remat_status remat_dataset_get(const remat_dataset *d, const int64_t *index, int64_t n, float *x, int32_t *y);

/* Seeded shuffling and batching. A loader yields full batches only
 * (drop_last); each epoch has its own permutation from (seed, epoch mod
 * 2^32). It starts at epoch 0. The data set must outlive the loader and
 * must not be truncated while it exists. */
typedef struct remat_loader remat_loader;
REMAT_API remat_status remat_loader_create(remat_loader **out, const remat_dataset *d, int64_t batch, int shuffle,
                                           uint64_t seed);
REMAT_API void remat_loader_destroy(remat_loader *l);
REMAT_API int64_t remat_loader_batches(const remat_loader *l);
/* Starts epoch `epoch` (0-based): reshuffles. */
REMAT_API void remat_loader_start(remat_loader *l, int64_t epoch);
/* Fills the next batch; returns 0 at the end of the epoch, 1 otherwise. */
REMAT_API int remat_loader_next(remat_loader *l, float *x, int32_t *y);
/* Fills rows [first, first + n) of the next batch (a rank's micro-batches
 * of the global batch) and moves past the whole batch; returns 0 at the
 * end of the epoch (or for rows outside the batch), 1 otherwise. */
REMAT_API int remat_loader_next_rows(remat_loader *l, int64_t first, int64_t n, float *x, int32_t *y);
/* Starts epoch `epoch` at its batch `batch` (0-based): the next
 * remat_loader_next yields that batch, as if the epoch's first `batch`
 * batches had been taken (a resumed run's data position). */
REMAT_API void remat_loader_seek(remat_loader *l, int64_t epoch, int64_t batch);

/* ------------------------------------------------------------- training */

typedef enum {
    REMAT_EVENT_STEP = 0, /* after each optimizer update */
    REMAT_EVENT_EVAL,     /* after each evaluation on the test set */
    REMAT_EVENT_SAVE,     /* a training state was written: path, step */
    REMAT_EVENT_RESUME,   /* before the first step: path, step (the state's
                           * data step), epoch and step_in_epoch (its epoch
                           * and the batches of it done); path NULL and a
                           * message when the resume directory held no
                           * state yet and training starts afresh */
    REMAT_EVENT_NOTE,     /* something the user should know: message (a
                           * damaged state skipped: path and why) */
} remat_event_kind;

typedef struct {
    remat_event_kind kind;
    int64_t epoch;         /* 0-based */
    int64_t step;          /* global step, 1-based after the update */
    int64_t step_in_epoch; /* 1-based */
    int64_t steps_in_epoch;
    double loss;         /* step: training loss; eval: mean test loss */
    double accuracy;     /* eval only, in [0,1] */
    double images_per_s; /* step: running rate over the epoch */
    double seconds;      /* step: seconds since the epoch began; eval: seconds the epoch's training took */
    size_t peak_bytes;   /* step: peak total bytes of the step */
    double step_seconds; /* step: this step's forward, backward and update */
    const char *path;    /* save, resume, note: a file (owned by the
                          * library, valid during the callback), or NULL */
    const char *message; /* note: what happened (same lifetime), or NULL */
} remat_event;

typedef void (*remat_event_fn)(const remat_event *ev, void *user);

typedef struct {
    int64_t epochs; /* remat_train: used when steps == 0 */
    int64_t steps;  /* remat_train: total optimizer steps, 0 = use epochs;
                         remat_train_stream: steps per epoch */
    int64_t batch;
    uint64_t seed; /* shuffling; token windows */
    remat_event_fn on_event;
    void *user;
    /* Training state (see "training state" below); all borrowed for the
     * call. state_dir: save states there (created if missing): after
     * every save_every-th step (0: none in between) and after the last;
     * it must hold no state unless it is the resume directory, and rank 0
     * holds its lock (a file remat.lock in it, flock) for the whole call:
     * a directory another run holds is refused at once, naming that run's
     * pid and host (docs/training-state.md). keep: after
     * each save, remove all but the newest `keep` states (0 keeps all).
     * resume: a state file, or a directory whose newest intact state is
     * used (damaged newer ones are reported as NOTE events and skipped; a
     * directory without any state starts afresh, with a note). The run
     * then continues bitwise as if it had never stopped; a state whose
     * model, data or options that define the math differ is refused,
     * naming the difference. run: the caller's own options that define
     * the math, a NULL-terminated list of key, value strings (keys such
     * as "--model"), recorded in every state and compared on resume. */
    const char *state_dir;
    int64_t save_every;
    int keep;
    const char *resume;
    const char *const *run;
    /* A graceful stop: when *stop is nonzero (a signal handler sets it;
     * NULL: never), the loop ends after the step in progress (before the
     * first, when it is set already), saves a training state of that step
     * when state_dir is set, and returns REMAT_STOPPED, whose message says
     * which step and where its state is (or that nothing was saved).
     * Several ranks: they agree on it after every step, so that all stop
     * after the same one, and every rank's *stop then holds the first
     * nonzero value among the ranks' (rank order); every rank must pass
     * one, or none (checked at the start). */
    volatile sig_atomic_t *stop;
} remat_train_opts;

/* The nodes of a classifier graph the loop needs. */
typedef struct {
    remat_node input;  /* (B,C,H,W) or (B,features) float */
    remat_node labels; /* (B) int32 */
    remat_node logits; /* (B,classes) */
    remat_node loss;
} remat_model;

/* Trains on `train`, evaluating on `test` (may be NULL) after each epoch
 * and at the end. opts->batch (0: any) must be the global batch: the
 * session's micro-batches per step times the graph's batch. Several
 * ranks: every rank calls it; each reads its own rows of every batch,
 * evaluates its share of the test batches, and only rank 0 writes
 * training states. */
REMAT_API remat_status remat_train(remat_session *s, const remat_model *m, const remat_dataset *train,
                                   const remat_dataset *test, const remat_train_opts *opts);

/* Evaluation: mean loss and accuracy over a whole data set (the last partial
 * batch included). */
REMAT_API remat_status remat_evaluate(remat_session *s, const remat_model *m, const remat_dataset *d, double *loss,
                                      double *accuracy);

/* ---------------------------------------------------------------- models */

typedef struct {
    const char *name; /* a name of remat_model_names() */
    int64_t batch;
    int64_t channels, height, width; /* input image shape */
    int64_t classes;
    float dropout_scale;   /* multiplies every dropout rate; 0 turns dropout off */
    int checkpoint_blocks; /* mark the first N blocks' outputs with
                            * remat_checkpoint; -1 (default) = every block */
    /* Transformers (gpt2): blocks, model width, attention heads, context
     * (sequence length of a batch) and vocabulary. */
    int64_t layers, embd, heads, context, vocab;
    /* CNN sizes: base_channels is resnet's stem and first-stage width (64)
     * and densenet-bc's growth rate k (12); depth is densenet-bc's (100,
     * any 6n + 4 up to 190; resnets ignore it).
     * 0 means the model's own default; small values make the tiny
     * configurations the PyTorch fixtures use. */
    int64_t base_channels, depth;
} remat_model_opts;

/* Defaults: cnn, batch 64, 1x28x28, 10 classes, dropout_scale 1, and
 * GPT-2 small's transformer sizes (12 layers, 768 wide, 12 heads, context
 * 1024, 50257 tokens). */
REMAT_API void remat_model_opts_default(remat_model_opts *o);
/* Sets o->name and that model's own defaults for the input shape, the
 * classes and, for presets such as gpt2-small, the transformer sizes:
 * mlp and cnn keep 1x28x28 and 10 classes (Fashion-MNIST); resnet18,
 * resnet50 and siamese-resnet50 take 3x224x224 and 1000 classes;
 * densenet-bc 3x32x32 and 10 classes. REMAT_NOT_FOUND for an unknown name. */
REMAT_API remat_status remat_model_opts_for(remat_model_opts *o, const char *name);
/* NULL-terminated list of model names. */
REMAT_API const char *const *remat_model_names(void);
/* A one-line description of a model, or NULL for an unknown name. */
REMAT_API const char *remat_model_describe(const char *name);
/* Builds the model and its loss into g. Classifiers: input (B,C,H,W)
 * float, labels (B) int32, cross-entropy. Language models: input (B,T)
 * int32 tokens, labels (B*T) int32 next tokens. siamese-resnet50: input
 * = view 1 and labels = view 2, both float (B,C,H,W) inputs (named "input"
 * and "target"); one shared ResNet-50 f (parameters "backbone.*") and a
 * Linear "head" (classes -> classes); logits = head(f(view 1)), loss =
 * mse(logits, f(view 2)), with gradients through both branches. */
REMAT_API remat_status remat_model_build(remat_graph *g, const remat_model_opts *o, remat_model *m);

/* --------------------------------------------------- planning any chain */

/* The chain model of rotor (PLANNING.md section 3.1), usable without a
 * model: per stage its forward and backward cost, the size of its input
 * x_i (its gradient has the same size) and the size of everything its
 * backward needs, its output included (x-bar_{i+1}). Sizes are bytes (or
 * any unit); the budget counts the first input and the gradients. A valid
 * chain has at least one stage, finite costs >= 0, sizes >= 0, and each
 * stage's `saved` at least its output (the next stage's `input`, or
 * `output` for the last stage); the calls below reject others with
 * REMAT_INVALID naming the stage and field. */
typedef struct {
    double forward, backward; /* u_f[i], u_b[i] */
    int64_t input;            /* omega_x[i] */
    int64_t saved;            /* omega_xbar[i+1] >= size of the stage's output */
} remat_stage;

/* Operations of a chain schedule, named as in rotor. */
typedef enum {
    REMAT_CHAIN_FN = 0, /* forward without keeping anything, frees its input */
    REMAT_CHAIN_CF,     /* forward keeping its input (a checkpoint) */
    REMAT_CHAIN_FE,     /* forward keeping everything its backward needs */
    REMAT_CHAIN_LOSS,   /* the loss: turns x_L into its gradient y_L */
    REMAT_CHAIN_B,      /* backward of a stage */
} remat_chain_op_kind;

typedef struct {
    remat_chain_op_kind kind;
    int stage;  /* 0..n-1; n for the loss */
    int option; /* the stage's storage option an Fe_i and its B_i use (see
                 * src/plan/rotor.h); 0 for every other op and whenever a
                 * stage has one option, as with remat_chain_solve */
} remat_chain_op;

typedef struct remat_chain_plan remat_chain_plan;

/* The persistent-optimal schedule (rotor's dynamic program) of a chain of
 * n stages whose last output has size `output`, within `budget`, with the
 * memory discretized into `slots` slots (0: a default of 500) of
 * ceil(budget / slots) units; every size is rounded up to whole slots, so
 * the schedule never exceeds the budget, and with slots >= budget the plan
 * is exactly optimal. REMAT_BUDGET names the smallest budget that fits
 * with the same slot count ("the smallest budget that fits is N"); every
 * budget from it up succeeds. Time O(slots * n^3), memory about
 * 5 * slots * n^2 bytes. The plan is owned by the caller
 * (remat_chain_plan_destroy). */
REMAT_API remat_status remat_chain_solve(const remat_stage *stages, int n, int64_t output, int64_t budget, int slots,
                                         remat_chain_plan **out);
REMAT_API void remat_chain_plan_destroy(remat_chain_plan *p);
REMAT_API int remat_chain_plan_length(const remat_chain_plan *p);
REMAT_API remat_chain_op remat_chain_plan_op(const remat_chain_plan *p, int i);
/* Sum of operation costs, and peak memory, of the plan (simulated exactly
 * in the chain model, in the caller's units). */
REMAT_API double remat_chain_plan_cost(const remat_chain_plan *p);
REMAT_API int64_t remat_chain_plan_peak(const remat_chain_plan *p);

/* Simulates any operation sequence on a chain: its cost (Fn, CF, Fe cost
 * the stage's forward, B its backward, Loss nothing) and peak (x_0
 * resident at the start; an op's peak counts its output before its inputs
 * are freed), or REMAT_INVALID naming the first operation (index, kind,
 * stage) whose inputs are not resident or whose output already is. Frees:
 * Fn its input (x_i, else x-bar_i); Loss x_L; B y_{i+1}, x-bar_{i+1} and
 * x_i. A partial sequence is fine. Stages have one option here: Fe and B
 * need option 0 (other ops ignore the field). */
REMAT_API remat_status remat_chain_simulate(const remat_stage *stages, int n, int64_t output, const remat_chain_op *ops,
                                            int nops, double *cost, int64_t *peak);

/* Reads a chain from JSON text: {"stages": [{"forward": f, "backward": b,
 * "input": a, "saved": s}, ...], "output": o}; sizes are integers, other
 * keys are ignored. Errors (REMAT_FORMAT) give the line and column, or
 * name the stage and field that is missing, negative or not a number, or
 * a chain that is not valid (see remat_stage). *stages is owned by the
 * caller (free). */
REMAT_API remat_status remat_chain_parse_json(const char *text, remat_stage **stages, int *n, int64_t *output);

/* ------------------------------------------------------------ graph files */

/* A training step traced by another framework (PyTorch, through the
 * python/ package), as a graph file: JSON, format "remat-graph" version 1
 * (docs/graph-format.md): values with bytes and kind, ops in execution
 * order with their inputs, outputs, the values their backward reads,
 * transient bytes, costs and stateful/random flags. Reads it into a new
 * graph of traced ops (no kernels: a session on it can only plan, with
 * plan_only) and its loss node. A malformed, cyclic or out-of-range file
 * is refused with REMAT_FORMAT naming the op or value and the field (JSON
 * syntax errors with line and column); counts are bounded before anything
 * is allocated for them. The caller owns *out (remat_graph_destroy). */
REMAT_API remat_status remat_graph_read_json(const char *text, remat_graph **out, remat_node *loss);
/* The id in its graph file of the op (or, for a leaf, the value) that node
 * n was made from; -1 for a graph not read from a file. */
REMAT_API int32_t remat_graph_traced_id(const remat_graph *g, remat_node n);

/* Plans a graph file's training step: graph_text as above; request_json
 * (NULL or "" for the defaults) {"budget": bytes (0: none), "strategy":
 * "auto"|"all"|"sqrt"|"optimal", "optimizer": {"kind": "sgd"|"adam"|
 * "adamw"|"none", "momentum": m}}. On success *out_json is a plan (format
 * "remat-plan" version 1, docs/graph-format.md), owned by the caller
 * (remat_free): the predicted peaks per category, costs, and the ids of
 * the ops the schedule recomputes; a budget that nothing fits is an
 * answer too ("feasible": false, "floor": the smallest budget that
 * fits). Other failures return their status with the message set. */
REMAT_API remat_status remat_plan_graph_json(const char *graph_text, const char *request_json, char **out_json);
/* Frees what the library returned for the caller to free (remat_plan_graph_json). */
REMAT_API void remat_free(void *p);

/* ----------------------------------------------------------- safetensors */

/* Writes every parameter and buffer of the session (by name, F32, with
 * "format": "pt" metadata), replacing the file atomically. */
REMAT_API remat_status remat_safetensors_save(remat_session *s, const char *path);

/* A file a run will write (its weights, at the end), locked against other
 * processes for as long as the lock lives, so that two runs never write
 * one file: an flock on a hidden file beside it, ".<name>.lock", which
 * says who holds it (pid and host) and is removed with the lock. Another
 * process's lock on the same file: REMAT_INVALID naming it. On a file
 * system without locks the lock protects nothing: remat_lock_note says so
 * (NULL otherwise; owned by the lock). *out is owned by the caller
 * (remat_lock_destroy, which releases it; so does the process's end). */
typedef struct remat_lock remat_lock;
REMAT_API remat_status remat_lock_create(remat_lock **out, const char *path);
REMAT_API const char *remat_lock_note(const remat_lock *l);
REMAT_API void remat_lock_destroy(remat_lock *l);
/* Loads tensors by name into the session's parameters and buffers. Every
 * tensor in the file must match a parameter's name, dtype F32 and shape
 * (PyTorch's "*.num_batches_tracked" entries are skipped); parameters
 * absent from the file keep their values unless strict, which makes them
 * an error. Everything is checked before anything is copied: a failed load
 * leaves the session unchanged. */
REMAT_API remat_status remat_safetensors_load(remat_session *s, const char *path, int strict);

/* ---------------------------------------- data streams and tensor files
 * Language-model token files, training from a batch source, and single
 * tensors read from (or gradients written to) safetensors files. */

/* A node's dtype (REMAT_F32 or REMAT_I32); -1 for a node out of range. */
REMAT_API int remat_node_dtype(const remat_graph *g, remat_node n);

/* A flat file of token ids: little-endian uint16, no header (numpy's
 * ids.astype("<u2").tofile(path)). */
typedef struct remat_tokens remat_tokens;

/* Maps the file read-only. Errors name the file: REMAT_NOT_FOUND when it
 * does not exist, REMAT_IO when it cannot be read, REMAT_FORMAT when it is
 * empty or has an odd number of bytes. The caller owns *out
 * (remat_tokens_destroy). */
REMAT_API remat_status remat_tokens_open(remat_tokens **out, const char *path);
REMAT_API void remat_tokens_destroy(remat_tokens *t);
REMAT_API int64_t remat_tokens_count(const remat_tokens *t);
/* Token i, 0 <= i < count (0 out of range). */
REMAT_API uint16_t remat_tokens_get(const remat_tokens *t, int64_t i);
/* REMAT_INVALID, naming the file, the position and the id, if some id is
 * >= vocab. Reads the whole file. */
REMAT_API remat_status remat_tokens_check(const remat_tokens *t, int64_t vocab);
/* One language-model batch: row b is the window of context + 1 tokens
 * starting at a position drawn uniformly from [0, count - context - 1]
 * with Philox keyed by seed (counter: b, step, a stream constant);
 * input (batch, context) gets each window's first context tokens and
 * labels (batch * context) the context tokens after them. A pure function
 * of (file, batch, context, seed, step). REMAT_INVALID if the file has
 * fewer than context + 1 tokens. */
REMAT_API remat_status remat_tokens_batch(const remat_tokens *t, int64_t batch, int64_t context, uint64_t seed,
                                          int64_t step, int32_t *input, int32_t *labels);

/* A batch source: fills the model's input and labels buffers (each the
 * node's numel of float or int32 per its dtype; labels is NULL when the
 * model has none) with the batch of global step `step` (0-based). With
 * K micro-batches per step, the buffers are one micro-batch (the graph's
 * batch) and `step` counts micro-batches: micro-batch k of step t is
 * asked for as t * K + k, on whichever rank computes it. */
typedef remat_status (*remat_batch_fn)(void *user, int64_t step, void *input, void *labels);

/* Trains from a batch source, without evaluation: o->epochs epochs (0
 * counts as 1) of o->steps steps each (o->steps >= 1). Emits STEP events
 * as remat_train does; images_per_s counts rows of the batch per second
 * over the epoch, step_seconds is the step's own time. */
REMAT_API remat_status remat_train_stream(remat_session *s, const remat_model *m, remat_batch_fn next, void *user,
                                          const remat_train_opts *o);

/* Language-model training on random windows of a token file
 * (remat_tokens_batch with seed o->seed), through remat_train_stream.
 * Checks first that the model's input is (B, T) int32 and its labels
 * (B * T) int32, and every token id against the vocabulary (the logits'
 * last dimension), naming the position of the first out of range. */
REMAT_API remat_status remat_train_tokens(remat_session *s, const remat_model *m, const remat_tokens *t,
                                          const remat_train_opts *o);

/* Reads tensor `name` of a safetensors file into out (numel(dims)
 * elements of dtype). The tensor must have exactly that shape and dtype,
 * except that I64 is accepted for I32 when every value fits (PyTorch's
 * labels are int64). Errors name the file and the tensor, and give both
 * shapes or dtypes (or the tensors the file has, when it is missing). */
REMAT_API remat_status remat_safetensors_read(const char *path, const char *name, remat_dtype dtype, int ndim,
                                              const int64_t *dims, void *out);
/* Writes "loss" (F32, shape [1]) and "grad.<name>" (F32, the parameter's
 * shape) for every trainable parameter: the gradients of the session's
 * last remat_session_step, named as in tests/fixtures. */
REMAT_API remat_status remat_safetensors_save_grads(remat_session *s, const char *path, float loss);
/* ------------------------------------ end of data streams and tensor files */

/* ----------------------------------------------------- several processes
 * Data-parallel training: the global batch of a step is split into
 * micro-batches of the graph's batch, numbered 0..K-1 (K =
 * remat_session_opts.micro_batches); rank r of R computes micro-batches
 * r*K/R .. (r+1)*K/R - 1 (a contiguous block), with its own session of the
 * same graph and options. The gradient of each micro-batch is summed in
 * one fixed binary tree over the micro-batch index (a node [lo, hi) adds
 * its halves [lo, mid) and [mid, hi), mid = lo + (hi - lo) / 2), whichever
 * rank computed it: a rank folds its own block (a subtree, since R is a
 * power of two), and the levels above are recursive doubling across the
 * ranks, where both partners compute a + b = b + a. The sum is divided by
 * K, so a step's result depends on (seed, global batch, micro-batch) and
 * never on R or on the plan: 1, 2 or 4 ranks give the same bits. Dropout
 * masks are keyed by the sample's index in the global batch; BatchNorm
 * uses each micro-batch's statistics, and its running statistics take
 * one update per micro-batch in micro-batch order on every rank (the
 * ranks exchange their statistics after the step). On one process, K > 1
 * is gradient accumulation: the step holds one micro-batch's values and
 * the accumulated gradients.
 *
 * Gradients are reduced in buckets of consecutive parameters (fixed by
 * parameter order, from the last parameter back, about bucket_bytes
 * each); a bucket's reduction is an instruction of the schedule, placed
 * where its last gradient becomes final in this plan's backward pass, so
 * it overlaps the rest of that pass, and it completes before the step
 * returns (the executor drives it between instructions). Its buffers (the tree's partial sums, the
 * exchanges' receive buffers, the statistics) are one resident block of
 * category REMAT_MEM_COMM that the plan and the budget count. Every rank
 * runs the same plan: a hash of it is compared when the session is made.
 *
 * Failure: the calls that are collective (remat_session_create, _step,
 * _set_optimizer, remat_train and the loops, remat_evaluate) agree at
 * known points, so a rank whose setup fails (its budget, its data) makes
 * every rank's call fail with a message naming it. A rank that fails
 * anywhere else cannot tell the others, which may then wait for it
 * forever: end the job with remat_comm_abort. CPU sessions only. */

/* A communicator of one process (rank 0 of 1). The caller owns *out
 * (remat_comm_destroy). */
REMAT_API remat_status remat_comm_create_single(remat_comm **out);
/* The ranks this process was started with: when a launcher started it
 * (mpirun or mpiexec; its environment says so), an MPI communicator over
 * all of them (initializing MPI, which destroying it finalizes), else a
 * single process. REMAT_UNSUPPORTED when a launcher started it but this
 * libremat was built without MPI. */
REMAT_API remat_status remat_comm_create_env(remat_comm **out);
/* A communicator over *mpi_comm (pointer to an MPI_Comm; NULL:
 * MPI_COMM_WORLD), initializing MPI if nothing has. Collective. */
REMAT_API remat_status remat_comm_create_mpi(remat_comm **out, const void *mpi_comm);
/* 1 when this libremat was built with MPI. */
REMAT_API int remat_comm_mpi_built(void);
/* The ranks with the same color form a new communicator, ordered as in c
 * (MPI_Comm_split). Collective; destroy it before c. */
REMAT_API remat_status remat_comm_split(remat_comm *c, int color, remat_comm **out);
REMAT_API void remat_comm_destroy(remat_comm *c);
REMAT_API int remat_comm_rank(const remat_comm *c);
REMAT_API int remat_comm_size(const remat_comm *c);
/* Distinct host names among the ranks, and this rank's (owned by c). */
REMAT_API int remat_comm_hosts(const remat_comm *c);
REMAT_API const char *remat_comm_host(const remat_comm *c);
/* "single" or "mpi" (static). */
REMAT_API const char *remat_comm_kind(const remat_comm *c);
/* Every rank calls it at the same point with its own status; returns
 * REMAT_OK when all were REMAT_OK, else, on every rank, the status of
 * the lowest failing rank with its message, as "rank 1 of 2 (host): ...".
 * One process: st itself. */
REMAT_API remat_status remat_comm_agree(remat_comm *c, remat_status st);
/* Every rank calls it at the same point with the same keys in the same
 * order: kv is a NULL-terminated list of key, value strings (borrowed),
 * such as {"--seed", "1", "--lr", "0.01", NULL}. REMAT_OK when every rank
 * has the same values; else, on every rank, REMAT_INVALID naming the
 * first key that differs, the ranks and their values, then why (NULL: a
 * default saying that every rank needs the same options), as an agreed
 * failure (remat_comm_agreed_failure). One exchange of a hash per key;
 * the values only after a difference. One process: REMAT_OK. */
REMAT_API remat_status remat_comm_same(remat_comm *c, const char *const *kv, const char *why);
/* 1 when the last agreement on c (remat_comm_agree, or one inside the
 * library's collective calls) failed: every rank has returned the same
 * failure from the same call, so they can all stop cleanly; 0 when it
 * succeeded or there was none, and then a failure is this rank's alone
 * (end the job: remat_comm_abort). */
REMAT_API int remat_comm_agreed_failure(const remat_comm *c);
/* Collectives on bytes: all gets size * bytes (rank i's at i * bytes);
 * root's buffer to every rank. */
REMAT_API remat_status remat_comm_allgather(remat_comm *c, const void *mine, size_t bytes, void *all);
REMAT_API remat_status remat_comm_bcast(remat_comm *c, void *buf, size_t bytes, int root);
/* x (n floats) becomes the sum over the ranks of their x, by recursive
 * doubling: the same bits on every rank, which depend on the inputs and
 * the rank count only. The size must be a power of two. */
REMAT_API remat_status remat_comm_sum(remat_comm *c, float *x, int64_t n);
/* Ends every rank of the job with exit status code (MPI_Abort; one
 * process: _exit). Does not return. Print the reason first. */
REMAT_API void remat_comm_abort(remat_comm *c, int code);

/* Where a session stands among the ranks. */
typedef struct {
    int rank, ranks, hosts;
    int64_t micro_batches;       /* K, per step over all ranks */
    int64_t local_micro_batches; /* this rank's: K / ranks */
    int64_t first_micro_batch;   /* the global index of this rank's first */
    int buckets;                 /* gradient buckets (0: nothing to reduce) */
    size_t comm_bytes;           /* bytes of category REMAT_MEM_COMM: the tree's
                                  * partial sums, the exchanges' receive buffer,
                                  * the statistics (held in one block, aligned) */
    int overlap;                 /* reductions start during the backward pass */
    uint64_t plan_hash;          /* of the training step's schedule, the same on every rank */
    /* The last step: seconds of the reduction work on this rank (folding
     * the tree, starting and driving exchanges between instructions),
     * and of waiting for the exchanges after the backward pass: the part
     * of the reduction that the backward pass did not hide. */
    double reduce_seconds, wait_seconds;
    /* Of that wait, on one host (-1 on several: no common clock): the part
     * after the last rank's backward pass ended, which is the reduction
     * time that no backward pass hid, and the part before, this rank
     * waiting for the slowest one (skew). */
    double exposed_seconds, skew_seconds;
    /* Whether the reduction crosses host memory (a GPU's session: each
     * bucket's sum downloaded, exchanged and summed on the host in the
     * CPU's fixed order, uploaded back; the CPU with REMAT_DP_STAGING=host),
     * and the bytes of its host buffers on this rank (several ranks only):
     * host memory, in no category of remat_mem_stats and not in
     * comm_bytes. */
    int host_staging;
    size_t host_staging_bytes;
} remat_dist_info;
REMAT_API remat_status remat_session_dist(const remat_session *s, remat_dist_info *out);
/* ------------------------------------------------ end of several processes */

/* -------------------------------------------------------- training state
 * A run's state, so that a run that dies loses only the steps since its
 * last save and a resumed run continues bitwise as if it had never
 * stopped, under any strategy or budget. One safetensors file: every
 * parameter and buffer by its PyTorch state_dict name (F32, so PyTorch
 * reads the weights: safetensors.torch.load_file, then drop the
 * "optim." entries), the optimizer's state named as PyTorch's
 * ("optim.<param>.exp_avg", "optim.<param>.exp_avg_sq",
 * "optim.<param>.momentum_buffer"), and in the metadata: the session's
 * step index (dropout's Philox position) and optimizer step count, the
 * data position, and everything that defines the math (graph, optimizer
 * and hyper-parameters, seeds, batch, data, device, thread count, the
 * caller's run options), the remat version, and a CRC-32 of the whole
 * file. README.md ("Resuming") has the exact format. In a directory,
 * states are named state-<session step, 12 digits>.safetensors.
 *
 * Every file is written atomically and durably: a uniquely named
 * temporary in the same folder, fsync, rename, fsync of the folder. */

/* Where a training loop stands in its data. */
typedef struct {
    int64_t data_step; /* batches taken from the data by the loop(s) so far */
    int64_t epoch;     /* data_step as (epoch, batch within it) when the */
    int64_t position;  /* data has epochs; epoch 0, position data_step otherwise */
} remat_train_progress;

/* A damaged state skipped while looking for the newest one. */
typedef void (*remat_state_note_fn)(const char *path, const char *why, void *user);

/* What a state records besides the session, and compares on load; all
 * borrowed for the call. The session's own part (graph, parameters,
 * optimizer and its state, step counts, seed, device, threads, TF32) is
 * read from the session. */
typedef struct {
    int64_t batch;             /* rows per optimizer step (0: the graph input's first dimension) */
    uint64_t data_seed;        /* the data order's seed (remat_train_opts.seed) */
    const char *data;          /* an identity of the training data (NULL: none) */
    int64_t batches_per_epoch; /* remat_train_progress's epochs (0: none) */
    const char *const *run;    /* as remat_train_opts.run */
    remat_state_note_fn note;  /* damaged states skipped (may be NULL) */
    void *user;
} remat_state_opts;

/* Writes the session's state to path (atomically). at may be NULL (the
 * data step is then the session's step index). */
REMAT_API remat_status remat_state_save(remat_session *s, const remat_state_opts *o, const remat_train_progress *at,
                                        const char *path);
/* Writes it to dir/state-<step>.safetensors (dir is created if missing),
 * then removes all but the newest `keep` states of dir up to that step
 * (keep 0: none removed; states of later steps are never touched). *path
 * (may be NULL) gets the file's name, owned by the caller (free). */
REMAT_API remat_status remat_state_save_dir(remat_session *s, const remat_state_opts *o, const remat_train_progress *at,
                                            const char *dir, int keep, char **path);
/* Loads a state file, or the newest intact state of a directory, into the
 * session and fills *at (may be NULL). Everything is checked before
 * anything is copied, and a failed load leaves the session unchanged:
 * the file itself (REMAT_FORMAT, naming it, when truncated, damaged or
 * not a state: its size and CRC-32 are checked first), then the options
 * that define the math (REMAT_INVALID naming the first that differs,
 * with both values: o->run's keys first, then the batch, device,
 * threads, optimizer, seeds and data), then every tensor (each
 * parameter, buffer and optimizer tensor present, F32, with its shape;
 * REMAT_SHAPE naming it), then the graph itself. The strategy, budget
 * and cost model may differ: plans give identical bits.
 * REMAT_NOT_FOUND: no such file or directory, or a directory without any
 * state. */
REMAT_API remat_status remat_state_load(remat_session *s, const remat_state_opts *o, const char *path,
                                        remat_train_progress *at);
/* The steps of the state files in dir, newest first (*steps owned by the
 * caller, free; NULL when *n is 0), by name only: nothing is read.
 * Temporary files are never listed. REMAT_NOT_FOUND if dir does not
 * exist. */
REMAT_API remat_status remat_state_list(const char *dir, int64_t **steps, int *n);
/* The newest intact state of dir: *path (caller frees) and *step (either
 * may be NULL). Each newer state that fails the file checks (truncated,
 * checksum, malformed) is reported through note and skipped. Stale
 * temporaries of killed saves are removed (those whose process is gone).
 * REMAT_NOT_FOUND when dir holds no state, REMAT_FORMAT when none is
 * intact. */
REMAT_API remat_status remat_state_find(const char *dir, remat_state_note_fn note, void *user, char **path,
                                        int64_t *step);

/* Writes bytes to path atomically and durably, as every file remat writes
 * (above); REMAT_IO names the path and the reason. */
REMAT_API remat_status remat_file_write_atomic(const char *path, const void *data, size_t bytes);
/* The shortest decimal form of v that reads back as the same float
 * ("0.001", not "0.00100000005"), written into buf (cap bytes; 16 hold
 * any float) and returned. States record their float hyper-parameters
 * this way; a caller that records floats among its run options should
 * too, so that equal floats compare as equal strings on resume. */
REMAT_API const char *remat_float_str(float v, char *buf, size_t cap);
/* ------------------------------------------------ end of training state */

#ifdef __cplusplus
}
#endif
#endif /* REMAT_H */
