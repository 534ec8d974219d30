/* models.c: the model zoo, built from the public API alone.
 *
 * Parameter names are the state_dict names of the equivalent PyTorch
 * modules (scripts/gen_fixtures.py defines them), so weights move between
 * the two by name.
 */
#include "models.h"

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
    o->checkpoint_blocks = -1;
    o->layers = 12, o->embd = 768, o->heads = 12, o->context = 1024, o->vocab = 50257;
}

/* Marks the output of block `i` (0-based) when the options ask for it. */
static remat_node block_end(remat_graph *g, remat_node x, int i, const remat_model_opts *o) {
    return o->checkpoint_blocks < 0 || i < o->checkpoint_blocks ? remat_checkpoint(g, x) : x;
}

/* Marks the output of block `i` for remat__model_block_end's users in the
 * other model files. */
remat_node remat__model_block_end(remat_graph *g, remat_node x, int i, const remat_model_opts *o) {
    return block_end(g, x, i, o);
}

/* Dropout with the model's rate scaled; absent when the scale is 0. */
static remat_node dropout(remat_graph *g, remat_node x, float p, const remat_model_opts *o) {
    return o->dropout_scale > 0.0f ? remat_dropout(g, x, p * o->dropout_scale) : x;
}

/* mlp: flatten | fc1 (->256) relu | fc2 (->128) relu | fc3 (->classes).
 * Blocks for checkpointing: fc1+relu, fc2+relu. */
static remat_node mlp(remat_graph *g, remat_node x, const remat_model_opts *o) {
    x = remat_flatten(g, x);
    x = block_end(g, remat_relu(g, remat_linear(g, "fc1", x, 256, 1)), 0, o);
    x = block_end(g, remat_relu(g, remat_linear(g, "fc2", x, 128, 1)), 1, o);
    return remat_linear(g, "fc3", x, o->classes, 1);
}

/* cnn, the CIFAR-10 network of the report that started this project:
 * conv(->32) relu conv(->64) relu maxpool2 dropout .25 |
 * conv(->64) relu conv(->64) relu maxpool2 dropout .25 |
 * flatten linear(->512) relu dropout .5 linear(->classes).
 * Names follow features = nn.Sequential(...), classifier = nn.Sequential(...).
 * Blocks for checkpointing: the two feature blocks. */
static remat_node cnn(remat_graph *g, remat_node x, const remat_model_opts *o) {
    x = remat_relu(g, remat_conv2d(g, "features.0", x, 32, 3, 1, 1, 1));
    x = remat_relu(g, remat_conv2d(g, "features.2", x, 64, 3, 1, 1, 1));
    x = block_end(g, dropout(g, remat_maxpool2d(g, x, 2, 2, 0), 0.25f, o), 0, o);
    x = remat_relu(g, remat_conv2d(g, "features.6", x, 64, 3, 1, 1, 1));
    x = remat_relu(g, remat_conv2d(g, "features.8", x, 64, 3, 1, 1, 1));
    x = block_end(g, dropout(g, remat_maxpool2d(g, x, 2, 2, 0), 0.25f, o), 1, o);
    x = remat_flatten(g, x);
    x = dropout(g, remat_relu(g, remat_linear(g, "classifier.0", x, 512, 1)), 0.5f, o);
    return remat_linear(g, "classifier.3", x, o->classes, 1);
}

/* heavy, the chain of the tutorial that started this project: a scalar
 * input x and one scalar parameter a; 1000 blocks, each doing x = x + a
 * 100 times; one checkpoint per block; loss (x - target)^2. heavy-mul does
 * x = x * a instead: unlike add, whose backward needs no saved value, mul's
 * backward needs its input, so every step's x is an activation. */
static remat_status heavy(remat_graph *g, const remat_model_opts *o, remat_model *m, int mul) {
    int64_t one = 1;
    m->input = remat_input(g, "input", REMAT_F32, 1, &one);
    m->labels = remat_input(g, "target", REMAT_F32, 1, &one);
    remat_node a = remat_param(g, "a", 1, &one, REMAT_INIT_ONES, 0);
    remat_node x = m->input;
    for (int b = 0; b < 1000 && remat_graph_status(g) == REMAT_OK; b++) {
        for (int i = 0; i < 100; i++) x = mul ? remat_mul(g, x, a) : remat_add(g, x, a);
        x = block_end(g, x, b, o);
    }
    m->logits = x;
    m->loss = remat_mse(g, x, m->labels);
    if (remat_graph_status(g) != REMAT_OK)
        return remat_error(remat_graph_status(g), "model '%s': %s", o->name, remat_graph_error(g));
    return REMAT_OK;
}

/* Classifiers over images: input (B,C,H,W), labels (B), cross-entropy. */
remat_status remat__model_classifier(remat_graph *g, const remat_model_opts *o, remat_model *m,
                                     remat_node (*body)(remat_graph *, remat_node, const remat_model_opts *)) {
    if (o->batch <= 0 || o->channels <= 0 || o->height <= 0 || o->width <= 0 || o->classes <= 1)
        return remat_error(REMAT_INVALID, "model '%s': batch, input shape and classes must be positive "
                          "(got batch %lld, %lldx%lldx%lld, %lld classes)", o->name, (long long)o->batch,
                          (long long)o->channels, (long long)o->height, (long long)o->width,
                          (long long)o->classes);
    int64_t xd[4] = {o->batch, o->channels, o->height, o->width};
    m->input = remat_input(g, "input", REMAT_F32, 4, xd);
    m->labels = remat_input(g, "target", REMAT_I32, 1, &o->batch);
    m->logits = body(g, m->input, o);
    m->loss = remat_cross_entropy(g, m->logits, m->labels);
    if (remat_graph_status(g) != REMAT_OK)
        return remat_error(remat_graph_status(g), "model '%s': %s", o->name, remat_graph_error(g));
    return REMAT_OK;
}

static remat_status build_mlp(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    return remat__model_classifier(g, o, m, mlp);
}
static remat_status build_cnn(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    return remat__model_classifier(g, o, m, cnn);
}
static remat_status build_heavy(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    return heavy(g, o, m, 0);
}
static remat_status build_heavy_mul(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    return heavy(g, o, m, 1);
}

/* Per-model defaults applied by remat_model_opts_for. */
static void image_28(remat_model_opts *o) { o->channels = 1, o->height = 28, o->width = 28, o->classes = 10; }
static void image_224(remat_model_opts *o) { o->channels = 3, o->height = 224, o->width = 224, o->classes = 1000; }
static void image_32(remat_model_opts *o) { o->channels = 3, o->height = 32, o->width = 32, o->classes = 10; }

/* The model table: one line per model. */
static const remat__model_entry models[] = {
    {"mlp", "3-layer perceptron (256, 128), 10 classes", build_mlp, image_28},
    {"cnn", "4 conv + 2 linear CIFAR-style classifier with dropout", build_cnn, image_28},
    {"heavy", "1000 blocks of 100 scalar adds (x = x + a), MSE", build_heavy, NULL},
    {"heavy-mul", "1000 blocks of 100 scalar multiplies (x = x * a), MSE", build_heavy_mul, NULL},
    {"resnet18", "torchvision ResNet-18 (BasicBlock [2,2,2,2], widths b..8b, b = base_channels 64)",
     remat__model_resnet18, image_224},
    {"resnet50", "torchvision ResNet-50 (Bottleneck [3,4,6,3], expansion 4, widths b..8b, b = base_channels 64)",
     remat__model_resnet50, image_224},
    {"siamese-resnet50", "one shared ResNet-50 on two views; MSE of head(f(input)) (Linear classes->classes) "
     "against f(target), target = view 2 as a float (B,C,H,W) input; gradients through both branches",
     remat__model_siamese_resnet50, image_224},
    {"densenet-bc", "DenseNet-BC for CIFAR: depth 100, growth k = base_channels 12, compression 0.5, "
     "each layer's input one n-ary concat", remat__model_densenet_bc, image_32},
    {"gpt2", "GPT-2 (nanoGPT layout, tied head): layers, embd, heads, context, vocab from the options; "
     "input (B, context) int32 tokens, target (B*context) next tokens", remat__model_gpt2, NULL},
    {"gpt2-small", "GPT-2 small, 124M: 12 layers, 768 wide, 12 heads, context 1024, 50257 tokens "
     "(size options ignored)", remat__model_gpt2_small, remat__model_gpt2_small_sizes},
};
#define N_MODELS (int)(sizeof models / sizeof models[0])

static const remat__model_entry *find(const char *name) {
    for (int i = 0; name && i < N_MODELS; i++)
        if (strcmp(models[i].name, name) == 0) return &models[i];
    return NULL;
}

const char *const *remat_model_names(void) {
    static const char *names[N_MODELS + 1];
    for (int i = 0; i < N_MODELS; i++) names[i] = models[i].name;
    names[N_MODELS] = NULL;
    return names;
}

const char *remat_model_describe(const char *name) {
    const remat__model_entry *e = find(name);
    return e ? e->describe : NULL;
}

static remat_status unknown(const char *name) {
    char known[512];
    size_t k = 0;
    known[0] = 0;
    for (int i = 0; i < N_MODELS && k < sizeof known; i++)
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", models[i].name);
    return remat_error(REMAT_NOT_FOUND, "unknown model '%s' (known: %s)", name ? name : "(null)", known);
}

remat_status remat_model_opts_for(remat_model_opts *o, const char *name) {
    const remat__model_entry *e = find(name);
    if (!e) return unknown(name);
    o->name = e->name;
    if (e->defaults) e->defaults(o);
    return REMAT_OK;
}

remat_status remat_model_build(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    if (!o->name) return remat_error(REMAT_INVALID, "no model name given");
    const remat__model_entry *e = find(o->name);
    if (!e) return unknown(o->name);
    m->input = m->labels = m->logits = m->loss = REMAT_NONE;
    return e->build(g, o, m);
}
