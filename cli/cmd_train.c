/* cmd_train.c: `remat train`: build a model, load a data set, train with a
 * progress bar (or one JSON object per line), then report test accuracy. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void) {
    printf("usage: remat train [options]\n"
           "\n"
           "  --model NAME        mlp | cnn (default cnn)\n"
           "  --data NAME         fashion-mnist | mnist | cifar10 (default fashion-mnist)\n"
           "  --data-dir DIR      where the data files are (default for fashion-mnist:\n"
           "                      /usr/share/datasets/fashion-mnist, from Debian's\n"
           "                      dataset-fashion-mnist package)\n"
           "  --epochs N          epochs to train (default 1)\n"
           "  --steps N           optimizer steps to train instead of epochs\n"
           "  --batch B           batch size (default 64)\n"
           "  --optim NAME        sgd | adamw (default adamw)\n"
           "  --lr LR             learning rate (default 0.001 for adamw, 0.01 for sgd)\n"
           "  --momentum M        SGD momentum (default 0.9)\n"
           "  --nesterov          SGD with Nesterov momentum\n"
           "  --weight-decay W    weight decay (default 0.01 for adamw, 0 for sgd)\n"
           "  --dropout-scale S   multiply every dropout rate by S (0 turns dropout off)\n"
           "  --strategy S        auto | all | manual | sqrt | optimal: which activations to\n"
           "                      keep (default auto: optimal with a budget, all without)\n"
           "  --budget SIZE       fail before training unless a step fits, e.g. 512MiB, 2GiB\n"
           "  --checkpoint-blocks N  for --strategy manual: checkpoint only the first N\n"
           "                      blocks of the model (default: every block)\n"
           "  --seed S            seed for initialization, shuffling and dropout (default 42)\n"
           "  --threads T         kernel threads (default: one per core)\n"
           "  --train-limit N     train on the first N training samples only\n"
           "  --test-limit N      evaluate on the first N test samples only\n"
           "  --save FILE         write the trained weights as safetensors\n"
           "  --json              one JSON object per line: per step and per evaluation\n"
           "  --help              this text\n");
}

typedef struct {
    int json, tty;
    int64_t epochs_total;
    char line[256];
} progress;

static void print_json_step(const remat_event *ev) {
    cJSON *o = cJSON_CreateObject();
    char buf[64];
    cJSON_AddStringToObject(o, "event", "step");
    cJSON_AddNumberToObject(o, "epoch", (double)ev->epoch + 1);
    cJSON_AddNumberToObject(o, "step", (double)ev->step);
    snprintf(buf, sizeof buf, "%.9g", ev->loss);
    cJSON_AddRawToObject(o, "loss", buf);
    snprintf(buf, sizeof buf, "%.1f", ev->images_per_s);
    cJSON_AddRawToObject(o, "images_per_s", buf);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)ev->peak_bytes);
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
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
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
}

static void on_event(const remat_event *ev, void *user) {
    progress *p = user;
    if (p->json) {
        if (ev->kind == REMAT_EVENT_STEP) print_json_step(ev);
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

int cmd_train(int argc, char **argv) {
    const char *model = "cnn", *data = "fashion-mnist", *dir = NULL, *optim = "adamw", *save = NULL;
    const char *strategy = "auto";
    size_t budget = 0;
    int64_t ckpt_blocks = -1;
    int64_t epochs = 1, steps = 0, batch = 64, threads = 0, train_limit = 0, test_limit = 0;
    int64_t seed = 42;
    float lr = -1, momentum = 0.9f, wd = -1, dscale = 1.0f;
    int json = 0, nesterov = 0;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},       {"data", required_argument, 0, 'd'},
        {"data-dir", required_argument, 0, 'D'},    {"epochs", required_argument, 0, 'e'},
        {"steps", required_argument, 0, 's'},       {"batch", required_argument, 0, 'b'},
        {"optim", required_argument, 0, 'o'},       {"lr", required_argument, 0, 'l'},
        {"momentum", required_argument, 0, 'M'},    {"nesterov", no_argument, 0, 'N'},
        {"weight-decay", required_argument, 0, 'w'}, {"dropout-scale", required_argument, 0, 'p'},
        {"seed", required_argument, 0, 'S'},        {"threads", required_argument, 0, 't'},
        {"train-limit", required_argument, 0, 'L'}, {"test-limit", required_argument, 0, 'T'},
        {"save", required_argument, 0, 'W'},        {"json", no_argument, 0, 'j'},
        {"strategy", required_argument, 0, 'y'},    {"budget", required_argument, 0, 'B'},
        {"checkpoint-blocks", required_argument, 0, 'k'},
        {"help", no_argument, 0, 'h'},              {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
        int bad = 0;
        switch (c) {
        case 'm': model = optarg; break;
        case 'd': data = optarg; break;
        case 'D': dir = optarg; break;
        case 'e': bad = cli_parse_i64(optarg, &epochs) || epochs < 1; break;
        case 's': bad = cli_parse_i64(optarg, &steps) || steps < 1; break;
        case 'b': bad = cli_parse_i64(optarg, &batch) || batch < 1; break;
        case 'o': optim = optarg; break;
        case 'l': bad = cli_parse_float(optarg, &lr) || !(lr > 0); break;
        case 'M': bad = cli_parse_float(optarg, &momentum) || momentum < 0; break;
        case 'N': nesterov = 1; break;
        case 'w': bad = cli_parse_float(optarg, &wd) || wd < 0; break;
        case 'p': bad = cli_parse_float(optarg, &dscale) || dscale < 0; break;
        case 'S': bad = cli_parse_i64(optarg, &seed) || seed < 0; break;
        case 't': bad = cli_parse_i64(optarg, &threads) || threads < 0 || threads > 1024; break;
        case 'L': bad = cli_parse_i64(optarg, &train_limit) || train_limit < 1; break;
        case 'T': bad = cli_parse_i64(optarg, &test_limit) || test_limit < 1; break;
        case 'W': save = optarg; break;
        case 'y': strategy = optarg; break;
        case 'k': bad = cli_parse_i64(optarg, &ckpt_blocks) || ckpt_blocks < 0; break;
        case 'B': bad = cli_parse_size(optarg, &budget) || budget == 0; break;
        case 'j': json = 1; break;
        case 'h': help(); return 0;
        case ':': return cli_usage_error("train", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("train", "unknown option '%s'", argv[optind - 1]);
        }
        if (bad) return cli_usage_error("train", "bad value '%s' for --%s", optarg, opts[idx].name);
    }
    if (optind < argc) return cli_usage_error("train", "unexpected argument '%s'", argv[optind]);
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
    remat_model_opts_default(&mo);
    mo.name = model;
    mo.batch = batch;
    mo.dropout_scale = dscale;
    mo.checkpoint_blocks = (int)ckpt_blocks;
    if (cli_data_shape(data, &mo.channels, &mo.height, &mo.width))
        return cli_usage_error("train", "unknown data set '%s' (known: fashion-mnist, mnist, cifar10)", data);

    int rc = 1;
    remat_graph *g = NULL;
    remat_session *s = NULL;
    remat_dataset *train = NULL, *test = NULL;
    remat_model m;
    if (remat_graph_create(&g) != REMAT_OK) goto fail;
    if (remat_model_build(g, &mo, &m) != REMAT_OK) goto fail;
    if (remat_dataset_load(&train, data, dir, 1) != REMAT_OK) goto fail;
    if (remat_dataset_load(&test, data, dir, 0) != REMAT_OK) goto fail;
    if (train_limit && train_limit < remat_dataset_size(train) && remat_dataset_truncate(train, train_limit) != REMAT_OK)
        goto fail;
    if (test_limit && test_limit < remat_dataset_size(test) && remat_dataset_truncate(test, test_limit) != REMAT_OK)
        goto fail;
    remat_session_opts so;
    remat_session_opts_default(&so);
    so.threads = (int)threads;
    so.seed = (uint64_t)seed;
    so.budget = budget;
    remat_cost_model cm;
    const char *cost_used = NULL;
    so.cost_model = cli_cost_model(&cm, NULL, &cost_used);
    if (remat_strategy_parse(strategy, &so.strategy) != REMAT_OK) goto fail;
    if (remat_session_create(&s, g, m.loss, &so) != REMAT_OK) goto fail;
    if (remat_session_set_optimizer(s, &oo) != REMAT_OK) goto fail;
    if (!json) {
        remat_mem_stats pred;
        char b1[32], b2[32];
        remat_session_predict(s, &pred);
        printf("model %s, %s: %lld training / %lld test samples, batch %lld, %s lr %g, %d threads\n",
               model, data, (long long)remat_dataset_size(train), (long long)remat_dataset_size(test),
               (long long)batch, optim, (double)oo.lr, so.threads ? so.threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
        remat_plan_summary ps;
        remat_session_plan(s, &ps);
        printf("strategy %s: predicted step peak %s (activations %s)\n", remat_strategy_str(ps.strategy),
               cli_fmt_bytes(pred.peak[REMAT_MEM_TOTAL], b1, sizeof b1),
               cli_fmt_bytes(pred.peak[REMAT_MEM_ACT], b2, sizeof b2));
        fflush(stdout);
    }
    progress p = {.json = json, .tty = isatty(2)};
    remat_train_opts to = {.epochs = epochs, .steps = steps, .batch = batch, .seed = (uint64_t)seed,
                           .on_event = on_event, .user = &p};
    int64_t per_epoch = remat_dataset_size(train) / batch;
    p.epochs_total = steps ? (per_epoch ? (steps + per_epoch - 1) / per_epoch : 1) : epochs;
    if (remat_train(s, &m, train, test, &to) != REMAT_OK) goto fail;
    if (save && remat_safetensors_save(s, save) != REMAT_OK) goto fail;
    if (save && !json) printf("saved weights to %s\n", save);
    rc = 0;
    goto done;
fail:
    cli_fail("%s", remat_last_error());
done:
    remat_session_destroy(s);
    remat_graph_destroy(g);
    remat_dataset_destroy(train);
    remat_dataset_destroy(test);
    return rc;
}
