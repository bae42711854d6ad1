//! What the runtime observed after acting: the result of one tool call.

use serde::{Deserialize, Serialize};

/// How a tool call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ObservationStatus {
    /// The tool ran.
    Ok,
    /// The authority check refused it; `rule` names what refused it.
    Refused {
        /// The rule that matched.
        rule: String,
    },
    /// The tool ran and failed (bad arguments, file missing, command failed to start, …).
    Error,
}

/// The result of one tool call, as shown to the model and recorded in the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The call this answers.
    pub call_id: String,
    /// The tool called.
    pub tool: String,
    /// How it ended.
    #[serde(flatten)]
    pub status: ObservationStatus,
    /// What the model sees: bounded text. Untrusted data, never instructions.
    pub content: String,
    /// Whether the call changed the workspace.
    pub changed: bool,
    /// It failed for a passing reason of the machine (EAGAIN, ETXTBSY,
    /// EMFILE, EINTR), said by the tool that saw the error: worth a retry.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transient: bool,
    /// The connections a command asked the egress proxy for, allowed or
    /// refused, as the ledger keeps them (boxed: most observations have
    /// none, and an observation travels in `Result`s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Box<Vec<crate::EgressAttempt>>>,
    /// For a tool of an MCP server: which, and the hashes of what was sent
    /// and what came back (boxed, as `egress`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Box<McpCall>>,
    /// An image the call shows the model (`view_image`): recorded by its
    /// path, type, size and digest; its bytes go to the model with the
    /// observation and are not kept in the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Box<Image>>,
}

/// An image shown to a model: what the record keeps of it, and (in
/// memory only) its bytes in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Where it is in the workspace.
    pub path: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// SHA-256 of its bytes.
    pub sha256: String,
    /// Its bytes in base64 (never serialised: a record holds the digest;
    /// a context rebuilt from the record says the image is not resent).
    #[serde(skip)]
    pub data_base64: String,
}

/// One call of an MCP server's tool, as the ledger keeps it: what was
/// sent and what came back, by their SHA-256 (the result shown to the
/// model is bounded; these name the whole of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpCall {
    /// The server, as the Loopfile names it.
    pub server: String,
    /// The tool, as the server names it.
    pub tool: String,
    /// SHA-256 of the arguments sent (their JSON text).
    pub arguments_sha256: String,
    /// SHA-256 of the server's answer (the JSON-RPC message, as read),
    /// when one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_sha256: Option<String>,
    /// Its length in bytes.
    #[serde(default)]
    pub response_bytes: u64,
    /// The server said the call failed (`isError`), or it never answered.
    pub failed: bool,
    /// Milliseconds from sending to the answer (or to giving up).
    pub duration_ms: u64,
}

impl Observation {
    /// A successful observation.
    pub fn ok(call_id: &str, tool: &str, content: impl Into<String>, changed: bool) -> Self {
        Observation {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            status: ObservationStatus::Ok,
            content: content.into(),
            changed,
            transient: false,
            egress: None,
            mcp: None,
            image: None,
        }
    }

    /// A refusal naming its rule.
    pub fn refused(
        call_id: &str,
        tool: &str,
        rule: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Observation {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            status: ObservationStatus::Refused { rule: rule.into() },
            content: content.into(),
            changed: false,
            transient: false,
            egress: None,
            mcp: None,
            image: None,
        }
    }

    /// A failed call.
    pub fn error(call_id: &str, tool: &str, content: impl Into<String>) -> Self {
        Observation {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            status: ObservationStatus::Error,
            content: content.into(),
            changed: false,
            transient: false,
            egress: None,
            mcp: None,
            image: None,
        }
    }
}

/// Bound `text` to about `max` bytes, keeping the head and the tail and
/// saying how much was left out.
pub fn head_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let omitted_lines = text[head_end..tail_start].matches('\n').count();
    format!(
        "{}\n[… omitted {} bytes, {} lines of {} bytes …]\n{}",
        &text[..head_end],
        tail_start - head_end,
        omitted_lines,
        text.len(),
        &text[tail_start..]
    )
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn head_tail_keeps_both_ends_and_marks_the_gap() {
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let out = head_tail(&text, 200);
        assert!(out.starts_with("line 0\n"));
        assert!(out.ends_with("line 999\n"));
        assert!(out.contains("omitted"));
        assert!(out.len() < 300);
        assert_eq!(head_tail("short", 200), "short");
    }

    #[test]
    fn head_tail_respects_utf8() {
        let text = "é".repeat(500);
        let out = head_tail(&text, 101);
        assert!(out.contains("omitted"));
    }
}
