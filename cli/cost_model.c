/* cost_model.c: where the calibrated cost model is cached and how a
 * command finds it (cli_cost_model): `remat calibrate` writes it, every
 * command that plans reads it (session_args.c), into a model the program
 * holds until it exits (cli_cost_model_new). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* $REMAT_COST_MODEL, else $XDG_CACHE_HOME/remat/cost-model.json, else
 * ~/.cache/remat/cost-model.json. mkdir creates the folder. */
const char *cli_cost_model_path(char *buf, size_t cap, int mkdirs) {
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
        path = cli_cost_model_path(buf, sizeof buf, 0);
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

/* The models cli_cost_model_new made, freed when the program exits (a
 * command returns through many paths; this way none leaks). */
static remat_cost_model *held[4];
static int n_held;

static void free_held(void) {
    for (int i = 0; i < n_held; i++) remat_cost_model_destroy(held[i]);
    n_held = 0;
}

remat_cost_model *cli_cost_model_new(void) {
    remat_cost_model *m = NULL;
    if (n_held == (int)(sizeof held / sizeof held[0])) {
        remat_error(REMAT_INTERNAL, "the program made more than %d cost models", n_held);
        return NULL;
    }
    if (remat_cost_model_create(&m) != REMAT_OK) return NULL;
    if (!n_held) atexit(free_held);
    held[n_held++] = m;
    return m;
}
