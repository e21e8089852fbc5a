/* test_gguf.c - the GGUF reader: hand-built blocks of each quantised type
 * against values worked out from their fields, files written here (a
 * minimal GGUF builder) refused one defect at a time and at every
 * truncation, and the tokenizer rebuilt from GGUF metadata against the
 * Hugging Face ids of the conformance data. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "gguf_model.h"
#include "le.h"
#include "tok_test_util.h"
#include "tokenizer.h"
#include "qp_test.h"

#define SRC QP_SOURCE_DIR

/* ------------------------------------------------------------- a builder */

struct buf {
    uint8_t *p;
    size_t len, cap;
};

/* Appends n bytes; v may point into b itself (a test repeats its own
 * metadata), so an offset is kept across the growth. */
static void put(struct buf *b, const void *v, size_t n)
{
    const uint8_t *src = v;
    int inside = b->p && src >= b->p && src < b->p + b->len;
    size_t at = inside ? (size_t)(src - b->p) : 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(p);
        b->p = p;
        b->cap = cap;
    }
    memmove(b->p + b->len, inside ? b->p + at : src, n);
    b->len += n;
}
static void u32(struct buf *b, uint32_t v) { uint8_t x[4]; put32(x, v); put(b, x, 4); }
static void u64(struct buf *b, uint64_t v) { uint8_t x[8]; put64(x, v); put(b, x, 8); }
static void str(struct buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }

/* A GGUF v3 with the given metadata bytes (n_kv pairs) and one F32 tensor
 * "t" of 8 values at data offset off (the data region holds 64 bytes). */
static struct buf file_with(const struct buf *kv, uint64_t n_kv, const char *tname, uint32_t type, uint64_t off,
                            uint64_t ne0)
{
    struct buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, 1);
    u64(&b, n_kv);
    if (kv->len)
        put(&b, kv->p, kv->len);
    str(&b, tname);
    u32(&b, 1);
    u64(&b, ne0);
    u32(&b, type);
    u64(&b, off);
    static const uint8_t zero[96];
    put(&b, zero, (32 - b.len % 32) % 32);
    float v[16];
    for (int i = 0; i < 16; i++)
        v[i] = (float)i;
    put(&b, v, sizeof v);
    return b;
}

static struct buf arch_kv(void)
{
    struct buf kv = {0};
    str(&kv, "general.architecture");
    u32(&kv, GGUF_V_STRING);
    str(&kv, "qwen3");
    return kv;
}

static int parse(const struct buf *b, struct gguf *g, qp_err *err)
{
    memset(g, 0, sizeof *g);
    g->name = strdup("t.gguf");
    return gguf_parse(g, b->p, b->len, "t.gguf", 0, err);
}

START_TEST(a_minimal_file_reads_back)
{
    struct buf kv = arch_kv();
    struct buf b = file_with(&kv, 1, "t", GGUF_F32, 0, 8);
    struct gguf g;
    qp_err err;
    ck_assert_int_eq(parse(&b, &g, &err), 0);
    ck_assert_uint_eq(g.n_tensors, 1);
    ck_assert_uint_eq(g.tensors[0].numel, 8);
    float out[8];
    gguf_dequantize(GGUF_F32, g.tensors[0].data, 8, out);
    ck_assert(out[7] == 7.0f);
    const char *s;
    size_t n;
    ck_assert_int_eq(gguf_get_str(&g, "general.architecture", false, &s, &n, &err), 0);
    ck_assert(n == 5 && !memcmp(s, "qwen3", 5));
    uint32_t v;
    ck_assert_int_eq(gguf_get_u32(&g, "general.architecture", false, &v, &err), -1);
    ck_assert_msg(strstr(err.msg, "is string, not an integer"), "%s", err.msg);
    ck_assert_int_eq(gguf_get_u32(&g, "absent", true, &v, &err), 1);
    gguf_close(&g);
    free(b.p);
    free(kv.p);
}
END_TEST

/* every prefix of a valid file is refused with a message, nothing read past it */
START_TEST(every_truncation_is_refused)
{
    struct buf kv = arch_kv();
    struct buf b = file_with(&kv, 1, "t", GGUF_F32, 0, 8);
    for (size_t n = 0; n < b.len - 32; n++) {
        struct buf cut = {malloc(n + 1), n};
        memcpy(cut.p, b.p, n);
        struct gguf g;
        qp_err err = {{0}};
        ck_assert_msg(parse(&cut, &g, &err) == -1, "a file cut at %zu bytes was read", n);
        ck_assert_msg(err.msg[0], "no message at %zu", n);
        gguf_close(&g);
        free(cut.p);
    }
    free(b.p);
    free(kv.p);
}
END_TEST

struct defect {
    const char *what, *message;
};

static const struct defect defects[] = {
    {"magic", "not a GGUF file"},
    {"version", "GGUF version 1 (qpack reads versions 2 and 3)"},
    {"duplicate key", "key general.architecture appears twice"},
    {"key type", "has value type 13"},
    {"bool", "a bool of 2"},
    {"array count", "does not fit in the"},
    {"alignment", "general.alignment 48 is not a power of two"},
    {"misaligned", "is not aligned to 32"},
    {"past the end", "ends past the file's"},
    {"unknown type", "has ggml type Q2_K, which qpack does not read"},
    {"block", "not a multiple of its 32-element blocks"},
    {"duplicate tensor", "tensor t appears twice"},
    {"overlap", "tensors a and b overlap"},
};

START_TEST(each_defect_is_refused_by_name)
{
    const struct defect *d = &defects[_i];
    struct buf kv = arch_kv(), b = {0};
    uint64_t n_kv = 1;
    if (!strcmp(d->what, "duplicate key")) {
        put(&kv, kv.p, kv.len);
        n_kv = 2;
    } else if (!strcmp(d->what, "key type")) {
        str(&kv, "x");
        u32(&kv, 13);
        n_kv = 2;
    } else if (!strcmp(d->what, "bool")) {
        str(&kv, "x");
        u32(&kv, GGUF_V_BOOL);
        put(&kv, "\2", 1);
        n_kv = 2;
    } else if (!strcmp(d->what, "array count")) {
        str(&kv, "x");
        u32(&kv, GGUF_V_ARRAY);
        u32(&kv, GGUF_V_U32);
        u64(&kv, UINT64_C(1) << 40);
        n_kv = 2;
    } else if (!strcmp(d->what, "alignment")) {
        str(&kv, "general.alignment");
        u32(&kv, GGUF_V_U32);
        u32(&kv, 48);
        n_kv = 2;
    }
    uint32_t type = !strcmp(d->what, "unknown type") ? 10 : !strcmp(d->what, "block") ? GGUF_Q8_0 : GGUF_F32;
    uint64_t off = !strcmp(d->what, "misaligned") ? 4 : !strcmp(d->what, "past the end") ? 64 : 0;
    b = file_with(&kv, n_kv, "t", type, off, !strcmp(d->what, "block") ? 8 : 8);
    if (!strcmp(d->what, "magic"))
        b.p[0] = 'X';
    if (!strcmp(d->what, "version"))
        put32(b.p + 4, 1);
    if (!strcmp(d->what, "duplicate tensor") || !strcmp(d->what, "overlap")) {
        /* two tensor infos: the same name, or a and b over the same bytes */
        bool dup = !strcmp(d->what, "duplicate tensor");
        free(b.p);
        b = (struct buf){0};
        put(&b, "GGUF", 4);
        u32(&b, 3);
        u64(&b, 2);
        u64(&b, 1);
        put(&b, kv.p, kv.len);
        for (int k = 0; k < 2; k++) {
            str(&b, dup ? "t" : k ? "b" : "a");
            u32(&b, 1);
            u64(&b, 8);
            u32(&b, GGUF_F32);
            u64(&b, dup ? (uint64_t)32 * k : (uint64_t)0);
        }
        static const uint8_t zero[128];
        put(&b, zero, (32 - b.len % 32) % 32 + 64);
    }
    struct gguf g;
    qp_err err = {{0}};
    ck_assert_int_eq(parse(&b, &g, &err), -1);
    ck_assert_msg(strstr(err.msg, d->message) && strstr(err.msg, "t.gguf"), "%s: %s", d->what, err.msg);
    gguf_close(&g);
    free(b.p);
    free(kv.p);
}
END_TEST

/* A GGUF v3 with the given metadata and one tensor "t" of type and
 * dimensions ne[0..n_dims) at data offset 0, followed by data bytes of
 * data. */
static struct buf file_dims(const struct buf *kv, uint64_t n_kv, uint32_t type, const uint64_t *ne, uint32_t n_dims,
                            size_t data)
{
    struct buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, 1);
    u64(&b, n_kv);
    if (kv->len)
        put(&b, kv->p, kv->len);
    str(&b, "t");
    u32(&b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        u64(&b, ne[d]);
    u32(&b, type);
    u64(&b, 0);
    uint8_t *zero = calloc(1, data + 32);
    put(&b, zero, (32 - b.len % 32) % 32 + data);
    free(zero);
    return b;
}

/* Sizes that wrap: 2^62 F32 elements are 2^64 bytes, which is 0 in a
 * u64; the element count alone is below the 2^62 bound. */
START_TEST(a_tensor_size_past_2_62_bytes_is_refused)
{
    struct buf kv = arch_kv();
    static const uint64_t wraps[][2] = {{UINT64_C(1) << 40, UINT64_C(1) << 22}, {UINT64_C(1) << 39, UINT64_C(1) << 22}};
    for (int k = 0; k < 2; k++) {
        struct buf b = file_dims(&kv, 1, GGUF_F32, wraps[k], 2, 64);
        struct gguf g;
        qp_err err = {{0}};
        ck_assert_int_eq(parse(&b, &g, &err), -1);
        ck_assert_msg(strstr(err.msg, "t.gguf: tensor t:") && strstr(err.msg, "F32 take 2^62 bytes or more"), "%s",
                      err.msg);
        gguf_close(&g);
        free(b.p);
    }
    free(kv.p);
}
END_TEST

/* a string value of n bytes (it may hold a NUL) */
static void kv_str(struct buf *kv, const char *key, const char *v, size_t n)
{
    str(kv, key);
    u32(kv, GGUF_V_STRING);
    u64(kv, n);
    put(kv, v, n);
}

static void kv_u32(struct buf *kv, const char *key, uint32_t v)
{
    str(kv, key);
    u32(kv, GGUF_V_U32);
    u32(kv, v);
}

/* A Qwen3's hyperparameters (hidden 64, 4 heads of 16, 1 layer) with the
 * extra keys of more (n_more of them), and token_embd.weight of
 * [64, 300] as the one tensor. */
static struct buf config_file(const struct buf *more, uint64_t n_more)
{
    struct buf kv = arch_kv();
    kv_u32(&kv, "qwen3.embedding_length", 64);
    kv_u32(&kv, "qwen3.feed_forward_length", 128);
    kv_u32(&kv, "qwen3.block_count", 1);
    kv_u32(&kv, "qwen3.attention.head_count", 4);
    if (more && more->len)
        put(&kv, more->p, more->len);
    struct buf b = {0};
    put(&b, "GGUF", 4);
    u32(&b, 3);
    u64(&b, 1);
    u64(&b, 5 + n_more);
    put(&b, kv.p, kv.len);
    str(&b, "token_embd.weight");
    u32(&b, 2);
    u64(&b, 64);
    u64(&b, 300);
    u32(&b, GGUF_F32);
    u64(&b, 0);
    uint8_t *zero = calloc(1, 64 * 300 * 4 + 32);
    put(&b, zero, (32 - b.len % 32) % 32 + 64 * 300 * 4);
    free(zero);
    free(kv.p);
    return b;
}

static void expect_config_error(const struct buf *more, uint64_t n_more, const char *message)
{
    struct buf b = config_file(more, n_more);
    struct gguf g;
    qp_err err = {{0}};
    ck_assert_msg(parse(&b, &g, &err) == 0, "%s", err.msg);
    struct qwen3_config c;
    ck_assert_int_eq(gguf_config(&g, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, message), "want \"%s\": %s", message, err.msg);
    gguf_close(&g);
    free(b.p);
}

START_TEST(the_config_file_reads)
{
    struct buf b = config_file(NULL, 0);
    struct gguf g;
    qp_err err = {{0}};
    ck_assert_msg(parse(&b, &g, &err) == 0, "%s", err.msg);
    struct qwen3_config c;
    ck_assert_msg(gguf_config(&g, &c, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(c.vocab_size, 300);
    ck_assert_uint_eq(c.head_dim, 16);
    ck_assert_int_eq(c.eos_token_id, -1);
    gguf_close(&g);
    free(b.p);
}
END_TEST

/* A NUL in a name is said, not the part before it quoted as if it were
 * the value wanted; a token id is reported as the file gives it. */
START_TEST(messages_say_what_the_file_holds)
{
    struct buf more = {0};
    kv_str(&more, "qwen3.rope.scaling.type", "none\0yarn", 9);
    expect_config_error(&more, 1, "t.gguf: key qwen3.rope.scaling.type holds a NUL at byte 4 of its 9");
    free(more.p);
    more = (struct buf){0};
    kv_u32(&more, "tokenizer.ggml.eos_token_id", UINT32_MAX);
    expect_config_error(&more, 1, "tokenizer.ggml.eos_token_id 4294967295 is outside the vocabulary");
    free(more.p);
    more = (struct buf){0};
    kv_u32(&more, "tokenizer.ggml.bos_token_id", 300);
    expect_config_error(&more, 1, "tokenizer.ggml.bos_token_id 300 is outside the vocabulary (token_embd.weight "
                                  "has 300 rows)");
    free(more.p);

    /* general.architecture "qwen3\0x" */
    struct buf kv = {0};
    kv_str(&kv, "general.architecture", "qwen3\0x", 7);
    struct buf b = file_with(&kv, 1, "t", GGUF_F32, 0, 8);
    struct gguf g;
    qp_err err = {{0}};
    ck_assert_int_eq(parse(&b, &g, &err), 0);
    struct qwen3_config c;
    ck_assert_int_eq(gguf_config(&g, &c, &err), -1);
    ck_assert_msg(strstr(err.msg, "key general.architecture holds a NUL at byte 5 of its 7"), "%s", err.msg);
    gguf_close(&g);
    free(b.p);
    free(kv.p);

    /* tokenizer.ggml.model "gpt2\0", tokenizer.ggml.pre "qwen2\0" */
    static const char *const keys[] = {"tokenizer.ggml.model", "tokenizer.ggml.pre"};
    for (int k = 0; k < 2; k++) {
        kv = (struct buf){0};
        kv_str(&kv, "tokenizer.ggml.model", k ? "gpt2" : "gpt2\0", k ? 4 : 5);
        kv_str(&kv, "tokenizer.ggml.pre", k ? "qwen2\0" : "qwen2", k ? 6 : 5);
        b = file_with(&kv, 2, "t", GGUF_F32, 0, 8);
        ck_assert_int_eq(parse(&b, &g, &err), 0);
        char *json;
        size_t len;
        ck_assert_int_eq(gguf_tokenizer_json(&g, &json, &len, &err), -1);
        char want[96];
        snprintf(want, sizeof want, "key %s holds a NUL at byte %d", keys[k], k ? 5 : 4);
        ck_assert_msg(strstr(err.msg, want), "want \"%s\": %s", want, err.msg);
        gguf_close(&g);
        free(b.p);
        free(kv.p);
    }
}
END_TEST

/* llama.cpp reads [64, 1] as [64]: a norm so stored is a vector */
START_TEST(trailing_dimensions_of_one_are_dropped)
{
    struct buf kv = arch_kv();
    static const uint64_t ne[] = {64, 1, 1};
    struct buf b = file_dims(&kv, 1, GGUF_F32, ne, 3, 256);
    struct gguf g;
    qp_err err = {{0}};
    ck_assert_msg(parse(&b, &g, &err) == 0, "%s", err.msg);
    struct st_model m;
    ck_assert_msg(gguf_checkpoint(&g, &m, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(m.tensors[0].ndim, 1);
    ck_assert_uint_eq(m.tensors[0].shape[0], 64);
    st_close(&m);
    gguf_close(&g);
    free(b.p);
    free(kv.p);
}
END_TEST

/* gguf.cpp reads keys of up to 65,535 bytes */
START_TEST(keys_up_to_65535_bytes_are_read)
{
    for (size_t n = 300; n <= 65536; n += 65236) {
        char *key = malloc(n + 1);
        memset(key, 'k', n);
        key[n] = 0;
        struct buf kv = arch_kv();
        kv_u32(&kv, key, 7);
        struct buf b = file_with(&kv, 2, "t", GGUF_F32, 0, 8);
        struct gguf g;
        qp_err err = {{0}};
        uint32_t v = 0;
        if (n < 65536) {
            ck_assert_msg(parse(&b, &g, &err) == 0, "%s", err.msg);
            ck_assert_int_eq(gguf_get_u32(&g, key, false, &v, &err), 0);
            ck_assert_uint_eq(v, 7);
        } else {
            ck_assert_int_eq(parse(&b, &g, &err), -1);
            ck_assert_msg(strstr(err.msg, "a metadata key of 65536 bytes"), "%s", err.msg);
        }
        gguf_close(&g);
        free(b.p);
        free(kv.p);
        free(key);
    }
}
END_TEST

/* A RoPE over part of each head is not implemented: refused, not ignored */
START_TEST(partial_rope_is_refused)
{
    struct buf more = {0};
    kv_u32(&more, "qwen3.rope.dimension_count", 8);
    expect_config_error(&more, 1, "t.gguf: qwen3.rope.dimension_count 8 is not the head size 16");
    free(more.p);
    more = (struct buf){0};
    kv_u32(&more, "qwen3.rope.dimension_count", 16);
    struct buf b = config_file(&more, 1);
    struct gguf g;
    qp_err err = {{0}};
    ck_assert_msg(parse(&b, &g, &err) == 0, "%s", err.msg);
    struct qwen3_config c;
    ck_assert_msg(gguf_config(&g, &c, &err) == 0, "%s", err.msg);
    gguf_close(&g);
    free(b.p);
    free(more.p);
}
END_TEST

/* llama.cpp prepends bos to every text when add_bos_token is true; qpack's
 * tokenizer adds nothing, so such a file is refused */
START_TEST(add_bos_token_true_is_refused)
{
    static const char *const keys[] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"};
    for (int k = 0; k < 2; k++)
        for (int add = 0; add < 2; add++) {
            struct buf kv = {0};
            kv_str(&kv, "tokenizer.ggml.model", "gpt2", 4);
            kv_str(&kv, "tokenizer.ggml.pre", "qwen2", 5);
            str(&kv, keys[k]);
            u32(&kv, GGUF_V_BOOL);
            put(&kv, add ? "\1" : "\0", 1);
            struct buf b = file_with(&kv, 3, "t", GGUF_F32, 0, 8);
            struct gguf g;
            qp_err err = {{0}};
            ck_assert_int_eq(parse(&b, &g, &err), 0);
            char *json;
            size_t len;
            ck_assert_int_eq(gguf_tokenizer_json(&g, &json, &len, &err), -1);
            char want[96];
            snprintf(want, sizeof want, "t.gguf: %s is true", keys[k]);
            if (add)
                ck_assert_msg(strstr(err.msg, want), "%s", err.msg);
            else /* false goes on to the tokens, which this file lacks */
                ck_assert_msg(strstr(err.msg, "tokenizer.ggml.tokens is missing"), "%s", err.msg);
            gguf_close(&g);
            free(b.p);
            free(kv.p);
        }
}
END_TEST

/* Part k of 2 with tensor name tname, its split.count and
 * split.tensors.count (the latter left out when negative), written to dir. */
static void write_part(const char *dir, int k, const char *tname, uint16_t count, int32_t tensors)
{
    struct buf kv = arch_kv();
    uint64_t n_kv = 3;
    str(&kv, "split.no"), u32(&kv, GGUF_V_U16), put(&kv, (uint8_t[]){(uint8_t)k, 0}, 2);
    str(&kv, "split.count"), u32(&kv, GGUF_V_U16), put(&kv, (uint8_t[]){(uint8_t)count, (uint8_t)(count >> 8)}, 2);
    if (tensors >= 0) {
        str(&kv, "split.tensors.count"), u32(&kv, GGUF_V_I32), u32(&kv, (uint32_t)tensors);
        n_kv++;
    }
    struct buf b = file_with(&kv, n_kv, tname, GGUF_F32, 0, 8);
    char path[512];
    snprintf(path, sizeof path, "%s/m-%05d-of-00002.gguf", dir, k + 1);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert(fwrite(b.p, 1, b.len, f) == b.len);
    fclose(f);
    free(b.p);
    free(kv.p);
}

/* Every part agrees with the first on split.count and split.tensors.count,
 * and the latter is the tensors the parts hold. */
START_TEST(split_parts_that_disagree_are_refused)
{
    char dir[] = "/tmp/test_gguf_split_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char first[600];
    snprintf(first, sizeof first, "%s/m-00001-of-00002.gguf", dir);
    struct {
        uint16_t count2;
        int32_t tensors1, tensors2;
        const char *message;
    } cases[] = {
        {2, 2, 2, NULL},
        {2, -1, -1, NULL},
        {3, 2, 2, "m-00002-of-00002.gguf: split.count is 3 where the first part's is 2"},
        {2, 2, 5, "m-00002-of-00002.gguf: split.tensors.count is 5 where the first part's is 2"},
        {2, 2, -1, "m-00002-of-00002.gguf: split.tensors.count is absent here and present in the first part"},
        {2, 5, 5, "m-00001-of-00002.gguf: split.tensors.count says 5 tensors, the parts hold 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_part(dir, 0, "a", 2, cases[i].tensors1);
        write_part(dir, 1, "b", cases[i].count2, cases[i].tensors2);
        struct gguf g;
        qp_err err = {{0}};
        int rc = gguf_open(&g, first, &err);
        if (!cases[i].message) {
            ck_assert_msg(rc == 0, "case %zu: %s", i, err.msg);
            ck_assert_uint_eq(g.n_tensors, 2);
            gguf_close(&g);
        } else {
            ck_assert_msg(rc == -1 && strstr(err.msg, cases[i].message), "case %zu: %s", i, err.msg);
        }
    }
    char path[600];
    for (int k = 1; k <= 2; k++) {
        snprintf(path, sizeof path, "%s/m-%05d-of-00002.gguf", dir, k);
        unlink(path);
    }
    rmdir(dir);
}
END_TEST

/* ------------------------------------------------------- hand-built blocks */

static uint16_t h(float v) { return qp_f32_to_f16(v); }

START_TEST(q8_0_q4_0_q4_1_blocks_give_their_values)
{
    uint8_t b[34];
    float out[32];
    put16(b, h(0.5f));
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)(j - 16);
    gguf_dequantize(GGUF_Q8_0, b, 32, out);
    for (int j = 0; j < 32; j++)
        ck_assert(out[j] == 0.5f * (j - 16));
    /* Q4_0: byte j holds element j (low nibble) and j + 16 (high); value (q - 8) d */
    put16(b, h(0.25f));
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    gguf_dequantize(GGUF_Q4_0, b, 32, out);
    for (int j = 0; j < 16; j++) {
        ck_assert(out[j] == 0.25f * (j - 8));
        ck_assert(out[j + 16] == 0.25f * (7 - j));
    }
    /* Q4_1: q d + m */
    put16(b, h(2.0f));
    put16(b + 2, h(-3.0f));
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(j | 3 << 4);
    gguf_dequantize(GGUF_Q4_1, b, 32, out);
    for (int j = 0; j < 16; j++) {
        ck_assert(out[j] == 2.0f * j - 3.0f);
        ck_assert(out[j + 16] == 3.0f);
    }
}
END_TEST

/* the 6-bit scale sc and minimum m of sub-block j, packed as ggml-common.h
 * lays out block_q4_K's scales[12] */
static void pack_k4(uint8_t *q, int j, unsigned sc, unsigned m)
{
    if (j < 4) {
        q[j] = (uint8_t)((q[j] & 0xC0) | sc);
        q[j + 4] = (uint8_t)((q[j + 4] & 0xC0) | m);
    } else {
        q[j + 4] = (uint8_t)((sc & 15) | (m & 15) << 4);
        q[j - 4] |= (uint8_t)((sc >> 4) << 6);
        q[j] |= (uint8_t)((m >> 4) << 6);
    }
}

START_TEST(q4_k_and_q5_k_blocks_give_their_values)
{
    for (int five = 0; five < 2; five++) {
        uint8_t b[176] = {0};
        float out[256];
        put16(b, h(0.5f));
        put16(b + 2, h(0.25f));
        unsigned sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = (unsigned)(7 * j + 13) % 64; /* 13 20 ... 62 : high bits used */
            mn[j] = (unsigned)(63 - 9 * j);
            pack_k4(b + 4, j, sc[j], mn[j]);
        }
        uint8_t *qh = b + 16, *qs = five ? b + 48 : b + 16;
        int code[256];
        for (int e = 0; e < 256; e++) {
            int j = e / 32, l = e % 32;
            code[e] = (e * 7 + 3) % (five ? 32 : 16);
            qs[32 * (j / 2) + l] |= (uint8_t)((code[e] & 15) << (j % 2 ? 4 : 0));
            if (five && code[e] > 15)
                qh[l] |= (uint8_t)(1u << j);
        }
        gguf_dequantize(five ? GGUF_Q5_K : GGUF_Q4_K, b, 256, out);
        for (int e = 0; e < 256; e++) {
            int j = e / 32;
            double want = 0.5 * sc[j] * code[e] - 0.25 * mn[j];
            ck_assert_msg(fabs(out[e] - want) <= 1e-6 * fabs(want), "Q%d_K element %d: %g, want %g", five ? 5 : 4,
                          e, out[e], want);
        }
    }
}
END_TEST

START_TEST(q6_k_blocks_give_their_values)
{
    uint8_t b[210] = {0};
    float out[256];
    put16(b + 208, h(0.125f));
    int8_t *sc = (int8_t *)(b + 192);
    for (int s = 0; s < 16; s++)
        sc[s] = (int8_t)(s * 17 - 128);
    int code[256];
    uint8_t *ql = b, *qh = b + 128;
    for (int e = 0; e < 256; e++) {
        code[e] = (e * 5 + 1) % 64; /* stored: q + 32 */
        int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
        int at = 64 * half + l + (quarter % 2 ? 32 : 0);
        ql[at] |= (uint8_t)((code[e] & 15) << (quarter >= 2 ? 4 : 0));
        qh[32 * half + l] |= (uint8_t)((code[e] >> 4) << (2 * quarter));
    }
    gguf_dequantize(GGUF_Q6_K, b, 256, out);
    for (int e = 0; e < 256; e++) {
        double want = 0.125 * sc[e / 16] * (code[e] - 32);
        ck_assert_msg(out[e] == (float)want, "element %d: %g, want %g", e, out[e], want);
    }
}
END_TEST

/* ----------------------------------------------------------------- tokenizer */

static void str_array(struct buf *kv, const char *key, const char **items, uint64_t n)
{
    str(kv, key);
    u32(kv, GGUF_V_ARRAY);
    u32(kv, GGUF_V_STRING);
    u64(kv, n);
    for (uint64_t i = 0; i < n; i++)
        str(kv, items[i]);
}

/* The official tokenizer.json's vocabulary as convert_hf_to_gguf.py writes
 * it: 151936 rows, [PADi] (UNUSED) where no token, the added tokens CONTROL
 * when special or <|...|>, else USER_DEFINED; merges "a b". */
START_TEST(the_rebuilt_tokenizer_gives_the_hugging_face_ids)
{
    char *text = slurp(SRC "/assets/qwen3-tokenizer/tokenizer.json", NULL);
    cJSON *j = cJSON_Parse(text);
    const cJSON *model = cJSON_GetObjectItem(j, "model"), *e;
    enum { ROWS = 151936 };
    const char **tok = calloc(ROWS, sizeof *tok);
    int32_t *type = calloc(ROWS, sizeof *type);
    char (*pad)[16] = calloc(ROWS, 16);
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(model, "vocab")) {
        tok[(int)e->valuedouble] = e->string;
        type[(int)e->valuedouble] = 1;
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "added_tokens")) {
        int id = (int)cJSON_GetObjectItem(e, "id")->valuedouble;
        const char *c = cJSON_GetObjectItem(e, "content")->valuestring;
        tok[id] = c;
        type[id] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) || !strncmp(c, "<|", 2) ? 3 : 4;
    }
    for (int i = 0; i < ROWS; i++)
        if (!tok[i]) {
            snprintf(pad[i], 16, "[PAD%d]", i);
            tok[i] = pad[i];
            type[i] = 5;
        }
    const cJSON *merges = cJSON_GetObjectItem(model, "merges");
    int n_merges = cJSON_GetArraySize(merges), k = 0;
    char **pairs = calloc((size_t)n_merges, sizeof *pairs);
    cJSON_ArrayForEach(e, merges) {
        const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
        pairs[k] = malloc(strlen(a) + strlen(b) + 2);
        sprintf(pairs[k++], "%s %s", a, b);
    }
    struct buf kv = arch_kv();
    str(&kv, "tokenizer.ggml.model"), u32(&kv, GGUF_V_STRING), str(&kv, "gpt2");
    str(&kv, "tokenizer.ggml.pre"), u32(&kv, GGUF_V_STRING), str(&kv, "qwen2");
    str_array(&kv, "tokenizer.ggml.tokens", tok, ROWS);
    str(&kv, "tokenizer.ggml.token_type"), u32(&kv, GGUF_V_ARRAY), u32(&kv, GGUF_V_I32), u64(&kv, ROWS);
    for (int i = 0; i < ROWS; i++)
        u32(&kv, (uint32_t)type[i]);
    str_array(&kv, "tokenizer.ggml.merges", (const char **)pairs, (uint64_t)n_merges);
    struct buf b = file_with(&kv, 6, "t", GGUF_F32, 0, 8);
    struct gguf g;
    qp_err err;
    ck_assert_msg(parse(&b, &g, &err) == 0, "%s", err.msg);
    char *json;
    size_t len;
    ck_assert_msg(gguf_tokenizer_json(&g, &json, &len, &err) == 0, "%s", err.msg);
    qp_tok *t;
    ck_assert_msg(qp_tok_load_buffer(&t, json, len, "rebuilt", &err) == 0, "%s", err.msg);

    /* every conformance case: the ids Hugging Face gives */
    size_t n_cases;
    tok_case *cases = tok_cases_load(TOK_DATA "/encode.jsonl", &n_cases);
    for (size_t c = 0; c < n_cases; c++) {
        qp_tok_ids got = {0};
        ck_assert_int_eq(qp_tok_encode(t, cases[c].text.s, cases[c].text.len, &got, &err), 0);
        ck_assert_msg(got.len == cases[c].ids.len, "%s: %zu ids, want %zu", cases[c].name, got.len,
                      cases[c].ids.len);
        ck_assert_msg(!got.len || !memcmp(got.v, cases[c].ids.v, got.len * sizeof *got.v), "%s: other ids", cases[c].name);
        qp_tok_ids_free(&got);
    }
    ck_assert_uint_ge(n_cases, 800);
    ck_assert_int_eq(qp_tok_is_special(t, 151644), 1);  /* <|im_start|> */
    ck_assert_int_eq(qp_tok_is_special(t, 151667), 0);  /* <think> */
    ck_assert_int_eq(qp_tok_vocab_size(t), 151669);
    qp_tok_free(t);
    free(json);
    tok_cases_free(cases, n_cases);
    gguf_close(&g);
    free(b.p);
    free(kv.p);
    for (int i = 0; i < n_merges; i++)
        free(pairs[i]);
    free(pairs);
    free(pad);
    free(type);
    free(tok);
    cJSON_Delete(j);
    free(text);
}
END_TEST

/* GPT-2's byte-level stand-in character of byte b, as UTF-8 */
static void byte_char(int b, char out[3])
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    int c = b;
    if (!printable) {
        c = 256;
        for (int x = 0; x < b; x++)
            c += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    }
    if (c < 0x80) {
        out[0] = (char)c, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | c >> 6), out[1] = (char)(0x80 | (c & 0x3F)), out[2] = 0;
    }
}

/* A small GGUF tokenizer: the 256 byte tokens, then rows 256.. as given
 * with their llama.cpp token types; merges as given. */
struct small_vocab {
    const char *text;
    int32_t type;
};

static char *small_tokenizer_json(const struct small_vocab *extra, int n_extra, const char **merges, int n_merges,
                                  qp_err *err)
{
    int rows = 256 + n_extra;
    const char **tok = calloc((size_t)rows, sizeof *tok);
    char (*bytes)[3] = calloc(256, 3);
    struct buf kv = arch_kv();
    str(&kv, "tokenizer.ggml.model"), u32(&kv, GGUF_V_STRING), str(&kv, "gpt2");
    str(&kv, "tokenizer.ggml.pre"), u32(&kv, GGUF_V_STRING), str(&kv, "qwen2");
    for (int b = 0; b < 256; b++) {
        byte_char(b, bytes[b]);
        tok[b] = bytes[b];
    }
    for (int i = 0; i < n_extra; i++)
        tok[256 + i] = extra[i].text;
    str_array(&kv, "tokenizer.ggml.tokens", tok, (uint64_t)rows);
    str(&kv, "tokenizer.ggml.token_type"), u32(&kv, GGUF_V_ARRAY), u32(&kv, GGUF_V_I32), u64(&kv, (uint64_t)rows);
    for (int i = 0; i < rows; i++)
        u32(&kv, i < 256 ? 1 : (uint32_t)extra[i - 256].type);
    str_array(&kv, "tokenizer.ggml.merges", merges, (uint64_t)n_merges);
    struct buf b = file_with(&kv, 6, "t", GGUF_F32, 0, 8);
    struct gguf g;
    char *json = NULL;
    size_t len;
    ck_assert_msg(parse(&b, &g, err) == 0, "%s", err->msg);
    if (gguf_tokenizer_json(&g, &json, &len, err))
        json = NULL;
    gguf_close(&g);
    free(b.p);
    free(kv.p);
    free(bytes);
    free(tok);
    return json;
}

static void expect_ids(qp_tok *t, const char *text, const int32_t *want, size_t n)
{
    qp_tok_ids got = {0};
    qp_err err;
    ck_assert_int_eq(qp_tok_encode(t, text, strlen(text), &got, &err), 0);
    ck_assert_msg(got.len == n, "\"%s\": %zu ids, want %zu", text, got.len, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got.v[i] == want[i], "\"%s\"[%zu]: id %d, want %d", text, i, got.v[i], want[i]);
    qp_tok_ids_free(&got);
}

/* Every token keeps its row: a control token amid the vocabulary, an
 * UNUSED row before the special tokens, a control token spelled like a
 * word (llama.cpp's ids, which the model's rows follow). */
START_TEST(special_tokens_keep_their_rows)
{
    static const struct small_vocab extra[] = {
        {"he", 1}, {"<|mid|>", 3}, {"hel", 1}, {"[PAD259]", 5}, {"<|endoftext|>", 3},
        {"<|im_start|>", 3}, {"<|im_end|>", 3}, {"<think>", 4}, {"hello", 3},
    };
    const char *merges[] = {"h e", "he l"};
    qp_err err;
    char *json = small_tokenizer_json(extra, 9, merges, 2, &err);
    ck_assert_msg(json, "%s", err.msg);
    qp_tok *t;
    ck_assert_msg(qp_tok_load_buffer(&t, json, strlen(json), "rebuilt", &err) == 0, "%s", err.msg);
    static const int32_t want[] = {258, 257, 260, 261, 262, 263, 264, 256};
    expect_ids(t, "hel<|mid|><|endoftext|><|im_start|><|im_end|><think>hellohe", want, 8);
    ck_assert_int_eq(qp_tok_vocab_size(t), 265);
    ck_assert_int_eq(qp_tok_is_special(t, 262), 1);
    ck_assert_int_eq(qp_tok_is_special(t, 263), 0);
    qp_tok_text out = {0};
    int32_t eos = 262;
    ck_assert(qp_tok_decode(t, &eos, 1, 0, &out, &err) == 0);
    ck_assert(out.len == 10 && !memcmp(out.s, "<|im_end|>", 10));
    int32_t pad = 259;
    ck_assert_int_eq(qp_tok_decode(t, &pad, 1, 0, &out, &err), -1);
    qp_tok_text_free(&out);
    qp_tok_free(t);
    free(json);
}
END_TEST

/* A control token spelled as a normal one: two ids for one text */
START_TEST(a_token_text_on_two_rows_is_refused)
{
    static const struct small_vocab extra[] = {{"he", 1}, {"he", 3}};
    const char *merges[] = {"h e"};
    qp_err err;
    char *json = small_tokenizer_json(extra, 2, merges, 1, &err);
    ck_assert_ptr_null(json);
    ck_assert_msg(strstr(err.msg, "t.gguf: tokenizer.ggml.tokens[256] and [257] are both \"he\""), "%s", err.msg);
}
END_TEST

/* No merges: every word is its bytes, special tokens still whole */
START_TEST(a_tokenizer_without_merges_gives_bytes)
{
    static const struct small_vocab extra[] = {{"<|endoftext|>", 3}};
    qp_err err;
    char *json = small_tokenizer_json(extra, 1, NULL, 0, &err);
    ck_assert_msg(json, "%s", err.msg);
    qp_tok *t;
    ck_assert_msg(qp_tok_load_buffer(&t, json, strlen(json), "rebuilt", &err) == 0, "%s", err.msg);
    static const int32_t want[] = {'h', 'i', 256};
    expect_ids(t, "hi<|endoftext|>", want, 3);
    qp_tok_free(t);
    free(json);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("reader");
    tcase_add_test(tc, a_minimal_file_reads_back);
    tcase_add_test(tc, every_truncation_is_refused);
    tcase_add_loop_test(tc, each_defect_is_refused_by_name, 0, (int)(sizeof defects / sizeof *defects));
    tcase_add_test(tc, a_tensor_size_past_2_62_bytes_is_refused);
    tcase_add_test(tc, the_config_file_reads);
    tcase_add_test(tc, messages_say_what_the_file_holds);
    tcase_add_test(tc, trailing_dimensions_of_one_are_dropped);
    tcase_add_test(tc, keys_up_to_65535_bytes_are_read);
    tcase_add_test(tc, partial_rope_is_refused);
    tcase_add_test(tc, add_bos_token_true_is_refused);
    tcase_add_test(tc, split_parts_that_disagree_are_refused);
    tcase_add_test(tc, q8_0_q4_0_q4_1_blocks_give_their_values);
    tcase_add_test(tc, q4_k_and_q5_k_blocks_give_their_values);
    tcase_add_test(tc, q6_k_blocks_give_their_values);
    suite_add_tcase(s, tc);
    tc = tcase_create("tokenizer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, the_rebuilt_tokenizer_gives_the_hugging_face_ids);
    tcase_add_test(tc, special_tokens_keep_their_rows);
    tcase_add_test(tc, a_token_text_on_two_rows_is_refused);
    tcase_add_test(tc, a_tokenizer_without_merges_gives_bytes);
    suite_add_tcase(s, tc);
    return qp_test_main(s);
}
