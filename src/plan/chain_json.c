/* chain_json.c: reads a chain for the planner from JSON text,
 * {"stages": [{"forward": f, "backward": b, "input": a, "saved": s}, ...],
 * "output": o}, with cJSON. Syntax errors give the line and column; a
 * missing, negative or non-numeric field is named with its stage; more
 * stages than the planner takes are refused before any is read. The
 * chain is then validated as remat_chain_solve would (rotor.c), which
 * also refuses, before allocating, a chain too large to plan.
 */
#include "rotor.h"

#include "../remat-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ JSON */

/* Reads an integer size >= 0 from obj[key]; where names the object
 * ("stage 3: " or ""). */
static remat_status json_size(const cJSON *obj, const char *key, const char *where, int64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) return remat__err(REMAT_FORMAT, "%s'%s' is missing", where, key);
    if (!cJSON_IsNumber(it)) return remat__err(REMAT_FORMAT, "%s'%s' is not a number", where, key);
    double v = it->valuedouble;
    if (v < 0) return remat__err(REMAT_FORMAT, "%s'%s' is negative (%g)", where, key, v);
    if (v != floor(v)) return remat__err(REMAT_FORMAT, "%s'%s' is not an integer (%g)", where, key, v);
    if (v >= 9007199254740992.0) /* 2^53: beyond it doubles skip integers */
        return remat__err(REMAT_FORMAT, "%s'%s' is too large (%g)", where, key, v);
    *out = (int64_t)v;
    return REMAT_OK;
}

/* Reads a finite cost >= 0 from obj[key]. */
static remat_status json_cost(const cJSON *obj, const char *key, const char *where, double *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) return remat__err(REMAT_FORMAT, "%s'%s' is missing", where, key);
    if (!cJSON_IsNumber(it)) return remat__err(REMAT_FORMAT, "%s'%s' is not a number", where, key);
    double v = it->valuedouble;
    if (!isfinite(v)) return remat__err(REMAT_FORMAT, "%s'%s' is not finite", where, key);
    if (v < 0) return remat__err(REMAT_FORMAT, "%s'%s' is negative (%g)", where, key, v);
    *out = v;
    return REMAT_OK;
}

remat_status remat_chain_parse_json(const char *text, remat_stage **stages, int *n, int64_t *output) {
    if (!text || !stages || !n || !output) return remat__err(REMAT_INVALID, "remat_chain_parse_json: NULL argument");
    *stages = NULL;
    *n = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        int line, col;
        remat__line_col(text, end ? end : text, &line, &col);
        return remat__err(REMAT_FORMAT, "JSON syntax error at line %d, column %d", line, col);
    }
    remat_status rc = REMAT_OK;
    remat_stage *st = NULL;
    int count = 0;
    int64_t out_size = 0;
    const cJSON *arr = NULL;
    if (!cJSON_IsObject(root)) {
        rc = remat__err(REMAT_FORMAT, "a chain is a JSON object with 'stages' and 'output'");
        goto done;
    }
    arr = cJSON_GetObjectItemCaseSensitive(root, "stages");
    if (!arr) {
        rc = remat__err(REMAT_FORMAT, "'stages' is missing");
        goto done;
    }
    if (!cJSON_IsArray(arr)) {
        rc = remat__err(REMAT_FORMAT, "'stages' is not an array");
        goto done;
    }
    count = cJSON_GetArraySize(arr);
    if (count < 1) {
        rc = remat__err(REMAT_FORMAT, "'stages' is empty: a chain needs at least one stage");
        goto done;
    }
    if (count > REMAT__CHAIN_MAX_STAGES) { /* refused before the stages are allocated */
        rc = remat__err(REMAT_FORMAT,
                        "'stages' has %d stages; the planner takes at most %d (merge consecutive "
                        "layers into one stage)",
                        count, REMAT__CHAIN_MAX_STAGES);
        goto done;
    }
    st = calloc((size_t)count, sizeof *st);
    if (!st) {
        rc = remat__err(REMAT_NOMEM, "out of memory reading %d stages", count);
        goto done;
    }
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        char where[32];
        snprintf(where, sizeof where, "stage %d: ", i);
        if (!cJSON_IsObject(it)) {
            rc = remat__err(REMAT_FORMAT, "stage %d is not an object", i);
            goto done;
        }
        if ((rc = json_cost(it, "forward", where, &st[i].forward)) != REMAT_OK ||
            (rc = json_cost(it, "backward", where, &st[i].backward)) != REMAT_OK ||
            (rc = json_size(it, "input", where, &st[i].input)) != REMAT_OK ||
            (rc = json_size(it, "saved", where, &st[i].saved)) != REMAT_OK)
            goto done;
        i++;
    }
    if ((rc = json_size(root, "output", "", &out_size)) != REMAT_OK) goto done;
    /* the same checks as the solver's (saved >= the stage's output) */
    if (remat__chain_check(st, count, out_size) != REMAT_OK) rc = REMAT_FORMAT;
done:
    cJSON_Delete(root);
    if (rc != REMAT_OK) {
        free(st);
        return rc;
    }
    *stages = st;
    *n = count;
    *output = out_size;
    return REMAT_OK;
}
