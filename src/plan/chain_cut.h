/* chain_cut.h: the stage boundaries of optimal's chain (chain_cut.c). */
#ifndef REMAT_PLAN_CHAIN_CUT_H
#define REMAT_PLAN_CHAIN_CUT_H

#include "schedule.h"

#include <stdint.h>

/* The boundaries of the chain of p's step: the op nodes among needed[]
 * (g->n flags) that are articulation points or points of an independent
 * branch, with aside 1 once the shared side inputs are set aside, with
 * aside 2 once the skip connections into those boundaries are set aside
 * as well (the top of chain_cut.c). Their creation indices, ascending, go
 * to out (g->n entries) and their count to *n_points; the number of
 * values set aside (side inputs and skips) to *n_side (0 without aside);
 * reach[u] is left as u's last op consumer (u itself when none; -1 for a
 * leaf or a node the loss does not need); scratch holds g->n entries.
 * REMAT_NOMEM when out of memory. */
remat_status remat__chain_points(const remat__prog *p, const uint8_t *needed, int aside, int32_t *out, int32_t *reach,
                                 int32_t *scratch, int *n_points, int *n_side);

#endif
