//! seccomp: a BPF filter, compiled in the runtime and installed in the
//! child just before exec, that makes dangerous system calls fail with
//! `EPERM` and refuses sockets other than Unix, IPv4 and IPv6.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// System calls denied outright.
pub const DENIED: &[(&str, i64)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("bpf", libc::SYS_bpf),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsmount", libc::SYS_fsmount),
    // The new mount API: `mount_setattr` could clear a read-only bind's
    // flag (a shared environment, protected paths) for a command that
    // holds capabilities in its namespace (the runtime run as root).
    ("fspick", libc::SYS_fspick),
    ("fsconfig", libc::SYS_fsconfig),
    ("mount_setattr", libc::SYS_mount_setattr),
];

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Compile the filter.
pub fn program() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in DENIED {
        rules.insert(*nr, Vec::new());
    }
    let cond = |family: u64| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family)
            .map_err(|e| e.to_string())
    };
    let other_family = SeccompRule::new(vec![
        cond(libc::AF_UNIX as u64)?,
        cond(libc::AF_INET as u64)?,
        cond(libc::AF_INET6 as u64)?,
    ])
    .map_err(|e| e.to_string())?;
    rules.insert(libc::SYS_socket, vec![other_family.clone()]);
    rules.insert(libc::SYS_socketpair, vec![other_family]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}
