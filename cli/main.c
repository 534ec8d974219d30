/* main.c: the `remat` command: dispatches to the subcommands. */
#include "cli.h"

#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: remat <command> [options]\n"
            "\n"
            "Train neural networks inside a memory budget by recomputing activations.\n"
            "\n"
            "commands:\n"
            "  train    train a model on a data set, synthetic data or a token file\n"
            "  info     per-layer table: output shapes, parameters, bytes kept for backward\n"
            "  plan     the schedule of a training step: peak memory, recomputation, cost\n"
            "  bench    time training steps per strategy, side by side, with ratios\n"
            "  grad     one forward and backward pass on a given batch: loss and gradients\n"
            "           as safetensors, to compare with PyTorch\n"
            "  calibrate  measure op throughputs so that plans are costed in seconds\n"
            "\n"
            "Run 'remat <command> --help' for a command's options.\n"
            "remat %s\n",
            REMAT_VERSION);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* remat's kernels split their work over their own threads and call
     * BLAS from each: one BLAS thread per call (remat.h). */
    remat_set_blas_threads(1);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("remat %s\n", REMAT_VERSION);
        return 0;
    }
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "plan") == 0) return cmd_plan(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "grad") == 0) return cmd_grad(argc - 1, argv + 1);
    if (strcmp(cmd, "calibrate") == 0) return cmd_calibrate(argc - 1, argv + 1);
    fprintf(stderr, "remat: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
