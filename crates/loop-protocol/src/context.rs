//! The model's context: the system prompt, the instruction, and every turn
//! and observation so far. Built by the Director for every model, scripted
//! or real, so the same loop serves both.

use crate::action::{ToolCall, ToolSpec};
use crate::hash::{CanonicalError, canonical_json, canonical_sha256};
use crate::observation::{Observation, ObservationStatus, head_tail};
use serde::{Deserialize, Serialize};

/// One message in the context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// From the user or the runtime (instruction, verification feedback).
    User {
        /// Text.
        content: String,
        /// Images shown with it (the images given with the task, to a
        /// model that takes images).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<crate::observation::Image>,
    },
    /// What the model proposed.
    Assistant {
        /// Stated reasoning.
        thought: Option<String>,
        /// Calls.
        calls: Vec<ToolCall>,
    },
    /// A tool's observation (untrusted data).
    Tool {
        /// The call answered.
        call_id: String,
        /// The tool.
        tool: String,
        /// Bounded content.
        content: String,
        /// The image the call shows, with its bytes (none once the context
        /// was rebuilt from the record).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        image: Option<Box<crate::observation::Image>>,
    },
}

/// Everything the model is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// The system prompt.
    pub system: String,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// The conversation.
    pub messages: Vec<Message>,
}

impl Context {
    /// A fresh context: the system prompt, the tools, and the instruction.
    pub fn new(system: String, tools: Vec<ToolSpec>, instruction: &str) -> Self {
        Context {
            system,
            tools,
            messages: vec![Message::User {
                content: instruction.to_string(),
                images: Vec::new(),
            }],
        }
    }

    /// Record the model's turn.
    pub fn push_turn(&mut self, thought: Option<String>, calls: Vec<ToolCall>) {
        self.messages.push(Message::Assistant { thought, calls });
    }

    /// Record an observation.
    pub fn push_observation(&mut self, obs: &Observation) {
        let status = match &obs.status {
            ObservationStatus::Ok => String::new(),
            ObservationStatus::Refused { rule } => format!("[refused: {rule}] "),
            ObservationStatus::Error => "[error] ".to_string(),
        };
        // An image goes with its bytes, when it has them (a context
        // rebuilt from the record has only the digest, and says so).
        let image = obs.image.clone().filter(|i| !i.data_base64.is_empty());
        let resent = match (&obs.image, &image) {
            (Some(i), None) => format!(
                "\n(the image {} was shown before this task was resumed; view it again to see it)",
                i.path
            ),
            _ => String::new(),
        };
        self.messages.push(Message::Tool {
            call_id: obs.call_id.clone(),
            tool: obs.tool.clone(),
            content: format!(
                "{status}{}{resent}",
                head_tail(&obs.content, OBSERVATION_TOKENS as usize * BYTES_PER_TOKEN)
            ),
            image,
        });
    }

    /// Record runtime feedback (e.g. failing verification evidence).
    pub fn push_feedback(&mut self, text: String) {
        self.messages.push(Message::User {
            content: text,
            images: Vec::new(),
        });
    }

    /// A rough size in tokens (for budgeting before a call; providers report
    /// the real figure afterwards).
    pub fn estimate_tokens(&self) -> u64 {
        let tools: usize = self
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
            .sum();
        let messages: usize = self.messages.iter().map(message_len).sum();
        estimate_tokens_of_len(self.system.len() + tools + messages)
    }

    /// This context shrunk to about `budget_tokens`, deterministically and
    /// without a model call: the system prompt, the tools and the instruction
    /// stay; the most recent whole turns stay verbatim; the older middle
    /// becomes one digest of what was done, what changed, and what failed.
    pub fn compacted(&self, budget_tokens: u64) -> Context {
        if self.estimate_tokens() <= budget_tokens || self.messages.len() < 3 {
            return self.clone();
        }
        let first = &self.messages[0];
        let fixed = Context {
            system: self.system.clone(),
            tools: self.tools.clone(),
            messages: vec![first.clone()],
        }
        .estimate_tokens();
        // Room for the digest itself.
        let digest_room = budget_tokens / 5;
        let mut room = budget_tokens.saturating_sub(fixed + digest_room);
        // Keep the longest suffix of whole turns (starting at an assistant
        // message, so tool results always follow their calls) that fits.
        let mut keep_from = self.messages.len();
        let mut i = self.messages.len();
        let mut pending = 0u64;
        while i > 1 {
            i -= 1;
            pending += estimate_tokens_of_len(message_len(&self.messages[i]));
            if matches!(self.messages[i], Message::Assistant { .. }) {
                if pending > room {
                    break;
                }
                room -= pending;
                pending = 0;
                keep_from = i;
            }
        }
        let forced = keep_from == self.messages.len();
        if forced {
            // Not even the last turn fits: keep it anyway, its tool output cut.
            keep_from = self
                .messages
                .iter()
                .rposition(|m| matches!(m, Message::Assistant { .. }))
                .unwrap_or(self.messages.len());
        }
        let dropped = &self.messages[1..keep_from.max(1)];
        let mut messages = vec![first.clone()];
        if !dropped.is_empty() {
            messages.push(Message::User {
                content: digest(dropped, digest_room as usize * BYTES_PER_TOKEN),
                images: Vec::new(),
            });
        }
        let tail_budget =
            budget_tokens.saturating_sub(fixed + digest_room) as usize * BYTES_PER_TOKEN;
        let kept = &self.messages[keep_from.max(1)..];
        let per_tool = if forced {
            tail_budget / kept.len().max(1)
        } else {
            usize::MAX
        };
        for m in kept {
            messages.push(match m {
                Message::Tool {
                    call_id,
                    tool,
                    content,
                    image,
                } if content.len() > per_tool => Message::Tool {
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    content: head_tail(content, per_tool.max(256)),
                    image: image.clone(),
                },
                other => other.clone(),
            });
        }
        Context {
            system: self.system.clone(),
            tools: self.tools.clone(),
            messages,
        }
    }

    /// SHA-256 over the canonical context: what exactly the model was shown.
    pub fn sha256(&self) -> Result<String, CanonicalError> {
        canonical_sha256(self)
    }
}

/// [`Context::sha256`] of a context that only grows, kept up to date
/// message by message: the same digest, without encoding the whole
/// conversation again at every step. The canonical form of a context is
/// `{"messages":[M1,…,Mn],"system":S,"tools":T}` (its keys sorted), so the
/// hash state after the messages' prefix is kept and only new messages are
/// fed; the end is fed to a copy. A context that did not only grow (fewer
/// messages, or a first or last hashed message that differs) starts over.
#[derive(Default, Clone)]
pub struct ContextDigest {
    /// The hash state after `{"messages":[` and the hashed messages.
    prefix: Option<crate::hash::Sha256Stream>,
    /// How many messages it covers.
    hashed: usize,
    /// The first and the last message hashed (to see a replaced context).
    ends: Option<(Message, Message)>,
    /// The canonical `],"system":S,"tools":T}` for this system and tools.
    tail: Option<(String, Vec<ToolSpec>, Vec<u8>)>,
}

impl ContextDigest {
    /// The digest of `c`, as [`Context::sha256`] gives it.
    pub fn sha256(&mut self, c: &Context) -> Result<String, CanonicalError> {
        let grew = match &self.ends {
            None => self.hashed == 0,
            Some((first, last)) => {
                c.messages.len() >= self.hashed
                    && c.messages.first() == Some(first)
                    && c.messages.get(self.hashed - 1) == Some(last)
            }
        };
        if !grew || self.prefix.is_none() {
            let mut h = crate::hash::Sha256Stream::default();
            h.update(b"{\"messages\":[");
            self.prefix = Some(h);
            self.hashed = 0;
            self.ends = None;
        }
        let prefix = self.prefix.get_or_insert_with(Default::default);
        for m in &c.messages[self.hashed..] {
            if self.hashed > 0 {
                prefix.update(b",");
            }
            prefix.update(&canonical_json(m)?);
            self.hashed += 1;
        }
        if let (Some(first), Some(last)) = (c.messages.first(), c.messages.last()) {
            self.ends = Some((first.clone(), last.clone()));
        }
        let fresh = !matches!(&self.tail, Some((s, t, _)) if *s == c.system && *t == c.tools);
        if fresh {
            let mut tail = b"],\"system\":".to_vec();
            tail.extend(canonical_json(&c.system)?);
            tail.extend(b",\"tools\":");
            tail.extend(canonical_json(&c.tools)?);
            tail.push(b'}');
            self.tail = Some((c.system.clone(), c.tools.clone(), tail));
        }
        let mut h = prefix.clone();
        if let Some((_, _, tail)) = &self.tail {
            h.update(tail);
        }
        Ok(h.finish_hex())
    }
}

/// The length of `value`'s JSON (as `serde_json::to_string` writes it),
/// counted without building the text.
pub fn json_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, value);
    c.0
}

/// The length of a growing context's JSON, kept up to date message by
/// message (a context that did not only grow is counted again).
#[derive(Debug, Default, Clone)]
pub struct ContextSize {
    counted: usize,
    messages: usize,
    last: Option<Message>,
}

impl ContextSize {
    /// `serde_json::to_string(c).len()`, counting only new messages.
    pub fn json_len(&mut self, c: &Context) -> usize {
        let grew = c.messages.len() >= self.counted
            && (self.counted == 0 || c.messages.get(self.counted - 1) == self.last.as_ref());
        if !grew {
            *self = ContextSize::default();
        }
        for m in &c.messages[self.counted..] {
            self.messages += json_len(m);
        }
        self.counted = c.messages.len();
        self.last = c.messages.last().cloned();
        // {"system":S,"tools":T,"messages":[M1,…,Mn]}
        let fixed = r#"{"system":,"tools":,"messages":[]}"#.len();
        fixed
            + json_len(&c.system)
            + json_len(&c.tools)
            + self.messages
            + self.counted.saturating_sub(1)
    }
}

/// Bytes per token in the runtime's estimates (English and code average).
pub const BYTES_PER_TOKEN: usize = 4;

/// The most tokens one observation may take in the context.
pub const OBSERVATION_TOKENS: u64 = 1500;

/// Estimate tokens for `text` (used only where no provider figure exists).
pub fn estimate_tokens(text: &str) -> u64 {
    estimate_tokens_of_len(text.len())
}

/// What an image counts for in the context's estimate, in bytes of text:
/// at least a few thousand (providers bill a picture as hundreds to a
/// couple of thousand tokens), and its base64 when that is more (what the
/// request carries).
fn image_len(i: &crate::observation::Image) -> usize {
    i.data_base64.len().max(6000)
}

fn estimate_tokens_of_len(len: usize) -> u64 {
    (len as u64).div_ceil(BYTES_PER_TOKEN as u64) + 4
}

fn message_len(m: &Message) -> usize {
    match m {
        // An image counts as a few thousand bytes of text (providers bill
        // a picture as hundreds to a couple of thousand tokens).
        Message::User { content, images } => {
            content.len() + images.iter().map(image_len).sum::<usize>()
        }
        Message::Assistant { thought, calls } => {
            thought.as_ref().map_or(0, |t| t.len())
                + calls
                    .iter()
                    .map(|c| c.id.len() + c.tool.len() + json_len(&c.args))
                    .sum::<usize>()
        }
        Message::Tool { content, image, .. } => {
            content.len() + 16 + image.as_deref().map_or(0, image_len)
        }
    }
}

/// The first line of `text`, at most `max` bytes.
fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if line.len() <= max {
        return line.to_string();
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

/// A deterministic digest of older messages: each call with its key
/// argument and the first line of its result; runtime feedback by its
/// first lines. Bounded to about `max` bytes, keeping the newest entries.
fn digest(messages: &[Message], max: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut results: std::collections::BTreeMap<&str, &str> = Default::default();
    for m in messages {
        if let Message::Tool {
            call_id, content, ..
        } = m
        {
            results.insert(call_id, content);
        }
    }
    for m in messages {
        match m {
            Message::Assistant { calls, .. } => {
                for c in calls {
                    let key = ["path", "command", "summary"]
                        .iter()
                        .find_map(|k| c.args.get(*k).and_then(|v| v.as_str()))
                        .map(|v| format!(" {}", first_line(v, 80)))
                        .unwrap_or_default();
                    let result = results
                        .get(c.id.as_str())
                        .map(|r| first_line(r, 120))
                        .unwrap_or_else(|| "(no result)".into());
                    lines.push(format!("- {}{key} → {result}", c.tool));
                }
            }
            Message::User { content, .. } => {
                let head: Vec<&str> = content
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .take(3)
                    .collect();
                lines.push(format!("- runtime: {}", head.join(" / ")));
            }
            Message::Tool { .. } => {}
        }
    }
    let header = format!(
        "[Earlier steps, compacted by the runtime: {} messages. Tool results are shown by their first line.]",
        messages.len()
    );
    // Keep the newest lines that fit.
    let mut out: Vec<String> = Vec::new();
    let mut size = header.len();
    for line in lines.iter().rev() {
        if size + line.len() + 1 > max && !out.is_empty() {
            out.push(format!(
                "- … {} older entries omitted",
                lines.len() - out.len()
            ));
            break;
        }
        size += line.len() + 1;
        out.push(line.clone());
    }
    out.reverse();
    format!("{header}\n{}", out.join("\n"))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::observation::Observation;

    fn long_context(turns: usize) -> Context {
        let mut c = Context::new("system".into(), vec![], "do the thing");
        for i in 0..turns {
            let call = ToolCall {
                id: format!("c{i}"),
                tool: "run_command".into(),
                args: serde_json::json!({"command": format!("pytest -k t{i}")}),
            };
            c.push_turn(None, vec![call]);
            c.push_observation(&Observation::ok(
                &format!("c{i}"),
                "run_command",
                format!("FAILED t{i}\n{}", "x".repeat(2000)),
                false,
            ));
        }
        c
    }

    #[test]
    fn compaction_is_deterministic_bounded_and_keeps_the_recent_turns() {
        let c = long_context(40);
        assert!(c.estimate_tokens() > 20_000);
        let a = c.compacted(4_000);
        let b = c.compacted(4_000);
        assert_eq!(a, b);
        assert!(a.estimate_tokens() <= 4_000, "{}", a.estimate_tokens());
        // The instruction stays first; the digest follows; the last call is verbatim.
        assert_eq!(a.messages[0], c.messages[0]);
        let Message::User { content, .. } = &a.messages[1] else {
            panic!("digest expected, got {:?}", a.messages[1]);
        };
        assert!(content.contains("compacted by the runtime"), "{content}");
        assert!(
            content.contains("run_command pytest -k t0 → FAILED t0"),
            "{content}"
        );
        assert_eq!(a.messages.last(), c.messages.last());
        // Every kept tool result follows its call.
        let mut seen = std::collections::BTreeSet::new();
        for m in &a.messages {
            match m {
                Message::Assistant { calls, .. } => seen.extend(calls.iter().map(|c| c.id.clone())),
                Message::Tool { call_id, .. } => assert!(seen.contains(call_id), "{call_id}"),
                Message::User { .. } => {}
            }
        }
    }

    #[test]
    fn small_contexts_are_left_alone_and_observations_are_bounded() {
        let c = long_context(2);
        assert_eq!(c.compacted(100_000), c);
        let mut c = Context::new("s".into(), vec![], "i");
        c.push_observation(&Observation::ok(
            "x",
            "read_file",
            "y".repeat(100_000),
            false,
        ));
        let Message::Tool { content, .. } = &c.messages[1] else {
            panic!()
        };
        assert!(content.len() < 7_000, "{}", content.len());
        assert!(content.contains("omitted"));
    }

    #[test]
    fn the_kept_digest_is_the_whole_contexts_digest_as_it_grows_or_is_replaced() {
        let mut d = ContextDigest::default();
        let mut c = Context::new("sys ✓".into(), vec![], "do \"it\"\n");
        assert_eq!(d.sha256(&c).unwrap(), c.sha256().unwrap());
        for i in 0..20 {
            c.push_turn(
                Some(format!("thought {i}")),
                vec![ToolCall {
                    id: format!("c{i}"),
                    tool: "write_file".into(),
                    args: serde_json::json!({"z": 1, "a": [i, "é"], "m": {"y": null, "b": true}}),
                }],
            );
            c.push_observation(&Observation::ok(
                &format!("c{i}"),
                "write_file",
                "wrote",
                true,
            ));
            if i % 5 == 0 {
                c.push_feedback(format!("feedback {i}"));
            }
            if i == 7 {
                // The system prompt and tools are set after the start.
                c.system = "another system".into();
            }
            assert_eq!(d.sha256(&c).unwrap(), c.sha256().unwrap(), "step {i}");
        }
        // A context replaced (shorter, or another history of the same
        // length) starts the digest over.
        let fresh = Context::new("sys ✓".into(), vec![], "do \"it\"\n");
        assert_eq!(d.sha256(&fresh).unwrap(), fresh.sha256().unwrap());
        let mut other = c.clone();
        other.messages.pop();
        other.push_feedback("different last".into());
        let mut d2 = ContextDigest::default();
        d2.sha256(&c).unwrap();
        assert_eq!(d2.sha256(&other).unwrap(), other.sha256().unwrap());
    }

    #[test]
    fn the_kept_size_is_the_contexts_json_length_as_it_grows_or_is_replaced() {
        let mut z = ContextSize::default();
        let mut c = Context::new("sys ✓ \"q\"".into(), vec![], "do it");
        assert_eq!(z.json_len(&c), serde_json::to_string(&c).unwrap().len());
        for i in 0..10 {
            c.push_turn(
                None,
                vec![ToolCall {
                    id: format!("c{i}"),
                    tool: "t".into(),
                    args: serde_json::json!({"k": "é\n", "n": i}),
                }],
            );
            c.push_observation(&Observation::ok(&format!("c{i}"), "t", "out\t", false));
            assert_eq!(
                z.json_len(&c),
                serde_json::to_string(&c).unwrap().len(),
                "{i}"
            );
        }
        let fresh = Context::new("s".into(), vec![], "x");
        assert_eq!(
            z.json_len(&fresh),
            serde_json::to_string(&fresh).unwrap().len()
        );
    }
}
