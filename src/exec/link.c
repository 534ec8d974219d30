/* link.c: remat_calibrate_link, the host link that offload copies go over,
 * measured through the device's backend (its offload copies and its sync)
 * between its memory and pinned host memory (remat_host_alloc).
 *
 * Sizes from 64 KiB to 64 MiB by factors of 4, both ways; each size the
 * median of REPS timed copies after one warm-up. The least-squares line
 * time = latency + bytes / bandwidth over the (bytes, median) points of
 * both directions gives the link (a negative intercept, from timer noise
 * on a fast link, is taken as 0 and the slope refitted through the
 * origin).
 *
 * Ownership: nothing outlives a call.
 */
#include "backend.h"

#include <stdlib.h>

#define SMALLEST ((size_t)64 << 10)
#define LARGEST ((size_t)64 << 20)
#define REPS 7
#define MAX_POINTS 16

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median seconds of REPS copies of `bytes` one way. */
static remat_status time_copies(const remat__backend *be, void *ctx, void *dev, void *host, size_t bytes, int to_host,
                                double *out) {
    double t[REPS];
    for (int r = -1; r < REPS; r++) { /* r = -1: the warm-up */
        double t0 = remat__now();
        remat_status st = to_host ? be->offload(ctx, host, dev, bytes, 1) : be->offload(ctx, dev, host, bytes, 0);
        if (st == REMAT_OK) st = be->sync(ctx);
        if (st != REMAT_OK) return st;
        if (r >= 0) t[r] = remat__now() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    *out = t[REPS / 2];
    return REMAT_OK;
}

/* The line through the points (least squares), latency at least 0. */
static void fit(const double *x, const double *y, int n, double *bandwidth, double *latency) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
    double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), icpt = (sy - slope * sx) / n;
    if (!(icpt >= 0)) icpt = 0, slope = sxy / sxx;
    *bandwidth = slope > 0 ? 1.0 / slope : 0;
    *latency = icpt;
}

static remat_status measure(const remat__backend *be, void *ctx, void *dev, void *host, double *bandwidth,
                            double *latency) {
    double x[MAX_POINTS], y[MAX_POINTS];
    int n = 0;
    remat_status st = REMAT_OK;
    for (size_t b = SMALLEST; b <= LARGEST && st == REMAT_OK; b *= 4)
        for (int way = 0; way < 2 && st == REMAT_OK; way++) {
            st = time_copies(be, ctx, dev, host, b, way, &y[n]);
            x[n++] = (double)b;
        }
    if (st != REMAT_OK) return st;
    fit(x, y, n, bandwidth, latency);
    if (!(*bandwidth > 0) || !(*bandwidth <= 1e15))
        return remat__err(REMAT_INTERNAL,
                          "the host link's copies did not take longer with more bytes (%g bytes/s "
                          "fitted): the timer or the machine is too noisy to measure it",
                          *bandwidth);
    return REMAT_OK;
}

remat_status remat_calibrate_link(remat_device d, double *bandwidth, double *latency) {
    if (!bandwidth || !latency) return remat__err(REMAT_INVALID, "remat_calibrate_link: NULL argument");
    *bandwidth = *latency = 0;
    const remat__backend *be = remat__backend_of(d);
    remat_status st = remat_device_available(d);
    if (st != REMAT_OK) return st;
    if (!be || !be->offload)
        return remat__err(REMAT_UNSUPPORTED, "the %s backend cannot copy to host memory", remat_device_str(d));
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.device = d;
    o.threads = 1;
    remat_graph *g = NULL;
    void *ctx = NULL, *dev = NULL, *host = NULL;
    st = remat_graph_create(&g);
    if (st == REMAT_OK) st = be->create(&ctx, &o, g);
    if (st == REMAT_OK) st = be->alloc(ctx, LARGEST, &dev);
    if (st == REMAT_OK && !(host = remat_host_alloc(d, LARGEST)))
        st = remat__err(REMAT_NOMEM, "cannot allocate %zu bytes of host memory to time the link", LARGEST);
    if (st == REMAT_OK) st = be->zero(ctx, dev, LARGEST);
    if (st == REMAT_OK) st = measure(be, ctx, dev, host, bandwidth, latency);
    remat_host_free(d, host);
    if (dev) be->release(ctx, dev);
    if (ctx) be->destroy(ctx);
    remat_graph_destroy(g);
    return st;
}
