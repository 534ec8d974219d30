/* exec.c: the executor, the only code that runs schedules.
 *
 * It walks the instruction list, allocating each value through the
 * session's accounting allocator in exactly the order the simulator
 * assumes, and calls the op table's kernels on the thread pool. A node's
 * first forward in a run commits its side effects (BatchNorm's running
 * statistics); later ones are recomputations.
 *
 * Memory. A schedule allocates the same sizes in the same order every
 * step, so the first run of a schedule is preceded by a dry run (the same
 * walk with no kernels) that records every allocation's size and lifetime.
 * Allocations of ARENA_MIN bytes or more are then placed at fixed offsets
 * of one arena that the session keeps across steps (greedy by size, best
 * fit among the gaps left by values whose lifetimes overlap), so a step
 * neither maps nor faults memory in; smaller ones come from the C heap.
 * The accounting is unchanged: it counts the bytes each value asks for,
 * wherever they lie, so measured peaks still equal the simulator's. The
 * process holds the arena (at least the step's peak of large values, plus
 * what the placement cannot pack) between steps until the session is
 * destroyed (remat__exec_release).
 */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
/* Seconds now, for the session's per-op profile. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Allocations below this size come from the C heap, which recycles them
 * without system calls; it also keeps the placement's quadratic pass
 * short for graphs of many tiny values. */
#define ARENA_MIN ((size_t)64 << 10)
#define ARENA_ALIGN ((size_t)64)
#define ARENA_PAGE ((size_t)2 << 20) /* transparent huge page */

/* What a dry run records: per allocation event, its size and lifetime in
 * event ticks [t0, t1); per value, the event that allocated it. */
typedef struct {
    size_t bytes;
    int64_t t0, t1;
} dry_ev;

struct remat__dry {
    dry_ev *ev;
    int n, cap;
    int64_t clock;
    int32_t *vev; /* per value: event of its resident instance */
    int oom;
};

static char dry_token[ARENA_ALIGN]; /* the non-NULL "data" of a dry run */

/* Takes the next allocation event: bytes for value v (v < 0: workspace). */
static void *take(remat_session *s, remat_mem cat, size_t bytes, int zero, int32_t v) {
    int e = s->ev++;
    struct remat__dry *d = s->dry;
    if (d) {
        if (d->n == d->cap) {
            int cap = d->cap ? 2 * d->cap : 256;
            dry_ev *ev = realloc(d->ev, (size_t)cap * sizeof *ev);
            if (!ev) {
                d->oom = 1;
                remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
                return NULL;
            }
            d->ev = ev, d->cap = cap;
        }
        d->ev[d->n++] = (dry_ev){bytes, d->clock++, -1};
        if (v >= 0) d->vev[v] = e;
        return dry_token;
    }
    const remat__mplan *mp = s->cur;
    if (mp && e < mp->n_ev && mp->off[e] >= 0) {
        void *p = s->arena + mp->off[e];
        remat__alloc_count(&s->alloc, cat, bytes);
        if (zero) memset(p, 0, bytes);
        return p;
    }
    return zero ? remat__alloc_zeroed(&s->alloc, cat, bytes) : remat__alloc_get(&s->alloc, cat, bytes);
}

/* Ends allocation event e (the value's or the workspace's). */
static void give(remat_session *s, remat_mem cat, void *p, size_t bytes, int32_t e) {
    if (s->dry) {
        if (e >= 0 && e < s->dry->n) s->dry->ev[e].t1 = s->dry->clock++;
        return;
    }
    if (s->arena && (unsigned char *)p >= s->arena && (unsigned char *)p < s->arena + s->arena_bytes)
        remat__alloc_uncount(&s->alloc, cat, bytes);
    else
        remat__alloc_put(&s->alloc, cat, p, bytes);
}

static void give_value(remat_session *s, int32_t v) {
    give(s, (remat_mem)s->vcat[v], s->vals[v], remat__value_bytes(s->g, v), s->dry ? s->dry->vev[v] : -1);
    s->vals[v] = NULL;
}

static remat_status need(remat_session *s, int32_t v, const char *what, int node) {
    if (s->vals[v]) return REMAT_OK;
    char lb[128];
    return remat__err(REMAT_INTERNAL, "schedule error: %s of %s (node %d) is not resident",
                      what, remat__node_label(&s->g->nodes[REMAT__VAL_NODE(v)], lb, sizeof lb), node);
}

/* The tensor seen by a kernel for input i of node n. */
static void input_tensor(remat_session *s, const remat__node *n, int i, remat__tensor *t) {
    int32_t in = n->in[i];
    const remat__node *src = &s->g->nodes[in];
    t->shape = &src->shape;
    if (remat__is_resident(src))
        t->data = s->params[s->pindex[in]].data;
    else
        t->data = s->vals[REMAT__VAL(in, REMAT__V_OUT)];
}

static void run_fwd(void *ctx, int ith, int nth) {
    const remat__kctx *k = ctx;
    remat__ops[k->node->op]->forward(k, ith, nth);
}

static void run_bwd(void *ctx, int ith, int nth) {
    const remat__kctx *k = ctx;
    remat__ops[k->node->op]->backward(k, ith, nth);
}

/* Runs a kernel on the pool, or inline when the node is small; a dry run
 * runs nothing. */
static void run(remat_session *s, int nt, remat__task fn, remat__kctx *k) {
    if (s->dry) return;
    if (nt == 1) {
        k->pool = NULL; /* barriers are no-ops for one thread */
        fn(k, 0, 1);
    } else {
        remat__pool_run(s->pool, fn, k);
    }
}

static remat_status exec_fwd(remat_session *s, const remat__schedule *sc, const remat__instr *in,
                             float *loss, float *fetch_out) {
    const remat_graph *g = s->g;
    const remat__node *n = &g->nodes[in->node];
    const remat__op *op = remat__ops[n->op];
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT), va = REMAT__VAL(in->node, REMAT__V_AUX);
    size_t ob = remat__out_bytes(n);
    if (s->vals[vo]) return remat__err(REMAT_INTERNAL, "schedule error: node %d computed twice while resident", in->node);
    s->vals[vo] = take(s, in->cat, ob, 0, vo);
    if (!s->vals[vo]) return REMAT_NOMEM;
    if (n->leaf == REMAT__LEAF_INPUT) {
        if (!s->bound[in->node])
            return remat__err(REMAT_INVALID, "input '%s' has no data: call remat_session_bind", n->name);
        if (!s->dry) memcpy(s->vals[vo], s->bound[in->node], ob);
    } else {
        size_t ab = op->aux_bytes ? op->aux_bytes(g, n) : 0;
        if (op->aux_bytes && !s->vals[va]) {
            s->vals[va] = take(s, in->aux_cat, ab, 0, va);
            if (!s->vals[va]) return REMAT_NOMEM;
        }
        remat__tensor ins[REMAT__MAX_IN], out = {s->vals[vo], &n->shape};
        remat__kctx k = {.node = n, .out = &out, .aux = s->vals[va], .train = sc->train,
                         .first = in->first, .seed = s->opts.seed, .step = s->step,
                         .node_id = in->node, .pool = s->pool};
        for (int i = 0; i < n->n_in; i++) {
            input_tensor(s, n, i, &ins[i]);
            if (!ins[i].data) return need(s, REMAT__VAL(n->in[i], REMAT__V_OUT), "the input", in->node);
            k.in[i] = &ins[i];
        }
        int nt = remat__node_threads(g, n, remat__pool_size(s->pool));
        size_t wb = op->fwd_ws ? op->fwd_ws(g, n, nt) : 0;
        int32_t we = s->ev;
        k.ws = take(s, REMAT_MEM_WORKSPACE, wb, 0, -1);
        if (!k.ws) return REMAT_NOMEM;
        run(s, nt, run_fwd, &k);
        give(s, REMAT_MEM_WORKSPACE, k.ws, wb, we);
    }
    if (s->dry) return REMAT_OK;
    if (in->node == sc->loss && loss) *loss = *(const float *)s->vals[vo];
    if (in->node == sc->fetch && fetch_out) memcpy(fetch_out, s->vals[vo], ob);
    return REMAT_OK;
}

static remat_status exec_bwd(remat_session *s, const remat__schedule *sc, const remat__instr *in) {
    const remat_graph *g = s->g;
    const remat__node *n = &g->nodes[in->node];
    const remat__op *op = remat__ops[n->op];
    int32_t vg = REMAT__VAL(in->node, REMAT__V_GRAD);
    if (!s->vals[vg]) {
        if (in->node != sc->loss) return need(s, vg, "the gradient", in->node);
        s->vals[vg] = take(s, REMAT_MEM_TRANSIENT, remat__out_bytes(n), 0, vg);
        if (!s->vals[vg]) return REMAT_NOMEM;
        if (!s->dry) *(float *)s->vals[vg] = 1.0f;
    }
    remat__tensor ins[REMAT__MAX_IN];
    remat__tensor out = {NULL, &n->shape};
    remat__kctx k = {.node = n, .out = &out, .dout = s->vals[vg], .train = sc->train, .first = 0,
                     .seed = s->opts.seed, .step = s->step, .node_id = in->node, .pool = s->pool};
    for (int i = 0; i < n->n_in; i++) {
        int32_t src = n->in[i];
        input_tensor(s, n, i, &ins[i]);
        if (op->saves & REMAT__SAVE_IN(i)) {
            if (!ins[i].data) return need(s, REMAT__VAL(src, REMAT__V_OUT), "the saved input", in->node);
        } else if (!remat__is_resident(&g->nodes[src])) {
            ins[i].data = NULL; /* not promised: never read */
        }
        k.in[i] = &ins[i];
        if (!remat__bwd_writes(&s->prog, n, i)) continue;
        if (g->nodes[src].leaf == REMAT__LEAF_PARAM) {
            k.din[i] = s->params[s->pindex[src]].grad;
        } else {
            int32_t vi = REMAT__VAL(src, REMAT__V_GRAD);
            if (!s->vals[vi]) {
                s->vals[vi] = take(s, REMAT_MEM_TRANSIENT, remat__out_bytes(&g->nodes[src]), 1, vi);
                if (!s->vals[vi]) return REMAT_NOMEM;
            }
            k.din[i] = s->vals[vi];
        }
    }
    if (op->saves & REMAT__SAVE_OUT) {
        out.data = s->vals[REMAT__VAL(in->node, REMAT__V_OUT)];
        if (!out.data) return need(s, REMAT__VAL(in->node, REMAT__V_OUT), "the saved output", in->node);
    }
    if (op->saves & REMAT__SAVE_AUX) {
        k.aux = s->vals[REMAT__VAL(in->node, REMAT__V_AUX)];
        if (!k.aux) return need(s, REMAT__VAL(in->node, REMAT__V_AUX), "the saved aux", in->node);
    }
    int nt = remat__node_threads(g, n, remat__pool_size(s->pool));
    size_t wb = op->bwd_ws ? op->bwd_ws(g, n, nt) : 0;
    int32_t we = s->ev;
    k.ws = take(s, REMAT_MEM_WORKSPACE, wb, 0, -1);
    if (!k.ws) return REMAT_NOMEM;
    run(s, nt, run_bwd, &k);
    give(s, REMAT_MEM_WORKSPACE, k.ws, wb, we);
    return REMAT_OK;
}

/* Frees every value still resident (after a failed step). */
static void release_all(remat_session *s) {
    int nv = s->g->n * 3;
    for (int v = 0; v < nv; v++)
        if (s->vals[v]) give_value(s, v);
}

/* Walks the schedule once. */
static remat_status walk(remat_session *s, const remat__schedule *sc, float *loss, float *fetch_out) {
    remat_status st = REMAT_OK;
    s->ev = 0;
    const int prof = s->profiling && !s->dry;
    for (int i = 0; i < sc->n && st == REMAT_OK; i++) {
        const remat__instr *in = &sc->ins[i];
        double t0 = prof ? now_s() : 0.0;
        switch (in->kind) {
        case REMAT__I_FWD:
            if (!s->vals[REMAT__VAL(in->node, REMAT__V_AUX)])
                s->vcat[REMAT__VAL(in->node, REMAT__V_AUX)] = (int8_t)in->aux_cat;
            s->vcat[REMAT__VAL(in->node, REMAT__V_OUT)] = (int8_t)in->cat;
            st = exec_fwd(s, sc, in, loss, fetch_out);
            break;
        case REMAT__I_BWD:
            st = exec_bwd(s, sc, in);
            break;
        case REMAT__I_FREE:
            if (s->vals[in->value]) give_value(s, in->value);
            break;
        }
        if (prof) {
            int op = s->g->nodes[in->kind == REMAT__I_FREE ? REMAT__VAL_NODE(in->value) : in->node].op;
            int slot = in->kind == REMAT__I_FWD ? !in->first : in->kind + 1;
            s->prof_s[op][slot] += now_s() - t0;
            s->prof_n[op][slot]++;
        }
    }
    return st;
}

/* ---------------------------------------------------------- placement */

typedef struct {
    size_t bytes; /* rounded up to ARENA_ALIGN */
    int64_t t0, t1;
    int32_t e;
} item;

static int by_size(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

/* Places the events of a dry run: off[e] receives the arena offset of each
 * large event that is freed within the run, -1 for the others. Greedy by
 * size: the largest first, each at the smallest gap between the placed
 * events whose lifetimes overlap its own (or above them all). */
static remat_status place(const struct remat__dry *d, int64_t *off, size_t *arena) {
    item *it = malloc(((size_t)d->n + 1) * sizeof *it);
    int32_t *placed = malloc(((size_t)d->n + 1) * sizeof *placed); /* by offset */
    if (!it || !placed) {
        free(it), free(placed);
        return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    }
    int m = 0;
    for (int e = 0; e < d->n; e++) {
        off[e] = -1;
        if (d->ev[e].bytes >= ARENA_MIN && d->ev[e].t1 >= 0)
            it[m++] = (item){(d->ev[e].bytes + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1), d->ev[e].t0,
                             d->ev[e].t1, e};
    }
    qsort(it, (size_t)m, sizeof *it, by_size);
    size_t top = 0;
    int np = 0;
    for (int i = 0; i < m; i++) {
        const item *x = &it[i];
        size_t cur = 0, best = SIZE_MAX, at = 0;
        for (int j = 0; j < np; j++) {
            const item *y = &it[placed[j]];
            if (y->t1 <= x->t0 || x->t1 <= y->t0) continue; /* never live together */
            size_t o = (size_t)off[y->e];
            if (o > cur && o - cur >= x->bytes && o - cur < best) best = o - cur, at = cur;
            if (o + y->bytes > cur) cur = o + y->bytes;
        }
        if (best == SIZE_MAX) at = cur;
        off[x->e] = (int64_t)at;
        if (at + x->bytes > top) top = at + x->bytes;
        /* keep placed[] sorted by offset */
        int j = np++;
        while (j > 0 && off[it[placed[j - 1]].e] > (int64_t)at) {
            placed[j] = placed[j - 1];
            j--;
        }
        placed[j] = i;
    }
    free(it), free(placed);
    *arena = top;
    return REMAT_OK;
}

/* Plans a schedule's memory: a dry run, then the placement. */
static remat_status plan(remat_session *s, const remat__schedule *sc, remat__mplan *mp) {
    struct remat__dry d = {0};
    d.vev = malloc((size_t)s->g->n * 3 * sizeof *d.vev);
    if (!d.vev) return remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    s->dry = &d;
    remat_status st = walk(s, sc, NULL, NULL);
    /* Values still resident at the end keep t1 = -1: they stay on the heap. */
    int nv = s->g->n * 3;
    for (int v = 0; v < nv; v++) s->vals[v] = NULL;
    s->dry = NULL;
    if (st == REMAT_OK && d.oom) st = REMAT_NOMEM;
    if (st == REMAT_OK) {
        mp->off = malloc(((size_t)d.n + 1) * sizeof *mp->off);
        if (!mp->off) st = remat__err(REMAT_NOMEM, "out of memory planning a step's memory");
    }
    if (st == REMAT_OK) st = place(&d, mp->off, &mp->bytes);
    if (st == REMAT_OK) {
        mp->n_ev = d.n;
        mp->valid = 1;
    } else {
        free(mp->off);
        mp->off = NULL;
    }
    free(d.ev);
    free(d.vev);
    return st;
}

/* Makes the arena at least `bytes` large. Called between runs, when no
 * value lies in it. Failing to get one is not an error: values then come
 * from the heap. */
static void grow_arena(remat_session *s, size_t bytes) {
    if (bytes <= s->arena_bytes) return;
    free(s->arena);
    s->arena = NULL;
    s->arena_bytes = 0;
    size_t sz = (bytes + ARENA_PAGE - 1) & ~(ARENA_PAGE - 1);
    void *p = NULL;
    if (posix_memalign(&p, ARENA_PAGE, sz) != 0) return;
#ifdef MADV_HUGEPAGE
    madvise(p, sz, MADV_HUGEPAGE); /* fewer faults and TLB misses; advice only */
#endif
    s->arena = p;
    s->arena_bytes = sz;
}

static remat__mplan *plan_of(remat_session *s, const remat__schedule *sc) {
    if (sc == &s->train) return &s->mplan[0];
    if (sc == &s->fwd[0]) return &s->mplan[1];
    if (sc == &s->fwd[1]) return &s->mplan[2];
    return NULL;
}

void remat__exec_forget(remat_session *s, const remat__schedule *sc) {
    remat__mplan *mp = plan_of(s, sc);
    if (!mp) return;
    free(mp->off);
    memset(mp, 0, sizeof *mp);
}

void remat__exec_release(remat_session *s) {
    if (s->vals) release_all(s);
    remat__exec_forget(s, &s->train);
    remat__exec_forget(s, &s->fwd[0]);
    remat__exec_forget(s, &s->fwd[1]);
    free(s->arena);
    s->arena = NULL;
    s->arena_bytes = 0;
}

remat_status remat__exec(remat_session *s, const remat__schedule *sc, float *loss, float *fetch_out) {
    remat__mplan *mp = plan_of(s, sc);
    s->cur = NULL;
    if (mp && !mp->valid) {
        remat_status st = plan(s, sc, mp);
        if (st != REMAT_OK) return st;
    }
    if (mp) {
        grow_arena(s, mp->bytes);
        if (s->arena_bytes >= mp->bytes) s->cur = mp;
    }
    remat_status st = walk(s, sc, loss, fetch_out);
    if (st != REMAT_OK) release_all(s);
    s->cur = NULL;
    return st;
}
