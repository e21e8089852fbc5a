/* llamacpp_logits.c - llama.cpp's logits of token sequences, for
 * scripts/compare_llamacpp.sh (built there against a llama.cpp checkout; not
 * part of qpack's build):
 *
 *   llamacpp_logits MODEL.gguf IDS.txt OUT.f32
 *
 * IDS.txt: one sequence per line, token ids separated by blanks (qeval
 * --prompt-ids reads the same file). Each sequence runs from an empty KV
 * cache in one batch; OUT.f32 gets the float32 logits of every position of
 * every sequence, in order ([position][vocabulary], host byte order), which
 * `qeval --ref DIR logits:OUT.f32` compares with the float64 reference.
 * The settings llama.cpp's own measurements use for exact comparisons: f32
 * KV cache, flash attention off, 2 threads. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

#define SEQ_MAX 4096

static void quiet_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

/* the ids of one line; -1 on a malformed one */
static int parse_ids(char *line, llama_token *ids, int vocab, const char *file, int line_no)
{
    int n = 0;
    for (char *tok = strtok(line, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n")) {
        char *end;
        errno = 0;
        long v = strtol(tok, &end, 10);
        if (*end || errno || v < 0 || v >= vocab || n == SEQ_MAX) {
            fprintf(stderr, "llamacpp_logits: %s line %d: '%s' is not a token id below %d (or past %d ids)\n",
                    file, line_no, tok, vocab, SEQ_MAX);
            return -1;
        }
        ids[n++] = (llama_token)v;
    }
    return n;
}

static int run(struct llama_context *ctx, const llama_token *ids, int n, int vocab, FILE *out)
{
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    llama_memory_clear(llama_get_memory(ctx), true);
    int rc = llama_decode(ctx, b);
    for (int i = 0; !rc && i < n; i++)
        if (fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)vocab, out) != (size_t)vocab)
            rc = -1;
    llama_batch_free(b);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: llamacpp_logits MODEL.gguf IDS.txt OUT.f32\n");
        return 2;
    }
    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llamacpp_logits: %s: llama.cpp cannot load it\n", argv[1]);
        return 1;
    }
    int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = SEQ_MAX;
    cp.n_batch = cp.n_ubatch = SEQ_MAX;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    FILE *in = fopen(argv[2], "r"), *out = fopen(argv[3], "wb");
    static llama_token ids[SEQ_MAX];
    static char line[SEQ_MAX * 12];
    int rc = ctx && in && out ? 0 : 1;
    if (rc)
        fprintf(stderr, "llamacpp_logits: %s\n", !ctx ? "no llama.cpp context" : !in ? argv[2] : argv[3]);
    for (int line_no = 1; !rc && fgets(line, sizeof line, in); line_no++) {
        int n = parse_ids(line, ids, vocab, argv[2], line_no);
        if (n < 0)
            rc = 1;
        else if (n && run(ctx, ids, n, vocab, out)) {
            fprintf(stderr, "llamacpp_logits: %s line %d: llama_decode or writing %s failed\n", argv[2], line_no,
                    argv[3]);
            rc = 1;
        }
    }
    if (out && fclose(out) && !rc) {
        fprintf(stderr, "llamacpp_logits: %s: %s\n", argv[3], strerror(errno));
        rc = 1;
    }
    if (in)
        fclose(in);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
