/* models.c: the model zoo, built from the public API (the internal header
 * is included for remat__err alone).
 *
 * Parameter names are the state_dict names of the equivalent PyTorch
 * modules (scripts/gen_fixtures.py defines them), so weights move between
 * the two by name.
 */
#include "../remat-impl.h"

#include <stdio.h>
#include <string.h>

void remat_model_opts_default(remat_model_opts *o) {
    memset(o, 0, sizeof *o);
    o->name = "cnn";
    o->batch = 64;
    o->channels = 1;
    o->height = 28;
    o->width = 28;
    o->classes = 10;
    o->dropout_scale = 1.0f;
}

static const char *const names[] = {"mlp", "cnn", NULL};

const char *const *remat_model_names(void) { return names; }

/* Dropout with the model's rate scaled; absent when the scale is 0. */
static remat_node dropout(remat_graph *g, remat_node x, float p, const remat_model_opts *o) {
    return o->dropout_scale > 0.0f ? remat_dropout(g, x, p * o->dropout_scale) : x;
}

/* mlp: flatten | fc1 (->256) relu | fc2 (->128) relu | fc3 (->classes). */
static remat_node mlp(remat_graph *g, remat_node x, const remat_model_opts *o) {
    x = remat_flatten(g, x);
    x = remat_relu(g, remat_linear(g, "fc1", x, 256, 1));
    x = remat_relu(g, remat_linear(g, "fc2", x, 128, 1));
    return remat_linear(g, "fc3", x, o->classes, 1);
}

/* cnn, the CIFAR-10 network of the report that started this project:
 * conv(->32) relu conv(->64) relu maxpool2 dropout .25 |
 * conv(->64) relu conv(->64) relu maxpool2 dropout .25 |
 * flatten linear(->512) relu dropout .5 linear(->classes).
 * Names follow features = nn.Sequential(...), classifier = nn.Sequential(...). */
static remat_node cnn(remat_graph *g, remat_node x, const remat_model_opts *o) {
    x = remat_relu(g, remat_conv2d(g, "features.0", x, 32, 3, 1, 1, 1));
    x = remat_relu(g, remat_conv2d(g, "features.2", x, 64, 3, 1, 1, 1));
    x = dropout(g, remat_maxpool2d(g, x, 2, 2, 0), 0.25f, o);
    x = remat_relu(g, remat_conv2d(g, "features.6", x, 64, 3, 1, 1, 1));
    x = remat_relu(g, remat_conv2d(g, "features.8", x, 64, 3, 1, 1, 1));
    x = dropout(g, remat_maxpool2d(g, x, 2, 2, 0), 0.25f, o);
    x = remat_flatten(g, x);
    x = dropout(g, remat_relu(g, remat_linear(g, "classifier.0", x, 512, 1)), 0.5f, o);
    return remat_linear(g, "classifier.3", x, o->classes, 1);
}

remat_status remat_model_build(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    remat_node (*build)(remat_graph *, remat_node, const remat_model_opts *) = NULL;
    if (!o->name) return remat__err(REMAT_INVALID, "no model name given");
    if (strcmp(o->name, "mlp") == 0) build = mlp;
    if (strcmp(o->name, "cnn") == 0) build = cnn;
    if (!build) return remat__err(REMAT_NOT_FOUND, "unknown model '%s' (known: mlp, cnn)", o->name);
    if (o->batch <= 0 || o->channels <= 0 || o->height <= 0 || o->width <= 0 || o->classes <= 1)
        return remat__err(REMAT_INVALID, "model '%s': batch, input shape and classes must be positive "
                          "(got batch %lld, %lldx%lldx%lld, %lld classes)", o->name, (long long)o->batch,
                          (long long)o->channels, (long long)o->height, (long long)o->width,
                          (long long)o->classes);
    int64_t xd[4] = {o->batch, o->channels, o->height, o->width};
    m->input = remat_input(g, "input", REMAT_F32, 4, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &o->batch);
    m->logits = build(g, m->input, o);
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    if (remat_graph_status(g) != REMAT_OK)
        return remat__err(remat_graph_status(g), "model '%s': %s", o->name, remat_graph_error(g));
    return REMAT_OK;
}
