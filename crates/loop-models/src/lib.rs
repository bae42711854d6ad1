//! # loop-models
//!
//! Model providers for Loop Engine. A provider proposes turns of tool calls
//! and reports its usage; it decides nothing.
//!
//! - [`ScriptedModel`]: deterministic, offline (demos, tests, reproductions);
//! - [`HttpModel`]: OpenAI-compatible Chat Completions or Anthropic Messages,
//!   native tool calling or the strict JSON action protocol, streaming,
//!   retries with backoff and `Retry-After`, provider-reported usage priced
//!   from a table;
//! - [`Fallback`]: a chain of providers, tried in order when one is down;
//! - [`Recorder`] / [`ReplayModel`]: `--record FILE` and `replay:FILE`.

pub mod actions;
pub mod anthropic;
pub mod config;
pub mod fallback;
pub mod http;
pub mod openai;
pub mod pricing;
pub mod provider;
pub mod record;
pub mod redacted;
pub mod retry;
pub mod scripted;
pub mod sse;
pub mod wire;

pub use config::{ConfigError, ModelsConfig};
pub use fallback::Fallback;
pub use loop_protocol::{Model, WireExchange};
pub use provider::{Dialect, EndpointConfig, HttpModel, Secret};
pub use record::{Recorder, ReplayModel};
pub use redacted::Redacted;
pub use scripted::{ScriptError, ScriptedModel};

use loop_protocol::{CallLimits, Context, ModelInfo, ModelReply};

/// How tools are offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolProtocol {
    /// The provider's native tool calling.
    Native,
    /// The strict JSON action protocol, for models without tool calling.
    Json,
}

/// Which tool the model must call (native tool calling only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// Some tool must be called.
    Required,
    /// This tool must be called.
    Tool(String),
}

impl Model for ScriptedModel {
    fn info(&self) -> ModelInfo {
        ScriptedModel::info(self)
    }
    fn next_turn(&mut self, context: &Context, _limits: CallLimits) -> ModelReply {
        ScriptedModel::next_turn(self, context)
    }
    fn resume_at(&mut self, turns: u32) {
        ScriptedModel::skip_to(self, turns as usize);
    }
    fn accepts_images(&self) -> bool {
        ScriptedModel::accepts_images(self)
    }
}

/// A parsed `--model` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// `scripted:PATH`.
    Scripted(String),
    /// `openai:MODEL`.
    OpenAi(String),
    /// `anthropic:MODEL`.
    Anthropic(String),
    /// `replay:PATH`.
    Replay(String),
}

/// A `--model` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Not `provider:name`.
    #[error(
        "model spec `{0}` is not PROVIDER:NAME (scripted:PATH, openai:MODEL, anthropic:MODEL, replay:PATH)"
    )]
    Malformed(String),
    /// Unknown provider.
    #[error("unknown model provider `{0}` (known: scripted, openai, anthropic, replay)")]
    UnknownProvider(String),
}

impl ModelSpec {
    /// Parse `provider:name`.
    pub fn parse(s: &str) -> Result<ModelSpec, SpecError> {
        let (provider, name) = s
            .split_once(':')
            .filter(|(p, n)| !p.is_empty() && !n.is_empty())
            .ok_or_else(|| SpecError::Malformed(s.to_string()))?;
        Ok(match provider {
            "scripted" => ModelSpec::Scripted(name.into()),
            "openai" => ModelSpec::OpenAi(name.into()),
            "anthropic" => ModelSpec::Anthropic(name.into()),
            "replay" => ModelSpec::Replay(name.into()),
            other => return Err(SpecError::UnknownProvider(other.into())),
        })
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_are_named() {
        assert_eq!(
            ModelSpec::parse("scripted:a.yaml").unwrap(),
            ModelSpec::Scripted("a.yaml".into())
        );
        assert_eq!(
            ModelSpec::parse("openai:gpt-x").unwrap(),
            ModelSpec::OpenAi("gpt-x".into())
        );
        assert!(matches!(
            ModelSpec::parse("gpt"),
            Err(SpecError::Malformed(_))
        ));
        assert!(matches!(
            ModelSpec::parse("foo:bar"),
            Err(SpecError::UnknownProvider(_))
        ));
    }
}
