/* refine.c: a candidate schedule made better without changing what it
 * computes, for the `optimal` strategy (optimal.c): pruned (the
 * recomputations that free nothing at its peak dropped) and sunk (its
 * recomputations moved as late as they can go). Each refined schedule is
 * a candidate beside its source, so the candidate set still does not
 * depend on the budget.
 */
#include "refine.h"
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

/* Pruning: a candidate less the recomputations it can do without. The
 * generators' schedules recompute what their model says must go (the
 * chain model keeps a stage's input through its backward, DTR evicts by
 * a heuristic), and some recomputations free nothing at the step's peak:
 * keeping such a value from the forward that made it costs no memory
 * where the peak is and saves its recomputation. So each candidate's
 * recomputations are tried in schedule order: one is dropped (the value
 * kept instead, every free found again from the last uses) where the
 * peak of the schedule's values does not rise above the candidate's
 * (the drop also drops what was recomputed only for it: drop_dead);
 * up to PRUNE_PASSES passes, until none drops. The pruned schedule
 * is a candidate beside the one it came from (a placement that does not
 * fit the budget never loses the unpruned one), so the candidate set
 * still does not depend on the budget, and a larger budget still never
 * gets a costlier plan. Each try builds the schedule's memory plan (about
 * its length in work): a planning's tries stop after optimal.c's
 * PRUNE_WORK instructions in all, in the candidates' order. On test_ilp's traced
 * graphs this put 23 of 30 plans at the ILP's optimum (13 before). */
#define PRUNE_PASSES 3

/* The peak bytes of a candidate's values (its memory plan, unplaced): its
 * arena is at least this. */
remat_status remat__values_peak(const remat__prog *p, const remat__schedule *sc, size_t *peak) {
    return remat__values_peak_live(p, sc, peak, NULL);
}

remat_status remat__values_peak_live(const remat__prog *p, const remat__schedule *sc, size_t *peak, uint8_t *live) {
    remat__memplan m;
    remat_status st = remat__memplan_build(p, sc, &m);
    if (st == REMAT_OK) {
        int64_t best = 0;
        int32_t at = remat__memplan_peak_tick(&m, &best);
        *peak = (size_t)best;
        if (live) {
            memset(live, 0, (size_t)p->g->n);
            for (int32_t e = 0; at >= 0 && e < m.n; e++) {
                const remat__mev *x = &m.ev[e];
                if (x->value >= 0 && x->value % 3 == REMAT__V_OUT && x->cat != REMAT_MEM_HOST && x->t0 <= at &&
                    (x->t1 < 0 || x->t1 > at))
                    live[REMAT__VAL_NODE(x->value)] = 1;
            }
        }
    }
    remat__memplan_free(&m);
    return st;
}

remat_status remat__values_peak_memo(const remat__prog *p, const remat__schedule *sc, size_t *peak,
                                     remat__peak_memo *memo) {
    remat__skey key = memo ? remat__schedule_key(sc) : (remat__skey){0};
    remat__measured seen;
    if (memo && remat__peak_memo_get(memo, key, &seen)) return *peak = seen.peak, REMAT_OK;
    remat_status st = remat__values_peak_live(p, sc, peak, NULL);
    if (st == REMAT_OK) remat__peak_memo_put(memo, key, (remat__measured){.peak = *peak});
    return st;
}

int32_t remat__read_of(const remat_graph *g, const remat__instr *b, int j) {
    if (b->kind != REMAT__I_FWD && b->kind != REMAT__I_BWD) return -1;
    const remat__node *n = &g->nodes[b->node];
    if (j < n->n_in) return b->kind == REMAT__I_FWD || (n->saves & REMAT__SAVE_IN(j)) ? n->in[j] : -1;
    return b->kind == REMAT__I_BWD && (n->saves & (REMAT__SAVE_OUT | REMAT__SAVE_AUX)) ? b->node : -1;
}

/* Drops, in place, the recomputations of ins[0..*n) whose values nothing
 * reads before the node is made again (or the step ends): after one is
 * dropped, those that only fed it go too. 0 when out of memory. */
static int drop_dead(const remat_graph *g, remat__instr *ins, int *n) {
    uint8_t *need = calloc((size_t)g->n + 1, 1);
    if (!need) return 0;
    for (int i = *n - 1; i >= 0; i--) {
        remat__instr *b = &ins[i];
        if (b->kind == REMAT__I_FWD && !b->first && !need[b->node]) {
            b->kind = REMAT__I_FREE; /* dropped: removed below */
            continue;
        }
        if (b->kind == REMAT__I_FWD) need[b->node] = 0; /* this instance serves the reads after it */
        for (int j = 0; j <= g->nodes[b->node].n_in; j++) {
            int32_t x = remat__read_of(g, b, j);
            if (x >= 0) need[x] = 1;
        }
    }
    int k = 0;
    for (int i = 0; i < *n; i++)
        if (ins[i].kind != REMAT__I_FREE) ins[k++] = ins[i];
    *n = k;
    free(need);
    return 1;
}

/* remat__without before its frees are found. */
static remat_status without_bare(const remat__prog *p, const remat__schedule *sc, int drop, remat__schedule *out) {
    *out = *sc;
    out->ins = malloc(((size_t)sc->n + 1) * sizeof *out->ins);
    if (!out->ins) return remat__err(REMAT_NOMEM, "out of memory planning");
    int k = 0;
    for (int i = 0; i < sc->n; i++)
        if (i != drop && sc->ins[i].kind != REMAT__I_FREE) out->ins[k++] = sc->ins[i];
    out->cap = sc->n + 1;
    if (!drop_dead(p->g, out->ins, &k)) {
        free(out->ins), out->ins = NULL;
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    out->n = k;
    return REMAT_OK;
}

remat_status remat__without(const remat__prog *p, const remat__schedule *sc, int drop, remat__schedule *out) {
    remat_status st = without_bare(p, sc, drop, out);
    return st == REMAT_OK ? remat__schedule_add_frees(p, out) : st;
}

/* A pruning's try: sc without its instruction drop (remat__without) in
 * *t and its values' peak in *pk; the instructions built taken from
 * *work. A try measured before is found in memo by its schedule before
 * the frees (a key apart from every schedule's: its frees are found
 * from it alone), its peak and its length with the frees, which are then
 * found only where the try is kept (its peak at most keep). */
static remat_status prune_try(const remat__prog *p, const remat__schedule *sc, int drop, size_t keep,
                              remat__schedule *t, size_t *pk, double *work, remat__peak_memo *memo) {
    remat_status st = without_bare(p, sc, drop, t);
    if (st != REMAT_OK) return st;
    remat__skey key = memo ? remat__schedule_key(t) : (remat__skey){0};
    key.a ^= 0x5851f42d4c957f2dull, key.b ^= 0x14057b7ef767814full; /* before the frees */
    remat__measured seen;
    if (memo && remat__peak_memo_get(memo, key, &seen)) {
        *pk = seen.peak, *work -= seen.work;
        return seen.peak <= keep ? remat__schedule_add_frees(p, t) : REMAT_OK;
    }
    st = remat__schedule_add_frees(p, t);
    if (st == REMAT_OK) st = remat__values_peak_memo(p, t, pk, memo);
    *work -= t->n;
    if (st == REMAT_OK) remat__peak_memo_put(memo, key, (remat__measured){.peak = *pk, .work = t->n});
    return st;
}

/* Whether in is a recomputation (a forward that is not its node's first). */
static int is_rec(const remat__instr *in) { return in->kind == REMAT__I_FWD && !in->first; }

/* Splitting: what a move makes again (remat__split_group): its node, the
 * inputs up to depth above it that a forward makes and the step does not
 * hold for its whole length, and, in a traced step, the nodes of the same
 * op (the framework runs the op once and gets them all), in creation
 * order (a topological one) in group; returns how many. in: room for
 * p->g->n flags, left zero. */
int remat__split_group(const remat_graph *g, int32_t node, int depth, int32_t *group, uint8_t *in) {
    int32_t n = 0, from = 0;
    group[n++] = node, in[node] = 1;
    for (int d = 0; d <= depth; d++) {
        int32_t to = n;
        for (int32_t i = from; i < to && g->traced; i++) /* the op's other outputs */
            for (int32_t s = -1; s <= 1; s += 2)
                for (int32_t v = group[i] + s; v >= 0 && v < g->n && g->traced[v].id == g->traced[group[i]].id; v += s)
                    if (!in[v]) in[v] = 1, group[n++] = v;
        if (d == depth) break;
        to = n;
        for (int32_t i = from; i < to; i++) { /* one more input away: breadth first */
            const remat__node *x = &g->nodes[group[i]];
            for (int j = 0; j < x->n_in; j++) {
                int32_t v = x->in[j];
                if (!in[v] && g->nodes[v].leaf == REMAT__LEAF_NONE && !remat__is_resident(&g->nodes[v]))
                    in[v] = 1, group[n++] = v;
            }
        }
        from = to;
    }
    for (int32_t i = 0; i < n; i++) in[group[i]] = 0;
    for (int32_t i = 1; i < n; i++) /* creation order: few nodes, insertion sort */
        for (int32_t k = i; k > 0 && group[k - 1] > group[k]; k--) {
            int32_t t = group[k];
            group[k] = group[k - 1], group[k - 1] = t;
        }
    return n;
}

remat_status remat__resplit(const remat__prog *p, const remat__schedule *sc, const int32_t move[3],
                            remat__schedule *out) {
    const remat_graph *g = p->g;
    int32_t *group = malloc(((size_t)g->n + 1) * sizeof *group);
    uint8_t *in = calloc((size_t)g->n + 1, 1), *made = calloc((size_t)g->n + 1, 1);
    remat__instr *a = malloc(((size_t)sc->n + 1) * sizeof *a);
    *out = *sc;
    out->ins = malloc(((size_t)sc->n + (size_t)g->n + 1) * sizeof *out->ins);
    if (!group || !in || !made || !a || !out->ins) {
        free(group), free(in), free(made), free(a), free(out->ins), out->ins = NULL;
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    int32_t n = remat__split_group(g, move[1], move[2], group, in);
    int k = 0, pos = 0, run, end, q = 0;
    for (int i = 0; i < sc->n; i++) {
        if (i == move[0]) pos = k;
        if (sc->ins[i].kind != REMAT__I_FREE) a[k++] = sc->ins[i];
    }
    /* into the run of recomputations it is in or comes right after, in
     * creation order (as sink leaves them), but for the nodes they make */
    for (run = pos; run > 0 && is_rec(&a[run - 1]);) run--;
    for (end = pos; end < k && is_rec(&a[end]);) end++;
    for (int i = 0; i < k; i++) /* a node the schedule never makes (an output nothing reads) is left out */
        if (a[i].kind == REMAT__I_FWD && a[i].first) made[a[i].node] = 1;
    for (int32_t i = 0; i < n; i++) in[group[i]] = !made[group[i]];
    for (int i = run; i < end; i++) in[a[i].node] = 1;
    int m = 0;
    memcpy(out->ins, a, (size_t)run * sizeof *a), m = run;
    for (int i = run; i <= end; i++) {
        for (; q < n && (i == end || group[q] < a[i].node); q++)
            if (!in[group[q]])
                out->ins[m++] = (remat__instr){
                    .kind = REMAT__I_FWD, .cat = REMAT_MEM_TRANSIENT, .aux_cat = REMAT_MEM_TRANSIENT, .node = group[q]};
        if (i < end) out->ins[m++] = a[i];
    }
    memcpy(&out->ins[m], &a[end], (size_t)(k - end) * sizeof *a), m += k - end;
    out->cap = sc->n + g->n + 1;
    free(group), free(in), free(made), free(a);
    if (!drop_dead(g, out->ins, &m)) {
        free(out->ins), out->ins = NULL;
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    out->n = m;
    return remat__schedule_add_frees(p, out);
}

/* The index of sc's q-th recomputation (a forward that is not a node's
 * first), or -1. */
int remat__nth_recompute(const remat__schedule *sc, int q) {
    for (int i = 0; i < sc->n; i++)
        if (sc->ins[i].kind == REMAT__I_FWD && !sc->ins[i].first && q-- == 0) return i;
    return -1;
}

/* The instructions of a traced op's recomputation: its node and the nodes
 * of its extra outputs right after it (the framework runs the op once
 * and gets them all), from ins[i]: their count. */
static int unit_len(const remat_graph *g, const remat__instr *ins, int n, int i) {
    int k = 1;
    while (g->traced && i + k < n && ins[i + k].kind == REMAT__I_FWD && !ins[i + k].first &&
           g->traced[ins[i + k].node].id == g->traced[ins[i].node].id)
        k++;
    return k;
}

/* Sinking: a candidate with its recomputations moved late. The chain
 * model recomputes what a stage's backward reads all at once, before it;
 * the recomputed values then live beside the whole stage's backward.
 * Moved each to just before the first instruction that reads it (or
 * before the recomputation that reads it first), a value needed only by
 * the stage's last backwards is made when they come, after the
 * gradients of the later ones are gone, which lowers the schedule's peak
 * at no cost. The recomputations that end up between the same two other
 * instructions run in creation order (a topological one), as the forward
 * ran them; a traced op's extra outputs move with it (the framework
 * runs the op once). The sunk schedule, pruned to its own peak, is a
 * candidate beside its source where its peak is lower: on test_ilp's
 * traced graphs llama_1l's floor went from 5.45% above the ILP's
 * optimum to 2.91% (2.79% with drop_dead), and on the random ones 45
 * of 66 plans are at the optimum (43 before; 49 with drop_dead). The
 * frees are found again from the last uses;
 * the work (instructions passed) is taken from *work. */
/* A recomputation to place: where it goes (before instruction dl) and its
 * node (the order among those that go to the same place). */
typedef struct {
    int32_t dl, node, start;
} placed;

static int by_place(const void *x, const void *y) {
    const placed *a = x, *b = y;
    if (a->dl != b->dl) return a->dl < b->dl ? -1 : 1;
    return (a->node > b->node) - (a->node < b->node);
}

/* Lowers best[x], for each node x whose output or aux instruction b reads
 * (but the nodes ins[lo..hi) make), to at. */
static void lower_reads(const remat_graph *g, const remat__instr *b, const remat__instr *ins, int lo, int hi,
                        int32_t *best, int32_t at) {
    for (int j = 0; j <= g->nodes[b->node].n_in; j++) {
        int32_t x = remat__read_of(g, b, j);
        for (int q = lo; q < hi && x >= 0; q++)
            if (ins[q].node == x) x = -1;
        if (x >= 0 && at < best[x]) best[x] = at;
    }
}

remat_status remat__sink(const remat__prog *p, const remat__schedule *sc, remat__schedule *out, double *work) {
    const remat_graph *g = p->g;
    int n = 0;
    for (int i = 0; i < sc->n; i++) n += sc->ins[i].kind != REMAT__I_FREE;
    remat__instr *a = malloc(((size_t)n + 1) * sizeof *a);
    int32_t *len = calloc((size_t)n + 1, sizeof *len);         /* per unit's start: its instructions; else 0 */
    int32_t *best = malloc(((size_t)g->n + 1) * sizeof *best); /* per node: where its next read is placed */
    placed *at = malloc(((size_t)n + 1) * sizeof *at);
    *out = *sc;
    out->ins = malloc(((size_t)n + 1) * sizeof *out->ins);
    if (!a || !len || !best || !at || !out->ins) {
        free(a), free(len), free(best), free(at), free(out->ins), out->ins = NULL;
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    n = 0;
    for (int i = 0; i < sc->n; i++)
        if (sc->ins[i].kind != REMAT__I_FREE) a[n++] = sc->ins[i];
    for (int i = 0; i < n; i++) {
        if (!is_rec(&a[i])) continue;
        len[i] = unit_len(g, a, n, i);
        i += len[i] - 1;
    }
    for (int32_t u = 0; u < g->n; u++) best[u] = INT32_MAX;
    /* backward over the instructions: where each unit goes is the least
     * place of the reads after it (an instruction's own index; a unit's
     * own place), up to the node's next instance, which is a read too */
    int units = 0;
    int32_t barrier = n, next_other = n;
    for (int i = n - 1; i >= 0; i--) {
        const remat__instr *b = &a[i];
        if (is_rec(b) && !len[i]) continue;                       /* an extra output: with its unit */
        if (b->kind != REMAT__I_FWD && b->kind != REMAT__I_BWD) { /* nothing moves past it */
            barrier = next_other = i;
            continue;
        }
        int lo = i, hi = i + (len[i] ? len[i] : 1);
        int32_t place = i;
        if (len[i]) {
            int32_t d = INT32_MAX;
            for (int q = lo; q < hi; q++)
                if (best[a[q].node] < d) d = best[a[q].node];
            place = d == INT32_MAX ? next_other : d < barrier ? d : barrier; /* read by nothing: it stays */
            at[units++] = (placed){place, b->node, i};
        } else {
            next_other = i;
        }
        for (int q = lo; q < hi; q++) {
            if (a[q].kind == REMAT__I_FWD) best[a[q].node] = place; /* an instance: the earlier ones end here */
            lower_reads(g, &a[q], a, lo, hi, best, place);
        }
    }
    *work -= n;
    qsort(at, (size_t)units, sizeof *at, by_place);
    int k = 0, u = 0;
    for (int j = 0; j <= n; j++) {
        for (; u < units && at[u].dl == j; u++)
            for (int q = 0; q < len[at[u].start]; q++) out->ins[k++] = a[at[u].start + q];
        if (j < n && !is_rec(&a[j])) out->ins[k++] = a[j];
    }
    out->n = k, out->cap = n + 1;
    free(a), free(len), free(best), free(at);
    return remat__schedule_add_frees(p, out);
}

/* Whether sc copies values to the host and back (offload). */
int remat__offloads(const remat__schedule *sc) {
    for (int i = 0; i < sc->n; i++)
        if (sc->ins[i].kind == REMAT__I_OUT || sc->ins[i].kind == REMAT__I_IN) return 1;
    return 0;
}

/* Prunes *sc in place (the comment at PRUNE_PASSES), trying while *work
 * (instructions built) lasts; the work used is taken from *work. A
 * schedule that offloads is left as it is. */
remat_status remat__prune(const remat__prog *p, remat__schedule *sc, double *work, remat__peak_memo *memo) {
    if (remat__offloads(sc)) return REMAT_OK;
    size_t peak = 0;
    remat_status st = remat__values_peak_memo(p, sc, &peak, memo);
    if (st == REMAT_UNSUPPORTED) return REMAT_OK; /* not a candidate anyway */
    for (int pass = 0, dropped = 1; pass < PRUNE_PASSES && dropped && st == REMAT_OK; pass++) {
        dropped = 0;
        for (int q = 0, i; st == REMAT_OK && *work > 0 && (i = remat__nth_recompute(sc, q)) >= 0;) {
            remat__schedule t;
            size_t pk = 0;
            st = prune_try(p, sc, i, peak, &t, &pk, work, memo);
            if (st == REMAT_OK && pk <= peak) { /* dropped: the next one is the q-th now */
                remat__schedule_free(sc);
                *sc = t;
                dropped = 1;
                continue;
            }
            remat__schedule_free(&t);
            if (st == REMAT_UNSUPPORTED) st = REMAT_OK; /* it would read a value overwritten in place */
            q++;
        }
    }
    return st;
}

/* Does the schedule compute some node more than twice (a first forward and
 * more than one recomputation)? */
static int recomputes_twice(const remat_graph *g, const remat__schedule *sc) {
    uint8_t *n = calloc((size_t)g->n + 1, 1);
    int twice = !n;
    for (int i = 0; i < sc->n && !twice; i++)
        if (sc->ins[i].kind == REMAT__I_FWD && ++n[sc->ins[i].node] > 2) twice = 1;
    free(n);
    return twice;
}

/* Whether the schedule recomputes something before the backward starts
 * (DTR evicts and remakes values within the forward): a traced step's
 * framework runs its forward as written, so it cannot run such a
 * schedule. */
static int recomputes_in_forward(const remat__schedule *sc) {
    for (int i = 0; i < sc->n; i++) {
        if (sc->ins[i].kind == REMAT__I_BWD) return 0;
        if (sc->ins[i].kind == REMAT__I_FWD && !sc->ins[i].first) return 1;
    }
    return 0;
}

int remat__runnable(const remat__prog *p, const remat__schedule *sc, int once) {
    return !(once && recomputes_twice(p->g, sc)) && !(p->g->traced && recomputes_in_forward(sc));
}
