/* testmodels.h: models that exist only for tests. bnnet is the small
 * BatchNorm network of scripts/gen_fixtures.py (same state_dict names). */
#ifndef REMAT_TESTMODELS_H
#define REMAT_TESTMODELS_H

#include "remat.h"

#include <stdio.h>

/* features = Sequential(Conv2d(3,8,3,p=1,bias=False), BatchNorm2d(8), ReLU,
 * MaxPool2d(2), Conv2d(8,16,3,p=1,bias=False), BatchNorm2d(16), ReLU);
 * AdaptiveAvgPool2d(1); flatten; fc = Linear(16, 10). Input (B,3,16,16). */
static inline remat_status build_bnnet(remat_graph *g, remat_model *m, int64_t batch) {
    int64_t xd[4] = {batch, 3, 16, 16};
    m->input = remat_input(g, "input", REMAT_F32, 4, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &batch);
    remat_node x = remat_conv2d(g, "features.0", m->input, 8, 3, 1, 1, 0);
    x = remat_maxpool2d(g, remat_relu(g, remat_batchnorm2d(g, "features.1", x)), 2, 2, 0);
    x = remat_conv2d(g, "features.4", x, 16, 3, 1, 1, 0);
    x = remat_relu(g, remat_batchnorm2d(g, "features.5", x));
    x = remat_flatten(g, remat_global_avgpool(g, x));
    m->logits = remat_linear(g, "fc", x, 10, 1);
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    return remat_graph_status(g);
}

/* conv(1->8)-BN-ReLU-maxpool, conv(8->16)-BN-ReLU, global average pool,
 * dropout 0.25, linear (16->10): BatchNorm and dropout on 1x28x28
 * (test_dist's network, and test_dist_device's). */
static inline remat_status build_bncnn(remat_graph *g, remat_model *m, int64_t batch) {
    int64_t xd[4] = {batch, 1, 28, 28};
    m->input = remat_input(g, "input", REMAT_F32, 4, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &batch);
    remat_node x = remat_conv2d(g, "features.0", m->input, 8, 3, 1, 1, 0);
    x = remat_maxpool2d(g, remat_relu(g, remat_batchnorm2d(g, "features.1", x)), 2, 2, 0);
    x = remat_checkpoint(g, x);
    x = remat_conv2d(g, "features.4", x, 16, 3, 1, 1, 0);
    x = remat_relu(g, remat_batchnorm2d(g, "features.5", x));
    x = remat_dropout(g, remat_flatten(g, remat_global_avgpool(g, x)), 0.25f);
    m->logits = remat_linear(g, "fc", x, 10, 1);
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    return remat_graph_status(g);
}

/* Three residual blocks (conv-BN-ReLU-conv + skip), then pooling and a
 * classifier: each block is one stage of the chain (the skip crosses it),
 * with cheap values inside that a selective plan recomputes. */
static inline remat_status build_resblocks(remat_graph *g, remat_model *m, int64_t batch) {
    int64_t xd[4] = {batch, 8, 16, 16};
    m->input = remat_input(g, "input", REMAT_F32, 4, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &batch);
    remat_node x = m->input;
    for (int b = 0; b < 3; b++) {
        char name[32];
        snprintf(name, sizeof name, "block%d.conv1", b);
        remat_node h = remat_conv2d(g, name, x, 8, 3, 1, 1, 0);
        snprintf(name, sizeof name, "block%d.bn", b);
        h = remat_relu(g, remat_batchnorm2d(g, name, h));
        snprintf(name, sizeof name, "block%d.conv2", b);
        h = remat_conv2d(g, name, h, 8, 3, 1, 1, 0);
        x = remat_relu(g, remat_add(g, h, x));
    }
    x = remat_flatten(g, remat_global_avgpool(g, x));
    m->logits = remat_linear(g, "fc", x, 10, 1);
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    return remat_graph_status(g);
}

/* A stem conv, then two branches of four conv-ReLU pairs each that meet
 * (add) at the head: the branches form one stage of the chain (the edge
 * from the stem to the second branch jumps over the whole first one), so
 * only the DTR fallback can drop values inside them one by one. */
static inline remat_status build_branches(remat_graph *g, remat_model *m, int64_t batch) {
    int64_t xd[4] = {batch, 3, 16, 16};
    m->input = remat_input(g, "input", REMAT_F32, 4, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &batch);
    remat_node stem = remat_relu(g, remat_conv2d(g, "stem", m->input, 8, 3, 1, 1, 1));
    remat_node br[2];
    for (int b = 0; b < 2; b++) {
        remat_node h = stem;
        for (int l = 0; l < 4; l++) {
            char name[32];
            snprintf(name, sizeof name, "branch%d.%d", b, 2 * l);
            h = remat_relu(g, remat_conv2d(g, name, h, 8, 3, 1, 1, 1));
        }
        br[b] = h;
    }
    remat_node x = remat_flatten(g, remat_global_avgpool(g, remat_add(g, br[0], br[1])));
    m->logits = remat_linear(g, "fc", x, 10, 1);
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    return remat_graph_status(g);
}

#endif
