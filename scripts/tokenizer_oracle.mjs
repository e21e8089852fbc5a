// tokenizer_oracle.mjs - what the generators (gen_tokenizer_expected.mjs,
// gen_unicode_tables.mjs) share: their options and the oracle, Hugging
// Face's tokenizers as npm installed it in scripts/tokenizer-oracle.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

// The value after `name` on the command line, or dflt.
export function opt(name, dflt) {
  const args = process.argv.slice(2);
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
}

// The oracle installed under oracleDir: its Tokenizer class and its version.
export function loadOracle(oracleDir) {
  const require = createRequire(path.join(path.resolve(oracleDir), 'package.json'));
  const { Tokenizer } = require('tokenizers');
  const version = JSON.parse(fs.readFileSync(require.resolve('tokenizers/package.json'), 'utf8')).version;
  return { Tokenizer, version };
}
