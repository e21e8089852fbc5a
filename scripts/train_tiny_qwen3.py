#!/usr/bin/python3
"""train_tiny_qwen3.py - trains the small Qwen3 with learned weights that the
tests and measurements use (tests/data/tiny-learned/, vocabulary 2048, and
tests/data/tiny-learned-16k/, vocabulary 16384), from nothing but Debian
packages:

    apt-get install -y python3-torch python3-regex libopenblas0-openmp \\
        python3.11-doc debian-reference-en debian-policy developers-reference maint-guide
    /usr/bin/python3 scripts/train_tiny_qwen3.py [--preset tiny-learned-16k] \\
        [--qrun build/bin/qrun]

(libopenblas0-openmp: Debian's torch calls the system BLAS, and the reference
BLAS it otherwise gets is ~10x slower.) Steps, in reading order:

  1. corpus    English prose from the documentation packages above: markup,
               code, tables and headings stripped, paragraphs reflowed; cut
               into documents of at most DOC_MAX_BYTES, which a hash of their
               names splits into evaluation, calibration (each at most
               SPLIT_MAX_BYTES) and training text, disjoint by document.
  2. tokenizer byte-level BPE learned on the training text, written as a
               Hugging Face tokenizer.json with Qwen3's normalizer,
               pre-tokenizer and decoder, and its special tokens.
  3. model     Qwen3 (Hugging Face's Qwen3ForCausalLM, written out here),
               trained on windows of the token stream, documents separated
               by <|endoftext|>; fixed seed, fixed step count.
  4. export    config.json, model.safetensors (BF16), tokenizer.json,
               tokenizer_config.json (Qwen3's chat template) into OUT/model;
               calib.txt and eval.txt into OUT.
  5. check     expected.json: the perplexity this model (float64 on the
               exported BF16 weights) gives eval.txt, which the ctest test
               tiny_learned compares qeval's reference with. With --qrun: the
               C tokenizer gives the same ids as this one on calib.txt and
               eval.txt, and `qrun --backend ref` (float64) the same logits.
               --check-only does step 5 alone on the folder OUT.

It prints the loss curve, the time taken and the evaluation perplexity.
"""
import argparse
import gzip
import hashlib
import heapq
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections import Counter
from pathlib import Path

# Passive OpenMP threads: spinning ones waste the other core when the machine is shared.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import regex  # noqa: E402  (\p{L} in Qwen3's pre-tokenizer pattern)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
QWEN3_TOKENIZER_DIR = REPO / "assets" / "qwen3-tokenizer"  # scripts/fetch_tokenizer.sh

# ---------------------------------------------------------------- settings

SEED = 1234
VOCAB_SIZE = 2048            # bytes + merges + added tokens (--preset sets it)
SPLIT_SALT = ""              # prefixed to document names before hashing them (--preset sets it)
# --preset NAME: the models the tests use, each trained into tests/data/NAME. A salt of its
# own gives a model its own evaluation and calibration documents.
PRESETS = {
    "tiny-learned": dict(vocab=2048, salt=""),
    "tiny-learned-16k": dict(vocab=16384, salt="16k:"),
}
ADDED_TOKENS = [             # (content, special), after the BPE vocabulary, in Qwen3's order
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<think>", False), ("</think>", False),
]
EOT = "<|endoftext|>"
MODEL = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, max_position_embeddings=256, rope_theta=10000.0,
             rms_norm_eps=1e-6, tie_word_embeddings=True)
SEQ_LEN = 256                # training window: the whole context
BATCH = 16                   # windows per step (4096 tokens)
STEPS = 400
LR_MAX, LR_MIN, WARMUP = 3e-3, 3e-4, 50
WEIGHT_DECAY = 0.1
DOC_MAX_BYTES = 24_000       # longer sources are cut at paragraphs into documents of this size
SPLIT_MAX_BYTES = 190_000    # eval.txt and calib.txt each stay under 200 KB

PY_DOC = Path("/usr/share/doc/python3.11/html/_sources")
SOURCES = [  # (package, kind, path or glob root)
    ("python3.11-doc", "rst", PY_DOC),
    ("developers-reference", "rst", Path("/usr/share/developers-reference/_sources")),
    ("debian-reference-en", "txt", Path("/usr/share/debian-reference/debian-reference.en.txt.gz")),
    ("debian-policy", "txt", Path("/usr/share/doc/debian-policy/policy.txt.gz")),
    ("maint-guide", "txt", Path("/usr/share/doc/maint-guide/maint-guide.en.txt.gz")),
]
# Python pages that are lists, licences or change logs rather than prose.
PY_SKIP = re.compile(r"^(whatsnew/changelog|license|copyright|contents|bugs|about|includes/|"
                     r"genindex|py-modindex|glossary)")

# ------------------------------------------------------------------ corpus

# reST directives whose body is prose (kept); every other directive's body is dropped.
RST_PROSE_DIRECTIVES = {
    "note", "warning", "seealso", "versionadded", "versionchanged", "deprecated",
    "deprecated-removed", "impl-detail", "important", "tip", "caution", "attention", "danger",
    "hint", "admonition", "topic", "sidebar", "function", "method", "class", "attribute",
    "data", "exception", "decorator", "decoratormethod", "classmethod", "staticmethod",
    "abstractmethod", "coroutinefunction", "coroutinemethod", "describe", "envvar", "option",
    "cmdoption", "opcode", "pdbcommand", "c:function", "c:macro", "c:type", "c:member",
    "c:var", "c:struct", "glossary", "only", "container", "rst-class",
}
RE_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::(.*)$")
RE_COMMENT = re.compile(r"^(\s*)\.\.(\s|$)")
RE_UNDERLINE = re.compile(r"^\s*([=\-~^\"'*+#`:.])\1{2,}\s*$")
RE_TABLE_RULE = re.compile(r"^\s*[=\-+|]+([ +|][=\-+|]+)*\s*$")
RE_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+\.|#\.|\(\w\)|[a-z]\))\s+")
RE_ROLE = re.compile(r":[\w:+.-]+:`([^`]*)`")
RE_LINK = re.compile(r"`([^`<]*?)\s*<[^`>]*>`__?")
RE_REF = re.compile(r"`([^`]+)`__?")
RE_LITERAL = re.compile(r"``(.+?)``")
RE_INTERP = re.compile(r"`([^`]+)`")
RE_STRONG = re.compile(r"\*\*(.+?)\*\*")
RE_EMPH = re.compile(r"(?<![\w*])\*(\S(?:[^*]*?\S)?)\*(?![\w*])")
RE_FOOTNOTE = re.compile(r"\s*(\[(#\w*|\d+|\*)\]_|\^\[\d+\]|\[\d+\])")
RE_SUBST = re.compile(r"\|(\w[\w ]*)\|")
RE_FIELD = re.compile(r"^:[\w -]+:\s+")    # a field list's name
RE_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


def role_text(m):
    """:role:`text <target>` -> text; :role:`~a.b` -> b; :role:`!x` -> x."""
    t = m.group(1)
    link = re.match(r"(.*?)\s*<[^<>]*>$", t)
    if link and link.group(1):
        return link.group(1)
    if t.startswith("~"):
        return t[1:].split(".")[-1]
    return t.lstrip("!")


def rst_inline(line):
    line = RE_FIELD.sub("", RE_FOOTNOTE.sub("", line))
    line = RE_ROLE.sub(role_text, line)
    line = RE_LINK.sub(r"\1", line)
    line = RE_LITERAL.sub(r"\1", line)
    line = RE_REF.sub(r"\1", line)
    line = RE_INTERP.sub(r"\1", line)
    line = RE_STRONG.sub(r"\1", line)
    line = RE_EMPH.sub(r"\1", line)
    line = RE_SUBST.sub(r"\1", line)
    return line.replace("\\ ", "").replace("\\", "")


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def skip_block(lines, i, indent):
    """Index of the first line after lines[i:] that is non-blank and indented <= indent."""
    while i < len(lines) and (not lines[i].strip() or indent_of(lines[i]) > indent):
        i += 1
    return i


def rst_to_lines(text):
    """reST -> its lines without directives, comments, code, tables and titles; blank lines
    separate paragraphs (inline markup is removed from whole paragraphs: it spans lines)."""
    lines = text.expandtabs(8).split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = RE_DIRECTIVE.match(line)
        if m:
            ind, name = len(m.group(1)), m.group(2).lower()
            i += 1
            if name not in RST_PROSE_DIRECTIVES:
                i = skip_block(lines, i, ind)
                continue
            while i < len(lines) and re.match(r"^\s+:[\w -]+:( |$)", lines[i]):  # options
                i += 1
            out.append("")
            continue
        if RE_COMMENT.match(line):                    # comments, targets, substitutions
            i = skip_block(lines, i + 1, indent_of(line))
            out.append("")
            continue
        if line.lstrip().startswith(">>>"):           # doctest: up to the next blank line
            while i < len(lines) and lines[i].strip():
                i += 1
            continue
        if RE_UNDERLINE.match(line) or RE_TABLE_RULE.match(line) or line.lstrip().startswith("|"):
            out.append("")                           # titles above underlines are not prose
            if out[-2:-1] and out[-2]:
                out[-2] = ""
            i += 1
            continue
        stripped = line.rstrip()
        if stripped.endswith("::"):                  # the indented block after it is code
            body = stripped[:-2]
            # "text::" reads "text:"; "text ::" and "text.::" read without the colon
            out.append(body + ":" if body and body[-1].isalnum() else body.rstrip())
            i = skip_block(lines, i + 1, indent_of(line))
            out.append("")
            continue
        out.append(stripped)
        i += 1
    return out


def txt_to_lines(text):
    return [RE_FOOTNOTE.sub("", line.rstrip()) for line in text.expandtabs(8).split("\n")]


def paragraphs(lines):
    """Blank lines and list bullets start paragraphs; each is reflowed to one line."""
    para = []
    for line in lines + [""]:
        if not line.strip() or RE_BULLET.match(line):
            if para:
                yield " ".join(para)
            para = []
        if line.strip():
            para.append(RE_BULLET.sub("", line).strip() if not para else line.strip())


def is_prose(p):
    """English sentences: enough words, mostly letters, ending like a sentence."""
    words = p.split()
    if len(words) < 6 or not re.search(r"[.?!:]\)?\"?$", p):
        return False
    if p.startswith(("$", "#", "%", ">", "...", "(", "[")) or "://" in p and len(words) < 12:
        return False
    nonspace = sum(1 for c in p if not c.isspace())
    letters = sum(1 for c in p if c.isalpha())
    symbols = sum(1 for c in p if c in "_/\\{}[]<>=|#$@%^~`")
    return letters >= 0.78 * nonspace and symbols <= 0.02 * nonspace


def clean_paragraph(p):
    p = unicodedata.normalize("NFC", RE_CONTROL.sub(" ", p))
    return re.sub(r"\s+", " ", p).strip()


def source_files(kind, root):
    if kind == "txt":
        yield root.name, root
        return
    for path in sorted(root.rglob("*.rst.txt")):
        rel = path.relative_to(root).as_posix()
        if root != PY_DOC or not PY_SKIP.match(rel):
            yield rel, path


def read_text(path):
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    return raw.decode("utf-8", errors="replace")


def cut_documents(name, paras):
    """Consecutive paragraphs in pieces of at most DOC_MAX_BYTES (a longer paragraph alone)."""
    doc, size, part = [], 0, 0
    for p in paras + [None]:
        n = len(p.encode()) + 2 if p else 0
        if doc and (p is None or size + n > DOC_MAX_BYTES):
            yield f"{name}#{part}", "\n\n".join(doc) + "\n"
            doc, size, part = [], 0, part + 1
        if p:
            doc.append(p)
            size += n


def build_corpus():
    """[(name, text)] of every document, in a fixed order."""
    docs = []
    for package, kind, root in SOURCES:
        if not root.exists():
            sys.exit(f"train_tiny_qwen3: {root} is missing: apt-get install -y {package}")
        for rel, path in source_files(kind, root):
            text = read_text(path)
            lines = rst_to_lines(text) if kind == "rst" else txt_to_lines(text)
            paras = [clean_paragraph(rst_inline(p) if kind == "rst" else p) for p in paragraphs(lines)]
            paras = [p for p in paras if is_prose(p) and not any(t in p for t, _ in ADDED_TOKENS)]
            docs.extend(d for d in cut_documents(f"{package}:{rel}", paras) if len(d[1]) >= 400)
    return docs


def split_corpus(docs):
    """Evaluation, calibration, training documents: in the order of the hash of their
    names, the first that fit under SPLIT_MAX_BYTES go to eval, the next to calib."""
    order = sorted(docs, key=lambda d: hashlib.sha256((SPLIT_SALT + d[0]).encode()).hexdigest())
    split = {"eval": [], "calib": [], "train": []}
    for name, text in order:
        for part in ("eval", "calib", "train"):
            size = sum(len(t.encode()) + len(EOT) for _, t in split[part])
            if part == "train" or size + len(text.encode()) + len(EOT) <= SPLIT_MAX_BYTES:
                split[part].append((name, text))
                break
    return split


def join_documents(docs):
    """The text files' form: each document followed by <|endoftext|>."""
    return "".join(text + EOT for _, text in docs)

# --------------------------------------------------------------- tokenizer

# Qwen3's tokenizer.json pre-tokenizer pattern (Split, Isolated).
PRETOKENIZE = regex.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (ByteLevel); ids 0..255 in this order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


def byte_alphabet():
    bs, cs = bytes_to_unicode()
    return dict(zip(bs, cs)), cs


def pretokens(text):
    return PRETOKENIZE.findall(text)


def learn_bpe(word_counts, n_merges):
    """Merges [(a, b)] of token ids, most frequent adjacent pair first (ties: lowest ids)."""
    byte_char, _ = byte_alphabet()
    byte_id = {b: i for i, b in enumerate(bytes_to_unicode()[0])}
    words = [[byte_id[b] for b in w.encode()] for w in word_counts]
    freqs = list(word_counts.values())
    pairs, where = Counter(), {}
    for wi, w in enumerate(words):
        for p in zip(w, w[1:]):
            pairs[p] += freqs[wi]
            where.setdefault(p, set()).add(wi)
    heap = [(-c, p) for p, c in pairs.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pairs.get(pair, 0) != -neg or neg == 0:
            continue                                     # stale entry
        new_id = 256 + len(merges)
        merges.append(pair)
        changed = set()
        for wi in where.pop(pair, ()):
            w, f = words[wi], freqs[wi]
            for p in zip(w, w[1:]):
                pairs[p] -= f
                changed.add(p)
            merged, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == pair:
                    merged.append(new_id)
                    i += 2
                else:
                    merged.append(w[i])
                    i += 1
            words[wi] = merged
            for p in zip(merged, merged[1:]):
                pairs[p] += f
                changed.add(p)
                where.setdefault(p, set()).add(wi)
        pairs.pop(pair, None)
        for p in changed:
            if pairs.get(p, 0) > 0 and p != pair:
                heapq.heappush(heap, (-pairs[p], p))
    return merges


class Tokenizer:
    """Byte-level BPE as Hugging Face's tokenizers runs Qwen3's tokenizer.json."""

    def __init__(self, merges):
        self.byte_char, chars = byte_alphabet()
        self.tokens = list(chars)
        for a, b in merges:
            self.tokens.append(self.tokens[a] + self.tokens[b])
        self.merges = [(self.tokens[a], self.tokens[b]) for a, b in merges]
        self.rank = {m: r for r, m in enumerate(self.merges)}
        self.added = {t: len(self.tokens) + i for i, (t, _) in enumerate(ADDED_TOKENS)}
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self.split_added = re.compile("(" + "|".join(re.escape(t) for t in self.added) + ")")
        self.cache = {}

    def bpe(self, word):
        syms = [self.byte_char[b] for b in word.encode()]
        while len(syms) > 1:
            ranked = [(self.rank.get(p, math.inf), i) for i, p in enumerate(zip(syms, syms[1:]))]
            best = min(ranked)[0]
            if best == math.inf:
                break
            a, b = self.merges[best]
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        ids = []
        for seg in self.split_added.split(text):
            if seg in self.added:
                ids.append(self.added[seg])
                continue
            for w in pretokens(unicodedata.normalize("NFC", seg)):
                if w not in self.cache:
                    self.cache[w] = self.bpe(w)
                ids.extend(self.cache[w])
        return ids

    def decode(self, ids):
        inv = {v: k for k, v in self.byte_char.items()}
        added = {i: t for t, i in self.added.items()}
        out = bytearray()
        for i in ids:
            if i in added:
                out += added[i].encode()
            else:
                out += bytes(inv[c] for c in self.tokens[i])
        return out.decode("utf-8", errors="replace")

    def to_json(self, qwen3):
        """tokenizer.json: Qwen3's file with this vocabulary, these merges and added tokens."""
        t = {k: qwen3[k] for k in ("version", "truncation", "padding")}
        t["added_tokens"] = [{"id": self.added[c], "content": c, "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": special} for c, special in ADDED_TOKENS]
        for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            t[k] = qwen3[k]
        t["model"] = dict(qwen3["model"], vocab=self.vocab, merges=[list(m) for m in self.merges])
        return t


def train_tokenizer(train_docs):
    counts = Counter()
    for _, text in train_docs:
        counts.update(pretokens(text))
    merges = learn_bpe(counts, VOCAB_SIZE - 256 - len(ADDED_TOKENS))
    return Tokenizer(merges)


def tokenizer_config(qwen3_config, tok):
    """tokenizer_config.json: Qwen3's (chat template included) for this vocabulary; a base
    model, so <|endoftext|> ends a text."""
    c = dict(qwen3_config)
    c["added_tokens_decoder"] = {str(tok.added[t]): {
        "content": t, "lstrip": False, "normalized": False, "rstrip": False,
        "single_word": False, "special": special} for t, special in ADDED_TOKENS}
    c["additional_special_tokens"] = ["<|im_start|>", "<|im_end|>"]
    c["eos_token"] = EOT
    c["pad_token"] = EOT
    c["model_max_length"] = MODEL["max_position_embeddings"]
    return c

# ------------------------------------------------------------------- model


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, d = c["hidden_size"], c["head_dim"]
        self.heads, self.kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], d
        self.q_proj = nn.Linear(h, self.heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, c["rms_norm_eps"])
        self.k_norm = RMSNorm(d, c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        d, g = self.head_dim, self.heads // self.kv_heads
        q = self.q_norm(self.q_proj(x).view(B, T, self.heads, d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.kv_heads, d)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, d).transpose(1, 2)
        q, k = rope(q, cos, sin) * (1 / math.sqrt(d)), rope(k, cos, sin)
        # query head h reads KV head h // g: the g query heads of a KV head as one matrix
        scores = q.reshape(B, self.kv_heads, g * T, d) @ k.transpose(-1, -2)
        probs = (scores.view(B, self.kv_heads, g, T, T) + mask).softmax(-1)
        out = (probs.view(B, self.kv_heads, g * T, T) @ v).view(B, self.heads, T, d)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.heads * d))


def rope(x, cos, sin):
    """Rotate-half RoPE (Hugging Face's apply_rotary_pos_emb)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, f = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen3ForCausalLM(nn.Module):
    """Parameter names are the checkpoint's (model.layers.N.self_attn.q_proj.weight, ...)."""

    def __init__(self, c):
        super().__init__()
        assert c["tie_word_embeddings"]
        self.config = c
        self.model = Qwen3Model(c)
        d = c["head_dim"]
        self.inv_freq = 1.0 / c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d)

    def forward(self, ids):
        T = ids.shape[1]
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), self.inv_freq)
        emb = torch.cat((freqs, freqs), -1)
        dtype = self.model.norm.weight.dtype
        cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
        mask = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.model.norm(x) @ self.model.embed_tokens.weight.t()


def init_weights(model, c):
    """Normal(0, 0.02); the projections into the residual stream scaled by 1/sqrt(2 layers)."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            continue
        std = 0.02 / math.sqrt(2 * c["num_hidden_layers"]) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
        nn.init.normal_(p, std=std)

# ---------------------------------------------------------------- training


def lr_at(step):
    if step < WARMUP:
        return LR_MAX * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, STEPS - WARMUP)
    return LR_MIN + 0.5 * (LR_MAX - LR_MIN) * (1 + math.cos(math.pi * t))


def train(model, stream, threads):
    torch.set_num_threads(threads)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR_MAX, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(SEED)
    vocab = model.config["vocab_size"]
    curve, t0, c0, window = [], time.time(), time.process_time(), []
    for step in range(STEPS):
        starts = torch.randint(0, len(stream) - SEQ_LEN - 1, (BATCH,), generator=gen)
        batch = torch.stack([stream[s:s + SEQ_LEN + 1] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        window.append(loss.item())
        if (step + 1) % 25 == 0 or step + 1 == STEPS:
            mean = sum(window) / len(window)
            curve.append((step + 1, mean))
            window = []
            wall, cpu = time.time() - t0, time.process_time() - c0
            print(f"step {step + 1:4d}  loss {mean:.3f}  lr {lr_at(step):.2e}  "
                  f"{wall:6.0f} s wall  {cpu:6.0f} s cpu", flush=True)
    return curve, time.time() - t0, time.process_time() - c0


def chunked_nll(model, ids, chunk):
    """Mean NLL over ids scored in windows of chunk tokens from position 0 (the first
    token of each window is context only, as qeval --text does)."""
    total, n = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, chunk):
            w = torch.tensor(ids[s:s + chunk]).unsqueeze(0)
            if w.shape[1] < 2:
                break
            logits = model(w)[0, :-1].double()
            total += F.cross_entropy(logits, w[0, 1:], reduction="sum").item()
            n += w.shape[1] - 1
    return total / n, n

def unigram_ppl(stream, ids):
    """Perplexity of ids under the training text's token frequencies (add-one): what a
    model that ignores the context can reach at best, about."""
    counts = Counter(stream)
    total = len(stream) + VOCAB_SIZE
    return math.exp(-sum(math.log((counts[i] + 1) / total) for i in ids[1:]) / (len(ids) - 1))

# ------------------------------------------------------------------ export


def bf16_bytes(t):
    """Round to nearest even BF16, little-endian bytes."""
    return t.detach().to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        data = bf16_bytes(t.contiguous())
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def hf_config(c, tok):
    eot = tok.added[EOT]
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": eot, "eos_token_id": eot, "head_dim": c["head_dim"], "hidden_act": "silu",
        "hidden_size": c["hidden_size"], "initializer_range": 0.02,
        "intermediate_size": c["intermediate_size"],
        "max_position_embeddings": c["max_position_embeddings"],
        "max_window_layers": c["num_hidden_layers"], "model_type": "qwen3",
        "num_attention_heads": c["num_attention_heads"], "num_hidden_layers": c["num_hidden_layers"],
        "num_key_value_heads": c["num_key_value_heads"], "rms_norm_eps": c["rms_norm_eps"],
        "rope_scaling": None, "rope_theta": c["rope_theta"], "sliding_window": None,
        "tie_word_embeddings": c["tie_word_embeddings"], "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": c["vocab_size"],
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def export(model, tok, qwen3_tok, qwen3_cfg, out):
    (out / "model").mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model" / "model.safetensors", list(model.state_dict().items()))
    write_json(out / "model" / "config.json", hf_config(model.config, tok))
    with open(out / "model" / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tok.to_json(qwen3_tok), f, ensure_ascii=False, separators=(",", ":"))
    write_json(out / "model" / "tokenizer_config.json", tokenizer_config(qwen3_cfg, tok))


def bf16_model_f64(model):
    """The exported model as the float64 reference reads it: BF16 weights widened."""
    twin = Qwen3ForCausalLM(model.config).double()
    twin.load_state_dict({k: v.to(torch.bfloat16).double() for k, v in model.state_dict().items()})
    return twin

# ------------------------------------------------------------------- check


def check_tokenizer(qrun, tokenizer_json, tok, path):
    text = path.read_text(encoding="utf-8")
    got = subprocess.run([qrun, "tokenize", "--tokenizer", str(tokenizer_json)], input=text.encode(),
                         capture_output=True, check=True).stdout.split()
    want = tok.encode(text)
    same = [int(x) for x in got] == want
    print(f"check: {path.name}: {len(want)} tokens, C tokenizer {'identical' if same else 'DIFFERENT'}")
    return same


def check_logits(qrun, model_dir, twin, ids):
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "logits.f32"
        subprocess.run([qrun, "-m", str(model_dir), "--backend", "ref", "--ids",
                        " ".join(map(str, ids)), "-n", "0", "--dump-logits", str(dump)],
                       capture_output=True, check=True)
        ref = torch.frombuffer(bytearray(dump.read_bytes()), dtype=torch.float32).double()
    with torch.no_grad():
        ours = twin(torch.tensor([ids]))[0, -1]
    err = (ours - ref).abs().max().item()
    rel = err / ours.abs().max().item()
    ok = rel < 1e-5
    print(f"check: last-position logits of {len(ids)} tokens, qrun --backend ref vs torch float64: "
          f"max abs diff {err:.3g}, relative to the largest logit {rel:.3g} ({'ok' if ok else 'TOO LARGE'})")
    return ok

# -------------------------------------------------------------------- main


def read_checkpoint(model_dir):
    """An exported folder back: the float64 model on its BF16 weights and the tokenizer."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    raw = (model_dir / "model.safetensors").read_bytes()
    head_len = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + head_len])
    state = {}
    for name, t in header.items():
        if name != "__metadata__":
            b, e = t["data_offsets"]
            data = torch.frombuffer(bytearray(raw[8 + head_len + b:8 + head_len + e]), dtype=torch.int16)
            state[name] = data.view(torch.bfloat16).double().reshape(t["shape"])
    twin = Qwen3ForCausalLM({k: config[k] for k in list(MODEL) + ["vocab_size"]}).double()
    twin.load_state_dict(state)
    tj = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tj["model"]["vocab"]
    tok = Tokenizer([(vocab[a], vocab[b]) for a, b in tj["model"]["merges"]])
    return twin, tok


def score_and_check(out, twin, tok, qrun):
    """expected.json (what the float64 model scores on eval.txt, for tests/qeval/test_tiny_learned.sh)
    and, with qrun, the checks against the C tokenizer and reference."""
    eval_ids = tok.encode((out / "eval.txt").read_text(encoding="utf-8"))
    nll_all, n_all = chunked_nll(twin, eval_ids, SEQ_LEN)
    nll_first, n_first = chunked_nll(twin, eval_ids[:SEQ_LEN], SEQ_LEN)
    write_json(out / "expected.json", {
        "what": "torch float64 on the BF16 weights, scripts/train_tiny_qwen3.py",
        "eval_first_window": {"positions": SEQ_LEN, "tokens_scored": n_first, "nll": nll_first,
                              "perplexity": math.exp(nll_first)},
        "eval_all_windows": {"window": SEQ_LEN, "tokens_scored": n_all, "nll": nll_all,
                             "perplexity": math.exp(nll_all)}})
    print(f"eval.txt: perplexity {math.exp(nll_all):.3f} over {n_all} tokens in windows of {SEQ_LEN}, "
          f"{math.exp(nll_first):.3f} over the first window (BF16 weights, float64)")
    if not qrun:
        return True
    ok = all([check_tokenizer(qrun, out / "model" / "tokenizer.json", tok, out / f)
              for f in ("eval.txt", "calib.txt")])
    return check_logits(qrun, out / "model", twin, eval_ids[:SEQ_LEN]) and ok


def train_and_export(out, threads):
    qwen3_tok = json.loads((QWEN3_TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    qwen3_cfg = json.loads((QWEN3_TOKENIZER_DIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    t0 = time.time()
    split = split_corpus(build_corpus())
    for part in ("eval", "calib", "train"):
        size = len(join_documents(split[part]).encode())
        print(f"corpus: {part}: {len(split[part])} documents, {size / 1e6:.2f} MB")
    tok = train_tokenizer(split["train"])
    stream = []
    for _, text in split["train"]:
        stream.extend(tok.encode(text))
        stream.append(tok.added[EOT])
    train_bytes = sum(len(t.encode()) for _, t in split["train"])
    print(f"tokenizer: {len(tok.tokens)} BPE tokens + {len(tok.added)} added; training text "
          f"{len(stream)} tokens, {train_bytes / len(stream):.2f} bytes/token; {time.time() - t0:.0f} s")

    config = dict(MODEL, vocab_size=VOCAB_SIZE)
    model = Qwen3ForCausalLM(config)
    init_weights(model, config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f} M parameters, {STEPS} steps of {BATCH} x {SEQ_LEN} tokens "
          f"({STEPS * BATCH * SEQ_LEN / len(stream):.2f} epochs), {threads} threads")
    _, wall, cpu = train(model, torch.tensor(stream), threads)
    print(f"training: {wall:.0f} s wall, {cpu:.0f} s cpu")

    out.mkdir(parents=True, exist_ok=True)
    for part in ("eval", "calib"):
        (out / f"{part}.txt").write_text(join_documents(split[part]), encoding="utf-8")
    export(model, tok, qwen3_tok, qwen3_cfg, out)
    eval_ids = tok.encode((out / "eval.txt").read_text(encoding="utf-8"))
    nll32, n = chunked_nll(model.eval(), eval_ids, SEQ_LEN)
    print(f"eval.txt: perplexity {math.exp(nll32):.3f} over {n} tokens (float32 weights); unigram "
          f"model of the training text {unigram_ppl(stream, eval_ids):.1f}, on the first window "
          f"{unigram_ppl(stream, eval_ids[:SEQ_LEN]):.1f}; uniform {VOCAB_SIZE}")
    return bf16_model_f64(model), tok


def main():
    global STEPS, VOCAB_SIZE, SPLIT_SALT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=PRESETS, default="tiny-learned",
                    help="which model: its vocabulary size and its documents' split (default %(default)s)")
    ap.add_argument("--out", type=Path, help="folder to write (default tests/data/PRESET)")
    ap.add_argument("--qrun", help="qrun binary: check the exported files against the C code")
    ap.add_argument("--check-only", action="store_true",
                    help="no training: score and check the model already in OUT")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=STEPS, help="training steps (default %(default)s; "
                    "the committed model's count: change it only to try things)")
    args = ap.parse_args()
    STEPS = args.steps
    VOCAB_SIZE, SPLIT_SALT = PRESETS[args.preset]["vocab"], PRESETS[args.preset]["salt"]
    args.out = args.out or REPO / "tests" / "data" / args.preset
    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    if args.check_only:
        twin, tok = read_checkpoint(args.out / "model")
    else:
        twin, tok = train_and_export(args.out, args.threads)
    if not score_and_check(args.out, twin, tok, args.qrun):
        sys.exit(1)


if __name__ == "__main__":
    main()
