/* provenance.c - where a container came from: the checkpoint's files with
 * their sizes and XXH3 (hashed on a second thread while the tensors
 * convert) and the settings of the pack, as the provenance section's JSON
 * (packer.h). */
#include "packer.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "json_strict.h"
#include "pack.h"
#include "utf8_stream.h"

/* Every file the checkpoint was read from, with its size and XXH3, in a fixed
 * order: one entry per candidate, present false when an optional one is
 * absent. */
static const char *const extra_sources[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                            "model.safetensors.index.json"};
#define N_EXTRA_SOURCES (sizeof extra_sources / sizeof *extra_sources)

struct source_hash {
    const char *name;
    uint64_t size, hash;
    bool present;
};

static int hash_sources(const struct packer *p, struct source_hash *out, qp_err *err)
{
    for (size_t i = 0; i < N_EXTRA_SOURCES + p->model.n_files; i++) {
        char path[4096];
        struct source_hash *h = &out[i];
        bool extra = i < N_EXTRA_SOURCES;
        h->name = extra ? extra_sources[i] : p->model.files[i - N_EXTRA_SOURCES].name;
        if (extra && p->gguf.name)
            continue; /* a GGUF holds all of them */
        if (extra)
            snprintf(path, sizeof path, "%s/%s", p->opt.src, h->name);
        else
            snprintf(path, sizeof path, "%s", p->model.files[i - N_EXTRA_SOURCES].path);
        if (extra && access(path, R_OK) != 0)
            continue;
        if (st_file_xxh3(path, &h->hash, &h->size, err))
            return -1;
        h->present = true;
    }
    return 0;
}

/* A name the provenance records must be UTF-8 (JSON text, which verify
 * checks); refused here, before any work, rather than escaped: a name
 * the record could not give back byte for byte would not say where the
 * container came from. */
static int check_name(const char *name, const char *what, const char *path, qp_err *err)
{
    size_t n = strlen(name);
    if (qp_utf8_check(name, n, NULL) != n)
        return qp_fail(err, "%s: the %s's name is not UTF-8, which the provenance section records as JSON "
                       "text (rename it)", path, what);
    return 0;
}

int pack_check_names(const struct packer *p, qp_err *err)
{
    char *dir = strdup(p->opt.src);
    int rc = dir ? check_name(basename(dir), p->gguf.name ? "file" : "folder", p->opt.src, err)
                 : qp_fail(err, "out of memory");
    free(dir);
    for (uint32_t i = 0; !rc && i < p->model.n_files; i++)
        rc = check_name(p->model.files[i].name, "file", p->model.files[i].path, err);
    if (!rc && p->opt.calib_text) {
        char *text = strdup(p->opt.calib_text);
        rc = text ? check_name(basename(text), "file", p->opt.calib_text, err) : qp_fail(err, "out of memory");
        free(text);
    }
    for (unsigned i = 0; !rc && i < p->opt.prec.n_keep; i++)
        if (qp_utf8_check(p->opt.prec.keep[i].arg, strlen(p->opt.prec.keep[i].arg), NULL) !=
            strlen(p->opt.prec.keep[i].arg))
            rc = qp_fail(err, "--keep %s: not UTF-8, which the provenance section records", p->opt.prec.keep[i].arg);
    return rc;
}

static void *hasher_main(void *arg)
{
    struct packer *p = arg;
    p->hash_rc = hash_sources(p, p->hashes, &p->hash_err);
    return NULL;
}

/* Starts hashing the sources beside the conversion (reading the same files
 * the converter maps; the result does not depend on the timing). Without a
 * thread the hashes are taken later, in line. */
int pack_start_hashing(struct packer *p, qp_err *err)
{
    p->hashes = calloc(N_EXTRA_SOURCES + p->model.n_files, sizeof *p->hashes);
    if (!p->hashes)
        return qp_fail(err, "out of memory");
    p->hasher_running = pthread_create(&p->hasher, NULL, hasher_main, p) == 0;
    return 0;
}

void pack_join_hashing(struct packer *p)
{
    if (p->hasher_running)
        pthread_join(p->hasher, NULL);
    p->hasher_running = false;
}

static cJSON *source_files_json(struct packer *p, qp_err *err)
{
    if (p->hasher_running)
        pack_join_hashing(p);
    else
        p->hash_rc = hash_sources(p, p->hashes, &p->hash_err);
    if (p->hash_rc) {
        *err = p->hash_err;
        return NULL;
    }
    cJSON *files = cJSON_CreateArray();
    for (size_t i = 0; i < N_EXTRA_SOURCES + p->model.n_files; i++) {
        const struct source_hash *h = &p->hashes[i];
        if (!h->present)
            continue;
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, h->hash);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", h->name);
        cJSON_AddNumberToObject(f, "size", (double)h->size);
        cJSON_AddStringToObject(f, "xxh3", hex);
        cJSON_AddItemToArray(files, f);
    }
    return files;
}

/* The matrix encodings the plan uses, joined by '+' in a fixed order:
 * "q24", "i8g", "i4g+i8g", "i8g+i6g+i4k", ... */
static void matrix_encodings(const struct packer *p, char *out, size_t n)
{
    static const unsigned order[] = {QPK_ENC_Q24, QPK_ENC_I4G, QPK_ENC_I8G, QPK_ENC_I6G, QPK_ENC_I7G, QPK_ENC_I4K};
    size_t len = 0;
    out[0] = 0;
    for (unsigned k = 0; k < sizeof order / sizeof *order; k++) {
        bool used = false;
        for (uint32_t i = 0; i < p->n_plan && !used; i++)
            used = p->plan[i].t.encoding == order[k];
        if (used)
            len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "+" : "", qpk_encoding_name(order[k]));
    }
}

/* settings.calibration: what --calibrate ran */
static void calibration_json(const struct packer *p, cJSON *settings)
{
    const struct calib *c = &p->calib;
    char hex[17], *path = strdup(p->opt.calib_text);
    snprintf(hex, sizeof hex, "%016" PRIx64, c->text_xxh3);
    cJSON *j = cJSON_AddObjectToObject(settings, "calibration");
    cJSON_AddStringToObject(j, "text", path ? basename(path) : "");
    free(path);
    cJSON_AddNumberToObject(j, "text_size", (double)c->text_bytes);
    cJSON_AddStringToObject(j, "text_xxh3", hex);
    cJSON_AddNumberToObject(j, "tokens", (double)c->tokens);
    cJSON_AddNumberToObject(j, "window", c->window);
    cJSON_AddStringToObject(j, "by", "float64 reference");
    cJSON_AddStringToObject(j, "weights", "mean square of each input column");
}

/* The settings a quantised format was packed with: groups, quantiser, and
 * for int4 the preset and the --keep rules in order. */
static void quant_settings_json(const struct packer *p, cJSON *settings)
{
    enum pack_format f = p->opt.prec.format;
    if (f == PACK_INT4 || f == PACK_INT4_PURE)
        cJSON_AddStringToObject(settings, "preset", precision_format_name(f));
    cJSON_AddNumberToObject(settings, "group", p->opt.group);
    if (f != PACK_INT8)
        cJSON_AddNumberToObject(settings, "int8_group", p->i8_group);
    cJSON_AddStringToObject(settings, "quantiser", pack_quantiser_name(p->opt.quant));
    if (p->by_source_type)
        cJSON_AddStringToObject(settings, "by_source_type", "Q8_0 rtn, Q4_0 Q4_0's rule, Q4_1 minmax, others the quantiser");
    if (p->calibrated)
        calibration_json(p, settings);
    if (f == PACK_INT8)
        return;
    cJSON *keep = cJSON_AddArrayToObject(settings, "keep");
    for (unsigned i = 0; i < p->opt.prec.n_keep; i++)
        cJSON_AddItemToArray(keep, cJSON_CreateString(p->opt.prec.keep[i].arg));
}

char *pack_provenance_json(struct packer *p, qp_err *err)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "packer", "qpack " QPACK_VERSION);
    cJSON_AddStringToObject(root, "format", precision_format_name(p->opt.prec.format));
    cJSON *settings = cJSON_AddObjectToObject(root, "settings");
    char matrices[64];
    matrix_encodings(p, matrices, sizeof matrices);
    cJSON_AddStringToObject(settings, "matrices", matrices);
    if (precision_quantised(p->opt.prec.format))
        quant_settings_json(p, settings);
    cJSON_AddStringToObject(settings, "norms", "i32s");
    cJSON_AddBoolToObject(settings, "lm_head_deduplicated", p->deduped_lm_head);
    char *dir = strdup(p->opt.src);
    cJSON_AddStringToObject(root, "source", dir ? basename(dir) : "");
    free(dir);
    cJSON *files = source_files_json(p, err);
    if (!files) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddItemToObject(root, "source_files", files);
    cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
    for (uint32_t i = 0; i < p->n_plan; i++) {
        const struct planned *pl = &p->plan[i];
        cJSON *t = cJSON_CreateObject();
        uint64_t n = (uint64_t)pl->t.rows * pl->t.cols;
        cJSON_AddStringToObject(t, "name", pl->t.name);
        cJSON_AddStringToObject(t, "source_dtype", st_dtype_name(pl->src->dtype));
        cJSON_AddStringToObject(t, "encoding", qpk_encoding_name(pl->t.encoding));
        if (pl->t.group_size)
            cJSON_AddNumberToObject(t, "group", pl->t.group_size);
        cJSON_AddNumberToObject(t, "max_abs", pl->max_abs);
        cJSON_AddNumberToObject(t, "max_error", pl->max_err);
        cJSON_AddNumberToObject(t, "rms_error", sqrt(pl->sum_sq_err / (double)n));
        cJSON_AddItemToArray(tensors, t);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text)
        qp_fail(err, "out of memory");
    return text;
}
