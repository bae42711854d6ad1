//! # loop-gates
//!
//! Deterministic gates, run on every proposed change before it enters the
//! workspace (and so before tokens are spent verifying it):
//!
//! - the **syntax gate** parses the new content with tree-sitter (Python,
//!   Rust, JavaScript, TypeScript/TSX, Go, C, C++, JSON, YAML, TOML) and
//!   refuses a change that leaves a file unparseable that parsed before;
//! - the **code-policy gate** walks Python and JavaScript syntax trees for
//!   banned imports, calls and attributes from the Loopfile's `rules`,
//!   including the indirect forms (`getattr(x, "__globals__")`,
//!   `importlib.import_module("os")`, `__import__`, `obj["__proto__"]`,
//!   `require("child_process")`).
//!
//! Each refusal names the rule, the file, the line and the column. A gate
//! that cannot do its work (a grammar that fails to load, a parse that
//! gives up) refuses too: gates never fail open.

pub mod code_policy;
pub mod shadow;
pub mod syntax;

pub use code_policy::{CodePolicy, LanguageRules};
pub use syntax::{Language, language_of};

/// A refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message} [{rule}]")]
pub struct GateRejection {
    /// Which gate and rule (`gate: syntax`, `gate: code policy (banned call eval)`).
    pub rule: String,
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// Both gates over one proposed file: `before` is its content now (if
/// any), `after` what the change would make it.
pub fn check(
    path: &str,
    before: Option<&str>,
    after: &str,
    policy: &CodePolicy,
) -> Result<(), GateRejection> {
    // By the name, else by what the content says it is (a `#!` line).
    let Some(lang) = language_of(path).or_else(|| syntax::language_of_content(after)) else {
        return Ok(());
    };
    syntax::check(lang, path, before, after)?;
    policy.check(lang, path, after)
}

/// The code-policy gate alone over one file (a command's effect: a
/// command may leave a file mid-edit, so the syntax gate is not asked).
pub fn check_policy(path: &str, after: &str, policy: &CodePolicy) -> Result<(), GateRejection> {
    match language_of(path).or_else(|| syntax::language_of_content(after)) {
        Some(lang) => policy.check(lang, path, after),
        None => Ok(()),
    }
}
