//! The command's filesystem root, built from what it may use.
//!
//! Landlock does not govern `connect()` to a pathname Unix socket (before
//! its ABI 9), so a sandbox that shows the host's whole root and denies
//! paths with Landlock still lets a command talk to every host service
//! whose socket it can name: tmux and screen servers, ssh-agent, D-Bus,
//! Docker. So a command never sees the host's root. Its root is a fresh
//! tmpfs holding only:
//!
//! - the allowed host trees (system and toolchain trees), each through a
//!   read-only **overlay**: an overlay shows a socket file but a `connect()`
//!   through it finds no listener (the kernel looks sockets up by the
//!   overlay's inode, not the real one), so even a socket inside an
//!   allowed tree is unreachable;
//! - denied paths inside those trees (`/etc/shadow`, credential stores)
//!   covered by an unreadable mask;
//! - a fresh `/proc`, a fresh read-only `/sys` (its own network namespace's), a `/dev` with only the harmless
//!   devices (no `/dev/tty`: a command has no terminal, unless it asked
//!   for one the runtime owns, see `pty.rs`), a private
//!   `/dev/shm` and `/run`;
//! - a size-capped tmpfs as `/tmp` (with `HOME` inside it): what a command
//!   writes there is bounded and gone when it ends;
//! - the workspace at its own path, read-write, `nosuid` and `nodev`.
//!
//! Host `/tmp`, `/run`, `/var` and home directories are not there at all:
//! nothing in them can be named. Landlock and seccomp stay as the second
//! layer. Everything here is prepared in the runtime; the child only makes
//! the system calls (see `child.rs`).

use crate::confinement::HostView;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One step of building the root, in order.
#[derive(Debug)]
pub enum Op {
    /// `mkdir` (an existing directory is fine).
    Mkdir(CString),
    /// Create an empty file to mount onto (an existing one is fine).
    Touch(CString),
    /// `symlink(target, at)`.
    Symlink(CString, CString),
    /// An overlay: (target, mount options, mount flags: read-only for a
    /// host tree, writable for a copy-on-write share).
    Overlay(CString, CString, libc::c_ulong),
    /// A bind mount: (source, target, recursive, read-only with these kept flags).
    Bind(CString, CString, bool, Option<libc::c_ulong>),
    /// A tmpfs: (target, flags, options).
    Tmpfs(CString, libc::c_ulong, CString),
    /// A fresh procfs at the target.
    Proc(CString),
    /// A fresh sysfs at the target, read-only (it shows the command's own
    /// network namespace: loopback alone); where the kernel refuses one,
    /// the host's `/sys` bound read-only with these kept flags.
    Sysfs(CString, libc::c_ulong),
    /// Make the mount at the target, and every mount beneath it, `nosuid`
    /// and `nodev` (with these flags kept, for the fallback remount).
    Harden(CString, libc::c_ulong),
    /// Make the mount at the target read-only, keeping these flags: what
    /// the root's own tmpfs mounts hold is set once, before any command.
    ReadOnly(CString, libc::c_ulong),
}

/// Everything the child needs to build the root and enter it.
#[derive(Debug)]
pub struct RootPlan {
    /// The directory the new root's tmpfs is mounted on.
    pub staging: CString,
    /// The steps that build what every command of a session shares, in
    /// order, ending with that tree made read-only: the root's tmpfs and
    /// its directories, the host trees, the masks over denied paths, and
    /// `/dev` (see `warm.rs`). Nothing here depends on one command, holds
    /// anything a command can write, or lies inside a mount of [`RootPlan::ops`].
    pub shared: Vec<Op>,
    /// The steps that are the command's own, after those (parents before
    /// children): its `/tmp`, the workspace and what is mounted in it, a
    /// git directory, `/proc`, `/sys`, `/dev/shm` and `/run`.
    pub ops: Vec<Op>,
    /// Landlock rules to add once the mounts exist (an overlay's tree is
    /// its own to Landlock): (path under the staging root, access mask).
    pub rules: Vec<(CString, u64)>,
    /// The working directory to enter after `pivot_root`.
    pub cwd: CString,
}

/// Landlock masks for the rules added in the child (0 when Landlock is off).
#[derive(Debug, Clone, Copy, Default)]
pub struct Masks {
    /// Read and execute, for directories.
    pub read_dir: u64,
    /// Read and execute, for files.
    pub read_file: u64,
    /// Every right, for directories.
    pub all_dir: u64,
}

/// Devices a command may use; the rest of the host's `/dev` is not there.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// What [`plan`] needs to know about one command.
pub struct Inputs<'a> {
    /// The host view (trees and denied paths).
    pub view: &'a HostView,
    /// The private directory's layout.
    pub private: &'a Private,
    /// The workspace (canonical).
    pub workspace: &'a Path,
    /// The working directory (canonical).
    pub cwd: &'a Path,
    /// Mount a fresh procfs (else leave `/proc` empty).
    pub fresh_proc: bool,
    /// The command has its own network namespace: `/sys` is a fresh sysfs
    /// (its interfaces only), not the host's.
    pub own_net: bool,
    /// A git directory to show read-only, and the reduced config to show
    /// as its `config`.
    pub git: Option<(&'a Path, &'a Path)>,
    /// Overlay the host trees (else bind them read-only).
    pub overlay_trees: bool,
    /// Dependency environments inside the workspace.
    pub shares: &'a [ShareMount],
    /// More host trees to show read-only at their own paths.
    pub extra_trees: &'a [PathBuf],
    /// More paths to show the workspace at (with what is mounted in it).
    pub aliases: &'a [PathBuf],
    /// The mount is made in a user namespace (overlays need `userxattr`).
    pub userns: bool,
    /// Landlock masks; all zero adds no rules.
    pub masks: Masks,
    /// Directories the runtime prepared in the private tmp, shown
    /// read-only at the same name in the command's `/tmp` (a check's
    /// Python hook).
    pub tmp_dirs: &'a [&'a str],
    /// The command runs on a pseudo-terminal the runtime owns (see
    /// `pty.rs`): `/dev/tty` is there, naming that terminal (a process's
    /// controlling one), never the caller's.
    pub terminal: Option<&'a Path>,
}

/// A dependency environment as the root shows it, inside the workspace.
#[derive(Debug, Clone)]
pub struct ShareMount {
    /// The host directory.
    pub host: PathBuf,
    /// Its path relative to the workspace.
    pub rel: String,
    /// Bound read-only (`None`), or the lower layer of a writable overlay
    /// with these (existing) upper and work directories.
    pub layers: Option<(PathBuf, PathBuf)>,
    /// A layer kept from the task's earlier commands, shown read-only
    /// between the host directory and the upper layer.
    pub middle: Option<PathBuf>,
    /// For a read-only share with caches: a directory holding an empty
    /// directory per cache, laid over the host directory (a read-only
    /// overlay, so each cache has a place to be mounted on).
    pub skeleton: Option<PathBuf>,
    /// The caches: (name directly inside the share, the writable
    /// directory shown there).
    pub caches: Vec<(String, PathBuf)>,
    /// Files shown read-only over the share's own: (the file, its path
    /// relative to the share).
    pub files: Vec<(PathBuf, String)>,
}

/// The private directory of one command and its parts.
#[derive(Debug, Clone)]
pub struct Private {
    /// The directory itself (removed after the command).
    pub base: PathBuf,
    /// Becomes `/tmp` (and holds `home/`).
    pub tmp: PathBuf,
    /// Where the new root's tmpfs is mounted.
    pub staging: PathBuf,
    /// An empty directory: the second lower layer of read-only overlays.
    pub empty: PathBuf,
    /// An empty file with no permissions, mounted over denied files.
    pub mask: PathBuf,
    /// Where the command's disk (a size-capped tmpfs) is mounted in its
    /// mount namespace: it holds the command's `/tmp` and its layer over
    /// the workspace.
    pub disk: PathBuf,
    /// The directory holding `staging`, `empty` and `mask`: `base`, or
    /// one the runtime process keeps for every command (so that what its
    /// commands' roots share is named alike, see `warm.rs`).
    pub root_base: PathBuf,
}

impl Private {
    /// The command's `/tmp` on its disk.
    pub fn disk_tmp(&self) -> PathBuf {
        self.disk.join("tmp")
    }
}

impl Private {
    /// The layout under `base`.
    pub fn under(base: PathBuf) -> Private {
        Private {
            tmp: base.join("tmp"),
            staging: base.join("root"),
            empty: base.join("empty"),
            mask: base.join("mask"),
            disk: base.join("disk"),
            root_base: base.clone(),
            base,
        }
    }
}

/// Why a command's root could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// A path the root names holds a NUL byte (no system call takes it).
    #[error("path {} contains a NUL byte", .0.display())]
    Nul(PathBuf),
    /// A host link on the way could not be read.
    #[error("{}: {source}", .at.display())]
    Link {
        /// The link.
        at: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A shared environment's place in the workspace is not what it must
    /// be (the runtime made it; anything else there the task put).
    #[error("shared `{rel}`: its place in the workspace is not a {want}")]
    SharePlace {
        /// The share, relative to the workspace.
        rel: String,
        /// `file` or `directory`.
        want: &'static str,
    },
    /// A path the workspace cannot also be shown at (inside the workspace,
    /// over a host tree, relative, special).
    #[error("the workspace cannot also be shown at {}", .0.display())]
    Alias(PathBuf),
}

fn c(p: &Path) -> Result<CString, RootError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| RootError::Nul(p.to_path_buf()))
}

/// `staging` + `p` (an absolute path).
fn under(staging: &Path, p: &Path) -> PathBuf {
    let rel = p.strip_prefix("/").unwrap_or(p);
    staging.join(rel)
}

/// Overlay options escape `\`, `,` and `:` in paths.
pub fn overlay_escape(p: &Path) -> String {
    p.to_string_lossy()
        .replace('\\', "\\\\")
        .replace(',', "\\,")
        .replace(':', "\\:")
}

/// Whether the host tree `t` is shown through an overlay (else bound
/// read-only). `/etc` is bound: no service keeps a socket there, and its
/// Landlock rules (one per entry around `/etc/shadow` and friends) would
/// otherwise be re-added inside every command, a third of its start-up.
pub fn overlaid(t: &Path, overlay_trees: bool) -> bool {
    overlay_trees && t != Path::new("/etc")
}

/// The trees handled on their own rather than as host trees.
const SPECIAL: &[&str] = &["/proc", "/dev", "/sys", "/tmp", "/run"];

/// Whether `t` is one of the trees the root makes on its own (`/proc`,
/// `/dev`, `/sys`, `/tmp`, `/run`).
pub fn special(t: &Path) -> bool {
    SPECIAL.iter().any(|s| t == Path::new(s))
}

/// Build the plan for one command.
pub fn plan(inp: &Inputs<'_>) -> Result<RootPlan, RootError> {
    // The command's own mounts made before anything inside them: what
    // lies inside one is its own. (`/proc`, `/sys`, `/dev/shm` and `/run`
    // are mounted last, over whatever a tree put there, as before.)
    let own_roots: Vec<PathBuf> = [inp.workspace, Path::new("/tmp")]
        .into_iter()
        .chain(inp.aliases.iter().map(PathBuf::as_path))
        .chain(inp.git.map(|(dir, _)| dir))
        .map(Path::to_path_buf)
        .collect();
    let mut b = Builder {
        staging: &inp.private.staging,
        shared: Vec::new(),
        ops: Vec::new(),
        rules: Vec::new(),
        made: Default::default(),
        own_roots,
    };
    let targets = targets(inp);
    for (t, kind) in &targets {
        b.mount(inp, t, kind)?;
    }
    if let Some((dir, config)) = inp.git {
        b.git(dir, config)?;
    }
    b.shares(inp)?;
    let masked: Vec<PathBuf> = targets
        .iter()
        .filter(|(_, k)| matches!(k, Kind::Mask))
        .map(|(t, _)| t.clone())
        .collect();
    b.aliases(inp, &masked)?;
    b.mask_denied(inp, &targets)?;
    b.system(inp)?;
    b.resolv_conf(inp)?;
    // What the commands share holds nothing any of them can write: the
    // root's own tmpfs and the tmpfs mounts made in it are read-only
    // from here on (each command's writable places are its own mounts).
    for (t, kind) in &targets {
        if matches!(kind, Kind::Mask) && !b.own(t) {
            b.shared.push(Op::ReadOnly(
                c(&under(b.staging, t))?,
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            ));
        }
    }
    b.shared.push(Op::ReadOnly(
        c(&under(b.staging, Path::new("/dev")))?,
        libc::MS_NOSUID | libc::MS_NOEXEC,
    ));
    b.shared.push(Op::ReadOnly(
        c(b.staging)?,
        libc::MS_NOSUID | libc::MS_NODEV,
    ));
    Ok(RootPlan {
        staging: c(b.staging)?,
        shared: b.shared,
        ops: b.ops,
        rules: b.rules,
        cwd: c(inp.cwd)?,
    })
}

/// What a mount target is.
enum Kind {
    Tree,
    Workspace,
    Tmp,
    /// A denied directory on the way to the workspace: empty.
    Mask,
}

/// The denied directories inside a shown tree that hold the workspace or
/// one of its aliases.
fn masked_ancestors(inp: &Inputs<'_>, targets: &[(PathBuf, Kind)]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = inp
        .view
        .denied
        .iter()
        .filter(|d| {
            let holds = |p: &Path| crate::pathcmp::under(p, d) && p != d.as_path();
            (holds(inp.workspace) || inp.aliases.iter().any(|a| holds(a)))
                && targets
                    .iter()
                    .any(|(t, k)| matches!(k, Kind::Tree) && crate::pathcmp::under(d, t))
                && std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir())
        })
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Mount targets, sorted so a parent is mounted before what lies inside it.
fn targets(inp: &Inputs<'_>) -> Vec<(PathBuf, Kind)> {
    let mut targets: Vec<(PathBuf, Kind)> = inp
        .view
        .trees
        .iter()
        .filter(|t| !special(t))
        .map(|t| (t.clone(), Kind::Tree))
        .collect();
    // More trees, unless the view already shows them.
    for t in inp.extra_trees {
        if !inp.view.trees.iter().any(|v| crate::pathcmp::under(t, v)) && !special(t) {
            targets.push((t.clone(), Kind::Tree));
        }
    }
    targets.push((PathBuf::from("/tmp"), Kind::Tmp));
    // A denied directory the workspace (or an alias of it) lies in, inside
    // a tree shown: an empty directory in its place, where only the
    // workspace is mounted (the task workspaces' root shows no other
    // task's, nor any other project's).
    for d in masked_ancestors(inp, &targets) {
        targets.push((d, Kind::Mask));
    }
    targets.push((inp.workspace.to_path_buf(), Kind::Workspace));
    targets.sort_by(|a, b| crate::pathcmp::order(&a.0, &b.0));
    targets
}

/// The plan as it is built: operations in order (those every command
/// shares, and the command's own), Landlock rules for the new root, and
/// the directories already made in it.
struct Builder<'s> {
    staging: &'s Path,
    shared: Vec<Op>,
    ops: Vec<Op>,
    rules: Vec<(CString, u64)>,
    made: std::collections::BTreeSet<PathBuf>,
    /// Host paths whose mounts are each command's own: what lies inside
    /// one is the command's own too.
    own_roots: Vec<PathBuf>,
}

impl Builder<'_> {
    /// Whether what is mounted at `t` (a host path) is the command's own.
    fn own(&self, t: &Path) -> bool {
        self.own_roots.iter().any(|r| crate::pathcmp::under(t, r))
    }

    /// Add `op` to the command's own steps, or to the shared ones.
    fn push(&mut self, own: bool, op: Op) {
        if own {
            self.ops.push(op)
        } else {
            self.shared.push(op)
        }
    }

    /// mkdir every ancestor of `p` (inside the new root) not made yet:
    /// in the root's own tmpfs, shared; inside a command's own mount, its own.
    fn mkdirs(&mut self, p: &Path) -> Result<(), RootError> {
        let mut acc = PathBuf::from("/");
        for comp in p.components().skip(1) {
            acc.push(comp);
            if self.made.insert(acc.clone()) {
                let own = self
                    .own_roots
                    .iter()
                    .any(|r| crate::pathcmp::under(&acc, r) && acc != *r);
                self.push(own, Op::Mkdir(c(&under(self.staging, &acc))?));
            }
        }
        Ok(())
    }

    /// One target: a host tree (overlaid read-only, or bound), the private
    /// tmp, or the workspace.
    fn mount(&mut self, inp: &Inputs<'_>, t: &Path, kind: &Kind) -> Result<(), RootError> {
        let at = under(self.staging, t);
        match kind {
            Kind::Tree => {
                let Ok(meta) = std::fs::symlink_metadata(t) else {
                    return Ok(());
                };
                if let Some(parent) = t.parent() {
                    self.mkdirs(parent)?;
                }
                let own = self.own(t);
                let ft = meta.file_type();
                if ft.is_symlink() {
                    // `/bin -> usr/bin` on merged-/usr systems.
                    let target = std::fs::read_link(t).map_err(|source| RootError::Link {
                        at: t.to_path_buf(),
                        source,
                    })?;
                    self.push(own, Op::Symlink(c(&target)?, c(&at)?));
                } else if ft.is_dir() {
                    self.mkdirs(t)?;
                    if overlaid(t, inp.overlay_trees) {
                        self.overlay_tree(inp, t, &at, own)?;
                    } else {
                        let flags = crate::locked_flags(t);
                        self.push(own, Op::Bind(c(t)?, c(&at)?, true, Some(flags)));
                    }
                } else if ft.is_file() {
                    self.push(own, Op::Touch(c(&at)?));
                    let flags = crate::locked_flags(t);
                    self.push(own, Op::Bind(c(t)?, c(&at)?, false, Some(flags)));
                }
                // Sockets, FIFOs and devices named as trees are left out.
            }
            Kind::Tmp => {
                self.mkdirs(t)?;
                // On the command's disk, a capped tmpfs mounted before the
                // root is built: a command cannot fill the host's disk
                // through `/tmp` (its pages are also charged to the
                // command's memory cgroup).
                self.ops
                    .push(Op::Bind(c(&inp.private.disk_tmp())?, c(&at)?, false, None));
                if inp.masks.all_dir != 0 {
                    self.rules.push((c(&at)?, inp.masks.all_dir));
                }
                for name in inp.tmp_dirs {
                    let host = inp.private.tmp.join(name);
                    if !host.is_dir() {
                        continue;
                    }
                    self.ops.push(Op::Mkdir(c(&at.join(name))?));
                    self.ops.push(Op::Bind(
                        c(&host)?,
                        c(&at.join(name))?,
                        false,
                        Some(crate::locked_flags(&host) | libc::MS_NOSUID | libc::MS_NODEV),
                    ));
                }
            }
            Kind::Mask => {
                self.mkdirs(t)?;
                // Shared, made read-only once the workspace's place is
                // made in it; inside a command's own place (a home under
                // `/tmp`), the command's own.
                let own = self.own(t);
                self.push(
                    own,
                    Op::Tmpfs(
                        c(&at)?,
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        c(Path::new("mode=755,size=64k"))?,
                    ),
                );
            }
            Kind::Workspace => {
                self.mkdirs(t)?;
                // Recursive: protected paths bound read-only and a check's
                // overlay, mounted on the host path first, come along.
                self.ops.push(Op::Bind(c(t)?, c(&at)?, true, None));
                // Nothing the command leaves there gives privilege inside.
                self.ops.push(Op::Harden(c(&at)?, crate::locked_flags(t)));
            }
        }
        Ok(())
    }

    /// A host tree as a read-only overlay (over an empty upper layer, so no
    /// socket inside it is reachable). Landlock sees the overlay as a tree
    /// of its own: the view's rules for this tree are added again on it.
    fn overlay_tree(
        &mut self,
        inp: &Inputs<'_>,
        t: &Path,
        at: &Path,
        own: bool,
    ) -> Result<(), RootError> {
        let mut o = format!(
            "lowerdir={}:{}",
            overlay_escape(t),
            overlay_escape(&inp.private.empty)
        );
        if inp.userns {
            o.push_str(",userxattr");
        }
        self.push(
            own,
            Op::Overlay(
                c(at)?,
                c(Path::new(&o))?,
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            ),
        );
        let read_dir = inp.masks.read_dir;
        // A tree asked for beyond the view (`extra_trees`: an interpreter a
        // shared venv links to) is readable whole, as its rule on the host
        // says; the overlay needs that rule again.
        if read_dir != 0 && !inp.view.trees.iter().any(|v| v == t) {
            self.rules.push((c(at)?, read_dir));
        } else if read_dir != 0 {
            for e in inp.view.read_exec_under(t) {
                let mask = if inp.view.files.contains(e) {
                    inp.masks.read_file
                } else {
                    read_dir
                };
                self.rules.push((c(&under(self.staging, e))?, mask));
            }
        }
        Ok(())
    }

    /// Dependency environments, each mounted over its directory in the
    /// workspace (after the workspace, so on top of it): bound read-only,
    /// or an overlay whose lower layer is the host directory and whose
    /// writes land in the share's upper layer (Landlock sees an overlay as
    /// a tree of its own: it gets its own rule). A share whose place in the
    /// workspace is not a plain directory is refused: the runtime made it,
    /// and anything else there was put by the task.
    fn shares(&mut self, inp: &Inputs<'_>) -> Result<(), RootError> {
        for share in inp.shares {
            let rel = &share.rel;
            // Every component a real directory: a link the task put on the
            // way would carry the mount elsewhere.
            let mut in_ws = inp.workspace.to_path_buf();
            // A single file shared (a file a setup step generated) is
            // mounted on a regular file at its place.
            let one_file = std::fs::symlink_metadata(&share.host).is_ok_and(|m| m.is_file());
            let parts: Vec<_> = Path::new(rel).components().collect();
            for (n, part) in parts.iter().enumerate() {
                in_ws.push(part);
                let last = n + 1 == parts.len();
                let fits = std::fs::symlink_metadata(&in_ws).is_ok_and(|m| {
                    !m.file_type().is_symlink() && (m.is_dir() || (last && one_file && m.is_file()))
                });
                if !fits {
                    return Err(RootError::SharePlace {
                        rel: rel.clone(),
                        want: if last && one_file {
                            "file"
                        } else {
                            "directory"
                        },
                    });
                }
            }
            let at = under(self.staging, &in_ws);
            if one_file {
                self.ops.push(Op::Bind(
                    c(&share.host)?,
                    c(&at)?,
                    false,
                    Some(crate::locked_flags(&share.host)),
                ));
                continue;
            }
            match &share.layers {
                None if share.skeleton.is_some() => {
                    let skeleton = share.skeleton.as_deref().unwrap_or(Path::new(""));
                    // Read-only (no upper layer): the packages are never
                    // written; the skeleton only adds the caches' places.
                    let mut o = format!(
                        "lowerdir={}:{}",
                        overlay_escape(skeleton),
                        overlay_escape(&share.host)
                    );
                    if inp.userns {
                        o.push_str(",userxattr");
                    }
                    self.ops.push(Op::Overlay(
                        c(&at)?,
                        c(Path::new(&o))?,
                        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
                    ));
                    for (name, dir) in &share.caches {
                        let place = at.join(name);
                        self.ops.push(Op::Bind(c(dir)?, c(&place)?, false, None));
                        if inp.masks.all_dir != 0 {
                            self.rules.push((c(&place)?, inp.masks.all_dir));
                        }
                    }
                }
                None => self.ops.push(Op::Bind(
                    c(&share.host)?,
                    c(&at)?,
                    true,
                    Some(crate::locked_flags(&share.host)),
                )),
                Some((upper, work)) => {
                    let lower = match &share.middle {
                        Some(m) => format!("{}:{}", overlay_escape(m), overlay_escape(&share.host)),
                        None => overlay_escape(&share.host),
                    };
                    let mut o = format!(
                        "lowerdir={lower},upperdir={},workdir={}",
                        overlay_escape(upper),
                        overlay_escape(work)
                    );
                    if inp.userns {
                        o.push_str(",userxattr");
                    }
                    self.ops.push(Op::Overlay(
                        c(&at)?,
                        c(Path::new(&o))?,
                        libc::MS_NOSUID | libc::MS_NODEV,
                    ));
                    if inp.masks.all_dir != 0 {
                        self.rules.push((c(&at)?, inp.masks.all_dir));
                    }
                }
            }
            for (file, rel) in &share.files {
                self.ops.push(Op::Bind(
                    c(file)?,
                    c(&at.join(rel))?,
                    false,
                    Some(crate::locked_flags(&share.host)),
                ));
            }
        }
        Ok(())
    }

    /// The workspace again at each alias, as the new root has it (shares
    /// mounted in it included); an alias that is the workspace is itself
    /// already. An alias never covers a path of the root already made:
    /// only a path outside the host trees and the workspace.
    fn aliases(&mut self, inp: &Inputs<'_>, masked: &[PathBuf]) -> Result<(), RootError> {
        for alias in inp.aliases {
            if alias == inp.workspace {
                continue;
            }
            if !alias.is_absolute()
                || alias.starts_with(inp.workspace)
                || inp.workspace.starts_with(alias)
                || (inp
                    .view
                    .trees
                    .iter()
                    .any(|t| alias.starts_with(t) || t.starts_with(alias))
                    && !masked.iter().any(|m| alias.starts_with(m)))
                || alias.starts_with(&inp.private.base)
                || alias.starts_with(&inp.private.root_base)
                || special(alias)
                || alias.components().any(|c| {
                    !matches!(
                        c,
                        std::path::Component::RootDir | std::path::Component::Normal(_)
                    )
                })
            {
                return Err(RootError::Alias(alias.to_path_buf()));
            }
            self.mkdirs(alias)?;
            self.ops.push(Op::Bind(
                c(&under(self.staging, inp.workspace))?,
                c(&under(self.staging, alias))?,
                true,
                None,
            ));
        }
        Ok(())
    }

    /// A worktree's repository, read-only, its config reduced.
    fn git(&mut self, dir: &Path, config: &Path) -> Result<(), RootError> {
        self.mkdirs(dir)?;
        let at = under(self.staging, dir);
        self.ops.push(Op::Bind(
            c(dir)?,
            c(&at)?,
            true,
            Some(crate::locked_flags(dir)),
        ));
        if dir.join("config").is_file() {
            self.ops
                .push(Op::Bind(c(config)?, c(&at.join("config"))?, false, Some(0)));
        }
        Ok(())
    }

    /// Denied paths inside what is mounted from the host: an unreadable
    /// mask on top (the host's /tmp is not mounted: the private one is).
    fn mask_denied(
        &mut self,
        inp: &Inputs<'_>,
        targets: &[(PathBuf, Kind)],
    ) -> Result<(), RootError> {
        let mounted = |p: &Path| {
            targets
                .iter()
                .any(|(t, k)| !matches!(k, Kind::Tmp) && crate::pathcmp::under(p, t))
        };
        // (Those on the way to the workspace are empty already.)
        let emptied = |p: &Path| {
            targets
                .iter()
                .any(|(t, k)| matches!(k, Kind::Mask) && p == t)
        };
        for d in &inp.view.denied {
            if !mounted(d)
                || emptied(d)
                || crate::pathcmp::under(d, &inp.private.base)
                || crate::pathcmp::under(d, &inp.private.root_base)
            {
                continue;
            }
            let own = self.own(d);
            let Ok(meta) = std::fs::symlink_metadata(d) else {
                continue;
            };
            let at = c(&under(self.staging, d))?;
            if meta.is_dir() {
                self.push(
                    own,
                    Op::Tmpfs(
                        at,
                        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        c(Path::new("mode=000,size=4k"))?,
                    ),
                );
            } else if meta.is_file() {
                self.push(own, Op::Bind(c(&inp.private.mask)?, at, false, Some(0)));
            }
        }
        Ok(())
    }

    /// /proc (fresh, or none at all: the host's would name every host
    /// process's root, and through it host sockets again), /sys read-only,
    /// a minimal /dev, and private /dev/shm and /run.
    fn system(&mut self, inp: &Inputs<'_>) -> Result<(), RootError> {
        let read_dir = inp.masks.read_dir;
        let proc_at = under(self.staging, Path::new("/proc"));
        self.shared.push(Op::Mkdir(c(&proc_at)?));
        if inp.fresh_proc {
            self.ops.push(Op::Proc(c(&proc_at)?));
            if read_dir != 0 {
                self.rules.push((c(&proc_at)?, read_dir));
            }
        }
        if Path::new("/sys").is_dir() {
            let sys_at = under(self.staging, Path::new("/sys"));
            // A fresh sysfs shows its network namespace, the command's own.
            self.shared.push(Op::Mkdir(c(&sys_at)?));
            if inp.own_net {
                self.ops.push(Op::Sysfs(
                    c(&sys_at)?,
                    crate::locked_flags(Path::new("/sys")),
                ));
                if read_dir != 0 {
                    self.rules.push((c(&sys_at)?, read_dir));
                }
            } else {
                self.ops.push(Op::Bind(
                    c(Path::new("/sys"))?,
                    c(&sys_at)?,
                    true,
                    Some(crate::locked_flags(Path::new("/sys"))),
                ));
            }
        }
        let dev = under(self.staging, Path::new("/dev"));
        // Made read-only at the end: writing to a device bound here
        // writes to the device, never to the tmpfs.
        self.shared.push(Op::Mkdir(c(&dev)?));
        self.shared.push(Op::Tmpfs(
            c(&dev)?,
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c(Path::new("mode=755,size=64k"))?,
        ));
        if read_dir != 0 {
            self.rules.push((c(&dev)?, read_dir));
        }
        let tty: &[&str] = if inp.terminal.is_some() {
            &["tty"]
        } else {
            &[]
        };
        for d in DEVICES.iter().chain(tty) {
            let host = Path::new("/dev").join(d);
            if std::fs::metadata(&host).is_err() {
                continue;
            }
            self.shared.push(Op::Touch(c(&dev.join(d))?));
            self.shared
                .push(Op::Bind(c(&host)?, c(&dev.join(d))?, false, None));
        }
        // The runtime's terminal at its own name, so `ttyname` finds it.
        if let Some(t) = inp.terminal
            && t.starts_with("/dev/pts")
        {
            let at = under(self.staging, t);
            self.mkdirs(t.parent().unwrap_or(t))?;
            self.shared.push(Op::Touch(c(&at)?));
            self.shared.push(Op::Bind(c(t)?, c(&at)?, false, None));
        }
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            self.shared
                .push(Op::Symlink(c(Path::new(target))?, c(&dev.join(name))?));
        }
        for (at, size) in [
            (dev.join("shm"), "64m"),
            (under(self.staging, Path::new("/run")), "16m"),
        ] {
            self.shared.push(Op::Mkdir(c(&at)?));
            self.ops.push(Op::Tmpfs(
                c(&at)?,
                libc::MS_NOSUID | libc::MS_NODEV,
                c(Path::new(&format!("mode=1777,size={size}")))?,
            ));
            if inp.masks.all_dir != 0 {
                self.rules.push((c(&at)?, inp.masks.all_dir));
            }
        }
        Ok(())
    }

    /// `/etc/resolv.conf` is often a link into `/run` (systemd-resolved):
    /// its target file alone comes along, read-only, so names resolve under
    /// `--net host`.
    fn resolv_conf(&mut self, inp: &Inputs<'_>) -> Result<(), RootError> {
        let Ok(target) = std::fs::canonicalize("/etc/resolv.conf") else {
            return Ok(());
        };
        if !target.starts_with("/run") || !target.is_file() {
            return Ok(());
        }
        let at = under(self.staging, &target);
        if let Some(parent) = at.parent() {
            let mut acc = under(self.staging, Path::new("/run"));
            for comp in parent
                .strip_prefix(&acc)
                .unwrap_or(Path::new(""))
                .components()
            {
                acc.push(comp);
                self.ops.push(Op::Mkdir(c(&acc)?));
            }
        }
        self.ops.push(Op::Touch(c(&at)?));
        self.ops.push(Op::Bind(
            c(&target)?,
            c(&at)?,
            false,
            Some(crate::locked_flags(&target)),
        ));
        if inp.masks.read_file != 0 {
            self.rules.push((c(&at)?, inp.masks.read_file));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    /// Every step, in the order a command without a session makes them.
    fn names(plan: &RootPlan) -> Vec<String> {
        plan.shared
            .iter()
            .chain(&plan.ops)
            .map(|o| match o {
                Op::Mkdir(p) => format!("mkdir {}", p.to_string_lossy()),
                Op::Touch(p) => format!("touch {}", p.to_string_lossy()),
                Op::Symlink(t, p) => format!("ln {} {}", t.to_string_lossy(), p.to_string_lossy()),
                Op::Overlay(p, _, _) => format!("overlay {}", p.to_string_lossy()),
                Op::Bind(s, p, _, _) => {
                    format!("bind {} {}", s.to_string_lossy(), p.to_string_lossy())
                }
                Op::Tmpfs(p, _, _) => format!("tmpfs {}", p.to_string_lossy()),
                Op::Proc(p) => format!("proc {}", p.to_string_lossy()),
                Op::Harden(p, _) => format!("harden {}", p.to_string_lossy()),
                Op::Sysfs(p, _) => format!("sysfs {}", p.to_string_lossy()),
                Op::ReadOnly(p, _) => format!("read-only {}", p.to_string_lossy()),
            })
            .collect()
    }

    #[test]
    fn the_root_holds_the_trees_the_workspace_and_private_places_only() {
        let view = HostView::resolve("/usr/bin:/bin", Some(Path::new("/root")), &[]);
        let private = Private::under(PathBuf::from("/tmp/p"));
        let ws = PathBuf::from("/tmp/x/ws");
        let plan = plan(&Inputs {
            view: &view,
            private: &private,
            workspace: &ws,
            cwd: &ws,
            fresh_proc: true,
            own_net: true,
            git: None,
            overlay_trees: true,
            shares: &[],
            extra_trees: &[],
            aliases: &[],
            userns: true,
            masks: Masks {
                read_dir: 1,
                read_file: 1,
                all_dir: 1,
            },
            tmp_dirs: &[],
            terminal: None,
        })
        .unwrap();
        let ops = names(&plan);
        let pos = |s: &str| {
            ops.iter()
                .position(|o| o == s)
                .unwrap_or_else(|| panic!("{s} missing in {ops:#?}"))
        };
        assert!(pos("overlay /tmp/p/root/usr") > 0);
        assert!(pos("bind /etc /tmp/p/root/etc") > 0);
        // /tmp is on the command's disk, and the workspace is mounted
        // after it, then made nosuid and nodev.
        assert!(
            pos("bind /tmp/p/disk/tmp /tmp/p/root/tmp")
                < pos("bind /tmp/x/ws /tmp/p/root/tmp/x/ws")
        );
        assert!(pos("bind /tmp/x/ws /tmp/p/root/tmp/x/ws") < pos("harden /tmp/p/root/tmp/x/ws"));
        assert!(!ops.iter().any(|o| o.ends_with("/dev/tty")), "{ops:#?}");
        assert!(pos("proc /tmp/p/root/proc") > 0);
        assert!(pos("bind /dev/null /tmp/p/root/dev/null") > 0);
        if Path::new("/etc/shadow").exists() {
            assert!(
                pos("bind /tmp/p/mask /tmp/p/root/etc/shadow") > pos("bind /etc /tmp/p/root/etc")
            );
        }
        // Nothing of the host's /run, /var or home directories.
        for o in &ops {
            for never in ["/var", "/home", "/root/.ssh", "/dev/log"] {
                assert!(!o.ends_with(never), "{o}");
            }
        }
        // Landlock rules are added again on the overlays (a bound tree
        // keeps the host's).
        assert!(
            plan.rules
                .iter()
                .any(|(p, _)| p.as_bytes() == b"/tmp/p/root/usr")
        );
        assert!(
            !plan
                .rules
                .iter()
                .any(|(p, _)| p.as_bytes().starts_with(b"/tmp/p/root/etc"))
        );
    }

    #[test]
    fn a_share_is_bound_read_only_on_its_directory_and_never_through_a_link() {
        let base = std::env::temp_dir().join(format!("loop-root-share-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("a/env")).unwrap();
        std::fs::create_dir_all(base.join("project/a/env")).unwrap();
        std::os::unix::fs::symlink("/", ws.join("l")).unwrap();
        let view = HostView::resolve("/usr/bin:/bin", Some(Path::new("/root")), &[]);
        let private = Private::under(base.join("p"));
        let plan_with = |shares: &[ShareMount]| {
            plan(&Inputs {
                view: &view,
                private: &private,
                workspace: &ws,
                cwd: &ws,
                fresh_proc: true,
                own_net: true,
                git: None,
                overlay_trees: true,
                shares,
                extra_trees: &[],
                aliases: &[],
                userns: true,
                masks: Masks::default(),
                tmp_dirs: &[],
                terminal: None,
            })
        };
        let share = |rel: &str, layers: Option<(PathBuf, PathBuf)>| ShareMount {
            host: base.join("project/a/env"),
            rel: rel.into(),
            layers,
            middle: None,
            skeleton: None,
            caches: Vec::new(),
            files: Vec::new(),
        };
        let ok = plan_with(&[share("a/env", None)]).unwrap();
        let bound = ok.ops.iter().any(|op| {
            matches!(op, Op::Bind(src, dst, true, Some(_))
                if src.to_str().unwrap().ends_with("project/a/env")
                    && dst.to_str().unwrap().ends_with("ws/a/env"))
        });
        assert!(bound, "{:?}", ok.ops);
        for rel in ["l/etc", "a/missing", "a/env/../../l"] {
            let e = plan_with(&[share(rel, None)]).unwrap_err().to_string();
            assert!(e.contains("is not a directory"), "{rel}: {e}");
            let e = plan_with(&[share(rel, Some((base.join("u"), base.join("w"))))])
                .unwrap_err()
                .to_string();
            assert!(e.contains("is not a directory"), "{rel}: {e}");
        }
        // Copy-on-write: a writable overlay over the project's directory.
        let cow = plan_with(&[share("a/env", Some((base.join("u"), base.join("w"))))]).unwrap();
        let overlaid = cow.ops.iter().any(|op| {
            matches!(op, Op::Overlay(dst, o, flags)
                if dst.to_str().unwrap().ends_with("ws/a/env")
                    && o.to_str().unwrap().contains("project/a/env,upperdir=")
                    && flags & libc::MS_RDONLY == 0)
        });
        assert!(overlaid, "{:?}", cow.ops);
        assert!(!cow.ops.iter().any(|op| matches!(op, Op::Bind(src, _, _, _)
                if src.to_str().unwrap().ends_with("project/a/env"))));
        let _ = std::fs::remove_dir_all(&base);
    }

    /// What a session's commands share (`RootPlan::shared`) is built once
    /// for all of them: nothing in it may be a command's own, writable, or
    /// covered by a command's own mount; the command's own places are all
    /// in its own steps. A workspace under `/tmp` (a task workspace often
    /// is) and one elsewhere, with an alias, a git directory and a share.
    #[test]
    fn the_shared_tree_holds_nothing_a_command_owns_or_can_write() {
        let base = std::env::temp_dir().join(format!("loop-root-split-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("ws/env")).unwrap();
        std::fs::create_dir_all(base.join("git")).unwrap();
        std::fs::create_dir_all(base.join("env")).unwrap();
        let view = HostView::resolve("/usr/bin:/bin", Some(Path::new("/root")), &[]);
        let private = Private::under(PathBuf::from("/tmp/p"));
        let share = ShareMount {
            host: base.join("env"),
            rel: "env".into(),
            layers: None,
            middle: None,
            skeleton: None,
            caches: Vec::new(),
            files: Vec::new(),
        };
        let elsewhere = PathBuf::from("/srv/loop-alias-ws");
        for (ws, aliases) in [
            (base.join("ws"), vec![elsewhere.clone()]),
            (PathBuf::from("/tmp/x/ws"), Vec::new()),
        ] {
            let git = (base.join("git"), base.join("config"));
            let plan = plan(&Inputs {
                view: &view,
                private: &private,
                workspace: &ws,
                cwd: &ws,
                fresh_proc: true,
                own_net: true,
                git: Some((git.0.as_path(), git.1.as_path())),
                overlay_trees: true,
                shares: if ws.starts_with(&base) {
                    std::slice::from_ref(&share)
                } else {
                    &[]
                },
                // A tree under a place mounted last (`/sys`): built
                // like any tree, then covered, as before.
                extra_trees: &[PathBuf::from("/sys/fs/cgroup")],
                aliases: &aliases,
                userns: true,
                masks: Masks::default(),
                tmp_dirs: &[],
                terminal: None,
            })
            .unwrap();
            let staged = |p: &Path| under(Path::new("/tmp/p/root"), p);
            let own: Vec<PathBuf> = [ws.as_path(), Path::new("/tmp"), Path::new("/proc")]
                .into_iter()
                .chain([Path::new("/sys"), Path::new("/run"), Path::new("/dev/shm")])
                .chain(aliases.iter().map(PathBuf::as_path))
                .chain([git.0.as_path()])
                .map(staged)
                .collect();
            let target = |op: &Op| -> PathBuf {
                let c = match op {
                    Op::Mkdir(p) | Op::Touch(p) | Op::Proc(p) => p,
                    Op::Symlink(_, p) | Op::Bind(_, p, _, _) => p,
                    Op::Overlay(p, _, _) | Op::Tmpfs(p, _, _) => p,
                    Op::Sysfs(p, _) | Op::Harden(p, _) | Op::ReadOnly(p, _) => p,
                };
                PathBuf::from(c.to_str().unwrap())
            };
            for op in &plan.shared {
                let t = target(op);
                // A directory may be made for a mount of the command's
                // own (its mount point): nothing inside one, nothing on one.
                let inside = own.iter().any(|o| t.starts_with(o) && t != *o);
                assert!(
                    !inside,
                    "{ws:?}: shared step inside a command's own place: {op:?}"
                );
                match op {
                    Op::Mkdir(_) | Op::Touch(_) | Op::Symlink(..) | Op::ReadOnly(..) => {}
                    Op::Overlay(_, _, flags) => assert!(flags & libc::MS_RDONLY != 0, "{op:?}"),
                    Op::Bind(src, _, _, ro) => assert!(
                        ro.is_some() || src.to_str().unwrap().starts_with("/dev/"),
                        "{ws:?}: a writable shared bind: {op:?}"
                    ),
                    Op::Tmpfs(at, flags, _) => assert!(
                        flags & libc::MS_RDONLY != 0
                            || plan
                                .shared
                                .iter()
                                .any(|o| matches!(o, Op::ReadOnly(p, _) if p == at)),
                        "{ws:?}: a shared tmpfs left writable: {op:?}"
                    ),
                    Op::Proc(_) | Op::Sysfs(..) | Op::Harden(..) => {
                        panic!("{ws:?}: a command's own mount in the shared tree: {op:?}")
                    }
                }
            }
            assert!(
                matches!(plan.shared.last(), Some(Op::ReadOnly(p, _)) if p.to_str() == Ok("/tmp/p/root")),
                "the root's own tmpfs is read-only last: {:?}",
                plan.shared.last()
            );
            // The command's own places are its own steps; what it makes
            // of its own is inside a mount of its own made before (the
            // root's tmpfs is read-only by then).
            let own_ops: Vec<PathBuf> = plan.ops.iter().map(target).collect();
            let early: Vec<PathBuf> = [ws.as_path(), Path::new("/tmp"), git.0.as_path()]
                .into_iter()
                .chain(aliases.iter().map(PathBuf::as_path))
                .map(staged)
                .collect();
            for op in &plan.ops {
                if let Op::Mkdir(_) | Op::Touch(_) | Op::Symlink(..) = op {
                    let t = target(op);
                    let in_run = t.starts_with(staged(Path::new("/run")));
                    assert!(
                        in_run || early.iter().any(|e| t.starts_with(e) && t != *e),
                        "{ws:?}: made in the read-only root: {op:?}"
                    );
                }
            }
            for place in [
                staged(&ws),
                staged(Path::new("/tmp")),
                staged(Path::new("/proc")),
            ] {
                assert!(
                    own_ops.contains(&place),
                    "{ws:?}: {place:?} in {own_ops:#?}"
                );
            }
            for place in [staged(Path::new("/run")), staged(Path::new("/dev/shm"))] {
                assert!(
                    own_ops.contains(&place),
                    "{ws:?}: {place:?} in {own_ops:#?}"
                );
            }
            if ws.starts_with(&base) {
                assert!(
                    own_ops.contains(&staged(&ws.join("env"))),
                    "the share: {own_ops:#?}"
                );
                assert!(
                    own_ops.contains(&staged(&elsewhere)),
                    "the alias: {own_ops:#?}"
                );
                assert!(
                    own_ops.contains(&staged(&git.0)),
                    "the git directory: {own_ops:#?}"
                );
            }
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
