/* offload_api.c: remat_session_offload, the offload planner for a
 * session's training step (plan/offload_report.c), in the session's
 * cost model: copies are costed in its units (seconds when calibrated,
 * else FLOPs at the options' or the device's FLOP/s), and the chain
 * model gets the budget less the session's resident blocks.
 *
 * Ownership: nothing outlives a call.
 */
#include "session.h"

#include "../plan/offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void remat_offload_opts_default(remat_offload_opts *o) {
    memset(o, 0, sizeof *o);
    o->latency = -1;
}

/* A node's name; unnamed, that of its first named parameter (its module
 * with ".weight" dropped: "layer1.0.conv1"), else its op and index. */
static void node_label(const remat_graph *g, int32_t u, char *buf, size_t cap) {
    const char *nm = remat_node_name(g, u);
    for (int q = 0; !*nm && q < g->nodes[u].n_in; q++) {
        int32_t v = g->nodes[u].in[q];
        if (g->nodes[v].leaf == REMAT__LEAF_PARAM) nm = remat_node_name(g, v);
    }
    if (!*nm) {
        snprintf(buf, cap, "%s %d", remat_node_op(g, u), (int)u);
        return;
    }
    size_t len = strlen(nm);
    if (len > 7 && strcmp(nm + len - 7, ".weight") == 0) len -= 7;
    snprintf(buf, cap, "%.*s", (int)len, nm);
}

/* "a, b, c" of the nodes' labels, "..." when they do not fit. */
static void name_nodes(const remat_graph *g, const int32_t *v, int n, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        char one[160], label[150];
        node_label(g, v[i], label, sizeof label);
        snprintf(one, sizeof one, "%s%s", i ? ", " : "", label);
        if (at + strlen(one) + 5 > cap) {
            snprintf(buf + at, cap - at, "%s...", i ? ", " : "");
            return;
        }
        at += (size_t)snprintf(buf + at, cap - at, "%s", one);
    }
}

double remat__session_flops_per_s(const remat_session *s, double flops_per_s) {
    return flops_per_s > 0 ? flops_per_s : s->opts.device == REMAT_DEVICE_CUDA ? REMAT_CUDA_FLOPS : REMAT_CPU_FLOPS;
}

/* The link in bytes/s and s per copy: the options', else the calibrated
 * cost model's measured one, else PCIe's nominal. */
static void link_of(const remat_session *s, double bw_opt, double lat_opt, double *bw, double *lat) {
    const remat_cost_model *cm = &s->prog.cost;
    int measured = cm->calibrated && cm->host_bandwidth > 0;
    *bw = bw_opt > 0 ? bw_opt : measured ? cm->host_bandwidth : REMAT_PCIE_BANDWIDTH;
    *lat = lat_opt >= 0 ? lat_opt : measured ? cm->host_latency : REMAT_PCIE_LATENCY;
}

remat_status remat__session_host_link(const remat_session *s, double *bandwidth, double *latency) {
    double bw, lat;
    link_of(s, s->opts.host_bandwidth, s->opts.host_latency, &bw, &lat);
    if (!(bw < 1e300) || !(lat < 1e3))
        return remat__err(REMAT_INVALID, "host link: %g bytes/s, %g s per copy", bw, lat);
    double per_s = s->prog.cost.calibrated ? 1.0 : remat__session_flops_per_s(s, 0);
    *bandwidth = bw / per_s, *latency = lat * per_s;
    return REMAT_OK;
}

remat_status remat_session_offload(const remat_session *s, const remat_offload_opts *opts, remat_offload_summary *out) {
    if (!s || !opts || !out) return remat__err(REMAT_INVALID, "remat_session_offload: NULL argument");
    memset(out, 0, sizeof *out);
    size_t budget = opts->budget ? opts->budget : s->opts.budget, blocks = remat__session_blocks_bytes(s);
    if (!budget) return remat__err(REMAT_INVALID, "offload planning needs a device budget");
    if (budget < blocks)
        return remat__err(REMAT_BUDGET,
                          "the budget of %zu bytes is below the %zu bytes of parameters, gradients "
                          "and optimizer state",
                          budget, blocks);
    int calibrated = s->prog.cost.calibrated;
    double fps = remat__session_flops_per_s(s, opts->flops_per_s);
    double per_s = calibrated ? 1.0 : fps; /* cost units per second */
    link_of(s, opts->bandwidth, opts->latency, &out->bandwidth, &out->latency);
    out->flops_per_s = calibrated ? 0 : fps;
    if (!(out->bandwidth < 1e300) || !(out->latency < 1e3) || !(fps < 1e300))
        return remat__err(REMAT_INVALID, "offload: bandwidth %g B/s, latency %g s, %g FLOP/s", out->bandwidth,
                          out->latency, fps);
    remat__link link = {out->bandwidth / per_s, out->latency * per_s};
    out->chain_budget = budget - blocks;
    int32_t *off = NULL;
    int n_off = 0;
    remat_status rc = remat__offload_report(&s->prog, s->loss, out->chain_budget, opts->host_budget, link, opts->slots,
                                            opts->host_slots, out, &off, &n_off);
    if (rc == REMAT_OK) name_nodes(s->g, off, n_off, out->offloaded_nodes, sizeof out->offloaded_nodes);
    out->stall_seconds = out->stall / per_s;
    free(off);
    return rc;
}
