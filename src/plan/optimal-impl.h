/* optimal-impl.h: what optimal.c shares with optimal_relax.c (the
 * candidates it adds between the generators' ones). */
#ifndef REMAT_OPTIMAL_IMPL_H
#define REMAT_OPTIMAL_IMPL_H

#include "chain_set.h"
#include "peak_memo.h"

/* The keep-expensive (keep_cheap 0) and drop-expensive (1) candidates
 * (levels.c's remat__selective_levels), N_SELECTIVE of each. */
#define N_SELECTIVE 8

/* A chain's candidates: the DP over every budget (or NULL) and the
 * budgets at which its distinct plans are taken. */
typedef struct {
    const remat__chain *c;
    const remat__chain_tab *tab;
    int64_t *chain_at; /* chain candidate j: the DP's plan at this budget */
    int n_chain;
    int once; /* its schedules are candidates only where they recompute each op once */
} chain_cands;

typedef struct cand cand;

/* What the candidate generators share. */
typedef struct gen_ctx gen_ctx;
struct gen_ctx {
    const remat__prog *p;
    remat_node loss;
    chain_cands ch[REMAT__N_CHAINS]; /* the chain with shared side inputs set aside,
                                      * without (where there are some), and with the
                                      * skips into its boundaries set aside too
                                      * (where there are some), each with and, in a
                                      * traced step, without the parameter gradients:
                                      * each chain's plans are candidates, so neither
                                      * carrying nor counting the gradients loses */
    int n_ch;
    int n_main; /* the chain generator's are ch[0, n_main), chain-drop's the rest */
    const remat__train_dag *dag;
    int64_t dfloor, dtop; /* the step DAG's floor and total */
    int32_t *marks;       /* remat_checkpoint marks at level 0, creation order */
    int n_marks;
    int regions;            /* a traced step with checkpoint regions: manual is their one schedule */
    int gi_keep, gi_drop;   /* the keep-expensive and drop-expensive generators */
    remat__peak_memo *memo; /* the peaks measured in this planning (peak_memo.h) */
    /* candidate k's schedule, sunk and pruned where it is a sunk or pruned
     * one (optimal.c's, for optimal_relax.c); the instructions that took
     * are added to *spent (or NULL) */
    remat_status (*make)(const gen_ctx *x, const cand *k, remat__schedule *sc, double *spent);
};

/* A candidate, by what it costs and what it holds at least. */
struct cand {
    int gi, j, count;
    double cost;
    size_t lb;    /* held bytes, at least: the peak of its values and the blocks */
    size_t held;  /* placed; 0 until then */
    double prune; /* > 0: the generator's schedule pruned (prune) with this
                     much work allowed, which makes it again the same */
    int sink;     /* its recomputations moved late first (sink) */
    /* relaxed (optimal_relax.c): from base (the candidate it came from,
     * made), these recomputations given back, steps of them in order, then
     * last; tightened (base NULL): the selective levels gi, j (or, where
     * mask is set, the nodes a relaxed schedule recomputes: gi, j are its
     * source's) with these moves made (remat__tighten_apply; -1: neither;
     * an exchange's, optimal_exchange.c: mask as it is, last -1) */
    const remat__schedule *base;
    const uint8_t *mask;
    const int *relax;
    int steps, last;
    /* then split (optimal_relax.c, remat__resplit): these moves, {at, node,
     * depth} each, made in order on the schedule above */
    const int32_t *split;
    int splits;
};

/* A frontier candidate's relaxation, or a tightening: the candidate made
 * (the relaxed ones' base; zero until then, and for a tightening), the
 * steps taken from it, and for a tightening of a relaxed schedule, the
 * level mask it starts from. */
typedef struct {
    remat__schedule base;
    int *path, steps;
    uint8_t *mask;
    cand src; /* the candidate relaxed (a relaxation, a tightening of one) */
} relaxation;

/* qsort orders (optimal_relax.c): by cost, then by what a candidate holds
 * at least; by what it holds at least, then by cost. */
int remat__optimal_by_cost(const void *a, const void *b);
int remat__optimal_by_lb(const void *a, const void *b);

/* Appends k to *cands (*nc of them, room for *cap, doubled when full). */
remat_status remat__optimal_append(cand **cands, int *nc, int *cap, cand k);

/* A tightened candidate's schedule, unrefined (optimal_relax.c). */
remat_status remat__optimal_tightened(const gen_ctx *x, const cand *k, remat__schedule *sc);
/* The keep-expensive and drop-expensive levels tightened step by step
 * (moves up to depth, relax.c), as candidates added to *cands (*nc of
 * them); tight[*used, ...): their steps, *used advanced. */
remat_status remat__optimal_tighten(const gen_ctx *x, size_t held_outside, int depth, cand **cands, int *nc,
                                    relaxation *tight, int *used);
/* The schedules between the frontier's candidates, relaxed, as candidates;
 * rel (as many as *nc on entry): the relaxations, freed by the caller. */
remat_status remat__optimal_relax(const gen_ctx *x, size_t held_outside, cand **cands, int *nc, relaxation *rel);
/* The relaxations' schedules (rel[0, n_rel)), each tightened step by step
 * again, as candidates; *out (*n_out of them): their steps, freed by the
 * caller. */
remat_status remat__optimal_retighten(const gen_ctx *x, size_t held_outside, cand **cands, int *nc,
                                      const relaxation *rel, int n_rel, relaxation **out, int *n_out);

/* From each candidate on the frontier of what they hold and cost, the
 * level mask of what it recomputes with one of its costliest
 * recomputations given back and tightened again to its peak, where that
 * costs less (optimal_exchange.c), as candidates (sunk); *masks (*n_masks
 * of them): their masks, freed by the caller. */
remat_status remat__optimal_exchange(const gen_ctx *x, size_t held_outside, cand **cands, int *nc, uint8_t ***masks,
                                     int *n_masks);

/* From each candidate on the frontier of what they hold and cost, the
 * schedules that make a value held across the peak again, step by step
 * (remat__split_step), as candidates; *paths (*n_paths of them): their
 * moves, freed by the caller. With exchanged, from the frontier's
 * exchanged candidates only (the second splitting, after the exchange). */
remat_status remat__optimal_split(const gen_ctx *x, size_t held_outside, int exchanged, cand **cands, int *nc,
                                  int32_t ***paths, int *n_paths);

#endif
