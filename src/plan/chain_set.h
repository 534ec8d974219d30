/* chain_set.h: the chains optimal.c plans one step as (chain_set.c). */
#ifndef REMAT_CHAIN_SET_H
#define REMAT_CHAIN_SET_H

#include "chain.h"
#include "planner.h"

/* The chains cut from one step (chain_set.c): side inputs aside, none
 * aside, side inputs and skips aside; for a traced step, each also
 * without counting its parameter gradients; and twins with and without
 * the marks of the stages that drop their input. */
#define REMAT__N_CUTS 3
#define REMAT__N_CHAINS (4 * REMAT__N_CUTS)

/* The chains a step is cut into (c[0, n_ch)): cuts of them planned with
 * its parameter gradients, then as many without (a traced step's), then
 * twins (other[k]: chain k's, or -1) the other way as to the stages that
 * drop their input; skips: the chain with the skips set aside, or -1. */
typedef struct {
    int n_ch, cuts, twins, skips, drops;
    int other[2 * REMAT__N_CUTS];
} remat__chain_set;

/* Cuts r's step into the chains c[0, cs->n_ch) (each freed by the caller
 * with remat__chain_free, on failure too: c is zeroed first). */
remat_status remat__cut_chains(const remat__plan_req *r, remat__chain *c, remat__chain_set *cs);

#endif
