/* dtr.c: the DTR fallback planner (see dtr.h for the model).
 *
 * One run walks the nodes to compute in index order. Before the first
 * computation of v, a phase makes v's deps resident: it gathers, with an
 * explicit stack, the evicted values v needs and, transitively, those they
 * need, and recomputes them in index order (a topological order), each
 * pinned until the phase's last read of it, then computes v. Before each
 * computation, while the resident set plus the new value exceeds the
 * budget, the unpinned resident value with the least heuristic score
 * (dtr.h) is evicted; when none is left the run fails. Values are freed
 * without a heuristic as soon as they are dead under the freeing policy.
 *
 * Offline, a failed run can be learnt from. The phase that failed had to
 * recompute some evicted dep u of v; the next run makes u resident in a
 * phase of its own before v's, when less is pinned, and keeps it until v
 * (a "hint"), moving the hint earlier if that phase fails in turn. When
 * learning gives out, the runs start again with DTR's own recursive phases
 * (a stack of frames, each pinning only its node's deps), which can succeed
 * where the ordered phases pin too much. That chain of runs is one
 * simulation.
 *
 * A run depends on its budget only through "resident + size > budget"
 * tests, so a simulation whose runs peak at P at most (including the part
 * of a failed run before its failure) runs identically at every budget in
 * [P, budget]. The planner therefore sweeps downward: at the budget, then
 * at P - 1, and so on to the floor, for every (heuristic, policy) pair in
 * turn, and keeps the cheapest schedule. Without a limit the sweep sees
 * every distinct outcome at every budget <= the budget, so the cost found
 * never rises with the budget. Cost: O(n + resident per eviction) per run
 * for the plain heuristics, O(n) more per candidate for those that walk
 * e*; a work limit (dtr.h) bounds the whole search.
 */
#include "dtr-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

static void opbuf_push(opbuf *b, int32_t node, uint8_t kind) {
    if (b->n == b->cap) {
        if (b->oom || b->cap > INT_MAX / 4) {
            b->oom = 1;
            return;
        }
        int cap = b->cap ? 2 * b->cap : 64;
        remat__dtr_op *v = realloc(b->v, (size_t)cap * sizeof *v);
        if (!v) {
            b->oom = 1;
            return;
        }
        b->v = v, b->cap = cap;
    }
    b->v[b->n++] = (remat__dtr_op){.node = node, .kind = kind};
}

#define MAX_TRIES 16 /* runs per phase mode in one simulation, so hints too */

void remat__dtr_free(dtr *d) {
    free(d->in_c), free(d->cons_off), free(d->cons), free(d->last_direct), free(d->last_reach);
    for (int p = 0; p < REMAT__DTR_POLICY_COUNT; p++) free(d->dies_off[p]), free(d->dies[p]);
    free(d->state), free(d->pin), free(d->last_access), free(d->mark), free(d->stack), free(d->frame);
    free(d->frame_next), free(d->phase);
    free(d->res), free(d->res_pos), free(d->protect), free(d->hints), free(d->in_phase);
    memset(d, 0, sizeof *d);
}

remat_status remat__dtr_validate(const remat__dtr_node *nodes, int n, int64_t budget) {
    if (n < 0 || (n > 0 && !nodes)) return remat__err(REMAT_INVALID, "dtr planner: bad node list (n = %d)", n);
    if (budget < 0) return remat__err(REMAT_INVALID, "dtr planner: negative budget %lld", (long long)budget);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const remat__dtr_node *v = &nodes[i];
        if (!isfinite(v->cost) || v->cost < 0)
            return remat__err(REMAT_INVALID, "dtr planner: node %d has cost %g (must be finite and >= 0)", i, v->cost);
        if (v->size < 0 || v->size > INT64_MAX / 4 - total)
            return remat__err(REMAT_INVALID, "dtr planner: node %d has size %lld (negative, or sizes overflow)", i,
                              (long long)v->size);
        total += v->size;
        if (v->n_deps < 0 || (v->n_deps > 0 && !v->deps))
            return remat__err(REMAT_INVALID, "dtr planner: node %d has a bad dependency list (%d deps)", i,
                              (int)v->n_deps);
        for (int j = 0; j < v->n_deps; j++)
            if (v->deps[j] < 0 || v->deps[j] >= i)
                return remat__err(REMAT_INVALID, "dtr planner: node %d depends on %d (deps must be earlier nodes)", i,
                                  (int)v->deps[j]);
    }
    return REMAT_OK;
}

static uint32_t next_phase_gen(dtr *d) {
    if (++d->phase_gen == 0) {
        memset(d->in_phase, 0, (size_t)d->n * sizeof *d->in_phase);
        d->phase_gen = 1;
    }
    return d->phase_gen;
}

static void next_gen(dtr *d) {
    if (++d->gen == 0) {
        memset(d->mark, 0, (size_t)d->n * sizeof *d->mark);
        d->gen = 1;
    }
}

/* Allocates d's arrays for d->n nodes; 0 when out of memory. */
static int dtr_alloc(dtr *d) {
    const remat__dtr_node *nodes = d->nd;
    int n = d->n;
    size_t un = (size_t)n + 1;
    int64_t n_edges = 0;
    for (int i = 0; i < n; i++) n_edges += nodes[i].n_deps;
    d->in_c = calloc(un, 1);
    d->cons_off = calloc(un + 1, sizeof *d->cons_off);
    d->cons = malloc(((size_t)n_edges + 1) * sizeof *d->cons);
    d->last_direct = malloc(un * sizeof *d->last_direct);
    d->last_reach = malloc(un * sizeof *d->last_reach);
    for (int p = 0; p < REMAT__DTR_POLICY_COUNT; p++) {
        d->dies_off[p] = calloc(un + 1, sizeof *d->dies_off[p]);
        d->dies[p] = malloc(un * sizeof *d->dies[p]);
    }
    d->state = malloc(un);
    d->pin = malloc(un * sizeof *d->pin);
    d->last_access = malloc(un * sizeof *d->last_access);
    d->mark = calloc(un, sizeof *d->mark);
    d->stack = malloc(un * sizeof *d->stack);
    d->frame = malloc(un * sizeof *d->frame);
    d->frame_next = malloc(un * sizeof *d->frame_next);
    d->phase = malloc((un + 1) * sizeof *d->phase);
    d->res = malloc(un * sizeof *d->res);
    d->res_pos = malloc(un * sizeof *d->res_pos);
    d->protect = malloc(un * sizeof *d->protect);
    d->hints = malloc(MAX_TRIES * sizeof *d->hints);
    d->in_phase = calloc(un, sizeof *d->in_phase);
    int ok = d->in_c && d->cons_off && d->cons && d->last_direct && d->last_reach && d->state && d->pin &&
             d->last_access && d->mark && d->stack && d->frame && d->frame_next && d->phase && d->res && d->res_pos &&
             d->protect && d->hints && d->in_phase;
    for (int p = 0; p < REMAT__DTR_POLICY_COUNT; p++) ok = ok && d->dies_off[p] && d->dies[p];
    return ok;
}

/* The computed set: required nodes and their ancestors (deps point
 * backwards, so one reverse sweep closes it). */
static void find_computed(dtr *d) {
    const remat__dtr_node *nodes = d->nd;
    for (int i = 0; i < d->n; i++) d->in_c[i] = nodes[i].required != 0;
    for (int i = d->n - 1; i >= 0; i--)
        if (d->in_c[i])
            for (int j = 0; j < nodes[i].n_deps; j++) d->in_c[nodes[i].deps[j]] = 1;
}

/* The computed consumers of every node, counting a repeated dep once per
 * occurrence. */
static void find_consumers(dtr *d) {
    const remat__dtr_node *nodes = d->nd;
    int n = d->n;
    for (int i = 0; i < n; i++)
        if (d->in_c[i])
            for (int j = 0; j < nodes[i].n_deps; j++) d->cons_off[nodes[i].deps[j] + 1]++;
    for (int i = 0; i < n; i++) d->cons_off[i + 1] += d->cons_off[i];
    int64_t *fill = (int64_t *)d->last_access; /* scratch, same width */
    for (int i = 0; i < n; i++) fill[i] = d->cons_off[i];
    for (int i = 0; i < n; i++)
        if (d->in_c[i])
            for (int j = 0; j < nodes[i].n_deps; j++) d->cons[fill[nodes[i].deps[j]]++] = i;
}

/* Liveness horizons, then per policy the nodes dying at each first
 * computation. */
static void find_deaths(dtr *d) {
    int n = d->n;
    for (int i = n - 1; i >= 0; i--) {
        int32_t dl = i, rl = i;
        for (int64_t k = d->cons_off[i]; k < d->cons_off[i + 1]; k++) {
            int32_t c = d->cons[k];
            if (c > dl) dl = c;
            if (d->last_reach[c] > rl) rl = d->last_reach[c];
        }
        d->last_direct[i] = dl, d->last_reach[i] = rl;
    }
    for (int p = 0; p < REMAT__DTR_POLICY_COUNT; p++) {
        const int32_t *at = p == REMAT__DTR_EAGER ? d->last_direct : d->last_reach;
        for (int i = 0; i < n; i++)
            if (d->in_c[i]) d->dies_off[p][at[i] + 1]++;
        for (int i = 0; i < n; i++) d->dies_off[p][i + 1] += d->dies_off[p][i];
        int32_t *f32 = d->pin; /* scratch */
        for (int i = 0; i < n; i++) f32[i] = d->dies_off[p][i];
        for (int i = 0; i < n; i++)
            if (d->in_c[i]) d->dies[p][f32[at[i]]++] = i;
    }
}

/* Base cost and the floor: v with its distinct deps resident. */
static void find_floor(dtr *d) {
    const remat__dtr_node *nodes = d->nd;
    d->floor_node = -1;
    for (int i = 0; i < d->n; i++) {
        if (!d->in_c[i]) continue;
        d->base_cost += nodes[i].cost;
        d->total_size += nodes[i].size;
        next_gen(d);
        int64_t need = nodes[i].size;
        for (int j = 0; j < nodes[i].n_deps; j++) {
            int32_t u = nodes[i].deps[j];
            if (d->mark[u] == d->gen) continue;
            d->mark[u] = d->gen;
            need += nodes[u].size;
        }
        if (d->floor_node < 0 || need > d->floor) d->floor = need, d->floor_node = i;
    }
}

/* Builds the fixed facts. The nodes have been validated. */
remat_status remat__dtr_init(dtr *d, const remat__dtr_node *nodes, int n) {
    memset(d, 0, sizeof *d);
    d->nd = nodes, d->n = n;
    if (!dtr_alloc(d)) {
        remat__dtr_free(d);
        return remat__err(REMAT_NOMEM, "dtr planner: out of memory for %d nodes", n);
    }
    find_computed(d);
    find_consumers(d);
    find_deaths(d);
    find_floor(d);
    return REMAT_OK;
}

/* ------------------------------------------------------------ simulation */

static int is_dead(const dtr *d, int policy, int32_t x) {
    const int32_t *at = policy == REMAT__DTR_EAGER ? d->last_direct : d->last_reach;
    return at[x] <= d->front;
}

static void make_resident(dtr *d, int32_t x) {
    d->state[x] = 1;
    d->res_pos[x] = d->n_res;
    d->res[d->n_res++] = x;
    d->mem += d->nd[x].size;
}

static void free_value(dtr *d, opbuf *ops, int32_t x) {
    opbuf_push(ops, x, REMAT__DTR_FREE);
    d->state[x] = 2;
    int32_t last = d->res[--d->n_res];
    d->res[d->res_pos[x]] = last;
    d->res_pos[last] = d->res_pos[x];
    d->mem -= d->nd[x].size;
}

/* Cost of the evicted ancestors recomputing t would need. */
static double evicted_ancestors(dtr *d, int32_t t) {
    next_gen(d);
    double sum = 0;
    int top = 0;
    d->stack[top++] = t;
    while (top > 0) {
        const remat__dtr_node *u = &d->nd[d->stack[--top]];
        for (int j = 0; j < u->n_deps; j++) {
            int32_t w = u->deps[j];
            if (d->state[w] != 2 || d->mark[w] == d->gen) continue;
            d->mark[w] = d->gen;
            sum += d->nd[w].cost;
            d->stack[top++] = w;
            d->work++;
        }
    }
    return sum;
}

/* Cost of the evicted, still needed descendants whose recomputation would
 * need t. */
static double evicted_descendants(dtr *d, int32_t t) {
    next_gen(d);
    double sum = 0;
    int top = 0;
    d->stack[top++] = t;
    while (top > 0) {
        int32_t u = d->stack[--top];
        for (int64_t k = d->cons_off[u]; k < d->cons_off[u + 1]; k++) {
            int32_t w = d->cons[k];
            if (d->state[w] != 2 || d->mark[w] == d->gen || d->last_reach[w] <= d->front) continue;
            d->mark[w] = d->gen;
            sum += d->nd[w].cost;
            d->stack[top++] = w;
            d->work++;
        }
    }
    return sum;
}

/* The next first computation that reads t (n + 1 + last_reach(t) when only
 * recomputations may still read it). Consumers are in index order. */
static int64_t next_use(const dtr *d, int32_t t) {
    for (int64_t k = d->cons_off[t]; k < d->cons_off[t + 1]; k++)
        if (d->cons[k] > d->front) return d->cons[k];
    return (int64_t)d->n + 1 + d->last_reach[t];
}

/* The unpinned resident value of least score, or -1. Ties go to the
 * stalest, then the lowest index, so the choice is deterministic. */
static int32_t choose_victim(dtr *d, int h) {
    int32_t best = -1;
    double best_key = 0;
    int64_t best_s = 0;
    d->work += d->n_res;
    for (int i = 0; i < d->n_res; i++) {
        int32_t t = d->res[i];
        if (d->pin[t] > 0 || d->nd[t].size == 0 || d->nd[t].no_evict || d->protect[t] > d->front) continue;
        int64_t s = d->clock + 1 - d->last_access[t]; /* >= 1 */
        double m = (double)d->nd[t].size, c = d->nd[t].cost, key;
        switch (h) {
        case REMAT__DTR_H_DTR: key = (c + evicted_ancestors(d, t) + evicted_descendants(d, t)) / (m * (double)s); break;
        case REMAT__DTR_H_ANC: key = (c + evicted_ancestors(d, t)) / (m * (double)s); break;
        case REMAT__DTR_H_LOCAL: key = c / (m * (double)s); break;
        case REMAT__DTR_H_NOSTALE: key = (c + evicted_ancestors(d, t) + evicted_descendants(d, t)) / m; break;
        case REMAT__DTR_H_LRU: key = 1.0 / (double)s; break;
        case REMAT__DTR_H_SIZE: key = 1.0 / m; break;
        default: { /* the offline ones: distance to the next read */
            double dist = (double)(next_use(d, t) - d->front);
            if (h == REMAT__DTR_H_BELADY) key = 1.0 / dist;
            else key = (c + evicted_ancestors(d, t) + evicted_descendants(d, t)) / (m * dist);
            break;
        }
        }
        if (best < 0 || key < best_key || (key == best_key && (s > best_s || (s == best_s && t < best))))
            best = t, best_key = key, best_s = s;
    }
    return best;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Computes w, whose deps are resident and pinned: evicts until it fits
 * (returns 0 if it cannot), then unpins the deps and frees those that died.
 * first: this is w's first computation. */
static int compute_value(dtr *d, int h, int policy, int64_t b, opbuf *ops, sim_out *so, int32_t w, int first) {
    const remat__dtr_node *nw = &d->nd[w];
    while (d->mem + nw->size > b) {
        int32_t x = choose_victim(d, h);
        if (x < 0) return 0;
        free_value(d, ops, x);
    }
    opbuf_push(ops, w, REMAT__DTR_COMPUTE);
    make_resident(d, w);
    if (d->mem > so->peak) so->peak = d->mem;
    so->cost += nw->cost;
    d->clock++;
    d->last_access[w] = d->clock;
    if (first) d->front = w;
    for (int j = 0; j < nw->n_deps; j++) {
        int32_t u = nw->deps[j];
        d->last_access[u] = d->clock;
        d->pin[u]--;
    }
    for (int j = 0; j < nw->n_deps; j++) {
        int32_t u = nw->deps[j];
        if (d->state[u] == 1 && d->pin[u] == 0 && is_dead(d, policy, u)) free_value(d, ops, u);
    }
    return 1;
}

/* Makes target resident. PHASE_ORDERED: gathers the evicted values it needs,
 * transitively, and computes them once each in index order (the target,
 * their descendant, last), each pinned until the phase's last read of it.
 * PHASE_RECURSIVE, DTR's own way: a stack of frames, each pinning its
 * node's deps and computing the missing ones depth first; a value is pinned
 * only while a frame that reads it is open, so it may be evicted and
 * computed again within the phase (at most 4n + 16 computations). first:
 * this is the target's first computation. Returns 0 if something does not
 * fit, leaving the values the phase had to compute in d->phase[0 ..
 * d->fail_nph). */
enum { PHASE_ORDERED = 0, PHASE_RECURSIVE = 1 };

static int phase(dtr *d, int mode, int h, int policy, int64_t b, opbuf *ops, sim_out *so, int32_t target, int first) {
    const remat__dtr_node *nd = d->nd;
    if (d->state[target] == 1) return 1;
    int n_ph = 0, top = 0;
    d->phase[n_ph++] = target;
    if (mode == PHASE_RECURSIVE) {
        /* Computing values runs choose_victim, whose walks use stack and
         * mark: the frames and the members have arrays of their own. */
        uint32_t member = next_phase_gen(d);
        d->in_phase[target] = member;
        d->frame[top] = target, d->frame_next[top] = 0, top++;
        for (int j = 0; j < nd[target].n_deps; j++) d->pin[nd[target].deps[j]]++;
        int64_t computes = 0;
        while (top > 0) {
            int32_t w = d->frame[top - 1];
            int j = d->frame_next[top - 1];
            while (j < nd[w].n_deps && d->state[nd[w].deps[j]] == 1) j++;
            d->frame_next[top - 1] = j;
            d->work++;
            if (j < nd[w].n_deps) { /* open a frame for the missing dep; frames form a path, so n suffice */
                int32_t u = nd[w].deps[j];
                if (d->in_phase[u] != member) d->in_phase[u] = member, d->phase[n_ph++] = u;
                d->frame[top] = u, d->frame_next[top] = 0, top++;
                for (int k = 0; k < nd[u].n_deps; k++) d->pin[nd[u].deps[k]]++;
                continue;
            }
            if (++computes > 4 * (int64_t)d->n + 16 ||
                !compute_value(d, h, policy, b, ops, so, w, first && w == target)) {
                d->fail_nph = n_ph;
                return 0;
            }
            top--;
        }
        return 1;
    }
    next_gen(d);
    d->mark[target] = d->gen;
    d->stack[top++] = target;
    while (top > 0) { /* each value is pushed once (marked): n slots suffice */
        int32_t u = d->stack[--top];
        for (int j = 0; j < nd[u].n_deps; j++) {
            int32_t w = nd[u].deps[j];
            if (d->state[w] == 1 || d->mark[w] == d->gen) continue;
            d->mark[w] = d->gen;
            d->stack[top++] = w;
            d->phase[n_ph++] = w;
        }
    }
    qsort(d->phase, (size_t)n_ph, sizeof *d->phase, cmp_i32);
    d->work += n_ph;
    for (int k = 0; k < n_ph; k++)
        for (int j = 0; j < nd[d->phase[k]].n_deps; j++) d->pin[nd[d->phase[k]].deps[j]]++;
    for (int k = 0; k < n_ph; k++) {
        int32_t w = d->phase[k];
        if (!compute_value(d, h, policy, b, ops, so, w, first && w == target)) {
            d->fail_nph = n_ph;
            return 0;
        }
    }
    return 1;
}

/* One run at budget b into ops (cleared first), following d->hints.
 * Returns REMAT_NOMEM if ops could not grow; otherwise REMAT_OK with so->ok
 * saying whether everything fit, and if not, which phase failed
 * (d->fail_hint >= 0: that hint's; else the first computation d->fail_v). */
static remat_status run_once(dtr *d, int mode, int h, int policy, int64_t b, opbuf *ops, sim_out *so) {
    memset(d->state, 0, (size_t)d->n);
    memset(d->pin, 0, (size_t)d->n * sizeof *d->pin);
    memset(d->last_access, 0, (size_t)d->n * sizeof *d->last_access);
    for (int i = 0; i < d->n; i++) d->protect[i] = -1;
    d->n_res = 0, d->mem = 0, d->clock = 0, d->front = -1;
    d->work += d->n;
    ops->n = 0;
    *so = (sim_out){0};
    int fired = 0; /* hints are sorted by t: hints[0 .. fired) have fired */
    for (int32_t v = 0; v < d->n; v++) {
        if (!d->in_c[v]) continue;
        for (; fired < d->n_hints && d->hints[fired].t <= v; fired++) {
            dtr_hint *hn = &d->hints[fired];
            if (!phase(d, mode, h, policy, b, ops, so, hn->u, 0)) {
                d->fail_hint = fired;
                return REMAT_OK;
            }
            if (d->protect[hn->u] < hn->v) d->protect[hn->u] = hn->v;
            if (is_dead(d, policy, hn->u) && d->pin[hn->u] == 0) free_value(d, ops, hn->u);
        }
        if (!phase(d, mode, h, policy, b, ops, so, v, 1)) {
            d->fail_hint = -1, d->fail_v = v;
            return REMAT_OK;
        }
        for (int32_t k = d->dies_off[policy][v]; k < d->dies_off[policy][v + 1]; k++) {
            int32_t x = d->dies[policy][k];
            if (d->state[x] == 1 && d->pin[x] == 0) free_value(d, ops, x);
        }
    }
    while (d->n_res > 0) free_value(d, ops, d->res[d->n_res - 1]); /* none is left, but be sure */
    if (ops->oom) return remat__err(REMAT_NOMEM, "dtr planner: out of memory for a schedule of %d operations", ops->n);
    so->ok = 1;
    return REMAT_OK;
}

/* The memory of recomputing u within the failed phase: u and the phase's
 * values it needs, transitively. Phase members have in_phase == member. */
static int64_t phase_footprint(dtr *d, int32_t u, uint32_t member) {
    next_gen(d);
    int64_t sum = d->nd[u].size;
    int top = 0;
    d->stack[top++] = u;
    while (top > 0) {
        const remat__dtr_node *x = &d->nd[d->stack[--top]];
        for (int j = 0; j < x->n_deps; j++) {
            int32_t w = x->deps[j];
            if (d->in_phase[w] != member || d->mark[w] == d->gen) continue;
            d->mark[w] = d->gen;
            sum += d->nd[w].size;
            d->stack[top++] = w;
            d->work++;
        }
    }
    return sum;
}

static int has_hint(const dtr *d, int32_t u, int32_t v) {
    for (int q = 0; q < d->n_hints; q++)
        if (d->hints[q].u == u && d->hints[q].v == v) return 1;
    return 0;
}

/* Inserts a hint, keeping the list sorted by t (stable). */
static void add_hint(dtr *d, dtr_hint hn) {
    int k = d->n_hints++;
    while (k > 0 && d->hints[k - 1].t > hn.t) d->hints[k] = d->hints[k - 1], k--;
    d->hints[k] = hn;
}

/* Learns from a failed run; returns 0 when there is nothing to learn.
 * - The phase of a hint failed: the hint moves earlier, twice as far from v
 *   each time, while its value exists there.
 * - The phase of first computation v failed: some value it had to
 *   recompute is made resident in a phase of its own just before v's and
 *   kept until v. It is the evicted dep of v whose recomputation needed the
 *   most memory, else the largest value of the phase. */
static int learn(dtr *d) {
    if (d->n_hints >= MAX_TRIES) return 0;
    if (d->fail_hint >= 0) {
        dtr_hint hn = d->hints[d->fail_hint];
        if (hn.t <= hn.u + 1) return 0;
        memmove(&d->hints[d->fail_hint], &d->hints[d->fail_hint + 1],
                (size_t)(d->n_hints - d->fail_hint - 1) * sizeof *d->hints);
        d->n_hints--;
        int64_t t = (int64_t)hn.v - 2 * ((int64_t)hn.v - hn.t) - 1;
        hn.t = t > hn.u + 1 ? (int32_t)t : hn.u + 1;
        add_hint(d, hn);
        return 1;
    }
    int32_t v = d->fail_v;
    const remat__dtr_node *nv = &d->nd[v];
    uint32_t member = next_phase_gen(d);
    for (int q = 0; q < d->fail_nph; q++) d->in_phase[d->phase[q]] = member;
    int32_t best = -1;
    int64_t best_fp = -1;
    for (int j = 0; j < nv->n_deps; j++) {
        int32_t u = nv->deps[j];
        if (d->in_phase[u] != member || has_hint(d, u, v)) continue;
        int64_t fp = phase_footprint(d, u, member);
        if (fp > best_fp || (fp == best_fp && u < best)) best = u, best_fp = fp;
    }
    for (int k = 0; best < 0 && k < d->fail_nph; k++) { /* the largest value of the phase */
        int32_t u = d->phase[k];
        if (u == v || has_hint(d, u, v)) continue;
        if (d->nd[u].size > best_fp) best = u, best_fp = d->nd[u].size;
    }
    if (best < 0) return 0;
    add_hint(d, (dtr_hint){.u = best, .t = v, .v = v});
    return 1;
}

/* One simulation: runs with ordered phases, and after each failure learns
 * one hint and runs again, until it fits, nothing is left to learn or
 * MAX_TRIES runs; if it still does not fit, the same with recursive phases.
 * Stops early when the work reaches max_work (< 0: no limit; sets
 * *limited). Each run depends on b only through its comparisons, so the
 * whole chain runs identically at every budget in [so->span, b]. */
remat_status remat__dtr_simulate(dtr *d, int h, int policy, int64_t b, int64_t max_work, int *limited, opbuf *ops,
                                 sim_out *so) {
    int64_t span = 0;
    for (int mode = PHASE_ORDERED; mode <= PHASE_RECURSIVE; mode++) {
        d->n_hints = 0;
        for (int tries = 1;; tries++) {
            remat_status st = run_once(d, mode, h, policy, b, ops, so);
            if (st != REMAT_OK) return st;
            if (so->peak > span) span = so->peak;
            so->span = span;
            if (so->ok) return REMAT_OK;
            if (max_work >= 0 && d->work >= max_work) {
                *limited = 1;
                return REMAT_OK;
            }
            if (tries == MAX_TRIES || !learn(d)) break;
        }
    }
    return REMAT_OK;
}
