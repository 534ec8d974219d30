/* cmd_plan_offload.c: `remat plan --host-budget SIZE`: the training step's
 * chain planned with offload to pinned host memory and without it (the
 * same chain model, so the two compare like for like), then the step's
 * plan as a session makes and runs it (the optimal planner with the host
 * budget: its memory plan placed, device and host bytes exact). With
 * --max-batch, max_batch.c answers from such plans. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The offload report of the model at mo's batch. 0, or the exit status
 * (reported). */
static int report_at(const remat_model_opts *mo, const remat_session_opts *base, const remat_offload_opts *oo,
                     remat_offload_summary *out) {
    remat_session_opts so = *base;
    so.strategy = REMAT_STRATEGY_ALL; /* a plan-only session: the chain is planned by remat_session_offload */
    so.budget = 0;
    so.host_budget = 0;
    so.plan_only = 1;
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    remat_offload_opts o = *oo;
    o.budget = base->budget;
    int rc = 0;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, mo, &m) != REMAT_OK ||
        remat_session_create(&s, g, m.loss, &so) != REMAT_OK || remat_session_offload(s, &o, out) != REMAT_OK)
        rc = cli_fail("%s", remat_last_error());
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return rc;
}

static void summary_json(cJSON *o, const remat_offload_summary *r, size_t host_budget) {
    cJSON_AddNumberToObject(o, "host_budget_bytes", (double)host_budget);
    cJSON_AddNumberToObject(o, "chain_stages", r->stages);
    cJSON_AddNumberToObject(o, "chain_budget_bytes", (double)r->chain_budget);
    cJSON_AddNumberToObject(o, "pcie_bandwidth", r->bandwidth);
    cJSON_AddNumberToObject(o, "pcie_latency", r->latency);
    cJSON_AddNumberToObject(o, "flops_per_s", r->flops_per_s);
    cJSON *w = cJSON_AddObjectToObject(o, "without_offload");
    cJSON_AddBoolToObject(w, "fits", r->fits_without);
    if (r->fits_without) {
        cJSON_AddNumberToObject(w, "cost", r->cost_without);
        cJSON_AddNumberToObject(w, "device_peak_bytes", (double)r->device_peak_without);
    }
    cJSON *x = cJSON_AddObjectToObject(o, "with_offload");
    cJSON_AddBoolToObject(x, "fits", r->fits);
    if (r->fits) {
        cJSON_AddNumberToObject(x, "cost", r->cost);
        cJSON_AddNumberToObject(x, "exposed_copy_cost", r->stall);
        cJSON_AddNumberToObject(x, "exposed_copy_seconds", r->stall_seconds);
        cJSON_AddNumberToObject(x, "device_peak_bytes", (double)r->device_peak);
        cJSON_AddNumberToObject(x, "host_peak_bytes", (double)r->host_peak);
        cJSON_AddNumberToObject(x, "host_copied_bytes", (double)r->host_copied);
        cJSON_AddNumberToObject(x, "offloaded_stages", r->offloaded);
        cJSON_AddStringToObject(x, "offloaded_nodes", r->offloaded_nodes);
    }
}

static void summary_text(const remat_offload_summary *r, size_t host_budget, const char *unit) {
    char b[32], b2[32], b3[32], b4[32];
    printf("offload, chain model (%d stages; %s for the chain after parameters, gradients and optimizer state; "
           "host link %.3g GB/s, %.3g us per copy",
           r->stages, cli_fmt_bytes(r->chain_budget, b, sizeof b), r->bandwidth / 1e9, r->latency * 1e6);
    if (r->flops_per_s > 0) printf("; copies costed at %.3g TFLOP/s", r->flops_per_s / 1e12);
    printf("):\n");
    if (r->fits_without)
        printf("  without offload: fits, cost %.6g %s, device peak %s\n", r->cost_without, unit,
               cli_fmt_bytes(r->device_peak_without, b, sizeof b));
    else printf("  without offload: does not fit\n");
    if (!r->fits) {
        printf("  with offload (host budget %s): does not fit\n", cli_fmt_bytes(host_budget, b, sizeof b));
        return;
    }
    printf("  with offload (host budget %s): fits, cost %.6g %s (exposed copies %.6g %s, %.4g s), device peak %s, "
           "host peak %s, %s copied out and back\n",
           cli_fmt_bytes(host_budget, b, sizeof b), r->cost, unit, r->stall, unit, r->stall_seconds,
           cli_fmt_bytes(r->device_peak, b2, sizeof b2), cli_fmt_bytes(r->host_peak, b3, sizeof b3),
           cli_fmt_bytes(r->host_copied, b4, sizeof b4));
    printf("  offloaded: %d of %d stages%s%s\n", r->offloaded, r->stages, r->offloaded ? ", from " : "",
           r->offloaded_nodes);
}

/* The step's plan with the host budget, as a session makes it (the
 * optimal planner; what `remat train` with the same options runs): into
 * *p, or the exit status (reported). */
static int step_plan(const remat_model_opts *mo, const remat_session_opts *base, remat_plan_summary *p) {
    remat_session_opts so = *base;
    so.plan_only = 1;
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    int rc = 0;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, mo, &m) != REMAT_OK ||
        remat_session_create(&s, g, m.loss, &so) != REMAT_OK || remat_session_plan(s, p) != REMAT_OK)
        rc = cli_fail("%s", remat_last_error());
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return rc;
}

static void plan_json(cJSON *o, const remat_plan_summary *p) {
    cJSON_AddStringToObject(o, "candidate", p->candidate);
    cJSON_AddNumberToObject(o, "held_bytes", (double)p->held_bytes);
    cJSON_AddNumberToObject(o, "arena_bytes", (double)p->arena_bytes);
    cJSON_AddNumberToObject(o, "host_bytes", (double)p->host_bytes);
    cJSON_AddNumberToObject(o, "offloaded_values", (double)p->offloaded_values);
    cJSON_AddNumberToObject(o, "cost", p->seconds);
    cJSON_AddNumberToObject(o, "exposed_copy_cost", p->stall_seconds);
    cJSON_AddNumberToObject(o, "recomputations", (double)p->recomputations);
}

static void plan_text(const remat_plan_summary *p, const char *unit) {
    char b[32], b2[32], b3[32];
    printf("the step's plan (optimal, %s; what remat train runs): holds %s on the device (arena %s), %s of host "
           "memory, %lld values offloaded, %lld recomputations, cost %.6g %s (exposed copies %.6g)\n",
           p->candidate, cli_fmt_bytes(p->held_bytes, b, sizeof b), cli_fmt_bytes(p->arena_bytes, b2, sizeof b2),
           cli_fmt_bytes(p->host_bytes, b3, sizeof b3), (long long)p->offloaded_values, (long long)p->recomputations,
           p->seconds, unit, p->stall_seconds);
}

int cli_plan_offload(const remat_model_opts *mo, const remat_session_opts *so, const remat_offload_opts *oo, int json) {
    remat_offload_summary r;
    remat_plan_summary p;
    int rc = report_at(mo, so, oo, &r);
    if (rc) return rc;
    if ((rc = step_plan(mo, so, &p)) != 0) return rc;
    const char *unit = r.flops_per_s > 0 ? "FLOP" : "s";
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", mo->name);
        cJSON_AddNumberToObject(o, "batch", (double)mo->batch);
        cJSON_AddStringToObject(o, "device", remat_device_str(so->device));
        cJSON_AddNumberToObject(o, "budget_bytes", (double)so->budget);
        cJSON_AddStringToObject(o, "cost_unit", unit);
        summary_json(o, &r, oo->host_budget);
        plan_json(cJSON_AddObjectToObject(o, "plan"), &p);
        cli_json_print(o);
        return 0;
    }
    printf("model %s, batch %lld, device %s, budget %zu B\n", mo->name, (long long)mo->batch,
           remat_device_str(so->device), so->budget);
    summary_text(&r, oo->host_budget, unit);
    plan_text(&p, unit);
    return 0;
}
