/* plan_graph.c: plans a graph file's training step (remat_plan_graph_json).
 *
 * The entry point for frameworks that run the plan themselves (the Python
 * package, `remat plan --graph`): a graph file and a request in, a plan
 * out, both JSON, so that a caller through ctypes or a pipe needs no
 * struct layouts. The plan is a plan-only session's (the same planners,
 * schedule builder and memory plan as for remat's own models): its
 * predicted peaks per category, its costs, and, per op of the file, whether
 * the schedule recomputes it. Format: docs/graph-format.md.
 */
#include "../session/session.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    size_t budget;
    remat_strategy strategy;
    int has_optim;
    remat_optim_opts optim;
    int threads;
    int timeline;
    int recompute_once;
    int split; /* split schedules allowed (the session's no_split unset) */
    int grads_resident;
    size_t comm_bytes;
} request;

static remat_status read_request(const char *text, request *r) {
    memset(r, 0, sizeof *r);
    r->strategy = REMAT_STRATEGY_AUTO;
    r->threads = 1;
    if (!text || !*text) return REMAT_OK;
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return remat__err(REMAT_FORMAT, "plan request: not a JSON object");
    }
    remat_status st = REMAT_OK;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "budget");
    if (b && (!cJSON_IsNumber(b) || !isfinite(b->valuedouble) || b->valuedouble < 0 ||
              b->valuedouble != floor(b->valuedouble) || b->valuedouble >= 9007199254740992.0))
        st = remat__err(REMAT_FORMAT, "plan request: 'budget' must be a whole number of bytes >= 0");
    else if (b) r->budget = (size_t)b->valuedouble;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "strategy");
    if (st == REMAT_OK && s) {
        if (!cJSON_IsString(s)) st = remat__err(REMAT_FORMAT, "plan request: 'strategy' is not a string");
        else st = remat_strategy_parse(s->valuestring, &r->strategy);
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "communication_bytes");
    if (st == REMAT_OK && c &&
        (!cJSON_IsNumber(c) || !isfinite(c->valuedouble) || c->valuedouble < 0 ||
         c->valuedouble != floor(c->valuedouble) || c->valuedouble >= 9007199254740992.0))
        st = remat__err(REMAT_FORMAT, "plan request: 'communication_bytes' must be a whole number of bytes >= 0");
    else if (c) r->comm_bytes = (size_t)c->valuedouble;
    r->timeline = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "timeline"));
    r->recompute_once = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "recompute_once"));
    r->split = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "split"));
    r->grads_resident = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "grads_resident"));
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    if (st == REMAT_OK && o && !cJSON_IsNull(o)) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "kind");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "momentum");
        const char *ks = cJSON_IsString(k) ? k->valuestring : "";
        if (strcmp(ks, "sgd") == 0) {
            remat_optim_opts_default(&r->optim, REMAT_OPTIM_SGD);
            r->optim.momentum = cJSON_IsNumber(m) ? (float)m->valuedouble : 0.0f;
            r->has_optim = 1;
        } else if (strcmp(ks, "adamw") == 0 || strcmp(ks, "adam") == 0) {
            remat_optim_opts_default(&r->optim, REMAT_OPTIM_ADAMW);
            r->has_optim = 1;
        } else if (strcmp(ks, "none") != 0) {
            st = remat__err(REMAT_FORMAT, "plan request: optimizer 'kind' must be sgd, adam, adamw or none");
        }
    }
    cJSON_Delete(root);
    return st;
}

static void add_size(cJSON *o, const char *k, size_t v) { cJSON_AddNumberToObject(o, k, (double)v); }

static cJSON *peaks_json(const remat_mem_stats *m) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < REMAT_MEM_COUNT; c++) add_size(o, remat_mem_str((remat_mem)c), m->peak[c]);
    return o;
}

/* The step's instructions with the live bytes of its values after each
 * ("timeline": [[kind, op id, live bytes, peak bytes within], ...]), a fold
 * over the memory plan's ticks: where the predicted peak is. */
static remat_status timeline_json(const remat_session *s, cJSON *out) {
    const remat__memplan *m = &s->train.mem;
    const remat__schedule *sc = &s->train.sc;
    const remat_graph *g = s->g;
    cJSON *arr = cJSON_AddArrayToObject(out, "timeline");
    int64_t live = 0, peak = 0;
    int32_t t = 0;
    static const char *const kinds[] = {"forward", "backward", "free", "reduce"};
    for (int i = 0; i < sc->n; i++) {
        peak = live;
        for (; t < m->ticks; t++) {
            int32_t e = m->tick[t];
            const remat__mev *x = &m->ev[e >= 0 ? e : ~e];
            if (x->ins > i && e >= 0) break;
            if (e >= 0) live += (int64_t)x->bytes;
            else live -= (int64_t)x->bytes;
            if (live > peak) peak = live;
        }
        const remat__instr *in = &sc->ins[i];
        if (in->kind == REMAT__I_FREE) continue;
        cJSON *row = cJSON_CreateArray();
        int rec = in->kind == REMAT__I_FWD && !in->first;
        cJSON_AddItemToArray(row, cJSON_CreateString(rec ? "recompute" : kinds[in->kind]));
        cJSON_AddItemToArray(row, cJSON_CreateNumber(g->traced ? g->traced[in->node].id : in->node));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)live));
        cJSON_AddItemToArray(row, cJSON_CreateNumber((double)peak));
        cJSON_AddItemToArray(arr, row);
    }
    return REMAT_OK;
}

/* What the step holds at its predicted peak ("at_peak"): the instruction
 * that reaches it (kind, op id) and the buffers live there, largest first
 * (up to AT_PEAK_MAX: {"op": id or, for a parameter's gradient, "value":
 * id, "role": output | aux | gradient | workspace, "category", "bytes"}; a
 * workspace's op is the instruction's), with the live bytes of values in
 * all: what a smaller plan would have to free. */
#define AT_PEAK_MAX 16

static int by_bytes_desc(const void *a, const void *b) {
    const remat__mev *x = *(const remat__mev *const *)a, *y = *(const remat__mev *const *)b;
    return (x->bytes < y->bytes) - (x->bytes > y->bytes);
}

static remat_status at_peak_json(const remat_session *s, cJSON *out) {
    const remat__memplan *m = &s->train.mem;
    const remat__schedule *sc = &s->train.sc;
    const remat_graph *g = s->g;
    int64_t best = 0;
    int32_t at = remat__memplan_peak_tick(m, &best);
    if (at < 0) return REMAT_OK;
    const remat__mev **held = malloc(((size_t)m->n + 1) * sizeof *held);
    if (!held) return remat__err(REMAT_NOMEM, "out of memory writing a plan");
    int n = 0;
    for (int32_t e = 0; e < m->n; e++)
        if (m->ev[e].t0 <= at && (m->ev[e].t1 < 0 || m->ev[e].t1 > at) && m->ev[e].cat != REMAT_MEM_HOST)
            held[n++] = &m->ev[e];
    qsort(held, (size_t)n, sizeof *held, by_bytes_desc);
    int32_t e0 = m->tick[at] >= 0 ? m->tick[at] : ~m->tick[at];
    int32_t i = m->tick[at] >= 0 ? m->ev[e0].ins : m->ev[e0].ins1;
    const remat__instr *in = i >= 0 && i < sc->n ? &sc->ins[i] : NULL;
    static const char *const kinds[] = {"forward", "backward", "free", "reduce", "out", "in"};
    static const char *const roles[] = {"output", "aux", "gradient"};
    cJSON *o = cJSON_AddObjectToObject(out, "at_peak");
    int rec = in && in->kind == REMAT__I_FWD && !in->first;
    cJSON_AddStringToObject(o, "kind", !in ? "end" : rec ? "recompute" : kinds[in->kind]);
    if (in) /* an op, or a leaf (an input copied in): its value's id */
        cJSON_AddNumberToObject(o, g->nodes[in->node].leaf != REMAT__LEAF_NONE ? "value" : "op",
                                g->traced ? g->traced[in->node].id : in->node);
    add_size(o, "live_bytes", (size_t)best);
    cJSON *arr = cJSON_AddArrayToObject(o, "held");
    for (int k = 0; k < n && k < AT_PEAK_MAX; k++) {
        const remat__mev *x = held[k];
        int32_t u = x->value >= 0 ? REMAT__VAL_NODE(x->value) : sc->ins[x->ins].node;
        cJSON *row = cJSON_CreateObject();
        /* an op's node, or a leaf's (a parameter's gradient): the value's id */
        cJSON_AddNumberToObject(row, g->nodes[u].leaf != REMAT__LEAF_NONE ? "value" : "op",
                                g->traced ? g->traced[u].id : u);
        cJSON_AddStringToObject(row, "role", x->value >= 0 ? roles[REMAT__VAL_KIND(x->value)] : "workspace");
        cJSON_AddStringToObject(row, "category", remat_mem_str((remat_mem)x->cat));
        add_size(row, "bytes", x->bytes);
        cJSON_AddItemToArray(arr, row);
    }
    free(held);
    return REMAT_OK;
}

/* The recomputations as the schedule runs them ("recompute_groups"): each
 * group a run of recomputed ops between two other instructions (frees
 * aside). */
static void groups_json(const remat_session *s, cJSON *out) {
    const remat_graph *g = s->g;
    cJSON *groups = cJSON_AddArrayToObject(out, "recompute_groups"), *grp = NULL;
    const remat__schedule *rs = &s->train.sc;
    int32_t last = -1;
    for (int i = 0; i < rs->n; i++) {
        const remat__instr *in = &rs->ins[i];
        if (in->kind == REMAT__I_FREE) continue;
        if (in->kind != REMAT__I_FWD || in->first || g->nodes[in->node].leaf != REMAT__LEAF_NONE) {
            grp = NULL;
            continue;
        }
        int32_t id = g->traced[in->node].id;
        if (grp && id == last) continue; /* an op and its extra output */
        if (!grp) grp = cJSON_CreateArray(), cJSON_AddItemToArray(groups, grp);
        cJSON_AddItemToArray(grp, cJSON_CreateNumber(id));
        last = id;
    }
}

/* The plan of a session: summary and per-op decisions. */
static remat_status plan_json(const remat_session *s, const request *rq, cJSON *out) {
    remat_plan_summary ps;
    remat_status st = remat_session_plan(s, &ps);
    if (st != REMAT_OK) return st;
    const remat_graph *g = remat_session_graph(s);
    cJSON_AddTrueToObject(out, "feasible");
    add_size(out, "budget", rq->budget);
    cJSON_AddStringToObject(out, "strategy", remat_strategy_str(ps.strategy));
    cJSON_AddStringToObject(out, "planner", ps.planner ? ps.planner : "");
    cJSON_AddStringToObject(out, "candidate", ps.candidate);
    cJSON_AddItemToObject(out, "predicted", peaks_json(&ps.predicted));
    add_size(out, "peak_bytes", ps.predicted.peak[REMAT_MEM_TOTAL]);
    add_size(out, "bound", ps.bound_bytes);
    add_size(out, "held_bytes", ps.held_bytes);
    cJSON_AddStringToObject(out, "cost_unit", g->traced_seconds ? "seconds" : "flops");
    cJSON_AddNumberToObject(out, "cost", ps.seconds);
    cJSON_AddNumberToObject(out, "extra_cost", ps.extra_seconds);
    cJSON_AddNumberToObject(out, "flops", ps.flops);
    cJSON_AddNumberToObject(out, "extra_flops", ps.extra_flops);
    cJSON_AddNumberToObject(out, "recomputations", (double)ps.recomputations);
    /* per node, bit 1: recomputed by the schedule (for "recompute", where a
     * node made for an extra output counts for its op); bit 2, below: freed
     * in the forward */
    uint8_t *rec = calloc((size_t)g->n + 1, 1);
    if (!rec) return remat__err(REMAT_NOMEM, "out of memory writing a plan");
    int64_t n = remat_session_schedule_length(s);
    for (int64_t i = 0; i < n && st == REMAT_OK; i++) {
        remat_instr_info in;
        st = remat_session_schedule_instr(s, i, &in);
        if (st == REMAT_OK && strcmp(in.kind, "recompute") == 0) rec[in.node] = 1;
    }
    cJSON *ops = cJSON_AddArrayToObject(out, "recompute");
    int32_t last = -1;
    for (int32_t u = 0; u < g->n && st == REMAT_OK; u++) {
        if (!rec[u] || g->nodes[u].leaf != REMAT__LEAF_NONE) continue;
        int32_t id = g->traced[u].id;
        if (id == last) continue; /* an op and its extra output */
        cJSON_AddItemToArray(ops, cJSON_CreateNumber(id));
        last = id;
    }
    groups_json(s, out);
    /* per op: its first output is dropped in the forward (freed before the
     * first backward instruction), to be recomputed; a recomputed op whose
     * first output lives into the backward is kept until it is recomputed,
     * which a framework that keeps it until its backward runs as well
     * (under recompute_once; a nested plan's applier follows "kept_values":
     * per value, made in the forward, held into the backward, freed there
     * and made again) */
    const remat__schedule *sc = &s->train.sc;
    for (int i = 0; i < sc->n; i++) {
        const remat__instr *in = &sc->ins[i];
        if (in->kind == REMAT__I_BWD) break;
        if (in->kind == REMAT__I_FREE && REMAT__VAL_KIND(in->value) == REMAT__V_OUT)
            rec[REMAT__VAL_NODE(in->value)] |= 2;
    }
    cJSON *drop = cJSON_AddArrayToObject(out, "drop"), *kept = cJSON_AddArrayToObject(out, "kept_values");
    last = -1;
    for (int32_t u = 0; u < g->n && st == REMAT_OK; u++) {
        if (g->nodes[u].leaf != REMAT__LEAF_NONE) continue;
        if (rec[u] == 1) cJSON_AddItemToArray(kept, cJSON_CreateNumber(g->traced[u].value));
        int32_t id = g->traced[u].id;
        if (!(rec[u] & 2) || id == last) continue;
        cJSON_AddItemToArray(drop, cJSON_CreateNumber(id));
        last = id;
    }
    free(rec);
    if (st == REMAT_OK && rq->timeline) st = timeline_json(s, out);
    if (st == REMAT_OK) st = at_peak_json(s, out);
    return st;
}

remat_status remat_plan_graph_json(const char *graph_text, const char *request_json, char **out_json) {
    if (!graph_text || !out_json) return remat__err(REMAT_INVALID, "remat_plan_graph_json: NULL argument");
    *out_json = NULL;
    request rq;
    remat_status st = read_request(request_json, &rq);
    if (st != REMAT_OK) return st;
    remat_graph *g = NULL;
    remat_node loss;
    if ((st = remat_graph_read_json(graph_text, &g, &loss)) != REMAT_OK) return st;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.plan_only = 1;
    so.threads = rq.threads;
    so.budget = rq.budget;
    so.strategy = rq.strategy;
    so.optim = rq.has_optim ? &rq.optim : NULL;
    so.recompute_once = rq.recompute_once;
    so.no_split = !rq.split;
    so.grads_resident = rq.grads_resident;
    so.framework_comm_bytes = rq.comm_bytes;
    size_t floor_bytes = 0, bound_bytes = 0;
    so.floor_out = &floor_bytes;
    so.bound_out = &bound_bytes;
    remat_session *s = NULL;
    cJSON *out = cJSON_CreateObject();
    if (!out) st = remat__err(REMAT_NOMEM, "out of memory writing a plan");
    else {
        cJSON_AddStringToObject(out, "format", "remat-plan");
        cJSON_AddNumberToObject(out, "version", 1);
        st = remat_session_create(&s, g, loss, &so);
    }
    if (st == REMAT_OK) {
        st = plan_json(s, &rq, out);
    } else if (st == REMAT_BUDGET && out) { /* an answer, not a failure: what would fit */
        cJSON_AddFalseToObject(out, "feasible");
        add_size(out, "budget", rq.budget);
        cJSON_AddStringToObject(out, "error", remat_last_error());
        if (floor_bytes) add_size(out, "floor", floor_bytes);
        if (bound_bytes) add_size(out, "bound", bound_bytes);
        st = REMAT_OK;
    }
    if (st == REMAT_OK) {
        *out_json = cJSON_PrintUnformatted(out);
        if (!*out_json) st = remat__err(REMAT_NOMEM, "out of memory writing a plan");
    }
    cJSON_Delete(out);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return st;
}

void remat_free(void *p) { free(p); }
