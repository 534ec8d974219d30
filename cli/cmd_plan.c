/* cmd_plan.c: `remat plan`: the schedule a strategy gives a model's
 * training step: predicted peak per memory category, what is recomputed and
 * what that costs; --verbose lists the instructions; --max-batch searches
 * the largest batch a budget holds (max_batch.c). Nothing is trained. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: remat plan [options]\n"
           "\n"
           "  --data NAME       input shape of this data set: fashion-mnist | mnist | cifar10 |\n"
           "                    synthetic (default: the model's own input shape)\n"
           "  --chain FILE      plan a chain described in JSON instead of a model:\n"
           "                    {\"stages\": [{\"forward\": f, \"backward\": b, \"input\": a,\n"
           "                    \"saved\": s}, ...], \"output\": o}; needs --budget\n"
           "  --graph FILE      plan a training step another framework traced (a graph\n"
           "                    file, docs/graph-format.md; the Python package writes them):\n"
           "                    peak per category and the ops recomputed; --json prints the\n"
           "                    plan as the library gives it\n"
           "  --slots N         memory slots of the chain planner (default 500; with\n"
           "                    --host-budget, the device slots of the offload planner)\n"
           "  --sweep           the trade-off curve: optimal at 24 budgets from the smallest\n"
           "                    feasible to store-all, next to sqrt\n"
           "  --plot FILE.svg   with --sweep, also draw the curve\n"
           "  --max-batch       the largest batch whose step fits --budget: with store-all\n"
           "                    (all), with recomputation (optimal), and with optimal within\n"
           "                    --max-overhead; doubling from --batch (default 1), then\n"
           "                    bisection; one line per plan on stderr\n"
           "  --device-memory SIZE\n"
           "                    with --device cuda: the card's memory (e.g. 11GiB), the\n"
           "                    budget when --budget is not given; where no GPU is here,\n"
           "                    the plan is made without one, its convolution workspaces\n"
           "                    estimated (upper bounds)\n"
           "  --max-overhead PCT\n"
           "                    with --max-batch: recomputation allowed, in percent of the\n"
           "                    step's compute (seconds with a calibrated cost model, else\n"
           "                    FLOPs; default 30)\n"
           "  (--host-budget SIZE: the step's chain planned with up to SIZE of pinned host\n"
           "                    memory for kept values and without it, in the chain model,\n"
           "                    then the step's plan with offload; with --max-batch, the\n"
           "                    largest batch each fits; --device-memory may stand for --budget)\n"
           "  --optim NAME      count this optimizer's state: none | sgd (with momentum) |\n"
           "                    adamw (default adamw, as remat train)\n"
           "  --verbose         list every instruction of the step\n"
           "  --json            one JSON object (with the instructions if --verbose)\n"
           "  --help            this text\n"
           "(--chain and --slots plan any chain; --device cuda plans against the device's\n"
           "kernels and workspaces, asking cuDNN where a GPU is here, estimating where not)\n");
    cli_session_help(1);
    printf("\n");
    cli_model_help();
}

/* The arena's size over the peak of the values placed in it (1: no
 * fragmentation). */
static double arena_per_peak(const remat_plan_summary *p) {
    size_t peak = p->predicted.peak[REMAT_MEM_TOTAL] - p->predicted.live[REMAT_MEM_TOTAL];
    return peak ? (double)p->arena_bytes / (double)peak : 1.0;
}

/* Plans a session for the strategy and budget; fills the summary. */
static remat_status plan_at(const remat_graph *g, remat_node loss, const remat_session_opts *base, remat_strategy st,
                            size_t budget, const remat_optim_opts *oo, remat_plan_summary *p) {
    remat_session_opts so = *base;
    so.strategy = st;
    so.budget = budget;
    so.optim = oo;
    so.plan_only = 1;
    remat_session *s = NULL;
    remat_status rc = remat_session_create(&s, g, loss, &so);
    if (rc == REMAT_OK) rc = remat_session_plan(s, p);
    remat_session_destroy(s);
    return rc;
}

typedef struct {
    size_t budget, peak;
    double extra;
} point;

/* 0 when written; else the failure was reported (cli_fail's status). */
static int write_svg(const char *path, const char *model, const point *opt, int n, const point *sq, int sq_ok,
                     size_t store_all) {
    /* drawn in memory, then written atomically (remat_file_write_atomic) */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return cli_fail("cannot write %s: out of memory", path);
    const double W = 720, H = 440, L = 70, R = 20, T = 40, B = 60;
    double xmax = (double)store_all * 1.05 / 1048576.0, xmin = (double)opt[0].budget * 0.95 / 1048576.0;
    double ymax = 1.0;
    for (int i = 0; i < n; i++) ymax = opt[i].extra > ymax ? opt[i].extra : ymax;
    if (sq_ok && sq->extra > ymax) ymax = sq->extra;
    ymax *= 1.1;
#define X(v) (L + ((v)-xmin) / (xmax - xmin) * (W - L - R))
#define Y(v) (H - B - (v) / ymax * (H - T - B))
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n",
            W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">%s: extra compute vs memory budget</text>\n", L, model);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T, L, H - B);
    for (int t = 0; t <= 5; t++) {
        double xv = xmin + (xmax - xmin) * t / 5, yv = ymax * t / 5;
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.1f</text>\n", X(xv), H - B + 18, xv);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", L - 6, Y(yv) + 4, yv);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, Y(yv), W - R, Y(yv));
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">budget (MiB)</text>\n", (L + W - R) / 2, H - 18);
    fprintf(f,
            "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" text-anchor=\"middle\">extra compute (%% of "
            "step FLOPs)</text>\n",
            (T + H - B) / 2, (T + H - B) / 2);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < n; i++) fprintf(f, "%.1f,%.1f ", X((double)opt[i].budget / 1048576.0), Y(opt[i].extra));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#1f77b4\"/>\n", X((double)opt[i].budget / 1048576.0),
                Y(opt[i].extra));
    if (sq_ok)
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"#d62728\"/>\n",
                X((double)sq->peak / 1048576.0) - 4, Y(sq->extra) - 4);
    fprintf(f, "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"4\" fill=\"#1f77b4\"/><text x=\"%.0f\" y=\"%.0f\">optimal</text>\n",
            W - 150, T + 10, W - 140, T + 14);
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"8\" height=\"8\" fill=\"#d62728\"/><text x=\"%.0f\" y=\"%.0f\">sqrt "
            "(at its peak)</text>\n",
            W - 154, T + 24, W - 140, T + 32);
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    int rc = 0;
    if (fclose(f) != 0 || !text) rc = cli_fail("cannot write %s: out of memory", path);
    else if (remat_file_write_atomic(path, text, len) != REMAT_OK) rc = cli_fail("%s", remat_last_error());
    free(text);
    return rc;
}

/* The trade-off curve: optimal at 24 budgets from the smallest feasible to
 * store-all, and sqrt's single point, in bytes held (what a budget
 * bounds). */
static int plan_sweep(const remat_model_opts *mo, const remat_session_opts *so, const remat_optim_opts *oo, int json,
                      const char *plot) {
    remat_graph *g = NULL;
    remat_model m;
    int rc = 1;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, mo, &m) != REMAT_OK) {
        cli_fail("%s", remat_last_error());
        remat_graph_destroy(g);
        return 1;
    }
    remat_plan_summary all, sq;
    if (plan_at(g, m.loss, so, REMAT_STRATEGY_ALL, 0, oo, &all) != REMAT_OK) goto fail;
    int sq_ok = plan_at(g, m.loss, so, REMAT_STRATEGY_SQRT, 0, oo, &sq) == REMAT_OK;
    size_t hi = all.held_bytes, lo = 0;
    /* the smallest feasible budget, by bisection */
    {
        size_t a = 0, b = hi;
        while (a + 1 < b) {
            size_t mid = a + (b - a) / 2;
            remat_plan_summary p;
            if (plan_at(g, m.loss, so, REMAT_STRATEGY_OPTIMAL, mid, oo, &p) == REMAT_OK) b = mid;
            else a = mid;
            if (b - a < hi / 4096) break;
        }
        lo = b;
    }
    enum { NPTS = 24 };
    point pts[NPTS];
    int n = 0;
    if (!json)
        printf("%14s %14s %10s %14s %10s\n", "budget (B)", "optimal holds", "extra %", "sqrt holds", "sqrt extra %");
    for (int i = 0; i < NPTS; i++) {
        size_t budget = lo + (size_t)((double)(hi - lo) * i / (NPTS - 1));
        remat_plan_summary p;
        if (plan_at(g, m.loss, so, REMAT_STRATEGY_OPTIMAL, budget, oo, &p) != REMAT_OK) continue;
        double extra = p.flops > 0 ? 100.0 * p.extra_flops / p.flops : 0.0;
        pts[n++] = (point){budget, p.held_bytes, extra};
        int sq_fits = sq_ok && sq.held_bytes <= budget;
        double sq_extra = sq.flops > 0 ? 100.0 * sq.extra_flops / sq.flops : 0.0;
        if (json) {
            printf("{\"budget_bytes\":%zu,\"optimal_held_bytes\":%zu,\"optimal_extra_percent\":%.4f", budget,
                   p.held_bytes, extra);
            if (sq_fits) printf(",\"sqrt_held_bytes\":%zu,\"sqrt_extra_percent\":%.4f", sq.held_bytes, sq_extra);
            printf("}\n");
        } else if (sq_fits) {
            printf("%14zu %14zu %10.2f %14zu %10.2f\n", budget, p.held_bytes, extra, sq.held_bytes, sq_extra);
        } else {
            printf("%14zu %14zu %10.2f %14s %10s\n", budget, p.held_bytes, extra, "-", "-");
        }
    }
    if (!json)
        printf("(extra %% = recomputed FLOPs / step FLOPs; sqrt needs %zu B; store-all needs %zu B)\n",
               sq_ok ? sq.held_bytes : (size_t)0, hi);
    if (plot && n > 1) {
        point sp = {0, sq_ok ? sq.held_bytes : 0, sq_ok && sq.flops > 0 ? 100.0 * sq.extra_flops / sq.flops : 0.0};
        rc = write_svg(plot, mo->name, pts, n, &sp, sq_ok, hi);
        if (!rc && !json) printf("plot written to %s\n", plot);
    } else {
        rc = 0;
    }
    remat_graph_destroy(g);
    return rc;
fail:
    cli_fail("%s", remat_last_error());
    remat_graph_destroy(g);
    return rc;
}

/* Reads a whole file into a NUL-terminated buffer (caller frees). */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb, cap *= 2;
        }
    }
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

static const char *chain_op_name(remat_chain_op_kind k) {
    static const char *const names[] = {"Fn", "CF", "Fe", "Loss", "B"};
    return (unsigned)k < 5 ? names[k] : "?";
}

/* remat plan --chain: rotor's DP on a chain given as JSON. */
static int plan_chain(const char *path, size_t budget, int slots, int json) {
    char *text = slurp(path);
    if (!text) return cli_fail("cannot read %s", path);
    remat_stage *st = NULL;
    int n = 0;
    int64_t output = 0;
    remat_chain_plan *plan = NULL;
    int rc = 1;
    if (remat_chain_parse_json(text, &st, &n, &output) != REMAT_OK) {
        cli_fail("%s: %s", path, remat_last_error());
        goto done;
    }
    if (remat_chain_solve(st, n, output, (int64_t)budget, slots, &plan) != REMAT_OK) {
        cli_fail("%s", remat_last_error());
        goto done;
    }
    double f = 0;
    for (int i = 0; i < n; i++) f += st[i].forward + st[i].backward;
    if (json) {
        printf("{\"stages\":%d,\"budget\":%zu,\"cost\":%.17g,\"no_recompute_cost\":%.17g,\"peak\":%lld,\"ops\":[", n,
               budget, remat_chain_plan_cost(plan), f, (long long)remat_chain_plan_peak(plan));
        for (int i = 0; i < remat_chain_plan_length(plan); i++) {
            remat_chain_op op = remat_chain_plan_op(plan, i);
            printf("%s[\"%s\",%d]", i ? "," : "", chain_op_name(op.kind), op.stage);
        }
        printf("]}\n");
    } else {
        printf("chain of %d stages, budget %zu\n", n, budget);
        printf("predicted cost %.6g (no recomputation: %.6g, +%.2f%%)\n", remat_chain_plan_cost(plan), f,
               f > 0 ? 100.0 * (remat_chain_plan_cost(plan) - f) / f : 0.0);
        printf("predicted peak %lld\n", (long long)remat_chain_plan_peak(plan));
        printf("operations:");
        for (int i = 0; i < remat_chain_plan_length(plan); i++) {
            remat_chain_op op = remat_chain_plan_op(plan, i);
            if (op.kind == REMAT_CHAIN_LOSS) printf(" Loss");
            else printf(" %s_%d", chain_op_name(op.kind), op.stage);
        }
        printf("\n");
    }
    rc = 0;
done:
    remat_chain_plan_destroy(plan);
    free(st);
    free(text);
    return rc;
}

/* What the command line asked for. */
typedef struct {
    const char *data, *optim, *plot, *chain_file, *graph_file;
    cli_model_args ma;
    cli_session_args sa;
    int64_t slots;
    int sweep, json, verbose, max_batch, overhead_given;
    double max_overhead;
    size_t device_memory; /* --device-memory: the card's bytes, 0 unless given */
} plan_args;

/* Reads the flags into a: 0, 1 after --help (printed), or the exit status
 * of a usage error (2) through *rc. */
static int parse_args(int argc, char **argv, plan_args *a, int *rc) {
    memset(a, 0, sizeof *a);
    a->optim = "adamw";
    a->max_overhead = 30.0;
    cli_model_args_init(&a->ma);
    cli_session_args_init(&a->sa);
    a->sa.check_device = 0; /* a plan for a device that is not here is made without it */
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         CLI_SESSION_OPTIONS,
                                         CLI_PLAN_OPTIONS,
                                         {"data", required_argument, 0, 'd'},
                                         {"optim", required_argument, 0, 'o'},
                                         {"verbose", no_argument, 0, 'v'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {"sweep", no_argument, 0, 'S'},
                                         {"plot", required_argument, 0, 'P'},
                                         {"chain", required_argument, 0, 'C'},
                                         {"slots", required_argument, 0, 'L'},
                                         {"graph", required_argument, 0, 'G'},
                                         {"max-batch", no_argument, 0, 'M'},
                                         {"max-overhead", required_argument, 0, 'O'},
                                         {"device-memory", required_argument, 0, 'D'},
                                         {0, 0, 0, 0}};
    cli_opts co = {.cmd = "plan", .ma = &a->ma, .sa = &a->sa, .opts = opts, .shortopts = ":hv"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        int bad = 0;
        switch (c) {
        case 'd': a->data = optarg; break;
        case 'o': a->optim = optarg; break;
        case 'v': a->verbose = 1; break;
        case 'S': a->sweep = 1; break;
        case 'C': a->chain_file = optarg; break;
        case 'G': a->graph_file = optarg; break;
        case 'L': bad = cli_parse_i64(optarg, &a->slots) || a->slots < 1 || a->slots > 100000; break;
        case 'P': a->plot = optarg; break;
        case 'M': a->max_batch = 1; break;
        case 'D': bad = cli_parse_size(optarg, &a->device_memory) || a->device_memory == 0; break;
        case 'O': { /* "10" or "10%" */
            char *end;
            a->overhead_given = 1;
            a->max_overhead = strtod(optarg, &end);
            bad = end == optarg || (*end && strcmp(end, "%") != 0) || !(a->max_overhead >= 0 && a->max_overhead <= 1e6);
            break;
        }
        case 'j': a->json = 1; break;
        case 'h': help(); return 1;
        }
        if (bad) return *rc = cli_bad_value(&co, optarg, ""), 1;
    }
    *rc = co.rc;
    return co.rc != 0;
}

/* Flags that do not go together: 0, or the exit status of the usage error. */
static int check_args(plan_args *a) {
    if (a->device_memory && strcmp(a->sa.device, "cpu") == 0)
        return cli_usage_error("plan", "--device-memory is for a GPU (--device cuda)");
    if (a->device_memory && a->sa.budget > a->device_memory)
        return cli_usage_error("plan", "--budget is above --device-memory");
    if (a->device_memory && !a->sa.budget) a->sa.budget = a->device_memory; /* the card's memory bounds the step */
    if (a->overhead_given && !a->max_batch) return cli_usage_error("plan", "--max-overhead needs --max-batch");
    if (a->max_batch) {
        if (a->chain_file || a->sweep || a->verbose)
            return cli_usage_error("plan", "--max-batch plans a model's step at many batches: not with %s",
                                   a->chain_file ? "--chain"
                                   : a->sweep    ? "--sweep"
                                                 : "--verbose");
        if (!a->sa.budget) return cli_usage_error("plan", "--max-batch needs --budget");
        if (strcmp(a->sa.strategy, "auto") != 0)
            return cli_usage_error("plan", "--max-batch plans with all and optimal itself: drop --strategy");
    }
    if (a->sa.host_budget) {
        if (a->chain_file || a->graph_file || a->sweep || a->verbose)
            return cli_usage_error("plan", "--host-budget plans a model's step: not with %s",
                                   a->chain_file   ? "--chain"
                                   : a->graph_file ? "--graph"
                                   : a->sweep      ? "--sweep"
                                                   : "--verbose");
        if (!a->sa.budget) return cli_usage_error("plan", "--host-budget needs --budget or --device-memory");
        if (strcmp(a->sa.strategy, "auto") != 0)
            return cli_usage_error("plan", "--host-budget plans the chain itself: drop --strategy");
    }
    if (a->graph_file && (a->chain_file || a->sweep || a->max_batch || a->verbose))
        return cli_usage_error("plan", "--graph plans a traced step: not with %s",
                               a->chain_file  ? "--chain"
                               : a->sweep     ? "--sweep"
                               : a->max_batch ? "--max-batch"
                                              : "--verbose");
    if (a->chain_file && !a->graph_file && !a->sa.budget) return cli_usage_error("plan", "--chain needs --budget");
    return 0;
}

/* The model's options must show in the model before anything is planned:
 * 0, or the exit status. */
static int check_model(const plan_args *a, const remat_model_opts *mo) {
    remat_graph *pg = NULL;
    remat_model pm;
    if (remat_graph_create(&pg) != REMAT_OK || remat_model_build(pg, mo, &pm) != REMAT_OK) {
        remat_graph_destroy(pg);
        return cli_fail("%s", remat_last_error());
    }
    int u = cli_model_check(&a->ma, pg, &pm, "plan");
    remat_graph_destroy(pg);
    return u;
}

/* The plan as one JSON object. */
static void print_json(const plan_args *a, const remat_model_opts *mo, const remat_session_opts *so,
                       const remat_session *s, const remat_plan_summary *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", mo->name);
    cJSON_AddNumberToObject(o, "batch", (double)mo->batch);
    cJSON_AddStringToObject(o, "strategy", remat_strategy_str(p->strategy)); /* auto resolved */
    cJSON_AddStringToObject(o, "planner", p->planner);
    if (*p->candidate) cJSON_AddStringToObject(o, "candidate", p->candidate);
    cJSON_AddStringToObject(o, "device", remat_device_str(so->device));
    if (a->sa.budget) cJSON_AddNumberToObject(o, "budget_bytes", (double)a->sa.budget);
    cJSON_AddNumberToObject(o, "arena_bytes", (double)p->arena_bytes);
    cJSON_AddNumberToObject(o, "held_bytes", (double)p->held_bytes);
    cJSON_AddNumberToObject(o, "bound_bytes", (double)p->bound_bytes);
    cJSON_AddNumberToObject(o, "arena_per_peak", arena_per_peak(p));
    cJSON_AddStringToObject(o, "placement", p->placement);
    cJSON *pk = cJSON_AddObjectToObject(o, "predicted_peak_bytes");
    for (int i = 0; i < REMAT_MEM_COUNT; i++)
        cJSON_AddNumberToObject(pk, remat_mem_str((remat_mem)i), (double)p->predicted.peak[i]);
    cJSON_AddNumberToObject(o, "kept_boundaries", (double)p->kept_boundaries);
    cJSON_AddNumberToObject(o, "recomputed_nodes", (double)p->recomputed_nodes);
    cJSON_AddNumberToObject(o, "recomputations", (double)p->recomputations);
    cJSON_AddNumberToObject(o, "step_flops", p->flops);
    cJSON_AddNumberToObject(o, "extra_flops", p->extra_flops);
    cJSON_AddNumberToObject(o, "extra_flops_percent", p->flops > 0 ? 100.0 * p->extra_flops / p->flops : 0.0);
    if (p->calibrated) {
        cJSON_AddNumberToObject(o, "predicted_seconds", p->seconds);
        cJSON_AddNumberToObject(o, "extra_seconds", p->extra_seconds);
    }
    if (a->verbose) {
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
    cli_json_print(o);
}

/* A plan for a device that is not here is made without it: says so, and
 * what is estimated. */
static void note_absent(const remat_session_opts *so, size_t device_memory) {
    if (so->device == REMAT_DEVICE_CPU || remat_device_available(so->device) == REMAT_OK) return;
    char b[32];
    printf("%s; planned without one", remat_last_error());
    if (device_memory) printf(" for a card of %s", cli_fmt_bytes(device_memory, b, sizeof b));
    printf("; the workspaces its libraries would choose (cuDNN's convolution algorithms) are estimates, upper "
           "bounds\n");
}

/* The plan for a reader; with --verbose, the schedule first. */
static void print_text(const plan_args *a, const remat_model_opts *mo, const remat_session_opts *so,
                       const remat_session *s, const remat_graph *g, const remat_plan_summary *p,
                       const char *cost_used) {
    char b[32], b2[32];
    if (a->verbose) {
        for (int64_t i = 0; i < remat_session_schedule_length(s); i++) {
            remat_instr_info in;
            remat_session_schedule_instr(s, i, &in);
            const char *name = remat_node_name(g, in.node);
            printf("%6lld  %-9s %-8s node %d %s%s%s%s\n", (long long)i, in.kind, *in.what ? in.what : "", (int)in.node,
                   in.op, *name ? " '" : "", name, *name ? "'" : "");
        }
        printf("\n");
    }
    printf("model %s, batch %lld, device %s, strategy %s (schedule from %s%s%s%s): %lld boundaries kept\n", mo->name,
           (long long)mo->batch, remat_device_str(so->device), remat_strategy_str(p->strategy), p->planner,
           *p->candidate ? "; candidate " : "", p->candidate, "", (long long)p->kept_boundaries);
    printf("predicted peak of a training step:\n");
    for (int i = 0; i <= REMAT_MEM_TOTAL; i++)
        printf("  %-16s %12zu B  %s\n", remat_mem_str((remat_mem)i), p->predicted.peak[i],
               cli_fmt_bytes(p->predicted.peak[i], b, sizeof b));
    if (p->predicted.peak[REMAT_MEM_HOST]) /* offloaded values, apart from the device's total */
        printf("  %-16s %12zu B  %s (offloaded values, in a host block of %s)\n", "host",
               p->predicted.peak[REMAT_MEM_HOST], cli_fmt_bytes(p->predicted.peak[REMAT_MEM_HOST], b, sizeof b),
               cli_fmt_bytes(p->host_bytes, b2, sizeof b2));
    printf("arena: %zu B (%s) for a peak of %s of values: %.4f x the peak (%s placement)\n", p->arena_bytes,
           cli_fmt_bytes(p->arena_bytes, b, sizeof b),
           cli_fmt_bytes(p->predicted.peak[REMAT_MEM_TOTAL] - p->predicted.live[REMAT_MEM_TOTAL], b2, sizeof b2),
           arena_per_peak(p), p->placement);
    printf("held during a step (arena + parameters, gradients, optimizer state): %zu B (%s)\n", p->held_bytes,
           cli_fmt_bytes(p->held_bytes, b, sizeof b));
    printf("no schedule of this step holds less than %zu B (%s): a lower bound\n", p->bound_bytes,
           cli_fmt_bytes(p->bound_bytes, b, sizeof b));
    printf("recomputed: %lld nodes, %lld forward recomputations\n", (long long)p->recomputed_nodes,
           (long long)p->recomputations);
    printf("extra compute: %.4g GFLOP, %.1f%% over the %.4g GFLOP of a step without recomputation "
           "(%.4g in all)\n",
           p->extra_flops / 1e9, p->flops > 0 ? 100.0 * p->extra_flops / p->flops : 0.0, p->flops / 1e9,
           (p->flops + p->extra_flops) / 1e9);
    if (p->calibrated)
        printf("predicted step time: %.4g s, of which recomputation %.4g s (cost model %s)\n", p->seconds,
               p->extra_seconds, cost_used);
    if (p->estimated_nodes)
        printf("estimated: the workspace of %lld nodes (no device to ask its libraries; upper bounds)\n",
               (long long)p->estimated_nodes);
    if (a->sa.budget)
        printf("budget %s: fits (%.1f%% used)\n", cli_fmt_bytes(a->sa.budget, b, sizeof b),
               100.0 * (double)p->held_bytes / (double)a->sa.budget);
}

int cmd_plan(int argc, char **argv) {
    plan_args a;
    int rc = 0;
    if (parse_args(argc, argv, &a, &rc)) return rc;
    if ((rc = check_args(&a)) != 0) return rc;
    if (a.graph_file) return cli_plan_graph(a.graph_file, a.sa.strategy, a.sa.budget, a.optim, a.json);
    if (a.chain_file) return plan_chain(a.chain_file, a.sa.budget, (int)a.slots, a.json); /* no model, no device */
    remat_session_opts so;
    remat_cost_model *cm = NULL;
    const char *cost_used = NULL;
    remat_optim_opts oo;
    int has_optim;
    remat_model_opts mo;
    if ((rc = cli_session_opts(&a.sa, "plan", &so, &cm, &cost_used)) != 0 ||
        (rc = cli_optim_named("plan", a.optim, &oo, &has_optim)) != 0 ||
        (rc = cli_model_opts(&a.ma, a.data, "plan", &mo)) != 0)
        return rc;
    if (a.plot && !a.sweep) return cli_usage_error("plan", "--plot needs --sweep");
    if ((rc = check_model(&a, &mo)) != 0) return rc;
    so.optim = has_optim ? &oo : NULL; /* its state counts in the plan and the budget */
    if (!a.json) note_absent(&so, a.device_memory);
    if (a.sweep) return plan_sweep(&mo, &so, so.optim, a.json, a.plot);
    if (a.sa.host_budget) {
        remat_offload_opts oo2;
        remat_offload_opts_default(&oo2);
        oo2.host_budget = a.sa.host_budget;
        oo2.slots = (int)a.slots; /* 0 unless --slots: as many as the tables allow, up to 500 */
        oo2.bandwidth = so.host_bandwidth;
        oo2.latency = so.host_latency;
        if (!a.max_batch) return cli_plan_offload(&mo, &so, &oo2, a.json);
    }
    if (a.max_batch)
        return cli_plan_max_batch(&mo, a.ma.batch > 0 ? mo.batch : 1, &so, a.optim, a.max_overhead, cost_used, a.json);
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_model m;
    remat_plan_summary p;
    so.plan_only = 1;
    if (remat_graph_create(&g) != REMAT_OK || remat_model_build(g, &mo, &m) != REMAT_OK ||
        remat_session_create(&s, g, m.loss, &so) != REMAT_OK || remat_session_plan(s, &p) != REMAT_OK) {
        rc = cli_fail("%s", remat_last_error());
    } else if (a.json) {
        print_json(&a, &mo, &so, s, &p);
    } else {
        print_text(&a, &mo, &so, s, g, &p, cost_used);
    }
    remat_session_destroy(s);
    remat_graph_destroy(g);
    return rc;
}
