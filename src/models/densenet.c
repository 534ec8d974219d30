/* densenet.c: DenseNet-BC for CIFAR (Huang et al., 2017), with
 * torchvision's DenseNet state_dict names.
 *
 * depth D (100) and growth rate k (12, base_channels): a stem conv 3x3
 * (3 -> 2k, no bias) `features.conv0`; three dense blocks of (D - 4) / 6
 * layers `features.denseblockB.denselayerL` (1-based), each layer
 * BN-ReLU-conv1x1 (-> 4k) `norm1`/`conv1`, BN-ReLU-conv3x3 (-> k)
 * `norm2`/`conv2`, whose input is the concatenation of the block's input
 * and every earlier layer's output as ONE n-ary concat (the standard
 * formulation: the memory-efficient behaviour, recomputing concat, BN and
 * ReLU while keeping the convolutions' outputs, is the planner's to find);
 * transitions `features.transitionT` BN-ReLU-conv1x1 (compression 0.5,
 * C -> C / 2) and 2x2 average pooling; `features.norm5`, ReLU, global
 * average pool and `classifier`. Initializers are torchvision's: convs
 * kaiming normal (fan_in, ReLU gain: N(0, 2 / (in * k * k))), BatchNorm
 * weight 1 bias 0, the classifier's weight PyTorch's default uniform and
 * its bias 0.
 *
 * remat__model_block_end marks each dense layer's output and each
 * transition's output.
 */
#include "models.h"

#include <math.h>
#include <stdio.h>

/* conv k x k, no bias, kaiming normal (fan_in, ReLU). */
static remat_node conv(remat_graph *g, const char *name, remat_node x, int64_t out, int k, int pad) {
    int64_t d[REMAT_MAX_DIMS] = {0};
    if (remat_node_shape(g, x, d) != 4) return remat_conv2d_op(g, x, REMAT_NONE, REMAT_NONE, 1, pad);
    int64_t wd[4] = {out, d[1], k, k};
    char buf[256];
    snprintf(buf, sizeof buf, "%s.weight", name);
    float std = (float)sqrt(2.0 / (double)(d[1] * k * k));
    remat_node w = remat_param(g, buf, 4, wd, REMAT_INIT_NORMAL, std);
    return remat_conv2d_op(g, x, w, REMAT_NONE, 1, pad);
}

/* BN-ReLU-conv, the pre-activation unit of every dense layer and
 * transition: `<prefix>.<norm>` then `<prefix>.<cv>`. */
static remat_node bn_relu_conv(remat_graph *g, const char *prefix, const char *norm, const char *cv, remat_node x,
                               int64_t out, int k) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, norm);
    x = remat_relu(g, remat_batchnorm2d(g, name, x));
    snprintf(name, sizeof name, "%s.%s", prefix, cv);
    return conv(g, name, x, out, k, k / 2);
}

/* Layers per dense block, or -1 when the depth has no DenseNet-BC form. */
static int layers_per_block(int64_t depth) { return depth >= 10 && (depth - 4) % 6 == 0 ? (int)((depth - 4) / 6) : -1; }

static remat_node densenet_bc(remat_graph *g, remat_node x, const remat_model_opts *o) {
    int64_t k = o->base_channels > 0 ? o->base_channels : 12, depth = o->depth > 0 ? o->depth : 100;
    int nl = layers_per_block(depth), block = 0;
    remat_node feats[REMAT_MAX_INPUTS];
    x = conv(g, "features.conv0", x, 2 * k, 3, 1);
    for (int b = 1; b <= 3; b++) {
        int nf = 0;
        feats[nf++] = x;
        for (int l = 1; l <= nl; l++) {
            char prefix[128];
            snprintf(prefix, sizeof prefix, "features.denseblock%d.denselayer%d", b, l);
            remat_node in = nf == 1 ? feats[0] : remat_concat(g, nf, feats);        /* (B, C0 + (l-1) k, H, W) */
            remat_node h = bn_relu_conv(g, prefix, "norm1", "conv1", in, 4 * k, 1); /* (B, 4k, H, W) */
            h = bn_relu_conv(g, prefix, "norm2", "conv2", h, k, 3);                 /* (B, k, H, W) */
            feats[nf++] = remat__model_block_end(g, h, block++, o);
        }
        x = remat_concat(g, nf, feats); /* (B, C0 + nl k, H, W) */
        if (b < 3) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "features.transition%d", b);
            int64_t d[REMAT_MAX_DIMS] = {0};
            remat_node_shape(g, x, d);
            x = bn_relu_conv(g, prefix, "norm", "conv", x, d[1] / 2, 1);
            x = remat__model_block_end(g, remat_avgpool2d(g, x, 2, 2, 0), block++, o);
        }
    }
    x = remat_relu(g, remat_batchnorm2d(g, "features.norm5", x));
    x = remat_flatten(g, remat_global_avgpool(g, x));
    int64_t d[REMAT_MAX_DIMS] = {0}, wd[2];
    if (remat_node_shape(g, x, d) != 2) return remat_linear_op(g, x, REMAT_NONE, REMAT_NONE);
    wd[0] = o->classes, wd[1] = d[1];
    remat_node w = remat_param(g, "classifier.weight", 2, wd, REMAT_INIT_UNIFORM, (float)(1.0 / sqrt((double)d[1])));
    remat_node bias = remat_param(g, "classifier.bias", 1, &o->classes, REMAT_INIT_ZEROS, 0);
    return remat_linear_op(g, x, w, bias);
}

remat_status remat__model_densenet_bc(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    int64_t depth = o->depth > 0 ? o->depth : 100;
    int nl = layers_per_block(depth);
    if (o->depth < 0 || nl < 0)
        return remat_error(REMAT_INVALID,
                           "model '%s': depth %lld is not 6n + 4 with n >= 1 (100: 16 layers per "
                           "dense block)",
                           o->name, (long long)o->depth);
    if (nl + 1 > REMAT_MAX_INPUTS)
        return remat_error(REMAT_INVALID,
                           "model '%s': depth %lld gives %d layers per dense block; a concat joins at "
                           "most %d tensors, so at most %d layers (depth %d)",
                           o->name, (long long)depth, nl, REMAT_MAX_INPUTS, REMAT_MAX_INPUTS - 1,
                           6 * (REMAT_MAX_INPUTS - 1) + 4);
    if (o->base_channels < 0)
        return remat_error(REMAT_INVALID, "model '%s': growth rate (base_channels) %lld must be positive (0: 12)",
                           o->name, (long long)o->base_channels);
    return remat__model_classifier(g, o, m, densenet_bc);
}
