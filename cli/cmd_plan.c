/* cmd_plan.c: `remat plan`: the schedule a strategy gives a model's
 * training step: predicted peak per memory category, what is recomputed and
 * what that costs; --verbose lists the instructions. Nothing is trained. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <string.h>

static void help(void) {
    printf("usage: remat plan [options]\n"
           "\n"
           "  --model NAME      mlp | cnn | heavy | heavy-mul (default cnn)\n"
           "  --batch B         batch size (default 64)\n"
           "  --data NAME       input shape of this data set: fashion-mnist | mnist | cifar10\n"
           "                    (default fashion-mnist)\n"
           "  --strategy S      all | manual | sqrt (default all)\n"
           "  --budget SIZE     fail unless the step's peak fits, e.g. 512MiB, 2GiB, 1000000\n"
           "  --optim NAME      count this optimizer's state: none | sgd | adamw (default sgd,\n"
           "                    with momentum)\n"
           "  --threads T       kernel threads the plan is for (default: one per core)\n"
           "  --verbose         list every instruction of the step\n"
           "  --json            one JSON object (with the instructions if --verbose)\n"
           "  --help            this text\n");
}

int cmd_plan(int argc, char **argv) {
    const char *model = "cnn", *data = "fashion-mnist", *optim = "sgd", *strategy = "all";
    int64_t batch = 64, threads = 0;
    size_t budget = 0;
    int json = 0, verbose = 0;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},    {"batch", required_argument, 0, 'b'},
        {"data", required_argument, 0, 'd'},     {"strategy", required_argument, 0, 's'},
        {"budget", required_argument, 0, 'B'},   {"optim", required_argument, 0, 'o'},
        {"threads", required_argument, 0, 't'},  {"verbose", no_argument, 0, 'v'},
        {"json", no_argument, 0, 'j'},           {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, ":hv", opts, &idx)) != -1) {
        int bad = 0;
        switch (c) {
        case 'm': model = optarg; break;
        case 'd': data = optarg; break;
        case 's': strategy = optarg; break;
        case 'o': optim = optarg; break;
        case 'b': bad = cli_parse_i64(optarg, &batch) || batch < 1; break;
        case 't': bad = cli_parse_i64(optarg, &threads) || threads < 0 || threads > 1024; break;
        case 'B': bad = cli_parse_size(optarg, &budget) || budget == 0; break;
        case 'v': verbose = 1; break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        case ':': return cli_usage_error("plan", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("plan", "unknown option '%s'", argv[optind - 1]);
        }
        if (bad) return cli_usage_error("plan", "bad value '%s' for --%s", optarg, opts[idx].name);
    }
    if (optind < argc) return cli_usage_error("plan", "unexpected argument '%s'", argv[optind]);
    remat_session_opts so;
    remat_session_opts_default(&so);
    if (remat_strategy_parse(strategy, &so.strategy) != REMAT_OK)
        return cli_usage_error("plan", "%s", remat_last_error());
    so.budget = budget;
    so.threads = (int)threads;
    remat_optim_opts oo;
    int has_optim = strcmp(optim, "none") != 0;
    if (strcmp(optim, "sgd") == 0) {
        remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
        oo.momentum = 0.9f;
    } else if (strcmp(optim, "adamw") == 0) {
        remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
    } else if (has_optim) {
        return cli_usage_error("plan", "unknown optimizer '%s' (known: none, sgd, adamw)", optim);
    }
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    mo.name = model;
    mo.batch = batch;
    if (cli_data_shape(data, &mo.channels, &mo.height, &mo.width))
        return cli_usage_error("plan", "unknown data set '%s' (known: fashion-mnist, mnist, cifar10)", data);

    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    int rc = 1;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &mo, &m) != REMAT_OK) goto fail;
    if (remat_session_create(&s, g, m.loss, &so) != REMAT_OK) goto fail;
    if (has_optim && remat_session_set_optimizer(s, &oo) != REMAT_OK) goto fail;
    remat_plan_summary p;
    if (remat_session_plan(s, &p) != REMAT_OK) goto fail;
    double total_f = p.flops + p.extra_flops;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", model);
        cJSON_AddNumberToObject(o, "batch", (double)batch);
        cJSON_AddStringToObject(o, "strategy", strategy);
        if (budget) cJSON_AddNumberToObject(o, "budget_bytes", (double)budget);
        cJSON *pk = cJSON_AddObjectToObject(o, "predicted_peak_bytes");
        for (int i = 0; i < REMAT_MEM_COUNT; i++)
            cJSON_AddNumberToObject(pk, remat_mem_str((remat_mem)i), (double)p.predicted.peak[i]);
        cJSON_AddNumberToObject(o, "kept_boundaries", (double)p.kept_boundaries);
        cJSON_AddNumberToObject(o, "recomputed_nodes", (double)p.recomputed_nodes);
        cJSON_AddNumberToObject(o, "recomputations", (double)p.recomputations);
        cJSON_AddNumberToObject(o, "step_flops", p.flops);
        cJSON_AddNumberToObject(o, "extra_flops", p.extra_flops);
        cJSON_AddNumberToObject(o, "extra_flops_percent", p.flops > 0 ? 100.0 * p.extra_flops / p.flops : 0.0);
        cJSON_AddNumberToObject(o, "predicted_seconds", p.seconds);
        cJSON_AddNumberToObject(o, "extra_seconds", p.extra_seconds);
        if (verbose) {
            cJSON *arr = cJSON_AddArrayToObject(o, "instructions");
            for (int64_t i = 0; i < remat_session_schedule_length(s); i++) {
                remat_instr_info in;
                remat_session_schedule_instr(s, i, &in);
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "kind", in.kind);
                cJSON_AddNumberToObject(e, "node", in.node);
                cJSON_AddStringToObject(e, "op", in.op);
                if (*in.what) cJSON_AddStringToObject(e, "value", in.what);
                cJSON_AddItemToArray(arr, e);
            }
        }
        char *t = cJSON_PrintUnformatted(o);
        printf("%s\n", t);
        cJSON_free(t);
        cJSON_Delete(o);
    } else {
        char b[32];
        if (verbose) {
            for (int64_t i = 0; i < remat_session_schedule_length(s); i++) {
                remat_instr_info in;
                remat_session_schedule_instr(s, i, &in);
                const char *name = remat_node_name(g, in.node);
                printf("%6lld  %-9s %-8s node %d %s%s%s%s\n", (long long)i, in.kind, *in.what ? in.what : "",
                       (int)in.node, in.op, *name ? " '" : "", name, *name ? "'" : "");
            }
            printf("\n");
        }
        printf("model %s, batch %lld, strategy %s: %lld boundaries kept\n", model, (long long)batch, strategy,
               (long long)p.kept_boundaries);
        printf("predicted peak of a training step:\n");
        for (int i = 0; i < REMAT_MEM_COUNT; i++)
            printf("  %-16s %12zu B  %s\n", remat_mem_str((remat_mem)i), p.predicted.peak[i],
                   cli_fmt_bytes(p.predicted.peak[i], b, sizeof b));
        printf("recomputed: %lld nodes, %lld forward recomputations\n", (long long)p.recomputed_nodes,
               (long long)p.recomputations);
        printf("extra compute: %.4g GFLOP, %.1f%% of the step's %.4g GFLOP\n", p.extra_flops / 1e9,
               p.flops > 0 ? 100.0 * p.extra_flops / p.flops : 0.0, total_f / 1e9);
        printf("predicted step time (uncalibrated cost model): %.4g s, of which recomputation %.4g s\n",
               p.seconds, p.extra_seconds);
        if (budget)
            printf("budget %s: fits (%.1f%% used)\n", cli_fmt_bytes(budget, b, sizeof b),
                   100.0 * (double)p.predicted.peak[REMAT_MEM_TOTAL] / (double)budget);
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
