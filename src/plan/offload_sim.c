/* offload_sim.c: the exact simulator of a chain schedule with offload
 * (offload.h, remat__offload_simulate).
 *
 * Two passes. The first walks the operations as rotor's simulator does
 * (rotor.c's semantics, which also checks that every operation can run:
 * the schedule with each offloaded pair read as option 0 must simulate
 * there), keeping each operation's own device peak and duration, with an
 * offloaded xbar's host part moved to the host right after its Fe and
 * back right before its B, and collecting the copies. The second is the
 * copy timeline (offload.c): the stalls, and the bytes of copies in
 * flight that each operation also holds. The peak is the largest sum.
 *
 * Ownership: nothing outlives a call.
 */
#include "offload.h"

#include "../remat-impl.h"

#include <stdlib.h>

typedef struct {
    const remat__stage_ex *st;
    int n, nops;
    int64_t output;
    remat__link link;
    const remat_chain_op *ops;
    uint8_t *X, *XB, *Y, *OFF; /* resident x_k, xbar_k, y_k; xbar_k's host part is on the host */
    int64_t *xbs;              /* size of the resident xbar_k */
    int64_t mem, host;
    double *dur;     /* nops: each operation's duration */
    int64_t *own;    /* nops: each operation's peak without copies in flight */
    remat__copy *cp; /* 2 per offloaded Fe */
    int ncp;
    remat__offload_result r;
} osim;

static int64_t size_x(const osim *s, int k) { return k < s->n ? s->st[k].input : s->output; }

/* The index of B_i after operation t, or -1. */
static int find_b(const osim *s, int t, int i) {
    for (int u = t + 1; u < s->nops; u++)
        if (s->ops[u].kind == REMAT_CHAIN_B && s->ops[u].stage == i) return u;
    return -1;
}

/* Fe_i offloaded at t: its host part leaves the device once the peak is
 * past; an out copy now, an in copy issued when the operation before B_i
 * starts. */
static remat_status offload_fe(osim *s, int t, int i) {
    int tb = find_b(s, t, i);
    if (i > s->n - 2)
        return remat__err(REMAT_INVALID,
                          "op %d (Fe, stage %d): the last stage's xbar cannot be offloaded (its "
                          "backward follows the loss at once)",
                          t, i);
    if (tb < 0 || tb - 2 <= t)
        return remat__err(REMAT_INVALID, "op %d (Fe, stage %d, offloaded): B_%d %s", t, i, i,
                          tb < 0 ? "never runs" : "follows too soon to copy back");
    int64_t h = s->st[i].opt[0].saved - size_x(s, i + 1);
    double sec = remat__copy_seconds(s->link, h);
    s->mem -= h, s->host += h;
    if (s->host > s->r.host_peak) s->r.host_peak = s->host;
    s->r.host_out += h, s->r.offloaded++;
    int before = t + 2 < s->nops ? t + 2 : s->nops;
    s->cp[s->ncp++] = (remat__copy){REMAT__COPY_OUT, sec, h, t, before};
    s->cp[s->ncp++] = (remat__copy){REMAT__COPY_IN, sec, h, tb - 2, tb};
    s->OFF[i + 1] = 1;
    return REMAT_OK;
}

/* Operation t's own peak, duration and frees (rotor.c's semantics). */
static remat_status step(osim *s, int t) {
    remat_chain_op op = s->ops[t];
    int i = op.stage, off = op.option == REMAT__OFFLOAD_OPTION, o = off ? 0 : op.option;
    const remat__stage_ex *g = i < s->n ? &s->st[i] : NULL;
    int64_t tmp = 0;
    double d = 0;
    if (op.kind == REMAT_CHAIN_FN || op.kind == REMAT_CHAIN_CF) {
        s->mem += size_x(s, i + 1), d = g->forward, tmp = g->fwd_tmp, s->X[i + 1] = 1;
    } else if (op.kind == REMAT_CHAIN_FE) {
        s->mem += g->opt[o].saved, d = g->forward, tmp = g->opt[o].fe_tmp;
        s->XB[i + 1] = 1, s->xbs[i + 1] = g->opt[o].saved;
    } else if (op.kind == REMAT_CHAIN_LOSS) {
        s->mem += s->output, s->Y[s->n] = 1;
    } else {
        if (s->OFF[i + 1]) s->mem += s->xbs[i + 1] - size_x(s, i + 1), s->host -= s->xbs[i + 1] - size_x(s, i + 1);
        s->mem += size_x(s, i), d = g->opt[o].backward, tmp = g->opt[o].bwd_tmp, s->Y[i] = 1;
    }
    s->own[t] = s->mem + tmp, s->dur[t] = d, s->r.compute += d;
    if (op.kind == REMAT_CHAIN_FE && off) return offload_fe(s, t, i);
    if (op.kind == REMAT_CHAIN_FN) {
        if (s->X[i]) s->X[i] = 0, s->mem -= size_x(s, i);
        else if (s->OFF[i])
            return remat__err(REMAT_INVALID,
                              "op %d (Fn, stage %d) frees xbar_%d, which is "
                              "offloaded for B_%d",
                              t, i, i, i - 1);
        else s->XB[i] = 0, s->mem -= s->xbs[i];
    } else if (op.kind == REMAT_CHAIN_LOSS) {
        if (s->X[s->n]) s->X[s->n] = 0, s->mem -= s->output;
    } else if (op.kind == REMAT_CHAIN_B) {
        s->Y[i + 1] = 0, s->mem -= size_x(s, i + 1);
        s->XB[i + 1] = 0, s->OFF[i + 1] = 0, s->mem -= s->xbs[i + 1];
        if (s->X[i]) s->X[i] = 0, s->mem -= size_x(s, i);
    }
    return REMAT_OK;
}

/* The ops with offloaded pairs read as option 0, checked by rotor's
 * simulator (which names any operation that cannot run). */
static remat_status check_ops(const osim *s) {
    remat_chain_op *plain = malloc(((size_t)s->nops + 1) * sizeof *plain);
    if (!plain) return remat__err(REMAT_NOMEM, "out of memory simulating %d operations", s->nops);
    for (int t = 0; t < s->nops; t++) {
        plain[t] = s->ops[t];
        int kb = plain[t].kind == REMAT_CHAIN_FE || plain[t].kind == REMAT_CHAIN_B;
        if (kb && plain[t].option == REMAT__OFFLOAD_OPTION) plain[t].option = 0;
    }
    double c;
    int64_t p;
    remat_status rc = remat__chain_simulate_ex(s->st, s->n, s->output, plain, s->nops, &c, &p);
    free(plain);
    return rc;
}

static int by_after(const void *a, const void *b) {
    const remat__copy *x = a, *y = b;
    if (x->after != y->after) return x->after < y->after ? -1 : 1;
    return x->dir == y->dir ? 0 : (x->dir == REMAT__COPY_OUT ? -1 : 1);
}

/* The timeline of the collected copies: the stalls, and the peak with
 * the copies in flight. */
static remat_status finish(osim *s) {
    int64_t *held = malloc(((size_t)s->nops + 1) * sizeof *held);
    if (!held) return remat__err(REMAT_NOMEM, "out of memory simulating %d operations", s->nops);
    qsort(s->cp, (size_t)s->ncp, sizeof *s->cp, by_after);
    double span;
    remat_status rc = remat__copy_timeline(s->dur, s->nops, s->cp, s->ncp, NULL, NULL, held, &span, &s->r.stall);
    for (int t = 0; rc == REMAT_OK && t < s->nops; t++)
        if (s->own[t] + held[t] > s->r.peak) s->r.peak = s->own[t] + held[t];
    s->r.cost = s->r.compute + s->r.stall;
    free(held);
    return rc;
}

remat_status remat__offload_simulate(const remat__stage_ex *st, int n, int64_t output, remat__link link,
                                     const remat_chain_op *ops, int nops, remat__offload_result *out) {
    if (!(link.bandwidth > 0) || !(link.latency >= 0))
        return remat__err(REMAT_INVALID, "host link: bandwidth %g B/s, latency %g s (need > 0 and >= 0)",
                          link.bandwidth, link.latency);
    osim s = {.st = st, .n = n, .nops = nops, .output = output, .link = link, .ops = ops};
    remat_status rc = check_ops(&s);
    if (rc != REMAT_OK) return rc;
    for (int t = 0; t < nops; t++) {
        int kb = ops[t].kind == REMAT_CHAIN_FE || ops[t].kind == REMAT_CHAIN_B;
        if (!kb && ops[t].option == REMAT__OFFLOAD_OPTION)
            return remat__err(REMAT_INVALID, "op %d: only Fe and B can be offloaded", t);
    }
    uint8_t *flags = calloc(4 * ((size_t)n + 1), 1);
    s.xbs = calloc((size_t)n + 1, sizeof *s.xbs);
    s.dur = malloc(((size_t)nops + 1) * sizeof *s.dur);
    s.own = malloc(((size_t)nops + 1) * sizeof *s.own);
    s.cp = malloc((2 * (size_t)nops + 1) * sizeof *s.cp);
    if (!flags || !s.xbs || !s.dur || !s.own || !s.cp)
        rc = remat__err(REMAT_NOMEM, "out of memory simulating a chain of %d stages", n);
    if (rc == REMAT_OK) {
        s.X = flags, s.XB = flags + n + 1, s.Y = flags + 2 * ((size_t)n + 1), s.OFF = flags + 3 * ((size_t)n + 1);
        s.X[0] = 1;
        s.mem = s.r.peak = size_x(&s, 0);
        for (int t = 0; t < nops && rc == REMAT_OK; t++) rc = step(&s, t);
    }
    if (rc == REMAT_OK) rc = finish(&s);
    if (rc == REMAT_OK && out) *out = s.r;
    free(flags), free(s.xbs), free(s.dur), free(s.own), free(s.cp);
    return rc;
}
