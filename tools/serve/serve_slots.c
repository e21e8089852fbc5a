/* serve_slots.c - llama-server's saved prompt caches:
 *   POST /slots/ID?action=save     {"filename": NAME}: session ID to the file
 *   POST /slots/ID?action=restore  {"filename": NAME}: the file into session ID
 *   POST /slots/ID?action=erase    session ID empty
 * NAME is a file in --slot-save-path's folder (llama.cpp's
 * fs_validate_filename, no leading dot); without that option every action
 * gets 501, as llama-server answers. A session running a job gets 409
 * (llama-server defers the action until it ends). The file format is
 * qpack_session_save's: a restore checks the model, the cache type, the
 * context and the checksum, and leaves the session as it was when refused.
 * The action runs under the scheduler's lock (serve_sched_slot_act). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "clock.h"
#include "json_strict.h"
#include "serve_http.h"

#define FILENAME_MAX_BYTES 255  /* llama.cpp's limit: the longest name Linux file systems take */

/* a code point fs_validate_filename refuses: controls, the characters
 * Windows forbids, look-alikes of dots and slashes, a BOM, U+FFFD */
static bool forbidden(utf8proc_int32_t c)
{
    return c <= 0x1f || c == 0x7f || (c >= 0x80 && c <= 0x9f) || c == 0xff0e || c == 0x2215 || c == 0x2216 ||
           c == 0xfffd || c == 0xfeff || (c && strchr(":*?\"<>|/\\", (int)c) && c < 0x80);
}

bool serve_slot_filename_ok(const char *name, size_t len)
{
    if (!len || len > FILENAME_MAX_BYTES || name[0] == '.' || name[0] == ' ' || name[len - 1] == ' ' ||
        name[len - 1] == '.' || memmem(name, len, "..", 2))
        return false;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)name + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0 || forbidden(c))
            return false;
        i += (size_t)k;
    }
    return true;
}

enum action { SAVE, RESTORE, ERASE };

struct slot_call {
    enum action what;
    const char *path;
    uint32_t n;                 /* tokens saved, restored or erased */
    qpack_error err;
};

static int act(void *arg, qpack_session *ses)
{
    struct slot_call *k = arg;
    switch (k->what) {
    case SAVE:
        k->n = qpack_session_pos(ses);
        return qpack_session_save(ses, k->path, &k->err);
    case RESTORE:
        return qpack_session_restore(ses, k->path, &k->n, &k->err);
    default:
        k->n = qpack_session_pos(ses);
        return qpack_session_rewind(ses, 0, &k->err);
    }
}

/* the library's message with the file named as the client named it: the
 * server's folder stays its own */
static const char *client_text(struct slot_call *k, const char *name)
{
    char *m = k->err.message;
    size_t n = k->path ? strlen(k->path) : 0;
    if (n && !strncmp(m, k->path, n)) {
        char rest[sizeof k->err.message];
        snprintf(rest, sizeof rest, "%s", m + n);
        snprintf(m, sizeof k->err.message, "%s%s", name, rest);
    }
    return m;
}

static enum MHD_Result invalid(struct MHD_Connection *c, struct request *r, const char *param, const char *msg)
{
    return http_fail(c, r, 400, "invalid_request_error", NULL, param, "%s", msg);
}

/* ?action=: save, restore or erase */
static bool action_of(const char *a, enum action *what)
{
    static const char *const names[] = {[SAVE] = "save", [RESTORE] = "restore", [ERASE] = "erase"};
    for (int i = 0; a && i < 3; i++)
        if (!strcmp(a, names[i])) {
            *what = (enum action)i;
            return true;
        }
    return false;
}

/* the session's number in the path /slots/ID */
static bool slot_id(const char *url, unsigned *id)
{
    const char *s = url + strlen("/slots/");
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *s == '-' || *s == '+' || *end || errno || v > UINT_MAX)
        return false;
    *id = (unsigned)v;
    return true;
}

/* the body's "filename", checked: its path in the folder into path */
static enum MHD_Result take_filename(struct serve_http *h, struct MHD_Connection *c, struct request *r, char *path,
                                     size_t cap, const char **name_out, cJSON **root)
{
    const char *body = r->body ? r->body : "";
    qp_err e = {{0}};
    *root = cJSON_ParseWithLength(body, r->len);
    if (!*root || json_refuse_ambiguous(*root, body, r->len, "the body", &e))
        return invalid(c, r, NULL, *root ? e.msg : "the body is not JSON");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(*root, "filename");
    if (!cJSON_IsString(f))
        return invalid(c, r, "filename", "\"filename\" (a string) is required");
    if (!serve_slot_filename_ok(f->valuestring, strlen(f->valuestring)))
        return invalid(c, r, "filename", "Invalid filename");
    if ((size_t)snprintf(path, cap, "%s/%s", h->cfg.slot_save_path, f->valuestring) >= cap)
        return invalid(c, r, "filename", "Invalid filename: the path is too long");
    *name_out = f->valuestring;
    return MHD_YES;
}

static char *reply_json(enum action what, unsigned id, const char *name, uint32_t n, const char *path, double ms)
{
    cJSON *root = cJSON_CreateObject();
    struct stat st;
    double bytes = stat(path ? path : "", &st) ? 0 : (double)st.st_size;
    cJSON *t = NULL;
    bool ok = root && cJSON_AddNumberToObject(root, "id_slot", id);
    if (what == ERASE)
        return serve_json_print(root, ok && cJSON_AddNumberToObject(root, "n_erased", n));
    ok = ok && cJSON_AddStringToObject(root, "filename", name) &&
         cJSON_AddNumberToObject(root, what == SAVE ? "n_saved" : "n_restored", n) &&
         cJSON_AddNumberToObject(root, what == SAVE ? "n_written" : "n_read", bytes) &&
         (t = cJSON_AddObjectToObject(root, "timings")) &&
         cJSON_AddNumberToObject(t, what == SAVE ? "save_ms" : "restore_ms", ms);
    return serve_json_print(root, ok);
}

enum MHD_Result serve_slot_action(struct serve_http *h, struct MHD_Connection *c, struct request *r)
{
    if (!h->cfg.slot_save_path)
        return http_fail(c, r, 501, "not_supported_error", NULL, NULL,
                         "This server does not support slots action. Start it with `--slot-save-path`");
    unsigned id;
    if (!slot_id(r->url, &id))
        return invalid(c, r, NULL, "Invalid slot ID");
    enum action what;
    if (!action_of(MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action"), &what))
        return invalid(c, r, "action", "Invalid action");
    char path[PATH_MAX];
    const char *name = NULL;
    cJSON *root = NULL;
    if (what != ERASE) {
        enum MHD_Result sent = take_filename(h, c, r, path, sizeof path, &name, &root);
        if (r->responded) {
            cJSON_Delete(root);
            return sent;
        }
    }
    struct slot_call k = {.what = what, .path = what == ERASE ? NULL : path};
    double t0 = qp_now_ms();
    int rc = serve_sched_slot_act(r->m->sched, id, act, &k);
    double ms = qp_now_ms() - t0;
    enum MHD_Result sent;
    if (rc == SERVE_SLOT_NONE)
        sent = invalid(c, r, NULL, "Invalid slot ID");
    else if (rc == SERVE_SLOT_BUSY)
        sent = http_fail(c, r, 409, "invalid_request_error", "slot_busy", NULL,
                         "slot %u is processing a request: try again when it is idle", id);
    else if (rc && what == SAVE)
        sent = http_fail(c, r, 500, "server_error", NULL, NULL, "Unable to save slot: %s", client_text(&k, name));
    else if (rc)
        sent = http_fail(c, r, 400, "invalid_request_error", NULL, NULL, "Unable to restore slot: %s",
                         client_text(&k, name));
    else
        sent = http_send_json(c, r, 200, reply_json(what, id, name, k.n, k.path, ms));
    cJSON_Delete(root);
    return sent;
}
