/* offload.h: offloading kept values to host memory, as a planner choice.
 *
 * Two parts. The copy timeline (offload.c): compute operations run in
 * order on one stream; copies run in order on one copy engine, beside
 * them; a copy may start once a given operation has ended and must be
 * done before another starts. Its answer is exact: each operation's and
 * each copy's start and end, the exposed (stall) time, and the copy bytes
 * each operation holds on the device.
 *
 * The chain with offload (offload_chain.c): rotor's persistent chain
 * model (rotor.h) where a stage's Fe may also keep its option-0 xbar on
 * the host: after Fe_i the part of xbar_{i+1} beyond x_{i+1} is copied out
 * while the next operation runs, and copied back while the operation
 * before B_i runs. Its DP chooses keep, recompute or offload per stage
 * under a device budget and a host budget; its simulator is exact
 * (the timeline above gives the stalls and in-flight bytes).
 */
#ifndef REMAT_PLAN_OFFLOAD_H
#define REMAT_PLAN_OFFLOAD_H

#include "rotor.h"
#include "schedule.h"

#include <stddef.h>
#include <stdint.h>

/* A host link: bytes per second each way and a fixed latency per copy. */
typedef struct {
    double bandwidth; /* bytes per second, > 0 */
    double latency;   /* seconds per copy, >= 0 */
} remat__link;

/* Seconds one copy of `bytes` takes on the link. */
double remat__copy_seconds(remat__link link, int64_t bytes);

typedef enum {
    REMAT__COPY_OUT, /* device to host: its device bytes are freed when it ends */
    REMAT__COPY_IN   /* host to device: its device bytes are allocated when it is issued */
} remat__copy_dir;

typedef struct {
    remat__copy_dir dir;
    double seconds; /* its duration on the copy engine, >= 0 */
    int64_t bytes;  /* device bytes it frees (out) or allocates (in) */
    int after;      /* it may start once operation `after` has ended (-1: at time 0) */
    int before;     /* operation `before` waits until it is done (n_ops: the end of the step) */
} remat__copy;

typedef struct {
    double start, end;
} remat__span;

/* The timeline of n_ops compute operations of durations dur[] and the
 * copies (in the order the engine serves them: `after` non-decreasing,
 * after < before). Operation k starts when operation k-1 and every copy
 * with before == k have ended; copy c starts when operation c.after and
 * copy c-1 have ended. Fills ops[n_ops] and cps[n_copies] (either may be
 * NULL), *makespan (the last end) and *stall (makespan minus the sum of
 * dur: the exposed copy time). held[n_ops] (may be NULL) gets the copy
 * bytes operation k holds on the device beyond what the caller counts:
 * an out copy's while k > after and k starts before the copy ends, an in
 * copy's while after < k < before (from `before` on they are the
 * consumer's). REMAT_INVALID names a copy out of order or out of range. */
remat_status remat__copy_timeline(const double *dur, int n_ops, const remat__copy *copies, int n_copies,
                                  remat__span *ops, remat__span *cps, int64_t *held, double *makespan, double *stall);

/* ------------------------------------------------------ chain with offload */

/* The option number of an Fe_i / B_i pair that keeps option 0's xbar_{i+1}
 * on the host (remat_chain_op.option). */
#define REMAT__OFFLOAD_OPTION 64

/* What a chain schedule with offload costs and holds. */
typedef struct {
    double compute;    /* the operations' costs (as remat__chain_simulate_ex) */
    double stall;      /* exposed copy time */
    double cost;       /* compute + stall */
    int64_t peak;      /* device bytes at the peak, copies in flight included */
    int64_t host_peak; /* host bytes at the peak */
    int64_t host_out;  /* bytes copied out (each offloaded xbar once) */
    int offloaded;     /* stages whose Fe offloaded */
} remat__offload_result;

/* Simulates ops on the chain as remat__chain_simulate_ex does, with an
 * offloaded Fe_i/B_i pair (option REMAT__OFFLOAD_OPTION, stage i <= n-2,
 * option 0's sizes and costs): after Fe_i, saved - x_{i+1} bytes go out on
 * the copy engine (issued at Fe_i's end, needed by nothing until B_i) and
 * come back in a copy issued when the operation before B_i starts; B_i
 * waits for it. The device bytes are freed when the out copy ends and
 * allocated when the in copy is issued (remat__copy_timeline). Operation
 * durations are their costs (the loss's 0). REMAT_INVALID names an
 * operation that cannot run. */
remat_status remat__offload_simulate(const remat__stage_ex *st, int n, int64_t output, remat__link link,
                                     const remat_chain_op *ops, int nops, remat__offload_result *out);

/* The least-cost persistent schedule with keep, recompute or offload per
 * stage, within `budget` device bytes and `host_budget` host bytes, on
 * `slots` device slots (ceil(budget / slots) bytes each; 0: 500) and
 * `host_slots` host slots (0: 16; of ceil(min(host_budget, everything
 * offloadable) / host_slots) bytes). The class: rotor's persistent
 * schedules with any stage but the last offloaded (its copies overlap
 * the operation after Fe_i and B_{i+1}). Exact on the rounded sizes:
 * with unit slots it equals the least simulated cost over the class.
 * host_budget 0 gives remat__chain_solve_ex's plan cost. The caller owns
 * *plan (remat_chain_plan_destroy) and gets the simulation in *res
 * (may be NULL). REMAT_BUDGET when nothing fits, naming the device floor. */
remat_status remat__offload_solve(const remat__stage_ex *st, int n, int64_t output, remat__link link, int64_t budget,
                                  int64_t host_budget, int slots, int host_slots, remat_chain_plan **plan,
                                  remat__offload_result *res);

/* ------------------------------------------------- for a model's step */

/* Device slots for the offload DP over n stages with host_slots host
 * slots: 500, fewer when its tables would pass 256 MiB, never below 50. */
int remat__offload_slots(int n, int host_slots);

/* The chain plan of p's step with offload (host_budget bytes) and without
 * (offload_report.c), at chain_budget device bytes, on a link in the cost
 * model's units; fills out's chain fields (not chain_budget, the link or
 * the names) and, when offloaded is not NULL, the first node of each
 * offloaded stage (malloc'd into *offloaded, *n_off of them; the caller
 * frees it). */
remat_status remat__offload_report(const remat__prog *p, remat_node loss, size_t chain_budget, size_t host_budget,
                                   remat__link link, int slots, int host_slots, remat_offload_summary *out,
                                   int32_t **offloaded, int *n_off);

#endif
