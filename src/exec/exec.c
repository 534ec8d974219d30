/* exec.c: the executor, the only code that runs schedules.
 *
 * It binds a schedule to its memory plan (plan/memplan.h): it walks the
 * plan's ticks in order, and each take gives the event's value (or a
 * kernel's workspace) its planned offset in the session's arena, filled
 * as the plan says; each give-back ends it. A kernel runs when its
 * instruction's workspace is taken. The executor never works out a size
 * or a lifetime: what it holds is the plan's, counted through the
 * session's accounting as it is taken and given back. Kernels come from
 * the op table entry of the session's backend; bound inputs are uploaded
 * and the loss and fetched values downloaded through the backend's
 * explicit copies, and a run ends at the backend's one synchronization
 * point. A node's first forward in a run commits its side effects
 * (BatchNorm's running statistics); later ones are recomputations.
 */
#include "../session/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

/* Under AddressSanitizer, the CPU arena's bytes outside the events bound
 * now are poisoned: a kernel that touches a byte its plan did not give it
 * (beyond an event's size, or a value given back) is reported, a check of
 * the plan that the plan does not control. */
static void fence(const remat_session *s, void *p, size_t bytes, int open) {
#ifdef __SANITIZE_ADDRESS__
    if (s->opts.device != REMAT_DEVICE_CPU || !p) return;
    if (open) ASAN_UNPOISON_MEMORY_REGION(p, bytes);
    else ASAN_POISON_MEMORY_REGION(p, bytes);
#else
    (void)s, (void)p, (void)bytes, (void)open;
#endif
}

/* The instruction that a tick of the plan belongs to. */
static int32_t tick_ins(const remat__memplan *m, int32_t t) {
    int32_t e = m->tick[t];
    return e >= 0 ? m->ev[e].ins : m->ev[~e].ins1;
}

/* Takes event e: its bytes of the arena (the host arena for a host
 * copy), bound to its value, filled. */
static remat_status take(remat_session *s, int32_t e, void **buf) {
    const remat__mev *x = &s->cur->ev[e];
    int host = x->cat == REMAT_MEM_HOST;
    *buf = (unsigned char *)(host ? s->host_arena : s->arena) + x->off;
    fence(s, *buf, x->bytes, 1);
    remat__alloc_count(&s->alloc, (remat_mem)x->cat, x->bytes);
    if (x->value >= 0 && host) s->hvals[x->value] = *buf, s->hev[x->value] = e;
    else if (x->value >= 0) s->vals[x->value] = *buf, s->vev[x->value] = e;
    if (x->fill == REMAT__FILL_ZERO) return s->be->zero(s->dev, *buf, x->bytes);
    if (x->fill == REMAT__FILL_ONE) return s->be->one(s->dev, *buf);
    return REMAT_OK;
}

static void give(remat_session *s, int32_t e) {
    const remat__mev *x = &s->cur->ev[e];
    int host = x->cat == REMAT_MEM_HOST;
    fence(s, (unsigned char *)(host ? s->host_arena : s->arena) + x->off, x->bytes, 0);
    remat__alloc_uncount(&s->alloc, (remat_mem)x->cat, x->bytes);
    if (x->value >= 0 && host) s->hvals[x->value] = NULL, s->hev[x->value] = -1;
    else if (x->value >= 0) s->vals[x->value] = NULL, s->vev[x->value] = -1;
}

/* ---------------------------------------------------------------- offload */

/* Value v's copy (either way) has been issued and may still be in flight. */
static int in_flight(const remat_session *s, int32_t v) { return s->copy_stamp[v] > s->copy_waits; }

/* What comes next waits for every copy so far (which lands v's). */
static remat_status wait_copies(remat_session *s) {
    s->copy_waits++;
    return s->be->offload_wait(s->dev);
}

/* A kernel of node u reads or writes its inputs', its output's and its
 * aux's values: those copied in land first. */
static remat_status wait_reads(remat_session *s, const remat__node *n, int32_t u) {
    int any = in_flight(s, REMAT__VAL(u, REMAT__V_OUT)) || in_flight(s, REMAT__VAL(u, REMAT__V_AUX));
    for (int i = 0; i < n->n_in && !any; i++) any = in_flight(s, REMAT__VAL(n->in[i], REMAT__V_OUT));
    return any ? wait_copies(s) : REMAT_OK;
}

/* OUT(v): v's bytes to its host copy, just taken; IN(v): back into its
 * device instance, just taken, before the host copy is given back. */
static remat_status copy_value(remat_session *s, int32_t v, int to_host) {
    size_t bytes = s->cur->ev[s->vev[v]].bytes;
    s->copy_stamp[v] = s->copy_waits + 1;
    return to_host ? s->be->offload(s->dev, s->hvals[v], s->vals[v], bytes, 1)
                   : s->be->offload(s->dev, s->vals[v], s->hvals[v], bytes, 0);
}

/* A value the plan promised resident is not bound: the plan is wrong. */
static remat_status unbound(remat_session *s, int32_t v, const char *what, int node) {
    char lb[128];
    return remat__err(REMAT_INTERNAL, "schedule error: %s of %s (node %d) is not resident", what,
                      remat__node_label(&s->g->nodes[REMAT__VAL_NODE(v)], lb, sizeof lb), node);
}

/* The tensor seen by a kernel for input i of node n. */
static void input_tensor(remat_session *s, const remat__node *n, int i, remat__tensor *t) {
    int32_t in = n->in[i];
    const remat__node *src = &s->g->nodes[in];
    t->shape = &src->shape;
    if (remat__is_resident(src)) t->data = s->params[s->pindex[in]].data;
    else t->data = s->vals[REMAT__VAL(in, REMAT__V_OUT)];
}

/* Where node n's tensor starts in the global batch's (dropout's key): a
 * step's micro-batch k of the global batch is its k-th slice; mb is this
 * rank's micro-batch running (-1: a run outside a data-parallel step). */
static int64_t elem0(const remat_session *s, const remat__node *n, int64_t mb) {
    return mb >= 0 ? (s->dp.first + mb) * remat__numel(&n->shape) : 0;
}

/* The forward kernel of instruction `in`, with its workspace, in
 * micro-batch mb. */
static remat_status kernel_fwd(remat_session *s, const remat__schedule *sc, const remat__instr *in, void *ws,
                               int64_t mb) {
    const remat_graph *g = s->g;
    const remat__node *n = &g->nodes[in->node];
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT);
    remat__tensor ins[REMAT__MAX_IN], out = {s->vals[vo], &n->shape};
    remat__kctx k = {.graph = g,
                     .node = n,
                     .op = remat__ops[n->op],
                     .out = &out,
                     .aux = s->vals[REMAT__VAL(in->node, REMAT__V_AUX)],
                     .ws = ws,
                     .train = sc->train,
                     .first = in->first,
                     .seed = s->opts.seed,
                     .step = s->step,
                     .node_id = in->node,
                     .elem0 = elem0(s, n, mb),
                     .dev = s->dev};
    remat_status wt = wait_reads(s, n, in->node);
    if (wt != REMAT_OK) return wt;
    const remat__dp *d = &s->dp;
    if (mb >= 0 && in->first && sc->train && d->soff && d->soff[in->node] != SIZE_MAX)
        k.stats = d->stats + (size_t)mb * d->sdoubles + d->soff[in->node]; /* committed after the step */
    for (int i = 0; i < n->n_in; i++) {
        input_tensor(s, n, i, &ins[i]);
        if (!ins[i].data) return unbound(s, REMAT__VAL(n->in[i], REMAT__V_OUT), "the input", in->node);
        k.in[i] = &ins[i];
    }
    return remat__run_precise(s, &k, 0);
}

/* The backward kernel of instruction i, with its workspace, in
 * micro-batch mb: it writes the gradients of the inputs the plan names
 * (din), into their bound values or, for a parameter the plan holds no
 * event for, its GRAD block. */
static remat_status kernel_bwd(remat_session *s, const remat__schedule *sc, int32_t i, void *ws, int64_t mb) {
    const remat__instr *in = &sc->ins[i];
    const remat_graph *g = s->g;
    const remat__node *n = &g->nodes[in->node];
    uint32_t din = s->cur->din[i];
    remat__tensor ins[REMAT__MAX_IN];
    remat__tensor out = {NULL, &n->shape};
    remat__kctx k = {.graph = g,
                     .node = n,
                     .op = remat__ops[n->op],
                     .out = &out,
                     .dout = s->vals[REMAT__VAL(in->node, REMAT__V_GRAD)],
                     .ws = ws,
                     .train = sc->train,
                     .first = 0,
                     .seed = s->opts.seed,
                     .step = s->step,
                     .node_id = in->node,
                     .elem0 = elem0(s, n, mb),
                     .dev = s->dev};
    remat_status wt = wait_reads(s, n, in->node);
    if (wt != REMAT_OK) return wt;
    if (!k.dout) return unbound(s, REMAT__VAL(in->node, REMAT__V_GRAD), "the gradient", in->node);
    for (int j = 0; j < n->n_in; j++) {
        int32_t src = n->in[j];
        const remat__node *sn = &g->nodes[src];
        input_tensor(s, n, j, &ins[j]);
        if (n->saves & REMAT__SAVE_IN(j)) {
            if (!ins[j].data) return unbound(s, REMAT__VAL(src, REMAT__V_OUT), "the saved input", in->node);
        } else if (!remat__is_resident(sn)) {
            ins[j].data = NULL; /* not promised: never read */
        }
        k.in[j] = &ins[j];
        if (!(din >> j & 1)) continue;
        k.din[j] = s->vals[REMAT__VAL(src, REMAT__V_GRAD)];
        if (!k.din[j] && sn->leaf == REMAT__LEAF_PARAM) k.din[j] = s->params[s->pindex[src]].grad;
        if (!k.din[j]) return unbound(s, REMAT__VAL(src, REMAT__V_GRAD), "the input's gradient", in->node);
    }
    if (n->saves & REMAT__SAVE_OUT) {
        out.data = s->vals[REMAT__VAL(in->node, REMAT__V_OUT)];
        if (!out.data) return unbound(s, REMAT__VAL(in->node, REMAT__V_OUT), "the saved output", in->node);
    }
    if (n->saves & REMAT__SAVE_AUX) {
        k.aux = s->vals[REMAT__VAL(in->node, REMAT__V_AUX)];
        if (!k.aux) return unbound(s, REMAT__VAL(in->node, REMAT__V_AUX), "the saved aux", in->node);
    }
    return remat__run_precise(s, &k, 1);
}

/* A bound input's FWD: the step's micro-batch mb is the mb-th of the
 * bound buffer's. A prefetched copy is the first micro-batch's only. */
static remat_status upload(remat_session *s, const remat__instr *in, int64_t mb) {
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT);
    const unsigned char *src = s->bound[in->node];
    size_t ob = s->cur->ev[s->vev[vo]].bytes;
    src += mb > 0 ? (size_t)mb * ob : 0;
    int taken = 0;
    remat_status st = mb > 0 ? REMAT_OK : remat__prefetch_take(s, in->node, s->vals[vo], src, ob, &taken);
    if (taken || st != REMAT_OK) return st;
    /* the binding stays valid and unchanged until the step's sync */
    if (s->be->upload_bound) return s->be->upload_bound(s->dev, s->vals[vo], src, ob);
    return s->be->upload(s->dev, s->vals[vo], src, ob);
}

/* The fetched value as float32 (a bf16 one widened on the host). */
static remat_status fetch(remat_session *s, const remat__instr *in, float *fetch_out) {
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT);
    size_t bytes = s->cur->ev[s->vev[vo]].bytes;
    if (remat__val_dtype(&s->prog, in->node) != REMAT_BF16)
        return s->be->download(s->dev, fetch_out, s->vals[vo], bytes);
    /* bf16 on the host: downloaded into the buffer's upper half, widened
     * from the bottom up (element i's float overwrites only bf16s already read) */
    int64_t n = (int64_t)(bytes / 2);
    uint16_t *b = (uint16_t *)fetch_out + n;
    remat_status st = s->be->download(s->dev, b, s->vals[vo], bytes);
    if (st == REMAT_OK) st = s->be->sync(s->dev);
    for (int64_t i = 0; i < n && st == REMAT_OK; i++) fetch_out[i] = remat__f32_of(b[i]);
    return st;
}

/* The loss and the fetched value, when instruction `in` computed them. */
static remat_status download(remat_session *s, const remat__schedule *sc, const remat__instr *in, float *loss,
                             float *fetch_out) {
    int32_t vo = REMAT__VAL(in->node, REMAT__V_OUT);
    remat_status st = REMAT_OK;
    if (in->node == sc->loss && loss) st = s->be->download(s->dev, loss, s->vals[vo], sizeof *loss);
    if (st == REMAT_OK && in->node == sc->fetch && fetch_out) st = fetch(s, in, fetch_out);
    return st;
}

/* Runs instruction i in micro-batch mb: binds its ticks in the plan's
 * order; its kernel runs when its workspace is taken (a bound input,
 * without one, is uploaded after its output is taken). */
static remat_status instruction(remat_session *s, const remat__schedule *sc, int32_t i, int64_t mb, float *loss,
                                float *fetch_out) {
    const remat__memplan *m = s->cur;
    const remat__instr *in = &sc->ins[i];
    if (in->kind == REMAT__I_FWD && s->g->nodes[in->node].leaf == REMAT__LEAF_INPUT && !s->bound[in->node])
        return remat__err(REMAT_INVALID, "input '%s' has no data: call remat_session_bind", s->g->nodes[in->node].name);
    remat_status st = REMAT_OK;
    /* a value copied out is given back once its copy has landed */
    if (in->kind == REMAT__I_FREE && in_flight(s, in->value)) st = wait_copies(s);
    for (; st == REMAT_OK && s->tick < m->ticks && tick_ins(m, s->tick) == i; s->tick++) {
        int32_t e = m->tick[s->tick];
        void *buf;
        if (e < 0) {
            /* IN: the device instance is taken; the copy reads the host's before it goes */
            if (in->kind == REMAT__I_IN) st = copy_value(s, in->value, 0);
            give(s, ~e);
        } else if ((st = take(s, e, &buf)) == REMAT_OK && m->ev[e].value < 0) {
            st = in->kind == REMAT__I_FWD ? kernel_fwd(s, sc, in, buf, mb) : kernel_bwd(s, sc, i, buf, mb);
        }
    }
    if (st != REMAT_OK) return st;
    if (in->kind == REMAT__I_OUT) return copy_value(s, in->value, 1);
    if (in->kind == REMAT__I_REDUCE) return remat__dp_reduce(s, in->value, mb);
    if (in->kind != REMAT__I_FWD) return REMAT_OK;
    if (s->g->nodes[in->node].leaf == REMAT__LEAF_INPUT) st = upload(s, in, mb);
    return st == REMAT_OK ? download(s, sc, in, loss, fetch_out) : st;
}

/* Adds instruction `in`'s time to the profile. A device runs
 * asynchronously: it waits, so the time is this instruction's. */
static remat_status profile(remat_session *s, const remat__instr *in, double t0) {
    remat_status st = in->kind != REMAT__I_FREE ? s->be->sync(s->dev) : REMAT_OK;
    int op =
        s->g->nodes[in->kind == REMAT__I_FWD || in->kind == REMAT__I_BWD ? in->node : REMAT__VAL_NODE(in->value)].op;
    /* forward, recompute, backward, free, copy out, copy in */
    int slot = in->kind == REMAT__I_FWD   ? !in->first
               : in->kind == REMAT__I_OUT ? 4
               : in->kind == REMAT__I_IN  ? 5
                                          : in->kind + 1;
    double dt = remat__now() - t0;
    s->prof_s[op][slot] += dt;
    s->prof_n[op][slot]++;
    if ((in->kind == REMAT__I_FWD || in->kind == REMAT__I_BWD) && s->prof_node) {
        double *pn = s->prof_node + REMAT__PROF_NODE * (size_t)in->node;
        pn[slot] += dt;
        pn[3] += slot == 1; /* recomputations */
    }
    return st;
}

/* Gives back every value still resident (after a failed run). */
static void release_all(remat_session *s) {
    int nv = s->g->n * 3;
    for (int v = 0; v < nv; v++) {
        if (s->vals[v] && s->vev[v] >= 0) give(s, s->vev[v]);
        if (s->hvals[v] && s->hev[v] >= 0) give(s, s->hev[v]);
    }
}

/* Walks the schedule once, and the plan's ticks with it. */
static remat_status walk(remat_session *s, const remat__schedule *sc, int64_t mb, float *loss, float *fetch_out) {
    remat_status st = REMAT_OK;
    s->tick = 0;
    for (int32_t i = 0; i < sc->n && st == REMAT_OK; i++) {
        const remat__instr *in = &sc->ins[i];
        double t0 = s->profiling ? remat__now() : 0.0;
        st = instruction(s, sc, i, mb, loss, fetch_out);
        /* reductions in flight advance between instructions */
        if (st == REMAT_OK && s->dp.n_flying) st = remat__dp_progress(s);
        if (st == REMAT_OK && s->profiling && in->kind != REMAT__I_REDUCE) st = profile(s, in, t0);
    }
    /* what the plan gives back at the step's end */
    for (; st == REMAT_OK && s->tick < s->cur->ticks && tick_ins(s->cur, s->tick) == sc->n; s->tick++)
        if (s->cur->tick[s->tick] < 0) give(s, ~s->cur->tick[s->tick]);
    if (st == REMAT_OK && s->tick != s->cur->ticks)
        st = remat__err(REMAT_INTERNAL, "memory plan mismatch: the run bound %d of the plan's %d ticks", s->tick,
                        s->cur->ticks);
    return st;
}

/* ---------------------------------------------------------------- memory */

/* Makes the arena at least `bytes` large. Called between runs, when no
 * value lies in it. */
static remat_status grow_arena(remat_session *s, size_t bytes) {
    if (bytes <= s->arena_bytes && s->arena) return REMAT_OK;
    fence(s, s->arena, s->arena_bytes, 1);
    if (s->arena) s->be->release(s->dev, s->arena);
    s->arena = NULL;
    s->arena_bytes = 0;
    remat_status st = s->be->alloc(s->dev, bytes, &s->arena);
    if (st != REMAT_OK)
        return remat__err(st, "cannot allocate the step's %zu-byte arena on the %s: %s", bytes,
                          remat_device_str(s->opts.device), remat_last_error());
    s->arena_bytes = bytes;
    return REMAT_OK;
}

/* Makes the host arena (pinned, remat_host_alloc) at least `bytes` large,
 * between runs; none for a plan without offload. */
static remat_status grow_host_arena(remat_session *s, size_t bytes) {
    if (!bytes || bytes <= s->host_arena_bytes) return REMAT_OK;
    if (!s->be->offload)
        return remat__err(REMAT_UNSUPPORTED, "the %s backend cannot offload to host memory",
                          remat_device_str(s->opts.device));
    fence(s, s->host_arena, s->host_arena_bytes, 1);
    remat_host_free(s->opts.device, s->host_arena);
    s->host_arena = remat_host_alloc(s->opts.device, bytes);
    s->host_arena_bytes = s->host_arena ? bytes : 0;
    if (!s->host_arena)
        return remat__err(REMAT_NOMEM, "cannot allocate the step's %zu bytes of host memory for offloaded values",
                          bytes);
    return REMAT_OK;
}

void remat__exec_release(remat_session *s) {
    if (s->vals && s->cur) release_all(s);
    fence(s, s->arena, s->arena_bytes, 1);
    if (s->arena) s->be->release(s->dev, s->arena);
    s->arena = NULL;
    s->arena_bytes = 0;
    fence(s, s->host_arena, s->host_arena_bytes, 1);
    remat_host_free(s->opts.device, s->host_arena);
    s->host_arena = NULL;
    s->host_arena_bytes = 0;
}

remat_status remat__exec(remat_session *s, const remat__planned *pl, int64_t mb, float *loss, float *fetch_out) {
    remat_status st = grow_arena(s, pl->mem.arena);
    if (st == REMAT_OK) st = grow_host_arena(s, pl->mem.host_arena);
    if (st != REMAT_OK) return st;
    fence(s, s->arena, s->arena_bytes, 0);
    fence(s, s->host_arena, s->host_arena_bytes, 0);
    s->cur = &pl->mem;
    st = walk(s, &pl->sc, mb, loss, fetch_out);
    /* the next run's inputs start their copy, overlapped with this run */
    remat_status pf = remat__prefetch_issue(s, st == REMAT_OK);
    if (st == REMAT_OK) st = pf;
    /* The run's one synchronization point: downloads land, device errors
     * surface. */
    remat_status sy = s->be->sync(s->dev);
    if (st == REMAT_OK) st = sy;
    if (st != REMAT_OK) remat__prefetch_issue(s, 0); /* a copy may not have landed */
    if (st != REMAT_OK) release_all(s);
    s->cur = NULL;
    return st;
}
