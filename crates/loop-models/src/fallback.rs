//! A chain of providers: the first that answers serves the turn. A provider
//! that is down (after its own retries) hands over to the next; what its
//! attempts cost is carried into the turn. A malformed answer is an answer:
//! it is returned, not retried elsewhere.

use crate::{Model, WireExchange};
use loop_protocol::{CallLimits, Context, ModelInfo, ModelReply, Price, Usage};

/// Providers tried in order.
pub struct Fallback {
    chain: Vec<Box<dyn Model + Send>>,
}

impl Fallback {
    /// A chain; the first is the primary.
    pub fn new(chain: Vec<Box<dyn Model + Send>>) -> Self {
        Fallback { chain }
    }
}

impl Model for Fallback {
    /// Only when every model of the chain does (any may answer).
    fn accepts_images(&self) -> bool {
        !self.chain.is_empty() && self.chain.iter().all(|m| m.accepts_images())
    }
    fn info(&self) -> ModelInfo {
        let mut info = self.chain.first().map(|p| p.info()).unwrap_or(ModelInfo {
            provider: "none".into(),
            name: "none".into(),
            source_sha256: None,
            parameters: None,
        });
        let rest: Vec<serde_json::Value> = self
            .chain
            .iter()
            .skip(1)
            .map(|p| {
                let i = p.info();
                serde_json::json!({"provider": i.provider, "name": i.name, "parameters": i.parameters})
            })
            .collect();
        if !rest.is_empty() {
            let mut params = info
                .parameters
                .take()
                .unwrap_or_else(|| serde_json::json!({}));
            params["fallbacks"] = serde_json::Value::Array(rest);
            info.parameters = Some(params);
        }
        info
    }

    fn next_turn(&mut self, context: &Context, limits: CallLimits) -> ModelReply {
        // A provider not asked this turn must not hand over an older turn's
        // exchanges to the recorder.
        for p in &mut self.chain {
            p.take_exchanges();
        }
        let mut spent = Usage::default();
        let mut errors = Vec::new();
        for p in &mut self.chain {
            match p.next_turn(context, limits) {
                ModelReply::Unavailable { error, usage } => {
                    spent.absorb(&usage);
                    errors.push(error);
                }
                ModelReply::Turn(mut t) => {
                    t.usage.absorb(&spent);
                    return ModelReply::Turn(t);
                }
                ModelReply::Malformed {
                    error,
                    excerpt,
                    mut usage,
                } => {
                    usage.absorb(&spent);
                    return ModelReply::Malformed {
                        error,
                        excerpt,
                        usage,
                    };
                }
                silent @ ModelReply::NothingMore { .. } => return silent,
            }
        }
        ModelReply::Unavailable {
            error: if errors.is_empty() {
                "no provider configured".into()
            } else {
                errors.join("; then ")
            },
            usage: spent,
        }
    }

    fn price(&self) -> Option<Price> {
        // Clamp to the dearest provider that might serve the call.
        self.chain
            .iter()
            .filter_map(|p| p.price())
            .max_by(|a, b| a.output_per_mtok.total_cmp(&b.output_per_mtok))
    }

    fn max_output_tokens(&self) -> u64 {
        self.chain.first().map_or(4096, |p| p.max_output_tokens())
    }

    fn estimate_prompt_tokens(&self, context: &Context) -> u64 {
        self.chain
            .iter()
            .map(|p| p.estimate_prompt_tokens(context))
            .max()
            .unwrap_or_else(|| context.estimate_tokens())
    }

    fn take_exchanges(&mut self) -> Vec<WireExchange> {
        self.chain
            .iter_mut()
            .flat_map(|p| p.take_exchanges())
            .collect()
    }

    fn set_live(&mut self, feed: Option<loop_protocol::LiveFeed>) {
        for p in &mut self.chain {
            p.set_live(feed.clone());
        }
    }

    fn set_cancel(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        for p in &mut self.chain {
            p.set_cancel(flag.clone());
        }
    }
}
