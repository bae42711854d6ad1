const assert = require("assert");
const { countWords } = require("./words.js");
const cases = { "a": 1, " a ": 1, "a b c d": 4, "\n\n": 0, "x\u00a0y": 2, "many   spaces   here": 3 };
for (const [t, n] of Object.entries(cases)) assert.strictEqual(countWords(t), n, JSON.stringify(t));
console.log("ok");
