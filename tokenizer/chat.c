#include "chat.h"

#include <string.h>

/* The template's pieces, verbatim. */
#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>"
#define EMPTY_THINK "<think>\n\n</think>\n\n"

void qp_chat_init(qp_chat *chat, int think)
{
    chat->think = think;
    chat->turns = 0;
}

static int put(qp_tok_text *out, const char *s)
{
    return qp_tok_text_appends(out, s);
}

int qp_chat_turn(qp_chat *chat, const char *system, const char *user, qp_tok_text *out,
                 qp_err *err)
{
    size_t start = out->len;
    /* || keeps the appends in order and stops at the first failure */
    int r = 0;
    if (chat->turns > 0)
        r = put(out, IM_END "\n"); /* close the reply the generator stopped */
    else if (system)
        r = put(out, IM_START "system\n") || put(out, system) || put(out, IM_END "\n");
    r = r || put(out, IM_START "user\n") || put(out, user) || put(out, IM_END "\n") ||
        put(out, IM_START "assistant\n") || (!chat->think && put(out, EMPTY_THINK));
    if (r) {
        out->len = start;
        return qp_fail(err, "chat: out of memory");
    }
    chat->turns++;
    return 0;
}

int qp_chat_prompt(const char *system, const char *user, int think, qp_tok_text *out, qp_err *err)
{
    qp_chat chat;
    qp_chat_init(&chat, think);
    return qp_chat_turn(&chat, system, user, out, err);
}

int qp_chat_stop_ids(const qp_tok *tok, qp_chat_stops *stops, qp_err *err)
{
    static const char *const names[2] = {IM_END, "<|endoftext|>"};
    stops->n = 0;
    for (int i = 0; i < 2; i++) {
        int32_t id = qp_tok_token_id(tok, names[i], strlen(names[i]));
        if (id < 0)
            return qp_fail(err, "tokenizer has no %s token to stop on", names[i]);
        stops->ids[stops->n++] = id;
    }
    return 0;
}

int qp_chat_is_stop(const qp_chat_stops *stops, int32_t id)
{
    for (int i = 0; i < stops->n; i++)
        if (stops->ids[i] == id)
            return 1;
    return 0;
}
