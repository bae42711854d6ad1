//! seccomp: BPF filters, compiled in the runtime and installed in the
//! child just before exec. The first makes dangerous system calls fail
//! with `EPERM`, refuses sockets other than Unix, IPv4 and IPv6, refuses
//! the terminal ioctls that push input into a terminal (`TIOCSTI`,
//! `TIOCLINUX`), and refuses every way of giving a file the setuid or
//! setgid bit (`chmod` and its kin, and `open`/`creat`/`mknod` with such a
//! mode). The second answers `openat2`, whose mode the filter cannot read
//! (it is behind a pointer), with `ENOSYS`: callers fall back to `openat`,
//! which the first filter judges. A third refuses x32 system call numbers.
//! The three are installed as one program that finds a call's number by
//! binary search before any rule is read ([`programs`]): the kernel runs a
//! new filter for every system call number when it is installed, and a
//! long chain of comparisons made that a measurable part of each command's
//! start.

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
    // Taking a descriptor out of another process (ptrace's rights, as
    // the calls above).
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
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

/// Compile the filters (see the module's doc), in the order to install
/// them: one program where the three can be put in front of one another
/// (see [`dispatched`]), else the three.
pub fn programs() -> Result<Vec<BpfProgram>, BackendError> {
    let main = program()?;
    let listed: Vec<u32> = rules()?.keys().map(|nr| *nr as u32).collect();
    Ok(match dispatched(&main, &listed) {
        Some(one) => vec![one],
        None => vec![no_x32(), main, enosys_program()?],
    })
}

fn stmt(code: u32, k: u32) -> seccompiler::sock_filter {
    seccompiler::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> seccompiler::sock_filter {
    seccompiler::sock_filter {
        code: (libc::BPF_JMP | code | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    }
}

/// The three filters as one program that decides most system calls in a
/// few steps: the architecture checked, x32 numbers refused, `openat2`
/// answered `ENOSYS`, then a binary search over the numbers the main
/// filter has rules for; a number it has none for is allowed at once, one
/// it has is judged by the main filter itself (`main`, unchanged, from its
/// start). What each system call gets is what the three filters gave
/// (a unit test compares them over every number and many arguments).
///
/// Why: each time a filter is installed the kernel works out which system
/// calls it always allows by running it for every number; `main` alone
/// compares a number with each listed one in turn (about 330
/// instructions), and installing the three took about 0.18 ms of every
/// command's start here. `None` where a jump would not fit (the list grew
/// past what 8-bit jump offsets reach) or `main` does not begin with its
/// architecture check.
fn dispatched(main: &BpfProgram, listed: &[u32]) -> Option<BpfProgram> {
    const LD_W_ABS: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const RET: u32 = libc::BPF_RET | libc::BPF_K;
    let (arch_load, arch_check) = (main.first()?, main.get(1)?);
    if u32::from(arch_load.code) != LD_W_ABS
        || arch_load.k != 4
        || u32::from(arch_check.code) != (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K)
    {
        return None;
    }
    let mut sorted = listed.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = vec![
        // Another architecture: the main filter's own check decides.
        stmt(LD_W_ABS, 4),
        jump(libc::BPF_JEQ, arch_check.k, 1, 0),
        stmt(libc::BPF_JMP | libc::BPF_JA, 0),
        stmt(LD_W_ABS, 0),
        jump(libc::BPF_JGE, 0x4000_0000, 0, 1),
        stmt(RET, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        jump(libc::BPF_JEQ, libc::SYS_openat2 as u32, 0, 1),
        stmt(RET, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ];
    let mut to_main = vec![2];
    search(&sorted, &mut out, &mut to_main)?;
    let start = out.len();
    for at in to_main {
        out[at].k = (start - at - 1) as u32;
    }
    out.extend_from_slice(main);
    Some(out)
}

/// A binary search for the number (in the accumulator) among `sorted`:
/// found, a jump to the main filter (its index pushed on `to_main`, to be
/// aimed once the search's length is known); not found, allowed.
fn search(
    sorted: &[u32],
    out: &mut Vec<seccompiler::sock_filter>,
    to_main: &mut Vec<usize>,
) -> Option<()> {
    if sorted.is_empty() {
        out.push(stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
        return Some(());
    }
    let mid = sorted.len() / 2;
    out.push(jump(libc::BPF_JEQ, sorted[mid], 0, 1));
    to_main.push(out.len());
    out.push(stmt(libc::BPF_JMP | libc::BPF_JA, 0));
    let above = out.len();
    out.push(jump(libc::BPF_JGT, sorted[mid], 0, 0));
    search(&sorted[..mid], out, to_main)?;
    out[above].jt = u8::try_from(out.len() - above - 1).ok()?;
    search(&sorted[mid + 1..], out, to_main)
}

/// x32 system calls (the x86_64 architecture with bit 30 of the number
/// set) match no rule of a filter written for x86_64 numbers: every one is
/// refused, so `chmod`, `ioctl` or `mount` cannot be reached under another
/// number where a kernel has x32 turned on.
fn no_x32() -> BpfProgram {
    vec![
        // The system call number (offset 0 of `struct seccomp_data`).
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        jump(libc::BPF_JGE, 0x4000_0000, 0, 1),
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
    let filter = SeccompFilter::new(
        rules()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    BpfProgram::try_from(filter)
}

/// The first filter's rules, by system call number.
fn rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, BackendError> {
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
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a classic BPF seccomp program returns for one call (the
    /// instructions these programs use; any other fails the test).
    fn run(prog: &[seccompiler::sock_filter], data: &[u8; 64]) -> u32 {
        let word =
            |k: u32| u32::from_ne_bytes(data[k as usize..k as usize + 4].try_into().unwrap());
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = &prog[pc];
            let code = u32::from(i.code);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => a = word(i.k),
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= i.k,
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
                c if c & 0x07 == libc::BPF_JMP && c & libc::BPF_X == 0 => {
                    let taken = match c & 0xf0 {
                        op if op == libc::BPF_JEQ => a == i.k,
                        op if op == libc::BPF_JGT => a > i.k,
                        op if op == libc::BPF_JGE => a >= i.k,
                        op if op == libc::BPF_JSET => a & i.k != 0,
                        op => panic!("jump {op:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                c => panic!("instruction {c:#x}"),
            }
        }
    }

    /// What the kernel gives for several filters: every one runs, the most
    /// restrictive action wins, the most recently installed among equals.
    fn run_all(progs: &[BpfProgram], data: &[u8; 64]) -> u32 {
        let rank = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
        progs
            .iter()
            .rev()
            .map(|p| run(p, data))
            .reduce(|kept, r| if rank(r) < rank(kept) { r } else { kept })
            .unwrap()
    }

    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        d
    }

    #[test]
    fn one_program_decides_every_call_as_the_three_filters_did() {
        let three = vec![no_x32(), program().unwrap(), enosys_program().unwrap()];
        let one = programs().unwrap();
        assert_eq!(one.len(), 1, "the three filters are installed as one");
        let native = three[1][1].k;
        // Values that matter to some rule, and some that do not.
        let pool: Vec<u64> = vec![
            0,
            1,
            libc::S_ISUID as u64,
            libc::S_ISGID as u64,
            0o6755,
            0o755,
            libc::O_CREAT as u64,
            libc::O_TMPFILE as u64,
            (libc::O_TMPFILE as u64) & !(libc::O_DIRECTORY as u64),
            libc::O_CREAT as u64 | libc::O_RDWR as u64,
            0x5412,
            0x541C,
            0x5413,
            libc::AF_UNIX as u64,
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
            libc::AF_NETLINK as u64,
            libc::AF_PACKET as u64,
            1 << 32 | libc::S_ISUID as u64,
            u64::MAX,
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            pool[(seed % pool.len() as u64) as usize]
        };
        let numbers = (0..640u32)
            .chain((0x4000_0000..0x4000_0200).step_by(7))
            .chain([0x4000_0000 | libc::SYS_mount as u32, u32::MAX, 0x7fff_ffff]);
        let mut checked = 0;
        let mut refused = 0;
        for nr in numbers {
            for arch in [native, 0x4000_0003, 0xc000_00b7, 0] {
                for _ in 0..48 {
                    let args = [next(), next(), next(), next(), next(), next()];
                    let d = data(arch, nr, args);
                    let want = run_all(&three, &d);
                    assert_eq!(
                        run(&one[0], &d),
                        want,
                        "nr {nr} arch {arch:#x} args {args:x?}"
                    );
                    checked += 1;
                    refused += usize::from(want != libc::SECCOMP_RET_ALLOW);
                }
            }
        }
        // The comparison saw both outcomes, many times.
        assert!(
            refused > 10_000 && checked - refused > 10_000,
            "{refused} of {checked}"
        );
    }

    #[test]
    fn a_list_too_long_to_search_falls_back_to_the_three_filters() {
        let main = program().unwrap();
        let long: Vec<u32> = (0..400).collect();
        assert!(dispatched(&main, &long).is_none());
        assert!(dispatched(&main[3..].to_vec(), &[1, 2]).is_none());
    }
}
