/* cmd_bench.c: `remat bench`: training steps per strategy, measured side by
 * side in one run.
 *
 * This file holds the options, the rows they ask for and the dispatch: one
 * forked process per row (bench_forked.c, the rows' own work in
 * bench_child.c), or, under mpirun, the rows one after the other on every
 * rank (bench_ranks.c). What the parts share is bench.h.
 */
#include "bench.h"

#include <getopt.h>
#include <string.h>
#include <unistd.h>

static void help(void) {
    printf("usage: remat bench [options]\n"
           "\n"
           "  --data NAME         input shape of: fashion-mnist | mnist | cifar10 | synthetic\n"
           "                      (default: the model's own); batches are always synthetic\n"
           "  --strategies LIST   comma-separated strategies (default all,sqrt; also manual)\n"
           "  --budget SIZE       also run `optimal` within this budget (repeatable)\n"
           "  --steps N           timed steps per strategy (default 10)\n"
           "  --warmup N          untimed steps first (default 2)\n"
           "  --save-init FILE    also write the initial weights (the same in every row) as\n"
           "                      safetensors, e.g. for PyTorch to start from\n"
           "  --profile           also time every op (forward, recompute, backward, free)\n"
           "                      over the timed steps and print where each row's time goes\n"
           "  --prefetch          cuda: copy each step's batch to the device while the step\n"
           "                      before it computes, into a block of the batch's bytes that\n"
           "                      the plan counts (communication)\n"
           "  --json              one JSON object per row (fields in the README)\n"
           "  --help              this text\n"
           "  --micro-batch M, --bucket SIZE, --no-overlap: as for remat train; under\n"
           "                      mpirun the rows run one after the other in each rank's\n"
           "                      process (peak RSS is then the process's so far)\n"
           "\n"
           "Each row runs in its own process, so its peak RSS is its own; the rows take\n"
           "their steps in interleaved rounds, one process computing at a time. With\n"
           "--device cuda each row also reports the bytes it holds on the GPU and the\n"
           "drop in the driver's free memory (cudaMemGetInfo) over its run.\n");
    cli_session_help(0);
    printf("\n");
    cli_model_help();
}

/* Options, rows and the model's check, on this rank: 0 or the exit status
 * after printing why. */
/* The rows: one per strategy of --strategies, then optimal at each
 * --budget (nb of them). */
static int rows_of(bench_args *b, const size_t *extra_budget, int nb) {
    row *rows = b->rows;
    memset(rows, 0, sizeof b->rows);
    for (char *tok = strtok(b->list, ","); tok; tok = strtok(NULL, ",")) {
        if (b->ns == MAX_ROWS) return cli_usage_error("bench", "at most %d rows", MAX_ROWS);
        if (remat_strategy_parse(tok, &rows[b->ns].strategy) != REMAT_OK)
            return cli_usage_error("bench", "%s", remat_last_error());
        b->ns++;
    }
    for (int i = 0; i < nb; i++) {
        if (b->ns == MAX_ROWS) return cli_usage_error("bench", "at most %d rows (strategies and budgets)", MAX_ROWS);
        rows[b->ns].strategy = REMAT_STRATEGY_OPTIMAL;
        rows[b->ns++].budget = extra_budget[i];
    }
    if (b->ns == 0) return cli_usage_error("bench", "no strategy given");
    return 0;
}

static int parse(bench_args *b, const cli_dist *d, int argc, char **argv) {
    size_t extra_budget[MAX_ROWS];
    int nb = 0;
    snprintf(b->list, sizeof b->list, "all,sqrt");
    b->steps = 10, b->warmup = 2;
    cli_model_args ma;
    cli_model_args_init(&ma);
    cli_session_args sa;
    cli_session_args_init(&sa);
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         CLI_SESSION_OPTIONS,
                                         CLI_DIST_OPTIONS,
                                         {"data", required_argument, 0, 'd'},
                                         {"strategies", required_argument, 0, 's'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"warmup", required_argument, 0, 'w'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {"budget", required_argument, 0, 'B'},
                                         {"save-init", required_argument, 0, 'W'},
                                         {"profile", no_argument, 0, 'P'},
                                         {"prefetch", no_argument, 0, 'F'},
                                         {0, 0, 0, 0}};
    cli_opts co = {.cmd = "bench", .ma = &ma, .sa = &sa, .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        int bad = 0;
        switch (c) {
        case 'd': b->data = optarg; break;
        case 's':
            bad = strlen(optarg) >= sizeof b->list;
            if (!bad) strcpy(b->list, optarg);
            break;
        case 'n': bad = cli_parse_i64(optarg, &b->steps) || b->steps < 1 || b->steps > 1000000; break;
        case 'w': bad = cli_parse_i64(optarg, &b->warmup) || b->warmup < 0 || b->warmup > 1000000; break;
        case 'j': b->json = 1; break;
        case 'P': b->profile = 1; break;
        case 'F': b->prefetch = 1; break;
        case 'W': b->init_out = optarg; break;
        case 'B':
            if (nb == MAX_ROWS) return cli_usage_error("bench", "at most %d budgets", MAX_ROWS);
            bad = cli_parse_size(optarg, &extra_budget[nb]) || extra_budget[nb] == 0;
            nb++;
            break;
        case 'h': b->help = 1; return 0;
        }
        if (bad) return cli_bad_value(&co, optarg, "");
    }
    if (co.rc) return co.rc;
    if (b->data && strncmp(b->data, "tokens:", 7) == 0)
        return cli_usage_error("bench", "bench runs on synthetic batches; give a data set's name for its shape only");
    int r = rows_of(b, extra_budget, nb);
    if (r) return r;
    config *cf = &b->cf;
    /* The parent does not touch the device: a CUDA context does not survive
     * fork, so every row's process makes its own (and checks the device). */
    sa.check_device = 0;
    int u = cli_session_opts(&sa, "bench", &cf->so, &cf->cm, NULL);
    if (u) return u;
    u = cli_model_opts(&ma, b->data, "bench", &cf->mo);
    if (u) return u;
    /* --batch is the step's global batch; the graph is one micro-batch */
    cf->batch = cf->mo.batch;
    if ((u = cli_dist_micro_batch(d, &sa, cf->batch, "bench", &cf->mo.batch))) return u;
    if (ma.batch > 0) ma.batch = cf->mo.batch; /* what cli_model_check finds in the graph */
    cf->so.micro_batches = cf->batch / cf->mo.batch;
    if (cf->so.threads == 0) cf->so.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    /* the model must build, with every option showing, before any row starts */
    remat_graph *pg = NULL;
    remat_model pm;
    if (remat_graph_create(&pg) != REMAT_OK || remat_model_build(pg, &cf->mo, &pm) != REMAT_OK) {
        remat_graph_destroy(pg);
        return cli_fail("%s", remat_last_error());
    }
    u = cli_model_check(&ma, pg, &pm, "bench");
    remat_graph_destroy(pg);
    return u;
}

/* --prefetch into every row's options: the GPU's only (the CPU has no
 * transfer to overlap). */
static int prefetch_opt(bench_args *b) {
    if (b->prefetch && b->cf.so.device != REMAT_DEVICE_CUDA)
        return cli_usage_error("bench", "--prefetch is for --device cuda");
    b->cf.so.prefetch = b->prefetch;
    return 0;
}

int cmd_bench(int argc, char **argv) {
    cli_dist d;
    if (cli_dist_begin(&d)) return 1;
    bench_args b;
    memset(&b, 0, sizeof b);
    int rc = parse(&b, &d, argc, argv);
    if (!rc && !b.help) rc = prefetch_opt(&b);
    if (b.help && !rc) {
        if (d.rank == 0) help();
    } else if (!(rc = cli_dist_agree(&d, rc))) {
        /* MPI does not survive a fork: under mpirun the rows run here */
        rc = strcmp(remat_comm_kind(d.comm), "mpi") == 0 ? bench_ranks(&b, &d) : bench_forked(&b);
    }
    return cli_dist_end(&d, rc);
}
