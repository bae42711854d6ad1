#!/usr/bin/env python3
"""Projects laid out and installed the way people do, each a git
repository with one bug and its own test suite. Four small ones made here,
one per stack:

- python: a src-layout package whose version comes from git (hatch-vcs),
  installed editable (`pip install -e .`) in `.venv`, tested by pytest;
- node: a TypeScript package tested by vitest 2 (from the npm registry);
- rust: a crate with a registry dependency (itoa), built once in the
  checkout as its developer would (`target/` present);
- cmake: a C library built with CMake into `build/` and tested by CTest;

and two real public ones as their registries publish them, with one bug
put in the developer's checkout:

- prettytable: its PyPI sdist (BSD-3-Clause), src layout, hatch-vcs, 342
  pytest tests, installed editable;
- textwrap: its crates.io package (MIT), three registry dependencies and
  its dev-dependencies, unit, integration and doc tests.

    scripts/real-projects.py DEST [STACK...]   make them (or those named) in
                                               DEST (removed first) and
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


PRETTYTABLE = "3.19.0"


def prettytable(dest):
    """prettytable (BSD-3-Clause, its LICENSE kept) as its PyPI sdist has it: src layout, a version from
    git by hatch-vcs (its generated `_version.py` ignored, as in its repository), 180-odd pytest tests,
    installed editable in `.venv` with its test dependencies. The developer's checkout has one bug:
    right-aligned cells are padded on the wrong side."""
    root = os.path.join(dest, "prettytable")
    sdist = os.path.join(dest, "sdist")
    os.makedirs(sdist, exist_ok=True)
    sh(dest, sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
       "--no-binary", ":all:", "-d", sdist, f"prettytable=={PRETTYTABLE}")
    sh(sdist, "tar", "xzf", f"prettytable-{PRETTYTABLE}.tar.gz")
    shutil.move(os.path.join(sdist, f"prettytable-{PRETTYTABLE}"), root)
    os.remove(os.path.join(root, "src/prettytable/_version.py"))
    write(root, {".gitignore": ".venv/\n__pycache__/\n*.egg-info/\nsrc/prettytable/_version.py\n"
                               ".pytest_cache/\n.coverage\n"})
    source = os.path.join(root, "src/prettytable/prettytable.py")
    with open(source) as f:
        fixed = f.read()
    right = 'elif align == "r":\n            return wcwidth.rjust(text, width)'
    if right not in fixed:
        raise SystemExit(f"real-projects: prettytable {PRETTYTABLE} no longer right-justifies where expected")
    with open(source, "w") as f:
        f.write(fixed.replace(right, 'elif align == "r":\n            return wcwidth.ljust(text, width)'))
    commit(root)
    sh(root, sys.executable, "-m", "venv", ".venv")
    pip = os.path.join(root, ".venv", "bin", "pip")
    sh(root, pip, "install", "-q", "--disable-pip-version-check", *PYTHON_DEPS, "pytest-lazy-fixtures==1.4.0",
       "wcwidth")
    sh(root, pip, "install", "-q", "--disable-pip-version-check", "--no-build-isolation", "-e", ".")
    wrong = fixed.replace(right, 'elif align == "r":\n            return wcwidth.center(text, width)')
    return {
        "stack": "python (prettytable)", "dir": root, "instruction": "right-aligned cells must be padded on the left",
        "suite": ".venv/bin/python -m pytest -q", "check": ".venv/bin/python -m pytest -q",
        "fix": ["src/prettytable/prettytable.py", fixed], "wrong": ["src/prettytable/prettytable.py", wrong],
        "tests": "tests/test_prettytable.py",
    }


TEXTWRAP = "0.16.1"


def textwrap(dest):
    """textwrap (MIT, its LICENSE kept) as crates.io has it, with its lockfile and dev-dependencies
    fetched through Cargo and its tests built once in the checkout (`target/` present, as its developer
    has it). Its suite runs unit tests, integration tests and some sixty doctests. The developer's
    checkout has one bug: `indent` drops the text's final newline."""
    root = os.path.join(dest, "textwrap")
    env = {k: v for k, v in os.environ.items() if k not in ("CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR")}
    probe = os.path.join(dest, "textwrap-fetch")
    write(probe, {"Cargo.toml": f'[package]\nname = "probe"\nversion = "0.0.0"\nedition = "2021"\n\n'
                                f'[dependencies]\ntextwrap = "={TEXTWRAP}"\n\n[workspace]\n',
                  "src/lib.rs": ""})
    sh(probe, "cargo", "fetch", "-q", env=env)
    home = env.get("CARGO_HOME") or os.path.join(os.path.expanduser("~"), ".cargo")
    found = [os.path.join(home, "registry", "src", d, f"textwrap-{TEXTWRAP}")
             for d in os.listdir(os.path.join(home, "registry", "src"))]
    src = next((d for d in found if os.path.isdir(d)), None)
    if src is None:
        raise SystemExit(f"real-projects: textwrap {TEXTWRAP} is not in Cargo's registry after a fetch")
    shutil.copytree(src, root)
    for junk in (".cargo_vcs_info.json", "Cargo.toml.orig", ".cargo-ok"):
        if os.path.exists(os.path.join(root, junk)):
            os.remove(os.path.join(root, junk))
    write(root, {".gitignore": "target/\n"})
    # A workspace of its own: made below another Cargo workspace (a clone of this repository's
    # `target/`), Cargo would take it for a member of that one.
    with open(os.path.join(root, "Cargo.toml"), "a") as f:
        f.write("\n[workspace]\n")
    source = os.path.join(root, "src/indentation.rs")
    with open(source) as f:
        fixed = f.read()
    right = "if s.ends_with('\\n') {\n        // split_terminator will have eaten the final '\\n'."
    if right not in fixed:
        raise SystemExit(f"real-projects: textwrap {TEXTWRAP}'s indent is not as expected")
    with open(source, "w") as f:
        f.write(fixed.replace(right, right.replace("if s.ends_with('\\n')", 'if s.ends_with("\\n\\n")')))
    commit(root)
    sh(root, "cargo", "fetch", "-q", env=env)
    sh(root, "cargo", "test", "--offline", "--no-run", "-q", env=env)
    wrong = fixed.replace(right, right.replace("if s.ends_with('\\n')", "if s.len() > 1 && s.ends_with('\\n')"))
    return {
        "stack": "rust (textwrap)", "dir": root, "instruction": "indent() must keep the text's final newline",
        "suite": "cargo test --offline", "check": "cargo test --offline",
        "fix": ["src/indentation.rs", fixed], "wrong": ["src/indentation.rs", wrong], "tests": "tests/indent.rs",
    }


STACKS = {"python": python, "node": node, "rust": rust, "cmake": cmake, "prettytable": prettytable,
          "textwrap": textwrap}


def make(dest, only=None):
    """Make the projects in `dest` (removed first); a list of their entries."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    return [STACKS[s](dest) for s in (only or STACKS)]


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    print(json.dumps(make(os.path.abspath(sys.argv[1]), sys.argv[2:] or None), indent=2))
