/* optimal_relax.c: the candidates `optimal` adds between the generators'
 * ones (optimal.c). The generators make a few dozen schedules each, so
 * between two of them on the frontier of held bytes and cost there are
 * budgets at which neither is the cheapest plan that fits. Two searches,
 * each a path of greedy steps that do not depend on the budget (so the
 * candidate set still does not, and a larger budget still never gets a
 * costlier plan), and every schedule a step tries is a candidate:
 *
 * - tightening: from each keep-expensive and drop-expensive level mask,
 *   a step drops (recomputes for the backward) the kept value that takes
 *   the most bytes off the peak per cost it adds (relax.c,
 *   remat__tighten_step); each step's schedule is also offered sunk and
 *   pruned (refine.c). A second tightening, after the relaxations below,
 *   drops a value with the kept values up to REMAT__TIGHTEN_DEPTH inputs
 *   above it as one step (a BatchNorm and its ReLU, a decomposed GELU:
 *   no one of them dropped alone lowers the peak, since what recomputes it
 *   is then kept in its place); it comes last so that the relaxations
 *   start from the same frontier as without it, and only adds candidates;
 * - relaxation: from each candidate on the frontier, a step gives back
 *   the recomputation that saves the most cost per byte it adds to the
 *   peak (remat__relax_step), up to the next frontier candidate's peak;
 *   of what it tries, the schedules cheaper than every candidate that
 *   holds as little are kept;
 * - re-tightening: each schedule along each relaxation's path, as the
 *   level mask of what it recomputes, tightened as above: a step given
 *   back and another value dropped reach plans neither search reaches
 *   alone (test_ilp's llama_1l at its floor: the ILP's plan recomputes
 *   the embedding and not the query projection);
 * - splitting, last: from each candidate on the frontier (tightest
 *   first), a step makes a value the schedule holds across its peak again
 *   just before its first read after the peak (with the inputs up to
 *   SPLIT_DEPTH above it, where that alone does not lower the peak; in a
 *   second pass up to SPLIT_DEEP), so that the instance before
 *   goes after its last read before the peak (relax.c, remat__split_step:
 *   the move that takes the most bytes off the peak per cost added, or
 *   where none lowers it, the cheapest that reaches it fewer times);
 *   every step's schedule is a candidate. A level mask recomputes a value
 *   once, for all its reads in the backward; test_ilp's resnet_tiny at
 *   its floor is 10.56% above the ILP's optimum that way, whose plan
 *   recomputes the first convolution twice (0.09% with splitting). Not
 *   under recompute_once, whose plans recompute each op at most once.
 *
 * Each search stops after a bound of instructions built (TIGHTEN_WORK,
 * RELAX_WORK, RETIGHTEN_WORK, SPLIT_WORK), so on graphs of thousands of ops it takes
 * only its first steps; on test_ilp's small graphs it runs to the end.
 */
#include "optimal-impl.h"
#include "refine.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int remat__optimal_by_cost(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    if (x->lb != y->lb) return x->lb < y->lb ? -1 : 1;
    return x->gi != y->gi ? x->gi - y->gi : x->j - y->j;
}

int remat__optimal_by_lb(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->lb != y->lb) return x->lb < y->lb ? -1 : 1;
    return remat__optimal_by_cost(a, b);
}

remat_status remat__optimal_tightened(const gen_ctx *x, const cand *k, remat__schedule *sc) {
    uint8_t *level = NULL;
    int drop = k->gi == x->gi_drop;
    remat_status st = REMAT_OK;
    if (k->mask) {
        if (!(level = malloc((size_t)x->p->g->n))) return remat__err(REMAT_NOMEM, "out of memory planning");
        memcpy(level, k->mask, (size_t)x->p->g->n);
    } else {
        st = remat__selective_levels(x->p, k->j + drop, k->count, drop, &level);
    }
    int32_t *group = st == REMAT_OK ? malloc(((size_t)x->p->g->n + 1) * sizeof *group) : NULL;
    if (st == REMAT_OK && !group) st = remat__err(REMAT_NOMEM, "out of memory planning");
    for (int s = 0; st == REMAT_OK && s <= k->steps; s++) /* the moves, replayed in order (an exchange's: none) */
        if (s < k->steps || k->last >= 0)
            remat__tighten_apply(x->p->g, level, s < k->steps ? k->relax[s] : k->last, group);
    free(group);
    if (st == REMAT_OK) st = remat__schedule_build(x->p, x->loss, REMAT_NONE, 1, 1, level, sc);
    if (st == REMAT_OK) sc->origin = k->mask ? "tightened" : drop ? "drop-expensive" : "keep-expensive";
    free(level);
    return st;
}

/* Relaxation (relax.c) builds at most this many instructions per planning,
 * from the frontier's tightest candidates up. */
#define RELAX_WORK 4e6

/* A relaxation under way, as far as step steps, and the candidates it
 * adds to *cands: every schedule a step tries that holds less than next. */
typedef struct {
    cand src, **cands;
    int *nc, cap, steps, tight;
    const relaxation *rel;
    size_t next, held_outside;
} relaxing;

remat_status remat__optimal_append(cand **cands, int *nc, int *cap, cand k) {
    if (*nc == *cap) {
        cand *more = realloc(*cands, 2 * (size_t)*cap * sizeof *more);
        if (!more) return remat__err(REMAT_NOMEM, "out of memory planning");
        *cands = more, *cap *= 2;
    }
    (*cands)[(*nc)++] = k;
    return REMAT_OK;
}

static remat_status add(relaxing *r, cand k) { return remat__optimal_append(r->cands, r->nc, &r->cap, k); }

static remat_status seen(void *ctx, int drop, size_t peak, double cost) {
    relaxing *r = ctx;
    if (peak + r->held_outside >= r->next) return REMAT_OK;
    cand k = r->src;
    k.base = r->tight ? NULL : &r->rel->base, k.relax = r->rel->path, k.steps = r->steps, k.last = drop;
    if (r->tight) k.sink = 0, k.prune = 0;
    k.cost = cost, k.lb = peak + r->held_outside, k.held = 0;
    return add(r, k);
}

/* A tightening step's schedule (r's steps, then node) sunk and pruned
 * (refine.c), as a candidate too; its pruning builds at most allow
 * instructions, so that on a large graph the first step's pruning does
 * not take the work of every later step (rt.compile's ResNet-50 joint
 * graph: one pruning took 3.2e6 of TIGHTEN_WORK's 4e6, and the search
 * stopped after two steps; bounded, its plan at 404 MiB recomputes +1.6%
 * FLOPs where it recomputed +10.7%). */
static remat_status tightened_refined(const gen_ctx *x, relaxing *r, int32_t move, double allow, double *work) {
    cand k = r->src;
    k.relax = r->rel->path, k.steps = r->steps, k.last = move, k.held = 0;
    remat__schedule sc, t;
    remat_status st = remat__optimal_tightened(x, &k, &sc);
    if (st != REMAT_OK) return st;
    st = remat__sink(x->p, &sc, &t, work);
    remat__schedule_free(&sc);
    size_t pk = 0;
    double left = *work < allow ? *work : allow;
    k.sink = 1, k.prune = left > 0 ? left : 0;
    if (st == REMAT_OK && k.prune > 0) st = remat__prune(x->p, &t, &left, x->memo), *work -= k.prune - left;
    if (st == REMAT_OK) st = remat__values_peak_memo(x->p, &t, &pk, x->memo);
    k.cost = remat__schedule_cost(x->p, &t), k.lb = pk + r->held_outside;
    remat__schedule_free(&t);
    return st == REMAT_OK ? add(r, k) : st == REMAT_UNSUPPORTED ? REMAT_OK : st;
}

/* Walking candidates sorted by remat__optimal_by_lb: whether c costs
 * less than every one before it (it is on the frontier of held bytes and
 * cost); *least: the least cost so far. */
static int on_frontier(const cand *c, double *least) {
    if (c->cost >= *least) return 0;
    *least = c->cost;
    return 1;
}

/* Keeps, of the relaxed candidates, those cheaper than every candidate
 * that holds as little or less (by the lower bound): the rest would only
 * be placed, at a budget, to lose to one of those. */
static void keep_frontier(cand *cands, int *nc) {
    qsort(cands, (size_t)*nc, sizeof *cands, remat__optimal_by_lb);
    double least = INFINITY;
    int k = 0;
    for (int i = 0; i < *nc; i++)
        if (on_frontier(&cands[i], &least) || cands[i].last < 0) cands[k++] = cands[i];
    *nc = k;
}

/* Tightening (relax.c) builds at most this many instructions per planning. */
#define TIGHTEN_WORK 4e6

/* Tightens level (the caller's) step by step (relax.c), as rx's
 * candidates: every drop a step tries that lowers the peak, and each
 * step's schedule sunk and pruned; rel: where its steps go. */
static remat_status tighten_from(const gen_ctx *x, relaxing *rx, relaxation *rel, uint8_t *level, int depth,
                                 double *work) {
    const remat_graph *g = x->p->g;
    size_t peak = 0;
    double cost = 0;
    rx->rel = rel;
    uint8_t *live = malloc((size_t)g->n + 1); /* what the current schedule holds at its peak */
    remat_status st = live ? remat__level_peak(x->p, x->loss, level, 0, &peak, &cost, live, work, x->memo)
                           : remat__err(REMAT_NOMEM, "out of memory planning");
    if (st == REMAT_OK && !(rel->path = malloc(((size_t)g->n + 1) * sizeof(int))))
        st = remat__err(REMAT_NOMEM, "out of memory planning");
    int32_t *group = malloc(((size_t)g->n + 1) * sizeof *group);
    if (st == REMAT_OK && !group) st = remat__err(REMAT_NOMEM, "out of memory planning");
    for (int32_t move; st == REMAT_OK && rx->steps < g->n; rx->steps++) {
        double before = *work;
        st = remat__tighten_step(x->p, x->loss, level, live, depth, 0, group, peak, cost, &move, &peak, &cost, work,
                                 seen, rx, x->memo);
        /* pruning: as much as the step's tries built, or an eighth of the work left */
        if (st == REMAT_OK) st = tightened_refined(x, rx, move, fmax(before - *work, *work / 8), work);
        if (st == REMAT_OK) remat__tighten_apply(g, level, move, group), rel->path[rx->steps] = move;
        if (st == REMAT_OK) /* the step's schedule: live */
            st = remat__level_peak(x->p, x->loss, level, 0, &peak, &cost, live, work, x->memo);
    }
    free(group);
    free(live);
    return st == REMAT_BUDGET || st == REMAT_UNSUPPORTED ? REMAT_OK : st; /* no drop lowers it */
}

/* The keep-expensive and drop-expensive levels, each tightened step by
 * step (relax.c), as candidates: every drop a step tries that lowers the
 * peak; rel[0, *used): their steps. */
remat_status remat__optimal_tighten(const gen_ctx *x, size_t held_outside, int depth, cand **cands, int *nc,
                                    relaxation *rel, int *used) {
    double work = TIGHTEN_WORK;
    remat_status st = REMAT_OK;
    int cap = *nc; /* measure_all made room for at least as many */
    for (int drop = 0; drop < 2 && st == REMAT_OK; drop++) {
        int gi = drop ? x->gi_drop : x->gi_keep;
        for (int j = 0; j < N_SELECTIVE && st == REMAT_OK && work > 0 && gi >= 0; j++) {
            relaxing rx = {.src = {.gi = gi, .j = j, .count = N_SELECTIVE, .last = -1},
                           .cands = cands,
                           .nc = nc,
                           .cap = cap,
                           .tight = 1,
                           .rel = &rel[*used],
                           .next = SIZE_MAX,
                           .held_outside = held_outside};
            uint8_t *level = NULL;
            st = remat__selective_levels(x->p, j + drop, N_SELECTIVE, drop, &level);
            if (st == REMAT_OK) st = tighten_from(x, &rx, &rel[(*used)++], level, depth, &work);
            cap = rx.cap;
            free(level);
        }
    }
    return st;
}

/* The schedules between the frontier's candidates (relax.c), as
 * candidates; rel[f]: the f-th relaxation, freed by the caller. */
remat_status remat__optimal_relax(const gen_ctx *x, size_t held_outside, cand **cands, int *nc, relaxation *rel) {
    qsort(*cands, (size_t)*nc, sizeof **cands, remat__optimal_by_lb);
    int n0 = *nc, nf = 0, *front = malloc(((size_t)n0 + 1) * sizeof *front);
    if (!front) return remat__err(REMAT_NOMEM, "out of memory planning");
    double least = INFINITY;
    for (int k = 0; k < n0; k++) /* ascending in what it holds, each cheaper than every one before */
        if (on_frontier(&(*cands)[k], &least)) front[nf++] = k;
    double work = RELAX_WORK;
    remat_status st = REMAT_OK;
    int cap = *nc; /* measure_all made room for at least as many */
    for (int f = 0; f + 1 < nf && st == REMAT_OK && work > 0; f++) {
        relaxing rx = {(*cands)[front[f]], cands, nc, cap, 0, 0, &rel[f], (*cands)[front[f + 1]].lb, held_outside};
        rel[f].src = rx.src;
        size_t peak = rx.src.lb - held_outside;
        double cost = rx.src.cost;
        remat__schedule *sc = &rel[f].base, t;
        double made = 0;
        if ((st = x->make(x, &rx.src, sc, &made)) != REMAT_OK) break;
        int r = 0, drop;
        for (int i = 0; i < sc->n; i++) r += sc->ins[i].kind == REMAT__I_FWD && !sc->ins[i].first;
        work -= made; /* making it again */
        rel[f].path = malloc(((size_t)r + 1) * sizeof *rel[f].path);
        if (!rel[f].path) st = remat__err(REMAT_NOMEM, "out of memory planning");
        remat__schedule cur = {0};
        for (; st == REMAT_OK && rx.steps < r && peak + held_outside < rx.next; rx.steps++) {
            st = remat__relax_step(x->p, sc, peak, cost, &t, &drop, &peak, &cost, &work, seen, &rx);
            if (st != REMAT_OK) break;
            remat__schedule_free(&cur);
            cur = t, sc = &cur, rel[f].path[rx.steps] = drop;
        }
        if (st == REMAT_BUDGET) st = REMAT_OK; /* nothing more to give back */
        rel[f].steps = rx.steps;
        remat__schedule_free(&cur);
        cap = rx.cap;
    }
    free(front);
    if (st == REMAT_OK) keep_frontier(*cands, nc);
    return st;
}

/* Re-tightening (relax.c) builds at most this many instructions per
 * planning, from the frontier's tightest relaxations up. */
#define RETIGHTEN_WORK 4e6

/* The nodes schedule sc recomputes, as a level mask: dropped, the rest kept. */
static remat_status recomputed_mask(const remat__prog *p, const remat__schedule *sc, uint8_t **mask) {
    if (!(*mask = calloc((size_t)p->g->n, 1))) return remat__err(REMAT_NOMEM, "out of memory planning");
    for (int i = 0; i < sc->n; i++)
        if (sc->ins[i].kind == REMAT__I_FWD && !sc->ins[i].first) (*mask)[sc->ins[i].node] = REMAT__LEVEL_NONE;
    return REMAT_OK;
}

/* The schedule cur along relaxation src's path, as the level mask of what
 * it recomputes, tightened by moves up to depth (a relaxation appended to
 * *out, whose room is *room). */
static remat_status retighten_at(const gen_ctx *x, size_t held_outside, const cand *src, const remat__schedule *cur,
                                 int depth, double *work, cand **cands, int *nc, int *cap, relaxation **out, int *n_out,
                                 int *room) {
    if (*n_out == *room) {
        relaxation *more = realloc(*out, (size_t)(*room = 2 * *room + 4) * sizeof *more);
        if (!more) return remat__err(REMAT_NOMEM, "out of memory planning");
        *out = more;
    }
    relaxation *r = &(*out)[(*n_out)++];
    memset(r, 0, sizeof *r);
    remat_status st = recomputed_mask(x->p, cur, &r->mask);
    relaxing rx = {
        .src = *src, .cands = cands, .nc = nc, .cap = *cap, .tight = 1, .next = SIZE_MAX, .held_outside = held_outside};
    rx.src.mask = r->mask, rx.src.base = NULL; /* seen and tightened_refined set the rest */
    uint8_t *level = NULL;
    if (st == REMAT_OK && !(level = malloc((size_t)x->p->g->n))) st = remat__err(REMAT_NOMEM, "out of memory planning");
    if (st == REMAT_OK) memcpy(level, r->mask, (size_t)x->p->g->n);
    if (st == REMAT_OK) st = tighten_from(x, &rx, r, level, depth, work);
    *cap = rx.cap;
    free(level);
    return st;
}

remat_status remat__optimal_retighten(const gen_ctx *x, size_t held_outside, cand **cands, int *nc,
                                      const relaxation *rel, int n_rel, relaxation **out, int *n_out) {
    double work[2] = {RETIGHTEN_WORK, RETIGHTEN_WORK}; /* one node at a time; with the inputs above it */
    remat_status st = REMAT_OK;
    int cap = *nc, room = 0;
    *out = NULL, *n_out = 0;
    for (int f = 0; f < n_rel && st == REMAT_OK && work[0] > 0; f++) {
        const remat__schedule *sc = &rel[f].base;
        remat__schedule cur = {0};
        /* each schedule along the relaxation's path, from its first step */
        for (int s = 0; s < rel[f].steps && st == REMAT_OK && work[0] > 0; s++) {
            remat__schedule t;
            st = remat__without(x->p, sc, rel[f].path[s], &t);
            if (st != REMAT_OK) break;
            remat__schedule_free(&cur);
            cur = t, sc = &cur, work[0] -= t.n;
            for (int pass = 0; pass < 2 && st == REMAT_OK; pass++)
                if (work[pass] > 0)
                    st = retighten_at(x, held_outside, &rel[f].src, &cur, pass ? REMAT__TIGHTEN_DEPTH : 0, &work[pass],
                                      cands, nc, &cap, out, n_out, &room);
        }
        remat__schedule_free(&cur);
    }
    if (st == REMAT_OK) keep_frontier(*cands, nc);
    return st;
}

/* Splitting (relax.c, remat__split_step) runs twice from the frontier's
 * candidates, tightest first: with moves up to SPLIT_DEPTH inputs above
 * the value made again, then up to SPLIT_DEEP (each try of a deeper move
 * costs a little more, so with the one work bound the deeper pass alone
 * reaches fewer of the frontier's candidates: densenet-bc b64's floor was
 * 1.0% higher); each pass builds at most SPLIT_WORK instructions. */
#define SPLIT_WORK 4e6
#define SPLIT_DEPTH 2
#define SPLIT_DEEP 4

/* Splits src's schedule step by step, each step's schedule a candidate;
 * *path: the moves (3 ints each), which those candidates point to. */
static remat_status split_from(const gen_ctx *x, size_t held_outside, const cand *src, int depth, cand **cands, int *nc,
                               int *cap, int32_t **path, double *work) {
    remat__schedule cur;
    double made = 0;
    remat_status st = x->make(x, src, &cur, &made);
    if (st != REMAT_OK) return st;
    *work -= made;
    int first = *nc, steps = 0, room = 0;
    double cost = src->cost;
    while (st == REMAT_OK && *work > 0 && !remat__offloads(&cur)) {
        int32_t m[3];
        size_t pk = 0;
        remat__schedule t;
        st = remat__split_step(x->p, &cur, depth, cost, m, &pk, &cost, work, x->memo);
        if (st == REMAT_OK) st = remat__resplit(x->p, &cur, m, &t);
        if (st != REMAT_OK) break;
        remat__schedule_free(&cur);
        cur = t;
        if (steps == room) {
            int32_t *more = realloc(*path, (size_t)(room = 2 * room + 8) * 3 * sizeof *more);
            if (!more) st = remat__err(REMAT_NOMEM, "out of memory planning");
            else *path = more;
        }
        if (st != REMAT_OK) break;
        memcpy(&(*path)[3 * steps++], m, sizeof m);
        cand k = *src;
        k.splits = steps, k.cost = cost, k.lb = pk + held_outside, k.held = 0;
        st = remat__optimal_append(cands, nc, cap, k);
    }
    for (int i = first; i < *nc; i++) (*cands)[i].split = *path; /* where it is now */
    remat__schedule_free(&cur);
    return st == REMAT_BUDGET || st == REMAT_UNSUPPORTED ? REMAT_OK : st; /* no move lowers the peak */
}

remat_status remat__optimal_split(const gen_ctx *x, size_t held_outside, int exchanged, cand **cands, int *nc,
                                  int32_t ***paths, int *n_paths) {
    *paths = NULL, *n_paths = 0;
    if (x->p->recompute_once || x->p->no_split) return REMAT_OK; /* it recomputes a node twice */
    qsort(*cands, (size_t)*nc, sizeof **cands, remat__optimal_by_lb);
    int n0 = *nc, nf = 0, *front = malloc(((size_t)n0 + 1) * sizeof *front);
    if (!front || !(*paths = calloc(2 * (size_t)n0 + 1, sizeof **paths))) {
        free(front);
        return remat__err(REMAT_NOMEM, "out of memory planning");
    }
    double least = INFINITY;
    for (int k = 0; k < n0; k++) /* with exchanged, only the exchange's (optimal_exchange.c) */
        if (on_frontier(&(*cands)[k], &least) && (!exchanged || ((*cands)[k].mask && (*cands)[k].last < 0)))
            front[nf++] = k;
    remat_status st = REMAT_OK;
    int cap = *nc;
    for (int pass = 0; pass < 2; pass++) {
        double work = SPLIT_WORK;
        for (int f = 0; f < nf && st == REMAT_OK && work > 0; f++) {
            cand src = (*cands)[front[f]];
            st = split_from(x, held_outside, &src, pass ? SPLIT_DEEP : SPLIT_DEPTH, cands, nc, &cap,
                            &(*paths)[(*n_paths)++], &work);
        }
    }
    free(front);
    return st;
}
