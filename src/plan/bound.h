/* bound.h: the least any schedule of a step can hold (bound.c), beside
 * what optimal finds: how far its floor can still be from the best one. */
#ifndef REMAT_BOUND_H
#define REMAT_BOUND_H

#include "schedule.h"

/* A lower bound of the peak of any schedule's values (the arena, without
 * the resident blocks), from the store-all schedule `all`: the largest,
 * over its instructions, of the gradients and workspace live there and
 * the forward values that instruction reads or makes. */
remat_status remat__peak_bound(const remat__prog *p, const remat__schedule *all, size_t *bound);

/* The same from the step's store-all schedule, built here (to loss). */
remat_status remat__step_bound(const remat__prog *p, remat_node loss, size_t *bound);

#endif
