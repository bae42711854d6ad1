//! seccomp: BPF filters, compiled in the runtime and installed in the
//! child just before exec. The first makes dangerous system calls fail
//! with `EPERM`, refuses sockets other than Unix, IPv4 and IPv6, refuses
//! the terminal ioctls that push input into a terminal (`TIOCSTI`,
//! `TIOCLINUX`), and refuses every way of giving a file the setuid or
//! setgid bit (`chmod` and its kin, and `open`/`creat`/`mknod` with such a
//! mode). The second answers `openat2`, whose mode the filter cannot read
//! (it is behind a pointer), with `ENOSYS`: callers fall back to `openat`,
//! which the first filter judges.

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
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

/// `ioctl` requests refused whatever the kernel's `legacy_tiocsti`:
/// pushing bytes into a terminal's input queue (`TIOCSTI`) and the Linux
/// console's selection paste (`TIOCLINUX`).
pub const DENIED_IOCTLS: &[(&str, u64)] = &[("TIOCSTI", 0x5412), ("TIOCLINUX", 0x541C)];

/// System calls that set a mode, with the index of the mode argument and,
/// for the `open` family, the index of the flags (the mode only counts
/// with `O_CREAT` or `O_TMPFILE`).
fn mode_setters() -> Vec<(i64, u8, Option<u8>)> {
    let mut v = vec![
        (libc::SYS_fchmod, 1, None),
        (libc::SYS_fchmodat, 2, None),
        (libc::SYS_fchmodat2, 2, None),
        (libc::SYS_openat, 3, Some(2)),
        (libc::SYS_mknodat, 2, None),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_chmod, 1, None),
        (libc::SYS_open, 2, Some(1)),
        (libc::SYS_creat, 1, None),
        (libc::SYS_mknod, 1, None),
    ]);
    v
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, BackendError> {
    // Dword: the kernel reads these arguments as 32-bit values, so the
    // filter compares the low half only (high bits set by the caller
    // change nothing the kernel does, and must change nothing here).
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, BackendError> {
    SeccompRule::new(conditions)
}

/// Rules that match a mode argument carrying a setuid or setgid bit (with
/// `O_CREAT` or `O_TMPFILE` among the flags, for the `open` family).
fn privileged_mode(mode_arg: u8, flags_arg: Option<u8>) -> Result<Vec<SeccompRule>, BackendError> {
    let mut rules = Vec::new();
    for bit in [libc::S_ISUID as u64, libc::S_ISGID as u64] {
        let mode = condition(mode_arg, SeccompCmpOp::MaskedEq(bit), bit)?;
        match flags_arg {
            None => rules.push(rule(vec![mode])?),
            Some(f) => {
                for flag in [
                    libc::O_CREAT as u64,
                    libc::O_TMPFILE as u64 & !(libc::O_DIRECTORY as u64),
                ] {
                    rules.push(rule(vec![
                        condition(f, SeccompCmpOp::MaskedEq(flag), flag)?,
                        condition(mode_arg, SeccompCmpOp::MaskedEq(bit), bit)?,
                    ])?);
                }
            }
        }
    }
    Ok(rules)
}

/// Compile the filters (see the module's doc), in the order to install them.
pub fn programs() -> Result<Vec<BpfProgram>, BackendError> {
    Ok(vec![no_x32(), program()?, enosys_program()?])
}

/// x32 system calls (the x86_64 architecture with bit 30 of the number
/// set) match no rule of a filter written for x86_64 numbers: every one is
/// refused, so `chmod`, `ioctl` or `mount` cannot be reached under another
/// number where a kernel has x32 turned on.
fn no_x32() -> BpfProgram {
    let stmt = |code: u32, k: u32| seccompiler::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    vec![
        // The system call number (offset 0 of `struct seccomp_data`).
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        seccompiler::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: 0x4000_0000,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// The second filter: `openat2` answers `ENOSYS`.
fn enosys_program() -> Result<BpfProgram, BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_openat2, Vec::new());
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )?;
    BpfProgram::try_from(filter)
}

/// Compile the first filter.
pub fn program() -> Result<BpfProgram, BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in DENIED {
        rules.insert(*nr, Vec::new());
    }
    rules.insert(
        libc::SYS_ioctl,
        DENIED_IOCTLS
            .iter()
            .map(|(_, req)| rule(vec![condition(1, SeccompCmpOp::Eq, *req)?]))
            .collect::<Result<_, _>>()?,
    );
    for (nr, mode_arg, flags_arg) in mode_setters() {
        rules.insert(nr, privileged_mode(mode_arg, flags_arg)?);
    }
    let cond = |family: u64| condition(0, SeccompCmpOp::Ne, family);
    let other_family = SeccompRule::new(vec![
        cond(libc::AF_UNIX as u64)?,
        cond(libc::AF_INET as u64)?,
        cond(libc::AF_INET6 as u64)?,
    ])?;
    rules.insert(libc::SYS_socket, vec![other_family.clone()]);
    rules.insert(libc::SYS_socketpair, vec![other_family]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    BpfProgram::try_from(filter)
}
