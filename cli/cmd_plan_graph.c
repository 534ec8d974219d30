/* cmd_plan_graph.c: `remat plan --graph FILE`: plans a training step that
 * another framework traced (a graph file, docs/graph-format.md) through
 * remat_plan_graph_json, the same entry point the Python package uses, and
 * prints the plan: its peak per category, what it recomputes, the least any
 * schedule of the step holds and the largest buffers at its peak, or, with
 * --json, the plan as the library wrote it. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A graph file larger than this is refused before it is read. */
#define MAX_GRAPH_FILE ((off_t)1 << 30)

/* Reads a regular file of at most MAX_GRAPH_FILE bytes (opened without
 * blocking, so a FIFO is refused rather than waited on); NULL after a
 * message. */
static char *read_graph_file(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        cli_fail("cannot open the graph file %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) cli_fail("%s: not a regular file", path);
    else if (sb.st_size > MAX_GRAPH_FILE)
        cli_fail("%s: %lld bytes; graph files of up to %lld bytes are read", path, (long long)sb.st_size,
                 (long long)MAX_GRAPH_FILE);
    else if (!(buf = malloc((size_t)sb.st_size + 1))) cli_fail("out of memory reading %s", path);
    else if (cli_read_all(fd, buf, (size_t)sb.st_size) != 0) {
        cli_fail("cannot read %s", path);
        free(buf);
        buf = NULL;
    } else {
        buf[sb.st_size] = 0;
        if (strlen(buf) != (size_t)sb.st_size) {
            cli_fail("%s: a NUL byte at offset %zu: not a JSON text", path, strlen(buf));
            free(buf);
            buf = NULL;
        }
    }
    close(fd);
    return buf;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(it) ? it->valuedouble : 0.0;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(it) ? it->valuestring : "";
}

/* The least any schedule of the step holds (bound.h): how far a plan can
 * still be from the best one. */
static void print_bound(const cJSON *p) {
    if (num(p, "bound") > 0)
        printf("no schedule of this step holds less than %.0f bytes (%.1f MiB): a lower bound\n", num(p, "bound"),
               num(p, "bound") / 1048576.0);
}

/* The instruction at the plan's peak and the largest buffers live there
 * (the plan's "at_peak"): what a smaller budget would have to free. */
static void print_at_peak(const cJSON *p) {
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(p, "at_peak"), *row;
    if (!at) return;
    const char *key = cJSON_GetObjectItemCaseSensitive(at, "op") ? "op" : "value";
    printf("at the peak (%s of %s %.0f): %.0f bytes of values live, the largest:\n", str(at, "kind"), key, num(at, key),
           num(at, "live_bytes"));
    int k = 0;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(at, "held")) {
        if (k++ == 6) break;
        const char *rk = cJSON_GetObjectItemCaseSensitive(row, "op") ? "op" : "value";
        printf("  %12.0f  %s of %s %.0f (%s)\n", num(row, "bytes"), str(row, "role"), rk, num(row, rk),
               str(row, "category"));
    }
}

static void print_plan(const cJSON *p) {
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "feasible"))) {
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(p, "floor")))
            printf("no plan fits the budget of %.0f bytes (%.1f MiB); the smallest feasible budget is %.0f bytes "
                   "(%.1f MiB)\n",
                   num(p, "budget"), num(p, "budget") / 1048576.0, num(p, "floor"), num(p, "floor") / 1048576.0);
        else /* a fixed strategy: no search, no floor; the library says what it holds */
            printf("%s\n", str(p, "error"));
        print_bound(p);
        return;
    }
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(p, "predicted");
    printf("strategy %s (%s%s%s)\n", str(p, "strategy"), str(p, "planner"), *str(p, "candidate") ? ", " : "",
           str(p, "candidate"));
    printf("predicted peak %.0f bytes (%.1f MiB)\n", num(p, "peak_bytes"), num(p, "peak_bytes") / 1048576.0);
    for (int c = 0; c < REMAT_MEM_TOTAL; c++)
        if (num(pr, remat_mem_str((remat_mem)c)) > 0)
            printf("  %-16s %14.0f\n", remat_mem_str((remat_mem)c), num(pr, remat_mem_str((remat_mem)c)));
    double f = num(p, "cost"), x = num(p, "extra_cost");
    printf("cost %.6g %s, of which recomputation %.6g (+%.2f%%)\n", f, str(p, "cost_unit"), x,
           f - x > 0 ? 100.0 * x / (f - x) : 0.0);
    printf("recomputed ops: %d\n", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, "recompute")));
    print_bound(p);
    print_at_peak(p);
}

int cli_plan_graph(const char *path, const char *strategy, size_t budget, const char *optim, int json) {
    char *text = read_graph_file(path);
    if (!text) return 1;
    cJSON *rq = cJSON_CreateObject();
    cJSON_AddNumberToObject(rq, "budget", (double)budget);
    cJSON_AddStringToObject(rq, "strategy", strategy);
    cJSON *o = cJSON_AddObjectToObject(rq, "optimizer");
    cJSON_AddStringToObject(o, "kind", strcmp(optim, "sgd") == 0 ? "sgd" : optim);
    if (strcmp(optim, "sgd") == 0) cJSON_AddNumberToObject(o, "momentum", 0.9);
    char *rqs = cJSON_PrintUnformatted(rq);
    cJSON_Delete(rq);
    char *out = NULL;
    int rc = 1;
    if (!rqs) cli_fail("out of memory");
    else if (remat_plan_graph_json(text, rqs, &out) != REMAT_OK) cli_fail("%s: %s", path, remat_last_error());
    else {
        cJSON *p = cJSON_Parse(out);
        int feasible = p && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "feasible"));
        if (json) printf("%s\n", out);
        else if (p) print_plan(p);
        if (!feasible && !json) cli_fail("budget too small");
        rc = feasible ? 0 : 1;
        cJSON_Delete(p);
    }
    remat_free(out);
    free(rqs);
    free(text);
    return rc;
}
