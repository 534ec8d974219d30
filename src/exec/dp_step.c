/* dp_step.c: data parallelism above the executor (dp.h has the whole
 * story): one optimizer step's worth of micro-batches run through the
 * training schedule (remat__exec), then the reductions finished, the mean
 * taken, and the losses and the stateful ops' statistics exchanged and
 * committed in micro-batch order.
 */
#include "session.h"

#include <math.h>
#include <stdlib.h>

/* After the micro-batches: the reductions finished, the mean taken, the
 * loss and the statistics exchanged and committed in micro-batch order. */
static remat_status finish(remat_session *s, float *loss) {
    remat__dp *d = &s->dp;
    double t0 = remat__now();
    remat_status st = REMAT_OK;
    for (int b = 0; b < d->nb && st == REMAT_OK; b++)
        if (d->flying[b]) {
            st = remat__allreduce_wait(&d->ar[b]);
            d->flying[b] = 0, d->n_flying--;
        }
    double done = remat__now();
    d->t_wait = done - t0;
    if (st != REMAT_OK) return st;
    if (d->ranks > 1) {
        /* t0 is this rank's end of the backward pass; CLOCK_MONOTONIC is
         * one clock for the processes of a host */
        st = remat_comm_allgather(d->comm, &t0, sizeof t0, d->ends);
        if (st != REMAT_OK) return st;
        double last = t0;
        for (int r = 0; r < d->ranks; r++) last = fmax(last, d->ends[r]);
        int one_host = remat_comm_hosts(d->comm) == 1;
        d->t_exposed = one_host ? fmax(0.0, done - last) : -1.0;
        d->t_skew = one_host ? last - t0 : -1.0;
    }
    /* the mean over the global batch: each micro-batch's loss is a mean over
     * its rows, so the tree's sum over K of them, divided by K */
    float *gr = s->blk[REMAT__BLK_GRAD], kf = (float)d->K;
    for (size_t i = 0; i < d->gfloats; i++) gr[i] = gr[i] / kf;
    if (d->ranks > 1) {
        st = remat_comm_allgather(d->comm, d->losses + d->K, (size_t)d->q * sizeof *d->losses, d->losses);
        if (st == REMAT_OK && d->sdoubles)
            st = remat_comm_allgather(d->comm, d->stats, (size_t)d->q * d->sdoubles * sizeof *d->stats, d->stats_all);
        if (st != REMAT_OK) return st;
        /* every rank commits every micro-batch's statistics, in order: the
         * buffers one process would hold after running them all */
        const remat_graph *g = s->g;
        float *in[REMAT__MAX_IN];
        for (int64_t k = 0; k < d->K && d->sdoubles; k++)
            for (int u = 0; u < g->n; u++) {
                if (d->soff[u] == SIZE_MAX) continue;
                const remat__node *n = &g->nodes[u];
                for (int i = 0; i < n->n_in; i++)
                    in[i] = remat__is_resident(&g->nodes[n->in[i]]) ? s->params[s->pindex[n->in[i]]].data : NULL;
                remat__ops[n->op]->commit(g, n, in, d->stats_all + (size_t)k * d->sdoubles + d->soff[u]);
            }
    }
    double sum = 0.0;
    for (int64_t k = 0; k < d->K; k++) sum += (double)d->losses[k];
    if (loss) *loss = (float)(sum / (double)d->K);
    return REMAT_OK;
}

remat_status remat__dp_step(remat_session *s, float *loss) {
    remat__dp *d = &s->dp;
    remat__alloc_reset_peaks(&s->alloc);
    d->t_reduce = d->t_wait = d->t_exposed = d->t_skew = 0.0;
    remat_status st = REMAT_OK;
    for (int64_t j = 0; j < d->q && st == REMAT_OK; j++) {
        /* each micro-batch's backward writes its own leaf from zeros */
        st = remat__session_zero_grads(s);
        d->j = j;
        float l = NAN;
        if (st == REMAT_OK) st = remat__exec(s, &s->train, &l, NULL);
        d->losses[d->first + j] = d->losses[d->K + j] = l; /* (K) all, then (q) this rank's */
    }
    d->j = -1;
    if (st == REMAT_OK) st = finish(s, loss);
    else if (loss) *loss = NAN;
    return st;
}
