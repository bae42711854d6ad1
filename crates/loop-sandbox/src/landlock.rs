//! Landlock: the filesystem allow-list, built in the runtime (where
//! allocation and path lookups are safe) and enforced in the child with one
//! `landlock_restrict_self` call just before exec.

use crate::confinement::HostView;
use landlock::{
    ABI, Access, AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope,
};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::OnceLock;

/// A ruleset ready to be enforced in the child.
pub struct Prepared {
    /// The ruleset file descriptor.
    pub fd: OwnedFd,
    /// The kernel's Landlock ABI version.
    pub abi: u32,
    /// The read+execute access mask, for rules added in the child.
    pub read_mask: u64,
    /// Every handled access right, for read-write rules added in the child.
    pub all_mask: u64,
    /// Read and execute for a file (directory rights removed).
    pub read_file_mask: u64,
}

/// The Landlock ABI the kernel offers (0 when Landlock is unavailable).
pub fn kernel_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;
    // SAFETY: querying the ABI version takes no pointers (NULL, 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 { 0 } else { v as u32 }
}

/// Devices a command may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Descriptors of the host view's trees, opened once per process: a new
/// ruleset per command then costs one `landlock_add_rule` per tree and no
/// path lookups.
struct StaticRules {
    abi: ABI,
    rules: Vec<(PathBuf, PathFd, BitFlags<AccessFs>)>,
    /// Per rule: its path lies in a host tree a command's own root shows
    /// through an overlay (where the rule must be on the overlay's inodes:
    /// the child adds it). Worked out once: it is the same for every
    /// command, and comparing each path with each tree was a tenth of a
    /// millisecond of every command's start.
    overlaid: Vec<bool>,
}

fn static_rules(view: &'static HostView, abi: ABI) -> &'static StaticRules {
    static RULES: OnceLock<StaticRules> = OnceLock::new();
    RULES.get_or_init(|| {
        let read_exec = AccessFs::from_read(abi);
        let file = AccessFs::from_file(abi);
        let mut rules = Vec::with_capacity(view.read_exec.len() + DEVICES.len());
        for p in &view.read_exec {
            if let Ok(fd) = PathFd::new(p) {
                let access = if view.files.contains(p) {
                    read_exec & file
                } else {
                    read_exec
                };
                rules.push((p.clone(), fd, access));
            }
        }
        for d in DEVICES {
            if let Ok(fd) = PathFd::new(d) {
                rules.push((
                    PathBuf::from(d),
                    fd,
                    (read_exec | AccessFs::WriteFile | ioctl_dev(abi)) & file,
                ));
            }
        }
        let overlaid = rules
            .iter()
            .map(|(p, _, _)| {
                view.trees.iter().any(|t| {
                    p.starts_with(t) && crate::root::overlaid(t, true) && !crate::root::special(t)
                })
            })
            .collect();
        StaticRules {
            abi,
            rules,
            overlaid,
        }
    })
}

/// Build a ruleset: `read_write` trees get every right; the host view's
/// trees get read and execute (except, with `overlays`, those the child
/// shows through an overlay, whose rules it adds itself); a few devices
/// are writable.
/// Returns `None` when the kernel has no Landlock.
pub fn prepare(
    view: &'static HostView,
    read_write: &[PathBuf],
    read_only: &[PathBuf],
    overlays: bool,
) -> Result<Option<Prepared>, crate::SandboxError> {
    let abi_n = kernel_abi();
    if abi_n == 0 {
        return Ok(None);
    }
    let abi = ABI::from(abi_n as i32);
    let all = AccessFs::from_all(abi);
    let err = |e: &dyn std::fmt::Display| crate::SandboxError::Prepare(format!("landlock: {e}"));
    let mut ruleset = Ruleset::default().handle_access(all).map_err(|e| err(&e))?;
    if abi_n >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(|e| err(&e))?;
    }
    let mut created = ruleset.create().map_err(|e| err(&e))?;
    let fixed = static_rules(view, abi);
    for ((_, fd, access), overlaid) in fixed.rules.iter().zip(&fixed.overlaid) {
        if overlays && *overlaid {
            continue;
        }
        created
            .as_mut()
            .add_rule(PathBeneath::new(fd, *access))
            .map_err(|e| err(&e))?;
    }
    for p in read_write {
        let Ok(fd) = PathFd::new(p) else { continue };
        created
            .as_mut()
            .add_rule(PathBeneath::new(fd, all))
            .map_err(|e| err(&e))?;
    }
    let read = AccessFs::from_read(fixed.abi);
    let file = AccessFs::from_file(fixed.abi);
    for p in read_only {
        let Ok(fd) = PathFd::new(p) else { continue };
        let access = if p.is_dir() { read } else { read & file };
        created
            .as_mut()
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| err(&e))?;
    }
    let fd: Option<OwnedFd> = created.into();
    Ok(fd.map(|fd| Prepared {
        fd,
        abi: abi_n,
        read_mask: AccessFs::from_read(fixed.abi).bits(),
        all_mask: all.bits(),
        read_file_mask: (AccessFs::from_read(fixed.abi) & AccessFs::from_file(fixed.abi)).bits(),
    }))
}

fn ioctl_dev(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_all(abi) & AccessFs::IoctlDev
}
