/* fuzz_safetensors_index.c - libFuzzer target: st_open_dir on a folder made
 * from the input.
 *
 * Input: a 2-byte little-endian length L, then L bytes written as
 * model.safetensors.index.json (L == 0: no index, a single-file folder),
 * then the rest, written as model.safetensors and as
 * model-00001-of-00002.safetensors. The folder also holds a second shard
 * model-00002-of-00002.safetensors (a valid file with one tensor "b"), a
 * symlink link.safetensors to the first shard, a dangling symlink
 * dangling.safetensors and a directory dir.safetensors, so index entries
 * naming them exercise every path of the shard checks.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char g_dir[256];

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", g_dir, name);
}

static int write_file(const char *name, const uint8_t *bytes, size_t n)
{
    char p[512];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(bytes, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static void remove_name(const char *name)
{
    char p[512];
    path_of(p, sizeof p, name);
    unlink(p);
}

static void cleanup(void)
{
    static const char *const names[] = {
        "model.safetensors.index.json", "model.safetensors",
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "link.safetensors", "dangling.safetensors",
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        remove_name(names[i]);
    char p[512];
    path_of(p, sizeof p, "dir.safetensors");
    rmdir(p);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/qp-fuzz-st.XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("fuzz_safetensors_index: mkdtemp");
        abort();
    }
    atexit(cleanup);
    /* {"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} + 4 bytes */
    static const char hdr[] = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    uint8_t second[8 + sizeof hdr - 1 + 4];
    uint64_t hl = sizeof hdr - 1;
    for (int i = 0; i < 8; i++)
        second[i] = (uint8_t)(hl >> (8 * i));
    memcpy(second + 8, hdr, sizeof hdr - 1);
    memset(second + 8 + hl, 0, 4);
    char p[512], q[512];
    if (write_file("model-00002-of-00002.safetensors", second, sizeof second))
        abort();
    path_of(p, sizeof p, "dir.safetensors");
    mkdir(p, 0700);
    path_of(p, sizeof p, "link.safetensors");
    if (symlink("model-00001-of-00002.safetensors", p))
        abort();
    path_of(q, sizeof q, "dangling.safetensors");
    if (symlink("no-such-file.safetensors", q))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t ilen = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2, size -= 2;
    if (ilen > size)
        ilen = size;
    if (ilen) {
        if (write_file("model.safetensors.index.json", data, ilen))
            abort();
    } else {
        remove_name("model.safetensors.index.json");
    }
    if (write_file("model.safetensors", data + ilen, size - ilen) ||
        write_file("model-00001-of-00002.safetensors", data + ilen, size - ilen))
        abort();

    struct st_model m;
    qp_err err;
    if (st_open_dir(&m, g_dir, &err) == 0) {
        volatile float sink = 0;
        for (uint32_t i = 0; i < m.n_tensors; i++) {
            const struct st_tensor *t = &m.tensors[i];
            if (st_find(&m, t->name) != t)
                abort();                      /* names are unique and sorted */
            if (t->numel)
                sink += st_get_f32(t, t->numel - 1);
        }
        (void)sink;
        (void)st_find(&m, "");
        uint32_t n = st_list_sources(&m, NULL, 0);
        struct st_source *src = calloc(n + 1, sizeof *src);
        if (src && st_list_sources(&m, src, n) != n)
            abort();
        free(src);
        st_close(&m);
    }
    return 0;
}
