//! A model whose words are redacted where they enter the runtime: its
//! thought, a malformed excerpt and every error text (a provider's error
//! body may echo the API key) pass through a scrubber before anything
//! records them — the ledger, the receipt, the screen.

use loop_protocol::{CallLimits, Context, Model, ModelInfo, ModelReply, Price, WireExchange};

/// `inner`, with every text of its replies passed through `scrub`.
pub struct Redacted {
    inner: Box<dyn Model + Send>,
    scrub: fn(&str) -> String,
}

impl Redacted {
    /// Wrap `inner`; `scrub` is the redaction (the sandbox's `redact`).
    pub fn new(inner: Box<dyn Model + Send>, scrub: fn(&str) -> String) -> Self {
        Redacted { inner, scrub }
    }
}

impl Model for Redacted {
    fn info(&self) -> ModelInfo {
        self.inner.info()
    }
    fn next_turn(&mut self, context: &Context, limits: CallLimits) -> ModelReply {
        self.inner.next_turn(context, limits).map_text(self.scrub)
    }
    fn price(&self) -> Option<Price> {
        self.inner.price()
    }
    fn max_output_tokens(&self) -> u64 {
        self.inner.max_output_tokens()
    }
    fn accepts_images(&self) -> bool {
        self.inner.accepts_images()
    }
    fn estimate_prompt_tokens(&self, context: &Context) -> u64 {
        self.inner.estimate_prompt_tokens(context)
    }
    fn resume_at(&mut self, turns: u32) {
        self.inner.resume_at(turns);
    }
    fn take_exchanges(&mut self) -> Vec<WireExchange> {
        self.inner.take_exchanges()
    }
    fn set_live(&mut self, feed: Option<loop_protocol::LiveFeed>) {
        self.inner.set_live(feed);
    }
    fn set_cancel(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.inner.set_cancel(flag);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use loop_protocol::{ToolCall, Turn, Usage};

    struct Leaky(ModelReply);

    impl Model for Leaky {
        fn info(&self) -> ModelInfo {
            ModelInfo {
                provider: "leaky".into(),
                name: "l".into(),
                source_sha256: None,
                parameters: None,
            }
        }
        fn next_turn(&mut self, _: &Context, _: CallLimits) -> ModelReply {
            self.0.clone()
        }
    }

    fn shout(text: &str) -> String {
        text.replace("KEY", "[REDACTED]")
    }

    #[test]
    fn every_text_of_a_reply_is_scrubbed_and_calls_are_not() {
        let call = ToolCall {
            id: "c1".into(),
            tool: "run_command".into(),
            args: serde_json::json!({"command": "echo KEY"}),
        };
        let replies = [
            ModelReply::Turn(Turn {
                thought: Some("the KEY".into()),
                calls: vec![call.clone()],
                usage: Usage::default(),
                served_by: None,
            }),
            ModelReply::NothingMore {
                reason: "KEY".into(),
            },
            ModelReply::Malformed {
                error: "bad KEY".into(),
                excerpt: "KEY".into(),
                usage: Usage::default(),
            },
            ModelReply::Unavailable {
                error: "401 for KEY".into(),
                usage: Usage::default(),
            },
        ];
        let context = Context::new(String::new(), vec![], "x");
        for reply in replies {
            let mut m = Redacted::new(Box::new(Leaky(reply.clone())), shout);
            let got = m.next_turn(
                &context,
                CallLimits {
                    max_output_tokens: 10,
                    time_left_ms: None,
                },
            );
            let text = format!("{got:?}");
            match &got {
                ModelReply::Turn(t) => {
                    assert_eq!(t.thought.as_deref(), Some("the [REDACTED]"));
                    // What runs is not rewritten: the authority judges it.
                    assert_eq!(t.calls, vec![call.clone()]);
                }
                _ => assert!(!text.contains("KEY"), "{text}"),
            }
        }
    }
}
