/* cost_api.c: the cost model's public functions (remat.h: the model is
 * opaque to callers, so that its layout, a table of up to
 * REMAT_COST_MAX_OPS shape classes, is not part of the ABI): create,
 * destroy and copy, and a getter and a setter per thing a caller reads or
 * changes. What a model means, its file and its check are plan/cost.c's;
 * the measurements that fill one are train/calibrate.c's.
 *
 * Ownership: remat_cost_model_create's model is the caller's until
 * remat_cost_model_destroy; nothing else here allocates.
 */
#include "../remat-impl.h"

#include <math.h>
#include <stdlib.h>

/* The bounds plan/cost.c's check holds a calibrated model to: an op's or
 * an update's seconds, and the link's bandwidth in bytes/s. */
#define MAX_SECONDS 1e9
#define MAX_BANDWIDTH 1e15

static int seconds_ok(double s) { return isfinite(s) && s >= 0 && s <= MAX_SECONDS; }

remat_status remat_cost_model_create(remat_cost_model **out) {
    if (!out) return remat__err(REMAT_INVALID, "remat_cost_model_create: NULL argument");
    *out = calloc(1, sizeof **out);
    if (!*out) return remat__err(REMAT_NOMEM, "out of memory for a cost model");
    (*out)->device = REMAT_DEVICE_CPU;
    return REMAT_OK;
}

void remat_cost_model_destroy(remat_cost_model *m) { free(m); }

remat_status remat_cost_model_copy(remat_cost_model *dst, const remat_cost_model *src) {
    if (!dst || !src) return remat__err(REMAT_INVALID, "remat_cost_model_copy: NULL argument");
    if (dst != src) *dst = *src;
    return REMAT_OK;
}

int remat_cost_model_calibrated(const remat_cost_model *m) { return m ? m->calibrated : 0; }

int remat_cost_model_threads(const remat_cost_model *m) { return m ? m->threads : 0; }

remat_device remat_cost_model_device(const remat_cost_model *m) { return m ? m->device : REMAT_DEVICE_CPU; }

double remat_cost_model_flops_per_s(const remat_cost_model *m, remat_family f) {
    return m && (unsigned)f < REMAT_FAMILY_COUNT ? m->flops_per_s[f] : 0.0;
}

double remat_cost_model_update_s(const remat_cost_model *m, remat_optim_kind k) {
    return m && (unsigned)k < 2 ? m->update_s_per_param[k] : 0.0;
}

remat_status remat_cost_model_set_update_s(remat_cost_model *m, remat_optim_kind k, double seconds) {
    if (!m) return remat__err(REMAT_INVALID, "remat_cost_model_set_update_s: NULL model");
    if ((unsigned)k >= 2) return remat__err(REMAT_INVALID, "remat_cost_model_set_update_s: unknown optimizer %d", k);
    if (!seconds_ok(seconds))
        return remat__err(REMAT_INVALID,
                          "remat_cost_model_set_update_s: %g s per parameter, not a finite number "
                          "from 0 to %g",
                          seconds, MAX_SECONDS);
    m->update_s_per_param[k] = seconds;
    return REMAT_OK;
}

void remat_cost_model_host_link(const remat_cost_model *m, double *bandwidth, double *latency) {
    if (bandwidth) *bandwidth = m ? m->host_bandwidth : 0.0;
    if (latency) *latency = m ? m->host_latency : 0.0;
}

remat_status remat_cost_model_set_host_link(remat_cost_model *m, double bandwidth, double latency) {
    if (!m) return remat__err(REMAT_INVALID, "remat_cost_model_set_host_link: NULL model");
    if (!(isfinite(bandwidth) && bandwidth >= 0 && bandwidth <= MAX_BANDWIDTH) || !seconds_ok(latency))
        return remat__err(REMAT_INVALID,
                          "remat_cost_model_set_host_link: %g bytes/s and %g s per copy: a "
                          "bandwidth from 0 (not measured) to %g bytes/s and a latency from 0 to %g s",
                          bandwidth, latency, MAX_BANDWIDTH, MAX_SECONDS);
    m->host_bandwidth = bandwidth;
    m->host_latency = latency;
    return REMAT_OK;
}

int remat_cost_model_n_ops(const remat_cost_model *m) { return m ? m->n_ops : 0; }

remat_status remat_cost_model_op(const remat_cost_model *m, int i, remat_op_time *out) {
    if (!m || !out) return remat__err(REMAT_INVALID, "remat_cost_model_op: NULL argument");
    if (i < 0 || i >= m->n_ops)
        return remat__err(REMAT_INVALID, "remat_cost_model_op: class %d of a model with %d", i, m->n_ops);
    *out = m->ops[i];
    return REMAT_OK;
}

remat_status remat_cost_model_set_op(remat_cost_model *m, const remat_op_time *t) {
    if (!m || !t) return remat__err(REMAT_INVALID, "remat_cost_model_set_op: NULL argument");
    if (t->op < 0 || t->op >= REMAT__N_OPS)
        return remat__err(REMAT_INVALID, "remat_cost_model_set_op: op %d is not in the op table", t->op);
    if (!seconds_ok(t->fwd_s) || !seconds_ok(t->bwd_s) || !seconds_ok(t->rec_s))
        return remat__err(REMAT_INVALID,
                          "remat_cost_model_set_op: %s's seconds (%g, %g, %g) are not finite "
                          "numbers from 0 to %g",
                          remat__ops[t->op]->name, t->fwd_s, t->bwd_s, t->rec_s, MAX_SECONDS);
    return remat__cost_model_put(m, t);
}
