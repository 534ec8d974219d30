/* cmd_bench.c: `remat bench`: one training step per strategy, measured side
 * by side in one run. Every strategy gets its own session on the same
 * synthetic batch and weights; rounds interleave the strategies so that
 * machine noise hits them alike. Reports predicted and measured peak per
 * strategy, the median step time, and ratios against `all`. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static void help(void) {
    printf("usage: remat bench [options]\n"
           "\n"
           "  --model NAME        mlp | cnn | heavy | heavy-mul (default cnn)\n"
           "  --batch B           batch size (default 64)\n"
           "  --data NAME         input shape of: fashion-mnist | mnist | cifar10 (default fashion-mnist)\n"
           "  --strategies LIST   comma-separated strategies (default all,manual,sqrt)\n"
           "  --budget SIZE       also run `optimal` within this budget (repeatable)\n"
           "  --steps N           timed steps per strategy (default 10)\n"
           "  --warmup N          untimed steps first (default 2)\n"
           "  --threads T         kernel threads (default: one per core)\n"
           "  --json              one JSON object per strategy\n"
           "  --help              this text\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define MAX_STRATEGIES 8

int cmd_bench(int argc, char **argv) {
    const char *model = "cnn", *data = "fashion-mnist";
    char list[256] = "all,manual,sqrt";
    int64_t batch = 64, steps = 10, warmup = 2, threads = 0;
    int json = 0;
    remat_strategy strat[MAX_STRATEGIES];
    size_t budgets[MAX_STRATEGIES] = {0}, extra_budget[MAX_STRATEGIES];
    int ns = 0, nb = 0;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"batch", required_argument, 0, 'b'},
        {"data", required_argument, 0, 'd'},    {"strategies", required_argument, 0, 's'},
        {"steps", required_argument, 0, 'n'},   {"warmup", required_argument, 0, 'w'},
        {"threads", required_argument, 0, 't'}, {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},          {"budget", required_argument, 0, 'B'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
        int bad = 0;
        switch (c) {
        case 'm': model = optarg; break;
        case 'd': data = optarg; break;
        case 's': bad = strlen(optarg) >= sizeof list; if (!bad) strcpy(list, optarg); break;
        case 'b': bad = cli_parse_i64(optarg, &batch) || batch < 1; break;
        case 'n': bad = cli_parse_i64(optarg, &steps) || steps < 1; break;
        case 'w': bad = cli_parse_i64(optarg, &warmup) || warmup < 0; break;
        case 't': bad = cli_parse_i64(optarg, &threads) || threads < 0 || threads > 1024; break;
        case 'j': json = 1; break;
        case 'B':
            if (nb == MAX_STRATEGIES) return cli_usage_error("bench", "at most %d budgets", MAX_STRATEGIES);
            bad = cli_parse_size(optarg, &extra_budget[nb]) || extra_budget[nb] == 0;
            nb++;
            break;
        case 'h': help(); return 0;
        case ':': return cli_usage_error("bench", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("bench", "unknown option '%s'", argv[optind - 1]);
        }
        if (bad) return cli_usage_error("bench", "bad value '%s' for --%s", optarg, opts[idx].name);
    }
    if (optind < argc) return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);

    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (ns == MAX_STRATEGIES) return cli_usage_error("bench", "at most %d strategies", MAX_STRATEGIES);
        if (remat_strategy_parse(tok, &strat[ns]) != REMAT_OK) return cli_usage_error("bench", "%s", remat_last_error());
        ns++;
    }
    for (int i = 0; i < nb; i++) {
        if (ns == MAX_STRATEGIES) return cli_usage_error("bench", "at most %d runs", MAX_STRATEGIES);
        strat[ns] = REMAT_STRATEGY_OPTIMAL;
        budgets[ns++] = extra_budget[i];
    }
    if (ns == 0) return cli_usage_error("bench", "no strategy given");
    remat_model_opts mo;
    remat_model_opts_default(&mo);
    mo.name = model;
    mo.batch = batch;
    if (cli_data_shape(data, &mo.channels, &mo.height, &mo.width))
        return cli_usage_error("bench", "unknown data set '%s' (known: fashion-mnist, mnist, cifar10)", data);

    int rc = 1;
    remat_graph *g = NULL;
    remat_session *s[MAX_STRATEGIES] = {0};
    double *times = calloc((size_t)(ns * steps), sizeof *times);
    float *x = NULL;
    int32_t *y = NULL;
    remat_model m;
    if (!times) goto fail;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &mo, &m) != REMAT_OK) goto fail;
    int64_t xd[REMAT_MAX_DIMS], nx = 1, yd[REMAT_MAX_DIMS], ny = 1;
    for (int i = 0, nd = remat_node_shape(g, m.input, xd); i < nd; i++) nx *= xd[i];
    for (int i = 0, nd = remat_node_shape(g, m.labels, yd); i < nd; i++) ny *= yd[i];
    x = malloc((size_t)nx * sizeof *x);
    y = malloc((size_t)ny * sizeof *y);
    if (!x || !y) goto fail;
    int float_target = strncmp(model, "heavy", 5) == 0;
    for (int64_t i = 0; i < nx; i++) x[i] = float_target ? 1.0f : (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (int64_t i = 0; i < ny; i++) {
        if (float_target) ((float *)y)[i] = 0.5f;
        else y[i] = (int32_t)((i * 7) % 10);
    }
    for (int k = 0; k < ns; k++) {
        remat_session_opts so;
        remat_session_opts_default(&so);
        so.threads = (int)threads;
        so.strategy = strat[k];
        so.budget = budgets[k];
        remat_cost_model cm;
        const char *cost_used = NULL;
        so.cost_model = cli_cost_model(&cm, NULL, &cost_used);
        if (remat_session_create(&s[k], g, m.loss, &so) != REMAT_OK) goto fail;
        remat_optim_opts oo;
        remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
        oo.momentum = 0.9f;
        oo.lr = float_target ? 1e-9f : 1e-3f;
        if (remat_session_set_optimizer(s[k], &oo) != REMAT_OK) goto fail;
        remat_session_bind(s[k], m.input, x);
        remat_session_bind(s[k], m.labels, y);
    }
    if (!json)
        fprintf(stderr, "benchmarking %s, batch %lld: %d strategies, %lld warm-up + %lld timed steps each\n", model,
                (long long)batch, ns, (long long)warmup, (long long)steps);
    for (int64_t r = 0; r < warmup + steps; r++)
        for (int k = 0; k < ns; k++) {
            float loss;
            double t0 = now_s();
            if (remat_session_step(s[k], &loss) != REMAT_OK || remat_session_update(s[k]) != REMAT_OK) goto fail;
            if (r >= warmup) times[k * steps + (r - warmup)] = now_s() - t0;
        }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double base_t = 0;
    size_t base_act = 0, base_total = 0;
    if (!json)
        printf("%-20s %14s %14s %14s %14s %10s %9s %9s %9s\n", "strategy", "predicted", "measured", "activations",
               "recomputed", "step (s)", "time/all", "act/all", "peak/all");
    for (int k = 0; k < ns; k++) {
        remat_mem_stats meas;
        remat_plan_summary p;
        remat_session_mem(s[k], &meas);
        if (remat_session_plan(s[k], &p) != REMAT_OK) goto fail;
        qsort(times + k * steps, (size_t)steps, sizeof(double), cmp_double);
        double med = times[k * steps + steps / 2];
        if (k == 0) base_t = med, base_act = meas.peak[REMAT_MEM_ACT], base_total = meas.peak[REMAT_MEM_TOTAL];
        double rt = med / base_t, ra = base_act ? (double)meas.peak[REMAT_MEM_ACT] / (double)base_act : 0,
               rp = (double)meas.peak[REMAT_MEM_TOTAL] / (double)base_total;
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", model);
            cJSON_AddNumberToObject(o, "batch", (double)batch);
            cJSON_AddStringToObject(o, "strategy", remat_strategy_str(strat[k]));
            if (budgets[k]) cJSON_AddNumberToObject(o, "budget_bytes", (double)budgets[k]);
            cJSON_AddNumberToObject(o, "predicted_peak_bytes", (double)p.predicted.peak[REMAT_MEM_TOTAL]);
            cJSON_AddNumberToObject(o, "measured_peak_bytes", (double)meas.peak[REMAT_MEM_TOTAL]);
            cJSON_AddNumberToObject(o, "activation_bytes", (double)meas.peak[REMAT_MEM_ACT]);
            cJSON_AddNumberToObject(o, "recomputations", (double)p.recomputations);
            cJSON_AddNumberToObject(o, "median_step_seconds", med);
            cJSON_AddNumberToObject(o, "time_ratio_vs_first", rt);
            cJSON_AddNumberToObject(o, "activation_ratio_vs_first", ra);
            cJSON_AddNumberToObject(o, "peak_ratio_vs_first", rp);
            cJSON_AddNumberToObject(o, "process_peak_rss_bytes", (double)ru.ru_maxrss * 1024.0);
            char *t = cJSON_PrintUnformatted(o);
            printf("%s\n", t);
            cJSON_free(t);
            cJSON_Delete(o);
        } else {
            char name[48];
            if (budgets[k]) {
                char b[32];
                snprintf(name, sizeof name, "optimal@%s", cli_fmt_bytes(budgets[k], b, sizeof b));
            } else {
                snprintf(name, sizeof name, "%s", remat_strategy_str(strat[k]));
            }
            printf("%-20s %14zu %14zu %14zu %14lld %10.4f %9.3f %9.3f %9.3f\n", name,
                   p.predicted.peak[REMAT_MEM_TOTAL], meas.peak[REMAT_MEM_TOTAL], meas.peak[REMAT_MEM_ACT],
                   (long long)p.recomputations, med, rt, ra, rp);
        }
    }
    if (!json)
        printf("(bytes; ratios against the first strategy; process peak RSS %.1f MiB for all sessions together)\n",
               (double)ru.ru_maxrss / 1024.0);
    rc = 0;
    goto done;
fail:
    cli_fail("%s", remat_last_error());
done:
    for (int k = 0; k < ns; k++) remat_session_destroy(s[k]);
    remat_graph_destroy(g);
    free(times), free(x), free(y);
    return rc;
}
