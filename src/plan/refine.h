/* refine.h: a candidate schedule made better without changing what it
 * computes (refine.c), for the `optimal` strategy. */
#ifndef REMAT_REFINE_H
#define REMAT_REFINE_H

#include "schedule.h"

/* The peak bytes of sc's values (its memory plan, unplaced): its arena is
 * at least this. REMAT_UNSUPPORTED where it reads a value overwritten in
 * place. */
remat_status remat__values_peak(const remat__prog *p, const remat__schedule *sc, size_t *peak);

/* remat__values_peak, and with live (p->g->n entries, or NULL) set to 1
 * for the nodes whose output is live where the values first reach their
 * peak, 0 for the rest: only dropping one of those can lower the peak
 * (a value not live there, dropped, is held for less of the forward and
 * recomputed later, which takes nothing from what is live there). */
remat_status remat__values_peak_live(const remat__prog *p, const remat__schedule *sc, size_t *peak, uint8_t *live);

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

/* Whether sc is a schedule its step can run: with once, it recomputes
 * each node at most once; a traced step's recomputes nothing before its
 * backward starts (its framework runs the forward as written). */
int remat__runnable(const remat__prog *p, const remat__schedule *sc, int once);

/* sc without its instruction drop (a recomputation: the value kept from
 * the forward that made it instead) and the recomputations that only fed
 * it, its frees found again, in *out (the caller frees it). */
remat_status remat__without(const remat__prog *p, const remat__schedule *sc, int drop, remat__schedule *out);

/* What a relaxation step tried: sc without its instruction drop, whose
 * values peak at peak and which costs cost (less than sc). */
typedef remat_status (*remat__relax_seen)(void *ctx, int drop, size_t peak, double cost);

/* One step from sc (its values' peak and its cost given) toward keeping
 * more: of its recomputations, the one whose removal (remat__without)
 * saves the most cost per byte it adds to the peak (adding none first),
 * in *out with its index in sc (*drop), peak and cost; every removal that
 * saves something is shown to seen (may be NULL) on the way. REMAT_BUDGET
 * where none saves anything or *work (instructions built, taken from it)
 * ran out first (relax.c). */
remat_status remat__relax_step(const remat__prog *p, const remat__schedule *sc, size_t peak, double cost,
                               remat__schedule *out, int *drop, size_t *out_peak, double *out_cost, double *work,
                               remat__relax_seen seen, void *ctx);

/* One step from the levels level (its schedule's values peak and cost
 * given) toward holding less: of the values it keeps, the one whose
 * dropping (recomputed for the backward by remat__schedule_build) takes
 * the most bytes off the peak per cost it adds, in *node with the peak
 * and cost after it; every drop that lowers the peak is shown to seen on
 * the way (drop: the node). Only the nodes live marks are tried (NULL:
 * every kept one; remat__values_peak_live's are those that can lower the
 * peak). level is left as it was. REMAT_BUDGET where none lowers the
 * peak or *work ran out first (relax.c). */
remat_status remat__tighten_step(const remat__prog *p, remat_node loss, uint8_t *level, const uint8_t *live,
                                 size_t peak, double cost, int32_t *node, size_t *out_peak, double *out_cost,
                                 double *work, remat__relax_seen seen, void *ctx);

#endif
