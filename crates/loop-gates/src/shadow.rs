//! The shadow gate: no new workspace module may take the name of the
//! checked language's standard library.
//!
//! Checks run the contract's commands in the delivered workspace, and
//! Python searches the directory of the script (or, for `-m`, the current
//! one, and any directory a test runner inserts) before its own library:
//! a new `json.py` or `unittest/__init__.py` there replaces the real module
//! for the tests. Creating such a module is refused, naming the file and
//! the module. Node never loads a built-in module from disk, except
//! through a test runner's mocks (`__mocks__/fs.js`) or a package named
//! like one (`node_modules/fs`): those are refused too.
//!
//! The names are facts of the languages, recorded here: Python's
//! `sys.stdlib_module_names` (3.11) and Node's `builtinModules` (20).

use crate::GateRejection;

/// Python's standard-library top-level modules.
pub const PYTHON_STDLIB: &[&str] = &[
    "__future__",
    "_abc",
    "_aix_support",
    "_ast",
    "_asyncio",
    "_bisect",
    "_blake2",
    "_bootsubprocess",
    "_bz2",
    "_codecs",
    "_codecs_cn",
    "_codecs_hk",
    "_codecs_iso2022",
    "_codecs_jp",
    "_codecs_kr",
    "_codecs_tw",
    "_collections",
    "_collections_abc",
    "_compat_pickle",
    "_compression",
    "_contextvars",
    "_crypt",
    "_csv",
    "_ctypes",
    "_curses",
    "_curses_panel",
    "_datetime",
    "_dbm",
    "_decimal",
    "_elementtree",
    "_frozen_importlib",
    "_frozen_importlib_external",
    "_functools",
    "_gdbm",
    "_hashlib",
    "_heapq",
    "_imp",
    "_io",
    "_json",
    "_locale",
    "_lsprof",
    "_lzma",
    "_markupbase",
    "_md5",
    "_msi",
    "_multibytecodec",
    "_multiprocessing",
    "_opcode",
    "_operator",
    "_osx_support",
    "_overlapped",
    "_pickle",
    "_posixshmem",
    "_posixsubprocess",
    "_py_abc",
    "_pydecimal",
    "_pyio",
    "_queue",
    "_random",
    "_scproxy",
    "_sha1",
    "_sha256",
    "_sha3",
    "_sha512",
    "_signal",
    "_sitebuiltins",
    "_socket",
    "_sqlite3",
    "_sre",
    "_ssl",
    "_stat",
    "_statistics",
    "_string",
    "_strptime",
    "_struct",
    "_symtable",
    "_thread",
    "_threading_local",
    "_tkinter",
    "_tokenize",
    "_tracemalloc",
    "_typing",
    "_uuid",
    "_warnings",
    "_weakref",
    "_weakrefset",
    "_winapi",
    "_zoneinfo",
    "abc",
    "aifc",
    "antigravity",
    "argparse",
    "array",
    "ast",
    "asynchat",
    "asyncio",
    "asyncore",
    "atexit",
    "audioop",
    "base64",
    "bdb",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "cProfile",
    "calendar",
    "cgi",
    "cgitb",
    "chunk",
    "cmath",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "copyreg",
    "crypt",
    "csv",
    "ctypes",
    "curses",
    "dataclasses",
    "datetime",
    "dbm",
    "decimal",
    "difflib",
    "dis",
    "distutils",
    "doctest",
    "email",
    "encodings",
    "ensurepip",
    "enum",
    "errno",
    "faulthandler",
    "fcntl",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gc",
    "genericpath",
    "getopt",
    "getpass",
    "gettext",
    "glob",
    "graphlib",
    "grp",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "idlelib",
    "imaplib",
    "imghdr",
    "imp",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "lib2to3",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mailcap",
    "marshal",
    "math",
    "mimetypes",
    "mmap",
    "modulefinder",
    "msilib",
    "msvcrt",
    "multiprocessing",
    "netrc",
    "nis",
    "nntplib",
    "nt",
    "ntpath",
    "nturl2path",
    "numbers",
    "opcode",
    "operator",
    "optparse",
    "os",
    "ossaudiodev",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pipes",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "posix",
    "posixpath",
    "pprint",
    "profile",
    "pstats",
    "pty",
    "pwd",
    "py_compile",
    "pyclbr",
    "pydoc",
    "pydoc_data",
    "pyexpat",
    "queue",
    "quopri",
    "random",
    "re",
    "readline",
    "reprlib",
    "resource",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "select",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "site",
    "smtpd",
    "smtplib",
    "sndhdr",
    "socket",
    "socketserver",
    "spwd",
    "sqlite3",
    "sre_compile",
    "sre_constants",
    "sre_parse",
    "ssl",
    "stat",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "sunau",
    "symtable",
    "sys",
    "sysconfig",
    "syslog",
    "tabnanny",
    "tarfile",
    "telnetlib",
    "tempfile",
    "termios",
    "textwrap",
    "this",
    "threading",
    "time",
    "timeit",
    "tkinter",
    "token",
    "tokenize",
    "tomllib",
    "trace",
    "traceback",
    "tracemalloc",
    "tty",
    "turtle",
    "turtledemo",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "uu",
    "uuid",
    "venv",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "winreg",
    "winsound",
    "wsgiref",
    "xdrlib",
    "xml",
    "xmlrpc",
    "zipapp",
    "zipfile",
    "zipimport",
    "zlib",
    "zoneinfo",
];

/// Node's built-in modules (without the `node:` prefix).
pub const NODE_BUILTINS: &[&str] = &[
    "assert",
    "assert/strict",
    "async_hooks",
    "buffer",
    "child_process",
    "cluster",
    "console",
    "constants",
    "crypto",
    "dgram",
    "diagnostics_channel",
    "dns",
    "dns/promises",
    "domain",
    "events",
    "fs",
    "fs/promises",
    "http",
    "http2",
    "https",
    "inspector",
    "inspector/promises",
    "module",
    "net",
    "os",
    "path",
    "path/posix",
    "path/win32",
    "perf_hooks",
    "process",
    "punycode",
    "querystring",
    "readline",
    "readline/promises",
    "repl",
    "stream",
    "stream/consumers",
    "stream/promises",
    "stream/web",
    "string_decoder",
    "sys",
    "timers",
    "timers/promises",
    "tls",
    "trace_events",
    "tty",
    "url",
    "util",
    "util/types",
    "v8",
    "vm",
    "wasi",
    "worker_threads",
    "zlib",
];

const PY_SUFFIXES: &[&str] = &[".py", ".pyc"];
const JS_SUFFIXES: &[&str] = &[
    ".js", ".cjs", ".mjs", ".jsx", ".ts", ".cts", ".mts", ".tsx", ".json", ".node",
];

/// The module `rel` (a workspace-relative path about to be created) would
/// shadow, as `(language, module)`. `is_package(dir)` says whether a
/// directory of the workspace holds an `__init__.py` (a module inside a
/// package is a submodule and shadows nothing).
pub fn shadowed(rel: &str, is_package: &dyn Fn(&str) -> bool) -> Option<(&'static str, String)> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    let (name, dirs) = parts.split_last()?;
    let parent = dirs.join("/");
    // Python: `D/json.py`, `D/json.pyc`, `D/json.cpython-311-x86_64-linux-gnu.so`,
    // or `D/json/__init__.py`, where D is not itself a package.
    let init = PY_SUFFIXES.iter().any(|s| *name == format!("__init__{s}"));
    let module = if init {
        dirs.split_last()
            .map(|(pkg, above)| (pkg.to_string(), above.join("/")))
    } else {
        PY_SUFFIXES
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .or_else(|| {
                name.strip_suffix(".so")
                    .map(|n| n.split('.').next().unwrap_or(n))
            })
            .map(|m| (m.to_string(), parent.clone()))
    };
    // `src/` and `lib/` are where test runners are told to look for
    // top-level modules (`pythonpath = ["src"]`): their direct children are
    // judged as top-level even when an `__init__.py` sits beside them.
    let search_root = matches!(dir_of(&module), Some("src" | "lib"));
    if let Some((m, dir)) = module
        && PYTHON_STDLIB.contains(&m.as_str())
        && (search_root || !is_package(&dir))
    {
        return Some(("python", m));
    }
    // Node: `node_modules/fs(.js|/…)` at any depth, `__mocks__/fs.js`.
    for (i, part) in parts.iter().enumerate() {
        if *part != "node_modules" && *part != "__mocks__" {
            continue;
        }
        let Some(next) = parts.get(i + 1) else {
            continue;
        };
        let base = JS_SUFFIXES
            .iter()
            .find_map(|s| next.strip_suffix(s))
            .unwrap_or(next);
        let dir_form = *part == "node_modules" && parts.len() > i + 2;
        if NODE_BUILTINS.contains(&base) && (dir_form || base != *next) {
            return Some(("node", base.to_string()));
        }
    }
    None
}

fn dir_of(module: &Option<(String, String)>) -> Option<&str> {
    module.as_ref().map(|(_, d)| d.as_str())
}

/// [`shadowed`] as a gate refusal.
pub fn check(rel: &str, is_package: &dyn Fn(&str) -> bool) -> Result<(), GateRejection> {
    match shadowed(rel, is_package) {
        None => Ok(()),
        Some((lang, module)) => Err(GateRejection {
            rule: format!("gate: stdlib shadow ({lang} {module})"),
            file: rel.to_string(),
            line: 1,
            column: 1,
            message: format!(
                "{rel} would shadow the {lang} standard module `{module}` for the checks; give the module another name"
            ),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn new_modules_named_like_the_standard_library_are_refused() {
        let none = |_: &str| false;
        let pkg = |d: &str| d == "mypkg" || d == "src";
        for (rel, want) in [
            ("json.py", Some(("python", "json"))),
            ("tests/unittest.py", Some(("python", "unittest"))),
            ("src/subprocess/__init__.py", Some(("python", "subprocess"))),
            ("json.pyc", Some(("python", "json"))),
            ("os.cpython-311-x86_64-linux-gnu.so", Some(("python", "os"))),
            ("mypkg/json.py", None),
            ("src/fractions.py", Some(("python", "fractions"))),
            ("jsonx.py", None),
            ("json/data.txt", None),
            ("calc.py", None),
            ("node_modules/fs/index.js", Some(("node", "fs"))),
            (
                "node_modules/child_process.js",
                Some(("node", "child_process")),
            ),
            ("src/__mocks__/fs.js", Some(("node", "fs"))),
            ("node_modules/left-pad/index.js", None),
            ("__mocks__/lodash.js", None),
            ("fs.js", None),
        ] {
            let got = shadowed(rel, &|d| none(d) || pkg(d));
            assert_eq!(got.as_ref().map(|(l, m)| (*l, m.as_str())), want, "{rel}");
        }
        let e = check("json.py", &none).unwrap_err();
        assert_eq!(e.rule, "gate: stdlib shadow (python json)");
        assert!(e.message.contains("json.py") && e.message.contains("`json`"));
    }
}
