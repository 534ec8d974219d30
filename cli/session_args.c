/* session_args.c: the options every command that makes a session shares
 * (threads, seed, device, precision, TF32, cost model; strategy and budget where a
 * command plans one step; micro-batches and gradient buckets), the one
 * routine that turns them into remat_session_opts, and the ranks a
 * command runs on under mpirun (cli_dist). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_session_args_init(cli_session_args *a) {
    memset(a, 0, sizeof *a);
    a->seed = 42;
    a->strategy = "auto";
    a->device = "cpu";
    a->precision = "fp32";
    a->check_device = 1;
    a->pcie_gbps = a->pcie_us = -1;
}

/* A number up to max (nonzero: not one). */
static int parse_number(const char *arg, double *out, double max) {
    char *end;
    *out = strtod(arg, &end);
    return end == arg || *end || !(*out <= max);
}

int cli_session_arg(cli_session_args *a, int c, const char *arg, int *bad) {
    switch (c) {
    case CLI_OPT_THREADS: *bad = cli_parse_i64(arg, &a->threads) || a->threads < 0 || a->threads > 1024; return 1;
    case CLI_OPT_SEED: *bad = cli_parse_i64(arg, &a->seed) || a->seed < 0; return 1;
    case CLI_OPT_DEVICE: a->device = arg; return 1;
    case CLI_OPT_PRECISION: a->precision = arg; return 1;
    case CLI_OPT_TF32: a->tf32 = 1; return 1;
    case CLI_OPT_LEAST_WORKSPACE: a->least_workspace = 1; return 1;
    case CLI_OPT_COST_MODEL: a->cost_model = arg; return 1;
    case CLI_OPT_STRATEGY: a->strategy = arg; return 1;
    case CLI_OPT_BUDGET: *bad = cli_parse_size(arg, &a->budget) || a->budget == 0; return 1;
    case CLI_OPT_HOST_BUDGET: *bad = cli_parse_size(arg, &a->host_budget); return 1;
    case CLI_OPT_PCIE_BANDWIDTH: *bad = parse_number(arg, &a->pcie_gbps, 1e6) || !(a->pcie_gbps > 0); return 1;
    case CLI_OPT_PCIE_LATENCY: *bad = parse_number(arg, &a->pcie_us, 1e9) || !(a->pcie_us >= 0); return 1;
    case CLI_OPT_MICRO_BATCH: *bad = cli_parse_i64(arg, &a->micro_batch) || a->micro_batch < 1; return 1;
    case CLI_OPT_BUCKET: *bad = cli_parse_size(arg, &a->bucket) || a->bucket == 0; return 1;
    case CLI_OPT_NO_OVERLAP: a->no_overlap = 1; return 1;
    default: return 0;
    }
}

int cli_session_opts(const cli_session_args *a, const char *cmd, remat_session_opts *so, remat_cost_model **cmp,
                     const char **cost_used) {
    remat_session_opts_default(so);
    so->threads = (int)a->threads;
    so->seed = (uint64_t)a->seed;
    so->budget = a->budget;
    so->tf32 = a->tf32;
    so->least_workspace = a->least_workspace;
    so->bucket_bytes = a->bucket;
    so->reduce_after_backward = a->no_overlap;
    so->host_budget = a->host_budget;
    if (a->pcie_gbps > 0) so->host_bandwidth = a->pcie_gbps * 1e9;
    if (a->pcie_us >= 0) so->host_latency = a->pcie_us * 1e-6;
    if ((a->pcie_gbps >= 0 || a->pcie_us >= 0) && !a->host_budget)
        return cli_usage_error(cmd, "--pcie-bandwidth and --pcie-latency go with --host-budget");
    if (a->host_budget && !a->budget) return cli_usage_error(cmd, "--host-budget needs --budget");
    if (remat_strategy_parse(a->strategy, &so->strategy) != REMAT_OK)
        return cli_usage_error(cmd, "%s", remat_last_error());
    if (remat_device_parse(a->device, &so->device) != REMAT_OK) return cli_usage_error(cmd, "%s", remat_last_error());
    if (remat_precision_parse(a->precision, &so->precision) != REMAT_OK)
        return cli_usage_error(cmd, "%s", remat_last_error());
    if (a->tf32 && so->device != REMAT_DEVICE_CUDA) return cli_usage_error(cmd, "--tf32 is for --device cuda");
    if (a->least_workspace && so->device != REMAT_DEVICE_CUDA)
        return cli_usage_error(cmd, "--least-workspace is for --device cuda");
    if (a->check_device && remat_device_available(so->device) != REMAT_OK)
        return cli_fail("--device %s: %s", a->device, remat_last_error());
    remat_cost_model *cm = NULL;
    if (cmp && !*cmp && !(*cmp = cli_cost_model_new())) return cli_fail("%s", remat_last_error());
    if (cmp) cm = *cmp;
    if (a->cost_model && cm) {
        if (remat_cost_model_load(cm, a->cost_model) != REMAT_OK) return cli_fail("%s", remat_last_error());
        so->cost_model = cm;
        if (cost_used) *cost_used = a->cost_model;
    } else if (cm) {
        const char *used = NULL;
        so->cost_model = cli_cost_model(cm, NULL, &used);
        /* The cached calibration holds for one device and thread count:
         * elsewhere, plans are costed in FLOPs (an explicit --cost-model
         * that does not fit is refused by the session instead). */
        int threads = so->threads > 0 ? so->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        remat_device cd = remat_cost_model_device(cm);
        int ct = remat_cost_model_threads(cm);
        if (so->cost_model && (cd != so->device || (so->device == REMAT_DEVICE_CPU && ct != threads))) {
            fprintf(stderr,
                    "remat: the cached cost model %s was measured on the %s with %d threads, not the %s "
                    "with %d; costing in FLOPs (remat calibrate --threads %d measures this one)\n",
                    used, remat_device_str(cd), ct, remat_device_str(so->device), threads, threads);
            so->cost_model = NULL;
            used = NULL;
        }
        if (cost_used) *cost_used = used;
    }
    return 0;
}

void cli_session_help(int plans) {
    printf("  --device D          cpu | cuda: where tensors live and kernels run (default cpu;\n"
           "                      with cuda the budget is device bytes)\n"
           "  --precision P       fp32 | bf16: bf16 stores activations in bfloat16 and runs\n"
           "                      products on bf16-rounded inputs, as PyTorch's autocast;\n"
           "                      weights, gradients and optimizer state stay fp32\n"
           "                      (default fp32)\n"
           "  --tf32              cuda: TF32 tensor cores for float32 products (faster, about\n"
           "                      1e-3 relative error; off by default)\n"
           "  --least-workspace   cuda: each convolution takes cuDNN's deterministic algorithm\n"
           "                      that needs the least workspace, not the fastest: a lower\n"
           "                      smallest budget where workspaces set the peak, slower\n"
           "                      steps, other bits (off by default)\n"
           "  --threads T         CPU kernel threads (default: one per core)\n"
           "  --seed S            seed for initialization, data and dropout (default 42)\n");
    if (plans) {
        printf("  --strategy S        which activations to keep (default auto):\n");
        for (int s = 0; s < REMAT_STRATEGY_COUNT; s++)
            printf("                        %-8s %s\n", remat_strategy_str((remat_strategy)s),
                   remat_strategy_summary((remat_strategy)s));
        printf("  --budget SIZE       bytes a training step may hold on the device (its arena of\n"
               "                      values and its parameters, gradients and optimizer state),\n"
               "                      e.g. 512MiB, 11GiB\n"
               "  --host-budget SIZE  with --budget: pinned host bytes the optimal plan may\n"
               "                      offload kept values to (copied out after their stage's\n"
               "                      forward, back before its backward), where that costs\n"
               "                      less than recomputing; on the CPU a second block of the\n"
               "                      same memory (default 0: no offload)\n"
               "  --pcie-bandwidth G  with --host-budget: the host link's GB/s each way the\n"
               "                      copies are costed at (default 25)\n"
               "  --pcie-latency US   with --host-budget: microseconds per copy (default 10)\n");
    }
    printf("  --cost-model FILE   per-op costs from `remat calibrate` (default: the cached\n"
           "                      calibration if any, else FLOPs)\n");
}

const char *cli_device_line(const remat_session_opts *so, char *buf, size_t cap) {
    if (so->device == REMAT_DEVICE_CPU) {
        snprintf(buf, cap, "cpu, %d threads", so->threads);
    } else {
        size_t fr = 0, tot = 0;
        remat_device_memory(so->device, &fr, &tot);
        char b1[32], b2[32];
        snprintf(buf, cap, "%s (%s free of %s)%s%s", remat_device_str(so->device), cli_fmt_bytes(fr, b1, sizeof b1),
                 cli_fmt_bytes(tot, b2, sizeof b2), so->tf32 ? ", TF32" : "",
                 so->least_workspace ? ", least-workspace convolutions" : "");
    }
    return buf;
}

void cli_dist_help(const char *cmd) {
    printf("  --micro-batch M     rows per micro-batch: --batch is the global batch of a step,\n"
           "                      split into micro-batches of M (default: batch / ranks),\n"
           "                      each rank computing its share; on one process, gradient\n"
           "                      accumulation. Results depend on (seed, batch, micro-batch),\n"
           "                      never on the number of ranks\n"
           "  --bucket SIZE       gradient bytes per reduction bucket (default 1MiB)\n"
           "  --no-overlap        reduce the gradients after the backward pass, not during it\n"
           "                      (for measuring what the overlap hides)\n"
           "Under mpirun (mpirun -np 4 remat %s ...; several hosts: -H a,b) every rank\n"
           "runs the command; rank 0 prints and writes files.\n",
           cmd);
}

/* ---------------------------------------------------------------- ranks */

int cli_dist_begin(cli_dist *d) {
    memset(d, 0, sizeof *d);
    if (remat_comm_create_env(&d->comm) != REMAT_OK) return cli_fail("%s", remat_last_error());
    d->rank = remat_comm_rank(d->comm);
    d->ranks = remat_comm_size(d->comm);
    d->hosts = remat_comm_hosts(d->comm);
    return 0;
}

int cli_dist_agree(cli_dist *d, int rc) {
    if (d->ranks == 1) return rc;
    remat_status st = remat_comm_agree(d->comm, rc ? REMAT_INVALID : REMAT_OK);
    if (st == REMAT_OK) return 0;
    if (rc) return rc; /* this rank failed, and said why */
    fprintf(stderr, "remat: rank %d of %d stops: %s\n", d->rank, d->ranks, remat_last_error());
    return 1;
}

int cli_dist_end(cli_dist *d, int rc) {
    if (rc && d->ranks > 1 && !remat_comm_agreed_failure(d->comm)) {
        fprintf(stderr, "remat: rank %d of %d (%s) failed alone: ending every rank\n", d->rank, d->ranks,
                remat_comm_host(d->comm));
        remat_comm_abort(d->comm, rc);
    }
    fflush(stdout);
    remat_comm_destroy(d->comm);
    d->comm = NULL;
    return rc;
}

int cli_dist_micro_batch(const cli_dist *d, const cli_session_args *a, int64_t batch, const char *cmd, int64_t *micro) {
    int64_t m = a->micro_batch ? a->micro_batch : batch / d->ranks;
    if (m < 1 || batch % (m * d->ranks))
        return a->micro_batch ? cli_usage_error(cmd, "--batch %lld is not a multiple of --micro-batch %lld x %d rank%s",
                                                (long long)batch, (long long)m, d->ranks, d->ranks == 1 ? "" : "s")
                              : cli_usage_error(cmd, "--batch %lld does not split evenly over %d ranks",
                                                (long long)batch, d->ranks);
    *micro = m;
    return 0;
}

const char *cli_dist_line(const cli_dist *d, int threads, char *buf, size_t cap) {
    snprintf(buf, cap, "%d rank%s on %d host%s (%s; rank %d on %s), %d thread%s per rank", d->ranks,
             d->ranks == 1 ? "" : "s", d->hosts, d->hosts == 1 ? "" : "s", remat_comm_kind(d->comm), d->rank,
             remat_comm_host(d->comm), threads, threads == 1 ? "" : "s");
    return buf;
}

int cli_optim_named(const char *cmd, const char *name, remat_optim_opts *oo, int *has) {
    *has = strcmp(name, "none") != 0;
    if (strcmp(name, "sgd") == 0) {
        remat_optim_opts_default(oo, REMAT_OPTIM_SGD);
        oo->momentum = 0.9f;
    } else if (strcmp(name, "adamw") == 0) {
        remat_optim_opts_default(oo, REMAT_OPTIM_ADAMW);
    } else if (*has) {
        return cli_usage_error(cmd, "unknown optimizer '%s' (known: none, sgd, adamw)", name);
    }
    return 0;
}
