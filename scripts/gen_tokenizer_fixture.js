// gen_tokenizer_fixture.js — expected GPT-2 token ids for the tokenizer tests, from an
// independent encoder: the JavaScript one in the npm package gpt-3-encoder@1.1.4.
//
//   node scripts/gen_tokenizer_fixture.js PACKAGE_DIR TEXT_FILE > IDS_FILE
//
// PACKAGE_DIR is the unpacked package (build/npm/gpt-3-encoder/package, see `make data`).
// Prints the ids of the UTF-8 text in TEXT_FILE, one per line.
// Two known differences from the reference encoders keep some characters out of the text:
// JavaScript's \s counts U+FEFF as whitespace and not U+0085 (Unicode's White_Space is the
// opposite), and node's Unicode version (newer than Python's) classes recently added characters.
'use strict';
const fs = require('fs');
const path = require('path');

// Reads the arguments, encodes the text and prints one id per line.
function main() {
  const [packageDir, textFile] = process.argv.slice(2);
  if (!packageDir || !textFile) {
    console.error('usage: node gen_tokenizer_fixture.js PACKAGE_DIR TEXT_FILE > IDS_FILE');
    process.exit(2);
  }
  const { encode } = require(path.resolve(packageDir, 'Encoder.js'));
  const text = fs.readFileSync(textFile, 'utf8');
  process.stdout.write(encode(text).map(id => `${id}\n`).join(''));
}

main();
