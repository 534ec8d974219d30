/* layers.c: layer builders that create their parameters with PyTorch's
 * default initializers and name them as PyTorch's state_dict does.
 *
 * nn.Linear and nn.Conv2d initialize the weight with
 * kaiming_uniform_(a=sqrt(5)), which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
 * and the bias with the same bound. nn.BatchNorm2d starts with weight 1,
 * bias 0, running mean 0, running variance 1, eps 1e-5, momentum 0.1.
 */
#include "../remat-impl.h"

#include <math.h>
#include <stdio.h>

static const char *pname(char *buf, size_t cap, const char *layer, const char *what) {
    snprintf(buf, cap, "%s.%s", layer ? layer : "", what);
    return buf;
}

static remat_node named_op(remat_graph *g, remat__node n, const char *name) {
    n.name = (char *)name;
    return remat__graph_add(g, &n);
}

remat_node remat_linear(remat_graph *g, const char *name, remat_node x, int64_t out_features, int bias) {
    if (!g) return REMAT_NONE;
    if (x < 0 || x >= g->n) return remat_linear_op(g, x, REMAT_NONE, REMAT_NONE);
    const remat__shape *xs = &g->nodes[x].shape;
    int64_t in = xs->ndim == 2 ? xs->d[1] : 1;
    float bound = (float)(1.0 / sqrt((double)in));
    char buf[256];
    int64_t wd[2] = {out_features, in};
    remat_node w = remat_param(g, pname(buf, sizeof buf, name, "weight"), 2, wd, REMAT_INIT_UNIFORM, bound);
    remat_node b = REMAT_NONE;
    if (bias) b = remat_param(g, pname(buf, sizeof buf, name, "bias"), 1, &out_features, REMAT_INIT_UNIFORM, bound);
    if (w == REMAT_NONE || (bias && b == REMAT_NONE)) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_LINEAR, .n_in = bias ? 3 : 2, .in = {x, w, b}};
    return named_op(g, n, name);
}

remat_node remat_conv2d(remat_graph *g, const char *name, remat_node x, int64_t out_channels, int kernel, int stride,
                        int padding, int bias) {
    if (!g) return REMAT_NONE;
    if (x < 0 || x >= g->n) return remat_conv2d_op(g, x, REMAT_NONE, REMAT_NONE, stride, padding);
    const remat__shape *xs = &g->nodes[x].shape;
    int64_t cin = xs->ndim == 4 ? xs->d[1] : 1;
    float bound = (float)(1.0 / sqrt((double)(cin * kernel * kernel > 0 ? cin * kernel * kernel : 1)));
    char buf[256];
    int64_t wd[4] = {out_channels, cin, kernel, kernel};
    remat_node w = remat_param(g, pname(buf, sizeof buf, name, "weight"), 4, wd, REMAT_INIT_UNIFORM, bound);
    remat_node b = REMAT_NONE;
    if (bias) b = remat_param(g, pname(buf, sizeof buf, name, "bias"), 1, &out_channels, REMAT_INIT_UNIFORM, bound);
    if (w == REMAT_NONE || (bias && b == REMAT_NONE)) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_CONV2D, .n_in = bias ? 3 : 2, .in = {x, w, b}, .iattr = {stride, padding}};
    return named_op(g, n, name);
}

remat_node remat_batchnorm2d(remat_graph *g, const char *name, remat_node x) {
    if (!g) return REMAT_NONE;
    if (x < 0 || x >= g->n)
        return remat_batchnorm2d_op(g, x, REMAT_NONE, REMAT_NONE, REMAT_NONE, REMAT_NONE, 1e-5f, 0.1f);
    const remat__shape *xs = &g->nodes[x].shape;
    int64_t c = xs->ndim == 4 ? xs->d[1] : 1;
    char buf[256];
    remat_node w = remat_param(g, pname(buf, sizeof buf, name, "weight"), 1, &c, REMAT_INIT_ONES, 0);
    remat_node b = remat_param(g, pname(buf, sizeof buf, name, "bias"), 1, &c, REMAT_INIT_ZEROS, 0);
    remat_node rm = remat_buffer(g, pname(buf, sizeof buf, name, "running_mean"), 1, &c, REMAT_INIT_ZEROS);
    remat_node rv = remat_buffer(g, pname(buf, sizeof buf, name, "running_var"), 1, &c, REMAT_INIT_ONES);
    if (w == REMAT_NONE || b == REMAT_NONE || rm == REMAT_NONE || rv == REMAT_NONE) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_BATCHNORM2D, .n_in = 5, .in = {x, w, b, rm, rv}, .fattr = {1e-5f, 0.1f}};
    return named_op(g, n, name);
}

/* nn.LayerNorm(C): weight ones, bias zeros, eps 1e-5, C the last dim of x. */
remat_node remat_layernorm(remat_graph *g, const char *name, remat_node x) {
    if (!g) return REMAT_NONE;
    if (x < 0 || x >= g->n) return remat_layernorm_op(g, x, REMAT_NONE, REMAT_NONE, 1e-5f);
    const remat__shape *xs = &g->nodes[x].shape;
    int64_t C = xs->ndim >= 1 ? xs->d[xs->ndim - 1] : 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s.weight", name ? name : "");
    remat_node w = remat_param(g, buf, 1, &C, REMAT_INIT_ONES, 0);
    snprintf(buf, sizeof buf, "%s.bias", name ? name : "");
    remat_node b = remat_param(g, buf, 1, &C, REMAT_INIT_ZEROS, 0);
    if (w == REMAT_NONE || b == REMAT_NONE) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_LAYERNORM, .n_in = 3, .in = {x, w, b}, .fattr = {1e-5f}, .name = (char *)name};
    return remat__graph_add(g, &n);
}

/* nn.Embedding(num, dim): weight N(0, 1), named "<name>.weight". */
remat_node remat_embedding(remat_graph *g, const char *name, remat_node ids, int64_t num, int64_t dim) {
    if (!g) return REMAT_NONE;
    char buf[256];
    snprintf(buf, sizeof buf, "%s.weight", name ? name : "");
    int64_t wd[2] = {num, dim};
    remat_node w = remat_param(g, buf, 2, wd, REMAT_INIT_NORMAL, 1.0f);
    if (w == REMAT_NONE) return REMAT_NONE;
    remat__node n = {.op = REMAT__OP_EMBEDDING, .n_in = 2, .in = {ids, w}, .name = (char *)name};
    return remat__graph_add(g, &n);
}
