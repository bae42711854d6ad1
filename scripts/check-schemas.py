#!/usr/bin/env python3
"""Every YAML example in the docs, under both readers of its format.

Each ```yaml block of README.md and docs/*.md that is a contract (it has
`criteria`) or a Loopfile (its top-level keys are Loopfile sections) must be
accepted by the JSON Schema in docs/schema/ and by `loop validate`. The
checked-in schemas must be exactly what `loop schema` prints now. Known-bad
documents must be refused by both, so the check itself can fail.

Usage: check-schemas.py LOOP_BINARY REPO_ROOT
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import jsonschema
import yaml

loop, root = sys.argv[1], pathlib.Path(sys.argv[2])
problems = []

schemas = {}
for fmt in ("contract", "loopfile"):
    printed = subprocess.run([loop, "schema", fmt], capture_output=True, text=True, check=True).stdout
    path = root / "docs" / "schema" / f"{fmt}.schema.json"
    if path.read_text() != printed:
        problems.append(f"{path}: differs from `loop schema {fmt}` (regenerate it: loop schema {fmt} > {path})")
    schemas[fmt] = json.loads(printed)
    jsonschema.Draft202012Validator.check_schema(schemas[fmt])

SECTIONS = set(schemas["loopfile"]["properties"])


def kind_of(doc):
    if isinstance(doc, dict) and "criteria" in doc:
        return "contract"
    if isinstance(doc, dict) and doc and set(doc) <= SECTIONS:
        return "loopfile"
    return None


def judge(fmt, text, where):
    """(schema accepts, loop accepts, what each said)."""
    doc = yaml.safe_load(text)
    errors = sorted(jsonschema.Draft202012Validator(schemas[fmt]).iter_errors(doc), key=str)
    with tempfile.TemporaryDirectory() as d:
        name = "Loopfile.yaml" if fmt == "loopfile" else "task.yaml"
        f = pathlib.Path(d) / name
        f.write_text(text)
        r = subprocess.run([loop, "validate", str(f)], capture_output=True, text=True)
    said = "; ".join(e.message for e in errors[:3]) + " | " + (r.stdout + r.stderr).strip()
    return not errors, r.returncode == 0, said


checked = 0
for md in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
    text = md.read_text()
    for m in re.finditer(r"^```yaml\n(.*?)^```", text, re.S | re.M):
        line = text[: m.start()].count("\n") + 1
        block = m.group(1)
        try:
            doc = yaml.safe_load(block)
        except yaml.YAMLError as e:
            problems.append(f"{md}:{line}: not YAML: {e}")
            continue
        fmt = kind_of(doc)
        if fmt is None:
            continue
        schema_ok, loop_ok, said = judge(fmt, block, f"{md}:{line}")
        checked += 1
        if not (schema_ok and loop_ok):
            problems.append(f"{md}:{line}: {fmt} example: schema {'accepts' if schema_ok else 'REFUSES'}, "
                            f"loop validate {'accepts' if loop_ok else 'REFUSES'}: {said}")

# The check can fail: these are wrong, and both readers must say so.
BAD = [
    ("contract", "instruction: x\ncriteria:\n  - id: a\n    checks: [{run: 'true'}]\n    chekcs: []\n"),
    ("contract", "instruction: x\ncriteria:\n  - id: a\n    checks: [{file_contains: a.txt}]\n"),
    ("contract", "instruction: x\ncriteria: []\n"),
    ("loopfile", "chekpoints:\n  timeout_secs: 5\n"),
    ("loopfile", "exec:\n  default: maybe\n"),
    ("loopfile", "progress:\n  repeat_same: 1\n"),
]
for fmt, text in BAD:
    schema_ok, loop_ok, said = judge(fmt, text, "bad example")
    if schema_ok or loop_ok:
        problems.append(f"a bad {fmt} was accepted (schema {schema_ok}, loop {loop_ok}): {text!r}")

if checked < 3:
    problems.append(f"only {checked} examples found in the docs: the extraction is broken")
for p in problems:
    print(p)
print(f"{checked} doc examples, {len(BAD)} bad documents: {'ok' if not problems else f'{len(problems)} problem(s)'}")
sys.exit(1 if problems else 0)
