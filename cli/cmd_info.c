/* cmd_info.c: `remat info`: the model as a table, one row per node: output
 * shape, parameters it owns, and bytes its output keeps for backward under
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
           "  --json          one JSON object per node, then one with the totals\n"
           "  --help          this text\n"
           "\n");
    cli_model_help();
}

int cmd_info(int argc, char **argv) {
    const char *data = NULL, *optim = "adamw";
    int json = 0;
    cli_model_args ma;
    cli_model_args_init(&ma);
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         {"data", required_argument, 0, 'd'},
                                         {"json", no_argument, 0, 'j'},
                                         {"optim", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_opts co = {.cmd = "info", .ma = &ma, .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        switch (c) {
        case 'd': data = optarg; break;
        case 'j': json = 1; break;
        case 'o': optim = optarg; break;
        case 'h': help(); return 0;
        }
    }
    if (co.rc) return co.rc;
    remat_optim_opts oo;
    int has_optim;
    int bad = cli_optim_named("info", optim, &oo, &has_optim);
    if (bad) return bad;
    remat_model_opts mo;
    int u = cli_model_opts(&ma, data, "info", &mo);
    if (u) return u;
    const char *model = mo.name;
    int64_t batch = mo.batch;
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    int rc = 1;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &mo, &m) != REMAT_OK) goto fail;
    if ((u = cli_model_check(&ma, g, &m, "info"))) {
        rc = u;
        goto done;
    }
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
    so.plan_only = 1; /* shapes and bytes only */
    so.optim = has_optim ? &oo : NULL; /* its state counts in the peak */
    if (remat_session_create(&s, g, m.loss, &so) != REMAT_OK) goto fail;

    int64_t total_params = 0;
    size_t total_saved = 0;
    if (!json) printf("%4s  %-15s %-14s %-20s %12s %14s\n", "node", "op", "name", "output", "parameters", "kept for bwd");
    for (remat_node n = 0; n < remat_graph_node_count(g); n++) {
        const char *op = remat_node_op(g, n);
        if (strcmp(op, "param") == 0 || strcmp(op, "buffer") == 0) continue;
        /* Parameters this node owns: those named "<node name>.*". */
        int64_t params = 0;
        const char *name = remat_node_name(g, n);
        size_t nl = strlen(name);
        for (int i = 0; nl && i < remat_session_param_count(s); i++) {
            remat_param_info pi;
            remat_session_param(s, i, &pi);
            if (pi.trainable && strncmp(pi.name, name, nl) == 0 && pi.name[nl] == '.') params += pi.numel;
        }
        size_t saved = remat_session_saved_bytes(s, n);
        total_params += params;
        total_saved += saved;
        char sh[64], sb[32];
        cli_shape_str(g, n, sh, sizeof sh);
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "node", n);
            cJSON_AddStringToObject(o, "op", op);
            cJSON_AddStringToObject(o, "name", name);
            cJSON_AddStringToObject(o, "output", sh);
            cJSON_AddNumberToObject(o, "parameters", (double)params);
            cJSON_AddNumberToObject(o, "saved_bytes", (double)saved);
            cli_json_print(o);
        } else {
            printf("%4d  %-15s %-14s %-20s %12lld %14s\n", (int)n, op, name, sh, (long long)params,
                   saved ? cli_fmt_bytes(saved, sb, sizeof sb) : "-");
        }
    }
    remat_mem_stats pred;
    if (remat_session_predict(s, &pred) != REMAT_OK) goto fail;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", model);
        cJSON_AddNumberToObject(o, "batch", (double)batch);
        cJSON_AddNumberToObject(o, "parameters", (double)total_params);
        cJSON_AddNumberToObject(o, "saved_bytes", (double)total_saved);
        cJSON_AddStringToObject(o, "optimizer", optim);
        cJSON *pk = cJSON_AddObjectToObject(o, "predicted_peak_bytes");
        for (int i = 0; i < REMAT_MEM_COUNT; i++) cJSON_AddNumberToObject(pk, remat_mem_str((remat_mem)i), (double)pred.peak[i]);
        cli_json_print(o);
    } else {
        char b[32];
        char in[64];
        printf("\nmodel %s, batch %lld, input %s\n", model, (long long)batch, cli_shape_str(g, m.input, in, sizeof in));
        printf("parameters: %lld (%s)\n", (long long)total_params, cli_fmt_bytes((size_t)total_params * 4, b, sizeof b));
        printf("kept for backward: %s\n", cli_fmt_bytes(total_saved, b, sizeof b));
        printf("predicted peak of a training step (store everything, %s%s):\n", optim,
               has_optim ? "'s state counted" : ": no optimizer state");
        for (int i = 0; i < REMAT_MEM_COUNT; i++)
            printf("  %-16s %s\n", remat_mem_str((remat_mem)i), cli_fmt_bytes(pred.peak[i], b, sizeof b));
    }
    rc = 0;
    goto done;
fail:
    cli_fail("%s", remat_last_error());
done:
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return rc;
}
