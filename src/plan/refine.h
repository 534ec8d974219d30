/* refine.h: a candidate schedule made better without changing what it
 * computes (refine.c), for the `optimal` strategy. */
#ifndef REMAT_REFINE_H
#define REMAT_REFINE_H

#include "peak_memo.h"
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

/* remat__values_peak, found in memo where it was measured before (memo
 * NULL: measured). */
remat_status remat__values_peak_memo(const remat__prog *p, const remat__schedule *sc, size_t *peak,
                                     remat__peak_memo *memo);

/* The node whose output or aux is instruction b's j-th read (j from 0 to
 * its node's input count), or -1 where there is none: its inputs (every
 * one for a forward, those it saved for a backward), then its own node,
 * for a backward that saved its output or aux. */
int32_t remat__read_of(const remat_graph *g, const remat__instr *b, int j);

/* Splitting (nested recomputation): a value the schedule holds across its
 * peak, made again just before its first read after the peak, so that
 * the instance before it goes after its last read before. A move is
 * {at, node, depth}: the nodes remat__split_group lists (node, and the
 * forward values up to depth inputs above it) recomputed, in creation
 * order, before sc's instruction at; the recomputations nothing reads
 * any more dropped and the frees found again, in *out (the caller frees
 * it). Replayed on the same schedule, a move makes the same schedule. */
remat_status remat__resplit(const remat__prog *p, const remat__schedule *sc, const int32_t move[3],
                            remat__schedule *out);
int remat__split_group(const remat_graph *g, int32_t node, int depth, int32_t *group, uint8_t *in);

/* The index of sc's q-th recomputation (a forward that is not a node's
 * first), or -1. */
int remat__nth_recompute(const remat__schedule *sc, int q);

/* Whether sc copies values to the host and back (offload). */
int remat__offloads(const remat__schedule *sc);

/* Prunes *sc in place: its recomputations that free nothing at its peak
 * dropped, while *work (instructions built) lasts; the work used is taken
 * from *work. A schedule that offloads is left as it is. Peaks measured
 * before are found in memo (or NULL). */
remat_status remat__prune(const remat__prog *p, remat__schedule *sc, double *work, remat__peak_memo *memo);

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

/* A tightening move: move = node + d * n (n = p->g->n nodes) drops node
 * and the kept forward values up to d inputs above it (d from 0 to
 * REMAT__TIGHTEN_DEPTH), so that a cheap chain is recomputed whole from
 * the value before it: BatchNorm's output dropped alone is recomputed from
 * the convolution's, which the backward keeps anyway, but ReLU's dropped
 * alone needs BatchNorm's kept for it, as many bytes, and frees nothing
 * until both go. */
#define REMAT__TIGHTEN_DEPTH 4

/* The schedule of the levels level (remat__schedule_build), sunk with
 * sink: its values peak in *pk, its cost in *c and, where live is not
 * NULL, the nodes live at the peak (remat__values_peak_live); the
 * instructions built are taken from *work. REMAT_UNSUPPORTED where it
 * cannot run (remat__runnable under p->recompute_once) or reads a value
 * overwritten in place. Where live is NULL, a mask measured before is
 * found in memo (or NULL), its work taken from *work as when it was
 * built. */
remat_status remat__level_peak(const remat__prog *p, remat_node loss, const uint8_t *level, int sink, size_t *pk,
                               double *c, uint8_t *live, double *work, remat__peak_memo *memo);

/* Drops move's nodes from level (set to REMAT__LEVEL_NONE), which lists
 * them in group (room for p->g->n); returns how many. Replayed on the same
 * levels in the same order, moves drop the same nodes. */
int remat__tighten_apply(const remat_graph *g, uint8_t *level, int32_t move, int32_t *group);

/* One step from the levels level (its schedule's values peak and cost
 * given) toward holding less: of the moves above from the values it
 * keeps, the one whose dropping (recomputed for the backward by
 * remat__schedule_build) takes the most bytes off the peak per cost it
 * adds, in *move with the peak and cost after it; every move that lowers
 * the peak is shown to seen on the way (drop: the move). Only moves from
 * the nodes live marks are tried (NULL: every kept one;
 * remat__values_peak_live's are those that can lower the peak), up to
 * depth, and a deeper move only where it drops more nodes than the one
 * before (group: room for p->g->n nodes, the moves' scratch). With sink,
 * each move's schedule is measured with its recomputations sunk
 * (remat__sink), as the exchange's candidates are made; masks measured
 * before are found in memo (or NULL). level is left as it was. REMAT_BUDGET where none lowers the peak or *work ran out
 * first (relax.c). */
remat_status remat__tighten_step(const remat__prog *p, remat_node loss, uint8_t *level, const uint8_t *live, int depth,
                                 int sink, int32_t *group, size_t peak, double cost, int32_t *move, size_t *out_peak,
                                 double *out_cost, double *work, remat__relax_seen seen, void *ctx,
                                 remat__peak_memo *memo);

/* One splitting step from sc (its cost given): of the moves that make a
 * value held across the peak again before its first read after it (with
 * the inputs up to depth above it, a level deeper only where the move
 * before does not lower the peak), the one that takes the most bytes off
 * the peak per cost it adds, in move, with the peak and cost after it.
 * Where none lowers the peak, the cheapest that leaves it where it is but
 * reaches it fewer times (runs of the memory plan's ticks at the peak: a
 * peak reached at two points falls only when both are split, one step
 * each), so a chain of steps ends. Tries measured before are found in
 * memo (or NULL). REMAT_BUDGET where no move does either or *work ran out
 * first (relax.c). */
remat_status remat__split_step(const remat__prog *p, const remat__schedule *sc, int depth, double cost, int32_t move[3],
                               size_t *out_peak, double *out_cost, double *work, remat__peak_memo *memo);

#endif
