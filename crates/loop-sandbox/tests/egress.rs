//! Declared egress: a command without network reaches an allowed host
//! through the runtime's proxy and nothing else; every attempt is
//! reported, the refused ones naming the list.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_sandbox::egress::Egress;
use loop_sandbox::{ExecRequest, Program};
use std::io::{Read, Write};
use std::net::TcpListener;

/// A one-page HTTP server on 127.0.0.1 (a registry's stand-in), serving
/// `connections` requests.
fn server(body: &'static str, connections: usize) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(connections) {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn only_allowed_hosts_are_reached_and_every_attempt_is_reported() {
    assert!(
        loop_sandbox::probe::support().namespaces,
        "egress needs a network namespace, which this machine does not give"
    );
    let allowed = server("from the allowed host", 4);
    let other = server("from a host nobody allowed", 4);
    let dir = std::env::temp_dir().join(format!("loop-egress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        r#"
import os, socket, urllib.request as u
def get(url):
    try:
        return u.urlopen(url, timeout=5).read().decode()
    except Exception as e:
        body = e.read().decode() if hasattr(e, "read") else ""
        return "ERR " + str(e) + " " + body
print("A", get("http://pkgs.test:{allowed}/simple/"))
print("B", get("http://other.test:{other}/"))
print("C", get("http://127.0.0.1:{other}/"))
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", {other}))
    print("D connected")
except Exception as e:
    print("D", e)
print("E", os.environ.get("HTTPS_PROXY"))
"#
    );
    let mut req = ExecRequest::new(
        Program::Argv(vec!["python3".into(), "-c".into(), script]),
        &dir,
    );
    req.egress = Some(Egress {
        allow: vec![format!("pkgs.test:{allowed}")],
        resolve: vec![
            (
                "pkgs.test".into(),
                format!("127.0.0.1:{allowed}").parse().unwrap(),
            ),
            (
                "other.test".into(),
                format!("127.0.0.1:{other}").parse().unwrap(),
            ),
        ],
        list: "network.allow".into(),
    });
    let r = loop_sandbox::run(&req).unwrap();
    let out = r.stdout.excerpt();
    assert_eq!(r.exit_code, Some(0), "{out}{}", r.stderr.excerpt());
    assert!(out.contains("A from the allowed host"), "{out}");
    assert!(
        out.contains(&format!(
            "B ERR HTTP Error 403: Forbidden loop: egress to other.test:{other} refused: not in network.allow"
        )),
        "{out}"
    );
    assert!(out.contains("C ERR HTTP Error 403"), "{out}");
    // Around the proxy there is no way out: the host's loopback is not the
    // namespace's.
    assert!(out.contains("D [Errno 111] Connection refused"), "{out}");
    assert!(out.contains("E http://127.0.0.1:3128"), "{out}");
    assert_eq!(r.isolation.network, "proxy");
    let seen: Vec<(String, u16, bool)> = r
        .isolation
        .egress
        .iter()
        .map(|a| (a.host.clone(), a.port, a.allowed))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("pkgs.test".into(), allowed, true),
            ("other.test".into(), other, false),
            ("127.0.0.1".into(), other, false),
        ]
    );
    assert_eq!(r.isolation.egress[0].rule, format!("pkgs.test:{allowed}"));
    assert_eq!(r.isolation.egress[1].rule, "refused: not in network.allow");

    // Without an allow-list there is no proxy at all.
    let mut none = ExecRequest::new(
        Program::Argv(vec![
            "python3".into(),
            "-c".into(),
            format!(
                "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 3128), 3)\n    print('proxy')\nexcept Exception as e:\n    print(e)\ntry:\n    socket.create_connection(('127.0.0.1', {allowed}), 3)\n    print('out')\nexcept Exception as e:\n    print(e)\n"
            ),
        ]),
        &dir,
    );
    none.egress = None;
    let r = loop_sandbox::run(&none).unwrap();
    let out = r.stdout.excerpt();
    assert_eq!(out.matches("Connection refused").count(), 2, "{out}");
    assert_eq!(r.isolation.network, "none");
    assert!(r.isolation.egress.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that answers each request with the request head it received,
/// counting the requests.
fn echo_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().take(16) {
            let Ok(mut s) = s else { continue };
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            // Everything the connection brings, until the proxy stops sending.
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let _ = s.set_read_timeout(Some(std::time::Duration::from_millis(300)));
                }
            }
            let text = String::from_utf8_lossy(&got).to_string();
            count.fetch_add(
                text.matches(" HTTP/1.1\r\n").count(),
                std::sync::atomic::Ordering::SeqCst,
            );
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (port, seen)
}

#[test]
fn plain_http_carries_one_request_to_the_host_it_names_and_refusals_are_recorded() {
    assert!(loop_sandbox::probe::support().namespaces);
    let (port, requests) = echo_server();
    let dir = std::env::temp_dir().join(format!("loop-egress-raw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        r#"
import socket
def raw(data):
    s = socket.create_connection(("127.0.0.1", 3128), 5)
    s.sendall(data)
    s.settimeout(5)
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except Exception:
            break
        if not b:
            break
        out += b
    return out.decode(errors="replace")
# A Host header naming another site, and a second request pipelined behind.
print("A", repr(raw(b"GET http://pkgs.test:{port}/a HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 3\r\n\r\nabcGET http://pkgs.test:{port}/b HTTP/1.1\r\nHost: evil.example\r\n\r\n")))
# A body of unknown length.
print("B", repr(raw(b"POST http://pkgs.test:{port}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")))
# Not a proxy request at all.
print("C", repr(raw(b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n")))
"#
    );
    let mut req = ExecRequest::new(
        Program::Argv(vec!["python3".into(), "-c".into(), script]),
        &dir,
    );
    req.timeout = std::time::Duration::from_secs(30);
    req.egress = Some(Egress {
        allow: vec![format!("pkgs.test:{port}")],
        resolve: vec![(
            "pkgs.test".into(),
            format!("127.0.0.1:{port}").parse().unwrap(),
        )],
        list: "network.allow".into(),
    });
    let r = loop_sandbox::run(&req).unwrap();
    let out = r.stdout.excerpt();
    assert_eq!(r.exit_code, Some(0), "{out}{}", r.stderr.excerpt());
    let a = out.lines().find(|l| l.starts_with("A ")).unwrap();
    // The host received the host the proxy judged, once, with the body.
    assert!(a.contains(&format!("Host: pkgs.test:{port}")), "{a}");
    assert!(!a.contains("evil.example"), "{a}");
    assert!(a.contains("GET /a HTTP/1.1"), "{a}");
    assert!(a.contains("abc"), "{a}");
    assert!(!a.contains("/b"), "{a}");
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1);
    let b = out.lines().find(|l| l.starts_with("B ")).unwrap();
    assert!(
        b.contains("400 Bad Request") && b.contains("Transfer-Encoding"),
        "{b}"
    );
    let c = out.lines().find(|l| l.starts_with("C ")).unwrap();
    assert!(
        c.contains("400 Bad Request") && c.contains("only CONNECT"),
        "{c}"
    );
    let seen: Vec<(String, bool)> = r
        .isolation
        .egress
        .iter()
        .map(|a| (a.host.clone(), a.allowed))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("pkgs.test".to_string(), true),
            ("pkgs.test".to_string(), false),
            ("(not named)".to_string(), false),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
