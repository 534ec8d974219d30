/* planner.h: the planner contract. A planner (one per strategy, the
 * table in strategy.c) takes a request (remat__plan_req: the program, the
 * loss, the budget, data parallelism's buckets, offload's host) and
 * returns a schedule with its placed memory plan (remat__planned), which
 * the executor runs (src/exec). planner.c finishes and summarizes what a
 * planner made; memplan.h is the memory plan itself.
 */
#ifndef REMAT_PLAN_PLANNER_H
#define REMAT_PLAN_PLANNER_H

#include "memplan.h"

/* A schedule with its placed memory plan: what a planner returns and the
 * executor runs. */
typedef struct {
    remat__schedule sc;
    remat__memplan mem;
    int valid;
} remat__planned;

void remat__planned_free(remat__planned *pl);

/* The gradient buckets of data parallelism (dist/dp_plan.c): the planners put
 * bucket b's REDUCE after the last backward that writes a gradient of one
 * of its parameters (remat__schedule_add_reduces). */
typedef struct {
    const int32_t *bucket_of; /* per node: its bucket, -1 for no parameter */
    int nb;
    int at_end; /* every REDUCE after the last instruction */
} remat__buckets;

/* The planners, one per strategy (strategy.c), indexed by remat_strategy:
 * a name, a one-line summary, and the function that plans the training
 * step: its schedule, with the REDUCEs of `buckets` when given, and that
 * schedule's placed memory plan (NULL for auto, which the session
 * resolves). Adding a strategy is one entry here and one enum value in
 * remat.h. */
typedef struct {
    const remat__prog *p;
    remat_node loss;
    size_t budget;                 /* 0: none */
    const remat_mem_stats *start;  /* live bytes before the step */
    size_t held_outside;           /* resident blocks as allocated */
    size_t *floor;                 /* optimal, when nothing fits: the
                                    * smallest feasible budget (or NULL) */
    const remat__buckets *buckets; /* data parallelism's, or NULL */
    size_t host_budget;            /* optimal: host bytes offload may
                                    * hold (0: no offload) */
    double host_bandwidth;         /* the host link in the cost model's
                                    * units: bytes per unit of cost */
    double host_latency;           /* and units of cost per copy */
} remat__plan_req;
typedef struct {
    const char *name, *summary;
    remat_status (*build)(const remat__plan_req *r, remat__planned *out);
} remat__planner;
extern const remat__planner remat__planners[REMAT_STRATEGY_COUNT];

/* Finishes a planner's schedule (planner.c): inserts the REDUCEs of r->buckets, then
 * builds and places its memory plan into out (which takes the schedule
 * over, also on failure). */
remat_status remat__plan_finish(const remat__plan_req *r, remat__schedule *sc, remat__planned *out);

/* Summarizes a planned step (planner.c): the predicted peaks (the fold
 * over its memory plan from `start`), its arena and what it holds with
 * `held_outside`, and its cost. */
remat_status remat__schedule_summary(const remat__prog *p, const remat__planned *pl, const remat_mem_stats *start,
                                     size_t held_outside, remat_plan_summary *out);

/* The optimal planner (optimal.c): among the candidate schedules, the one
 * of least cost whose placed arena and `held_outside` fit `budget`
 * (finished by remat__plan_finish); REMAT_BUDGET when none fits, setting
 * *r->floor. */
remat_status remat__optimal_plan(const remat__plan_req *r, remat__planned *out);

/* Offload as the third choice (offload_plan.c): with r->host_budget, the
 * least-cost chain plan with keep, recompute or offload per stage
 * (remat__offload_solve) at the budget, when it offloads something, costs
 * less than `best` (the cost of the best plan without offload that fits,
 * or infinity) and its placed arenas fit the budget and the host budget:
 * then it is finished into *out and *won set. Tried at a few budgets
 * below r's, since the chain model's peak is an estimate. */
remat_status remat__offload_plan(const remat__plan_req *r, double best, remat__planned *out, int *won);

#endif
