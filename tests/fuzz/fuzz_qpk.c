/* fuzz_qpk.c - libFuzzer target: the .qpk reader on arbitrary bytes.
 *
 * qpk_open_buffer validates the image; when it opens, every checksum is
 * recomputed (qpk_verify_all) and every section kind is decoded with
 * qpk_read_section (zstd for the tokenizer, tokenizer_config, chat template
 * and provenance sections), and every tensor is looked up by role.
 *
 * Each input runs twice: as is, and with every checksum it names repaired
 * (section, tensor, directory, then header XXH3), so mutations get past the
 * checksums into the structural checks behind them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "qpk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static int in_file(uint64_t off, uint64_t n, size_t size)
{
    return off <= size && n <= size - off;
}

/* Rewrites every checksum the image names (where its bytes are inside the
 * image) so that only the structure is left to validate. */
static void fix_checksums(uint8_t *b, size_t size)
{
    if (size < QPK_HEADER_SIZE)
        return;
    uint64_t dir_off = rd64(b + 24), dir_size = rd64(b + 32);
    uint64_t ns = rd32(b + 40), nt = rd32(b + 44);
    if (in_file(dir_off, dir_size, size)) {
        uint8_t *dir = b + dir_off;
        for (uint64_t i = 0; i < ns && (i + 1) * QPK_SECTION_SIZE <= dir_size; i++) {
            uint8_t *e = dir + i * QPK_SECTION_SIZE;
            uint64_t off = rd64(e + 8), n = rd64(e + 16);
            if (in_file(off, n, size))
                wr64(e + 32, XXH3_64bits(b + off, n));
        }
        if (ns <= QPK_MAX_SECTIONS)
            for (uint64_t j = 0; j < nt; j++) {
                uint64_t at = ns * QPK_SECTION_SIZE + j * QPK_TENSOR_SIZE;
                if (at + QPK_TENSOR_SIZE > dir_size)
                    break;
                uint8_t *e = dir + at;
                uint64_t off = rd64(e + 96), n = rd64(e + 104);
                if (in_file(off, n, size))
                    wr64(e + 112, XXH3_64bits(b + off, n));
            }
        wr64(b + 48, XXH3_64bits(dir, dir_size));
    }
    wr64(b + 120, XXH3_64bits(b, 120));
}

static void run(uint8_t *buf, size_t size)
{
    struct qpk_file f;
    qp_err err;
    for (unsigned flags = 0; flags <= QPK_VERIFY; flags++) {
        if (qpk_open_buffer(&f, buf, size, "fuzz.qpk", flags, &err) != 0)
            break;                          /* refused without VERIFY: so with it too */
        (void)qpk_verify_all(&f, &err);
        for (unsigned kind = 0; kind <= QPK_SEC_KIND_MAX + 1; kind++) {
            char *out = NULL;
            size_t len = 0;
            if (qpk_read_section(&f, kind, &out, &len, &err) == 0 && out) {
                /* The result is NUL-terminated after len bytes. */
                volatile char last = out[len];
                (void)last;
            }
            free(out);
            (void)qpk_section_name(kind);
        }
        for (uint32_t i = 0; i < f.n_sections; i++)
            (void)qpk_verify_section(&f, &f.sections[i], &err);
        for (unsigned role = 0; role <= QPK_ROLE_MAX + 1; role++) {
            (void)qpk_role_name(role);
            for (unsigned layer = 0; layer <= f.cfg.n_layers && layer < 4; layer++)
                (void)qpk_tensor_of(&f, role, layer);
            (void)qpk_tensor_of(&f, role, QPK_NO_LAYER);
        }
        for (uint32_t i = 0; i < f.n_tensors; i++) {
            const struct qpk_tensor *t = &f.tensors[i];
            (void)qpk_encoding_name(t->encoding);
            if (qpk_verify_tensor(&f, t, &err) == 0 && t->nbytes) {
                volatile uint8_t a = t->data[0], b = t->data[t->nbytes - 1];
                (void)a, (void)b;
            }
        }
        qpk_close(&f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy, so reads past the end are caught exactly by ASan. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    run(buf, size);
    if (size >= QPK_HEADER_SIZE) {
        fix_checksums(buf, size);
        if (memcmp(buf, data, size) != 0)
            run(buf, size);
    }
    free(buf);
    return 0;
}
