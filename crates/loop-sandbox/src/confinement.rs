//! What a command may touch, decided once in the runtime and enforced in
//! the child: resource limits, the filesystem view, the network.

use std::collections::{BTreeSet, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How strictly to demand isolation layers the machine may not offer
/// (written `required` or `preferred`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationLevel {
    /// Fail closed, naming the missing feature, when any layer is unavailable.
    Required,
    /// Run with what is available and say so in the result.
    #[default]
    Preferred,
}

/// A name that is no isolation level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("isolation must be `required` or `preferred`, not `{0}`")]
pub struct UnknownIsolation(pub String);

impl std::str::FromStr for IsolationLevel {
    type Err = UnknownIsolation;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "required" => Ok(IsolationLevel::Required),
            "preferred" => Ok(IsolationLevel::Preferred),
            other => Err(UnknownIsolation(other.to_string())),
        }
    }
}

/// The default of [`Limits::disk_mb`] (a contract's `limits.disk_mb`).
pub const DEFAULT_DISK_MB: u64 = loop_protocol::contract::DEFAULT_DISK_MB;

/// Resource limits. Every field is enforced with an rlimit; memory and
/// processes also with a cgroup where the machine offers a writable one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// CPU seconds (RLIMIT_CPU); `None` derives it from the wall timeout.
    pub cpu_secs: Option<u64>,
    /// Memory in MiB: the cgroup limit, and the basis of RLIMIT_AS.
    pub mem_mb: u64,
    /// Open files (RLIMIT_NOFILE).
    pub nofile: u64,
    /// Processes (cgroup `pids.max`, and RLIMIT_NPROC counted per user namespace).
    pub nproc: u64,
    /// Largest file a command may write, in MiB (RLIMIT_FSIZE).
    pub fsize_mb: u64,
    /// What one command may write, in MiB: its private `/tmp` and its
    /// layer over the workspace live on one tmpfs of this size (`fallocate`
    /// counted), so no command can fill the host's disk.
    pub disk_mb: u64,
    /// This command's disk is no larger than this, in MiB, where it is
    /// less than `disk_mb` (what is left of a task's writes in all): the
    /// budget of kept shares stays `disk_mb`'s.
    pub disk_cap_mb: Option<u64>,
}

impl Limits {
    /// The size of this command's disk, in MiB.
    pub fn disk_size_mb(&self) -> u64 {
        self.disk_cap_mb
            .map_or(self.disk_mb, |cap| cap.clamp(1, self.disk_mb.max(1)))
    }

    /// What sized the command's disk, for a person: `disk_mb`'s limit, or
    /// what was left of the task's writes.
    pub fn disk_named(&self) -> String {
        let size = self.disk_size_mb();
        if size < self.disk_mb {
            format!("{size} MiB (what was left of the task's limits.write_mb)")
        } else {
            format!("{size} MiB (limits.disk_mb)")
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cpu_secs: None,
            mem_mb: 4096,
            nofile: 1024,
            nproc: 512,
            fsize_mb: 1024,
            disk_mb: DEFAULT_DISK_MB,
            disk_cap_mb: None,
        }
    }
}

/// Names under a home directory that hold credentials: never readable,
/// even inside an allowed tree.
pub const CREDENTIAL_STORES: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".docker",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".local/share/keyrings",
    ".config/gh",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".pypirc",
    ".npmrc",
    ".azure",
    ".password-store",
    ".local/state/loop-engine",
];

/// Where the runtime keeps task workspaces, beside its state directory.
const WORKSPACES: &str = "loop-engine-workspaces";

/// Files under /etc that hold secrets.
pub const ETC_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/security/opasswd",
];

/// System trees commands may read and execute.
const SYSTEM_TREES: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
    "/sys", "/dev",
];

/// The host's read-only view, resolved once per process: system trees,
/// the trees behind the `PATH` (toolchains under home directories
/// included), minus credential stores.
#[derive(Debug, Clone, Default)]
pub struct HostView {
    /// Trees to allow read + execute, already expanded around denied paths;
    /// sorted (by components, so a tree's entries are together, see
    /// [`HostView::read_exec_under`]).
    pub read_exec: Vec<PathBuf>,
    /// Those of `read_exec` that are not directories (known from the walk,
    /// so building a ruleset needs no `stat` per entry).
    pub files: HashSet<PathBuf>,
    /// Paths that must never be readable.
    pub denied: Vec<PathBuf>,
    /// Toolchain variables derived from the PATH (e.g. `PYENV_ROOT`), so
    /// shims keep working with a private `HOME`.
    pub toolchain_env: Vec<(String, String)>,
    /// The allowed trees before expansion, outermost only (a tree inside
    /// another is covered by it): what a command's root is built from.
    pub trees: Vec<PathBuf>,
}

static HOST: OnceLock<HostView> = OnceLock::new();

/// The host view for this process's `PATH` and `HOME`, computed once.
pub fn host_view() -> &'static HostView {
    HOST.get_or_init(|| {
        let path = std::env::var("PATH").unwrap_or_default();
        let home = std::env::var("HOME").ok().map(PathBuf::from);
        HostView::resolve(&path, home.as_deref(), &[])
    })
}

impl HostView {
    /// Resolve the view for a `PATH` string and home directory, plus
    /// `extra` read-only trees (a Loopfile's `sandbox.read_only`).
    pub fn resolve(path_var: &str, home: Option<&Path>, extra: &[PathBuf]) -> HostView {
        let mut homes: BTreeSet<PathBuf> = BTreeSet::new();
        if let Some(h) = home {
            homes.insert(canon(h));
        }
        homes.insert(PathBuf::from("/root"));
        if let Ok(items) = std::fs::read_dir("/home") {
            for item in items.flatten() {
                homes.insert(item.path());
            }
        }
        let mut trees: BTreeSet<PathBuf> = SYSTEM_TREES.iter().map(PathBuf::from).collect();
        let mut env = Vec::new();
        // A directory named twice (a `PATH` often is, by profile scripts
        // run twice) is read once: what it adds is the same.
        let mut seen: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
        for entry in path_var.split(':').filter(|e| e.starts_with('/')) {
            let dir = canon(Path::new(entry));
            if !seen.insert(dir.clone()) || !dir.is_dir() {
                continue;
            }
            trees.extend(toolchain_trees(&dir, &homes));
            // Links in the system's own bin directories are the packages'
            // business and stay in the system trees; elsewhere (home
            // toolchains, /usr/local) interpreters behind symlinked shims
            // may live in their own trees.
            let system_bin = ["/bin", "/sbin", "/usr/bin", "/usr/sbin"]
                .iter()
                .any(|b| dir == Path::new(b));
            if system_bin {
                continue;
            }
            // Only links that may leave the allowed trees are resolved.
            for t in link_trees(&dir, &homes) {
                trees.insert(t);
            }
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let parent = dir.parent().map(Path::to_path_buf);
            match (name, parent) {
                ("shims", Some(root)) if root.ends_with(".pyenv") => {
                    env.push(("PYENV_ROOT".to_string(), root.display().to_string()));
                }
                ("bin", Some(root)) if root.ends_with(".cargo") => {
                    env.push(("CARGO_HOME".to_string(), root.display().to_string()));
                    if let Some(h) = root.parent() {
                        let rustup = h.join(".rustup");
                        if rustup.is_dir() {
                            trees.insert(rustup.clone());
                            env.push(("RUSTUP_HOME".to_string(), rustup.display().to_string()));
                        }
                    }
                }
                _ => {}
            }
        }
        for var in ["PYENV_ROOT", "RUSTUP_HOME", "CARGO_HOME"] {
            if let Ok(v) = std::env::var(var)
                && Path::new(&v).is_dir()
                && !env.iter().any(|(k, _)| k == var)
            {
                trees.insert(canon(Path::new(&v)));
                env.push((var.to_string(), v));
            }
        }
        for e in extra {
            trees.insert(canon(e));
        }
        let denied = denied_paths(&homes);
        let mut read_exec = Vec::new();
        let mut files = HashSet::new();
        for t in &trees {
            match std::fs::metadata(t) {
                Ok(m) if m.is_dir() => expand_allow(t, &denied, &mut read_exec, &mut files),
                Ok(_) => {
                    files.insert(t.clone());
                    read_exec.push(t.clone());
                }
                Err(_) => {}
            }
        }
        crate::pathcmp::sort_unique(&mut read_exec);
        // BTreeSet order puts a parent before its children.
        let mut outer: Vec<PathBuf> = Vec::new();
        for t in &trees {
            if !outer.iter().any(|o| crate::pathcmp::under(t, o)) {
                outer.push(t.clone());
            }
        }
        HostView {
            read_exec,
            files,
            denied,
            toolchain_env: env,
            trees: outer,
        }
    }

    /// The entries of `read_exec` at or under `t`, found by binary search
    /// (each command's root asks once per tree; a scan of the whole list
    /// per tree was a measurable part of every command's start).
    pub fn read_exec_under<'s>(&'s self, t: &'s Path) -> impl Iterator<Item = &'s PathBuf> + 's {
        let start = self
            .read_exec
            .partition_point(|e| crate::pathcmp::order(e, t).is_lt());
        self.read_exec[start..]
            .iter()
            .take_while(move |e| crate::pathcmp::under(e, t))
    }
}

/// The trees that symlinks in `dir` lead into, where they leave the
/// system trees and `dir` itself (interpreters behind symlinked shims).
/// Each target is judged lexically first: most links stay inside the
/// system trees and need no resolving.
fn link_trees(dir: &Path, homes: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(items) = std::fs::read_dir(dir) else {
        return out;
    };
    for item in items.flatten() {
        if !item.file_type().map(|t| t.is_symlink()).unwrap_or(false) {
            continue;
        }
        let Ok(link) = std::fs::read_link(item.path()) else {
            continue;
        };
        let lexical = normalize(&dir.join(&link));
        let stays = SYSTEM_TREES.iter().any(|t| lexical.starts_with(t)) || lexical.starts_with(dir);
        if stays {
            continue;
        }
        if let Ok(target) = item.path().canonicalize()
            && let Some(parent) = target.parent()
        {
            out.extend(toolchain_trees(parent, homes));
        }
    }
    out
}

/// What no command may read: the system's secrets, the runtime's own
/// state (signing keys) wherever it is configured, and every home's
/// credential stores.
fn denied_paths(homes: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let mut denied: Vec<PathBuf> = ETC_SECRETS.iter().map(PathBuf::from).collect();
    for var in [
        "LOOP_STATE_DIR",
        "LOOP_SIGNING_KEY_FILE",
        "LOOP_WORKSPACES_DIR",
    ] {
        if let Some(p) = std::env::var_os(var) {
            denied.push(canon(Path::new(&p)));
        }
    }
    // Every task's workspace, of every project: beside the state directory
    // (a command sees its own workspace only, mounted where it is).
    if let Some(p) = std::env::var_os("LOOP_STATE_DIR") {
        let mut w = canon(Path::new(&p)).into_os_string();
        w.push("-workspaces");
        denied.push(PathBuf::from(w));
    }
    if let Some(p) = std::env::var_os("XDG_STATE_HOME") {
        denied.push(canon(&Path::new(&p).join("loop-engine")));
        denied.push(canon(&Path::new(&p).join(WORKSPACES)));
    }
    for h in homes {
        for c in CREDENTIAL_STORES {
            denied.push(h.join(c));
        }
        denied.push(h.join(".local/state").join(WORKSPACES));
    }
    denied
}

/// `a/b/../c` → `a/c`, without touching the filesystem.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn canon(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// The trees to allow for a directory on the PATH: `X/bin` or `X/shims`
/// allows `X`, and under a home directory the top-level entry
/// (`~/.pyenv`, `~/.cargo`) — never a home directory itself; under
/// `~/.local` and `~/.config`, which hold keyrings, histories, tokens and
/// every program's settings, only the toolchain's own directory (`X` of
/// `X/bin`, as `~/.local/share/pipx/venvs/black` or
/// `~/.local/share/mise`; `~/.local/bin` with `~/.local/lib`, which its
/// programs import from), never the whole of either.
fn toolchain_trees(dir: &Path, homes: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    let own = |dir: &Path| {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match (name, dir.parent()) {
            ("bin" | "sbin" | "shims", Some(parent)) if parent != Path::new("/") => {
                parent.to_path_buf()
            }
            _ => dir.to_path_buf(),
        }
    };
    for h in homes {
        if let Ok(rest) = dir.strip_prefix(h) {
            let parts: Vec<_> = rest.components().collect();
            let Some(first) = parts.first() else {
                return Vec::new();
            };
            let shared = first.as_os_str() == ".local" || first.as_os_str() == ".config";
            if !shared {
                return vec![h.join(first)];
            }
            if first.as_os_str() == ".local" && rest == Path::new(".local/bin") {
                return vec![h.join(".local/bin"), h.join(".local/lib")];
            }
            // Two levels below the home at least: never `~/.local/share`
            // or `~/.config` whole.
            let tree = own(dir);
            return match tree.strip_prefix(h) {
                Ok(r) if r.components().count() >= 3 => vec![tree],
                _ if parts.len() >= 3 => vec![dir.to_path_buf()],
                _ => Vec::new(),
            };
        }
    }
    vec![own(dir)]
}

/// Allow `tree` minus every denied path beneath it: where a denied path
/// lies inside, allow the siblings along the way instead of the tree.
pub fn expand_allow(
    tree: &Path,
    denied: &[PathBuf],
    out: &mut Vec<PathBuf>,
    files: &mut HashSet<PathBuf>,
) {
    // Only the denied paths under this tree matter below it; comparing
    // bytes keeps the walk of a large /etc cheap.
    let inner: Vec<&[u8]> = denied
        .iter()
        .filter(|d| crate::pathcmp::under(d, tree))
        .map(|d| d.as_os_str().as_bytes())
        .collect();
    expand_inner(tree, &inner, out, files);
}

fn expand_inner(
    tree: &Path,
    denied: &[&[u8]],
    out: &mut Vec<PathBuf>,
    files: &mut HashSet<PathBuf>,
) {
    let t = tree.as_os_str().as_bytes();
    if denied.contains(&t) {
        return;
    }
    let under = |d: &&[u8]| d.len() > t.len() && d.starts_with(t) && d[t.len()] == b'/';
    if !denied.iter().any(under) {
        out.push(tree.to_path_buf());
        return;
    }
    let below: Vec<&[u8]> = denied.iter().copied().filter(under).collect();
    let Ok(items) = std::fs::read_dir(tree) else {
        return;
    };
    for item in items.flatten() {
        let p = item.path();
        let is_dir = item.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if is_dir {
            expand_inner(&p, &below, out, files);
        } else if !below.contains(&p.as_os_str().as_bytes()) {
            files.insert(p.clone());
            out.push(p);
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn the_entries_under_a_tree_are_those_a_scan_finds() {
        let mut read_exec: Vec<PathBuf> = [
            "/a",
            "/usr",
            "/usr-x/bin",
            "/usr.d",
            "/usr/bin",
            "/usr/lib/x",
            "/usr/lib",
            "/usrx",
            "/v",
            "/usr/bin/python3",
            "/",
            "/opt/t/u",
            "/opt/t-1",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        read_exec.sort();
        let mut v = HostView::resolve("", None, &[]);
        v.read_exec = read_exec;
        for t in [
            "/usr", "/usr/lib", "/usr/bin", "/opt/t", "/opt", "/", "/none", "/usr-x", "/a",
        ] {
            let t = Path::new(t);
            let scan: Vec<&PathBuf> = v.read_exec.iter().filter(|e| e.starts_with(t)).collect();
            let found: Vec<&PathBuf> = v.read_exec_under(t).collect();
            assert_eq!(found, scan, "{}", t.display());
        }
        // And on this machine's own view, for each of its trees.
        let host = HostView::resolve(&std::env::var("PATH").unwrap_or_default(), None, &[]);
        let mut seen = 0;
        for t in &host.trees {
            let scan: Vec<&PathBuf> = host.read_exec.iter().filter(|e| e.starts_with(t)).collect();
            seen += scan.len();
            assert_eq!(
                host.read_exec_under(t).collect::<Vec<_>>(),
                scan,
                "{}",
                t.display()
            );
        }
        assert!(seen > 0, "{:?}", host.trees);
    }

    #[test]
    fn expansion_leaves_out_denied_paths_and_keeps_their_siblings() {
        let root = std::env::temp_dir().join(format!("loop-expand-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("home/.ssh")).unwrap();
        std::fs::create_dir_all(root.join("home/.pyenv/versions")).unwrap();
        std::fs::write(root.join("home/.netrc"), "x").unwrap();
        std::fs::write(root.join("home/notes"), "x").unwrap();
        let denied = vec![root.join("home/.ssh"), root.join("home/.netrc")];
        let mut out = Vec::new();
        let mut files = HashSet::new();
        expand_allow(&root, &denied, &mut out, &mut files);
        assert_eq!(files, HashSet::from([root.join("home/notes")]));
        out.sort();
        assert_eq!(out, vec![root.join("home/.pyenv"), root.join("home/notes")]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn path_trees_under_a_home_allow_the_toolchain_not_the_home() {
        let homes = BTreeSet::from([PathBuf::from("/root")]);
        let trees = |d: &str| toolchain_trees(Path::new(d), &homes);
        let one = |d: &str| vec![PathBuf::from(d)];
        assert_eq!(trees("/root/.pyenv/shims"), one("/root/.pyenv"));
        assert_eq!(trees("/root/.cargo/bin"), one("/root/.cargo"));
        // A home on the PATH allows nothing of it; of `~/.local` and
        // `~/.config`, the toolchain's own directory (its venv, its
        // installs), never all of either (keyrings, histories, tokens).
        assert!(trees("/root").is_empty());
        assert!(trees("/root/.local").is_empty());
        assert!(trees("/root/.config").is_empty());
        assert_eq!(
            trees("/root/.local/bin"),
            [
                PathBuf::from("/root/.local/bin"),
                PathBuf::from("/root/.local/lib")
            ]
        );
        assert_eq!(
            trees("/root/.local/share/pnpm"),
            one("/root/.local/share/pnpm")
        );
        // pipx's and uv's venvs, mise's shims: the venv, mise's home.
        assert_eq!(
            trees("/root/.local/share/pipx/venvs/black/bin"),
            one("/root/.local/share/pipx/venvs/black")
        );
        assert_eq!(
            trees("/root/.local/share/mise/shims"),
            one("/root/.local/share/mise")
        );
        assert_eq!(
            trees("/root/.config/composer/vendor/bin"),
            one("/root/.config/composer/vendor")
        );
        // Never `~/.local/share` or `~/.config` whole.
        assert_eq!(
            trees("/root/.local/share/bin"),
            one("/root/.local/share/bin")
        );
        assert!(trees("/root/.config/bin").is_empty());
        assert_eq!(trees("/usr/local/bin"), one("/usr/local"));
        assert_eq!(trees("/bin"), one("/bin"));
    }

    /// A `PATH` naming a toolchain's directory twice (as spelled, and
    /// through a `.`) gives the view it gives naming it once: the same
    /// trees, rules and variables, each once.
    #[test]
    fn a_directory_named_twice_in_the_path_gives_the_view_named_once() {
        let home = std::env::temp_dir().join(format!("loop-path-twice-{}", std::process::id()));
        let bin = home.join(".cargo").join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink("/usr/bin/true", bin.join("tool")).unwrap();
        let once = HostView::resolve(&format!("{}:/usr/bin", bin.display()), Some(&home), &[]);
        let twice = HostView::resolve(
            &format!("{0}:{1}/.:/usr/bin:{0}", bin.display(), bin.display()),
            Some(&home),
            &[],
        );
        assert_eq!(twice.read_exec, once.read_exec);
        assert_eq!(twice.files, once.files);
        assert_eq!(twice.denied, once.denied);
        assert_eq!(twice.trees, once.trees);
        assert_eq!(twice.toolchain_env, once.toolchain_env);
        assert_eq!(
            once.toolchain_env
                .iter()
                .filter(|(k, _)| k == "CARGO_HOME")
                .count(),
            1,
            "{:?}",
            once.toolchain_env
        );
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn etc_secrets_and_credential_stores_are_not_in_the_view() {
        let v = HostView::resolve("/usr/bin:/bin", Some(Path::new("/root")), &[]);
        assert!(
            !v.read_exec.iter().any(|p| p == Path::new("/etc")),
            "/etc is expanded"
        );
        assert!(!v.read_exec.iter().any(|p| p.starts_with("/etc/shadow")));
        assert!(v.read_exec.iter().any(|p| p == Path::new("/etc/passwd")));
        assert!(
            !v.read_exec.iter().any(|p| p == Path::new("/root")),
            "never a whole home"
        );
        for c in CREDENTIAL_STORES {
            let store = Path::new("/root").join(c);
            assert!(
                !v.read_exec.iter().any(|p| store.starts_with(p)),
                "{c} reachable"
            );
        }
    }
}
