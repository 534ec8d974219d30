/* offload.c: the copy timeline of offloading (offload.h).
 *
 * One compute stream and one copy engine. Compute operations run in
 * their order; copies run in theirs, each once the operation it follows
 * has ended and the copy before it is done; an operation that needs a
 * copy waits for it. The walk is one pass: before operation k starts,
 * every copy it waits for is placed, and those copies follow only
 * operations before k (after < before, `after` non-decreasing), so their
 * times are known. What the stream waits for beyond its own work is the
 * exposed copy time.
 *
 * Ownership: nothing is allocated; the caller's arrays are filled.
 */
#include "offload.h"

#include "../remat-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double remat__copy_seconds(remat__link link, int64_t bytes) {
    return bytes > 0 ? link.latency + (double)bytes / link.bandwidth : 0;
}

static remat_status check_copies(int n_ops, const remat__copy *c, int nc) {
    for (int q = 0; q < nc; q++) {
        if (c[q].after < -1 || c[q].before > n_ops || c[q].after >= c[q].before)
            return remat__err(REMAT_INVALID, "copy %d: after %d, before %d (need -1 <= after < before <= %d)", q,
                              c[q].after, c[q].before, n_ops);
        if (q > 0 && c[q].after < c[q - 1].after)
            return remat__err(REMAT_INVALID,
                              "copy %d follows operation %d, before copy %d's %d: the engine "
                              "serves copies in the order of the operations they follow",
                              q, c[q].after, q - 1, c[q - 1].after);
        if (!isfinite(c[q].seconds) || c[q].seconds < 0 || c[q].bytes < 0)
            return remat__err(REMAT_INVALID, "copy %d: %g seconds, %lld bytes", q, c[q].seconds, (long long)c[q].bytes);
    }
    return REMAT_OK;
}

/* Places copies up to and including `upto` (the engine is in order):
 * each starts when its operation and the copy before it have ended. */
static void place_copies(const remat__copy *c, int upto, const double *op_end, remat__span *cp, int *placed,
                         double *engine) {
    for (; *placed <= upto; (*placed)++) {
        const remat__copy *k = &c[*placed];
        double s = k->after >= 0 ? op_end[k->after] : 0;
        if (*engine > s) s = *engine;
        cp[*placed] = (remat__span){s, s + k->seconds};
        *engine = s + k->seconds;
    }
}

/* The device bytes of copies that operation k holds (offload.h). */
static void held_bytes(const remat__copy *c, int nc, const remat__span *cp, const remat__span *op, int n_ops,
                       int64_t *held) {
    for (int k = 0; k < n_ops; k++) {
        int64_t h = 0;
        for (int q = 0; q < nc; q++) {
            if (k <= c[q].after || k >= c[q].before) continue;
            if (c[q].dir == REMAT__COPY_IN || op[k].start < cp[q].end) h += c[q].bytes;
        }
        held[k] = h;
    }
}

remat_status remat__copy_timeline(const double *dur, int n_ops, const remat__copy *copies, int n_copies,
                                  remat__span *ops, remat__span *cps, int64_t *held, double *makespan, double *stall) {
    if (n_ops < 0 || n_copies < 0 || (n_ops && !dur) || (n_copies && !copies))
        return remat__err(REMAT_INVALID, "copy timeline: %d operations, %d copies", n_ops, n_copies);
    for (int k = 0; k < n_ops; k++)
        if (!isfinite(dur[k]) || dur[k] < 0) return remat__err(REMAT_INVALID, "operation %d: duration %g", k, dur[k]);
    remat_status rc = check_copies(n_ops, copies, n_copies);
    if (rc != REMAT_OK) return rc;
    remat__span *op = malloc(((size_t)n_ops + 1) * sizeof *op);
    remat__span *cp = malloc(((size_t)n_copies + 1) * sizeof *cp);
    double *op_end = malloc(((size_t)n_ops + 1) * sizeof *op_end);
    if (!op || !cp || !op_end) {
        free(op), free(cp), free(op_end);
        return remat__err(REMAT_NOMEM, "out of memory: copy timeline of %d operations", n_ops);
    }
    int placed = 0;
    double engine = 0, t = 0, work = 0;
    for (int k = 0; k <= n_ops; k++) {
        /* the copies operation k (or, for k == n_ops, the end) waits for,
         * and every copy the engine serves before them: all follow
         * operations before k */
        int last = -1;
        for (int r = 0; r < n_copies; r++)
            if (copies[r].before == k) last = r;
        if (last >= 0) place_copies(copies, last, op_end, cp, &placed, &engine);
        for (int r = 0; r <= last; r++)
            if (copies[r].before == k && cp[r].end > t) t = cp[r].end;
        if (k == n_ops) break;
        op[k] = (remat__span){t, t + dur[k]};
        t = op_end[k] = op[k].end;
        work += dur[k];
    }
    if (n_copies > 0) place_copies(copies, n_copies - 1, op_end, cp, &placed, &engine);
    for (int r = 0; r < n_copies; r++)
        if (cp[r].end > t) t = cp[r].end;
    if (held) held_bytes(copies, n_copies, cp, op, n_ops, held);
    if (ops && n_ops) memcpy(ops, op, (size_t)n_ops * sizeof *op);
    if (cps && n_copies) memcpy(cps, cp, (size_t)n_copies * sizeof *cp);
    if (makespan) *makespan = t;
    if (stall) *stall = t - work;
    free(op), free(cp), free(op_end);
    return REMAT_OK;
}
