/* resident.c - pinning a loaded model in bpffs, opening it from another
 * process, and the owner table of its KV cache slots (resident.h). */
#include "resident.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

#define BPFFS "/sys/fs/bpf"
#define BPFFS_MAGIC 0xcafe4a11

int qp_pin_check_name(const char *name, qp_err *err)
{
    size_t n = strlen(name);
    bool ok = n > 0 && n < QP_PIN_NAME_MAX && name[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
             (name[i] >= '0' && name[i] <= '9') || name[i] == '.' || name[i] == '_' || name[i] == '-';
    if (!ok)
        return qp_fail_code(err, QP_E_ARGUMENT, "bad model name '%s': 1 to %d of A-Z a-z 0-9 . _ -, not starting "
                            "with '.'", name, QP_PIN_NAME_MAX - 1);
    return 0;
}

int qp_pin_mount(bool *mounted, qp_err *err)
{
    struct statfs fs;
    *mounted = false;
    if (statfs(BPFFS, &fs) == 0 && (unsigned long)fs.f_type == BPFFS_MAGIC)
        return 0;
    /* 0755 as systemd mounts it would be 0700: the folder of a model a
     * group may open has to be reachable */
    if (mount("bpf", BPFFS, "bpf", 0, "mode=0755"))
        return qp_fail_code(err, errno == EPERM ? QP_E_PRIVILEGE : QP_E_IO, "cannot mount bpffs on %s: %s", BPFFS,
                            strerror(errno));
    *mounted = true;
    return 0;
}

int qp_pin_reachable(bool *changed, qp_err *err)
{
    struct stat st;
    *changed = false;
    if (stat(BPFFS, &st))
        return qp_fail(err, "%s: %s", BPFFS, strerror(errno));
    if ((st.st_mode & 0011) == 0011)
        return 0;
    if (chmod(BPFFS, (st.st_mode & 07777) | 0011))
        return qp_fail(err, "cannot make %s reachable by a group: %s", BPFFS, strerror(errno));
    *changed = true;
    return 0;
}

static void dir_of(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", QP_PIN_ROOT, name);
}

/* unlinks every entry of dir, then dir */
static void remove_folder(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

static int fill_manifest(struct qp_pin_manifest *m, const char *name, const struct qpk_file *f,
                         const struct qp_plan *plan, const struct qp_backend *b, const struct qp_pin_access *acc,
                         qp_err *err)
{
    struct stat st;
    char real[PATH_MAX];
    memset(m, 0, sizeof *m);
    if (fstat(f->fd, &st) || !realpath(f->path, real))
        return qp_fail(err, "%s: %s", f->path, strerror(errno));
    if (strlen(real) >= sizeof m->container)
        return qp_fail(err, "%s: the path is too long for the manifest", f->path);
    memcpy(m->magic, QP_PIN_MAGIC, sizeof m->magic);
    m->version = QP_PIN_VERSION;
    m->size = sizeof *m;
    m->build_id = qp_bpf_build_id();
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->container, sizeof m->container, "%s", real);
    m->container_size = (uint64_t)st.st_size;
    m->container_mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
    m->container_ino = st.st_ino;
    m->container_dev = st.st_dev;
    m->container_dir_xxh3 = f->dir_xxh3;
    m->ctx = plan->cfg.ctx;
    m->slots = plan->cfg.kv_slots;
    m->block = plan->cfg.block;
    m->kv8 = plan->cfg.kv8;
    m->call_budget_ns = plan->cfg.call_budget_ns;
    m->loader_pid = (uint32_t)getpid();
    m->map_bytes = b->map_bytes;
    m->weight_bytes = plan->bytes.weights;
    m->kv_bytes = plan->bytes.kv;
    m->loaded_unix = (uint64_t)time(NULL);
    m->gid = (uint32_t)acc->gid;
    m->mode = (uint32_t)acc->mode;
    m->kernel_schedule = plan->kernel_lanes > 0;
    return 0;
}

/* a one-entry array map holding the manifest, frozen: no process changes it */
static int pin_manifest(const char *dir, const struct qp_pin_manifest *m, qp_err *err)
{
    char path[512];
    uint32_t key = 0;
    int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "qp_manifest", sizeof key, sizeof *m, 1, NULL);
    snprintf(path, sizeof path, "%s/manifest", dir);
    int rc = fd < 0 || bpf_map_update_elem(fd, &key, m, BPF_ANY) || bpf_map_freeze(fd) || bpf_obj_pin(fd, path)
                 ? qp_fail(err, "cannot pin the manifest %s: %s", path, strerror(errno))
                 : 0;
    if (fd >= 0)
        close(fd);
    return rc;
}

static int pin_owners(const char *dir, uint32_t slots, qp_err *err)
{
    char path[512];
    int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "qp_owners", sizeof(uint32_t), sizeof(struct qp_pin_owner), slots,
                            NULL);
    snprintf(path, sizeof path, "%s/owners", dir);
    int rc = fd < 0 || bpf_obj_pin(fd, path) ? qp_fail(err, "cannot pin the owner table %s: %s", path, strerror(errno))
                                             : 0;
    if (fd >= 0)
        close(fd);
    return rc;
}

/* every pinned file to acc's group and mode, the folder with x where r is */
static int set_access(const char *dir, const struct qp_pin_access *acc, qp_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return qp_fail(err, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            (fchownat(dirfd(d), de->d_name, (uid_t)-1, acc->gid, 0) ||
             fchmodat(dirfd(d), de->d_name, acc->mode & 0666, 0)))
            rc = qp_fail(err, "%s/%s: %s", dir, de->d_name, strerror(errno));
    closedir(d);
    mode_t dmode = (acc->mode & 0666) | ((acc->mode & 0444) >> 2);
    if (!rc && (chown(dir, (uid_t)-1, acc->gid) || chmod(dir, dmode)))
        rc = qp_fail(err, "%s: %s", dir, strerror(errno));
    return rc;
}

int qp_pin_load(const char *name, const struct qpk_file *f, const struct qp_plan *plan, struct qp_backend *b,
                const struct qp_pin_access *acc, qp_err *err)
{
    char dir[256];
    struct qp_pin_manifest *m = malloc(sizeof *m);
    if (!m)
        return qp_fail_code(err, QP_E_MEMORY, "out of memory");
    if (qp_pin_check_name(name, err) || fill_manifest(m, name, f, plan, b, acc, err)) {
        free(m);
        return -1;
    }
    dir_of(name, dir, sizeof dir);
    if (mkdir(QP_PIN_ROOT, 0755) && errno != EEXIST) {
        free(m);
        return qp_fail(err, "cannot create %s: %s", QP_PIN_ROOT, strerror(errno));
    }
    if (mkdir(dir, 0700)) {
        int e = errno;
        free(m);
        if (e == EEXIST)
            return qp_fail_code(err, QP_E_BUSY, "a model named %s is already loaded (qpack unload %s first)", name,
                                name);
        return qp_fail(err, "cannot create %s: %s", dir, strerror(e));
    }
    int rc = qp_bpf_pin(b, plan, dir, err) || pin_owners(dir, plan->cfg.kv_slots, err) || pin_manifest(dir, m, err) ||
             set_access(dir, acc, err);
    free(m);
    if (rc)
        remove_folder(dir);
    return rc ? -1 : 0;
}

int qp_pin_unload(const char *name, qp_err *err)
{
    char dir[256];
    struct stat st;
    if (qp_pin_check_name(name, err))
        return -1;
    dir_of(name, dir, sizeof dir);
    if (stat(dir, &st))
        return qp_fail_code(err, errno == ENOENT ? QP_E_ARGUMENT : QP_E_IO, "%s: %s", dir,
                            errno == ENOENT ? "no model of that name is loaded (qpack ps lists them)"
                                            : strerror(errno));
    remove_folder(dir);
    if (access(dir, F_OK) == 0)
        return qp_fail(err, "%s: could not remove every pinned object", dir);
    return 0;
}

static int open_error(const char *path, int e, qp_err *err)
{
    if (e == EACCES || e == EPERM)
        return qp_fail_code(err, QP_E_PRIVILEGE, "%s: permission denied (uid %u may not open this loaded model: "
                            "it takes membership of the group it was loaded with)", path, (unsigned)geteuid());
    return qp_fail_code(err, QP_E_IO, "%s: %s", path, strerror(e));
}

static int check_manifest(const struct qp_pin_manifest *m, const char *path, qp_err *err)
{
    if (memcmp(m->magic, QP_PIN_MAGIC, sizeof m->magic))
        return qp_fail_code(err, QP_E_FORMAT, "%s: not a qpack manifest (bad magic)", path);
    if (m->version != QP_PIN_VERSION || m->size != sizeof *m)
        return qp_fail_code(err, QP_E_FORMAT, "%s: manifest version %u (%u bytes); this qpack reads version %u "
                            "(%zu bytes): unload and load the model again", path, m->version, m->size,
                            QP_PIN_VERSION, sizeof *m);
    if (m->build_id != qp_bpf_build_id())
        return qp_fail_code(err, QP_E_FORMAT, "%s: loaded by another build of qpack (kernels %016llx, this one "
                            "%016llx): unload and load it again with this one", path,
                            (unsigned long long)m->build_id, (unsigned long long)qp_bpf_build_id());
    if (!memchr(m->container, 0, sizeof m->container) || !m->slots || !m->ctx || !m->block || m->kernel_schedule > 1)
        return qp_fail_code(err, QP_E_FORMAT, "%s: a manifest field is out of range", path);
    return 0;
}

int qp_pin_open(struct qp_pin *p, const char *name, qp_err *err)
{
    memset(p, 0, sizeof *p);
    p->dir_fd = p->owners_fd = -1;
    if (qp_pin_check_name(name, err))
        return -1;
    dir_of(name, p->dir, sizeof p->dir);
    char path[512];
    p->dir_fd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (p->dir_fd < 0 && errno == ENOENT)
        return qp_fail_code(err, QP_E_IO, "no model named %s is loaded (%s does not exist; qpack load loads one)",
                            name, p->dir);
    if (p->dir_fd < 0)
        return open_error(p->dir, errno, err);
    snprintf(path, sizeof path, "%s/manifest", p->dir);
    int fd = bpf_obj_get(path);
    if (fd < 0)
        return open_error(path, errno, err);
    uint32_t key = 0;
    int rc = bpf_map_lookup_elem(fd, &key, &p->man);
    int e = errno;
    close(fd);
    if (rc)
        return qp_fail_code(err, QP_E_FORMAT, "%s: cannot read the manifest: %s", path, strerror(e));
    if (check_manifest(&p->man, path, err))
        return -1;
    snprintf(path, sizeof path, "%s/owners", p->dir);
    if ((p->owners_fd = bpf_obj_get(path)) < 0)
        return open_error(path, errno, err);
    return 0;
}

void qp_pin_close(struct qp_pin *p)
{
    if (p->owners_fd >= 0)
        close(p->owners_fd);
    if (p->dir_fd >= 0)
        close(p->dir_fd);
    p->owners_fd = p->dir_fd = -1;
}

int qp_pin_check_container(const struct qp_pin *p, const struct qpk_file *f, qp_err *err)
{
    struct stat st;
    const struct qp_pin_manifest *m = &p->man;
    if (fstat(f->fd, &st))
        return qp_fail(err, "%s: %s", f->path, strerror(errno));
    uint64_t mtime = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
    if ((uint64_t)st.st_size != m->container_size || mtime != m->container_mtime_ns || st.st_ino != m->container_ino ||
        st.st_dev != m->container_dev || f->dir_xxh3 != m->container_dir_xxh3)
        return qp_fail_code(err, QP_E_FORMAT, "%s: the container changed on disk since it was loaded as %s "
                            "(qpack unload %s, then load it again)", f->path, m->name, m->name);
    return 0;
}

/* the start time of pid in clock ticks (/proc/PID/stat field 22); 0 when
 * there is no such process */
static uint64_t start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *s = strrchr(buf, ')');     /* the command name may hold spaces and ')' */
    for (int field = 2; s && field < 22; field++)
        s = strchr(s + 1, ' ');
    return s ? strtoull(s + 1, NULL, 10) : 0;
}

bool qp_pin_owner_alive(const struct qp_pin_owner *o)
{
    if (!o->pid)
        return false;
    if (kill((pid_t)o->pid, 0) && errno != EPERM)
        return false;
    return start_ticks((pid_t)o->pid) == o->start_ticks;
}

/* the owner table's lock: a description of its own, so a claim in one
 * thread never drops the step lock another thread of the process holds */
static int lock_owners(const struct qp_pin *p, qp_err *err)
{
    int fd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return open_error(p->dir, errno, err);
    while (flock(fd, LOCK_EX))
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            return qp_fail(err, "%s: cannot lock: %s", p->dir, strerror(e));
        }
    return fd;
}

int qp_pin_claim(struct qp_pin *p, uint32_t *slot, qp_err *err)
{
    int lock = lock_owners(p, err);
    if (lock < 0)
        return -1;
    struct qp_pin_owner me = {(uint32_t)getpid(), (uint32_t)getuid(), start_ticks(getpid())}, o;
    int rc = qp_fail_code(err, QP_E_BUSY, "all %u sessions of loaded model %s are in use (qpack ps shows by whom)",
                          p->man.slots, p->man.name);
    for (uint32_t i = 0; i < p->man.slots; i++) {
        if (bpf_map_lookup_elem(p->owners_fd, &i, &o)) {
            rc = qp_fail(err, "%s/owners: %s", p->dir, strerror(errno));
            break;
        }
        if (qp_pin_owner_alive(&o))
            continue;
        if (bpf_map_update_elem(p->owners_fd, &i, &me, BPF_ANY)) {
            rc = open_error(p->dir, errno, err);
            break;
        }
        *slot = i;
        rc = 0;
        break;
    }
    close(lock);
    return rc;
}

void qp_pin_release(struct qp_pin *p, uint32_t slot)
{
    qp_err err;
    struct qp_pin_owner o, none = {0};
    int lock = lock_owners(p, &err);
    if (lock < 0)
        return;
    if (bpf_map_lookup_elem(p->owners_fd, &slot, &o) == 0 && o.pid == (uint32_t)getpid())
        bpf_map_update_elem(p->owners_fd, &slot, &none, BPF_ANY);
    close(lock);
}

int qp_pin_lock(struct qp_pin *p, qp_err *err)
{
    while (flock(p->dir_fd, LOCK_EX))
        if (errno != EINTR)
            return qp_fail(err, "%s: cannot take the step lock: %s", p->dir, strerror(errno));
    return 0;
}

void qp_pin_unlock(struct qp_pin *p)
{
    flock(p->dir_fd, LOCK_UN);
}

int qp_pin_owners(const struct qp_pin *p, struct qp_pin_owner *out, qp_err *err)
{
    for (uint32_t i = 0; i < p->man.slots; i++)
        if (bpf_map_lookup_elem(p->owners_fd, &i, &out[i]))
            return qp_fail(err, "%s/owners: %s", p->dir, strerror(errno));
    return 0;
}

_Static_assert(sizeof(struct qp_pin_manifest) == 4296, "docs/RESIDENT.md gives the manifest's size and fields");
_Static_assert(sizeof(struct qp_pin_owner) == 16, "docs/RESIDENT.md gives the owner table's value");
