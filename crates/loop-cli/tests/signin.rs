//! Signing in to the console with GitHub through `loop serve`, against a
//! local server on 127.0.0.1 that implements GitHub's OAuth endpoints as
//! documented (the token endpoint checks the PKCE verifier against the
//! challenge the authorization request carried) and the two REST calls
//! used (`/user`, `/user/teams`): a login maps to its owner and scope, a
//! team's member to the team's; a wrong or used state, a sign-in begun in
//! another browser, a wrong verifier and an unmapped login are refused.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The stand-in's codes: code → (PKCE challenge, login it is for).
type Codes = Arc<Mutex<HashMap<String, (String, String)>>>;

/// A stand-in for GitHub's OAuth and REST endpoints; its port, codes, and
/// what it took.
fn github() -> (u16, Codes, shared::TakenAll) {
    let codes: Codes = Arc::default();
    let known = codes.clone();
    let (port, taken) = shared::stand_in(100, move |t, _| {
        let body = &t.body;
        let answer = match t.path.split('?').next().unwrap_or_default() {
            "/login/oauth/access_token" => {
                let code = body["code"].as_str().unwrap_or_default();
                let verifier = body["code_verifier"].as_str().unwrap_or_default();
                let held = known.lock().unwrap().remove(code);
                match held {
                    Some((challenge, login))
                        if !verifier.is_empty()
                            && loop_runtime_challenge(verifier) == challenge
                            && body["client_secret"] == "app-s3cret" =>
                    {
                        json!({"access_token": format!("gho_{login}"), "token_type": "bearer", "scope": "read:org"})
                    }
                    _ => {
                        json!({"error": "bad_verification_code", "error_description": "The code passed is incorrect or expired."})
                    }
                }
            }
            "/api/user" => {
                let login = t.auth.strip_prefix("Bearer gho_").unwrap_or("nobody");
                // GitHub's number for the account: 4242 is the one the
                // Loopfile maps by number, whatever its login now is.
                let id = if login == "Renamed" { 4242 } else { 1000 + login.len() };
                json!({"login": login, "id": id})
            }
            // Teamie's mapped teams are on the second page of its teams.
            "/api/user/teams" if t.auth == "Bearer gho_Teamie" && t.path.ends_with("page=2") => {
                json!([{"slug": "maintainers", "organization": {"login": "Acme"}}, {"slug": "docs", "organization": {"login": "acme"}}])
            }
            "/api/user/teams" if t.auth == "Bearer gho_Teamie" => json!(
                (0..100)
                    .map(|n| json!({"slug": format!("team-{n}"), "organization": {"login": "elsewhere"}}))
                    .collect::<Vec<_>>()
            ),
            "/api/user/teams" => json!([]),
            _ => json!({"message": "Not Found"}),
        };
        (200, answer.to_string())
    });
    (port, codes, taken)
}

/// PKCE's S256 challenge, computed here independently of the server.
fn loop_runtime_challenge(verifier: &str) -> String {
    use base64::Engine;
    let hex = loop_protocol::hash::sha256_hex(verifier.as_bytes());
    let raw: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

/// `GET url` with `cookie`: status, Location, Set-Cookie, body.
fn get(url: &str, cookie: Option<&str>) -> (u16, String, String, String) {
    let mut req = agent().get(url);
    if let Some(c) = cookie {
        req = req.header("Cookie", c);
    }
    let mut r = req.call().unwrap();
    let h = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (location, set_cookie) = (h("location"), h("set-cookie"));
    let status = r.status().as_u16();
    (
        status,
        location,
        set_cookie,
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// A query parameter of `url`.
fn param(url: &str, name: &str) -> String {
    url.split(['?', '&'])
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or_default()
        .to_string()
}

/// Begin a sign-in at `base`, and have GitHub send `login` back with a
/// code: the callback's URL and the browser's cookie.
fn begin(base: &str, codes: &Codes, login: &str, n: usize) -> (String, String) {
    let (status, location, cookie, said) = get(
        &format!("{base}/auth/github?nonce=0123456789abcdef{n:04}"),
        None,
    );
    assert_eq!(status, 302, "{said}");
    assert_eq!(param(&location, "code_challenge_method"), "S256");
    assert_eq!(param(&location, "client_id"), "Iv1.test");
    let state = param(&location, "state");
    assert_eq!(state.len(), 32, "{location}");
    let code = format!("code-{n}");
    codes.lock().unwrap().insert(
        code.clone(),
        (param(&location, "code_challenge"), login.to_string()),
    );
    let cookie = cookie.split(';').next().unwrap_or_default().to_string();
    (
        format!("{base}/auth/github/callback?code={code}&state={state}"),
        cookie,
    )
}

#[test]
fn a_github_login_or_its_team_signs_in_as_the_loopfile_maps_it_and_nothing_else_does() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("github-signin");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    let (port, codes, taken) = github();
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "console:\n  github:\n    client_id: Iv1.test\n    client_secret_env: LOOP_TEST_GITHUB_SECRET\n    redirect_url: http://127.0.0.1:1/auth/github/callback\n    authorize_url: http://127.0.0.1:{port}/login/oauth/authorize\n    token_url: http://127.0.0.1:{port}/login/oauth/access_token\n    api_url: http://127.0.0.1:{port}/api\n    users: {{octocat: {{owner: octo, scope: read}}, 'id:4242': {{owner: numbered, scope: read}}}}\n    teams: {{acme/maintainers: {{owner: acme, scope: admin}}, acme/docs: {{owner: docs, scope: read}}}}\n"
        ),
    )
    .unwrap();
    shared::commit_all(&project);
    let (server, base) = shared::serve(
        &home,
        &project,
        &[("LOOP_TEST_GITHUB_SECRET", "app-s3cret")],
        &[],
    );
    let (_, _, _, offered) = get(&format!("{base}/auth/providers"), None);
    assert_eq!(
        serde_json::from_str::<Value>(&offered).unwrap()["github"],
        true
    );

    // A login mapped to `read`: its session sees, and cannot act.
    let (back, cookie) = begin(&base, &codes, "octocat", 1);
    let (status, location, _, said) = get(&back, Some(&cookie));
    assert_eq!(status, 302, "{said}");
    let token = location
        .strip_prefix("/#signed-in=")
        .and_then(|t| t.strip_suffix("&nonce=0123456789abcdef0001"))
        .expect("a token in the fragment, with the console's nonce");
    let api = |method: &str, token: &str| {
        let r = match method {
            "GET" => agent()
                .get(&format!("{base}/api/v1/tasks"))
                .header("Authorization", &format!("Bearer {token}"))
                .call(),
            _ => agent()
                .post(&format!("{base}/api/v1/tasks"))
                .header("Authorization", &format!("Bearer {token}"))
                .header("Content-Type", "application/json")
                .send(br#"{"instruction": "x", "checks": ["true"]}"#.as_slice()),
        };
        r.unwrap().status().as_u16()
    };
    assert_eq!(api("GET", token), 200);
    assert_eq!(api("POST", token), 403);
    // The same state again: used up.
    let (status, _, _, said) = get(&back, Some(&cookie));
    assert_eq!(status, 400, "{said}");
    assert!(said.contains("unknown, used or expired"), "{said}");

    // A team's member acts as the widest of its mapped teams.
    let (back, cookie) = begin(&base, &codes, "Teamie", 2);
    let (status, location, _, said) = get(&back, Some(&cookie));
    assert_eq!(status, 302, "{said}");
    let admin = location
        .strip_prefix("/#signed-in=")
        .and_then(|t| t.split('&').next())
        .unwrap();
    let out = shared::loop_in(&home)
        .args(["tokens", "list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let listed = shared::text(&out);
    assert!(listed.contains("\"owner\":\"acme\""), "{listed}");
    assert!(listed.contains("\"scope\":\"admin\""), "{listed}");
    assert!(
        listed.contains("ses-"),
        "a session's token says until when: {listed}"
    );
    assert_eq!(api("GET", admin), 200);
    // Its teams were read page by page (its mapped ones are on the
    // second), and GitHub's token was given back once used, with the
    // app's credentials.
    let calls = taken.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .any(|c| c.path.ends_with("/user/teams?per_page=100&page=2")),
        "{calls:?}"
    );
    let given_back: Vec<_> = calls
        .iter()
        .filter(|c| c.method == "DELETE" && c.path == "/api/applications/Iv1.test/token")
        .collect();
    assert!(
        given_back
            .iter()
            .any(|c| c.body["access_token"] == "gho_Teamie"),
        "{calls:?}"
    );
    use base64::Engine;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("Iv1.test:app-s3cret")
    );
    assert!(given_back.iter().all(|c| c.auth == basic), "{given_back:?}");

    // No nonce of the console's: refused before anything is kept.
    let (status, _, _, said) = get(&format!("{base}/auth/github"), None);
    assert_eq!(status, 400, "{said}");
    // Refused: a state nobody made; a sign-in begun in another browser
    // (no cookie); a code whose verifier GitHub does not accept (the
    // code belongs to another attempt's challenge); a login nobody mapped.
    let (status, _, _, said) = get(
        &format!("{base}/auth/github/callback?code=x&state=0123"),
        None,
    );
    assert_eq!(status, 400, "{said}");
    let (back, _) = begin(&base, &codes, "octocat", 3);
    let (status, _, _, said) = get(&back, None);
    assert_eq!(status, 400, "{said}");
    assert!(said.contains("begun in another browser"), "{said}");
    let (back, cookie) = begin(&base, &codes, "octocat", 4);
    codes.lock().unwrap().insert(
        "code-4".into(),
        ("not-the-challenge".into(), "octocat".into()),
    );
    let (status, _, _, said) = get(&back, Some(&cookie));
    assert_eq!(status, 403, "{said}");
    assert!(said.contains("GitHub refused the code"), "{said}");
    let (back, cookie) = begin(&base, &codes, "stranger", 5);
    let (status, _, _, said) = get(&back, Some(&cookie));
    assert_eq!(status, 403, "{said}");
    assert!(said.contains("`stranger` may not sign in here"), "{said}");
    // An account mapped by GitHub's number signs in whatever its login
    // has become (a login can be renamed and taken by someone else).
    let (back, cookie) = begin(&base, &codes, "Renamed", 6);
    let (status, _, _, said) = get(&back, Some(&cookie));
    assert_eq!(status, 302, "{said}");
    let out = shared::loop_in(&home)
        .args(["tokens", "list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(
        shared::text(&out).contains("\"owner\":\"numbered\""),
        "{}",
        shared::text(&out)
    );
    shared::stop(server);
    let _ = std::fs::remove_dir_all(&home);
}
