/* test_qpk.c - the .qpk container end to end: the q24 table against an
 * independent float computation, `qpack pack` output against a reference
 * conversion of the source safetensors, sharding invariance, `qpack verify`
 * on corrupted files, the reader's structural checks on patched images,
 * atomic writes, `qpack info` (--json) and its output: container text shown
 * inert, lost output an error.
 *
 * qpack and qp-gen-checkpoint are run as programs (paths from the build). */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "le.h"
#include "qp_test.h"
#include "q24.h"
#include "qpk.h"
#include "safetensors.h"
#include "task.h"

/* ----------------------------------------------------------------- helpers */

/* Independent reference: BF16 bits -> float -> round(v * 2^24), ties to even. */
static bool ref_q24(uint16_t bits, int32_t *q)
{
    uint32_t u = (uint32_t)bits << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    if (!isfinite(v))
        return false;
    double d = nearbyint(ldexp((double)v, 24));
    if (fabs(d) > 2147483647.0)
        return false;
    *q = (int32_t)d;
    return true;
}

static float bf16_value(const struct st_tensor *s, uint64_t i)
{
    uint32_t u = (uint32_t)(s->data[2 * i] | s->data[2 * i + 1] << 8) << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static int32_t stored_i32(const uint8_t *p) { return (int32_t)le32(p); }

/* ------------------------------------------------------ 1. the q24 table */

START_TEST(q24_table_matches_float_reference_for_every_bf16)
{
    uint32_t fits = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        int32_t got = 0x5a5a5a5a, want = 0;
        bool ok = q24_from_bf16((uint16_t)b, &got);
        bool want_ok = ref_q24((uint16_t)b, &want);
        ck_assert_msg(ok == want_ok, "bf16 0x%04x: fits %d, reference %d", b, ok, want_ok);
        if (ok) {
            ck_assert_msg(got == want, "bf16 0x%04x: q %d, reference %d", b, got, want);
            fits++;
        }
    }
    /* everything with |v| < 128 fits: exponents below 134 in both signs */
    ck_assert_uint_eq(fits, 2 * 134 * 128);
}
END_TEST

/* --------------------------------------- 2. pack against the reference */

/* Checks every tensor of the container at qpk_path against the BF16 values
 * of the checkpoint in src_dir. */
static void check_against_source(const char *src_dir, const char *qpk_path, bool tied)
{
    qp_err err = {{0}};
    struct st_model m;
    ck_assert_msg(st_open_dir(&m, src_dir, &err) == 0, "%s", err.msg);
    struct qpk_file f;
    ck_assert_msg(qpk_open(&f, qpk_path, QPK_VERIFY, &err) == 0, "%s", err.msg);

    ck_assert_int_eq(!!(f.cfg.flags & QPK_CONFIG_TIED), tied);
    ck_assert_int_eq(qpk_tensor_of(&f, QPK_ROLE_LM_HEAD, QPK_NO_LAYER) == NULL, tied);
    ck_assert_uint_eq(f.n_tensors, 3 + 11 * f.cfg.n_layers - (tied ? 1 : 0));

    for (uint32_t ti = 0; ti < f.n_tensors; ti++) {
        const struct qpk_tensor *t = &f.tensors[ti];
        const struct st_tensor *s = st_find(&m, t->name);
        ck_assert_msg(s != NULL, "%s: not in the source", t->name);
        ck_assert_int_eq(s->dtype, ST_BF16);
        ck_assert_uint_eq(s->numel, (uint64_t)t->rows * t->cols);
        if (t->encoding == QPK_ENC_Q24) {
            ck_assert_int_eq(t->scale_exp, 24);
            ck_assert_uint_eq(t->row_stride, (uint64_t)t->cols * 4 * QPK_Q24_TILE_ROWS);
            for (uint32_t r = 0; r < t->rows; r++)
                for (uint32_t c = 0; c < t->cols; c++) {
                    uint64_t i = (uint64_t)r * t->cols + c;
                    uint16_t bits = (uint16_t)(s->data[2 * i] | s->data[2 * i + 1] << 8);
                    int32_t want;
                    ck_assert(ref_q24(bits, &want));
                    uint32_t b = r / QPK_Q24_TILE_ROWS, k = r % QPK_Q24_TILE_ROWS;
                    uint32_t tile = c / QPK_Q24_TILE_COLS, j = c % QPK_Q24_TILE_COLS;
                    uint64_t pos = (uint64_t)b * t->row_stride +
                                   4 * ((uint64_t)tile * QPK_Q24_TILE_ROWS * QPK_Q24_TILE_COLS +
                                        k * QPK_Q24_TILE_COLS + j);
                    int32_t got = stored_i32(t->data + pos);
                    ck_assert_msg(got == want, "%s[%u, %u]: %d, reference %d", t->name, r, c, got, want);
                }
        } else {
            ck_assert_int_eq(t->encoding, QPK_ENC_I32S);
            ck_assert_uint_eq(t->rows, 1);
            ck_assert_uint_eq(t->row_stride, ((uint64_t)t->cols * 4 + 7) / 8 * 8);
            int e = t->scale_exp;
            double max_q = 0, max_q_next = 0;
            for (uint32_t c = 0; c < t->cols; c++) {
                double v = bf16_value(s, c);
                double want = nearbyint(ldexp(v, e));
                max_q = fmax(max_q, fabs(want));
                max_q_next = fmax(max_q_next, fabs(nearbyint(ldexp(v, e + 1))));
                int32_t got = stored_i32(t->data + 4 * (uint64_t)c);
                ck_assert_msg((double)got == want, "%s[%u]: %d, reference %.0f (scale_exp %d)", t->name,
                              c, got, want, e);
            }
            for (uint64_t pad = (uint64_t)t->cols * 4; pad < t->row_stride; pad++)
                ck_assert_uint_eq(t->data[pad], 0);
            /* the largest exponent that keeps every |q| <= 2^30 */
            ck_assert(max_q <= 1073741824.0);
            ck_assert_msg(e == 62 || max_q_next > 1073741824.0, "%s: scale_exp %d is not the largest",
                          t->name, e);
        }
    }
    qpk_close(&f);
    st_close(&m);
}

START_TEST(pack_tied_matches_reference_conversion)
{
    qp_test_model("ck", "--preset tiny --seed 11", "");
    check_against_source(path_of("ck"), path_of("ck.qpk"), true);
    remove_dir();
}
END_TEST

START_TEST(pack_untied_matches_reference_and_stores_lm_head)
{
    qp_test_model("ck", "--preset tiny --seed 12 --untied", "");
    check_against_source(path_of("ck"), path_of("ck.qpk"), false);
    remove_dir();
}
END_TEST

START_TEST(pack_stress_values_match_reference_conversion)
{
    qp_test_model("ck", "--preset tiny --seed 13 --stress --untied", "");
    check_against_source(path_of("ck"), path_of("ck.qpk"), false);
    remove_dir();
}
END_TEST

/* ------------------------------------------- 3. sharding does not matter */

static void write_tokenizer_files(const char *sub)
{
    ck_assert_int_eq(mkdir(path_of("%s", sub), 0755), 0);
    /* qpack loads tokenizer.json as qrun does: a real one, whose 2,048 ids
     * the model's vocabulary (--vocab 2048) holds */
    size_t tok_len;
    char *tok = slurp(QP_SOURCE_DIR "/tests/data/tiny-learned/model/tokenizer.json", &tok_len);
    const char *cfg = "{\"chat_template\": \"{% for m in messages %}{{ m.content }}{% endfor %}\", "
                      "\"eos_token\": \"<|im_end|>\"}\n";
    spit(path_of("%s/tokenizer.json", sub), tok, tok_len);
    spit(path_of("%s/tokenizer_config.json", sub), cfg, strlen(cfg));
    free(tok);
}

START_TEST(sharded_and_single_file_give_identical_containers)
{
    make_dir();
    write_tokenizer_files("tok");
    char args[512];
    snprintf(args, sizeof args, "--preset tiny --vocab 2048 --seed 21 --untied --tokenizer-dir %s", path_of("tok"));
    gen("one", args);
    snprintf(args, sizeof args, "--preset tiny --vocab 2048 --seed 21 --untied --shards 3 --tokenizer-dir %s",
             path_of("tok"));
    gen("three", args);
    ck_assert_int_eq(access(path_of("three/model.safetensors.index.json"), F_OK), 0);
    pack_checkpoint("one", "one.qpk", "--quiet");
    pack_checkpoint("three", "three.qpk", "--quiet");

    qp_err err = {{0}};
    struct qpk_file a, b;
    ck_assert_msg(qpk_open(&a, path_of("one.qpk"), QPK_VERIFY, &err) == 0, "%s", err.msg);
    ck_assert_msg(qpk_open(&b, path_of("three.qpk"), QPK_VERIFY, &err) == 0, "%s", err.msg);

    ck_assert_uint_eq(a.n_sections, b.n_sections);
    ck_assert_uint_eq(a.n_tensors, b.n_tensors);
    ck_assert_uint_eq(a.data_offset, b.data_offset);
    unsigned compared = 0;
    for (unsigned kind = QPK_SEC_CONFIG; kind <= QPK_SEC_CHAT_TEMPLATE; kind++) {
        const struct qpk_section *sa = qpk_section_of(&a, kind), *sb = qpk_section_of(&b, kind);
        ck_assert_msg((sa == NULL) == (sb == NULL), "section %u present in one only", kind);
        if (!sa)
            continue;
        ck_assert_uint_eq(sa->stored_size, sb->stored_size);
        ck_assert_uint_eq(sa->raw_size, sb->raw_size);
        ck_assert_uint_eq(sa->xxh3, sb->xxh3);
        ck_assert_mem_eq(a.map + sa->offset, b.map + sb->offset, sa->stored_size);
        char *ta, *tb;
        size_t la, lb;
        ck_assert_msg(qpk_read_section(&a, kind, &ta, &la, &err) == 0, "%s", err.msg);
        ck_assert_msg(qpk_read_section(&b, kind, &tb, &lb, &err) == 0, "%s", err.msg);
        ck_assert_uint_eq(la, lb);
        ck_assert_mem_eq(ta, tb, la);
        free(ta);
        free(tb);
        compared++;
    }
    ck_assert_uint_eq(compared, 4); /* config, tokenizer, tokenizer_config, chat_template */

    /* the tokenizer went in byte for byte */
    char *tok, *tok_src;
    size_t tok_len, tok_src_len;
    ck_assert(qpk_read_section(&a, QPK_SEC_TOKENIZER, &tok, &tok_len, &err) == 0);
    tok_src = slurp(path_of("tok/tokenizer.json"), &tok_src_len);
    ck_assert_uint_eq(tok_len, tok_src_len);
    ck_assert_mem_eq(tok, tok_src, tok_len);
    free(tok);
    free(tok_src);

    const uint8_t *da = a.map + a.dir_offset + (uint64_t)a.n_sections * QPK_SECTION_SIZE;
    const uint8_t *db = b.map + b.dir_offset + (uint64_t)b.n_sections * QPK_SECTION_SIZE;
    for (uint32_t i = 0; i < a.n_tensors; i++) {
        ck_assert_str_eq(a.tensors[i].name, b.tensors[i].name);
        ck_assert_msg(memcmp(da + (uint64_t)i * QPK_TENSOR_SIZE, db + (uint64_t)i * QPK_TENSOR_SIZE,
                             QPK_TENSOR_SIZE) == 0, "directory entry of %s differs", a.tensors[i].name);
        ck_assert_uint_eq(a.tensors[i].nbytes, b.tensors[i].nbytes);
        ck_assert_msg(memcmp(a.tensors[i].data, b.tensors[i].data, a.tensors[i].nbytes) == 0,
                      "data of %s differs", a.tensors[i].name);
    }
    /* provenance differs by design: it lists the source files */
    char *pa, *pb;
    size_t pla, plb;
    ck_assert(qpk_read_section(&a, QPK_SEC_PROVENANCE, &pa, &pla, &err) == 0);
    ck_assert(qpk_read_section(&b, QPK_SEC_PROVENANCE, &pb, &plb, &err) == 0);
    ck_assert_ptr_nonnull(strstr(pb, "model.safetensors.index.json"));
    ck_assert_ptr_null(strstr(pa, "model.safetensors.index.json"));
    free(pa);
    free(pb);
    qpk_close(&a);
    qpk_close(&b);
    remove_dir();
}
END_TEST

/* --------------------------------------------------- 4. qpack verify */

static void flip_byte(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t c;
    ck_assert_int_eq(pread(fd, &c, 1, (off_t)off), 1);
    c ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)off), 1);
    close(fd);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *buf = slurp(from, &n);
    spit(to, buf, n);
    free(buf);
}

static int verify(const char *name)
{
    return run("%s verify %s", QP_QPACK, path_of("%s", name));
}

START_TEST(verify_accepts_fresh_pack)
{
    qp_test_model("ck", "--preset tiny --seed 31", "");
    ck_assert_int_eq(verify("ck.qpk"), 0);
    assert_out_has(": ok (");
    remove_dir();
}
END_TEST

START_TEST(verify_names_tensor_with_corrupted_data)
{
    qp_test_model("ck", "--preset tiny --seed 32", "");
    qp_err err = {{0}};
    struct qpk_file f;
    ck_assert_msg(qpk_open(&f, path_of("ck.qpk"), 0, &err) == 0, "%s", err.msg);
    const struct qpk_tensor *t = qpk_tensor_of(&f, QPK_ROLE_GATE, 1);
    ck_assert_ptr_nonnull(t);
    uint64_t off = t->offset + t->nbytes / 2;
    char name[QPK_NAME_MAX], want[QPK_NAME_MAX + 64];
    strcpy(name, t->name);
    qpk_close(&f);

    flip_byte(path_of("ck.qpk"), off);
    ck_assert_int_eq(verify("ck.qpk"), 1);
    snprintf(want, sizeof want, "tensor %s: checksum mismatch", name);
    assert_out_has(want);
    /* a plain open checks structure only, so info still works */
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("ck.qpk")), 0);
    remove_dir();
}
END_TEST

/* past 64 MiB of tensors the check runs on two threads: with two corrupt
 * tensors, the one reported is still the first in directory order */
START_TEST(verify_on_two_threads_names_the_first_corrupted_tensor)
{
    qp_test_model("ck", "--preset 0.6b --layers 2 --vocab 4096 --seed 34", "");
    qp_err err = {{0}};
    struct qpk_file f;
    ck_assert_msg(qpk_open(&f, path_of("ck.qpk"), QPK_VERIFY, &err) == 0, "%s", err.msg);
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < f.n_tensors; i++)
        bytes += f.tensors[i].nbytes;
    ck_assert_uint_gt(bytes, 64u << 20);
    const struct qpk_tensor *early = &f.tensors[1], *late = &f.tensors[f.n_tensors - 2];
    uint64_t early_at = early->offset + early->nbytes / 3, late_at = late->offset + late->nbytes / 2;
    char want_early[QPK_NAME_MAX + 64], want_late[QPK_NAME_MAX + 64];
    snprintf(want_early, sizeof want_early, "tensor %s: checksum mismatch", early->name);
    snprintf(want_late, sizeof want_late, "tensor %s: checksum mismatch", late->name);
    qpk_close(&f);

    flip_byte(path_of("ck.qpk"), late_at);
    flip_byte(path_of("ck.qpk"), early_at);
    ck_assert_int_eq(verify("ck.qpk"), 1);
    assert_out_has(want_early);
    flip_byte(path_of("ck.qpk"), early_at);     /* back: only the late one is wrong */
    ck_assert_int_eq(verify("ck.qpk"), 1);
    assert_out_has(want_late);
    flip_byte(path_of("ck.qpk"), late_at);
    ck_assert_int_eq(verify("ck.qpk"), 0);
    remove_dir();
}
END_TEST

START_TEST(verify_reports_directory_corruption)
{
    qp_test_model("ck", "--preset tiny --seed 33", "");
    /* a byte of the first tensor's name, and one of a section entry */
    flip_byte(path_of("ck.qpk"), QPK_HEADER_SIZE + 2 * QPK_SECTION_SIZE + 3);
    ck_assert_int_eq(verify("ck.qpk"), 1);
    assert_out_has("directory checksum mismatch");
    pack_checkpoint("ck", "good2.qpk", "--quiet");
    flip_byte(path_of("good2.qpk"), QPK_HEADER_SIZE + 8);
    ck_assert_int_eq(verify("good2.qpk"), 1);
    assert_out_has("directory checksum mismatch");
    remove_dir();
}
END_TEST

START_TEST(verify_reports_header_corruption)
{
    qp_test_model("ck", "--preset tiny --seed 34", "");
    for (uint64_t off = 0; off < QPK_HEADER_SIZE; off++) {
        copy_file(path_of("ck.qpk"), path_of("bad.qpk"));
        flip_byte(path_of("bad.qpk"), off);
        ck_assert_int_eq(verify("bad.qpk"), 1);
        if (off < 8)
            assert_out_has("bad magic");
        else if (off < 10)
            assert_out_has("is not supported (this build reads 1.x)");
        else
            assert_out_has("header checksum mismatch");
    }
    remove_dir();
}
END_TEST

START_TEST(verify_reports_truncation)
{
    qp_test_model("ck", "--preset tiny --seed 35", "");
    struct stat st;
    ck_assert_int_eq(stat(path_of("ck.qpk"), &st), 0);
    ck_assert_int_eq(truncate(path_of("ck.qpk"), st.st_size - 100), 0);
    ck_assert_int_eq(verify("ck.qpk"), 1);
    assert_out_has("truncated");
    ck_assert_int_eq(truncate(path_of("ck.qpk"), 64), 0);
    ck_assert_int_eq(verify("ck.qpk"), 1);
    assert_out_has("smaller than the 128-byte header");
    remove_dir();
}
END_TEST

/* ------------------------------------- 5. structural checks of the reader */

static uint8_t *image;
static size_t image_len;

/* A fresh valid image of a tiny untied pack in memory. */
static void load_image(void)
{
    make_dir();
    gen("ck", "--preset tiny --seed 41 --untied");
    pack_checkpoint("ck", "good.qpk", "--quiet");
    image = (uint8_t *)slurp(path_of("good.qpk"), &image_len);
}

static void free_image(void)
{
    free(image);
    image = NULL;
    remove_dir();
}

static void fix_header_checksum(uint8_t *img) { put64(img + 120, XXH3_64bits(img, 120)); }

static void fix_checksums(uint8_t *img)
{
    put64(img + 48, XXH3_64bits(img + le64(img + 24), le64(img + 32)));
    fix_header_checksum(img);
}

static uint8_t *section_entry(uint8_t *img, uint32_t i) { return img + le64(img + 24) + (uint64_t)i * QPK_SECTION_SIZE; }

static uint8_t *tensor_entry(uint8_t *img, uint32_t i)
{
    return img + le64(img + 24) + (uint64_t)le32(img + 40) * QPK_SECTION_SIZE + (uint64_t)i * QPK_TENSOR_SIZE;
}

/* Opens img; expects failure with a message containing needle. */
static void expect_open_error(const uint8_t *img, const char *needle)
{
    struct qpk_file f;
    qp_err err = {{0}};
    int rc = qpk_open_buffer(&f, img, image_len, "img.qpk", 0, &err);
    if (rc == 0)
        qpk_close(&f);
    ck_assert_msg(rc != 0, "opened despite the corruption (expected '%s')", needle);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "expected '%s' in: %s", needle, err.msg);
}

static uint8_t *patched(void)
{
    uint8_t *p = malloc(image_len);
    ck_assert_ptr_nonnull(p);
    memcpy(p, image, image_len);
    return p;
}

START_TEST(open_buffer_accepts_valid_image_and_recomputed_checksums)
{
    uint8_t *p = patched();
    fix_checksums(p); /* recomputing unchanged checksums is a no-op */
    ck_assert_mem_eq(p, image, image_len);
    struct qpk_file f;
    qp_err err = {{0}};
    ck_assert_msg(qpk_open_buffer(&f, p, image_len, "img.qpk", QPK_VERIFY, &err) == 0, "%s", err.msg);
    qpk_close(&f);
    free(p);
}
END_TEST

START_TEST(open_buffer_rejects_unknown_encoding)
{
    uint8_t *p = patched();
    put16(tensor_entry(p, 1) + 68, 9);
    fix_checksums(p);
    expect_open_error(p, "has unknown encoding 9");
    free(p);
}
END_TEST

START_TEST(open_buffer_rejects_shape_mismatch)
{
    uint8_t *p = patched();
    uint8_t *e = tensor_entry(p, 0);
    put32(e + 72, le32(e + 72) + 4);
    fix_checksums(p);
    expect_open_error(p, "does not match the config's");
    free(p);
}
END_TEST

START_TEST(open_buffer_rejects_unaligned_offset)
{
    uint8_t *p = patched();
    uint8_t *e = tensor_entry(p, 2);
    put64(e + 96, le64(e + 96) + 8);
    fix_checksums(p);
    char want[160];
    snprintf(want, sizeof want, "tensor %s: offset %" PRIu64 " is not 64-aligned (container format 1.%d)",
             (const char *)e, le64(e + 96), QPK_VERSION_MINOR);
    expect_open_error(p, want);
    free(p);
}
END_TEST

/* The writer packs tensors at 64-byte boundaries: the next tensor starts
 * within 64 bytes of where one ends. */
START_TEST(writer_aligns_tensors_to_a_cache_line)
{
    uint32_t n = le32(image + 44);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = tensor_entry(image, i);
        uint64_t off = le64(e + 96), end = off + le64(e + 104), next = UINT64_MAX;
        ck_assert_msg(off % 64 == 0, "%s at %" PRIu64, (const char *)e, off);
        for (uint32_t j = 0; j < n; j++)
            if (le64(tensor_entry(image, j) + 96) >= end && le64(tensor_entry(image, j) + 96) < next)
                next = le64(tensor_entry(image, j) + 96);
        ck_assert_msg(next == UINT64_MAX || next - end < 64, "%s: %" PRIu64 " bytes of padding after it",
                      (const char *)e, next - end);
    }
    ck_assert_uint_eq(le64(image + 56) % 64, 0);
    ck_assert_uint_eq(le16(image + 10), 6);
}
END_TEST

/* Before 1.6 tensors lay on page boundaries: a 1.6 file relabelled 1.5 is
 * refused with the first tensor that is not on one. */
START_TEST(open_buffer_rejects_cache_line_offsets_before_1_6)
{
    uint8_t *p = patched();
    put16(p + 10, 5);
    fix_header_checksum(p);
    uint64_t data = le64(p + 56), page = data / 4096 * 4096;
    if (data != page)
        expect_open_error(p, "tensor data region starts at");
    /* with the data region widened to a page boundary, the tensor is named */
    put64(p + 56, page);
    put64(p + 64, le64(p + 64) + (data - page));
    fix_header_checksum(p);
    uint32_t first = 0;
    for (uint32_t i = 0; i < le32(p + 44); i++)
        if (le64(tensor_entry(p, i) + 96) < le64(tensor_entry(p, first) + 96))
            first = i;
    uint8_t *e = tensor_entry(p, first);
    ck_assert_uint_ne(le64(e + 96) % 4096, 0);
    char want[160];
    snprintf(want, sizeof want, "tensor %s: offset %" PRIu64 " is not 4096-aligned (container format 1.5)",
             (const char *)e, le64(e + 96));
    expect_open_error(p, want);
    free(p);
}
END_TEST

START_TEST(open_buffer_rejects_tensor_outside_data_region)
{
    uint8_t *p = patched();
    uint8_t *e = tensor_entry(p, 2);
    uint64_t end = le64(p + 56) + le64(p + 64);
    put64(e + 96, (end + QPK_DATA_ALIGN) / QPK_DATA_ALIGN * QPK_DATA_ALIGN);
    fix_checksums(p);
    expect_open_error(p, "lies outside the data region");
    /* and one that starts before it (inside the directory's page) */
    free(p);
    p = patched();
    put64(tensor_entry(p, 2) + 96, 0);
    fix_checksums(p);
    expect_open_error(p, "lies outside the data region");
    free(p);
}
END_TEST

START_TEST(open_buffer_rejects_overlapping_tensors)
{
    uint8_t *p = patched();
    /* tensor 1 (a small norm) moved onto tensor 0 (the embedding) */
    put64(tensor_entry(p, 1) + 96, le64(tensor_entry(p, 0) + 96));
    fix_checksums(p);
    expect_open_error(p, "overlaps");
    free(p);
}
END_TEST

START_TEST(open_buffer_rejects_unknown_section_kind)
{
    uint8_t *p = patched();
    uint32_t last = le32(p + 40) - 1; /* provenance */
    ck_assert_uint_eq(le32(section_entry(p, last)), QPK_SEC_PROVENANCE);
    put32(section_entry(p, last), 77);
    fix_checksums(p);
    expect_open_error(p, "has unknown kind 77");
    free(p);
}
END_TEST

START_TEST(open_buffer_rejects_newer_major_version)
{
    uint8_t *p = patched();
    put16(p + 8, 2);
    fix_header_checksum(p);
    char want[64];
    snprintf(want, sizeof want, "version 2.%d is not supported", QPK_VERSION_MINOR);
    expect_open_error(p, want);
    expect_open_error(p, "made by a newer qpack");
    free(p);
}
END_TEST

/* files of every earlier minor version open as they are: a committed 1.0
 * file (tensors on page boundaries) labelled with each */
START_TEST(open_buffer_reads_older_minor_versions)
{
    size_t len;
    uint8_t *old = (uint8_t *)slurp(QP_SOURCE_DIR "/tests/data/format-1.0-int4.qpk", &len);
    ck_assert_uint_eq(le16(old + 10), 0);
    for (uint16_t minor = 0; minor < QPK_VERSION_MINOR; minor++) {
        put16(old + 10, minor);
        fix_header_checksum(old);
        struct qpk_file f;
        qp_err err = {{0}};
        ck_assert_msg(qpk_open_buffer(&f, old, len, "old.qpk", QPK_VERIFY, &err) == 0, "1.%u: %s", minor, err.msg);
        ck_assert_uint_eq(f.version_minor, minor);
        ck_assert_uint_eq(f.tensors[1].offset % 4096, 0);
        qpk_close(&f);
    }
    free(old);
}
END_TEST

START_TEST(open_buffer_rejects_stale_directory_checksum)
{
    uint8_t *p = patched();
    put16(tensor_entry(p, 1) + 68, 9);
    fix_header_checksum(p); /* dir_xxh3 left stale */
    expect_open_error(p, "directory checksum mismatch");
    free(p);
}
END_TEST

/* --------------------------------------------------- 6. atomic writes */

static bool has_partial(const char *base)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, ".%s.partial-", base);
    DIR *d = opendir(test_dir);
    ck_assert_ptr_nonnull(d);
    bool found = false;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)))
            found = true;
    closedir(d);
    return found;
}

static void corrupt_config_hidden(const char *ck)
{
    size_t n;
    char *cfg = slurp(path_of("%s/config.json", ck), &n);
    char *at = strstr(cfg, "\"hidden_size\": 64");
    ck_assert_ptr_nonnull(at);
    memcpy(at, "\"hidden_size\": 32", 17);
    spit(path_of("%s/config.json", ck), cfg, n);
    free(cfg);
}

/* Sets one BF16 value of a tensor in the checkpoint's model.safetensors to +inf. */
static void poison_value(const char *ck, const char *tensor, uint64_t index)
{
    qp_err err = {{0}};
    struct st_model m;
    const char *file = path_of("%s/model.safetensors", ck);
    ck_assert_msg(st_open_file(&m, file, &err) == 0, "%s", err.msg);
    const struct st_tensor *t = st_find(&m, tensor);
    ck_assert_ptr_nonnull(t);
    uint64_t off = (uint64_t)(t->data - m.files[0].map) + 2 * index;
    st_close(&m);
    int fd = open(file, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint8_t inf[2] = {0x80, 0x7f};
    ck_assert_int_eq(pwrite(fd, inf, 2, (off_t)off), 2);
    close(fd);
}

START_TEST(failed_pack_on_shape_mismatch_leaves_no_output)
{
    make_dir();
    gen("ck", "--preset tiny --seed 51");
    corrupt_config_hidden("ck");
    int rc = run("%s pack %s -o %s --quiet", QP_QPACK, path_of("ck"), path_of("out.qpk"));
    ck_assert_int_eq(rc, 1);
    assert_out_has("config.json implies");
    ck_assert_int_ne(access(path_of("out.qpk"), F_OK), 0);
    ck_assert(!has_partial("out.qpk"));
    remove_dir();
}
END_TEST

START_TEST(failed_pack_midway_leaves_no_output_or_partial)
{
    make_dir();
    gen("ck", "--preset tiny --seed 52");
    poison_value("ck", "model.layers.1.mlp.down_proj.weight", 70);
    int rc = run("%s pack %s -o %s --quiet", QP_QPACK, path_of("ck"), path_of("out.qpk"));
    ck_assert_int_eq(rc, 1);
    assert_out_has("model.layers.1.mlp.down_proj.weight[0, 70]");
    assert_out_has("does not fit q24");
    ck_assert_int_ne(access(path_of("out.qpk"), F_OK), 0);
    ck_assert(!has_partial("out.qpk"));
    remove_dir();
}
END_TEST

START_TEST(failed_pack_keeps_existing_output_byte_identical)
{
    qp_test_model("ck", "--preset tiny --seed 53", "");
    size_t n0, n1;
    char *before = slurp(path_of("ck.qpk"), &n0);

    /* failing after the writer started */
    gen("bad", "--preset tiny --seed 54");
    poison_value("bad", "model.layers.1.mlp.down_proj.weight", 5);
    ck_assert_int_eq(run("%s pack %s -o %s --quiet", QP_QPACK, path_of("bad"), path_of("ck.qpk")), 1);
    char *after = slurp(path_of("ck.qpk"), &n1);
    ck_assert_uint_eq(n0, n1);
    ck_assert_mem_eq(before, after, n0);
    free(after);
    ck_assert(!has_partial("ck.qpk"));

    /* failing before it started */
    gen("bad2", "--preset tiny --seed 55");
    corrupt_config_hidden("bad2");
    ck_assert_int_eq(run("%s pack %s -o %s --quiet", QP_QPACK, path_of("bad2"), path_of("ck.qpk")), 1);
    after = slurp(path_of("ck.qpk"), &n1);
    ck_assert_uint_eq(n0, n1);
    ck_assert_mem_eq(before, after, n0);
    free(after);
    ck_assert(!has_partial("ck.qpk"));
    ck_assert_int_eq(verify("ck.qpk"), 0);
    free(before);
    remove_dir();
}
END_TEST

/* ---------------------------------------------------- 7. qpack info, CLI */

START_TEST(info_json_parses_and_lists_every_tensor)
{
    qp_test_model("ck", "--preset tiny --seed 61 --untied", "");
    ck_assert_int_eq(run("%s info %s --json", QP_QPACK, path_of("ck.qpk")), 0);
    cJSON *root = cJSON_Parse(out_text);
    ck_assert_msg(root != NULL, "not JSON: %s", out_text);
    qp_err err = {{0}};
    struct qpk_file f;
    ck_assert_msg(qpk_open(&f, path_of("ck.qpk"), 0, &err) == 0, "%s", err.msg);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    ck_assert(cJSON_IsArray(ts));
    ck_assert_int_eq(cJSON_GetArraySize(ts), (int)f.n_tensors);
    for (uint32_t i = 0; i < f.n_tensors; i++) {
        const cJSON *t = cJSON_GetArrayItem(ts, (int)i);
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        ck_assert(cJSON_IsString(name));
        ck_assert_str_eq(name->valuestring, f.tensors[i].name);
        const cJSON *nb = cJSON_GetObjectItemCaseSensitive(t, "nbytes");
        ck_assert(cJSON_IsNumber(nb));
        ck_assert_uint_eq((uint64_t)nb->valuedouble, f.tensors[i].nbytes);
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings")));
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(cfg, "hidden_size")->valueint, 64);
    /* the tiny vocabulary has no room for Qwen3's bos/eos (151643, 151645):
     * config.json says null, and so does info, never -1 */
    ck_assert_int_eq(f.cfg.bos_id, -1);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cfg, "bos_token_id")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id")));
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("ck.qpk")), 0);
    assert_out_has("bos none, eos none");
    qpk_close(&f);
    cJSON_Delete(root);
    remove_dir();
}
END_TEST

/* A checkpoint folder named with a terminal escape (ESC [31m), a C1 CSI
 * (U+009B) and a byte that is not UTF-8 (0xff): the packer records the
 * name in the provenance, and `qpack info` must show it inert. */
/* control characters a terminal would obey; the packed name is UTF-8 (qpack
 * pack refuses a name that is not), an error message also quotes a bad byte */
#define CONTROL_NAME "ck\x1b[31m\xc2\x9b"
#define HOSTILE_NAME CONTROL_NAME "\xff"

static void pack_hostile(void)
{
    int rc = run("%s '%s' --preset tiny --seed 5", QP_GEN_CHECKPOINT, path_of(CONTROL_NAME));
    ck_assert_msg(rc == 0, "qp-gen-checkpoint failed: %s", out_text);
    rc = run("%s pack '%s' -o %s --quiet", QP_QPACK, path_of(CONTROL_NAME), path_of("h.qpk"));
    ck_assert_msg(rc == 0, "qpack pack failed: %s", out_text);
}

/* no ESC, DEL, C1 control or invalid UTF-8 byte anywhere in out_text */
static void assert_out_inert(void)
{
    for (const unsigned char *p = (const unsigned char *)out_text; *p; p++) {
        ck_assert_msg(*p != 0x1b && *p != 0x7f && *p != 0xff, "raw byte 0x%02x at %td", *p,
                      (const char *)p - out_text);
        ck_assert_msg(!(p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f), "raw C1 control at %td",
                      (const char *)p - out_text);
    }
}

START_TEST(info_shows_escapes_instead_of_raw_control_bytes)
{
    make_dir();
    pack_hostile();
    ck_assert_int_eq(run("%s info %s", QP_QPACK, path_of("h.qpk")), 0);
    assert_out_inert();
    assert_out_has(" from ck\\x1b[31m\\u009b, format q24\n");
    /* an error message quotes its file: escaped too */
    ck_assert_int_eq(run("%s info '%s'", QP_QPACK, path_of("no" HOSTILE_NAME ".qpk")), 1);
    assert_out_inert();
    assert_out_has("nock\\x1b[31m\\u009b\\xff.qpk: ");
    remove_dir();
}
END_TEST

START_TEST(info_json_is_valid_utf8_with_control_characters_escaped)
{
    make_dir();
    pack_hostile();
    ck_assert_int_eq(run("%s info %s --json", QP_QPACK, path_of("h.qpk")), 0);
    assert_out_inert();
    /* an independent UTF-8 check: glibc's iconv refuses ill-formed input */
    spit(path_of("info.json"), out_text, strlen(out_text));
    ck_assert_msg(run("iconv -f UTF-8 -t UTF-8 %s >/dev/null", path_of("info.json")) == 0, "%s", out_text);
    char *json = slurp(path_of("info.json"), NULL);
    cJSON *root = cJSON_Parse(json);
    ck_assert_msg(root != NULL, "not JSON: %s", json);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "provenance"),
                                                        "source");
    ck_assert(cJSON_IsString(src));
    /* the escapes decode back to the characters */
    ck_assert_str_eq(src->valuestring, CONTROL_NAME);
    cJSON_Delete(root);
    free(json);
    remove_dir();
}
END_TEST

/* stdout on /dev/full: every write fails with ENOSPC */
START_TEST(info_reports_lost_output)
{
    qp_test_model("ck", "--preset tiny --seed 62", "");
    const char *modes[] = {"", "--json"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(run("(%s info %s %s >/dev/full)", QP_QPACK, path_of("ck.qpk"), modes[i]), 1);
        ck_assert_str_eq(out_text, "qpack: writing standard output: No space left on device\n");
    }
    ck_assert_int_eq(run("(%s verify %s >/dev/full)", QP_QPACK, path_of("ck.qpk")), 1);
    ck_assert_str_eq(out_text, "qpack: writing standard output: No space left on device\n");
    remove_dir();
}
END_TEST

START_TEST(unknown_subcommand_exits_2)
{
    make_dir();
    ck_assert_int_eq(run("%s frobnicate x", QP_QPACK), 2);
    assert_out_has("unknown command 'frobnicate'");
    ck_assert_int_eq(run("%s", QP_QPACK), 2);
    ck_assert_int_eq(run("%s info", QP_QPACK), 2);
    ck_assert_int_eq(run("%s verify", QP_QPACK), 2);
    ck_assert_int_eq(run("%s pack", QP_QPACK), 2);
    remove_dir();
}
END_TEST

/* The task section is read strictly: the one known task, no other key, no
 * key twice; and a source's path names a reranker in any case. */
START_TEST(task_section_reads_rerank_and_refuses_the_rest)
{
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"{\"task\": \"embed\"}", "task \"embed\" is not known"},
        {"{\"task\": 1}", "\"task\" must be a string"},
        {"{}", "\"task\" must be a string"},
        {"{\"task\": \"rerank\", \"yes\": \"ja\"}", "unknown key \"yes\""},
        {"{\"task\": \"rerank\", \"task\": \"rerank\"}", "twice"},
        {"[\"rerank\"]", "not a JSON object"},
        {"{\"task\": \"rerank\"", "not a JSON object"},
    };
    enum qp_task t;
    qp_err err = {{0}};
    const char *ok = task_json(QP_TASK_RERANK);
    ck_assert_int_eq(task_parse(ok, strlen(ok), "task", &t, &err), 0);
    ck_assert_int_eq(t, QP_TASK_RERANK);
    ck_assert_ptr_null(task_json(QP_TASK_NONE));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        t = QP_TASK_RERANK;
        ck_assert_int_eq(task_parse(bad[i].text, strlen(bad[i].text), "x.qpk: section task", &t, &err), -1);
        ck_assert_int_eq(t, QP_TASK_NONE);
        ck_assert_msg(strstr(err.msg, bad[i].why) && !strncmp(err.msg, "x.qpk: section task: ", 21), "%s: %s",
                      bad[i].text, err.msg);
    }
    ck_assert_int_eq(task_of_path("/models/Qwen3-Reranker-0.6B"), QP_TASK_RERANK);
    ck_assert_int_eq(task_of_path("hub/models--Qwen--qwen3-reranker-4B/snapshots/1a2b"), QP_TASK_RERANK);
    ck_assert_int_eq(task_of_path("/models/Qwen3-Embedding-0.6B"), QP_TASK_NONE);
    ck_assert_int_eq(task_of_path("/models/Qwen3-0.6B"), QP_TASK_NONE);
}
END_TEST

/* ------------------------------------------------------------------ suite */

static Suite *suite(void)
{
    Suite *s = suite_create("qpk");
    TCase *tc = tcase_create("q24");
    tcase_add_test(tc, q24_table_matches_float_reference_for_every_bf16);
    suite_add_tcase(s, tc);

    tc = tcase_create("pack");
    tcase_add_test(tc, pack_tied_matches_reference_conversion);
    tcase_add_test(tc, pack_untied_matches_reference_and_stores_lm_head);
    tcase_add_test(tc, pack_stress_values_match_reference_conversion);
    tcase_add_test(tc, sharded_and_single_file_give_identical_containers);
    suite_add_tcase(s, tc);

    tc = tcase_create("verify");
    tcase_add_test(tc, verify_accepts_fresh_pack);
    tcase_add_test(tc, verify_names_tensor_with_corrupted_data);
    tcase_add_test(tc, verify_on_two_threads_names_the_first_corrupted_tensor);
    tcase_add_test(tc, verify_reports_directory_corruption);
    tcase_add_test(tc, verify_reports_header_corruption);
    tcase_add_test(tc, verify_reports_truncation);
    suite_add_tcase(s, tc);

    tc = tcase_create("open_buffer");
    tcase_add_checked_fixture(tc, load_image, free_image);
    tcase_add_test(tc, open_buffer_accepts_valid_image_and_recomputed_checksums);
    tcase_add_test(tc, open_buffer_rejects_unknown_encoding);
    tcase_add_test(tc, open_buffer_rejects_shape_mismatch);
    tcase_add_test(tc, open_buffer_rejects_unaligned_offset);
    tcase_add_test(tc, writer_aligns_tensors_to_a_cache_line);
    tcase_add_test(tc, open_buffer_rejects_cache_line_offsets_before_1_6);
    tcase_add_test(tc, open_buffer_rejects_tensor_outside_data_region);
    tcase_add_test(tc, open_buffer_rejects_overlapping_tensors);
    tcase_add_test(tc, open_buffer_rejects_unknown_section_kind);
    tcase_add_test(tc, open_buffer_rejects_newer_major_version);
    tcase_add_test(tc, open_buffer_reads_older_minor_versions);
    tcase_add_test(tc, open_buffer_rejects_stale_directory_checksum);
    suite_add_tcase(s, tc);

    tc = tcase_create("atomic");
    tcase_add_test(tc, failed_pack_on_shape_mismatch_leaves_no_output);
    tcase_add_test(tc, failed_pack_midway_leaves_no_output_or_partial);
    tcase_add_test(tc, failed_pack_keeps_existing_output_byte_identical);
    suite_add_tcase(s, tc);

    tc = tcase_create("cli");
    tcase_add_test(tc, info_json_parses_and_lists_every_tensor);
    tcase_add_test(tc, info_shows_escapes_instead_of_raw_control_bytes);
    tcase_add_test(tc, info_json_is_valid_utf8_with_control_characters_escaped);
    tcase_add_test(tc, info_reports_lost_output);
    tcase_add_test(tc, unknown_subcommand_exits_2);
    tcase_add_test(tc, task_section_reads_rerank_and_refuses_the_rest);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(suite());
}
