#!/usr/bin/env node
// gen_tokenizer_expected.mjs - the tokenizer conformance data, from Hugging
// Face's own tokenizers library (Rust, through its Node binding).
//
// Writes, into OUT (default tests/data/tokenizer):
//   encode.jsonl  {"name", "text", "ids", "decoded"} per corpus string:
//                 ids = encode(text) (add_special_tokens = true; Qwen3's
//                 ByteLevel post-processor adds nothing), decoded = decode(ids)
//   decode.jsonl  {"name", "ids", "skip_special", "text"}: decode cases, many
//                 cutting characters apart (U+FFFD expected)
//   README.md     what the files are, the oracle and its version
//
// The corpus is built here, deterministically (seeded PRNG): rerunning gives
// identical files. The tests read only the committed JSONL, not Node.
//
// usage: (cd scripts/tokenizer-oracle && npm ci)
//        node scripts/gen_tokenizer_expected.mjs [--tokenizer FILE] [--out DIR]
//                                                [--oracle-dir DIR]
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { loadOracle, opt } from './tokenizer_oracle.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const tokenizerPath = opt('--tokenizer', path.join(root, 'assets/qwen3-tokenizer/tokenizer.json'));
const outDir = opt('--out', path.join(root, 'tests/data/tokenizer'));
const oracleDir = opt('--oracle-dir', path.join(here, 'tokenizer-oracle'));

const { Tokenizer, version: oracleVersion } = loadOracle(oracleDir);

// ---- deterministic randomness (mulberry32) --------------------------------
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20250611);
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const randInt = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const cp = (...cps) => String.fromCodePoint(...cps);

// ---- the corpus --------------------------------------------------------------
const corpus = [];
const add = (name, text) => corpus.push({ name, text });

// English prose
const prose = [
  'Hello, world!',
  'The quick brown fox jumps over the lazy dog.',
  'It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.',
  "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world.",
  'In 1969, Neil Armstrong became the first person to walk on the Moon.',
  'Dr. Smith’s lab (room 4B) reported a 12.5% increase in yield — “remarkable,” she said.',
  'Please e-mail jane.doe@example.com or visit https://example.org/path?q=1&r=two#frag.',
  'Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal, thank you very much.',
  'To be, or not to be, that is the question:',
  'She sells sea-shells on the sea-shore; the shells she sells are sea-shells, I\'m sure.',
  'Q: What is 2+2?\nA: 4.',
  'Tokenization is the process of splitting text into smaller units called tokens.',
  'The U.S.A. and the U.K. signed the treaty on 3/4/2021 at 10:30 a.m.',
  'Well... I guess so?! Maybe; maybe not.',
  'ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #@!',
  'camelCaseWords and snake_case_words and kebab-case-words and PascalCaseWords',
  'Price: $1,299.99 (was $1,499.00) — save 13%!',
  '"Quoted text," he said, "is tricky."',
  "It's a dog's life; the dogs' bowls were empty.",
  'The temperature dropped to -40° (which is -40°F too).',
];
prose.forEach((t, i) => add(`prose-${i}`, t));
const words = 'the of and to in is was that for on with as by at from his her they we you it this which be are or an not have had one all were there when what their more if about out up into so some can no time could other then than only its like over also after new two first very just any where most made through back years way many well down should because each those people how too little state good much world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three'.split(' ');
for (let i = 0; i < 20; i++) {
  const n = randInt(5, 60);
  let s = '';
  for (let k = 0; k < n; k++) s += (k ? pick([' ', ' ', ' ', ', ', '. ', ' ', '\n']) : '') + pick(words);
  add(`prose-random-${i}`, s[0].toUpperCase() + s.slice(1) + '.');
}

// code
const code = [
  'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
  '#include <stdio.h>\n\nint main(void)\n{\n\tprintf("hello, %s\\n", "world");\n\treturn 0;\n}\n',
  'const add = (a, b) => a + b;\nconsole.log(add(1, 2)); // 3\n',
  '{"name": "qpack", "version": "0.1.0", "deps": ["pcre2", "utf8proc"], "ok": true, "n": null}',
  'for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }',
  'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;',
  '#!/bin/sh\nset -eu\nfor f in *.txt; do\n  wc -l "$f"\ndone\n',
  '<html>\n  <body class="main">\n    <p>Hi &amp; bye</p>\n  </body>\n</html>',
  'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", v);\n}',
  'if (x != y && (z || !w)) { return -1; } else if (x <= 0x7FFF) { x >>= 2; }',
  'import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)',
  '    indented_with_spaces = True\n\tindented_with_tab = True\n',
  'a=1;b=2;c=a+b*2-(a/b)%3**4',
  'git commit -m "fix: handle \\r\\n line endings" && git push origin main',
  'std::vector<std::string> v{"a", "b"}; auto it = v.begin();',
  '/* block comment */ // line comment\n#define MAX(a,b) ((a)>(b)?(a):(b))',
  'key: value\nlist:\n  - one\n  - two\nnested:\n  inner: 3\n',
  'x := map[string]int{"a": 1}\nif _, ok := x["b"]; !ok {\n\tpanic("no")\n}',
  '$ ls -la /tmp | grep -v total | awk \'{print $9}\'',
  'print(f"{name!r:>10} {value:.3f}")',
];
code.forEach((t, i) => add(`code-${i}`, t));

// digits
const digits = [
  '0', '7', '42', '123', '2024', '12345', '3.14159265358979323846', '1,000,000', '1e-10', '0x1F600',
  '+1 (555) 123-4567', '192.168.0.1', '2024-06-11T12:34:56Z', '١٢٣٤٥', '१२३४५', '①②③', '½ ¼ ¾', 'Ⅻ',
];
digits.forEach((t, i) => add(`digits-${i}`, t));
add('digits-run-100', '1234567890'.repeat(10));
add('digits-run-1000', Array.from({ length: 1000 }, () => String(randInt(0, 9))).join(''));
add('digits-mixed', 'abc123def4567ghi89 0 00 000 0000');

// contractions in all cases
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"];
for (const c of contractions) {
  const variants = new Set([c, c.toUpperCase(), c[0] + c[1].toUpperCase() + c.slice(2)]);
  if (c.length === 3) variants.add(c[0] + c[1] + c[2].toUpperCase());
  for (const v of variants) {
    add(`contraction${v}`, `we${v} go`);
    add(`contraction-upper${v}`, `WE${v} GO`);
  }
}
["DON'T", "don't", "Don't", "dOn'T", "we'LL", "WE'll", "I'M", "i'm", "It'S", "they'Re", "YOU'VE", "she'D",
  "rock 'n' roll", "'tis", "'TWAS", "o'clock", "y'all'd've", "it's 'quoted'", "don’t (curly)",
  "'ſ and 'K", "l'été", "'''", "x'", "''s", "'s"].forEach((t, i) => add(`contraction-${i}`, t));

// whitespace
const ws = [
  ' ', '  ', '   ', '    ', '\t', '\t\t', '\n', '\n\n', '\n\n\n', '\r\n', '\r\n\r\n', '\r', ' \n', '\n ',
  'a b', 'a  b', 'a   b', 'a\tb', 'a\t\tb', 'a\nb', 'a\n\nb', 'a\r\nb', 'a \r\n b', 'trailing   ',
  '   leading', '  both  ', 'line1\n\n\nline4', 'tab\t \tmix', '\n\n  indented after blank lines',
  'a\u00a0b', 'a\u3000b', 'a\u2028b', 'a\u2029b', 'a\u0085b', 'a\u180eb', 'a\u200bb', 'a\ufeffb',
  'a\u000bb', 'a\u000cb', 'a \u00a0 b', 'x \n y \n\n z', ' \t \n \r\n ', 'end with newline\n',
  'spaces before newline   \nnext', '\u2003em\u2002en\u2009thin\u200ahair', 'a\u1680b\u205fc',
  ' '.repeat(100), '\n'.repeat(50), 'a' + ' '.repeat(17) + 'b', '\t'.repeat(9) + 'x',
];
ws.forEach((t, i) => add(`ws-${i}`, t));

// scripts
const scripts = {
  zh: ['你好，世界！', '机器学习是人工智能的一个分支。', '我们在二〇二四年六月十一日见面。', '天下大势，分久必合，合久必分。',
    '这是一个测试：包括标点符号、数字123和English混合。', '中华人民共和国', '「引号」『书名号』《书》', '繁體中文與简体中文'],
  ja: ['こんにちは、世界！', '東京は日本の首都です。', 'カタカナとひらがなと漢字を混ぜた文章。', 'ｶﾞｷﾞｸﾞ（半角カナ）',
    '吾輩は猫である。名前はまだ無い。', 'ガ ギ グ (precomposed) が', 'ラーメン🍜を食べたい', '第３章　全角スペース'],
  ko: ['안녕하세요, 세계!', '한국어 형태소 분석은 어렵습니다.', '서울특별시 종로구', '대한민국 만세',
    '가나다라마바사', '한글과 English와 123', '똠방각하', '읽다 닭 값'],
  ar: ['مرحبا بالعالم', 'اللغة العربية جميلة جداً.', 'بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ', 'رقم ١٢٣ و 456',
    'القاهرة عاصمة مصر', 'مدرسة‎ (with LRM)', 'كتاب، قلم؛ ورقة؟'],
  hi: ['नमस्ते दुनिया', 'हिन्दी भारत की राजभाषा है।', 'क्षत्रिय ज्ञान श्रृंगार', 'मैं ठीक हूँ, धन्यवाद!',
    'संस्कृतम्', 'दिल्ली २०२४'],
  th: ['สวัสดีชาวโลก', 'ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ', 'กรุงเทพมหานคร', 'ขอบคุณครับ', 'น้ำ ผู้ใหญ่ ฤๅษี'],
  ru: ['Привет, мир!', 'Съешь же ещё этих мягких французских булок, да выпей чаю.', 'ЁЛКА ёлка Йод й'],
  el: ['Γειά σου Κόσμε', 'Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.', 'ΆΈΉ ΐΰ'],
  he: ['שלום עולם', 'עִבְרִית עם ניקוד'],
  vi: ['Xin chào thế giới', 'Tiếng Việt có nhiều dấu: ắ ằ ẳ ẵ ặ', 'Nguyễn Văn Bình'],
  misc: ['Ελληνικά, Русский, العربية, עברית, हिन्दी, ไทย, 中文, 日本語, 한국어', 'ქართული ენა', 'Հայերեն',
    'አማርኛ', 'ᏣᎳᎩ', 'ᠮᠣᠩᠭᠣᠯ', 'ភាសាខ្មែរ', 'ພາສາລາວ', 'བོད་སྐད', 'தமிழ்', 'বাংলা', 'ગુજરાતી', 'ਪੰਜਾਬੀ'],
};
for (const [lang, list] of Object.entries(scripts)) list.forEach((t, i) => add(`${lang}-${i}`, t));

// emoji
const emoji = [
  '😀', '😀😃😄', 'I ❤️ NY', '👍🏻👍🏼👍🏽👍🏾👍🏿', '👨‍👩‍👧‍👦', '👩🏽‍💻', '🏳️‍🌈', '🏴‍☠️', '🇯🇵🇺🇸🇩🇪', '1️⃣2️⃣#️⃣',
  '🧑🏿‍🤝‍🧑🏻', '👁️‍🗨️', '❤️‍🔥', '🫠🫡🫶', 'text😀text', 'smile 😀, wink 😉.', '🐱‍👤', '🏃‍♀️‍➡️',
  '☺︎ vs ☺️', '👨🏻‍❤️‍💋‍👨🏼', '🏴󠁧󠁢󠁳󠁣󠁴󠁿 (Scotland)', '⌚⌛⏰', '©®™', '🀄🃏', '😀'.repeat(30),
];
emoji.forEach((t, i) => add(`emoji-${i}`, t));

// combining marks that NFC changes (and some it must not)
const combining = [
  'e\u0301', 'cafe\u0301', 'A\u030a', 'n\u0303o', 'a\u0323\u0302', 'a\u0302\u0323', 'o\u0308\u0304',
  '\u1100\u1161', '\u1100\u1161\u11a8', '\u1112\u1161\u11ab\u1100\u1173\u11af', '\u2126', '\u212b', '\u212a',
  '\uf900\uf901', '\u037e', '\u0340\u0341', 'e\u0301\u0301\u0301', '\u0301 leading mark', 'x\u20dd',
  'か\u3099', 'ﾊﾟ', 'q\u0307\u0323', '\u0958\u0959', 'ﬁ ligature', '\u00c5 vs A\u030a vs \u212b',
  'Zalgo: Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034da',
  '\u0f73', '\ud55c\u11a8', 'e\u0301\u0327', 'ḱ\u0323',
];
combining.forEach((t, i) => add(`nfc-${i}`, t));

// special tokens inside and next to words
const special = [
  '<|endoftext|>', '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<tool_call>', '</tool_call>',
  '<|im_start|>user', 'abc<|im_end|>def', '<|endoftext|><|endoftext|>', ' <|im_start|> ', '<|im_start',
  '<|im_end|x', '<|im_start|im_start|>', 'x<think>y</think>z', '<|im_end|>\u0301', 'e<|im_end|>\u0301',
  '<|vision_start|><|image_pad|><|vision_end|>', '<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>',
  '<|IM_END|>', '< |im_end| >', '<<|im_end|>>', '<|im_end|><|im_end|', '\n<|im_end|>\n',
  'text <|endoftext|> more text', '<tool_response>\n{"ok": true}\n</tool_response>', '<|box_start|>(1,2)<|box_end|>',
  '<|object_ref_start|>cat<|object_ref_end|>', '<|quad_start|><|quad_end|>', '<|repo_name|>x<|file_sep|>y',
  '<|video_pad|>'.repeat(3), 'Ġ<|im_end|>Ġ',
];
special.forEach((t, i) => add(`special-${i}`, t));

// chat template text
const chat = [
  '<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n',
  '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
  '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
  '<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\nB<|im_end|>\n<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n',
  '<|im_start|>assistant\n<think>\nThe user wants a number.\n</think>\n\nThe answer is 4.<|im_end|>\n',
  '<|im_end|>\n<|im_start|>user\nand then?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
  '<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n',
  '<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n',
];
chat.forEach((t, i) => add(`chat-${i}`, t));

// very long words
add('long-a-1000', 'a'.repeat(1000));
add('long-ab-500', 'ab'.repeat(500));
add('long-letters', Array.from({ length: 3000 }, () => pick('abcdefghijklmnopqrstuvwxyz')).join(''));
add('long-alnum', Array.from({ length: 2000 }, () => pick('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')).join(''));
add('long-base64', Array.from({ length: 4000 }, () => pick('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/')).join('') + '==');
add('long-word-repeat', 'supercalifragilisticexpialidocious'.repeat(40));
add('long-cjk', Array.from({ length: 2000 }, () => cp(randInt(0x4e00, 0x9fff))).join(''));
add('long-punct', '!?.,;:'.repeat(300));
add('long-dashes', '-'.repeat(500) + '=' .repeat(500));
add('long-url', 'https://example.com/' + Array.from({ length: 100 }, (_, i) => `seg${i}`).join('/'));
add('long-emoji', '👨‍👩‍👧‍👦'.repeat(100));
add('long-spaces-word', ' '.repeat(300) + 'x' + ' '.repeat(300));
add('long-zalgo', 'a' + Array.from({ length: 300 }, () => cp(randInt(0x300, 0x36f))).join(''));
add('long-word-10k', Array.from({ length: 10000 }, () => pick('etaoinshrdlu')).join(''));

// empty, single characters, controls, NUL
add('empty', '');
for (let c = 0; c < 128; c++) add(`ascii-${c}`, String.fromCharCode(c));
add('nul-inside', 'a\u0000b');
add('nul-run', '\u0000\u0000\u0000');
add('nul-space', ' \u0000 ');
add('latin1-all', Array.from({ length: 96 }, (_, i) => String.fromCharCode(0xa0 + i)).join(''));
add('c1-controls', Array.from({ length: 32 }, (_, i) => String.fromCharCode(0x80 + i)).join(' '));

// seeded random text from many scripts (valid scalar values only)
const ranges = [
  [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x24f], [0x250, 0x2af], [0x300, 0x36f], [0x370, 0x3ff],
  [0x400, 0x4ff], [0x531, 0x587], [0x5d0, 0x5ea], [0x600, 0x6ff], [0x900, 0x97f], [0x980, 0x9ff],
  [0xb80, 0xbff], [0xe00, 0xe7f], [0xe80, 0xeff], [0xf00, 0xfff], [0x10a0, 0x10ff], [0x1100, 0x11ff],
  [0x1200, 0x137f], [0x13a0, 0x13f4], [0x1800, 0x18aa], [0x1780, 0x17ff], [0x1e00, 0x1eff],
  [0x2000, 0x206f], [0x20a0, 0x20c0], [0x2100, 0x214f], [0x2190, 0x21ff], [0x2200, 0x22ff],
  [0x2500, 0x257f], [0x2600, 0x26ff], [0x3000, 0x303f], [0x3040, 0x309f], [0x30a0, 0x30ff],
  [0x3100, 0x312f], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xf900, 0xfaff], [0xfb00, 0xfb4f],
  [0xfe30, 0xfe4f], [0xff00, 0xffef], [0x10000, 0x1007f], [0x10330, 0x1034a], [0x1d400, 0x1d7ff],
  [0x1d100, 0x1d1ff], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f900, 0x1f9ff], [0x20000, 0x2a6df],
  [0x1f1e6, 0x1f1ff], [0xfe00, 0xfe0f], [0xe0100, 0xe01ef],
];
const seps = [' ', ' ', ' ', '\n', '\t', '  ', '. ', ', ', '\r\n', '0', '42', "'s", '-', '_'];
for (let i = 0; i < 150; i++) {
  const n = randInt(1, 120);
  const favourites = [pick(ranges), pick(ranges), pick(ranges)];
  let s = '';
  for (let k = 0; k < n; k++) {
    if (rand() < 0.15) { s += pick(seps); continue; }
    const [lo, hi] = rand() < 0.8 ? pick(favourites) : pick(ranges);
    s += cp(randInt(lo, hi));
  }
  add(`random-scripts-${i}`, s);
}
// and a few from anywhere in the code space (unassigned, private use, noncharacters)
for (let i = 0; i < 30; i++) {
  let s = '';
  const n = randInt(1, 40);
  for (let k = 0; k < n; k++) {
    let c;
    do { c = randInt(0, 0x10ffff); } while (c >= 0xd800 && c <= 0xdfff);
    s += rand() < 0.2 ? ' ' : cp(c);
  }
  add(`random-any-${i}`, s);
}

// Unicode-version differences (tokenizer/tok_unicode_tables.h): every NFC
// barrier next to marks it must not move past, and a character from each
// range of letters and numbers newer than PCRE2's tables.
const tables = fs.readFileSync(path.join(root, 'tokenizer/tok_unicode_tables.h'), 'utf8');
const tableRanges = (name) => {
  const body = tables.slice(tables.indexOf(name), tables.indexOf('};', tables.indexOf(name)));
  return [...body.matchAll(/\{(0x[0-9A-F]+), (0x[0-9A-F]+)\}/g)].map((m) => [Number(m[1]), Number(m[2])]);
};
for (const [lo, hi] of tableRanges('TOK_NFC_BARRIERS'))
  for (let c = lo; c <= hi; c++)
    add(`nfc-barrier-${c.toString(16)}`, `a${cp(c)}\u0301 e\u0301${cp(c)}\u0323 ${cp(c)}\u0300`);
for (const name of ['TOK_EXTRA_LETTERS', 'TOK_EXTRA_NUMBERS'])
  for (const [lo, hi] of tableRanges(name)) {
    const c = randInt(lo, hi);
    add(`unicode16-${c.toString(16)}`, `a${cp(c)}b 1${cp(c)}2 ${cp(lo)}${cp(hi)}'s x`);
  }

// ---- run the oracle ----------------------------------------------------------
const tok = Tokenizer.fromFile(tokenizerPath);
const enc = async (text) => (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
const dec = async (ids, skip) => tok.decode(ids, skip);

fs.mkdirSync(outDir, { recursive: true });
const names = new Set();
let encodeLines = '';
for (const { name, text } of corpus) {
  if (names.has(name)) throw new Error(`duplicate corpus name ${name}`);
  names.add(name);
  const ids = await enc(text);
  encodeLines += JSON.stringify({ name, text, ids, decoded: await dec(ids, false) }) + '\n';
}

// decode cases: ids cut through characters, lone bytes, specials skipped
const byteLevel = [];
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  byteLevel.push(printable ? b : 256 + byteLevel.filter((c) => c >= 256).length);
}
const byteId = (b) => tok.tokenToId(String.fromCodePoint(byteLevel[b]));
const decodeCases = [];
const addDecode = (name, ids, skip) => decodeCases.push({ name, ids, skip });
for (const b of [0x80, 0xbf, 0xc0, 0xc2, 0xe0, 0xe4, 0xed, 0xf0, 0xf4, 0xf5, 0xff]) addDecode(`byte-${b.toString(16)}`, [byteId(b)], false);
const bytes = (...bs) => bs.map(byteId);
addDecode('f0-9f-98-then-A', [...bytes(0xf0, 0x9f, 0x98), byteId(0x41)], false);
addDecode('e0-80', bytes(0xe0, 0x80), false);
addDecode('ed-a0-80-surrogate', bytes(0xed, 0xa0, 0x80), false);
addDecode('f4-90-above-max', bytes(0xf4, 0x90, 0x80, 0x80), false);
addDecode('c0-af-overlong', bytes(0xc0, 0xaf), false);
addDecode('truncated-at-end', [...(await enc('ok ')), ...bytes(0xe4, 0xb8)], false);
addDecode('lead-then-special', [byteId(0xf0), 151645, byteId(0x9f)], false);
for (const text of ['😀', '👨‍👩‍👧‍👦', '中文字', '🇯🇵', 'e\u0301', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢']) {
  const ids = await enc(text);
  for (let cut = 1; cut < ids.length; cut++) addDecode(`prefix-${text}-${cut}`, ids.slice(0, cut), false);
  for (let cut = 1; cut < ids.length; cut++) addDecode(`suffix-${text}-${cut}`, ids.slice(cut), false);
}
for (const text of chat.concat(special.slice(0, 12))) {
  const ids = await enc(text);
  addDecode(`skip-special-${decodeCases.length}`, ids, true);
}
for (let i = 0; i < 40; i++) { // random byte-token soup
  const n = randInt(1, 12);
  addDecode(`random-bytes-${i}`, Array.from({ length: n }, () => byteId(randInt(0x80, 0xff))), false);
}
let decodeLines = '';
for (const { name, ids, skip } of decodeCases)
  decodeLines += JSON.stringify({ name, ids, skip_special: skip, text: await dec(ids, skip) }) + '\n';

// added-token flags the Qwen3 file never uses (lstrip, rstrip, single_word,
// normalized: true), checked on the official file with these tokens appended
// to "added_tokens"; the C test appends the same JSON text.
const extraTokens = [
  { id: 151669, content: '<mask>', single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
  { id: 151670, content: '[END]', single_word: false, lstrip: false, rstrip: true, normalized: false, special: false },
  { id: 151671, content: 'qpword', single_word: true, lstrip: false, rstrip: false, normalized: false, special: false },
  { id: 151672, content: 'café', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
  { id: 151673, content: ' sp ', single_word: false, lstrip: true, rstrip: true, normalized: false, special: false },
  { id: 151674, content: 'Ωhm', single_word: true, lstrip: true, rstrip: true, normalized: true, special: true },
];
const flagTexts = [
  'a <mask> b', 'a  \t<mask>b', '<mask>', '<mask><mask>', ' <mask> <mask> ', 'x[END]   y', '[END]\n\nz',
  '[END]   <mask>', 'qpword', 'aqpword', 'qpword b', 'qpword_', '(qpword)', 'qpwordqpword', 'é qpword é',
  'qpword\u0301', 'café', 'cafe\u0301 au lait', 'CAFÉ café', ' sp x', 'a  sp  b', 'x sp sp y', 'sp',
  '<|im_end|> <mask>', '\u2126hm', 'Ωhm', 'aΩhm', ' Ωhm ', '  \u2126hm\t', '[END]\u3000qpword',
];
const flagJson = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
flagJson.added_tokens.push(...extraTokens);
const flagTok = Tokenizer.fromString(JSON.stringify(flagJson));
let flagLines = '';
for (let i = 0; i < flagTexts.length; i++) {
  const text = flagTexts[i];
  const ids = (await flagTok.encode(text, null, { addSpecialTokens: true })).getIds();
  flagLines += JSON.stringify({ name: `flags-${i}`, text, ids, decoded: await flagTok.decode(ids, false) }) + '\n';
}
fs.writeFileSync(path.join(outDir, 'added_tokens_extra.json'),
  extraTokens.map((t) => JSON.stringify(t)).join(',\n') + '\n');
fs.writeFileSync(path.join(outDir, 'added_flags.jsonl'), flagLines);

fs.writeFileSync(path.join(outDir, 'encode.jsonl'), encodeLines);
fs.writeFileSync(path.join(outDir, 'decode.jsonl'), decodeLines);
const sha = createHash('sha256').update(fs.readFileSync(tokenizerPath)).digest('hex');
fs.writeFileSync(path.join(outDir, 'README.md'), `# Tokenizer conformance data

Generated by \`scripts/gen_tokenizer_expected.mjs\`; do not edit by hand.

- Oracle: npm package \`tokenizers\` ${oracleVersion} (Hugging Face tokenizers, the
  Rust library, through its Node binding; pinned in scripts/tokenizer-oracle/),
  Node ${process.version}.
- Tokenizer: Qwen3 tokenizer.json, sha256 ${sha}
  (scripts/fetch_tokenizer.sh).
- \`encode.jsonl\`: ${corpus.length} strings, one JSON object per line:
  \`name\`, \`text\`, \`ids\` = encode(text, add_special_tokens=true),
  \`decoded\` = decode(ids, skip_special_tokens=false). Cases named nfc-barrier-*
  and unicode16-* pin the Unicode-version differences of
  tokenizer/tok_unicode_tables.h (scripts/gen_unicode_tables.mjs).
- \`decode.jsonl\`: ${decodeCases.length} id sequences: \`ids\`, \`skip_special\`,
  \`text\` = decode(ids, skip_special). Many cut characters apart; the
  oracle's answer shows the U+FFFD policy.
- \`added_tokens_extra.json\` and \`added_flags.jsonl\`: added-token flags Qwen3's
  file does not use (lstrip, rstrip, single_word, normalized: true). The
  tokens in added_tokens_extra.json (JSON objects separated by commas) are
  appended to the official file's "added_tokens"; added_flags.jsonl holds
  the oracle's ids and decode for ${flagTexts.length} strings with that file.

The corpus comes from a seeded PRNG: rerunning the script reproduces these
files exactly.

    (cd scripts/tokenizer-oracle && npm ci)
    node scripts/gen_tokenizer_expected.mjs
`);
console.log(`wrote ${corpus.length} encode cases and ${decodeCases.length} decode cases to ${outDir}`);
