/* safetensors_int.h - what safetensors.c shares with safetensors_index.c
 * (the sharded-folder reader): limits, names and helpers. Private to the two. */
#ifndef QP_SAFETENSORS_INT_H
#define QP_SAFETENSORS_INT_H

#include <cjson/cJSON.h>

#include "safetensors.h"

/* JSON numbers are doubles: integers above 2^53 cannot be told apart, so
 * dims and offsets beyond it are refused rather than silently rounded. */
#define ST_MAX_JSON_INT 9007199254740992.0
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"
#define ST_HASH_CHUNK (8u << 20)
/* Names from untrusted files are shown cut to this many bytes, control
 * characters replaced, so that every message stays one short line. */
#define ST_NAME_SHOWN 96

const char *st_show(const char *name, char out[ST_NAME_SHOWN]);
const char *st_describe(const cJSON *v, char out[48]);
char *st_join_path(const char *dir, const char *name);
char *st_dup_str(const char *s);
int st_cmp_tensor_name_file(const void *a, const void *b);
int st_mmap_path(struct st_file *f, qp_err *err);

#endif
