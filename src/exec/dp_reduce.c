/* dp_reduce.c: data parallelism below the executor (dp.h has the whole
 * story): the REDUCE instruction, which folds a bucket of one micro-batch's
 * gradients into the fixed tree over the micro-batches and, after the
 * last one, starts its sum across the ranks, and the progress of those
 * sums between instructions. exec.c's walk calls both.
 */
#include "session.h"

/* x = a + x over n floats: a node = its left child (a, the lower
 * micro-batches) + its right child (x). */
static void add_left(float *x, const float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = a[i] + x[i];
}

/* Folds leaf j of the tree over [0, q) (in x, floats [lo, lo + n) of the
 * gradient block) as far up as its completed siblings allow. */
static void fold(remat__dp *d, int64_t j, float *x, size_t lo, int64_t n) {
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
        if (!((right >> (k - 1)) & 1)) { /* a left child: wait for its sibling */
            memcpy(acc, x, (size_t)n * sizeof *x);
            return;
        }
        add_left(x, acc, n);
    }
}

remat_status remat__dp_reduce(remat_session *s, int b) {
    remat__dp *d = &s->dp;
    double t0 = remat__now();
    size_t lo = d->blo[b] / sizeof(float);
    int64_t n = (int64_t)((d->bhi[b] - d->blo[b]) / sizeof(float));
    float *x = (float *)s->blk[REMAT__BLK_GRAD] + lo;
    fold(d, d->j, x, lo, n);
    remat_status st = REMAT_OK;
    if (d->j == d->q - 1 && d->ranks > 1) {
        st = remat__allreduce_start(&d->ar[b], d->comm, x, d->recv + lo, n, b);
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
