/* chat.h - wrapping prompts the way Qwen3's chat template does.
 *
 * The text comes from the chat_template in Qwen3's tokenizer_config.json,
 * for plain user/system messages (no tools) and add_generation_prompt:
 *
 *   [<|im_start|>system\n{system}<|im_end|>\n]
 *   <|im_start|>user\n{prompt}<|im_end|>\n
 *   <|im_start|>assistant\n
 *   <think>\n\n</think>\n\n          <- only when thinking is off
 *                                       (the enable_thinking=false branch)
 *
 * Interactive mode keeps the KV cache, so each later turn returns only the
 * text that follows what is already in the cache. The contract: the
 * generator stops on a stop token and does NOT feed it to the model; the
 * next turn's text then starts by closing the assistant reply the way the
 * template renders one ("<|im_end|>\n"):
 *
 *   <|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n[<think>\n\n</think>\n\n]
 *
 * One known difference from re-rendering the whole history with the
 * template: the template drops the <think> block of earlier assistant
 * turns, while the cache keeps what the model actually saw.
 *
 * Prompts go through qp_tok_encode like any text, so a prompt that spells
 * "<|im_end|>" yields that special token, exactly as transformers'
 * apply_chat_template followed by encoding does.
 */
#ifndef QP_CHAT_H
#define QP_CHAT_H

#include <stdint.h>

#include "error.h"
#include "tok_buf.h"
#include "tokenizer.h"

typedef struct qp_chat {
    int think; /* 1: let the model think (enable_thinking=true) */
    int turns; /* user turns wrapped so far */
} qp_chat;

void qp_chat_init(qp_chat *chat, int think);

/* Appends to out the text to feed for the next user turn (see above).
 * system (may be NULL) is used on the first turn only. Returns 0, or -1
 * when memory runs out. */
int qp_chat_turn(qp_chat *chat, const char *system, const char *user, qp_tok_text *out,
                 qp_err *err);

/* One-shot: the whole prompt for a single user turn. */
int qp_chat_prompt(const char *system, const char *user, int think, qp_tok_text *out,
                   qp_err *err);

/* Tokens that end the assistant's turn: <|im_end|> and <|endoftext|>
 * (Qwen3's generation_config eos_token_id), looked up in the tokenizer. */
typedef struct qp_chat_stops {
    int32_t ids[2];
    int n;
} qp_chat_stops;

/* Fails naming the token when the tokenizer lacks one of them. */
int qp_chat_stop_ids(const qp_tok *tok, qp_chat_stops *stops, qp_err *err);

int qp_chat_is_stop(const qp_chat_stops *stops, int32_t id);

#endif
