/* calibrate.c: the measurements behind the cost model (plan/cost.c).
 *
 * remat_calibrate: each op family's throughput, timed from training steps
 * of a small graph made mostly of that family's ops (a parameter feeding a
 * few such ops, reduced by MSE): throughput = 3 x forward FLOPs of the
 * graph / the median step time. The fallback for shape classes never
 * measured.
 *
 * remat_calibrate_graph: the shape classes of a real graph, each node's
 * forward and backward kernels timed by the executor's profiler during
 * store-all training steps (what the planner's costs are sums of), its
 * recomputations during sqrt steps, and the time per parameter of the
 * rest of a step (zeroing the gradients, the optimizer update). The
 * numbers hold for this machine, its CPU and the thread count; `remat
 * calibrate` caches them in a file.
 */
#include "../session/session_api.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Builds the calibration graph of one family into g; returns its loss. */
static remat_node family_graph(remat_graph *g, remat_family f, remat_node *target) {
    int64_t d4[4] = {16, 32, 28, 28}, d2[2] = {256, 1024}, n1 = 1 << 21;
    remat_node x, t;
    switch (f) {
    case REMAT_FAMILY_LINEAR:
        x = remat_param(g, "x", 2, d2, REMAT_INIT_UNIFORM, 1.0f);
        x = remat_linear(g, "fc2", remat_linear(g, "fc1", x, 1024, 1), 1024, 1);
        break;
    case REMAT_FAMILY_CONV:
        x = remat_param(g, "x", 4, d4, REMAT_INIT_UNIFORM, 1.0f);
        x = remat_conv2d(g, "c2", remat_conv2d(g, "c1", x, 32, 3, 1, 1, 1), 32, 3, 1, 1, 1);
        break;
    case REMAT_FAMILY_NORM:
        x = remat_param(g, "x", 4, d4, REMAT_INIT_UNIFORM, 1.0f);
        x = remat_batchnorm2d(g, "b2", remat_batchnorm2d(g, "b1", x));
        break;
    case REMAT_FAMILY_POOL:
        x = remat_param(g, "x", 4, d4, REMAT_INIT_UNIFORM, 1.0f);
        x = remat_avgpool2d(g, remat_maxpool2d(g, x, 3, 1, 1), 3, 1, 1);
        break;
    case REMAT_FAMILY_COPY: {
        x = remat_param(g, "x", 4, d4, REMAT_INIT_UNIFORM, 1.0f);
        remat_node parts[2] = {x, x};
        x = remat_flatten(g, remat_concat(g, 2, parts));
        break;
    }
    case REMAT_FAMILY_LOSS: {
        int64_t z[2] = {4096, 1000}, nb = 4096;
        x = remat_param(g, "x", 2, z, REMAT_INIT_UNIFORM, 1.0f);
        t = remat_input(g, "t", REMAT_I32, 1, &nb);
        *target = t;
        return remat_cross_entropy(g, x, t);
    }
    default: /* pointwise */
        x = remat_param(g, "x", 1, &n1, REMAT_INIT_UNIFORM, 1.0f);
        x = remat_mul(g, remat_relu(g, remat_add(g, x, x)), x);
        break;
    }
    int64_t dims[REMAT_MAX_DIMS];
    int nd = remat_node_shape(g, x, dims);
    t = remat_input(g, "t", REMAT_F32, nd, dims);
    *target = t;
    return remat_mse(g, x, t);
}

remat_status remat_calibrate(remat_cost_model *out, int threads) {
    memset(out, 0, sizeof *out);
    if (threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        threads = nc > 0 ? (int)nc : 1;
    }
    for (int f = 0; f < REMAT_FAMILY_COUNT; f++) {
        remat_graph *g = NULL;
        remat_session *s = NULL;
        remat_node target;
        remat_status st = remat_graph_create(&g);
        if (st != REMAT_OK) return st;
        remat_node loss = family_graph(g, (remat_family)f, &target);
        remat_session_opts o;
        remat_session_opts_default(&o);
        o.threads = threads;
        st = remat_graph_status(g);
        if (st == REMAT_OK) st = remat_session_create(&s, g, loss, &o);
        void *buf = NULL;
        if (st == REMAT_OK) {
            int64_t dims[REMAT_MAX_DIMS], n = 1;
            for (int i = 0, nd = remat_node_shape(g, target, dims); i < nd; i++) n *= dims[i];
            buf = calloc((size_t)n, 4); /* zeros: valid labels and targets */
            if (!buf) st = remat__err(REMAT_NOMEM, "out of memory calibrating");
        }
        double flops = 0, times[5];
        if (st == REMAT_OK) {
            remat_session_bind(s, target, buf);
            for (int u = 0; u < g->n; u++)
                if (g->nodes[u].leaf == REMAT__LEAF_NONE && remat__ops[g->nodes[u].op]->family == (remat_family)f)
                    flops += 3 * remat__node_flops(g, &g->nodes[u]);
            float l;
            st = remat_session_step(s, &l); /* warm-up */
            for (int r = 0; r < 5 && st == REMAT_OK; r++) {
                double t0 = remat__now();
                st = remat_session_step(s, &l);
                times[r] = remat__now() - t0;
            }
        }
        if (st == REMAT_OK) {
            qsort(times, 5, sizeof times[0], cmp_double);
            out->flops_per_s[f] = flops / times[2];
        }
        free(buf);
        remat_session_destroy(s);
        remat_graph_destroy(g);
        if (st != REMAT_OK) return st;
    }
    out->calibrated = 1;
    out->threads = threads;
    out->device = REMAT_DEVICE_CPU;
    return REMAT_OK;
}

/* The median of v[0..n), sorting v. */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Seconds per trainable parameter element of what a training step does
 * outside the graph with optimizer o: zeroing the gradients, then the
 * update; the median of `reps` (1 to 15) after a warm-up, as a step is
 * the median of steps. */
static remat_status time_update(remat_session *s, const remat_optim_opts *o, int reps, double *out) {
    remat_status st = remat_session_set_optimizer(s, o);
    int64_t n = remat__session_trainable_numel(s);
    double t[16];
    reps = reps < 1 ? 1 : reps > 15 ? 15 : reps;
    for (int r = 0; r <= reps && st == REMAT_OK; r++) { /* the first is a warm-up */
        double t0 = remat__now();
        st = remat__session_zero_grads(s);
        if (st == REMAT_OK) st = remat_session_update(s);
        if (r) t[r - 1] = remat__now() - t0;
    }
    *out = n > 0 && st == REMAT_OK ? median(t, reps) / (double)n : 0.0;
    return st;
}

/* A session of g under `strategy`, its float inputs bound to bufs. */
static remat_status calib_session(remat_session **s, const remat_graph *g, remat_node loss, int threads,
                                  remat_strategy strategy, void **bufs) {
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.threads = threads;
    o.strategy = strategy;
    remat_status st = remat_session_create(s, g, loss, &o);
    for (int v = 0; v < g->n && st == REMAT_OK; v++)
        if (bufs[v]) remat_session_bind(*s, v, bufs[v]);
    return st;
}

/* One warm-up step (first touches, BLAS buffers), then `steps` profiled
 * steps; med[REMAT__PROF_NODE u + k]: node u's slot k (exec.c) per step,
 * the median over the steps (as remat bench reports a step), so that one
 * step slowed by the machine does not move the model. The seconds are
 * then scaled so that they sum to the median step's total: a shared
 * machine interrupts a few nodes of every step, and a per-node median
 * leaves every interruption out, predicting below the steps it is
 * compared with (by 0-4% measured on 2 cores). */
static remat_status time_nodes(remat_session *s, int steps, double *med) {
    float l;
    remat_status st = remat_session_step(s, &l);
    if (st == REMAT_OK) remat_session_set_profiling(s, 1);
    double *prof = remat__session_node_profile(s);
    if (st == REMAT_OK && !prof) st = remat__err(REMAT_NOMEM, "out of memory calibrating");
    size_t nt = REMAT__PROF_NODE * (size_t)remat_session_graph(s)->n;
    double *per = st == REMAT_OK ? malloc(((size_t)steps * nt + (size_t)steps) * sizeof *per) : NULL;
    if (st == REMAT_OK && !per) st = remat__err(REMAT_NOMEM, "out of memory calibrating");
    for (int r = 0; r < steps && st == REMAT_OK; r++) {
        memset(prof, 0, nt * sizeof *prof);
        st = remat_session_step(s, &l);
        memcpy(per + (size_t)r * nt, prof, nt * sizeof *per);
    }
    double *v = per ? per + (size_t)steps * nt : NULL; /* scratch: one slot's steps */
    double sum_med = 0;
    for (size_t i = 0; i < nt && st == REMAT_OK; i++) {
        for (int r = 0; r < steps; r++) v[r] = per[(size_t)r * nt + i];
        med[i] = median(v, steps);
        if (i % REMAT__PROF_NODE < 3) sum_med += med[i]; /* slot 3 counts */
    }
    for (int r = 0; r < steps && st == REMAT_OK; r++) {
        v[r] = 0;
        for (size_t i = 0; i < nt; i++)
            if (i % REMAT__PROF_NODE < 3) v[r] += per[(size_t)r * nt + i];
    }
    double scale = st == REMAT_OK && sum_med > 0 ? median(v, steps) / sum_med : 1.0;
    for (size_t i = 0; i < nt && st == REMAT_OK; i++)
        if (i % REMAT__PROF_NODE < 3) med[i] *= scale;
    free(per);
    remat_session_set_profiling(s, 0);
    return st;
}

/* Buffers for g's inputs (bufs[v], owned by the caller): floats uniform
 * on [-1, 1) (zeros would make every activation after a normalization
 * zero, and some kernels run at another speed on real values), integers
 * zeros: valid class and token ids. */
static remat_status random_inputs(const remat_graph *g, void **bufs) {
    for (int v = 0; v < g->n; v++) {
        if (g->nodes[v].leaf != REMAT__LEAF_INPUT) continue;
        bufs[v] = calloc(remat__out_bytes(&g->nodes[v]) + 1, 1);
        if (!bufs[v]) return remat__err(REMAT_NOMEM, "out of memory calibrating");
        if (g->nodes[v].dtype == REMAT_F32) {
            float *x = bufs[v];
            uint32_t r = 0x9e3779b9u ^ (uint32_t)v;
            for (int64_t i = 0, n = remat__numel(&g->nodes[v].shape); i < n; i++) {
                r = r * 1664525u + 1013904223u; /* an LCG is plenty for timing data */
                x[i] = (float)(r >> 8) / 8388608.0f - 1.0f;
            }
        }
    }
    return REMAT_OK;
}

/* The profiler's medians of g's nodes under store-all (all) and under
 * sqrt (rec), and the update's seconds per parameter into m. */
static remat_status measure(remat_cost_model *m, const remat_graph *g, remat_node loss, int steps, void **bufs,
                            double *all, double *rec) {
    remat_session *s = NULL;
    remat_status st = calib_session(&s, g, loss, m->threads, REMAT_STRATEGY_ALL, bufs);
    if (st == REMAT_OK) st = time_nodes(s, steps, all);
    remat_optim_opts sgd, adamw;
    remat_optim_opts_default(&sgd, REMAT_OPTIM_SGD);
    sgd.momentum = 0.9f;
    remat_optim_opts_default(&adamw, REMAT_OPTIM_ADAMW);
    if (st == REMAT_OK) st = time_update(s, &sgd, 5, &m->update_s_per_param[REMAT_OPTIM_SGD]);
    if (st == REMAT_OK) st = time_update(s, &adamw, 5, &m->update_s_per_param[REMAT_OPTIM_ADAMW]);
    remat_session_destroy(s); /* one session's memory at a time */
    s = NULL;
    if (st == REMAT_OK) st = calib_session(&s, g, loss, m->threads, REMAT_STRATEGY_SQRT, bufs);
    if (st == REMAT_OK) st = time_nodes(s, steps, rec);
    remat_session_destroy(s);
    return st;
}

/* Sums per shape class (acc, in first-seen order; cnt[2k] its nodes,
 * cnt[2k + 1] those recomputed under sqrt) and, per op, recomputation
 * over first forward (ratio[2 op] over ratio[2 op + 1]). */
static remat_status sum_classes(const remat_graph *g, const double *all, const double *rec, remat_cost_model *acc,
                                int *cnt, double *ratio) {
    for (int u = 0; u < g->n; u++) {
        uint64_t c = remat_node_cost_class(g, u);
        if (!c) continue;
        int k = 0;
        while (k < acc->n_ops && acc->ops[k].cls != c) k++;
        if (k == acc->n_ops) {
            if (k == REMAT_COST_MAX_OPS)
                return remat__err(REMAT_INVALID, "the graph has more than %d shape classes", REMAT_COST_MAX_OPS);
            acc->ops[acc->n_ops++] = (remat_op_time){c, g->nodes[u].op, 0, 0, 0};
        }
        const double *a = all + REMAT__PROF_NODE * (size_t)u, *r = rec + REMAT__PROF_NODE * (size_t)u;
        acc->ops[k].fwd_s += a[0];
        acc->ops[k].bwd_s += a[2];
        cnt[2 * k]++;
        if (r[3] >= 1 && r[0] > 0) {
            /* recomputed under sqrt: a recomputation over the first forward
             * of the same steps (the machine's speed drifts between the two
             * sessions, not within a step), times the store-all forward */
            acc->ops[k].rec_s += a[0] * (r[1] / r[3]) / r[0];
            cnt[2 * k + 1]++;
            ratio[2 * g->nodes[u].op] += r[1] / r[3];
            ratio[2 * g->nodes[u].op + 1] += r[0];
        }
    }
    return REMAT_OK;
}

/* Each class's means into m: the mean over its nodes of their median
 * step; a class never recomputed gets its op's ratio, or its forward. */
static remat_status put_classes(remat_cost_model *m, const remat_cost_model *acc, const int *cnt, const double *ratio) {
    remat_status st = REMAT_OK;
    for (int k = 0; k < acc->n_ops && st == REMAT_OK; k++) {
        remat_op_time t = acc->ops[k];
        t.fwd_s /= cnt[2 * k], t.bwd_s /= cnt[2 * k];
        if (cnt[2 * k + 1]) t.rec_s /= cnt[2 * k + 1];
        else if (ratio[2 * t.op + 1] > 0) t.rec_s = t.fwd_s * ratio[2 * t.op] / ratio[2 * t.op + 1];
        else t.rec_s = t.fwd_s;
        st = remat__cost_model_put(m, &t);
    }
    return st;
}

/* The shape classes of g: forward and backward seconds from store-all
 * steps; recomputation seconds from steps under sqrt, which recomputes
 * all but about sqrt(n) of the nodes: a node's forward times its ratio of
 * recomputation to first forward in those steps. A class none of whose
 * nodes sqrt recomputes gets its forward times that ratio over its op's
 * other nodes (BatchNorm's recomputation reads its saved statistics,
 * whatever the shapes), or its forward when the op was never recomputed. */
remat_status remat_calibrate_graph(remat_cost_model *m, const remat_graph *g, remat_node loss, int steps) {
    if (!m || !g) return remat__err(REMAT_INVALID, "remat_calibrate_graph: NULL argument");
    if (!m->calibrated)
        return remat__err(REMAT_INVALID, "remat_calibrate_graph: calibrate the families first (remat_calibrate)");
    if (steps < 1) steps = 1;
    remat_status st = REMAT_OK;
    size_t nt = REMAT__PROF_NODE * (size_t)g->n;
    void **bufs = calloc((size_t)g->n + 1, sizeof *bufs);
    double *all = malloc((2 * nt + 1) * sizeof *all), *rec = all ? all + nt : NULL;
    if (!bufs || !all) st = remat__err(REMAT_NOMEM, "out of memory calibrating");
    if (st == REMAT_OK) st = random_inputs(g, bufs);
    if (st == REMAT_OK) st = measure(m, g, loss, steps, bufs, all, rec);
    int *cnt = st == REMAT_OK ? calloc(2 * REMAT_COST_MAX_OPS, sizeof *cnt) : NULL;
    remat_cost_model *acc = st == REMAT_OK ? calloc(1, sizeof *acc) : NULL;
    double *ratio = st == REMAT_OK ? calloc(2 * REMAT__N_OPS, sizeof *ratio) : NULL;
    if (st == REMAT_OK && (!cnt || !acc || !ratio)) st = remat__err(REMAT_NOMEM, "out of memory calibrating");
    if (st == REMAT_OK) st = sum_classes(g, all, rec, acc, cnt, ratio);
    if (st == REMAT_OK) st = put_classes(m, acc, cnt, ratio);
    free(cnt), free(acc), free(ratio), free(all);
    for (int v = 0; bufs && v < g->n; v++) free(bufs[v]);
    free(bufs);
    return st;
}
