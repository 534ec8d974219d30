/* dtr.h: the general-graph fallback planner, an offline DTR simulation.
 *
 * Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021) evicts
 * values at run time when memory runs out and recomputes them when they are
 * needed again. Run offline over a static DAG with a cost and a size per
 * node, the same simulation yields a static schedule: an operation list of
 * "compute node i" and "free node i" whose peak fits the budget, for any
 * DAG, with no solver. It gives no optimality certificate; the planner runs
 * several eviction heuristics at several budgets and keeps the cheapest
 * valid schedule.
 *
 * The model is PLANNING.md §9.3 (Checkmate's DAG model with
 * frontier-advancing first computations): nodes are in topological order;
 * a node is computed only while all its dependencies are resident; the
 * memory in use while node v is computed is the resident set plus v; values
 * may be freed and recomputed at any time; first computations happen in
 * index order. Sizes and the budget are in one unit of the caller's choice
 * (bytes, elements, slots). How the simulation works and what the search
 * tries is told at the top of dtr.c.
 */
#ifndef REMAT_DTR_H
#define REMAT_DTR_H

#include "../remat-impl.h"

/* One node of the DAG. deps are borrowed: they must outlive the call. */
typedef struct {
    double cost;         /* compute cost, finite and >= 0 */
    int64_t size;        /* output size, >= 0 */
    const int32_t *deps; /* n_deps indices, each < this node's index */
    int32_t n_deps;
    uint8_t required; /* must be computed. Nodes that are neither required
                             nor an ancestor of a required node are left out;
                             every other node is computed at least once. */
    uint8_t no_evict; /* once computed, resident until dead: never
                             evicted, so never recomputed (a backward
                             that accumulates gradients runs once) */
} remat__dtr_node;

typedef enum { REMAT__DTR_COMPUTE = 0, REMAT__DTR_FREE = 1 } remat__dtr_opkind;

typedef struct {
    int32_t node;
    uint8_t kind; /* remat__dtr_opkind */
} remat__dtr_op;

/* Eviction heuristics: the resident, unpinned value of least h is evicted.
 * c = cost, m = size, s = staleness (compute steps since the value was last
 * computed or read), e* = the evicted neighbourhood of §5.2: the evicted
 * ancestors that recomputing the value would need, plus the evicted,
 * still-needed descendants whose recomputation needs the value (computed
 * exactly, not with the union-find approximation h_DTR^eq), d = how many
 * first computations away the next one that reads the value is: known
 * offline, it stands in for staleness in the last two. */
typedef enum {
    REMAT__DTR_H_DTR = 0, /* (c + cost(e*)) / (m s): h_DTR */
    REMAT__DTR_H_ANC,     /* (c + cost(evicted ancestors)) / (m s) */
    REMAT__DTR_H_LOCAL,   /* c / (m s): h_DTR^local */
    REMAT__DTR_H_NOSTALE, /* (c + cost(e*)) / m */
    REMAT__DTR_H_LRU,     /* 1 / s: least recently used first */
    REMAT__DTR_H_SIZE,    /* 1 / m: largest first */
    REMAT__DTR_H_NEXT,    /* (c + cost(e*)) / (m d) */
    REMAT__DTR_H_BELADY,  /* 1 / d: read again last first */
    REMAT__DTR_H_COUNT
} remat__dtr_heuristic;

/* When a value no longer needed directly is freed. EAGER frees it once every
 * consumer has had its first computation (DTR's eager eviction: it may
 * still be recomputed later, to recompute a consumer). LAZY keeps it
 * resident, evictable, until no pending first computation can need it even
 * through recomputations. */
typedef enum { REMAT__DTR_EAGER = 0, REMAT__DTR_LAZY = 1, REMAT__DTR_POLICY_COUNT } remat__dtr_policy;

/* About a second of planning on one core. */
#define REMAT__DTR_DEFAULT_WORK ((int64_t)100 * 1000 * 1000)

/* Options; NULL means all zeros. */
typedef struct {
    unsigned heuristics; /* bit 1u << h per heuristic to try; 0: all */
    unsigned policies;   /* bit 1u << p per policy to try; 0: both */
    /* Each (heuristic, policy) pair is simulated first at the budget, then
     * at one unit below the peak of the previous simulation (the largest
     * budget at which the outcome changes), and so on down to the floor;
     * the pairs take turns. When no limit stops this, every outcome at every
     * budget <= the budget has been seen, so the cost returned never rises
     * with the budget. */
    int max_runs;     /* simulations per pair; <= 0: no limit */
    int64_t max_work; /* values visited in all, checked between runs;
                            0: REMAT__DTR_DEFAULT_WORK; < 0: no limit */
} remat__dtr_opts;

typedef struct {
    remat__dtr_op *ops; /* owned: remat__dtr_result_free */
    int n_ops;
    double cost;        /* sum of the costs of the COMPUTE operations */
    int64_t peak;       /* max over COMPUTE v of resident size + size of v */
    int heuristic;      /* remat__dtr_heuristic of the winning simulation */
    int policy;         /* remat__dtr_policy of the winning simulation */
    int64_t sim_budget; /* budget the winning simulation ran at (<= budget) */
    int n_sims;         /* simulations run */
    int limited;        /* a limit stopped the search (max_runs or max_work) */
    /* floor: max over computed nodes v of size(v) + sizes of v's distinct
     * deps; no schedule of any planner fits a smaller budget. floor_node is
     * such a v (-1 when nothing is computed). */
    int64_t floor;
    int32_t floor_node;
    /* On REMAT_BUDGET: the smallest budget at which this planner (with these
     * options) finds a schedule, by bisection (exact when not limited);
     * 0 otherwise. */
    int64_t min_budget;
} remat__dtr_result;

/* Plans nodes[0..n) within budget. On REMAT_OK *out holds a schedule (owned
 * by the caller: remat__dtr_result_free): every node that must be computed
 * is computed at least once, first computations in index order, every value
 * is freed by the end, the peak is <= budget and the cost is the least
 * found. REMAT_BUDGET when none is found: the message and *out name the
 * smallest budget that works for this planner and the floor for any
 * schedule; out->ops is then NULL. REMAT_INVALID for a malformed DAG,
 * REMAT_NOMEM. The result depends only on the arguments. */
remat_status remat__dtr_plan(const remat__dtr_node *nodes, int n, int64_t budget, const remat__dtr_opts *opts,
                             remat__dtr_result *out);

/* Frees out->ops and zeroes *out; accepts a zeroed result. */
void remat__dtr_result_free(remat__dtr_result *out);

/* A static name for a heuristic ("dtr", "lru") or policy ("eager"). */
const char *remat__dtr_heuristic_name(int h);
const char *remat__dtr_policy_name(int p);

#endif
