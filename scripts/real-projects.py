#!/usr/bin/env python3
"""Four small projects laid out and installed the way people do, one per
stack, each a git repository with one bug and its own test suite:

- python: a src-layout package whose version comes from git (hatch-vcs),
  installed editable (`pip install -e .`) in `.venv`, tested by pytest;
- node: a TypeScript package tested by vitest 2 (from the npm registry);
- rust: a crate with a registry dependency (itoa), built once in the
  checkout as its developer would (`target/` present);
- cmake: a C library built with CMake into `build/` and tested by CTest.

    scripts/real-projects.py DEST     make them in DEST (removed first) and
                                      print what they are as JSON

Each entry names the project's directory, the developer's own test command
(`suite`), the check a task is held to (`check`, what `loop init` detects),
the right fix and a wrong one (a file and its new text), and the test file
whose assertions a lazy fix would delete. Used by scripts/bench.py (the
`projects` section: what a task costs beside the suite) and by the stack
tests of `crates/loop-cli/tests/real_projects.rs`. Dependencies come from
the package registries through pip, npm and Cargo's cache; pip's and
npm's own caches make a second run quick.
"""

import json
import os
import shutil
import subprocess
import sys

VITEST = "2.1.9"
PYTHON_DEPS = ["pytest==9.2.0", "hatchling==1.33.0", "hatch-vcs==0.5.0", "editables==0.5"]


def sh(cwd, *cmd, env=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"real-projects: `{' '.join(cmd)}` in {cwd} exited {p.returncode}:\n"
                         f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def write(root, files):
    for rel, text in files.items():
        at = os.path.join(root, rel)
        os.makedirs(os.path.dirname(at), exist_ok=True)
        with open(at, "w") as f:
            f.write(text)


def commit(root):
    sh(root, "git", "init", "-q")
    sh(root, "git", "config", "user.email", "dev@example.invalid")
    sh(root, "git", "config", "user.name", "dev")
    sh(root, "git", "add", "-A")
    sh(root, "git", "commit", "-qm", "the project as its developer has it")


SLUG_CASES = [("Hello World", "hello-world"), ("  Trim  me ", "trim-me"), ("a_b c", "a-b-c"),
              ("Mixed CASE", "mixed-case"), ("x--y", "x-y"), ("Dots.and.more", "dots-and-more"),
              ("UPPER", "upper"), ("tabs\tand\nlines", "tabs-and-lines"), ("ok", "ok"), ("A1 B2", "a1-b2")]


def python(dest):
    root = os.path.join(dest, "python")
    cases = ",\n".join(f"    ({a!r}, {b!r})" for a, b in SLUG_CASES)
    write(root, {
        "pyproject.toml": """[build-system]
requires = ["hatchling", "hatch-vcs"]
build-backend = "hatchling.build"

[project]
name = "slugline"
dynamic = ["version"]
requires-python = ">=3.9"

[project.optional-dependencies]
test = ["pytest"]

[tool.hatch.version]
source = "vcs"

[tool.hatch.build.hooks.vcs]
version-file = "src/slugline/_version.py"

[tool.hatch.build.targets.wheel]
packages = ["src/slugline"]
""",
        ".gitignore": ".venv/\n__pycache__/\n*.egg-info/\nsrc/slugline/_version.py\n.pytest_cache/\n",
        "src/slugline/__init__.py": """\"\"\"URL slugs.\"\"\"

import re

from ._version import version as __version__

__all__ = ["slugify", "__version__"]


def slugify(text):
    \"\"\"Words of `text`, joined by single dashes.\"\"\"
    words = re.split(r"[^A-Za-z0-9]+", text.strip())
    return "-".join(w for w in words if w)
""",
        "tests/test_slug.py": f"""import pytest

import slugline


@pytest.mark.parametrize("text, slug", [
{cases},
])
def test_slugify(text, slug):
    assert slugline.slugify(text) == slug


def test_version_comes_from_git():
    assert slugline.__version__
""",
    })
    commit(root)
    sh(root, sys.executable, "-m", "venv", ".venv")
    pip = os.path.join(root, ".venv", "bin", "pip")
    sh(root, pip, "install", "-q", "--disable-pip-version-check", *PYTHON_DEPS)
    sh(root, pip, "install", "-q", "--disable-pip-version-check", "--no-build-isolation", "-e", ".")
    fixed = """\"\"\"URL slugs.\"\"\"

import re

from ._version import version as __version__

__all__ = ["slugify", "__version__"]


def slugify(text):
    \"\"\"Words of `text`, lowercased, joined by single dashes.\"\"\"
    words = re.split(r"[^A-Za-z0-9]+", text.strip().lower())
    return "-".join(w for w in words if w)
"""
    wrong = fixed.replace("text.strip().lower()", "text.strip()").replace(
        'return "-".join(w for w in words if w)', 'return "-".join(w for w in words if w).lower()[:4]')
    return {
        "stack": "python", "dir": root, "instruction": "slugify() must lowercase the words",
        "suite": ".venv/bin/python -m pytest -q", "check": ".venv/bin/python -m pytest -q",
        "fix": ["src/slugline/__init__.py", fixed], "wrong": ["src/slugline/__init__.py", wrong],
        "tests": "tests/test_slug.py",
    }


def node(dest):
    root = os.path.join(dest, "node")
    cases = "\n".join(f"  [{json.dumps(a)}, {b}]," for a, b in
                      [("1,2,3", 6), ("", 0), ("10", 10), ("4, 5", 9), ("-1,1", 0), ("7,7,7,7", 28),
                       ("0,0", 0), ("100,-50", 50)])
    write(root, {
        "package.json": json.dumps({
            "name": "tally-ts", "version": "1.0.0", "private": True, "type": "module",
            "scripts": {"test": "vitest run"},
            "devDependencies": {"vitest": VITEST},
        }, indent=2) + "\n",
        ".gitignore": "node_modules/\n",
        "src/tally.ts": """/** The sum of the comma-separated integers in `text`. */
export function tally(text: string): number {
  if (text.trim() === "") return 0;
  return text.split(",").map((p) => parseInt(p, 10)).reduce((a, b) => a + b, 0) - 1;
}
""",
        "test/tally.test.ts": f"""import {{ describe, expect, it }} from "vitest";
import {{ tally }} from "../src/tally";

const cases: [string, number][] = [
{cases}
];

describe("tally", () => {{
  for (const [text, sum] of cases) {{
    it(`adds ${{JSON.stringify(text)}}`, () => {{
      expect(tally(text)).toBe(sum);
    }});
  }}
}});
""",
    })
    sh(root, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
    commit(root)
    fixed = """/** The sum of the comma-separated integers in `text`. */
export function tally(text: string): number {
  if (text.trim() === "") return 0;
  return text.split(",").map((p) => parseInt(p, 10)).reduce((a, b) => a + b, 0);
}
"""
    wrong = fixed.replace("reduce((a, b) => a + b, 0);", "reduce((a, b) => a + b, 0) + (text.length > 3 ? 0 : 1);")
    return {
        "stack": "node", "dir": root, "instruction": "tally() must return the exact sum",
        "suite": "npm test", "check": "npm test",
        "fix": ["src/tally.ts", fixed], "wrong": ["src/tally.ts", wrong], "tests": "test/tally.test.ts",
    }


def rust(dest):
    root = os.path.join(dest, "rust")
    write(root, {
        "Cargo.toml": """[package]
name = "numtext"
version = "0.1.0"
edition = "2021"

[dependencies]
itoa = "1"

[workspace]
""",
        ".gitignore": "target/\n",
        "src/lib.rs": """//! Numbers as text.

/// `n` in decimal, with a thousands separator every three digits.
pub fn grouped(n: u64) -> String {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(n);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 4 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` in decimal.
pub fn plain(n: u64) -> String {
    itoa::Buffer::new().format(n).to_string()
}
""",
        "tests/grouped.rs": """use numtext::{grouped, plain};

#[test]
fn small_numbers_have_no_separator() {
    assert_eq!(grouped(0), "0");
    assert_eq!(grouped(999), "999");
}

#[test]
fn thousands() {
    assert_eq!(grouped(1000), "1,000");
    assert_eq!(grouped(65536), "65,536");
}

#[test]
fn millions() {
    assert_eq!(grouped(1234567), "1,234,567");
}

#[test]
fn plain_has_none() {
    assert_eq!(plain(1234567), "1234567");
}
""",
    })
    env = {k: v for k, v in os.environ.items() if k not in ("CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR")}
    sh(root, "cargo", "generate-lockfile", "--offline", env=env)
    commit(root)
    sh(root, "cargo", "test", "--offline", "--no-run", "-q", env=env)
    sh(root, "cargo", "build", "--offline", "-q", env=env)
    with open(os.path.join(root, "src/lib.rs")) as f:
        text = f.read()
    fixed = text.replace("(digits.len() - i) % 4 == 0", "(digits.len() - i) % 3 == 0")
    wrong = text.replace("(digits.len() - i) % 4 == 0", "digits.len() > 4 && (digits.len() - i) % 3 == 0")
    return {
        "stack": "rust", "dir": root, "instruction": "grouped() must put a separator every three digits",
        "suite": "cargo test --offline", "check": "cargo test --offline",
        "fix": ["src/lib.rs", fixed], "wrong": ["src/lib.rs", wrong], "tests": "tests/grouped.rs",
    }


def cmake(dest):
    root = os.path.join(dest, "cmake")
    parts = {f"src/part{i}.c": f"int part{i}(int n) {{ return n + {i}; }}\n" for i in range(8)}
    decls = "".join(f"int part{i}(int n);\n" for i in range(8))
    write(root, {
        "CMakeLists.txt": """cmake_minimum_required(VERSION 3.10)
project(clamp C)
enable_testing()
file(GLOB PARTS src/part*.c)
add_library(clamp STATIC src/clamp.c ${PARTS})
target_include_directories(clamp PUBLIC include)
add_executable(clamp_test tests/clamp_test.c)
target_link_libraries(clamp_test clamp)
add_test(NAME clamp COMMAND clamp_test)
add_executable(parts_test tests/parts_test.c)
target_link_libraries(parts_test clamp)
add_test(NAME parts COMMAND parts_test)
""",
        ".gitignore": "build/\nbuild-loop/\n",
        "include/clamp.h": "int clamp(int v, int lo, int hi);\n" + decls,
        "src/clamp.c": "#include \"clamp.h\"\n\nint clamp(int v, int lo, int hi) {\n    if (v < lo) return lo;\n    if (v > hi) return lo;\n    return v;\n}\n",
        "tests/clamp_test.c": """#include <stdio.h>
#include "clamp.h"

static int failed = 0;
#define CHECK(e) do { if (!(e)) { printf("FAILED: %s\\n", #e); failed = 1; } } while (0)

int main(void) {
    CHECK(clamp(5, 0, 10) == 5);
    CHECK(clamp(-3, 0, 10) == 0);
    CHECK(clamp(42, 0, 10) == 10);
    CHECK(clamp(10, 0, 10) == 10);
    return failed;
}
""",
        "tests/parts_test.c": "#include \"clamp.h\"\nint main(void) { return part3(1) == 4 && part7(0) == 7 ? 0 : 1; }\n",
        **parts,
    })
    commit(root)
    sh(root, "cmake", "-S", ".", "-B", "build")
    sh(root, "cmake", "--build", "build")
    fixed = "#include \"clamp.h\"\n\nint clamp(int v, int lo, int hi) {\n    if (v < lo) return lo;\n    if (v > hi) return hi;\n    return v;\n}\n"
    wrong = fixed.replace("if (v > hi) return hi;", "if (v > hi) return hi - 1;")
    return {
        "stack": "cmake", "dir": root, "instruction": "clamp() must return hi above the range",
        "suite": "cmake --build build && ctest --test-dir build --output-on-failure",
        "check": "cmake -S . -B build-loop && cmake --build build-loop && ctest --test-dir build-loop --output-on-failure",
        "fix": ["src/clamp.c", fixed], "wrong": ["src/clamp.c", wrong], "tests": "tests/clamp_test.c",
    }


STACKS = {"python": python, "node": node, "rust": rust, "cmake": cmake}


def make(dest, only=None):
    """Make the projects in `dest` (removed first); a list of their entries."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    return [STACKS[s](dest) for s in (only or STACKS)]


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print(json.dumps(make(os.path.abspath(sys.argv[1]), sys.argv[2:] or None), indent=2))
