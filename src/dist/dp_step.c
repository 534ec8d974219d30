/* dp_step.c: data parallelism above the executor (dp.h has the whole
 * story): one optimizer step's worth of micro-batches run through the
 * training schedule (remat__exec), then the reductions finished, the mean
 * taken, and the losses and the stateful ops' statistics exchanged and
 * committed in micro-batch order.
 */
#include "../session/session.h"

#include <math.h>
#include <stdlib.h>

/* Every rank's statistics of every micro-batch, in stats_all: this
 * rank's downloaded first where its kernels wrote them on a device. */
static remat_status exchange_stats(remat_session *s) {
    remat__dp *d = &s->dp;
    size_t bytes = (size_t)d->q * d->sdoubles * sizeof *d->stats;
    const double *mine = d->stats;
    if (d->staged) {
        remat_status st = s->be->download(s->dev, d->hstats, d->stats, bytes);
        if (st == REMAT_OK) st = s->be->sync(s->dev);
        if (st != REMAT_OK) return st;
        mine = d->hstats;
    }
    return remat_comm_allgather(d->comm, mine, bytes, d->stats_all);
}

/* Every rank commits every micro-batch's statistics, in order: the
 * buffers one process would hold after running them all. The commit is
 * the op's host function; staged, it runs on host copies of the stateful
 * ops' resident inputs (one per parameter slot), downloaded before and
 * the buffers among them uploaded after. */
static remat_status commit_stats(remat_session *s) {
    remat__dp *d = &s->dp;
    const remat_graph *g = s->g;
    remat_status st = REMAT_OK;
    for (int i = 0; d->staged && i < s->n_params && st == REMAT_OK; i++)
        if (d->hoff[i] != SIZE_MAX)
            st = s->be->download(s->dev, d->hstate + d->hoff[i], s->params[i].data,
                                 remat__out_bytes(&g->nodes[s->params[i].node]));
    if (d->staged && st == REMAT_OK) st = s->be->sync(s->dev);
    if (st != REMAT_OK) return st;
    float *in[REMAT__MAX_IN];
    for (int64_t k = 0; k < d->K; k++)
        for (int u = 0; u < g->n; u++) {
            if (d->soff[u] == SIZE_MAX) continue;
            const remat__node *n = &g->nodes[u];
            for (int i = 0; i < n->n_in; i++) {
                int32_t p = remat__is_resident(&g->nodes[n->in[i]]) ? s->pindex[n->in[i]] : -1;
                in[i] = p < 0 ? NULL : d->staged ? d->hstate + d->hoff[p] : s->params[p].data;
            }
            remat__ops[n->op]->commit(g, n, in, d->stats_all + (size_t)k * d->sdoubles + d->soff[u]);
        }
    for (int i = 0; d->staged && i < s->n_params && st == REMAT_OK; i++) {
        const remat__node *n = &g->nodes[s->params[i].node];
        if (d->hoff[i] != SIZE_MAX && n->leaf == REMAT__LEAF_BUFFER)
            st = s->be->upload(s->dev, s->params[i].data, d->hstate + d->hoff[i], remat__out_bytes(n));
    }
    return st;
}

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
    /* staged: the sums across the ranks, on the host, back into the
     * gradient block (the buckets cover it whole) */
    if (d->ranks > 1 && d->staged)
        st = s->be->upload(s->dev, s->blk[REMAT__BLK_GRAD], d->hx, d->gfloats * sizeof(float));
    /* the mean over the global batch: each micro-batch's loss is a mean over
     * its rows, so the tree's sum over K of them, divided by K */
    if (st == REMAT_OK) st = s->be->div(s->dev, s->blk[REMAT__BLK_GRAD], (float)d->K, (int64_t)d->gfloats);
    if (st == REMAT_OK && d->ranks > 1) {
        st = remat_comm_allgather(d->comm, d->losses + d->K, (size_t)d->q * sizeof *d->losses, d->losses);
        if (st == REMAT_OK && d->sdoubles) st = exchange_stats(s);
        if (st == REMAT_OK && d->sdoubles) st = commit_stats(s);
    }
    if (st != REMAT_OK) return st;
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
        float l = NAN;
        if (st == REMAT_OK) st = remat__exec(s, &s->train, j, &l, NULL);
        d->losses[d->first + j] = d->losses[d->K + j] = l; /* (K) all, then (q) this rank's */
    }
    if (st == REMAT_OK) st = finish(s, loss);
    else if (loss) *loss = NAN;
    return st;
}
