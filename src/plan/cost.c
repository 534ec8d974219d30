/* cost.c: the cost model. A node's forward, backward and recomputation
 * cost, filled per node once per session (remat__prog_set_cost): under a
 * calibration, its shape class's measured seconds when the class was
 * measured (a shape class is the op with its input and output shapes and
 * attributes, hashed: remat_node_cost_class), else its FLOPs over its
 * family's measured throughput (a backward twice its forward, a
 * recomputation equal to it); without a calibration, FLOPs. The
 * measurements themselves (remat_calibrate, remat_calibrate_graph) are
 * train/calibrate.c: they run sessions, which plan/ does not. The numbers
 * hold for one machine, device and thread count; `remat calibrate` caches
 * them in a file.
 */
#include "schedule.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>

const char *remat_family_str(remat_family f) {
    static const char *const names[] = {
#define REMAT__FAMILY_NAME(name, str) str,
        REMAT_FAMILY_LIST(REMAT__FAMILY_NAME)
#undef REMAT__FAMILY_NAME
    };
    return (unsigned)f < REMAT_FAMILY_COUNT ? names[f] : "unknown";
}

double remat__node_flops(const remat_graph *g, const remat__node *n) {
    const remat__op *op = remat__ops[n->op];
    return op->flops ? op->flops(g, n) : 0.0;
}

/* FNV-1a over bytes. */
static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t shape_hash(uint64_t h, const remat__shape *sh, remat_dtype dt) {
    int32_t nd = sh->ndim, d = (int32_t)dt;
    h = fnv(h, &nd, sizeof nd);
    h = fnv(h, &d, sizeof d);
    for (int i = 0; i < sh->ndim; i++) h = fnv(h, &sh->d[i], sizeof sh->d[i]);
    return h;
}

uint64_t remat_node_cost_class(const remat_graph *g, remat_node v) {
    if (!g || v < 0 || v >= g->n || g->nodes[v].leaf != REMAT__LEAF_NONE) return 0;
    const remat__node *n = &g->nodes[v];
    const char *name = remat__ops[n->op]->name; /* by name: stable across op-table changes */
    uint64_t h = fnv(0xcbf29ce484222325ull, name, strlen(name) + 1);
    h = shape_hash(h, &n->shape, n->dtype);
    for (int i = 0; i < n->n_in; i++) h = shape_hash(h, &g->nodes[n->in[i]].shape, g->nodes[n->in[i]].dtype);
    h = fnv(h, n->iattr, sizeof n->iattr);
    h = fnv(h, n->fattr, sizeof n->fattr);
    return h ? h : 1; /* 0 means "no class" */
}

static const remat_op_time *find_class(const remat_cost_model *m, uint64_t cls) {
    int lo = 0, hi = m->n_ops - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (m->ops[mid].cls == cls) return &m->ops[mid];
        if (m->ops[mid].cls < cls) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

void remat__prog_set_cost(remat__prog *p, const remat_cost_model *m) {
    if (m) p->cost = *m;
    else memset(&p->cost, 0, sizeof p->cost);
    const remat_graph *g = p->g;
    for (int u = 0; u < g->n; u++) {
        const remat__node *n = &g->nodes[u];
        double f = remat__node_flops(g, n), fw = f, bw = 2 * f, rc = 0; /* rc 0: as the forward */
        if (n->leaf != REMAT__LEAF_NONE) fw = bw = 0;
        else if (g->traced) { /* a traced step's costs are the file's own */ const remat__traced *t = &g->traced[u];
            fw = t->cost[0], bw = t->cost[1], rc = t->cost[2];
        } else if (p->cost.calibrated) {
            const remat_op_time *t = p->cost.n_ops ? find_class(&p->cost, remat_node_cost_class(g, u)) : NULL;
            double tp = p->cost.flops_per_s[remat__node_family(g, n)];
            if (t) fw = t->fwd_s, bw = t->bwd_s, rc = t->rec_s;
            else if (tp > 0) fw = f / tp, bw = 2 * f / tp;
        }
        p->node_cost[3 * u] = fw;
        p->node_cost[3 * u + 1] = bw;
        p->node_cost[3 * u + 2] = rc > 0 ? rc : fw;
    }
}

/* Bounds on what a cost model may say, so that a step's predicted cost
 * (a sum over up to millions of instructions, recomputations included)
 * stays finite: an op takes at most REMAT__COST_MAX_S seconds (about 32
 * years; a measurement past it is broken, not slow), and a family runs
 * at least one FLOP per second, so FLOPs over it are at most the FLOPs. */
#define REMAT__COST_MAX_S 1e9
#define REMAT__COST_MIN_FLOPS_PER_S 1.0

static int seconds_ok(double s) { return isfinite(s) && s >= 0 && s <= REMAT__COST_MAX_S; }

/* Entry i of a model's (or a file's) "ops". */
static remat_status check_op(const remat_op_time *e, int i, const char *where, remat_status code) {
    static const char *const what[3] = {"forward", "backward", "recompute"};
    const double s[3] = {e->fwd_s, e->bwd_s, e->rec_s};
    for (int k = 0; k < 3; k++)
        if (!seconds_ok(s[k]))
            return remat__err(code,
                              "%s: ops[%d] (%s, class %016llx): '%s' is %g s; an op's seconds are a "
                              "finite number from 0 to %g, or a step's cost overflows (run remat calibrate again)",
                              where, i, (unsigned)e->op < REMAT__N_OPS ? remat__ops[e->op]->name : "?",
                              (unsigned long long)e->cls, what[k], s[k], REMAT__COST_MAX_S);
    return REMAT_OK;
}

remat_status remat__cost_model_check(const remat_cost_model *m, const char *where, remat_status code) {
    if (!m->calibrated) return REMAT_OK; /* FLOPs: nothing of the model is read */
    for (int f = 0; f < REMAT_FAMILY_COUNT; f++) {
        double v = m->flops_per_s[f];
        if (!isfinite(v) || !(v >= REMAT__COST_MIN_FLOPS_PER_S))
            return remat__err(code,
                              "%s: 'flops_per_s.%s' is %g: a throughput is a finite number of FLOP/s "
                              "from %g up (run remat calibrate again)",
                              where, remat_family_str((remat_family)f), v, REMAT__COST_MIN_FLOPS_PER_S);
    }
    for (int k = 0; k < 2; k++)
        if (!seconds_ok(m->update_s_per_param[k]))
            return remat__err(code,
                              "%s: 'update_s_per_param.%s' is %g: seconds per parameter are a finite "
                              "number from 0 to %g (run remat calibrate again)",
                              where, k ? "adamw" : "sgd", m->update_s_per_param[k], REMAT__COST_MAX_S);
    if (!(isfinite(m->host_bandwidth) && m->host_bandwidth >= 0 && m->host_bandwidth <= 1e15) ||
        !seconds_ok(m->host_latency))
        return remat__err(code,
                          "%s: 'host_link' is %g bytes/s and %g s per copy: a bandwidth from 0 (not "
                          "measured) to 1e15 bytes/s and a latency from 0 to %g s (run remat calibrate again)",
                          where, m->host_bandwidth, m->host_latency, REMAT__COST_MAX_S);
    if (m->n_ops < 0 || m->n_ops > REMAT_COST_MAX_OPS)
        return remat__err(code, "%s: %d shape classes, not 0 to %d", where, m->n_ops, REMAT_COST_MAX_OPS);
    for (int i = 0; i < m->n_ops; i++) {
        remat_status st = check_op(&m->ops[i], i, where, code);
        if (st != REMAT_OK) return st;
    }
    return REMAT_OK;
}

static int by_class(const void *a, const void *b) {
    const remat_op_time *x = a, *y = b;
    return (x->cls > y->cls) - (x->cls < y->cls);
}

remat_status remat__cost_model_put(remat_cost_model *m, const remat_op_time *t) {
    remat_op_time *old = (remat_op_time *)find_class(m, t->cls);
    if (old) {
        *old = *t;
        return REMAT_OK;
    }
    if (m->n_ops >= REMAT_COST_MAX_OPS)
        return remat__err(REMAT_INVALID,
                          "the cost model holds its most shape classes (%d): calibrate fewer models "
                          "into one file",
                          REMAT_COST_MAX_OPS);
    m->ops[m->n_ops++] = *t;
    qsort(m->ops, (size_t)m->n_ops, sizeof *m->ops, by_class);
    return REMAT_OK;
}

/* A number that reads back to the same double (cJSON prints 15 digits
 * when they come within an ulp or so; a saved model must load exactly). */
static void add_exact(cJSON *o, const char *name, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", isfinite(v) ? v : 0.0);
    if (cJSON_IsArray(o)) cJSON_AddItemToArray(o, cJSON_CreateRaw(buf));
    else cJSON_AddRawToObject(o, name, buf);
}

remat_status remat_cost_model_save(const remat_cost_model *m, const char *path) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", remat_device_str(m->device));
    cJSON_AddNumberToObject(o, "threads", m->threads);
    cJSON *t = cJSON_AddObjectToObject(o, "flops_per_s");
    for (int f = 0; f < REMAT_FAMILY_COUNT; f++) add_exact(t, remat_family_str((remat_family)f), m->flops_per_s[f]);
    cJSON *u = cJSON_AddObjectToObject(o, "update_s_per_param");
    add_exact(u, "sgd", m->update_s_per_param[0]);
    add_exact(u, "adamw", m->update_s_per_param[1]);
    if (m->host_bandwidth > 0) {
        cJSON *h = cJSON_AddObjectToObject(o, "host_link");
        add_exact(h, "bandwidth", m->host_bandwidth);
        add_exact(h, "latency", m->host_latency);
    }
    cJSON *ops = cJSON_AddArrayToObject(o, "ops");
    for (int i = 0; i < m->n_ops; i++) {
        const remat_op_time *e = &m->ops[i];
        char cls[17];
        snprintf(cls, sizeof cls, "%016llx", (unsigned long long)e->cls);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "op", (unsigned)e->op < REMAT__N_OPS ? remat__ops[e->op]->name : "?");
        cJSON_AddStringToObject(x, "class", cls);
        add_exact(x, "forward", e->fwd_s);
        add_exact(x, "backward", e->bwd_s);
        if (e->rec_s > 0) add_exact(x, "recompute", e->rec_s);
        cJSON_AddItemToArray(ops, x);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return remat__err(REMAT_NOMEM, "out of memory writing %s", path);
    size_t len = strlen(text);
    remat_status st = remat_file_write_atomic(path, text, len); /* a reader never sees half a file */
    cJSON_free(text);
    return st;
}

/* The file's "host_link", when there is one. */
static remat_status load_link(const cJSON *hl, remat_cost_model *m, const char *path) {
    if (!hl) return REMAT_OK;
    const cJSON *bw = cJSON_GetObjectItemCaseSensitive(hl, "bandwidth");
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(hl, "latency");
    if (!cJSON_IsNumber(bw) || !cJSON_IsNumber(lat))
        return remat__err(REMAT_FORMAT, "%s: 'host_link' is not {\"bandwidth\": bytes/s, \"latency\": s}", path);
    m->host_bandwidth = bw->valuedouble, m->host_latency = lat->valuedouble;
    return REMAT_OK;
}

/* The file parsed as JSON into *out (cJSON_Delete it). */
static remat_status read_json(const char *path, cJSON **out) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return remat__err(REMAT_NOT_FOUND, "%s: cannot open the cost model (run remat calibrate)", path);
    /* the whole file: at most a few hundred bytes per shape class */
    size_t cap = 4096 + (size_t)REMAT_COST_MAX_OPS * 256, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(fp);
        return remat__err(REMAT_NOMEM, "out of memory reading %s", path);
    }
    n = fread(buf, 1, cap, fp);
    int more = n == cap && fgetc(fp) != EOF;
    fclose(fp);
    buf[n] = 0;
    cJSON *o = more ? NULL : cJSON_Parse(buf);
    free(buf);
    if (more) return remat__err(REMAT_FORMAT, "%s: larger than a cost model can be", path);
    if (!o) return remat__err(REMAT_FORMAT, "%s: not JSON", path);
    *out = o;
    return REMAT_OK;
}

/* The file's "ops", when there are any: each op time checked and put. */
static remat_status load_ops(const cJSON *ops, remat_cost_model *m, const char *path) {
    const cJSON *e;
    if (ops && !cJSON_IsArray(ops)) return remat__err(REMAT_FORMAT, "%s: 'ops' is not an array", path);
    remat_status st = REMAT_OK;
    int i = 0;
    cJSON_ArrayForEach(e, ops) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(e, "op"),
                    *cls = cJSON_GetObjectItemCaseSensitive(e, "class");
        const cJSON *fw = cJSON_GetObjectItemCaseSensitive(e, "forward"),
                    *bw = cJSON_GetObjectItemCaseSensitive(e, "backward");
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(e, "recompute"); /* optional: absent = forward */
        char *end = NULL;
        unsigned long long c = cJSON_IsString(cls) ? strtoull(cls->valuestring, &end, 16) : 0;
        int idx = cJSON_IsString(op) ? remat__op_find(op->valuestring) : -1;
        if (idx < 0 || !c || !end || *end || !cJSON_IsNumber(fw) || !cJSON_IsNumber(bw) || (rc && !cJSON_IsNumber(rc)))
            return remat__err(REMAT_FORMAT,
                              "%s: ops[%d] is not {\"op\": a known op, \"class\": 16 hex digits, "
                              "\"forward\": s, \"backward\": s[, \"recompute\": s]}",
                              path, i);
        remat_op_time t = {(uint64_t)c, idx, fw->valuedouble, bw->valuedouble, rc ? rc->valuedouble : 0.0};
        st = check_op(&t, i, path, REMAT_FORMAT); /* named by its place in the file, before sorting */
        if (st == REMAT_OK) st = remat__cost_model_put(m, &t);
        if (st != REMAT_OK) return st;
        i++;
    }
    return st;
}

remat_status remat_cost_model_load(remat_cost_model *m, const char *path) {
    cJSON *o = NULL;
    remat_status rs = read_json(path, &o);
    if (rs != REMAT_OK) return rs;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "flops_per_s");
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(o, "threads");
    const cJSON *dv = cJSON_GetObjectItemCaseSensitive(o, "device");
    remat_cost_model *tmp = calloc(1, sizeof *tmp);
    if (!tmp) {
        cJSON_Delete(o);
        return remat__err(REMAT_NOMEM, "out of memory reading %s", path);
    }
    tmp->calibrated = 1;
    remat_status st = REMAT_OK;
    if (!cJSON_IsNumber(th) || th->valuedouble < 1 || th->valuedouble > 1024 || th->valuedouble != (int)th->valuedouble)
        st = remat__err(REMAT_FORMAT,
                        "%s: 'threads' (the thread count it was measured with) is missing or not a "
                        "count: run remat calibrate again",
                        path);
    else tmp->threads = (int)th->valuedouble;
    if (st == REMAT_OK && dv && (!cJSON_IsString(dv) || remat_device_parse(dv->valuestring, &tmp->device) != REMAT_OK))
        st = remat__err(REMAT_FORMAT, "%s: 'device' is not a device name", path);
    for (int f = 0; f < REMAT_FAMILY_COUNT && st == REMAT_OK; f++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, remat_family_str((remat_family)f));
        if (!cJSON_IsNumber(v))
            st = remat__err(REMAT_FORMAT, "%s: 'flops_per_s.%s' is missing or not a number", path,
                            remat_family_str((remat_family)f));
        else tmp->flops_per_s[f] = v->valuedouble;
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "update_s_per_param");
    for (int k = 0; k < 2 && st == REMAT_OK && u; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(u, k ? "adamw" : "sgd");
        if (!cJSON_IsNumber(v))
            st = remat__err(REMAT_FORMAT, "%s: 'update_s_per_param.%s' is not a number of seconds", path,
                            k ? "adamw" : "sgd");
        else tmp->update_s_per_param[k] = v->valuedouble;
    }
    if (st == REMAT_OK) st = load_link(cJSON_GetObjectItemCaseSensitive(o, "host_link"), tmp, path);
    if (st == REMAT_OK) st = load_ops(cJSON_GetObjectItemCaseSensitive(o, "ops"), tmp, path);
    cJSON_Delete(o);
    if (st == REMAT_OK) st = remat__cost_model_check(tmp, path, REMAT_FORMAT); /* the values' ranges, named */
    if (st == REMAT_OK) memcpy(m, tmp, sizeof *m);
    free(tmp);
    return st;
}
