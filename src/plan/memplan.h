/* memplan.h: the memory plan of a schedule.
 *
 * One liveness walk over a schedule lists every buffer the step takes, in
 * the order it takes them: each computed value's output and aux, each
 * gradient value, each kernel's workspace. An event records its bytes,
 * category, the value it holds (REMAT__VAL: its node and its role, output,
 * aux or gradient; -1 for a kernel's workspace), the instructions that take
 * it and give it back, and its lifetime in ticks (one tick per take and per
 * give-back, in execution order). The peaks per category are a fold over
 * the events; the arena placement (an offset per event) is computed from
 * the same list, before anything runs. The executor binds: it walks the
 * ticks, giving each event's value its planned bytes of the arena, and
 * runs a kernel when its workspace is taken; it never works out a size or
 * a lifetime itself. One walker, so the predicted and measured peaks
 * cannot drift apart, and every backend and every rank places memory the
 * same way.
 */
#ifndef REMAT_MEMPLAN_H
#define REMAT_MEMPLAN_H

#include "schedule.h"

/* Arena offsets and sizes are multiples of this (cuBLAS and cuDNN want
 * 256-byte aligned buffers; the CPU kernels want 64). */
#define REMAT__ARENA_ALIGN ((size_t)256)

/* b bytes rounded up to the arena's alignment: what a tensor takes in the
 * arena and in the session's resident blocks. */
static inline size_t remat__arena_rounded(size_t b) { return (b + REMAT__ARENA_ALIGN - 1) & ~(REMAT__ARENA_ALIGN - 1); }

/* What an event's buffer holds when it is taken. */
enum {
    REMAT__FILL_NONE = 0, /* written by its kernel */
    REMAT__FILL_ZERO,     /* zeros: a gradient that backwards accumulate into */
    REMAT__FILL_ONE       /* 1.0f: the loss's gradient, the backward's seed */
};

typedef struct {
    size_t bytes;   /* what the executor takes */
    int64_t off;    /* arena offset once placed, -1 before */
    int32_t value;  /* the value it holds (REMAT__VAL: node and role), -1
                       for the workspace of the kernel its instruction runs */
    int32_t ins;    /* the instruction that takes it */
    int32_t ins1;   /* the instruction that gives it back (the schedule's
                       length: at the step's end) */
    int32_t t0, t1; /* ticks at which it is taken and given back */
    uint8_t cat;    /* remat_mem */
    uint8_t fill;   /* REMAT__FILL_* */
} remat__mev;

typedef struct {
    remat__mev *ev; /* (n) in the order the executor takes them */
    int32_t n;
    int32_t ticks;      /* 2 n */
    int32_t *tick;      /* (ticks) event of each tick, ~event for a give-back */
    int64_t live;       /* the device's bytes taken and not given back, as
                           the walk goes (host events apart) */
    int64_t peak;       /* the most of live, -1 before any event */
    int32_t peak_tick;  /* the first tick that reached it, -1 none */
    uint32_t *din;      /* (n_ins) per instruction: the inputs whose gradients
                       a backward writes (bit j: input j), each into its
                       gradient value's event, or, for a parameter outside a
                       traced step, into the parameter's gradient block */
    int32_t n_ins;      /* the schedule's length */
    size_t arena;       /* bytes of the placed arena; 0 before placement */
    size_t host_arena;  /* bytes of the placed host arena: the events of
                          category REMAT_MEM_HOST (offloaded values), placed
                          apart from the device's */
    const char *placer; /* static: the placement that won ("by-size",
                           "in-order", "per-tensor"); NULL before placement */
    uint8_t per_tensor; /* a traced step (graph file): its framework
                           allocates tensor by tensor, so there is no
                           arena to place; its "arena" is the peak of the
                           live bytes of its values */
} remat__memplan;

/* Lists the allocation events of running s. Checks the schedule on the way
 * (REMAT_INTERNAL naming the instruction when a value is used before it is
 * computed, or computed while resident). Every event is given back within
 * the schedule: schedules free every value after its last use. The caller
 * frees *out (remat__memplan_free), also on failure. */
remat_status remat__memplan_build(const remat__prog *p, const remat__schedule *s, remat__memplan *out);
void remat__memplan_free(remat__memplan *m);

/* Peak bytes per category of running the plan from `start` (the live
 * bytes of parameters, gradients and optimizer state): a fold over the
 * ticks. */
void remat__memplan_peaks(const remat__memplan *m, const remat_mem_stats *start, remat_mem_stats *out);

/* The first tick at which the device's live bytes (every category but
 * the host's) reach their peak, which goes to *peak; -1 without ticks. */
int32_t remat__memplan_peak_tick(const remat__memplan *m, int64_t *peak);

/* Places every event in one arena, those of category REMAT_MEM_HOST in
 * a host arena apart (a per_tensor plan: no placement, the
 * arena is the values' peak): two placements, the better kept (the
 * smaller arena; the in-order one alone beyond a size where by-size's
 * quadratic pass would be slow):
 * - by-size: largest first, each at the lowest-waste gap between the
 *   placed events whose lifetimes overlap its own (or above them all);
 * - in-order: the events in tick order through a best-fit free list with
 *   coalescing, as a real allocator would serve them.
 * Sets ev[i].off, m->arena and m->placer. */
remat_status remat__memplan_place(remat__memplan *m);

/* Builds and places the memory plan of s (remat__memplan_build, then
 * remat__memplan_place). The caller frees *out, also on failure. */
remat_status remat__memplan_make(const remat__prog *p, const remat__schedule *s, remat__memplan *out);

/* Checks a placement independently of how it was made: every event lies
 * inside the arena at an aligned offset, and no two events whose
 * lifetimes overlap share a byte (a sweep over the ticks with the live
 * events kept sorted by offset). REMAT_INTERNAL naming the two events. */
remat_status remat__memplan_verify(const remat__memplan *m);

/* Predicts the peak bytes per category of running s, starting from the
 * live bytes in `start` (parameters, gradients, optimizer state): the
 * peaks of its memory plan (memplan.c). */
remat_status remat__simulate(const remat__prog *p, const remat__schedule *s, const remat_mem_stats *start,
                             remat_mem_stats *out);

#endif
