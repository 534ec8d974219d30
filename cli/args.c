/* args.c: value parsers and error reporting for the CLI (the option walker
 * that uses them is opts.c). */
#include "cli.h"

#include <cjson/cJSON.h>

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Both also leave the message as the thread's last error (remat_error), so
 * that under mpirun the other ranks can be told why this one stopped
 * (cli_dist_agree). */
/* The message, whole (malloc'd; NULL out of memory), for remat_error to
 * shorten: a path of thousands of characters is cut in its middle there,
 * never the reason after it. */
static char *format_all(const char *fmt, va_list ap) {
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (msg) vsnprintf(msg, (size_t)n + 1, fmt, aq);
    va_end(aq);
    return msg;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *msg = format_all(fmt, ap);
    va_end(ap);
    remat_error(REMAT_INVALID, "%s", msg ? msg : "out of memory");
    free(msg);
    fprintf(stderr, "remat: %s\n", remat_last_error());
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *msg = format_all(fmt, ap);
    va_end(ap);
    remat_error(REMAT_INVALID, "remat %s: %s", cmd, msg ? msg : "out of memory");
    free(msg);
    fprintf(stderr, "%s\nTry 'remat %s --help'.\n", remat_last_error(), cmd);
    return 2;
}

/* A number is a whole token: strtoll and strtod skip leading white space
 * (" 3" would pass for 3, "\n3" too), which a flag's value never has
 * unless it was quoted by mistake. */
static int whole_token(const char *s) { return s && *s && !isspace((unsigned char)*s); }

int cli_parse_i64(const char *s, int64_t *out) {
    if (!whole_token(s)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* 0 on success, as cli.h says; a failure's code says why: -1 not a
 * number, -2 outside float's range (beyond FLT_MAX, such as 1e39, which a
 * cast would turn into an infinity, or so small that it would become 0,
 * such as 1e-50), -3 "nan" or "inf" themselves. */
int cli_parse_float(const char *s, float *out) {
    if (!whole_token(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end) return -1;
    if (isnan(v) || (isinf(v) && errno != ERANGE)) return -3;
    if (errno == ERANGE || fabs(v) > FLT_MAX || (v != 0.0 && (float)v == 0.0f)) return -2;
    *out = (float)v;
    return 0;
}

int cli_parse_size(const char *s, size_t *out) {
    if (!whole_token(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || !isfinite(v)) return -1;
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"KiB", 1024.0},
                 {"MiB", 1048576.0},
                 {"GiB", 1073741824.0},
                 {"TiB", 1099511627776.0},
                 {"KB", 1e3},
                 {"MB", 1e6},
                 {"GB", 1e9},
                 {"TB", 1e12},
                 {"K", 1024.0},
                 {"M", 1048576.0},
                 {"G", 1073741824.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcasecmp(end, units[i].unit) == 0) {
            double b = v * units[i].mult;
            if (b > 1.8e19) return -1;
            *out = (size_t)b;
            return 0;
        }
    return -1;
}

const char *cli_fmt_bytes(size_t b, char *buf, size_t cap) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024.0 && i < 4) v /= 1024.0, i++;
    if (i == 0) snprintf(buf, cap, "%zu B", b);
    else snprintf(buf, cap, "%.1f %s", v, u[i]);
    return buf;
}

int cli_data_shape(const char *data, int64_t *c, int64_t *h, int64_t *w) {
    if (strcmp(data, "fashion-mnist") == 0 || strcmp(data, "mnist") == 0) {
        *c = 1, *h = 28, *w = 28;
        return 0;
    }
    if (strcmp(data, "cifar10") == 0) {
        *c = 3, *h = 32, *w = 32;
        return 0;
    }
    return -1;
}

double cli_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *cli_float_why(int code) {
    return code == -2 ? ": out of float range" : code == -3 ? ": not a finite number" : "";
}

void cli_json_print(cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    if (t) printf("%s\n", t);
    cJSON_free(t);
    cJSON_Delete(o);
}
