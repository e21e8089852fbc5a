/* bpe.c - byte-pair merging of one pre-tokenized word, and the word cache.
 *
 * The algorithm is tokenizers' Word::merge_all, step for step, so ties and
 * stale entries resolve the same way: the word's symbols form a doubly
 * linked list; a min-heap holds candidate merges ordered by (rank,
 * position); the best one is popped, checked against the current
 * neighbours (entries go stale as symbols merge), applied, and the two new
 * neighbour pairs are pushed. O(n log n) per word, no rescans.
 *
 * Words are raw bytes: ByteLevel maps each byte to one stand-in character,
 * so a word's characters are its bytes and byte_id[] gives their tokens.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- merge table ---------------------------------------------------------- */

static int find_merge(const qp_tok *tok, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id)
{
    if (!tok->merges) /* "merges": [] is legal: every word stays bytes */
        return 0;
    uint64_t pair = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = pair;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    for (uint32_t k = (uint32_t)h & tok->merge_mask;; k = (k + 1) & tok->merge_mask) {
        const merge_slot *m = &tok->merges[k];
        if (!m->new_id_plus1)
            return 0;
        if (m->pair == pair) {
            *rank = m->rank;
            *new_id = (int32_t)m->new_id_plus1 - 1;
            return 1;
        }
    }
}

/* ---- min-heap of candidate merges, ordered by (rank, pos) ----------------- */

static int merge_less(const bpe_merge *x, const bpe_merge *y)
{
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static void heap_push(bpe_merge *heap, size_t *n, bpe_merge m)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!merge_less(&m, &heap[parent]))
            break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = m;
}

static bpe_merge heap_pop(bpe_merge *heap, size_t *n)
{
    bpe_merge top = heap[0], last = heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n)
            break;
        if (child + 1 < *n && merge_less(&heap[child + 1], &heap[child]))
            child++;
        if (!merge_less(&heap[child], &last))
            break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n)
        heap[i] = last;
    return top;
}

/* Pushes the merge of symbols at pos and its right neighbour, if one exists. */
static void push_pair(const qp_tok *tok, const bpe_symbol *syms, int32_t pos, int32_t next,
                      bpe_merge *heap, size_t *n)
{
    uint32_t rank;
    int32_t new_id;
    if (find_merge(tok, syms[pos].id, syms[next].id, &rank, &new_id))
        heap_push(heap, n, (bpe_merge){rank, (uint32_t)pos, new_id});
}

/* ---- one word --------------------------------------------------------------- */

static void add_symbol(bpe_symbol *syms, int32_t *n, int32_t id, uint32_t len)
{
    int32_t i = (*n)++;
    syms[i] = (bpe_symbol){id, i - 1, -1, len};
    if (i > 0)
        syms[i - 1].next = i;
}

/* The word's bytes as symbols. A byte without a token becomes the unknown
 * token (fused with its neighbours if fuse_unk) or, with no unk_token, is
 * dropped: tokenizers' merge_word. */
static int32_t initial_symbols(const qp_tok *tok, const uint8_t *w, size_t n, bpe_symbol *syms)
{
    int32_t n_syms = 0;
    uint32_t unk_len = 0; /* bytes of a pending unknown symbol */
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok->byte_id[w[i]];
        if (id >= 0) {
            if (unk_len) {
                add_symbol(syms, &n_syms, tok->unk_id, unk_len);
                unk_len = 0;
            }
            add_symbol(syms, &n_syms, id, 1);
        } else if (tok->unk_id >= 0) {
            if (unk_len && !tok->fuse_unk) {
                add_symbol(syms, &n_syms, tok->unk_id, unk_len);
                unk_len = 0;
            }
            unk_len += 1;
        }
    }
    if (unk_len)
        add_symbol(syms, &n_syms, tok->unk_id, unk_len);
    return n_syms;
}

/* Most of the encoding time is spent here: tokenizers' merge_all. */
static void merge_all(const qp_tok *tok, bpe_symbol *syms, int32_t n_syms, bpe_merge *heap)
{
    size_t n_heap = 0;
    for (int32_t i = 0; i + 1 < n_syms; i++)
        push_pair(tok, syms, i, i + 1, heap, &n_heap);
    while (n_heap) {
        bpe_merge top = heap_pop(heap, &n_heap);
        bpe_symbol *cur = &syms[top.pos];
        if (cur->len == 0 || cur->next == -1)
            continue;
        int32_t next_pos = cur->next;
        bpe_symbol right = syms[next_pos];
        uint32_t rank;
        int32_t new_id;
        /* stale: the pair at pos is no longer the one this entry was for */
        if (!find_merge(tok, cur->id, right.id, &rank, &new_id) || new_id != top.new_id)
            continue;
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        syms[next_pos].len = 0;
        if (right.next >= 0)
            syms[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0)
            push_pair(tok, syms, cur->prev, (int32_t)top.pos, heap, &n_heap);
        if (cur->next >= 0)
            push_pair(tok, syms, (int32_t)top.pos, cur->next, heap, &n_heap);
    }
}

/* ---- word cache ------------------------------------------------------------- */

static struct cache_slot *cache_find(word_cache *c, uint64_t h, const uint8_t *w, size_t n)
{
    for (uint32_t k = (uint32_t)h & (QP_TOK_CACHE_SLOTS - 1);; k = (k + 1) & (QP_TOK_CACHE_SLOTS - 1)) {
        struct cache_slot *s = &c->slots[k];
        if (!s->hash || (s->hash == h && s->key_len == n && memcmp(c->data.s + s->key_off, w, n) == 0))
            return s;
    }
}

static void cache_put(word_cache *c, uint64_t h, const uint8_t *w, size_t n, const int32_t *ids,
                      size_t n_ids)
{
    size_t need = n + 4 + n_ids * sizeof(int32_t);
    if (c->used * 2 >= QP_TOK_CACHE_SLOTS || c->data.len + need > QP_TOK_CACHE_BYTES) {
        memset(c->slots, 0, QP_TOK_CACHE_SLOTS * sizeof(*c->slots)); /* full: start again */
        c->used = 0;
        c->data.len = 0;
    }
    size_t key_off = c->data.len;
    size_t pad = (4 - (key_off + n) % 4) % 4;
    if (need + pad > c->data.cap - key_off)
        return; /* a huge word: just do not cache it */
    memcpy(c->data.s + key_off, w, n);
    if (n_ids)
        memcpy(c->data.s + key_off + n + pad, ids, n_ids * sizeof(int32_t));
    c->data.len = key_off + n + pad + n_ids * sizeof(int32_t);
    struct cache_slot *s = cache_find(c, h, w, n);
    *s = (struct cache_slot){h, (uint32_t)key_off, (uint32_t)n, (uint32_t)(key_off + n + pad),
                             (uint32_t)n_ids};
    c->used++;
}

void tok_cache_free(word_cache *c)
{
    tok_unmap(c->slots, QP_TOK_CACHE_SLOTS * sizeof(*c->slots));
    tok_unmap(c->data.s, QP_TOK_CACHE_BYTES);
}

/* ---- entry ---------------------------------------------------------------------- */

/* ignore_merges: a word that is a token as a whole is that token. */
static int32_t whole_word_id(qp_tok *tok, const uint8_t *w, size_t n)
{
    tok->mapped.len = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t c = tok->byte_char[w[i]];
        char u[2] = {(char)c, 0};
        size_t len = 1;
        if (c >= 0x80) {
            u[0] = (char)(0xC0 | (c >> 6));
            u[1] = (char)(0x80 | (c & 0x3F));
            len = 2;
        }
        if (qp_tok_text_append(&tok->mapped, u, len))
            return -1;
    }
    return tok_vocab_find(tok, tok->mapped.s, tok->mapped.len);
}

int tok_bpe_word(qp_tok *tok, const uint8_t *w, size_t n, qp_tok_ids *out)
{
    if (n == 0)
        return 0;
    if (n == 1 && tok->byte_id[w[0]] >= 0)
        return qp_tok_ids_push(out, tok->byte_id[w[0]]);

    uint64_t h = 0;
    int cacheable = n <= QP_TOK_CACHE_MAX_WORD;
    if (cacheable) {
        word_cache *c = &tok->cache;
        if (!c->slots) {
            c->slots = tok_map(QP_TOK_CACHE_SLOTS * sizeof(*c->slots));
            c->data.s = tok_map(QP_TOK_CACHE_BYTES);
            c->data.cap = QP_TOK_CACHE_BYTES;
        }
        if (!c->slots || !c->data.s)
            cacheable = 0;
    }
    if (cacheable) {
        h = tok_hash64(w, n) | 1; /* 0 marks an empty slot */
        struct cache_slot *s = cache_find(&tok->cache, h, w, n);
        if (s->hash) {
            const int32_t *ids = (const int32_t *)(tok->cache.data.s + s->ids_off);
            if (s->n_ids == 0)
                return 0;
            if (qp_tok_ids_reserve(out, s->n_ids))
                return -1;
            memcpy(out->v + out->len, ids, s->n_ids * sizeof(int32_t));
            out->len += s->n_ids;
            return 0;
        }
    }

    size_t start = out->len;
    int32_t whole = tok->ignore_merges ? whole_word_id(tok, w, n) : -1;
    if (whole >= 0) {
        if (qp_tok_ids_push(out, whole))
            return -1;
    } else {
        /* each merge pushes at most two candidates: 3n bounds the heap */
        if (tok_grow((void **)&tok->syms, &tok->syms_cap, n, sizeof(bpe_symbol)) ||
            tok_grow((void **)&tok->heap, &tok->heap_cap, 3 * n, sizeof(bpe_merge)))
            return -1;
        int32_t n_syms = initial_symbols(tok, w, n, tok->syms);
        merge_all(tok, tok->syms, n_syms, tok->heap);
        if (qp_tok_ids_reserve(out, (size_t)n_syms))
            return -1;
        for (int32_t i = 0; i < n_syms; i++)
            if (tok->syms[i].len)
                out->v[out->len++] = tok->syms[i].id;
    }
    /* a word can yield no ids at all (bytes without tokens and no unk_token) */
    if (cacheable)
        cache_put(&tok->cache, h, w, n, out->len > start ? out->v + start : NULL, out->len - start);
    return 0;
}
