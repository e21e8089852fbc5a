/* qrun_chat.c - the interactive chat: one user turn per line of stdin (a
 * line ending in \ goes on on the next), the commands of chat_help, the KV
 * cache kept across turns, the oldest turns dropped when the context fills.
 *
 * The conversation is a list of turns, each its template text's tokens and
 * the reply's tokens as printed. The session holds a prefix of their
 * concatenation: before a turn, the part of the conversation past the
 * longest prefix the session already holds is fed (usually the last reply's
 * last token, which generation prints but does not feed, and the new turn).
 * So a reply stopped by Ctrl-C, a turn whose feed was interrupted and a
 * conversation cut at its oldest turns all resume from what the session
 * actually holds. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stdout_policy.h"
#include "qrun.h"
#include "qrun_line.h"

static void turn_free(struct turn *t)
{
    free(t->user);
    free(t->ids);
    free(t->reply);
}

void qrun_turns_free(struct run_state *r)
{
    for (size_t i = 0; i < r->n_turns; i++)
        turn_free(&r->turns[i]);
    free(r->turns);
    r->turns = NULL;
    r->n_turns = 0;
}

/* The tokens of a turn's template text: as the first turn (with the system
 * prompt) or as one that follows a reply. */
static int turn_ids(struct run_state *r, struct turn *t, bool first, qpack_error *err)
{
    const struct options *o = r->o;
    qpack_chat_message msgs[2] = {{"system", o->system}, {"user", t->user}};
    const qpack_chat_message *m = first && o->system ? msgs : msgs + 1;
    size_t n = first && o->system ? 2 : 1, len;
    char *text;
    int rc = first ? qpack_chat_render(m, n, o->think, &text, &len, err)
                   : qpack_chat_render_next(m, n, o->think, &text, &len, err);
    if (rc)
        return -1;
    free(t->ids);
    t->ids = NULL;
    rc = qrun_tokenize(r, text, len, &t->ids, &t->n_ids, err);
    free(text);
    return rc;
}

/* The conversation from turn k on (turns[k] rendered as the first), and
 * then `next`: its tokens, or with out NULL only their count. */
static size_t conversation(const struct run_state *r, size_t k, const struct turn *first, const struct turn *next,
                           int32_t *out)
{
    size_t n = 0;
    for (size_t i = k; i <= r->n_turns; i++) {
        const struct turn *t = i == r->n_turns ? next : &r->turns[i];
        const struct turn *ids = i == k ? first : t;
        if (out)
            memcpy(out + n, ids->ids, ids->n_ids * sizeof *out);
        n += ids->n_ids;
        if (i < r->n_turns) {
            if (out)
                memcpy(out + n, t->reply, t->n_reply * sizeof *out);
            n += t->n_reply;
        }
    }
    return n;
}

/* The positions a turn needs: the conversation and its reply (the last
 * token of which is printed, not fed). */
static uint64_t need_of(const struct run_state *r, size_t conv)
{
    if (r->o->until_end) {      /* room for a reply, which may then run to the context's end */
        uint32_t room = r->ctx / 4 < QRUN_CHAT_ROOM ? r->ctx / 4 : QRUN_CHAT_ROOM;
        return conv + (room ? room : 1);
    }
    return conv + (r->o->n_new > 0 ? (uint64_t)r->o->n_new - 1 : 0);
}

/* Makes the conversation and the new turn fit the context with its reply,
 * dropping the oldest turns; -1 (with a message) when the turn does not
 * fit even alone. *first is the turn that now opens the conversation,
 * rendered as the first. */
static int make_room(struct run_state *r, struct turn *new_turn, struct turn *first, unsigned lineno,
                     qpack_error *err)
{
    size_t k = 0;
    if (!r->n_turns)
        *first = *new_turn;
    else
        *first = r->turns[0];
    if (need_of(r, conversation(r, 0, first, new_turn, NULL)) <= r->ctx)
        return 0;
    for (k = 1; k <= r->n_turns; k++) {
        struct turn *t = k == r->n_turns ? new_turn : &r->turns[k];
        *first = (struct turn){.user = t->user};
        if (turn_ids(r, first, true, err))
            return -1;
        if (need_of(r, conversation(r, k, first, new_turn, NULL)) <= r->ctx)
            break;
        free(first->ids);
        first->ids = NULL;
    }
    if (k > r->n_turns) {
        char reply[48];
        if (r->o->until_end)
            snprintf(reply, sizeof reply, "room for a reply");
        else
            snprintf(reply, sizeof reply, "-n %d", r->o->n_new);
        snprintf(err->message, sizeof err->message,
                 "input line %u: this turn and %s do not fit the context of %u positions even alone (see -c); "
                 "turn ignored", lineno, reply, r->ctx);
        return -1;
    }
    fprintf(stderr, "qrun: the conversation fills the context of %u positions: dropping the oldest %zu turn%s\n",
            r->ctx, k, k == 1 ? "" : "s");
    /* turn k opens the conversation now */
    for (size_t i = 0; i < k; i++)
        turn_free(&r->turns[i]);
    memmove(r->turns, r->turns + k, (r->n_turns - k) * sizeof *r->turns);
    r->n_turns -= k;
    struct turn *opener = r->n_turns ? &r->turns[0] : new_turn;
    free(opener->ids);
    opener->ids = first->ids;
    opener->n_ids = first->n_ids;
    *first = *opener;
    return 0;
}

/* Feeds what the session lacks of the conversation with the new turn. */
static int feed_conversation(struct run_state *r, const struct turn *first, const struct turn *new_turn,
                             qpack_error *err)
{
    size_t n = conversation(r, 0, first, new_turn, NULL);
    int32_t *all = malloc((n ? n : 1) * sizeof *all);
    if (!all) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    conversation(r, 0, first, new_turn, all);
    const int32_t *held = qpack_session_tokens(r->s);
    uint32_t pos = qpack_session_pos(r->s), same = 0;
    while (same < pos && same < n && held[same] == all[same])
        same++;
    if (same == n)
        same--;     /* the last token is fed again: its logits start the reply */
    int rc = qpack_session_rewind(r->s, same, err) ? -1 : qrun_feed(r, all + same, n - same, err);
    free(all);
    return rc;
}

static bool vocab_ok(const struct run_state *r, const struct turn *t, unsigned lineno)
{
    for (size_t i = 0; i < t->n_ids; i++)
        if ((uint32_t)t->ids[i] >= r->info->vocab) {
            fprintf(stderr, "qrun: input line %u: token %d is outside this model's vocabulary of %u; line ignored\n",
                    lineno, t->ids[i], r->info->vocab);
            return false;
        }
    return true;
}

static int add_turn(struct run_state *r, struct turn *t, qpack_error *err)
{
    struct turn *v = realloc(r->turns, (r->n_turns + 1) * sizeof *v);
    if (!v) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    r->turns = v;
    r->turns[r->n_turns++] = *t;
    return 0;
}

/* One user turn: its tokens, room in the context, the feed, the reply. A
 * turn refused (its text, its size) sets bad_input and returns 0. */
static int chat_turn(struct run_state *r, const char *user, unsigned lineno, qpack_error *err)
{
    struct turn t = {.user = strdup(user)}, first;
    if (!t.user || turn_ids(r, &t, r->n_turns == 0, err)) {
        turn_free(&t);
        return -1;
    }
    if (!vocab_ok(r, &t, lineno)) {
        r->bad_input = true;
        turn_free(&t);
        return 0;
    }
    if (make_room(r, &t, &first, lineno, err)) {
        turn_free(&t);
        if (!strstr(err->message, "turn ignored"))
            return -1;
        fprintf(stderr, "qrun: %s\n", err->message);
        r->bad_input = true;
        return 0;
    }
    int rc = feed_conversation(r, &first, &t, err);
    if (rc) {
        turn_free(&t);
        return qrun_stop_signal || qrun_reply_stopped ? 0 : -1;
    }
    if (add_turn(r, &t, err)) {
        turn_free(&t);
        return -1;
    }
    rc = qrun_reply(r, r->ctx - qpack_session_pos(r->s), err);
    if (!rc || r->in_reply)
        qrun_end_reply(r, !rc);
    return rc;
}

/* /clear: the conversation and its cache go */
static int clear_conversation(struct run_state *r, qpack_error *err)
{
    qrun_turns_free(r);
    return qpack_session_rewind(r->s, 0, err) ? -1 : 0;
}

static const char chat_help[] =
    "qrun: the chat's commands (a line starting with // sends the rest from its second /):\n"
    "  /help           this list\n"
    "  /clear          forget the conversation (and its cache)\n"
    "  /system TEXT    a new system prompt, and the conversation starts again (/system alone: none)\n"
    "  /think on|off   thinking in the replies from now on\n"
    "  /bye            end the chat (so does Ctrl-D)\n"
    "  a line ending in \\ goes on on the next line\n";

/* /system TEXT: a new conversation under it */
static int set_system(struct run_state *r, const char *arg, qpack_error *err)
{
    char *text = *arg ? strdup(arg) : NULL;
    if (*arg && !text)
        return snprintf(err->message, sizeof err->message, "out of memory"), -1;
    free(r->system_text);
    r->system_text = text;
    r->o->system = text;
    if (clear_conversation(r, err))
        return -1;
    fprintf(stderr, text ? "qrun: system prompt set; the conversation starts again\n"
                         : "qrun: no system prompt; the conversation starts again\n");
    return 0;
}

/* /think on|off: the turns from now on; the model's sampling follows */
static int set_think(struct run_state *r, const char *arg, qpack_error *err)
{
    if (strcmp(arg, "on") && strcmp(arg, "off")) {
        fprintf(stderr, "qrun: /think takes on or off, not '%s'\n", arg);
        return 0;
    }
    r->o->think = !strcmp(arg, "on");
    if (qrun_new_sampler(r, err))
        return -1;
    fprintf(stderr, "qrun: thinking %s\n", r->o->think ? "on" : "off");
    return 0;
}

/* A line that is a command: 1 when handled (*bye for /bye), 0 when it is
 * a turn (a leading // loses one /), -1 on a failure. */
static int chat_command(struct run_state *r, char **text, bool *bye, qpack_error *err)
{
    char *t = *text;
    if (t[0] != '/')
        return 0;
    if (t[1] == '/') {
        ++*text;
        return 0;
    }
    size_t n = strcspn(t, " ");
    const char *arg = t[n] ? t + n + 1 : "";
    if (n == 4 && !strncmp(t, "/bye", 4))
        return *bye = true, 1;
    if (n == 5 && !strncmp(t, "/help", 5))
        return fputs(chat_help, stderr), 1;
    if (n == 6 && !strncmp(t, "/clear", 6)) {
        if (clear_conversation(r, err))
            return -1;
        return fputs("qrun: the conversation is cleared\n", stderr), 1;
    }
    if (n == 7 && !strncmp(t, "/system", 7))
        return set_system(r, arg, err) ? -1 : 1;
    if (n == 6 && !strncmp(t, "/think", 6))
        return set_think(r, arg, err) ? -1 : 1;
    fprintf(stderr, "qrun: unknown command '%.*s' (/help lists them; // sends a line starting with /)\n", (int)n, t);
    return 1;
}

/* Reads one turn: a line, and the lines after one ending in \ (joined by a
 * newline). 1 at the end of input, -1 on a read error. */
static int read_turn(struct qrun_lines *in, char **text, size_t *len, size_t *cap, unsigned *lineno,
                     unsigned *first_line, bool tty, qpack_error *err)
{
    *len = 0;
    *first_line = *lineno + 1;
    for (bool more = true; more;) {
        const char *line;
        ssize_t n = qrun_lines_read(in, *len ? ". " : "> ", &line);
        if (n < 0) {
            if (n == -2)
                snprintf(err->message, sizeof err->message, "reading stdin: %s", strerror(errno));
            else if (tty)
                fputc('\n', stderr);
            return n == -2 ? -1 : *len ? 0 : 1;
        }
        ++*lineno;
        qrun_lines_remember(in, line);
        size_t l = (size_t)n;
        more = l && line[l - 1] == '\\';
        if (*len + l + 1 > *cap) {
            size_t c = (*len + l + 1) * 2;
            char *t = realloc(*text, c);
            if (!t) {
                snprintf(err->message, sizeof err->message, "out of memory");
                return -1;
            }
            *text = t;
            *cap = c;
        }
        memcpy(*text + *len, line, l);
        if (more)
            (*text)[*len + l - 1] = '\n';   /* the backslash becomes the line break */
        *len += l;
        (*text)[*len] = 0;
    }
    return 0;
}

int qrun_interactive(struct run_state *r, qpack_error *err)
{
    bool tty = isatty(STDIN_FILENO);
    qrun_prompt_shown = tty;
    if (tty)
        fprintf(stderr, "qrun: a chat with %s (%s, %s, %u positions): /help lists the commands, /bye or Ctrl-D "
                "ends it\n", r->o->model, r->info->format, r->info->backend, r->ctx);
    struct qrun_lines *in = qrun_lines_open(tty);
    if (!in) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    char *text = NULL;
    size_t cap = 0, len;
    unsigned lineno = 0, first_line;
    int rc = 0;
    while (!rc && !qrun_stop_signal && !qp_stdout_failed()) {
        qrun_reply_stopped = 0;
        qrun_set_phase(QRUN_WAITING);
        int got = read_turn(in, &text, &len, &cap, &lineno, &first_line, tty, err);
        qrun_set_phase(QRUN_WORKING);
        if (got)
            rc = got < 0 ? -1 : 0;
        if (got)
            break;
        char what[32];
        snprintf(what, sizeof what, "input line %u", first_line);
        if (!qrun_text_ok(what, text, len, "; line ignored")) {
            r->bad_input = true;
            continue;
        }
        if (!len)
            continue;
        char *turn = text;
        bool bye = false;
        int cmd = chat_command(r, &turn, &bye, err);
        if (cmd < 0)
            rc = -1;
        if (bye)
            break;
        if (cmd)
            continue;
        rc = chat_turn(r, turn, first_line, err);
    }
    qrun_lines_close(in);
    free(text);
    return rc;
}
