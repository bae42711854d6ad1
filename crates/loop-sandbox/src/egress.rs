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
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
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
/// Attempts recorded per command; past it, every connection is refused.
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
/// the runtime's own machine, its link and private networks, and every
/// address of the machine's own interfaces (a name an attacker controls
/// could point at any of them).
fn local(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .or_else(|| {
                // IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96) forms.
                let s = v6.segments();
                let compat = s[..6].iter().all(|x| *x == 0);
                let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0);
                (compat || nat64).then(|| {
                    let o = v6.octets();
                    std::net::Ipv4Addr::new(o[12], o[13], o[14], o[15])
                })
            })
            .map(IpAddr::V4)
            .unwrap_or(ip),
        v4 => v4,
    };
    let special = match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_private()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => {
            let s0 = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s0 & 0xffc0) == 0xfe80
                || (s0 & 0xfe00) == 0xfc00
        }
    };
    special || own_addresses().contains(&ip)
}

/// The addresses of this machine's interfaces.
fn own_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we walk read-only and then free.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return out;
        }
        let mut at = list;
        while !at.is_null() {
            let addr = (*at).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let a = &*(addr as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(std::net::Ipv4Addr::from(u32::from_be(
                            a.sin_addr.s_addr,
                        ))));
                    }
                    libc::AF_INET6 => {
                        let a = &*(addr as *const libc::sockaddr_in6);
                        out.push(IpAddr::V6(std::net::Ipv6Addr::from(a.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            at = (*at).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    out
}

/// What the connections of one command share.
struct Shared {
    egress: Egress,
    stop: AtomicBool,
    attempts: Mutex<Vec<EgressAttempt>>,
    /// Sockets still open, by connection: cut when the command ends.
    open: Mutex<std::collections::HashMap<u64, Vec<TcpStream>>>,
    busy: AtomicUsize,
    next: std::sync::atomic::AtomicU64,
    /// The recording limit was reached: every later connection is refused.
    full: AtomicBool,
}

/// The proxy serving one command.
pub(crate) struct Proxy {
    shared: Arc<Shared>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Serve `listener` (the socket made inside the command's namespace).
    pub(crate) fn start(listener: TcpListener, egress: Egress) -> Proxy {
        let shared = Arc::new(Shared {
            egress,
            stop: AtomicBool::new(false),
            attempts: Mutex::new(Vec::new()),
            open: Mutex::new(std::collections::HashMap::new()),
            busy: AtomicUsize::new(0),
            next: std::sync::atomic::AtomicU64::new(0),
            full: AtomicBool::new(false),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("loop-egress".into())
            .spawn(move || accept_loop(&listener, &s))
            .ok();
        Proxy { shared, accept }
    }

    /// Stop serving, cut what is still open, wait (briefly) for the
    /// connections to end, and say what was asked for.
    pub(crate) fn finish(mut self) -> Vec<EgressAttempt> {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let deadline = std::time::Instant::now() + CONNECT_TIMEOUT + Duration::from_secs(1);
        loop {
            let open: Vec<TcpStream> = self
                .shared
                .open
                .lock()
                .map(|m| {
                    m.values()
                        .flatten()
                        .filter_map(|s| s.try_clone().ok())
                        .collect()
                })
                .unwrap_or_default();
            for s in &open {
                let _ = s.shutdown(Shutdown::Both);
            }
            if self.shared.busy.load(Ordering::SeqCst) == 0 || std::time::Instant::now() > deadline
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.shared
            .attempts
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// Gives a connection's slot back however its thread ends.
struct Slot(Arc<Shared>, u64);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut m) = self.0.open.lock() {
            m.remove(&self.1);
        }
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Slot {
    /// Keep a clone of `s` to cut when the command ends.
    fn track(&self, s: &TcpStream) {
        if let (Ok(c), Ok(mut m)) = (s.try_clone(), self.0.open.lock()) {
            m.entry(self.1).or_default().push(c);
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on a descriptor this function borrows.
        let n = unsafe { libc::poll(&mut pfd, 1, 50) };
        if n <= 0 {
            continue;
        }
        if shared.busy.load(Ordering::SeqCst) >= MAX_OPEN {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(_) => {
                // Out of descriptors, say: wait rather than spin.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        shared.busy.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(shared.clone(), shared.next.fetch_add(1, Ordering::SeqCst));
        slot.track(&client);
        let spawned = std::thread::Builder::new()
            .name("loop-egress-conn".into())
            .spawn(move || serve(client, &slot));
        // (A thread that could not start dropped its slot with its closure.)
        drop(spawned);
    }
}

/// One request: (method, host, port, the head to send on for plain HTTP,
/// bytes read past the head, the body's length for plain HTTP).
struct Request {
    method: String,
    host: String,
    port: u16,
    forward: Option<Vec<u8>>,
    rest: Vec<u8>,
    body: u64,
}

/// Record an attempt; its index, or `None` when the limit is reached (the
/// last entry then says so, and every later connection is refused).
fn record(shared: &Shared, a: EgressAttempt) -> Option<usize> {
    let mut v = shared.attempts.lock().ok()?;
    if v.len() + 1 < MAX_RECORDED {
        v.push(a);
        return Some(v.len() - 1);
    }
    if !shared.full.swap(true, Ordering::SeqCst) {
        v.push(EgressAttempt {
            host: a.host,
            port: a.port,
            method: a.method,
            allowed: false,
            rule: format!(
                "refused: the limit of {MAX_RECORDED} connections per command was reached; this and every later connection were refused without being recorded one by one"
            ),
            error: None,
        });
    }
    None
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

/// Refuse and record.
fn refuse(
    slot: &Slot,
    client: &mut TcpStream,
    mut attempt: EgressAttempt,
    status: &str,
    why: &str,
) {
    attempt.allowed = false;
    attempt.rule = format!("refused: {why}");
    let text = format!(
        "loop: egress to {}:{} refused: {why}",
        attempt.host, attempt.port
    );
    record(&slot.0, attempt);
    reply(client, status, &text);
}

fn serve(mut client: TcpStream, slot: &Slot) {
    let shared = &slot.0;
    let egress = &shared.egress;
    let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
    let req = read_request(&mut client);
    let mut attempt = EgressAttempt {
        host: String::new(),
        port: 0,
        method: String::new(),
        allowed: false,
        rule: String::new(),
        error: None,
    };
    let req = match req {
        Ok(r) => r,
        Err((why, seen)) => {
            // Refused before any host could be judged: recorded as it came.
            if let Some((method, host, port)) = seen {
                attempt.method = method;
                attempt.host = host;
                attempt.port = port;
            } else {
                attempt.host = "(not named)".into();
                attempt.method = "-".into();
            }
            // A connection closed before a byte was sent asked for nothing.
            if why != "connection closed before a request" {
                refuse(slot, &mut client, attempt, "400 Bad Request", &why);
            }
            return;
        }
    };
    attempt.host = req.host.clone();
    attempt.port = req.port;
    attempt.method = req.method.clone();
    if shared.full.load(Ordering::SeqCst) {
        reply(
            &mut client,
            "403 Forbidden",
            &format!(
                "loop: egress refused: the limit of {MAX_RECORDED} connections per command was reached"
            ),
        );
        return;
    }
    let Some(rule) = egress.rule_for(&req.host, req.port) else {
        let why = format!("not in {}", egress.list);
        refuse(slot, &mut client, attempt, "403 Forbidden", &why);
        return;
    };
    let addrs = match addresses(egress, &req.host, req.port) {
        Ok(a) => a,
        Err(Unreachable(why)) => {
            refuse(slot, &mut client, attempt, "403 Forbidden", &why);
            return;
        }
    };
    attempt.allowed = true;
    attempt.rule = rule.to_string();
    // Recorded before connecting: a connection the command's end cuts
    // short is still on the record.
    let Some(index) = record(shared, attempt) else {
        reply(
            &mut client,
            "403 Forbidden",
            "loop: egress refused: too many connections",
        );
        return;
    };
    let upstream = addrs
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, CONNECT_TIMEOUT).ok());
    let Some(mut upstream) = upstream else {
        if let Ok(mut v) = shared.attempts.lock()
            && let Some(a) = v.get_mut(index)
        {
            a.error = Some("no address of the host answered".into());
        }
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
    slot.track(&upstream);
    let _ = client.set_read_timeout(None);
    match &req.forward {
        None => {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .is_err()
                || upstream.write_all(&req.rest).is_err()
            {
                return;
            }
            relay(client, upstream, None);
        }
        Some(head) => {
            // Exactly one request goes up: its head (rewritten) and its
            // body; nothing the client sends after it reaches the host.
            let body_now = (req.rest.len() as u64).min(req.body) as usize;
            if upstream.write_all(head).is_err()
                || upstream.write_all(&req.rest[..body_now]).is_err()
            {
                return;
            }
            relay(client, upstream, Some(req.body - body_now as u64));
        }
    }
}

/// Copy the host's answer to the client until it ends; from the client to
/// the host, everything (a tunnel) or only `up_to` more bytes (the rest
/// of one plain-HTTP request's body).
fn relay(client: TcpStream, upstream: TcpStream, up_to: Option<u64>) {
    let (Ok(mut c2), Ok(mut u2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let up = std::thread::Builder::new().spawn(move || {
        let _ = match up_to {
            None => std::io::copy(&mut c2, &mut u2),
            Some(n) => std::io::copy(&mut (&mut c2).take(n), &mut u2),
        };
        if up_to.is_none() {
            let _ = u2.shutdown(Shutdown::Write);
        }
    });
    let (mut c, mut u) = (client, upstream);
    let _ = std::io::copy(&mut u, &mut c);
    let _ = c.shutdown(Shutdown::Both);
    let _ = u.shutdown(Shutdown::Both);
    if let Ok(t) = up {
        let _ = t.join();
    }
}

/// Why an allowed host is not connected to.
#[derive(Debug)]
struct Unreachable(String);

/// The addresses to connect to: the pinned one, or the resolved ones that
/// are not the runtime's own machine or its networks.
fn addresses(egress: &Egress, host: &str, port: u16) -> Result<Vec<SocketAddr>, Unreachable> {
    if let Some((_, addr)) = egress
        .resolve
        .iter()
        .find(|(h, _)| h.eq_ignore_ascii_case(host))
    {
        return Ok(vec![*addr]);
    }
    let all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Unreachable(format!("{host} does not resolve ({e})")))?
        .collect();
    let outside: Vec<SocketAddr> = all.iter().copied().filter(|a| !local(a.ip())).collect();
    if outside.is_empty() {
        let shown: Vec<String> = all.iter().map(|a| a.ip().to_string()).collect();
        return Err(Unreachable(format!(
            "{host} resolves only to addresses of this machine or of local or private networks ({}), never reached unless the runtime pins the name (network.resolve)",
            shown.join(", ")
        )));
    }
    Ok(outside)
}

/// What could be read of a refused request: (method, host, port).
type Seen = Option<(String, String, u16)>;

/// Read and judge the request head.
fn read_request(client: &mut TcpStream) -> Result<Request, (String, Seen)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(("request head too long".into(), None));
        }
        match client.read(&mut chunk) {
            Ok(0) if buf.is_empty() => {
                return Err(("connection closed before a request".into(), None));
            }
            Ok(0) => return Err(("connection closed inside the request head".into(), None)),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err((format!("no request ({e})"), None)),
        }
    };
    let head = std::str::from_utf8(&buf[..end])
        .map_err(|_| ("the request head is not UTF-8".to_string(), None))?;
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err((format!("malformed request line {first:?}"), None));
    };
    if !method.bytes().all(|b| b.is_ascii_uppercase())
        || !version.starts_with("HTTP/1.")
        || parts.next().is_some()
    {
        return Err((format!("malformed request line {first:?}"), None));
    }
    let rest = buf[end..].to_vec();
    if method == "CONNECT" {
        let (host, port) = authority(target, None).map_err(|e| (e.to_string(), None))?;
        return Ok(Request {
            method: method.into(),
            host,
            port,
            forward: None,
            rest,
            body: 0,
        });
    }
    let Some(after) = target.strip_prefix("http://") else {
        return Err((
            format!("only CONNECT and absolute http:// requests are proxied, not {target:?}"),
            None,
        ));
    };
    let (auth, path) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let (host, port) = authority(auth, Some(80)).map_err(|e| (e.to_string(), None))?;
    let seen = Some((method.to_string(), host.clone(), port));
    // The host the proxy judged is the host asked for: the client's own
    // `Host` is replaced (a shared front end routes by it), and a body
    // only of a length known up front goes up (no chunked body, whose end
    // the proxy would have to parse to keep a second request out).
    let mut body = 0u64;
    let mut fwd = format!("{method} {path} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err((format!("malformed header line {line:?}"), seen));
        };
        let name = name.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err((
                "a request body of unknown length (Transfer-Encoding) is not proxied over plain HTTP".into(),
                seen,
            ));
        }
        if name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value
                .trim()
                .parse()
                .map_err(|_| (format!("bad Content-Length {value:?}"), seen.clone()))?;
            if body != 0 && body != n {
                return Err(("two different Content-Length headers".into(), seen));
            }
            body = n;
        }
        if [
            "host",
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
    let named = match host.parse::<std::net::Ipv6Addr>() {
        Ok(_) => format!("[{host}]"),
        Err(_) => host.clone(),
    };
    if port == 80 {
        fwd.push_str(&format!("Host: {named}\r\n"));
    } else {
        fwd.push_str(&format!("Host: {named}:{port}\r\n"));
    }
    fwd.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        method: method.into(),
        host,
        port,
        forward: Some(fwd.into_bytes()),
        rest,
        body,
    })
}

/// Why a request's `host:port` was refused.
#[derive(Debug, thiserror::Error)]
enum BadAuthority {
    #[error("bad port in {0:?}")]
    Port(String),
    #[error("no port in {0:?}")]
    NoPort(String),
    #[error("not a host name: {0:?}")]
    Host(String),
}

/// `host:port` (or `[v6]:port`), lower-cased and checked.
fn authority(auth: &str, default_port: Option<u16>) -> Result<(String, u16), BadAuthority> {
    let auth = auth.rsplit_once('@').map_or(auth, |(_, a)| a);
    let (host, port) = match auth.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.ends_with(']') => (
            h,
            p.parse::<u16>()
                .map_err(|_| BadAuthority::Port(auth.to_string()))?,
        ),
        _ => (
            auth,
            default_port.ok_or_else(|| BadAuthority::NoPort(auth.to_string()))?,
        ),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if !plausible_host(&host) {
        return Err(BadAuthority::Host(host));
    }
    Ok((host, port))
}

/// Receive the listening socket the child sends (waiting up to `wait`);
/// `None` when the child closed its end without sending one.
pub(crate) fn receive_listener(ours: &OwnedFd, wait: Duration) -> Option<TcpListener> {
    crate::fdpass::receive(ours, wait).map(TcpListener::from)
}

/// In the child, inside the new network namespace (loopback up): listen on
/// the proxy's address and send the socket over `pair`, then close both.
///
/// # Safety
/// Between fork and exec: only async-signal-safe system calls on stack data.
pub(crate) unsafe fn send_listener(pair: RawFd) -> bool {
    // SAFETY: socket/setsockopt/bind/listen/close on stack data.
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
        let sent = ok && crate::fdpass::send(pair, s);
        libc::close(s);
        libc::close(pair);
        sent
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
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
            "10.1.2.3",
            "172.17.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "0.1.2.3",
            "fd00::1",
            "::127.0.0.1",
            "64:ff9b::a01:203",
        ] {
            assert!(local(ip.parse().unwrap()), "{ip}");
        }
        // Public addresses (documentation ranges stand in for them here).
        for ip in [
            "203.0.113.80",
            "198.51.100.7",
            "2001:db8::1",
            "64:ff9b::cb00:7150",
        ] {
            assert!(!local(ip.parse().unwrap()), "{ip}");
        }
        // The machine's own interface addresses, whatever their range.
        for ip in own_addresses() {
            assert!(local(ip), "{ip}");
        }
        let e = Egress {
            allow: vec!["localhost".into()],
            resolve: vec![],
            list: "network.allow".into(),
        };
        let Unreachable(err) = addresses(&e, "localhost", 80).unwrap_err();
        assert!(
            err.contains("resolves only to addresses of this machine"),
            "{err}"
        );
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
