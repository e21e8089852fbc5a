/* packer.h - what the files of `qpack pack` share: one run's options and
 * state (struct packer), and the steps cmd_pack (pack.c) takes in order:
 *   pack_options.c   the command line
 *   pack_plan.c      the tensors of the container, their encodings and sources
 *   pack_convert.c   every value converted (or quantised) and written once
 *   provenance.c     the source files hashed, the provenance JSON
 *   pack_summary.c   what the pack cost, printed at the end */
#ifndef QP_PACKER_H
#define QP_PACKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "calibrate.h"
#include "error.h"
#include "gguf.h"
#include "hf_config.h"
#include "precision.h"
#include "pack_progress.h"
#include "qpk.h"
#include "task.h"
#include "qpk_write.h"
#include "quant.h"
#include "safetensors.h"

struct source_hash;

struct pack_opts {
    const char *src, *out;    /* a Hugging Face folder or a GGUF file */
    bool quiet;
    bool format_given;        /* --format was given (a GGUF's types choose otherwise) */
    struct precision prec;    /* --format and --keep */
    uint32_t group;           /* --group: columns per group of the format's main encoding */
    qnt_method quant;         /* --quant: QNT_SEARCH, QNT_ABSMAX (rtn) or QNT_RTN (minmax) */
    const char *calib_text;   /* --calibrate FILE, or NULL */
    uint64_t calib_tokens;    /* --calibrate-tokens */
    enum qp_task task;        /* --task, else the source's name (task_of_path) */
};

/* one tensor of the container with its source and what conversion cost */
struct planned {
    struct qpk_tensor t;
    const struct st_tensor *src;
    double max_abs;           /* largest source magnitude */
    double max_err, sum_sq_err;
};

struct packer {
    struct pack_opts opt;
    struct qwen3_config hf;
    struct qpk_config cfg;
    struct st_model model;
    struct gguf gguf;         /* the GGUF file the model was read from, if any */
    bool by_source_type;      /* a GGUF's matrices are encoded by their ggml types (pack_gguf.c) */
    struct planned *plan;
    uint32_t n_plan;
    char *tokenizer, *tokenizer_config, *chat_template, *generation_config, *pooling;
    size_t tokenizer_len, tokenizer_config_len, generation_config_len, pooling_len;
    bool deduped_lm_head;
    bool calibrated;          /* calib holds --calibrate's statistics */
    struct calib calib;
    struct pack_progress prog;   /* the progress line while the tensors are written */
    int32_t *chunk;
    uint32_t i8_group;        /* the group of every i8g matrix */
    /* the source files' provenance, hashed on a second thread while the
     * tensors are converted (reading them does not change the output) */
    pthread_t hasher;
    bool hasher_running;
    struct source_hash *hashes;
    int hash_rc;
    qp_err hash_err;
};

#define STR_(x) #x
#define STR(x) STR_(x)

/* How much of a source the converter reads before handing it back. */
#define RELEASE_BYTES (8u << 20)

/* The command line into *o; prints the error (and the usage where it helps)
 * and returns -1 on a mistake. */
int pack_parse_args(struct pack_opts *o, int argc, char **argv);

/* tokenizer.json, tokenizer_config.json and its chat template,
 * generation_config.json (checked: gen_config.h) and an embedding
 * checkpoint's 1_Pooling/config.json (pooling.h), read whole */
int pack_load_tokenizer_files(struct packer *p, qp_err *err);
/* The same from a GGUF file (pack_gguf.c): the config, tokenizer and
 * tensors from it, and the format its types ask for unless --format. */
int pack_open_gguf(struct packer *p, qp_err *err);
/* the encoding of a GGUF matrix by its type, and the quantiser that finds
 * its type's parameters (chosen: --quant) */
unsigned pack_gguf_encoding(const struct packer *p, const struct st_tensor *src);
qnt_method pack_gguf_method(const struct st_tensor *src, qnt_method chosen);
/* p->tokenizer loads in qrun's tokenizer and its ids are rows of the
 * model's vocabulary; name is the file it came from */
int pack_check_tokenizer(const struct packer *p, const char *name, qp_err *err);
/* lm_head tied to the embedding: stored once when the two are the same bytes */
int pack_resolve_tie(struct packer *p, qp_err *err);
/* every tensor of the container, with its source and encoding */
int pack_plan_tensors(struct packer *p, qp_err *err);
/* the quantised matrices' group sizes, now that every matrix is known */
int pack_settle_matrices(struct packer *p, qp_err *err);
/* one warning for the checkpoint's tensors Qwen3 does not use */
void pack_warn_unused(const struct packer *p);

/* the norms' exponents, which their directory entries hold */
void pack_settle_norm_exponents(struct packer *p);
/* every tensor's bytes through w, in the container's order */
int pack_write_tensors(struct packer *p, struct qpk_writer *w, qp_err *err);
/* the bytes a planned tensor takes in the container */
uint64_t pack_planned_bytes(const struct planned *pl);
/* --quant's name for opt */
const char *pack_quantiser_name(qnt_method opt);

/* The names the provenance records (the source, its files, the
 * calibration text, --keep rules) are UTF-8, or one line says which is
 * not; checked before any conversion. */
int pack_check_names(const struct packer *p, qp_err *err);
/* The source files hashed on a second thread while the tensors convert;
 * pack_join_hashing waits for it (safe to call when none runs). */
int pack_start_hashing(struct packer *p, qp_err *err);
void pack_join_hashing(struct packer *p);
/* the container's provenance section (malloc'd), after the hashing */
char *pack_provenance_json(struct packer *p, qp_err *err);

/* the summary lines on stderr (the per-tensor errors unless --quiet) */
void pack_print_summary(const struct packer *p, double seconds);

#endif
