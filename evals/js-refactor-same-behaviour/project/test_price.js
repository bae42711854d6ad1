const assert = require("assert");
const p = require("./price.js");
assert.strictEqual(p.student(10), 8);
assert.strictEqual(p.senior(10), 7);
assert.strictEqual(p.member(10), 9);
console.log("ok");
