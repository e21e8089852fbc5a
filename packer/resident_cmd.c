/* resident_cmd.c - `qpack load`, `qpack unload` and `qpack ps`: a model
 * loaded into BPF once and pinned in bpffs for any process to open by name
 * (pin:NAME; docs/RESIDENT.md). */
#include <errno.h>
#include <dirent.h>
#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_call.h"
#include "cli_kv.h"
#include "cli_num.h"
#include "clock.h"
#include "engine.h"
#include "pack.h"
#include "resident.h"

#define LOAD_USAGE \
    "usage: qpack load MODEL.qpk [--name NAME] [-c CTX] [--sessions N] [--kv-cache int16|int8]\n" \
    "                  [--group GROUP] [--mode MODE] [--call-us N] [--schedule host|kernel]\n"

static void load_help(void)
{
    printf(LOAD_USAGE
           "\n"
           "Loads MODEL.qpk into BPF as qrun does (checksums, verifier, weight copy) and pins\n"
           "its maps and programs under " QP_PIN_ROOT "/NAME with a manifest, so that\n"
           "qrun, qrun serve, qeval and the library open it as -m " QP_PIN_PREFIX "NAME in\n"
           "milliseconds, from any process, without root when GROUP allows it.\n"
           "Mounts bpffs on /sys/fs/bpf when it is not (and says so).\n"
           "\n"
           "  --name NAME        the name to open it by (default: the file's name without .qpk)\n"
           "  -c, --ctx N        positions of each session's KV cache (default: as qrun)\n"
           "  --sessions N       KV cache slots, one per session at a time across all processes\n"
           "                     (default 4, at most %d)\n"
           "  --kv-cache T       int16 (default) or int8\n"
           "  --group GROUP      the group whose members may open it (default: root's only)\n"
           "  --mode MODE        octal mode of the pinned files (default 0600, 0660 with --group)\n"
           "  --call-us N        the kernels' per-call time budget in us (as qrun's --call-us)\n"
           "  --schedule kernel  also load and pin the kernel schedule's work items, so that\n"
           "                     -m pin:NAME runs --schedule kernel and qrun listen (docs/SCHEDULE.md,\n"
           "                     docs/LISTEN.md); default host\n",
           QP_PIN_MAX_SLOTS);
}

/* MODEL.qpk's file name without the folder and the .qpk */
static void default_name(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    snprintf(out, cap, "%s", base ? base + 1 : path);
    size_t n = strlen(out);
    if (n > 4 && !strcmp(out + n - 4, ".qpk"))
        out[n - 4] = 0;
}

static int parse_group(const char *arg, gid_t *gid)
{
    struct group *g = getgrnam(arg);
    char *end;
    unsigned long n = strtoul(arg, &end, 10);
    if (g)
        *gid = g->gr_gid;
    else if (*arg && !*end)
        *gid = (gid_t)n;
    else {
        fprintf(stderr, "qpack load: --group: no group named '%s'\n", arg);
        return -1;
    }
    return 0;
}

static int parse_mode(const char *arg, mode_t *mode)
{
    char *end;
    unsigned long m = strtoul(arg, &end, 8);
    if (!*arg || *end || m > 0666) {
        fprintf(stderr, "qpack load: --mode takes an octal mode of read and write bits up to 0666, got '%s'\n", arg);
        return -1;
    }
    *mode = (mode_t)m;
    return 0;
}

struct load_args {
    const char *path;
    char name[QP_PIN_NAME_MAX + 8];
    qpack_model_params mp;
    struct qp_pin_access acc;
    bool mode_set, name_set;
};

static int parse_load(int argc, char **argv, struct load_args *a)
{
    a->mp = (qpack_model_params){.backend = QPACK_BACKEND_BPF, .max_sessions = 4, .threads = 2};
    a->acc = (struct qp_pin_access){.gid = (gid_t)-1, .mode = 0600};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n;
        bool takes = strcmp(o, "--name") == 0 || !strcmp(o, "-c") || !strcmp(o, "--ctx") ||
                     !strcmp(o, "--sessions") || !strcmp(o, "--kv-cache") || !strcmp(o, "--group") ||
                     !strcmp(o, "--mode") || !strcmp(o, "--call-us") || !strcmp(o, "--schedule");
        if (takes && !v) {
            fprintf(stderr, "qpack load: %s needs a value (see qpack load --help)\n", o);
            return 2;
        }
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            load_help();
            return -1;
        } else if (!strcmp(o, "--name")) {
            snprintf(a->name, sizeof a->name, "%s", v);
            a->name_set = true;
        } else if (!strcmp(o, "-c") || !strcmp(o, "--ctx")) {
            if (cli_uint("qpack load", o, v, 1, UINT32_MAX, &n))
                return 2;
            a->mp.ctx = (uint32_t)n;
        } else if (!strcmp(o, "--sessions")) {
            if (cli_uint("qpack load", o, v, 1, QP_PIN_MAX_SLOTS, &n))
                return 2;
            a->mp.max_sessions = (uint32_t)n;
        } else if (!strcmp(o, "--kv-cache")) {
            if (cli_kv_cache("qpack load", v, &a->mp.kv_cache))
                return 2;
        } else if (!strcmp(o, "--group")) {
            if (parse_group(v, &a->acc.gid))
                return 2;
        } else if (!strcmp(o, "--mode")) {
            if (parse_mode(v, &a->acc.mode))
                return 2;
            a->mode_set = true;
        } else if (!strcmp(o, "--call-us")) {
            if (cli_uint("qpack load", o, v, 0, UINT32_MAX, &n))
                return 2;
            a->mp.call_us = (uint32_t)n;
        } else if (!strcmp(o, "--schedule")) {
            if (cli_schedule("qpack load", v, &a->mp.schedule))
                return 2;
        } else if (o[0] == '-' || a->path) {
            fprintf(stderr, "qpack load: unexpected argument '%s' (see qpack load --help)\n", o);
            return 2;
        } else {
            a->path = o;
            continue;
        }
        i++;
    }
    if (!a->path) {
        fprintf(stderr, LOAD_USAGE);
        return 2;
    }
    if (!a->mode_set && a->acc.gid != (gid_t)-1)
        a->acc.mode = 0660;
    if (!a->name_set)
        default_name(a->path, a->name, sizeof a->name);
    return 0;
}

int cmd_load(int argc, char **argv)
{
    struct load_args a = {0};
    int usage = parse_load(argc, argv, &a);
    if (usage)
        return usage < 0 ? 0 : usage;
    qp_err err = {{0}};
    bool mounted;
    struct qp_engine e;
    if (!qp_bpf_may_load()) {
        fprintf(stderr, "qpack load: loading BPF programs needs root or CAP_BPF + CAP_PERFMON "
                        "(running as uid %u); opening a loaded model (-m pin:NAME) needs only its group\n",
                (unsigned)geteuid());
        return 1;
    }
    if (qp_pin_check_name(a.name, &err) || qp_pin_mount(&mounted, &err)) {
        fprintf(stderr, "qpack load: %s\n", err.msg);
        return 1;
    }
    if (mounted)
        fprintf(stderr, "qpack load: mounted bpffs on /sys/fs/bpf (it was not mounted)\n");
    bool opened = false;
    if (a.acc.gid != (gid_t)-1 && qp_pin_reachable(&opened, &err)) {
        fprintf(stderr, "qpack load: %s\n", err.msg);
        return 1;
    }
    if (opened)
        fprintf(stderr, "qpack load: made /sys/fs/bpf searchable by others (chmod go+x) so that group members "
                        "reach %s\n", QP_PIN_ROOT);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", QP_PIN_ROOT, a.name);
    if (access(dir, F_OK) == 0) {     /* before the load's seconds; qp_pin_load checks again */
        fprintf(stderr, "qpack load: a model named %s is already loaded (qpack unload %s first)\n", a.name, a.name);
        return 1;
    }
    double t0 = qp_now_ms();
    if (qp_engine_open(&e, a.path, &a.mp, 0, &err)) {
        fprintf(stderr, "qpack load: %s\n", err.msg);
        return 1;
    }
    int rc = qp_pin_load(a.name, &e.file, &e.plan, e.b, &a.acc, &err);
    double ms = qp_now_ms() - t0;
    if (!rc)
        printf("loaded %s as %s%s: %u sessions of %u positions, %s KV cache, %.1f MiB of BPF maps, in %.0f ms\n",
               a.path, QP_PIN_PREFIX, a.name, e.plan.cfg.kv_slots, e.ctx, e.plan.cfg.kv8 ? "int8" : "int16",
               (double)e.b->map_bytes / (1 << 20), ms);
    else
        fprintf(stderr, "qpack load: %s\n", err.msg);
    qp_engine_close(&e);
    return rc ? 1 : 0;
}

int cmd_unload(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        bool help = argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
        fprintf(help ? stdout : stderr, "usage: qpack unload NAME\n");
        return help ? 0 : 2;
    }
    qp_err err = {{0}};
    if (qp_pin_unload(argv[1], &err)) {
        fprintf(stderr, "qpack unload: %s\n", err.msg);
        return 1;
    }
    return 0;
}

/* " (NAME)" of a live pid's command, from /proc/PID/comm; "" when unreadable */
static void process_name(uint32_t pid, char *out, size_t cap)
{
    char path[64], name[24] = "";
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *f = fopen(path, "r");
    if (f && fgets(name, sizeof name, f))
        name[strcspn(name, "\n")] = 0;
    if (f)
        fclose(f);
    if (name[0])
        snprintf(out, cap, " (%s)", name);
}

/* one loaded model: its manifest and its slots' owners */
static void show_model(const char *name)
{
    struct qp_pin p;
    qp_err err = {{0}};
    if (qp_pin_open(&p, name, &err)) {
        printf("%-16s (cannot open: %s)\n", name, err.msg);
        qp_pin_close(&p);
        return;
    }
    const struct qp_pin_manifest *m = &p.man;
    struct qp_pin_owner *o = calloc(m->slots, sizeof *o);
    uint32_t used = 0;
    if (o && qp_pin_owners(&p, o, &err) == 0)
        for (uint32_t i = 0; i < m->slots; i++)
            used += qp_pin_owner_alive(&o[i]);
    printf("%-16s %8.1f MiB  ctx %-6u %-5s sessions %u/%u  %s\n", name, (double)m->map_bytes / (1 << 20), m->ctx,
           m->kv8 ? "int8" : "int16", used, m->slots, m->container);
    for (uint32_t i = 0; o && i < m->slots; i++)
        if (o[i].pid) {
            char comm[32] = "";
            bool alive = qp_pin_owner_alive(&o[i]);
            if (alive)
                process_name(o[i].pid, comm, sizeof comm);
            printf("  slot %u: pid %u uid %u%s%s\n", i, o[i].pid, o[i].uid, comm,
                   alive ? "" : " (exited; the next claim reclaims it)");
        }
    free(o);
    qp_pin_close(&p);
}

int cmd_ps(int argc, char **argv)
{
    if (argc != 1) {
        bool help = argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
        fprintf(help ? stdout : stderr, "usage: qpack ps\n");
        return help ? 0 : 2;
    }
    DIR *d = opendir(QP_PIN_ROOT);
    if (!d) {
        if (errno == ENOENT)
            return 0;   /* nothing loaded */
        fprintf(stderr, "qpack ps: %s: %s\n", QP_PIN_ROOT, strerror(errno));
        return 1;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            show_model(de->d_name);
    closedir(d);
    return 0;
}
