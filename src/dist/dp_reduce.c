/* dp_reduce.c: data parallelism below the executor (dp.h has the whole
 * story): the REDUCE instruction, which folds a bucket of one micro-batch's
 * gradients into the fixed tree over the micro-batches and, after the
 * last one, starts its sum across the ranks, and the progress of those
 * sums between instructions. exec.c's walk calls both.
 */
#include "../session/session.h"

/* Folds leaf j of the tree over [0, q) (in x, floats [lo, lo + n) of the
 * gradient block) as far up as its completed siblings allow: a node = its
 * left child (the accumulator, the lower micro-batches) + its right child
 * (x), through the backend (device memory on a GPU; the same float adds). */
static remat_status fold(remat_session *s, int64_t j, float *x, size_t lo, int64_t n) {
    remat__dp *d = &s->dp;
    int64_t a = 0, b = d->q;
    int depth = 0;
    uint64_t right = 0; /* bit k: the node at depth k + 1 on the path is a right child */
    while (b - a > 1) {
        int64_t mid = a + (b - a) / 2;
        if (j < mid) b = mid;
        else a = mid, right |= (uint64_t)1 << depth;
        depth++;
    }
    for (int k = depth; k > 0; k--) {
        float *acc = d->acc + (size_t)(k - 1) * d->gfloats + lo;
        if (!((right >> (k - 1)) & 1)) /* a left child: wait for its sibling */
            return s->be->copy(s->dev, acc, x, (size_t)n * sizeof *x);
        remat_status st = s->be->add(s->dev, x, acc, n);
        if (st != REMAT_OK) return st;
    }
    return REMAT_OK;
}

remat_status remat__dp_reduce(remat_session *s, int b, int64_t j) {
    remat__dp *d = &s->dp;
    double t0 = remat__now();
    size_t lo = d->blo[b] / sizeof(float);
    int64_t n = (int64_t)((d->bhi[b] - d->blo[b]) / sizeof(float));
    float *x = (float *)s->blk[REMAT__BLK_GRAD] + lo;
    remat_status st = fold(s, j, x, lo, n);
    if (st == REMAT_OK && j == d->q - 1 && d->ranks > 1) {
        /* the rank's subtree of this bucket is final: summed across the
         * ranks where it lies, or (staged) from a host copy, which the
         * step uploads back when every sum is done */
        float *sum = x, *tmp = d->recv ? d->recv + lo : NULL;
        if (d->staged) {
            sum = d->hx + lo, tmp = d->hrecv + lo;
            st = s->be->download(s->dev, sum, x, (size_t)n * sizeof *x);
            if (st == REMAT_OK) st = s->be->sync(s->dev); /* the bytes are in hx once it returns */
        }
        if (st == REMAT_OK) st = remat__allreduce_start(&d->ar[b], d->comm, sum, tmp, n, b);
        if (st == REMAT_OK) d->flying[b] = 1, d->n_flying++;
    }
    d->t_reduce += remat__now() - t0;
    return st;
}

remat_status remat__dp_progress(remat_session *s) {
    remat__dp *d = &s->dp;
    if (!d->n_flying) return REMAT_OK;
    double t0 = remat__now();
    remat_status st = REMAT_OK;
    for (int b = 0; b < d->nb && st == REMAT_OK; b++) {
        if (!d->flying[b]) continue;
        int done = 0;
        st = remat__allreduce_test(&d->ar[b], &done);
        if (done) d->flying[b] = 0, d->n_flying--;
    }
    d->t_reduce += remat__now() - t0;
    return st;
}
