/* model_opts.c: the options that describe a model, parsed once for every
 * command that builds one (train, info, plan, bench, grad).
 *
 * Precedence, lowest first: remat_model_opts_default, the model's own
 * defaults (remat_model_opts_for: input shape, classes, preset sizes), the
 * data set's input shape, then the options given on the command line. The
 * library checks the combination when it builds the model.
 */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

void cli_model_args_init(cli_model_args *a) {
    memset(a, 0, sizeof *a);
    a->model = "cnn";
    a->batch = a->classes = a->channels = a->height = a->width = -1;
    a->layers = a->embd = a->heads = a->context = a->vocab = a->base_channels = a->depth = -1;
    a->checkpoint_blocks = -1;
    a->dropout_scale = -1.0f;
}

/* "HxW" or "CxHxW", every part a positive integer. */
static int parse_image(const char *s, int64_t *c, int64_t *h, int64_t *w) {
    int64_t v[3];
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        if (n == 3 || *p < '0' || *p > '9') return -1;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 1 || x > (1 << 20)) return -1;
        v[n++] = x;
        if (*end == 0) break;
        if (*end != 'x' && *end != 'X') return -1;
        p = end + 1;
    }
    if (n == 2) *h = v[0], *w = v[1];
    else if (n == 3) *c = v[0], *h = v[1], *w = v[2];
    else return -1;
    return 0;
}

int cli_model_arg(cli_model_args *a, int c, const char *arg, int *bad) {
    int64_t *field = NULL;
    switch (c) {
    case CLI_OPT_MODEL: a->model = arg; return 1;
    case CLI_OPT_IMAGE: *bad = parse_image(arg, &a->channels, &a->height, &a->width) != 0; return 1;
    case CLI_OPT_DROPOUT_SCALE:
        *bad = cli_parse_float(arg, &a->dropout_scale) || a->dropout_scale < 0 || a->dropout_scale > 1e6f;
        return 1;
    case CLI_OPT_CHECKPOINT_BLOCKS:
        *bad = cli_parse_i64(arg, &a->checkpoint_blocks) || a->checkpoint_blocks < 0 || a->checkpoint_blocks > 1 << 20;
        return 1;
    case CLI_OPT_BATCH: field = &a->batch; break;
    case CLI_OPT_CLASSES: field = &a->classes; break;
    case CLI_OPT_LAYERS: field = &a->layers; break;
    case CLI_OPT_EMBD: field = &a->embd; break;
    case CLI_OPT_HEADS: field = &a->heads; break;
    case CLI_OPT_CONTEXT: field = &a->context; break;
    case CLI_OPT_VOCAB: field = &a->vocab; break;
    case CLI_OPT_BASE_CHANNELS: field = &a->base_channels; break;
    case CLI_OPT_DEPTH: field = &a->depth; break;
    default: return 0;
    }
    /* sizes: positive and small enough that products stay far from overflow */
    *bad = cli_parse_i64(arg, field) || *field < 1 || *field > ((int64_t)1 << 31);
    return 1;
}

static void known_models(char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (const char *const *n = remat_model_names(); *n && at < cap; n++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", n == remat_model_names() ? "" : ", ", *n);
}

int cli_model_opts(const cli_model_args *a, const char *data, const char *cmd, remat_model_opts *mo) {
    remat_model_opts_default(mo);
    if (remat_model_opts_for(mo, a->model) != REMAT_OK) {
        char known[512];
        known_models(known, sizeof known);
        return cli_usage_error(cmd, "unknown model '%s' (known: %s)", a->model, known);
    }
    if (data && strcmp(data, "synthetic") != 0 && strncmp(data, "tokens:", 7) != 0 &&
        cli_data_shape(data, &mo->channels, &mo->height, &mo->width))
        return cli_usage_error(cmd, "unknown data set '%s' (known: fashion-mnist, mnist, cifar10, synthetic%s)", data,
                               strcmp(cmd, "train") == 0 ? ", tokens:FILE" : "");
    if (a->batch > 0) mo->batch = a->batch;
    if (a->classes > 0) mo->classes = a->classes;
    if (a->channels > 0) mo->channels = a->channels;
    if (a->height > 0) mo->height = a->height, mo->width = a->width;
    if (a->layers > 0) mo->layers = a->layers;
    if (a->embd > 0) mo->embd = a->embd;
    if (a->heads > 0) mo->heads = a->heads;
    if (a->context > 0) mo->context = a->context;
    if (a->vocab > 0) mo->vocab = a->vocab;
    if (a->base_channels > 0) mo->base_channels = a->base_channels;
    if (a->depth > 0) mo->depth = a->depth;
    if (a->checkpoint_blocks >= 0) mo->checkpoint_blocks = (int)a->checkpoint_blocks;
    if (a->dropout_scale >= 0) mo->dropout_scale = a->dropout_scale;
    return 0;
}

void cli_model_help(void) {
    printf("model options (train, info, plan, bench and grad share them):\n"
           "  --model NAME        the model (default cnn), one of:\n");
    for (const char *const *n = remat_model_names(); *n; n++)
        printf("                        %-17s %s\n", *n, remat_model_describe(*n));
    printf("  --batch B           batch size (default 64)\n"
           "  --image [CxH]xW     classifiers' input, e.g. 32x32 or 3x32x32 (default: the\n"
           "                      model's, or the data set's)\n"
           "  --classes N         classes of a classifier (default: the model's)\n"
           "  --layers N --embd N --heads N --context N --vocab N\n"
           "                      transformer blocks, width, attention heads, sequence\n"
           "                      length of a batch and vocabulary size (default: the\n"
           "                      model's; gpt2 defaults to GPT-2 small's)\n"
           "  --base-channels N   CNN width: resnet's stem and first-stage channels,\n"
           "                      densenet-bc's growth rate (default: the model's)\n"
           "  --depth N           densenet-bc's depth (default: the model's)\n"
           "  --dropout-scale S   multiply every dropout rate by S (0 turns dropout off)\n"
           "  --checkpoint-blocks N  for --strategy manual: checkpoint only the first N\n"
           "                      blocks of the model (default: every block)\n");
}

const char *cli_shape_str(const remat_graph *g, remat_node n, char *buf, size_t cap) {
    int64_t d[REMAT_MAX_DIMS];
    int nd = n == REMAT_NONE ? 0 : remat_node_shape(g, n, d);
    size_t u = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < nd && u < cap; i++)
        u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (u < cap) snprintf(buf + u, cap - u, ")");
    return buf;
}

int cli_model_check(const cli_model_args *a, const remat_graph *g, const remat_model *m, const char *cmd) {
    int64_t d[REMAT_MAX_DIMS];
    int nd = remat_node_shape(g, m->input, d);
    char shape[64];
    cli_shape_str(g, m->input, shape, sizeof shape);
    const char *name = remat_model_describe(a->model) ? a->model : "?";
    if (nd >= 1 && a->batch > 0 && d[0] != a->batch && nd != 1)
        return cli_usage_error(cmd, "model '%s' does not take --batch %lld: its input is %s", name, (long long)a->batch,
                               shape);
    if (nd == 2 && remat_node_dtype(g, m->input) == REMAT_I32 && a->context > 0 && d[1] != a->context)
        return cli_usage_error(cmd, "model '%s' ignores --context %lld: its input is %s%s", name, (long long)a->context,
                               shape, strcmp(name, "gpt2-small") == 0 ? " (use --model gpt2 with size options)" : "");
    if (a->height > 0 && (nd != 4 || d[2] != a->height || d[3] != a->width || (a->channels > 0 && d[1] != a->channels)))
        return cli_usage_error(cmd, "model '%s' does not take --image: its input is %s", name, shape);
    int tokens = remat_node_dtype(g, m->input) == REMAT_I32;
    const char *transformer = a->layers > 0    ? "--layers"
                              : a->embd > 0    ? "--embd"
                              : a->heads > 0   ? "--heads"
                              : a->context > 0 ? "--context"
                              : a->vocab > 0   ? "--vocab"
                                               : NULL;
    const char *images = a->classes > 0         ? "--classes"
                         : a->base_channels > 0 ? "--base-channels"
                         : a->depth > 0         ? "--depth"
                                                : NULL;
    if (!tokens && transformer)
        return cli_usage_error(cmd, "model '%s' is no transformer: %s is for gpt2", name, transformer);
    if (tokens && images)
        return cli_usage_error(cmd, "model '%s' is a language model: %s is for the CNNs", name, images);
    int64_t ld[REMAT_MAX_DIMS];
    int nl = m->logits == REMAT_NONE ? 0 : remat_node_shape(g, m->logits, ld);
    if (tokens && a->vocab > 0 && nl > 0 && ld[nl - 1] != a->vocab)
        return cli_usage_error(cmd, "model '%s' ignores --vocab %lld: its logits are %lld wide%s", name,
                               (long long)a->vocab, (long long)ld[nl - 1],
                               strcmp(name, "gpt2-small") == 0 ? " (use --model gpt2 with size options)" : "");
    return 0;
}
