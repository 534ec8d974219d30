/* cmd_train.c: `remat train`: build a model, then either train it on a
 * data set with a progress bar (or one JSON object per line) and report
 * test accuracy after each epoch, or train it from a stream of batches
 * (synthetic data, or random windows of a token file for a language model)
 * in evaluation-free epochs of --steps steps, with a progress line every
 * --log-every steps. Weights can start from a safetensors file and be
 * saved to one. With --state-dir (and --save-every) the run saves training
 * states as it goes, and --resume continues one bitwise as if it had never
 * stopped (remat.h, "training state"); the options that define the math
 * are recorded in each state under their flags' names and compared.
 *
 * Under mpirun every rank runs it (cli_dist): --batch is the global batch,
 * split into micro-batches (--micro-batch, default batch / ranks) that the
 * ranks share; rank 0 prints and writes the files; the ranks agree after
 * the setup (options, model, data), when the session is made and after
 * the files are written, so that a rank failing there stops them all,
 * named. */
#include "train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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
           "  --save FILE         write the trained weights as safetensors; FILE is locked\n"
           "                      until it is written (.FILE.lock beside it): a second run\n"
           "                      given it meanwhile is refused, naming the first's pid\n"
           "                      and host\n"
           "  --state-dir DIR     save training states (weights, optimizer state, step, data\n"
           "                      position) in DIR, created if missing, as\n"
           "                      state-<step>.safetensors: after the last step, and every\n"
           "                      --save-every steps; DIR must not hold another run's states,\n"
           "                      and is locked for the run (DIR/remat.lock): a second run on\n"
           "                      it is refused, naming the first's pid and host\n"
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
           "  --help              this text\n"
           "\n"
           "SIGTERM, SIGINT (Ctrl-C), SIGHUP or SIGUSR1: the step in progress finishes, a\n"
           "training state of it is saved (with a state directory; otherwise the message\n"
           "says what is lost), and the exit status is 128 + the signal (143, 130, 129,\n"
           "138); a second signal (not a SIGUSR1 within a second of the first) ends the\n"
           "run at once. Under mpirun every rank stops after the same step (send mpirun\n"
           "SIGUSR1: it forwards it, where it kills the ranks a second after forwarding\n"
           "SIGTERM), and the flags that define the math or the run's course must be the\n"
           "same on every rank (docs/training-state.md).\n");
    cli_session_help(1);
    cli_dist_help("train");
    printf("\n");
    cli_model_help();
}

/* The options that define the math, by flag ("--batch", "8"): the
 * NULL-terminated key, value list of remat_train_opts.run. */
#define RUN_MAX 48
typedef struct {
    char val[RUN_MAX][128];
    const char *kv[2 * RUN_MAX + 1];
    int n; /* pairs */
} run_opts;

/* A value used as it is (borrowed: a path, whole however long). */
static void run_ref(run_opts *r, const char *flag, const char *value) {
    if (r->n == RUN_MAX) return;
    r->kv[2 * r->n] = flag;
    r->kv[2 * r->n + 1] = value ? value : "(not given)";
    r->n++;
    r->kv[2 * r->n] = NULL;
}

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
    struct stat st;
    if (!*path) return cli_fail("cannot save the weights to an empty path");
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return cli_fail("cannot save the weights to %s: it is a directory", path);
        if (!S_ISREG(st.st_mode)) return cli_fail("cannot save the weights to %s: it is not a regular file", path);
        if (access(path, W_OK) != 0)
            return cli_fail("cannot save the weights to %s: the file exists and is not writable", path);
    }
    /* the folder and a probe beside the file, whatever the path's length */
    size_t len = strlen(path);
    char *dir = malloc(len + 2), *probe = malloc(len + 8);
    if (!dir || !probe) {
        free(dir), free(probe);
        return cli_fail("out of memory");
    }
    memcpy(dir, path, len + 1);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int rc = 0;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = cli_fail("cannot save the weights to %s: its folder %s does not exist", path, dir);
    } else {
        snprintf(probe, len + 8, "%s.XXXXXX", path);
        int fd = mkstemp(probe);
        if (fd < 0)
            rc = cli_fail("cannot save the weights to %s: cannot create a file in its folder %s: %s", path, dir,
                          strerror(errno));
        else close(fd), unlink(probe);
    }
    free(dir), free(probe);
    return rc;
}

/* Everything a run is made of: the options, then what the setup builds. */
typedef struct {
    const char *data, *dir, *optim, *save, *init_from, *state_dir, *resume;
    int64_t epochs, steps, train_limit, test_limit, log_every, save_every, keep;
    float lr, momentum, wd;
    int json, nesterov, help;
    cli_model_args ma;
    cli_session_args sa;
    remat_optim_opts oo;
    remat_model_opts mo;
    remat_session_opts so;
    remat_cost_model *cm; /* cli_cost_model_new's */
    const char *cost_used;
    int64_t batch, micro; /* the global batch of a step and its micro-batch (the graph's batch) */
    int synthetic, tokens, stream, lm, classifier;
    remat_graph *g;
    remat_model m;
    remat_dataset *train, *test;
    remat_tokens *tok;
    remat_lock *save_lock;                          /* rank 0: --save's, from the start until it is written */
    int64_t xd[REMAT_MAX_DIMS], ld[REMAT_MAX_DIMS]; /* the graph's input and logits */
    char shape[64];
} job;

static void job_free(job *j) {
    remat_graph_destroy(j->g);
    remat_dataset_destroy(j->train);
    remat_dataset_destroy(j->test);
    remat_tokens_destroy(j->tok);
    remat_lock_destroy(j->save_lock);
}

/* What defines the math, by flag, so that a resume names the one changed
 * (the library compares the session's own settings too); the number of
 * ranks is not among them: any gives the same bits. threads: resolved
 * (0 is the cores of this host). */
static void math_opts(const job *j, int threads, run_opts *ro) {
    const remat_session_opts *so = &j->so;
    char fb[32];
    const remat_model_opts *mo = &j->mo;
    run_add(ro, "--model", "%s", mo->name);
    run_add(ro, "--batch", "%lld", (long long)j->batch);
    run_add(ro, "--micro-batch", "%lld", (long long)j->micro);
    run_add(ro, "--image", "%lldx%lldx%lld", (long long)mo->channels, (long long)mo->height, (long long)mo->width);
    run_add(ro, "--classes", "%lld", (long long)mo->classes);
    run_add(ro, "--dropout-scale", "%s", remat_float_str(mo->dropout_scale, fb, sizeof fb));
    run_add(ro, "--layers", "%lld", (long long)mo->layers);
    run_add(ro, "--embd", "%lld", (long long)mo->embd);
    run_add(ro, "--heads", "%lld", (long long)mo->heads);
    run_add(ro, "--context", "%lld", (long long)mo->context);
    run_add(ro, "--vocab", "%lld", (long long)mo->vocab);
    run_add(ro, "--base-channels", "%lld", (long long)mo->base_channels);
    run_add(ro, "--depth", "%lld", (long long)mo->depth);
    run_add(ro, "--data", "%s",
            j->tokens ? "tokens" : j->data); /* a token file's identity is its contents (the library's) */
    run_add(ro, "--train-limit", "%lld", (long long)j->train_limit);
    run_add(ro, "--optim", "%s", j->optim);
    run_add(ro, "--lr", "%s", remat_float_str(j->oo.lr, fb, sizeof fb));
    run_add(ro, "--weight-decay", "%s", remat_float_str(j->oo.weight_decay, fb, sizeof fb));
    if (j->oo.kind == REMAT_OPTIM_SGD) {
        run_add(ro, "--momentum", "%s", remat_float_str(j->oo.momentum, fb, sizeof fb));
        run_add(ro, "--nesterov", "%s", j->oo.nesterov ? "on" : "off");
    }
    run_add(ro, "--seed", "%llu", (unsigned long long)so->seed);
    run_add(ro, "--device", "%s", remat_device_str(so->device));
    if (so->device == REMAT_DEVICE_CPU) run_add(ro, "--threads", "%d", threads);
    else run_add(ro, "--tf32", "%s", so->tf32 ? "on" : "off");
}

/* Several ranks: every flag that defines the math or the run's course is
 * every rank's the same (remat_comm_same), before the session is made, so
 * that a rank given another --seed fails at once instead of training
 * weights that match no run, and one given other --steps or --save-every
 * instead of waiting for ever for a step or a save that the others never
 * reach. Rank 0 prints why; 0 or the exit status. */
static int same_flags(job *j, const cli_dist *d) {
    if (d->ranks == 1) return 0;
    run_opts ro = {0};
    math_opts(j, j->so.threads ? j->so.threads : (int)sysconf(_SC_NPROCESSORS_ONLN), &ro);
    run_add(&ro, "--steps", "%lld", (long long)j->steps);
    run_add(&ro, "--epochs", "%lld", (long long)j->epochs);
    run_add(&ro, "--test-limit", "%lld", (long long)j->test_limit);
    run_ref(&ro, "--data (as given)", j->data);
    run_ref(&ro, "--data-dir", j->dir);
    run_ref(&ro, "--init-from", j->init_from);
    run_ref(&ro, "--state-dir", j->state_dir);
    run_ref(&ro, "--resume", j->resume);
    if (j->save_every >= 0) run_add(&ro, "--save-every", "%lld", (long long)j->save_every);
    else run_ref(&ro, "--save-every", "(not given)");
    if (j->keep >= 0) run_add(&ro, "--keep", "%lld", (long long)j->keep);
    else run_ref(&ro, "--keep", "(not given)");
    run_ref(&ro, "--save", j->save);
    if (remat_comm_same(d->comm, ro.kv,
                        "every rank must be given the same options that define the math and the "
                        "course of the run") == REMAT_OK)
        return 0;
    if (d->rank == 0) fprintf(stderr, "remat: %s\n", remat_last_error());
    return 1;
}

/* Options, the model and the data, on this rank: 0, or the exit status
 * after printing why. */
/* Reads the flags into j: 0, or the exit status of a usage error. */
static int parse_args(job *j, int argc, char **argv) {
    j->optim = "adamw";
    j->epochs = 1, j->log_every = 10, j->save_every = -1, j->keep = -1;
    j->lr = -1, j->momentum = 0.9f, j->wd = -1;
    cli_model_args_init(&j->ma);
    cli_session_args_init(&j->sa);
    static const struct option opts[] = {CLI_MODEL_OPTIONS,
                                         CLI_SESSION_OPTIONS,
                                         CLI_PLAN_OPTIONS,
                                         CLI_DIST_OPTIONS,
                                         {"data", required_argument, 0, 'd'},
                                         {"data-dir", required_argument, 0, 'D'},
                                         {"epochs", required_argument, 0, 'e'},
                                         {"steps", required_argument, 0, 's'},
                                         {"optim", required_argument, 0, 'o'},
                                         {"lr", required_argument, 0, 'l'},
                                         {"momentum", required_argument, 0, 'M'},
                                         {"nesterov", no_argument, 0, 'N'},
                                         {"weight-decay", required_argument, 0, 'w'},
                                         {"log-every", required_argument, 0, 'E'},
                                         {"train-limit", required_argument, 0, 'L'},
                                         {"test-limit", required_argument, 0, 'T'},
                                         {"save", required_argument, 0, 'W'},
                                         {"init-from", required_argument, 0, 'I'},
                                         {"state-dir", required_argument, 0, 'S'},
                                         {"save-every", required_argument, 0, 'V'},
                                         {"keep", required_argument, 0, 'K'},
                                         {"resume", required_argument, 0, 'R'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    cli_opts co = {.cmd = "train", .ma = &j->ma, .sa = &j->sa, .opts = opts, .shortopts = ":h"};
    for (int c; (c = cli_next_opt(&co, argc, argv)) > 0;) {
        int bad = 0, fbad = 0; /* fbad: cli_parse_float's code for a float option */
        switch (c) {
        case 'd': j->data = optarg; break;
        case 'D': j->dir = optarg; break;
        case 'e': bad = cli_parse_i64(optarg, &j->epochs) || j->epochs < 1; break;
        case 's': bad = cli_parse_i64(optarg, &j->steps) || j->steps < 1; break;
        case 'E': bad = cli_parse_i64(optarg, &j->log_every) || j->log_every < 1; break;
        case 'o': j->optim = optarg; break;
        case 'l': bad = (fbad = cli_parse_float(optarg, &j->lr)) || !(j->lr > 0); break;
        case 'M': bad = (fbad = cli_parse_float(optarg, &j->momentum)) || j->momentum < 0; break;
        case 'N': j->nesterov = 1; break;
        case 'w': bad = (fbad = cli_parse_float(optarg, &j->wd)) || j->wd < 0; break;
        case 'L': bad = cli_parse_i64(optarg, &j->train_limit) || j->train_limit < 1; break;
        case 'T': bad = cli_parse_i64(optarg, &j->test_limit) || j->test_limit < 1; break;
        case 'W': j->save = optarg; break;
        case 'I': j->init_from = optarg; break;
        case 'S': j->state_dir = optarg; break;
        case 'R': j->resume = optarg; break;
        case 'V': bad = cli_parse_i64(optarg, &j->save_every) || j->save_every < 0; break;
        case 'K': bad = cli_parse_i64(optarg, &j->keep) || j->keep < 0 || j->keep > 1000000; break;
        case 'j': j->json = 1; break;
        case 'h': j->help = 1; return 0;
        }
        if (bad) return cli_bad_value(&co, optarg, cli_float_why(fbad));
    }
    return co.rc;
}

/* The optimizer the flags name (cli_optim_named, as plan and info), with
 * their rate, momentum and decay. */
static int build_optim(job *j) {
    remat_optim_opts *oo = &j->oo;
    int has = 0;
    if (strcmp(j->optim, "sgd") != 0 && strcmp(j->optim, "adamw") != 0) /* training needs one */
        return cli_usage_error("train", "unknown optimizer '%s' (known: sgd, adamw)", j->optim);
    int rc = cli_optim_named("train", j->optim, oo, &has);
    if (rc != 0) return rc;
    if (oo->kind == REMAT_OPTIM_SGD) oo->momentum = j->momentum, oo->nesterov = j->nesterov;
    if (j->lr > 0) oo->lr = j->lr;
    if (j->wd >= 0) oo->weight_decay = j->wd;
    return 0;
}

/* The model's options, the micro-batch, the data's kind and the files the
 * run writes (--save locked on rank 0): 0, or the exit status. */
static int check_run(job *j, const cli_dist *d) {
    const char *data = j->data;
    int u = cli_model_opts(&j->ma, data, "train", &j->mo);
    if (u) return u;
    /* --batch is the step's global batch; the graph is one micro-batch */
    j->batch = j->mo.batch;
    if ((u = cli_dist_micro_batch(d, &j->sa, j->batch, "train", &j->micro))) return u;
    j->mo.batch = j->micro;
    if (j->ma.batch > 0) j->ma.batch = j->micro; /* what cli_model_check finds in the graph */
    j->synthetic = data && strcmp(data, "synthetic") == 0, j->tokens = data && strncmp(data, "tokens:", 7) == 0;
    j->stream = j->synthetic || j->tokens;
    if (j->tokens && !data[7]) return cli_usage_error("train", "--data tokens:FILE needs a file name");
    if (j->stream && (j->train_limit || j->test_limit || j->dir))
        return cli_usage_error("train", "--train-limit, --test-limit and --data-dir are for data sets, not %s",
                               j->synthetic ? "synthetic data" : "token files");
    if (j->stream && !j->steps) j->steps = 100;
    if (j->save && d->rank == 0) { /* rank 0 writes it */
        if (check_writable(j->save) != 0) return 1;
        /* locked for the run, so that a second run given the same --save
         * is refused now, not overwritten (or overwriting) at its end */
        if (remat_lock_create(&j->save_lock, j->save) != REMAT_OK) return cli_fail("%s", remat_last_error());
        if (remat_lock_note(j->save_lock)) fprintf(stderr, "remat: note: %s\n", remat_lock_note(j->save_lock));
    }
    if ((j->save_every >= 0 || j->keep >= 0) && !j->state_dir && !j->resume)
        return cli_usage_error("train", "--save-every and --keep need --state-dir DIR (or --resume DIR)");
    if (j->resume && !*j->resume) return cli_usage_error("train", "--resume needs a directory");
    if (j->state_dir && !*j->state_dir) return cli_usage_error("train", "--state-dir needs a directory");
    return cli_session_opts(&j->sa, "train", &j->so, &j->cm, &j->cost_used);
}

/* What the model takes against the data named (Fashion-MNIST by default
 * for the classifiers of 1x28x28 images): 0, or the exit status. */
static int check_data(job *j) {
    const remat_graph *g = j->g;
    const remat_model *m = &j->m;
    int nxd = remat_node_shape(g, m->input, j->xd);
    j->lm = remat_node_dtype(g, m->input) == REMAT_I32 && nxd == 2;
    j->classifier = remat_node_dtype(g, m->input) == REMAT_F32 && m->labels != REMAT_NONE &&
                    remat_node_dtype(g, m->labels) == REMAT_I32;
    cli_shape_str(g, m->input, j->shape, sizeof j->shape);
    if (!j->data) {
        if (j->classifier && nxd == 4 && j->xd[1] == 1 && j->xd[2] == 28 && j->xd[3] == 28) j->data = "fashion-mnist";
        else
            return cli_usage_error("train", "model '%s' needs --data: %s", j->mo.name,
                                   j->lm           ? "tokens:FILE, or synthetic"
                                   : j->classifier ? "a data set (fashion-mnist, mnist, cifar10) or synthetic"
                                                   : "synthetic");
    }
    if (j->tokens && !j->lm)
        return cli_usage_error("train",
                               "tokens:FILE is for language models (input (batch, context) int32 token ids); "
                               "model '%s' takes %s %s",
                               j->mo.name, remat_node_dtype(g, m->input) == REMAT_I32 ? "int32" : "float", j->shape);
    if (!j->stream && !j->classifier)
        return cli_usage_error("train", "model '%s' is not an image classifier: train it on %s", j->mo.name,
                               j->lm ? "tokens:FILE or synthetic data" : "synthetic data");
    return 0;
}

/* Opens the token file or loads the data set, every check before anything
 * is allocated for training: 0, or the exit status. */
static int load_data(job *j) {
    const char *data = j->data;
    if (j->tokens) {
        int nld = remat_node_shape(j->g, j->m.logits, j->ld);
        if (remat_tokens_open(&j->tok, data + 7) != REMAT_OK) return cli_fail("%s", remat_last_error());
        if (nld < 1 || remat_tokens_check(j->tok, j->ld[nld - 1]) != REMAT_OK)
            return cli_fail("%s", remat_last_error());
        if (remat_tokens_count(j->tok) < j->xd[1] + 1)
            return cli_fail("%s: %lld tokens, fewer than one window of context + 1 = %lld tokens", data + 7,
                            (long long)remat_tokens_count(j->tok), (long long)(j->xd[1] + 1));
    }
    if (!j->stream) {
        /* every rank loads the data set (its files are small and
         * compressed); it reads only its own rows of each batch */
        if (remat_dataset_load(&j->train, data, j->dir, 1) != REMAT_OK) return cli_fail("%s", remat_last_error());
        if (remat_dataset_load(&j->test, data, j->dir, 0) != REMAT_OK) return cli_fail("%s", remat_last_error());
        if (j->train_limit && j->train_limit < remat_dataset_size(j->train) &&
            remat_dataset_truncate(j->train, j->train_limit) != REMAT_OK)
            return cli_fail("%s", remat_last_error());
        if (j->test_limit && j->test_limit < remat_dataset_size(j->test) &&
            remat_dataset_truncate(j->test, j->test_limit) != REMAT_OK)
            return cli_fail("%s", remat_last_error());
    }
    return 0;
}

static int setup(job *j, const cli_dist *d, int argc, char **argv) {
    int u;
    if ((u = parse_args(j, argc, argv)) != 0 || j->help || (u = build_optim(j)) != 0 || (u = check_run(j, d)) != 0)
        return u;
    if (remat_graph_create(&j->g) != REMAT_OK || remat_model_build(j->g, &j->mo, &j->m) != REMAT_OK)
        return cli_fail("%s", remat_last_error());
    if ((u = cli_model_check(&j->ma, j->g, &j->m, "train")) != 0 || (u = check_data(j)) != 0) return u;
    return load_data(j);
}

/* Rank 0's header: the ranks, the model, the data, the plan. */
static void print_header(const job *j, const cli_dist *d, remat_session *s) {
    remat_mem_stats pred;
    char b1[32], b2[32], b3[32], dl[128], split[160] = "";
    remat_session_predict(s, &pred);
    cli_device_line(&j->so, dl, sizeof dl);
    int64_t k = j->batch / j->micro;
    if (d->ranks > 1) {
        char rl[160];
        printf("%s\n", cli_dist_line(d, j->so.threads, rl, sizeof rl));
        snprintf(split, sizeof split, " (%lld micro-batches of %lld, %lld per rank)", (long long)k, (long long)j->micro,
                 (long long)(k / d->ranks));
    } else if (k > 1) {
        snprintf(split, sizeof split, " (%lld micro-batches of %lld, gradients accumulated)", (long long)k,
                 (long long)j->micro);
    }
    if (j->tokens)
        printf("model %s, %s: %lld tokens, batch %lld%s x context %lld, %s lr %g, %s\n", j->mo.name, j->data + 7,
               (long long)remat_tokens_count(j->tok), (long long)j->batch, split, (long long)j->xd[1], j->optim,
               (double)j->oo.lr, dl);
    else if (j->synthetic)
        printf("model %s, synthetic data: input %s, batch %lld%s, %s lr %g, %s\n", j->mo.name, j->shape,
               (long long)j->batch, split, j->optim, (double)j->oo.lr, dl);
    else
        printf("model %s, %s: %lld training / %lld test samples, batch %lld%s, %s lr %g, %s\n", j->mo.name, j->data,
               (long long)remat_dataset_size(j->train), (long long)remat_dataset_size(j->test), (long long)j->batch,
               split, j->optim, (double)j->oo.lr, dl);
    if (j->init_from) printf("weights from %s\n", j->init_from);
    remat_plan_summary ps;
    remat_session_plan(s, &ps);
    printf("strategy %s: predicted step peak %s (activations %s), holding %s%s\n", remat_strategy_str(ps.strategy),
           cli_fmt_bytes(pred.peak[REMAT_MEM_TOTAL], b1, sizeof b1),
           cli_fmt_bytes(pred.peak[REMAT_MEM_ACT], b2, sizeof b2), cli_fmt_bytes(ps.held_bytes, b3, sizeof b3),
           d->ranks > 1 ? " per rank" : "");
    if (ps.offloaded_values)
        printf("offload: %lld values copied to %s of host memory and back each step\n", (long long)ps.offloaded_values,
               cli_fmt_bytes(ps.host_bytes, b1, sizeof b1));
    fflush(stdout);
}

/* A graceful stop (docs/training-state.md): the first SIGTERM, SIGINT,
 * SIGHUP or SIGUSR1 only sets stop_signal (and says so on stderr, with write(2), the
 * one output a handler may use); the training loop ends after the step in
 * progress, saves a state when there is a state directory, and the
 * command exits with 128 + the signal's number. A second signal restores
 * the default action and raises itself again: the process ends at once,
 * as if no handler had been installed; but a second SIGUSR1 within
 * REPEAT_NS of the first is the same request (the signal to send mpirun:
 * in about 1 run in 10 of test_guard_stop_mpi a rank died by the SIGUSR1
 * mpirun forwarded, its handler installed, which a second delivery to it
 * most likely explains; the stop's message was lost with it).
 * clock_gettime is async-signal-safe. */
static volatile sig_atomic_t stop_signal;
static struct timespec stop_at; /* when stop_signal was set */
#define REPEAT_NS 1000000000LL

static long long ns_since(const struct timespec *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t->tv_sec) * 1000000000LL + (now.tv_nsec - t->tv_nsec);
}

static const char *signal_name(int sig) {
    return sig == SIGINT    ? "SIGINT"
           : sig == SIGHUP  ? "SIGHUP"
           : sig == SIGTERM ? "SIGTERM"
           : sig == SIGUSR1 ? "SIGUSR1"
                            : "a signal";
}

static void on_stop_signal(int sig) {
    if (stop_signal) {
        if (sig == SIGUSR1 && stop_signal == SIGUSR1 && ns_since(&stop_at) < REPEAT_NS) return;
        signal(sig, SIG_DFL);
        raise(sig); /* delivered when this handler returns */
        return;
    }
    clock_gettime(CLOCK_MONOTONIC, &stop_at);
    stop_signal = sig;
    static const char msg[] = ": stopping after the step in progress (a state is saved when there is a state "
                              "directory); send it again to stop at once\n";
    const char *name = signal_name(sig);
    ssize_t w = write(2, "\nremat: ", 8);
    w = write(2, name, strlen(name));
    w = write(2, msg, sizeof msg - 1);
    (void)w;
}

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

/* The session, the training and the files; 0 or the exit status after
 * printing why. */
/* Training states: --resume DIR saves on in DIR unless --state-dir says
 * otherwise (a state file: in its folder); buf holds the folder. */
static const char *state_dir_of(const job *j, char *buf, size_t cap) {
    if (!j->resume || j->state_dir) return j->state_dir;
    struct stat rs;
    snprintf(buf, cap, "%s", j->resume);
    /* a path too long for the buffer is too long for the system too: used
     * as it is, it fails naming it, never cut to another path */
    if (strlen(j->resume) >= cap) return j->resume;
    if (stat(j->resume, &rs) == 0 && !S_ISDIR(rs.st_mode)) {
        char *slash = strrchr(buf, '/');
        if (!slash) snprintf(buf, cap, ".");
        else if (slash == buf) buf[1] = 0;
        else *slash = 0;
    }
    return buf;
}

/* The training loop the data calls for: a token file, synthetic batches
 * (*synth_failed when they cannot be made) or a data set. */
static remat_status train_on(job *j, remat_session *s, remat_train_opts *to, cli_progress *p, int *synth_failed) {
    const remat_model *m = &j->m;
    if (!j->stream) {
        to->on_event = cli_train_on_event;
        int64_t per_epoch = remat_dataset_size(j->train) / j->batch;
        p->epochs_total = j->steps ? (per_epoch ? (j->steps + per_epoch - 1) / per_epoch : 1) : j->epochs;
        return remat_train(s, m, j->train, j->test, to);
    }
    p->epochs_total = j->epochs;
    to->on_event = cli_train_on_stream_event;
    if (j->tokens) return remat_train_tokens(s, m, j->tok, to);
    cli_synth syn;
    if (cli_synth_init(&syn, j->g, m, &j->mo, j->so.seed)) {
        *synth_failed = 1;
        return REMAT_OK;
    }
    return remat_train_stream(s, m, cli_synth_next, &syn, to);
}

/* A run stopped by a signal: every rank stopped after the same step (the
 * library agreed on it, and stop_signal now holds the signal on every
 * rank); rank 0 says what was kept. --save is not written: its weights
 * would pass for the finished run's. The exit status: 128 + the signal. */
static int stopped(const job *j, const cli_dist *d, const cli_progress *p, const char *state_dir) {
    if (d->rank == 0) {
        if (p->tty && !p->json) fprintf(stderr, "\n");
        fprintf(stderr, "remat: %s: %s%s%s%s\n", signal_name(stop_signal), remat_last_error(),
                p->last_state[0] ? "; continue with --resume " : "", p->last_state[0] ? state_dir : "",
                j->save ? (p->last_state[0] ? "; --save was not written" : "; --save was not written either") : "");
    }
    return 128 + (stop_signal > 0 && stop_signal < 128 ? (int)stop_signal : SIGTERM);
}

static int run(job *j, cli_dist *d) {
    remat_session *s = NULL;
    remat_session_opts *so = &j->so;
    const remat_model *m = &j->m;
    so->optim = &j->oo; /* its state counts in the first plan and the budget */
    so->comm = d->comm;
    so->micro_batches = j->batch / j->micro;
    int rc = 1, lr;
    remat_status ts = REMAT_OK;
    if (remat_session_create(&s, j->g, m->loss, so) != REMAT_OK) goto fail;
    lr = j->init_from && remat_safetensors_load(s, j->init_from, 1) != REMAT_OK;
    if (lr) cli_fail("%s", remat_last_error());
    if ((rc = cli_dist_agree(d, lr))) goto done; /* every rank's weights, or none */
    rc = 1;
    so->threads = so->threads ? so->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!j->json && d->rank == 0) print_header(j, d, s);
    cli_progress p = {.quiet = d->rank != 0,
                      .json = j->json,
                      .tty = isatty(2),
                      .log_every = j->log_every,
                      .tokens_per_row = j->lm ? j->xd[1] : 0};
    remat_train_opts to = {
        .epochs = j->epochs, .steps = j->steps, .batch = j->batch, .seed = so->seed, .user = &p, .stop = &stop_signal};
    char resume_dir[4096];
    const char *state_dir = state_dir_of(j, resume_dir, sizeof resume_dir);
    to.state_dir = state_dir;
    to.resume = j->resume;
    to.save_every = j->save_every > 0 ? j->save_every : 0;
    to.keep = j->keep >= 0 ? (int)j->keep : 3;
    run_opts ro = {0};
    math_opts(j, so->threads, &ro);
    if (state_dir || j->resume) to.run = ro.kv;
    int synth_failed = 0;
    if ((ts = train_on(j, s, &to, &p, &synth_failed)) != REMAT_OK) goto trained;
    if (synth_failed) goto done;
    /* the loops stop at a non-finite weight; this says so for any other
     * way one could get here (the same on every rank: the same weights) */
    if (j->save && remat_session_check_finite(s) != REMAT_OK) {
        cli_fail("not saving the weights to %s: %s", j->save, remat_last_error());
        rc = cli_dist_agree(d, 1);
        goto done;
    }
    lr = j->save && d->rank == 0 && remat_safetensors_save(s, j->save) != REMAT_OK;
    if (lr) cli_fail("%s", remat_last_error());
    if ((rc = cli_dist_agree(d, lr))) goto done; /* rank 0 wrote it, or every rank stops */
    if (j->save && !j->json && d->rank == 0) printf("saved weights to %s\n", j->save);
    remat_lock_destroy(j->save_lock); /* written: another run may write it now */
    j->save_lock = NULL;
    if (p.last_state[0] && !j->json)
        printf("training state of step %lld in %s\n", (long long)p.last_state_step, p.last_state);
    rc = 0;
    goto done;
trained:
    if (ts == REMAT_STOPPED) {
        rc = stopped(j, d, &p, state_dir);
        goto done;
    }
fail:
    cli_fail("%s", remat_last_error());
done:
    remat_session_destroy(s);
    return rc;
}

int cmd_train(int argc, char **argv) {
    catch_stop_signals();
    cli_dist d;
    if (cli_dist_begin(&d)) return 1;
    job j;
    memset(&j, 0, sizeof j);
    int rc = setup(&j, &d, argc, argv);
    if (j.help && !rc) {
        if (d.rank == 0) help();
    } else {
        /* every rank's setup, or none runs; the same flags on every rank */
        rc = cli_dist_agree(&d, rc);
        if (!rc) rc = same_flags(&j, &d);
        if (!rc) rc = run(&j, &d);
    }
    job_free(&j);
    return cli_dist_end(&d, rc);
}
