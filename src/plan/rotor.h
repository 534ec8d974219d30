/* rotor.h: the chain planner with several storage options per stage
 * (PLANNING.md sections 3 and 7, "selective" recomputation inside a stage).
 *
 * A stage's option says what its Fe keeps for its backward: option 0 is
 * the plain "keep everything" one; another may keep less (a smaller
 * x-bar_{i+1}) and recompute the rest during B_i, which then costs more
 * and holds the recomputed values (bwd_tmp) while it runs. The DP picks,
 * for every Fe_i it schedules, the option that is best there; the chosen
 * option is in the plan's Fe_i and B_i (remat_chain_op.option). The public
 * remat_chain_solve and remat_chain_simulate are this with one option per
 * stage. Plans are destroyed with remat_chain_plan_destroy.
 */
#ifndef REMAT_PLAN_ROTOR_H
#define REMAT_PLAN_ROTOR_H

#include "remat.h"

#include <stdint.h>

typedef struct {
    int64_t saved;   /* omega_xbar[i+1] of this option: what Fe with this option keeps (>= the stage's output) */
    double backward; /* u_b of this option: the stage's backward plus any recomputation it needs */
    int64_t bwd_tmp; /* extra bytes live during B_i with this option (values recomputed for it, gradients
                      * in flight, workspace) beyond y_i, y_{i+1}, x-bar_{i+1} and x_i */
    int64_t fe_tmp;  /* extra bytes live during Fe_i with this option beyond x_i and x-bar_{i+1}
                      * (values not kept, workspace) */
} remat__stage_option;

#define REMAT__MAX_OPTIONS 6

/* The most stages a chain may have (the choice table stores a stage in an
 * int16). Long before that, the planner refuses a chain whose table or
 * work would be too large (rotor.c, plan_cost), naming both. */
#define REMAT__CHAIN_MAX_STAGES 32766

typedef struct {
    double forward;  /* u_f */
    int64_t input;   /* omega_x[i] */
    int64_t fwd_tmp; /* extra bytes live during Fn_i and CF_i beyond x_i and x_{i+1} (PLANNING.md 3.1) */
    int64_t grads;   /* bytes B_i makes that stay to the step's end, beside every later operation (a traced
                      * step's parameter gradients: memplan.c); its bwd_tmp counts them as B_i makes them.
                      * rotor's DP and simulator hold them; the offload DP (offload_chain.c: optimal offloads no
                      * traced step) and its simulator do not yet */
    int drop_input;  /* stage i >= 1 whose input x_i no backward reads (neither B_{i-1} nor B_i) and no stage
                      * after i: x_i is a value of its own beside xbar_i (Fe_{i-1} makes both; xbar_i is the
                      * option's saved less x_i), and Fe_i, the stage's last forward before B_i, frees it
                      * (rotor_sim.c); 0: x_i stays to B_i, inside xbar_i where Fe_{i-1} made it */
    int n_options;   /* 1..REMAT__MAX_OPTIONS; option 0 is the plain "keep everything" one */
    remat__stage_option opt[REMAT__MAX_OPTIONS];
} remat__stage_ex;

/* As remat_chain_solve (same budget, slots, floor and errors), choosing an
 * option per Fe_i/B_i pair; errors name "stage i, option o" for a bad
 * option when the stage has several. */
remat_status remat__chain_solve_ex(const remat__stage_ex *st, int n, int64_t output, int64_t budget, int slots,
                                   remat_chain_plan **out);

/* As remat_chain_simulate: Fe_i with option o makes x-bar_{i+1} of
 * opt[o].saved bytes; B_i with option o costs opt[o].backward, holds
 * opt[o].bwd_tmp more at its peak, and needs the x-bar_{i+1} of the same
 * option (REMAT_INVALID otherwise). Fe and B need an option in range; the
 * other operations ignore theirs. */
remat_status remat__chain_simulate_ex(const remat__stage_ex *st, int n, int64_t output, const remat_chain_op *ops,
                                      int nops, double *cost, int64_t *peak);

/* The DP's table over every budget at once, for a planner that wants
 * plans at many budgets (optimal.c): slots of a fixed `unit` bytes, rows
 * up to `top` bytes (x_0 included), so the plan at any budget up to top is
 * a rebuild, and a larger budget never gets a costlier plan (its feasible
 * set contains the smaller one's). Built once (O(slots n^3)); refused
 * like remat__chain_solve_ex when its tables or work would be too large.
 * The caller owns the table (remat__chain_tab_free). */
typedef struct remat__chain_tab remat__chain_tab;
remat_status remat__chain_tab_build(const remat__stage_ex *st, int n, int64_t output, int64_t unit, int64_t top,
                                    remat__chain_tab **out);
void remat__chain_tab_free(remat__chain_tab *t);
/* The least budget (bytes, a multiple of the unit) with a plan, or -1
 * when none up to top. */
int64_t remat__chain_tab_floor(const remat__chain_tab *t);
/* The plan at `budget` bytes (REMAT_BUDGET below the floor); the caller
 * owns it. */
remat_status remat__chain_tab_plan(const remat__chain_tab *t, int64_t budget, remat_chain_plan **out);

/* Validates a single-option chain as remat_chain_solve does: at least one
 * stage, sizes >= 0, costs finite >= 0, each stage's `saved` at least its
 * output; errors name the stage and field. */
remat_status remat__chain_check(const remat_stage *st, int n, int64_t output);

/* rotor_sim.c's checks and simulator, for the solvers: the checks of a
 * chain with options (remat__chain_check's, each option's saved and
 * bwd_tmp included); the one-option stages of a public chain (malloc'd;
 * NULL with the error set when out of memory); and the simulation of an
 * operation list without the checks (cost and peak as
 * remat__chain_simulate_ex; *complete, when not NULL, set when y_0 is
 * resident at the end). */
remat_status remat__chain_check_ex(const remat__stage_ex *st, int n, int64_t output);
remat__stage_ex *remat__chain_to_ex(const remat_stage *st, int n);
remat_status remat__chain_sim_run(const remat__stage_ex *st, int n, int64_t output, const remat_chain_op *ops, int nops,
                                  double *cost_out, int64_t *peak_out, int *complete);

/* A plan: its operations and what the simulator made of them (rotor_sim.c
 * holds its accessors). */
struct remat_chain_plan {
    remat_chain_op *ops; /* owned, n_ops entries */
    int n_ops;
    double cost;  /* simulated */
    int64_t peak; /* simulated, in the caller's units */
};

/* A plan from its operations (copied), its cost and its peak: for other
 * planners over the chain (offload_chain.c). NULL, with the error set,
 * when out of memory. The caller owns it (remat_chain_plan_destroy). */
remat_chain_plan *remat__chain_plan_make(const remat_chain_op *ops, int n, double cost, int64_t peak);

#endif
