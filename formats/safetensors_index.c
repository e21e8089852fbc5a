/* safetensors_index.c - a sharded safetensors folder: the index
 * (model.safetensors.index.json) read strictly, its shards opened, and the
 * two checked against each other (st_open_dir; the rules are in
 * safetensors.h). safetensors.c reads each shard. */
#include "safetensors.h"
#include "safetensors_int.h"

#include "fsafe.h"
#include "json_strict.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* One weight_map line: tensor -> shard (index into the sorted shard names). */
struct index_entry {
    const char *tensor;         /* points into the index's JSON tree */
    uint32_t shard;
};

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct index_entry *)a)->tensor,
                  ((const struct index_entry *)b)->tensor);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard must be a file directly inside the folder: no separator, no way up. */
static int shard_name_ok(const char *s)
{
    return st_name_valid(s, strlen(s)) && !strchr(s, '/') && !strstr(s, "..") &&
           strcmp(s, ".") != 0;
}

/* The parsed index: entries sorted by tensor, shard names sorted and unique. */
struct index {
    cJSON *root;
    struct index_entry *entries;
    uint32_t n_entries;
    const char **shards;        /* point into root */
    uint32_t n_shards;
};

static void index_free(struct index *ix)
{
    cJSON_Delete(ix->root);
    free(ix->entries);
    free(ix->shards);
    memset(ix, 0, sizeof(*ix));
}

static int index_shards(struct index *ix, const char *path, qp_err *err)
{
    const char **names = ix->shards;
    uint32_t n = 0;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix->root, "weight_map");
    for (const cJSON *kv = wm->child; kv; kv = kv->next)
        names[n++] = kv->valuestring;
    qsort(names, n, sizeof(*names), cmp_str);
    uint32_t unique = 0;
    for (uint32_t i = 0; i < n; i++)
        if (unique == 0 || strcmp(names[unique - 1], names[i]) != 0)
            names[unique++] = names[i];
    if (unique > ST_MAX_SHARDS)
        return qp_fail(err, "%s: names %u shards, more than %u", path, unique, ST_MAX_SHARDS);
    ix->n_shards = unique;
    uint32_t i = 0;
    for (const cJSON *kv = wm->child; kv; kv = kv->next, i++) {
        const char **hit = bsearch(&kv->valuestring, names, unique, sizeof(*names), cmp_str);
        ix->entries[i].tensor = kv->string;
        ix->entries[i].shard = (uint32_t)(hit - names);
    }
    return 0;
}

static int index_load(struct index *ix, const char *path, uint64_t *size, qp_err *err)
{
    char nb[ST_NAME_SHOWN], vb[48];
    char *text = NULL;
    size_t len = 0;
    memset(ix, 0, sizeof(*ix));
    if (fs_read_input(path, ST_MAX_HEADER_BYTES, &text, &len, err))
        return -1;
    *size = len;
    /* Strict: the length includes the terminating NUL, which must follow
     * the value, so neither trailing bytes nor an embedded NUL pass. */
    int raw_nul = memchr(text, 0, len) != NULL;
    ix->root = raw_nul ? NULL : cJSON_ParseWithLengthOpts(text, len + 1, NULL, 1);
    int escaped_nul = json_has_escaped_nul(text, len);
    free(text);
    if (!ix->root)
        return qp_fail(err, "%s: not valid JSON", path);
    if (!cJSON_IsObject(ix->root))
        return qp_fail(err, "%s: not a JSON object", path);
    if (escaped_nul)
        return qp_fail(err, "%s: contains an escaped NUL (\\u0000)", path);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix->root, "weight_map");
    if (!wm)
        return qp_fail(err, "%s: has no \"weight_map\"", path);
    if (!cJSON_IsObject(wm))
        return qp_fail(err, "%s: \"weight_map\" is %s, not an object", path, st_describe(wm, vb));
    uint32_t n = 0;
    for (const cJSON *kv = wm->child; kv; kv = kv->next, n++) {
        if (!st_name_valid(kv->string, strlen(kv->string)))
            return qp_fail(err, "%s: weight_map has an empty or invalid tensor name", path);
        if (!cJSON_IsString(kv))
            return qp_fail(err, "%s: weight_map[\"%s\"] is %s, not a shard file name", path,
                           st_show(kv->string, nb), st_describe(kv, vb));
        if (!shard_name_ok(kv->valuestring))
            return qp_fail(err, "%s: shard name \"%s\" is not a plain file name in the folder "
                           "(no '/' or '..')", path, st_show(kv->valuestring, nb));
    }
    if (n == 0)
        return qp_fail(err, "%s: \"weight_map\" is empty", path);
    ix->entries = calloc(n, sizeof(*ix->entries));
    ix->shards = calloc(n, sizeof(*ix->shards));
    if (!ix->entries || !ix->shards)
        return qp_fail(err, "%s: out of memory", path);
    ix->n_entries = n;
    if (index_shards(ix, path, err))
        return -1;
    qsort(ix->entries, n, sizeof(*ix->entries), cmp_entry);
    for (uint32_t i = 1; i < n; i++)
        if (strcmp(ix->entries[i - 1].tensor, ix->entries[i].tensor) == 0)
            return qp_fail(err, "%s: weight_map lists tensor \"%s\" twice", path,
                           st_show(ix->entries[i].tensor, nb));
    return json_refuse_duplicate_keys(ix->root, path, err);
}

/* Maps and parses every shard, then gathers all tensors into m. */
static int open_shards(struct st_model *m, const struct index *ix, const char *dir,
                       qp_err *err)
{
    char nb[ST_NAME_SHOWN];
    m->files = calloc(ix->n_shards, sizeof(*m->files));
    if (!m->files)
        return qp_fail(err, "%s: out of memory", dir);
    m->n_files = ix->n_shards;
    struct st_tensor **per = calloc(ix->n_shards, sizeof(*per));
    uint32_t *count = calloc(ix->n_shards, sizeof(*count));
    uint64_t total = 0;
    int rc = per && count ? 0 : qp_fail(err, "%s: out of memory", dir);
    for (uint32_t i = 0; i < ix->n_shards && rc == 0; i++) {
        struct st_file *f = &m->files[i];
        struct stat st;
        f->path = st_join_path(dir, ix->shards[i]);
        f->name = st_dup_str(ix->shards[i]);
        if (!f->path || !f->name)
            rc = qp_fail(err, "%s: out of memory", dir);
        else if (stat(f->path, &st) != 0)
            rc = qp_fail(err, "%s: shard \"%s\" named by the index does not exist (%s)",
                         m->index_path, st_show(f->name, nb), strerror(errno));
        else if (!S_ISREG(st.st_mode))
            rc = qp_fail(err, "%s: shard \"%s\" named by the index is not a regular file",
                         m->index_path, st_show(f->name, nb));
        else
            rc = st_mmap_path(f, err) ||
                 st_parse_buffer(f->map, f->size, f->path, i, &per[i], &count[i], err);
        total += count[i];
    }
    if (rc == 0 && total > UINT32_MAX)
        rc = qp_fail(err, "%s: more than 2^32 tensors", dir);
    if (rc == 0 && !(m->tensors = calloc(total + 1, sizeof(*m->tensors))))
        rc = qp_fail(err, "%s: out of memory", dir);
    for (uint32_t i = 0; i < ix->n_shards && per; i++) {
        if (rc == 0) {                                /* move, names included */
            memcpy(m->tensors + m->n_tensors, per[i], count[i] * sizeof(*per[i]));
            m->n_tensors += count[i];
            free(per[i]);
        } else {
            st_free_tensors(per[i], count[i]);
        }
    }
    free(per);
    free(count);
    return rc ? -1 : 0;
}

/* The shards and the index must say the same thing about every tensor. */
static int check_against_index(const struct st_model *m, const struct index *ix, qp_err *err)
{
    char nb[ST_NAME_SHOWN];
    const struct st_tensor *t = m->tensors;
    for (uint32_t i = 1; i < m->n_tensors; i++)
        if (strcmp(t[i - 1].name, t[i].name) == 0)
            return qp_fail(err, "%s: tensor \"%s\" is in two shards, %s and %s",
                           m->index_path, st_show(t[i].name, nb), m->files[t[i - 1].file_index].name,
                           m->files[t[i].file_index].name);
    uint32_t i = 0, j = 0;
    while (i < m->n_tensors || j < ix->n_entries) {
        int c = i == m->n_tensors ? 1 : j == ix->n_entries ? -1
              : strcmp(t[i].name, ix->entries[j].tensor);
        if (c < 0)
            return qp_fail(err, "%s: tensor \"%s\" of shard %s is not listed in the index",
                           m->index_path, st_show(t[i].name, nb), m->files[t[i].file_index].name);
        const char *listed = m->files[ix->entries[j].shard].name;
        if (c > 0)
            return qp_fail(err, "%s: the index puts tensor \"%s\" in shard %s, which does not "
                           "contain it", m->index_path, st_show(ix->entries[j].tensor, nb), listed);
        if (t[i].file_index != ix->entries[j].shard)
            return qp_fail(err, "%s: the index puts tensor \"%s\" in shard %s, but it is in %s",
                           m->index_path, st_show(t[i].name, nb), listed,
                           m->files[t[i].file_index].name);
        i++, j++;
    }
    return 0;
}

static int open_sharded(struct st_model *m, const char *dir, qp_err *err)
{
    struct index ix;
    int rc = index_load(&ix, m->index_path, &m->index_size, err);
    if (rc == 0)
        rc = open_shards(m, &ix, dir, err);
    if (rc == 0) {
        qsort(m->tensors, m->n_tensors, sizeof(*m->tensors), st_cmp_tensor_name_file);
        rc = check_against_index(m, &ix, err);
    }
    index_free(&ix);
    return rc;
}

int st_open_dir(struct st_model *m, const char *dir, qp_err *err)
{
    struct stat st;
    memset(m, 0, sizeof(*m));
    char *index = st_join_path(dir, ST_INDEX_NAME);
    if (!index)
        return qp_fail(err, "%s: out of memory", dir);
    if (stat(index, &st) == 0) {
        m->index_path = index;
        if (open_sharded(m, dir, err)) {
            st_close(m);
            return -1;
        }
        return 0;
    }
    free(index);
    char *single = st_join_path(dir, ST_SINGLE_NAME);
    if (!single)
        return qp_fail(err, "%s: out of memory", dir);
    if (stat(single, &st) != 0) {
        free(single);
        return qp_fail(err, "%s: neither %s nor %s is there", dir, ST_SINGLE_NAME, ST_INDEX_NAME);
    }
    int rc = st_open_file(m, single, err);
    free(single);
    return rc;
}
