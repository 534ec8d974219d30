/* planner.c: what every planner's result goes through: finishing a
 * schedule into a placed memory plan (remat__plan_finish), and the
 * summary of a planned step (memory from its plan, FLOPs and seconds from
 * the op table and the cost model) that remat_plan and the CLI report.
 */
#include "planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void remat__planned_free(remat__planned *pl) {
    remat__schedule_free(&pl->sc);
    remat__memplan_free(&pl->mem);
    pl->valid = 0;
}

remat_status remat__plan_finish(const remat__plan_req *r, remat__schedule *sc, remat__planned *out) {
    remat_status st = REMAT_OK;
    if (r->buckets)
        st = remat__schedule_add_reduces(r->p, sc, r->buckets->bucket_of, r->buckets->nb, r->buckets->at_end);
    out->sc = *sc;
    memset(sc, 0, sizeof *sc);
    if (st == REMAT_OK) st = remat__memplan_make(r->p, &out->sc, &out->mem);
    out->valid = st == REMAT_OK;
    return st;
}

remat_status remat__schedule_summary(const remat__prog *p, const remat__planned *pl, const remat_mem_stats *start,
                                     size_t held_outside, remat_plan_summary *out) {
    const remat_graph *g = p->g;
    const remat__schedule *s = &pl->sc;
    memset(out, 0, sizeof *out);
    remat__memplan_peaks(&pl->mem, start, &out->predicted);
    out->arena_bytes = pl->mem.arena;
    out->held_bytes = pl->mem.arena + held_outside;
    out->placement = pl->mem.placer;
    uint8_t *again = calloc((size_t)g->n, 1);
    if (!again) { return remat__err(REMAT_NOMEM, "out of memory summarizing a plan"); }
    out->instructions = s->n;
    for (int i = 0; i < s->n; i++) {
        const remat__instr *in = &s->ins[i];
        out->offloaded_values += in->kind == REMAT__I_OUT;
        if (in->kind != REMAT__I_FWD && in->kind != REMAT__I_BWD) continue;
        const remat__node *n = &g->nodes[in->node];
        double f = remat__node_flops(g, n), t = remat__node_seconds(p, n);
        if (in->kind == REMAT__I_BWD) {
            out->flops += 2 * f, out->seconds += remat__node_bwd_seconds(p, n);
        } else if (in->first) {
            out->forwards++;
            out->flops += f, out->seconds += t;
        } else {
            out->forwards++, out->recomputations++;
            out->extra_flops += f, out->extra_seconds += remat__node_rec_seconds(p, n);
            if (!again[in->node]) again[in->node] = 1, out->recomputed_nodes++;
        }
    }
    out->seconds += out->extra_seconds + s->stall;
    out->stall_seconds = s->stall;
    out->host_bytes = pl->mem.host_arena;
    free(again);
    /* Each cost is bounded (cost.c, the graph reader), so this sum stays
     * finite; a cost that got past them is refused, not printed as inf. */
    if (!isfinite(out->seconds))
        return remat__err(REMAT_INVALID,
                          "the step's predicted cost overflows (%g %s over %d instructions): a node "
                          "costs more than a step can sum",
                          out->seconds, p->cost.calibrated ? "s" : "FLOPs", s->n);
    out->calibrated = p->cost.calibrated;
    out->planner = s->origin ? s->origin : "levels";
    snprintf(out->candidate, sizeof out->candidate, "%s", s->candidate);
    return REMAT_OK;
}
