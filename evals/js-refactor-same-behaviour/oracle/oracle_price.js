// The original functions, and many prices: the refactor must agree on all.
const assert = require("assert");
const p = require("./price.js");
const was = {
  student: (x) => Math.round(x * (1 - 0.2) * 100) / 100,
  senior: (x) => Math.round(x * (1 - 0.3) * 100) / 100,
  member: (x) => Math.round(x * (1 - 0.1) * 100) / 100,
};
for (const name of Object.keys(was)) {
  for (let i = 0; i < 2000; i++) {
    const x = (i * 7.31) % 997 - 13.57;
    assert.strictEqual(p[name](x), was[name](x), `${name}(${x})`);
  }
}
console.log("ok");
