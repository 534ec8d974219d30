/* loader.c: seeded shuffling and batching over a data set.
 *
 * Each epoch visits the samples in its own order, a Fisher-Yates shuffle
 * drawn from Philox keyed on the loader's seed, so the order of epoch e is
 * a pure function of (seed, e, data set size): restarting an epoch, or
 * running a second loader with the same seed, gives the same batches. Only
 * full batches are produced (the last size % batch samples of each epoch's
 * order are dropped, different ones each epoch).
 *
 * The draw, for reproducing it elsewhere: for i = n-1 down to 1, swap
 * order[i] with order[j], j uniform on [0, i]. j comes from the words of
 * Philox4x32-10 with counter (i, epoch mod 2^32, 0x6c6f6164, t) and key
 * (seed mod 2^32, seed >> 32), t = 0, 1, ...: the words out[0..3] of each
 * t are taken in turn, and the first word w >= 2^32 mod (i+1) gives
 * j = w mod (i+1) (rejection keeps j exactly uniform).
 */
#include "../remat-impl.h"

#include <stdlib.h>

#define LOADER_TAG 0x6c6f6164u /* "load" */

struct remat_loader {
    const remat_dataset *d; /* borrowed: the data set outlives the loader */
    int64_t n;              /* data set size at creation */
    int64_t batch, batches; /* batch size, full batches per epoch */
    int64_t pos;            /* next position in order */
    int shuffle;
    uint32_t key[2]; /* Philox key from the seed */
    int64_t *order;  /* owned; n sample indices of the epoch */
};

/* A uniform integer in [0, bound) for position i of epoch `epoch`. */
static uint32_t draw(const uint32_t key[2], uint32_t i, uint32_t epoch, uint32_t bound) {
    uint32_t threshold = (uint32_t)(0u - bound) % bound; /* 2^32 mod bound */
    for (uint32_t t = 0;; t++) {
        uint32_t ctr[4] = {i, epoch, LOADER_TAG, t}, out[4];
        remat__philox(ctr, key, out);
        for (int k = 0; k < 4; k++)
            if (out[k] >= threshold) return out[k] % bound;
    }
}

remat_status remat_loader_create(remat_loader **out, const remat_dataset *d, int64_t batch, int shuffle,
                                 uint64_t seed) {
    if (!out) return remat__err(REMAT_INVALID, "remat_loader_create: out is NULL");
    *out = NULL;
    if (!d) return remat__err(REMAT_INVALID, "remat_loader_create: no data set");
    if (batch < 1) return remat__err(REMAT_INVALID, "loader batch size must be at least 1, got %lld", (long long)batch);
    int64_t n = remat_dataset_size(d);
    if ((uint64_t)n > UINT32_MAX)
        return remat__err(REMAT_UNSUPPORTED,
                          "the loader shuffles at most 2^32-1 samples, the "
                          "data set has %lld",
                          (long long)n);
    remat_loader *l = calloc(1, sizeof *l);
    if (l) l->order = malloc((size_t)(n ? n : 1) * sizeof *l->order);
    if (!l || !l->order) {
        free(l);
        return remat__err(REMAT_NOMEM, "out of memory for a loader over %lld samples", (long long)n);
    }
    l->d = d;
    l->n = n;
    l->batch = batch;
    l->batches = n / batch;
    l->shuffle = shuffle != 0;
    l->key[0] = (uint32_t)seed;
    l->key[1] = (uint32_t)(seed >> 32);
    remat_loader_start(l, 0);
    *out = l;
    return REMAT_OK;
}

void remat_loader_destroy(remat_loader *l) {
    if (!l) return;
    free(l->order);
    free(l);
}

int64_t remat_loader_batches(const remat_loader *l) { return l ? l->batches : 0; }

void remat_loader_start(remat_loader *l, int64_t epoch) {
    if (!l) return;
    for (int64_t i = 0; i < l->n; i++) l->order[i] = i;
    if (l->shuffle) {
        uint32_t e = (uint32_t)epoch;
        for (int64_t i = l->n - 1; i > 0; i--) {
            int64_t j = draw(l->key, (uint32_t)i, e, (uint32_t)i + 1);
            int64_t t = l->order[i];
            l->order[i] = l->order[j];
            l->order[j] = t;
        }
    }
    l->pos = 0;
}

void remat_loader_seek(remat_loader *l, int64_t epoch, int64_t batch) {
    if (!l) return;
    remat_loader_start(l, epoch);
    if (batch < 0) batch = 0;
    if (batch > l->batches) batch = l->batches;
    l->pos = batch * l->batch;
}

int remat_loader_next(remat_loader *l, float *x, int32_t *y) {
    return remat_loader_next_rows(l, 0, l ? l->batch : 0, x, y);
}

int remat_loader_next_rows(remat_loader *l, int64_t first, int64_t n, float *x, int32_t *y) {
    if (!l || l->pos + l->batch > l->batches * l->batch) return 0;
    if (first < 0 || n < 0 || first + n > l->batch) return 0;
    /* Indices come from order[], all in range, unless the data set was
     * truncated after the loader was made: then stop. Only the rows asked
     * for are read: a rank normalizes its own micro-batches only. */
    if (remat_dataset_get(l->d, l->order + l->pos + first, n, x, y) != REMAT_OK) return 0;
    l->pos += l->batch;
    return 1;
}
