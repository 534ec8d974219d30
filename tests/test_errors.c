/* test_errors.c: bad input to the library gets a clear error, never a
 * crash: shape mismatches while building (message names the op, the layer
 * and the shapes), the first error kept through later calls, bad
 * arguments, an unused parameter, a missing input binding, an unknown
 * model, a bad optimizer setting. (Data-file errors: test_data.) */
#include "remat.h"
#include "check.h"

#include <string.h>

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

int main(void) {
    remat_graph *g;
    int64_t xd[4] = {2, 3, 8, 8};

    /* conv: channels of input and weight disagree */
    CHECK_OK(remat_graph_create(&g));
    remat_node x = remat_input(g, "x", REMAT_F32, 4, xd);
    int64_t wd[4] = {4, 5, 3, 3};
    remat_node w = remat_param(g, "w", 4, wd, REMAT_INIT_ZEROS, 0);
    remat_node c = remat_conv2d_op(g, x, w, REMAT_NONE, 1, 1);
    CHECK(c == REMAT_NONE);
    CHECK(remat_graph_status(g) == REMAT_SHAPE);
    CHECK_MSG(has(remat_graph_error(g), "conv2d") && has(remat_graph_error(g), "(2, 3, 8, 8)") &&
                  has(remat_graph_error(g), "(4, 5, 3, 3)"),
              "message: %s", remat_graph_error(g));
    /* later calls keep the first error */
    remat_node r = remat_relu(g, c);
    CHECK(r == REMAT_NONE && remat_graph_status(g) == REMAT_SHAPE);
    CHECK(has(remat_graph_error(g), "conv2d"));
    remat_session *s = NULL;
    CHECK(remat_session_create(&s, g, r, NULL) == REMAT_SHAPE && s == NULL);
    CHECK(has(remat_last_error(), "conv2d"));
    remat_graph_destroy(g);

    /* linear after a layer with a name: the name is in the message */
    CHECK_OK(remat_graph_create(&g));
    int64_t fd[2] = {4, 10};
    x = remat_input(g, "x", REMAT_F32, 2, fd);
    remat_node h = remat_linear(g, "encoder.fc", x, 6, 1);
    int64_t w2d[2] = {3, 7};
    w = remat_param(g, "w2", 2, w2d, REMAT_INIT_ZEROS, 0);
    CHECK(remat_linear_op(g, h, w, REMAT_NONE) == REMAT_NONE);
    CHECK_MSG(has(remat_graph_error(g), "linear") && has(remat_graph_error(g), "(4, 6)") &&
                  has(remat_graph_error(g), "(3, 7)"),
              "message: %s", remat_graph_error(g));
    remat_graph_destroy(g);

    CHECK_OK(remat_graph_create(&g));
    x = remat_input(g, "x", REMAT_F32, 4, xd);
    remat_node bad = remat_conv2d(g, "features.3", x, 8, 3, 1, 1, 1);
    CHECK(bad != REMAT_NONE);
    int64_t odd[4] = {2, 5, 8, 8};
    remat_node y = remat_input(g, "y", REMAT_F32, 4, odd);
    CHECK(remat_add(g, bad, y) == REMAT_NONE);
    CHECK_MSG(has(remat_graph_error(g), "add") && has(remat_graph_error(g), "(2, 8, 8, 8)"), "message: %s",
              remat_graph_error(g));
    remat_graph_destroy(g);

    /* argument errors */
    CHECK_OK(remat_graph_create(&g));
    int64_t neg[2] = {2, -1};
    CHECK(remat_input(g, "x", REMAT_F32, 2, neg) == REMAT_NONE && remat_graph_status(g) == REMAT_SHAPE);
    remat_graph_destroy(g);
    CHECK_OK(remat_graph_create(&g));
    x = remat_input(g, "x", REMAT_F32, 2, fd);
    CHECK(remat_dropout(g, x, 1.5f) == REMAT_NONE && has(remat_graph_error(g), "1.5"));
    remat_graph_destroy(g);
    CHECK_OK(remat_graph_create(&g));
    x = remat_input(g, "x", REMAT_F32, 2, fd);
    CHECK(remat_param(g, "x", 2, fd, REMAT_INIT_ZEROS, 0) == REMAT_NONE && has(remat_graph_error(g), "twice"));
    remat_graph_destroy(g);
    CHECK_OK(remat_graph_create(&g));
    CHECK(remat_relu(g, 42) == REMAT_NONE && has(remat_graph_error(g), "does not exist"));
    remat_graph_destroy(g);
    CHECK_OK(remat_graph_create(&g));
    int64_t rs[2] = {3, 3};
    x = remat_input(g, "x", REMAT_F32, 2, fd);
    CHECK(remat_reshape(g, x, 2, rs) == REMAT_NONE && has(remat_graph_error(g), "40 elements"));
    remat_graph_destroy(g);

    /* a parameter that does not influence the loss is reported */
    CHECK_OK(remat_graph_create(&g));
    x = remat_input(g, "x", REMAT_F32, 2, fd);
    remat_node t = remat_input(g, "t", REMAT_F32, 2, (int64_t[]){4, 3});
    remat_node used = remat_linear(g, "used", x, 3, 1);
    remat_linear(g, "orphan", x, 3, 1);
    remat_node loss = remat_mse(g, used, t);
    CHECK_OK(remat_graph_status(g));
    CHECK(remat_session_create(&s, g, loss, NULL) == REMAT_INVALID && s == NULL);
    CHECK_MSG(has(remat_last_error(), "orphan.weight") && has(remat_last_error(), "does not influence the loss"),
              "message: %s", remat_last_error());
    /* the loss must be a scalar */
    CHECK(remat_session_create(&s, g, used, NULL) == REMAT_SHAPE);
    remat_graph_destroy(g);

    /* a missing binding fails the step with the input's name */
    CHECK_OK(remat_graph_create(&g));
    x = remat_input(g, "pixels", REMAT_F32, 2, fd);
    t = remat_input(g, "t", REMAT_F32, 2, (int64_t[]){4, 3});
    loss = remat_mse(g, remat_linear(g, "fc", x, 3, 1), t);
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    CHECK_OK(remat_session_create(&s, g, loss, &so));
    float l;
    CHECK(remat_session_step(s, &l) == REMAT_INVALID && has(remat_last_error(), "pixels"));
    remat_mem_stats m;
    remat_session_mem(s, &m);
    CHECK(m.live[REMAT_MEM_ACT] == 0 && m.live[REMAT_MEM_TRANSIENT] == 0); /* nothing leaked */
    CHECK(remat_session_bind(s, loss, &l) == REMAT_INVALID);
    CHECK(remat_session_update(s) == REMAT_INVALID && has(remat_last_error(), "optimizer"));
    remat_optim_opts oo;
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.lr = -1.0f;
    CHECK(remat_session_set_optimizer(s, &oo) == REMAT_INVALID && has(remat_last_error(), "learning rate"));
    remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
    oo.nesterov = 1;
    CHECK(remat_session_set_optimizer(s, &oo) == REMAT_INVALID && has(remat_last_error(), "nesterov"));
    remat_session_destroy(s);
    remat_graph_destroy(g);

    /* unknown model */
    CHECK_OK(remat_graph_create(&g));
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    mo.name = "resnet9000";
    remat_model mm;
    CHECK(remat_model_build(g, &mo, &mm) == REMAT_NOT_FOUND);
    CHECK(has(remat_last_error(), "resnet9000") && has(remat_last_error(), "cnn"));
    remat_graph_destroy(g);
    /* a model whose input is too small for its pooling */
    CHECK_OK(remat_graph_create(&g));
    remat_model_opts_default(&mo);
    mo.height = mo.width = 2;
    CHECK(remat_model_build(g, &mo, &mm) != REMAT_OK);
    CHECK_MSG(has(remat_last_error(), "cnn"), "message: %s", remat_last_error());
    remat_graph_destroy(g);
    return check_exit("test_errors");
}
