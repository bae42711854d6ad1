//! Memory with provenance. The model proposes a short note (`remember`);
//! nothing is kept while the task runs. When it ends, each note it
//! proposed is kept in the store with the task and its receipt's digest:
//! usable by later tasks when the task ended verified, quarantined
//! (given to none until a person approves it) otherwise. A person's own
//! notes (`loop memory add`) are usable at once. At a task's start the
//! notes the store's full-text search finds for its instruction, criteria
//! and paths go to the model as guidance — bounded, fenced, named as
//! untrusted notes, each with its id and source — and the ledger's first
//! entry lists them with their digests. A note is text in a prompt and
//! nothing more: it changes no contract, limit, rule or check.

use crate::Error;
use crate::project::locate::store_err;
use loop_protocol::{Event, ObservationStatus, ToolCall};
use loop_store::{Note, NoteStatus, Store};

/// The tool's name.
pub const TOOL: &str = "remember";
/// Notes one task may propose (later ones are refused).
pub const MAX_PER_TASK: usize = 5;
/// The longest note.
pub const MAX_CHARS: usize = 500;
/// The most `about` entries of one note, each at most 200 characters.
pub const MAX_ABOUT: usize = 8;
/// Notes given to a task at its start, at most.
pub const GIVEN: usize = 5;
/// Characters of notes given to a task in all.
pub const GIVEN_CHARS: usize = 2000;

/// The `remember` tool's spec.
pub fn spec() -> loop_protocol::ToolSpec {
    loop_protocol::ToolSpec {
        name: TOOL.into(),
        description: format!(
            "Propose a short note for later tasks of this project (a fact you had to discover: how the tests must be run, which command is the real gate, what must never be touched). It changes nothing now; it is kept if this task ends verified, else only if a person approves it. At most {MAX_PER_TASK} notes, {MAX_CHARS} characters each."
        ),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "the note, one or two sentences"},
                "about": {"type": "array", "items": {"type": "string"}, "description": "paths or topics it is about (how later tasks find it)"}
            },
            "required": ["text"],
            "additionalProperties": false
        }),
        effect: loop_protocol::Effect::Pure,
    }
}

/// Why a proposed note is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadNote(pub String);

/// A note proposed by a `remember` call: its text and what it is about,
/// or why it is refused.
pub fn proposed(call: &ToolCall) -> Result<(String, Vec<String>), BadNote> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        text: String,
        #[serde(default)]
        about: Vec<String>,
    }
    let a: Args = serde_json::from_value(call.args.clone())
        .map_err(|e| BadNote(format!("invalid arguments for `remember`: {e}")))?;
    let text = a.text.trim().to_string();
    // Text for a prompt: no control character (a NUL no store can keep,
    // an escape sequence for whoever lists the notes).
    if text
        .chars()
        .chain(a.about.iter().flat_map(|s| s.chars()))
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(BadNote("a note holds no control characters".into()));
    }
    if text.is_empty() || text.chars().count() > MAX_CHARS {
        return Err(BadNote(format!(
            "a note is 1 to {MAX_CHARS} characters, not {}",
            text.chars().count()
        )));
    }
    if a.about.len() > MAX_ABOUT || a.about.iter().any(|s| s.chars().count() > 200) {
        return Err(BadNote(format!(
            "`about` holds at most {MAX_ABOUT} entries of 200 characters"
        )));
    }
    Ok((text, a.about))
}

/// The answer to a `remember` call, the `n`th this run has accepted so far.
pub fn answer(call: &ToolCall, accepted: &mut usize) -> loop_protocol::ToolOutcome {
    let observation = match proposed(call) {
        Err(why) => loop_protocol::Observation::refused(&call.id, TOOL, "memory: the note", why.0),
        Ok(_) if *accepted >= MAX_PER_TASK => loop_protocol::Observation::refused(
            &call.id,
            TOOL,
            "memory: notes per task",
            format!("Refused: a task proposes at most {MAX_PER_TASK} notes."),
        ),
        Ok(_) => {
            *accepted += 1;
            loop_protocol::Observation::ok(
                &call.id,
                TOOL,
                "Noted as a proposal for later tasks of this project: it is kept if this task ends verified (else only if a person approves it). It changes nothing for this task.",
                false,
            )
        }
    };
    loop_protocol::ToolOutcome {
        observation,
        control: None,
    }
}

/// How many `remember` calls `history` accepted (a run that goes on
/// counts them toward [`MAX_PER_TASK`]).
pub fn accepted_in(history: &[Event]) -> usize {
    history
        .iter()
        .filter(|e| {
            matches!(e, Event::Observed { observation, .. }
                if observation.tool == TOOL && observation.status == ObservationStatus::Ok)
        })
        .count()
}

/// The notes `ledger` (a task's JSON lines) holds: each `remember` call
/// whose observation accepted it, in order, at most [`MAX_PER_TASK`].
pub fn proposals(ledger: &[u8]) -> Vec<(String, String, Vec<String>)> {
    let mut calls = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for line in String::from_utf8_lossy(ledger).lines() {
        let Ok(entry) = serde_json::from_str::<loop_protocol::LedgerEntry>(line) else {
            continue;
        };
        match Event::from_kind_payload(&entry.kind, &entry.payload) {
            Ok(Event::ModelTurn { calls: c, .. }) => {
                for call in c.into_iter().filter(|c| c.tool == TOOL) {
                    calls.insert(call.id.clone(), call);
                }
            }
            Ok(Event::Observed { observation, .. })
                if observation.tool == TOOL && observation.status == ObservationStatus::Ok =>
            {
                if let Some(call) = calls.remove(&observation.call_id)
                    && let Ok((text, about)) = proposed(&call)
                    && out.len() < MAX_PER_TASK
                    && !out.iter().any(|(_, t, _)| *t == text)
                {
                    out.push((call.id, text, about));
                }
            }
            _ => {}
        }
    }
    out
}

/// Keep the notes task `task_id` proposed (its ledger `ledger`): usable
/// when it ended `verified`, quarantined otherwise. Each is named after
/// the task and the call, so a retried end writes the same ones again.
#[allow(clippy::too_many_arguments)]
pub fn keep(
    store: &dyn Store,
    (project_id, owner): (&str, &str),
    (task_id, outcome): (&str, &str),
    ledger: &[u8],
    receipt_sha256: &str,
    now_ms: u64,
) -> Result<usize, Error> {
    let notes = proposals(ledger);
    for (k, (call_id, text, about)) in notes.iter().enumerate() {
        let id = format!("n-{}-{}", task_id.trim_start_matches("t-"), k + 1);
        // A note already there (a retried end, or a person's answer to
        // it since) keeps its status.
        let status = match store.note(&id).map_err(store_err)? {
            Some(n) => n.status,
            None if outcome == "verified" => NoteStatus::Usable,
            None => NoteStatus::Quarantined,
        };
        store
            .put_note(&Note {
                id,
                project: project_id.to_string(),
                owner: owner.to_string(),
                text: text.clone(),
                about: about.clone(),
                body: serde_json::json!({
                    "about": about,
                    "source_task": task_id,
                    "call_id": call_id,
                    "outcome": outcome,
                    "receipt_sha256": receipt_sha256,
                    "by": format!("the model of task {task_id}"),
                }),
                status,
                created_ms: now_ms,
                updated_ms: now_ms,
            })
            .map_err(store_err)?;
    }
    Ok(notes.len())
}

/// The words a task is found by: its instruction's, its criteria's and
/// their checks' and artifacts' (paths among them).
pub fn task_words(contract: &loop_protocol::Contract) -> Vec<String> {
    fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    let mut text = vec![contract.instruction.clone()];
    for c in &contract.criteria {
        text.push(c.text.clone());
        // The checks' commands and paths (their values, not their keys).
        strings(
            &serde_json::to_value(&c.checks).unwrap_or_default(),
            &mut text,
        );
    }
    text.extend(contract.artifacts.iter().map(|a| a.to_string()));
    let mut words = loop_store::note_words(&text.join(" "), &[]);
    words.sort();
    words.dedup();
    // Short words and the commonest ones find everything.
    words.retain(|w| w.chars().count() > 2 && !COMMON.contains(&w.as_str()));
    words.truncate(64);
    words
}

/// Words too common to say what a task or a note is about.
const COMMON: &[&str] = &[
    "the", "and", "for", "with", "that", "this", "are", "was", "were", "not", "you", "your", "its",
    "from", "into", "onto", "must", "should", "then", "than", "when", "what", "which", "all",
    "any", "has", "have", "had", "but", "can", "will", "make", "makes", "made", "does", "exits",
    "exit", "true", "false", "file", "files", "txt", "grep", "test", "run", "sure",
];

/// The notes task `contract` (of `owner`) is given, as guidance: (name,
/// text) pairs, within [`GIVEN`] and [`GIVEN_CHARS`]. A store that cannot
/// search gives none (and says so): memory is help, never a gate.
pub fn recall(
    store: &dyn Store,
    (project_id, owner): (&str, &str),
    contract: &loop_protocol::Contract,
    observer: &mut dyn crate::Observer,
) -> Vec<(String, String)> {
    let found = match store.search_notes(project_id, owner, &task_words(contract), GIVEN) {
        Ok(f) => f,
        Err(e) => {
            observer.note(&format!("memory: not searched ({e})"));
            return Vec::new();
        }
    };
    let mut left = GIVEN_CHARS;
    let mut out = Vec::new();
    for n in found {
        let chars = n.text.chars().count();
        if chars > left {
            break;
        }
        left -= chars;
        // Its source, as the ledger names it: the task and the SHA-256 of
        // the receipt it ended with, or the person who added it.
        let source = match (
            n.body["source_task"].as_str(),
            n.body["receipt_sha256"].as_str(),
        ) {
            (Some(t), Some(r)) => format!("from task {t}, receipt sha256:{r}"),
            (Some(t), None) => format!("from task {t}"),
            (None, _) => format!("from {}", n.body["by"].as_str().unwrap_or("a person")),
        };
        observer.note(&format!(
            "memory: note {} ({source}) is given to the model",
            n.id
        ));
        out.push((
            format!(
                "{}{} (untrusted, {source})",
                loop_core::prompt::MEMORY_NOTE,
                n.id
            ),
            n.text,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, args: serde_json::Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            tool: TOOL.into(),
            args,
        }
    }

    #[test]
    fn a_run_that_goes_on_counts_the_notes_accepted_before() {
        let observed = |tool: &str, ok: bool| Event::Observed {
            step: 1,
            observation: if ok {
                loop_protocol::Observation::ok("c", tool, "noted", false)
            } else {
                loop_protocol::Observation::refused("c", tool, "memory: the note", "no")
            },
            workspace_root: None,
        };
        let history = vec![
            observed(TOOL, true),
            observed(TOOL, false),
            observed("write_file", true),
            observed(TOOL, true),
        ];
        let mut n = accepted_in(&history);
        assert_eq!(n, 2);
        for _ in 0..3 {
            let o = answer(&call("c", serde_json::json!({"text": "a fact"})), &mut n);
            assert_eq!(o.observation.status, ObservationStatus::Ok);
        }
        let o = answer(&call("c", serde_json::json!({"text": "one more"})), &mut n);
        assert!(
            matches!(o.observation.status, ObservationStatus::Refused { .. }),
            "a sixth note across two runs: {:?}",
            o.observation
        );
    }

    #[test]
    fn a_note_is_bounded_and_a_task_proposes_at_most_five() {
        let mut n = 0;
        let long = "x".repeat(MAX_CHARS + 1);
        for bad in [
            serde_json::json!({"text": ""}),
            serde_json::json!({"text": long}),
            serde_json::json!({"text": "ok", "about": vec!["a"; MAX_ABOUT + 1]}),
            serde_json::json!({"text": "ok", "why": "extra"}),
            serde_json::json!({"text": "a\u{0}b"}),
            serde_json::json!({"text": "ok", "about": ["\u{1b}[2J"]}),
        ] {
            let o = answer(&call("c", bad), &mut n).observation;
            assert!(
                matches!(o.status, ObservationStatus::Refused { .. }),
                "{o:?}"
            );
        }
        assert_eq!(n, 0);
        for k in 0..MAX_PER_TASK {
            let o = answer(
                &call(
                    &format!("c{k}"),
                    serde_json::json!({"text": format!("fact {k}")}),
                ),
                &mut n,
            );
            assert_eq!(o.observation.status, ObservationStatus::Ok);
        }
        let o = answer(&call("c9", serde_json::json!({"text": "one more"})), &mut n);
        assert!(matches!(
            o.observation.status,
            ObservationStatus::Refused { .. }
        ));
        assert!(
            o.observation.content.contains("at most 5 notes"),
            "{:?}",
            o.observation
        );
    }

    #[test]
    fn only_accepted_calls_of_the_ledger_are_kept_and_never_more_than_five() {
        let mut lines = Vec::new();
        let mut seq = 0;
        let mut push = |e: Event| {
            let (kind, payload) = e.to_kind_payload().unwrap();
            lines.push(
                serde_json::to_string(&loop_protocol::LedgerEntry {
                    seq,
                    prev: String::new(),
                    kind,
                    payload,
                    at: String::new(),
                    hash: String::new(),
                })
                .unwrap(),
            );
            seq += 1;
        };
        let calls: Vec<ToolCall> = (0..7)
            .map(|k| {
                call(
                    &format!("c{k}"),
                    serde_json::json!({"text": format!("fact {k}")}),
                )
            })
            .collect();
        push(Event::ModelTurn {
            step: 1,
            context_sha256: String::new(),
            thought: None,
            calls: calls.clone(),
            usage: Default::default(),
        });
        for (k, c) in calls.iter().enumerate() {
            let observation = if k == 1 {
                loop_protocol::Observation::refused(&c.id, TOOL, "memory: the note", "no")
            } else {
                loop_protocol::Observation::ok(&c.id, TOOL, "Noted", false)
            };
            push(Event::Observed {
                step: 1,
                observation,
                workspace_root: None,
            });
        }
        let kept = proposals(lines.join("\n").as_bytes());
        let texts: Vec<&str> = kept.iter().map(|(_, t, _)| t.as_str()).collect();
        assert_eq!(texts, ["fact 0", "fact 2", "fact 3", "fact 4", "fact 5"]);
    }
}
