/* fuzz_safetensors.c - libFuzzer target: st_parse_buffer on arbitrary bytes
 * (a whole safetensors file in memory); every tensor it accepts is read at
 * its first and last element. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);   /* exact size: overreads are caught */
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    struct st_tensor *t = NULL;
    uint32_t n = 0;
    qp_err err;
    if (st_parse_buffer(buf, size, "fuzz.safetensors", 0, &t, &n, &err) == 0) {
        volatile float sink = 0;
        for (uint32_t i = 0; i < n; i++) {
            (void)st_name_valid(t[i].name, strlen(t[i].name));
            (void)st_dtype_name(t[i].dtype);
            if (t[i].numel) {
                sink += st_get_f32(&t[i], 0);
                sink += st_get_f32(&t[i], t[i].numel - 1);
            }
        }
        (void)sink;
        st_free_tensors(t, n);
    }
    free(buf);
    return 0;
}
