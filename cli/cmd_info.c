/* cmd_info.c: `remat info`: the model as a table, one row per node: output
 * shape (and, under --precision bf16, the dtype it is stored in),
 * parameters it owns, and bytes its output keeps for backward under
 * the store-all schedule; then totals and the predicted step peak, which
 * counts the optimizer's state as `remat plan` and `remat train` do (AdamW
 * unless --optim says otherwise), so that the three agree. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <string.h>

static void help(void) {
    printf("usage: remat info [options]\n"
           "\n"
           "  --data NAME     input shape of this data set: fashion-mnist | mnist | cifar10 |\n"
           "                  synthetic (default: the model's own input shape)\n"
           "  --optim NAME    count this optimizer's state in the step's peak: none | sgd\n"
           "                  (with momentum) | adamw (default adamw, as plan and train)\n"
           "  --precision P   fp32 | bf16: bytes as that precision stores them; bf16 also\n"
           "                  shows each output's dtype (default fp32)\n"
           "  --json          one JSON object per node, then one with the totals\n"
           "  --help          this text\n"
           "\n");
    cli_model_help();
}

/* The parameters node n owns: those named "<node name>.*". */
static int64_t params_of(const remat_session *s, const remat_graph *g, remat_node n) {
    int64_t params = 0;
    const char *name = remat_node_name(g, n);
    size_t nl = strlen(name);
    for (int i = 0; nl && i < remat_session_param_count(s); i++) {
        remat_param_info pi;
        remat_session_param(s, i, &pi);
        if (pi.trainable && strncmp(pi.name, name, nl) == 0 && pi.name[nl] == '.') params += pi.numel;
    }
    return params;
}

/* One line (or JSON object) per op node: its output, parameters and what
 * its backward keeps; the totals of the last two in *params, *saved. */
static void print_nodes(const remat_session *s, const remat_graph *g, int json, int bf16, int64_t *params,
                        size_t *saved) {
    *params = 0, *saved = 0;
    if (!json)
        printf("%4s  %-15s %-14s %-20s %12s %14s\n", "node", "op", "name", "output", "parameters", "kept for bwd");
    for (remat_node n = 0; n < remat_graph_node_count(g); n++) {
        const char *op = remat_node_op(g, n), *name = remat_node_name(g, n);
        if (strcmp(op, "param") == 0 || strcmp(op, "buffer") == 0) continue;
        int64_t p = params_of(s, g, n);
        size_t kept = remat_session_saved_bytes(s, n);
        *params += p, *saved += kept;
        char sh[64], sb[32];
        cli_shape_str(g, n, sh, sizeof sh);
        if (bf16) {
            size_t at = strlen(sh);
            static const char *const names[] = {"f32", "i32", "u8", "bf16"};
            int d = remat_session_value_dtype(s, n);
            snprintf(sh + at, sizeof sh - at, " %s", d >= 0 && d < 4 ? names[d] : "?");
        }
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "node", n);
            cJSON_AddStringToObject(o, "op", op);
            cJSON_AddStringToObject(o, "name", name);
            cJSON_AddStringToObject(o, "output", sh);
            cJSON_AddNumberToObject(o, "parameters", (double)p);
            cJSON_AddNumberToObject(o, "saved_bytes", (double)kept);
            cli_json_print(o);
        } else {
            printf("%4d  %-15s %-14s %-20s %12lld %14s\n", (int)n, op, name, sh, (long long)p,
                   kept ? cli_fmt_bytes(kept, sb, sizeof sb) : "-");
        }
    }
}

/* The model's totals and its store-all peak. */
static void print_totals(const remat_model_opts *mo, const remat_graph *g, const remat_model *m, const char *optim,
                         int has_optim, int json, int64_t params, size_t saved, const remat_mem_stats *pred) {
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", mo->name);
        cJSON_AddNumberToObject(o, "batch", (double)mo->batch);
        cJSON_AddNumberToObject(o, "parameters", (double)params);
        cJSON_AddNumberToObject(o, "saved_bytes", (double)saved);
        cJSON_AddStringToObject(o, "optimizer", optim);
        cJSON *pk = cJSON_AddObjectToObject(o, "predicted_peak_bytes");
        for (int i = 0; i < REMAT_MEM_COUNT; i++)
            cJSON_AddNumberToObject(pk, remat_mem_str((remat_mem)i), (double)pred->peak[i]);
        cli_json_print(o);
        return;
    }
    char b[32], in[64];
    printf("\nmodel %s, batch %lld, input %s\n", mo->name, (long long)mo->batch,
           cli_shape_str(g, m->input, in, sizeof in));
    printf("parameters: %lld (%s)\n", (long long)params, cli_fmt_bytes((size_t)params * 4, b, sizeof b));
    printf("kept for backward: %s\n", cli_fmt_bytes(saved, b, sizeof b));
    printf("predicted peak of a training step (store everything, %s%s):\n", optim,
           has_optim ? "'s state counted" : ": no optimizer state");
    for (int i = 0; i <= REMAT_MEM_TOTAL; i++) /* store-all offloads nothing: no host row */
        printf("  %-16s %s\n", remat_mem_str((remat_mem)i), cli_fmt_bytes(pred->peak[i], b, sizeof b));
}

int cmd_info(int argc, char **argv) {
    const char *data = NULL, *optim = "adamw", *precision = "fp32";
    int json = 0;
    cli_model_args ma;
    cli_model_args_init(&ma);
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         {"data", required_argument, 0, 'd'},
                                         {"json", no_argument, 0, 'j'},
                                         {"optim", required_argument, 0, 'o'},
                                         {"precision", required_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_opts co = {.cmd = "info", .ma = &ma, .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        switch (c) {
        case 'd': data = optarg; break;
        case 'j': json = 1; break;
        case 'o': optim = optarg; break;
        case 'p': precision = optarg; break;
        case 'h': help(); return 0;
        }
    }
    if (co.rc) return co.rc;
    remat_optim_opts oo;
    int has_optim, rc;
    remat_model_opts mo;
    if ((rc = cli_optim_named("info", optim, &oo, &has_optim)) != 0 ||
        (rc = cli_model_opts(&ma, data, "info", &mo)) != 0)
        return rc;
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    so.plan_only = 1;                  /* shapes and bytes only */
    so.optim = has_optim ? &oo : NULL; /* its state counts in the peak */
    if (remat_precision_parse(precision, &so.precision) != REMAT_OK)
        return cli_usage_error("info", "%s", remat_last_error());
    remat_mem_stats pred;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &mo, &m) != REMAT_OK) {
        rc = cli_fail("%s", remat_last_error());
    } else if ((rc = cli_model_check(&ma, g, &m, "info")) == 0) {
        if (remat_session_create(&s, g, m.loss, &so) != REMAT_OK) {
            rc = cli_fail("%s", remat_last_error());
        } else {
            int64_t params;
            size_t saved;
            print_nodes(s, g, json, so.precision == REMAT_PRECISION_BF16, &params, &saved);
            if (remat_session_predict(s, &pred) != REMAT_OK) rc = cli_fail("%s", remat_last_error());
            else print_totals(&mo, g, &m, optim, has_optim, json, params, saved, &pred);
        }
    }
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return rc;
}
