//! A real HTTP/1.1 server on 127.0.0.1 that answers each connection with
//! the next canned response and keeps what it was sent. The clients under
//! test go through their real transport (ureq) to reach it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use loop_models::retry::Sleeper;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One canned response.
#[derive(Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Canned {
    pub fn json(status: u16, body: &str) -> Self {
        Canned {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
        }
    }
    pub fn sse(body: &str) -> Self {
        Canned {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: body.into(),
        }
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
}

/// What the server received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Server {
    pub url: String,
    pub received: Arc<Mutex<Vec<Received>>>,
}

/// Serve `responses` in order, one per connection, then stop.
pub fn serve(responses: Vec<Canned>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = received.clone();
    std::thread::spawn(move || {
        for canned in responses {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut headers = Vec::new();
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap();
                    }
                    headers.push((k.trim().to_string(), v.trim().to_string()));
                }
            }
            let mut body = vec![0u8; len];
            reader.read_exact(&mut body).unwrap();
            kept.lock().unwrap().push(Received {
                path,
                headers,
                body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
            });
            let mut out = stream;
            let mut head = format!(
                "HTTP/1.1 {} X\r\nconnection: close\r\ncontent-length: {}\r\n",
                canned.status,
                canned.body.len()
            );
            for (k, v) in &canned.headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            out.write_all(head.as_bytes()).unwrap();
            out.write_all(canned.body.as_bytes()).unwrap();
            out.flush().unwrap();
        }
    });
    Server { url, received }
}

/// A sleeper that records instead of sleeping.
#[derive(Clone, Default)]
pub struct FakeSleeper(pub Arc<Mutex<Vec<Duration>>>);

impl Sleeper for FakeSleeper {
    fn sleep(&mut self, d: Duration) {
        self.0.lock().unwrap().push(d);
    }
}

pub fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}
