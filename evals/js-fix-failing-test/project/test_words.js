const assert = require("assert");
const { countWords } = require("./words.js");
assert.strictEqual(countWords("one two three"), 3);
assert.strictEqual(countWords("  padded   words  "), 2);
assert.strictEqual(countWords(""), 0);
assert.strictEqual(countWords("tab\tand\nnewline"), 3);
console.log("ok");
