/* opcases.h: small graphs, one or more per op of the op table, shared by
 * test_gradcheck (finite differences) and test_cuda (CUDA kernels
 * against the CPU's). Each case makes the op's inputs trainable
 * parameters (remat differentiates with respect to parameters only). */
#ifndef REMAT_OPCASES_H
#define REMAT_OPCASES_H

#include "../src/remat-impl.h"

#include <stdio.h>

typedef struct {
    remat_graph *g;
    remat_node out;   /* the op's node */
    remat_node extra; /* an int input to fill with labels, or REMAT_NONE */
    int64_t classes;
    int kinks; /* inputs must stay away from 0 and from each other */
} gcase;

static remat_node P(remat_graph *g, const char *name, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t dims[4] = {a, b, c, d};
    return remat_param(g, name, ndim, dims, REMAT_INIT_UNIFORM, 1.0f);
}

static void c_linear(gcase *c) {
    c->out =
        remat_linear_op(c->g, P(c->g, "x", 2, 3, 4, 0, 0), P(c->g, "w", 2, 5, 4, 0, 0), P(c->g, "b", 1, 5, 0, 0, 0));
}
static void c_linear_nobias(gcase *c) {
    c->out = remat_linear_op(c->g, P(c->g, "x", 2, 4, 3, 0, 0), P(c->g, "w", 2, 2, 3, 0, 0), REMAT_NONE);
}
static void c_conv(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 2, 3, 5, 5), P(c->g, "w", 4, 4, 3, 3, 3),
                             P(c->g, "b", 1, 4, 0, 0, 0), 2, 1);
}
static void c_conv_nopad(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 3, 2, 6, 5), P(c->g, "w", 4, 3, 2, 3, 2), REMAT_NONE, 1, 0);
}
static void c_conv_1x1(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 2, 3, 4, 4), P(c->g, "w", 4, 5, 3, 1, 1),
                             P(c->g, "b", 1, 5, 0, 0, 0), 1, 0);
}
static void c_bn(gcase *c) {
    int64_t C = 3;
    remat_node rm = remat_buffer(c->g, "rm", 1, &C, REMAT_INIT_ZEROS);
    remat_node rv = remat_buffer(c->g, "rv", 1, &C, REMAT_INIT_ONES);
    c->out = remat_batchnorm2d_op(c->g, P(c->g, "x", 4, 2, 3, 3, 4), P(c->g, "gamma", 1, 3, 0, 0, 0),
                                  P(c->g, "beta", 1, 3, 0, 0, 0), rm, rv, 1e-5f, 0.1f);
}
static void c_relu(gcase *c) {
    c->out = remat_relu(c->g, P(c->g, "x", 3, 2, 3, 4, 0));
    c->kinks = 1;
}
static void c_maxpool(gcase *c) {
    c->out = remat_maxpool2d(c->g, P(c->g, "x", 4, 2, 2, 4, 4), 2, 2, 0);
    c->kinks = 1;
}
static void c_maxpool_pad(gcase *c) {
    c->out = remat_maxpool2d(c->g, P(c->g, "x", 4, 1, 2, 5, 5), 3, 2, 1);
    c->kinks = 1;
}
static void c_avgpool(gcase *c) { c->out = remat_avgpool2d(c->g, P(c->g, "x", 4, 2, 2, 5, 5), 3, 2, 1); }
static void c_gap(gcase *c) { c->out = remat_global_avgpool(c->g, P(c->g, "x", 4, 2, 3, 3, 2)); }
static void c_dropout(gcase *c) { c->out = remat_dropout(c->g, P(c->g, "x", 2, 6, 7, 0, 0), 0.3f); }
static void c_reshape(gcase *c) {
    int64_t d[2] = {6, 4};
    c->out = remat_reshape(c->g, P(c->g, "x", 3, 2, 3, 4, 0), 2, d);
}
static void c_add(gcase *c) { c->out = remat_add(c->g, P(c->g, "a", 2, 3, 4, 0, 0), P(c->g, "b", 2, 3, 4, 0, 0)); }
static void c_concat(gcase *c) {
    remat_node xs[3] = {P(c->g, "x0", 4, 2, 1, 3, 3), P(c->g, "x1", 4, 2, 2, 3, 3), P(c->g, "x2", 4, 2, 3, 3, 3)};
    c->out = remat_concat(c->g, 3, xs);
}
static void c_concat2d(gcase *c) {
    remat_node xs[2] = {P(c->g, "x0", 2, 3, 2, 0, 0), P(c->g, "x1", 2, 3, 4, 0, 0)};
    c->out = remat_concat(c->g, 2, xs);
}
/* As many inputs as a node can take (DenseNet joins up to 17): inputs 30
 * and 31 have no save bit, and every part's gradient lands in its slot. */
static void c_concat_many(gcase *c) {
    remat_node xs[REMAT__MAX_IN];
    for (int i = 0; i < REMAT__MAX_IN; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        xs[i] = P(c->g, name, 4, 2, 1 + i % 3, 2, 1);
    }
    c->out = remat_concat(c->g, REMAT__MAX_IN, xs);
}
static void c_ce(gcase *c) {
    int64_t n = 4;
    c->extra = remat_input(c->g, "labels", REMAT_I32, 1, &n);
    c->classes = 5;
    c->out = remat_cross_entropy(c->g, P(c->g, "z", 2, 4, 5, 0, 0), c->extra);
}
static void c_mul(gcase *c) { c->out = remat_mul(c->g, P(c->g, "a", 2, 3, 4, 0, 0), P(c->g, "b", 2, 3, 4, 0, 0)); }
static void c_mse(gcase *c) { c->out = remat_mse(c->g, P(c->g, "a", 2, 3, 4, 0, 0), P(c->g, "b", 2, 3, 4, 0, 0)); }
/* A computed target (a siamese branch): its gradient flows on through add. */
static void c_mse_computed(gcase *c) {
    remat_node t = remat_add(c->g, P(c->g, "b", 2, 3, 4, 0, 0), P(c->g, "c", 2, 3, 4, 0, 0));
    c->out = remat_mse(c->g, P(c->g, "a", 2, 3, 4, 0, 0), t);
}
/* transformer ops */
static void c_layernorm(gcase *c) {
    c->out = remat_layernorm_op(c->g, P(c->g, "x", 3, 2, 3, 5, 0), P(c->g, "w", 1, 5, 0, 0, 0),
                                P(c->g, "b", 1, 5, 0, 0, 0), 1e-5f);
}
static void c_gelu(gcase *c) { c->out = remat_gelu(c->g, P(c->g, "x", 2, 3, 5, 0, 0), 0); }
static void c_gelu_tanh(gcase *c) { c->out = remat_gelu(c->g, P(c->g, "x", 3, 2, 3, 4, 0), 1); }
static void c_embedding(gcase *c) { /* ids i*3 % 5: 0 3 1 4 2 0, row 0 twice */
    int64_t d[2] = {2, 3};
    c->extra = remat_input(c->g, "ids", REMAT_I32, 2, d);
    c->classes = 5;
    c->out = remat_embedding_op(c->g, c->extra, P(c->g, "w", 2, 5, 4, 0, 0));
}
static void c_softmax(gcase *c) { c->out = remat_softmax(c->g, P(c->g, "x", 3, 2, 3, 5, 0)); }
static void c_attention(gcase *c) { /* B 2, T 4, C 6, 2 heads of 3 */
    c->out = remat_attention(c->g, P(c->g, "qkv", 3, 2, 4, 18, 0), 2);
}
static void c_attention_1head(gcase *c) { c->out = remat_attention(c->g, P(c->g, "qkv", 3, 1, 5, 6, 0), 1); }
static void c_permute(gcase *c) {
    int perm[3] = {2, 0, 1};
    c->out = remat_permute(c->g, P(c->g, "x", 3, 2, 3, 4, 0), 3, perm);
}
static void c_transpose4(gcase *c) { c->out = remat_transpose(c->g, P(c->g, "x", 4, 2, 3, 2, 3), 1, 3); }
static void c_slice(gcase *c) { c->out = remat_slice(c->g, P(c->g, "x", 3, 3, 5, 2, 0), 1, 1, 3); }
static void c_slice_last(gcase *c) { c->out = remat_slice(c->g, P(c->g, "x", 2, 3, 6, 0, 0), 1, 4, 2); }
static void c_add_broadcast(gcase *c) {
    c->out = remat_add_broadcast(c->g, P(c->g, "x", 3, 2, 3, 4, 0), P(c->g, "b", 2, 3, 4, 0, 0));
}

static const struct {
    const char *op;
    void (*build)(gcase *);
} cases[] = {
    {"linear", c_linear},
    {"linear", c_linear_nobias},
    {"conv2d", c_conv},
    {"conv2d", c_conv_nopad},
    {"conv2d", c_conv_1x1},
    {"batchnorm2d", c_bn},
    {"relu", c_relu},
    {"maxpool2d", c_maxpool},
    {"maxpool2d", c_maxpool_pad},
    {"avgpool2d", c_avgpool},
    {"global_avgpool", c_gap},
    {"dropout", c_dropout},
    {"reshape", c_reshape},
    {"add", c_add},
    {"concat", c_concat},
    {"concat", c_concat2d},
    {"concat", c_concat_many},
    {"cross_entropy", c_ce},
    {"mse", c_mse},
    {"mse", c_mse_computed},
    {"mul", c_mul},
    {"layernorm", c_layernorm},
    {"gelu", c_gelu},
    {"gelu", c_gelu_tanh},
    {"embedding", c_embedding},
    {"softmax", c_softmax},
    {"attention", c_attention},
    {"attention", c_attention_1head},
    {"permute", c_permute},
    {"permute", c_transpose4},
    {"slice", c_slice},
    {"slice", c_slice_last},
    {"add_broadcast", c_add_broadcast},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

#endif
