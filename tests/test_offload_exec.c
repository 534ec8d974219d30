/* test_offload_exec.c: offload executed (the CPU backend stands in for the
 * copy engine: its "host" is a second block of the same memory).
 *
 * For each model, at budgets from its smallest feasible one to what
 * store-all holds, with a host budget of store-all's size: a session plans
 * optimal with offload, and
 * - the plan never costs more than the same budget's plan without offload,
 *   and fits the budget (device) and the host budget (host);
 * - three training steps give the bits of store-all (losses, parameters and
 *   BatchNorm's buffers) whatever was offloaded;
 * - the measured peaks equal the predicted ones in every category, the host
 *   one (REMAT_MEM_HOST) included, which is not in the device's total;
 * - offload is chosen at some budget of every model (a planner that never
 *   offloads fails this).
 * The models: resnet18, resnet50 and gpt2 (with dropout) tiny. Offload
 * moves what a chain stage keeps, so a graph of few stages (densenet-bc's
 * dense blocks are one stage each; cnn's floor is near store-all) has
 * little to offload.
 * Then the memory plan of a hand schedule (OUT, FREE, IN) and the
 * walker's refusals of schedules that copy what is not there.
 *
 * With --device cuda (test_offload_exec_cuda, label cuda; exit 77 where no
 * GPU is visible) the models run on the GPU: copies to pinned host memory
 * on the copy stream, ordered by events, the same checks, on larger
 * models (the tiny ones' peaks are the libraries' workspaces), the
 * convolutions' least workspaces and a host link of 450 GB/s (resnet18's
 * offload there not yet run on a GPU).
 */
#include "check.h"

#include "../src/session/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 3

static remat_device device = REMAT_DEVICE_CPU; /* --device cuda: the models' sessions on the GPU */

static remat_status build(const char *name, remat_graph *g, remat_model *m) {
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    remat_status st = remat_model_opts_for(&mo, name);
    if (st != REMAT_OK) return st;
    if (strcmp(mo.name, "gpt2") == 0) {
        mo.batch = 2, mo.layers = 3, mo.embd = 16, mo.heads = 2, mo.context = 16, mo.vocab = 32;
        if (device == REMAT_DEVICE_CUDA) mo.batch = 4, mo.embd = 64, mo.context = 64, mo.vocab = 64;
    } else {
        mo.batch = 2, mo.height = 16, mo.width = 16, mo.classes = 10, mo.base_channels = 4;
        if (device == REMAT_DEVICE_CUDA) mo.batch = 8, mo.height = 32, mo.width = 32, mo.base_channels = 16;
    }
    return remat_model_build(g, &mo, m);
}

typedef struct {
    float loss[STEPS];
    float *w; /* all parameters and buffers, concatenated */
    size_t nw;
    remat_plan_summary plan;
    remat_status status;
} outcome;

static void opts(remat_session_opts *so, remat_optim_opts *oo, remat_strategy st, size_t budget, size_t host) {
    remat_session_opts_default(so);
    remat_optim_opts_default(oo, REMAT_OPTIM_SGD);
    oo->momentum = 0.9f;
    oo->lr = 0.01f;
    so->threads = 2;
    so->device = device;
    so->seed = 5;
    so->strategy = st;
    so->budget = budget;
    so->host_budget = host;
    so->host_latency = 0; /* the tiny models' copies are a few KiB: a PCIe latency would rule them all out */
    /* On a GPU at PCIe's 25 GB/s recomputing these small models' values
     * costs less than copying them, and the planner rightly offloads
     * nothing: the copy engine is tested at NVLink-C2C's order */
    if (device == REMAT_DEVICE_CUDA) so->host_bandwidth = 450e9;
    /* and cuDNN's fastest algorithms' workspaces (up to 256 MiB) would set
     * the peak where offload moves activations: the least ones */
    if (device == REMAT_DEVICE_CUDA) so->least_workspace = 1;
    so->optim = oo;
}

/* The plan alone (plan-only session): its summary, or the status. */
static remat_status plan(const remat_graph *g, const remat_model *m, size_t budget, size_t host,
                         remat_plan_summary *p) {
    remat_session_opts so;
    remat_optim_opts oo;
    opts(&so, &oo, REMAT_STRATEGY_OPTIMAL, budget, host);
    so.plan_only = 1;
    remat_session *s = NULL;
    remat_status st = remat_session_create(&s, g, m->loss, &so);
    if (st == REMAT_OK) st = remat_session_plan(s, p);
    remat_session_destroy(s);
    return st;
}

static void run(const remat_graph *g, const remat_model *m, const char *name, remat_strategy strat, size_t budget,
                size_t host, outcome *o) {
    memset(o, 0, sizeof *o);
    remat_session_opts so;
    remat_optim_opts oo;
    opts(&so, &oo, strat, budget, host);
    remat_session *s = NULL;
    o->status = remat_session_create(&s, g, m->loss, &so);
    if (o->status != REMAT_OK) {
        remat_session_destroy(s);
        return;
    }
    CHECK_OK(remat_session_plan(s, &o->plan));
    int64_t xd[4], yd[4], nx = 1, ny = 1;
    int nd = remat_node_shape(g, m->input, xd);
    for (int i = 0; i < nd; i++) nx *= xd[i];
    nd = remat_node_shape(g, m->labels, yd);
    for (int i = 0; i < nd; i++) ny *= yd[i];
    float *x = malloc((size_t)nx * sizeof *x);
    int32_t *y = malloc((size_t)ny * sizeof *y);
    for (int64_t i = 0; i < nx; i++)
        x[i] = remat_node_dtype(g, m->input) == REMAT_I32 ? 0 : (float)((i * 13) % 17) / 8.0f - 1.0f;
    if (remat_node_dtype(g, m->input) == REMAT_I32)
        for (int64_t i = 0; i < nx; i++) ((int32_t *)x)[i] = (int32_t)((i * 5) % 32);
    for (int64_t i = 0; i < ny; i++) y[i] = (int32_t)((i * 7) % 10);
    remat_session_bind(s, m->input, x);
    remat_session_bind(s, m->labels, y);
    for (int k = 0; k < STEPS; k++) {
        remat_mem_stats pred, meas;
        CHECK_OK(remat_session_predict(s, &pred));
        CHECK_OK(remat_session_step(s, &o->loss[k]));
        CHECK_OK(remat_session_update(s));
        remat_session_mem(s, &meas);
        for (int c = 0; c < REMAT_MEM_COUNT; c++)
            CHECK_MSG(pred.peak[c] == meas.peak[c], "%s @%zu: %s predicted %zu measured %zu", name, budget,
                      remat_mem_str((remat_mem)c), pred.peak[c], meas.peak[c]);
        CHECK_MSG(meas.peak[REMAT_MEM_HOST] <= o->plan.host_bytes, "%s @%zu: %zu host bytes in a block of %zu", name,
                  budget, meas.peak[REMAT_MEM_HOST], o->plan.host_bytes);
        CHECK_MSG(meas.live[REMAT_MEM_HOST] == 0, "%s: host bytes left after a step", name);
        size_t held = remat_session_held_bytes(s);
        CHECK_MSG(held == o->plan.held_bytes, "%s @%zu: holds %zu, planned %zu", name, budget, held,
                  o->plan.held_bytes);
        if (budget) CHECK_MSG(held <= budget, "%s: holds %zu, above the budget %zu", name, held, budget);
    }
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info pi;
        remat_session_param(s, i, &pi);
        o->w = realloc(o->w, (o->nw + (size_t)pi.numel) * sizeof *o->w);
        CHECK_OK(remat_session_read_param(s, i, REMAT_PARAM_VALUE, o->w + o->nw)); /* a device's too */
        o->nw += (size_t)pi.numel;
    }
    free(x), free(y);
    remat_session_destroy(s);
}

static void model(const char *name, int n_budgets) {
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    CHECK_OK(build(name, g, &m));
    outcome all;
    run(g, &m, name, REMAT_STRATEGY_ALL, 0, 0, &all);
    CHECK_OK(all.status);
    size_t top = all.plan.held_bytes, floor = 0;
    remat_plan_summary p;
    CHECK(plan(g, &m, 1, 0, &p) == REMAT_BUDGET);
    const char *at = strstr(remat_last_error(), "smallest feasible budget is ");
    CHECK_MSG(at != NULL, "%s: %s", name, remat_last_error());
    if (at) floor = (size_t)strtoull(at + strlen("smallest feasible budget is "), NULL, 10);
    int chosen = 0;
    for (int k = 0; k < n_budgets && floor; k++) {
        size_t budget = floor + (top - floor) * (size_t)k / (size_t)n_budgets;
        remat_plan_summary without;
        CHECK_OK(plan(g, &m, budget, 0, &without));
        outcome o;
        run(g, &m, name, REMAT_STRATEGY_OPTIMAL, budget, top, &o);
        CHECK_MSG(o.status == REMAT_OK, "%s @%zu with offload: %s", name, budget, remat_last_error());
        if (o.status != REMAT_OK) continue;
        CHECK_MSG(o.plan.seconds <= without.seconds, "%s @%zu: with offload %g, without %g", name, budget,
                  o.plan.seconds, without.seconds);
        CHECK_MSG(o.plan.host_bytes <= top, "%s @%zu: %zu host bytes above the host budget %zu", name, budget,
                  o.plan.host_bytes, top);
        CHECK((o.plan.offloaded_values > 0) == (o.plan.host_bytes > 0));
        chosen += o.plan.offloaded_values > 0;
        printf("  %s @%zu: %s, %lld values offloaded (%zu host bytes), cost %.4g against %.4g without\n", name, budget,
               o.plan.candidate, (long long)o.plan.offloaded_values, o.plan.host_bytes, o.plan.seconds,
               without.seconds);
        for (int i = 0; i < STEPS; i++)
            CHECK_MSG(o.loss[i] == all.loss[i], "%s @%zu step %d: loss %.9g, store-all %.9g", name, budget, i,
                      o.loss[i], all.loss[i]);
        CHECK(o.nw == all.nw && memcmp(o.w, all.w, o.nw * sizeof *o.w) == 0);
        free(o.w);
    }
    CHECK_MSG(chosen > 0, "%s: offload chosen at none of %d budgets", name, n_budgets);
    free(all.w);
    remat_graph_destroy(g);
}

/* A hand schedule: x * w -> relu -> relu -> mse, the first relu's output
 * copied out after the second is computed and back for its backward. */
static void hand_plan(void) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t shape[2] = {4, 64};
    remat_node x = remat_input(g, "x", REMAT_F32, 2, shape), t = remat_input(g, "t", REMAT_F32, 2, shape);
    remat_node w = remat_param(g, "w", 2, shape, REMAT_INIT_ONES, 0);
    remat_node a = remat_mul(g, x, w), b = remat_relu(g, a), c = remat_relu(g, b), l = remat_mse(g, c, t);
    CHECK(l >= 0);
    remat__prog p;
    CHECK_OK(remat__prog_init(&p, g, 1, REMAT_DEVICE_CPU, NULL));
    const remat__instr seq[] = {
        {.kind = REMAT__I_FWD, .node = x}, {.kind = REMAT__I_FWD, .node = t},
        {.kind = REMAT__I_FWD, .node = a}, {.kind = REMAT__I_FWD, .node = b},
        {.kind = REMAT__I_FWD, .node = c}, {.kind = REMAT__I_OUT, .node = b, .value = REMAT__VAL(b, REMAT__V_OUT)},
        {.kind = REMAT__I_FWD, .node = l}, {.kind = REMAT__I_FREE, .node = b, .value = REMAT__VAL(b, REMAT__V_OUT)},
        {.kind = REMAT__I_BWD, .node = l}, {.kind = REMAT__I_IN, .node = b, .value = REMAT__VAL(b, REMAT__V_OUT)},
        {.kind = REMAT__I_BWD, .node = c}, {.kind = REMAT__I_BWD, .node = b},
        {.kind = REMAT__I_BWD, .node = a},
    };
    remat__schedule s = {.train = 1, .backward = 1, .loss = l, .fetch = REMAT_NONE};
    s.n = s.cap = (int)(sizeof seq / sizeof seq[0]);
    s.ins = malloc(sizeof seq);
    memcpy(s.ins, seq, sizeof seq);
    CHECK_OK(remat__schedule_add_frees(&p, &s));
    CHECK_OK(remat__schedule_categorize(&p, &s));
    remat__memplan mp;
    CHECK_OK(remat__memplan_make(&p, &s, &mp));
    CHECK_OK(remat__memplan_verify(&mp));
    size_t bytes = 4 * 64 * sizeof(float);
    CHECK(mp.host_arena == bytes);
    int host_events = 0, b_instances = 0;
    for (int32_t e = 0; e < mp.n; e++) {
        if (mp.ev[e].cat == REMAT_MEM_HOST) {
            host_events++;
            CHECK(mp.ev[e].value == REMAT__VAL(b, REMAT__V_OUT) && mp.ev[e].bytes == bytes && mp.ev[e].off == 0);
            CHECK(s.ins[mp.ev[e].ins].kind == REMAT__I_OUT && s.ins[mp.ev[e].ins1].kind == REMAT__I_IN);
        } else if (mp.ev[e].value == REMAT__VAL(b, REMAT__V_OUT)) {
            b_instances++;
            CHECK(mp.ev[e].cat == REMAT_MEM_ACT); /* kept for backward, on the host for a while */
        }
    }
    CHECK(host_events == 1 && b_instances == 2);
    /* host bytes are their own category, outside the device's total */
    remat_mem_stats zero, pk;
    memset(&zero, 0, sizeof zero);
    remat__memplan_peaks(&mp, &zero, &pk);
    CHECK(pk.peak[REMAT_MEM_HOST] == bytes);
    size_t sum = 0;
    for (int c = 0; c < REMAT_MEM_TOTAL; c++) sum += pk.peak[c];
    CHECK(pk.peak[REMAT_MEM_TOTAL] <= sum);
    remat__memplan_free(&mp);
    /* refused: a copy in of what is resident, a copy out of what is not */
    remat__schedule bad = {.train = 1, .backward = 1, .loss = l, .fetch = REMAT_NONE};
    const remat__instr in_only[] = {
        {.kind = REMAT__I_FWD, .node = x},
        {.kind = REMAT__I_FWD, .node = a},
        {.kind = REMAT__I_IN, .node = a, .value = REMAT__VAL(a, REMAT__V_OUT)},
    };
    bad.n = bad.cap = 3;
    bad.ins = malloc(sizeof in_only);
    memcpy(bad.ins, in_only, sizeof in_only);
    CHECK(remat__memplan_build(&p, &bad, &mp) == REMAT_INTERNAL);
    CHECK(strstr(remat_last_error(), "copies in a value that is resident") != NULL);
    remat__memplan_free(&mp);
    bad.ins[2] = (remat__instr){.kind = REMAT__I_OUT, .node = b, .value = REMAT__VAL(b, REMAT__V_OUT)};
    CHECK(remat__memplan_build(&p, &bad, &mp) == REMAT_INTERNAL);
    CHECK(strstr(remat_last_error(), "copies out a value that is not resident") != NULL);
    remat__memplan_free(&mp);
    remat__schedule_free(&bad);
    remat__schedule_free(&s);
    remat__prog_free(&p);
    remat_graph_destroy(g);
}

int main(int argc, char **argv) {
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            if (remat_device_parse(argv[++i], &device) != REMAT_OK)
                return fprintf(stderr, "%s\n", remat_last_error()), 2;
        } else {
            fprintf(stderr, "usage: test_offload_exec [--quick] [--device cpu|cuda]\n");
            return 2;
        }
    }
    if (remat_device_available(device) != REMAT_OK) {
        printf("test_offload_exec: skipped: %s\n", remat_last_error());
        return 77;
    }
    printf("test_offload_exec on the %s\n", remat_device_str(device));
    hand_plan();
    model("resnet18", quick ? 3 : 6);
    model("gpt2", quick ? 3 : 6);
    if (!quick) model("resnet50", 4);
    return check_exit("test_offload_exec");
}
