/* args.c: argument parsing helpers and error reporting for the CLI. */
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

const char *cli_float_why(int code) {
    return code == -2 ? ": out of float range" : code == -3 ? ": not a finite number" : "";
}

/* getopt_long takes any unambiguous prefix of a long option ("--bud" for
 * --budget); remat does not. A prefix that works today would become
 * ambiguous, or mean another option, when an option is added, and the
 * command lines in scripts would break or change meaning. So every long
 * option is spelled in full: a prefix of one option is refused naming it,
 * a prefix of several is called ambiguous, naming them. Runs over argv
 * before getopt_long does (skipping the values of options that take one). */
static int check_full_names(const cli_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) break;
        if (strncmp(a, "--", 2) != 0 || !a[2]) continue;
        const char *name = a + 2;
        size_t len = strcspn(name, "=");
        const struct option *exact = NULL;
        int matches = 0;
        char could[512] = "";
        for (const struct option *p = o->opts; p->name; p++) {
            if (strncmp(p->name, name, len) != 0) continue;
            if (strlen(p->name) == len) {
                exact = p;
                break;
            }
            size_t used = strlen(could);
            snprintf(could + used, sizeof could - used, "%s--%s", matches++ ? ", " : "", p->name);
        }
        if (exact) {
            if (exact->has_arg == required_argument && !name[len]) i++; /* its value */
            continue;
        }
        if (matches > 1)
            return cli_usage_error(o->cmd, "ambiguous option '--%.*s' (could be %s)", (int)len, name, could);
        if (matches == 1)
            return cli_usage_error(o->cmd, "unknown option '--%.*s' (options are spelled in full: %s)", (int)len,
                                   name, could);
    }
    return 0;
}

int cli_next_opt(cli_opts *o, int argc, char **argv) {
    if (!o->started) {
        optind = 1;
        opterr = 0;
        o->started = 1;
        if ((o->rc = check_full_names(o, argc, argv))) return 0;
    }
    o->rc = 0;
    for (;;) {
        int c = getopt_long(argc, argv, o->shortopts, o->opts, &o->idx);
        if (c == -1) {
            if (optind < argc) o->rc = cli_usage_error(o->cmd, "unexpected argument '%s'", argv[optind]);
            return 0;
        }
        if (c == ':') {
            o->rc = cli_usage_error(o->cmd, "option '%s' needs a value", argv[optind - 1]);
            return 0;
        }
        if (c == '?') {
            o->rc = cli_usage_error(o->cmd, "unknown option '%s'", argv[optind - 1]);
            return 0;
        }
        int bad = 0;
        if ((o->ma && cli_model_arg(o->ma, c, optarg, &bad)) || (o->sa && cli_session_arg(o->sa, c, optarg, &bad))) {
            if (bad) {
                o->rc = cli_bad_value(o, optarg, "");
                return 0;
            }
            continue;
        }
        return c;
    }
}

int cli_bad_value(cli_opts *o, const char *arg, const char *why) {
    return cli_usage_error(o->cmd, "bad value '%s' for --%s%s", arg, o->opts[o->idx].name, why);
}

void cli_json_print(cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    if (t) printf("%s\n", t);
    cJSON_free(t);
    cJSON_Delete(o);
}
