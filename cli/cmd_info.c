/* cmd_info.c: `remat info`: the model as a table, one row per node: output
 * shape, parameters it owns, and bytes its output keeps for backward under
 * the store-all schedule; then totals and the predicted step peak. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <string.h>

static void help(void) {
    printf("usage: remat info [options]\n"
           "\n"
           "  --model NAME    mlp | cnn | heavy | heavy-mul (default cnn)\n"
           "  --batch B       batch size (default 64)\n"
           "  --data NAME     input shape of this data set: fashion-mnist | mnist | cifar10\n"
           "                  (default fashion-mnist)\n"
           "  --json          one JSON object per node, then one with the totals\n"
           "  --help          this text\n");
}

static void shape_str(const remat_graph *g, remat_node n, char *buf, size_t cap) {
    int64_t d[REMAT_MAX_DIMS];
    int nd = remat_node_shape(g, n, d);
    size_t u = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < nd && u < cap; i++) u += (size_t)snprintf(buf + u, cap - u, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (u < cap) snprintf(buf + u, cap - u, ")");
}

int cmd_info(int argc, char **argv) {
    const char *model = "cnn", *data = "fashion-mnist";
    int64_t batch = 64;
    int json = 0;
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"data", required_argument, 0, 'd'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'd': data = optarg; break;
        case 'b':
            if (cli_parse_i64(optarg, &batch) || batch < 1)
                return cli_usage_error("info", "bad value '%s' for --batch", optarg);
            break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        case ':': return cli_usage_error("info", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("info", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("info", "unexpected argument '%s'", argv[optind]);
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    mo.name = model;
    mo.batch = batch;
    if (cli_data_shape(data, &mo.channels, &mo.height, &mo.width))
        return cli_usage_error("info", "unknown data set '%s' (known: fashion-mnist, mnist, cifar10)", data);
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    int rc = 1;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &mo, &m) != REMAT_OK) goto fail;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = 1;
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
        shape_str(g, n, sh, sizeof sh);
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "node", n);
            cJSON_AddStringToObject(o, "op", op);
            cJSON_AddStringToObject(o, "name", name);
            cJSON_AddStringToObject(o, "output", sh);
            cJSON_AddNumberToObject(o, "parameters", (double)params);
            cJSON_AddNumberToObject(o, "saved_bytes", (double)saved);
            char *t = cJSON_PrintUnformatted(o);
            printf("%s\n", t);
            cJSON_free(t);
            cJSON_Delete(o);
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
        cJSON *pk = cJSON_AddObjectToObject(o, "predicted_peak_bytes");
        for (int i = 0; i < REMAT_MEM_COUNT; i++) cJSON_AddNumberToObject(pk, remat_mem_str((remat_mem)i), (double)pred.peak[i]);
        char *t = cJSON_PrintUnformatted(o);
        printf("%s\n", t);
        cJSON_free(t);
        cJSON_Delete(o);
    } else {
        char b[32];
        printf("\nmodel %s, batch %lld, input %lldx%lldx%lld\n", model, (long long)batch, (long long)mo.channels,
               (long long)mo.height, (long long)mo.width);
        printf("parameters: %lld (%s)\n", (long long)total_params, cli_fmt_bytes((size_t)total_params * 4, b, sizeof b));
        printf("kept for backward: %s\n", cli_fmt_bytes(total_saved, b, sizeof b));
        printf("predicted peak of a training step (store everything):\n");
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
