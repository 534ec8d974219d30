/* resnet.c: torchvision's ResNet-18 and ResNet-50, and the siamese
 * ResNet-50 of the forum report that started this project.
 *
 * The layout is torchvision's (v1.5: a Bottleneck strides on its 3x3
 * conv): conv1 7x7/2 (no bias), bn1, relu, maxpool 3/2 pad 1, layer1..4
 * of BasicBlock [2,2,2,2] or Bottleneck [3,4,6,3] (expansion 4) at widths
 * b, 2b, 4b, 8b (b = base_channels, 64 by default), the first block of
 * layers 2..4 striding 2, downsample = conv1x1 + BatchNorm named
 * `layerX.Y.downsample.0/1`, global average pool, `fc`. Parameter names
 * are torchvision's state_dict names. Initializers are torchvision's:
 * convs kaiming normal (fan_out, ReLU gain: N(0, 2 / (out * k * k))),
 * BatchNorm weight 1 bias 0, Linear PyTorch's default uniform.
 *
 * Each residual block's output goes through remat__model_block_end.
 *
 * The siamese model applies ONE backbone to two views: its parameters
 * (and BatchNorm buffers) are created by the first application and looked
 * up by name by the second, so the two branches share them and their
 * gradients add up. Names are those of Siamese(backbone=resnet50(),
 * head=nn.Linear(classes, classes)): backbone.conv1.weight, ..., head.weight.
 * Blocks are numbered on through the second branch (16..31). Each shared
 * BatchNorm's buffers are updated by both of its nodes, view 1's first (as
 * PyTorch does), which holds when a schedule runs the branches' first
 * forwards in creation order (test_models checks all, sqrt and optimal
 * bitwise against each other).
 */
#include "models.h"

#include <math.h>
#include <stdio.h>

/* Where parameters come from: created under `prefix`, or, when `reuse` is
 * set, the graph's existing leaves of the same names. */
typedef struct {
    remat_graph *g;
    const char *prefix;
    int reuse;
    int block; /* residual blocks built so far, for remat__model_block_end */
    const remat_model_opts *o;
} net;

static const char *full_name(const net *n, char *buf, size_t cap, const char *layer, const char *what) {
    snprintf(buf, cap, "%s%s.%s", n->prefix, layer, what);
    return buf;
}

/* The leaf named `name`, or REMAT_NONE after recording an error. */
static remat_node lookup(net *n, const char *name) {
    remat_graph *g = n->g;
    if (remat_graph_status(g) != REMAT_OK) return REMAT_NONE;
    remat_node x = remat_graph_find(g, name);
    if (x != REMAT_NONE) return x;
    /* cannot happen: the first branch made every name the second asks for */
    remat_graph_fail(g, REMAT_INTERNAL, "shared parameter '%s' was not created by the first branch", name);
    return REMAT_NONE;
}

static remat_node param(net *n, const char *layer, const char *what, int ndim, const int64_t *d, remat_init init,
                        float a) {
    char buf[256];
    full_name(n, buf, sizeof buf, layer, what);
    return n->reuse ? lookup(n, buf) : remat_param(n->g, buf, ndim, d, init, a);
}

static remat_node buffer(net *n, const char *layer, const char *what, int64_t c, remat_init init) {
    char buf[256];
    full_name(n, buf, sizeof buf, layer, what);
    return n->reuse ? lookup(n, buf) : remat_buffer(n->g, buf, 1, &c, init);
}

static int64_t channels(const net *n, remat_node x) {
    int64_t d[REMAT_MAX_DIMS] = {0};
    return remat_node_shape(n->g, x, d) >= 2 ? d[1] : 1;
}

/* conv k x k without bias, kaiming normal (fan_out, ReLU). */
static remat_node conv(net *n, const char *layer, remat_node x, int64_t out, int k, int stride, int pad) {
    if (x == REMAT_NONE) return REMAT_NONE;
    int64_t d[4] = {out, channels(n, x), k, k};
    float std = (float)sqrt(2.0 / (double)(out * k * k));
    remat_node w = param(n, layer, "weight", 4, d, REMAT_INIT_NORMAL, std);
    return remat_conv2d_op(n->g, x, w, REMAT_NONE, stride, pad);
}

static remat_node bn(net *n, const char *layer, remat_node x) {
    if (x == REMAT_NONE) return REMAT_NONE;
    int64_t c = channels(n, x);
    remat_node w = param(n, layer, "weight", 1, &c, REMAT_INIT_ONES, 0);
    remat_node b = param(n, layer, "bias", 1, &c, REMAT_INIT_ZEROS, 0);
    remat_node rm = buffer(n, layer, "running_mean", c, REMAT_INIT_ZEROS);
    remat_node rv = buffer(n, layer, "running_var", c, REMAT_INIT_ONES);
    return remat_batchnorm2d_op(n->g, x, w, b, rm, rv, 1e-5f, 0.1f);
}

/* nn.Linear: weight and bias U(-1/sqrt(in), 1/sqrt(in)). */
static remat_node linear(net *n, const char *layer, remat_node x, int64_t out) {
    if (x == REMAT_NONE) return REMAT_NONE;
    int64_t d[2] = {out, channels(n, x)};
    float bound = (float)(1.0 / sqrt((double)d[1]));
    remat_node w = param(n, layer, "weight", 2, d, REMAT_INIT_UNIFORM, bound);
    remat_node b = param(n, layer, "bias", 1, &out, REMAT_INIT_UNIFORM, bound);
    return remat_linear_op(n->g, x, w, b);
}

/* Names "<block>.<what>" into buf. */
static const char *sub(char *buf, size_t cap, const char *block, const char *what) {
    snprintf(buf, cap, "%s.%s", block, what);
    return buf;
}

/* The skip path: identity, or conv1x1/stride + BN when the shape changes. */
static remat_node shortcut(net *n, const char *block, remat_node x, int64_t out, int stride) {
    if (stride == 1 && channels(n, x) == out) return x;
    char l[128];
    x = conv(n, sub(l, sizeof l, block, "downsample.0"), x, out, 1, stride, 0);
    return bn(n, sub(l, sizeof l, block, "downsample.1"), x);
}

/* BasicBlock: conv3x3/s bn relu conv3x3 bn, + shortcut, relu. */
static remat_node basic(net *n, const char *block, remat_node x, int64_t planes, int stride) {
    char l[128];
    remat_node h = conv(n, sub(l, sizeof l, block, "conv1"), x, planes, 3, stride, 1);
    h = remat_relu(n->g, bn(n, sub(l, sizeof l, block, "bn1"), h));
    h = conv(n, sub(l, sizeof l, block, "conv2"), h, planes, 3, 1, 1);
    h = bn(n, sub(l, sizeof l, block, "bn2"), h);
    return remat_relu(n->g, remat_add(n->g, h, shortcut(n, block, x, planes, stride)));
}

/* Bottleneck: conv1x1 bn relu conv3x3/s bn relu conv1x1(4 planes) bn,
 * + shortcut, relu. */
static remat_node bottleneck(net *n, const char *block, remat_node x, int64_t planes, int stride) {
    char l[128];
    remat_node h = conv(n, sub(l, sizeof l, block, "conv1"), x, planes, 1, 1, 0);
    h = remat_relu(n->g, bn(n, sub(l, sizeof l, block, "bn1"), h));
    h = conv(n, sub(l, sizeof l, block, "conv2"), h, planes, 3, stride, 1);
    h = remat_relu(n->g, bn(n, sub(l, sizeof l, block, "bn2"), h));
    h = conv(n, sub(l, sizeof l, block, "conv3"), h, 4 * planes, 1, 1, 0);
    h = bn(n, sub(l, sizeof l, block, "bn3"), h);
    return remat_relu(n->g, remat_add(n->g, h, shortcut(n, block, x, 4 * planes, stride)));
}

/* The whole network from images (B,C,H,W) to logits (B, classes). */
static remat_node resnet(net *n, remat_node x, int deep) {
    static const int basic_layers[4] = {2, 2, 2, 2}, deep_layers[4] = {3, 4, 6, 3};
    const int *layers = deep ? deep_layers : basic_layers;
    int64_t base = n->o->base_channels > 0 ? n->o->base_channels : 64;
    x = conv(n, "conv1", x, base, 7, 2, 3);
    x = remat_maxpool2d(n->g, remat_relu(n->g, bn(n, "bn1", x)), 3, 2, 1);
    for (int s = 0; s < 4; s++) {
        for (int b = 0; b < layers[s]; b++) {
            char block[64];
            snprintf(block, sizeof block, "layer%d.%d", s + 1, b);
            int stride = s > 0 && b == 0 ? 2 : 1;
            x = deep ? bottleneck(n, block, x, base << s, stride) : basic(n, block, x, base << s, stride);
            x = remat__model_block_end(n->g, x, n->block++, n->o);
        }
    }
    x = remat_flatten(n->g, remat_global_avgpool(n->g, x));
    return linear(n, "fc", x, n->o->classes);
}

static remat_node resnet18_body(remat_graph *g, remat_node x, const remat_model_opts *o) {
    net n = {.g = g, .prefix = "", .o = o};
    return resnet(&n, x, 0);
}

static remat_node resnet50_body(remat_graph *g, remat_node x, const remat_model_opts *o) {
    net n = {.g = g, .prefix = "", .o = o};
    return resnet(&n, x, 1);
}

static remat_status check_base(const remat_model_opts *o) {
    if (o->base_channels < 0)
        return remat_error(REMAT_INVALID, "model '%s': base_channels %lld must be positive (0: 64)", o->name,
                           (long long)o->base_channels);
    return REMAT_OK;
}

remat_status remat__model_resnet18(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    remat_status st = check_base(o);
    return st != REMAT_OK ? st : remat__model_classifier(g, o, m, resnet18_body);
}

remat_status remat__model_resnet50(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    remat_status st = check_base(o);
    return st != REMAT_OK ? st : remat__model_classifier(g, o, m, resnet50_body);
}

/* siamese-resnet50: y1 = head(backbone(view1)), y2 = backbone(view2), both
 * (B, classes); loss = mse(y1, y2), differentiated through both branches.
 * input = view 1, labels = view 2: a float (B,C,H,W) input named "target". */
remat_status remat__model_siamese_resnet50(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    remat_status st = check_base(o);
    if (st != REMAT_OK) return st;
    if (o->batch <= 0 || o->channels <= 0 || o->height <= 0 || o->width <= 0 || o->classes <= 0)
        return remat_error(REMAT_INVALID, "model '%s': batch, input shape and classes must be positive", o->name);
    int64_t xd[4] = {o->batch, o->channels, o->height, o->width};
    m->input = remat_input(g, "input", REMAT_F32, 4, xd);
    m->labels = remat_input(g, "target", REMAT_F32, 4, xd);
    net n = {.g = g, .prefix = "backbone.", .o = o};
    remat_node y1 = resnet(&n, m->input, 1);
    n.reuse = 1;
    remat_node y2 = resnet(&n, m->labels, 1);
    net h = {.g = g, .prefix = "", .o = o};
    m->logits = linear(&h, "head", y1, o->classes);
    m->loss = remat_mse(g, m->logits, y2);
    if (remat_graph_status(g) != REMAT_OK)
        return remat_error(remat_graph_status(g), "model '%s': %s", o->name, remat_graph_error(g));
    return REMAT_OK;
}
