//! Declared egress: a command without network reaches an allowed host
//! through the runtime's proxy and nothing else; every attempt is
//! reported, the refused ones naming the list.

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
    if !loop_sandbox::probe::support().namespaces {
        eprintln!("no namespaces here: egress needs a network namespace");
        return;
    }
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
    assert_eq!(
        r.isolation.egress[1].rule,
        format!("refused: other.test:{other} is not in network.allow")
    );

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
