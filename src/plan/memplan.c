/* memplan.c: the memory plan (memplan.h): allocation events from one
 * liveness walk, peaks as a fold over them, and their placement in one
 * arena.
 */
#include "memplan.h"

#include <stdlib.h>

void remat__memplan_free(remat__memplan *m) {
    free(m->ev);
    free(m->tick);
    free(m->din);
    memset(m, 0, sizeof *m);
}

remat_status remat__memplan_make(const remat__prog *p, const remat__schedule *s, remat__memplan *out) {
    remat_status st = remat__memplan_build(p, s, out);
    return st == REMAT_OK ? remat__memplan_place(out) : st;
}

/* ------------------------------------------------------------------ walk */

typedef struct {
    remat__memplan *m;
    int32_t cap;
    int32_t *live;  /* per value: event of its resident instance, -1 none */
    int32_t *hlive; /* per value: event of its copy on the host, -1 none */
    int32_t *over;  /* traced: per node, the first node whose value it
                      overwrites in place, then per such node the next
                      (1 + node, 0 none); NULL when there are none */
    uint8_t *gone;  /* per node: its value was overwritten in place */
    uint32_t *keep; /* per instruction of a writer: bit k, the k-th value
                       it overwrites is read again before it is freed or
                       made again (the framework writes over a copy) */
    int32_t *view;  /* traced: per gradient value, the gradient whose memory
                       it is a view into (REMAT__TRACED_GRAD_VIEWS), -1
                       none; NULL when no op makes views */
    int32_t *views; /* per gradient value, the views into it still live */
    uint8_t *freed; /* per gradient value: freed, its memory held by views */
    remat_status st;
} walker;

static int32_t take(walker *w, int32_t ins, int32_t value, remat_mem cat, size_t bytes, int fill) {
    remat__memplan *m = w->m;
    if (w->st != REMAT_OK) return -1;
    if (m->n == w->cap) {
        int32_t cap = w->cap ? 2 * w->cap : 1024;
        remat__mev *ev = realloc(m->ev, (size_t)cap * sizeof *ev);
        int32_t *tick = realloc(m->tick, 2 * (size_t)cap * sizeof *tick);
        if (ev) m->ev = ev;
        if (tick) m->tick = tick;
        if (!ev || !tick) {
            w->st = remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
            return -1;
        }
        w->cap = cap;
    }
    int32_t e = m->n++;
    m->ev[e] = (remat__mev){.bytes = bytes,
                            .off = -1,
                            .value = value,
                            .ins = ins,
                            .ins1 = -1,
                            .t0 = m->ticks,
                            .t1 = -1,
                            .cat = (uint8_t)cat,
                            .fill = (uint8_t)fill};
    if (cat != REMAT_MEM_HOST && (m->live += (int64_t)bytes) > m->peak) m->peak = m->live, m->peak_tick = m->ticks;
    m->tick[m->ticks++] = e;
    if (value >= 0) (cat == REMAT_MEM_HOST ? w->hlive : w->live)[value] = e;
    return e;
}

/* Instruction ins gives event e back. */
static void give(walker *w, int32_t ins, int32_t e) {
    if (w->st != REMAT_OK || e < 0) return;
    remat__memplan *m = w->m;
    m->ev[e].ins1 = ins;
    m->ev[e].t1 = m->ticks;
    if (m->ev[e].cat != REMAT_MEM_HOST && (m->live -= (int64_t)m->ev[e].bytes) > m->peak)
        m->peak = m->live, m->peak_tick = m->ticks;
    m->tick[m->ticks++] = ~e;
    int32_t *live = m->ev[e].cat == REMAT_MEM_HOST ? w->hlive : w->live;
    if (m->ev[e].value >= 0) live[m->ev[e].value] = -1;
}

static int resident(const walker *w, int32_t v) { return w->live[v] >= 0; }

/* A gradient is there: in memory of its own, or as a view into another's. */
static int has_grad(const walker *w, int32_t v) { return resident(w, v) || (w->view && w->view[v] >= 0); }

/* Gradient view v goes (consumed, or replaced where a backward adds into
 * it): the memory it is a view into goes with the last view, once that
 * gradient itself is freed. */
static void unview(walker *w, int32_t ins, int32_t v) {
    int32_t b = w->view[v];
    w->view[v] = -1;
    if (--w->views[b] == 0 && w->freed[b]) {
        w->freed[b] = 0;
        give(w, ins, w->live[b]);
    }
}

/* FREE(v) as instruction i. */
static void walk_free(walker *w, int32_t i, int32_t v) {
    if (w->view && w->view[v] >= 0) unview(w, i, v);
    else if (w->view && resident(w, v) && w->views[v] > 0) w->freed[v] = 1; /* held by its views */
    else if (resident(w, v)) give(w, i, w->live[v]);
}

/* Whether an op makes its inputs' gradients as views (any op, for the
 * arrays), and the arrays. */
static remat_status views_init(walker *w, const remat_graph *g) {
    int any = 0;
    for (int32_t u = 0; u < g->n && g->traced; u++) any |= (g->traced[u].flags & REMAT__TRACED_GRAD_VIEWS) != 0;
    if (!any) return REMAT_OK;
    size_t nv = (size_t)g->n * 3;
    w->view = malloc(nv * sizeof *w->view);
    w->views = calloc(nv, sizeof *w->views);
    w->freed = calloc(nv, 1);
    if (!w->view || !w->views || !w->freed) return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    for (size_t v = 0; v < nv; v++) w->view[v] = -1;
    return REMAT_OK;
}

/* A traced step's in-place writes: per writer, the list of the nodes whose
 * value it overwrites (w->over holds the heads at [0, n) and the links at
 * [n, 2n)). */
static remat_status overwrites_init(walker *w, const remat_graph *g) {
    int any = 0;
    for (int32_t u = 0; u < g->n && g->traced; u++) any |= g->traced[u].over != 0;
    if (!any) return REMAT_OK;
    w->over = calloc(2 * (size_t)g->n, sizeof *w->over);
    w->gone = calloc((size_t)g->n, 1);
    if (!w->over || !w->gone) return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    for (int32_t u = 0; u < g->n; u++) {
        int32_t by = g->traced[u].over - 1;
        if (by < 0) continue;
        w->over[g->n + u] = w->over[by];
        w->over[by] = 1 + u;
    }
    return REMAT_OK;
}

/* Per instruction that writes values in place, which of them the
 * schedule reads again (a later forward that reads it, a copy to the host)
 * before it frees them or makes them again: one walk from the end. */
static remat_status keeps_init(walker *w, const remat_graph *g, const remat__schedule *s) {
    if (!w->over) return REMAT_OK;
    w->keep = calloc((size_t)s->n + 1, sizeof *w->keep);
    uint8_t *need = calloc((size_t)g->n + 1, 1); /* per node: its value is read later */
    if (!w->keep || !need) {
        free(need);
        return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    }
    for (int32_t i = s->n - 1; i >= 0; i--) {
        const remat__instr *in = &s->ins[i];
        int32_t u = in->node;
        if (in->kind == REMAT__I_FREE || in->kind == REMAT__I_OUT || in->kind == REMAT__I_IN) {
            if (REMAT__VAL_KIND(in->value) == REMAT__V_OUT) need[REMAT__VAL_NODE(in->value)] = in->kind == REMAT__I_OUT;
        } else if (in->kind == REMAT__I_FWD) {
            int k = 0;
            for (int32_t x = w->over[u]; x && k < 32; x = w->over[g->n + x - 1], k++)
                if (need[x - 1]) w->keep[i] |= 1u << k;
            need[u] = 0;
            for (int j = 0; j < g->nodes[u].n_in; j++) need[g->nodes[u].in[j]] = 1;
        } else if (in->kind == REMAT__I_BWD) {
            for (int j = 0; j < g->nodes[u].n_in; j++)
                if (g->nodes[u].saves & REMAT__SAVE_IN(j)) need[g->nodes[u].in[j]] = 1;
            if (g->nodes[u].saves & REMAT__SAVE_OUT) need[u] = 1;
        }
    }
    free(need);
    return REMAT_OK;
}

/* Node u (instruction ins) writes in place the values it overwrites: the
 * memory of one that the schedule does not read again becomes its output's
 * (given back before it is taken: an in-place op allocates nothing); one
 * that it reads again stays, as the copy the framework keeps of it before
 * the write (its output is then new memory, as an out-of-place op's). */
static void overwrite(walker *w, const remat_graph *g, int32_t ins, int32_t u) {
    int k = 0;
    for (int32_t x = w->over ? w->over[u] : 0; x; x = w->over[g->n + x - 1], k++) {
        int32_t v = REMAT__VAL(x - 1, REMAT__V_OUT);
        if (k < 32 && (w->keep[ins] >> k & 1u) && resident(w, v)) continue;
        if (resident(w, v)) give(w, ins, w->live[v]);
        w->gone[x - 1] = 1;
    }
}

/* A read of node u's value, which is not resident: a schedule that reads a
 * value after an op overwrote it in place (it kept it, or started a
 * recomputation from it) is one the framework cannot run; else the
 * schedule is wrong. */
static remat_status missing(const walker *w, const remat_graph *g, int32_t u, int32_t reader, const char *what) {
    if (w->gone && w->gone[u])
        return remat__err(REMAT_UNSUPPORTED,
                          "the schedule reads the value of op %d ('%s') after op %d overwrote it "
                          "in place; PyTorch holds one version of it: a plan must recompute it from its maker",
                          (int)g->traced[u].id, g->nodes[u].name ? g->nodes[u].name : "",
                          (int)g->traced[g->traced[u].over - 1].id);
    return remat__err(REMAT_INTERNAL, "schedule %s node %d without its input %d", what, (int)reader, (int)u);
}

/* FWD(node) as instruction i: its output (and aux) taken, then its
 * kernel's workspace for the kernel's run. */
static void walk_fwd(walker *w, const remat__prog *p, int32_t i, const remat__instr *in) {
    const remat_graph *g = p->g;
    const remat__node *n = &g->nodes[in->node];
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT), va = REMAT__VAL(in->node, REMAT__V_AUX);
    if (resident(w, vo) && g->traced && g->traced[in->node].held == REMAT__HELD_TO_END) {
        w->st = remat__err(REMAT_UNSUPPORTED,
                           "the schedule recomputes the value of op %d ('%s'), which the caller holds to the step's "
                           "end: it would be held twice",
                           (int)g->traced[in->node].id, g->nodes[in->node].name ? g->nodes[in->node].name : "");
        return;
    }
    if (resident(w, vo)) {
        w->st = remat__err(REMAT_INTERNAL, "schedule computes node %d while its output is resident", in->node);
        return;
    }
    for (int j = 0; j < n->n_in && w->st == REMAT_OK; j++)
        if (!remat__is_resident(&g->nodes[n->in[j]]) && !resident(w, REMAT__VAL(n->in[j], REMAT__V_OUT)))
            w->st = missing(w, g, n->in[j], in->node, "computes");
    if (w->st != REMAT_OK) return;
    overwrite(w, g, i, in->node);
    if (w->gone) w->gone[in->node] = 0;
    take(w, i, vo, (remat_mem)in->cat, remat__value_bytes(p, vo), REMAT__FILL_NONE);
    if (n->leaf != REMAT__LEAF_NONE) return; /* a bound input: copied in, no kernel */
    if (remat__ops[n->op]->aux_bytes && !resident(w, va))
        take(w, i, va, (remat_mem)in->aux_cat, remat__value_bytes(p, va), REMAT__FILL_NONE);
    give(w, i, take(w, i, -1, REMAT_MEM_WORKSPACE, remat__ws_bytes(p, in->node, 0), REMAT__FILL_NONE));
}

/* BWD(node) as instruction i: the loss's gradient seeded, the gradients
 * it writes (accumulators, zeroed when first taken), its workspace. */
static void walk_bwd(walker *w, const remat__prog *p, const remat__schedule *s, int32_t i, const remat__instr *in) {
    const remat_graph *g = p->g;
    const remat__node *n = &g->nodes[in->node];
    int32_t vg = REMAT__VAL(in->node, REMAT__V_GRAD);
    for (int j = 0; j < n->n_in && w->st == REMAT_OK; j++)
        if ((n->saves & REMAT__SAVE_IN(j)) && !remat__is_resident(&g->nodes[n->in[j]]) &&
            !resident(w, REMAT__VAL(n->in[j], REMAT__V_OUT)))
            w->st = missing(w, g, n->in[j], in->node, "differentiates");
    if (((n->saves & REMAT__SAVE_OUT) && !resident(w, REMAT__VAL(in->node, REMAT__V_OUT))) ||
        ((n->saves & REMAT__SAVE_AUX) && !resident(w, REMAT__VAL(in->node, REMAT__V_AUX))) ||
        (!has_grad(w, vg) && in->node != s->loss))
        w->st = remat__err(REMAT_INTERNAL, "schedule differentiates node %d without its saved values", in->node);
    if (w->st != REMAT_OK) return;
    if (!has_grad(w, vg)) take(w, i, vg, REMAT_MEM_TRANSIENT, remat__value_bytes(p, vg), REMAT__FILL_ONE);
    int views = g->traced && (g->traced[in->node].flags & REMAT__TRACED_GRAD_VIEWS) && w->view;
    int32_t added[REMAT__MAX_IN]; /* new parameter gradients the framework adds into held ones */
    int n_added = 0;
    for (int j = 0; j < n->n_in; j++) {
        if (!remat__bwd_writes(p, n, j)) continue;
        w->m->din[i] |= 1u << j;
        int param = g->nodes[n->in[j]].leaf == REMAT__LEAF_PARAM;
        int32_t vi = REMAT__VAL(n->in[j], REMAT__V_GRAD);
        if (param && w->m->per_tensor && p->grads_resident) { /* held through the kernel's workspace */
            added[n_added++] = take(w, i, -1, REMAT_MEM_TRANSIENT, remat__value_bytes(p, vi), REMAT__FILL_NONE);
            continue;
        }
        if ((param && !w->m->per_tensor) || resident(w, vi)) continue; /* the GRAD block's, or accumulated */
        if (views && !param && w->view[vi] < 0) { /* a view into vg's memory (vg may be a view itself) */
            int32_t b = vg;
            while (w->view[b] >= 0) b = w->view[b];
            w->view[vi] = b;
            w->views[b]++;
            continue;
        }                                         /* the same input twice: the two views summed out of place, below */
        int viewed = w->view && w->view[vi] >= 0; /* added into out of place: the sum a gradient of its own */
        take(w, i, vi, param ? REMAT_MEM_GRAD : REMAT_MEM_TRANSIENT, remat__value_bytes(p, vi),
             param ? REMAT__FILL_NONE : REMAT__FILL_ZERO);
        if (viewed) unview(w, i, vi); /* the view goes once the sum is made */
    }
    give(w, i, take(w, i, -1, REMAT_MEM_WORKSPACE, remat__ws_bytes(p, in->node, 1), REMAT__FILL_NONE));
    for (int k = 0; k < n_added; k++) give(w, i, added[k]);
}

/* OUT(v) as instruction i: the host copy taken (the device instance
 * stays until v's FREE); IN(v): the device instance taken again, then the
 * host copy given back. */
static void walk_copy(walker *w, const remat__prog *p, int32_t i, const remat__instr *in) {
    int32_t v = in->value;
    const char *bad = NULL;
    if (in->kind == REMAT__I_OUT)
        bad = !resident(w, v)    ? "copies out a value that is not resident"
              : w->hlive[v] >= 0 ? "copies out a value already on the host"
                                 : NULL;
    else
        bad = resident(w, v)    ? "copies in a value that is resident"
              : w->hlive[v] < 0 ? "copies in a value "
                                  "that is not on the host"
                                : NULL;
    if (bad) {
        w->st = remat__err(REMAT_INTERNAL, "schedule instruction %d %s (value %d of node %d)", (int)i, bad,
                           (int)REMAT__VAL_KIND(v), (int)REMAT__VAL_NODE(v));
        return;
    }
    if (in->kind == REMAT__I_OUT) {
        take(w, i, v, REMAT_MEM_HOST, remat__value_bytes(p, v), REMAT__FILL_NONE);
        return;
    }
    int32_t h = w->hlive[v];
    take(w, i, v, (remat_mem)in->cat, remat__value_bytes(p, v), REMAT__FILL_NONE);
    give(w, i, h);
}

/* The one walk: the takes and give-backs of every instruction, in the
 * order the executor binds them. */
remat_status remat__memplan_build(const remat__prog *p, const remat__schedule *s, remat__memplan *out) {
    const remat_graph *g = p->g;
    memset(out, 0, sizeof *out);
    out->peak = -1, out->peak_tick = -1;
    walker w = {.m = out};
    out->per_tensor = g->traced != NULL;
    out->n_ins = s->n;
    size_t nv = (size_t)g->n * 3;
    w.live = malloc(nv * sizeof *w.live);
    w.hlive = malloc(nv * sizeof *w.hlive);
    out->din = calloc((size_t)s->n + 1, sizeof *out->din);
    if (!w.live || !w.hlive || !out->din) {
        free(w.live), free(w.hlive);
        return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    }
    for (size_t v = 0; v < nv; v++) w.live[v] = w.hlive[v] = -1;
    w.st = overwrites_init(&w, g);
    if (w.st == REMAT_OK) w.st = keeps_init(&w, g, s);
    if (w.st == REMAT_OK) w.st = views_init(&w, g);
    for (int i = 0; i < s->n && w.st == REMAT_OK; i++) {
        const remat__instr *in = &s->ins[i];
        if (in->kind == REMAT__I_FWD) walk_fwd(&w, p, i, in);
        else if (in->kind == REMAT__I_BWD) walk_bwd(&w, p, s, i, in);
        else if (in->kind == REMAT__I_FREE) walk_free(&w, i, in->value);
        else if (in->kind == REMAT__I_OUT || in->kind == REMAT__I_IN) walk_copy(&w, p, i, in);
        /* REDUCE: the communication block, outside the arena */
    }
    /* a traced step's parameter gradients live from their first write to
     * the step's end (the optimizer reads them) */
    for (int32_t u = 0; u < g->n && out->per_tensor; u++)
        if (g->nodes[u].leaf == REMAT__LEAF_PARAM && resident(&w, REMAT__VAL(u, REMAT__V_GRAD)))
            give(&w, s->n, w.live[REMAT__VAL(u, REMAT__V_GRAD)]);
    for (size_t v = 0; v < nv && w.st == REMAT_OK; v++)
        if (w.live[v] >= 0 || w.hlive[v] >= 0)
            w.st = remat__err(REMAT_INTERNAL, "schedule ends with value %zu of node %zu resident%s", v % 3, v / 3,
                              w.live[v] >= 0 ? "" : " on the host");
    free(w.live), free(w.hlive), free(w.over), free(w.gone), free(w.keep), free(w.view), free(w.views), free(w.freed);
    return w.st;
}

void remat__memplan_peaks(const remat__memplan *m, const remat_mem_stats *start, remat_mem_stats *out) {
    remat_mem_stats st = *start;
    for (int c = 0; c < REMAT_MEM_COUNT; c++) st.peak[c] = st.live[c];
    for (int32_t t = 0; t < m->ticks; t++) {
        int32_t e = m->tick[t];
        if (e >= 0) {
            const remat__mev *x = &m->ev[e];
            st.live[x->cat] += x->bytes;
            if (st.live[x->cat] > st.peak[x->cat]) st.peak[x->cat] = st.live[x->cat];
            if (x->cat == REMAT_MEM_HOST) continue; /* apart from the device's total */
            st.live[REMAT_MEM_TOTAL] += x->bytes;
            if (st.live[REMAT_MEM_TOTAL] > st.peak[REMAT_MEM_TOTAL])
                st.peak[REMAT_MEM_TOTAL] = st.live[REMAT_MEM_TOTAL];
        } else {
            const remat__mev *x = &m->ev[~e];
            st.live[x->cat] -= x->bytes;
            if (x->cat != REMAT_MEM_HOST) st.live[REMAT_MEM_TOTAL] -= x->bytes;
        }
    }
    *out = st;
}

int32_t remat__memplan_peak_tick(const remat__memplan *m, int64_t *peak) {
    *peak = m->peak > 0 ? m->peak : 0;
    return m->peak_tick;
}

/* ------------------------------------------------------------- placement */

/* by-size is quadratic in the events it places. */
#define BY_SIZE_MAX 8192

typedef struct {
    size_t bytes; /* rounded */
    int32_t t0, t1, e;
} item;

static int by_size_desc(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return (x->e > y->e) - (x->e < y->e);
}

static int in_arena(const remat__mev *x, int host) { return (x->cat == REMAT_MEM_HOST) == host; }

/* Largest first, each at the smallest gap that fits between the placed
 * events whose lifetimes overlap its own, or above them all. Only the
 * events of one arena (the host's or the device's). */
static remat_status place_by_size(const remat__memplan *m, int host, int64_t *off, size_t *arena) {
    item *it = malloc(((size_t)m->n + 1) * sizeof *it);
    int32_t *placed = malloc(((size_t)m->n + 1) * sizeof *placed); /* indices into it, by offset */
    if (!it || !placed) {
        free(it), free(placed);
        return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    }
    int k = 0;
    for (int32_t e = 0; e < m->n; e++) {
        if (!in_arena(&m->ev[e], host)) continue;
        off[e] = 0;
        if (m->ev[e].bytes) it[k++] = (item){remat__arena_rounded(m->ev[e].bytes), m->ev[e].t0, m->ev[e].t1, e};
    }
    qsort(it, (size_t)k, sizeof *it, by_size_desc);
    size_t top = 0;
    int np = 0;
    for (int i = 0; i < k; i++) {
        const item *x = &it[i];
        size_t cur = 0, best = SIZE_MAX, at = 0;
        for (int j = 0; j < np; j++) {
            const item *y = &it[placed[j]];
            if (y->t1 <= x->t0 || x->t1 <= y->t0) continue; /* never live together */
            size_t o = (size_t)off[y->e];
            if (o > cur && o - cur >= x->bytes && o - cur - x->bytes < best) best = o - cur - x->bytes, at = cur;
            if (o + y->bytes > cur) cur = o + y->bytes;
        }
        if (best == SIZE_MAX) at = cur;
        off[x->e] = (int64_t)at;
        if (at + x->bytes > top) top = at + x->bytes;
        int j = np++;
        while (j > 0 && off[it[placed[j - 1]].e] > (int64_t)at) placed[j] = placed[j - 1], j--;
        placed[j] = i;
    }
    free(it), free(placed);
    *arena = top;
    return REMAT_OK;
}

/* Tick order through a best-fit free list (sorted by offset, neighbours
 * coalesced; a free block at the top lowers the top). */
static remat_status place_in_order(const remat__memplan *m, int host, int64_t *off, size_t *arena) {
    size_t *fo = malloc(((size_t)m->n + 1) * sizeof *fo), *fs = malloc(((size_t)m->n + 1) * sizeof *fs);
    if (!fo || !fs) {
        free(fo), free(fs);
        return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    }
    int nf = 0;
    size_t top = 0, high = 0;
    for (int32_t t = 0; t < m->ticks; t++) {
        int32_t e = m->tick[t];
        if (!in_arena(&m->ev[e >= 0 ? e : ~e], host)) continue;
        if (e >= 0) {
            size_t b = remat__arena_rounded(m->ev[e].bytes);
            off[e] = 0;
            if (!b) continue;
            int best = -1;
            for (int i = 0; i < nf; i++)
                if (fs[i] >= b && (best < 0 || fs[i] < fs[best])) best = i;
            if (best >= 0) {
                off[e] = (int64_t)fo[best];
                fo[best] += b, fs[best] -= b;
                if (!fs[best]) {
                    memmove(fo + best, fo + best + 1, (size_t)(nf - best - 1) * sizeof *fo);
                    memmove(fs + best, fs + best + 1, (size_t)(nf - best - 1) * sizeof *fs);
                    nf--;
                }
            } else {
                off[e] = (int64_t)top;
                top += b;
                if (top > high) high = top;
            }
        } else {
            e = ~e;
            size_t b = remat__arena_rounded(m->ev[e].bytes), o = (size_t)off[e];
            if (!b) continue;
            int i = 0;
            while (i < nf && fo[i] < o) i++;
            memmove(fo + i + 1, fo + i, (size_t)(nf - i) * sizeof *fo);
            memmove(fs + i + 1, fs + i, (size_t)(nf - i) * sizeof *fs);
            fo[i] = o, fs[i] = b, nf++;
            if (i + 1 < nf && fo[i] + fs[i] == fo[i + 1]) { /* merge with the next */
                fs[i] += fs[i + 1];
                memmove(fo + i + 1, fo + i + 2, (size_t)(nf - i - 2) * sizeof *fo);
                memmove(fs + i + 1, fs + i + 2, (size_t)(nf - i - 2) * sizeof *fs);
                nf--;
            }
            if (i > 0 && fo[i - 1] + fs[i - 1] == fo[i]) { /* and with the previous */
                fs[i - 1] += fs[i];
                memmove(fo + i, fo + i + 1, (size_t)(nf - i - 1) * sizeof *fo);
                memmove(fs + i, fs + i + 1, (size_t)(nf - i - 1) * sizeof *fs);
                nf--, i--;
            }
            if (fo[i] + fs[i] == top) { /* the top block: the top comes down */
                top = fo[i];
                nf--;
            }
        }
    }
    free(fo), free(fs);
    *arena = high;
    return REMAT_OK;
}

remat_status remat__memplan_place(remat__memplan *m) {
    if (m->per_tensor) {
        remat_mem_stats zero, pk;
        memset(&zero, 0, sizeof zero);
        remat__memplan_peaks(m, &zero, &pk);
        m->arena = pk.peak[REMAT_MEM_TOTAL];
        m->placer = "per-tensor";
        return REMAT_OK;
    }
    int64_t *a = malloc(((size_t)m->n + 1) * sizeof *a), *b = malloc(((size_t)m->n + 1) * sizeof *b);
    if (!a || !b) {
        free(a), free(b);
        return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    }
    /* the device's arena, then the host's (offloaded values) apart */
    remat_status st = REMAT_OK;
    for (int host = 0; host < 2 && st == REMAT_OK; host++) {
        size_t sa = 0, sb = SIZE_MAX;
        st = place_in_order(m, host, a, &sa);
        if (st == REMAT_OK && m->n <= BY_SIZE_MAX) st = place_by_size(m, host, b, &sb);
        if (st != REMAT_OK) break;
        int use_b = sb < sa;
        for (int32_t e = 0; e < m->n; e++)
            if (in_arena(&m->ev[e], host)) m->ev[e].off = use_b ? b[e] : a[e];
        if (host) {
            m->host_arena = use_b ? sb : sa;
        } else {
            m->arena = use_b ? sb : sa;
            m->placer = use_b ? "by-size" : "in-order";
        }
    }
    free(a), free(b);
    return st;
}

/* -------------------------------------------------------------- checking */

/* The events of one arena (the device's, or the host's). */
static remat_status verify_arena(const remat__memplan *m, int host) {
    int32_t *live = malloc(((size_t)m->n + 1) * sizeof *live); /* events, by offset */
    if (!live) return remat__err(REMAT_NOMEM, "out of memory checking a memory plan");
    int nl = 0;
    size_t arena = host ? m->host_arena : m->arena;
    remat_status st = REMAT_OK;
    for (int32_t t = 0; t < m->ticks && st == REMAT_OK; t++) {
        int32_t e = m->tick[t];
        if (!in_arena(&m->ev[e >= 0 ? e : ~e], host)) continue;
        if (e >= 0) {
            const remat__mev *x = &m->ev[e];
            if (!x->bytes) continue;
            if (x->off < 0 || (size_t)x->off % REMAT__ARENA_ALIGN || (size_t)x->off + x->bytes > arena) {
                st = remat__err(REMAT_INTERNAL,
                                "event %d (%zu bytes at offset %lld) is not inside the %zu-byte %s "
                                "arena at an aligned offset",
                                e, x->bytes, (long long)x->off, arena, host ? "host" : "device");
                break;
            }
            int i = 0;
            while (i < nl && m->ev[live[i]].off < x->off) i++;
            const remat__mev *prev = i > 0 ? &m->ev[live[i - 1]] : NULL, *next = i < nl ? &m->ev[live[i]] : NULL;
            if (prev && (size_t)prev->off + prev->bytes > (size_t)x->off)
                st = remat__err(REMAT_INTERNAL, "events %d and %d are live together and overlap", live[i - 1], e);
            else if (next && (size_t)x->off + x->bytes > (size_t)next->off)
                st = remat__err(REMAT_INTERNAL, "events %d and %d are live together and overlap", e, live[i]);
            memmove(live + i + 1, live + i, (size_t)(nl - i) * sizeof *live);
            live[i] = e, nl++;
        } else {
            e = ~e;
            if (!m->ev[e].bytes) continue;
            int i = 0;
            while (i < nl && live[i] != e) i++;
            if (i == nl) {
                st = remat__err(REMAT_INTERNAL, "event %d is given back but was never live", e);
                break;
            }
            memmove(live + i, live + i + 1, (size_t)(nl - i - 1) * sizeof *live);
            nl--;
        }
    }
    free(live);
    return st;
}

remat_status remat__memplan_verify(const remat__memplan *m) {
    remat_status st = verify_arena(m, 0);
    return st == REMAT_OK ? verify_arena(m, 1) : st;
}

remat_status remat__simulate(const remat__prog *p, const remat__schedule *s, const remat_mem_stats *start,
                             remat_mem_stats *out) {
    remat__memplan m;
    remat_status st = remat__memplan_build(p, s, &m);
    if (st == REMAT_OK) remat__memplan_peaks(&m, start, out);
    remat__memplan_free(&m);
    return st;
}
