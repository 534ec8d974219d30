/* refine.h: a candidate schedule made better without changing what it
 * computes (refine.c), for the `optimal` strategy. */
#ifndef REMAT_REFINE_H
#define REMAT_REFINE_H

#include "schedule.h"

/* The peak bytes of sc's values (its memory plan, unplaced): its arena is
 * at least this. REMAT_UNSUPPORTED where it reads a value overwritten in
 * place. */
remat_status remat__values_peak(const remat__prog *p, const remat__schedule *sc, size_t *peak);

/* The index of sc's q-th recomputation (a forward that is not a node's
 * first), or -1. */
int remat__nth_recompute(const remat__schedule *sc, int q);

/* Whether sc copies values to the host and back (offload). */
int remat__offloads(const remat__schedule *sc);

/* Prunes *sc in place: its recomputations that free nothing at its peak
 * dropped, while *work (instructions built) lasts; the work used is taken
 * from *work. A schedule that offloads is left as it is. */
remat_status remat__prune(const remat__prog *p, remat__schedule *sc, double *work);

/* sc with each recomputation moved as late as it can go, in *out (the
 * caller frees it); the work used is taken from *work. */
remat_status remat__sink(const remat__prog *p, const remat__schedule *sc, remat__schedule *out, double *work);

#endif
