/* pack_gguf.c - a GGUF file as the checkpoint of `qpack pack` (packer.h):
 * its config, tokenizer and chat template from the metadata, its tensors
 * read in place, and, unless --format says otherwise, each matrix in the
 * encoding that holds its ggml type best:
 *   F32, F16, BF16       as from safetensors: q24 when every matrix is float
 *   Q8_0                 i8g, groups of 32, scales found as Q8_0's (exact
 *                        where the tensor's exponent holds the f16 scale)
 *   Q4_0                 i4g, groups of 32, llama.cpp's Q4_0 rule
 *   Q4_1                 i4g, groups of 32, min/max
 *   Q4_K                 i4k, groups of 32 in super-blocks of 8
 *   Q5_K, Q6_K           i8g, groups of 32 (6 and 5 bits, 16-value scales)
 * A container holding any 4-bit matrix is int4, else one holding a
 * quantised one int8. */
#include "packer.h"

#include <stdio.h>
#include <string.h>

#include "gguf_model.h"

static bool four_bit(enum st_dtype dt) { return dt == ST_Q4_0 || dt == ST_Q4_1 || dt == ST_Q4_K; }

/* the format the matrices' types ask for */
static enum pack_format format_for(const struct st_model *m)
{
    bool quantised = false, int4 = false;
    for (uint32_t i = 0; i < m->n_tensors; i++) {
        quantised |= st_dtype_block(m->tensors[i].dtype) > 1;
        int4 |= four_bit(m->tensors[i].dtype);
    }
    return int4 ? PACK_INT4 : quantised ? PACK_INT8 : PACK_Q24;
}

int pack_open_gguf(struct packer *p, qp_err *err)
{
    if (p->opt.calib_text)
        return qp_fail(err, "%s: --calibrate needs the float checkpoint; a GGUF is packed from its own values",
                       p->opt.src);
    if (gguf_open(&p->gguf, p->opt.src, err) || gguf_config(&p->gguf, &p->hf, err) ||
        gguf_tokenizer_json(&p->gguf, &p->tokenizer, &p->tokenizer_len, err) ||
        gguf_chat_template(&p->gguf, &p->chat_template, err) || gguf_checkpoint(&p->gguf, &p->model, err) ||
        pack_check_tokenizer(p, p->opt.src, err))
        return -1;
    if (!p->opt.format_given)
        p->opt.prec.format = format_for(&p->model);
    p->by_source_type = !p->opt.format_given;
    return 0;
}

unsigned pack_gguf_encoding(const struct packer *p, const struct st_tensor *src)
{
    if (p->opt.prec.format == PACK_Q24)
        return QPK_ENC_Q24;
    if (p->opt.prec.format == PACK_INT8 || !four_bit(src->dtype))
        return QPK_ENC_I8G;
    return QPK_ENC_I4G; /* i4k where the columns hold super-blocks: pack_settle_matrices */
}

qnt_method pack_gguf_method(const struct st_tensor *src, qnt_method chosen)
{
    switch (src->dtype) {
    case ST_Q8_0: return QNT_RTN;    /* i8g: D = max |x| / 127, Q8_0's own scale */
    case ST_Q4_0: return QNT_ABSMAX; /* i4g: D = -max_signed / 8, M = 8 D, as Q4_0 */
    case ST_Q4_1: return QNT_RTN;    /* i4g: D = (max - min) / 15, M = -min, as Q4_1 */
    default: return chosen;
    }
}
