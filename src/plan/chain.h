/* chain.h: the chain model (chain.c): a training step cut into stages,
 * each measured with its storage options, for the chain DPs (rotor.c,
 * offload_chain.c) that `optimal` (optimal.c) plans with. */
#ifndef REMAT_PLAN_CHAIN_H
#define REMAT_PLAN_CHAIN_H

#include "rotor.h"
#include "schedule.h"

/* A stage's storage options, by kind (optimal.c's header comment): keep
 * everything the backward reads, keep the expensive products, drop large
 * aux, both. */
enum { OPT_ALL = 0, OPT_EXPENSIVE, OPT_AUX, OPT_BOTH, N_OPT };

/* A chain: its stages, over the value op nodes in creation order. */
typedef struct {
    int32_t *nodes; /* value op nodes, creation order; stage i = [off[i], off[i+1]) */
    int32_t *off;
    int n_stages;
    int32_t *inputs; /* input leaves the loss needs */
    int n_inputs;
    double *fwd;         /* per stage: forward cost (for merging) */
    remat__stage_ex *ex; /* per stage: the options the DP chooses from */
    uint8_t *opt_of;     /* per stage and option index: which of OPT_* it is */
    uint8_t *sel;        /* per node: bit o set when option o recomputes it before the stage's backward */
    int64_t output;
    int n_side; /* values set aside when it was cut: side inputs, skips (chain_cut.c) */
} remat__chain;

/* Cuts p's step into stages (with aside 1, its shared side inputs set
 * aside; with aside 2, the skips into the boundaries as well:
 * chain_cut.c) and measures them into *c (remat__chain_free, also on
 * failure). */
remat_status remat__chain_init(const remat__prog *p, remat_node loss, int aside, remat__chain *c);
/* The same, counting a traced step's parameter gradients (chain.c's
 * header) only with grads set, and marking the stages whose input no
 * backward reads (drop_input, rotor.h) only with drops set:
 * remat__chain_init sets both; optimal.c plans the chain without each too,
 * so that neither loses a plan. */
remat_status remat__chain_init_model(const remat__prog *p, remat_node loss, int aside, int grads, int drops,
                                     remat__chain *c);
/* Whether some stage of c drops its input. */
int remat__chain_drops(const remat__chain *c);
void remat__chain_free(remat__chain *c);

/* An expensive product (linear, conv; attention is one): what the
 * selective options keep. */
int remat__expensive(const remat_graph *g, const remat__node *n);

/* The chain `optimal` plans over: its stages with their options (malloc'd
 * into *st), their count, the loss input's bytes, and each stage's first
 * node (malloc'd into *first when not NULL). The caller frees both. */
remat_status remat__optimal_chain(const remat__prog *p, remat_node loss, remat__stage_ex **st, int *n, int64_t *output,
                                  int32_t **first);

/* The schedule of a chain operation sequence: inputs first, then per
 * operation the FWD or BWD instructions of its stage's nodes (a B with an
 * option that recomputes runs those FWDs first); frees follow from the
 * last use of each value instance. An offloaded Fe (option
 * REMAT__OFFLOAD_OPTION, read as option 0) copies what its B reads out
 * and back (chain.c's offload_points). The caller owns *out
 * (remat__schedule_free); nothing is left in it on failure. */
remat_status remat__chain_emit(const remat__prog *p, const remat__chain *c, const remat_chain_plan *plan,
                               remat_node loss, remat__schedule *out);

/* The schedule of a plan of the chain (remat__optimal_chain), offloaded
 * stages' copies included. */
remat_status remat__chain_schedule(const remat__prog *p, remat_node loss, const remat_chain_plan *plan,
                                   remat__schedule *out);

/* What a schedule costs under the cost model: its forwards (a
 * recomputation at its own cost), backwards and exposed copy time
 * (sc->stall). */
double remat__schedule_cost(const remat__prog *p, const remat__schedule *sc);

#endif
