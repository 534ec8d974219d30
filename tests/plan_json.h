/* plan_json.h: reading a plan's JSON (remat_plan_graph_json's answer) in
 * the graph-file tests. */
#ifndef REMAT_PLAN_JSON_H
#define REMAT_PLAN_JSON_H

#include <cjson/cJSON.h>
#include <string.h>

/* The peak at the first forward row of op `op` in p's timeline
 * (a request with "timeline": true), -1 none. */
static inline double plan_forward_row(const cJSON *p, int op) {
    const cJSON *row;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(p, "timeline")) {
        const cJSON *kind = cJSON_GetArrayItem(row, 0);
        if (cJSON_IsString(kind) && strcmp(kind->valuestring, "forward") == 0 &&
            (int)cJSON_GetArrayItem(row, 1)->valuedouble == op)
            return cJSON_GetArrayItem(row, 3)->valuedouble;
    }
    return -1;
}

#endif
