/* offload_report.c: offload for a model's training step, in the chain
 * model: the chain `optimal` plans over (remat__optimal_chain), planned
 * by the offload DP with the host budget and without one (the same DP,
 * slots and rounding, so the two costs compare like for like).
 *
 * Ownership: *offloaded is the caller's; nothing else outlives a call.
 */
#include "chain.h"
#include "offload.h"

#include "../remat-impl.h"

#include <stdlib.h>

/* Device slots: 500, fewer when the tables of n stages and host_slots + 1
 * host rows would pass 256 MiB (three tables of a double and an int16 per
 * cell), never below 50. */
int remat__offload_slots(int n, int host_slots) {
    double rows = ((double)n + 1) * ((double)n + 2) / 2 * (host_slots + 1.0) * 3 * (sizeof(double) + 2);
    double s = 256.0 * 1048576.0 / rows;
    return s > 500 ? 500 : s < 50 ? 50 : (int)s;
}

/* One solve: its simulation in *r, *fits 0 when nothing fits; errors
 * other than REMAT_BUDGET pass on. With `ops`, the plan is kept. */
static remat_status solve(const remat__stage_ex *st, int n, int64_t output, remat__link link, size_t budget,
                          size_t host, int slots, int host_slots, remat__offload_result *r, int *fits,
                          remat_chain_plan **keep) {
    remat_chain_plan *p = NULL;
    remat_status rc =
        remat__offload_solve(st, n, output, link, (int64_t)budget, (int64_t)host, slots, host_slots, &p, r);
    *fits = rc == REMAT_OK;
    if (keep) *keep = p;
    else remat_chain_plan_destroy(p);
    return rc == REMAT_BUDGET ? REMAT_OK : rc;
}

/* The first node of every stage the plan offloads (malloc'd). */
static remat_status offloaded_stages(const remat_chain_plan *p, const int32_t *first, int32_t **out, int *n_off) {
    int len = remat_chain_plan_length(p), k = 0;
    *out = malloc(((size_t)len + 1) * sizeof **out);
    if (!*out) return remat__err(REMAT_NOMEM, "out of memory reporting offload");
    for (int i = 0; i < len; i++) {
        remat_chain_op op = remat_chain_plan_op(p, i);
        if (op.kind == REMAT_CHAIN_FE && op.option == REMAT__OFFLOAD_OPTION) (*out)[k++] = first[op.stage];
    }
    *n_off = k;
    return REMAT_OK;
}

remat_status remat__offload_report(const remat__prog *p, remat_node loss, size_t chain_budget, size_t host_budget,
                                   remat__link link, int slots, int host_slots, remat_offload_summary *out,
                                   int32_t **offloaded, int *n_off) {
    remat__stage_ex *st = NULL;
    int32_t *first = NULL;
    int n = 0;
    int64_t output = 0;
    if (offloaded) *offloaded = NULL, *n_off = 0;
    remat_status rc = remat__optimal_chain(p, loss, &st, &n, &output, &first);
    if (rc != REMAT_OK) return rc;
    int hs = host_slots > 0 ? host_slots : 16, ds = slots > 0 ? slots : remat__offload_slots(n, hs);
    remat__offload_result with = {0}, without = {0};
    remat_chain_plan *plan = NULL;
    out->stages = n;
    rc = solve(st, n, output, link, chain_budget, 0, ds, hs, &without, &out->fits_without, NULL);
    if (rc == REMAT_OK) rc = solve(st, n, output, link, chain_budget, host_budget, ds, hs, &with, &out->fits, &plan);
    if (rc == REMAT_OK && out->fits && offloaded) rc = offloaded_stages(plan, first, offloaded, n_off);
    out->device_peak = out->fits ? (size_t)with.peak : 0;
    out->device_peak_without = out->fits_without ? (size_t)without.peak : 0;
    out->host_peak = (size_t)with.host_peak, out->host_copied = (size_t)with.host_out;
    out->offloaded = with.offloaded;
    out->cost = with.cost, out->cost_without = without.cost, out->stall = with.stall;
    remat_chain_plan_destroy(plan);
    free(st), free(first);
    return rc;
}
