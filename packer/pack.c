/* pack.c - `qpack pack`: streams a Hugging Face Qwen3 checkpoint (or a
 * GGUF file), tensor by tensor, into a .qpk, in the steps of packer.h: the options, the plan of
 * the tensors, an optional calibration, the conversion and the
 * provenance, written atomically; and the signals that end a pack. */
#include "packer.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "clock.h"
#include "fsafe.h"
#include "pack.h"
#include "pack_progress.h"
#include "progress.h"

static void fill_config(struct packer *p)
{
    const struct qwen3_config *h = &p->hf;
    p->cfg = (struct qpk_config){
        .hidden = h->hidden_size, .intermediate = h->intermediate_size, .n_layers = h->num_hidden_layers,
        .n_heads = h->num_attention_heads, .n_kv_heads = h->num_key_value_heads, .head_dim = h->head_dim,
        .vocab = h->vocab_size, .max_positions = h->max_position_embeddings, .rope_theta = h->rope_theta,
        .rms_eps = h->rms_norm_eps, .bos_id = h->bos_token_id, .eos_id = h->eos_token_id,
        .weight_format = precision_weight_format(p->opt.prec.format),
    };
}

static int write_container(struct packer *p, qp_err *err)
{
    struct qpk_blob blobs[6];
    unsigned nb = 0;
    if (p->tokenizer)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_TOKENIZER, p->tokenizer, p->tokenizer_len};
    if (p->tokenizer_config)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_TOKENIZER_CONFIG, p->tokenizer_config, p->tokenizer_config_len};
    if (p->chat_template)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_CHAT_TEMPLATE, p->chat_template, strlen(p->chat_template)};
    if (p->generation_config)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_GENERATION_CONFIG, p->generation_config, p->generation_config_len};
    if (p->pooling)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_POOLING, p->pooling, p->pooling_len};
    const char *task = task_json(p->opt.task);
    if (task)
        blobs[nb++] = (struct qpk_blob){QPK_SEC_TASK, task, strlen(task)};
    struct qpk_tensor *list = calloc(p->n_plan, sizeof *list);
    if (!list)
        return qp_fail(err, "out of memory");
    for (uint32_t i = 0; i < p->n_plan; i++)
        list[i] = p->plan[i].t;
    struct qpk_writer *w;
    int rc = qpk_writer_open(&w, p->opt.out, &p->cfg, blobs, nb, list, p->n_plan, err);
    free(list);
    if (rc)
        return -1;
    char *prov = NULL;
    rc = pack_write_tensors(p, w, err);
    if (!rc)
        rc = (prov = pack_provenance_json(p, err)) ? 0 : -1;
    if (!rc)
        rc = qpk_writer_finish(w, prov, err); /* frees w either way */
    else
        qpk_writer_abort(w);
    free(prov);
    return rc;
}

/* --calibrate: the reference over the text, before any tensor is written. */
static int calibrate(struct packer *p, qp_err *err)
{
    if (!p->opt.calib_text)
        return 0;
    if (!p->tokenizer)
        return qp_fail(err, "%s: --calibrate needs the checkpoint's tokenizer.json to read %s", p->opt.src,
                       p->opt.calib_text);
    /* the reference takes minutes on big shapes: a progress line on a terminal */
    struct calib_progress cp = {.start = qp_now_s(), .text = p->opt.calib_text};
    if (calib_run(&p->calib, p->opt.src, p->tokenizer, p->tokenizer_len, p->opt.calib_text, p->opt.calib_tokens,
                  pack_progress_calibration, &cp, err))
        return -1;
    progress_clear();
    p->calibrated = true;
    if (!p->opt.quiet)
        fprintf(stderr, "qpack: calibrated on %" PRIu64 " tokens of %s in %u window(s), %.1f s\n",
                p->calib.tokens, p->opt.calib_text, p->calib.windows, qp_now_s() - cp.start);
    return 0;
}

static void packer_free(struct packer *p)
{
    pack_join_hashing(p); /* before the model it reads goes away */
    free(p->hashes);
    gguf_close(&p->gguf); /* its metadata points into the model's maps */
    st_close(&p->model);
    free(p->plan);
    free(p->tokenizer);
    free(p->tokenizer_config);
    free(p->chat_template);
    free(p->generation_config);
    free(p->pooling);
    free(p->chunk);
    calib_free(&p->calib);
}

/* A pack ends at once on a signal that ends a process, in well under 0.5 s
 * even in the middle of an fsync or of a long quantiser search: the unnamed
 * output (O_TMPFILE) vanishes with the process and a named one (file
 * systems without O_TMPFILE) is unlinked here; nothing else needs undoing,
 * so there is no flag for the loops to poll. SIGXFSZ is ignored instead: a
 * write past the file size limit then fails with one line. */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2,
                                   SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU};

static void on_stop_signal(int sig)
{
    fs_out_remove_temps();
    progress_clear_from_signal();
    static const char msg[] = "qpack: interrupted\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(128 + sig);
}

/* Signals ignored when qpack starts (nohup) stay ignored. */
static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal}, old;
    sigfillset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof stop_signals / sizeof *stop_signals; i++)
        if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(stop_signals[i], &sa, NULL);
    signal(SIGXFSZ, SIG_IGN);
}

int cmd_pack(int argc, char **argv)
{
    struct packer p = {0};
    if (pack_parse_args(&p.opt, argc, argv))
        return 2;
    progress_init("qpack", !p.opt.quiet);
    catch_stop_signals();
    double t0 = qp_now_s();
    qp_err err = {{0}};
    char config_path[4096];
    snprintf(config_path, sizeof config_path, "%s/config.json", p.opt.src);
    struct stat st;
    /* the destination before any work: not a device, FIFO, directory,
     * link or one of the checkpoint's files, in a writable folder */
    const char *inputs[] = {p.opt.src, p.opt.calib_text, NULL};
    int rc = 0;
    if (stat(p.opt.src, &st) != 0)
        rc = qp_fail(&err, "%s: %s", p.opt.src, strerror(errno));
    else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        rc = qp_fail(&err, "%s: not a folder or a file (expected a Hugging Face model folder or a GGUF file)",
                     p.opt.src);
    bool gguf = !rc && S_ISREG(st.st_mode);
    size_t len = strlen(p.opt.src);
    if (gguf && (len < 5 || strcmp(p.opt.src + len - 5, ".gguf")))
        rc = qp_fail(&err, "%s: not a folder or a .gguf file (expected a Hugging Face model folder or a GGUF file)",
                     p.opt.src);
    /* a destination that cannot be written is bad usage (-o's value) */
    bool bad_out = !rc && fs_out_check(p.opt.out, inputs, &err) != 0;
    rc |= bad_out;
    if (!rc && gguf)
        rc = pack_open_gguf(&p, &err);
    if (!rc && !gguf && access(config_path, F_OK))
        rc = qp_fail(&err, "%s: not a Hugging Face checkpoint folder: it has no config.json", p.opt.src);
    if (!rc && !gguf)
        rc = hf_config_load(config_path, &p.hf, &err);
    if (!rc) {
        fill_config(&p);
        /* one 4-row block of the widest matrix, or a norm vector */
        uint64_t widest = p.hf.intermediate_size > p.hf.hidden_size ? p.hf.intermediate_size : p.hf.hidden_size;
        uint64_t qd = (uint64_t)p.hf.num_attention_heads * p.hf.head_dim;
        widest = qd > widest ? qd : widest;
        p.chunk = malloc(widest * QPK_Q24_TILE_ROWS * 4 + 64);
        rc = p.chunk ? 0 : qp_fail(&err, "out of memory");
    }
    if (!rc)
        rc = (!gguf && (st_open_dir(&p.model, p.opt.src, &err) || pack_load_tokenizer_files(&p, &err))) ||
             pack_check_names(&p, &err) || pack_start_hashing(&p, &err) || pack_resolve_tie(&p, &err) ||
             pack_plan_tensors(&p, &err) || pack_settle_matrices(&p, &err) || calibrate(&p, &err);
    if (!rc) {
        pack_warn_unused(&p);
        pack_settle_norm_exponents(&p);
        rc = write_container(&p, &err);
    }
    if (rc) {
        progress_clear();
        fprintf(stderr, "qpack: %s\n", err.msg);
    } else {
        pack_print_summary(&p, qp_now_s() - t0);
    }
    packer_free(&p);
    return bad_out ? 2 : rc ? 1 : 0;
}
