//! The gate against every indirect form a hostile review tried (each of
//! which once passed), more of the same families, and the look-alikes that
//! must still pass. The rules are the README's example.

use super::*;

fn policy() -> CodePolicy {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    CodePolicy {
        python: LanguageRules {
            banned_imports: s(&["subprocess", "ctypes", "importlib"]),
            banned_calls: s(&["eval", "exec", "getattr", "__import__", "os.system"]),
            banned_attributes: s(&[
                "__subclasses__",
                "__globals__",
                "__builtins__",
                "__mro__",
                "__dict__",
            ]),
        },
        javascript: LanguageRules {
            banned_imports: s(&["child_process", "fs"]),
            banned_calls: s(&["eval", "Function"]),
            banned_attributes: s(&["__proto__", "constructor"]),
        },
    }
}

fn py(text: &str) -> Result<(), GateRejection> {
    policy().check(Language::Python, "m.py", text)
}

fn js(text: &str) -> Result<(), GateRejection> {
    policy().check(Language::JavaScript, "m.js", text)
}

fn ts(text: &str) -> Result<(), GateRejection> {
    policy().check(Language::TypeScript, "m.ts", text)
}

/// `(source, the refusal's rule must contain this)`.
const PYTHON_REFUSED: &[(&str, &str)] = &[
    // The review's forms.
    (
        "from os import system as s\ns('id')\n",
        "banned call `os.system`",
    ),
    (
        "import os as o\no.system('id')\n",
        "banned call `os.system`",
    ),
    ("import os\n(os).system('id')\n", "banned call `os.system`"),
    (
        "import os\nos.\\\nsystem('id')\n",
        "banned call `os.system`",
    ),
    (
        "from os import *\nsystem('id')\n",
        "banned call `os.system`",
    ),
    ("e = eval\ne('1')\n", "banned call `eval`"),
    (
        "imp = __import__\nimp('subprocess')\n",
        "banned call `__import__`",
    ),
    (
        "import builtins\nvars(builtins)['eval']('1')\n",
        "banned call `eval`",
    ),
    (
        "from operator import attrgetter\nattrgetter('__subcl' 'asses__')(object)\n",
        "banned attribute `__subclasses__` named by a string",
    ),
    (
        "x = '\\x5f_subclasses__'\n",
        "banned attribute `__subclasses__` named by a string",
    ),
    ("ｅｖａｌ('1')\n", "banned call `eval`"),
    (
        "import ｓｕｂｐｒｏｃｅｓｓ\n",
        "banned import `subprocess`",
    ),
    (
        "object.__ｓubclasses__()\n",
        "banned attribute `__subclasses__`",
    ),
    // More of the same families.
    ("import subprocess as sp\n", "banned import `subprocess`"),
    (
        "from importlib import import_module\n",
        "banned import `importlib`",
    ),
    ("import ctypes.util\n", "banned import `ctypes`"),
    ("m = __builtins__.eval\n", "banned call `eval`"),
    ("import builtins as b\nb.exec('1')\n", "banned call `exec`"),
    ("import os\nf = os.system\n", "banned call `os.system`"),
    (
        "import os\nos.system.__call__('id')\n",
        "banned call `os.system`",
    ),
    (
        "import sys\nsys.modules['os'].system('id')\n",
        "banned call `os.system`",
    ),
    ("x = (y := eval)\n", "banned call `eval`"),
    ("a, b = 1, exec\n", "banned call `exec`"),
    ("a = b = eval\n", "banned call `eval`"),
    ("fs = [eval]\n", "banned call `eval`"),
    ("n = 'ev' + 'al'\n", "banned call `eval` named by a string"),
    (
        "n = f'__mro__'\n",
        "banned attribute `__mro__` named by a string",
    ),
    (
        "n = '\\u005f_globals__'\n",
        "banned attribute `__globals__` named by a string",
    ),
    (
        "n = r'subprocess'\n",
        "banned import `subprocess` named by a string",
    ),
    (
        "x = globals()['__builtins__']\n",
        "banned attribute `__builtins__` named by a string",
    ),
    (
        "import os\nk = 'sys' + 'tem'\nos.__dict__[k]\n",
        "banned call `os.system`",
    ),
    (
        "import builtins\nn = 'ev' 'al'\nf = vars(builtins)[n]\n",
        "banned call `eval`",
    ),
    (
        "import builtins\nk = input()\nvars(builtins)[k]('1')\n",
        "unresolvable: a computed member of `builtins`",
    ),
    (
        "k = input()\nglobals()[k]('1')\n",
        "unresolvable: a computed member of `builtins`",
    ),
    ("def f(o, k):\n    return getattr(o, k)\n", "`getattr`"),
    (
        "m = __import__(input())\n",
        "an import of a computed module",
    ),
    ("import importlib as il\n", "banned import `importlib`"),
    (
        "import os\ndef run():\n    o = os\n    return o.system\n",
        "banned call `os.system`",
    ),
    (
        "def later():\n    return s('id')\nfrom os import system as s\n",
        "banned call `os.system`",
    ),
    (
        "c = ().__class__.__mro__[1].__subclasses__()\n",
        "banned attribute `__mro__`",
    ),
    ("g = f.__globals__\n", "banned attribute `__globals__`"),
];

const PYTHON_ALLOWED: &[&str] = &[
    // A local variable named like a banned function.
    "system = 'linux'\nprint(system)\n",
    "import platform\nsystem = platform.system()\n",
    // A string that mentions eval.
    "msg = 'never eval user input'\n",
    // A method called eval on some object.
    "model = load()\nmodel.eval()\nmodel.train()\n",
    "class Net:\n    def eval(self):\n        return self\n",
    "import os\nprint(os.path.join('a', 'b'), os.getcwd())\n",
    "import json\nprint(json.dumps({'system': 1}))\n",
    "# import subprocess is not done here\nx = 1\n",
    "d = {'k': 1}\nkey = 'k'\nprint(d[key])\n",
    "import sys\nprint(sys.argv[1:], sys.argv[len(sys.argv) - 1])\n",
    "def f(x, *args, **kw):\n    return x\n",
    "osmosis = 1\nevaluate = lambda: 2\n",
    "for system in ['a', 'b']:\n    print(system)\n",
];

const JS_REFUSED: &[(&str, &str)] = &[
    // The review's forms.
    ("(0,eval)('1');\n", "banned call `eval`"),
    ("globalThis['eval']('1');\n", "banned call `eval`"),
    ("const e = eval;\n", "banned call `eval`"),
    ("\\u0065val('1');\n", "banned call `eval`"),
    (
        "const cp = require('node:child_process');\n",
        "banned import `child_process`",
    ),
    (
        "import { exec } from 'node:child_process';\n",
        "banned import `child_process`",
    ),
    (
        "const cp = module.require('child_process');\n",
        "banned import `child_process`",
    ),
    (
        "const cp = require(`child_${''}process`);\n",
        "banned import `child_process`",
    ),
    (
        "const m = 'child' + '_process';\n",
        "banned import `child_process` named by a string",
    ),
    (
        "const m = 'child\\u005fprocess';\n",
        "banned import `child_process` named by a string",
    ),
    (
        "Reflect.construct(Function, ['return 1']);\n",
        "banned call `Function`",
    ),
    // More of the same families.
    ("window.eval('1');\n", "banned call `eval`"),
    ("self['ev' + 'al']('1');\n", "banned call `eval`"),
    (
        "const f = new Function('return 1');\n",
        "banned call `Function`",
    ),
    (
        "const {readFileSync} = require('fs');\n",
        "banned import `fs`",
    ),
    ("import * as f from 'fs/promises';\n", "banned import `fs`"),
    (
        "const k = x(); globalThis[k]('1');\n",
        "unresolvable: a computed member of `global`",
    ),
    (
        "const k = x(); require(k);\n",
        "unresolvable: an import of a computed module",
    ),
    (
        "const o = {}; o.__proto__ = null;\n",
        "banned attribute `__proto__`",
    ),
    (
        "const c = x['constr' + 'uctor'];\n",
        "banned attribute `constructor` named by a string",
    ),
    ("const g = globalThis; g.eval('1');\n", "banned call `eval`"),
    ("const r = Reflect.get(globalThis, name);\n", "unresolvable"),
    ("const w = {eval};\n", "banned call `eval`"),
    ("await import('fs');\n", "banned import `fs`"),
    (
        "const k = ['child', 'process'].join('_'); (module).require(k);\n",
        "unresolvable: an import of a computed module",
    ),
    (
        "const k = x(); require.main.require(k);\n",
        "unresolvable: an import of a computed module",
    ),
    (
        "const k = x(); process.mainModule.require(k);\n",
        "unresolvable: an import of a computed module",
    ),
    (
        "const k = x(); Object.getOwnPropertyDescriptor(globalThis, k).value('1');\n",
        "unresolvable",
    ),
    (
        "Object.getOwnPropertyDescriptor(globalThis, 'eval').value('1');\n",
        "banned call `eval`",
    ),
    (
        "for (const f of Object.values(globalThis)) f('1');\n",
        "unresolvable: every property",
    ),
];

const JS_ALLOWED: &[&str] = &[
    "const path = require('path');\nconsole.log(path.sep);\n",
    "model.eval();\nconst s = 'eval is evil';\n",
    "const o = {eval: 1, system: 2};\nconsole.log(o.eval);\n",
    "const a = [1, 2];\nfor (let i = 0; i < a.length; i++) console.log(a[i]);\n",
    "// require('fs')\nconst x = 1;\n",
    "import React from 'react';\nexport default function App() { return null; }\n",
];

#[test]
fn every_indirect_form_is_refused_and_the_look_alikes_pass() {
    let mut refused = 0;
    for (src, want) in PYTHON_REFUSED {
        let e = py(src).expect_err(src);
        assert!(
            e.rule.contains(want),
            "{src:?}: got {}, wanted {want}",
            e.rule
        );
        refused += 1;
    }
    for (src, want) in JS_REFUSED {
        let e = js(src).expect_err(src);
        assert!(
            e.rule.contains(want),
            "{src:?}: got {}, wanted {want}",
            e.rule
        );
        refused += 1;
    }
    let e = ts("import cp = require('child_process');\n").unwrap_err();
    assert!(
        e.rule.contains("banned import `child_process`"),
        "{}",
        e.rule
    );
    refused += 1;
    assert!(refused >= 25 + 20, "{refused} forms");
    for src in PYTHON_ALLOWED {
        assert!(py(src).is_ok(), "{src:?}: {:?}", py(src));
    }
    for src in JS_ALLOWED {
        assert!(js(src).is_ok(), "{src:?}: {:?}", js(src));
    }
}

#[test]
fn refusals_name_the_place() {
    let e = py("import json\n\nx = 1; e = eval\n").unwrap_err();
    assert_eq!((e.line, e.column), (3, 12), "{e}");
    assert_eq!(e.file, "m.py");
    let e = py("import json, os.path as p\nimport subprocess\n").unwrap_err();
    assert_eq!(e.rule, "gate: code policy (banned import `subprocess`)");
    assert_eq!((e.line, e.column), (2, 8));
    let e = py("x = importlib.import_module('ctypes')\n").unwrap_err();
    assert!(e.rule.contains("banned import `ctypes`"), "{}", e.rule);
    let e = js("const cp = require('child_process');\n").unwrap_err();
    assert!(
        e.rule.contains("banned import `child_process`"),
        "{}",
        e.rule
    );
    let e = py("import os\no = os\no.system('x')\n").unwrap_err();
    assert!(e.rule.contains("reached as `o.system`"), "{}", e.rule);
}

#[test]
fn without_rules_for_a_language_nothing_is_judged() {
    let p = CodePolicy::default();
    assert!(p.check(Language::Python, "m.py", "eval('1')\n").is_ok());
    assert!(p.check(Language::JavaScript, "m.js", "eval('1')\n").is_ok());
}

#[test]
fn a_file_built_to_make_the_gate_slow_is_refused_quickly() {
    // Two names bound to each other a thousand times each, referenced
    // thousands of times: bounded work, then a refusal.
    let mut src = String::new();
    for _ in 0..1000 {
        src.push_str("x = y\ny = x\n");
    }
    for _ in 0..2000 {
        src.push_str("print(x)\n");
    }
    let started = std::time::Instant::now();
    let r = py(&src);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    if let Err(e) = r {
        assert!(e.rule.contains("unresolvable"), "{}", e.rule);
    }
}
