/* test_gradcheck.c: every op's backward against central finite differences.
 *
 * The test walks the op table itself: every op with kernels must have at
 * least one case below, or the test fails, so a new op cannot skip it. Each
 * case makes the op's inputs trainable parameters (remat differentiates with
 * respect to parameters only), reduces the op's output to a scalar with MSE
 * against a fixed random target (loss ops are the loss themselves), and
 * compares every parameter's analytic gradient with (L(w+h) - L(w-h)) / 2h
 * at a sample of elements, with 1 and 2 threads.
 */
#include "../src/remat-impl.h"
#include "check.h"

#include <stdlib.h>

typedef struct {
    remat_graph *g;
    remat_node out;   /* the op's node */
    remat_node extra; /* an int input to fill with labels, or REMAT_NONE */
    int64_t classes;
    int kinks;        /* inputs must stay away from 0 and from each other */
} gcase;

static remat_node P(remat_graph *g, const char *name, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t dims[4] = {a, b, c, d};
    return remat_param(g, name, ndim, dims, REMAT_INIT_UNIFORM, 1.0f);
}

static void c_linear(gcase *c) {
    c->out = remat_linear_op(c->g, P(c->g, "x", 2, 3, 4, 0, 0), P(c->g, "w", 2, 5, 4, 0, 0), P(c->g, "b", 1, 5, 0, 0, 0));
}
static void c_linear_nobias(gcase *c) {
    c->out = remat_linear_op(c->g, P(c->g, "x", 2, 4, 3, 0, 0), P(c->g, "w", 2, 2, 3, 0, 0), REMAT_NONE);
}
static void c_conv(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 2, 3, 5, 5), P(c->g, "w", 4, 4, 3, 3, 3), P(c->g, "b", 1, 4, 0, 0, 0), 2, 1);
}
static void c_conv_nopad(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 3, 2, 6, 5), P(c->g, "w", 4, 3, 2, 3, 2), REMAT_NONE, 1, 0);
}
static void c_conv_1x1(gcase *c) {
    c->out = remat_conv2d_op(c->g, P(c->g, "x", 4, 2, 3, 4, 4), P(c->g, "w", 4, 5, 3, 1, 1), P(c->g, "b", 1, 5, 0, 0, 0), 1, 0);
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
    {"linear", c_linear},       {"linear", c_linear_nobias},  {"conv2d", c_conv},
    {"conv2d", c_conv_nopad},   {"conv2d", c_conv_1x1},       {"batchnorm2d", c_bn},
    {"relu", c_relu},           {"maxpool2d", c_maxpool},     {"maxpool2d", c_maxpool_pad},
    {"avgpool2d", c_avgpool},   {"global_avgpool", c_gap},    {"dropout", c_dropout},
    {"reshape", c_reshape},     {"add", c_add},               {"concat", c_concat},
    {"concat", c_concat2d},     {"concat", c_concat_many},    {"cross_entropy", c_ce},
    {"mse", c_mse},             {"mse", c_mse_computed},      {"mul", c_mul},
    {"layernorm", c_layernorm}, {"gelu", c_gelu},             {"gelu", c_gelu_tanh},
    {"embedding", c_embedding}, {"softmax", c_softmax},       {"attention", c_attention},
    {"attention", c_attention_1head}, {"permute", c_permute}, {"permute", c_transpose4},
    {"slice", c_slice},         {"slice", c_slice_last},      {"add_broadcast", c_add_broadcast},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static uint32_t rng_state = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 8388608.0f - 1.0f;
}

static double loss_at(remat_session *s) {
    float l = 0.0f;
    remat_status st = remat_session_forward(s, 1, &l, REMAT_NONE, NULL);
    if (st != REMAT_OK) fprintf(stderr, "forward failed: %s\n", remat_last_error());
    return (double)l;
}

static void run_case(int ci, int threads) {
    gcase c = {.extra = REMAT_NONE};
    CHECK_OK(remat_graph_create(&c.g));
    cases[ci].build(&c);
    remat_node loss = c.out, target = REMAT_NONE;
    int is_loss = remat__ops[c.g->nodes[c.out].op]->flags & REMAT__OP_LOSS;
    if (!is_loss) {
        int64_t dims[4];
        int nd = remat_node_shape(c.g, c.out, dims);
        target = remat_input(c.g, "target", REMAT_F32, nd, dims);
        loss = remat_mse(c.g, c.out, target);
    }
    CHECK_MSG(remat_graph_status(c.g) == REMAT_OK, "%s: %s", cases[ci].op, remat_graph_error(c.g));
    remat_session_opts o;
    remat_session_opts_default(&o);
    o.threads = threads;
    remat_session *s = NULL;
    CHECK_OK(remat_session_create(&s, c.g, loss, &o));
    if (!s) {
        remat_graph_destroy(c.g);
        return;
    }
    /* Inputs: random values; with kinks, distinct values of magnitude >= 0.1
     * spaced by >= 0.05, so that +-h never crosses a kink. */
    float *tbuf = NULL;
    int32_t *lbuf = NULL;
    if (target != REMAT_NONE) {
        int64_t n = remat__numel(&c.g->nodes[target].shape);
        tbuf = malloc((size_t)n * sizeof *tbuf);
        for (int64_t i = 0; i < n; i++) tbuf[i] = frand();
        remat_session_bind(s, target, tbuf);
    }
    if (c.extra != REMAT_NONE) {
        int64_t n = remat__numel(&c.g->nodes[c.extra].shape);
        lbuf = malloc((size_t)n * sizeof *lbuf);
        for (int64_t i = 0; i < n; i++) lbuf[i] = (int32_t)(i * 3 % c.classes);
        remat_session_bind(s, c.extra, lbuf);
    }
    int np = remat_session_param_count(s);
    for (int p = 0; p < np; p++) {
        remat_param_info pi;
        remat_session_param(s, p, &pi);
        if (!pi.trainable) continue;
        for (int64_t i = 0; i < pi.numel; i++) {
            if (c.kinks) {
                int64_t k = (i * 7919) % pi.numel; /* a permutation when numel is not a multiple of 7919 */
                float v = 0.1f + 0.05f * (float)k;
                pi.data[i] = k % 2 ? -v : v;
            } else {
                pi.data[i] = frand();
            }
        }
    }
    float l0 = 0.0f;
    CHECK_OK(remat_session_step(s, &l0));
    const double h = 1e-2;
    for (int p = 0; p < np; p++) {
        remat_param_info pi;
        remat_session_param(s, p, &pi);
        if (!pi.trainable) continue;
        double gmax = 0.0;
        for (int64_t i = 0; i < pi.numel; i++) gmax = fmax(gmax, fabs(pi.grad[i]));
        int64_t stride = pi.numel > 24 ? pi.numel / 24 : 1;
        for (int64_t i = 0; i < pi.numel; i += stride) {
            float w0 = pi.data[i];
            pi.data[i] = (float)(w0 + h);
            double lp = loss_at(s);
            pi.data[i] = (float)(w0 - h);
            double lm = loss_at(s);
            pi.data[i] = w0;
            double fd = (lp - lm) / (2.0 * h), an = pi.grad[i];
            double tol = 5e-3 * fabs(an) + 1e-3 * gmax + 1e-6;
            CHECK_MSG(fabs(fd - an) <= tol, "%s (case %d, %d threads) d/d%s[%lld]: analytic %.7g, "
                      "finite difference %.7g", cases[ci].op, ci, threads, pi.name, (long long)i, an, fd);
        }
        CHECK_MSG(gmax > 0.0, "%s: gradient of %s is all zero", cases[ci].op, pi.name);
    }
    remat_session_destroy(s);
    remat_graph_destroy(c.g);
    free(tbuf), free(lbuf);
}

int main(void) {
    /* Every op with kernels has a case. */
    for (int op = 0; op < REMAT__N_OPS; op++) {
        if (!remat__ops[op]->forward) continue;
        int found = 0;
        for (int ci = 0; ci < N_CASES; ci++) found |= strcmp(cases[ci].op, remat__ops[op]->name) == 0;
        CHECK_MSG(found, "op '%s' has no finite-difference case", remat__ops[op]->name);
        CHECK_MSG(remat__ops[op]->backward != NULL, "op '%s' has no backward", remat__ops[op]->name);
    }
    /* Save masks: an op saves only inputs it can have, below input 30. */
    for (int op = 0; op < REMAT__N_OPS; op++) {
        const remat__op *o = remat__ops[op];
        int lim = o->max_in < REMAT__SAVE_IN_LIMIT ? o->max_in : REMAT__SAVE_IN_LIMIT;
        unsigned in_bits = o->saves & ~(REMAT__SAVE_OUT | REMAT__SAVE_AUX);
        CHECK_MSG(o->max_in <= REMAT__MAX_IN, "op '%s' takes up to %d inputs, nodes hold %d", o->name, o->max_in,
                  REMAT__MAX_IN);
        CHECK_MSG((in_bits >> lim) == 0, "op '%s' saves an input beyond its %d", o->name, lim);
    }
    for (int ci = 0; ci < N_CASES; ci++) {
        CHECK_MSG(remat__op_find(cases[ci].op) >= 0, "case for unknown op '%s'", cases[ci].op);
        run_case(ci, 1);
        run_case(ci, 2);
        printf("gradcheck %-15s case %2d ok so far (%d failures)\n", cases[ci].op, ci, check_failures);
    }
    return check_exit("test_gradcheck");
}
