//! Landlock: the filesystem allow-list, built in the runtime (where
//! allocation and path lookups are safe) and enforced in the child with one
//! `landlock_restrict_self` call just before exec.

use crate::policy::HostView;
use landlock::{
    ABI, Access, AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    Scope,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// A ruleset ready to be enforced in the child.
pub struct Prepared {
    /// The ruleset file descriptor.
    pub fd: OwnedFd,
    /// The kernel's Landlock ABI version.
    pub abi: u32,
    /// The read+execute access mask, for rules added in the child.
    pub read_mask: u64,
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

/// Build a ruleset: `read_write` trees get every right; the host view's
/// trees get read and execute; a few devices are writable. Returns `None`
/// when the kernel has no Landlock.
pub fn prepare(view: &HostView, read_write: &[PathBuf]) -> Result<Option<Prepared>, String> {
    let abi_n = kernel_abi();
    if abi_n == 0 {
        return Ok(None);
    }
    let abi = ABI::from(abi_n as i32);
    let all = AccessFs::from_all(abi);
    let read_exec = AccessFs::from_read(abi);
    let err = |e: &dyn std::fmt::Display| format!("landlock: {e}");
    let mut ruleset = Ruleset::default().handle_access(all).map_err(|e| err(&e))?;
    if abi_n >= 6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(|e| err(&e))?;
    }
    let mut created = ruleset.create().map_err(|e| err(&e))?;
    let mut add = |path: &Path, access: BitFlags<AccessFs>| -> Result<(), String> {
        let Ok(fd) = PathFd::new(path) else {
            // Vanished or unreadable: nothing to allow.
            return Ok(());
        };
        let is_dir = path.is_dir();
        let access = if is_dir {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        created
            .as_mut()
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| err(&e))?;
        Ok(())
    };
    for p in &view.read_exec {
        add(p, read_exec)?;
    }
    for d in DEVICES {
        add(
            Path::new(d),
            read_exec | AccessFs::WriteFile | ioctl_dev(abi),
        )?;
    }
    for p in read_write {
        add(p, all)?;
    }
    let fd: Option<OwnedFd> = created.into();
    Ok(fd.map(|fd| Prepared {
        fd,
        abi: abi_n,
        read_mask: read_exec.bits(),
    }))
}

fn ioctl_dev(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_all(abi) & AccessFs::IoctlDev
}
