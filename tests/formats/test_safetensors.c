/* test_safetensors.c - the safetensors reader, the streaming writer and the
 * bf16/f16 conversions. Each malformed-file test checks the specific
 * message and that it names the file. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "bf16.h"
#include "safetensors.h"
#include "safetensors_write.h"
#include "qp_test.h"

/* ----------------------------------------------------------------- fixtures */

static void write_bytes(const char *name, const void *data, size_t len)
{
    FILE *f = fopen(path_of(name), "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void write_text(const char *name, const char *text)
{
    write_bytes(name, text, strlen(text));
}

/* A raw safetensors file: the given length field, header text, data bytes. */
static void write_raw(const char *name, uint64_t hlen, const char *header, size_t data_len)
{
    size_t n = strlen(header);
    uint8_t *buf = malloc(8 + n + data_len + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + n + i] = (uint8_t)(i * 7 + 1);
    write_bytes(name, buf, 8 + n + data_len);
    free(buf);
}

static void write_st(const char *name, const char *header, size_t data_len)
{
    write_raw(name, strlen(header), header, data_len);
}

#define ck_assert_error(err, file, needle) do {                                       \
    ck_assert_msg(strstr((err).msg, (needle)) != NULL, "message \"%s\" lacks \"%s\"", \
                  (err).msg, (needle));                                               \
    ck_assert_msg(strstr((err).msg, (file)) != NULL, "message \"%s\" does not name %s", \
                  (err).msg, (file));                                                 \
    ck_assert_msg(strchr((err).msg, '\n') == NULL, "message \"%s\" is not one line",  \
                  (err).msg);                                                         \
} while (0)

/* Opening name must fail with a message holding needle and the file name. */
#define ck_assert_open_fails(name, needle) do {                                       \
    struct st_model m_;                                                               \
    qp_err e_ = { "" };                                                               \
    ck_assert_int_eq(st_open_file(&m_, path_of(name), &e_), -1);                      \
    ck_assert_error(e_, name, needle);                                                \
    ck_assert_ptr_null(m_.files);                                                     \
} while (0)

#define ck_assert_dir_fails(file, needle) do {                                        \
    struct st_model m_;                                                               \
    qp_err e_ = { "" };                                                               \
    ck_assert_int_eq(st_open_dir(&m_, test_dir, &e_), -1);                            \
    ck_assert_error(e_, file, needle);                                                \
} while (0)

#define T_F32_2 "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"

/* Writes tensors named in names (F32, shape [n]) with deterministic bytes. */
static void write_f32_file(const char *file, const char *const *names, const uint32_t *lens,
                           uint32_t n)
{
    struct stw_tensor decl[16];
    qp_err err = { "" };
    struct stw_writer *w;
    for (uint32_t i = 0; i < n; i++)
        decl[i] = (struct stw_tensor){ .name = names[i], .dtype = ST_F32, .ndim = 1,
                                        .shape = { lens[i] } };
    ck_assert_msg(stw_open(&w, path_of(file), decl, n, &err) == 0, "%s", err.msg);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < lens[i]; k++) {
            float v = (float)(names[i][0] * 100 + k);
            ck_assert_int_eq(stw_write(w, &v, 4, &err), 0);
        }
    ck_assert_msg(stw_finish(w, &err) == 0, "%s", err.msg);
}

/* ------------------------------------------------------ bf16 / f16 helpers */

/* The loops count mismatches and assert once: a Check assertion costs a
 * message to the parent process, too slow for millions of values. */
START_TEST(bf16_widens_and_narrows_every_value_exactly)
{
    uint32_t bad = 0, first = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = qp_bf16_to_f32((uint16_t)h);
        int ok = isnan(f) ? isnan(qp_bf16_to_f32(qp_f32_to_bf16(f))) : qp_f32_to_bf16(f) == h;
        if (!ok && bad++ == 0)
            first = h;
    }
    ck_assert_msg(bad == 0, "%u values do not round trip, first %04x", bad, first);
}
END_TEST

START_TEST(f32_to_bf16_rounds_half_to_even_and_keeps_nan)
{
    ck_assert_uint_eq(qp_f32_to_bf16(qp_f32_from_bits(0x3f808000)), 0x3f80);  /* tie, even down */
    ck_assert_uint_eq(qp_f32_to_bf16(qp_f32_from_bits(0x3f818000)), 0x3f82);  /* tie, even up */
    ck_assert_uint_eq(qp_f32_to_bf16(qp_f32_from_bits(0x3f808001)), 0x3f81);  /* above the tie */
    ck_assert_uint_eq(qp_f32_to_bf16(qp_f32_from_bits(0x7f7fffff)), 0x7f80);  /* max -> inf */
    ck_assert(isnan(qp_bf16_to_f32(qp_f32_to_bf16(qp_f32_from_bits(0x7f800001)))));
    ck_assert(isnan(qp_bf16_to_f32(qp_f32_to_bf16(qp_f32_from_bits(0xffffffff)))));
    ck_assert_uint_eq(qp_f32_to_bf16(-0.0f), 0x8000);
}
END_TEST

/* 2^e exactly, without relying on libm. */
static double f16_reference(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp ? ldexp(1024 + mant, exp - 25) : ldexp(mant, -24);
    return (h & 0x8000) ? -v : v;
}

START_TEST(f16_widens_and_narrows_every_value_exactly)
{
    uint32_t bad = 0, first = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = qp_f16_to_f32((uint16_t)h);
        int ok;
        if (((h >> 10) & 0x1f) == 0x1f)
            ok = (h & 0x3ff) ? isnan(f) && isnan(qp_f16_to_f32(qp_f32_to_f16(f))) : isinf(f);
        else
            ok = (double)f == f16_reference((uint16_t)h) && qp_f32_to_f16(f) == h;
        if (!ok && bad++ == 0)
            first = h;
    }
    ck_assert_msg(bad == 0, "%u values do not round trip, first %04x", bad, first);
}
END_TEST

START_TEST(f32_to_f16_picks_the_nearest_value_ties_to_even)
{
    ck_assert_uint_eq(qp_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);       /* tie, even down */
    ck_assert_uint_eq(qp_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);   /* tie, even up */
    ck_assert_uint_eq(qp_f32_to_f16(65519.0f), 0x7bff);
    ck_assert_uint_eq(qp_f32_to_f16(65520.0f), 0x7c00);              /* tie at max -> inf */
    ck_assert_uint_eq(qp_f32_to_f16(0x1p-25f), 0x0000);              /* tie at 0, even */
    ck_assert_uint_eq(qp_f32_to_f16(0x1.000002p-25f), 0x0001);
    ck_assert_uint_eq(qp_f32_to_f16(3 * 0x1p-25f), 0x0002);          /* 1.5 units -> 2 */
    ck_assert_uint_eq(qp_f32_to_f16(0x1.ffcp-15f), 0x0400);  /* tie: largest subnormal or 2^-14 */
    ck_assert(isnan(qp_f16_to_f32(qp_f32_to_f16(NAN))));
    /* Every result is the nearest f16 (ties to even), checked against neighbours. */
    uint64_t x = 12345;
    uint32_t bad = 0;
    float first = 0;
    for (int i = 0; i < 2000000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        float f = qp_f32_from_bits((uint32_t)(x >> 32) & 0xc77fffffu);  /* |f| < 65536 */
        if (fabsf(f) >= 65520.0f)
            continue;
        uint16_t h = qp_f32_to_f16(f);
        double d = fabs((double)f - qp_f16_to_f32(h));
        for (int s = -1; s <= 1; s += 2) {
            uint16_t n = (uint16_t)(h + s);
            if ((n & 0x7fff) >= 0x7c00 || ((n ^ h) & 0x8000))
                continue;
            double dn = fabs((double)f - qp_f16_to_f32(n));
            if (!(d < dn || (d == dn && (h & 1) == 0)) && bad++ == 0)
                first = f;
        }
    }
    ck_assert_msg(bad == 0, "%u values are not rounded to nearest, first %a", bad, first);
}
END_TEST

/* ------------------------------------------------------------- round trip */

START_TEST(writer_then_reader_round_trips_every_dtype_and_shape)
{
    struct stw_tensor decl[] = {
        { "scalar", ST_F32, 0, { 0 } },
        { "empty", ST_BF16, 1, { 0 } },
        { "zero_in_middle", ST_F16, 3, { 3, 0, 2 } },
        { "matrix", ST_BF16, 2, { 2, 3 } },
        { "eight_dims", ST_F32, 8, { 1, 1, 2, 1, 1, 1, 1, 2 } },
        { "vector.\"quoted\\name\"", ST_F16, 1, { 5 } },
        { "ünïcode/名前", ST_BF16, 1, { 1 } },
    };
    uint32_t n = sizeof(decl) / sizeof(decl[0]);
    uint64_t total = 0;
    qp_err err = { "" };
    struct stw_writer *w;
    ck_assert_int_eq(stw_data_size(decl, n, &total, &err), 0);
    ck_assert_uint_eq(total, 4 + 0 + 0 + 12 + 16 + 10 + 2);
    ck_assert_msg(stw_open(&w, path_of("rt.safetensors"), decl, n, &err) == 0, "%s", err.msg);
    uint8_t bytes[64];
    for (uint32_t i = 0; i < total; i++)
        bytes[i] = (uint8_t)(i * 13 + 5);
    ck_assert_int_eq(stw_write(w, bytes, 10, &err), 0);      /* crosses tensor boundaries */
    ck_assert_uint_eq(stw_current(w), 3);
    ck_assert_int_eq(stw_write(w, bytes + 10, total - 10, &err), 0);
    ck_assert_msg(stw_finish(w, &err) == 0, "%s", err.msg);

    struct st_model m;
    ck_assert_msg(st_open_file(&m, path_of("rt.safetensors"), &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(m.n_tensors, n);
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct st_tensor *t = st_find(&m, decl[i].name);
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->dtype, decl[i].dtype);
        ck_assert_uint_eq(t->ndim, decl[i].ndim);
        uint64_t numel = 1;
        for (uint32_t d = 0; d < t->ndim; d++) {
            ck_assert_uint_eq(t->shape[d], decl[i].shape[d]);
            numel *= decl[i].shape[d];
        }
        ck_assert_uint_eq(t->numel, numel);
        ck_assert_uint_eq(t->nbytes, numel * st_dtype_size(t->dtype));
        ck_assert_int_eq(memcmp(t->data, bytes + at, t->nbytes), 0);
        at += t->nbytes;
    }
    ck_assert_ptr_null(st_find(&m, "absent"));
    for (uint32_t i = 1; i < m.n_tensors; i++)                /* sorted by name */
        ck_assert_int_lt(strcmp(m.tensors[i - 1].name, m.tensors[i].name), 0);
    ck_assert_uint_eq((uint64_t)(st_find(&m, "scalar")->data - m.files[0].map) % 8, 0);
    st_close(&m);
}
END_TEST

START_TEST(get_f32_converts_each_dtype)
{
    uint16_t bf[2] = { qp_f32_to_bf16(1.5f), qp_f32_to_bf16(-2.25f) };
    uint16_t hf[2] = { qp_f32_to_f16(0.1f), qp_f32_to_f16(-65504.0f) };
    float ff[2] = { 3.14159f, -1e-30f };
    struct stw_tensor decl[] = { { "bf", ST_BF16, 1, { 2 } }, { "f", ST_F32, 1, { 2 } },
                                 { "h", ST_F16, 1, { 2 } } };
    qp_err err = { "" };
    struct stw_writer *w;
    ck_assert_int_eq(stw_open(&w, path_of("v.safetensors"), decl, 3, &err), 0);
    ck_assert_int_eq(stw_write(w, bf, 4, &err) || stw_write(w, ff, 8, &err) ||
                     stw_write(w, hf, 4, &err) || stw_finish(w, &err), 0);
    struct st_model m;
    ck_assert_int_eq(st_open_file(&m, path_of("v.safetensors"), &err), 0);
    ck_assert(st_get_f32(st_find(&m, "bf"), 0) == 1.5f);
    ck_assert(st_get_f32(st_find(&m, "bf"), 1) == -2.25f);
    ck_assert(st_get_f32(st_find(&m, "h"), 0) == qp_f16_to_f32(qp_f32_to_f16(0.1f)));
    ck_assert(st_get_f32(st_find(&m, "h"), 1) == -65504.0f);
    ck_assert(st_get_f32(st_find(&m, "f"), 0) == 3.14159f);
    ck_assert(st_get_f32(st_find(&m, "f"), 1) == -1e-30f);
    st_close(&m);
}
END_TEST

/* st_read_f32 and st_max_abs against st_get_f32 element by element, over
 * every dtype, at every start and length up to a few vectors (so both the
 * 8-wide path and the tail are used), with infinities and NaNs among the
 * values: a NaN is skipped by the maximum, an infinity is the maximum. */
START_TEST(row_reads_and_max_abs_agree_with_get_f32)
{
    enum { N = 67 };
    uint16_t bf[N], hf[N];
    float ff[N];
    for (int i = 0; i < N; i++) {
        float v = (float)((i % 7 - 3) * 0.37 * (1 + i) * (i % 5 ? 1 : -1));
        ff[i] = v;
        bf[i] = qp_f32_to_bf16(v);
        hf[i] = qp_f32_to_f16(v);
    }
    bf[40] = 0x7fc1; /* NaN */
    bf[50] = 0xff80; /* -inf */
    hf[40] = 0x7e01;
    ff[40] = NAN;
    struct stw_tensor decl[] = { { "bf", ST_BF16, 1, { N } }, { "f", ST_F32, 1, { N } },
                                 { "h", ST_F16, 1, { N } } };
    qp_err err = { "" };
    struct stw_writer *w;
    ck_assert_int_eq(stw_open(&w, path_of("rows.safetensors"), decl, 3, &err), 0);
    ck_assert_int_eq(stw_write(w, bf, sizeof bf, &err) || stw_write(w, ff, sizeof ff, &err) ||
                     stw_write(w, hf, sizeof hf, &err) || stw_finish(w, &err), 0);
    struct st_model m;
    ck_assert_int_eq(st_open_file(&m, path_of("rows.safetensors"), &err), 0);
    int mismatches = 0;
    for (int k = 0; k < 3; k++) {
        const struct st_tensor *t = st_find(&m, decl[k].name);
        for (uint64_t first = 0; first < N; first++)
            for (uint64_t n = 0; first + n <= N; n++) {
                float out[N + 1];
                out[n] = 12345.0f;
                st_read_f32(t, first, n, out);
                double want = 0;
                for (uint64_t i = 0; i < n; i++) {
                    float v = st_get_f32(t, first + i);
                    mismatches += memcmp(&out[i], &v, sizeof v) != 0;
                    want = fmax(want, fabs((double)v));
                }
                mismatches += out[n] != 12345.0f; /* nothing past n */
                double got = st_max_abs(t, first, n);
                mismatches += !(got == want);
            }
    }
    ck_assert_int_eq(mismatches, 0);
    ck_assert(isinf(st_max_abs(st_find(&m, "bf"), 0, N)));
    st_close(&m);
}
END_TEST

START_TEST(release_keeps_the_data_readable)
{
    static const char *const names[] = { "a", "b" };
    static const uint32_t lens[] = { 3000, 5000 };
    write_f32_file("r.safetensors", names, lens, 2);
    struct st_model m;
    qp_err err = { "" };
    ck_assert_int_eq(st_open_file(&m, path_of("r.safetensors"), &err), 0);
    const struct st_tensor *a = st_find(&m, "a"), *b = st_find(&m, "b");
    float before = st_get_f32(b, 4999);
    st_release(&m, a);
    st_release(&m, b);
    ck_assert(st_get_f32(a, 2999) == 'a' * 100 + 2999);
    ck_assert(st_get_f32(b, 4999) == before);
    st_release_part(&m, b, 1000, 3000);
    st_release_part(&m, b, 4990, 100); /* clipped to the tensor */
    ck_assert(st_get_f32(b, 1500) == 'b' * 100 + 1500);
    ck_assert(st_get_f32(b, 4999) == before);
    st_close(&m);
}
END_TEST

START_TEST(header_padding_spaces_and_metadata_are_accepted)
{
    write_st("ok.safetensors", "{\"__metadata__\":{\"format\":\"pt\"},\"a\":" T_F32_2 "[0,8]}}   ", 8);
    struct st_model m;
    qp_err err = { "" };
    ck_assert_msg(st_open_file(&m, path_of("ok.safetensors"), &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(m.n_tensors, 1);
    st_close(&m);
}
END_TEST

START_TEST(a_header_with_no_tensors_is_an_empty_model)
{
    write_st("none.safetensors", "{}", 0);
    struct st_model m;
    qp_err err = { "" };
    ck_assert_msg(st_open_file(&m, path_of("none.safetensors"), &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(m.n_tensors, 0);
    st_close(&m);
}
END_TEST

/* ---------------------------------------------------------- malformed file */

START_TEST(empty_file_is_rejected)
{
    write_bytes("bad.safetensors", "", 0);
    ck_assert_open_fails("bad.safetensors", "file is empty");
}
END_TEST

START_TEST(file_shorter_than_the_length_field_is_rejected)
{
    write_bytes("bad.safetensors", "\x02\0\0\0", 4);
    ck_assert_open_fails("bad.safetensors", "too short for the 8-byte header length");
}
END_TEST

START_TEST(header_length_beyond_the_file_is_rejected)
{
    write_raw("bad.safetensors", 1000, "{}", 0);
    ck_assert_open_fails("bad.safetensors", "header length 1000 exceeds the file");
}
END_TEST

START_TEST(header_length_beyond_the_limit_is_rejected)
{
    write_raw("bad.safetensors", (uint64_t)ST_MAX_HEADER_BYTES + 1, "{}", 0);
    ck_assert_open_fails("bad.safetensors", "exceeds the limit");
    write_raw("bad.safetensors", UINT64_MAX, "{}", 0);
    ck_assert_open_fails("bad.safetensors", "exceeds the limit");
}
END_TEST

START_TEST(header_with_a_nul_byte_is_rejected)
{
    static const char nul_header[] = "{\"a\0\":1}";
    uint8_t buf[8 + sizeof(nul_header) - 1] = { sizeof(nul_header) - 1 };
    memcpy(buf + 8, nul_header, sizeof(nul_header) - 1);
    write_bytes("bad.safetensors", buf, sizeof(buf));
    ck_assert_open_fails("bad.safetensors", "header contains a NUL byte");
}
END_TEST

/* A header that is refused, the data bytes after it, and what the one-line
 * message must hold (besides the file's name). */
static const struct bad_header {
    const char *header;
    size_t data_len;
    const char *needle;
} bad_headers[] = {
    /* header that is not json */
    {"{\"a\": [1, 2", 0, "header is not valid JSON"},
    {"", 0, "header is not valid JSON"},
    /* header that is not an object */
    {"[1, 2]", 0, "header is not a JSON object"},
    {"\"text\"", 0, "header is not a JSON object"},
    /* header with bytes after the json */
    {"{} {}", 0, "bytes after its JSON value"},
    /* header with invalid utf8 */
    {"{\"\xff\":" T_F32_2 "[0,8]}}", 8, "header is not valid UTF-8"},
    {"{\"\xed\xa0\x80\":" T_F32_2 "[0,8]}}", 8, "header is not valid UTF-8"}, /* surrogate */
    {"{\"a\\u0000b\":" T_F32_2 "[0,8]}}", 8, "escaped NUL"},
    /* empty tensor name */
    {"{\"\":" T_F32_2 "[0,8]}}", 8, "a tensor name is empty or not valid UTF-8"},
    /* entry that is not an object */
    {"{\"w\": [1, 2]}", 0, "tensor \"w\": entry is not an object"},
    /* missing dtype */
    {"{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor \"w\" has no dtype"},
    /* missing shape */
    {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "tensor \"w\" has no shape"},
    /* missing data offsets */
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor \"w\" has no data_offsets"},
    /* unsupported dtype, naming tensor and dtype */
    {"{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "tensor \"w\" has unsupported dtype F64"},
    {"{\"w\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor \"w\" has unsupported dtype I8"},
    {"{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "dtype is not a string"},
    /* negative dimension */
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0] is -2, not a whole number"},
    /* fractional dimension */
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1.5],\"data_offsets\":[0,8]}}", 8, "shape[1] is 1.5, not a whole number"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, "shape[0] is a string"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "shape is 2, not an array"},
    /* huge dimension */
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,8]}}", 8,
     "shape[0] is 1e+30, not a whole number in [0, 2^53]"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1e999],\"data_offsets\":[0,8]}}", 8, "shape[0] is inf"},
    /* element count overflow */
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
     "too many elements (the product overflows 64 bits)"},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,8]}}", 8, "too many bytes"},
    /* too many dimensions */
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
     "shape has 9 dimensions, more than 8"},
    /* size not matching the byte range */
    {"{\"w\":" T_F32_2 "[0,4]}}", 4, "tensor \"w\": 2 elements of F32 need 8 bytes but data_offsets span 4"},
    /* malformed data offsets */
    {"{\"w\":" T_F32_2 "[0]}}", 8, "data_offsets is not an array of two numbers"},
    {"{\"w\":" T_F32_2 "[-8,0]}}", 8, "data_offsets begin is -8"},
    {"{\"w\":" T_F32_2 "[0,8.5]}}", 8, "data_offsets end is 8.5"},
    /* offsets beyond the file */
    {"{\"w\":" T_F32_2 "[96,104]}}", 8, "data_offsets end 104 is past the end of the data area (8 bytes)"},
    /* begin after end */
    {"{\"w\":" T_F32_2 "[8,0]}}", 8, "data_offsets begin 8 is after end 0"},
    /* overlapping tensors */
    {"{\"a\":" T_F32_2 "[0,8]},\"b\":" T_F32_2 "[4,12]}}", 12,
     "tensors \"a\" (bytes 0..8) and \"b\" (bytes 4..12) overlap"},
    {"{\"a\":" T_F32_2 "[0,8]},\"b\":" T_F32_2 "[0,8]}}", 8, "overlap"},
    /* gap between tensors */
    {"{\"a\":" T_F32_2 "[0,8]},\"b\":" T_F32_2 "[12,20]}}", 20, "gap of 4 unused bytes before tensor \"b\""},
    {"{\"b\":" T_F32_2 "[4,12]}}", 12, "gap of 4 unused bytes before tensor \"b\""},
    /* trailing bytes after the last tensor */
    {"{\"a\":" T_F32_2 "[0,8]}}", 12, "4 trailing bytes after the last tensor"},
    /* duplicate tensor names */
    {"{\"a\":" T_F32_2 "[0,8]},\"a\":" T_F32_2 "[8,16]}}", 16, "tensor \"a\" appears twice"},
    /* metadata must hold strings */
    {"{\"__metadata__\":{\"n\":1}}", 0, "__metadata__ value \"n\" is not a string"},
    {"{\"__metadata__\":[]}", 0, "__metadata__ is not an object"},
    /* control characters in names do not break the message line */
    {"{\"a\\nb\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "tensor \"a?b\" has unsupported dtype"},
};

START_TEST(each_bad_header_is_refused_naming_what_is_wrong)
{
    const struct bad_header *b = &bad_headers[_i];
    write_st("bad.safetensors", b->header, b->data_len);
    ck_assert_open_fails("bad.safetensors", b->needle);
}
END_TEST

START_TEST(truncated_file_is_rejected)
{
    static const char *const names[] = { "a", "b" };
    static const uint32_t lens[] = { 4, 4 };
    write_f32_file("t.safetensors", names, lens, 2);
    struct stat st;
    ck_assert_int_eq(stat(path_of("t.safetensors"), &st), 0);
    ck_assert_int_eq(truncate(path_of("t.safetensors"), st.st_size - 3), 0);
    ck_assert_open_fails("t.safetensors", "tensor \"b\": data_offsets end 32 is past the end of "
                         "the data area (29 bytes); truncated?");
    ck_assert_int_eq(truncate(path_of("t.safetensors"), 20), 0);
    ck_assert_open_fails("t.safetensors", "exceeds the file");
}
END_TEST

START_TEST(a_folder_is_not_a_safetensors_file)
{
    ck_assert_int_eq(mkdir(path_of("sub.safetensors"), 0755), 0);
    ck_assert_open_fails("sub.safetensors", "not a regular file");
}
END_TEST

START_TEST(parse_buffer_names_the_given_file)
{
    static const char h[] = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    uint8_t buf[8 + sizeof(h)] = { sizeof(h) - 1 };
    memcpy(buf + 8, h, sizeof(h) - 1);
    struct st_tensor *t;
    uint32_t n;
    qp_err err = { "" };
    ck_assert_int_eq(st_parse_buffer(buf, sizeof(buf), "fuzz-input", 0, &t, &n, &err), -1);
    ck_assert_error(err, "fuzz-input", "unsupported dtype U8");
    ck_assert_ptr_null(t);
}
END_TEST

/* Every truncation and many single-byte corruptions of a valid file either
 * parse or fail with a one-line message naming the buffer. */
START_TEST(corrupted_headers_fail_cleanly)
{
    static const char *const names[] = { "alpha", "beta", "gamma" };
    static const uint32_t lens[] = { 3, 2, 5 };
    write_f32_file("c.safetensors", names, lens, 3);
    FILE *f = fopen(path_of("c.safetensors"), "rb");
    uint8_t good[4096], bad[4096];
    size_t len = fread(good, 1, sizeof(good), f);
    fclose(f);
    static const uint8_t values[] = { 0, '"', '{', '}', '[', ']', ',', ':', '-', '9', '.', 0xff, 'e' };
    for (size_t cut = 0; cut <= len; cut++) {
        for (size_t v = 0; v <= sizeof(values); v++) {
            memcpy(bad, good, len);
            size_t at = cut < len ? cut : 0;
            if (v < sizeof(values))
                bad[at] = values[v];
            size_t n_bytes = v == sizeof(values) ? cut : len;  /* last round: truncation */
            struct st_tensor *t = NULL;
            uint32_t n = 0;
            qp_err err = { "" };
            if (st_parse_buffer(bad, n_bytes, "fuzzed", 0, &t, &n, &err) == 0) {
                for (uint32_t i = 0; i < n; i++)
                    ck_assert(t[i].data + t[i].nbytes <= bad + n_bytes);
                st_free_tensors(t, n);
            } else {
                ck_assert_error(err, "fuzzed", "");
            }
        }
    }
}
END_TEST

/* ------------------------------------------------------------- sharded dir */

static const char *const abc[] = { "a", "b", "c" };
static const uint32_t abc_lens[] = { 2, 3, 4 };

/* Shard 1 holds a and b, shard 2 holds c, as index_body says. */
static void write_sharded(const char *index_body)
{
    write_f32_file("model-00001-of-00002.safetensors", abc, abc_lens, 2);
    write_f32_file("model-00002-of-00002.safetensors", abc + 2, abc_lens + 2, 1);
    write_text("model.safetensors.index.json", index_body);
}

#define GOOD_INDEX                                                               \
    "{\"metadata\":{\"total_size\":36},\"weight_map\":{"                         \
    "\"a\":\"model-00001-of-00002.safetensors\","                                \
    "\"b\":\"model-00001-of-00002.safetensors\","                                \
    "\"c\":\"model-00002-of-00002.safetensors\"}}"

START_TEST(sharded_folder_equals_single_file)
{
    struct st_model single, sharded;
    qp_err err = { "" };
    write_sharded(GOOD_INDEX);
    ck_assert_msg(st_open_dir(&sharded, test_dir, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(sharded.n_files, 2);
    write_f32_file("single.safetensors", abc, abc_lens, 3);
    ck_assert_int_eq(st_open_file(&single, path_of("single.safetensors"), &err), 0);
    ck_assert_uint_eq(single.n_tensors, sharded.n_tensors);
    for (uint32_t i = 0; i < single.n_tensors; i++) {
        const struct st_tensor *x = &single.tensors[i], *y = &sharded.tensors[i];
        ck_assert_str_eq(x->name, y->name);
        ck_assert_int_eq(x->dtype, y->dtype);
        ck_assert_uint_eq(x->ndim, y->ndim);
        ck_assert_uint_eq(x->shape[0], y->shape[0]);
        ck_assert_uint_eq(x->nbytes, y->nbytes);
        ck_assert_int_eq(memcmp(x->data, y->data, x->nbytes), 0);
    }
    ck_assert_str_eq(sharded.files[st_find(&sharded, "c")->file_index].name,
                     "model-00002-of-00002.safetensors");
    st_close(&single);
    st_close(&sharded);
}
END_TEST

START_TEST(single_file_folder_opens_model_safetensors)
{
    struct st_model m;
    qp_err err = { "" };
    write_f32_file("model.safetensors", abc, abc_lens, 3);
    ck_assert_msg(st_open_dir(&m, test_dir, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(m.n_tensors, 3);
    ck_assert_ptr_null(m.index_path);
    st_close(&m);
}
END_TEST

START_TEST(folder_without_a_model_is_rejected)
{
    ck_assert_dir_fails(test_dir, "neither model.safetensors nor model.safetensors.index.json");
}
END_TEST

START_TEST(index_naming_a_missing_shard_is_rejected)
{
    write_sharded(GOOD_INDEX);
    unlink(path_of("model-00002-of-00002.safetensors"));
    ck_assert_dir_fails("model.safetensors.index.json",
                        "shard \"model-00002-of-00002.safetensors\" named by the index does not exist");
}
END_TEST

START_TEST(shard_names_with_a_path_are_rejected)
{
    write_sharded("{\"weight_map\":{\"a\":\"sub/x.safetensors\"}}");
    ck_assert_dir_fails("model.safetensors.index.json",
                        "shard name \"sub/x.safetensors\" is not a plain file name");
    write_text("model.safetensors.index.json", "{\"weight_map\":{\"a\":\"..\"}}");
    ck_assert_dir_fails("model.safetensors.index.json", "shard name \"..\" is not a plain file name");
    write_text("model.safetensors.index.json", "{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
    ck_assert_dir_fails("model.safetensors.index.json", "is not a plain file name");
}
END_TEST

START_TEST(shard_that_is_not_a_regular_file_is_rejected)
{
    write_text("model.safetensors.index.json", "{\"weight_map\":{\"a\":\"d.safetensors\"}}");
    ck_assert_int_eq(mkdir(path_of("d.safetensors"), 0755), 0);
    ck_assert_dir_fails("model.safetensors.index.json", "is not a regular file");
}
END_TEST

START_TEST(tensor_listed_but_absent_from_its_shard_is_rejected)
{
    write_sharded("{\"weight_map\":{"
                  "\"a\":\"model-00001-of-00002.safetensors\","
                  "\"b\":\"model-00001-of-00002.safetensors\","
                  "\"c\":\"model-00002-of-00002.safetensors\","
                  "\"d\":\"model-00002-of-00002.safetensors\"}}");
    ck_assert_dir_fails("model.safetensors.index.json", "the index puts tensor \"d\" in shard "
                        "model-00002-of-00002.safetensors, which does not contain it");
}
END_TEST

START_TEST(tensor_in_another_shard_than_listed_is_rejected)
{
    write_sharded("{\"weight_map\":{"
                  "\"a\":\"model-00001-of-00002.safetensors\","
                  "\"b\":\"model-00002-of-00002.safetensors\","
                  "\"c\":\"model-00002-of-00002.safetensors\"}}");
    ck_assert_dir_fails("model.safetensors.index.json", "the index puts tensor \"b\" in shard "
                        "model-00002-of-00002.safetensors, but it is in model-00001-of-00002");
}
END_TEST

START_TEST(tensor_of_a_shard_missing_from_the_index_is_rejected)
{
    write_sharded("{\"weight_map\":{"
                  "\"a\":\"model-00001-of-00002.safetensors\","
                  "\"c\":\"model-00002-of-00002.safetensors\"}}");
    ck_assert_dir_fails("model.safetensors.index.json", "tensor \"b\" of shard "
                        "model-00001-of-00002.safetensors is not listed in the index");
}
END_TEST

START_TEST(duplicate_names_across_shards_are_rejected)
{
    write_f32_file("model-00001-of-00002.safetensors", abc, abc_lens, 2);
    write_f32_file("model-00002-of-00002.safetensors", abc + 1, abc_lens + 1, 2);
    write_text("model.safetensors.index.json", GOOD_INDEX);
    ck_assert_dir_fails("model.safetensors.index.json", "tensor \"b\" is in two shards, "
                        "model-00001-of-00002.safetensors and model-00002-of-00002.safetensors");
}
END_TEST

START_TEST(index_listing_a_tensor_twice_is_rejected)
{
    write_sharded("{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
                  "\"a\":\"model-00002-of-00002.safetensors\"}}");
    ck_assert_dir_fails("model.safetensors.index.json", "weight_map lists tensor \"a\" twice");
}
END_TEST

START_TEST(malformed_index_is_rejected)
{
    write_sharded("{\"weight_map\": ");
    ck_assert_dir_fails("model.safetensors.index.json", "not valid JSON");
    write_text("model.safetensors.index.json", "{\"weight_map\":{}} x");
    ck_assert_dir_fails("model.safetensors.index.json", "not valid JSON");
    write_text("model.safetensors.index.json", "[]");
    ck_assert_dir_fails("model.safetensors.index.json", "not a JSON object");
    write_text("model.safetensors.index.json", "{\"metadata\":{}}");
    ck_assert_dir_fails("model.safetensors.index.json", "has no \"weight_map\"");
    write_text("model.safetensors.index.json", "{\"weight_map\":[]}");
    ck_assert_dir_fails("model.safetensors.index.json", "\"weight_map\" is an array, not an object");
    write_text("model.safetensors.index.json", "{\"weight_map\":{}}");
    ck_assert_dir_fails("model.safetensors.index.json", "\"weight_map\" is empty");
    write_text("model.safetensors.index.json", "{\"weight_map\":{\"a\":3}}");
    ck_assert_dir_fails("model.safetensors.index.json", "weight_map[\"a\"] is 3, not a shard file name");
}
END_TEST

START_TEST(malformed_shard_error_names_the_shard)
{
    write_sharded(GOOD_INDEX);
    write_st("model-00002-of-00002.safetensors", "{\"c\":" T_F32_2 "[0,8]}}", 12);
    ck_assert_dir_fails("model-00002-of-00002.safetensors", "trailing bytes");
}
END_TEST

/* -------------------------------------------------------------- provenance */

START_TEST(sources_list_index_then_shards_with_sizes)
{
    struct st_model m;
    qp_err err = { "" };
    write_sharded(GOOD_INDEX);
    ck_assert_int_eq(st_open_dir(&m, test_dir, &err), 0);
    struct st_source src[4];
    ck_assert_uint_eq(st_list_sources(&m, NULL, 0), 3);
    ck_assert_uint_eq(st_list_sources(&m, src, 4), 3);
    ck_assert_str_eq(src[0].name, "model.safetensors.index.json");
    ck_assert_str_eq(src[1].name, "model-00001-of-00002.safetensors");
    ck_assert_str_eq(src[2].name, "model-00002-of-00002.safetensors");
    for (int i = 0; i < 3; i++) {
        struct stat st;
        ck_assert_int_eq(stat(src[i].path, &st), 0);
        ck_assert_uint_eq(src[i].size, (uint64_t)st.st_size);
    }
    st_close(&m);
}
END_TEST

START_TEST(file_hash_is_xxh3_of_the_whole_file)
{
    size_t len = (8u << 20) * 2 + 12345;                      /* several read chunks */
    uint8_t *data = malloc(len);
    for (size_t i = 0; i < len; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    write_bytes("blob", data, len);
    uint64_t hash = 0, size = 0;
    qp_err err = { "" };
    ck_assert_msg(st_file_xxh3(path_of("blob"), &hash, &size, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(size, len);
    ck_assert_uint_eq(hash, XXH3_64bits(data, len));
    write_bytes("empty", "", 0);
    ck_assert_int_eq(st_file_xxh3(path_of("empty"), &hash, &size, &err), 0);
    ck_assert_uint_eq(hash, XXH3_64bits("", 0));
    ck_assert_int_eq(st_file_xxh3(path_of("missing"), &hash, &size, &err), -1);
    ck_assert_error(err, "missing", "No such file");
    free(data);
}
END_TEST

/* ------------------------------------------------------------------ writer */

static int files_in_dir(void)
{
    int n = 0;
    DIR *d = opendir(test_dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

START_TEST(writer_refuses_bytes_beyond_the_declared_tensors)
{
    struct stw_tensor decl[] = { { "a", ST_F32, 1, { 1 } } };
    qp_err err = { "" };
    struct stw_writer *w;
    ck_assert_int_eq(stw_open(&w, path_of("w.safetensors"), decl, 1, &err), 0);
    ck_assert_int_eq(stw_write(w, "12345678", 8, &err), -1);
    ck_assert_error(err, "w.safetensors", "8 bytes written when only 4 of the declared 4 remain");
    ck_assert_int_eq(stw_write(w, "1234", 4, &err), -1);   /* stays failed */
    stw_abort(w);
    ck_assert_int_eq(files_in_dir(), 0);
}
END_TEST

START_TEST(writer_refuses_to_finish_a_short_tensor)
{
    struct stw_tensor decl[] = { { "a", ST_F32, 1, { 1 } }, { "b", ST_BF16, 2, { 2, 2 } } };
    qp_err err = { "" };
    struct stw_writer *w;
    write_text("w.safetensors", "old");
    ck_assert_int_eq(stw_open(&w, path_of("w.safetensors"), decl, 2, &err), 0);
    ck_assert_int_eq(stw_write(w, "123456", 6, &err), 0);
    ck_assert_int_eq(stw_finish(w, &err), -1);
    ck_assert_error(err, "w.safetensors", "tensor \"b\" got 2 of its 8 bytes");
    ck_assert_int_eq(files_in_dir(), 1);                       /* the old file, untouched */
    FILE *f = fopen(path_of("w.safetensors"), "r");
    char buf[8] = "";
    ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), f));
    fclose(f);
    ck_assert_str_eq(buf, "old");
}
END_TEST

START_TEST(writer_refuses_bad_declarations)
{
    struct stw_tensor dup[] = { { "a", ST_F32, 1, { 1 } }, { "a", ST_F32, 1, { 1 } } };
    struct stw_tensor meta[] = { { "__metadata__", ST_F32, 1, { 1 } } };
    struct stw_tensor empty[] = { { "", ST_F32, 1, { 1 } } };
    struct stw_tensor dims[] = { { "a", ST_F32, 9, { 1 } } };
    struct stw_tensor huge[] = { { "a", ST_F32, 2, { 1ull << 40, 1ull << 40 } } };
    qp_err err = { "" };
    struct stw_writer *w;
    ck_assert_int_eq(stw_open(&w, path_of("w.safetensors"), dup, 2, &err), -1);
    ck_assert_error(err, "w.safetensors", "tensor \"a\" is declared twice");
    ck_assert_int_eq(stw_open(&w, path_of("w.safetensors"), meta, 1, &err), -1);
    ck_assert_error(err, "w.safetensors", "reserved name");
    ck_assert_int_eq(stw_open(&w, path_of("w.safetensors"), empty, 1, &err), -1);
    ck_assert_error(err, "w.safetensors", "invalid or reserved name");
    ck_assert_int_eq(stw_open(&w, path_of("w.safetensors"), dims, 1, &err), -1);
    ck_assert_error(err, "w.safetensors", "9 dimensions");
    ck_assert_int_eq(stw_open(&w, path_of("w.safetensors"), huge, 1, &err), -1);
    ck_assert_error(err, "w.safetensors", "overflows");
    ck_assert_ptr_null(w);
    ck_assert_int_eq(files_in_dir(), 0);
}
END_TEST

START_TEST(writer_with_no_tensors_writes_a_valid_file)
{
    qp_err err = { "" };
    struct stw_writer *w;
    ck_assert_int_eq(stw_open(&w, path_of("e.safetensors"), NULL, 0, &err), 0);
    ck_assert_int_eq(stw_finish(w, &err), 0);
    struct st_model m;
    ck_assert_msg(st_open_file(&m, path_of("e.safetensors"), &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(m.n_tensors, 0);
    st_close(&m);
}
END_TEST

/* ------------------------------------------------------------------- suite */

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("bf16");
    tcase_add_test(tc, bf16_widens_and_narrows_every_value_exactly);
    tcase_add_test(tc, f32_to_bf16_rounds_half_to_even_and_keeps_nan);
    tcase_add_test(tc, f16_widens_and_narrows_every_value_exactly);
    tcase_add_test(tc, f32_to_f16_picks_the_nearest_value_ties_to_even);
    suite_add_tcase(s, tc);

    tc = tcase_create("read");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_add_test(tc, writer_then_reader_round_trips_every_dtype_and_shape);
    tcase_add_test(tc, get_f32_converts_each_dtype);
    tcase_add_test(tc, row_reads_and_max_abs_agree_with_get_f32);
    tcase_add_test(tc, release_keeps_the_data_readable);
    tcase_add_test(tc, header_padding_spaces_and_metadata_are_accepted);
    tcase_add_test(tc, a_header_with_no_tensors_is_an_empty_model);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_add_test(tc, empty_file_is_rejected);
    tcase_add_test(tc, file_shorter_than_the_length_field_is_rejected);
    tcase_add_test(tc, header_length_beyond_the_file_is_rejected);
    tcase_add_test(tc, header_length_beyond_the_limit_is_rejected);
    tcase_add_test(tc, header_with_a_nul_byte_is_rejected);
    tcase_add_loop_test(tc, each_bad_header_is_refused_naming_what_is_wrong, 0,
                        (int)(sizeof bad_headers / sizeof *bad_headers));
    tcase_add_test(tc, truncated_file_is_rejected);
    tcase_add_test(tc, a_folder_is_not_a_safetensors_file);
    tcase_add_test(tc, parse_buffer_names_the_given_file);
    tcase_add_test(tc, corrupted_headers_fail_cleanly);
    suite_add_tcase(s, tc);

    tc = tcase_create("sharded");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_add_test(tc, sharded_folder_equals_single_file);
    tcase_add_test(tc, single_file_folder_opens_model_safetensors);
    tcase_add_test(tc, folder_without_a_model_is_rejected);
    tcase_add_test(tc, index_naming_a_missing_shard_is_rejected);
    tcase_add_test(tc, shard_names_with_a_path_are_rejected);
    tcase_add_test(tc, shard_that_is_not_a_regular_file_is_rejected);
    tcase_add_test(tc, tensor_listed_but_absent_from_its_shard_is_rejected);
    tcase_add_test(tc, tensor_in_another_shard_than_listed_is_rejected);
    tcase_add_test(tc, tensor_of_a_shard_missing_from_the_index_is_rejected);
    tcase_add_test(tc, duplicate_names_across_shards_are_rejected);
    tcase_add_test(tc, index_listing_a_tensor_twice_is_rejected);
    tcase_add_test(tc, malformed_index_is_rejected);
    tcase_add_test(tc, malformed_shard_error_names_the_shard);
    suite_add_tcase(s, tc);

    tc = tcase_create("provenance");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_add_test(tc, sources_list_index_then_shards_with_sizes);
    tcase_add_test(tc, file_hash_is_xxh3_of_the_whole_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("writer");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_add_test(tc, writer_refuses_bytes_beyond_the_declared_tensors);
    tcase_add_test(tc, writer_refuses_to_finish_a_short_tensor);
    tcase_add_test(tc, writer_refuses_bad_declarations);
    tcase_add_test(tc, writer_with_no_tensors_writes_a_valid_file);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qp_test_main(safetensors_suite());
}
