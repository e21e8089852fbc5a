/* precision.c - the --format presets and --keep overrides.
 *
 * The int4 preset follows llama.cpp's Q4_K_M rule: the tensors whose error
 * costs the most keep more bits (Q4_K_M: token_embd/output at 6 bits, and
 * attn_v and ffn_down in the first and last eighth of the layers and every
 * third layer between). Here: the embedding (the vocabulary projection of
 * a tied model) is i6g, 6-bit codes in groups of 64 (6.25 bits), or i7g
 * where it holds most of the weights or its seventh bit fits within
 * Q4_K_M's bytes (pack_plan.c); every
 * v_proj, and down_proj of the first and last eighth of the layers, are
 * i8g with groups of 64, as is a separate lm_head (untied models);
 * everything else int4 with --group, as i4k (parameters in super-blocks,
 * 4.5 bits at g32) where the columns hold whole super-blocks, else i4g
 * (5 bits at g32). On Qwen3-0.6B that is 0.394e9 bytes, below Q4_K_M's
 * 0.397e9. Measured (scripts/bench_int4_preset.sh): the tied embedding
 * carries the largest logit errors, so its bits buy the most; groups of
 * 64 rather than 128 for the int8 family took the max error from 0.844 to
 * 0.797 (mean of 3 seeds) for 3.9 MB. */
#include "precision.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "qpk.h"

static const char *const format_names[] = {
    [PACK_Q24] = "q24", [PACK_INT8] = "int8", [PACK_INT4] = "int4", [PACK_INT4_PURE] = "int4-pure",
};

int precision_parse_format(const char *name, enum pack_format *format)
{
    for (unsigned f = 0; f < sizeof format_names / sizeof *format_names; f++)
        if (!strcmp(name, format_names[f])) {
            *format = (enum pack_format)f;
            return 0;
        }
    return -1;
}

const char *precision_format_name(enum pack_format format) { return format_names[format]; }

unsigned precision_weight_format(enum pack_format format)
{
    return format == PACK_Q24 ? QPK_FORMAT_Q24 : format == PACK_INT8 ? QPK_FORMAT_INT8 : QPK_FORMAT_INT4;
}

int precision_quantised(enum pack_format format) { return format != PACK_Q24; }

int precision_add_keep(struct precision *p, const char *arg, qp_err *err)
{
    const char *eq = strrchr(arg, '=');
    if (p->n_keep == PRECISION_MAX_KEEP)
        return qp_fail(err, "--keep '%s': too many --keep options (at most %d)", arg, PRECISION_MAX_KEEP);
    if (eq && (size_t)(eq - arg) >= sizeof p->keep[0].pattern)
        return qp_fail(err, "--keep '%.40s...': the pattern is longer than %zu bytes", arg,
                       sizeof p->keep[0].pattern - 1);
    if (!eq || eq == arg)
        return qp_fail(err, "--keep '%s': expected PATTERN=FMT, e.g. 'model.layers.*.mlp.down_proj.weight=int8'",
                       arg);
    struct keep_rule *r = &p->keep[p->n_keep];
    if (!strcmp(eq + 1, "int8"))
        r->encoding = QPK_ENC_I8G;
    else if (!strcmp(eq + 1, "int7"))
        r->encoding = QPK_ENC_I7G;
    else if (!strcmp(eq + 1, "int6"))
        r->encoding = QPK_ENC_I6G;
    else if (!strcmp(eq + 1, "int4"))
        r->encoding = QPK_ENC_I4G;
    else
        return qp_fail(err, "--keep '%s': unknown format '%s' (int8, int7, int6 or int4)", arg, eq + 1);
    r->arg = arg;
    memcpy(r->pattern, arg, (size_t)(eq - arg));
    r->pattern[eq - arg] = 0;
    r->matched = 0;
    p->n_keep++;
    return 0;
}

/* The mixed int4 preset: which matrices keep more bits (i6g, i8g) than
 * int4 (i4g; i4k where settle_quantised finds whole super-blocks). */
static unsigned int4_preset(unsigned role, unsigned layer, unsigned n_layers)
{
    unsigned eighth = n_layers / 8;
    switch (role) {
    case QPK_ROLE_EMBED: return QPK_ENC_I6G;
    case QPK_ROLE_LM_HEAD:
    case QPK_ROLE_V: return QPK_ENC_I8G;
    case QPK_ROLE_DOWN: return layer < eighth || layer >= n_layers - eighth ? QPK_ENC_I8G : QPK_ENC_I4G;
    default: return QPK_ENC_I4G;
    }
}

static unsigned preset_encoding(enum pack_format format, unsigned role, unsigned layer, unsigned n_layers)
{
    switch (format) {
    case PACK_Q24: return QPK_ENC_Q24;
    case PACK_INT8: return QPK_ENC_I8G;
    case PACK_INT4: return int4_preset(role, layer, n_layers);
    default: return QPK_ENC_I4G;
    }
}

unsigned precision_encoding(struct precision *p, const char *name, unsigned role, unsigned layer,
                            unsigned n_layers)
{
    unsigned enc = preset_encoding(p->format, role, layer, n_layers);
    for (unsigned i = 0; i < p->n_keep; i++)
        if (fnmatch(p->keep[i].pattern, name, 0) == 0) {
            enc = p->keep[i].encoding;
            p->keep[i].matched++;
        }
    return enc;
}

bool precision_kept(const struct precision *p, const char *name)
{
    for (unsigned i = 0; i < p->n_keep; i++)
        if (fnmatch(p->keep[i].pattern, name, 0) == 0)
            return true;
    return false;
}

const struct keep_rule *precision_unmatched(const struct precision *p)
{
    for (unsigned i = 0; i < p->n_keep; i++)
        if (!p->keep[i].matched)
            return &p->keep[i];
    return NULL;
}
