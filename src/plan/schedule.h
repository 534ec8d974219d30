/* schedule.h: a training step as data.
 *
 * A schedule is an instruction list over values. Each node has three values:
 * its output, its aux (per-channel statistics some ops keep for backward)
 * and the gradient of its output. An instruction computes a node forward
 * (allocating its output and aux), runs a node's backward (allocating the
 * input gradients it is the first to contribute to), or frees a value. A
 * forward of a node after its first in the schedule is a recomputation.
 * Strategies produce schedules; the executor runs them; the simulator
 * predicts their memory. Parameters, buffers and parameter gradients are not
 * values: they live in the session for its whole life.
 */
#ifndef REMAT_SCHEDULE_H
#define REMAT_SCHEDULE_H

#include "../remat-impl.h"

/* REDUCE (added by the session for data parallelism, after planning):
 * gradient bucket `value` is final; fold it into the micro-batches' tree
 * and, at the rank's last micro-batch, start its reduction across ranks.
 * It takes no memory of the arena (its buffers are the session's
 * communication block); `node` is the bucket's first parameter. */
/* OUT and IN (offload, planned by optimal with a host budget): OUT copies
 * value `value` to the host (a host buffer taken, category REMAT_MEM_HOST);
 * its device instance stays until a FREE of it, which waits for the copy.
 * IN takes the value's device instance again (category `cat`) and copies
 * it back, giving the host buffer back; a kernel that reads it waits for
 * the copy. Both run on the backend's copy engine beside the kernels. */
typedef enum { REMAT__I_FWD = 0, REMAT__I_BWD, REMAT__I_FREE, REMAT__I_REDUCE, REMAT__I_OUT, REMAT__I_IN } remat__ikind;
typedef enum { REMAT__V_OUT = 0, REMAT__V_AUX, REMAT__V_GRAD } remat__vkind;

#define REMAT__VAL(node, kind) ((int32_t)(node)*3 + (int32_t)(kind))
#define REMAT__VAL_NODE(v) ((v) / 3)
#define REMAT__VAL_KIND(v) ((remat__vkind)((v) % 3))

typedef struct {
    uint8_t kind;    /* remat__ikind */
    uint8_t cat;     /* FWD: category of the output; IN: of the value
                      * taken again; BWD: unused */
    uint8_t aux_cat; /* FWD: category of the aux */
    uint8_t first;   /* FWD: the node's first forward in the schedule (a
                      * later one is a recomputation) */
    int32_t node;    /* FWD, BWD; REDUCE: the bucket's first parameter;
                      * FREE, OUT, IN: the value's node */
    int32_t value;   /* FREE, OUT, IN; REDUCE: the bucket */
} remat__instr;

typedef struct {
    remat__instr *ins;
    int n, cap;
    int train;          /* training-mode semantics */
    int backward;       /* has a backward pass */
    remat_node loss;    /* scalar recorded when computed, or REMAT_NONE */
    remat_node fetch;   /* node copied out when computed, or REMAT_NONE */
    const char *origin; /* static: the planner that made it ("levels",
                           "chain", "dtr"), for summaries */
    char candidate[48]; /* optimal: the candidate that won ("chain 7/24") */
    double stall;       /* offload: the copy time the chain model's
                            timeline predicts is not hidden behind compute,
                            in cost units (0 without OUT and IN) */
} remat__schedule;

/* Static facts about a graph compiled for one loss on one device. */
typedef struct {
    const remat_graph *g;
    int nth;             /* CPU thread count, for workspace sizes */
    remat_device device; /* whose kernels run, so whose workspaces count */
    void *dev;           /* the device backend's context, which its
                          * workspace functions read (NULL: the CPU, or a
                          * plan for a device that is not here) */
    remat_cost_model cost;
    uint8_t *needs_grad; /* per node: depends on a trainable parameter */
    size_t *ws;          /* (2 n) workspace bytes of node u's forward
                          * (2u) and backward (2u + 1) kernels */
    size_t *vbytes;      /* (3 n) each value's bytes (remat__value_bytes),
                          * set by remat__prog_init and again by
                          * remat__prog_set_precision */
    double *node_cost;   /* (3 n) the cost of node u's forward (3u), its
                          * backward (3u + 1) and a recomputation of its
                          * forward (3u + 2): remat__prog_set_cost */
    int recompute_once;  /* optimal considers only schedules that recompute
                          * a node at most once (remat_session_opts) */
    int no_split;        /* optimal considers no split schedules (refine.h,
                          * remat__resplit; remat_session_opts) */
    int grads_resident;  /* a traced step's parameter gradients are held
                          * from the step's start (remat_session_opts) */
    int estimated;       /* nodes whose workspace bytes are estimates (a
                          * plan for a device that is not here) */
    remat_precision precision;
    uint8_t *dt;     /* (n) per node: the remat_dtype its value (and
                      * its value's gradient) is stored in; NULL under
                      * fp32 (the graph's dtypes) */
    uint8_t *native; /* (n) under bf16: 1 where node u's kernels take
                      * its values in their stored dtypes (remat__op.
                      * bf16_ws), with no float32 views; NULL under fp32 */
} remat__prog;

/* Analyses g and asks the device's kernels for each node's workspace
 * bytes once (dev: the device backend's context, which a device's
 * workspace functions read; NULL for the CPU). REMAT_UNSUPPORTED when an
 * op has no kernels for the device. */
remat_status remat__prog_init(remat__prog *p, const remat_graph *g, int nth, remat_device device, void *dev);
void remat__prog_free(remat__prog *p);

/* Sets the precision policy (precision.c): each value's storage dtype
 * from its op's rule, and each node's workspace grown by the float32
 * buffers its kernels read and write through (remat__shim_layout). Once,
 * right after remat__prog_init. */
remat_status remat__prog_set_precision(remat__prog *p, remat_precision precision);

/* The dtype node u's value is stored in. */
static inline remat_dtype remat__val_dtype(const remat__prog *p, int32_t u) {
    return p->dt ? (remat_dtype)p->dt[u] : p->g->nodes[u].dtype;
}

/* Bytes of node u's output value as the step stores it. */
static inline size_t remat__node_bytes(const remat__prog *p, int32_t u) {
    return (size_t)remat__numel(&p->g->nodes[u].shape) * remat__dtype_size(remat__val_dtype(p, u));
}

/* The same, of node n, as the planners count. */
static inline int64_t remat__vbytes(const remat__prog *p, const remat__node *n) {
    return (int64_t)remat__node_bytes(p, (int32_t)(n - p->g->nodes));
}

/* Where a kernel's float32 views of bf16 values lie in its workspace
 * (precision.c): per input the offset of its float32 copy (or -1: the
 * kernel reads the value itself), of the output's, of the output
 * gradient's, and per input gradient that is rounded through bf16 the
 * offset of the float32 buffer the kernel accumulates into; then the
 * kernel's own workspace at `kernel`. Every offset is 256-byte aligned.
 * An elementwise op's views hold one slice of REMAT__SHIM_SLICE elements,
 * a plane-wise op's as many whole planes as fit in that (at least one).
 * `any` is 0 when the kernel needs none of them. */
typedef struct {
    int64_t in[REMAT__MAX_IN], din[REMAT__MAX_IN];
    int64_t out, dout;
    size_t kernel; /* offset of the kernel's own workspace */
    int64_t slice; /* an elementwise op (REMAT__OP_ELEMENTWISE) runs slice
                      by slice: elements per slice, each view that long;
                      a plane-wise op (REMAT__OP_PLANEWISE, with planes
                      set) a block of `slice` planes at a time, each view
                      that many of its tensor's planes; 0: the kernel
                      runs once, on whole views */
    int planes;
    int any;
} remat__shim;
void remat__shim_layout(const remat__prog *p, int32_t u, int backward, remat__shim *out);
#define REMAT__SHIM_SLICE ((int64_t)1 << 16)

static inline size_t remat__ws_bytes(const remat__prog *p, int32_t node, int backward) {
    return p->ws[2 * (size_t)node + (backward ? 1 : 0)];
}

/* Is the node a parameter, buffer (resident, not a value) or a computed value? */
static inline int remat__is_resident(const remat__node *n) {
    return n->leaf == REMAT__LEAF_PARAM || n->leaf == REMAT__LEAF_BUFFER;
}

/* Marks every node `root` depends on (explicit stack of g->n entries, no
 * recursion). REMAT_NONE marks nothing. */
void remat__mark_needed(const remat_graph *g, remat_node root, uint8_t *needed, int32_t *stack);

/* The graph's articulation points in creation order: op nodes u such that
 * no edge between two other op nodes jumps over u (every input-to-loss path
 * crosses u). Data inputs are held from the start, so their edges (labels
 * to the loss) do not count. Only nodes with needed[u] count (needed NULL:
 * all). Writes them to out (g->n entries) and returns how many; reach is
 * scratch of g->n entries. */
int remat__cut_points(const remat_graph *g, const uint8_t *needed, int32_t *out, int32_t *reach);

/* Bytes of a value (its storage dtype's, remat__val_dtype): the table
 * remat__prog_init makes, which every walk over a schedule reads. */
static inline size_t remat__value_bytes(const remat__prog *p, int32_t v) { return p->vbytes[v]; }

/* Fills p->vbytes from the graph and p's storage dtypes (schedule.c). */
void remat__prog_size_values(remat__prog *p);

/* Does BWD(node) write the gradient of its input i (as a value, or into a
 * parameter's gradient)? */
int remat__bwd_writes(const remat__prog *p, const remat__node *n, int i);

/* Builds the schedule of one step from checkpoint levels (build.c):
 * level[u] = 0 keeps node u's output from the forward pass for the backward
 * pass; d > 0 keeps it only from a recomputation at depth d on (a nested
 * boundary); REMAT__LEVEL_NONE drops it, to be recomputed when needed. NULL
 * keeps everything (the store-all schedule). `fetch` (or REMAT_NONE) is a
 * node to compute besides the loss; backward = 0 builds a forward-only
 * schedule. */
remat_status remat__schedule_build(const remat__prog *p, remat_node loss, remat_node fetch, int train, int backward,
                                   const uint8_t *level, remat__schedule *out);
void remat__schedule_free(remat__schedule *s);

/* Inserts a FREE after the last use of every value instance of a schedule
 * made of FWD and BWD instructions, and of OUT, IN and FREE (offload). A
 * FWD of a node whose output is live ends the old instance first (a
 * recomputation); a stateful op's aux is reused, any other aux is made
 * again like the output. An OUT reads its value; a FREE already there
 * ends the instance (it gets no second one); an IN starts an instance. */
remat_status remat__schedule_add_frees(const remat__prog *p, remat__schedule *s);

/* Inserts a REDUCE for each of nb gradient buckets: bucket_of[u] is the
 * bucket of parameter node u (-1 for every other node), and bucket b's
 * REDUCE goes right after the last BWD that writes a gradient of one of
 * its parameters (recomputations change nothing: a parameter's gradient
 * is written by backwards only), or, with at_end, after the last
 * instruction. Several at one place go in bucket order. */
remat_status remat__schedule_add_reduces(const remat__prog *p, remat__schedule *s, const int32_t *bucket_of, int nb,
                                         int at_end);

/* Sets each FWD's categories (an output or aux instance that some backward
 * reads before it is freed is an activation, else transient) and its
 * `first` flag. */
remat_status remat__schedule_categorize(const remat__prog *p, remat__schedule *s);

/* The checkpoint levels of a strategy (levels.c), for
 * remat__schedule_build; *level is NULL for `all`, else owned by the caller
 * (free). */
#define REMAT__LEVEL_NONE 255
remat_status remat__strategy_levels(const remat_graph *g, remat_strategy st, uint8_t **level);
/* The j-th of n keep-expensive levels (keep_cheap 0) or drop-expensive
 * ones (keep_cheap 1), for optimal.c's candidates (levels.c); *level owned
 * by the caller. */
remat_status remat__selective_levels(const remat__prog *p, int j, int n, int keep_cheap, uint8_t **level);
/* Whether a traced step has checkpoint regions (graph files' 'region'). */
int remat__has_regions(const remat_graph *g);

/* A node's forward, backward and recomputation cost under the cost model
 * (cost.c): seconds when calibrated, else FLOPs (a backward twice its
 * forward, a recomputation equal to it). */
static inline double remat__node_seconds(const remat__prog *p, const remat__node *n) {
    return p->node_cost[3 * (n - p->g->nodes)];
}
static inline double remat__node_bwd_seconds(const remat__prog *p, const remat__node *n) {
    return p->node_cost[3 * (n - p->g->nodes) + 1];
}
static inline double remat__node_rec_seconds(const remat__prog *p, const remat__node *n) {
    return p->node_cost[3 * (n - p->g->nodes) + 2];
}
/* Sets the prog's cost model (NULL: FLOPs) and fills node_cost from it. */
void remat__prog_set_cost(remat__prog *p, const remat_cost_model *m);

/* Per kind of a chain stage's storage option (keep all, drop the cheap
 * values, drop large aux, both): how many stages offer it, and how many
 * Fe's of the chain DP's distinct plans over the budgets choose it. */
remat_status remat__optimal_options(const remat__prog *p, remat_node loss, int offered[4], int chosen[4]);

/* The DTR fallback on the whole training step (dtr_train.c): the step as
 * one DAG of forwards and backwards for the offline DTR planner. */
typedef struct remat__train_dag remat__train_dag;
remat_status remat__train_dag_build(const remat__prog *p, remat_node loss, remat__train_dag **out);
void remat__train_dag_free(remat__train_dag *d);
/* The DAG's floor and store-all size, in bytes of the DAG model. */
int64_t remat__train_dag_floor(const remat__train_dag *d);
int64_t remat__train_dag_total(const remat__train_dag *d);
/* A schedule from DTR at `budget` bytes of the DAG model (REMAT_BUDGET
 * when DTR finds none); max_work as in remat__dtr_opts. */
remat_status remat__train_dag_schedule(const remat__prog *p, const remat__train_dag *d, int64_t budget,
                                       int64_t max_work, remat__schedule *out);

#endif
