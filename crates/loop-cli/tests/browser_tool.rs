//! The `browser` tool through the `loop` binary, with real headless
//! Chromium: a scripted model builds a small static site, serves it in
//! the sandbox, opens it, types, clicks, reads the accessibility tree and
//! takes a screenshot kept as evidence; the `page` check verifies the
//! text on the fresh snapshot. The browser reaches the sandbox's own
//! 127.0.0.1 and the allow-list through the egress proxy, and nothing
//! else: not a service of the host on 127.0.0.1, not a host outside the
//! list.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn tmpdir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("loop-browser-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// A service of the host on 127.0.0.1 that answers every request with
/// `body` and keeps the `Host` header of each request it took.
fn host_service(body: &'static str) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hosts = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().take(32) {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let host = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("Host: ")
                        .or_else(|| l.strip_prefix("host: "))
                })
                .unwrap_or("(none)")
                .to_string();
            hosts.lock().unwrap().push(host);
            let page =
                format!("<html><head><title>{body}</title></head><body>{body}</body></html>");
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    (port, seen)
}

const SITE: &str = "<html><head><title>Prices</title></head><body><h1>Prices</h1><table id=prices><tr><td>Basic</td><td id=p></td></tr></table><input id=q aria-label=Search><button id=go onclick=\\\"document.getElementById('out').textContent = 'searched ' + document.getElementById('q').value\\\">Go</button><p id=out></p><script>document.getElementById('p').textContent = '9 EUR'</script></body></html>\\n";

const TASK: &str = "instruction: Make the landing page show the price table\ncriteria:\n  - id: prices\n    text: the landing page shows the price table in a browser\n    checks:\n      - page: /index.html\n        serve: python3 -m http.server 8000 --bind 127.0.0.1 --directory site\n        port: 8000\n        text: 9 EUR\n        element: '#prices'\n        timeout_secs: 60\nlimits:\n  max_verifications: 1\n  max_steps: 20\n";

fn script(secret: u16, allowed: u16) -> String {
    let call = |args: &str| format!("  - calls:\n      - {{tool: browser, args: {{{args}}}}}\n");
    let mut s = format!(
        "turns:\n  - calls:\n      - {{tool: write_file, args: {{path: site/index.html, content: \"{SITE}\"}}}}\n      - {{tool: write_file, args: {{path: site/hang.html, content: \"<html><body>wait<script>for (;;) {{}}</script></body></html>\\n\"}}}}\n"
    );
    for a in [
        "action: open, url: 'http://127.0.0.1:8000/index.html', serve: 'python3 -m http.server 8000 --bind 127.0.0.1 --directory site'".to_string(),
        "action: type, selector: '#q', text: hello".into(),
        "action: click, selector: '#go'".into(),
        "action: read".into(),
        "action: screenshot".into(),
        format!("action: open, url: 'http://127.0.0.1:{secret}/', timeout_secs: 5"),
        format!("action: open, url: 'http://allowed.test:{allowed}/'"),
        format!("action: open, url: 'http://elsewhere.test:{allowed}/'"),
        // A page whose script never yields: the call fails, not the task.
        "action: open, url: 'http://127.0.0.1:8000/hang.html', serve: 'python3 -m http.server 8000 --bind 127.0.0.1 --directory site', timeout_secs: 6".into(),
        "action: open, url: 'http://127.0.0.1:8000/index.html', serve: 'python3 -m http.server 8000 --bind 127.0.0.1 --directory site'".into(),
        "action: close".into(),
    ] {
        s.push_str(&call(&a));
    }
    s.push_str("  - calls:\n      - {tool: finish, args: {summary: done}}\n");
    s
}

#[test]
fn a_model_serves_a_site_drives_it_in_chromium_and_the_page_check_verifies_it() {
    if std::env::var_os("LOOP_BROWSER_VENV").is_none() {
        // (scripts/test.sh sets it, with Chromium installed.)
        eprintln!("skipped: LOOP_BROWSER_VENV is not set");
        return;
    }
    assert!(shared::have("chromium"), "Chromium is not installed");
    let (secret, secret_seen) = host_service("HOST SECRET");
    let (allowed, allowed_seen) = host_service("ALLOWED PAGE");
    let base = tmpdir("drive");
    let p = base.join("project");
    std::fs::create_dir_all(p.join("site")).unwrap();
    std::fs::write(p.join("site/README"), "the site\n").unwrap();
    // The Loopfile grants the browser to every task (the contract does
    // not say it), and one host the task's commands may reach, pinned to
    // a service of this machine.
    std::fs::write(
        p.join("Loopfile.yaml"),
        format!(
            "browser: true\nnetwork:\n  allow: ['allowed.test:{allowed}']\n  resolve: {{allowed.test: '127.0.0.1:{allowed}'}}\n"
        ),
    )
    .unwrap();
    shared::commit_all(&p);

    let run = shared::run_scripted(&base, &p, "drive", (TASK, &script(secret, allowed)));
    let said = shared::text(&run.out);
    assert_eq!(run.outcome(), "verified", "{said}");
    let events = shared::json_lines(&run.out);
    // The Loopfile's grant is written into the locked contract.
    let started = events.iter().find(|e| e["kind"] == "task_started").unwrap();
    assert_eq!(started["contract"]["browser"], true, "{started}");
    let seen: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "observed" && e["observation"]["tool"] == "browser")
        .map(|e| &e["observation"])
        .collect();
    assert_eq!(seen.len(), 11, "{said}");
    let content = |n: usize| seen[n]["content"].as_str().unwrap_or_default();
    let status = |n: usize| seen[n]["status"].as_str().unwrap_or_default();

    // Opened, served from the sandbox: the page's script has run.
    assert_eq!(status(0), "ok", "{}", content(0));
    assert!(content(0).contains("title: Prices"), "{}", content(0));
    assert!(content(0).contains("9 EUR"), "{}", content(0));
    // Typed and clicked as a person would: the page's handler saw both.
    assert!(
        content(1).contains("it now holds \"hello\""),
        "{}",
        content(1)
    );
    assert!(content(2).contains("searched hello"), "{}", content(2));
    // Read: the visible text and the accessibility tree.
    assert!(content(3).contains("accessibility tree:"), "{}", content(3));
    assert!(content(3).contains("button \"Go\""), "{}", content(3));
    assert!(content(3).contains("textbox \"Search\""), "{}", content(3));
    // The screenshot: a PNG kept as the task's evidence, named by the
    // digest the ledger records.
    let image = &seen[4]["image"];
    let sha = image["sha256"].as_str().expect("the screenshot's digest");
    assert_eq!(image["media_type"], "image/png");
    assert_eq!(image["path"], format!("evidence/{sha}.png"));
    assert!(
        image.get("data_base64").is_none(),
        "no image bytes in the record"
    );
    let task = run.receipt["task_id"].as_str().unwrap();
    let kept = std::fs::read(p.join(format!(".loop/tasks/{task}/evidence/{sha}.png"))).unwrap();
    assert!(kept.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(loop_protocol::hash::sha256_hex(&kept), sha);
    assert!(content(4).contains("takes no images"), "{}", content(4));

    // A service of the host on 127.0.0.1 is not the browser's 127.0.0.1.
    assert_eq!(status(5), "error", "{}", content(5));
    assert!(
        content(5).contains("ERR_CONNECTION_REFUSED"),
        "{}",
        content(5)
    );
    assert!(!said.contains("HOST SECRET"), "{said}");
    assert!(secret_seen.lock().unwrap().is_empty());
    // The allow-list's host, through the egress proxy.
    assert_eq!(status(6), "ok", "{}", content(6));
    assert!(content(6).contains("ALLOWED PAGE"), "{}", content(6));
    // Any other host is refused by the proxy, before anything is opened.
    assert!(
        content(7).contains("egress to elsewhere.test") && content(7).contains("refused"),
        "{}",
        content(7)
    );
    assert!(!content(7).contains("ALLOWED PAGE"), "{}", content(7));
    let hosts = allowed_seen.lock().unwrap().clone();
    assert!(!hosts.is_empty());
    assert!(
        hosts
            .iter()
            .all(|h| *h == format!("allowed.test:{allowed}")),
        "{hosts:?}"
    );
    // A hung page fails its call within its time and stops the browser;
    // the next `open` starts a new one.
    assert_eq!(status(8), "error", "{}", content(8));
    assert!(content(8).contains("timed out"), "{}", content(8));
    assert!(
        content(8).contains("the browser was stopped"),
        "{}",
        content(8)
    );
    assert_eq!(status(9), "ok", "{}", content(9));
    assert!(content(9).contains("9 EUR"), "{}", content(9));
    assert!(content(10).contains("stopped"), "{}", content(10));

    // Nothing the browser's session did reached the workspace: the change
    // set is the page the model wrote.
    let files: Vec<&str> = run.statement["predicate"]["change_set"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, vec!["site/hang.html", "site/index.html"]);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_screenshot_reaches_a_model_that_takes_images_as_an_image_part() {
    if std::env::var_os("LOOP_BROWSER_VENV").is_none() {
        eprintln!("skipped: LOOP_BROWSER_VENV is not set");
        return;
    }
    let base = tmpdir("vision");
    let p = base.join("project");
    std::fs::create_dir_all(p.join("site")).unwrap();
    std::fs::write(p.join("site/index.html"), "<h1>Seen</h1>\n").unwrap();
    let (port, seen) = shared::openai_stand_in(vec![
        serde_json::json!({"name": "browser", "arguments": serde_json::json!({"action": "open", "url": "http://127.0.0.1:8000/", "serve": "python3 -m http.server 8000 --bind 127.0.0.1 --directory site"}).to_string()}),
        serde_json::json!({"name": "browser", "arguments": "{\"action\": \"screenshot\"}"}),
        serde_json::json!({"name": "write_file", "arguments": "{\"path\": \"out.txt\", \"content\": \"seen\\n\"}"}),
    ]);
    std::fs::write(
        p.join("Loopfile.yaml"),
        format!("browser: true\nmodels:\n  maker:\n    spec: openai:fake-vision\n    base_url: http://127.0.0.1:{port}/v1\n    stream: false\n    images: true\n"),
    )
    .unwrap();
    shared::commit_all(&p);
    let out = shared::loop_in(&base)
        .args([
            "run",
            "look at the page and write out.txt",
            "--json",
            "--check",
            "grep -q seen out.txt",
            "--project",
        ])
        .arg(&p)
        .output()
        .unwrap();
    let said = shared::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let shot = shared::json_lines(&out)
        .into_iter()
        .find(|e| e["kind"] == "observed" && e["observation"]["image"].is_object())
        .unwrap_or_else(|| panic!("no screenshot: {said}"));
    let sha = shot["observation"]["image"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    // The request after the screenshot carries it as an image part whose
    // bytes have the digest the record keeps.
    let requests = seen.lock().unwrap().clone();
    let url = requests[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|m| {
            m["content"][1]["image_url"]["url"]
                .as_str()
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no image part: {}", requests[2]));
    let b64 = url
        .strip_prefix("data:image/png;base64,")
        .expect("a PNG data URL");
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(loop_protocol::hash::sha256_hex(&png), sha);
    assert!(!said.contains(b64), "the bytes stay out of the record");
    let _ = std::fs::remove_dir_all(&base);
}
