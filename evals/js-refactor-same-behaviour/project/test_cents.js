// Prices that are not round give what they gave before the refactor.
const assert = require("assert");
const p = require("./price.js");
assert.strictEqual(p.student(10.07), 8.06);
assert.strictEqual(p.senior(7.77), 5.44);
console.log("ok");
