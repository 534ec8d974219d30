/* test_cost.c: the cost model's shape classes.
 *
 * - A class is the op with its input and output shapes and attributes:
 *   the same layer built in two graphs has one class, another batch size
 *   or kernel size another, leaves none.
 * - remat_calibrate_graph measures every op node's class of a small CNN
 *   (positive forward times; backward times for the nodes that have one),
 *   keeps classes measured before, and the file round-trips exactly.
 * - A session costs each node by its class's measured seconds (the plan
 *   summary's step cost is their sum over the schedule, backwards
 *   included), and by its family's throughput where the class was never
 *   measured.
 * - Damaged files are refused naming what is wrong; so are seconds and
 *   throughputs that could make a step's cost infinite (1e308 s per op, a
 *   throughput of 1e-308 FLOP/s), in a file and in a caller's struct, and
 *   a step whose summed cost overflows anyway is refused, not "inf s".
 * How close the predictions come to measured step times is a benchmark
 * (remat bench with a cost model prints both), not a test.
 */
#include "check.h"

#include "../src/plan/planner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static remat_node small_cnn(remat_graph *g, int64_t batch, int64_t k) {
    int64_t xd[4] = {batch, 3, 16, 16}, nb = batch;
    remat_node x = remat_input(g, "x", REMAT_F32, 4, xd);
    remat_node y = remat_input(g, "y", REMAT_I32, 1, &nb);
    x = remat_relu(g, remat_conv2d(g, "c1", x, 8, k, 1, k / 2, 1));
    x = remat_relu(g, remat_conv2d(g, "c2", x, 8, k, 1, k / 2, 1));
    x = remat_linear(g, "fc", remat_flatten(g, x), 10, 1);
    return remat_cross_entropy(g, x, y);
}

static void classes(void) {
    remat_graph *a, *b, *c;
    CHECK_OK(remat_graph_create(&a));
    CHECK_OK(remat_graph_create(&b));
    CHECK_OK(remat_graph_create(&c));
    small_cnn(a, 4, 3);
    small_cnn(b, 4, 3);
    small_cnn(c, 8, 5);
    CHECK_OK(remat_graph_status(a));
    int ops = 0;
    for (remat_node v = 0; v < remat_graph_node_count(a); v++) {
        uint64_t ca = remat_node_cost_class(a, v);
        CHECK(ca == remat_node_cost_class(b, v));
        const char *op = remat_node_op(a, v);
        int leaf = strcmp(op, "param") == 0 || strcmp(op, "buffer") == 0 || strcmp(op, "input") == 0;
        CHECK_MSG(leaf ? ca == 0 : ca != 0, "node %d (%s): class %llx", (int)v, op, (unsigned long long)ca);
        if (leaf) continue;
        ops++;
        CHECK_MSG(ca != remat_node_cost_class(c, v), "node %d (%s): same class at another batch and kernel size",
                  (int)v, op);
    }
    CHECK(ops >= 6);
    /* the two convolutions of one graph differ (3 vs 8 input channels) */
    remat_node c1 = remat_graph_find(a, "c1"), c2 = remat_graph_find(a, "c2");
    CHECK(c1 != REMAT_NONE && c2 != REMAT_NONE && remat_node_cost_class(a, c1) != remat_node_cost_class(a, c2));
    remat_graph_destroy(a), remat_graph_destroy(b), remat_graph_destroy(c);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

static void calibrated(void) {
    remat_cost_model *m = calloc(3, sizeof *m), *back = m + 1, *zero = m + 2;
    CHECK_OK(remat_calibrate(m, 1));
    CHECK(m->n_ops == 0 && m->threads == 1);
    /* a class that is not in the graph: kept by the measurement below */
    CHECK_OK(remat__cost_model_put(m, &(remat_op_time){42, 0, 1.0, 2.0, 0.5}));
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    remat_node loss = small_cnn(g, 8, 3);
    CHECK_OK(remat_calibrate_graph(m, g, loss, 2));
    CHECK(m->update_s_per_param[0] > 0 && m->update_s_per_param[1] > 0);
    int found = 0;
    for (int i = 0; i < m->n_ops; i++) {
        found += m->ops[i].cls == 42;
        if (i) CHECK(m->ops[i - 1].cls < m->ops[i].cls);
    }
    CHECK(found == 1);
    for (remat_node v = 0; v < remat_graph_node_count(g); v++) {
        uint64_t cls = remat_node_cost_class(g, v);
        if (!cls) continue;
        const remat_op_time *t = NULL;
        for (int i = 0; i < m->n_ops; i++)
            if (m->ops[i].cls == cls) t = &m->ops[i];
        CHECK_MSG(t && t->fwd_s > 0 && t->bwd_s >= 0 && t->rec_s > 0, "node %d (%s) not measured", (int)v,
                  remat_node_op(g, v));
        /* every op here but the loss's input chain has a backward */
        if (t && strcmp(remat_node_op(g, v), "conv2d") == 0) CHECK(t->bwd_s > 0);
    }
    const char *path = "test_cost_model.json";
    CHECK_OK(remat_cost_model_save(m, path));
    CHECK_OK(remat_cost_model_load(back, path));
    CHECK(memcmp(back->flops_per_s, m->flops_per_s, sizeof m->flops_per_s) == 0);
    CHECK(back->n_ops == m->n_ops && back->threads == m->threads);
    for (int i = 0; i < m->n_ops && back->n_ops == m->n_ops; i++)
        CHECK(back->ops[i].cls == m->ops[i].cls && back->ops[i].op == m->ops[i].op &&
              back->ops[i].fwd_s == m->ops[i].fwd_s && back->ops[i].bwd_s == m->ops[i].bwd_s &&
              back->ops[i].rec_s == m->ops[i].rec_s);

    /* the session's costs: measured classes, the sum over its schedule
     * (a recomputation at its own measured cost, which the test sets
     * apart from the forward's so that mixing them up shows) */
    for (int k = 0; k < m->n_ops; k++) m->ops[k].rec_s = 0.25 * m->ops[k].fwd_s;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    so.cost_model = m;
    so.plan_only = 1;
    remat_session *s = NULL;
    remat_plan_summary p;
    double want = 0;
    for (int sqrt_plan = 1; sqrt_plan >= 0; sqrt_plan--) {
        so.strategy = sqrt_plan ? REMAT_STRATEGY_SQRT : REMAT_STRATEGY_ALL;
        CHECK_OK(remat_session_create(&s, g, loss, &so));
        CHECK_OK(remat_session_plan(s, &p));
        double extra = 0;
        want = 0;
        for (int64_t i = 0; i < remat_session_schedule_length(s); i++) {
            remat_instr_info in;
            CHECK_OK(remat_session_schedule_instr(s, i, &in));
            if (strcmp(in.kind, "free") == 0) continue;
            uint64_t cls = remat_node_cost_class(g, in.node);
            for (int k = 0; k < m->n_ops; k++) {
                if (m->ops[k].cls != cls) continue;
                int rec = strcmp(in.kind, "recompute") == 0;
                double t = strcmp(in.kind, "backward") == 0 ? m->ops[k].bwd_s : rec ? m->ops[k].rec_s : m->ops[k].fwd_s;
                want += t, extra += rec ? t : 0;
            }
        }
        CHECK_MSG(p.calibrated && p.seconds > 0 && fabs(p.seconds - want) <= 1e-12 * want,
                  "%s: plan %.9g s, classes %.9g s", sqrt_plan ? "sqrt" : "all", p.seconds, want);
        CHECK(fabs(p.extra_seconds - extra) <= 1e-12 * want);
        CHECK(sqrt_plan ? p.recomputations > 0 && extra > 0 : extra == 0);
        remat_session_destroy(s);
    }

    /* without the classes: FLOPs over the family throughputs */
    *zero = *m;
    zero->n_ops = 0;
    so.cost_model = zero;
    CHECK_OK(remat_session_create(&s, g, loss, &so));
    CHECK_OK(remat_session_plan(s, &p));
    CHECK(p.calibrated && p.seconds > 0 && p.seconds != want);
    remat_session_destroy(s);
    remat_graph_destroy(g);

    /* damaged files */
    write_text(path, "{\"device\": \"cpu\", \"threads\": 1, \"flops_per_s\": {\"linear\": 1, \"conv\": 1, \"norm\": 1, "
                     "\"pointwise\": 1, \"pool\": 1, \"copy\": 1, \"loss\": 1}, \"ops\": [{\"op\": \"conv2d\", "
                     "\"class\": \"xyz\", \"forward\": 1, \"backward\": 1}]}");
    CHECK(remat_cost_model_load(back, path) == REMAT_FORMAT && strstr(remat_last_error(), "ops[0]"));
    write_text(path, "{\"device\": \"cpu\", \"threads\": 1, \"flops_per_s\": {\"linear\": 1, \"conv\": 1, \"norm\": 1, "
                     "\"pointwise\": 1, \"pool\": 1, \"copy\": 1, \"loss\": 1}, \"ops\": [{\"op\": \"nosuchop\", "
                     "\"class\": \"00000000000000ff\", \"forward\": 1, \"backward\": 1}]}");
    CHECK(remat_cost_model_load(back, path) == REMAT_FORMAT && strstr(remat_last_error(), "ops[0]"));
    write_text(path, "{\"device\": \"cpu\", \"threads\": 1, \"flops_per_s\": {\"linear\": 1, \"conv\": 1, \"norm\": 1, "
                     "\"pointwise\": 1, \"pool\": 1, \"copy\": 1, \"loss\": 1}, \"update_s_per_param\": {\"sgd\": -1, "
                     "\"adamw\": 0}}");
    CHECK(remat_cost_model_load(back, path) == REMAT_FORMAT && strstr(remat_last_error(), "update_s_per_param.sgd"));
    remove(path);
    free(m);
}

/* A cost model file: every family at `tp` FLOP/s, and `ops` (a JSON
 * array's inside, maybe empty). */
static void write_model(const char *path, const char *tp, const char *update, const char *ops) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"device\": \"cpu\", \"threads\": 1, \"flops_per_s\": {\"linear\": %s, \"conv\": 1e9, "
             "\"norm\": 1e9, \"pointwise\": 1e9, \"pool\": 1e9, \"copy\": 1e9, \"loss\": 1e9}, "
             "\"update_s_per_param\": {\"sgd\": 1e-9, \"adamw\": %s}, \"ops\": [%s]}",
             tp, update, ops);
    write_text(path, text);
}

static int has(const char *needle) {
    const char *e = remat_last_error();
    if (strstr(e, needle)) return 1;
    fprintf(stderr, "  the message '%s' does not name '%s'\n", e, needle);
    return 0;
}

static void overflowing(void) {
    const char *path = "test_cost_overflow.json";
    remat_cost_model *m = calloc(2, sizeof *m), *ok = m + 1;
    /* in a file: each value named with the field that holds it */
    write_model(path, "1e9", "1e-9",
                "{\"op\": \"conv2d\", \"class\": \"00000000000000ff\", \"forward\": 1e308, "
                "\"backward\": 1}");
    CHECK(remat_cost_model_load(m, path) == REMAT_FORMAT && has("ops[0] (conv2d, class 00000000000000ff)") &&
          has("'forward' is 1e+308 s"));
    write_model(path, "1e9", "1e-9",
                "{\"op\": \"relu\", \"class\": \"1\", \"forward\": 1, \"backward\": 1}, "
                "{\"op\": \"conv2d\", \"class\": \"2\", \"forward\": 1, \"backward\": 1, "
                "\"recompute\": 1.5e9}");
    CHECK(remat_cost_model_load(m, path) == REMAT_FORMAT && has("ops[1] (conv2d") && has("'recompute' is 1.5e+09 s"));
    write_model(path, "1e9", "1e-9", "{\"op\": \"relu\", \"class\": \"1\", \"forward\": 1e999, \"backward\": 1}");
    CHECK(remat_cost_model_load(m, path) == REMAT_FORMAT && has("ops[0] (relu") && has("'forward' is inf s"));
    write_model(path, "1e-308", "1e-9", "");
    CHECK(remat_cost_model_load(m, path) == REMAT_FORMAT && has("'flops_per_s.linear' is 1e-308"));
    write_model(path, "0", "1e-9", "");
    CHECK(remat_cost_model_load(m, path) == REMAT_FORMAT && has("'flops_per_s.linear' is 0"));
    write_model(path, "1e9", "1e300", "");
    CHECK(remat_cost_model_load(m, path) == REMAT_FORMAT && has("'update_s_per_param.adamw' is 1e+300"));
    /* the bounds themselves are accepted: 1e9 s per op, 1 FLOP/s */
    write_model(path, "1", "1e9", "{\"op\": \"relu\", \"class\": \"1\", \"forward\": 1e9, \"backward\": 1e9}");
    CHECK_OK(remat_cost_model_load(ok, path));
    CHECK(ok->n_ops == 1 && ok->ops[0].fwd_s == 1e9 && ok->flops_per_s[0] == 1);
    remove(path);

    /* a caller's struct: refused by the session, which plans a finite
     * step at the bounds (every op 1e9 s, a throughput of 1 FLOP/s) */
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    remat_node loss = small_cnn(g, 4, 3);
    *m = *ok;
    m->n_ops = 0;
    for (remat_node v = 0; v < remat_graph_node_count(g) && m->n_ops < 8; v++) {
        uint64_t cls = remat_node_cost_class(g, v);
        if (cls) CHECK_OK(remat__cost_model_put(m, &(remat_op_time){cls, 0, 1e9, 1e9, 1e9}));
    }
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    so.plan_only = 1;
    so.strategy = REMAT_STRATEGY_SQRT;
    so.cost_model = m;
    remat_session *s = NULL;
    remat_plan_summary p;
    CHECK_OK(remat_session_create(&s, g, loss, &so));
    if (s) {
        CHECK_OK(remat_session_plan(s, &p));
        CHECK_MSG(isfinite(p.seconds) && p.seconds >= 1e9, "%g s", p.seconds);
        remat_session_destroy(s), s = NULL;
    }
    m->ops[m->n_ops - 1].bwd_s = 1e308;
    CHECK(remat_session_create(&s, g, loss, &so) == REMAT_INVALID && s == NULL &&
          has("the session's cost model: ops[") && has("'backward' is 1e+308 s"));
    m->ops[m->n_ops - 1].bwd_s = 1;
    m->flops_per_s[REMAT_FAMILY_COUNT - 1] = NAN;
    CHECK(remat_session_create(&s, g, loss, &so) == REMAT_INVALID && has("is nan"));

    /* the sum: costs that got past the bounds (set here behind the
     * model's back) make the summary fail, not report inf */
    remat__prog prog;
    remat__planned pl;
    memset(&pl, 0, sizeof pl);
    CHECK_OK(remat__prog_init(&prog, g, 1, REMAT_DEVICE_CPU, NULL));
    CHECK_OK(remat__schedule_build(&prog, loss, REMAT_NONE, 1, 1, NULL, &pl.sc));
    CHECK_OK(remat__schedule_add_frees(&prog, &pl.sc));
    CHECK_OK(remat__schedule_categorize(&prog, &pl.sc));
    CHECK_OK(remat__memplan_make(&prog, &pl.sc, &pl.mem));
    remat_mem_stats start;
    memset(&start, 0, sizeof start);
    CHECK_OK(remat__schedule_summary(&prog, &pl, &start, 0, &p));
    CHECK(isfinite(p.seconds) && p.seconds > 0);
    for (remat_node v = 0; v < remat_graph_node_count(g); v++)
        if (remat_node_cost_class(g, v)) prog.node_cost[3 * v] = prog.node_cost[3 * v + 1] = 1e308;
    CHECK(remat__schedule_summary(&prog, &pl, &start, 0, &p) == REMAT_INVALID && has("predicted cost overflows"));
    remat__planned_free(&pl);
    remat__prog_free(&prog);
    remat_graph_destroy(g);
    free(m);
}

/* The host link: measured on the CPU (its offload's memcpy), saved and
 * loaded exactly, refused out of range naming the field, and the link a
 * session costs copies at unless its options give one. */
static void host_link(void) {
    remat_cost_model *m = calloc(2, sizeof *m), *back = m + 1;
    CHECK_OK(remat_calibrate(m, 1));
    CHECK_OK(remat_calibrate_link(REMAT_DEVICE_CPU, &m->host_bandwidth, &m->host_latency));
    CHECK_MSG(m->host_bandwidth > 1e7 && m->host_bandwidth < 1e13 && m->host_latency >= 0 && m->host_latency < 1e-2,
              "memcpy link: %g B/s, %g s per copy", m->host_bandwidth, m->host_latency);
    const char *path = "test_cost_link.json";
    CHECK_OK(remat_cost_model_save(m, path));
    CHECK_OK(remat_cost_model_load(back, path));
    CHECK(back->host_bandwidth == m->host_bandwidth && back->host_latency == m->host_latency);
    write_text(path, "{\"device\": \"cpu\", \"threads\": 1, \"flops_per_s\": {\"linear\": 1e9, \"conv\": 1e9, "
                     "\"norm\": 1e9, \"pointwise\": 1e9, \"pool\": 1e9, \"copy\": 1e9, \"loss\": 1e9}, "
                     "\"host_link\": {\"bandwidth\": -5, \"latency\": 0}}");
    CHECK(remat_cost_model_load(back, path) == REMAT_FORMAT && has("'host_link'"));
    write_text(path, "{\"device\": \"cpu\", \"threads\": 1, \"flops_per_s\": {\"linear\": 1e9, \"conv\": 1e9, "
                     "\"norm\": 1e9, \"pointwise\": 1e9, \"pool\": 1e9, \"copy\": 1e9, \"loss\": 1e9}, "
                     "\"host_link\": {\"bandwidth\": \"fast\"}}");
    CHECK(remat_cost_model_load(back, path) == REMAT_FORMAT && has("'host_link' is not"));
    remove(path);
    /* a session's offload report: the model's link, else the options' */
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    remat_node loss = small_cnn(g, 8, 3);
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    so.cost_model = m;
    so.plan_only = 1;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, g, loss, &so));
    remat_offload_opts oo;
    remat_offload_opts_default(&oo);
    oo.budget = (size_t)1 << 30, oo.host_budget = (size_t)1 << 30;
    remat_offload_summary r;
    CHECK_OK(remat_session_offload(s, &oo, &r));
    CHECK(r.bandwidth == m->host_bandwidth && r.latency == m->host_latency);
    oo.bandwidth = 1e9, oo.latency = 5e-6;
    CHECK_OK(remat_session_offload(s, &oo, &r));
    CHECK(r.bandwidth == 1e9 && r.latency == 5e-6);
    remat_session_destroy(s);
    m->host_bandwidth = 0; /* not measured: PCIe's nominal */
    CHECK_OK(remat_session_create(&s, g, loss, &so));
    remat_offload_opts_default(&oo);
    oo.budget = (size_t)1 << 30, oo.host_budget = (size_t)1 << 30;
    CHECK_OK(remat_session_offload(s, &oo, &r));
    CHECK(r.bandwidth == REMAT_PCIE_BANDWIDTH && r.latency == REMAT_PCIE_LATENCY);
    remat_session_destroy(s);
    remat_graph_destroy(g);
    free(m);
}

/* The public handle (remat.h: opaque): made uncalibrated, read and
 * changed through its functions, copied, each setter refusing what the
 * session's check would. */
static void handle(void) {
    remat_cost_model *m = NULL, *c = NULL;
    CHECK_OK(remat_cost_model_create(&m));
    CHECK_OK(remat_cost_model_create(&c));
    CHECK(remat_cost_model_calibrated(m) == 0 && remat_cost_model_threads(m) == 0 &&
          remat_cost_model_device(m) == REMAT_DEVICE_CPU && remat_cost_model_n_ops(m) == 0);
    CHECK(remat_cost_model_flops_per_s(m, REMAT_FAMILY_CONV) == 0 &&
          remat_cost_model_update_s(m, REMAT_OPTIM_SGD) == 0);
    CHECK_OK(remat_cost_model_set_update_s(m, REMAT_OPTIM_ADAMW, 2e-9));
    CHECK(remat_cost_model_update_s(m, REMAT_OPTIM_ADAMW) == 2e-9 &&
          remat_cost_model_update_s(m, REMAT_OPTIM_SGD) == 0);
    CHECK(remat_cost_model_set_update_s(m, REMAT_OPTIM_SGD, NAN) == REMAT_INVALID &&
          strstr(remat_last_error(), "per parameter"));
    CHECK_OK(remat_cost_model_set_host_link(m, 12e9, 5e-6));
    double bw = 0, lat = 0;
    remat_cost_model_host_link(m, &bw, &lat);
    CHECK(bw == 12e9 && lat == 5e-6);
    CHECK(remat_cost_model_set_host_link(m, -1, 0) == REMAT_INVALID && strstr(remat_last_error(), "bytes/s"));
    CHECK_OK(remat_cost_model_set_op(m, &(remat_op_time){9, 1, 3.0, 4.0, 0}));
    CHECK_OK(remat_cost_model_set_op(m, &(remat_op_time){5, 1, 1.0, 2.0, 0.5}));
    CHECK_OK(remat_cost_model_set_op(m, &(remat_op_time){9, 1, 6.0, 8.0, 0})); /* replaces class 9 */
    CHECK(remat_cost_model_set_op(m, &(remat_op_time){7, 1, INFINITY, 0, 0}) == REMAT_INVALID);
    CHECK(remat_cost_model_set_op(m, &(remat_op_time){7, -1, 0, 0, 0}) == REMAT_INVALID &&
          strstr(remat_last_error(), "op table"));
    remat_op_time t;
    CHECK(remat_cost_model_n_ops(m) == 2);
    CHECK_OK(remat_cost_model_op(m, 0, &t));
    CHECK(t.cls == 5 && t.fwd_s == 1.0 && t.rec_s == 0.5);
    CHECK_OK(remat_cost_model_op(m, 1, &t));
    CHECK(t.cls == 9 && t.fwd_s == 6.0 && t.bwd_s == 8.0);
    CHECK(remat_cost_model_op(m, 2, &t) == REMAT_INVALID);
    CHECK_OK(remat_cost_model_copy(c, m));
    CHECK(remat_cost_model_n_ops(c) == 2 && remat_cost_model_update_s(c, REMAT_OPTIM_ADAMW) == 2e-9);
    remat_cost_model_destroy(m);
    CHECK_OK(remat_cost_model_op(c, 1, &t)); /* the copy is its own */
    CHECK(t.cls == 9);
    remat_cost_model_destroy(c);
    remat_cost_model_destroy(NULL);
}

int main(void) {
    handle();
    classes();
    calibrated();
    overflowing();
    host_link();
    return check_exit("test_cost");
}
