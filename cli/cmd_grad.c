/* cmd_grad.c: `remat grad`: one forward and backward pass of a model on a
 * given batch, from given weights, writing the loss and every parameter's
 * gradient as safetensors: the file to compare with PyTorch's
 * loss.backward() on the same weights and batch. Nothing is updated. */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: remat grad --batch-from X.safetensors --out G.safetensors [options]\n"
           "\n"
           "One forward and backward pass in training mode (BatchNorm uses the batch's\n"
           "statistics, as model.train() in PyTorch), then writes G: \"loss\" (F32, shape\n"
           "[1]) and \"grad.<name>\" (F32) for every trainable parameter, by PyTorch\n"
           "state_dict name. Dropout is off unless --dropout-scale is given.\n"
           "\n"
           "  --batch-from FILE   safetensors with the batch: \"input\", the model's input\n"
           "                      (F32 images (B,C,H,W) or I32 tokens (B,T)), and \"target\",\n"
           "                      its labels (I32 or I64 classes (B), I32 or I64 next\n"
           "                      tokens (B*T), or F32 for siamese-resnet50); other\n"
           "                      tensors are ignored. Shapes must match the model options.\n"
           "  --init-from FILE    the weights (every parameter and buffer, F32, by\n"
           "                      state_dict name; default: initialized from --seed)\n"
           "  --out FILE          where to write the loss and gradients\n"
           "  --help              this text\n"
           "(the results are bitwise the same under every strategy and budget; --seed\n"
           "initializes the weights when there is no --init-from)\n");
    cli_session_help(1);
    printf("\n");
    cli_model_help();
}

/* Reads tensor `name` of X into a buffer for node n (caller frees). */
static void *read_node(const char *path, const char *name, const remat_graph *g, remat_node n) {
    int64_t d[REMAT_MAX_DIMS], k = 1;
    int nd = remat_node_shape(g, n, d);
    for (int i = 0; i < nd; i++) k *= d[i];
    void *buf = malloc((size_t)(k ? k : 1) * 4);
    if (!buf) {
        cli_fail("out of memory for tensor '%s'", name);
        return NULL;
    }
    if (remat_safetensors_read(path, name, (remat_dtype)remat_node_dtype(g, n), nd, d, buf) != REMAT_OK) {
        cli_fail("%s", remat_last_error());
        free(buf);
        return NULL;
    }
    return buf;
}

/* One step of the bound batch and its loss and gradients written to out,
 * refused when anything is not finite: 0, or 1 after saying why. */
static int step_and_write(remat_session *s, const remat_model_opts *mo, const remat_session_opts *so,
                          const char *init_from, const char *batch_from, const char *out) {
    float loss;
    if (remat_session_step(s, &loss) != REMAT_OK) return cli_fail("%s", remat_last_error());
    if (!isfinite(loss))
        return cli_fail("not writing %s: the loss is %s", out, isnan(loss) ? "NaN" : loss > 0 ? "+inf" : "-inf");
    if (remat_session_check_finite(s) != REMAT_OK) return cli_fail("not writing %s: %s", out, remat_last_error());
    if (remat_safetensors_save_grads(s, out, loss) != REMAT_OK) return cli_fail("%s", remat_last_error());
    int ngrad = 0;
    for (int i = 0; i < remat_session_param_count(s); i++) {
        remat_param_info p;
        if (remat_session_param(s, i, &p) == REMAT_OK && p.trainable) ngrad++;
    }
    remat_plan_summary ps;
    remat_session_plan(s, &ps);
    printf("model %s, batch from %s, weights from %s, strategy %s, device %s\n", mo->name, batch_from,
           init_from ? init_from : "the seed", remat_strategy_str(ps.strategy), remat_device_str(so->device));
    printf("loss %.9g; wrote loss and %d gradients to %s\n", (double)loss, ngrad, out);
    return 0;
}

int cmd_grad(int argc, char **argv) {
    const char *init_from = NULL, *batch_from = NULL, *out = NULL;
    cli_model_args ma;
    cli_model_args_init(&ma);
    cli_session_args sa;
    cli_session_args_init(&sa);
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         CLI_SESSION_OPTIONS,
                                         CLI_PLAN_OPTIONS,
                                         {"init-from", required_argument, 0, 'I'},
                                         {"batch-from", required_argument, 0, 'X'},
                                         {"out", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_opts co = {.cmd = "grad", .ma = &ma, .sa = &sa, .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        int bad = 0;
        switch (c) {
        case 'I': init_from = optarg; break;
        case 'X': batch_from = optarg; break;
        case 'o': out = optarg; break;
        case 'h': help(); return 0;
        }
        if (bad) return cli_bad_value(&co, optarg, "");
    }
    if (co.rc) return co.rc;
    if (!batch_from) return cli_usage_error("grad", "--batch-from FILE is required (tensors 'input' and 'target')");
    if (!out) return cli_usage_error("grad", "--out FILE is required");
    remat_model_opts mo;
    int u = cli_model_opts(&ma, NULL, "grad", &mo);
    if (u) return u;
    if (ma.dropout_scale < 0) mo.dropout_scale = 0.0f; /* deterministic gradients by default */
    remat_session_opts so;
    remat_cost_model *cm = NULL;
    if ((u = cli_session_opts(&sa, "grad", &so, &cm, NULL))) return u;

    int rc = 1;
    remat_graph *g = NULL;
    remat_session *s = NULL;
    void *x = NULL, *y = NULL;
    remat_model m;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &mo, &m) != REMAT_OK) goto fail;
    if ((u = cli_model_check(&ma, g, &m, "grad"))) {
        rc = u;
        goto done;
    }
    if (!(x = read_node(batch_from, "input", g, m.input))) goto done;
    if (m.labels != REMAT_NONE && !(y = read_node(batch_from, "target", g, m.labels))) goto done;
    if (remat_session_create(&s, g, m.loss, &so) != REMAT_OK) goto fail;
    if (init_from && remat_safetensors_load(s, init_from, 1) != REMAT_OK) goto fail;
    if (remat_session_bind(s, m.input, x) != REMAT_OK) goto fail;
    if (y && remat_session_bind(s, m.labels, y) != REMAT_OK) goto fail;
    rc = step_and_write(s, &mo, &so, init_from, batch_from, out);
    goto done;
fail:
    cli_fail("%s", remat_last_error());
done:
    remat_session_destroy(s);
    remat_graph_destroy(g);
    free(x), free(y);
    return rc;
}
