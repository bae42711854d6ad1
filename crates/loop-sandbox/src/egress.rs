//! Declared network egress: a proxy the runtime runs outside the sandbox.
//!
//! A command with an allow-list still gets its own network namespace with
//! loopback only: no route, no DNS, no raw socket reaches the host's
//! network. Before it runs, the child creates a listening socket on
//! `127.0.0.1:3128` *inside* that namespace and hands it to the runtime
//! over a socket pair; the runtime accepts on it from outside. So the one
//! way out of the namespace is this proxy, which reads an HTTP request
//! head (`CONNECT host:port` for a tunnel, or a plain-HTTP request in
//! absolute form), judges the host and port against the allow-list before
//! opening anything, and records every attempt, allowed or refused.
//!
//! Host patterns: `host` (ports 80 and 443), `host:port`, `*.domain`
//! (any name under `domain`, not `domain` itself), `*.domain:port`. A name
//! that resolves only to loopback, link-local, multicast or unspecified
//! addresses is refused (an allowed name pointed at the runtime's own
//! machine would reach its local services), unless the runtime pinned the
//! name to an address itself (`resolve`).

use loop_protocol::EgressAttempt;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The proxy's port on the sandbox's loopback.
pub const PROXY_PORT: u16 = 3128;
/// The proxy's address as commands name it.
pub const PROXY_URL: &str = "http://127.0.0.1:3128";
/// Longest request head read.
const MAX_HEAD: usize = 16 * 1024;
/// Connections served at once per command; more wait.
const MAX_OPEN: usize = 64;
/// Attempts recorded per command; more are counted in the last entry.
const MAX_RECORDED: usize = 1000;
/// How long a client has to send its request head, and the proxy to
/// connect to the host.
const HEAD_TIMEOUT: Duration = Duration::from_secs(15);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// What a command may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Egress {
    /// Host patterns (see the module docs).
    pub allow: Vec<String>,
    /// Names the runtime pins to an address instead of resolving them
    /// (a registry mirror on a known address; test servers).
    pub resolve: Vec<(String, SocketAddr)>,
    /// The list's name, said in every refusal (`network.allow`).
    pub list: String,
}

impl Egress {
    /// The allow-list entry that lets `host:port` through, if one does.
    pub fn rule_for(&self, host: &str, port: u16) -> Option<&str> {
        let host = host.to_ascii_lowercase();
        self.allow
            .iter()
            .find(|p| pattern_matches(p, &host, port))
            .map(String::as_str)
    }
}

/// Whether `pattern` admits `host` (lower case) on `port`.
pub fn pattern_matches(pattern: &str, host: &str, port: u16) -> bool {
    let pattern = pattern.trim().to_ascii_lowercase();
    let (name, ports): (&str, Vec<u16>) = match pattern.rsplit_once(':') {
        Some((n, p)) if !n.contains(':') || n.ends_with(']') => match p.parse() {
            Ok(p) => (n, vec![p]),
            Err(_) => return false,
        },
        _ => (pattern.as_str(), vec![80, 443]),
    };
    if !ports.contains(&port) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    match name.strip_prefix("*.") {
        Some(domain) => {
            !domain.is_empty()
                && host.len() > domain.len() + 1
                && host.ends_with(domain)
                && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
        }
        None => !name.is_empty() && host == name,
    }
}

/// Whether a host name is one the proxy will even consider: letters,
/// digits, `-`, `.` (or an IP literal), at most 253 bytes.
fn plausible_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && (host.parse::<IpAddr>().is_ok()
            || host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
}

/// Addresses the proxy never connects to unless the runtime pinned them:
/// the runtime's own machine and its link.
fn local(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// The proxy serving one command.
pub(crate) struct Proxy {
    stop: Arc<AtomicBool>,
    attempts: Arc<Mutex<Vec<EgressAttempt>>>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Serve `listener` (the socket made inside the command's namespace).
    pub(crate) fn start(listener: TcpListener, egress: Egress) -> Proxy {
        let stop = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (s, a, o) = (stop.clone(), attempts.clone(), open.clone());
        let egress = Arc::new(egress);
        let accept = std::thread::Builder::new()
            .name("loop-egress".into())
            .spawn(move || accept_loop(&listener, &egress, &s, &a, &o))
            .ok();
        Proxy {
            stop,
            attempts,
            open,
            accept,
        }
    }

    /// Stop serving, cut what is still open, and say what was asked for.
    pub(crate) fn finish(mut self) -> Vec<EgressAttempt> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for s in self
            .open
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.attempts
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

fn accept_loop(
    listener: &TcpListener,
    egress: &Arc<Egress>,
    stop: &AtomicBool,
    attempts: &Arc<Mutex<Vec<EgressAttempt>>>,
    open: &Arc<Mutex<Vec<TcpStream>>>,
) {
    let busy = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on a descriptor this function borrows.
        let n = unsafe { libc::poll(&mut pfd, 1, 50) };
        if n <= 0 || busy.load(Ordering::SeqCst) >= MAX_OPEN {
            if n > 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        }
        let Ok((client, _)) = listener.accept() else {
            continue;
        };
        if let Ok(c) = client.try_clone()
            && let Ok(mut v) = open.lock()
        {
            v.push(c);
        }
        let (egress, attempts, open, busy) =
            (egress.clone(), attempts.clone(), open.clone(), busy.clone());
        busy.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("loop-egress-conn".into())
            .spawn(move || {
                serve(client, &egress, &attempts, &open);
                busy.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            continue;
        }
    }
}

/// One request: (method, host, port, the head to send on for plain HTTP,
/// bytes read past the head).
struct Request {
    method: String,
    host: String,
    port: u16,
    forward: Option<Vec<u8>>,
    rest: Vec<u8>,
}

fn record(attempts: &Mutex<Vec<EgressAttempt>>, a: EgressAttempt) {
    if let Ok(mut v) = attempts.lock() {
        if v.len() < MAX_RECORDED {
            v.push(a);
        } else if let Some(last) = v.last_mut() {
            last.rule = format!("{} (and more attempts, not recorded)", a.rule);
        }
    }
}

fn reply(client: &mut TcpStream, status: &str, text: &str) {
    let body = format!("{text}\n");
    let _ = write!(
        client,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Loop-Egress: {}\r\n\r\n{body}",
        body.len(),
        text.replace(['\r', '\n'], " ")
    );
}

fn serve(
    mut client: TcpStream,
    egress: &Egress,
    attempts: &Mutex<Vec<EgressAttempt>>,
    open: &Mutex<Vec<TcpStream>>,
) {
    let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
    let req = match read_request(&mut client) {
        Ok(r) => r,
        Err(why) => {
            reply(
                &mut client,
                "400 Bad Request",
                &format!("loop egress proxy: {why}"),
            );
            return;
        }
    };
    let mut attempt = EgressAttempt {
        host: req.host.clone(),
        port: req.port,
        method: req.method.clone(),
        allowed: false,
        rule: String::new(),
        error: None,
    };
    let Some(rule) = egress.rule_for(&req.host, req.port) else {
        attempt.rule = format!(
            "refused: {}:{} is not in {}",
            req.host, req.port, egress.list
        );
        let text = format!(
            "loop: egress to {}:{} refused: not in {}",
            req.host, req.port, egress.list
        );
        record(attempts, attempt);
        reply(&mut client, "403 Forbidden", &text);
        return;
    };
    let addrs = addresses(egress, &req.host, req.port);
    let addrs = match addrs {
        Ok(a) => a,
        Err(why) => {
            attempt.rule = format!("refused: {why}");
            let text = format!("loop: egress to {}:{} refused: {why}", req.host, req.port);
            record(attempts, attempt);
            reply(&mut client, "403 Forbidden", &text);
            return;
        }
    };
    attempt.allowed = true;
    attempt.rule = rule.to_string();
    let upstream = addrs
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, CONNECT_TIMEOUT).ok());
    let Some(mut upstream) = upstream else {
        attempt.error = Some("no address of the host answered".into());
        record(attempts, attempt);
        reply(
            &mut client,
            "502 Bad Gateway",
            &format!(
                "loop: {}:{} is allowed but did not answer",
                req.host, req.port
            ),
        );
        return;
    };
    record(attempts, attempt);
    if let Ok(u) = upstream.try_clone()
        && let Ok(mut v) = open.lock()
    {
        v.push(u);
    }
    let _ = client.set_read_timeout(None);
    let sent = match &req.forward {
        None => client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n"),
        Some(head) => upstream.write_all(head),
    };
    if sent.is_err() || upstream.write_all(&req.rest).is_err() {
        return;
    }
    relay(client, upstream);
}

/// Copy both ways until each side is done.
fn relay(client: TcpStream, upstream: TcpStream) {
    let (Ok(mut c2), Ok(mut u2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(Shutdown::Write);
    });
    let (mut c, mut u) = (client, upstream);
    let _ = std::io::copy(&mut u, &mut c);
    let _ = c.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// The addresses to connect to: the pinned one, or the resolved ones that
/// are not the runtime's own machine.
fn addresses(egress: &Egress, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if let Some((_, addr)) = egress
        .resolve
        .iter()
        .find(|(h, _)| h.eq_ignore_ascii_case(host))
    {
        return Ok(vec![*addr]);
    }
    let all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host} does not resolve ({e})"))?
        .collect();
    let outside: Vec<SocketAddr> = all.iter().copied().filter(|a| !local(a.ip())).collect();
    if outside.is_empty() {
        let shown: Vec<String> = all.iter().map(|a| a.ip().to_string()).collect();
        return Err(format!(
            "{host} resolves only to local or link-local addresses ({}), never reached",
            shown.join(", ")
        ));
    }
    Ok(outside)
}

/// Read and judge the request head.
fn read_request(client: &mut TcpStream) -> Result<Request, String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err("request head too long".into());
        }
        match client.read(&mut chunk) {
            Ok(0) => return Err("connection closed before a request".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("no request ({e})")),
        }
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "request head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("malformed request line {first:?}"));
    };
    if !method.bytes().all(|b| b.is_ascii_uppercase()) || !version.starts_with("HTTP/1.") {
        return Err(format!("malformed request line {first:?}"));
    }
    let rest = buf[end..].to_vec();
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        return Ok(Request {
            method: method.into(),
            host,
            port,
            forward: None,
            rest,
        });
    }
    let Some(after) = target.strip_prefix("http://") else {
        return Err(format!(
            "only CONNECT and absolute http:// requests are proxied, not {target:?}"
        ));
    };
    let (auth, path) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let (host, port) = authority(auth, Some(80))?;
    let mut fwd = format!("{method} {path} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        if [
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        fwd.push_str(line);
        fwd.push_str("\r\n");
    }
    fwd.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        method: method.into(),
        host,
        port,
        forward: Some(fwd.into_bytes()),
        rest,
    })
}

/// `host:port` (or `[v6]:port`), lower-cased and checked.
fn authority(auth: &str, default_port: Option<u16>) -> Result<(String, u16), String> {
    let auth = auth.rsplit_once('@').map_or(auth, |(_, a)| a);
    let (host, port) = match auth.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.ends_with(']') => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("bad port in {auth:?}"))?,
        ),
        _ => (
            auth,
            default_port.ok_or_else(|| format!("no port in {auth:?}"))?,
        ),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if !plausible_host(&host) {
        return Err(format!("not a host name: {host:?}"));
    }
    Ok((host, port))
}

/// A socket pair: the runtime's end and the child's (both close-on-exec).
pub(crate) fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills two descriptors we then own.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Receive the listening socket the child sends (waiting up to `wait`);
/// `None` when the child closed its end without sending one.
pub(crate) fn receive_listener(ours: &OwnedFd, wait: Duration) -> Option<TcpListener> {
    let mut pfd = libc::pollfd {
        fd: ours.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on a descriptor we own.
    if unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as libc::c_int) } <= 0 {
        return None;
    }
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr pointing at buffers that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg into the buffers above; CMSG_* walk that buffer only.
    unsafe {
        if libc::recvmsg(ours.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) <= 0 {
            return None;
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return None;
        }
        let fd: RawFd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
        Some(TcpListener::from_raw_fd(fd))
    }
}

/// In the child, inside the new network namespace (loopback up): listen on
/// the proxy's address and send the socket over `pair`, then close both.
///
/// # Safety
/// Between fork and exec: only async-signal-safe system calls on stack data.
pub(crate) unsafe fn send_listener(pair: RawFd) -> bool {
    // SAFETY: socket/setsockopt/bind/listen/sendmsg/close on stack data.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return false;
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            s,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = PROXY_PORT.to_be();
        addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let ok = libc::bind(
            s,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) == 0
            && libc::listen(s, 128) == 0;
        if !ok {
            libc::close(s);
            return false;
        }
        let mut byte = [b'L'];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 8];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), s);
        let sent = libc::sendmsg(pair, &msg, libc::MSG_NOSIGNAL) == 1;
        libc::close(s);
        libc::close(pair);
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_admit_exactly_their_hosts_and_ports() {
        for (pattern, host, port, want) in [
            ("pkgs.example", "pkgs.example", 443, true),
            ("pkgs.example", "pkgs.example", 80, true),
            ("pkgs.example", "pkgs.example", 22, false),
            ("pkgs.example", "evil-pkgs.example", 443, false),
            ("pkgs.example", "pkgs.example.evil", 443, false),
            ("PKGS.example", "pkgs.example", 443, true),
            ("*.example", "a.b.example", 443, true),
            ("*.example", "example", 443, false),
            ("*.example", "badexample", 443, false),
            ("pkgs.example:8080", "pkgs.example", 8080, true),
            ("pkgs.example:8080", "pkgs.example", 443, false),
            ("*.example:9", "x.example", 9, true),
            ("pkgs.example:http", "pkgs.example", 80, false),
            ("10.0.0.1", "10.0.0.1", 443, true),
            ("*.", "x.", 443, false),
            ("", "", 443, false),
        ] {
            assert_eq!(
                pattern_matches(pattern, host, port),
                want,
                "{pattern} vs {host}:{port}"
            );
        }
    }

    #[test]
    fn local_addresses_are_never_reached_by_name() {
        for ip in [
            "127.0.0.1",
            "0.0.0.0",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(local(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["203.0.113.80", "10.1.2.3", "2001:db8::1"] {
            assert!(!local(ip.parse().unwrap()), "{ip}");
        }
        let e = Egress {
            allow: vec!["localhost".into()],
            resolve: vec![],
            list: "network.allow".into(),
        };
        let err = addresses(&e, "localhost", 80).unwrap_err();
        assert!(err.contains("only to local"), "{err}");
    }

    #[test]
    fn authorities_are_checked_and_lower_cased() {
        assert_eq!(
            authority("Pkgs.Example:443", None).unwrap(),
            ("pkgs.example".into(), 443)
        );
        assert_eq!(
            authority("[2001:db8::1]:443", None).unwrap(),
            ("2001:db8::1".into(), 443)
        );
        assert_eq!(
            authority("user:pw@h.example", Some(80)).unwrap(),
            ("h.example".into(), 80)
        );
        for bad in [
            "h.example",
            "h_x.example:443",
            "h.example:99999",
            "a b:443",
            ":443",
        ] {
            assert!(authority(bad, None).is_err(), "{bad}");
        }
    }
}
