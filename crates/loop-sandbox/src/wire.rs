//! How an order to start a command reaches the spawner (see
//! `spawner.rs`): the child's whole plan, its program, arguments,
//! variables and directory, written as plain bytes, with every descriptor
//! the plan names sent beside them (`SCM_RIGHTS`) and named here by its
//! place among those sent.
//!
//! The format is private to one binary talking to itself: no version, no
//! compatibility; anything malformed is refused whole (`InvalidData`).

use crate::child::{ChildPlan, DiskPlan};
use crate::root::{Op, RootPlan};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;

/// What the spawner's child does: enter `plan`, then run the head's
/// program.
pub struct Order {
    pub head: Head,
    pub plan: ChildPlan,
}

/// Run `argv` with exactly `envp` from `cwd`, its standard streams the
/// descriptors sent at `stdio`, at scheduling priority `nice`.
pub struct Head {
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub cwd: CString,
    pub nice: i32,
    /// Places of standard input, output and error among the descriptors.
    pub stdio: [RawFd; 3],
    /// Where the child writes the `errno` of a failed start (its place).
    pub failed: RawFd,
}

/// Bytes being written, and the descriptors they name.
#[derive(Default)]
pub struct Enc {
    pub buf: Vec<u8>,
    pub fds: Vec<RawFd>,
}

impl Enc {
    fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.buf.extend_from_slice(v);
    }
    fn cstr(&mut self, v: &CStr) {
        self.bytes(v.to_bytes());
    }
    fn cstrs(&mut self, v: &[CString]) {
        self.u32(v.len() as u32);
        for s in v {
            self.cstr(s);
        }
    }
    /// A descriptor, written as its place among those sent.
    pub fn fd(&mut self, fd: RawFd) {
        let at = match self.fds.iter().position(|f| *f == fd) {
            Some(at) => at,
            None => {
                self.fds.push(fd);
                self.fds.len() - 1
            }
        };
        self.u32(at as u32);
    }
    fn opt_fd(&mut self, fd: Option<RawFd>) {
        self.bool(fd.is_some());
        if let Some(fd) = fd {
            self.fd(fd);
        }
    }
}

/// Bytes being read, and the descriptors received with them.
pub struct Dec<'a> {
    buf: &'a [u8],
    at: usize,
    fds: &'a [RawFd],
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("spawn order: {what}"))
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8], fds: &'a [RawFd]) -> Self {
        Dec { buf, at: 0, fds }
    }
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| bad("cut short"))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.arr::<4>()?))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.arr::<8>()?))
    }
    fn i32(&mut self) -> io::Result<i32> {
        Ok(i32::from_le_bytes(self.arr::<4>()?))
    }
    fn bool(&mut self) -> io::Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad("a flag is neither 0 nor 1")),
        }
    }
    fn len(&mut self) -> io::Result<usize> {
        let n = self.u32()? as usize;
        // Every element takes at least one byte: a count larger than
        // what is left is malformed, not a reason to allocate.
        if n > self.buf.len() - self.at {
            return Err(bad("a count runs past the end"));
        }
        Ok(n)
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.len()?;
        Ok(self.take(n)?.to_vec())
    }
    fn cstr(&mut self) -> io::Result<CString> {
        CString::new(self.bytes()?).map_err(|_| bad("a string holds NUL"))
    }
    fn cstrs(&mut self) -> io::Result<Vec<CString>> {
        let n = self.len()?;
        (0..n).map(|_| self.cstr()).collect()
    }
    pub fn fd(&mut self) -> io::Result<RawFd> {
        let at = self.u32()? as usize;
        self.fds
            .get(at)
            .copied()
            .ok_or_else(|| bad("names a descriptor that was not sent"))
    }
    fn opt_fd(&mut self) -> io::Result<Option<RawFd>> {
        Ok(if self.bool()? { Some(self.fd()?) } else { None })
    }
    fn done(&self) -> io::Result<()> {
        if self.at == self.buf.len() {
            Ok(())
        } else {
            Err(bad("bytes follow its end"))
        }
    }
}

impl Order {
    /// Write `head` and `plan` (the plan is borrowed: it stays the
    /// caller's, with the descriptors it names).
    pub fn encode(head: &Head, plan: &ChildPlan, e: &mut Enc) {
        e.cstrs(&head.argv);
        e.cstrs(&head.envp);
        e.cstr(&head.cwd);
        e.i32(head.nice);
        for fd in head.stdio {
            e.fd(fd);
        }
        e.fd(head.failed);
        encode_plan(plan, e);
    }

    pub fn decode(d: &mut Dec<'_>) -> io::Result<Order> {
        let argv = d.cstrs()?;
        if argv.is_empty() {
            return Err(bad("no program"));
        }
        let envp = d.cstrs()?;
        let cwd = d.cstr()?;
        let nice = d.i32()?;
        let stdio = [d.fd()?, d.fd()?, d.fd()?];
        let failed = d.fd()?;
        let plan = decode_plan(d)?;
        d.done()?;
        Ok(Order {
            head: Head {
                argv,
                envp,
                cwd,
                nice,
                stdio,
                failed,
            },
            plan,
        })
    }
}

fn encode_plan(p: &ChildPlan, e: &mut Enc) {
    e.i32(p.unshare_flags);
    e.bool(p.userns);
    e.bytes(&p.uid_map);
    e.bytes(&p.gid_map);
    e.cstrs(&p.cgroup_procs);
    e.bool(p.mount_proc);
    e.bool(p.overlay.is_some());
    if let Some((a, b, c)) = &p.overlay {
        e.cstr(a);
        e.cstr(b);
        e.cstr(c);
    }
    e.u32(p.ro_binds.len() as u32);
    for (path, keep) in &p.ro_binds {
        e.cstr(path);
        e.u64(*keep);
    }
    e.opt_fd(p.late_rules.map(|(fd, _, _)| fd));
    if let Some((_, read, all)) = p.late_rules {
        e.u64(read);
        e.u64(all);
    }
    e.bool(p.loopback_up);
    e.opt_fd(p.proxy_sock);
    e.bool(p.root.is_some());
    if let Some(r) = &p.root {
        encode_root(r, e);
    }
    e.bool(p.disk.is_some());
    if let Some(d) = &p.disk {
        e.cstr(&d.at);
        e.cstr(&d.options);
        e.u32(d.dirs.len() as u32);
        for (dir, mode) in &d.dirs {
            e.cstr(dir);
            e.u32(*mode);
        }
        e.fd(d.send);
    }
    e.u32(p.rlimits.len() as u32);
    for (r, v) in &p.rlimits {
        e.u32(*r);
        e.u64(*v);
    }
    e.opt_fd(p.landlock_fd);
    e.bool(p.seccomp.is_some());
    for filter in p.seccomp.iter() {
        e.u32(filter.len() as u32);
        for prog in filter {
            e.u32(prog.len() as u32);
            for i in prog {
                e.buf.extend_from_slice(&i.code.to_le_bytes());
                e.u8(i.jt);
                e.u8(i.jf);
                e.u32(i.k);
            }
        }
    }
    e.u32(p.user_sysctls.len() as u32);
    for (path, value) in &p.user_sysctls {
        e.cstr(path);
        e.bytes(value);
    }
    e.fd(p.diag_fd);
    e.bool(p.ctty);
    e.u8(p.session);
}

fn decode_plan(d: &mut Dec<'_>) -> io::Result<ChildPlan> {
    let unshare_flags = d.i32()?;
    let userns = d.bool()?;
    let uid_map = d.bytes()?;
    let gid_map = d.bytes()?;
    let cgroup_procs = d.cstrs()?;
    let mount_proc = d.bool()?;
    let overlay = if d.bool()? {
        Some((d.cstr()?, d.cstr()?, d.cstr()?))
    } else {
        None
    };
    let n = d.len()?;
    let ro_binds = (0..n)
        .map(|_| Ok((d.cstr()?, d.u64()?)))
        .collect::<io::Result<_>>()?;
    let late_rules = match d.opt_fd()? {
        Some(fd) => Some((fd, d.u64()?, d.u64()?)),
        None => None,
    };
    let loopback_up = d.bool()?;
    let proxy_sock = d.opt_fd()?;
    let root = if d.bool()? {
        Some(decode_root(d)?)
    } else {
        None
    };
    let disk = if d.bool()? {
        Some(decode_disk(d)?)
    } else {
        None
    };
    let n = d.len()?;
    let rlimits = (0..n)
        .map(|_| Ok((d.u32()?, d.u64()?)))
        .collect::<io::Result<_>>()?;
    let landlock_fd = d.opt_fd()?;
    let seccomp = if d.bool()? {
        Some(decode_seccomp(d)?)
    } else {
        None
    };
    let n = d.len()?;
    let user_sysctls = (0..n)
        .map(|_| Ok((d.cstr()?, d.bytes()?)))
        .collect::<io::Result<_>>()?;
    Ok(ChildPlan {
        unshare_flags,
        userns,
        uid_map,
        gid_map,
        cgroup_procs,
        mount_proc,
        overlay,
        ro_binds,
        late_rules,
        loopback_up,
        proxy_sock,
        root,
        disk,
        rlimits,
        landlock_fd,
        seccomp,
        user_sysctls,
        diag_fd: d.fd()?,
        ctty: d.bool()?,
        session: d.u8()?,
        made: None,
        made_mnt: None,
    })
}

fn decode_disk(d: &mut Dec<'_>) -> io::Result<DiskPlan> {
    let at = d.cstr()?;
    let options = d.cstr()?;
    let n = d.len()?;
    let dirs = (0..n)
        .map(|_| Ok((d.cstr()?, d.u32()?)))
        .collect::<io::Result<_>>()?;
    Ok(DiskPlan {
        at,
        options,
        dirs,
        send: d.fd()?,
    })
}

fn decode_seccomp(d: &mut Dec<'_>) -> io::Result<Vec<Vec<libc::sock_filter>>> {
    let n = d.len()?;
    (0..n)
        .map(|_| {
            let m = d.len()?;
            (0..m)
                .map(|_| {
                    let code = u16::from_le_bytes(d.arr::<2>()?);
                    Ok(libc::sock_filter {
                        code,
                        jt: d.u8()?,
                        jf: d.u8()?,
                        k: d.u32()?,
                    })
                })
                .collect()
        })
        .collect()
}

fn encode_root(r: &RootPlan, e: &mut Enc) {
    e.cstr(&r.staging);
    encode_ops(&r.shared, e);
    encode_ops(&r.ops, e);
    e.u32(r.rules.len() as u32);
    for (path, mask) in &r.rules {
        e.cstr(path);
        e.u64(*mask);
    }
    e.cstr(&r.cwd);
}

/// Mount steps, as an order carries them (also what names a session's
/// shared tree, see `warm.rs`).
pub(crate) fn encode_ops(ops: &[Op], e: &mut Enc) {
    e.u32(ops.len() as u32);
    for op in ops {
        match op {
            Op::Mkdir(a) => {
                e.u8(0);
                e.cstr(a);
            }
            Op::Touch(a) => {
                e.u8(1);
                e.cstr(a);
            }
            Op::Symlink(a, b) => {
                e.u8(2);
                e.cstr(a);
                e.cstr(b);
            }
            Op::Overlay(a, b, f) => {
                e.u8(3);
                e.cstr(a);
                e.cstr(b);
                e.u64(*f);
            }
            Op::Bind(a, b, rec, keep) => {
                e.u8(4);
                e.cstr(a);
                e.cstr(b);
                e.bool(*rec);
                e.bool(keep.is_some());
                e.u64(keep.unwrap_or(0));
            }
            Op::Tmpfs(a, f, o) => {
                e.u8(5);
                e.cstr(a);
                e.u64(*f);
                e.cstr(o);
            }
            Op::Proc(a) => {
                e.u8(6);
                e.cstr(a);
            }
            Op::Sysfs(a, f) => {
                e.u8(7);
                e.cstr(a);
                e.u64(*f);
            }
            Op::Harden(a, f) => {
                e.u8(8);
                e.cstr(a);
                e.u64(*f);
            }
            Op::ReadOnly(a, f) => {
                e.u8(9);
                e.cstr(a);
                e.u64(*f);
            }
        }
    }
}

fn decode_op(d: &mut Dec<'_>) -> io::Result<Op> {
    Ok(match d.u8()? {
        0 => Op::Mkdir(d.cstr()?),
        1 => Op::Touch(d.cstr()?),
        2 => Op::Symlink(d.cstr()?, d.cstr()?),
        3 => Op::Overlay(d.cstr()?, d.cstr()?, d.u64()?),
        4 => {
            let (a, b, rec) = (d.cstr()?, d.cstr()?, d.bool()?);
            let keep = d.bool()?;
            let flags = d.u64()?;
            Op::Bind(a, b, rec, keep.then_some(flags))
        }
        5 => Op::Tmpfs(d.cstr()?, d.u64()?, d.cstr()?),
        6 => Op::Proc(d.cstr()?),
        7 => Op::Sysfs(d.cstr()?, d.u64()?),
        8 => Op::Harden(d.cstr()?, d.u64()?),
        9 => Op::ReadOnly(d.cstr()?, d.u64()?),
        _ => return Err(bad("an unknown mount step")),
    })
}

fn decode_root(d: &mut Dec<'_>) -> io::Result<RootPlan> {
    let staging = d.cstr()?;
    let n = d.len()?;
    let shared = (0..n).map(|_| decode_op(d)).collect::<io::Result<_>>()?;
    let n = d.len()?;
    let ops = (0..n).map(|_| decode_op(d)).collect::<io::Result<_>>()?;
    let n = d.len()?;
    let rules = (0..n)
        .map(|_| Ok((d.cstr()?, d.u64()?)))
        .collect::<io::Result<_>>()?;
    Ok(RootPlan {
        staging,
        shared,
        ops,
        rules,
        cwd: d.cstr()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> CString {
        CString::new(s).unwrap()
    }

    fn plan() -> ChildPlan {
        ChildPlan {
            unshare_flags: libc::CLONE_NEWNS | libc::CLONE_NEWUSER,
            userns: true,
            uid_map: b"1000 1000 1".to_vec(),
            gid_map: b"1000 1000 1".to_vec(),
            cgroup_procs: vec![c("/sys/fs/cgroup/memory/x/tasks")],
            mount_proc: true,
            overlay: Some((c("/w"), c("lowerdir=/a,upperdir=/b"), c("/w/sub"))),
            ro_binds: vec![(c("/w/tests"), 7)],
            late_rules: Some((11, 3, 0xffff)),
            loopback_up: true,
            proxy_sock: Some(12),
            root: Some(RootPlan {
                staging: c("/s"),
                shared: vec![Op::Mkdir(c("/s/dev")), Op::ReadOnly(c("/s"), 3)],
                ops: vec![
                    Op::Mkdir(c("/s/usr")),
                    Op::Touch(c("/s/f")),
                    Op::Symlink(c("usr/bin"), c("/s/bin")),
                    Op::Overlay(c("/s/o"), c("lowerdir=/x"), 1),
                    Op::Bind(c("/usr"), c("/s/usr"), true, Some(4)),
                    Op::Bind(c("/w"), c("/s/w"), false, None),
                    Op::Tmpfs(c("/s/tmp"), 2, c("size=1m")),
                    Op::Proc(c("/s/proc")),
                    Op::Sysfs(c("/s/sys"), 5),
                    Op::Harden(c("/s"), 6),
                ],
                rules: vec![(c("/s/usr"), 9)],
                cwd: c("/w"),
            }),
            disk: Some(DiskPlan {
                at: c("/d"),
                options: c("size=64m"),
                dirs: vec![(c("/d/tmp"), 0o1777)],
                send: 13,
            }),
            rlimits: vec![(libc::RLIMIT_NOFILE, 1024)],
            landlock_fd: Some(11),
            seccomp: Some(vec![vec![libc::sock_filter {
                code: 6,
                jt: 1,
                jf: 2,
                k: 0x7fff0000,
            }]]),
            user_sysctls: vec![(c("/proc/sys/user/max_inotify_instances"), b"128".to_vec())],
            diag_fd: 14,
            ctty: false,
            session: 2,
            made: None,
            made_mnt: None,
        }
    }

    #[test]
    fn an_order_reads_back_as_written_with_its_descriptors_renumbered() {
        let head = Head {
            argv: vec![c("sh"), c("-c"), c("true")],
            envp: vec![c("PATH=/bin")],
            cwd: c("/w"),
            nice: 10,
            stdio: [20, 21, 21],
            failed: 22,
        };
        let mut e = Enc::default();
        Order::encode(&head, &plan(), &mut e);
        // Each descriptor is sent once, however often the plan names it.
        assert_eq!(e.fds, vec![20, 21, 22, 11, 12, 13, 14]);
        let received: Vec<RawFd> = e.fds.iter().map(|f| f + 100).collect();
        let back = Order::decode(&mut Dec::new(&e.buf, &received)).unwrap();
        assert_eq!(back.head.argv, head.argv);
        assert_eq!(back.head.envp, head.envp);
        assert_eq!(back.head.cwd, head.cwd);
        assert_eq!(back.head.nice, 10);
        assert_eq!(back.head.stdio, [120, 121, 121]);
        assert_eq!(back.head.failed, 122);
        assert_eq!(back.plan.late_rules, Some((111, 3, 0xffff)));
        assert_eq!(back.plan.landlock_fd, Some(111));
        assert_eq!(back.plan.proxy_sock, Some(112));
        assert_eq!(back.plan.disk.as_ref().unwrap().send, 113);
        assert_eq!(back.plan.diag_fd, 114);
        // Everything else is the same plan: written again (with the
        // descriptors as received), the bytes are the same.
        let mut again = Enc::default();
        let plan = ChildPlan {
            late_rules: Some((11, 3, 0xffff)),
            landlock_fd: Some(11),
            proxy_sock: Some(12),
            disk: back.plan.disk.map(|d| DiskPlan { send: 13, ..d }),
            diag_fd: 14,
            ..back.plan
        };
        Order::encode(&head, &plan, &mut again);
        assert_eq!(again.buf, e.buf);
    }

    #[test]
    fn a_malformed_order_is_refused_whole() {
        let head = Head {
            argv: vec![c("true")],
            envp: vec![],
            cwd: c("/"),
            nice: 0,
            stdio: [3, 4, 5],
            failed: 6,
        };
        let mut e = Enc::default();
        Order::encode(&head, &plan(), &mut e);
        let fds = e.fds.clone();
        // Cut anywhere, it is refused (never a panic, never half a plan).
        for cut in 0..e.buf.len() {
            assert!(Order::decode(&mut Dec::new(&e.buf[..cut], &fds)).is_err());
        }
        // A trailing byte, a descriptor not sent, a count past the end.
        let mut long = e.buf.clone();
        long.push(0);
        let err = Order::decode(&mut Dec::new(&long, &fds)).err().unwrap();
        assert!(err.to_string().contains("bytes follow its end"), "{err}");
        let err = Order::decode(&mut Dec::new(&e.buf, &fds[..2]))
            .err()
            .unwrap();
        assert!(err.to_string().contains("not sent"), "{err}");
        let mut huge = e.buf.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = Order::decode(&mut Dec::new(&huge, &fds)).err().unwrap();
        assert!(err.to_string().contains("count runs past"), "{err}");
    }
}
