/* args.c: argument parsing helpers and error reporting for the CLI. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "remat: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "remat %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'remat %s --help'.\n", cmd);
    va_end(ap);
    return 2;
}

int cli_parse_i64(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int cli_parse_float(const char *s, float *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = (float)v;
    return 0;
}

int cli_parse_size(const char *s, size_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || !isfinite(v)) return -1;
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},          {"B", 1},           {"KiB", 1024.0},  {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},
                 {"GB", 1e9},      {"TB", 1e12},       {"K", 1024.0},    {"M", 1048576.0},
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
    if (i == 0)
        snprintf(buf, cap, "%zu B", b);
    else
        snprintf(buf, cap, "%.1f %s", v, u[i]);
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
