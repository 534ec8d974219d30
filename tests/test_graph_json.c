/* test_graph_json.c: graph files (docs/graph-format.md): a training step
 * traced by another framework, read by remat_graph_read_json and planned by
 * remat_plan_graph_json.
 * - graphs/mlp.json under store-all: every category's peak equals the bytes
 *   worked out by hand from the file and remat's model, and so do the
 *   costs (file costs in FLOPs or seconds);
 * - its floor: feasible at the floor, not one byte or 1 MiB below, and the
 *   floor an infeasible answer names is the one bisection over budgets
 *   finds (and the one worked out by hand);
 * - a budget between the floor and store-all: some ops recomputed, the
 *   predicted peak within the budget;
 * - hostile files, each refused with REMAT_FORMAT and a message naming the
 *   op or value and the field;
 * - the mapping onto remat's model: a value saved twice is read (and
 *   counted) once, grad_bytes sizes a gradient, a later output is aux,
 *   forward transient or a node of its own;
 * - bounds: 2,000,001 ops and 4,000,001 values are refused on their count,
 *   and a long chain plans (all, and optimal under a budget) with the
 *   peaks worked out by hand.
 *
 *   test_graph_json            the tests
 *   test_graph_json --quick    shorter chains (the sanitizer build)
 */
#include "remat.h"
#include "check.h"
#include "plan_json.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int quick;

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A growing string. */
typedef struct {
    char *s;
    size_t n, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (t->s && (size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        t->cap = 2 * (t->cap + (size_t)k + 1);
        t->s = realloc(t->s, t->cap);
        if (!t->s) abort();
    }
}

/* Plans graph under request; the plan as JSON (caller deletes), NULL after
 * a failure (its status in *st). */
static cJSON *plan(const char *graph, const char *request, remat_status *st) {
    char *out = NULL;
    remat_status s = remat_plan_graph_json(graph, request, &out);
    if (st) *st = s;
    cJSON *p = s == REMAT_OK && out ? cJSON_Parse(out) : NULL;
    if (s != REMAT_OK && !st) fprintf(stderr, "plan failed: %s: %s\n", remat_status_str(s), remat_last_error());
    remat_free(out);
    return p;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(it) ? it->valuedouble : -1.0;
}

static double peak(const cJSON *p, const char *category) {
    return num(cJSON_GetObjectItemCaseSensitive(p, "predicted"), category);
}

static int feasible(const cJSON *p) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "feasible")); }

/* Feasible at budget? (optimal); *floor_out: the floor the answer names. */
static int fits(const char *graph, size_t budget, double *floor_out) {
    char rq[160];
    snprintf(rq, sizeof rq, "{\"budget\": %zu, \"strategy\": \"optimal\", \"optimizer\": {\"kind\": \"adamw\"}}",
             budget);
    cJSON *p = plan(graph, rq, NULL);
    CHECK(p != NULL);
    int ok = p && feasible(p);
    if (p && ok)
        CHECK_MSG(num(p, "held_bytes") <= (double)budget, "held %.0f > budget %zu", num(p, "held_bytes"), budget);
    if (floor_out) *floor_out = p ? num(p, "floor") : -1;
    cJSON_Delete(p);
    return ok;
}

/* -------------------------------------------------------------- the mlp */

/* graphs/mlp.json, worked out by hand. Values: x (input, 4096 B), fc1.weight
 * and fc2.weight (parameters, 262144 B each), four activations of 524288 B
 * (mm1, relu1, mm2, relu2) and the loss (4 B). What the backwards read
 * (saves): mm1 reads x, relu1 its output, mm2 relu1's output (its input),
 * relu2 its output, sum nothing. So after the forward x, relu1's and relu2's
 * outputs are held: activations 4096 + 2 * 524288 = 1052672, while mm1's and
 * mm2's outputs are dropped after their last forward use (relu). In the
 * backward, relu2's backward holds the gradients of its output and of its
 * input at once: transient 2 * 524288 = 1048576, the highest (the loss's
 * seed, 4 B, is freed before relu2's backward; mm2's and relu1's backwards,
 * later, hold two gradients' worth too). Parameters 2 * 262144, AdamW's two
 * moments twice that; each weight's gradient is made by its mm's backward
 * and held to the end: both at the end of the step, after the peak. The
 * total peak is at relu2's backward, with every activation still held:
 * 524288 + 1048576 + 1052672 + 1048576. Costs: forward 1e6 + 1e4 + 1e6 +
 * 1e4 + 1e4 = 2.03e6, every op's backward by default twice its forward
 * (every op leads to a parameter's gradient, so every backward runs):
 * 6.09e6 in all. */
#define MLP_PARAMS 524288.0
#define MLP_ACT 1052672.0
#define MLP_TRANSIENT 1048576.0
#define MLP_COST 6.09e6
/* The floor: mm2's backward needs relu1's output (its input), its output's
 * gradient and its input's gradient (3 * 524288), and makes fc2.weight's
 * gradient (262144), which is held from there on; x, bound once, is held
 * until mm1's backward, the last, reads it: no schedule holds less than
 * 4096 + 3 * 524288 + 262144 = 1839104 bytes of values. Dropping relu1's
 * output (recomputing mm1 and relu1 for mm2's backward) reaches it: relu2's
 * backward then holds 4096 + 3 * 524288. Parameters and AdamW's moments
 * come on top. */
#define MLP_FLOOR (524288.0 + 1048576.0 + 1839104.0)
/* Store-all with AdamW's moments. */
#define MLP_STORE_ALL (MLP_PARAMS + 2 * MLP_PARAMS + MLP_ACT + MLP_TRANSIENT)

static void test_mlp_store_all(const char *mlp) {
    static const struct {
        const char *request;
        double optim; /* bytes of optimizer state */
    } cases[] = {
        {"{\"optimizer\": {\"kind\": \"adamw\"}}", 2 * MLP_PARAMS},
        {"{\"strategy\": \"all\", \"optimizer\": {\"kind\": \"sgd\", \"momentum\": 0.9}}", MLP_PARAMS},
        {"{\"optimizer\": {\"kind\": \"none\"}}", 0},
        {NULL, 0}, /* no request: no optimizer */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cJSON *p = plan(mlp, cases[c].request, NULL);
        CHECK(p != NULL);
        if (!p) continue;
        const char *what = cases[c].request ? cases[c].request : "(none)";
        CHECK_MSG(feasible(p), "%s", what);
        CHECK_MSG(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "format")), "remat-plan") == 0, "%s",
                  what);
        CHECK(num(p, "version") == 1);
        CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "strategy")), "all") == 0);
        CHECK_MSG(peak(p, "parameters") == MLP_PARAMS, "%s: %.0f", what, peak(p, "parameters"));
        CHECK_MSG(peak(p, "gradients") == MLP_PARAMS, "%s: %.0f", what, peak(p, "gradients"));
        CHECK_MSG(peak(p, "optimizer state") == cases[c].optim, "%s: %.0f", what, peak(p, "optimizer state"));
        CHECK_MSG(peak(p, "activations") == MLP_ACT, "%s: %.0f", what, peak(p, "activations"));
        CHECK_MSG(peak(p, "transient") == MLP_TRANSIENT, "%s: %.0f", what, peak(p, "transient"));
        CHECK(peak(p, "workspace") == 0);
        CHECK(peak(p, "communication") == 0);
        double total = MLP_PARAMS + cases[c].optim + MLP_ACT + MLP_TRANSIENT;
        CHECK_MSG(peak(p, "total") == total, "%s: %.0f, not %.0f", what, peak(p, "total"), total);
        CHECK(num(p, "peak_bytes") == total);
        CHECK(num(p, "held_bytes") == total); /* every block a whole number of 256-byte units */
        CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "cost_unit")), "flops") == 0);
        CHECK_MSG(num(p, "cost") == MLP_COST, "%s: cost %g", what, num(p, "cost"));
        CHECK(num(p, "flops") == MLP_COST);
        CHECK(num(p, "extra_cost") == 0);
        CHECK(num(p, "recomputations") == 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, "recompute")) == 0);
        cJSON_Delete(p);
    }

    /* The same step with its costs in seconds: cost is their sum, FLOPs
     * unknown. */
    char *secs = malloc(strlen(mlp) + 3); /* 2 bytes longer */
    strcpy(secs, mlp);
    char *u = strstr(secs, "\"flops\"");
    CHECK(u != NULL);
    if (u) {
        memmove(u + 9, u + 7, strlen(u + 7) + 1); /* "flops" -> "seconds" */
        memcpy(u, "\"seconds\"", 9);
        cJSON *p = plan(secs, NULL, NULL);
        CHECK(p != NULL);
        if (p) {
            CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "cost_unit")), "seconds") == 0);
            CHECK_MSG(num(p, "cost") == MLP_COST, "cost %g", num(p, "cost"));
            CHECK(num(p, "flops") == 0);
            CHECK(peak(p, "activations") == MLP_ACT);
        }
        cJSON_Delete(p);
    }
    free(secs);

    /* The graph itself: one node per value read and per op, each traced
     * node carrying its op's id, each leaf its value's id. */
    remat_graph *g = NULL;
    remat_node loss = REMAT_NONE;
    CHECK_OK(remat_graph_read_json(mlp, &g, &loss));
    CHECK(g != NULL);
    if (g) {
        CHECK(remat_graph_node_count(g) == 8); /* x, fc1.weight, mm, relu, fc2.weight, mm, relu, sum */
        CHECK(remat_graph_traced_id(g, loss) == 4);
        CHECK(remat_graph_traced_id(g, 0) == 0 && remat_graph_traced_id(g, 1) == 1);
        CHECK(remat_graph_traced_id(g, 4) == 4); /* fc2.weight: value 4 */
        CHECK(remat_graph_traced_id(g, 5) == 2); /* the second mm: op 2 */
        CHECK(remat_graph_traced_id(g, 8) == -1);
    }
    remat_graph_destroy(g);
}

/* grads_resident (gradient accumulation, zero_grad(set_to_none=False)):
 * both weights' gradients are held from the start, so the peak at relu2's
 * backward holds them too (2 * 262144 more than store-all's); mm2's
 * backward holds its new gradient of fc2.weight (262144) as a transient
 * while the framework adds it in, beside the gradients of its output and
 * input: 2 * 524288 + 262144, the transient peak. */
static void test_mlp_grads_resident(const char *mlp) {
    cJSON *p = plan(mlp, "{\"grads_resident\": true}", NULL);
    CHECK(p != NULL && feasible(p));
    if (p) {
        CHECK_MSG(peak(p, "gradients") == MLP_PARAMS, "%.0f", peak(p, "gradients"));
        CHECK_MSG(peak(p, "transient") == 2 * 524288.0 + 262144.0, "%.0f", peak(p, "transient"));
        double total = 2 * MLP_PARAMS + MLP_ACT + MLP_TRANSIENT;
        CHECK_MSG(peak(p, "total") == total, "%.0f, not %.0f", peak(p, "total"), total);
    }
    cJSON_Delete(p);
    /* the floor rises by the gradients held before their backward */
    double f0 = 0, f1 = 0;
    cJSON *a = plan(mlp, "{\"budget\": 1}", NULL), *b = plan(mlp, "{\"budget\": 1, \"grads_resident\": true}", NULL);
    CHECK(a && b && !feasible(a) && !feasible(b));
    if (a && b) f0 = num(a, "floor"), f1 = num(b, "floor");
    CHECK_MSG(f1 > f0 && f1 <= f0 + MLP_PARAMS + 262144.0, "floors %.0f and %.0f", f0, f1);
    cJSON_Delete(a), cJSON_Delete(b);
}

/* communication_bytes (DDP's gradient buckets): held the whole step, so
 * every peak and the floor rise by exactly that many bytes, counted in
 * communication; a malformed count is refused. */
static void test_mlp_communication(const char *mlp) {
    const double comm = 1000003.0;
    cJSON *a = plan(mlp, "{\"strategy\": \"all\"}", NULL);
    cJSON *b = plan(mlp, "{\"strategy\": \"all\", \"communication_bytes\": 1000003}", NULL);
    CHECK(a && b && feasible(a) && feasible(b));
    if (a && b) {
        CHECK_MSG(peak(a, "communication") == 0 && peak(b, "communication") == comm, "%.0f", peak(b, "communication"));
        CHECK_MSG(peak(b, "total") == peak(a, "total") + comm, "%.0f, %.0f", peak(b, "total"), peak(a, "total"));
    }
    cJSON_Delete(a), cJSON_Delete(b);
    a = plan(mlp, "{\"budget\": 1, \"strategy\": \"optimal\"}", NULL);
    b = plan(mlp, "{\"budget\": 1, \"strategy\": \"optimal\", \"communication_bytes\": 1000003}", NULL);
    CHECK(a && b && !feasible(a) && !feasible(b));
    if (a && b)
        CHECK_MSG(num(b, "floor") == num(a, "floor") + comm, "floors %.0f, %.0f", num(a, "floor"), num(b, "floor"));
    cJSON_Delete(a), cJSON_Delete(b);
    remat_status st = REMAT_OK;
    CHECK(plan(mlp, "{\"communication_bytes\": -1}", &st) == NULL && st == REMAT_FORMAT);
    CHECK(plan(mlp, "{\"communication_bytes\": 1.5}", &st) == NULL && st == REMAT_FORMAT);
}

static void test_mlp_floor(const char *mlp) {
    /* Bisection: lo infeasible, hi feasible. */
    size_t lo = 1, hi = (size_t)MLP_STORE_ALL;
    CHECK(fits(mlp, hi, NULL));
    CHECK(!fits(mlp, lo, NULL));
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (fits(mlp, mid, NULL)) hi = mid;
        else lo = mid;
    }
    CHECK_MSG((double)hi == MLP_FLOOR, "bisection finds %zu, by hand %.0f", hi, MLP_FLOOR);
    double f1 = -1, f2 = -1;
    CHECK(fits(mlp, hi, NULL));
    CHECK(!fits(mlp, hi - 1, &f1));
    CHECK(!fits(mlp, hi - 1048576, &f2));
    CHECK_MSG(f1 == (double)hi, "the answer at floor - 1 names %.0f, bisection %zu", f1, hi);
    CHECK_MSG(f2 == (double)hi, "the answer at floor - 1 MiB names %.0f, bisection %zu", f2, hi);

    /* The infeasible answer in full. */
    char rq[96];
    snprintf(rq, sizeof rq, "{\"budget\": %zu, \"optimizer\": {\"kind\": \"adamw\"}}", hi - 1);
    cJSON *p = plan(mlp, rq, NULL);
    CHECK(p && !feasible(p));
    CHECK(p && num(p, "budget") == (double)(hi - 1));
    CHECK(p && has(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "error")), "smallest feasible budget"));
    CHECK(p && !cJSON_GetObjectItemCaseSensitive(p, "predicted"));
    cJSON_Delete(p);
    /* A fixed strategy does not search: no floor, and says what it holds. */
    p = plan(mlp, "{\"budget\": 1048576, \"strategy\": \"all\", \"optimizer\": {\"kind\": \"adamw\"}}", NULL);
    CHECK(p && !feasible(p));
    CHECK(p && !cJSON_GetObjectItemCaseSensitive(p, "floor"));
    CHECK(p && has(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "error")), "holds 3674112 bytes"));
    cJSON_Delete(p);
}

static void test_mlp_between(const char *mlp) {
    double store_all = MLP_STORE_ALL;
    size_t budgets[] = {(size_t)MLP_FLOOR, (size_t)((MLP_FLOOR + store_all) / 2), (size_t)store_all - 1};
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
        char rq[96];
        snprintf(rq, sizeof rq, "{\"budget\": %zu, \"optimizer\": {\"kind\": \"adamw\"}}", budgets[b]);
        cJSON *p = plan(mlp, rq, NULL);
        CHECK(p && feasible(p));
        if (!p || !feasible(p)) {
            cJSON_Delete(p);
            continue;
        }
        CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "strategy")), "optimal") == 0);
        CHECK_MSG(num(p, "peak_bytes") <= (double)budgets[b], "peak %.0f, budget %zu", num(p, "peak_bytes"),
                  budgets[b]);
        CHECK(num(p, "held_bytes") <= (double)budgets[b]);
        CHECK(num(p, "peak_bytes") == peak(p, "total"));
        /* below store-all: something is recomputed, and it costs */
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(p, "recompute");
        int n = cJSON_GetArraySize(rc);
        CHECK_MSG(n > 0, "budget %zu: nothing recomputed", budgets[b]);
        CHECK(num(p, "recomputations") >= n);
        CHECK(num(p, "extra_cost") > 0);
        CHECK(num(p, "cost") == MLP_COST + num(p, "extra_cost"));
        /* op ids, ascending, each once, never the loss's op (nothing reads
         * the loss) */
        double prev = -1;
        const cJSON *it;
        cJSON_ArrayForEach(it, rc) {
            CHECK(cJSON_IsNumber(it) && it->valuedouble > prev && it->valuedouble < 4);
            prev = it->valuedouble;
        }
        cJSON_Delete(p);
    }
}

/* ------------------------------------------------------------ hostile */

/* A small valid graph; each case below changes one piece of it. */
static const char *base =
    "{\"format\": \"remat-graph\", \"version\": 1,\n"
    " \"values\": [\n"
    "  {\"id\": 0, \"kind\": \"input\", \"name\": \"x\", \"bytes\": 16},\n"
    "  {\"id\": 1, \"kind\": \"parameter\", \"name\": \"w\", \"bytes\": 64},\n"
    "  {\"id\": 2, \"kind\": \"activation\", \"bytes\": 32},\n"
    "  {\"id\": 3, \"kind\": \"activation\", \"bytes\": 4}\n"
    " ],\n"
    " \"ops\": [\n"
    "  {\"id\": 0, \"name\": \"mm\", \"inputs\": [0, 1], \"outputs\": [2], \"saves\": [0], \"forward\": 8},\n"
    "  {\"id\": 1, \"name\": \"sum\", \"inputs\": [2], \"outputs\": [3], \"saves\": [], \"forward\": 1}\n"
    " ],\n"
    " \"loss\": 3}\n";

/* src with `from` (which occurs once) replaced by `to`; caller frees. */
static char *replaced(const char *src, const char *from, const char *to) {
    const char *at = strstr(src, from);
    if (!at || strstr(at + 1, from)) {
        fprintf(stderr, "test bug: '%s' does not occur once in the graph\n", from);
        abort();
    }
    size_t nf = strlen(from), nt = strlen(to), n = strlen(src);
    char *s = malloc(n - nf + nt + 1);
    memcpy(s, src, (size_t)(at - src));
    memcpy(s + (at - src), to, nt);
    memcpy(s + (at - src) + nt, at + nf, n - (size_t)(at - src) - nf + 1);
    return s;
}

static char *with(const char *from, const char *to) { return replaced(base, from, to); }

/* text is refused with REMAT_FORMAT by the reader and by the planner, with
 * a message holding both parts (the op or value, and the field). */
static void refused(const char *text, const char *who, const char *what) {
    remat_graph *g = (remat_graph *)&g;
    remat_node loss = 7;
    remat_status st = remat_graph_read_json(text, &g, &loss);
    const char *msg = remat_last_error();
    CHECK_MSG(st == REMAT_FORMAT, "%s / %s: status %s (%s)", who, what, remat_status_str(st), msg);
    CHECK_MSG(has(msg, who) && has(msg, what), "wanted '%s' and '%s' in: %s", who, what, msg);
    CHECK(g == NULL && loss == REMAT_NONE);
    char *out = (char *)&out;
    st = remat_plan_graph_json(text, NULL, &out);
    CHECK_MSG(st == REMAT_FORMAT && out == NULL, "%s / %s: the planner says %s", who, what, remat_status_str(st));
    CHECK(has(remat_last_error(), what));
}

static void refused_with(const char *from, const char *to, const char *who, const char *what) {
    char *s = with(from, to);
    refused(s, who, what);
    free(s);
}

static void test_hostile(void) {
    /* the base is valid */
    cJSON *p = plan(base, NULL, NULL);
    CHECK(p && feasible(p));
    cJSON_Delete(p);

    /* JSON syntax: a trailing comma in op 0's outputs, on line 9 of the
     * base, where a value should follow it: the ']' after 58 characters */
    refused_with("\"outputs\": [2]", "\"outputs\": [2,]", "JSON syntax error", "line 9, column 59");
    refused_with("\"loss\": 3}", "\"loss\": 3} x", "JSON syntax error", "line 12, column 13");
    refused("", "JSON syntax error", "line 1, column 1");
    refused("[1, 2]", "a graph file", "JSON object");

    /* header */
    refused_with("\"remat-graph\"", "\"remat-graf\"", "'format'", "\"remat-graph\"");
    refused_with("\"version\": 1", "\"version\": 2", "'version'", "must be 1");
    refused_with("\"version\": 1", "\"version\": \"1\"", "'version'", "must be 1");
    refused_with("\"version\": 1", "\"version\": 1, \"cost_unit\": \"joules\"", "'cost_unit'", "\"seconds\"");

    /* missing parts */
    refused_with("\"values\"", "\"valuez\"", "'values'", "missing");
    refused_with("\"ops\"", "\"opz\"", "'ops'", "missing");
    refused_with("\"loss\": 3", "\"lozz\": 3", "'loss'", "missing");
    refused_with("\"ops\": [\n", "\"ops\": [], \"x\": [\n", "'ops'", "empty");
    refused_with("\"outputs\": [3], ", "", "op 1 (sum)", "'outputs' is missing");
    refused_with("\"kind\": \"activation\", \"bytes\": 32", "\"bytes\": 32", "value 2", "'kind'");
    refused_with("\"kind\": \"parameter\", \"name\": \"w\"", "\"kind\": \"parameter\"", "value 1", "'name'");

    /* ids out of order, out of range */
    refused_with("{\"id\": 2, \"kind\"", "{\"id\": 5, \"kind\"", "value 2", "'id' is 5");
    refused_with("{\"id\": 1, \"name\": \"sum\"", "{\"id\": 0, \"name\": \"sum\"", "op 1 (sum)", "'id' is 0");
    refused_with("\"inputs\": [0, 1]", "\"inputs\": [0, 9]", "op 0 (mm)", "'inputs' names value 9");
    refused_with("\"loss\": 3", "\"loss\": 4", "'loss'", "names value 4");

    /* order: a value read before it is made (a cycle), an output that is a
     * parameter, a value made twice */
    refused_with("\"inputs\": [0, 1]", "\"inputs\": [0, 1, 3]", "op 0 (mm)", "reads value 3 before any op makes it");
    refused_with("\"inputs\": [2]", "\"inputs\": [3]", "op 1 (sum)", "reads value 3 before any op makes it");
    refused_with("\"outputs\": [2]", "\"outputs\": [2, 1]", "op 0 (mm)",
                 "output 1 is value 1, which is an input, parameter");
    refused_with("\"outputs\": [3]", "\"outputs\": [3, 2]", "op 1 (sum)", "value 2 is an output of op 0 already");

    /* sizes */
    refused_with("\"bytes\": 32", "\"bytes\": -32", "value 2", "'bytes' is negative");
    refused_with("\"bytes\": 32", "\"bytes\": 32.5", "value 2", "'bytes' is not a whole number");
    refused_with("\"bytes\": 32", "\"bytes\": 1e400", "value 2", "'bytes' is not finite");
    refused_with("\"bytes\": 32", "\"bytes\": 9007199254740992", "value 2", "'bytes' is too large");
    refused_with("\"bytes\": 32", "\"bytes\": \"32\"", "value 2", "'bytes' is not a number");
    refused_with("\"bytes\": 64", "\"bytes\": 0", "value 1 ('w')", "0 bytes");
    /* each below 2^53, together not */
    refused_with("\"bytes\": 32", "\"bytes\": 9007199254740990", "value 2", "total of all values' bytes");
    refused_with("\"bytes\": 32", "\"bytes\": 32, \"grad_bytes\": -1", "value 2", "'grad_bytes' is negative");
    refused_with("\"bytes\": 32", "\"bytes\": 32, \"grad_bytes\": 9007199254740990", "value 2",
                 "total of all values' bytes");
    refused_with("\"bytes\": 4}", "\"bytes\": 8}", "'loss' (value 3)", "(4 bytes)");
    refused_with("\"name\": \"w\"", "\"name\": \"x\"", "value 1", "'x' is value 0's too");

    /* what an op says */
    refused_with("\"saves\": []", "\"saves\": [1]", "op 1 (sum)", "'saves' names value 1, which is neither");
    refused_with("\"saves\": [0]", "\"saves\": 0", "op 0 (mm)", "'saves' is not an array");
    {
        text t = {0};
        put(&t, "\"inputs\": [0");
        for (int i = 1; i < 33; i++) put(&t, ", %d", i % 2);
        put(&t, "]");
        refused_with("\"inputs\": [0, 1]", t.s, "op 0 (mm)", "'inputs' has 33 entries; at most 32");
        free(t.s);
    }
    refused_with("\"outputs\": [3]", "\"outputs\": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]", "op 1 (sum)",
                 "'outputs' has 17 entries; at most 16");
    refused_with("\"forward\": 8", "\"forward\": 8, \"stateful\": 1", "op 0 (mm)", "'stateful' is not true or false");
    refused_with("\"forward\": 8", "\"forward\": 8, \"random\": \"no\"", "op 0 (mm)", "'random' is not true or false");
    refused_with("\"forward\": 8", "\"forward\": 8, \"family\": \"matmul\"", "op 0 (mm)", "'family' must be one of");
    refused_with("\"forward\": 8", "\"forward\": 8, \"family\": 3", "op 0 (mm)", "'family' must be one of");
    refused_with("\"forward\": 8", "\"forward\": -8", "op 0 (mm)", "'forward' must be a number from 0");
    refused_with("\"forward\": 8", "\"forward\": \"8\"", "op 0 (mm)", "'forward' is not a number");
    refused_with("\"forward\": 8", "\"forward\": 8, \"backward\": 1e400", "op 0 (mm)", "'backward' must be a number");
    refused_with("\"forward\": 8", "\"forward\": 8, \"recompute\": 1e31", "op 0 (mm)", "'recompute' must be a number");
    refused_with("\"forward\": 8", "\"forward\": 8, \"transient\": {\"forward\": -1}", "op 0 (mm)",
                 "'transient.forward' is negative");
    refused_with("\"forward\": 8", "\"forward\": 8, \"transient\": 5", "op 0 (mm)", "'transient' is not an object");
    refused_with("\"name\": \"mm\"", "\"name\": 5", "op 0", "'name' is not a string");

    /* the library's arguments */
    remat_graph *g = NULL;
    remat_node loss;
    CHECK(remat_graph_read_json(NULL, &g, &loss) == REMAT_INVALID);
    char *out = NULL;
    CHECK(remat_plan_graph_json(base, "{\"budget\": -1}", &out) == REMAT_FORMAT && out == NULL);
    CHECK(has(remat_last_error(), "'budget'"));
    CHECK(remat_plan_graph_json(base, "{\"strategy\": \"fast\"}", &out) != REMAT_OK && out == NULL);
    CHECK(remat_plan_graph_json(base, "{\"optimizer\": {\"kind\": \"lion\"}}", &out) == REMAT_FORMAT);
    CHECK(has(remat_last_error(), "optimizer 'kind'"));
}

/* The base with a second output of op 0, value 4 (a mask, 48 bytes), that
 * only op 0's backward reads (saves as given): the op's aux, held from the
 * forward to that backward. */
static char *with_mask(const char *saves) {
    char out[96];
    snprintf(out, sizeof out, "\"outputs\": [2, 4], \"saves\": %s", saves);
    char *a = with("\"outputs\": [2], \"saves\": [0]", out);
    char *b = replaced(a, "\"bytes\": 4}", "\"bytes\": 4},\n  {\"id\": 4, \"kind\": \"activation\", \"bytes\": 48}");
    free(a);
    return b;
}

/* A value listed twice in saves is read once: the plan is the same. */
static void test_saves_repeated(void) {
    char *a = with_mask("[0, 4]"), *b = with_mask("[4, 0, 4, 0]");
    cJSON *pa = plan(a, "{\"strategy\": \"all\"}", NULL), *pb = plan(b, "{\"strategy\": \"all\"}", NULL);
    CHECK(pa && pb);
    if (pa && pb) {
        /* x (16, read by op 0's backward) and the mask (48) */
        CHECK_MSG(peak(pa, "activations") == 16 + 48, "%.0f", peak(pa, "activations"));
        CHECK_MSG(peak(pb, "activations") == peak(pa, "activations"), "%.0f", peak(pb, "activations"));
    }
    cJSON_Delete(pa), cJSON_Delete(pb);
    free(a), free(b);
}

/* A later output that nothing reads is a transient of the forward
 * (workspace, with the op's transient.forward); one that a later op reads
 * is a node of its own, carrying the op's id. */
static void test_later_outputs(void) {
    char *a = with_mask("[0]");
    char *b = replaced(a, "\"forward\": 8", "\"forward\": 8, \"transient\": {\"forward\": 10}");
    cJSON *pa = plan(a, NULL, NULL), *pb = plan(b, NULL, NULL);
    CHECK(pa && pb);
    if (pa && pb) {
        CHECK_MSG(peak(pa, "workspace") == 48, "%.0f", peak(pa, "workspace"));
        CHECK_MSG(peak(pb, "workspace") == 58, "%.0f", peak(pb, "workspace"));
        CHECK(peak(pa, "activations") == 16); /* x alone */
    }
    cJSON_Delete(pa), cJSON_Delete(pb);
    free(b);
    b = replaced(a, "\"inputs\": [2]", "\"inputs\": [2, 4]");
    remat_graph *g = NULL;
    remat_node loss;
    CHECK_OK(remat_graph_read_json(b, &g, &loss));
    if (g) {
        /* x, w, op 0, op 0's output 4, op 1 */
        CHECK(remat_graph_node_count(g) == 5);
        CHECK(remat_graph_traced_id(g, 2) == 0 && remat_graph_traced_id(g, 3) == 0);
        CHECK(remat_graph_traced_id(g, 4) == 1 && loss == 4);
    }
    remat_graph_destroy(g);
    free(a), free(b);
}

/* grad_bytes: the gradient of a value takes other bytes than the value.
 * In the base, the sum's backward holds the loss's seed (4) and the
 * gradient of its input, value 2 (32 B, or its grad_bytes): the transient
 * peak. */
static void test_grad_bytes(void) {
    char *a = with("\"bytes\": 32", "\"bytes\": 32, \"grad_bytes\": 100");
    cJSON *p0 = plan(base, NULL, NULL), *p1 = plan(a, NULL, NULL);
    CHECK(p0 && p1);
    if (p0 && p1) {
        CHECK_MSG(peak(p0, "transient") == 4 + 32, "%.0f", peak(p0, "transient"));
        CHECK_MSG(peak(p1, "transient") == 4 + 100, "%.0f", peak(p1, "transient"));
    }
    cJSON_Delete(p0), cJSON_Delete(p1);
    free(a);
}

/* grad_views (PyTorch's cat): the concatenation's input gradients are
 * views into its output's gradient, which is held until the last of them
 * goes. x (input) -> a (1000 B) -> b (3000 B) -> c = cat(b, a) (4000 B)
 * -> the loss (4 B). Store-all's gradients (category transient; the
 * loss's seed is freed after the loss's backward): without the flag the
 * cat's backward holds c's gradient and takes b's and a's (4000 + 3000 +
 * 1000); with it the views take nothing, and b's backward, adding its
 * part into a's gradient, makes the sum (1000 B) while c's gradient is
 * still held by a's view (4000 + 1000). */
static void test_grad_views(void) {
    const char *g = "{\"format\": \"remat-graph\", \"version\": 1, \"loss\": 5, \"values\": ["
                    "{\"id\": 0, \"kind\": \"input\", \"name\": \"x\", \"bytes\": 4096},"
                    "{\"id\": 1, \"kind\": \"parameter\", \"name\": \"w\", \"bytes\": 64},"
                    "{\"id\": 2, \"kind\": \"activation\", \"bytes\": 1000},"
                    "{\"id\": 3, \"kind\": \"activation\", \"bytes\": 3000},"
                    "{\"id\": 4, \"kind\": \"activation\", \"bytes\": 4000},"
                    "{\"id\": 5, \"kind\": \"activation\", \"bytes\": 4}], \"ops\": ["
                    "{\"id\": 0, \"inputs\": [0, 1], \"outputs\": [2], \"saves\": [0]},"
                    "{\"id\": 1, \"inputs\": [2], \"outputs\": [3], \"saves\": [2]},"
                    "{\"id\": 2, \"name\": \"aten.cat\", \"inputs\": [3, 2], \"outputs\": [4]VIEWS},"
                    "{\"id\": 3, \"inputs\": [4], \"outputs\": [5], \"saves\": [4]}]}";
    char *plain = replaced(g, "VIEWS", ""), *views = replaced(g, "VIEWS", ", \"grad_views\": true");
    cJSON *p0 = plan(plain, NULL, NULL), *p1 = plan(views, NULL, NULL);
    CHECK(p0 && p1);
    if (p0 && p1) {
        CHECK_MSG(peak(p0, "transient") == 4000 + 3000 + 1000, "%.0f", peak(p0, "transient"));
        CHECK_MSG(peak(p1, "transient") == 4000 + 1000, "%.0f", peak(p1, "transient"));
    }
    cJSON_Delete(p0), cJSON_Delete(p1);
    free(plain), free(views);
    /* cat of a cat, d = cat(c = cat(b, a), b) (7000 B): c's gradient is a
     * view into d's, and a's a view into that memory too; b gets two views,
     * summed out of place at c's backward (3000 B, d's gradient still held);
     * at b's backward, a's sum (1000 B) is made before the last view goes:
     * 7000 + 3000 + 1000, where without the flag d's backward holds its
     * gradient beside c's and b's (7000 + 4000 + 3000) */
    const char *g2 = "{\"format\": \"remat-graph\", \"version\": 1, \"loss\": 6, \"values\": ["
                     "{\"id\": 0, \"kind\": \"input\", \"name\": \"x\", \"bytes\": 4096},"
                     "{\"id\": 1, \"kind\": \"parameter\", \"name\": \"w\", \"bytes\": 64},"
                     "{\"id\": 2, \"kind\": \"activation\", \"bytes\": 1000},"
                     "{\"id\": 3, \"kind\": \"activation\", \"bytes\": 3000},"
                     "{\"id\": 4, \"kind\": \"activation\", \"bytes\": 4000},"
                     "{\"id\": 5, \"kind\": \"activation\", \"bytes\": 7000},"
                     "{\"id\": 6, \"kind\": \"activation\", \"bytes\": 4}], \"ops\": ["
                     "{\"id\": 0, \"inputs\": [0, 1], \"outputs\": [2], \"saves\": [0]},"
                     "{\"id\": 1, \"inputs\": [2], \"outputs\": [3], \"saves\": [2]},"
                     "{\"id\": 2, \"inputs\": [3, 2], \"outputs\": [4], \"grad_views\": true},"
                     "{\"id\": 3, \"inputs\": [4, 3], \"outputs\": [5], \"grad_views\": true},"
                     "{\"id\": 4, \"inputs\": [5], \"outputs\": [6], \"saves\": [5]}]}";
    char *plain2 = strdup(g2);
    for (char *at; (at = strstr(plain2, ", \"grad_views\": true"));) memmove(at, at + 20, strlen(at + 20) + 1);
    p0 = plan(plain2, NULL, NULL), p1 = plan(g2, NULL, NULL);
    CHECK(p0 && p1);
    if (p0 && p1) {
        CHECK_MSG(peak(p0, "transient") == 7000 + 4000 + 3000, "%.0f", peak(p0, "transient"));
        CHECK_MSG(peak(p1, "transient") == 7000 + 3000 + 1000, "%.0f", peak(p1, "transient"));
    }
    cJSON_Delete(p0), cJSON_Delete(p1);
    free(plain2);
    remat_status st;
    char *bad = replaced(g, "VIEWS", ", \"grad_views\": 1");
    CHECK(plan(bad, NULL, &st) == NULL && st == REMAT_FORMAT && has(remat_last_error(), "grad_views"));
    free(bad);
}

/* ------------------------------------------------------------- bounds */

/* "values": n values (the first real, the rest {}), "ops": m ops ({}):
 * refused on a count before any entry is read. */
static void refused_count(int n_values, int n_ops, const char *what) {
    text t = {0};
    put(&t, "{\"format\": \"remat-graph\", \"version\": 1, \"loss\": 0, \"values\": [");
    put(&t, "{\"id\": 0, \"kind\": \"activation\", \"bytes\": 4}");
    for (int i = 1; i < n_values; i++) put(&t, ",{}");
    put(&t, "], \"ops\": [{}");
    for (int i = 1; i < n_ops; i++) put(&t, ",{}");
    put(&t, "]}");
    double t0 = now();
    remat_graph *g = NULL;
    remat_node loss;
    remat_status st = remat_graph_read_json(t.s, &g, &loss);
    double dt = now() - t0;
    CHECK_MSG(st == REMAT_FORMAT && has(remat_last_error(), what), "%s: %s", remat_status_str(st), remat_last_error());
    CHECK(g == NULL);
    CHECK_MSG(dt < 20, "%.1f s to refuse it", dt); /* a loose bound: the text's parse, nothing more */
    printf("%d values, %d ops: refused in %.2f s: %s\n", n_values, n_ops, dt, remat_last_error());
    free(t.s);
}

/* A chain of n ops: value 0 the input x (4096 B), value 1 a parameter w
 * (1024 B) that op 0 reads with x, then op i makes value i + 2 (4096 B; the
 * last, the loss, 4 B) from value i + 1 and its backward reads that input.
 * With wide, op i also reads a parameter of its own, "w<i>" (4 B, value
 * n + 2 + i), and every op has a name: the reader used to compare each
 * named leaf or op with every node before it (n^2). */
/* chain(n, wide), and with per > 0 ops 1 .. n - 2 in checkpoint regions of
 * per ops each (region (i - 1) / per), op 0 and the loss's outside them. */
static char *chain_of(int n, int wide, int per) {
    text t = {0};
    put(&t, "{\"format\": \"remat-graph\", \"version\": 1, \"values\": [\n"
            "{\"id\": 0, \"kind\": \"input\", \"name\": \"x\", \"bytes\": 4096},\n"
            "{\"id\": 1, \"kind\": \"parameter\", \"name\": \"w\", \"bytes\": 1024}");
    for (int i = 0; i < n; i++)
        put(&t, ",\n{\"id\": %d, \"kind\": \"activation\", \"bytes\": %d}", i + 2, i < n - 1 ? 4096 : 4);
    for (int i = 0; i < n && wide; i++)
        put(&t, ",\n{\"id\": %d, \"kind\": \"parameter\", \"name\": \"w%d\", \"bytes\": 4}", n + 2 + i, i);
    put(&t, "],\n\"ops\": [\n");
    for (int i = 0; i < n; i++) {
        put(&t, "%s{\"id\": %d, %s\"inputs\": [%d%s", i ? ",\n" : "", i, wide ? "\"name\": \"aten.mul\", " : "",
            i ? i + 1 : 0, i ? "" : ", 1");
        if (wide) put(&t, ", %d", n + 2 + i);
        put(&t, "], \"outputs\": [%d], \"saves\": [%d], \"forward\": 1000", i + 2, i ? i + 1 : 0);
        if (per > 0 && i > 0 && i < n - 1) put(&t, ", \"region\": %d", (i - 1) / per);
        put(&t, "}");
    }
    put(&t, "],\n\"loss\": %d}\n", n + 1);
    return t.s;
}

static char *chain(int n, int wide) { return chain_of(n, wide, 0); }

/* Checkpoint regions ('region', per-layer checkpointing): manual drops what
 * each region makes but its output and recomputes it, the first op of each
 * region of two; optimal, which has that schedule among its candidates,
 * is never costlier at manual's peak; a region that is not a whole number
 * is refused. */
static void test_regions(void) {
    char *c = chain_of(12, 0, 2); /* 5 regions: ops 1-2, 3-4, ..., 9-10 */
    cJSON *m = plan(c, "{\"strategy\": \"manual\"}", NULL);
    CHECK(m && feasible(m));
    if (m) {
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(m, "recompute");
        int n = cJSON_GetArraySize(rec), ok = n == 5;
        for (int k = 0; k < n && ok; k++) ok = cJSON_GetArrayItem(rec, k)->valuedouble == 1 + 2 * k;
        CHECK_MSG(ok, "manual recomputes %d ops, not ops 1, 3, 5, 7, 9", n);
        CHECK_MSG(num(m, "extra_flops") == 5000, "%.0f", num(m, "extra_flops"));
        char rq[160];
        snprintf(rq, sizeof rq, "{\"strategy\": \"optimal\", \"budget\": %.0f}", num(m, "peak_bytes"));
        cJSON *o = plan(c, rq, NULL);
        CHECK(o && feasible(o));
        if (o)
            CHECK_MSG(num(o, "extra_flops") <= num(m, "extra_flops"), "optimal %.0f, per-layer %.0f",
                      num(o, "extra_flops"), num(m, "extra_flops"));
        cJSON_Delete(o);
        cJSON *a = plan(c, "{\"strategy\": \"all\"}", NULL);
        CHECK(a && num(m, "peak_bytes") < num(a, "peak_bytes"));
        cJSON_Delete(a);
    }
    cJSON_Delete(m);
    free(c);
    remat_graph *g = NULL;
    remat_node loss;
    const char *bad = "{\"format\": \"remat-graph\", \"version\": 1, \"values\": ["
                      "{\"id\": 0, \"kind\": \"parameter\", \"name\": \"w\", \"bytes\": 4},"
                      "{\"id\": 1, \"kind\": \"activation\", \"bytes\": 4}], \"ops\": ["
                      "{\"id\": 0, \"inputs\": [0], \"outputs\": [1], \"region\": 1.5}], \"loss\": 1}";
    CHECK(remat_graph_read_json(bad, &g, &loss) == REMAT_FORMAT && g == NULL);
    CHECK_MSG(strstr(remat_last_error(), "'region'") != NULL, "%s", remat_last_error());
}

static void test_long_chain(void) {
    int n = quick ? 20000 : 200000;
    char *c = chain(n, 1);
    /* Store-all, by hand: x and every value but the loss are read by the
     * next op's backward, so the forward ends holding n * 4096 bytes; the
     * loss op's backward then adds its seed (4) and its input's gradient
     * (4096), the highest point (every later backward has freed one more
     * value than it adds), with its parameter's gradient (4), the first
     * one made; two gradients at once (8192) is the transient peak;
     * parameters 1024 + 4 n, their gradients as much at the end, no
     * optimizer. */
    double t0 = now();
    cJSON *p = plan(c, "{\"strategy\": \"all\"}", NULL);
    double dt_all = now() - t0;
    CHECK(p && feasible(p));
    double act = 4096.0 * n, params = 1024.0 + 4.0 * n, total = params + act + 4100.0 + 4.0;
    if (p) {
        CHECK_MSG(peak(p, "activations") == act, "%.0f, not %.0f", peak(p, "activations"), act);
        CHECK_MSG(peak(p, "transient") == 8192, "%.0f", peak(p, "transient"));
        CHECK_MSG(num(p, "peak_bytes") == total, "%.0f, not %.0f", num(p, "peak_bytes"), total);
        CHECK_MSG(peak(p, "parameters") == params && peak(p, "gradients") == params, "%.0f, %.0f, not %.0f",
                  peak(p, "parameters"), peak(p, "gradients"), params);
        CHECK(num(p, "cost") == 3000.0 * n);
    }
    /* loose: about a second in a Release build, minutes when it was n^2 */
    CHECK_MSG(dt_all < (quick ? 60 : 20), "%.1f s to read and plan a chain of %d ops", dt_all, n);
    cJSON_Delete(p);
    free(c);

    /* optimal under a quarter of store-all, on a shorter chain: its DTR
     * candidates (up to 10 million steps each) take about 2 GB and 10 s on
     * 100,000 ops in a Release build, and 1,000 ops cost the sanitizer
     * build half a minute */
    int n_all = n;
    n = quick ? 1000 : 100000;
    c = chain(n, 0);
    total = 2048.0 + 4096.0 * n + 4100.0;
    char rq[64];
    size_t budget = (size_t)(total / 4);
    snprintf(rq, sizeof rq, "{\"budget\": %zu}", budget);
    t0 = now();
    p = plan(c, rq, NULL);
    double dt_opt = now() - t0;
    CHECK(p && feasible(p));
    if (p) {
        CHECK(num(p, "held_bytes") <= (double)budget);
        CHECK(num(p, "peak_bytes") <= (double)budget);
        CHECK(num(p, "recomputations") > 0);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, "recompute")) > 0);
    }
    cJSON_Delete(p);
    free(c);
    printf("chain of %d ops, all: %.2f s; chain of %d ops, optimal at %zu bytes: %.2f s\n", n_all, dt_all, n, budget,
           dt_opt);
}

/* ------------------------------------------------------------ in place */

/* A value written in place (hardtanh_ after a clone that its backward
 * reads, as PyTorch ran MobileNet's ReLU6 before capture made the clone and
 * the write one op): mm makes a, clone copies it to c, hardtanh_ overwrites
 * a (its memory now holds b), two exps, a sum. Where the schedule does not
 * read a again, hardtanh_ takes no memory (a's is b's); where it does (the
 * cheaper plan under a budget keeps a and recomputes clone, hardtanh_ and
 * the first exp from it), the framework keeps a copy of a before the write,
 * and the step holds what the out-of-place op's holds: the mark never makes
 * a schedule one the framework cannot run. */
static const char *inplace =
    "{\"format\": \"remat-graph\", \"version\": 1,\n"
    " \"values\": [\n"
    "  {\"id\": 0, \"kind\": \"input\", \"name\": \"x\", \"bytes\": 16},\n"
    "  {\"id\": 1, \"kind\": \"parameter\", \"name\": \"w\", \"bytes\": 64},\n"
    "  {\"id\": 2, \"kind\": \"activation\", \"bytes\": 1024, \"overwritten_by\": 2},\n"
    "  {\"id\": 3, \"kind\": \"activation\", \"bytes\": 1024},\n"
    "  {\"id\": 4, \"kind\": \"activation\", \"bytes\": 1024},\n"
    "  {\"id\": 5, \"kind\": \"activation\", \"bytes\": 1024},\n"
    "  {\"id\": 6, \"kind\": \"activation\", \"bytes\": 1024},\n"
    "  {\"id\": 7, \"kind\": \"activation\", \"bytes\": 4}\n"
    " ],\n"
    " \"ops\": [\n"
    "  {\"id\": 0, \"name\": \"mm\", \"inputs\": [0, 1], \"outputs\": [2], \"saves\": [0], \"forward\": 1000, "
    "\"family\": \"linear\"},\n"
    "  {\"id\": 1, \"name\": \"clone\", \"inputs\": [2], \"outputs\": [3], \"saves\": [], \"forward\": 1},\n"
    "  {\"id\": 2, \"name\": \"hardtanh_\", \"inputs\": [2, 3], \"outputs\": [4], \"saves\": [3], \"forward\": 1},\n"
    "  {\"id\": 3, \"name\": \"exp\", \"inputs\": [4], \"outputs\": [5], \"saves\": [5], \"forward\": 1},\n"
    "  {\"id\": 4, \"name\": \"exp\", \"inputs\": [5], \"outputs\": [6], \"saves\": [6], \"forward\": 1},\n"
    "  {\"id\": 5, \"name\": \"sum\", \"inputs\": [6], \"outputs\": [7], \"saves\": [], \"forward\": 1}\n"
    " ],\n"
    " \"loss\": 7}\n";

/* An array of numbers as a string "0,1". */
static void ids(const cJSON *arr, char *buf, size_t n) {
    buf[0] = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, "%s%d", k ? "," : "", (int)it->valuedouble);
    }
}

static void test_inplace(void) {
    char *unmarked = replaced(inplace, ", \"overwritten_by\": 2", "");
    char got[64], want[64];
    /* store-all: a is not read after hardtanh_, whose write takes no memory */
    cJSON *p = plan(inplace, "{\"timeline\": true}", NULL), *q = plan(unmarked, "{\"timeline\": true}", NULL);
    CHECK(p && q && feasible(p) && feasible(q));
    if (p && q) {
        CHECK_MSG(plan_forward_row(p, 2) == 2064, "hardtanh_ holds %.0f, not 2064 (x, a given to b, c)",
                  plan_forward_row(p, 2));
        CHECK_MSG(plan_forward_row(q, 2) == 3088, "unmarked, hardtanh_ holds %.0f, not 3088", plan_forward_row(q, 2));
    }
    cJSON_Delete(p), cJSON_Delete(q);
    /* under a budget: a kept past hardtanh_ (a copy), as the out-of-place op would keep it */
    const char *rq = "{\"budget\": 4880, \"timeline\": true}";
    p = plan(inplace, rq, NULL), q = plan(unmarked, rq, NULL);
    CHECK(p && q && feasible(p) && feasible(q));
    if (p && q) {
        ids(cJSON_GetObjectItemCaseSensitive(p, "recompute"), got, sizeof got);
        CHECK_MSG(strcmp(got, "1,2,3") == 0, "recomputes %s, not clone, hardtanh_ and exp from a kept a", got);
        const cJSON *grp = cJSON_GetObjectItemCaseSensitive(p, "recompute_groups");
        CHECK(cJSON_GetArraySize(grp) == 1); /* at once, before the second exp's backward */
        ids(cJSON_GetArrayItem(grp, 0), got, sizeof got);
        ids(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(q, "recompute_groups"), 0), want, sizeof want);
        CHECK_MSG(strcmp(got, want) == 0, "recompute group %s, unmarked %s", got, want);
        CHECK_MSG(plan_forward_row(p, 2) == 3088, "hardtanh_ holds %.0f, not 3088 (a kept beside b)",
                  plan_forward_row(p, 2));
        CHECK(num(p, "peak_bytes") == num(q, "peak_bytes") && num(p, "peak_bytes") <= 4880);
    }
    cJSON_Delete(p), cJSON_Delete(q);
    free(unmarked);

    /* what the mark may say */
    static const struct {
        const char *from, *to, *who, *what;
    } bad[] = {
        {"\"overwritten_by\": 2", "\"overwritten_by\": -1", "value 2", "'overwritten_by' is negative"},
        {"\"overwritten_by\": 2", "\"overwritten_by\": 2.5", "value 2", "'overwritten_by' is not a whole number"},
        {"\"overwritten_by\": 2", "\"overwritten_by\": 9", "value 2", "names op 9, which must be an op after"},
        {"\"overwritten_by\": 2", "\"overwritten_by\": 3", "value 2", "names op 3, which must be an op after"},
        {"\"overwritten_by\": 2", "\"overwritten_by\": 0", "value 2", "names op 0, which must be an op after"},
        {"\"bytes\": 64}", "\"bytes\": 64, \"overwritten_by\": 0}", "value 1", "only an activation"},
        {"\"inputs\": [4], \"outputs\": [5]", "\"inputs\": [4, 2], \"outputs\": [5]", "value 2",
         "op 3 reads it after op 2 overwrote it"},
        {"\"outputs\": [3], \"saves\": []", "\"outputs\": [3], \"saves\": [2]", "value 2",
         "the backward of op 1 reads it"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *s = replaced(inplace, bad[i].from, bad[i].to);
        refused(s, bad[i].who, bad[i].what);
        free(s);
    }
}

int main(int argc, char **argv) {
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    char *mlp = check_read_text("graphs/mlp.json");
    CHECK_MSG(mlp != NULL, "graphs/mlp.json (run from tests/)");
    if (mlp) {
        test_mlp_store_all(mlp);
        test_mlp_grads_resident(mlp);
        test_mlp_communication(mlp);
        test_mlp_floor(mlp);
        test_mlp_between(mlp);
    }
    free(mlp);
    test_hostile();
    test_inplace();
    test_saves_repeated();
    test_grad_bytes();
    test_grad_views();
    test_later_outputs();
    refused_count(1, 2000001, "'ops' has 2000001 entries; at most 2000000 are read");
    refused_count(4000001, 1, "'values' has 4000001 entries; at most 4000000 are read");
    test_regions();
    test_long_chain();
    return check_exit("test_graph_json");
}
