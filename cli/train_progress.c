/* train_progress.c: what `remat train` prints as it goes: a progress bar
 * per epoch and the evaluation after it (data sets), a line every
 * --log-every steps (streams), the training states saved, in text or one
 * JSON object per line (--json). */
#include "train.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static void print_json_step(const remat_event *ev, const cli_progress *p) {
    cJSON *o = cJSON_CreateObject();
    char buf[64];
    cJSON_AddStringToObject(o, "event", "step");
    cJSON_AddNumberToObject(o, "epoch", (double)ev->epoch + 1);
    cJSON_AddNumberToObject(o, "step", (double)ev->step);
    snprintf(buf, sizeof buf, "%.9g", ev->loss);
    cJSON_AddRawToObject(o, "loss", buf);
    snprintf(buf, sizeof buf, "%.6f", ev->step_seconds);
    cJSON_AddRawToObject(o, "step_seconds", buf);
    snprintf(buf, sizeof buf, "%.1f", ev->images_per_s);
    cJSON_AddRawToObject(o, "images_per_s", buf);
    if (p->tokens_per_row) {
        snprintf(buf, sizeof buf, "%.1f", ev->images_per_s * (double)p->tokens_per_row);
        cJSON_AddRawToObject(o, "tokens_per_s", buf);
    }
    cJSON_AddNumberToObject(o, "peak_bytes", (double)ev->peak_bytes);
    cli_json_print(o);
}

static void print_json_eval(const remat_event *ev) {
    cJSON *o = cJSON_CreateObject();
    char buf[64];
    cJSON_AddStringToObject(o, "event", "eval");
    cJSON_AddNumberToObject(o, "epoch", (double)ev->epoch + 1);
    cJSON_AddNumberToObject(o, "step", (double)ev->step);
    snprintf(buf, sizeof buf, "%.9g", ev->loss);
    cJSON_AddRawToObject(o, "test_loss", buf);
    snprintf(buf, sizeof buf, "%.6f", ev->accuracy);
    cJSON_AddRawToObject(o, "test_accuracy", buf);
    snprintf(buf, sizeof buf, "%.3f", ev->seconds);
    cJSON_AddRawToObject(o, "epoch_seconds", buf);
    cli_json_print(o);
}

/* Training states: saves (a JSON line, or remembered for the closing line),
 * the resume, and notes (a damaged state skipped). 1 if ev was one. */
static int on_state_event(const remat_event *ev, cli_progress *p) {
    if (ev->kind == REMAT_EVENT_SAVE) {
        snprintf(p->last_state, sizeof p->last_state, "%s", ev->path ? ev->path : "");
        p->last_state_step = ev->step;
        if (p->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "event", "state");
            cJSON_AddNumberToObject(o, "step", (double)ev->step);
            cJSON_AddStringToObject(o, "path", ev->path ? ev->path : "");
            cli_json_print(o);
            fflush(stdout);
        }
        return 1;
    }
    if (ev->kind == REMAT_EVENT_RESUME) {
        if (p->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "event", "resume");
            cJSON_AddNumberToObject(o, "step", (double)ev->step);
            if (ev->path) cJSON_AddStringToObject(o, "path", ev->path);
            else cJSON_AddNullToObject(o, "path");
            cli_json_print(o);
        } else if (ev->path) {
            printf("resumed from %s: step %lld (epoch %lld, %lld batches into it)\n", ev->path, (long long)ev->step,
                   (long long)ev->epoch + 1, (long long)ev->step_in_epoch);
        } else {
            printf("%s\n", ev->message ? ev->message : "no state to resume from: starting at step 0");
        }
        fflush(stdout);
        return 1;
    }
    if (ev->kind == REMAT_EVENT_NOTE) {
        fprintf(stderr, "remat: %s\n", ev->message ? ev->message : "");
        fflush(stderr);
        return 1;
    }
    return 0;
}

/* Data sets: a bar per epoch, then the evaluation. */
void cli_train_on_event(const remat_event *ev, void *user) {
    cli_progress *p = user;
    if (p->quiet || on_state_event(ev, p)) return;
    if (p->json) {
        if (ev->kind == REMAT_EVENT_STEP) print_json_step(ev, p);
        else print_json_eval(ev);
        fflush(stdout);
        return;
    }
    char mem[32];
    if (ev->kind == REMAT_EVENT_STEP) {
        int64_t n = ev->steps_in_epoch, i = ev->step_in_epoch;
        /* A bar redrawn in place on a terminal; elsewhere ten lines an epoch. */
        if (!p->tty && i != n && (i * 10 / n) == ((i - 1) * 10 / n)) return;
        int width = 24, fill = (int)(width * i / (n ? n : 1));
        char bar[32];
        for (int k = 0; k < width; k++) bar[k] = k < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "%sepoch %lld/%lld [%s] %lld/%lld loss %.4f %.0f img/s peak %s%s", p->tty ? "\r" : "",
                (long long)ev->epoch + 1, (long long)p->epochs_total, bar, (long long)i, (long long)n, ev->loss,
                ev->images_per_s, cli_fmt_bytes(ev->peak_bytes, mem, sizeof mem), p->tty ? "\033[K" : "\n");
        if (p->tty && i == n) fprintf(stderr, "\n");
        fflush(stderr);
    } else {
        printf("epoch %lld: test loss %.4f, test accuracy %.2f%% (training %.1f s)\n", (long long)ev->epoch + 1,
               ev->loss, 100.0 * ev->accuracy, ev->seconds);
        fflush(stdout);
    }
}

/* Streams: a line every log_every steps and one per epoch. */
void cli_train_on_stream_event(const remat_event *ev, void *user) {
    cli_progress *p = user;
    if (p->quiet || on_state_event(ev, p)) return;
    if (p->json) {
        print_json_step(ev, p);
        fflush(stdout);
        return;
    }
    if (!p->started || ev->epoch != p->epoch) p->epoch_loss = 0, p->epoch_n = 0, p->epoch = ev->epoch;
    p->window_loss += ev->loss, p->window_seconds += ev->step_seconds, p->window_n++;
    p->epoch_loss += ev->loss, p->epoch_n++;
    int first = !p->started;
    p->started = 1;
    int last = ev->step_in_epoch == ev->steps_in_epoch;
    if (ev->step_in_epoch % p->log_every == 0 || last || first) {
        char mem[32], rate[64];
        if (p->tokens_per_row)
            snprintf(rate, sizeof rate, "%.0f tokens/s", ev->images_per_s * (double)p->tokens_per_row);
        else snprintf(rate, sizeof rate, "%.1f samples/s", ev->images_per_s);
        printf("epoch %lld/%lld step %lld/%lld: loss %.4f (mean of %lld: %.4f), %.3f s/step, %s, peak %s\n",
               (long long)ev->epoch + 1, (long long)p->epochs_total, (long long)ev->step_in_epoch,
               (long long)ev->steps_in_epoch, ev->loss, (long long)p->window_n, p->window_loss / (double)p->window_n,
               p->window_seconds / (double)p->window_n, rate, cli_fmt_bytes(ev->peak_bytes, mem, sizeof mem));
        p->window_loss = p->window_seconds = 0, p->window_n = 0;
    }
    if (last)
        printf("epoch %lld: mean training loss %.4f over %lld steps (%.1f s)\n", (long long)ev->epoch + 1,
               p->epoch_loss / (double)p->epoch_n, (long long)p->epoch_n, ev->seconds);
    fflush(stdout);
}
