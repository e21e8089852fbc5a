/* inspect.c - what a model is before it is loaded: the config and
 * sizes of a container, a checkpoint folder or a GGUF file
 * (qpack_model_inspect), the tokenizer it carries, whether BPF may be
 * loaded, and the source files a container records against those of a
 * checkpoint. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "gguf_model.h"
#include "internal.h"
#include "ref.h"
#include "safetensors.h"

void qp_lib_info_from_container(const struct qpk_file *f, qpack_model_info *i)
{
    const struct qpk_config *c = &f->cfg;
    uint64_t bytes = 0, params = 0;
    for (uint32_t t = 0; t < f->n_tensors; t++) {
        bytes += f->tensors[t].nbytes;
        params += (uint64_t)f->tensors[t].rows * f->tensors[t].cols;
    }
    *i = (qpack_model_info){
        .vocab = c->vocab, .hidden = c->hidden, .intermediate = c->intermediate, .n_layers = c->n_layers,
        .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
        .max_positions = c->max_positions, .ctx = qpack_default_ctx(c->max_positions), .bos_id = c->bos_id,
        .eos_id = c->eos_id, .rope_theta = c->rope_theta, .rms_eps = c->rms_eps,
        .tied = (c->flags & QPK_CONFIG_TIED) != 0, .format = qpk_format_name(c->weight_format),
        .has_tokenizer = qpk_section_of(f, QPK_SEC_TOKENIZER) != NULL, .file_bytes = f->size,
        .bits_per_weight = params ? 8.0 * (double)bytes / (double)params : 0,
    };
}

/* A GGUF as a checkpoint: its config and tensors (close g, then m) */
static int open_gguf(const char *path, struct gguf *g, struct qwen3_config *c, struct st_model *m, qp_err *err)
{
    memset(g, 0, sizeof *g);
    memset(m, 0, sizeof *m);
    if (gguf_open(g, path, err) || gguf_config(g, c, err) || gguf_checkpoint(g, m, err)) {
        gguf_close(g);
        st_close(m);
        return -1;
    }
    return 0;
}

/* A checkpoint's config and tensors, of a folder or a GGUF file; *tok: it
 * carries a tokenizer */
static int open_checkpoint(const char *path, struct gguf *g, struct qwen3_config *c, struct st_model *m, bool *tok,
                           qp_err *err)
{
    if (ref_is_gguf(path)) {
        if (open_gguf(path, g, c, m, err))
            return -1;
        *tok = gguf_find_kv(g, "tokenizer.ggml.tokens") != NULL;
        return 0;
    }
    char file[4096];
    memset(g, 0, sizeof *g);
    snprintf(file, sizeof file, "%s/config.json", path);
    if (hf_config_load(file, c, err) || st_open_dir(m, path, err))
        return -1;
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
    *tok = access(file, F_OK) == 0;
    return 0;
}

int qp_lib_info_from_folder(const char *dir, qpack_model_info *i, qp_err *err)
{
    struct qwen3_config c;
    struct st_model m;
    struct gguf g;
    bool tok;
    if (open_checkpoint(dir, &g, &c, &m, &tok, err))
        return -1;
    uint64_t files = m.index_size, bytes = 0, params = 0;
    for (uint32_t f = 0; f < m.n_files; f++)
        files += m.files[f].size;
    for (uint32_t t = 0; t < m.n_tensors; t++) {
        bytes += m.tensors[t].nbytes;
        params += m.tensors[t].numel;
    }
    gguf_close(&g);
    st_close(&m);
    *i = (qpack_model_info){
        .vocab = c.vocab_size, .hidden = c.hidden_size, .intermediate = c.intermediate_size,
        .n_layers = c.num_hidden_layers, .n_heads = c.num_attention_heads, .n_kv_heads = c.num_key_value_heads,
        .head_dim = c.head_dim, .max_positions = c.max_position_embeddings,
        .ctx = qpack_default_ctx(c.max_position_embeddings), .bos_id = c.bos_token_id, .eos_id = c.eos_token_id,
        .rope_theta = c.rope_theta, .rms_eps = c.rms_norm_eps, .tied = c.tie_word_embeddings, .format = "float64",
        .backend = "ref", .has_tokenizer = tok, .file_bytes = files,
        .bits_per_weight = params ? 8.0 * (double)bytes / (double)params : 0, .block_positions = 1,
        /* the reference caches K and V as float64 */
        .kv_cache = "float64",
        .kv_bytes_per_position = 2ull * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * sizeof(double),
    };
    return 0;
}

int qp_lib_pinned_container(const char *path, char *container, size_t cap, uint32_t *ctx, uint32_t *slots,
                            qp_err *err)
{
    struct qp_pin *p = malloc(sizeof *p);
    if (!p)
        return qp_fail_code(err, QP_E_MEMORY, "out of memory");
    int rc = qp_pin_open(p, path + strlen(QP_PIN_PREFIX), err);
    if (!rc) {
        snprintf(container, cap, "%s", p->man.container);
        *ctx = p->man.ctx;
        *slots = p->man.slots;
    }
    qp_pin_close(p);
    free(p);
    return rc;
}

bool qp_lib_is_pinned(const char *path)
{
    return !strncmp(path, QP_PIN_PREFIX, strlen(QP_PIN_PREFIX));
}

/* path opened as a container: a checkpoint folder refused (it wants
 * --backend ref), a file that is not one refused as a format error */
static qpack_status open_container(const char *path, struct qpk_file *f, qpack_error *err)
{
    qpack_status folder = qp_lib_refuse_folder(path, err);
    if (folder)
        return folder;
    qp_err e = {{0}};
    return qpk_open(f, path, 0, &e) ? qp_lib_error(err, &e, QPACK_ERR_FORMAT) : QPACK_OK;
}

int qpack_model_inspect(const char *path, qpack_backend backend, qpack_model_info *info, qpack_error *err)
{
    memset(info, 0, sizeof *info);
    if (!path || backend > QPACK_BACKEND_REF)
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT, "no model path, or an unknown backend %d", (int)backend);
    qp_err e = {{0}};
    if (qp_lib_is_pinned(path)) {
        char container[4096];
        uint32_t ctx, slots;
        struct qpk_file f;
        if (qp_lib_pinned_container(path, container, sizeof container, &ctx, &slots, &e) ||
            qpk_open(&f, container, 0, &e))
            return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
        qp_lib_info_from_container(&f, info);
        qpk_close(&f);
        info->backend = "bpf";
        info->ctx = ctx;
        info->max_sessions = slots;
    } else if (backend == QPACK_BACKEND_REF) {
        if (qp_lib_info_from_folder(path, info, &e))
            return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    } else {
        struct qpk_file f;
        qpack_status st = open_container(path, &f, err);
        if (st)
            return st;
        qp_lib_info_from_container(&f, info);
        qpk_close(&f);
        info->backend = backend == QPACK_BACKEND_BPF ? "bpf" : "emu";
    }
    info->path = path;
    return QPACK_OK;
}

bool qpack_bpf_permitted(void)
{
    return qp_bpf_may_load();
}

int qp_lib_container_tokenizer(const struct qpk_file *f, const char *path, qp_tok **tok, qp_err *err)
{
    char *json;
    size_t len;
    *tok = NULL;
    if (qpk_read_section(f, QPK_SEC_TOKENIZER, &json, &len, err))
        return -1;
    if (!json)
        return 0;
    char name[600];
    snprintf(name, sizeof name, "%s: tokenizer section", path);
    int rc = qp_tok_load_buffer(tok, json, len, name, err);
    free(json);
    return rc;
}

qpack_status qp_lib_refuse_folder(const char *path, qpack_error *err)
{
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode))
        return QPACK_OK;
    char config[4096];
    snprintf(config, sizeof config, "%s/config.json", path);
    if (access(config, F_OK))
        return qp_lib_fail(err, QPACK_ERR_ARGUMENT,
                           "%s is a folder, not a .qpk container (nor a Hugging Face checkpoint folder: it has no "
                           "config.json)", path);
    char name[256];
    const char *base = path;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    for (size_t i = 0; i < n; i++)
        if (path[i] == '/' && i + 1 < n)
            base = path + i + 1;
    snprintf(name, sizeof name, "%.*s", (int)(path + n - base), base);
    return qp_lib_fail(err, QPACK_ERR_ARGUMENT,
                       "%s is a Hugging Face checkpoint folder: pack it first: qpack pack %s -o %s.qpk (or run it "
                       "unpacked, slowly, in float64 with --backend ref)", path, path, name);
}

int qpack_tokenizer_load_model(qpack_tokenizer **out, const char *path, qpack_backend backend, qpack_error *err)
{
    *out = NULL;
    qp_err e = {{0}};
    qp_tok *tok = NULL;
    char container[4096];
    uint32_t ctx, slots;
    if (qp_lib_is_pinned(path)) {
        if (qp_lib_pinned_container(path, container, sizeof container, &ctx, &slots, &e))
            return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
        path = container;
        backend = QPACK_BACKEND_BPF;
    }
    if (backend == QPACK_BACKEND_REF) {
        if (qp_lib_reference_tokenizer(path, &tok, &e))
            return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
        if (!tok)
            return QPACK_OK;
    } else {
        struct qpk_file f;
        qpack_status st = open_container(path, &f, err);
        if (st)
            return st;
        int rc = qp_lib_container_tokenizer(&f, path, &tok, &e);
        qpk_close(&f);
        if (rc)
            return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
        if (!tok)
            return QPACK_OK;
    }
    *out = qp_lib_tokenizer_wrap(tok);
    return *out ? QPACK_OK : qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
}

int qp_lib_reference_tokenizer(const char *path, qp_tok **tok, qp_err *err)
{
    *tok = NULL;
    if (!ref_is_gguf(path)) {
        char file[4096];
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        return access(file, F_OK) ? 0 : qp_tok_load_file(tok, file, err);
    }
    struct gguf g = {0};
    char *json = NULL, name[4200];
    size_t len;
    int rc = gguf_open(&g, path, err);
    bool has = !rc && gguf_find_kv(&g, "tokenizer.ggml.tokens");
    if (has)
        rc = gguf_tokenizer_json(&g, &json, &len, err);
    gguf_close(&g);
    snprintf(name, sizeof name, "%s: tokenizer", path);
    if (!rc && has)
        rc = qp_tok_load_buffer(tok, json, len, name, err);
    free(json);
    return rc;
}

/* ---- provenance ---------------------------------------------------------- */

/* The order `qpack pack` records them in (packer/pack.c hash_sources). */
static const char *const extra_sources[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                            "model.safetensors.index.json"};
#define N_EXTRA (sizeof extra_sources / sizeof *extra_sources)

static int hash_one(const char *dir, const char *name, qpack_source_file *out, qp_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(out->name, sizeof out->name, "%s", name);
    return st_file_xxh3(path, &out->xxh3, &out->size, err);
}

int qpack_checkpoint_sources(const char *folder, qpack_source_file **files, size_t *n, qpack_error *err)
{
    *files = NULL;
    *n = 0;
    qp_err e = {{0}};
    struct st_model m;
    struct gguf g = {0};
    struct qwen3_config c;
    bool gguf = ref_is_gguf(folder);
    if (gguf ? open_gguf(folder, &g, &c, &m, &e) : st_open_dir(&m, folder, &e))
        return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    qpack_source_file *list = calloc(N_EXTRA + m.n_files, sizeof *list);
    size_t k = 0;
    int rc = list ? 0 : qp_fail_code(&e, QP_E_MEMORY, "out of memory");
    for (size_t i = gguf ? N_EXTRA : 0; !rc && i < N_EXTRA + m.n_files; i++) {
        const char *name = i < N_EXTRA ? extra_sources[i] : m.files[i - N_EXTRA].name;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", folder, name);
        if (i < N_EXTRA && access(path, R_OK) != 0)
            continue;
        if (gguf) {     /* a GGUF holds them all: its parts, as qpack pack records them */
            snprintf(list[k].name, sizeof list[k].name, "%s", name);
            rc = st_file_xxh3(m.files[i - N_EXTRA].path, &list[k].xxh3, &list[k].size, &e);
            k++;
            continue;
        }
        rc = hash_one(folder, name, &list[k++], &e);
    }
    gguf_close(&g);
    st_close(&m);
    if (rc) {
        free(list);
        return qp_lib_error(err, &e, QPACK_ERR_IO);
    }
    *files = list;
    *n = k;
    return QPACK_OK;
}

/* provenance["source_files"][i]: {"name", "size", "xxh3": 16 hex digits} */
static int parse_source(const cJSON *j, qpack_source_file *out)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(j, "size");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(j, "xxh3");
    if (!cJSON_IsString(name) || !cJSON_IsNumber(size) || size->valuedouble < 0 || !cJSON_IsString(hash) ||
        strlen(hash->valuestring) != 16 || strlen(name->valuestring) >= sizeof out->name)
        return -1;
    char *end;
    out->xxh3 = strtoull(hash->valuestring, &end, 16);
    if (*end)
        return -1;
    snprintf(out->name, sizeof out->name, "%s", name->valuestring);
    out->size = (uint64_t)size->valuedouble;
    return 0;
}

int qpack_container_sources(const char *path, qpack_source_file **files, size_t *n, qpack_error *err)
{
    *files = NULL;
    *n = 0;
    qp_err e = {{0}};
    struct qpk_file f;
    char container[4096];
    uint32_t ctx, slots;
    if (qp_lib_is_pinned(path) && qp_lib_pinned_container(path, container, sizeof container, &ctx, &slots, &e))
        return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    if (qpk_open(&f, qp_lib_is_pinned(path) ? container : path, 0, &e))
        return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    char *text = NULL;
    size_t len;
    int rc = qpk_read_section(&f, QPK_SEC_PROVENANCE, &text, &len, &e);
    qpk_close(&f);
    if (rc)
        return qp_lib_error(err, &e, QPACK_ERR_FORMAT);
    if (!text)
        return QPACK_OK;
    cJSON *prov = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(prov, "source_files");
    int count = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    qpack_source_file *out = calloc(count ? (size_t)count : 1, sizeof *out);
    rc = out ? QPACK_OK : qp_lib_fail(err, QPACK_ERR_MEMORY, "out of memory");
    for (int i = 0; !rc && i < count; i++)
        if (parse_source(cJSON_GetArrayItem(list, i), &out[i]))
            rc = qp_lib_fail(err, QPACK_ERR_FORMAT, "%s: provenance: source file %d is malformed", path, i);
    if (!rc && prov && !cJSON_IsObject(prov))
        rc = qp_lib_fail(err, QPACK_ERR_FORMAT, "%s: provenance is not a JSON object", path);
    if (!rc && !prov)
        rc = qp_lib_fail(err, QPACK_ERR_FORMAT, "%s: provenance is not valid JSON", path);
    cJSON_Delete(prov);
    if (rc) {
        free(out);
        return rc;
    }
    *files = out;
    *n = (size_t)count;
    return QPACK_OK;
}
