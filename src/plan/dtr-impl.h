/* dtr-impl.h: the DTR planner's simulator (dtr.c) as its search
 * (dtr_search.c) drives it: the problem's fixed facts and one
 * simulation's state, and the calls that make, run and free it.
 */
#ifndef REMAT_PLAN_DTR_IMPL_H
#define REMAT_PLAN_DTR_IMPL_H

#include "dtr.h"

/* A growable operation list; a failed growth sets oom and drops the push. */
typedef struct {
    remat__dtr_op *v; /* owned */
    int n, cap;
    int oom;
} opbuf;

/* Learnt from failed runs: just before the first computation of t, make u
 * resident, and keep it so until the first computation of v. */
typedef struct {
    int32_t u, t, v;
} dtr_hint;

/* The problem's fixed facts and one simulation's state. */
typedef struct {
    const remat__dtr_node *nd; /* borrowed */
    int n;
    uint8_t *in_c;     /* node is computed */
    int64_t *cons_off; /* consumers (computed ones) of u: cons[cons_off[u] .. cons_off[u+1]) */
    int32_t *cons;
    int32_t *last_direct;                       /* last consumer of u (u itself if none) */
    int32_t *last_reach;                        /* last node reachable from u through consumers (u if none) */
    int32_t *dies_off[REMAT__DTR_POLICY_COUNT]; /* per policy, nodes dead once v is first computed */
    int32_t *dies[REMAT__DTR_POLICY_COUNT];
    double base_cost; /* every computed node once */
    int64_t floor;
    int32_t floor_node;
    int64_t total_size;

    uint8_t *state;       /* 0 never computed, 1 resident, 2 computed but not resident */
    int32_t *pin;         /* reads still due in the current phase */
    int64_t *last_access; /* clock of the last compute or read */
    uint32_t *mark;       /* == gen: visited by the current walk */
    uint32_t gen;
    int32_t *stack;         /* n + 1 */
    int32_t *frame;         /* n + 1: a recursive phase's frames (a path: deps of deps) */
    int32_t *frame_next;    /* n + 1: per frame, the next dep to look at */
    int32_t *phase;         /* n + 1: the values computed for one first computation */
    int32_t *res, *res_pos; /* resident values, and each one's place in res */
    int n_res;
    int64_t mem;
    int64_t clock;
    int32_t front;    /* the last node computed for the first time */
    int32_t *protect; /* not evicted while front < protect[u] (set by hints) */
    dtr_hint *hints;  /* MAX_TRIES, sorted by t */
    int n_hints;
    int fail_hint;      /* a failed run: the hint whose phase failed, or -1 and */
    int32_t fail_v;     /* the first computation it failed in; */
    int64_t work;       /* values visited by all runs so far */
    uint32_t *in_phase; /* == phase_gen: member of the phase being looked at */
    uint32_t phase_gen;
    int fail_nph; /* the failed phase is d->phase[0 .. fail_nph) */
} dtr;

/* What one simulation found. */
typedef struct {
    int ok;
    double cost;
    int64_t peak; /* of the allocations that fit (up to the failure, if any) */
    int64_t span; /* simulate: the greatest peak of its runs */
} sim_out;

/* Checks the node list against the budget (REMAT_INVALID naming the node). */
remat_status remat__dtr_validate(const remat__dtr_node *nodes, int n, int64_t budget);
/* Builds the fixed facts of validated nodes into *d (remat__dtr_free,
 * also on failure). */
remat_status remat__dtr_init(dtr *d, const remat__dtr_node *nodes, int n);
void remat__dtr_free(dtr *d);
/* One simulation at budget b with heuristic h and freeing policy `policy`
 * (dtr.c says how): its operations into *ops, what it found into *so. */
remat_status remat__dtr_simulate(dtr *d, int h, int policy, int64_t b, int64_t max_work, int *limited, opbuf *ops,
                                 sim_out *so);

#endif
