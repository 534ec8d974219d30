/* cmd_train.c: `remat train`: build a model, then either train it on a
 * data set with a progress bar (or one JSON object per line) and report
 * test accuracy after each epoch, or train it from a stream of batches
 * (synthetic data, or random windows of a token file for a language model)
 * in evaluation-free epochs of --steps steps, with a progress line every
 * --log-every steps. Weights can start from a safetensors file and be
 * saved to one. With --state-dir (and --save-every) the run saves training
 * states as it goes, and --resume continues one bitwise as if it had never
 * stopped (remat.h, "training state"); the options that define the math
 * are recorded in each state under their flags' names and compared. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void help(void) {
    printf("usage: remat train [options]\n"
           "\n"
           "  --data NAME         what to train on (default fashion-mnist for models that take\n"
           "                      1x28x28 images, mlp and cnn; other models need --data):\n"
           "                        fashion-mnist | mnist | cifar10   a data set; epochs go\n"
           "                          over it, each followed by a test evaluation\n"
           "                        synthetic   random batches of the model's input and\n"
           "                          label shapes, from the seed; no evaluation\n"
           "                        tokens:FILE   a language model (gpt2) on random windows\n"
           "                          of context+1 tokens of FILE, a flat file of\n"
           "                          little-endian uint16 token ids; no evaluation\n"
           "  --data-dir DIR      where the data set files are (default for fashion-mnist:\n"
           "                      /usr/share/datasets/fashion-mnist, from Debian's\n"
           "                      dataset-fashion-mnist package)\n"
           "  --epochs N          epochs to train (default 1)\n"
           "  --steps N           data sets: optimizer steps to train instead of epochs;\n"
           "                      synthetic and tokens: steps per epoch (default 100)\n"
           "  --log-every N       synthetic and tokens: a progress line every N steps, with\n"
           "                      the loss, its mean over those steps and the step time\n"
           "                      (default 10)\n"
           "  --optim NAME        sgd | adamw (default adamw)\n"
           "  --lr LR             learning rate (default 0.001 for adamw, 0.01 for sgd)\n"
           "  --momentum M        SGD momentum (default 0.9)\n"
           "  --nesterov          SGD with Nesterov momentum\n"
           "  --weight-decay W    weight decay (default 0.01 for adamw, 0 for sgd)\n"
           "  --train-limit N     train on the first N training samples only\n"
           "  --test-limit N      evaluate on the first N test samples only\n"
           "  --init-from FILE    start from the weights in a safetensors file (PyTorch\n"
           "                      state_dict names; every parameter and buffer must be there\n"
           "                      with dtype F32 and its shape)\n"
           "  --save FILE         write the trained weights as safetensors\n"
           "  --state-dir DIR     save training states (weights, optimizer state, step, data\n"
           "                      position) in DIR, created if missing, as\n"
           "                      state-<step>.safetensors: after the last step, and every\n"
           "                      --save-every steps; DIR must not hold another run's states\n"
           "  --save-every N      a training state every N steps (default 0: after the last\n"
           "                      step only)\n"
           "  --keep K            keep the newest K states, removing older ones after each\n"
           "                      save (default 3; 0 keeps all)\n"
           "  --resume DIR        continue from the newest intact state in DIR (a damaged\n"
           "                      newer one is reported and skipped), bitwise as if the run\n"
           "                      had never stopped, saving states on in DIR (or --state-dir);\n"
           "                      options that change the math (model, batch, data, optimizer,\n"
           "                      seed, threads, device) must be those of the state, the\n"
           "                      strategy and budget may change; an empty DIR starts afresh\n"
           "  --json              one JSON object per line: per step and per evaluation\n"
           "  --help              this text\n");
    cli_session_help(1);
    printf("\n");
    cli_model_help();
}

typedef struct {
    int json, tty;
    int64_t epochs_total;
    /* streams */
    int64_t log_every, tokens_per_row; /* tokens_per_row: a language model's context, or 0 */
    double window_loss, window_seconds, epoch_loss;
    int64_t window_n, epoch_n, epoch; /* epoch_n: steps of `epoch` this run made (a resume starts mid-epoch) */
    int started;
    /* training states: the last one saved (for the closing line) */
    char last_state[4096];
    int64_t last_state_step;
} progress;

static void print_json_step(const remat_event *ev, const progress *p) {
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
static int on_state_event(const remat_event *ev, progress *p) {
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
static void on_event(const remat_event *ev, void *user) {
    progress *p = user;
    if (on_state_event(ev, p)) return;
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
        fprintf(stderr, "%sepoch %lld/%lld [%s] %lld/%lld loss %.4f %.0f img/s peak %s%s",
                p->tty ? "\r" : "", (long long)ev->epoch + 1, (long long)p->epochs_total, bar,
                (long long)i, (long long)n, ev->loss, ev->images_per_s,
                cli_fmt_bytes(ev->peak_bytes, mem, sizeof mem), p->tty ? "\033[K" : "\n");
        if (p->tty && i == n) fprintf(stderr, "\n");
        fflush(stderr);
    } else {
        printf("epoch %lld: test loss %.4f, test accuracy %.2f%% (training %.1f s)\n",
               (long long)ev->epoch + 1, ev->loss, 100.0 * ev->accuracy, ev->seconds);
        fflush(stdout);
    }
}

/* Streams: a line every log_every steps and one per epoch. */
static void on_stream_event(const remat_event *ev, void *user) {
    progress *p = user;
    if (on_state_event(ev, p)) return;
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
        else
            snprintf(rate, sizeof rate, "%.1f samples/s", ev->images_per_s);
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

/* The options that define the math, by flag ("--batch", "8"): the
 * NULL-terminated key, value list of remat_train_opts.run. */
#define RUN_MAX 32
typedef struct {
    char val[RUN_MAX][128];
    const char *kv[2 * RUN_MAX + 1];
    int n; /* pairs */
} run_opts;

static void run_add(run_opts *r, const char *flag, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void run_add(run_opts *r, const char *flag, const char *fmt, ...) {
    if (r->n == RUN_MAX) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->val[r->n], sizeof r->val[0], fmt, ap);
    va_end(ap);
    r->kv[2 * r->n] = flag;
    r->kv[2 * r->n + 1] = r->val[r->n];
    r->n++;
    r->kv[2 * r->n] = NULL;
}

/* The shortest decimal form of a float that reads back as the same float. */
static const char *float_str(float v, char *buf, size_t cap) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

/* 0 if the weights can be saved to path at the end of training, so that a
 * long run does not end in a failed save; otherwise prints why (naming the
 * path) and returns 1. The save writes a temporary file beside path and
 * renames it over path, so: path must not be a directory or anything but
 * a regular file (a rename would replace a device such as /dev/null), an
 * existing file must be writable, and a file must be creatable in its
 * folder. That last one is tried for real (a unique file, removed at
 * once): access() answers yes to root everywhere, even where nothing can
 * be created (/proc, a read-only mount). */
static int check_writable(const char *path) {
    char dir[4096], probe[4200];
    struct stat st;
    if (!*path) return cli_fail("cannot save the weights to an empty path");
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return cli_fail("cannot save the weights to %s: it is a directory", path);
        if (!S_ISREG(st.st_mode)) return cli_fail("cannot save the weights to %s: it is not a regular file", path);
        if (access(path, W_OK) != 0)
            return cli_fail("cannot save the weights to %s: the file exists and is not writable", path);
    }
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_fail("cannot save the weights to %s: its folder %s does not exist", path, dir);
    snprintf(probe, sizeof probe, "%s.XXXXXX", path);
    int fd = mkstemp(probe);
    if (fd < 0)
        return cli_fail("cannot save the weights to %s: cannot create a file in its folder %s: %s", path, dir,
                        strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

int cmd_train(int argc, char **argv) {
    const char *data = NULL, *dir = NULL, *optim = "adamw", *save = NULL, *init_from = NULL;
    const char *state_dir = NULL, *resume = NULL;
    int64_t epochs = 1, steps = 0, train_limit = 0, test_limit = 0, log_every = 10, save_every = -1, keep = -1;
    float lr = -1, momentum = 0.9f, wd = -1;
    int json = 0, nesterov = 0;
    cli_model_args ma;
    cli_model_args_init(&ma);
    cli_session_args sa;
    cli_session_args_init(&sa);
    static const struct option opts[] = {
        CLI_MODEL_OPTIONS, CLI_SESSION_OPTIONS, CLI_PLAN_OPTIONS,
        {"data", required_argument, 0, 'd'},        {"data-dir", required_argument, 0, 'D'},
        {"epochs", required_argument, 0, 'e'},      {"steps", required_argument, 0, 's'},
        {"optim", required_argument, 0, 'o'},       {"lr", required_argument, 0, 'l'},
        {"momentum", required_argument, 0, 'M'},    {"nesterov", no_argument, 0, 'N'},
        {"weight-decay", required_argument, 0, 'w'}, {"log-every", required_argument, 0, 'E'},
        {"train-limit", required_argument, 0, 'L'}, {"test-limit", required_argument, 0, 'T'},
        {"save", required_argument, 0, 'W'},        {"init-from", required_argument, 0, 'I'},
        {"state-dir", required_argument, 0, 'S'},   {"save-every", required_argument, 0, 'V'},
        {"keep", required_argument, 0, 'K'},        {"resume", required_argument, 0, 'R'},
        {"json", no_argument, 0, 'j'},              {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    cli_opts co = {.cmd = "train", .ma = &ma, .sa = &sa, .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        int bad = 0, fbad = 0; /* fbad: cli_parse_float's code for a float option */
        switch (c) {
        case 'd': data = optarg; break;
        case 'D': dir = optarg; break;
        case 'e': bad = cli_parse_i64(optarg, &epochs) || epochs < 1; break;
        case 's': bad = cli_parse_i64(optarg, &steps) || steps < 1; break;
        case 'E': bad = cli_parse_i64(optarg, &log_every) || log_every < 1; break;
        case 'o': optim = optarg; break;
        case 'l': bad = (fbad = cli_parse_float(optarg, &lr)) || !(lr > 0); break;
        case 'M': bad = (fbad = cli_parse_float(optarg, &momentum)) || momentum < 0; break;
        case 'N': nesterov = 1; break;
        case 'w': bad = (fbad = cli_parse_float(optarg, &wd)) || wd < 0; break;
        case 'L': bad = cli_parse_i64(optarg, &train_limit) || train_limit < 1; break;
        case 'T': bad = cli_parse_i64(optarg, &test_limit) || test_limit < 1; break;
        case 'W': save = optarg; break;
        case 'I': init_from = optarg; break;
        case 'S': state_dir = optarg; break;
        case 'R': resume = optarg; break;
        case 'V': bad = cli_parse_i64(optarg, &save_every) || save_every < 0; break;
        case 'K': bad = cli_parse_i64(optarg, &keep) || keep < 0 || keep > 1000000; break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        }
        if (bad) return cli_bad_value(&co, optarg, cli_float_why(fbad));
    }
    if (co.rc) return co.rc;
    remat_optim_opts oo;
    if (strcmp(optim, "sgd") == 0) {
        remat_optim_opts_default(&oo, REMAT_OPTIM_SGD);
        oo.momentum = momentum;
        oo.nesterov = nesterov;
    } else if (strcmp(optim, "adamw") == 0) {
        remat_optim_opts_default(&oo, REMAT_OPTIM_ADAMW);
    } else {
        return cli_usage_error("train", "unknown optimizer '%s' (known: sgd, adamw)", optim);
    }
    if (lr > 0) oo.lr = lr;
    if (wd >= 0) oo.weight_decay = wd;

    remat_model_opts mo;
    int u = cli_model_opts(&ma, data, "train", &mo);
    if (u) return u;
    int synthetic = data && strcmp(data, "synthetic") == 0, tokens = data && strncmp(data, "tokens:", 7) == 0;
    int stream = synthetic || tokens;
    if (tokens && !data[7]) return cli_usage_error("train", "--data tokens:FILE needs a file name");
    if (stream && (train_limit || test_limit || dir))
        return cli_usage_error("train", "--train-limit, --test-limit and --data-dir are for data sets, not %s",
                               synthetic ? "synthetic data" : "token files");
    if (stream && !steps) steps = 100;
    if (save && check_writable(save) != 0) return 1;
    if ((save_every >= 0 || keep >= 0) && !state_dir && !resume)
        return cli_usage_error("train", "--save-every and --keep need --state-dir DIR (or --resume DIR)");
    if (resume && !*resume) return cli_usage_error("train", "--resume needs a directory");
    if (state_dir && !*state_dir) return cli_usage_error("train", "--state-dir needs a directory");
    remat_session_opts so;
    remat_cost_model cm;
    const char *cost_used = NULL;
    if ((u = cli_session_opts(&sa, "train", &so, &cm, &cost_used))) return u;
    uint64_t seed = so.seed;

    int rc = 1;
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_dataset *train = NULL, *test = NULL;
    remat_tokens *tok = NULL;
    remat_model m;
    char shape[64];
    if (remat_graph_create(&g) != REMAT_OK) goto fail;
    if (remat_model_build(g, &mo, &m) != REMAT_OK) goto fail;
    if ((u = cli_model_check(&ma, g, &m, "train"))) {
        rc = u;
        goto done;
    }
    int64_t xd[REMAT_MAX_DIMS], ld[REMAT_MAX_DIMS];
    int nxd = remat_node_shape(g, m.input, xd), nld = remat_node_shape(g, m.logits, ld);
    int lm = remat_node_dtype(g, m.input) == REMAT_I32 && nxd == 2;
    int classifier = remat_node_dtype(g, m.input) == REMAT_F32 && m.labels != REMAT_NONE &&
                     remat_node_dtype(g, m.labels) == REMAT_I32;
    cli_shape_str(g, m.input, shape, sizeof shape);
    if (!data) {
        /* Fashion-MNIST for the classifiers of 1x28x28 images (mlp, cnn);
         * the other models say what they need. */
        if (classifier && nxd == 4 && xd[1] == 1 && xd[2] == 28 && xd[3] == 28) {
            data = "fashion-mnist";
        } else {
            cli_usage_error("train", "model '%s' needs --data: %s", mo.name,
                            lm ? "tokens:FILE, or synthetic"
                               : classifier ? "a data set (fashion-mnist, mnist, cifar10) or synthetic" : "synthetic");
            rc = 2;
            goto done;
        }
    }
    if (tokens && !lm) {
        cli_usage_error("train", "tokens:FILE is for language models (input (batch, context) int32 token ids); "
                        "model '%s' takes %s %s", mo.name, remat_node_dtype(g, m.input) == REMAT_I32 ? "int32" : "float",
                        shape);
        rc = 2;
        goto done;
    }
    if (!stream && !classifier) {
        cli_usage_error("train", "model '%s' is not an image classifier: train it on %s", mo.name,
                        lm ? "tokens:FILE or synthetic data" : "synthetic data");
        rc = 2;
        goto done;
    }
    if (tokens) {
        /* every check of the file before anything is allocated or printed */
        if (remat_tokens_open(&tok, data + 7) != REMAT_OK) goto fail;
        if (nld < 1 || remat_tokens_check(tok, ld[nld - 1]) != REMAT_OK) goto fail;
        if (remat_tokens_count(tok) < xd[1] + 1) {
            cli_fail("%s: %lld tokens, fewer than one window of context + 1 = %lld tokens", data + 7,
                     (long long)remat_tokens_count(tok), (long long)(xd[1] + 1));
            goto done;
        }
    }
    if (!stream) {
        if (remat_dataset_load(&train, data, dir, 1) != REMAT_OK) goto fail;
        if (remat_dataset_load(&test, data, dir, 0) != REMAT_OK) goto fail;
        if (train_limit && train_limit < remat_dataset_size(train) &&
            remat_dataset_truncate(train, train_limit) != REMAT_OK)
            goto fail;
        if (test_limit && test_limit < remat_dataset_size(test) && remat_dataset_truncate(test, test_limit) != REMAT_OK)
            goto fail;
    }
    so.optim = &oo; /* its state counts in the first plan and the budget */
    if (remat_session_create(&s, g, m.loss, &so) != REMAT_OK) goto fail;
    if (init_from && remat_safetensors_load(s, init_from, 1) != REMAT_OK) goto fail;
    so.threads = so.threads ? so.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!json) {
        remat_mem_stats pred;
        char b1[32], b2[32], dl[128];
        remat_session_predict(s, &pred);
        cli_device_line(&so, dl, sizeof dl);
        if (tokens)
            printf("model %s, %s: %lld tokens, batch %lld x context %lld, %s lr %g, %s\n", mo.name, data + 7,
                   (long long)remat_tokens_count(tok), (long long)xd[0], (long long)xd[1], optim, (double)oo.lr, dl);
        else if (synthetic)
            printf("model %s, synthetic data: input %s, batch %lld, %s lr %g, %s\n", mo.name, shape,
                   (long long)xd[0], optim, (double)oo.lr, dl);
        else
            printf("model %s, %s: %lld training / %lld test samples, batch %lld, %s lr %g, %s\n", mo.name,
                   data, (long long)remat_dataset_size(train), (long long)remat_dataset_size(test),
                   (long long)xd[0], optim, (double)oo.lr, dl);
        if (init_from) printf("weights from %s\n", init_from);
        remat_plan_summary ps;
        remat_session_plan(s, &ps);
        char b3[32];
        printf("strategy %s: predicted step peak %s (activations %s), holding %s\n", remat_strategy_str(ps.strategy),
               cli_fmt_bytes(pred.peak[REMAT_MEM_TOTAL], b1, sizeof b1),
               cli_fmt_bytes(pred.peak[REMAT_MEM_ACT], b2, sizeof b2), cli_fmt_bytes(ps.held_bytes, b3, sizeof b3));
        fflush(stdout);
    }
    progress p = {.json = json, .tty = isatty(2), .log_every = log_every, .tokens_per_row = lm ? xd[1] : 0};
    remat_train_opts to = {.epochs = epochs, .steps = steps, .batch = xd[0], .seed = seed, .user = &p};
    /* Training states: --resume DIR saves on in DIR unless --state-dir
     * says otherwise (a state file: in its folder). */
    char resume_dir[4096];
    if (resume && !state_dir) {
        struct stat rs;
        snprintf(resume_dir, sizeof resume_dir, "%s", resume);
        if (stat(resume, &rs) == 0 && !S_ISDIR(rs.st_mode)) {
            char *slash = strrchr(resume_dir, '/');
            if (!slash) snprintf(resume_dir, sizeof resume_dir, ".");
            else if (slash == resume_dir) resume_dir[1] = 0;
            else *slash = 0;
        }
        state_dir = resume_dir;
    }
    to.state_dir = state_dir;
    to.resume = resume;
    to.save_every = save_every > 0 ? save_every : 0;
    to.keep = keep >= 0 ? (int)keep : 3;
    /* what defines the math, by flag, so that a resume names the one
     * changed (the library compares the session's own settings too) */
    run_opts ro = {0};
    char fb[32];
    run_add(&ro, "--model", "%s", mo.name);
    run_add(&ro, "--batch", "%lld", (long long)mo.batch);
    run_add(&ro, "--image", "%lldx%lldx%lld", (long long)mo.channels, (long long)mo.height, (long long)mo.width);
    run_add(&ro, "--classes", "%lld", (long long)mo.classes);
    run_add(&ro, "--dropout-scale", "%s", float_str(mo.dropout_scale, fb, sizeof fb));
    run_add(&ro, "--layers", "%lld", (long long)mo.layers);
    run_add(&ro, "--embd", "%lld", (long long)mo.embd);
    run_add(&ro, "--heads", "%lld", (long long)mo.heads);
    run_add(&ro, "--context", "%lld", (long long)mo.context);
    run_add(&ro, "--vocab", "%lld", (long long)mo.vocab);
    run_add(&ro, "--base-channels", "%lld", (long long)mo.base_channels);
    run_add(&ro, "--depth", "%lld", (long long)mo.depth);
    run_add(&ro, "--data", "%s", tokens ? "tokens" : data); /* a token file's identity is its contents (the library's) */
    run_add(&ro, "--train-limit", "%lld", (long long)train_limit);
    run_add(&ro, "--optim", "%s", optim);
    run_add(&ro, "--lr", "%s", float_str(oo.lr, fb, sizeof fb));
    run_add(&ro, "--weight-decay", "%s", float_str(oo.weight_decay, fb, sizeof fb));
    if (oo.kind == REMAT_OPTIM_SGD) {
        run_add(&ro, "--momentum", "%s", float_str(oo.momentum, fb, sizeof fb));
        run_add(&ro, "--nesterov", "%s", oo.nesterov ? "on" : "off");
    }
    run_add(&ro, "--seed", "%llu", (unsigned long long)seed);
    run_add(&ro, "--device", "%s", remat_device_str(so.device));
    if (so.device == REMAT_DEVICE_CPU) run_add(&ro, "--threads", "%d", so.threads);
    else run_add(&ro, "--tf32", "%s", so.tf32 ? "on" : "off");
    if (state_dir || resume) to.run = ro.kv;
    if (stream) {
        p.epochs_total = epochs;
        to.on_event = on_stream_event;
        if (tokens) {
            if (remat_train_tokens(s, &m, tok, &to) != REMAT_OK) goto fail;
        } else {
            cli_synth syn;
            if (cli_synth_init(&syn, g, &m, &mo, seed)) goto done;
            if (remat_train_stream(s, &m, cli_synth_next, &syn, &to) != REMAT_OK) goto fail;
        }
    } else {
        to.on_event = on_event;
        int64_t per_epoch = remat_dataset_size(train) / xd[0];
        p.epochs_total = steps ? (per_epoch ? (steps + per_epoch - 1) / per_epoch : 1) : epochs;
        if (remat_train(s, &m, train, test, &to) != REMAT_OK) goto fail;
    }
    /* the loops stop at a non-finite weight; this says so for any other way one could get here */
    if (save && remat_session_check_finite(s) != REMAT_OK) {
        cli_fail("not saving the weights to %s: %s", save, remat_last_error());
        goto done;
    }
    if (save && remat_safetensors_save(s, save) != REMAT_OK) goto fail;
    if (save && !json) printf("saved weights to %s\n", save);
    if (p.last_state[0] && !json)
        printf("training state of step %lld in %s\n", (long long)p.last_state_step, p.last_state);
    rc = 0;
    goto done;
fail:
    cli_fail("%s", remat_last_error());
done:
    remat_session_destroy(s);
    remat_graph_destroy(g);
    remat_dataset_destroy(train);
    remat_dataset_destroy(test);
    remat_tokens_destroy(tok);
    return rc;
}
