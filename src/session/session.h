/* session.h: the session's internals, for the files that run or plan a
 * session only: the session itself (this folder: the session API in
 * session.c, its resident blocks in blocks.c, its optimizer in optim.c,
 * its offload planning in offload_api.c), the executor (src/exec), data
 * parallelism (src/dist/dp_*.c) and the graph-file planner
 * (src/api/plan_graph.c). The layers above (train/) call the functions of
 * session_api.h and never read these fields. */
#ifndef REMAT_SESSION_H
#define REMAT_SESSION_H

#include "../plan/planner.h"
#include "../exec/backend.h"
#include "../dist/dp.h"
#include "session_api.h"

typedef struct {
    remat_node node;
    float *data;  /* (numel) in the PARAM block */
    float *grad;  /* (numel) in the GRAD block; NULL for buffers */
    float *m, *v; /* optimizer state in the OPTIM block (v: AdamW only) */
} remat__pslot;

/* The resident blocks: one backend allocation each, carved into tensors
 * at REMAT__ARENA_ALIGN offsets. */
enum { REMAT__BLK_PARAM = 0, REMAT__BLK_GRAD, REMAT__BLK_OPTIM, REMAT__BLK_COMM, REMAT__BLK_PREFETCH, REMAT__N_BLK };

/* The profile's instruction kinds: forward, recompute, backward, free,
 * copy out, copy in. */
#define REMAT__PROF_KINDS 6

struct remat_session {
    const remat_graph *g;
    remat_node loss;
    remat_session_opts opts;
    const remat__backend *be;
    void *dev;          /* the backend's context */
    remat__alloc alloc; /* accounting per category */
    remat__prog prog;
    remat__planned train;    /* forward + backward */
    size_t least;            /* the least any schedule of the training step
                              * holds, resident blocks included (bound.h) */
    remat__planned fwd[2];   /* forward only, cached: [train mode] */
    remat_node fwd_fetch[2]; /* the fetch node each cached one was built for */
    int32_t *pindex;         /* per node: index into params, or -1 */
    remat__pslot *params;
    int n_params;
    void *blk[REMAT__N_BLK]; /* resident blocks (backend memory) */
    size_t blk_bytes[REMAT__N_BLK];
    const void **bound; /* per node: caller data for inputs (borrowed) */
    void **vals;        /* per value: resident data or NULL */
    int32_t *vev;       /* per value: event of its resident instance */
    /* The executor's memory: one arena for the values of every schedule,
     * kept across steps, as large as the largest plan run so far. */
    void *arena; /* backend memory, or NULL */
    size_t arena_bytes;
    /* Offloaded values (REMAT__I_OUT, REMAT__I_IN) lie in a host arena of
     * pinned memory (remat_host_alloc), kept the same way. */
    void *host_arena;
    size_t host_arena_bytes;
    void **hvals;              /* per value: its host copy, or NULL */
    int32_t *hev;              /* per value: the event of its host copy */
    uint32_t *copy_stamp;      /* per value: copy_waits + 1 when a copy
                                * of it was issued: in flight while it
                                * exceeds copy_waits */
    uint32_t copy_waits;       /* offload_waits so far */
    const remat__memplan *cur; /* the running schedule's plan */
    int32_t tick;              /* next tick of the running plan */
    int64_t step;              /* completed optimizer updates */
    remat__dp dp;              /* micro-batches and ranks (dp.h) */
    int has_optim;
    remat_optim_opts optim;
    int64_t optim_t; /* AdamW's step count */
    /* Per-op profile (remat_session_set_profiling): seconds and counts per
     * op and instruction kind (forward, recompute, backward, free). */
    int profiling;
    double prof_s[REMAT__N_OPS][REMAT__PROF_KINDS];
    int64_t prof_n[REMAT__N_OPS][REMAT__PROF_KINDS];
    /* ... and per node (remat__session_node_profile, session_api.h) */
    double *prof_node;
    /* The next run's inputs (prefetch.c), with opts.prefetch on a device
     * that copies on a second stream; all NULL otherwise. */
    int32_t *pf_slot;     /* per node: an input's slot, or -1 */
    void **pf_dst;        /* (pf_n) the slot's bytes in the PREFETCH block */
    size_t *pf_bytes;     /* (pf_n) */
    const void **pf_next; /* (pf_n) remat_session_bind_next's data */
    const void **pf_src;  /* (pf_n) the data whose copy the slot holds for this run */
    int pf_n;
};

/* Runs a planned schedule and waits for it (the step's one
 * synchronization point). Writes the loss (if the schedule has one) and
 * copies the fetched node into fetch_out. mb: this rank's micro-batch of
 * a data-parallel step (dp_step.c: its slice of the bound inputs, its
 * dropout keys, its statistics, its leaf of the gradient tree), or -1 for
 * a run outside one. */
remat_status remat__exec(remat_session *s, const remat__planned *pl, int64_t mb, float *loss, float *fetch_out);
/* Runs k's kernel (backend run), through the bf16 policy's float32 views
 * where its node has them (views.c). */
remat_status remat__run_precise(remat_session *s, remat__kctx *k, int backward);

/* prefetch.c: the PREFETCH block and its slots (session creation and
 * destruction); in a run, an input's upload served from its slot
 * (*taken: it was), and after the run's walk, its copies dropped and the
 * next run's started (ok: the run succeeded; 0 only drops them). */
remat_status remat__prefetch_init(remat_session *s);
void remat__prefetch_free(remat_session *s);
remat_status remat__prefetch_take(remat_session *s, int32_t node, void *dst, const void *src, size_t bytes, int *taken);
remat_status remat__prefetch_issue(remat_session *s, int ok);

/* Frees every value still resident and gives the arena back to the
 * backend. For remat_session_destroy. */
void remat__exec_release(remat_session *s);

/* Makes pl's memory plan from its schedule (build and place). */

/* offload_api.c: the FLOP/s that uncalibrated costs are converted at
 * (flops_per_s, else the device's nominal), and the session's host link
 * (opts.host_bandwidth, host_latency) in its cost model's units. */
double remat__session_flops_per_s(const remat_session *s, double flops_per_s);
remat_status remat__session_host_link(const remat_session *s, double *bandwidth, double *latency);

/* Bytes the session holds outside the arena (its resident blocks). */
size_t remat__session_blocks_bytes(const remat_session *s);
/* (Re)builds the training schedule for the strategy and the live state,
 * then checks the budget. */
remat_status remat__session_plan_train(remat_session *s);
/* Parameter slot i is trainable (has a gradient), not a buffer. */
static inline int remat__trainable(const remat_session *s, int i) {
    return s->g->nodes[s->params[i].node].leaf == REMAT__LEAF_PARAM;
}

/* A resident block (blocks.c): `n` tensors of bytes[i] carved at aligned
 * offsets from one backend allocation (category cat, counted per tensor);
 * ptrs[i] receives each tensor, zero-filled when zero. */
remat_status remat__block_alloc(remat_session *s, int blk, remat_mem cat, int n, const size_t *bytes, void **ptrs,
                                int zero);
void remat__block_free(remat_session *s, int blk, remat_mem cat, size_t counted);

/* The optimizer (optim.c): its state, allocated (zeroed) and freed there
 * only; install checks the options and allocates the state, without
 * planning. */
remat_status remat__optim_state_alloc(remat_session *s, const remat_optim_opts *o);
void remat__optim_state_free(remat_session *s);
remat_status remat__optim_install(remat_session *s, const remat_optim_opts *o);

#endif
