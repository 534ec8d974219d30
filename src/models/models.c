/* models.c: the model zoo, built from the public API alone.
 *
 * Parameter names are the state_dict names of the equivalent PyTorch
 * modules (scripts/gen_fixtures.py defines them), so weights move between
 * the two by name.
 */
#include "models.h"

#include <math.h>
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

/* Dropout with the model's rate scaled; absent when the scale is 0. */
static remat_node dropout(remat_graph *g, remat_node x, float p, const remat_model_opts *o) {
    return o->dropout_scale > 0.0f ? remat_dropout(g, x, p * o->dropout_scale) : x;
}

/* mlp: flatten | fc1 (->256) relu | fc2 (->128) relu | fc3 (->classes).
 * Blocks for checkpointing: fc1+relu, fc2+relu. */
static remat_node mlp(remat_graph *g, remat_node x, const remat_model_opts *o) {
    x = remat_flatten(g, x);
    x = remat__model_block_end(g, remat_relu(g, remat_linear(g, "fc1", x, 256, 1)), 0, o);
    x = remat__model_block_end(g, remat_relu(g, remat_linear(g, "fc2", x, 128, 1)), 1, o);
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
    x = remat__model_block_end(g, dropout(g, remat_maxpool2d(g, x, 2, 2, 0), 0.25f, o), 0, o);
    x = remat_relu(g, remat_conv2d(g, "features.6", x, 64, 3, 1, 1, 1));
    x = remat_relu(g, remat_conv2d(g, "features.8", x, 64, 3, 1, 1, 1));
    x = remat__model_block_end(g, dropout(g, remat_maxpool2d(g, x, 2, 2, 0), 0.25f, o), 1, o);
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
        x = remat__model_block_end(g, x, b, o);
    }
    m->logits = x;
    m->loss = remat_mse(g, x, m->labels);
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
static remat_status build_heavy(remat_graph *g, const remat_model_opts *o, remat_model *m) { return heavy(g, o, m, 0); }
static remat_status build_heavy_mul(remat_graph *g, const remat_model_opts *o, remat_model *m) {
    return heavy(g, o, m, 1);
}

/* Per-model defaults applied by remat_model_opts_for. */
static void image_28(remat_model_opts *o) { o->channels = 1, o->height = 28, o->width = 28, o->classes = 10; }
static void image_224(remat_model_opts *o) { o->channels = 3, o->height = 224, o->width = 224, o->classes = 1000; }
static void image_32(remat_model_opts *o) { o->channels = 3, o->height = 32, o->width = 32, o->classes = 10; }

/* ------------------------------------------------------- size estimates
 *
 * What a model's options would build, worked out from the options alone
 * before anything is built, so that a request such as 2147483647 gpt2
 * layers is refused at once instead of building a graph for hours. Each
 * model's estimator walks its architecture in numbers: per node it adds
 * one node and, for a leaf, its elements as parameters, or, for an op,
 * the bytes of its output for one batch as activations (attention's
 * probabilities too). The arithmetic is in double: the options are
 * int64 and their products (batch x context x width x ...) would
 * overflow int64 long before a limit is reached, where a double only
 * rounds. Nodes, tensors and parameters come out as built, activations
 * within a factor of 2 (tests/test_hostile.c compares them for every
 * model), and they only decide refusals far above every real
 * configuration. */

typedef struct {
    double nodes;   /* forward graph nodes, leaves included */
    double tensors; /* named leaves: parameters, buffers, inputs */
    double params;  /* parameter and buffer elements */
    double act;     /* bytes of one batch's forward values */
    char opts[192]; /* the options the figures depend on, for the message */
} size_est;

/* The limits, each far above every real configuration of the zoo:
 * - nodes: heavy's 100,004 are the most of the table; 1 million is ten
 *   times that (gpt2 at 38,000 layers).
 * - named tensors: the builder checks each new name against every node
 *   (graph.c), so building takes time in proportion to tensors x nodes:
 *   1,000 gpt2 layers (12,000 tensors, 26,000 nodes) build in 0.8 s, 4,000
 *   in 12 s and 8,000 in 114 s. 10,000 tensors (833 gpt2 layers; GPT-3
 *   has 96) keep building to about a second.
 * - parameters: 8 billion floats are 32 GB; with their gradients and
 *   AdamW's two moments 128 GB, the memory of the largest single GPU
 *   (H200, 141 GB), and remat trains on one device. gpt2-small has 124
 *   million, GPT-2 XL 1.5 billion.
 * - activations: 16 TB for one batch (gpt2-small at batch 64, context
 *   1024 needs 110 GB; recomputation can fit far more than memory holds,
 *   but not 100 times more). */
#define MAX_NODES 1e6
#define MAX_TENSORS 1e4
#define MAX_PARAMS 8e9
#define MAX_ACT_BYTES 16e12

static void est_leaf(size_est *e, double elems) { e->nodes += 1, e->tensors += 1, e->params += elems; }
static void est_op(size_est *e, double elems) { e->nodes += 1, e->act += 4.0 * elems; }
static void est_input(size_est *e, double elems) { e->tensors += 1, est_op(e, elems); }

/* The option as a double, 0 for the non-positive ones the builder refuses. */
static double dim(int64_t v) { return v > 0 ? (double)v : 0.0; }

/* Output side of a convolution or pooling window over `in`. */
static double out_side(double in, double k, double stride, double pad) {
    double o = floor((in + 2 * pad - k) / stride) + 1;
    return o > 0 ? o : 0;
}

static void est_images(size_est *e, const remat_model_opts *o) {
    snprintf(e->opts, sizeof e->opts, "batch %lld, image %lldx%lldx%lld, %lld classes", (long long)o->batch,
             (long long)o->channels, (long long)o->height, (long long)o->width, (long long)o->classes);
}

/* The classifier wrapper's input, labels and loss. */
static void est_classifier(size_est *e, const remat_model_opts *o) {
    double B = dim(o->batch);
    est_input(e, B * dim(o->channels) * dim(o->height) * dim(o->width));
    est_input(e, B);
    est_op(e, 1);
    est_images(e, o);
}

/* A linear layer (in -> out) with bias on `rows` rows. */
static void est_linear(size_est *e, double rows, double in, double out) {
    est_leaf(e, out * in), est_leaf(e, out), est_op(e, rows * out);
}

/* A convolution (cin -> cout, k x k) whose output is B x cout x hw. */
static void est_conv(size_est *e, int shared, double B, double cin, double cout, double k, double hw) {
    if (!shared) est_leaf(e, cout * cin * k * k);
    est_op(e, B * cout * hw);
}

/* BatchNorm (weight, bias, running mean and variance) then ReLU. */
static void est_bn(size_est *e, int shared, double B, double c, double hw, int relu) {
    if (!shared)
        for (int i = 0; i < 4; i++) est_leaf(e, c);
    est_op(e, B * c * hw);
    if (relu) est_op(e, B * c * hw);
}

static void est_mlp(const remat_model_opts *o, size_est *e) {
    double B = dim(o->batch), in = dim(o->channels) * dim(o->height) * dim(o->width);
    est_classifier(e, o);
    est_op(e, B * in); /* flatten */
    est_linear(e, B, in, 256), est_op(e, B * 256);
    est_linear(e, B, 256, 128), est_op(e, B * 128);
    est_linear(e, B, 128, dim(o->classes));
}

static void est_cnn(const remat_model_opts *o, size_est *e) {
    double B = dim(o->batch), C = dim(o->channels), H = dim(o->height), W = dim(o->width);
    est_classifier(e, o);
    double in = C, hw = H * W;
    for (int blk = 0; blk < 2; blk++) {
        for (int i = 0; i < 2; i++) { /* conv 3x3 (bias), relu */
            double out = blk == 0 && i == 0 ? 32 : 64;
            est_conv(e, 0, B, in, out, 3, hw), est_leaf(e, out), est_op(e, B * out * hw);
            in = out;
        }
        H = floor(H / 2), W = floor(W / 2), hw = H * W;
        est_op(e, B * 64 * hw), est_op(e, B * 64 * hw); /* maxpool, dropout */
    }
    est_op(e, B * 64 * hw); /* flatten */
    est_linear(e, B, 64 * hw, 512), est_op(e, B * 512), est_op(e, B * 512);
    est_linear(e, B, 512, dim(o->classes));
}

static void est_heavy(const remat_model_opts *o, size_est *e) {
    (void)o;
    est_input(e, 1), est_input(e, 1), est_leaf(e, 1);
    e->nodes += 100000, e->act += 4.0 * 100000; /* 1000 blocks of 100 scalar ops */
    est_op(e, 1);
    snprintf(e->opts, sizeof e->opts, "fixed size");
}

/* A torchvision ResNet backbone on B x C x H x W images up to its pooled
 * features; *feat gets their width. shared: the parameters exist already
 * (the siamese model's second branch). */
static void est_resnet_body(size_est *e, const remat_model_opts *o, int deep, int shared, double *feat) {
    static const int basic_layers[4] = {2, 2, 2, 2}, deep_layers[4] = {3, 4, 6, 3};
    double B = dim(o->batch), b = o->base_channels > 0 ? (double)o->base_channels : 64;
    double H = out_side(dim(o->height), 7, 2, 3), W = out_side(dim(o->width), 7, 2, 3);
    est_conv(e, shared, B, dim(o->channels), b, 7, H * W);
    est_bn(e, shared, B, b, H * W, 1);
    H = out_side(H, 3, 2, 1), W = out_side(W, 3, 2, 1);
    est_op(e, B * b * H * W); /* maxpool */
    double in = b;
    for (int s = 0; s < 4; s++) {
        double p = b * (1 << s);
        for (int blk = 0; blk < (deep ? deep_layers : basic_layers)[s]; blk++) {
            int stride = s > 0 && blk == 0 ? 2 : 1;
            double Ho = out_side(H, 3, stride, 1), Wo = out_side(W, 3, stride, 1), out = deep ? 4 * p : p;
            if (deep) {
                est_conv(e, shared, B, in, p, 1, H * W), est_bn(e, shared, B, p, H * W, 1);
                est_conv(e, shared, B, p, p, 3, Ho * Wo), est_bn(e, shared, B, p, Ho * Wo, 1);
                est_conv(e, shared, B, p, out, 1, Ho * Wo), est_bn(e, shared, B, out, Ho * Wo, 0);
            } else {
                est_conv(e, shared, B, in, p, 3, Ho * Wo), est_bn(e, shared, B, p, Ho * Wo, 1);
                est_conv(e, shared, B, p, p, 3, Ho * Wo), est_bn(e, shared, B, p, Ho * Wo, 0);
            }
            if (stride != 1 || in != out)
                est_conv(e, shared, B, in, out, 1, Ho * Wo), est_bn(e, shared, B, out, Ho * Wo, 0);
            est_op(e, B * out * Ho * Wo), est_op(e, B * out * Ho * Wo); /* add, relu */
            in = out, H = Ho, W = Wo;
        }
    }
    est_op(e, B * in), est_op(e, B * in); /* global average pool, flatten */
    *feat = in;
}

static void est_resnet(const remat_model_opts *o, size_est *e, int deep) {
    double feat;
    est_classifier(e, o);
    est_resnet_body(e, o, deep, 0, &feat);
    est_linear(e, dim(o->batch), feat, dim(o->classes));
    if (o->base_channels > 0) {
        size_t n = strlen(e->opts);
        snprintf(e->opts + n, sizeof e->opts - n, ", base channels %lld", (long long)o->base_channels);
    }
}
static void est_resnet18(const remat_model_opts *o, size_est *e) { est_resnet(o, e, 0); }
static void est_resnet50(const remat_model_opts *o, size_est *e) { est_resnet(o, e, 1); }

static void est_siamese(const remat_model_opts *o, size_est *e) {
    double B = dim(o->batch), feat, img = B * dim(o->channels) * dim(o->height) * dim(o->width);
    est_input(e, img), est_input(e, img);
    est_resnet_body(e, o, 1, 0, &feat);
    est_linear(e, B, feat, dim(o->classes));
    est_resnet_body(e, o, 1, 1, &feat);
    est_op(e, B * dim(o->classes));                     /* the shared fc */
    est_linear(e, B, dim(o->classes), dim(o->classes)); /* head */
    est_op(e, 1);
    est_images(e, o);
}

static void est_densenet(const remat_model_opts *o, size_est *e) {
    double B = dim(o->batch), k = o->base_channels > 0 ? (double)o->base_channels : 12;
    int64_t depth = o->depth > 0 ? o->depth : 100;
    est_classifier(e, o);
    size_t n = strlen(e->opts);
    snprintf(e->opts + n, sizeof e->opts - n, ", depth %lld, growth %lld", (long long)depth,
             (long long)(o->base_channels > 0 ? o->base_channels : 12));
    if (depth < 10 || (depth - 4) % 6 != 0 || (depth - 4) / 6 + 1 > REMAT_MAX_INPUTS)
        return; /* the builder refuses the depth */
    int nl = (int)((depth - 4) / 6);
    double H = dim(o->height), W = dim(o->width), hw = H * W, c = 2 * k;
    est_conv(e, 0, B, dim(o->channels), c, 3, hw);
    for (int blk = 1; blk <= 3; blk++) {
        for (int l = 1; l <= nl; l++) {
            double cin = c + (l - 1) * k;
            if (l > 1) est_op(e, B * cin * hw); /* concat */
            est_bn(e, 0, B, cin, hw, 1), est_conv(e, 0, B, cin, 4 * k, 1, hw);
            est_bn(e, 0, B, 4 * k, hw, 1), est_conv(e, 0, B, 4 * k, k, 3, hw);
        }
        c += nl * k;
        est_op(e, B * c * hw); /* concat */
        if (blk < 3) {
            double half = floor(c / 2);
            est_bn(e, 0, B, c, hw, 1), est_conv(e, 0, B, c, half, 1, hw);
            c = half, H = floor(H / 2), W = floor(W / 2), hw = H * W;
            est_op(e, B * c * hw); /* average pool */
        }
    }
    est_bn(e, 0, B, c, hw, 1);
    est_op(e, B * c), est_op(e, B * c); /* global average pool, flatten */
    est_linear(e, B, c, dim(o->classes));
}

/* Per block: ln_1, c_attn, reshape, attention (its probabilities, B x
 * heads x T x T, are kept for the backward), reshape, c_proj, dropout,
 * add, ln_2, c_fc, gelu, c_proj, dropout, add: 26 nodes, 12 tensors,
 * 12 C^2 + 13 C parameters, 24 C values per token. */
static void est_gpt2_sizes(const remat_model_opts *o, size_est *e) {
    double B = dim(o->batch), L = dim(o->layers), C = dim(o->embd), T = dim(o->context), V = dim(o->vocab);
    double BT = B * T, heads = dim(o->heads);
    e->nodes = 13 + 26 * L;
    e->tensors = 6 + 12 * L;
    e->params = V * C + T * C + 2 * C + L * (12 * C * C + 13 * C);
    e->act = 4 * (2 * BT + BT * (5 * C + V) + L * (24 * BT * C + B * heads * T * T));
    snprintf(e->opts, sizeof e->opts, "batch %lld, %lld layers, embd %lld, %lld heads, context %lld, vocab %lld",
             (long long)o->batch, (long long)o->layers, (long long)o->embd, (long long)o->heads, (long long)o->context,
             (long long)o->vocab);
}

static void est_gpt2_small(const remat_model_opts *o, size_est *e) {
    remat_model_opts s = *o;
    remat__model_gpt2_small_sizes(&s);
    est_gpt2_sizes(&s, e);
}

/* "1.52 billion", "26013", "5.1e+21" */
static const char *count_str(double v, char *buf, size_t cap) {
    static const struct {
        double scale;
        const char *name;
    } words[] = {{1e12, "trillion"}, {1e9, "billion"}, {1e6, "million"}};
    if (v >= 1e15) snprintf(buf, cap, "%.3g", v);
    else if (v < 1e6) snprintf(buf, cap, "%.0f", v);
    for (int i = 0; i < 3 && v >= 1e6 && v < 1e15; i++)
        if (v >= words[i].scale) {
            snprintf(buf, cap, "%.3g %s", v / words[i].scale, words[i].name);
            break;
        }
    return buf;
}

/* "15.2 TB" (decimal units), "3.1e+09 EB" */
static const char *bytes_str(double v, char *buf, size_t cap) {
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    int u = 0;
    while (v >= 1000 && u < 6) v /= 1000, u++;
    snprintf(buf, cap, "%.3g %s", v, units[u]);
    return buf;
}

/* Appends ", what" (the first time without the comma) to the list. */
static void list_add(char *buf, size_t cap, int *count, const char *what) {
    size_t n = strlen(buf);
    if (n < cap) snprintf(buf + n, cap - n, "%s%s", (*count)++ ? ", " : "", what);
}

/* REMAT_INVALID when the estimate passes a limit, naming every figure
 * that does, its limit and the options behind it. */
static remat_status check_size(const char *name, const size_est *e) {
    char list[640] = "", item[160], a[48], b[48];
    int over = 0;
    if (e->nodes > MAX_NODES) {
        snprintf(item, sizeof item, "%s nodes (limit %s)", count_str(e->nodes, a, sizeof a),
                 count_str(MAX_NODES, b, sizeof b));
        list_add(list, sizeof list, &over, item);
    }
    if (e->tensors > MAX_TENSORS) {
        snprintf(item, sizeof item, "%s parameter tensors (limit %.0f)", count_str(e->tensors, a, sizeof a),
                 MAX_TENSORS);
        list_add(list, sizeof list, &over, item);
    }
    if (e->params > MAX_PARAMS) {
        snprintf(item, sizeof item, "%s parameters, %s (limit %s)", count_str(e->params, a, sizeof a),
                 bytes_str(4 * e->params, b, sizeof b), "8 billion, 32 GB");
        list_add(list, sizeof list, &over, item);
    }
    if (e->act > MAX_ACT_BYTES) {
        snprintf(item, sizeof item, "%s of activations per batch (limit %s)", bytes_str(e->act, a, sizeof a),
                 bytes_str(MAX_ACT_BYTES, b, sizeof b));
        list_add(list, sizeof list, &over, item);
    }
    if (!over) return REMAT_OK;
    return remat_error(REMAT_INVALID, "model '%s' (%s) is too large: it would have about %s; use smaller sizes", name,
                       e->opts, list);
}

/* The model table: one line per model, with its size estimator. */
static const struct {
    remat__model_entry m;
    void (*estimate)(const remat_model_opts *o, size_est *e);
} models[] = {
    {{"mlp", "3-layer perceptron (256, 128), 10 classes", build_mlp, image_28}, est_mlp},
    {{"cnn", "4 conv + 2 linear CIFAR-style classifier with dropout", build_cnn, image_28}, est_cnn},
    {{"heavy", "1000 blocks of 100 scalar adds (x = x + a), MSE", build_heavy, NULL}, est_heavy},
    {{"heavy-mul", "1000 blocks of 100 scalar multiplies (x = x * a), MSE", build_heavy_mul, NULL}, est_heavy},
    {{"resnet18", "torchvision ResNet-18 (BasicBlock [2,2,2,2], widths b..8b, b = base_channels 64)",
      remat__model_resnet18, image_224},
     est_resnet18},
    {{"resnet50", "torchvision ResNet-50 (Bottleneck [3,4,6,3], expansion 4, widths b..8b, b = base_channels 64)",
      remat__model_resnet50, image_224},
     est_resnet50},
    {{"siamese-resnet50",
      "one shared ResNet-50 on two views; MSE of head(f(input)) (Linear classes->classes) "
      "against f(target), target = view 2 as a float (B,C,H,W) input; gradients through both branches",
      remat__model_siamese_resnet50, image_224},
     est_siamese},
    {{"densenet-bc",
      "DenseNet-BC for CIFAR: depth 100, growth k = base_channels 12, compression 0.5, "
      "each layer's input one n-ary concat",
      remat__model_densenet_bc, image_32},
     est_densenet},
    {{"gpt2",
      "GPT-2 (nanoGPT layout, tied head): layers, embd, heads, context, vocab from the options; "
      "input (B, context) int32 tokens, target (B*context) next tokens",
      remat__model_gpt2, NULL},
     est_gpt2_sizes},
    {{"gpt2-small",
      "GPT-2 small, 124M: 12 layers, 768 wide, 12 heads, context 1024, 50257 tokens "
      "(size options ignored)",
      remat__model_gpt2_small, remat__model_gpt2_small_sizes},
     est_gpt2_small},
};
#define N_MODELS (int)(sizeof models / sizeof models[0])

static int find_index(const char *name) {
    for (int i = 0; name && i < N_MODELS; i++)
        if (strcmp(models[i].m.name, name) == 0) return i;
    return -1;
}

static const remat__model_entry *find(const char *name) {
    int i = find_index(name);
    return i < 0 ? NULL : &models[i].m;
}

/* For tests/test_hostile.c, which checks the estimates against what is
 * built: the estimate of the options' model (REMAT_NOT_FOUND for an
 * unknown one). Not in the public header; the test declares it. */
remat_status remat__model_estimate(const remat_model_opts *o, double *nodes, double *tensors, double *params,
                                   double *act_bytes) {
    int i = find_index(o ? o->name : NULL);
    if (i < 0) return remat_error(REMAT_NOT_FOUND, "unknown model '%s'", o && o->name ? o->name : "(null)");
    size_est e = {0};
    models[i].estimate(o, &e);
    *nodes = e.nodes, *tensors = e.tensors, *params = e.params, *act_bytes = e.act;
    return REMAT_OK;
}

const char *const *remat_model_names(void) {
    static const char *names[N_MODELS + 1];
    for (int i = 0; i < N_MODELS; i++) names[i] = models[i].m.name;
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
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", models[i].m.name);
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
    int i = find_index(o->name);
    if (i < 0) return unknown(o->name);
    m->input = m->labels = m->logits = m->loss = REMAT_NONE;
    size_est est = {0};
    models[i].estimate(o, &est);
    remat_status st = check_size(models[i].m.name, &est);
    return st != REMAT_OK ? st : models[i].m.build(g, o, m);
}
