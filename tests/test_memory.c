/* test_memory.c: memory truth.
 *
 * 1. A small MLP whose every allocation was worked out by hand (the
 *    timeline is in the comments): the measured peak per category of a
 *    training step equals those numbers.
 * 2. For several models and thread counts, the simulator's prediction of a
 *    step equals the executor's measured peaks, category by category.
 */
#include "remat.h"
#include "check.h"
#include "testmodels.h"

#include <stdlib.h>
#include <string.h>

static void hand_computed(void) {
    remat_graph *g;
    CHECK_OK(remat_graph_create(&g));
    int64_t xd[2] = {4, 6}, yd[1] = {4};
    remat_node x = remat_input(g, "x", REMAT_F32, 2, xd); /* (4, 6)  96 B */
    remat_node y = remat_input(g, "y", REMAT_I32, 1, yd); /* (4)     16 B */
    remat_node h = remat_linear(g, "fc1", x, 5, 1);       /* (4, 5)  80 B, w 30 + b 5 floats */
    remat_node r = remat_relu(g, h);                      /* (4, 5)  80 B */
    remat_node z = remat_linear(g, "fc2", r, 3, 1);       /* (4, 3)  48 B, w 15 + b 3 floats */
    remat_node loss = remat_cross_entropy(g, z, y);       /* ()       4 B */
    CHECK_OK(remat_graph_status(g));
    remat_session *s;
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.threads = 2;
    CHECK_OK(remat_session_create(&s, g, loss, &o));
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.momentum = 0.9f;
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    float xv[24], l;
    int32_t yv[4] = {0, 1, 2, 1};
    for (int i = 0; i < 24; i++) xv[i] = (float)(i % 7) - 3.0f;
    remat_session_bind(s, x, xv);
    remat_session_bind(s, y, yv);

    /* Timeline of the store-all step (bytes; A = activations, T = transient):
     *   fwd x: A 96 | fwd y: A 112 | fwd fc1: T 80 | fwd relu: A 192, free h: T 0
     *   fwd fc2: A 240 | fwd loss: T 4, freed at once, and workspace for
     *     its 4 row losses (doubles, 32 B) and one thread's row of 3
     *     exponentials (12 B): 44 B, the workspace peak (total 288)
     *   bwd loss: seed T 4 + grad z T 48 = 52 (total 240+52 = 292), and
     *     a row of exponentials, 12 B of workspace (total 304);
     *     then free grad loss, z, y: A 176, T 48
     *   bwd fc2: grad r T 128 (304); free grad z: T 80
     *   bwd relu: grad h T 160 (A 176 + T 160 = 336, the peak); free grad r, r
     *   bwd fc1: writes parameter gradients only; free grad h, x.
     * Persistent: parameters 53 floats = 212 B, gradients 212 B, momentum
     * 212 B; total peak 636 + 336 = 972 B. */
    remat_mem_stats pred, m;
    CHECK_OK(remat_session_predict(s, &pred));
    CHECK_OK(remat_session_step(s, &l));
    remat_session_mem(s, &m);
    CHECK(m.peak[REMAT_MEM_PARAM] == 212);
    CHECK(m.peak[REMAT_MEM_GRAD] == 212);
    CHECK(m.peak[REMAT_MEM_OPTIM] == 212);
    CHECK_MSG(m.peak[REMAT_MEM_ACT] == 240, "activations %zu", m.peak[REMAT_MEM_ACT]);
    CHECK_MSG(m.peak[REMAT_MEM_TRANSIENT] == 160, "transient %zu", m.peak[REMAT_MEM_TRANSIENT]);
    CHECK_MSG(m.peak[REMAT_MEM_WORKSPACE] == 44, "workspace %zu", m.peak[REMAT_MEM_WORKSPACE]);
    CHECK_MSG(m.peak[REMAT_MEM_TOTAL] == 972, "total %zu", m.peak[REMAT_MEM_TOTAL]);
    for (int c = 0; c < REMAT_MEM_COUNT; c++) CHECK(pred.peak[c] == m.peak[c]);
    CHECK(m.live[REMAT_MEM_ACT] == 0 && m.live[REMAT_MEM_TRANSIENT] == 0);
    CHECK(m.live[REMAT_MEM_TOTAL] == 636);
    CHECK(remat_session_saved_bytes(s, x) == 96 && remat_session_saved_bytes(s, h) == 0);
    CHECK(remat_session_saved_bytes(s, r) == 80 && remat_session_saved_bytes(s, z) == 48);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

static void predicted_equals_measured(const char *name, int threads) {
    remat_graph *g;
    remat_model m;
    CHECK_OK(remat_graph_create(&g));
    int64_t C = 3, H = 32, W = 32, B = 4;
    if (strcmp(name, "bnnet") == 0) {
        CHECK_OK(build_bnnet(g, &m, B));
        H = W = 16;
    } else {
        remat_model_opts mo;
        remat_model_opts_default(&mo);
        mo.name = name, mo.batch = B, mo.channels = C, mo.height = H, mo.width = W;
        CHECK_OK(remat_model_build(g, &mo, &m));
    }
    remat_session *s;
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.threads = threads;
    CHECK_OK(remat_session_create(&s, g, m.loss, &o));
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
    CHECK_OK(remat_session_set_optimizer(s, &oo));
    float *x = calloc((size_t)(B * C * H * W), sizeof *x);
    int32_t y[4] = {1, 2, 3, 4};
    for (int64_t i = 0; i < B * C * H * W; i++) x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    remat_session_bind(s, m.input, x);
    remat_session_bind(s, m.labels, y);
    remat_mem_stats pred, meas;
    for (int step = 0; step < 2; step++) {
        float l;
        CHECK_OK(remat_session_predict(s, &pred));
        CHECK_OK(remat_session_step(s, &l));
        CHECK_OK(remat_session_update(s));
        remat_session_mem(s, &meas);
        for (int c = 0; c < REMAT_MEM_COUNT; c++)
            CHECK_MSG(pred.peak[c] == meas.peak[c], "%s, %d threads, %s: predicted %zu, measured %zu", name, threads,
                      remat_mem_str((remat_mem)c), pred.peak[c], meas.peak[c]);
        CHECK(meas.peak[REMAT_MEM_ACT] > 0);
        CHECK(meas.live[REMAT_MEM_ACT] == 0 && meas.live[REMAT_MEM_TRANSIENT] == 0 &&
              meas.live[REMAT_MEM_WORKSPACE] == 0);
    }
    printf("%s (%d threads): peak %zu B, activations %zu B, workspace %zu B; predicted %zu B\n", name, threads,
           meas.peak[REMAT_MEM_TOTAL], meas.peak[REMAT_MEM_ACT], meas.peak[REMAT_MEM_WORKSPACE],
           pred.peak[REMAT_MEM_TOTAL]);
    free(x);
    remat_session_destroy(s);
    remat_graph_destroy(g);
}

int main(void) {
    hand_computed();
    const char *models[] = {"mlp", "cnn", "bnnet"};
    for (int i = 0; i < 3; i++)
        for (int t = 1; t <= 2; t++) predicted_equals_measured(models[i], t);
    return check_exit("test_memory");
}
