//! Every reader of YAML that crosses a trust boundary — contracts (files,
//! the API, MCP, drafts), Loopfiles, scripted models — fed mutated
//! documents: deep nesting in every style, random YAML-significant bytes
//! spliced in, slices repeated to large sizes, alias bombs. Each answers
//! (a value or an error naming what was wrong) quickly and never panics
//! or overflows its stack; nesting past the limit is refused by name. A
//! bounded number of cases runs in CI (`cargo test`); set
//! `PROPTEST_CASES` for a longer run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use std::time::{Duration, Instant};

const CONTRACT: &str = "instruction: add a --json flag
criteria:
  - id: tests
    description: the tests pass
    checks:
      - run: python3 -m pytest -q
        timeout_secs: 60
      - file_contains: report.py
        text: json
artifacts: [report.py]
limits: {max_steps: 20, max_tokens: 100000}
";

const LOOPFILE: &str = "version: 1
exec:
  default: allow
  rules:
    - {prefix: [rm, -rf], decision: forbidden}
progress: {stall_steps: 5}
defaults:
  protected: ['tests/**']
network:
  run: [pypi]
project:
  id: acme-api-2026
  serves: [p-0123456789abcdef]
";

const SCRIPT: &str = "turns:
  - calls:
      - {tool: write_file, args: {path: a.txt, content: \"hi\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

/// Each reader's name and what it said: Ok, or its error's message.
type Said = Vec<(&'static str, Result<(), String>)>;

/// What each reader says of `text`.
fn readers(text: &str) -> Said {
    vec![
        (
            "contract",
            loop_protocol::Contract::from_yaml(text, "contract.yaml")
                .map(|_| ())
                .map_err(|e| e.to_string()),
        ),
        (
            "loopfile",
            loop_runtime::Loopfile::parse(text, "Loopfile.yaml")
                .map(|_| ())
                .map_err(|e| e.message),
        ),
        (
            "script",
            loop_models::ScriptedModel::from_yaml(text, "script.yaml")
                .map(|_| ())
                .map_err(|e| e.to_string()),
        ),
    ]
}

/// Every reader answers `text` within a second, an error with words.
fn answers(text: &str) -> Result<Said, TestCaseError> {
    let started = Instant::now();
    let said = readers(text);
    let took = started.elapsed();
    prop_assert!(
        took < Duration::from_secs(1),
        "{took:?} for {} bytes",
        text.len()
    );
    for (who, r) in &said {
        if let Err(m) = r {
            prop_assert!(!m.trim().is_empty(), "{who}: an error with no message");
        }
    }
    Ok(said)
}

/// A value nested `depth` deep in one of YAML's four collection styles.
fn nested(style: u8, depth: usize) -> String {
    match style % 4 {
        0 => format!("{}x\n", "- ".repeat(depth)),
        1 => format!("{}x{}\n", "[".repeat(depth), "]".repeat(depth)),
        2 => format!("{}x{}\n", "{a: ".repeat(depth), "}".repeat(depth)),
        _ => {
            let mut s = String::new();
            for i in 0..depth {
                s.push_str(&" ".repeat(i));
                s.push_str("a:\n");
            }
            s.push_str(&" ".repeat(depth));
            s.push_str("x\n");
            s
        }
    }
}

fn seed() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(CONTRACT), Just(LOOPFILE), Just(SCRIPT)]
}

/// Bytes that mean something to YAML, and some that do not.
fn noise() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("- ".to_string()),
            Just(": ".to_string()),
            Just("\n".to_string()),
            Just("  ".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just("{".to_string()),
            Just("}".to_string()),
            Just("&a ".to_string()),
            Just("*a".to_string()),
            Just("!!str ".to_string()),
            Just("|\n".to_string()),
            Just(">-\n".to_string()),
            Just("'".to_string()),
            Just("\"".to_string()),
            Just("\\u0000".to_string()),
            Just("# c\n".to_string()),
            Just("---\n".to_string()),
            Just("? ".to_string()),
            Just("\t".to_string()),
            "[a-z0-9_]{1,8}",
            Just("é\u{202e}".to_string()),
        ],
        0..40,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(160),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn deep_nesting_in_any_style_is_refused_by_name(style in 0u8..4, depth in 1usize..3000, key in 0usize..3) {
        let body = nested(style, depth);
        // At the top, and as a key's value.
        let indented: String = body.lines().map(|l| format!("  {l}\n")).collect();
        let under = format!("{}:\n{indented}", ["instruction", "exec", "turns"][key]);
        for text in [body.clone(), under] {
            let said = answers(&text)?;
            if depth > 70 {
                for (who, r) in &said {
                    let m = r.as_ref().err().cloned().unwrap_or_default();
                    // (Or, for a document that deep, its size first.)
                    prop_assert!(
                        m.contains("nested more than 64 levels") || m.contains("-byte limit"),
                        "{who} at depth {depth}: {m}"
                    );
                }
            }
        }
    }

    #[test]
    fn noise_spliced_into_a_valid_document_gets_an_answer(doc in seed(), at in 0usize..2000, bits in noise(), again in 0usize..4) {
        let mut text = doc.to_string();
        for k in 0..=again {
            let mut i = (at * (k + 1)) % (text.len() + 1);
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            text.insert_str(i, &bits);
        }
        answers(&text)?;
    }

    #[test]
    fn repeated_slices_up_to_large_sizes_get_an_answer(doc in seed(), from in 0usize..200, len in 1usize..120, times in 1usize..4000) {
        let from = from.min(doc.len().saturating_sub(1));
        let to = (from + len).min(doc.len());
        let (from, to) = (
            (0..=from).rev().find(|i| doc.is_char_boundary(*i)).unwrap_or(0),
            (to..=doc.len()).find(|i| doc.is_char_boundary(*i)).unwrap_or(doc.len()),
        );
        let text = format!("{}{}{}", &doc[..to], doc[from..to].repeat(times), &doc[to..]);
        answers(&text)?;
    }

    #[test]
    fn alias_bombs_get_an_answer_without_blowing_up(levels in 1usize..40, width in 2usize..10) {
        let mut text = String::from("a0: &a0 [x, x]\n");
        for i in 1..levels {
            let refs = vec![format!("*a{}", i - 1); width].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        for (key, _) in [("instruction", 0), ("turns", 1), ("exec", 2)] {
            answers(&format!("{text}{key}: *a{}\n", levels - 1))?;
        }
    }
}
