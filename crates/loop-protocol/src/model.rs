//! The model boundary, defined once: everything that proposes turns — a
//! script, an HTTP provider, a fallback chain, a recorder, a replay, a test
//! fake — is a [`Model`], and the Director drives exactly that trait.

use crate::action::{CallLimits, ModelInfo, ModelReply, Price};
use crate::context::Context;

/// The model: proposes actions, decides nothing. Failures are replies
/// ([`ModelReply::Unavailable`], [`ModelReply::Malformed`]), never errors,
/// so what a failed call cost is never lost.
pub trait Model {
    /// Provider and name, for provenance.
    fn info(&self) -> ModelInfo;
    /// The next turn for this context, within `limits` (the completion is
    /// clamped to them), after the provider's own retries and fallbacks.
    fn next_turn(&mut self, context: &Context, limits: CallLimits) -> ModelReply;
    /// Its prices, so calls are clamped to the dollar budget.
    fn price(&self) -> Option<Price> {
        None
    }
    /// The completion size it asks for when the budget allows.
    fn max_output_tokens(&self) -> u64 {
        4096
    }
    /// Whether it takes images (the `view_image` tool's, the images given
    /// with the task): said by its configuration (`images: true`), never
    /// guessed from its name.
    fn accepts_images(&self) -> bool {
        false
    }
    /// Tokens the next call's prompt will take (the runtime's estimate
    /// unless the model knows better), checked against the budget before
    /// the call is made.
    fn estimate_prompt_tokens(&self, context: &Context) -> u64 {
        context.estimate_tokens()
    }
    /// A resumed task has had `turns` answers already: models that play a
    /// fixed sequence (scripts, recordings) skip them.
    fn resume_at(&mut self, turns: u32) {
        let _ = turns;
    }
    /// The HTTP exchanges since the last call, for `--record` (models that
    /// make none have none).
    fn take_exchanges(&mut self) -> Vec<WireExchange> {
        Vec::new()
    }
    /// Where to stream the text of the answer as it arrives, for a person
    /// watching (models that do not stream ignore it).
    fn set_live(&mut self, feed: Option<crate::live::LiveFeed>) {
        let _ = feed;
    }
    /// The flag that stops the call in flight when its task is cancelled
    /// (models that make no calls ignore it).
    fn set_cancel(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        let _ = flag;
    }
}

/// One HTTP exchange with a provider, kept for `--record` (keys never
/// included).
#[derive(Debug, Clone, PartialEq)]
pub struct WireExchange {
    /// The request body.
    pub request: serde_json::Value,
    /// Status, or 0 when nothing came back.
    pub status: u16,
    /// What came back (or the transport error), bounded.
    pub response: String,
}

impl ModelReply {
    /// The reply with `f` applied to every text the model or its provider
    /// wrote (thought, reasons, errors, excerpts): how a model's words are
    /// redacted before they become records. Calls' arguments are not
    /// touched (they are what runs, and the authority checks them).
    pub fn map_text(self, f: impl Fn(&str) -> String) -> ModelReply {
        match self {
            ModelReply::Turn(mut t) => {
                t.thought = t.thought.map(|x| f(&x));
                ModelReply::Turn(t)
            }
            ModelReply::NothingMore { reason } => ModelReply::NothingMore { reason: f(&reason) },
            ModelReply::Malformed {
                error,
                excerpt,
                usage,
            } => ModelReply::Malformed {
                error: f(&error),
                excerpt: f(&excerpt),
                usage,
            },
            ModelReply::Unavailable { error, usage } => ModelReply::Unavailable {
                error: f(&error),
                usage,
            },
        }
    }
}
