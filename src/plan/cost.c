/* cost.c: the cost model. A node's forward costs its FLOPs (from the op
 * table) divided by its family's measured throughput; its backward twice
 * that. Without a calibration the cost is the FLOPs themselves. The
 * measurement itself (remat_calibrate) is train/calibrate.c: it runs
 * sessions, which plan/ does not.
 *
 * remat_calibrate measures each family by timing training steps of a small
 * graph made mostly of that family's ops (a parameter feeding a few such
 * ops, reduced by MSE): throughput = 3 x forward FLOPs of the graph / the
 * median step time. The numbers are for this machine and thread count;
 * `remat calibrate` caches them in a file.
 */
#include "schedule.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
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

double remat__node_seconds(const remat__prog *p, const remat__node *n) {
    double f = remat__node_flops(p->g, n);
    if (!p->cost.calibrated) return f;
    double t = p->cost.flops_per_s[remat__ops[n->op]->family];
    return t > 0 ? f / t : f;
}


remat_status remat_cost_model_save(const remat_cost_model *m, const char *path) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", remat_device_str(m->device));
    cJSON_AddNumberToObject(o, "threads", m->threads);
    cJSON *t = cJSON_AddObjectToObject(o, "flops_per_s");
    for (int f = 0; f < REMAT_FAMILY_COUNT; f++) cJSON_AddNumberToObject(t, remat_family_str((remat_family)f), m->flops_per_s[f]);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return remat__err(REMAT_NOMEM, "out of memory writing %s", path);
    FILE *fp = fopen(path, "w");
    int ok = fp && fputs(text, fp) >= 0 && fputc('\n', fp) != EOF;
    if (fp && fclose(fp) != 0) ok = 0;
    cJSON_free(text);
    return ok ? REMAT_OK : remat__err(REMAT_IO, "%s: cannot write the cost model", path);
}

remat_status remat_cost_model_load(remat_cost_model *m, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return remat__err(REMAT_NOT_FOUND, "%s: cannot open the cost model (run remat calibrate)", path);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    if (!o) return remat__err(REMAT_FORMAT, "%s: not JSON", path);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "flops_per_s");
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(o, "threads");
    const cJSON *dv = cJSON_GetObjectItemCaseSensitive(o, "device");
    remat_cost_model tmp = {.calibrated = 1};
    remat_status st = REMAT_OK;
    if (!cJSON_IsNumber(th) || th->valuedouble < 1 || th->valuedouble > 1024 || th->valuedouble != (int)th->valuedouble)
        st = remat__err(REMAT_FORMAT, "%s: 'threads' (the thread count it was measured with) is missing or not a "
                        "count: run remat calibrate again", path);
    else
        tmp.threads = (int)th->valuedouble;
    if (st == REMAT_OK && dv && (!cJSON_IsString(dv) || remat_device_parse(dv->valuestring, &tmp.device) != REMAT_OK))
        st = remat__err(REMAT_FORMAT, "%s: 'device' is not a device name", path);
    for (int f = 0; f < REMAT_FAMILY_COUNT && st == REMAT_OK; f++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, remat_family_str((remat_family)f));
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0))
            st = remat__err(REMAT_FORMAT, "%s: 'flops_per_s.%s' is missing or not a positive number", path,
                            remat_family_str((remat_family)f));
        else
            tmp.flops_per_s[f] = v->valuedouble;
    }
    cJSON_Delete(o);
    if (st == REMAT_OK) *m = tmp;
    return st;
}
