/* test_graph_holds.c: values a framework's code holds in the forward past
 * their last read ('held_until', docs/graph-format.md): a cache of keys and
 * values, a local variable until its function returns.
 * - a chain mm, f, g, sum of 1 MiB values where f's input a is held until
 *   g: the step's peak is one value higher (a beside g's input and
 *   output), by every strategy and schedule builder (levels and timelines),
 *   and g's forward row in the timeline holds it;
 * - where f's backward reads a (kept by store-all anyway), the hold adds
 *   nothing to store-all, and a budget reached by recomputing a (dropping
 *   it in the forward) is out of reach when a is held: its floor is the
 *   forward's three values;
 * - g's output held by the caller to the step's end ('caller_holds'): one
 *   value more at the peak (g's backward), by levels and timelines;
 * - what the marks may say: an activation's, an op from its maker on and
 *   before an op that overwrites it, a whole number; true or false.
 */
#include "remat.h"
#include "check.h"
#include "plan_json.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB 1048576.0

/* The chain; hold: the value 2's extra field ("" none); saves1: what f's
 * backward reads; over: value 3's extra field; end: value 4's; saves3:
 * what sum's backward reads. a's gradient is small, so
 * that f's backward holds two values where it reads a. */
static char *chain5(const char *hold, const char *saves1, const char *over, const char *end, const char *saves3) {
    static const char *fmt =
        "{\"format\": \"remat-graph\", \"version\": 1,\n"
        " \"values\": [\n"
        "  {\"id\": 0, \"kind\": \"input\", \"name\": \"x\", \"bytes\": 16},\n"
        "  {\"id\": 1, \"kind\": \"parameter\", \"name\": \"w\", \"bytes\": 64},\n"
        "  {\"id\": 2, \"kind\": \"activation\", \"bytes\": 1048576, \"grad_bytes\": 16%s},\n"
        "  {\"id\": 3, \"kind\": \"activation\", \"bytes\": 1048576%s},\n"
        "  {\"id\": 4, \"kind\": \"activation\", \"bytes\": 1048576%s},\n"
        "  {\"id\": 5, \"kind\": \"activation\", \"bytes\": 4}\n"
        " ],\n"
        " \"ops\": [\n"
        "  {\"id\": 0, \"name\": \"mm\", \"inputs\": [0, 1], \"outputs\": [2], \"saves\": [0], \"forward\": 1000},\n"
        "  {\"id\": 1, \"name\": \"f\", \"inputs\": [2], \"outputs\": [3], \"saves\": [%s], \"forward\": 1},\n"
        "  {\"id\": 2, \"name\": \"g\", \"inputs\": [3], \"outputs\": [4], \"saves\": [], \"forward\": 1},\n"
        "  {\"id\": 3, \"name\": \"sum\", \"inputs\": [4], \"outputs\": [5], \"saves\": [%s], \"forward\": 1}\n"
        " ],\n"
        " \"loss\": 5}\n";
    size_t n = strlen(fmt) + strlen(hold) + strlen(saves1) + strlen(over) + strlen(end) + strlen(saves3) + 1;
    char *s = malloc(n);
    if (!s) abort();
    snprintf(s, n, fmt, hold, over, end, saves1, saves3);
    return s;
}

static char *chain(const char *hold, const char *saves1, const char *over) {
    return chain5(hold, saves1, over, "", "");
}

static cJSON *plan(const char *graph, const char *request) {
    char *out = NULL;
    remat_status st = remat_plan_graph_json(graph, request, &out);
    CHECK_MSG(st == REMAT_OK, "%s: %s", remat_status_str(st), remat_last_error());
    cJSON *p = st == REMAT_OK && out ? cJSON_Parse(out) : NULL;
    remat_free(out);
    return p;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(it) ? it->valuedouble : -1.0;
}

static int feasible(const cJSON *p) { return p && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "feasible")); }

static void test_peak_one_value_higher(void) {
    char *held = chain(", \"held_until\": 2", "", ""), *free_ = chain("", "", "");
    static const char *requests[] = {
        "{\"strategy\": \"all\", \"timeline\": true}",
        "{\"strategy\": \"optimal\", \"timeline\": true}",
        "{\"strategy\": \"optimal\", \"timeline\": true, \"recompute_once\": false, \"split\": true}",
        "{\"strategy\": \"sqrt\", \"timeline\": true}",
    };
    for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++) {
        cJSON *p = plan(held, requests[i]), *q = plan(free_, requests[i]);
        CHECK(feasible(p) && feasible(q));
        if (p && q) {
            CHECK_MSG(num(p, "peak_bytes") - num(q, "peak_bytes") == MIB, "%s: held %.0f, not held %.0f", requests[i],
                      num(p, "peak_bytes"), num(q, "peak_bytes"));
            CHECK_MSG(plan_forward_row(p, 2) - plan_forward_row(q, 2) == MIB,
                      "%s: g's forward holds %.0f, not held %.0f", requests[i], plan_forward_row(p, 2),
                      plan_forward_row(q, 2));
            CHECK_MSG(plan_forward_row(p, 3) == plan_forward_row(q, 3), "%s: sum's forward holds %.0f, not held %.0f",
                      requests[i], plan_forward_row(p, 3), plan_forward_row(q, 3));
        }
        cJSON_Delete(p), cJSON_Delete(q);
    }
    free(held), free(free_);
}

/* c held by the caller to the step's end: g's backward holds it beside
 * the gradients of c and b, one value more than the step's peak without. */
static void test_caller_holds(void) {
    char *held = chain5("", "", "", ", \"caller_holds\": true", ""), *free_ = chain("", "", "");
    static const char *requests[] = {
        "{\"strategy\": \"all\", \"timeline\": true}",
        "{\"strategy\": \"optimal\", \"timeline\": true, \"recompute_once\": false, \"split\": true}",
    };
    for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++) {
        cJSON *p = plan(held, requests[i]), *q = plan(free_, requests[i]);
        CHECK(feasible(p) && feasible(q));
        if (p && q)
            CHECK_MSG(num(p, "peak_bytes") - num(q, "peak_bytes") == MIB, "%s: held %.0f, not held %.0f", requests[i],
                      num(p, "peak_bytes"), num(q, "peak_bytes"));
        cJSON_Delete(p), cJSON_Delete(q);
    }
    free(held), free(free_);
    /* sum's backward reads c: a schedule that drops c and recomputes it
     * would hold it twice (the caller's and its own), so none is taken:
     * every budget plans without an error, from store-all's peak to the
     * floor that keeps c */
    char *reads_c = chain5("", "", "", ", \"caller_holds\": true", "4");
    cJSON *all = plan(reads_c, "{\"strategy\": \"all\"}");
    double top = all ? num(all, "peak_bytes") : 0;
    for (double b = top; b > top - 3 * MIB; b -= MIB / 2) {
        char rq[160];
        snprintf(rq, sizeof rq, "{\"strategy\": \"optimal\", \"budget\": %.0f, \"recompute_once\": false}", b);
        cJSON *p = plan(reads_c, rq);
        CHECK(p != NULL);
        if (p && feasible(p)) CHECK(num(p, "peak_bytes") <= b);
        if (p && !feasible(p)) CHECK_MSG(num(p, "floor") > b, "budget %.0f: floor %.0f", b, num(p, "floor"));
        cJSON_Delete(p);
    }
    cJSON_Delete(all);
    free(reads_c);
    char *bad = chain5("", "", "", ", \"caller_holds\": 1", "");
    remat_graph *g = NULL;
    remat_node loss;
    CHECK_FAILS(remat_graph_read_json(bad, &g, &loss), REMAT_FORMAT, "value 4", "'caller_holds' is not true or false");
    free(bad);
}

static void test_no_saving_by_dropping(void) {
    char *held = chain(", \"held_until\": 2", "2", ""), *free_ = chain("", "2", "");
    cJSON *p = plan(held, "{\"strategy\": \"all\"}"), *q = plan(free_, "{\"strategy\": \"all\"}");
    CHECK(feasible(p) && feasible(q));
    double all = p && q ? num(q, "peak_bytes") : 0;
    if (p && q)
        CHECK_MSG(num(p, "peak_bytes") == all, "store-all: held %.0f, not held %.0f", num(p, "peak_bytes"), all);
    cJSON_Delete(p), cJSON_Delete(q);
    /* not held: recomputing mm for f's backward keeps two values in the forward */
    char rq[128];
    snprintf(rq, sizeof rq, "{\"strategy\": \"optimal\", \"budget\": %.0f}", all - MIB / 2);
    p = plan(held, rq), q = plan(free_, rq);
    CHECK_MSG(feasible(q) && num(q, "peak_bytes") <= all - MIB / 2, "not held: %.0f at a budget of %.0f",
              num(q, "peak_bytes"), all - MIB / 2);
    CHECK_MSG(p && !feasible(p) && num(p, "floor") >= all, "held: feasible %d, floor %.0f (store-all %.0f)",
              feasible(p), num(p, "floor"), all);
    cJSON_Delete(p), cJSON_Delete(q);
    free(held), free(free_);
}

static void refused(const char *hold, const char *over, const char *what) {
    char *s = chain(hold, "", over);
    remat_graph *g = NULL;
    remat_node loss;
    CHECK_FAILS(remat_graph_read_json(s, &g, &loss), REMAT_FORMAT, what, NULL);
    CHECK(g == NULL);
    free(s);
}

static void test_refused(void) {
    refused("", ", \"held_until\": 0", "which must be an op from its maker on");
    refused(", \"held_until\": 4", "", "which must be an op from its maker on");
    refused(", \"held_until\": -1", "", "'held_until' is negative");
    refused(", \"held_until\": 1.5", "", "'held_until' is not a whole number");
    refused("", ", \"held_until\": 3, \"overwritten_by\": 2", "before the op that overwrites it");
    /* a parameter's */
    char *s = chain("", "", "");
    char *at = strstr(s, "\"bytes\": 64}");
    size_t k = (size_t)(at - s) + strlen("\"bytes\": 64");
    char *t = malloc(strlen(s) + 32);
    if (!t) abort();
    memcpy(t, s, k);
    strcpy(t + k, ", \"held_until\": 1");
    strcat(t, s + k);
    remat_graph *g = NULL;
    remat_node loss;
    CHECK_FAILS(remat_graph_read_json(t, &g, &loss), REMAT_FORMAT, "value 1", "only an activation");
    free(s), free(t);
}

int main(void) {
    test_peak_one_value_higher();
    test_no_saving_by_dropping();
    test_caller_holds();
    test_refused();
    return check_exit("test_graph_holds");
}
