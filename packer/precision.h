/* precision.h - which encoding each matrix of a pack gets: the --format
 * preset and the --keep PATTERN=FMT overrides. Norm scales are always i32s
 * and are not decided here. */
#ifndef QP_PACK_PRECISION_H
#define QP_PACK_PRECISION_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

enum pack_format {
    PACK_Q24,        /* every matrix q24 (exact for BF16) */
    PACK_INT8,       /* every matrix i8g with --group */
    PACK_INT4,       /* mixed preset: i4k/i4g with --group, a few matrices i6g/i8g (precision.c) */
    PACK_INT4_PURE,  /* every matrix i4g with --group */
};

/* The int8 group: --format int8's default, and in an int4 container the
 * mixed preset's i8g matrices' and --keep PATTERN=int8's (smaller there
 * only when a matrix's columns need it). 64 rather than 32: 8.5 bits per
 * weight, Q8_0's, for a KL still below Q8_0's (docs/QUANT.md). */
#define PRECISION_INT8_GROUP 64
#define PRECISION_MAX_KEEP 64

struct keep_rule {
    const char *arg;          /* "PATTERN=FMT" as given, for messages */
    char pattern[256];        /* fnmatch(3) glob over Hugging Face names */
    unsigned encoding;        /* QPK_ENC_I8G, QPK_ENC_I7G, QPK_ENC_I6G or QPK_ENC_I4G */
    uint32_t matched;         /* matrices the pattern matched */
};

struct precision {
    enum pack_format format;
    struct keep_rule keep[PRECISION_MAX_KEEP];
    unsigned n_keep;
};

/* "q24", "int8", "int4" or "int4-pure"; -1 for anything else. */
int precision_parse_format(const char *name, enum pack_format *format);
const char *precision_format_name(enum pack_format format);

/* The config's weight_format (QPK_FORMAT_*) for a pack format. */
unsigned precision_weight_format(enum pack_format format);

/* Whether the format quantises (int8, int4, int4-pure). */
int precision_quantised(enum pack_format format);

/* Adds --keep PATTERN=FMT (FMT int8, int7, int6 or int4); later rules win. Fails on bad
 * syntax, an unknown FMT or too many rules; the message quotes arg. */
int precision_add_keep(struct precision *p, const char *arg, qp_err *err);

/* The encoding of the matrix name (role, layer of n_layers): the preset's,
 * unless a --keep rule matches (the last one wins). Counts the matches. */
unsigned precision_encoding(struct precision *p, const char *name, unsigned role, unsigned layer,
                            unsigned n_layers);

/* Whether a --keep rule matches the matrix name. */
bool precision_kept(const struct precision *p, const char *name);

/* The first --keep rule that matched no matrix, or NULL. */
const struct keep_rule *precision_unmatched(const struct precision *p);

#endif
