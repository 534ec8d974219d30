/* opts.c: the option walker every command runs (cli_next_opt): long
 * options spelled in full, then getopt_long, with the model and session
 * options handed to model_opts.c and session_args.c. Apart from args.c's
 * value parsers so that those two files, which use the parsers, are not
 * in a circle with the walker that calls them. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

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
            return cli_usage_error(o->cmd, "unknown option '--%.*s' (options are spelled in full: %s)", (int)len, name,
                                   could);
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
