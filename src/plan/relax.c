/* relax.c: the plans between optimal.c's candidates. The generators make
 * a few dozen schedules each, so between two candidates on the frontier of
 * held bytes and cost there can be a budget at which neither is the
 * cheapest plan that fits: test_ilp found the rematerialization ILP's
 * optimum 2.79% cheaper than remat's plan at a traced Llama layer's floor,
 * holding 128 bytes more, and gaps of 2-17% on random graphs where the
 * ILP's plan fitted remat's budget. So from each candidate on that
 * frontier, the schedules that keep one more value at a time (relaxation:
 * each step gives back the recomputation that saves the most cost per
 * byte it adds to the peak, while the peak stays below the next frontier
 * candidate's) are candidates too. The steps do not depend on the budget,
 * so the candidate set still does not, and a larger budget still never
 * gets a costlier plan. The steps of the other two searches between
 * candidates live here too: tightening (a kept value dropped, with the
 * kept inputs above it) and splitting (a value held across the peak made
 * again for its reads after it). */
#include "chain.h"
#include "refine.h"
#include "memplan.h"
#include "schedule.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Whether a saving of s at a peak rise of r beats bs at br. */
static int better(double s, size_t r, double bs, size_t br) {
    if (r == 0 || br == 0) return br != 0 || (r == 0 && s > bs);
    return s * (double)br > bs * (double)r;
}

remat_status remat__relax_step(const remat__prog *p, const remat__schedule *sc, size_t peak, double cost,
                               remat__schedule *out, int *drop, size_t *out_peak, double *out_cost, double *work,
                               remat__relax_seen seen, void *ctx) {
    int found = 0;
    remat_status st = REMAT_OK;
    for (int i = 0; st == REMAT_OK && *work > 0 && i < sc->n; i++) {
        if (sc->ins[i].kind != REMAT__I_FWD || sc->ins[i].first) continue; /* not a recomputation */
        remat__schedule t;
        size_t pk = 0;
        st = remat__without(p, sc, i, &t);
        if (st != REMAT_OK) break;
        *work -= t.n;
        st = remat__values_peak(p, &t, &pk);
        double c = remat__schedule_cost(p, &t);
        if (st == REMAT_OK && c < cost && seen) st = seen(ctx, i, pk, c);
        if (st == REMAT_UNSUPPORTED) st = REMAT_OK; /* it would read a value overwritten in place */
        else if (st == REMAT_OK && c < cost &&
                 (!found || better(cost - c, pk > peak ? pk - peak : 0, cost - *out_cost,
                                   *out_peak > peak ? *out_peak - peak : 0))) {
            if (found) remat__schedule_free(out);
            *out = t, *drop = i, *out_peak = pk, *out_cost = c, found = 1;
            continue;
        }
        remat__schedule_free(&t);
    }
    if (st != REMAT_OK && found) remat__schedule_free(out);
    return st != REMAT_OK ? st : found ? REMAT_OK : REMAT_BUDGET;
}

/* Whether the tightening may drop u: kept, made by a forward, not resident. */
static int droppable(const remat_graph *g, const uint8_t *level, int32_t u) {
    return level[u] == 0 && g->nodes[u].leaf == REMAT__LEAF_NONE && !remat__is_resident(&g->nodes[u]);
}

int remat__tighten_apply(const remat_graph *g, uint8_t *level, int32_t move, int32_t *group) {
    int32_t depth = move / g->n, n = 0, from = 0;
    group[n++] = move % g->n;
    level[group[0]] = REMAT__LEVEL_NONE;
    for (int32_t d = 0; d < depth; d++) { /* one more input away: breadth first */
        int32_t to = n;
        for (int32_t i = from; i < to; i++) {
            const remat__node *x = &g->nodes[group[i]];
            for (int j = 0; j < x->n_in; j++)
                if (droppable(g, level, x->in[j])) level[x->in[j]] = REMAT__LEVEL_NONE, group[n++] = x->in[j];
        }
        from = to;
    }
    return n;
}

/* How many nodes move drops from level (left as it was). */
static int32_t move_size(const remat_graph *g, uint8_t *level, int32_t move, int32_t *group) {
    int32_t n = remat__tighten_apply(g, level, move, group);
    for (int32_t i = 0; i < n; i++) level[group[i]] = 0;
    return n;
}

/* remat__level_peak's measure, without the memo. */
static remat_status level_schedule_peak(const remat__prog *p, remat_node loss, const uint8_t *level, int sink,
                                        size_t *pk, double *c, uint8_t *live, double *work) {
    remat__schedule t, u;
    remat_status st = remat__schedule_build(p, loss, REMAT_NONE, 1, 1, level, &t);
    if (st != REMAT_OK) return st;
    *work -= t.n;
    if (sink) {
        st = remat__sink(p, &t, &u, work);
        remat__schedule_free(&t);
        if (st != REMAT_OK) return st;
        t = u;
    }
    st = remat__runnable(p, &t, p->recompute_once) ? remat__values_peak_live(p, &t, pk, live) : REMAT_UNSUPPORTED;
    if (st == REMAT_OK) *c = remat__schedule_cost(p, &t);
    remat__schedule_free(&t);
    return st;
}

remat_status remat__level_peak(const remat__prog *p, remat_node loss, const uint8_t *level, int sink, size_t *pk,
                               double *c, uint8_t *live, double *work, remat__peak_memo *memo) {
    remat__skey key = memo ? remat__level_key(level, p->g->n, sink, loss) : (remat__skey){0};
    remat__measured seen;
    if (memo && !live && remat__peak_memo_get(memo, key, &seen)) {
        *pk = seen.peak, *c = seen.cost, *work -= seen.work;
        return REMAT_OK;
    }
    double before = *work;
    remat_status st = level_schedule_peak(p, loss, level, sink, pk, c, live, work);
    if (st == REMAT_OK)
        remat__peak_memo_put(memo, key, (remat__measured){.peak = *pk, .cost = *c, .work = before - *work});
    return st;
}

/* The schedule of level with move applied (sunk, with sink): its values
 * peak and cost; REMAT_UNSUPPORTED where it cannot run or reads a value
 * overwritten in place. level is left as it was. */
static remat_status try_move(const remat__prog *p, remat_node loss, uint8_t *level, int32_t move, int sink,
                             int32_t *group, size_t *pk, double *c, double *work, remat__peak_memo *memo) {
    int32_t n = remat__tighten_apply(p->g, level, move, group);
    remat_status st = remat__level_peak(p, loss, level, sink, pk, c, NULL, work, memo);
    for (int32_t i = 0; i < n; i++) level[group[i]] = 0;
    return st;
}

remat_status remat__tighten_step(const remat__prog *p, remat_node loss, uint8_t *level, const uint8_t *live, int depth,
                                 int sink, int32_t *group, size_t peak, double cost, int32_t *move, size_t *out_peak,
                                 double *out_cost, double *work, remat__relax_seen seen, void *ctx,
                                 remat__peak_memo *memo) {
    const remat_graph *g = p->g;
    int found = 0;
    remat_status st = REMAT_OK;
    for (int32_t u = 0; st == REMAT_OK && *work > 0 && u < g->n; u++) {
        if (!droppable(g, level, u)) continue;
        if (live && !live[u]) continue; /* not held at the peak: dropping it cannot lower it */
        for (int32_t d = 0, before = 0, n = 0; st == REMAT_OK && d <= depth; d++, before = n) {
            int32_t m = u + d * g->n;
            size_t pk = 0;
            double c = 0;
            if ((n = move_size(g, level, m, group)) == before) break; /* no more inputs to drop: the same move */
            st = try_move(p, loss, level, m, sink, group, &pk, &c, work, memo);
            if (st == REMAT_UNSUPPORTED) { /* it cannot run, or would read a value overwritten in place */
                st = REMAT_OK;
                continue;
            }
            if (st != REMAT_OK || pk >= peak) continue;
            if (seen) st = seen(ctx, m, pk, c);
            /* the most bytes off the peak per cost added (none added first) */
            double add = c > cost ? c - cost : 0, best = *out_cost > cost ? *out_cost - cost : 0;
            if (!found || (add == 0 ? best > 0 || pk < *out_peak
                                    : best > 0 && (double)(peak - pk) * best > (double)(peak - *out_peak) * add))
                *move = m, *out_peak = pk, *out_cost = c, found = 1;
        }
    }
    return st != REMAT_OK ? st : found ? REMAT_OK : REMAT_BUDGET;
}

/* How many times m's live bytes reach their peak (runs of ticks at it). */
static int peak_runs_of(const remat__memplan *m) {
    int64_t best = 0, live = 0;
    remat__memplan_peak_tick(m, &best);
    int n = 0, on = 0;
    for (int32_t t = 0; t < m->ticks; t++) {
        int32_t e = m->tick[t];
        const remat__mev *x = &m->ev[e >= 0 ? e : ~e];
        if (x->cat != REMAT_MEM_HOST) live += e >= 0 ? (int64_t)x->bytes : -(int64_t)x->bytes;
        if (live == best && !on) n++;
        on = live == best;
    }
    return n;
}

/* sc's values peak in *peak and how many times the live bytes reach it
 * in *runs. */
static remat_status peak_runs(const remat__prog *p, const remat__schedule *sc, size_t *peak, int *runs) {
    remat__memplan m;
    remat_status st = remat__memplan_build(p, sc, &m);
    if (st != REMAT_OK) return st;
    int64_t best = 0;
    remat__memplan_peak_tick(&m, &best);
    *peak = (size_t)best, *runs = peak_runs_of(&m);
    remat__memplan_free(&m);
    return REMAT_OK;
}

/* Where sc's values peak: the instruction that takes the buffer which
 * reaches it (*at), and the nodes whose output is held across it, their
 * instance made before it and given back after it (live); -1 without.
 * How many times the peak is reached in *runs. */
static remat_status peak_at(const remat__prog *p, const remat__schedule *sc, size_t *peak, int32_t *at, uint8_t *live,
                            int *runs) {
    remat__memplan m;
    remat_status st = remat__memplan_build(p, sc, &m);
    *at = -1;
    if (st == REMAT_OK) {
        int64_t best = 0;
        int32_t t = remat__memplan_peak_tick(&m, &best);
        *peak = (size_t)best, *runs = peak_runs_of(&m);
        memset(live, 0, (size_t)p->g->n);
        if (t >= 0 && m.tick[t] >= 0) *at = m.ev[m.tick[t]].ins;
        for (int32_t e = 0; *at >= 0 && e < m.n; e++) {
            const remat__mev *x = &m.ev[e];
            if (x->value >= 0 && x->value % 3 == REMAT__V_OUT && x->cat != REMAT_MEM_HOST && x->ins < *at &&
                x->ins1 > *at)
                live[REMAT__VAL_NODE(x->value)] = 1;
        }
    }
    remat__memplan_free(&m);
    return st;
}

/* The first instruction after at that reads node u's output, or -1
 * where u is made again first (or nothing reads it). */
static int next_read(const remat_graph *g, const remat__schedule *sc, int32_t at, int32_t u) {
    for (int i = at + 1; i < sc->n; i++) {
        const remat__instr *b = &sc->ins[i];
        if (b->kind != REMAT__I_FWD && b->kind != REMAT__I_BWD) continue;
        for (int j = 0; j <= g->nodes[b->node].n_in; j++)
            if (remat__read_of(g, b, j) == u) return i;
        if (b->kind == REMAT__I_FWD && b->node == u) return -1;
    }
    return -1;
}

/* A splitting step's search: the best move that lowers the peak, and the
 * cheapest that holds it but reaches it fewer times (a flat move, taken
 * only where none lowers it: the next step can then lower the peak where
 * it is reached again). */
typedef struct {
    size_t peak;
    int runs;
    double cost;
    int found, flat, flat_runs;
    int32_t move[3], flat_move[3];
    size_t out_peak;
    double out_cost, flat_cost;
} split_search;

/* Tries move m from sc: 1 where it lowers the peak, 0 where not, -1 on an
 * error (in *st). */
static int split_try(const remat__prog *p, const remat__schedule *sc, const int32_t m[3], split_search *s, double *work,
                     remat__peak_memo *memo, remat_status *st) {
    remat__schedule t;
    size_t pk = 0;
    int rn = 0;
    if ((*st = remat__resplit(p, sc, m, &t)) != REMAT_OK) return -1;
    *work -= t.n;
    remat__skey key = {0};
    remat__measured seen;
    if (memo) key = remat__schedule_key(&t), key.a ^= 0x73706c6974ULL; /* "split": apart from peaks alone */
    if (memo && remat__peak_memo_get(memo, key, &seen)) {
        pk = seen.peak, rn = seen.runs, *st = REMAT_OK;
    } else {
        *st = remat__runnable(p, &t, 0) ? peak_runs(p, &t, &pk, &rn) : REMAT_UNSUPPORTED;
        if (*st == REMAT_OK) remat__peak_memo_put(memo, key, (remat__measured){.peak = pk, .runs = rn});
    }
    double c = remat__schedule_cost(p, &t);
    remat__schedule_free(&t);
    if (*st == REMAT_UNSUPPORTED) /* it would read a value overwritten in place */
        return *st = REMAT_OK, 0;
    if (*st != REMAT_OK) return -1;
    if (pk == s->peak && rn < s->runs && (!s->flat || c < s->flat_cost || (c == s->flat_cost && rn < s->flat_runs)))
        memcpy(s->flat_move, m, 3 * sizeof *m), s->flat_cost = c, s->flat_runs = rn, s->flat = 1;
    if (pk >= s->peak) return 0;
    /* the most bytes off the peak per cost added */
    double add = c > s->cost ? c - s->cost : 0, best = s->out_cost > s->cost ? s->out_cost - s->cost : 0;
    if (!s->found || (add == 0 ? best > 0 || pk < s->out_peak
                               : best > 0 && (double)(s->peak - pk) * best > (double)(s->peak - s->out_peak) * add))
        memcpy(s->move, m, 3 * sizeof *m), s->out_peak = pk, s->out_cost = c, s->found = 1;
    return 1;
}

remat_status remat__split_step(const remat__prog *p, const remat__schedule *sc, int depth, double cost, int32_t move[3],
                               size_t *out_peak, double *out_cost, double *work, remat__peak_memo *memo) {
    const remat_graph *g = p->g;
    int32_t at = -1, *group = malloc(((size_t)g->n + 1) * sizeof *group);
    uint8_t *live = malloc((size_t)g->n + 1), *in = calloc((size_t)g->n + 1, 1);
    split_search s = {.cost = cost};
    remat_status st = group && live && in ? peak_at(p, sc, &s.peak, &at, live, &s.runs)
                                          : remat__err(REMAT_NOMEM, "out of memory planning");
    if (st == REMAT_OK) *work -= sc->n;
    for (int32_t u = 0; st == REMAT_OK && at >= 0 && *work > 0 && u < g->n; u++) {
        if (!live[u] || g->nodes[u].leaf != REMAT__LEAF_NONE || remat__is_resident(&g->nodes[u])) continue;
        int r = next_read(g, sc, at, u);
        if (r < 0) continue;
        int lowers = 0;
        for (int32_t d = 0, before = 0, n = 0; !lowers && d <= depth; d++, before = n) {
            if ((n = remat__split_group(g, u, d, group, in)) == before) break; /* nothing more above it */
            int32_t m[3] = {r, u, d};
            if ((lowers = split_try(p, sc, m, &s, work, memo, &st)) < 0) break;
            /* where it lowers the peak, the inputs above it are not tried */
        }
    }
    free(group), free(live), free(in);
    if (st == REMAT_OK && !s.found && s.flat)
        memcpy(s.move, s.flat_move, sizeof s.move), s.out_peak = s.peak, s.out_cost = s.flat_cost, s.found = 1;
    if (st == REMAT_OK && s.found) memcpy(move, s.move, sizeof s.move), *out_peak = s.out_peak, *out_cost = s.out_cost;
    return st != REMAT_OK ? st : s.found ? REMAT_OK : REMAT_BUDGET;
}
