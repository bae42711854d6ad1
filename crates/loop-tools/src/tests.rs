use super::*;
use loop_protocol::ObservationStatus;
use loop_workspace::testdir::TestDir;
use loop_workspace::{Change, Journal, Protected};
use serde_json::json;

fn toolbox(d: &TestDir) -> ToolBox {
    let rules: Vec<String> = loop_protocol::contract::DEFAULT_PROTECTED
        .iter()
        .map(|s| s.to_string())
        .chain(["tests/**".to_string()])
        .collect();
    ToolBox::new(
        Jail::new(d.path(), Protected::new(&rules).unwrap()).unwrap(),
        ToolLimits::default(),
    )
    .unwrap()
}

fn call(tool: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        tool: tool.into(),
        args,
    }
}

fn rule_of(o: &ToolOutcome) -> Option<&str> {
    match &o.observation.status {
        ObservationStatus::Refused { rule } => Some(rule),
        _ => None,
    }
}

#[test]
fn write_read_edit_round_trip() {
    let d = TestDir::new("tools-rw");
    let mut t = toolbox(&d);
    let o = t.execute(&call(
        "write_file",
        json!({"path": "src/a.py", "content": "x = 1\ny = 2\n"}),
    ));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
    assert!(o.observation.changed);
    let o = t.execute(&call(
        "edit_file",
        json!({"path": "src/a.py", "old": "y = 2", "new": "y = 3"}),
    ));
    assert!(o.observation.changed, "{}", o.observation.content);
    assert!(
        o.observation.content.contains("line 2"),
        "{}",
        o.observation.content
    );
    let o = t.execute(&call("read_file", json!({"path": "src/a.py"})));
    assert_eq!(o.observation.content, "x = 1\ny = 3\n");
    let o = t.execute(&call("list_files", json!({})));
    assert!(o.observation.content.contains("src/a.py"));
}

#[test]
fn writing_the_same_content_is_not_a_change() {
    let d = TestDir::new("tools-same");
    let mut t = toolbox(&d);
    t.execute(&call("write_file", json!({"path": "a", "content": "x"})));
    let o = t.execute(&call("write_file", json!({"path": "a", "content": "x"})));
    assert!(!o.observation.changed);
}

#[test]
fn edit_needs_a_unique_exact_match() {
    let d = TestDir::new("tools-edit");
    let mut t = toolbox(&d);
    t.execute(&call(
        "write_file",
        json!({"path": "a", "content": "x\nx\n"}),
    ));
    let o = t.execute(&call(
        "edit_file",
        json!({"path": "a", "old": "x", "new": "y"}),
    ));
    assert_eq!(o.observation.status, ObservationStatus::Error);
    assert!(o.observation.content.contains("occurs 2 times"));
    let o = t.execute(&call(
        "edit_file",
        json!({"path": "a", "old": "z", "new": "y"}),
    ));
    assert!(o.observation.content.contains("not found"));
    assert_eq!(
        std::fs::read_to_string(d.path().join("a")).unwrap(),
        "x\nx\n"
    );
}

#[test]
fn writes_outside_the_workspace_are_refused_with_the_rule() {
    let d = TestDir::new("tools-outside");
    let mut t = toolbox(&d);
    let o = t.execute(&call(
        "write_file",
        json!({"path": "/tmp/loop-escape", "content": "x"}),
    ));
    assert_eq!(rule_of(&o), Some("jail: absolute path"));
    let o = t.execute(&call(
        "write_file",
        json!({"path": "../escape", "content": "x"}),
    ));
    assert_eq!(rule_of(&o), Some("jail: `..` component"));
    assert!(!d.path().parent().unwrap().join("escape").exists());
}

#[test]
fn protected_files_cannot_be_edited() {
    let d = TestDir::new("tools-protected");
    std::fs::create_dir_all(d.path().join("tests")).unwrap();
    std::fs::write(d.path().join("tests/test_x.py"), "assert False\n").unwrap();
    let mut t = toolbox(&d);
    let o = t.execute(&call(
        "edit_file",
        json!({"path": "tests/test_x.py", "old": "False", "new": "True"}),
    ));
    assert_eq!(rule_of(&o), Some("protected: tests/**"));
    assert!(o.observation.content.contains("tests/**"));
    assert_eq!(
        std::fs::read_to_string(d.path().join("tests/test_x.py")).unwrap(),
        "assert False\n"
    );
    let o = t.execute(&call(
        "write_file",
        json!({"path": ".env", "content": "KEY=1"}),
    ));
    assert_eq!(rule_of(&o), Some("protected: .env*"));
}

#[test]
fn unknown_tools_and_bad_arguments_are_observations() {
    let d = TestDir::new("tools-bad");
    let mut t = toolbox(&d);
    let o = t.execute(&call("rm_rf", json!({})));
    assert_eq!(rule_of(&o), Some("authority: unknown tool"));
    let o = t.execute(&call("write_file", json!({"path": 3})));
    assert_eq!(o.observation.status, ObservationStatus::Error);
    assert!(
        o.observation
            .content
            .contains("invalid arguments for `write_file`"),
        "{}",
        o.observation.content
    );
    assert!(
        o.observation
            .content
            .contains("write_file.args.content: missing (required by `write_file`)"),
        "the missing argument is named: {}",
        o.observation.content
    );
    let o = t.execute(&call("write_file", json!({"path": 3, "content": ""})));
    assert!(
        o.observation
            .content
            .contains("write_file.args.path: must be string, got a number"),
        "{}",
        o.observation.content
    );
    let o = t.execute(&call("read_file", json!({"path": "a", "extra": 1})));
    assert!(
        o.observation
            .content
            .contains("read_file.args.extra: `read_file` takes no such argument (it takes: path)"),
        "{}",
        o.observation.content
    );
}

#[test]
fn narrowed_authority_refuses_the_rest() {
    let d = TestDir::new("tools-narrow");
    let mut t = toolbox(&d);
    t.narrow(&["read_file", "finish"]);
    let o = t.execute(&call("run_command", json!({"command": "true"})));
    assert_eq!(rule_of(&o), Some("authority: tool not granted"));
    assert_eq!(t.specs().len(), 2);
}

#[test]
fn run_command_reports_exit_output_and_changes() {
    let d = TestDir::new("tools-run");
    let mut t = toolbox(&d);
    let o = t.execute(&call(
        "run_command",
        json!({"command": "echo hi > out.txt; echo done; exit 4"}),
    ));
    assert!(
        o.observation.content.starts_with("exit 4"),
        "{}",
        o.observation.content
    );
    assert!(o.observation.content.contains("done"));
    assert!(o.observation.changed);
    assert_eq!(
        std::fs::read_to_string(d.path().join("out.txt")).unwrap(),
        "hi\n"
    );
}

#[test]
fn run_command_gives_a_terminal_of_the_runtimes_only_when_asked() {
    let d = TestDir::new("tools-run-tty");
    let mut t = toolbox(&d);
    // Asked for: a terminal on every stream, whose writes come back as the
    // command's output and whose work lands in the workspace as any.
    let o = t.execute(&call(
        "run_command",
        json!({"command": "test -t 0 && test -t 1 && test -t 2 && echo on-tty > /dev/tty && echo kept > out.txt", "terminal": true}),
    ));
    assert!(
        o.observation.content.starts_with("exit 0"),
        "{}",
        o.observation.content
    );
    assert!(
        o.observation.content.contains("on-tty"),
        "{}",
        o.observation.content
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("out.txt")).unwrap(),
        "kept\n"
    );
    // Not asked for: no terminal, and /dev/tty names nothing.
    let o = t.execute(&call(
        "run_command",
        json!({"command": "test -t 1 || echo no-tty; test -e /dev/tty || echo no-dev-tty"}),
    ));
    assert!(
        o.observation.content.contains("no-tty"),
        "{}",
        o.observation.content
    );
    assert!(
        o.observation.content.contains("no-dev-tty") || !loop_sandbox::overlay_available(),
        "{}",
        o.observation.content
    );
}

#[test]
fn finish_is_a_control_not_a_completion() {
    let d = TestDir::new("tools-finish");
    let mut t = toolbox(&d);
    let o = t.execute(&call("finish", json!({"summary": "all done"})));
    assert_eq!(
        o.control,
        Some(Control::Finish {
            summary: "all done".into()
        })
    );
    assert!(o.observation.content.contains("Verification requested"));
}

#[test]
fn a_multi_file_patch_applies_whole() {
    let d = TestDir::new("tools-patch");
    std::fs::write(d.path().join("a.py"), "x = 1\ny = 2\n").unwrap();
    std::fs::write(d.path().join("old.txt"), "move me\n").unwrap();
    std::fs::write(d.path().join("gone.txt"), "bye\n").unwrap();
    let mut t = toolbox(&d);
    let patch = "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n\
--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+print('new')\n\
--- a/old.txt\n+++ b/renamed.txt\n@@ -1 +1 @@\n-move me\n+moved\n\
--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
    let o = t.execute(&call("apply_patch", json!({ "patch": patch })));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
    assert!(o.observation.changed);
    assert!(
        o.observation.content.contains("+3 -3"),
        "{}",
        o.observation.content
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("a.py")).unwrap(),
        "x = 1\ny = 3\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("pkg/new.py")).unwrap(),
        "print('new')\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("renamed.txt")).unwrap(),
        "moved\n"
    );
    assert!(!d.path().join("old.txt").exists());
    assert!(!d.path().join("gone.txt").exists());
}

#[test]
fn one_stale_hunk_refuses_the_whole_patch_and_names_it() {
    let d = TestDir::new("tools-patch-stale");
    std::fs::write(d.path().join("a.txt"), "one\n").unwrap();
    std::fs::write(d.path().join("b.txt"), "two\nthree\n").unwrap();
    let mut t = toolbox(&d);
    let patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n two\n-four\n+FOUR\n";
    let o = t.execute(&call("apply_patch", json!({ "patch": patch })));
    assert_eq!(o.observation.status, ObservationStatus::Error);
    let c = &o.observation.content;
    assert!(c.contains("nothing applied"), "{c}");
    assert!(c.contains("b.txt: hunk 1 does not apply"), "{c}");
    assert!(c.contains("expected │four"), "{c}");
    assert!(c.contains("found    │three"), "{c}");
    assert_eq!(
        std::fs::read_to_string(d.path().join("a.txt")).unwrap(),
        "one\n",
        "all or nothing"
    );
}

#[test]
fn patches_cannot_leave_the_workspace_or_touch_protected_paths() {
    let d = TestDir::new("tools-patch-jail");
    std::fs::create_dir_all(d.path().join("tests")).unwrap();
    std::fs::write(d.path().join("tests/t.py"), "assert 0\n").unwrap();
    let mut t = toolbox(&d);
    let escape = "--- /dev/null\n+++ b/../escaped.txt\n@@ -0,0 +1 @@\n+x\n";
    let o = t.execute(&call("apply_patch", json!({ "patch": escape })));
    assert!(
        o.observation
            .content
            .contains("may not leave the workspace"),
        "{}",
        o.observation.content
    );
    assert!(!d.path().parent().unwrap().join("escaped.txt").exists());
    let protected = "--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1 +1 @@\n-assert 0\n+assert 1\n";
    let o = t.execute(&call("apply_patch", json!({ "patch": protected })));
    assert_eq!(rule_of(&o), Some("protected: tests/**"));
    assert_eq!(
        std::fs::read_to_string(d.path().join("tests/t.py")).unwrap(),
        "assert 0\n"
    );
}

#[test]
fn a_crash_mid_patch_is_rolled_back_when_the_toolbox_starts_again() {
    let d = TestDir::new("tools-patch-crash");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a"), "a0\n").unwrap();
    let journal_dir = d.path().join("journal");
    // Simulate a step that crashed after writing one of two files.
    let j = Journal::new(&journal_dir, &ws);
    let changes = vec![
        Change::file("a", ws.join("a"), Some(b"a1\n".to_vec())),
        Change::file("b", ws.join("b"), Some(b"b1\n".to_vec())),
    ];
    assert!(j.commit_until(&changes, Some(1)).is_err());
    assert_eq!(std::fs::read_to_string(ws.join("a")).unwrap(), "a1\n");
    let rules: Vec<String> = vec![];
    let jail = Jail::new(&ws, loop_workspace::Protected::new(&rules).unwrap()).unwrap();
    let (_t, restored) = ToolBox::new(jail, ToolLimits::default())
        .unwrap()
        .with_journal(&journal_dir)
        .unwrap();
    assert_eq!(restored, 2);
    assert_eq!(std::fs::read_to_string(ws.join("a")).unwrap(), "a0\n");
    assert!(!ws.join("b").exists());
}

fn lines(n: usize, tag: &str) -> String {
    (0..n).map(|i| format!("{tag} {i}\n")).collect()
}

#[test]
fn a_step_may_change_only_so_many_lines_measured_against_the_step_start() {
    let d = TestDir::new("tools-diff-limit");
    let jail = Jail::new(d.path(), Protected::new(&[]).unwrap()).unwrap();
    let mut t = ToolBox::new(
        jail,
        ToolLimits {
            max_diff_lines: 10,
            ..ToolLimits::default()
        },
    )
    .unwrap();
    t.begin_step();
    let o = t.execute(&call(
        "write_file",
        json!({"path": "a", "content": lines(8, "a")}),
    ));
    assert_eq!(o.observation.status, ObservationStatus::Ok);
    // Rewriting the same file counts against the step's start, not cumulatively.
    let o = t.execute(&call(
        "write_file",
        json!({"path": "a", "content": lines(9, "a")}),
    ));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
    let o = t.execute(&call(
        "write_file",
        json!({"path": "b", "content": lines(5, "b")}),
    ));
    assert_eq!(rule_of(&o), Some("limit: max_diff_lines"));
    assert!(
        o.observation
            .content
            .contains("14 lines, over the limit of 10"),
        "{}",
        o.observation.content
    );
    assert!(!d.path().join("b").exists());
    // A patch is measured as a whole, too.
    let patch = "--- /dev/null\n+++ b/c\n@@ -0,0 +1,2 @@\n+c 0\n+c 1\n".to_string();
    let o = t.execute(&call("apply_patch", json!({"patch": patch})));
    assert_eq!(rule_of(&o), Some("limit: max_diff_lines"));
    // The next step starts over.
    t.begin_step();
    let o = t.execute(&call(
        "write_file",
        json!({"path": "b", "content": lines(5, "b")}),
    ));
    assert_eq!(o.observation.status, ObservationStatus::Ok);
    // Changing one line of a long file is one... two lines (out and in).
    t.begin_step();
    let mut text = lines(9, "a");
    text = text.replacen("a 3", "A 3", 1);
    let o = t.execute(&call("write_file", json!({"path": "a", "content": text})));
    assert_eq!(o.observation.status, ObservationStatus::Ok);
}

#[test]
fn binary_content_is_refused_unless_allowed() {
    let d = TestDir::new("tools-binary");
    let mut t = toolbox(&d);
    let o = t.execute(&call(
        "write_file",
        json!({"path": "blob", "content": "a\u{0}b"}),
    ));
    assert_eq!(rule_of(&o), Some("limit: binary content"));
    assert!(!d.path().join("blob").exists());
}

#[test]
fn the_secret_gate_refuses_credentials_written_into_files() {
    let d = TestDir::new("tools-secret");
    let mut t = toolbox(&d);
    let o = t.execute(&call(
        "write_file",
        json!({"path": "config.py", "content": "import os\nKEY = 'sk-abcdefghijklmnopqrstu'\n"}),
    ));
    assert_eq!(rule_of(&o), Some("gate: secret"));
    assert!(
        o.observation.content.contains("config.py:2:8"),
        "{}",
        o.observation.content
    );
    assert!(
        !o.observation.content.contains("sk-abcdef"),
        "the refusal does not echo the secret"
    );
    assert!(!d.path().join("config.py").exists());
    let patch = "--- /dev/null\n+++ b/id_rsa\n@@ -0,0 +1,3 @@\n+-----BEGIN OPENSSH PRIVATE KEY-----\n+b3Blbn\n+-----END OPENSSH PRIVATE KEY-----\n";
    let o = t.execute(&call("apply_patch", json!({ "patch": patch })));
    assert_eq!(rule_of(&o), Some("gate: secret"));
    // Reading the key from the environment is fine.
    let o = t.execute(&call(
        "write_file",
        json!({"path": "config.py", "content": "import os\nKEY = os.environ['OPENAI_API_KEY']\n"}),
    ));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
}

/// Effect classes are data on the tool specs (what resume relies on).
#[test]
fn every_tool_spec_says_what_running_it_again_would_do() {
    use loop_protocol::Effect;
    let specs = crate::specs::all();
    let effect = |n: &str| specs.iter().find(|s| s.name == n).unwrap().effect;
    assert_eq!(effect("read_file"), Effect::Pure);
    assert_eq!(effect("list_files"), Effect::Pure);
    assert_eq!(effect("finish"), Effect::Pure);
    for w in ["write_file", "edit_file", "apply_patch"] {
        assert_eq!(effect(w), Effect::Idempotent, "{w}");
    }
    // Unstaged, a command may have effects that must not happen twice.
    assert_eq!(effect("run_command"), Effect::AtMostOnce);
    // Never sent to a model.
    let json = serde_json::to_string(&specs[0]).unwrap();
    assert!(!json.contains("effect"), "{json}");
}

#[test]
fn a_calls_effect_is_what_its_spec_says() {
    let d = TestDir::new("effects");
    let t = toolbox(&d);
    let specs = t.specs();
    for name in loop_protocol::ToolName::ALL
        .iter()
        .map(|n| n.as_str())
        .chain(["no_such_tool"])
    {
        let from_specs = specs
            .iter()
            .find(|s| s.name == name)
            .map_or(loop_protocol::Effect::AtMostOnce, |s| s.effect);
        assert_eq!(
            t.effect(&call(name, serde_json::json!({}))),
            from_specs,
            "{name}"
        );
    }
}

#[test]
fn nothing_is_written_once_the_fence_says_the_claim_may_have_lapsed() {
    let d = TestDir::new("fence");
    let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let gate = open.clone();
    let mut t = toolbox(&d).with_fence(std::sync::Arc::new(move || {
        gate.load(std::sync::atomic::Ordering::SeqCst)
    }));
    let ok = t.execute(&call(
        "write_file",
        serde_json::json!({"path": "a.txt", "content": "one\n"}),
    ));
    assert_eq!(ok.observation.status, loop_protocol::ObservationStatus::Ok);
    open.store(false, std::sync::atomic::Ordering::SeqCst);
    for c in [
        call(
            "write_file",
            serde_json::json!({"path": "a.txt", "content": "two\n"}),
        ),
        call(
            "write_file",
            serde_json::json!({"path": "b.txt", "content": "new\n"}),
        ),
        call(
            "edit_file",
            serde_json::json!({"path": "a.txt", "old": "one", "new": "ONE"}),
        ),
        call(
            "apply_patch",
            serde_json::json!({"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+uno\n"}),
        ),
    ] {
        let o = t.execute(&c).observation;
        assert_eq!(
            o.status,
            loop_protocol::ObservationStatus::Error,
            "{}: {o:?}",
            c.tool
        );
        assert!(
            o.content.contains("claim on the task may have lapsed"),
            "{}",
            o.content
        );
    }
    assert_eq!(
        std::fs::read_to_string(d.path().join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(!d.path().join("b.txt").exists());
}

/// A stdio MCP server in Python (`/usr/bin/python3`, inside the sandbox)
/// with two tools: `look` (read-only) and `poke` (side effects by
/// default); `look` answers `size` bytes, or writes a line of log to
/// stdout first when `size` is negative.
const FAKE_MCP: &str = r#"import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    rid = msg.get("id")
    if rid is None:
        continue
    m = msg["method"]
    if m == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}
    elif m == "tools/list":
        r = {"tools": [
            {"name": "look", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
            {"name": "poke", "inputSchema": {"type": "object"}},
            {"name": "dotted.name", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
            {"name": "../../evil name", "inputSchema": {"type": "object"}},
        ]}
    else:
        size = msg["params"]["arguments"].get("size", 5)
        if size < 0:
            sys.stdout.write("starting up...\n"); sys.stdout.flush()
            size = 5
        r = {"content": [{"type": "text", "text": "y" * size}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": r}) + "\n")
    sys.stdout.flush()
"#;

fn mcp_box(d: &TestDir, server: mcp::McpServer) -> ToolBox {
    std::fs::write(d.path().join("fake_mcp.py"), FAKE_MCP).unwrap();
    toolbox(d).with_mcp_servers(vec![server])
}

fn fake(tools: &[&str]) -> mcp::McpServer {
    mcp::McpServer {
        name: "fake".into(),
        transport: mcp::McpTransport::Stdio {
            command: vec!["python3".into(), "fake_mcp.py".into()],
            env: Default::default(),
        },
        tools: tools.iter().map(|t| t.to_string()).collect(),
        side_effects: Vec::new(),
        read_only: Vec::new(),
        timeout_secs: 10,
        max_output_bytes: 1 << 20,
        pinned: Vec::new(),
    }
}

#[test]
fn mcp_tools_are_offered_by_the_allow_list_and_side_effects_need_a_person() {
    let d = TestDir::new("tools-mcp-offer");
    let mut t = mcp_box(
        &d,
        fake(&["look", "poke", "dotted.name", "../../evil name"]),
    );
    let names: Vec<String> = t
        .specs()
        .into_iter()
        .filter(|s| s.name.starts_with(mcp::PREFIX))
        .map(|s| s.name)
        .collect();
    // A name that is not a tool name is never offered; `.` becomes `_`.
    assert_eq!(
        names,
        [
            "mcp__fake__look",
            "mcp__fake__poke",
            "mcp__fake__dotted_name"
        ]
    );
    let poke = call("mcp__fake__poke", json!({}));
    assert_eq!(
        t.needs_approval(&poke).as_deref(),
        Some("mcp_servers.fake: `poke` has side effects (its server does not mark it read-only)")
    );
    assert_eq!(t.effect(&poke), loop_protocol::Effect::AtMostOnce);
    let look = call("mcp__fake__look", json!({"size": 3}));
    assert_eq!(t.needs_approval(&look), None);
    assert_eq!(t.effect(&look), loop_protocol::Effect::Idempotent);
    // Called without the approval it needs: refused at the choke point.
    let o = t.execute(&poke);
    assert_eq!(
        rule_of(&o),
        Some("approval: needed"),
        "{}",
        o.observation.content
    );
    t.approve("c1");
    let o = t.execute(&poke);
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
    let o = t.execute(&look);
    assert!(
        o.observation.content.ends_with(":\nyyy"),
        "{}",
        o.observation.content
    );
    let rec = o.observation.mcp.as_ref().unwrap();
    assert_eq!(
        rec.arguments_sha256,
        loop_protocol::hash::sha256_hex(br#"{"size":3}"#)
    );
    assert!(!rec.failed);
}

#[test]
fn an_mcp_tool_outside_the_allow_list_or_of_no_server_is_refused_naming_why() {
    let d = TestDir::new("tools-mcp-refuse");
    let mut t = mcp_box(&d, fake(&["look"]));
    let _ = t.specs();
    let o = t.execute(&call("mcp__fake__poke", json!({})));
    assert_eq!(rule_of(&o), Some("authority: mcp_servers.fake.tools"));
    assert!(
        o.observation
            .content
            .contains("(mcp_servers.fake.tools: look)")
    );
    let o = t.execute(&call("mcp__other__look", json!({})));
    assert_eq!(rule_of(&o), Some("authority: unknown tool"));
    assert!(
        o.observation
            .content
            .contains("no MCP server `other` is declared")
    );
    let o = t.execute(&call("mcp__fake__nothing", json!({})));
    assert_eq!(rule_of(&o), Some("authority: unknown tool"));
    // Read-only vouched by the Loopfile, or side effects forced by it.
    let mut cfg = fake(&["look", "poke"]);
    cfg.read_only = vec!["poke".into()];
    cfg.side_effects = vec!["look".into()];
    let d2 = TestDir::new("tools-mcp-vouch");
    let t = mcp_box(&d2, cfg);
    let _ = t.specs();
    assert_eq!(t.needs_approval(&call("mcp__fake__poke", json!({}))), None);
    assert_eq!(
        t.needs_approval(&call("mcp__fake__look", json!({})))
            .as_deref(),
        Some("mcp_servers.fake.side_effects: `look`")
    );
}

#[test]
fn an_mcp_answer_is_bounded_for_the_model_and_a_log_line_on_stdout_is_garbage() {
    let d = TestDir::new("tools-mcp-bounds");
    let mut t = mcp_box(&d, fake(&["look"]));
    let o = t.execute(&call("mcp__fake__look", json!({"size": 100_000})));
    let c = &o.observation.content;
    assert!(c.len() < 17 * 1024, "{}", c.len());
    assert!(
        c.contains(
            "[… cut: the answer is 100000 bytes, 16384 shown; the ledger keeps its SHA-256]"
        ),
        "{}",
        &c[c.len().saturating_sub(200)..]
    );
    let rec = o.observation.mcp.as_ref().unwrap();
    assert!(rec.response_bytes > 100_000);
    // Only JSON-RPC may come on stdout: a log line fails the call, and the
    // server starts again at the next one.
    let o = t.execute(&call("mcp__fake__look", json!({"size": -1})));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Error,
        "{}",
        o.observation.content
    );
    assert!(
        o.observation
            .content
            .contains("sent something that is not JSON-RPC during `look`: starting up..."),
        "{}",
        o.observation.content
    );
    let o = t.execute(&call("mcp__fake__look", json!({"size": 2})));
    assert!(
        o.observation.content.ends_with(":\nyy"),
        "{}",
        o.observation.content
    );
}

#[test]
fn mcp_server_names_and_environments_are_checked() {
    assert!(mcp::server_name_problem("fs").is_none());
    for bad in ["", "Fs", "a__b", "a b", "x/y"] {
        assert!(mcp::server_name_problem(bad).is_some(), "{bad}");
    }
    for bad in [
        "PATH",
        "LD_PRELOAD",
        "ld_library_path",
        "NODE_OPTIONS",
        "HTTPS_PROXY",
        "all_proxy",
        "PYTHONPATH",
        "LOOP_STATE_DIR",
        "1X",
        "A-B",
    ] {
        assert!(mcp::env_problem(bad).is_some(), "{bad}");
    }
    assert!(mcp::env_problem("LOG_LEVEL").is_none());
}

#[test]
fn an_mcp_tool_called_before_its_server_listed_it_still_needs_its_approval() {
    let d = TestDir::new("tools-mcp-early");
    let mut t = mcp_box(&d, fake(&["poke"]));
    // Nothing listed yet: the approval question cannot know the tool...
    let poke = call("mcp__fake__poke", json!({}));
    assert_eq!(t.needs_approval(&poke), None);
    // ...so the choke point asks again once the server has said it.
    let o = t.execute(&poke);
    assert_eq!(
        rule_of(&o),
        Some("approval: needed"),
        "{}",
        o.observation.content
    );
    assert!(o.observation.mcp.is_none());
}

#[test]
fn a_remote_servers_word_that_a_tool_only_reads_is_not_taken() {
    let mut cfg = fake(&["look"]);
    let listed = [json!({"name": "look", "annotations": {"readOnlyHint": true}})];
    assert!(!mcp::offer(&cfg, &listed, &[])[0].side_effects);
    cfg.transport = mcp::McpTransport::Http {
        url: "http://127.0.0.1:9/mcp".into(),
    };
    assert!(mcp::offer(&cfg, &listed, &[])[0].side_effects);
    cfg.read_only = vec!["look".into()];
    assert!(!mcp::offer(&cfg, &listed, &[])[0].side_effects);
    // A name another server's tool already has is not offered twice.
    assert!(mcp::offer(&cfg, &listed, &["mcp__fake__look".into()]).is_empty());
}

#[test]
fn a_servers_schema_is_reduced_to_what_a_provider_takes() {
    let plain = json!({"type": "object"});
    assert_eq!(mcp::schema_of(&json!("nonsense")), plain);
    assert_eq!(mcp::schema_of(&json!({"type": "array"})), plain);
    assert_eq!(
        mcp::schema_of(&json!({"type": "object", "properties": {"a": 1}})),
        plain
    );
    assert_eq!(
        mcp::schema_of(
            &json!({"type": "object", "properties": {"a": {"type": "string"}},
            "required": ["a"], "$defs": {"x": {}}, "allOf": [{}], "additionalProperties": false})
        ),
        json!({"type": "object", "properties": {"a": {"type": "string"}},
            "required": ["a"], "additionalProperties": false})
    );
    let huge = json!({"type": "object", "properties": {"a": {"description": "x".repeat(40_000)}}});
    assert_eq!(mcp::schema_of(&huge), plain);
}

#[test]
fn a_server_whose_program_changed_in_the_workspace_is_not_started_again() {
    let d = TestDir::new("tools-mcp-rewritten");
    std::fs::write(d.path().join("fake_mcp.py"), FAKE_MCP).unwrap();
    // Pinned as the task began (python3 is not in the workspace: only the
    // script is).
    let mut cfg = fake(&["look"]);
    cfg.pin(d.path());
    assert_eq!(cfg.pinned.len(), 1);
    assert_eq!(cfg.pinned[0].0, "fake_mcp.py");
    let mut t = mcp_box(&d, cfg.clone());
    let look = call("mcp__fake__look", json!({"size": 2}));
    assert_eq!(t.execute(&look).observation.status, ObservationStatus::Ok);
    // The model rewrites the server's script, then makes it start again
    // (here: the server dies after answering garbage).
    std::fs::write(
        d.path().join("fake_mcp.py"),
        FAKE_MCP.replace("\"y\" * size", "\"pwned\""),
    )
    .unwrap();
    let o = t.execute(&call("mcp__fake__look", json!({"size": -1})));
    assert_eq!(o.observation.status, ObservationStatus::Error);
    let o = t.execute(&look);
    assert_eq!(o.observation.status, ObservationStatus::Error);
    assert!(
        o.observation.content.contains(
            "is not started: its program changed in the workspace since the task began (fake_mcp.py)"
        ),
        "{}",
        o.observation.content
    );
    // A run that resumes the task (a new tool box) is held to the same.
    let d2 = TestDir::new("tools-mcp-rewritten-resumed");
    std::fs::write(
        d2.path().join("fake_mcp.py"),
        FAKE_MCP.replace("\"y\" * size", "\"pwned\""),
    )
    .unwrap();
    let t2 = toolbox(&d2).with_mcp_servers(vec![cfg]);
    assert!(
        !t2.specs().iter().any(|s| s.name.starts_with(mcp::PREFIX)),
        "a changed server listed its tools"
    );
    // A link to something that never ends is no file: not hashed, refused.
    let d3 = TestDir::new("tools-mcp-link");
    std::os::unix::fs::symlink("/dev/zero", d3.path().join("fake_mcp.py")).unwrap();
    let mut cfg3 = fake(&["look"]);
    cfg3.pin(d3.path());
    assert_eq!(cfg3.pinned, [("fake_mcp.py".to_string(), None)]);
    let t3 = toolbox(&d3).with_mcp_servers(vec![cfg3]);
    assert!(!t3.specs().iter().any(|s| s.name.starts_with(mcp::PREFIX)));
    // A directory link on the way out of the workspace: the host file it
    // reaches is never read (not even hashed into the task's record).
    let d4 = TestDir::new("tools-mcp-dir-link");
    let outside = TestDir::new("tools-mcp-dir-link-outside");
    std::fs::write(outside.path().join("fake_mcp.py"), FAKE_MCP).unwrap();
    std::os::unix::fs::symlink(outside.path(), d4.path().join("tools")).unwrap();
    let mut cfg4 = fake(&["look"]);
    cfg4.transport = mcp::McpTransport::Stdio {
        command: vec!["python3".into(), "tools/fake_mcp.py".into()],
        env: Default::default(),
    };
    cfg4.pin(d4.path());
    assert_eq!(cfg4.pinned, [("tools/fake_mcp.py".to_string(), None)]);
    // Honest: the same file in a real directory is hashed.
    let d5 = TestDir::new("tools-mcp-dir-real");
    std::fs::create_dir_all(d5.path().join("tools")).unwrap();
    std::fs::write(d5.path().join("tools/fake_mcp.py"), FAKE_MCP).unwrap();
    let mut cfg5 = cfg4.clone();
    cfg5.pinned.clear();
    cfg5.pin(d5.path());
    assert_eq!(
        cfg5.pinned,
        [(
            "tools/fake_mcp.py".to_string(),
            Some(loop_protocol::hash::sha256_hex(FAKE_MCP.as_bytes()))
        )]
    );
}

/// An HTTP server on 127.0.0.1 that answers every request with `reply`
/// (the raw HTTP response); its URL.
fn http_server(reply: &'static [u8]) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in l.incoming().take(8) {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let _ = c.read(&mut buf);
                let _ = c.write_all(reply);
                // Hold the connection open: a stream that never ends.
                std::thread::sleep(std::time::Duration::from_secs(30));
            });
        }
    });
    url
}

fn http_fake(url: String, timeout_secs: u64) -> mcp::McpServer {
    mcp::McpServer {
        transport: mcp::McpTransport::Http { url },
        timeout_secs,
        max_output_bytes: 4096,
        read_only: vec!["look".into()],
        ..fake(&["look"])
    }
}

#[test]
fn a_hostile_http_server_fails_the_call_within_its_bounds() {
    // An event stream that never answers: the call's timeout ends it.
    let url =
        http_server(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n: waiting\n\n");
    let d = TestDir::new("tools-mcp-http-hang");
    let mut t = toolbox(&d).with_mcp_servers(vec![http_fake(url, 2)]);
    let started = std::time::Instant::now();
    let o = t.execute(&call("mcp__fake__look", json!({})));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(
        o.observation
            .content
            .contains("did not answer initialize within 2 s"),
        "{}",
        o.observation.content
    );
    // A body over the bound.
    let url = http_server(Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10000\r\n\r\n{}",
            "x".repeat(10_000)
        )
        .into_bytes()
        .into_boxed_slice(),
    ));
    let d = TestDir::new("tools-mcp-http-flood");
    let mut t = toolbox(&d).with_mcp_servers(vec![http_fake(url, 5)]);
    let o = t.execute(&call("mcp__fake__look", json!({})));
    assert!(
        o.observation.content.contains("with more than 4096 bytes"),
        "{}",
        o.observation.content
    );
    // Not JSON at all.
    let url = http_server(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\nnot json!",
    );
    let d = TestDir::new("tools-mcp-http-garbage");
    let mut t = toolbox(&d).with_mcp_servers(vec![http_fake(url, 5)]);
    let o = t.execute(&call("mcp__fake__look", json!({})));
    assert!(
        o.observation
            .content
            .contains("sent something that is not JSON-RPC during initialize: not json!"),
        "{}",
        o.observation.content
    );
}

#[test]
fn narrowed_authority_narrows_mcp_tools_too() {
    let d = TestDir::new("tools-mcp-narrow");
    let mut t = mcp_box(&d, fake(&["look", "poke"]));
    t.narrow(&["read_file", "mcp__fake__look"]);
    let names: Vec<String> = t.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["read_file", "mcp__fake__look"]);
    t.approve("c1");
    let o = t.execute(&call("mcp__fake__poke", json!({})));
    assert!(
        rule_of(&o).is_some_and(|r| r.starts_with("authority")),
        "{:?}",
        rule_of(&o)
    );
}

#[test]
fn an_mcp_approval_is_used_up_by_its_call() {
    let d = TestDir::new("tools-mcp-approval-once");
    let mut t = mcp_box(&d, fake(&["poke"]));
    let _ = t.specs();
    let poke = call("mcp__fake__poke", json!({}));
    t.approve("c1");
    assert_eq!(t.execute(&poke).observation.status, ObservationStatus::Ok);
    // The same id again (a provider that numbers calls afresh each turn):
    // asked again, and refused without an answer.
    assert!(t.needs_approval(&poke).is_some());
    let o = t.execute(&poke);
    assert_eq!(
        rule_of(&o),
        Some("approval: needed"),
        "{}",
        o.observation.content
    );
}

#[test]
fn a_schema_that_refers_to_definitions_it_loses_is_plain() {
    assert_eq!(
        mcp::schema_of(
            &json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"type": "string"}}})
        ),
        json!({"type": "object"})
    );
    assert_eq!(
        mcp::schema_of(&json!({"type": "object", "properties": {"a": {}}, "required": ["a", "b"]})),
        json!({"type": "object", "properties": {"a": {}}, "required": ["a"]})
    );
}

#[test]
fn a_resumed_task_counts_what_its_earlier_runs_wrote_against_its_disk_budget() {
    let run = |used: i64| {
        let d = TestDir::new(&format!("tools-disk-resumed-{used}"));
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let jail = Jail::new(&ws, Protected::new(&[]).unwrap()).unwrap();
        let (t, _) = ToolBox::new(
            jail,
            ToolLimits {
                disk_bytes: 4 << 20,
                ..ToolLimits::default()
            },
        )
        .unwrap()
        .with_disk_used(used)
        .with_journal(&d.path().join("journal"))
        .unwrap();
        let mut t = t;
        assert_eq!(t.disk_used(), used);
        let o = t.execute(&call(
            "run_command",
            json!({"command": "head -c 2097152 /dev/zero > two.bin"}),
        ));
        (o.observation.content, ws.join("two.bin").exists(), d)
    };
    // Fresh: 2 MiB fits the task's 4 MiB.
    let (said, landed, _d) = run(0);
    assert!(landed, "{said}");
    // Resumed with 3 MiB already written by its earlier runs: refused,
    // naming the task's limit.
    let (said, landed, _d) = run(3 << 20);
    assert!(!landed, "{said}");
    assert!(
        said.contains("over the task's limit of 4 MiB (limits.disk_mb)"),
        "{said}"
    );
}

/// Where commands are not staged (no journal here: they write the
/// workspace in place), what each brings into the workspace still counts
/// against the task's total: two commands of 2 MiB reach 3 MiB, and the
/// third is refused.
#[test]
fn commands_that_write_the_workspace_in_place_count_what_they_bring() {
    let d = TestDir::new("tools-write-in-place");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let jail = Jail::new(&ws, Protected::new(&[]).unwrap()).unwrap();
    let counter = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut t = ToolBox::new(
        jail,
        ToolLimits {
            write_bytes: 3 << 20,
            ..ToolLimits::default()
        },
    )
    .unwrap()
    .with_written(counter.clone(), (None, 0));
    let mut said = Vec::new();
    for n in 0..3 {
        let o = t.execute(&call(
            "run_command",
            json!({"command": format!("head -c 2097152 /dev/zero | tr '\\0' a > big{n}.txt")}),
        ));
        said.push((o.observation.status.clone(), o.observation.content.clone()));
    }
    assert_eq!(said[0].0, loop_protocol::ObservationStatus::Ok, "{said:?}");
    assert_eq!(said[1].0, loop_protocol::ObservationStatus::Ok, "{said:?}");
    assert!(
        matches!(said[2].0, loop_protocol::ObservationStatus::Refused { .. })
            && said[2].1.contains("limits.write_mb"),
        "{said:?}"
    );
    assert!(
        counter.load(std::sync::atomic::Ordering::SeqCst) >= 4 << 20,
        "{}",
        counter.load(std::sync::atomic::Ordering::SeqCst)
    );
}

/// The task's total of writes (limits.write_mb): a command that writes and
/// removes never grows the workspace, but what each leaves on its disk
/// adds up; once the total is reached no command runs (and a resumed
/// task's earlier writes count), and the last one's disk holds no more
/// than was left. Below it, the same commands run.
#[test]
fn what_a_tasks_commands_write_in_all_is_bounded_not_only_each_command() {
    let d = TestDir::new("tools-write-total");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let jail = Jail::new(&ws, Protected::new(&[]).unwrap()).unwrap();
    let counter = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (t, _) = ToolBox::new(
        jail,
        ToolLimits {
            write_bytes: 5 << 20,
            ..ToolLimits::default()
        },
    )
    .unwrap()
    .with_written(counter.clone(), (Some(d.path().join("written")), 0))
    .with_journal(&d.path().join("journal"))
    .unwrap();
    let mut t = t;
    // Each run gives the workspace one line, then writes 2 MiB to a
    // scratch file it keeps in /tmp (its disk).
    let churn =
        json!({"command": "echo run >> runs.log; head -c 2097152 /dev/zero > /tmp/scratch.bin"});
    let mut ran = 0;
    let mut refusal = String::new();
    for _ in 0..6 {
        let o = t.execute(&call("run_command", churn.clone()));
        if matches!(
            o.observation.status,
            loop_protocol::ObservationStatus::Refused { .. }
        ) {
            refusal = o.observation.content;
            break;
        }
        ran += 1;
    }
    assert_eq!(ran, 3, "2 MiB a run: three runs reach 5 MiB ({refusal})");
    assert!(
        refusal.contains("limits.write_mb") && refusal.contains("no more commands run"),
        "{refusal}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("runs.log"))
            .unwrap()
            .lines()
            .count(),
        3
    );
    // The count is kept after every command (a resumed task starts from it).
    // The third run's disk held no more than what was left, rounded up to
    // a MiB (where commands have a disk of their own; else it wrote its 2
    // MiB).
    let total = counter.load(std::sync::atomic::Ordering::SeqCst);
    assert!(total >= 5 << 20, "{total}");
    assert_eq!(
        std::fs::read_to_string(d.path().join("written")).unwrap(),
        total.to_string()
    );
    // The file tools still work: only commands stop.
    let o = t.execute(&call(
        "write_file",
        json!({"path": "note.txt", "content": "done\n"}),
    ));
    assert_eq!(
        o.observation.status,
        loop_protocol::ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
}

#[test]
fn a_command_that_finds_no_network_is_told_which_setting_gives_it() {
    let d = TestDir::new("tools-offline");
    let mut t = toolbox(&d);
    // A real lookup in the sandbox, which has no network.
    let o = t.execute(&call(
        "run_command",
        json!({"command": "python3 -c \"import socket; socket.getaddrinfo('example.com', 443)\""}),
    ));
    let said = &o.observation.content;
    assert!(!said.starts_with("exit 0"), "{said}");
    assert!(
        said.contains("--- network ---") && said.contains("`network.allow`"),
        "{said}"
    );
    // A command that fails for another reason is not sent to the network.
    let o = t.execute(&call(
        "run_command",
        json!({"command": "echo 'no such file' >&2; exit 3"}),
    ));
    assert!(
        !o.observation.content.contains("network.allow"),
        "{}",
        o.observation.content
    );
}

#[test]
fn a_layer_made_elsewhere_merges_whole_or_not_at_all() {
    let d = TestDir::new("merge-layer");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let jail = Jail::new(&ws, Protected::new(&["*.key".to_string()]).unwrap()).unwrap();
    let (t, _) = ToolBox::new(jail, ToolLimits::default())
        .unwrap()
        .with_journal(&d.path().join("task/journal"))
        .unwrap();
    let upper = d.path().join("upper");
    std::fs::create_dir_all(upper.join("src")).unwrap();
    std::fs::write(upper.join("src/ok.txt"), "ok").unwrap();
    std::fs::write(upper.join("src/id.key"), "secret").unwrap();
    let all = ["src/id.key".to_string(), "src/ok.txt".to_string()];
    // One path the workspace's rules refuse: nothing merged, it is named.
    let no = t.merge_layer("c1", "delegate", &upper, &all).unwrap_err();
    assert_eq!(
        no.status,
        ObservationStatus::Refused {
            rule: "authority: the changes are refused".into()
        }
    );
    assert!(
        no.content.contains("src/id.key (protected by *.key)"),
        "{}",
        no.content
    );
    assert!(!ws.join("src/ok.txt").exists() && !ws.join("src/id.key").exists());
    // The honest layer merges whole.
    std::fs::remove_file(upper.join("src/id.key")).unwrap();
    let merged = t
        .merge_layer("c1", "delegate", &upper, &["src/ok.txt".to_string()])
        .unwrap();
    assert!(merged);
    assert_eq!(
        std::fs::read_to_string(ws.join("src/ok.txt")).unwrap(),
        "ok"
    );
}

#[test]
fn document_tools_are_offered_only_to_a_task_that_works_with_documents() {
    let d = TestDir::new("tools-docs-off");
    let mut t = toolbox(&d);
    assert!(!t.specs().iter().any(|s| s.name == "write_spreadsheet"));
    let o = t.execute(&call(
        "write_spreadsheet",
        json!({"path": "a.xlsx", "sheets": [{"name": "S", "rows": [[1]]}]}),
    ));
    assert_eq!(rule_of(&o), Some("authority: unknown tool"));
    assert!(!d.path().join("a.xlsx").exists());
}

#[test]
fn a_written_workbook_reads_back_and_passes_the_gates_on_its_content() {
    let d = TestDir::new("tools-docs");
    let mut t = toolbox(&d).with_documents(true);
    let names: Vec<String> = t.specs().into_iter().map(|s| s.name).collect();
    for n in ["read_document", "write_spreadsheet", "write_document"] {
        assert!(names.iter().any(|s| s == n), "{n} offered: {names:?}");
    }
    let o = t.execute(&call(
        "write_spreadsheet",
        json!({"path": "out/summary.xlsx", "sheets": [
            {"name": "Summary", "rows": [["Region", "Total"], ["All"]],
             "formulas": [{"cell": "B2", "formula": "SUM(1,2)", "value": 3}]}]}),
    ));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
    let o = t.execute(&call("read_document", json!({"path": "out/summary.xlsx"})));
    assert!(
        o.observation.content.contains("A2=\"All\" | B2=3")
            && o.observation.content.contains("formula B2: =SUM(1,2)"),
        "{}",
        o.observation.content
    );
    let o = t.execute(&call(
        "write_document",
        json!({"path": "report.docx", "blocks": [
            {"kind": "heading", "level": 1, "text": "Summary"},
            {"kind": "table", "rows": [["North", "120"]]}]}),
    ));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
    let o = t.execute(&call("read_document", json!({"path": "report.docx"})));
    assert!(
        o.observation.content.contains("## Summary"),
        "{}",
        o.observation.content
    );
    // A CSV file from one sheet.
    let o = t.execute(&call(
        "write_spreadsheet",
        json!({"path": "totals.csv", "sheets": [{"name": "t", "rows": [["a", 1], ["b, c", 2.5]]}]}),
    ));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("totals.csv")).unwrap(),
        "a,1\n\"b, c\",2.5\n"
    );
}

#[test]
fn a_document_write_is_refused_by_the_same_gates_as_a_text_file() {
    let d = TestDir::new("tools-docs-gates");
    let mut t = toolbox(&d).with_documents(true);
    // A credential in a cell: the secret gate reads the cells.
    let o = t.execute(&call(
        "write_spreadsheet",
        json!({"path": "keys.xlsx", "sheets": [{"name": "S", "rows": [["KEY", "sk-abcdefghijklmnopqrstu"]]}]}),
    ));
    assert_eq!(
        rule_of(&o),
        Some("gate: secret"),
        "{}",
        o.observation.content
    );
    assert!(!d.path().join("keys.xlsx").exists());
    // A protected path.
    let o = t.execute(&call(
        "write_document",
        json!({"path": ".git/x.docx", "blocks": [{"kind": "paragraph", "text": "x"}]}),
    ));
    assert_ne!(o.observation.status, ObservationStatus::Ok);
    assert!(!d.path().join(".git/x.docx").exists());
    // A workbook of more rows than a step may change.
    let rows: Vec<serde_json::Value> = (0..400).map(|i| json!([i])).collect();
    let o = t.execute(&call(
        "write_spreadsheet",
        json!({"path": "big.xlsx", "sheets": [{"name": "S", "rows": rows}]}),
    ));
    assert_eq!(
        rule_of(&o),
        Some("limit: max_diff_lines"),
        "{}",
        o.observation.content
    );
    // A path that is not a document it writes.
    let o = t.execute(&call(
        "write_spreadsheet",
        json!({"path": "a.txt", "sheets": [{"name": "S", "rows": [[1]]}]}),
    ));
    assert!(
        o.observation
            .content
            .contains("must end in .xlsx, .csv or .tsv")
    );
}

#[test]
fn view_image_shows_an_image_to_a_model_that_takes_images_and_says_why_not_otherwise() {
    let d = TestDir::new("tools-image");
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(b"rest");
    std::fs::write(d.path().join("shot.png"), &png).unwrap();
    std::fs::write(d.path().join("fake.png"), "not a picture").unwrap();
    let mut t = toolbox(&d).with_documents(true);
    let o = t.execute(&call("view_image", json!({"path": "shot.png"})));
    assert_eq!(
        rule_of(&o),
        Some("model: takes no images"),
        "{}",
        o.observation.content
    );
    assert!(o.observation.image.is_none());
    t.set_images(true);
    let o = t.execute(&call("view_image", json!({"path": "shot.png"})));
    assert_eq!(
        o.observation.status,
        ObservationStatus::Ok,
        "{}",
        o.observation.content
    );
    let image = o.observation.image.as_ref().unwrap();
    assert_eq!(image.media_type, "image/png");
    assert_eq!(image.sha256, loop_protocol::hash::sha256_hex(&png));
    assert!(!image.data_base64.is_empty());
    // Typed by content, not by name; and nothing outside the workspace.
    let o = t.execute(&call("view_image", json!({"path": "fake.png"})));
    assert!(
        o.observation.content.contains("not an image this shows"),
        "{}",
        o.observation.content
    );
    let o = t.execute(&call("view_image", json!({"path": "../../etc/passwd"})));
    assert!(matches!(
        o.observation.status,
        ObservationStatus::Refused { .. }
    ));
}

#[test]
fn the_browser_is_refused_unless_granted_and_its_server_passes_the_exec_policy() {
    let d = TestDir::new("tools-browser");
    // Not granted: refused by name, and not offered.
    let mut t = toolbox(&d);
    assert!(!t.specs().iter().any(|s| s.name == "browser"));
    let o = t.execute(&call(
        "browser",
        json!({"action": "open", "url": "http://127.0.0.1:8000/"}),
    ));
    assert_eq!(rule_of(&o), Some("authority: tool not granted"));
    assert!(o.observation.content.contains("browser: true"));

    // Granted: offered; a server command the exec policy forbids is
    // refused with its rule before anything starts.
    let policy = exec_policy::ExecPolicy {
        rules: vec![exec_policy::Rule {
            prefix: vec!["python3".into()],
            decision: exec_policy::Decision::Forbidden,
            examples: Vec::new(),
            not_examples: Vec::new(),
        }],
        ..Default::default()
    };
    let mut t = toolbox(&d).with_browser(true).with_exec_policy(policy);
    assert!(t.specs().iter().any(|s| s.name == "browser"));
    let o = t.execute(&call(
        "browser",
        json!({"action": "open", "url": "http://127.0.0.1:8000/", "serve": "python3 -m http.server 8000"}),
    ));
    assert_eq!(rule_of(&o), Some("exec policy: forbidden (python3)"));
    assert_eq!(o.observation.tool, "browser");
    // A server under a `prompt` rule is asked of a person like a command.
    let ask = exec_policy::ExecPolicy {
        rules: vec![exec_policy::Rule {
            prefix: vec!["python3".into()],
            decision: exec_policy::Decision::Prompt,
            examples: Vec::new(),
            not_examples: Vec::new(),
        }],
        ..Default::default()
    };
    let asking = toolbox(&d).with_browser(true).with_exec_policy(ask);
    let serve = call(
        "browser",
        json!({"action": "open", "url": "http://127.0.0.1:8000/", "serve": "python3 -m http.server 8000"}),
    );
    assert_eq!(asking.needs_approval(&serve).as_deref(), Some("python3"));
    let plain = call("browser", json!({"action": "read"}));
    assert_eq!(asking.needs_approval(&plain), None);

    // Addresses other than http and https are not opened.
    for url in [
        "file:///etc/passwd",
        "chrome://settings",
        "javascript:alert(1)",
        "http://a b/",
    ] {
        let o = t.execute(&call("browser", json!({"action": "open", "url": url})));
        assert_eq!(o.observation.status, ObservationStatus::Error, "{url}");
        assert!(
            o.observation.content.contains("http or https")
                || o.observation.content.contains("spaces or control"),
            "{url}: {}",
            o.observation.content
        );
    }
    // Nothing is open yet: an action on the page says so.
    let o = t.execute(&call("browser", json!({"action": "read"})));
    assert_eq!(o.observation.status, ObservationStatus::Error);
    assert!(o.observation.content.contains("no page is open"));
    // An unknown action is a malformed call, named.
    let o = t.execute(&call("browser", json!({"action": "hover"})));
    assert!(
        o.observation.content.contains("`hover`") && o.observation.content.contains("`screenshot`"),
        "{}",
        o.observation.content
    );
}
