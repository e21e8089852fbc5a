/* test_qpk_values.c - values the kernels cannot compute exactly are refused,
 * never computed wrongly (formats/QPK.md, "Value ranges"):
 *   - forged containers: stored integers outside an encoding's documented
 *     range, with every checksum recomputed, are refused by the reader
 *     (qpk_open with QPK_VERIFY), `qpack verify`, and qrun on bpf and emu,
 *     each with one line naming the tensor; sections whose content is
 *     forged and sealed (a tokenizer.json that is empty, not JSON, an array,
 *     null, {}, nested 100,000 deep, with a NUL byte, a token of invalid
 *     UTF-8, ids of 2^31, negative or fractional; a tokenizer_config.json
 *     that is not a JSON object or has a key twice; a chat template with a
 *     NUL byte or invalid UTF-8; a provenance that is not a JSON object) are
 *     refused by `qpack verify` naming the section, and the tokenizers by
 *     qrun --ids too;
 *   - legal but extreme checkpoints: a q24 row whose sum of |w| the int64
 *     product cannot hold and an embedding the residual stream cannot hold
 *     are refused by qpack with the figure; the same lm_head packed as int8
 *     gives the float reference's tokens; activations that leave the Q32
 *     range at run time stop qrun with one line naming the layer.
 * qpack, qrun and qp-gen-checkpoint are run as programs. */
#include <check.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "le.h"
#include "qpk.h"
#include "qp_test.h"
#include "safetensors.h"

static bool root(void) { return geteuid() == 0; }

/* ------------------------------------------------------ forging a container */

struct image {
    uint8_t *bytes;
    size_t len;
};

static struct image load(const char *name)
{
    struct image im;
    im.bytes = (uint8_t *)slurp(path_of("%s", name), &im.len);
    return im;
}

static uint8_t *tensor_entry(const struct image *im, const char *name)
{
    uint64_t dir = le64(im->bytes + 24);
    uint32_t n_sections = le32(im->bytes + 40), n_tensors = le32(im->bytes + 44);
    for (uint32_t i = 0; i < n_tensors; i++) {
        uint8_t *e = im->bytes + dir + (uint64_t)n_sections * QPK_SECTION_SIZE + (uint64_t)i * QPK_TENSOR_SIZE;
        if (!strcmp((const char *)e, name))
            return e;
    }
    ck_abort_msg("no tensor %s in the container", name);
    return NULL;
}

static uint8_t *tensor_data(const struct image *im, const char *name)
{
    return im->bytes + le64(tensor_entry(im, name) + 96);
}

/* Recomputes the tensor's checksum, the directory's and the header's: only
 * the reader's value checks can tell the forgery. */
static void reseal(struct image *im, const char *name)
{
    uint8_t *e = tensor_entry(im, name);
    put64(e + 112, XXH3_64bits(im->bytes + le64(e + 96), le64(e + 104)));
    put64(im->bytes + 48, XXH3_64bits(im->bytes + le64(im->bytes + 24), le64(im->bytes + 32)));
    put64(im->bytes + 120, XXH3_64bits(im->bytes, 120));
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* qpack verify and qrun (emu; bpf as root) each refuse the file with one
 * line holding needle */
static void expect_refused_everywhere(const char *file, const char *needle)
{
    const char *backends[] = {"emu", "bpf"};
    int rc = run("%s verify %s", QP_QPACK, path_of("%s", file));
    ck_assert_msg(rc == 1, "qpack verify %s: exit %d: %s", file, rc, out_text);
    assert_out_has(needle);
    ck_assert_msg(count_lines(out_text) == 1, "qpack verify: not one line: %s", out_text);
    for (int b = 0; b < (root() ? 2 : 1); b++) {
        rc = run("%s -m %s --backend %s --ids '1 2' -n 2 --print-ids", QP_QRUN, path_of("%s", file), backends[b]);
        ck_assert_msg(rc == 1, "qrun --backend %s %s: exit %d: %s", backends[b], file, rc, out_text);
        assert_out_has(needle);
        ck_assert_msg(count_lines(out_text) == 1, "qrun --backend %s: not one line: %s", backends[b], out_text);
    }
}

/* Writes im as `file` with the tensor resealed, checks the in-memory reader
 * and every command refuse it. */
static void forge(struct image *im, const char *tensor, const char *file, const char *needle)
{
    reseal(im, tensor);
    struct qpk_file f;
    qp_err err = {{0}};
    int rc = qpk_open_buffer(&f, im->bytes, im->len, file, QPK_VERIFY, &err);
    if (rc == 0)
        qpk_close(&f);
    ck_assert_msg(rc != 0, "%s: the reader accepted the forgery (expected '%s')", file, needle);
    ck_assert_msg(strstr(err.msg, needle) && strstr(err.msg, tensor), "expected '%s' and %s in: %s", needle,
                  tensor, err.msg);
    spit(path_of("%s", file), im->bytes, im->len);
    expect_refused_everywhere(file, needle);
}

static void setup(void)
{
    make_dir();
    gen("ck", "--preset tiny --seed 7");
}

/* ------------------------------------------------------- forged containers */

/* Where the i8g scale D of (row, group) and the code of (row, col) lie
 * (QPK.md, "Layout of i8g"), from the tensor's own entry. */
static uint8_t *i8g_scale(const struct image *im, const char *name, uint32_t row, uint32_t group)
{
    const uint8_t *e = tensor_entry(im, name);
    uint32_t cols = le32(e + 76);
    return tensor_data(im, name) + (row / 4) * le64(e + 88) + (uint64_t)cols * 4 + 4 * ((uint64_t)group * 4 + row % 4);
}

static uint8_t *i8g_code(const struct image *im, const char *name, uint32_t row, uint32_t col)
{
    const uint8_t *e = tensor_entry(im, name);
    return tensor_data(im, name) + (row / 4) * le64(e + 88) + col / 16 * 64 + (row % 4) * 16 + col % 16;
}

START_TEST(i8g_scales_outside_2_pow_20_are_refused)
{
    /* groups of 32: a 64-column q_proj has a second group */
    pack_checkpoint("ck", "int8.qpk", "--quiet --format int8 --group 32");
    const int64_t forged[] = {(1 << 20) + 1, 1 << 24, INT32_MAX, INT32_MIN, -(1 << 20) - 1};
    const char *t = "model.layers.1.self_attn.q_proj.weight";
    for (size_t i = 0; i < sizeof forged / sizeof *forged; i++) {
        struct image im = load("int8.qpk");
        put32(i8g_scale(&im, t, 33, 1), (uint32_t)forged[i]);
        char name[32];
        snprintf(name, sizeof name, "scale%zu.qpk", i);
        forge(&im, t, name, "outside i8g's +-2^20");
        free(im.bytes);
    }
    /* the bound itself is legal */
    struct image im = load("int8.qpk");
    put32(i8g_scale(&im, t, 0, 0), 1 << 20);
    reseal(&im, t);
    spit(path_of("edge.qpk"), im.bytes, im.len);
    ck_assert_msg(run("%s verify %s", QP_QPACK, path_of("edge.qpk")) == 0, "%s", out_text);
    free(im.bytes);
}
END_TEST

START_TEST(i8g_code_minus_128_is_refused)
{
    pack_checkpoint("ck", "int8.qpk", "--quiet --format int8");
    struct image im = load("int8.qpk");
    const char *t = "model.layers.0.mlp.down_proj.weight";
    *i8g_code(&im, t, 13, 37) = 0x80;
    forge(&im, t, "code.qpk", "row 13, column 37: code -128");
    free(im.bytes);
}
END_TEST

START_TEST(i32s_values_past_2_pow_30_are_refused)
{
    pack_checkpoint("ck", "q24.qpk", "--quiet");
    const uint32_t forged[] = {(1u << 30) + 1, INT32_MAX, (uint32_t)INT32_MIN};
    const char *t = "model.layers.0.post_attention_layernorm.weight";
    for (size_t i = 0; i < 3; i++) {
        struct image im = load("q24.qpk");
        put32(tensor_data(&im, t) + 4 * 9, forged[i]);
        char name[32];
        snprintf(name, sizeof name, "norm%zu.qpk", i);
        forge(&im, t, name, "element 9");
        free(im.bytes);
    }
}
END_TEST

START_TEST(mixed_int4_container_checks_its_i8g_and_i32s_values)
{
    pack_checkpoint("ck", "int4.qpk", "--quiet --format int4 --keep 'model.layers.1.mlp.up_proj.weight=int8'");
    struct image im = load("int4.qpk");
    const char *t = "model.layers.1.mlp.up_proj.weight";
    put32(i8g_scale(&im, t, 3, 0), 1u << 31);
    forge(&im, t, "mixed_scale.qpk", "outside i8g's +-2^20");
    free(im.bytes);
    im = load("int4.qpk");
    t = "model.norm.weight";
    put32(tensor_data(&im, t), (1u << 30) + 1);
    forge(&im, t, "mixed_norm.qpk", "outside i32s's range");
    free(im.bytes);
}
END_TEST

/* An i7g scale is checked as the i8g one it expands to: the pf16 d of
 * (row, group) after the block's 3.5 bytes per column (QPK.md, i7g) */
START_TEST(i7g_scale_outside_2_pow_20_is_refused)
{
    pack_checkpoint("ck", "int7.qpk", "--quiet --format int4 --keep 'model.layers.1.mlp.up_proj.weight=int7'");
    struct image im = load("int7.qpk");
    const char *t = "model.layers.1.mlp.up_proj.weight";
    const uint8_t *e = tensor_entry(&im, t);
    ck_assert_uint_eq(le16(e + 68), QPK_ENC_I7G);
    uint32_t cols = le32(e + 76);
    put16(tensor_data(&im, t) + le64(e + 88) + (uint64_t)cols * 7 / 2 + 2, (uint16_t)(10 << 12 | 1025));
    forge(&im, t, "i7g_scale.qpk", "row 5, group 0: scale 1049600, outside i7g's +-2^20");
    free(im.bytes);
}
END_TEST

START_TEST(q24_minus_2_pow_31_and_row_sums_past_the_bound_are_refused)
{
    pack_checkpoint("ck", "q24.qpk", "--quiet");
    struct image im = load("q24.qpk");
    const char *t = "model.layers.0.self_attn.k_proj.weight";
    put32(tensor_data(&im, t) + 4 * 70, (uint32_t)INT32_MIN);
    forge(&im, t, "min.qpk", "hold -2^31");
    free(im.bytes);

    /* down_proj [64, 192]: row 6 all 2^31 - 1 sums to 192 * 128 > 16384 */
    im = load("q24.qpk");
    t = "model.layers.1.mlp.down_proj.weight";
    uint8_t *blk = tensor_data(&im, t) + (uint64_t)192 * 16;
    for (uint32_t c = 0; c < 192; c++)
        put32(blk + 4 * ((c / 16) * 64 + 2 * 16 + c % 16), INT32_MAX);
    forge(&im, t, "rowsum.qpk", "row 6: the sum of |w|");
    free(im.bytes);
}
END_TEST

START_TEST(embedding_exponent_past_the_residual_range_is_refused)
{
    pack_checkpoint("ck", "int8.qpk", "--quiet --format int8");
    struct image im = load("int8.qpk");
    const char *t = "model.embed_tokens.weight";
    put32(tensor_entry(&im, t) + 80, (uint32_t)-100);   /* scale_exp: every value * 2^100 */
    forge(&im, t, "embexp.qpk", "past the");
    free(im.bytes);
}
END_TEST

/* ------------------------------------------------------- forged sections */

static uint8_t *section_entry(const struct image *im, uint32_t kind)
{
    uint64_t dir = le64(im->bytes + 24);
    for (uint32_t i = 0; i < le32(im->bytes + 40); i++) {
        uint8_t *e = im->bytes + dir + (uint64_t)i * QPK_SECTION_SIZE;
        if (le32(e) == kind)
            return e;
    }
    ck_abort_msg("no section of kind %u", kind);
    return NULL;
}

/* The section's checksum over its (possibly moved or resized) stored bytes,
 * then the directory's and the header's. */
static void reseal_section(struct image *im, uint8_t *e)
{
    put64(e + 32, XXH3_64bits(im->bytes + le64(e + 8), le64(e + 16)));
    put64(im->bytes + 48, XXH3_64bits(im->bytes + le64(im->bytes + 24), le64(im->bytes + 32)));
    put64(im->bytes + 120, XXH3_64bits(im->bytes, 120));
}

/* The tokenizer section's size, codec or place forged with the checksums
 * recomputed: refused when the container is opened, so even qrun --ids,
 * which never decodes the tokenizer, refuses it, with --no-verify and
 * --stream too. */
START_TEST(forged_tokenizer_section_fields_are_refused_at_open)
{
    struct {
        const char *what, *needle;
        int field;          /* 8 offset, 16 stored_size, 24 raw_size */
        int64_t delta;
    } cases[] = {
        {"raw_size + 1", "the directory says", 24, 1},
        {"raw_size - 1000", "the directory says", 24, -1000},
        {"stored_size - 1", "is not one zstd frame", 16, -1},
        {"offset + 8", "is not one zstd frame", 8, 8},
    };
    char args[512];
    snprintf(args, sizeof args, "--preset tiny --vocab 151936 --seed 5 --tokenizer-dir %s/assets/qwen3-tokenizer",
             QP_SOURCE_DIR);
    gen("tokck", args);
    pack_checkpoint("tokck", "tok.qpk", "--quiet");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct image im = load("tok.qpk");
        uint8_t *e = section_entry(&im, QPK_SEC_TOKENIZER);
        put64(e + cases[i].field, le64(e + cases[i].field) + (uint64_t)cases[i].delta);
        reseal_section(&im, e);
        struct qpk_file f;
        qp_err err = {{0}};
        int rc = qpk_open_buffer(&f, im.bytes, im.len, "s.qpk", 0, &err);
        if (rc == 0)
            qpk_close(&f);
        ck_assert_msg(rc != 0 && strstr(err.msg, cases[i].needle), "%s: rc %d: %s", cases[i].what, rc, err.msg);
        spit(path_of("s.qpk"), im.bytes, im.len);
        /* whatever the options: the table is checked at every open */
        const char *opts[] = {"", "--no-verify", "--stream", "--no-verify --stream"};
        for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) {
            rc = run("%s -m %s --backend emu --ids '1 2' -n 2 --print-ids %s", QP_QRUN, path_of("s.qpk"), opts[k]);
            ck_assert_msg(rc == 1 && count_lines(out_text) == 1 && strstr(out_text, cases[i].needle),
                          "%s: qrun %s: exit %d: %s", cases[i].what, opts[k], rc, out_text);
        }
        free(im.bytes);
    }
}
END_TEST


/* Replaces a section's content: a new zstd frame of text[0..len) appended
 * at the end of the file (the header's file size follows), the section's
 * entry pointed at it, every checksum recomputed. Only reading the content
 * can tell the forgery. */
static void forge_section_content(struct image *im, uint32_t kind, const void *text, size_t len)
{
    size_t cap = ZSTD_compressBound(len);
    uint8_t *frame = malloc(cap);
    size_t n = ZSTD_compress(frame, cap, text, len, 3);
    ck_assert(!ZSTD_isError(n));
    im->bytes = realloc(im->bytes, im->len + n);
    memcpy(im->bytes + im->len, frame, n);
    free(frame);
    uint8_t *e = section_entry(im, kind);
    put64(e + 8, im->len);
    put64(e + 16, n);
    put64(e + 24, len);
    im->len += n;
    put64(im->bytes + 16, im->len);
    reseal_section(im, e);
}

/* qpack verify refuses FILE with one line naming the section and holding
 * needle; with the tokenizer, qrun --ids refuses it too, ids printed or
 * not: a damaged tokenizer is no missing one */
static void expect_section_refused(const char *file, uint32_t kind, const char *what, const char *needle)
{
    char section[64];
    snprintf(section, sizeof section, "section %s", qpk_section_name(kind));
    int rc = run("%s verify %s", QP_QPACK, path_of("%s", file));
    ck_assert_msg(rc == 1 && count_lines(out_text) == 1 && strstr(out_text, section) && strstr(out_text, needle),
                  "%s %s: qpack verify exit %d: %s", section, what, rc, out_text);
    for (int ids = 0; kind == QPK_SEC_TOKENIZER && ids < 2; ids++) {
        rc = run("%s -m %s --backend emu --ids '1 2' -n 2%s", QP_QRUN, path_of("%s", file), ids ? " --print-ids" : "");
        ck_assert_msg(rc == 1 && count_lines(out_text) == 1 && strstr(out_text, "tokenizer"),
                      "%s %s: qrun exit %d: %s", section, what, rc, out_text);
    }
}

/* text with the first occurrence of `from` replaced by `to` (malloc'd) */
static char *replaced(const char *text, size_t len, const char *from, const char *to, size_t *out_len)
{
    const char *at = memmem(text, len, from, strlen(from));
    ck_assert_msg(at, "no '%s' in the tokenizer", from);
    size_t head = (size_t)(at - text), tail = len - head - strlen(from);
    *out_len = head + strlen(to) + tail;
    char *s = malloc(*out_len);
    memcpy(s, text, head);
    memcpy(s + head, to, strlen(to));
    memcpy(s + head + strlen(to), at + strlen(from), tail);
    return s;
}

/* Sections whose content the checksums cannot judge. */
START_TEST(forged_section_contents_are_refused_by_verify_naming_the_section)
{
    char args[512];
    snprintf(args, sizeof args, "--preset tiny --vocab 2048 --seed 5 --tokenizer-dir %s/tests/data/tiny-learned/model",
             QP_SOURCE_DIR);
    gen("secck", args);
    pack_checkpoint("secck", "sec.qpk", "--quiet");
    ck_assert_int_eq(run("%s verify %s", QP_QPACK, path_of("sec.qpk")), 0);
    size_t tok_len;
    char *tok = slurp(path_of("secck/tokenizer.json"), &tok_len);
    /* {"added_tokens": [[[...]]]}: 100,000 deep inside the object */
    char *nested = malloc(200020);
    strcpy(nested, "{\"added_tokens\": ");
    size_t at = strlen(nested);
    memset(nested + at, '[', 100000);
    memset(nested + at + 100000, ']', 100000);
    strcpy(nested + at + 200000, "}");
    struct {
        uint32_t kind;
        const char *what, *from, *to, *needle;    /* from NULL: `to` is the whole content */
    } cases[] = {
        {QPK_SEC_TOKENIZER, "empty", NULL, "", ""},
        {QPK_SEC_TOKENIZER, "not JSON", NULL, "{\"model\": ", ""},
        {QPK_SEC_TOKENIZER, "an array", NULL, "[]", ""},
        {QPK_SEC_TOKENIZER, "null", NULL, "null", ""},
        {QPK_SEC_TOKENIZER, "{}", NULL, "{}", ""},
        {QPK_SEC_TOKENIZER, "deeply nested", NULL, nested, ""},
        {QPK_SEC_TOKENIZER, "a NUL byte", "\"vocab\":{\"!\":0", "\"vocab\":{\"!\0\":0", ""},
        {QPK_SEC_TOKENIZER, "a token of invalid UTF-8", "\"vocab\":{\"!\":0", "\"vocab\":{\"\xff\":0", ""},
        {QPK_SEC_TOKENIZER, "an id of 2^31", "\"vocab\":{\"!\":0", "\"vocab\":{\"!\":2147483648", ""},
        {QPK_SEC_TOKENIZER, "a negative id", "\"vocab\":{\"!\":0", "\"vocab\":{\"!\":-1", ""},
        {QPK_SEC_TOKENIZER, "a fractional id", "\"vocab\":{\"!\":0", "\"vocab\":{\"!\":0.5", ""},
        {QPK_SEC_TOKENIZER_CONFIG, "not JSON", NULL, "{\"eos_token\": ", "not valid JSON"},
        {QPK_SEC_TOKENIZER_CONFIG, "an array", NULL, "[1, 2]", "not an object"},
        {QPK_SEC_TOKENIZER_CONFIG, "a key twice", NULL, "{\"eos_token\": \"a\", \"eos_token\": \"b\"}", "eos_token"},
        {QPK_SEC_TOKENIZER_CONFIG, "an escaped NUL", NULL, "{\"eos_token\": \"a\\u0000b\"}", "NUL"},
        {QPK_SEC_CHAT_TEMPLATE, "a NUL byte", NULL, NULL, "NUL byte at offset 3"},
        {QPK_SEC_CHAT_TEMPLATE, "invalid UTF-8", NULL, "{{ \xc3( }}", "not UTF-8 at byte offset 3"},
        {QPK_SEC_PROVENANCE, "not JSON", NULL, "{\"packer\"", "not valid JSON"},
        {QPK_SEC_PROVENANCE, "null", NULL, "null", "not an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct image im = load("sec.qpk");
        size_t len;
        char *text;
        if (cases[i].from)
            text = replaced(tok, tok_len, cases[i].from, cases[i].to, &len);
        else if (cases[i].to)
            text = strdup(cases[i].to), len = strlen(cases[i].to);
        else
            text = memcpy(malloc(8), "{{ \0 }}", 7), len = 7;
        forge_section_content(&im, cases[i].kind, text, len);
        spit(path_of("forged.qpk"), im.bytes, im.len);
        expect_section_refused("forged.qpk", cases[i].kind, cases[i].what, cases[i].needle);
        free(text);
        free(im.bytes);
    }
    free(nested);
    free(tok);
}
END_TEST

/* ------------------------------------------- legal but extreme checkpoints */

/* Sets n BF16 values of a checkpoint tensor from `first` to bits, or (bits
 * 0) clears their sign bits. */
static void patch_bf16(const char *ck, const char *tensor, uint64_t first, uint64_t n, uint16_t bits)
{
    qp_err err = {{0}};
    struct st_model m;
    const char *file = path_of("%s/model.safetensors", ck);
    ck_assert_msg(st_open_file(&m, file, &err) == 0, "%s", err.msg);
    const struct st_tensor *t = st_find(&m, tensor);
    ck_assert_msg(t != NULL, "no %s", tensor);
    uint64_t off = (uint64_t)(t->data - m.files[0].map) + 2 * first;
    uint8_t *v = malloc(2 * n);
    memcpy(v, t->data + 2 * first, 2 * n);
    st_close(&m);
    for (uint64_t i = 0; i < n; i++) {
        uint16_t b = bits ? bits : (uint16_t)(le16(v + 2 * i) & 0x7fff);
        put16(v + 2 * i, b);
    }
    int fd = open(file, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, v, 2 * n, (off_t)off), (ssize_t)(2 * n));
    close(fd);
    free(v);
}

/* The embedding of a tied checkpoint, which (as Qwen3-0.6B's file) also
 * stores an identical lm_head.weight: both patched alike. */
static void patch_tied_embedding(const char *ck, uint64_t first, uint64_t n, uint16_t bits)
{
    patch_bf16(ck, "model.embed_tokens.weight", first, n, bits);
    patch_bf16(ck, "lm_head.weight", first, n, bits);
}

#define BF16_127 0x42FE
#define BF16_80 0x42A0
#define BF16_1E30 0x7149   /* 9.96e29 */

/* the ids qrun prints for --ids '1 2' -n 4 on a backend */
static char *ids_of(const char *model, const char *backend)
{
    int rc = run("%s -m %s --backend %s --ids '1 2' -n 4 --temp 0 --print-ids", QP_QRUN, path_of("%s", model), backend);
    ck_assert_msg(rc == 0, "qrun --backend %s %s: %s", backend, model, out_text);
    return strdup(out_text);
}

/* An lm_head row of 127.0 over 256 columns sums to 32512: q24's int64
 * product would wrap, so qpack refuses q24 with the figure; int8 holds it
 * and gives the float reference's tokens. */
START_TEST(lm_head_row_of_127_is_refused_as_q24_and_exact_as_int8)
{
    gen("big", "--preset tiny --hidden 256 --intermediate 512 --head-dim 64 --untied --seed 3");
    patch_bf16("big", "lm_head.weight", 5 * 256, 256, BF16_127);
    patch_bf16("big", "model.embed_tokens.weight", 0, 512 * 256, 0);
    int rc = run("%s pack %s -o %s --quiet", QP_QPACK, path_of("big"), path_of("big.qpk"));
    ck_assert_msg(rc == 1, "q24 pack of a row summing to 32512: exit %d: %s", rc, out_text);
    assert_out_has("lm_head.weight: row 5: the sum of |w| is 32512, over the 16384");
    ck_assert_int_ne(access(path_of("big.qpk"), F_OK), 0);

    pack_checkpoint("big", "big8.qpk", "--quiet --format int8");
    char *want = ids_of("big", "ref");
    ck_assert_msg(strstr(want, "5 5"), "the reference should pick the 127 row: %s", want);
    char *emu = ids_of("big8.qpk", "emu");
    ck_assert_str_eq(emu, want);
    if (root()) {
        char *bpf = ids_of("big8.qpk", "bpf");
        ck_assert_str_eq(bpf, want);
        free(bpf);
    }
    free(emu);
    free(want);
}
END_TEST

/* Embedding values of 1e30 fit no encoding the residual stream can take:
 * every format is refused at pack time, naming the tensor and the figure. */
START_TEST(embedding_of_1e30_is_refused_in_every_format)
{
    patch_tied_embedding("ck", 3 * 64 + 10, 1, BF16_1E30);
    const char *formats[] = {"q24", "int8", "int4", "int4-pure"};
    for (int i = 0; i < 4; i++) {
        int rc = run("%s pack %s -o %s --quiet --format %s", QP_QPACK, path_of("ck"), path_of("e.qpk"), formats[i]);
        ck_assert_msg(rc == 1, "--format %s: exit %d: %s", formats[i], rc, out_text);
        assert_out_has("model.embed_tokens.weight");
        ck_assert_msg(strstr(out_text, "e+29, past the 5.37e+08") || strstr(out_text, "does not fit"), "%s: %s", formats[i],
                      out_text);
        ck_assert_msg(count_lines(out_text) == 1, "not one line: %s", out_text);
        ck_assert_int_ne(access(path_of("e.qpk"), F_OK), 0);
    }
}
END_TEST

/* Layer 0's MLP with every weight 80 and positive embeddings: the down
 * projection reaches ~4e11, past the 5.4e8 the residual stream holds. The
 * container is legal (every row within its bound); qrun stops at layer 0
 * with one line instead of printing wrapped-around tokens. */
START_TEST(activations_past_the_q32_range_stop_qrun_at_their_layer)
{
    patch_tied_embedding("ck", 0, 512 * 64, 0);
    patch_bf16("ck", "model.layers.0.mlp.gate_proj.weight", 0, 192 * 64, BF16_80);
    patch_bf16("ck", "model.layers.0.mlp.up_proj.weight", 0, 192 * 64, BF16_80);
    patch_bf16("ck", "model.layers.0.mlp.down_proj.weight", 0, 64 * 192, BF16_80);
    const char *formats[] = {"q24", "int8", "int4"};
    const char *backends[] = {"emu", "bpf"};
    for (int i = 0; i < 3; i++) {
        char args[32];
        snprintf(args, sizeof args, "--quiet --format %s", formats[i]);
        pack_checkpoint("ck", "hot.qpk", args);
        for (int b = 0; b < (root() ? 2 : 1); b++) {
            int rc = run("%s -m %s --backend %s --ids '1 2' -n 2 --print-ids", QP_QRUN, path_of("hot.qpk"),
                         backends[b]);
            ck_assert_msg(rc == 1, "%s on %s: exit %d: %s", formats[i], backends[b], rc, out_text);
            assert_out_has("left the range the kernels compute exactly");
            assert_out_has("in the layer 0");
            ck_assert_msg(count_lines(out_text) == 1, "not one line: %s", out_text);
        }
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("qpk_values");
    TCase *tc = tcase_create("forged");
    tcase_add_checked_fixture(tc, setup, remove_dir);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, i8g_scales_outside_2_pow_20_are_refused);
    tcase_add_test(tc, i8g_code_minus_128_is_refused);
    tcase_add_test(tc, i32s_values_past_2_pow_30_are_refused);
    tcase_add_test(tc, mixed_int4_container_checks_its_i8g_and_i32s_values);
    tcase_add_test(tc, i7g_scale_outside_2_pow_20_is_refused);
    tcase_add_test(tc, q24_minus_2_pow_31_and_row_sums_past_the_bound_are_refused);
    tcase_add_test(tc, embedding_exponent_past_the_residual_range_is_refused);
    tcase_add_test(tc, forged_tokenizer_section_fields_are_refused_at_open);
    tcase_add_test(tc, forged_section_contents_are_refused_by_verify_naming_the_section);
    suite_add_tcase(s, tc);
    tc = tcase_create("extreme");
    tcase_add_checked_fixture(tc, setup, remove_dir);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, lm_head_row_of_127_is_refused_as_q24_and_exact_as_int8);
    tcase_add_test(tc, embedding_of_1e30_is_refused_in_every_format);
    tcase_add_test(tc, activations_past_the_q32_range_stop_qrun_at_their_layer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(suite());
}
