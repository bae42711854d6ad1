//! GitHub in and out through `loop serve`, against a local server on
//! 127.0.0.1 that answers the REST API's requests as GitHub's published
//! description says (repositories, git blobs, trees, commits and refs,
//! pulls, issue comments, statuses), with payloads shaped as GitHub sends
//! them (`tests/fixtures/github/`): an issue labelled `loop` starts the
//! trigger's task with the issue's text as untrusted input; once it is
//! verified, a branch and a pull request carrying exactly its change and
//! its receipt's files appear, with a comment on the issue; every call
//! carries the token and the report keeps no token. A `/loop` comment from
//! an author without the allowed association starts nothing, and a wrong
//! signature is a 401.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The head commit of pull request #43, as the stand-in says it (set by
/// the test once it made that commit in the project's remote).
static PR_HEAD: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A stand-in for GitHub's REST API on 127.0.0.1: its port, and what it took.
fn github() -> (u16, shared::TakenAll) {
    shared::stand_in(200, |t, n| {
        let (status, v) = answer(&t.method, &t.path, n);
        (status, v.to_string())
    })
}

/// GitHub's answer to `method path` (the `n`th request).
fn answer(method: &str, path: &str, n: usize) -> (u16, Value) {
    let repo = "/repos/acme/widgets";
    let Some(rest) = path.strip_prefix(repo) else {
        return (404, json!({"message": "Not Found"}));
    };
    match (method, rest) {
        ("GET", "") => (
            200,
            json!({"full_name": "acme/widgets", "default_branch": "main"}),
        ),
        ("GET", r) if r.starts_with("/git/commits/") => {
            (200, json!({"sha": &r[13..], "tree": {"sha": "base-tree"}}))
        }
        ("POST", "/git/blobs") => (201, json!({"sha": format!("blob-{n}")})),
        ("POST", "/git/trees") => (201, json!({"sha": format!("tree-{n}")})),
        ("POST", "/git/commits") => (201, json!({"sha": format!("c0ffee{n:034}")})),
        ("POST", "/git/refs") => (
            201,
            json!({"ref": "refs/heads/x", "object": {"sha": "c0ffee"}}),
        ),
        ("POST", "/pulls") => (
            201,
            json!({"number": 77, "html_url": "https://github.test/acme/widgets/pull/77"}),
        ),
        ("GET", "/pulls/43") => (
            200,
            json!({"number": 43, "head": {"sha": PR_HEAD.get().map_or("", String::as_str), "ref": "feature", "repo": {"full_name": "acme/widgets"}}}),
        ),
        // A pull request whose head the project's remote does not have.
        ("GET", "/pulls/45") => (
            200,
            json!({"number": 45, "head": {"sha": "0123456789abcdef0123456789abcdef01234567", "ref": "gone", "repo": {"full_name": "acme/widgets"}}}),
        ),
        ("POST", r) if r.starts_with("/statuses/") => (201, json!({"state": "success"})),
        ("POST", r) if r.starts_with("/issues/") && r.ends_with("/comments") => (
            201,
            json!({"id": 5, "html_url": format!("https://github.test/acme/widgets{r}#5")}),
        ),
        _ => (404, json!({"message": "Not Found"})),
    }
}

fn sign(key: &[u8], body: &[u8]) -> String {
    format!(
        "sha256={}",
        loop_protocol::hash::hex(&loop_protocol::hash::hmac_sha256(key, body))
    )
}

/// POST a GitHub delivery of `event` to the trigger: status and body.
fn deliver(url: &str, event: &str, body: &[u8], sig: &str, delivery: &str) -> (u16, String) {
    deliver_to("gh", url, event, body, sig, delivery)
}

/// [`deliver`] to trigger `trigger`.
fn deliver_to(
    trigger: &str,
    url: &str,
    event: &str,
    body: &[u8],
    sig: &str,
    delivery: &str,
) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .post(&format!("{url}/api/v1/hooks/{trigger}"))
        .header("X-Hub-Signature-256", sig)
        .header("X-GitHub-Delivery", delivery)
        .header("X-GitHub-Event", event)
        .header("Content-Type", "application/json")
        .send(body)
        .unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap_or_default())
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/github")
            .join(name),
    )
    .unwrap()
}

const SECRET: &str = "hook-s3cret-hook-s3cret";
const TOKEN: &str = "ghp_testtoken0123456789abcdefABCDEF01";

#[test]
fn a_labelled_issue_comes_back_as_a_pull_request_with_its_receipt() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("github-inlet");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "widgets\n").unwrap();
    std::fs::write(
        project.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: fix.txt, content: \"fixed\\n\"}}\n      - {tool: run_command, args: {command: \"ln -s fix.txt link.txt\"}}\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    let (port, seen) = github();
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "models:\n  maker:\n    spec: scripted:script.yaml\ntriggers:\n  - name: gh\n    webhook: {{secret_env: LOOP_TEST_HOOK_SECRET, style: github, owner: github}}\n    github: {{token_env: LOOP_TEST_GITHUB_TOKEN, api_url: 'http://127.0.0.1:{port}', label: loop, command: /loop}}\n    task: {{instruction: \"Resolve the GitHub issue\", checks: [\"grep -q fixed fix.txt\"]}}\n"
        ),
    )
    .unwrap();
    shared::commit_all(&project);
    // The project's remote holds pull request #43's head as GitHub does
    // (refs/pull/43/head): a commit the project's HEAD is not.
    let remote = home.join("widgets.git");
    let git = |dir: &Path, script: &str| -> String {
        let out = std::process::Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {}", shared::text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    git(&home, "git init -q --bare widgets.git");
    let head = git(
        &project,
        "git remote add origin ../widgets.git && git checkout -q -b feature && echo 'from the pull request' > pr.txt && git add pr.txt && git -c user.email=t@e -c user.name=t commit -qm pr && git push -q origin feature:refs/pull/43/head && git rev-parse HEAD && git checkout -q -",
    );
    PR_HEAD.set(head.clone()).unwrap();
    assert!(remote.is_dir());
    let (server, url) = shared::serve(
        &home,
        &project,
        &[
            ("LOOP_TEST_HOOK_SECRET", SECRET),
            ("LOOP_TEST_GITHUB_TOKEN", TOKEN),
        ],
        &["--rate", "4"],
    );

    // A wrong signature: refused, nothing started.
    let labelled = fixture("issues-labeled.json");
    let (code, said) = deliver(&url, "issues", &labelled, &sign(b"wrong", &labelled), "g-0");
    assert_eq!(code, 401, "{said}");
    // A /loop comment from an author the trigger does not take: nothing.
    let comment = fixture("issue-comment-created.json");
    let (code, said) = deliver(
        &url,
        "issue_comment",
        &comment,
        &sign(SECRET.as_bytes(), &comment),
        "g-1",
    );
    assert_eq!(code, 200, "{said}");
    assert!(
        said.contains("the comment's author (NONE) may not ask"),
        "{said}"
    );

    // The labelled issue starts the task.
    let (code, said) = deliver(
        &url,
        "issues",
        &labelled,
        &sign(SECRET.as_bytes(), &labelled),
        "g-2",
    );
    assert_eq!(code, 202, "{said}");
    let id = serde_json::from_str::<Value>(&said).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // One sender may use a quarter of the trigger's rate (here 1 of 4 a
    // minute): the same person's next issue waits, someone else's not.
    let mut again: Value = serde_json::from_slice(&labelled).unwrap();
    again["issue"]["number"] = json!(44);
    let again = serde_json::to_vec(&again).unwrap();
    let (code, said) = deliver(
        &url,
        "issues",
        &again,
        &sign(SECRET.as_bytes(), &again),
        "g-2b",
    );
    assert_eq!(code, 429, "{said}");
    // Its text is in the instruction as untrusted input, its forged end
    // of the block defused.
    let out = shared::loop_in(&home)
        .args(["status", &id, "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let instruction = shared::json_lines(&out)
        .pop()
        .map(|v| v["instruction"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    assert!(instruction.starts_with("Resolve the GitHub issue\n\nThis task was asked for on GitHub (acme/widgets #42, by @octocat)"), "{instruction}");
    assert!(instruction.contains("untrusted input"), "{instruction}");
    assert_eq!(
        instruction.matches("----- END GITHUB TEXT").count(),
        1,
        "{instruction}"
    );

    // Reported back: a pull request, then the comment.
    let start = Instant::now();
    let calls = loop {
        let calls = seen.lock().unwrap().clone();
        if calls
            .iter()
            .any(|c| c.path.ends_with("/issues/42/comments"))
        {
            break calls;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "{calls:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // A /loop comment on a pull request by a member: the task starts from
    // the pull request's head (fetched from the remote and checked against
    // what GitHub says); its pull request goes into the branch that asked,
    // and both the commit it made and the head it ran on get a status.
    let mut member: Value = serde_json::from_slice(&comment).unwrap();
    member["comment"]["author_association"] = json!("MEMBER");
    // One whose head the remote lacks starts nothing.
    let mut gone = member.clone();
    gone["issue"]["number"] = json!(45);
    // (Another member: one sender may ask once a minute at this rate.)
    gone["comment"]["user"]["login"] = json!("hubot");
    gone["sender"]["login"] = json!("hubot");
    let gone = serde_json::to_vec(&gone).unwrap();
    let (code, said) = deliver(
        &url,
        "issue_comment",
        &gone,
        &sign(SECRET.as_bytes(), &gone),
        "g-4",
    );
    // (Why is in the server's log, not in the answer.)
    assert_eq!(code, 503, "{said}");
    let member = serde_json::to_vec(&member).unwrap();
    let (code, said) = deliver(
        &url,
        "issue_comment",
        &member,
        &sign(SECRET.as_bytes(), &member),
        "g-3",
    );
    assert_eq!(code, 202, "{said}");
    let start = Instant::now();
    let all = loop {
        let all = seen.lock().unwrap().clone();
        if all.iter().filter(|c| c.path.contains("/statuses/")).count() == 3 {
            break all;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "{all:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(all.iter().any(|c| c.path.ends_with("/issues/43/comments")));
    let on_head: Vec<_> = all
        .iter()
        .filter(|c| c.path.ends_with(&format!("/statuses/{head}")))
        .collect();
    // The head itself needed the task's change: it does not pass, and the
    // status says where the fix is.
    assert_eq!(on_head.len(), 1, "{all:?}");
    assert_eq!(on_head[0].body["state"], "failure");
    assert_eq!(on_head[0].body["context"], "loop-engine/task");
    assert!(
        on_head[0].body["description"]
            .as_str()
            .unwrap()
            .contains("pass only with its change"),
        "{:?}",
        on_head[0]
    );
    assert_eq!(
        on_head[0].body["target_url"],
        "https://github.test/acme/widgets/pull/77"
    );
    for (n, status) in all
        .iter()
        .enumerate()
        .filter(|(_, c)| c.path.contains("/statuses/") && !c.path.ends_with(&head))
    {
        assert_eq!(status.body["state"], "success");
        assert_eq!(status.body["context"], "loop-engine");
        // The commit a POST /git/commits made (the stand-in numbers them,
        // 40 hexadecimal digits as GitHub's are).
        let sha = status.path.rsplit('/').next().unwrap();
        let made = all[..n].iter().enumerate().any(|(k, c)| {
            c.path.ends_with("/git/commits")
                && c.method == "POST"
                && sha == format!("c0ffee{:034}", k + 1)
        });
        assert!(made, "{sha}");
    }
    let pr43 = all
        .iter()
        .filter(|c| c.path.ends_with("/pulls") && c.method == "POST")
        .nth(1)
        .unwrap();
    assert!(
        !pr43.body["body"].as_str().unwrap().contains("Closes #"),
        "a pull request closes nothing"
    );
    assert_eq!(pr43.body["base"], "feature", "{pr43:?}");
    // Its commit's parent is the pull request's head: the task's base.
    let second = all
        .iter()
        .filter(|c| c.path.ends_with("/git/commits") && c.method == "POST")
        .nth(1)
        .unwrap();
    assert_eq!(second.body["parents"], json!([head.as_str()]));
    shared::stop(server);
    assert!(
        all.iter().all(|c| c.auth == format!("Bearer {TOKEN}")),
        "{all:?}"
    );
    // Two tasks in all: the issue's and pull request #43's (#45's none).
    let listed = shared::loop_in(&home)
        .args(["list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(
        shared::json_lines(&listed).len(),
        2,
        "{}",
        shared::text(&listed)
    );
    // The pull request's task records the call that read its head.
    let pr_task = shared::json_lines(&listed)
        .into_iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .find(|t| *t != id)
        .unwrap();
    let ledger =
        std::fs::read_to_string(project.join(format!(".loop/receipts/{pr_task}.ledger.jsonl")))
            .unwrap();
    let genesis: Value = serde_json::from_str(ledger.lines().next().unwrap()).unwrap();
    let text = genesis.to_string();
    // (Read as values: a ledger line's members are in canonical order.)
    let call = genesis["payload"]["trigger"]["github"]["calls"][0].clone();
    let call = (call["method"] == "GET"
        && call["path"] == "/repos/acme/widgets/pulls/43"
        && call["status"] == 200)
        .then_some(());
    assert!(call.is_some(), "{text}");
    let tree = calls
        .iter()
        .find(|c| c.path.ends_with("/git/trees"))
        .unwrap();
    let paths: Vec<&str> = tree.body["tree"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"fix.txt"), "{paths:?}");
    // A link the task made goes up as git keeps one: a blob of its
    // target, mode 120000.
    let link = tree.body["tree"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "link.txt")
        .unwrap_or_else(|| panic!("{paths:?}"));
    assert_eq!(link["mode"], "120000");
    assert!(
        paths.contains(&format!(".loop-receipts/{id}.receipt.json").as_str()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&format!(".loop-receipts/{id}.ledger.jsonl").as_str()),
        "{paths:?}"
    );
    assert_eq!(tree.body["base_tree"], "base-tree");
    // The change's content went up as it was verified.
    use base64::Engine;
    let blobs: Vec<Vec<u8>> = calls
        .iter()
        .filter(|c| c.path.ends_with("/git/blobs"))
        .map(|c| {
            base64::engine::general_purpose::STANDARD
                .decode(c.body["content"].as_str().unwrap())
                .unwrap()
        })
        .collect();
    assert!(blobs.iter().any(|b| b == b"fixed\n"));
    assert!(blobs.iter().any(|b| b == b"fix.txt"));
    let commit = calls
        .iter()
        .find(|c| c.path.ends_with("/git/commits") && c.method == "POST")
        .unwrap();
    let base = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(&project)
        .output()
        .unwrap();
    let base = String::from_utf8_lossy(&base.stdout).to_string();
    assert_eq!(commit.body["parents"], json!([base.trim()]));
    let refs = calls
        .iter()
        .find(|c| c.path.ends_with("/git/refs"))
        .unwrap();
    assert_eq!(refs.body["ref"], format!("refs/heads/loop/{id}"));
    let pr = calls.iter().find(|c| c.path.ends_with("/pulls")).unwrap();
    assert_eq!(pr.body["base"], "main");
    assert_eq!(pr.body["head"], format!("loop/{id}"));
    let pr_body = pr.body["body"].as_str().unwrap();
    assert!(pr_body.contains("was **verified**"), "{pr_body}");
    assert!(pr_body.contains("Closes #42."), "{pr_body}");
    let receipt = std::fs::read(project.join(format!(".loop/receipts/{id}.receipt.json"))).unwrap();
    let digest = loop_protocol::hash::sha256_hex(&receipt);
    assert!(pr_body.contains(&digest), "{pr_body}");
    let c = calls
        .iter()
        .find(|c| c.path.ends_with("/issues/42/comments"))
        .unwrap();
    let said = c.body["body"].as_str().unwrap();
    assert!(said.contains("ended **verified**"), "{said}");
    assert!(
        said.contains("https://github.test/acme/widgets/pull/77"),
        "{said}"
    );
    // Every call is kept; the token nowhere.
    let report =
        std::fs::read_to_string(project.join(format!(".loop/tasks/{id}/github.json"))).unwrap();
    let r: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        r["calls"].as_array().unwrap().len(),
        calls.len(),
        "{report}"
    );
    assert_eq!(
        r["pull_request"],
        "https://github.test/acme/widgets/pull/77"
    );
    assert!(!report.contains(TOKEN), "{report}");
    // The same report, signed beside the receipt as an addendum about it;
    // the receipt still verifies, the addendum not stray.
    let addendum = project.join(format!(".loop/receipts/{id}.addendum-1.json"));
    let payload = shared::payload_of(&addendum);
    assert_eq!(payload["predicate"]["event"], "reported");
    assert_eq!(payload["predicate"]["report"], r);
    let v = shared::loop_in(&home)
        .args(["verify", "--json"])
        .arg(project.join(format!(".loop/receipts/{id}.receipt.json")))
        .output()
        .unwrap();
    assert_eq!(v.status.code(), Some(0), "{}", shared::text(&v));
    let verified: Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(verified["stray_addenda"], json!([]), "{verified}");
    let state = home.join("state");
    for f in walk(&project.join(".loop")).into_iter().chain(walk(&state)) {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(TOKEN),
            "the token is in {}",
            f.display()
        );
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// The comment showing draft `draft` on issue `issue`, once posted, and
/// the digest a reply names its contract by (eight hexadecimal digits).
fn posted_draft(seen: &shared::TakenAll, issue: u64, draft: &str) -> (String, String) {
    let posted = |c: &shared::Taken| {
        c.path.ends_with(&format!("/issues/{issue}/comments"))
            && c.body["body"].as_str().is_some_and(|b| b.contains(draft))
    };
    let all = wait_for(seen, posted);
    let shown = all.iter().find(|c| posted(c)).unwrap().body["body"]
        .as_str()
        .unwrap()
        .to_string();
    let at = shown
        .find(&format!("/loop confirm {draft} "))
        .unwrap_or_else(|| panic!("{shown}"));
    let digest = shown[at + 15 + draft.len()..][..8].to_string();
    assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()), "{shown}");
    (shown, digest)
}

/// Wait until the stand-in took a call `pick` accepts; all it took.
fn wait_for(seen: &shared::TakenAll, pick: impl Fn(&shared::Taken) -> bool) -> Vec<shared::Taken> {
    let start = Instant::now();
    loop {
        let all = seen.lock().unwrap().clone();
        if all.iter().any(&pick) {
            return all;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "{all:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A GitHub trigger without checks drafts its contract from the issue:
/// the draft is posted on the issue and waits for a person. A reply from
/// an author the trigger does not take, one on another issue, and one
/// naming a draft that is not there answer nothing; a member's reply on
/// the issue confirms it, the task runs and is verified, and its genesis
/// says who confirmed. A trigger with `auto_confirm` locks what the critic
/// accepted without asking anyone.
#[test]
fn a_drafted_contract_is_confirmed_by_a_reply_comment_or_by_auto_confirm() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("github-draft");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "widgets\n").unwrap();
    std::fs::write(project.join("draft.yaml"), shared::DRAFTING).unwrap();
    let (port, seen) = github();
    let inlet = format!("token_env: LOOP_TEST_GITHUB_TOKEN, api_url: 'http://127.0.0.1:{port}'");
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "models:\n  maker:\n    spec: scripted:draft.yaml\ntriggers:\n  - name: gh\n    webhook: {{secret_env: LOOP_TEST_HOOK_SECRET, style: github, owner: github}}\n    github: {{{inlet}, label: loop, command: /loop, console_url: 'https://loop.example.test'}}\n    task: {{instruction: \"Resolve the GitHub issue\"}}\n  - name: auto\n    webhook: {{secret_env: LOOP_TEST_HOOK_SECRET_2, style: github, owner: github}}\n    github: {{{inlet}, label: auto, auto_confirm: true}}\n    task: {{instruction: \"Resolve the GitHub issue\"}}\n"
        ),
    )
    .unwrap();
    shared::commit_all(&project);
    const SECRET_2: &str = "another-hook-s3cret-2";
    let (server, url) = shared::serve(
        &home,
        &project,
        &[
            ("LOOP_TEST_HOOK_SECRET", SECRET),
            ("LOOP_TEST_HOOK_SECRET_2", SECRET_2),
            ("LOOP_TEST_GITHUB_TOKEN", TOKEN),
        ],
        &["--rate", "40"],
    );
    let signed = |v: &Value| {
        let b = serde_json::to_vec(v).unwrap();
        let sig = sign(SECRET.as_bytes(), &b);
        (b, sig)
    };
    let mut labelled: Value = serde_json::from_slice(&fixture("issues-labeled.json")).unwrap();
    // What the issue asks decides what the drafted contract may check.
    labelled["issue"]["title"] = json!("Write hello.txt saying hello");
    let (b, sig) = signed(&labelled);
    let (code, said) = deliver(&url, "issues", &b, &sig, "d-1");
    assert_eq!(code, 202, "{said}");
    let draft = serde_json::from_str::<Value>(&said).unwrap()["draft"]
        .as_str()
        .unwrap()
        .to_string();
    // The drafted contract is posted on the issue, with how to answer.
    let (shown, digest) = posted_draft(&seen, 42, &draft);
    let digest = digest.as_str();
    assert!(shown.contains("grep -q hello hello.txt"), "{shown}");
    assert!(
        shown.contains(&format!("https://loop.example.test/#/draft/{draft}")),
        "{shown}"
    );
    // Replies that answer nothing.
    let mut reply: Value = serde_json::from_slice(&fixture("issue-comment-created.json")).unwrap();
    reply["issue"]["number"] = json!(42);
    reply["issue"]
        .as_object_mut()
        .unwrap()
        .remove("pull_request");
    reply["comment"]["body"] = json!(format!("/loop confirm {draft} {digest}"));
    let (b, sig) = signed(&reply);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-2");
    assert_eq!(code, 200, "{said}");
    assert!(
        said.contains("the comment's author (NONE) may not ask"),
        "{said}"
    );
    reply["comment"]["author_association"] = json!("MEMBER");
    let mut elsewhere = reply.clone();
    elsewhere["issue"]["number"] = json!(7);
    let (b, sig) = signed(&elsewhere);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-3");
    assert_eq!(code, 200, "{said}");
    assert!(
        said.contains(&format!("no draft {draft} was asked for here")),
        "{said}"
    );
    let mut unknown = reply.clone();
    unknown["comment"]["body"] = json!(format!("/loop confirm d-0000000000000000 {digest}"));
    let (b, sig) = signed(&unknown);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-4");
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("no draft d-0000000000000000"), "{said}");
    // An answer naming another contract than the one shown locks nothing;
    // words that start as an answer but are not one draft nothing new.
    let mut stale = reply.clone();
    stale["comment"]["body"] = json!(format!("/loop confirm {draft} 00000000"));
    let (b, sig) = signed(&stale);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-4b");
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("contract changed since"), "{said}");
    let mut short = reply.clone();
    short["comment"]["body"] = json!(format!("/loop confirm {draft}"));
    let (b, sig) = signed(&short);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-4c");
    assert_eq!(code, 200, "{said}");
    assert!(
        said.contains("answer a draft with `confirm ID DIGEST`"),
        "{said}"
    );
    // Nothing started yet.
    let listed = |n: usize| {
        let out = shared::loop_in(&home)
            .args(["list", "--json", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        assert_eq!(shared::json_lines(&out).len(), n, "{}", shared::text(&out));
        shared::json_lines(&out)
    };
    listed(0);
    // A member's reply on the issue confirms it.
    let (b, sig) = signed(&reply);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-5");
    assert_eq!(code, 200, "{said}");
    assert!(said.contains(&format!("draft {draft} confirmed")), "{said}");
    // Answered once: the same answer again answers nothing.
    let mut again = reply.clone();
    again["comment"]["id"] = json!(999);
    let (b, sig) = signed(&again);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-6");
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("is not waiting for an answer"), "{said}");
    // It runs, is verified and comes back as a pull request.
    wait_for(&seen, |c| c.path.ends_with("/pulls") && c.method == "POST");
    let id = listed(1)[0]["id"].as_str().unwrap().to_string();
    let ledger =
        std::fs::read_to_string(project.join(format!(".loop/receipts/{id}.ledger.jsonl"))).unwrap();
    let genesis: Value = serde_json::from_str(ledger.lines().next().unwrap()).unwrap();
    let text = genesis.to_string();
    assert!(
        text.contains("@drive-by on GitHub, in a reply comment on acme/widgets #42"),
        "{text}"
    );
    // The call that showed the draft on the issue is in the record.
    let calls = &genesis["payload"]["drafting"]["calls"];
    assert_eq!(calls[0]["method"], "POST", "{text}");
    assert_eq!(
        calls[0]["path"], "/repos/acme/widgets/issues/42/comments",
        "{text}"
    );
    assert_eq!(calls[0]["status"], 201, "{text}");
    assert!(text.contains("grep -q hello hello.txt"), "{text}");

    // A draft outlives its server: a reply to it after a restart starts
    // its task from the trigger's record, and the genesis says who
    // confirmed it.
    let mut later = labelled.clone();
    later["issue"]["number"] = json!(60);
    let (b, sig) = signed(&later);
    let (code, said) = deliver(&url, "issues", &b, &sig, "d-8");
    assert_eq!(code, 202, "{said}");
    let kept = serde_json::from_str::<Value>(&said).unwrap()["draft"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, kept_digest) = posted_draft(&seen, 60, &kept);
    // And one the person will reject after the restart.
    let mut dropped = labelled.clone();
    dropped["issue"]["number"] = json!(61);
    let (b, sig) = signed(&dropped);
    let (code, said) = deliver(&url, "issues", &b, &sig, "d-8b");
    assert_eq!(code, 202, "{said}");
    let dropped_draft = serde_json::from_str::<Value>(&said).unwrap()["draft"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, dropped_digest) = posted_draft(&seen, 61, &dropped_draft);
    shared::stop(server);
    let (server, said) = shared::serve_saying(
        &home,
        &project,
        &[
            ("LOOP_TEST_HOOK_SECRET", SECRET),
            ("LOOP_TEST_HOOK_SECRET_2", SECRET_2),
            ("LOOP_TEST_GITHUB_TOKEN", TOKEN),
        ],
        &["--rate", "40"],
        2,
    );
    assert_eq!(
        said[1], "2 drafted contract(s) wait for their answer",
        "{said:?}"
    );
    let url = said[0]
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_string();
    // Rejected after the restart: the issue hears that nothing started,
    // and why (before, only a draft drafted by the same server was told).
    let mut reply_61 = reply.clone();
    reply_61["issue"]["number"] = json!(61);
    reply_61["comment"]["id"] = json!(1061);
    reply_61["comment"]["body"] = json!(format!("/loop reject {dropped_draft} {dropped_digest}"));
    let (b, sig) = signed(&reply_61);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-9b");
    assert_eq!(code, 200, "{said}");
    assert!(
        said.contains(&format!("draft {dropped_draft} rejected")),
        "{said}"
    );
    wait_for(&seen, |c| {
        c.path.ends_with("/issues/61/comments")
            && c.body["body"].as_str()
                == Some(
                    format!("Loop Engine started no task for draft `{dropped_draft}`: a person rejected the drafted contract.")
                        .as_str(),
                )
    });
    let mut reply_60 = reply.clone();
    reply_60["issue"]["number"] = json!(60);
    reply_60["comment"]["id"] = json!(1060);
    reply_60["comment"]["body"] = json!(format!("/loop confirm {kept} {kept_digest}"));
    let (b, sig) = signed(&reply_60);
    let (code, said) = deliver(&url, "issue_comment", &b, &sig, "d-9");
    assert_eq!(code, 200, "{said}");
    assert!(said.contains(&format!("draft {kept} confirmed")), "{said}");
    let all = wait_for(&seen, |c| {
        c.path.ends_with("/issues/60/comments")
            && c.body["body"]
                .as_str()
                .is_some_and(|b| b.contains("ended **verified**"))
    });
    assert_eq!(
        all.iter()
            .filter(|c| c.path.ends_with("/pulls") && c.method == "POST")
            .count(),
        2,
        "{all:?}"
    );
    let later_id = listed(2)
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .find(|t| *t != id)
        .unwrap();
    let ledger =
        std::fs::read_to_string(project.join(format!(".loop/receipts/{later_id}.ledger.jsonl")))
            .unwrap();
    let genesis: Value = serde_json::from_str(ledger.lines().next().unwrap()).unwrap();
    let text = genesis.to_string();
    assert!(
        text.contains(
            "\"confirmed_by\":\"@drive-by on GitHub, in a reply comment on acme/widgets #60"
        ),
        "{text}"
    );

    // auto_confirm: the critic's contract is locked at once; no draft is
    // posted, the task runs.
    let mut auto = labelled.clone();
    auto["issue"]["number"] = json!(50);
    auto["label"]["name"] = json!("auto");
    let b = serde_json::to_vec(&auto).unwrap();
    let (code, said) = deliver_to(
        "auto",
        &url,
        "issues",
        &b,
        &sign(SECRET_2.as_bytes(), &b),
        "d-7",
    );
    assert_eq!(code, 202, "{said}");
    let all = wait_for(&seen, |c| c.path.ends_with("/issues/50/comments"));
    let on_50: Vec<_> = all
        .iter()
        .filter(|c| c.path.ends_with("/issues/50/comments"))
        .collect();
    assert_eq!(on_50.len(), 1, "{on_50:?}");
    let said = on_50[0].body["body"].as_str().unwrap();
    assert!(said.contains("ended **verified**"), "{said}");
    shared::stop(server);
    let tasks = listed(3);
    let auto_id = tasks
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .find(|t| *t != id && *t != later_id)
        .unwrap();
    let ledger =
        std::fs::read_to_string(project.join(format!(".loop/receipts/{auto_id}.ledger.jsonl")))
            .unwrap();
    assert!(
        ledger
            .lines()
            .next()
            .unwrap()
            .contains("the trigger `auto` (auto_confirm)"),
        "{ledger}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

/// A project below its repository's top works on a copy, which no
/// commit of the repository holds: its verified task makes no pull
/// request, and the comment on the issue says so and why (before, the
/// issue heard nothing at all).
#[test]
fn a_project_below_the_repository_top_says_why_it_opens_no_pull_request() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("github-monorepo");
    let _ = std::fs::remove_dir_all(&home);
    let repo = home.join("repo");
    let project = repo.join("app");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "widgets\n").unwrap();
    std::fs::write(
        project.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: fix.txt, content: \"fixed\\n\"}}\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    let (port, seen) = github();
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "models:\n  maker:\n    spec: scripted:script.yaml\ntriggers:\n  - name: gh\n    webhook: {{secret_env: LOOP_TEST_HOOK_SECRET, style: github, owner: github}}\n    github: {{token_env: LOOP_TEST_GITHUB_TOKEN, api_url: 'http://127.0.0.1:{port}', label: loop}}\n    task: {{instruction: \"Resolve the GitHub issue\", checks: [\"grep -q fixed fix.txt\"]}}\n"
        ),
    )
    .unwrap();
    shared::commit_all(&repo);
    let (server, url) = shared::serve(
        &home,
        &project,
        &[
            ("LOOP_TEST_HOOK_SECRET", SECRET),
            ("LOOP_TEST_GITHUB_TOKEN", TOKEN),
        ],
        &[],
    );
    let labelled = fixture("issues-labeled.json");
    let (code, said) = deliver(
        &url,
        "issues",
        &labelled,
        &sign(SECRET.as_bytes(), &labelled),
        "m-1",
    );
    assert_eq!(code, 202, "{said}");
    let all = wait_for(&seen, |c| c.path.ends_with("/issues/42/comments"));
    shared::stop(server);
    let c = all
        .iter()
        .find(|c| c.path.ends_with("/issues/42/comments"))
        .unwrap();
    let said = c.body["body"].as_str().unwrap();
    assert!(said.contains("ended **verified**"), "{said}");
    assert!(
        said.contains("No pull request carries the change: task")
            && said.contains("started from a copy of the project"),
        "{said}"
    );
    assert!(!all.iter().any(|c| c.path.ends_with("/pulls")), "{all:?}");
    let _ = std::fs::remove_dir_all(&home);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(walk(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}
