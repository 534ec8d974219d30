/* bound.c: the least any schedule of a step can hold (bound.h).
 *
 * Every schedule runs each node's backward once, in the same order, and
 * frees each gradient after its last read, so the gradients live at a
 * backward (and each kernel's workspace) are the same in every schedule;
 * what schedules choose is which forward values are resident. At the
 * first forward of node u its inputs and its output (and aux) are
 * resident in any schedule; at its backward, the values it saved. So at
 * each tick of an instruction of the store-all schedule, what every
 * schedule must hold is the live bytes less the forward values that
 * instruction neither reads nor makes; the bound is the largest of these.
 * It counts only what an instruction itself needs beside the gradients:
 * a schedule may need more (the values between its checkpoints), never
 * less.
 */
#include "bound.h"
#include "memplan.h"

#include <stdlib.h>

/* Whether instruction in reads or makes forward value v (node u's output
 * or aux). */
static int own(const remat_graph *g, const remat__instr *in, int32_t v) {
    int32_t u = REMAT__VAL_NODE(v);
    int aux = REMAT__VAL_KIND(v) == REMAT__V_AUX;
    const remat__node *n = &g->nodes[in->node];
    if (u == in->node)
        return in->kind == REMAT__I_FWD ||
               (n->saves & (aux ? REMAT__SAVE_AUX : REMAT__SAVE_OUT)) != 0; /* made, or saved and read */
    if (aux) return 0;
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j] == u && (in->kind == REMAT__I_FWD || (n->saves & REMAT__SAVE_IN(j)))) return 1;
    return 0;
}

remat_status remat__peak_bound(const remat__prog *p, const remat__schedule *all, size_t *bound) {
    const remat_graph *g = p->g;
    remat__memplan m;
    remat_status st = remat__memplan_build(p, all, &m);
    int32_t *live = st == REMAT_OK ? malloc(((size_t)g->n * 3 + 1) * sizeof *live) : NULL;
    if (st == REMAT_OK && !live) st = remat__err(REMAT_NOMEM, "out of memory bounding a step's memory");
    if (st != REMAT_OK) {
        remat__memplan_free(&m);
        return st;
    }
    for (int32_t v = 0; v < g->n * 3; v++) live[v] = -1;
    size_t others = 0, best = 0; /* live bytes of gradients and workspaces */
    for (int32_t t = 0; t < m.ticks; t++) {
        int32_t e = m.tick[t] >= 0 ? m.tick[t] : ~m.tick[t];
        const remat__mev *x = &m.ev[e];
        if (x->cat == REMAT_MEM_HOST) continue;
        int fwd = x->value >= 0 && REMAT__VAL_KIND(x->value) != REMAT__V_GRAD;
        if (fwd) live[x->value] = m.tick[t] >= 0 ? e : -1;
        else others = m.tick[t] >= 0 ? others + x->bytes : others - x->bytes;
        int32_t i = m.tick[t] >= 0 ? x->ins : x->ins1;
        if (i < 0 || i >= all->n) continue;
        const remat__instr *in = &all->ins[i];
        if (in->kind != REMAT__I_FWD && in->kind != REMAT__I_BWD) continue;
        /* the values this instruction reads or makes, as far as they are live */
        size_t need = others;
        const remat__node *n = &g->nodes[in->node];
        int32_t vals[REMAT__MAX_IN + 2]; /* its inputs' outputs, each once, then its own output and aux */
        int nv = 0;
        for (int j = 0; j < n->n_in; j++) {
            int dup = 0;
            for (int q = 0; q < j; q++) dup |= n->in[q] == n->in[j];
            if (!dup) vals[nv++] = REMAT__VAL(n->in[j], REMAT__V_OUT);
        }
        vals[nv++] = REMAT__VAL(in->node, REMAT__V_OUT), vals[nv++] = REMAT__VAL(in->node, REMAT__V_AUX);
        for (int k = 0; k < nv; k++)
            if (live[vals[k]] >= 0 && own(g, in, vals[k])) need += m.ev[live[vals[k]]].bytes;
        if (need > best) best = need;
    }
    free(live);
    remat__memplan_free(&m);
    *bound = best;
    return REMAT_OK;
}

remat_status remat__step_bound(const remat__prog *p, remat_node loss, size_t *bound) {
    uint8_t *level = NULL;
    remat__schedule all = {0};
    remat_status st = remat__strategy_levels(p->g, REMAT_STRATEGY_ALL, &level);
    if (st == REMAT_OK) st = remat__schedule_build(p, loss, REMAT_NONE, 1, 1, level, &all);
    if (st == REMAT_OK) st = remat__peak_bound(p, &all, bound);
    free(level);
    remat__schedule_free(&all);
    return st;
}
