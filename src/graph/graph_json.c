/* graph_json.c: a training step described by another framework, read from
 * a graph file (docs/graph-format.md, format "remat-graph", version 1),
 * into a graph the planners plan like any other.
 *
 * The file lists values (inputs, parameters, buffers, activations: bytes
 * each) and ops in execution order (inputs, outputs, the values the op's
 * backward reads, transient bytes, costs, stateful and random flags). Each
 * op becomes a node of the traced op (ops/traced.c) whose value is the
 * op's first output; a later output that other ops read becomes a node of
 * its own (a zero-cost "output k of" node), one that only the op's own
 * backward reads is the node's aux, and one that nothing reads is a
 * transient of the forward. Every fact is checked before the graph is
 * built, and a refusal names the op or value and the field: ids out of
 * range or used twice, a value read before it is made (a cycle), sizes
 * that are negative, fractional, non-finite or beyond 2^53, an op that
 * saves a value it neither reads nor makes, names used twice. Counts are
 * bounded before anything is allocated for them (MAX_VALUES, MAX_OPS), and
 * the bytes of all values together stay below 2^53, so that no sum of
 * them the planners take can wrap around: an enormous file costs time and
 * memory in proportion to its text, which the caller has already read.
 */
#include "../remat-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define GRAPH_FORMAT "remat-graph"
#define GRAPH_VERSION 1
#define MAX_VALUES 4000000
#define MAX_OPS 2000000
#define MAX_OUTPUTS 16
#define MAX_BYTES 9007199254740992.0 /* 2^53: per value, and all values together */
/* Per cost: far beyond any op, and low enough that the planners' sums
 * over millions of ops and their recomputations stay finite. */
#define MAX_COST 1e30

typedef enum { V_INPUT, V_PARAM, V_BUFFER, V_ACT } vkind;

typedef struct {
    vkind kind;
    int64_t bytes;
    int64_t grad;      /* bytes of its gradient, -1: its own bytes */
    const char *name;  /* borrowed from the JSON tree */
    int32_t producer;  /* op index, -1 for a leaf */
    int32_t out_index; /* which output of its producer */
    int32_t node;      /* the node that holds it, -1 before */
    int32_t over;      /* the op that overwrites it in place, -1 none */
    int32_t held;      /* the last op of the forward that its framework holds it through, -1 none */
    uint8_t to_end;    /* its framework's caller holds it to the step's end */
    uint8_t read_fwd;  /* a later op reads it */
} val;

typedef struct {
    const cJSON *js;
    int32_t in[REMAT__MAX_IN];
    int n_in;
    int32_t out[MAX_OUTPUTS];
    int n_out;
    double cost[3];
    int64_t ws[2];
    uint8_t flags;
    remat_family family;
    int32_t region; /* 1 + its checkpoint region, 0: none */
    const char *name;
} opr;

typedef struct {
    const char *text;
    cJSON *root;
    val *v;
    int32_t nv;
    opr *o;
    int32_t no;
    int seconds;
    int32_t loss;
} reader;

/* A whole number in [0, 2^53) from it. */
static remat_status whole(const cJSON *it, const char *where, const char *key, int64_t *out) {
    if (!it) return remat__err(REMAT_FORMAT, "%s: '%s' is missing", where, key);
    if (!cJSON_IsNumber(it)) return remat__err(REMAT_FORMAT, "%s: '%s' is not a number", where, key);
    double d = it->valuedouble;
    if (!isfinite(d)) return remat__err(REMAT_FORMAT, "%s: '%s' is not finite", where, key);
    if (d < 0) return remat__err(REMAT_FORMAT, "%s: '%s' is negative (%g)", where, key, d);
    if (d != floor(d)) return remat__err(REMAT_FORMAT, "%s: '%s' is not a whole number (%g)", where, key, d);
    if (d >= MAX_BYTES) return remat__err(REMAT_FORMAT, "%s: '%s' is too large (%g; at most 2^53 - 1)", where, key, d);
    *out = (int64_t)d;
    return REMAT_OK;
}

/* An optional finite cost >= 0 (def when absent). */
static remat_status cost_of(const cJSON *obj, const char *where, const char *key, double def, double *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) {
        *out = def;
        return REMAT_OK;
    }
    if (!cJSON_IsNumber(it)) return remat__err(REMAT_FORMAT, "%s: '%s' is not a number", where, key);
    double d = it->valuedouble;
    if (!isfinite(d) || d < 0 || d > MAX_COST)
        return remat__err(REMAT_FORMAT, "%s: '%s' must be a number from 0 to %g (got %g)", where, key, MAX_COST, d);
    *out = d;
    return REMAT_OK;
}

static remat_status flag_of(const cJSON *obj, const char *where, const char *key, int *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = 0;
    if (!it) return REMAT_OK;
    if (!cJSON_IsBool(it)) return remat__err(REMAT_FORMAT, "%s: '%s' is not true or false", where, key);
    *out = cJSON_IsTrue(it);
    return REMAT_OK;
}

/* A value id from it, in range. */
static remat_status value_id(const reader *r, const cJSON *it, const char *where, const char *key, int32_t *out) {
    int64_t id = 0;
    remat_status st = whole(it, where, key, &id);
    if (st != REMAT_OK) return st;
    if (id >= r->nv)
        return remat__err(REMAT_FORMAT, "%s: '%s' names value %lld, but there are %d values", where, key, (long long)id,
                          (int)r->nv);
    *out = (int32_t)id;
    return REMAT_OK;
}

typedef struct {
    const char *name;
    int32_t id;
} named;

static int by_name(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* The names of inputs, parameters and buffers are the caller's handles on
 * them (and remat's, in messages): unique. Sorted, so that a file of
 * millions of parameters is checked in n log n, not n^2. */
static remat_status unique_names(const reader *r) {
    named *ix = malloc(((size_t)r->nv + 1) * sizeof *ix);
    if (!ix) return remat__err(REMAT_NOMEM, "out of memory reading %d values", (int)r->nv);
    int n = 0;
    for (int32_t i = 0; i < r->nv; i++)
        if (r->v[i].kind != V_ACT) ix[n++] = (named){r->v[i].name, i};
    qsort(ix, (size_t)n, sizeof *ix, by_name);
    remat_status st = REMAT_OK;
    for (int k = 1; k < n && st == REMAT_OK; k++)
        if (strcmp(ix[k - 1].name, ix[k].name) == 0)
            st = remat__err(REMAT_FORMAT,
                            "value %d: 'name' '%.60s' is value %d's too (inputs, parameters and "
                            "buffers have names of their own)",
                            (int)ix[k].id, ix[k].name, (int)ix[k - 1].id);
    free(ix);
    return st;
}

static remat_status read_values(reader *r, const cJSON *arr) {
    if (!cJSON_IsArray(arr)) return remat__err(REMAT_FORMAT, "'values' is missing or not an array");
    int n = cJSON_GetArraySize(arr);
    if (n < 1) return remat__err(REMAT_FORMAT, "'values' is empty");
    if (n > MAX_VALUES) return remat__err(REMAT_FORMAT, "'values' has %d entries; at most %d are read", n, MAX_VALUES);
    r->v = calloc((size_t)n, sizeof *r->v);
    if (!r->v) return remat__err(REMAT_NOMEM, "out of memory reading %d values", n);
    r->nv = n;
    int i = 0;
    double total = 0; /* exact below 2^53, where the check stops it */
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        char where[48];
        snprintf(where, sizeof where, "value %d", i);
        if (!cJSON_IsObject(it)) return remat__err(REMAT_FORMAT, "%s is not an object", where);
        int64_t id;
        remat_status st = whole(cJSON_GetObjectItemCaseSensitive(it, "id"), where, "id", &id);
        if (st != REMAT_OK) return st;
        if (id != i)
            return remat__err(REMAT_FORMAT, "%s: 'id' is %lld; values are listed in id order from 0", where,
                              (long long)id);
        val *v = &r->v[i];
        if ((st = whole(cJSON_GetObjectItemCaseSensitive(it, "bytes"), where, "bytes", &v->bytes)) != REMAT_OK)
            return st;
        v->grad = -1;
        const cJSON *gb = cJSON_GetObjectItemCaseSensitive(it, "grad_bytes");
        if (gb && (st = whole(gb, where, "grad_bytes", &v->grad)) != REMAT_OK) return st;
        int64_t over = -1;
        const cJSON *ob = cJSON_GetObjectItemCaseSensitive(it, "overwritten_by");
        if (ob && (st = whole(ob, where, "overwritten_by", &over)) != REMAT_OK) return st;
        if (over > MAX_OPS)
            return remat__err(REMAT_FORMAT,
                              "%s: 'overwritten_by' names op %lld; there are at most %d "
                              "ops",
                              where, (long long)over, MAX_OPS);
        v->over = (int32_t)over;
        int64_t held = -1;
        const cJSON *hb = cJSON_GetObjectItemCaseSensitive(it, "held_until");
        if (hb && (st = whole(hb, where, "held_until", &held)) != REMAT_OK) return st;
        if (held > MAX_OPS)
            return remat__err(REMAT_FORMAT, "%s: 'held_until' names op %lld; there are at most %d ops", where,
                              (long long)held, MAX_OPS);
        v->held = (int32_t)held;
        int to_end;
        if ((st = flag_of(it, where, "caller_holds", &to_end)) != REMAT_OK) return st;
        v->to_end = (uint8_t)to_end;
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "kind");
        const char *ks = cJSON_IsString(k) ? k->valuestring : NULL;
        if (!ks) return remat__err(REMAT_FORMAT, "%s: 'kind' is missing or not a string", where);
        if (strcmp(ks, "input") == 0) v->kind = V_INPUT;
        else if (strcmp(ks, "parameter") == 0) v->kind = V_PARAM;
        else if (strcmp(ks, "buffer") == 0) v->kind = V_BUFFER;
        else if (strcmp(ks, "activation") == 0) v->kind = V_ACT;
        else
            return remat__err(REMAT_FORMAT, "%s: 'kind' is '%.40s'; one of input, parameter, buffer, activation", where,
                              ks);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (nm && !cJSON_IsString(nm)) return remat__err(REMAT_FORMAT, "%s: 'name' is not a string", where);
        v->name = nm ? nm->valuestring : NULL;
        if (v->kind != V_ACT && (!v->name || !*v->name))
            return remat__err(REMAT_FORMAT, "%s: an input, parameter or buffer needs a 'name'", where);
        if (v->kind != V_ACT && v->bytes == 0)
            return remat__err(REMAT_FORMAT, "%s ('%.60s'): an input, parameter or buffer of 0 bytes", where, v->name);
        /* parameters and buffers are float32 elements (leaf_node); a
         * gradient of other bytes than its value's counts too */
        total += (double)(v->kind == V_PARAM || v->kind == V_BUFFER ? (v->bytes + 3) / 4 * 4 : v->bytes);
        total += v->grad > 0 ? (double)v->grad : 0;
        if (total >= MAX_BYTES)
            return remat__err(REMAT_FORMAT,
                              "%s: 'bytes' (%lld) brings the total of all values' bytes to 2^53 or "
                              "more",
                              where, (long long)v->bytes);
        v->producer = -1;
        v->node = -1;
        i++;
    }
    return unique_names(r);
}

static remat_status id_list(const reader *r, const cJSON *obj, const char *where, const char *key, int32_t *ids,
                            int cap, int *n) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(obj, key);
    *n = 0;
    if (!arr) return REMAT_OK;
    if (!cJSON_IsArray(arr)) return remat__err(REMAT_FORMAT, "%s: '%s' is not an array", where, key);
    int c = cJSON_GetArraySize(arr);
    if (c > cap)
        return remat__err(REMAT_FORMAT, "%s: '%s' has %d entries; at most %d are taken (split the op)", where, key, c,
                          cap);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        remat_status st = value_id(r, it, where, key, &ids[(*n)++]);
        if (st != REMAT_OK) return st;
    }
    return REMAT_OK;
}

static const struct {
    const char *name;
    remat_family f;
} families[] = {{"linear", REMAT_FAMILY_LINEAR}, {"conv", REMAT_FAMILY_CONV},
                {"norm", REMAT_FAMILY_NORM},     {"pointwise", REMAT_FAMILY_POINTWISE},
                {"pool", REMAT_FAMILY_POOL},     {"copy", REMAT_FAMILY_COPY},
                {"loss", REMAT_FAMILY_LOSS}};

/* Reads op i; saves (value ids) go to *saves, *n_saves. */
/* An op's checkpoint region: *out = 1 + 'region', 0 without one. */
static remat_status region_of(const cJSON *it, const char *where, int32_t *out) {
    const cJSON *rg = cJSON_GetObjectItemCaseSensitive(it, "region");
    int64_t region = -1;
    remat_status st = rg ? whole(rg, where, "region", &region) : REMAT_OK;
    if (st == REMAT_OK && region >= MAX_OPS)
        st = remat__err(REMAT_FORMAT, "%s: 'region' %lld is not below %d", where, (long long)region, MAX_OPS);
    *out = (int32_t)(region + 1);
    return st;
}

/* op o's 'saves' (n_saves values): each one of its inputs or outputs, and
 * each listed once (a value listed twice is read once, and its bytes
 * counted once). */
static remat_status dedup_saves(const opr *o, const char *where, int32_t *saves, int *n_saves) {
    int kept = 0; /* a value listed twice is read once (and its bytes counted once) */
    for (int k = 0; k < *n_saves; k++) {
        int ok = 0, again = 0;
        for (int q = 0; q < o->n_in; q++) ok |= o->in[q] == saves[k];
        for (int q = 0; q < o->n_out; q++) ok |= o->out[q] == saves[k];
        if (!ok)
            return remat__err(REMAT_FORMAT,
                              "%s: 'saves' names value %d, which is neither its input nor its "
                              "output",
                              where, (int)saves[k]);
        for (int q = 0; q < kept; q++) again |= saves[q] == saves[k];
        if (!again) saves[kept++] = saves[k];
    }
    *n_saves = kept;
    return REMAT_OK;
}

static remat_status read_op(reader *r, int i, const cJSON *it, int32_t *saves, int *n_saves) {
    char where[64];
    snprintf(where, sizeof where, "op %d", i);
    if (!cJSON_IsObject(it)) return remat__err(REMAT_FORMAT, "%s is not an object", where);
    opr *o = &r->o[i];
    o->js = it;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
    if (nm && !cJSON_IsString(nm)) return remat__err(REMAT_FORMAT, "%s: 'name' is not a string", where);
    o->name = nm ? nm->valuestring : NULL;
    if (o->name) snprintf(where, sizeof where, "op %d (%.40s)", i, o->name);
    int64_t id = 0;
    remat_status st = whole(cJSON_GetObjectItemCaseSensitive(it, "id"), where, "id", &id);
    if (st != REMAT_OK) return st;
    if (id != i)
        return remat__err(REMAT_FORMAT, "%s: 'id' is %lld; ops are listed in id order from 0", where, (long long)id);
    if ((st = id_list(r, it, where, "inputs", o->in, REMAT__MAX_IN, &o->n_in)) != REMAT_OK ||
        (st = id_list(r, it, where, "outputs", o->out, MAX_OUTPUTS, &o->n_out)) != REMAT_OK ||
        (st = id_list(r, it, where, "saves", saves, REMAT__MAX_IN + MAX_OUTPUTS, n_saves)) != REMAT_OK)
        return st;
    if (o->n_out < 1) return remat__err(REMAT_FORMAT, "%s: 'outputs' is missing or empty", where);
    for (int k = 0; k < o->n_in; k++) {
        const val *v = &r->v[o->in[k]];
        if (v->kind == V_ACT && v->producer < 0)
            return remat__err(REMAT_FORMAT,
                              "%s reads value %d before any op makes it (ops must be listed in the "
                              "order they run; a value made later, or never, means a cycle or a missing op)",
                              where, (int)o->in[k]);
    }
    for (int k = 0; k < o->n_out; k++) {
        val *v = &r->v[o->out[k]];
        if (v->kind != V_ACT)
            return remat__err(REMAT_FORMAT,
                              "%s: output %d is value %d, which is an input, parameter or buffer "
                              "(an op that writes one in place lists it as an input)",
                              where, k, (int)o->out[k]);
        if (v->producer >= 0)
            return remat__err(REMAT_FORMAT, "%s: value %d is an output of op %d already", where, (int)o->out[k],
                              (int)v->producer);
        v->producer = i;
        v->out_index = k;
    }
    if ((st = dedup_saves(o, where, saves, n_saves)) != REMAT_OK) return st;
    if ((st = cost_of(it, where, "forward", 0, &o->cost[0])) != REMAT_OK ||
        (st = cost_of(it, where, "backward", 2 * o->cost[0], &o->cost[1])) != REMAT_OK ||
        (st = cost_of(it, where, "recompute", o->cost[0], &o->cost[2])) != REMAT_OK)
        return st;
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(it, "transient");
    if (tr && !cJSON_IsObject(tr)) return remat__err(REMAT_FORMAT, "%s: 'transient' is not an object", where);
    for (int k = 0; k < 2 && tr; k++) {
        const char *key = k ? "backward" : "forward";
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(tr, key);
        if (b && (st = whole(b, where, k ? "transient.backward" : "transient.forward", &o->ws[k])) != REMAT_OK)
            return st;
    }
    int stateful, random, views;
    if ((st = flag_of(it, where, "stateful", &stateful)) != REMAT_OK ||
        (st = flag_of(it, where, "random", &random)) != REMAT_OK ||
        (st = flag_of(it, where, "grad_views", &views)) != REMAT_OK)
        return st;
    o->flags = (uint8_t)((stateful ? REMAT__OP_STATEFUL : 0) | (random ? REMAT__OP_RANDOM : 0) |
                         (views ? REMAT__TRACED_GRAD_VIEWS : 0));
    if ((st = region_of(it, where, &o->region)) != REMAT_OK) return st;
    o->family = REMAT_FAMILY_POINTWISE;
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(it, "family");
    if (fam) {
        int found = 0;
        for (size_t f = 0; f < sizeof families / sizeof families[0] && cJSON_IsString(fam); f++)
            if (strcmp(fam->valuestring, families[f].name) == 0) o->family = families[f].f, found = 1;
        if (!found)
            return remat__err(REMAT_FORMAT,
                              "%s: 'family' must be one of linear, conv, norm, pointwise, pool, copy, "
                              "loss",
                              where);
    }
    return REMAT_OK;
}

/* The nodes: leaves for the inputs, parameters and buffers that ops read,
 * then a traced node per op (and per extra output read by a later op). */
typedef struct {
    remat_graph *g;
    remat__traced *t;
    int32_t cap;
} builder;

/* Adds proto (without a name) and then names it name (NULL: none):
 * remat__graph_add, given a name, compares it with every node before
 * (n^2 over a file of a million named ops); the reader has checked the
 * names that must be unique (unique_names). */
static remat_status add_node(builder *b, const remat__node *proto, const char *name, const remat__traced *rec,
                             int32_t *out) {
    remat_node id = remat__graph_add(b->g, proto);
    if (id == REMAT_NONE) return b->g->status;
    if (name && !(b->g->nodes[id].name = strdup(name)))
        return remat__err(REMAT_NOMEM, "out of memory building the traced graph");
    if (id >= b->cap) {
        int32_t cap = b->cap ? 2 * b->cap : 256;
        while (cap <= id) cap *= 2;
        remat__traced *t = realloc(b->t, (size_t)cap * sizeof *t);
        if (!t) return remat__err(REMAT_NOMEM, "out of memory building the traced graph");
        b->t = t;
        b->cap = cap;
    }
    b->t[id] = *rec;
    *out = id;
    return REMAT_OK;
}

static remat_status leaf_node(builder *b, val *v, int32_t id) {
    remat__node n = {.leaf = REMAT__LEAF_INPUT, .op = REMAT__OP_INPUT};
    n.shape.ndim = 1;
    if (v->kind == V_INPUT) {
        n.dtype = REMAT_U8;
        n.shape.d[0] = v->bytes;
    } else { /* float32 elements: what the session sizes gradients and optimizer state by */
        n.leaf = v->kind == V_PARAM ? REMAT__LEAF_PARAM : REMAT__LEAF_BUFFER;
        n.op = v->kind == V_PARAM ? REMAT__OP_PARAM : REMAT__OP_BUFFER;
        n.dtype = REMAT_F32;
        n.shape.d[0] = (v->bytes + 3) / 4;
    }
    remat__traced rec = {.id = id, .value = id, .grad = -1};
    return add_node(b, &n, v->name, &rec, &v->node);
}

static remat_status op_nodes(reader *r, builder *b, int i, const int32_t *saves, int n_saves) {
    opr *o = &r->o[i];
    for (int k = 0; k < o->n_in; k++) {
        val *v = &r->v[o->in[k]];
        if (v->node < 0) {
            remat_status st = leaf_node(b, v, o->in[k]);
            if (st != REMAT_OK) return st;
        }
    }
    remat__node n = {.op = REMAT__OP_TRACED, .n_in = o->n_in, .dtype = REMAT_U8};
    remat__traced rec = {.cost = {o->cost[0], o->cost[1], o->cost[2]},
                         .ws = {(size_t)o->ws[0], (size_t)o->ws[1]},
                         .grad = r->v[o->out[0]].grad,
                         .family = o->family,
                         .flags = o->flags,
                         .id = i,
                         .value = o->out[0],
                         .region = o->region};
    for (int k = 0; k < o->n_in; k++) {
        n.in[k] = r->v[o->in[k]].node;
        for (int q = 0; q < n_saves; q++)
            if (saves[q] == o->in[k]) n.saves |= REMAT__SAVE_IN(k);
    }
    for (int k = 0; k < n_saves; k++) {
        const val *v = &r->v[saves[k]];
        if (v->producer != i) continue;
        if (v->out_index == 0) n.saves |= REMAT__SAVE_OUT;
        else rec.aux += (size_t)v->bytes, n.saves |= REMAT__SAVE_AUX;
    }
    for (int k = 1; k < o->n_out; k++) { /* unread outputs: made and dropped within the forward */
        const val *v = &r->v[o->out[k]];
        int saved = 0;
        for (int q = 0; q < n_saves; q++) saved |= saves[q] == o->out[k];
        if (!saved && !v->read_fwd) rec.ws[0] += (size_t)v->bytes;
    }
    val *first = &r->v[o->out[0]];
    n.shape.ndim = 1;
    n.shape.d[0] = first->bytes;
    if (o->out[0] == r->loss) { /* the session's loss: a float32 scalar */
        n.shape.ndim = 0;
        n.dtype = REMAT_F32;
    }
    remat_status st = add_node(b, &n, o->name, &rec, &first->node);
    for (int k = 1; k < o->n_out && st == REMAT_OK; k++) {
        val *v = &r->v[o->out[k]];
        if (!v->read_fwd) continue;
        remat__node x = {.op = REMAT__OP_TRACED, .n_in = 1, .in = {first->node}, .dtype = REMAT_U8};
        x.shape.ndim = 1;
        x.shape.d[0] = v->bytes;
        remat__traced xr = {
            .family = REMAT_FAMILY_COPY, .id = i, .value = o->out[k], .grad = v->grad, .region = o->region};
        st = add_node(b, &x, NULL, &xr, &v->node);
    }
    return st;
}

/* Values written in place ('overwritten_by'): the op that overwrites a
 * value reads it, after its maker, and nothing reads it after that op, in
 * the forward or in a backward (PyTorch refuses the backward of a value
 * modified in place): a plan may only recompute it. */
static remat_status overwrites(const reader *r, builder *b, int32_t (*saves)[REMAT__MAX_IN + MAX_OUTPUTS],
                               const int *n_saves) {
    int32_t *last = malloc(((size_t)r->nv + 1) * sizeof *last);   /* per value: the last op that reads it */
    int32_t *saver = malloc(((size_t)r->nv + 1) * sizeof *saver); /* per value: an op whose backward reads it */
    if (!last || !saver) {
        free(last), free(saver);
        return remat__err(REMAT_NOMEM, "out of memory reading the graph");
    }
    for (int32_t v = 0; v < r->nv; v++) last[v] = saver[v] = -1;
    for (int32_t i = 0; i < r->no; i++) {
        for (int k = 0; k < r->o[i].n_in; k++) last[r->o[i].in[k]] = i;
        for (int k = 0; k < n_saves[i]; k++) saver[saves[i][k]] = i;
    }
    remat_status st = REMAT_OK;
    for (int32_t x = 0; x < r->nv && st == REMAT_OK; x++) {
        const val *v = &r->v[x];
        if (v->over < 0) continue;
        int32_t w = v->over, reads = 0;
        if (w < r->no)
            for (int k = 0; k < r->o[w].n_in; k++) reads |= r->o[w].in[k] == x;
        if (v->kind != V_ACT)
            st = remat__err(REMAT_FORMAT,
                            "value %d: only an activation is 'overwritten_by' an op (a parameter or "
                            "buffer written in place is the op's state: 'stateful')",
                            (int)x);
        else if (w >= r->no || !reads || w <= v->producer)
            st = remat__err(REMAT_FORMAT,
                            "value %d: 'overwritten_by' names op %d, which must be an op after its "
                            "maker that reads it",
                            (int)x, (int)w);
        else if (last[x] != w)
            st = remat__err(REMAT_FORMAT, "value %d: op %d reads it after op %d overwrote it in place", (int)x,
                            (int)last[x], (int)w);
        else if (saver[x] >= 0)
            st = remat__err(REMAT_FORMAT,
                            "value %d: the backward of op %d reads it, but op %d overwrites it in place "
                            "in the forward",
                            (int)x, (int)saver[x], (int)w);
        else b->t[v->node].over = 1 + r->v[r->o[w].out[0]].node;
    }
    free(last), free(saver);
    return st;
}

/* Values the framework's code holds in the forward past their last read
 * ('held_until'): the op must run after the value's maker, and before an
 * op that overwrites it in place (the memory holds the new version from
 * there). Each such value that is a node's value is listed with the node
 * it is held until (remat__traced.held, .holds): the schedules keep it
 * through that node's forward in the forward pass. One the caller holds
 * ('caller_holds': a model's output kept through the backward) is held
 * from when it is made to the step's end (REMAT__HELD_TO_END). A value
 * that only its maker's backward reads, or nothing, has no node: held
 * with its op's aux or as a transient, its hold is not modelled. */
static remat_status holds(const reader *r, builder *b) {
    for (int32_t x = 0; x < r->nv; x++) {
        const val *v = &r->v[x];
        if (v->to_end && v->kind != V_ACT)
            return remat__err(REMAT_FORMAT, "value %d: only an activation is held by the caller ('caller_holds')",
                              (int)x);
        if (v->to_end && v->node >= 0 && b->t[v->node].value == x) {
            b->t[v->node].held = REMAT__HELD_TO_END;
            continue;
        }
        if (v->held < 0) continue;
        if (v->kind != V_ACT)
            return remat__err(REMAT_FORMAT, "value %d: only an activation is 'held_until' an op", (int)x);
        if (v->held >= r->no || v->held < v->producer || (v->over >= 0 && v->held >= v->over))
            return remat__err(REMAT_FORMAT,
                              "value %d: 'held_until' names op %d, which must be an op from its maker on%s", (int)x,
                              (int)v->held, v->over >= 0 ? ", before the op that overwrites it" : "");
        if (v->node < 0 || b->t[v->node].value != x) continue;
        int32_t until = r->v[r->o[v->held].out[0]].node;
        remat__traced *t = &b->t[v->node];
        t->held = 1 + until;
        t->hold_next = b->t[until].holds;
        b->t[until].holds = 1 + v->node;
    }
    return REMAT_OK;
}

static remat_status read_header(reader *r) {
    const cJSON *root = r->root;
    if (!cJSON_IsObject(root)) return remat__err(REMAT_FORMAT, "a graph file is a JSON object");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, GRAPH_FORMAT) != 0)
        return remat__err(REMAT_FORMAT, "'format' must be \"" GRAPH_FORMAT "\"");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != GRAPH_VERSION)
        return remat__err(REMAT_FORMAT, "'version' must be %d (this remat reads version %d)", GRAPH_VERSION,
                          GRAPH_VERSION);
    const cJSON *cu = cJSON_GetObjectItemCaseSensitive(root, "cost_unit");
    if (cu && (!cJSON_IsString(cu) || (strcmp(cu->valuestring, "flops") && strcmp(cu->valuestring, "seconds"))))
        return remat__err(REMAT_FORMAT, "'cost_unit' must be \"flops\" or \"seconds\"");
    r->seconds = cu && strcmp(cu->valuestring, "seconds") == 0;
    return REMAT_OK;
}

static remat_status read_all(reader *r, builder *b) {
    remat_status st = read_header(r);
    if (st != REMAT_OK) return st;
    if ((st = read_values(r, cJSON_GetObjectItemCaseSensitive(r->root, "values"))) != REMAT_OK) return st;
    int64_t loss;
    if ((st = whole(cJSON_GetObjectItemCaseSensitive(r->root, "loss"), "the graph", "loss", &loss)) != REMAT_OK)
        return st;
    if (loss >= r->nv)
        return remat__err(REMAT_FORMAT, "'loss' names value %lld, but there are %d values", (long long)loss,
                          (int)r->nv);
    r->loss = (int32_t)loss;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r->root, "ops");
    if (!cJSON_IsArray(arr)) return remat__err(REMAT_FORMAT, "'ops' is missing or not an array");
    int no = cJSON_GetArraySize(arr);
    if (no < 1) return remat__err(REMAT_FORMAT, "'ops' is empty");
    if (no > MAX_OPS) return remat__err(REMAT_FORMAT, "'ops' has %d entries; at most %d are read", no, MAX_OPS);
    r->o = calloc((size_t)no, sizeof *r->o);
    int32_t(*saves)[REMAT__MAX_IN + MAX_OUTPUTS] = calloc((size_t)no, sizeof *saves);
    int *n_saves = calloc((size_t)no, sizeof *n_saves);
    if (!r->o || !saves || !n_saves) {
        free(saves), free(n_saves);
        return remat__err(REMAT_NOMEM, "out of memory reading %d ops", no);
    }
    r->no = no;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if ((st = read_op(r, i, it, saves[i], &n_saves[i])) != REMAT_OK) break;
        for (int k = 0; k < r->o[i].n_in; k++) r->v[r->o[i].in[k]].read_fwd = 1;
        i++;
    }
    const val *lv = &r->v[r->loss];
    if (st == REMAT_OK && (lv->producer < 0 || lv->out_index != 0 || lv->bytes != 4))
        st = remat__err(REMAT_FORMAT,
                        "'loss' (value %d) must be the first output of an op and a float32 scalar "
                        "(4 bytes)",
                        (int)r->loss);
    for (i = 0; i < no && st == REMAT_OK; i++) st = op_nodes(r, b, i, saves[i], n_saves[i]);
    if (st == REMAT_OK) st = overwrites(r, b, saves, n_saves);
    if (st == REMAT_OK) st = holds(r, b);
    free(saves), free(n_saves);
    return st;
}

remat_status remat_graph_read_json(const char *text, remat_graph **out, remat_node *loss) {
    if (!text || !out || !loss) return remat__err(REMAT_INVALID, "remat_graph_read_json: NULL argument");
    *out = NULL;
    *loss = REMAT_NONE;
    const char *end = NULL;
    reader r = {.text = text};
    r.root = cJSON_ParseWithOpts(text, &end, 1);
    if (!r.root) {
        int line, col;
        remat__line_col(text, end ? end : text, &line, &col);
        return remat__err(REMAT_FORMAT, "graph file: JSON syntax error at line %d, column %d", line, col);
    }
    builder b = {0};
    remat_status st = remat_graph_create(&b.g);
    if (st == REMAT_OK) st = read_all(&r, &b);
    if (st == REMAT_OK) {
        remat__traced *t = realloc(b.t, ((size_t)b.g->n + 1) * sizeof *t);
        if (!t) st = remat__err(REMAT_NOMEM, "out of memory building the traced graph");
        else b.t = t;
    }
    if (st == REMAT_OK) {
        b.g->traced = b.t;
        b.g->traced_seconds = r.seconds;
        *loss = r.v[r.loss].node;
        *out = b.g;
    } else {
        free(b.t);
        remat_graph_destroy(b.g);
    }
    free(r.v);
    free(r.o);
    cJSON_Delete(r.root);
    return st;
}

int32_t remat_graph_traced_id(const remat_graph *g, remat_node n) {
    if (!g || !g->traced || n < 0 || n >= g->n) return -1;
    return g->traced[n].id;
}
