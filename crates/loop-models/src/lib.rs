//! # loop-models
//!
//! Model providers for Loop Engine. A provider proposes turns of tool calls
//! and reports its usage; it decides nothing. This build ships the
//! [`ScriptedModel`] (deterministic, offline) and the model-spec parser;
//! network providers arrive behind the same interface.

pub mod scripted;

pub use scripted::{ScriptError, ScriptedModel};

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
