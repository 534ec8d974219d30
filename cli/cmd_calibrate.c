/* cmd_calibrate.c: `remat calibrate`: measure each op family's throughput
 * on this machine and cache it, so that plans are costed in seconds. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* $REMAT_COST_MODEL, else $XDG_CACHE_HOME/remat/cost-model.json, else
 * ~/.cache/remat/cost-model.json. mkdir creates the folder. */
static const char *default_path(char *buf, size_t cap, int mkdirs) {
    const char *env = getenv("REMAT_COST_MODEL");
    if (env && *env) return env;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[1024];
    if (xdg && *xdg) snprintf(dir, sizeof dir, "%s/remat", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/remat", home);
    else return NULL;
    if (mkdirs) {
        char parent[1024];
        snprintf(parent, sizeof parent, "%s", dir);
        char *slash = strrchr(parent, '/');
        if (slash) *slash = 0, mkdir(parent, 0755);
        mkdir(dir, 0755);
    }
    snprintf(buf, cap, "%s/cost-model.json", dir);
    return buf;
}

const remat_cost_model *cli_cost_model(remat_cost_model *m, const char *path, const char **used) {
    static char buf[1100]; /* *used may point here after the call */
    const char *ignored;
    if (!used) used = &ignored;
    *used = NULL;
    if (!path) {
        path = default_path(buf, sizeof buf, 0);
        struct stat st;
        if (!path || stat(path, &st) != 0) return NULL; /* FLOPs alone */
    }
    if (remat_cost_model_load(m, path) != REMAT_OK) {
        fprintf(stderr, "remat: %s; costing in FLOPs\n", remat_last_error());
        return NULL;
    }
    *used = path;
    return m;
}

int cmd_calibrate(int argc, char **argv) {
    const char *out = NULL;
    int64_t threads = 0;
    static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                         {"threads", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_opts co = {.cmd = "calibrate", .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        switch (c) {
        case 'o': out = optarg; break;
        case 't':
            if (cli_parse_i64(optarg, &threads) || threads < 0 || threads > 1024)
                return cli_bad_value(&co, optarg, "");
            break;
        case 'h':
            printf("usage: remat calibrate [--out FILE] [--threads T]\n\n"
                   "Times training steps of small graphs of each op family (linear, conv, norm,\n"
                   "pointwise, pool, copy, loss) and writes their throughputs, so that `remat\n"
                   "plan`, `train` and `bench` cost plans in seconds instead of FLOPs.\n"
                   "Default file: $REMAT_COST_MODEL, else ~/.cache/remat/cost-model.json.\n");
            return 0;
        }
    }
    if (co.rc) return co.rc;
    char buf[1100];
    if (!out) out = default_path(buf, sizeof buf, 1);
    if (!out) return cli_fail("no HOME or XDG_CACHE_HOME: give --out FILE");
    fprintf(stderr, "calibrating (a few seconds)...\n");
    remat_cost_model m;
    if (remat_calibrate(&m, (int)threads) != REMAT_OK) return cli_fail("%s", remat_last_error());
    for (int f = 0; f < REMAT_FAMILY_COUNT; f++)
        printf("%-10s %8.2f GFLOP/s\n", remat_family_str((remat_family)f), m.flops_per_s[f] / 1e9);
    if (remat_cost_model_save(&m, out) != REMAT_OK) return cli_fail("%s", remat_last_error());
    printf("written to %s\n", out);
    return 0;
}
