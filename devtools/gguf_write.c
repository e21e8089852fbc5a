/* gguf_write.c - qp-gguf-write: a Hugging Face Qwen3 folder as a GGUF file
 * the way llama.cpp's convert_hf_to_gguf.py and llama-quantize lay it out
 * (names, metadata keys, token types, block types), for the tests of the
 * GGUF reader and of `qpack pack FILE.gguf`. The quantisers are plain
 * round-to-nearest versions of ggml's (the scales of the largest value),
 * not its searches: what matters here is valid blocks of each type.
 *
 *   qp-gguf-write SRC OUT.gguf [--type T] [--embed-type T] [--output-type T]
 *                 [--split N] [--searched] [--dequantised DIR]
 *
 * T: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q5_K Q6_K (matrices; norms are F32).
 * --split N writes OUT's stem-0000i-of-0000N.gguf. --searched picks Q4_0's
 * scales as llama-quantize does with an importance matrix. --dequantised DIR
 * reads the file back and writes its values as a float32 checkpoint (the
 * float reference of the tests). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bf16.h"
#include "fsafe.h"
#include "gguf_model.h"
#include "hf_config.h"
#include "le.h"
#include "qwen3_names.h"
#include "safetensors.h"
#include "safetensors_write.h"

/* ------------------------------------------------------------ a byte buffer */

struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void put(struct buf *b, const void *v, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 4096;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            fprintf(stderr, "qp-gguf-write: out of memory\n");
            exit(1);
        }
    }
    memcpy(b->p + b->len, v, n);
    b->len += n;
}

static void put_u32(struct buf *b, uint32_t v) { uint8_t x[4]; put32(x, v); put(b, x, 4); }
static void put_u64(struct buf *b, uint64_t v) { uint8_t x[8]; put64(x, v); put(b, x, 8); }
static void put_str(struct buf *b, const char *s, size_t n) { put_u64(b, n); put(b, s, n); }
static void put_cstr(struct buf *b, const char *s) { put_str(b, s, strlen(s)); }
static void put_f16(uint8_t *p, float v) { put16(p, qp_f32_to_f16(v)); }

/* metadata: count as written */
struct meta {
    struct buf b;
    uint64_t n;
};

static void key(struct meta *m, const char *k, uint32_t type)
{
    put_cstr(&m->b, k);
    put_u32(&m->b, type);
    m->n++;
}
static void kv_u32(struct meta *m, const char *k, uint32_t v) { key(m, k, GGUF_V_U32); put_u32(&m->b, v); }
static void kv_u16(struct meta *m, const char *k, uint16_t v)
{
    key(m, k, GGUF_V_U16);
    uint8_t x[2];
    put16(x, v);
    put(&m->b, x, 2);
}
static void kv_i32(struct meta *m, const char *k, int32_t v) { key(m, k, GGUF_V_I32); put_u32(&m->b, (uint32_t)v); }
static void kv_f32(struct meta *m, const char *k, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    key(m, k, GGUF_V_F32);
    put_u32(&m->b, u);
}
static void kv_bool(struct meta *m, const char *k, bool v) { key(m, k, GGUF_V_BOOL); put(&m->b, &(uint8_t){v}, 1); }
static void kv_str(struct meta *m, const char *k, const char *v) { key(m, k, GGUF_V_STRING); put_cstr(&m->b, v); }

/* ---------------------------------------------------------------- quantisers */

static float amax_of(const float *x, int n, float *signed_max)
{
    float a = 0, s = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > a) {
            a = fabsf(x[i]);
            s = x[i];
        }
    if (signed_max)
        *signed_max = s;
    return a;
}

static void q8_0(const float *x, uint8_t *b)
{
    float d = amax_of(x, 32, NULL) / 127, id = d ? 1 / d : 0;
    put_f16(b, d);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

/* --searched: Q4_0's scale chosen as llama-quantize does with an importance
 * matrix, the weighted least error among max / (-8 + k / 10), k in -9..9
 * (weights x^2 + the block's mean square, standing in for the matrix), so
 * the block's largest value need not land on code 0 */
static bool q4_0_searched;

static float q4_0_scale(const float *x, float max)
{
    float ms = 0, best_d = max / -8, best_e = INFINITY;
    for (int j = 0; j < 32; j++)
        ms += x[j] * x[j] / 32;
    for (int k = -9; k <= 9 && q4_0_searched && max != 0; k++) {
        float d = qp_f16_to_f32(qp_f32_to_f16(max / (-8 + k / 10.0f))), e = 0;
        for (int j = 0; j < 32; j++) {
            float q = fminf(fmaxf(roundf(x[j] / d), -8), 7), r = x[j] - d * q;
            e += (x[j] * x[j] + ms) * r * r;
        }
        if (e < best_e) {
            best_e = e;
            best_d = d;
        }
    }
    return best_d;
}

static void q4_0(const float *x, uint8_t *b)
{
    float max;
    amax_of(x, 32, &max);
    float d = q4_0_scale(x, max), id = d ? 1 / d : 0;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        int a = (int)(x[j] * id + 8.5f), c = (int)(x[j + 16] * id + 8.5f);
        b[2 + j] = (uint8_t)((a > 15 ? 15 : a) | (c > 15 ? 15 : c) << 4);
    }
}

static void minmax(const float *x, int n, float *lo, float *hi)
{
    *lo = *hi = x[0];
    for (int i = 1; i < n; i++) {
        *lo = fminf(*lo, x[i]);
        *hi = fmaxf(*hi, x[i]);
    }
}

static void q4_1(const float *x, uint8_t *b)
{
    float lo, hi;
    minmax(x, 32, &lo, &hi);
    float d = (hi - lo) / 15, id = d ? 1 / d : 0;
    put_f16(b, d);
    put_f16(b + 2, lo);
    for (int j = 0; j < 16; j++) {
        int a = (int)((x[j] - lo) * id + 0.5f), c = (int)((x[j + 16] - lo) * id + 0.5f);
        b[4 + j] = (uint8_t)((a > 15 ? 15 : a) | (c > 15 ? 15 : c) << 4);
    }
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* the 6-bit scale and minimum of sub-block j into the 12 bytes (the
 * inverse of ggml's get_scale_min_k4) */
static void put_scale_min_k4(int j, uint8_t *q, unsigned sc, unsigned m)
{
    if (j < 4) {
        q[j] = (uint8_t)(q[j] | sc);
        q[j + 4] = (uint8_t)(q[j + 4] | m);
    } else {
        q[j + 4] = (uint8_t)((sc & 0xF) | (m & 0xF) << 4);
        q[j - 4] = (uint8_t)(q[j - 4] | (sc >> 4) << 6);
        q[j] = (uint8_t)(q[j] | (m >> 4) << 6);
    }
}

/* Q4_K (top 15) and Q5_K (top 31): 8 sub-blocks of 32, each x ~ d sc q - dmin m */
static void q45_k(const float *x, uint8_t *b, bool five)
{
    int top = five ? 31 : 15;
    float scale[8], mins[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float lo, hi;
        minmax(x + 32 * j, 32, &lo, &hi);
        lo = fminf(lo, 0);
        scale[j] = (hi - lo) / top;
        mins[j] = -lo;
        max_scale = fmaxf(max_scale, scale[j]);
        max_min = fmaxf(max_min, mins[j]);
    }
    memset(b, 0, five ? 176 : 144);
    put_f16(b, max_scale / 63);
    put_f16(b + 2, max_min / 63);
    float d = qp_f16_to_f32(le16(b)), dmin = qp_f16_to_f32(le16(b + 2));
    uint8_t *scales = b + 4, *qh = b + 16, *qs = five ? b + 48 : b + 16;
    for (int j = 0; j < 8; j++) {
        int ls = d ? clampi((int)lroundf(scale[j] / d), 0, 63) : 0;
        int lm = dmin ? clampi((int)lroundf(mins[j] / dmin), 0, 63) : 0;
        put_scale_min_k4(j, scales, (unsigned)ls, (unsigned)lm);
        float dd = d * ls, dm = dmin * lm;
        for (int l = 0; l < 32; l++) {
            int q = dd ? clampi((int)lroundf((x[32 * j + l] + dm) / dd), 0, top) : 0;
            int at = 32 * (j / 2) + l;
            qs[at] = (uint8_t)(qs[at] | (q & 0xF) << (j % 2 ? 4 : 0));
            if (five && q > 15)
                qh[l] = (uint8_t)(qh[l] | 1u << j);
        }
    }
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales, codes -32..31 */
static void q6_k(const float *x, uint8_t *b)
{
    float scale[16], max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        float s;
        amax_of(x + 16 * j, 16, &s);
        scale[j] = s / -32;
        if (fabsf(scale[j]) > amax) {
            amax = fabsf(scale[j]);
            max_scale = scale[j];
        }
    }
    memset(b, 0, 210);
    float iscale = max_scale ? -128 / max_scale : 0;
    put_f16(b + 208, iscale ? 1 / iscale : 0);
    float d = qp_f16_to_f32(le16(b + 208));
    int8_t *sc = (int8_t *)(b + 192);
    int L[256];
    for (int j = 0; j < 16; j++) {
        sc[j] = (int8_t)clampi((int)lroundf(iscale * scale[j]), -128, 127);
        float dd = d * sc[j];
        for (int l = 0; l < 16; l++)
            L[16 * j + l] = (dd ? clampi((int)lroundf(x[16 * j + l] / dd), -32, 31) : 0) + 32;
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int n = 0; n < 256; n += 128)
        for (int l = 0; l < 32; l++) {
            int q1 = L[n + l], q2 = L[n + l + 32], q3 = L[n + l + 64], q4 = L[n + l + 96];
            ql[n / 2 + l] = (uint8_t)((q1 & 0xF) | (q3 & 0xF) << 4);
            ql[n / 2 + l + 32] = (uint8_t)((q2 & 0xF) | (q4 & 0xF) << 4);
            qh[n / 4 + l] = (uint8_t)(q1 >> 4 | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
        }
}

/* n values (a multiple of the block) of type into out */
static void quantise(uint32_t type, const float *x, uint64_t n, uint8_t *out)
{
    uint32_t blk = gguf_type_block(type), bytes = gguf_type_block_bytes(type);
    for (uint64_t i = 0; i < n / blk; i++, x += blk, out += bytes)
        switch (type) {
        case GGUF_F32: memcpy(out, x, 4); break;
        case GGUF_F16: put16(out, qp_f32_to_f16(*x)); break;
        case GGUF_BF16: put16(out, qp_f32_to_bf16(*x)); break;
        case GGUF_Q8_0: q8_0(x, out); break;
        case GGUF_Q4_0: q4_0(x, out); break;
        case GGUF_Q4_1: q4_1(x, out); break;
        case GGUF_Q4_K: q45_k(x, out, false); break;
        case GGUF_Q5_K: q45_k(x, out, true); break;
        case GGUF_Q6_K: q6_k(x, out); break;
        }
}

static int type_from_name(const char *s, uint32_t *type)
{
    static const uint32_t all[] = {GGUF_F32, GGUF_F16, GGUF_BF16, GGUF_Q8_0, GGUF_Q4_0,
                                   GGUF_Q4_1, GGUF_Q4_K, GGUF_Q5_K, GGUF_Q6_K};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!strcmp(s, gguf_type_name(all[i]))) {
            *type = all[i];
            return 0;
        }
    return -1;
}

/* ----------------------------------------------------------------- tokenizer */

static bool looks_special(const char *t)
{
    size_t n = strlen(t);
    return n >= 4 && !strncmp(t, "<|", 2) && !strcmp(t + n - 2, "|>");
}

/* convert_hf_to_gguf's vocabulary: a token per row, [PADi] where none */
static void tokenizer_meta(struct meta *m, const cJSON *tok, uint32_t vocab_size)
{
    const cJSON *model = cJSON_GetObjectItem(tok, "model"), *vocab = cJSON_GetObjectItem(model, "vocab");
    const cJSON *added = cJSON_GetObjectItem(tok, "added_tokens"), *merges = cJSON_GetObjectItem(model, "merges");
    const char **text = calloc(vocab_size, sizeof *text);
    int32_t *type = calloc(vocab_size, sizeof *type);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
        if ((uint32_t)e->valuedouble < vocab_size) {
            text[(uint32_t)e->valuedouble] = e->string;
            type[(uint32_t)e->valuedouble] = 1;
        }
    cJSON_ArrayForEach(e, added) {
        uint32_t id = (uint32_t)cJSON_GetObjectItem(e, "id")->valuedouble;
        const char *c = cJSON_GetObjectItem(e, "content")->valuestring;
        if (id < vocab_size) {
            text[id] = c;
            type[id] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) || looks_special(c) ? 3 : 4;
        }
    }
    kv_str(m, "tokenizer.ggml.model", "gpt2");
    kv_str(m, "tokenizer.ggml.pre", "qwen2");
    key(m, "tokenizer.ggml.tokens", GGUF_V_ARRAY);
    put_u32(&m->b, GGUF_V_STRING);
    put_u64(&m->b, vocab_size);
    for (uint32_t i = 0; i < vocab_size; i++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", i);
        put_cstr(&m->b, text[i] ? text[i] : pad);
    }
    key(m, "tokenizer.ggml.token_type", GGUF_V_ARRAY);
    put_u32(&m->b, GGUF_V_I32);
    put_u64(&m->b, vocab_size);
    for (uint32_t i = 0; i < vocab_size; i++)
        put_u32(&m->b, (uint32_t)(type[i] ? type[i] : 5));
    key(m, "tokenizer.ggml.merges", GGUF_V_ARRAY);
    put_u32(&m->b, GGUF_V_STRING);
    put_u64(&m->b, (uint64_t)cJSON_GetArraySize(merges));
    cJSON_ArrayForEach(e, merges) {
        char pair[1024];
        if (cJSON_IsString(e))
            snprintf(pair, sizeof pair, "%s", e->valuestring);
        else
            snprintf(pair, sizeof pair, "%s %s", cJSON_GetArrayItem(e, 0)->valuestring,
                     cJSON_GetArrayItem(e, 1)->valuestring);
        put_cstr(&m->b, pair);
    }
    free(text);
    free(type);
}

/* ------------------------------------------------------------------ the file */

struct planned {
    const struct st_tensor *src;
    char name[GGUF_MAX_NAME];
    uint32_t type;
    uint64_t nbytes, offset;
};

static void model_meta(struct meta *m, const struct qwen3_config *c)
{
    kv_str(m, "general.architecture", "qwen3");
    kv_str(m, "general.name", "qp-gguf-write");
    kv_u32(m, "qwen3.block_count", c->num_hidden_layers);
    kv_u32(m, "qwen3.context_length", c->max_position_embeddings);
    kv_u32(m, "qwen3.embedding_length", c->hidden_size);
    kv_u32(m, "qwen3.feed_forward_length", c->intermediate_size);
    kv_u32(m, "qwen3.attention.head_count", c->num_attention_heads);
    kv_u32(m, "qwen3.attention.head_count_kv", c->num_key_value_heads);
    kv_f32(m, "qwen3.rope.freq_base", (float)c->rope_theta);
    kv_f32(m, "qwen3.attention.layer_norm_rms_epsilon", (float)c->rms_norm_eps);
    kv_u32(m, "qwen3.attention.key_length", c->head_dim);
    kv_u32(m, "qwen3.attention.value_length", c->head_dim);
    if (c->bos_token_id >= 0)
        kv_u32(m, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos_token_id);
    if (c->eos_token_id >= 0)
        kv_u32(m, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos_token_id);
    kv_bool(m, "tokenizer.ggml.add_bos_token", false);
}

static uint64_t align_up(uint64_t v) { return (v + GGUF_DEFAULT_ALIGNMENT - 1) / GGUF_DEFAULT_ALIGNMENT * GGUF_DEFAULT_ALIGNMENT; }

/* One part: header, metadata, its tensors' infos, their data. */
static int write_part(const char *path, const struct meta *m, struct planned *pl, uint32_t first, uint32_t n,
                      qp_err *err)
{
    struct buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, n);
    put_u64(&b, m->n);
    put(&b, m->b.p, m->b.len);
    uint64_t at = 0;
    for (uint32_t i = first; i < first + n; i++) {
        const struct st_tensor *s = pl[i].src;
        put_cstr(&b, pl[i].name);
        put_u32(&b, s->ndim);
        for (uint32_t d = 0; d < s->ndim; d++)
            put_u64(&b, s->shape[s->ndim - 1 - d]);
        put_u32(&b, pl[i].type);
        pl[i].offset = at;
        put_u64(&b, at);
        at = align_up(at + pl[i].nbytes);
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    put(&b, zeros, align_up(b.len) - b.len);
    size_t data_at = b.len;
    for (uint32_t i = first; i < first + n; i++) {
        const struct st_tensor *s = pl[i].src;
        float *x = malloc(s->numel * sizeof *x);
        uint8_t *q = malloc(pl[i].nbytes);
        if (!x || !q) {
            fprintf(stderr, "qp-gguf-write: out of memory\n");
            exit(1);
        }
        st_read_f32(s, 0, s->numel, x);
        quantise(pl[i].type, x, s->numel, q);
        put(&b, zeros, data_at + pl[i].offset - b.len);
        put(&b, q, pl[i].nbytes);
        free(x);
        free(q);
    }
    const char *const inputs[] = {NULL};
    int rc = fs_write_file(path, b.p, b.len, inputs, err);
    free(b.p);
    return rc;
}

static char *read_json(const char *dir, const char *name)
{
    char path[4096], *text = NULL;
    size_t len;
    qp_err err;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return fs_read_input(path, 64u << 20, &text, &len, &err) ? NULL : text;
}

/* --dequantised: the GGUF's own values, read back, as a float32 folder */
static int write_dequantised(const char *gguf_path, const char *dir, const char *src_dir, qp_err *err)
{
    struct gguf g;
    struct st_model m;
    struct qwen3_config c;
    if (gguf_open(&g, gguf_path, err) || gguf_config(&g, &c, err) || gguf_checkpoint(&g, &m, err))
        return -1;
    mkdir(dir, 0755);
    char path[4096];
    struct stw_tensor *decl = calloc(m.n_tensors, sizeof *decl);
    for (uint32_t i = 0; i < m.n_tensors; i++) {
        decl[i] = (struct stw_tensor){.name = m.tensors[i].name, .dtype = ST_F32, .ndim = m.tensors[i].ndim};
        memcpy(decl[i].shape, m.tensors[i].shape, sizeof decl[i].shape);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stw_writer *w;
    int rc = stw_open(&w, path, decl, m.n_tensors, err);
    for (uint32_t i = 0; !rc && i < m.n_tensors; i++) {
        float *x = malloc(m.tensors[i].numel * sizeof *x);
        st_read_f32(&m.tensors[i], 0, m.tensors[i].numel, x);
        rc = stw_write(w, x, m.tensors[i].numel * 4, err);
        free(x);
    }
    rc = rc ? (stw_abort(w), -1) : stw_finish(w, err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!rc)
        rc = hf_config_write_dtype(path, &c, "float32", err);
    for (const char *const *f = (const char *const[]){"tokenizer.json", "tokenizer_config.json", NULL}; !rc && *f; f++) {
        char *text = read_json(src_dir, *f);
        const char *const inputs[] = {NULL};
        snprintf(path, sizeof path, "%s/%s", dir, *f);
        if (text)
            rc = fs_write_file(path, text, strlen(text), inputs, err);
        free(text);
    }
    free(decl);
    gguf_close(&g);
    st_close(&m);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: qp-gguf-write SRC OUT.gguf [--type T] [--embed-type T] [--output-type T] [--split N]\n"
                    "                     [--searched] [--dequantised DIR]\n"
                    "T: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K Q5_K Q6_K\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    const char *src = argv[1], *out = argv[2], *deq = NULL;
    uint32_t type = GGUF_Q8_0, embed_type = 0, output_type = 0, split = 1;
    for (int i = 3; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--type") && !type_from_name(v, &type))
            i++;
        else if (!strcmp(argv[i], "--embed-type") && !type_from_name(v, &embed_type))
            i++;
        else if (!strcmp(argv[i], "--output-type") && !type_from_name(v, &output_type))
            i++;
        else if (!strcmp(argv[i], "--split") && atoi(v) >= 1 && atoi(v) <= 99)
            split = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--searched"))
            q4_0_searched = true;
        else if (!strcmp(argv[i], "--dequantised") && *v)
            deq = argv[++i];
        else
            return usage();
    }
    qp_err err = {{0}};
    char path[4096];
    struct qwen3_config c;
    struct st_model model;
    snprintf(path, sizeof path, "%s/config.json", src);
    char *tok_text = read_json(src, "tokenizer.json"), *cfg_text = read_json(src, "tokenizer_config.json");
    cJSON *tok = tok_text ? cJSON_Parse(tok_text) : NULL, *tcfg = cfg_text ? cJSON_Parse(cfg_text) : NULL;
    if (hf_config_load(path, &c, &err) || st_open_dir(&model, src, &err)) {
        fprintf(stderr, "qp-gguf-write: %s\n", err.msg);
        return 1;
    }
    if (!tok) {
        fprintf(stderr, "qp-gguf-write: %s/tokenizer.json: missing or not JSON\n", src);
        return 1;
    }
    struct meta m = {0};
    model_meta(&m, &c);
    tokenizer_meta(&m, tok, c.vocab_size);
    const cJSON *tpl = cJSON_GetObjectItem(tcfg, "chat_template");
    if (cJSON_IsString(tpl))
        kv_str(&m, "tokenizer.chat_template", tpl->valuestring);
    struct planned *pl = calloc(model.n_tensors, sizeof *pl);
    uint32_t n = 0;
    for (uint32_t i = 0; i < model.n_tensors; i++) {
        unsigned role, layer;
        const struct st_tensor *s = &model.tensors[i];
        if (!qwen3_tensor_role(s->name, &role, &layer) || (role == QPK_ROLE_LM_HEAD && c.tie_word_embeddings))
            continue;
        pl[n].src = s;
        qwen3_gguf_tensor_name(pl[n].name, sizeof pl[n].name, role, layer);
        pl[n].type = s->ndim == 1 ? GGUF_F32
                     : role == QPK_ROLE_EMBED && embed_type ? embed_type
                     : role == QPK_ROLE_LM_HEAD && output_type ? output_type
                                                              : type;
        pl[n].nbytes = s->numel / gguf_type_block(pl[n].type) * gguf_type_block_bytes(pl[n].type);
        n++;
    }
    int rc = 0;
    if (split == 1) {
        rc = write_part(out, &m, pl, 0, n, &err);
    } else {
        size_t stem = strlen(out) > 5 && !strcmp(out + strlen(out) - 5, ".gguf") ? strlen(out) - 5 : strlen(out);
        uint32_t per = (n + split - 1) / split, first = 0;
        for (uint32_t k = 0; !rc && k < split; k++) {
            struct meta part = {0};
            if (k == 0) {
                put(&part.b, m.b.p, m.b.len);
                part.n = m.n;
            }
            kv_u16(&part, "split.no", (uint16_t)k);
            kv_u16(&part, "split.count", (uint16_t)split);
            kv_i32(&part, "split.tensors.count", (int32_t)n);
            uint32_t count = first + per > n ? n - first : per;
            snprintf(path, sizeof path, "%.*s-%05u-of-%05u.gguf", (int)stem, out, k + 1, split);
            rc = write_part(path, &part, pl, first, count, &err);
            first += count;
            free(part.b.p);
        }
        snprintf(path, sizeof path, "%.*s-00001-of-%05u.gguf", (int)stem, out, split);
    }
    if (!rc && deq)
        rc = write_dequantised(split == 1 ? out : path, deq, src, &err);
    if (rc)
        fprintf(stderr, "qp-gguf-write: %s\n", err.msg);
    free(pl);
    free(m.b.p);
    cJSON_Delete(tok);
    cJSON_Delete(tcfg);
    free(tok_text);
    free(cfg_text);
    st_close(&model);
    return rc ? 1 : 0;
}
