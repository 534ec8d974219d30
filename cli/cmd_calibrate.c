/* cmd_calibrate.c: `remat calibrate`: measure each op family's throughput,
 * and the shape classes of given models, on this machine and cache them,
 * so that plans are costed in seconds. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The bench table's rows (remat bench, bench/torch/compare.py). */
static const struct {
    const char *model;
    int64_t batch, context;
} zoo[] = {{"cnn", 128, 0},        {"resnet18", 32, 0}, {"resnet50", 16, 0},
           {"densenet-bc", 64, 0}, {"gpt2", 4, 256},    {"siamese-resnet50", 8, 0}};

static void help(void) {
    printf("usage: remat calibrate [--out FILE] [--threads T] [--steps N] [--zoo] [model options]\n"
           "       remat calibrate --device cuda\n"
           "\n"
           "Measures this machine so that `remat plan`, `train` and `bench` cost plans in\n"
           "seconds instead of FLOPs:\n"
           "  - each op family's throughput (linear, conv, norm, pointwise, pool, copy,\n"
           "    loss), from small graphs: a few seconds; the fallback for ops never measured;\n"
           "  - with --model (and its options) or --zoo: every shape class of the model's\n"
           "    ops (an op with its input and output shapes and attributes), each node's\n"
           "    forward and backward timed during --steps store-all training steps, its\n"
           "    recomputation during --steps sqrt steps (a recomputation can be cheaper:\n"
           "    BatchNorm's reuses its statistics), and per parameter the rest of a\n"
           "    step (zeroing the gradients, the optimizer update). Classes already in\n"
           "    FILE (measured with the same threads) are kept, so models can be\n"
           "    calibrated one by one;\n"
           "  - the host link offload copies over (here a memcpy between two blocks: what\n"
           "    the CPU's offload does), each way, 64 KiB to 64 MiB: bandwidth and\n"
           "    latency per copy, which plans with --host-budget then cost copies at.\n"
           "With --device cuda: the GPU's host link alone (pinned memory over PCIe or\n"
           "NVLink, on the copy stream offload uses), printed as the --pcie-bandwidth and\n"
           "--pcie-latency to plan with (the families are measured on the CPU only).\n"
           "\n"
           "  --out FILE    default: $REMAT_COST_MODEL, else ~/.cache/remat/cost-model.json\n"
           "  --threads T   kernel threads (default: one per core); plans use a model\n"
           "                only with the thread count it was measured with\n"
           "  --steps N     timed training steps per model (default 3)\n"
           "  --zoo         the bench table's models at its sizes: cnn b128, resnet18 b32,\n"
           "                resnet50 b16, densenet-bc b64, gpt2 context 256 b4,\n"
           "                siamese-resnet50 b8 (a few minutes on 2 cores)\n"
           "\n");
    cli_model_help();
}

/* Measures device d's host link; prints it, and keeps it in m (when not
 * NULL). */
static int calibrate_link(remat_device d, remat_cost_model *m) {
    double bw, lat;
    fprintf(stderr, "timing the host link of the %s (64 KiB to 64 MiB copies, each way)...\n", remat_device_str(d));
    if (remat_calibrate_link(d, &bw, &lat) != REMAT_OK) return cli_fail("%s", remat_last_error());
    printf("host link  %8.2f GB/s each way, %.2f us per copy", bw / 1e9, lat * 1e6);
    if (m && remat_cost_model_set_host_link(m, bw, lat) != REMAT_OK) return cli_fail("\n%s", remat_last_error());
    if (m) printf("\n");
    else printf(": plan with --pcie-bandwidth %.3g --pcie-latency %.3g\n", bw / 1e9, lat * 1e6);
    return 0;
}

/* Keeps in m what the file at `out` measured with the same threads on the
 * same device (its shape classes and update; old is scratch). */
static void keep_old(remat_cost_model *m, remat_cost_model *old, const char *out) {
    struct stat sb;
    if (stat(out, &sb) != 0 || remat_cost_model_load(old, out) != REMAT_OK ||
        remat_cost_model_threads(old) != remat_cost_model_threads(m) ||
        remat_cost_model_device(old) != remat_cost_model_device(m))
        return;
    /* m has no classes yet, and old's passed the load's check */
    int n = remat_cost_model_n_ops(old);
    remat_op_time t;
    for (int i = 0; i < n; i++)
        if (remat_cost_model_op(old, i, &t) != REMAT_OK || remat_cost_model_set_op(m, &t) != REMAT_OK) return;
    for (int k = REMAT_OPTIM_SGD; k <= REMAT_OPTIM_ADAMW; k++)
        remat_cost_model_set_update_s(m, (remat_optim_kind)k, remat_cost_model_update_s(old, (remat_optim_kind)k));
    if (n) printf("kept %d shape classes from %s\n", n, out);
}

/* Measures the classes of one model into m; prints one line. */
static int calibrate_model(remat_cost_model *m, const remat_model_opts *mo, int steps) {
    remat_graph *g = NULL;
    remat_model md;
    int before = remat_cost_model_n_ops(m);
    double t0 = cli_now();
    fprintf(stderr, "  %s batch %lld...\n", mo->name, (long long)mo->batch);
    remat_status st = remat_graph_create(&g);
    if (st == REMAT_OK) st = remat_model_build(g, mo, &md);
    if (st == REMAT_OK) st = remat_calibrate_graph(m, g, md.loss, steps);
    remat_graph_destroy(g);
    if (st != REMAT_OK) return cli_fail("%s: %s", mo->name, remat_last_error());
    printf("%-18s batch %-4lld %4d new shape classes, %.1f s\n", mo->name, (long long)mo->batch,
           remat_cost_model_n_ops(m) - before, cli_now() - t0);
    return 0;
}

/* Calibrates the CPU's op families and link (then, with mo, that model's
 * shape classes; with with_zoo, the zoo's), keeping what out held of
 * other shape classes, and writes the model to out. */
static int calibrate_cpu(const char *out, int threads, int steps, const remat_model_opts *mo, int with_zoo) {
    fprintf(stderr, "calibrating the op families (a few seconds)...\n");
    remat_cost_model *m = NULL, *old = NULL;
    int rc = 0;
    if (remat_cost_model_create(&m) != REMAT_OK || remat_cost_model_create(&old) != REMAT_OK)
        rc = cli_fail("%s", remat_last_error());
    if (!rc && remat_calibrate(m, threads) != REMAT_OK) rc = cli_fail("%s", remat_last_error());
    for (int f = 0; !rc && f < REMAT_FAMILY_COUNT; f++)
        printf("%-10s %8.2f GFLOP/s\n", remat_family_str((remat_family)f),
               remat_cost_model_flops_per_s(m, (remat_family)f) / 1e9);
    if (!rc) keep_old(m, old, out);
    if (!rc) rc = calibrate_link(REMAT_DEVICE_CPU, m);
    if (!rc && (mo || with_zoo))
        fprintf(stderr, "timing the shape classes (%lld steps per model)...\n", (long long)steps);
    if (!rc && mo) rc = calibrate_model(m, mo, steps);
    for (size_t i = 0; !rc && with_zoo && i < sizeof zoo / sizeof zoo[0]; i++) {
        remat_model_opts z;
        remat_model_opts_default(&z);
        if (remat_model_opts_for(&z, zoo[i].model) != REMAT_OK) {
            rc = cli_fail("%s", remat_last_error());
            break;
        }
        z.batch = zoo[i].batch;
        if (zoo[i].context) z.context = zoo[i].context;
        rc = calibrate_model(m, &z, steps);
    }
    if (!rc && remat_cost_model_update_s(m, REMAT_OPTIM_SGD) > 0)
        printf("update     %8.3f ns per parameter (SGD with momentum), %.3f ns (AdamW), zeroing included\n",
               remat_cost_model_update_s(m, REMAT_OPTIM_SGD) * 1e9,
               remat_cost_model_update_s(m, REMAT_OPTIM_ADAMW) * 1e9);
    if (!rc && remat_cost_model_save(m, out) != REMAT_OK) rc = cli_fail("%s", remat_last_error());
    if (!rc) printf("written to %s (%d shape classes)\n", out, remat_cost_model_n_ops(m));
    remat_cost_model_destroy(m);
    remat_cost_model_destroy(old);
    return rc;
}

int cmd_calibrate(int argc, char **argv) {
    const char *out = NULL;
    int64_t threads = 0, steps = 3;
    int with_zoo = 0, with_model = 0;
    remat_device device = REMAT_DEVICE_CPU;
    cli_model_args ma;
    cli_model_args_init(&ma);
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         {"out", required_argument, 0, 'o'},
                                         {"threads", required_argument, 0, 't'},
                                         {"steps", required_argument, 0, 's'},
                                         {"zoo", no_argument, 0, 'z'},
                                         {"device", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    for (int i = 1; i < argc; i++) with_model |= strncmp(argv[i], "--model", 7) == 0;
    cli_opts co = {.cmd = "calibrate", .ma = &ma, .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        switch (c) {
        case 'o': out = optarg; break;
        case 't':
            if (cli_parse_i64(optarg, &threads) || threads < 0 || threads > 1024) return cli_bad_value(&co, optarg, "");
            break;
        case 's':
            if (cli_parse_i64(optarg, &steps) || steps < 1 || steps > 1000) return cli_bad_value(&co, optarg, "");
            break;
        case 'z': with_zoo = 1; break;
        case 'd':
            if (remat_device_parse(optarg, &device) != REMAT_OK) return cli_bad_value(&co, optarg, "");
            break;
        case 'h': help(); return 0;
        }
    }
    if (co.rc) return co.rc;
    if (device != REMAT_DEVICE_CPU) {
        if (with_model || with_zoo || out)
            return cli_usage_error("calibrate",
                                   "--device %s measures the host link "
                                   "alone: no --model, --zoo or --out",
                                   remat_device_str(device));
        return calibrate_link(device, NULL);
    }
    remat_model_opts mo;
    if (with_model) {
        int u = cli_model_opts(&ma, NULL, "calibrate", &mo);
        if (u) return u;
    }
    char buf[1100];
    if (!out) out = cli_cost_model_path(buf, sizeof buf, 1);
    if (!out) return cli_fail("no HOME or XDG_CACHE_HOME: give --out FILE");
    return calibrate_cpu(out, (int)threads, (int)steps, with_model ? &mo : NULL, with_zoo);
}
