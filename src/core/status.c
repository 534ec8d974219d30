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

static _Thread_local char last_error[1024];

const char *remat_status_str(remat_status s) {
    switch (s) {
#define REMAT__STATUS_CASE(name, code, desc) \
    case REMAT_##name:                      \
        return desc;
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
    };
    if ((int)m < 0 || m > REMAT_MEM_TOTAL) return "unknown";
    return names[m];
}

const char *remat_last_error(void) {
    return last_error[0] ? last_error : "no error";
}

remat_status remat_error(remat_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

remat_status remat__err(remat_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

double remat__now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
