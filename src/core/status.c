/* status.c: status strings and the per-thread last-error message.
 *
 * The message lives in thread-local storage, like errno: a failing call on
 * one thread never overwrites the message another thread is reading. It is
 * the only state in the library that is not owned by a handle.
 */
#include "../remat-impl.h"

#include <time.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *remat_status_str(remat_status s) {
    switch (s) {
#define REMAT__STATUS_CASE(name, code, desc)                                                                           \
    case REMAT_##name: return desc;
        REMAT_STATUS_LIST(REMAT__STATUS_CASE)
#undef REMAT__STATUS_CASE
    }
    return "unknown status";
}

const char *remat_mem_str(remat_mem m) {
    static const char *const names[] = {
#define REMAT__MEM_NAME(name, desc) desc,
        REMAT_MEM_LIST(REMAT__MEM_NAME)
#undef REMAT__MEM_NAME
            "total",
        "host",
    };
    if ((int)m < 0 || m > REMAT_MEM_HOST) return "unknown";
    return names[m];
}

static const char *const device_names[] = {"cpu", "cuda"};

const char *remat_device_str(remat_device d) {
    return (unsigned)d < sizeof device_names / sizeof device_names[0] ? device_names[d] : "unknown";
}

remat_status remat_device_parse(const char *name, remat_device *out) {
    for (unsigned i = 0; i < sizeof device_names / sizeof device_names[0]; i++)
        if (strcmp(name, device_names[i]) == 0) {
            *out = (remat_device)i;
            return REMAT_OK;
        }
    return remat__err(REMAT_NOT_FOUND, "unknown device '%s' (known: cpu, cuda)", name);
}

static const char *const precision_names[] = {"fp32", "bf16"};

const char *remat_precision_str(remat_precision p) {
    return (unsigned)p < REMAT_PRECISION_COUNT ? precision_names[p] : "unknown";
}

remat_status remat_precision_parse(const char *name, remat_precision *out) {
    for (int i = 0; i < REMAT_PRECISION_COUNT; i++)
        if (strcmp(name, precision_names[i]) == 0) {
            *out = (remat_precision)i;
            return REMAT_OK;
        }
    return remat__err(REMAT_NOT_FOUND, "unknown precision '%s' (known: fp32, bf16)", name);
}

const char *remat_last_error(void) { return last_error[0] ? last_error : "no error"; }

/* src with every word (a run of characters other than spaces) longer than
 * `word` characters shortened to its first and last characters around
 * "...", into dst (cap bytes); 1 if it all fit. */
static int shorten_words(char *dst, size_t cap, const char *src, size_t word) {
    size_t at = 0, keep = word / 2 - 2;
    for (const char *p = src; *p;) {
        size_t n = strcspn(p, " ");
        if (n == 0) n = 1; /* a space */
        if (n > word) {
            if (at + 2 * keep + 3 >= cap) return 0;
            memcpy(dst + at, p, keep), at += keep;
            memcpy(dst + at, "...", 3), at += 3;
            memcpy(dst + at, p + n - keep, keep), at += keep;
        } else {
            if (at + n >= cap) return 0;
            memcpy(dst + at, p, n), at += n;
        }
        p += n;
    }
    dst[at] = 0;
    return 1;
}

/* Formats the message. One that does not fit has its long words (paths,
 * mostly) shortened in the middle, at most as much as needed, so that the
 * reason that follows a path of thousands of characters is never cut
 * off; only when that is not enough is the end cut. Formatted into a copy
 * first: an argument may be the last message itself. */
static void set_message(const char *fmt, va_list ap) {
    char buf[sizeof last_error];
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    char *full = n >= (int)sizeof buf ? malloc((size_t)n + 1) : NULL;
    if (full) vsnprintf(full, (size_t)n + 1, fmt, aq);
    va_end(aq);
    if (full) {
        size_t word = 400;
        while (word >= 24 && !shorten_words(buf, sizeof buf, full, word)) word /= 2;
        if (word < 24) snprintf(buf, sizeof buf, "%s", full);
        free(full);
    }
    memcpy(last_error, buf, sizeof buf);
}

remat_status remat_error(remat_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_message(fmt, ap);
    va_end(ap);
    return s;
}

remat_status remat__err(remat_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_message(fmt, ap);
    va_end(ap);
    return s;
}

double remat__now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void remat__line_col(const char *text, const char *pos, int *line, int *col) {
    *line = 1, *col = 1;
    for (const char *c = text; *c && c < pos; c++) {
        if (*c == '\n') (*line)++, *col = 1;
        else (*col)++;
    }
}
