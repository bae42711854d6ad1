//! `loop tokens create|list|revoke`: the API's bearer tokens.

use crate::CliError;
use crate::cli::{ScopeArg, TokensAction};
use loop_runtime::Runtime;

/// `loop tokens create|list|revoke`.
pub(crate) fn tokens_cmd(action: TokensAction, json: bool) -> Result<u8, CliError> {
    use loop_runtime::Scope;
    match action {
        TokensAction::Create {
            owner,
            scope,
            project,
        } => {
            let scope = match scope {
                ScopeArg::Read => Scope::Read,
                ScopeArg::Run => Scope::Run,
                ScopeArg::Admin => Scope::Admin,
            };
            let t = Runtime::open(&project)?.create_token(&owner, scope)?;
            if json {
                crate::ui::say_json(&loop_runtime::views::TokenLine {
                    token: &t.token,
                    id: &t.record.id,
                    owner: &t.record.owner,
                    scope: &t.record.scope,
                })?;
            } else {
                println!("{}", t.token);
                eprintln!(
                    "token {} for {} ({}); it is shown this once: only its hash is kept",
                    t.record.id, t.record.owner, t.record.scope
                );
            }
            Ok(0)
        }
        TokensAction::List { project } => {
            let list = Runtime::open(&project)?.tokens()?;
            if json {
                let line = loop_runtime::views::TokensLine { tokens: &list };
                crate::ui::say_json(&line)?;
                return Ok(0);
            }
            if list.is_empty() {
                println!("no tokens (loop tokens create --owner NAME makes one)");
            }
            for t in list {
                say!(
                    "{}  {:<20} {:<6} created {}{}",
                    t.id,
                    t.owner,
                    t.scope,
                    loop_protocol::time::rfc3339_millis(t.created_ms),
                    t.revoked_ms
                        .map(|r| format!("  revoked {}", loop_protocol::time::rfc3339_millis(r)))
                        .unwrap_or_default()
                );
            }
            Ok(0)
        }
        TokensAction::Revoke { id, project } => {
            let done = Runtime::open(&project)?.revoke_token(&id)?;
            if json {
                let line = loop_runtime::views::RevokedLine {
                    id: &id,
                    revoked: done,
                };
                crate::ui::say_json(&line)?;
            } else if done {
                println!("revoked {id}");
            }
            if done {
                Ok(0)
            } else {
                Err(CliError::usage(format!("no live token `{id}`")))
            }
        }
    }
}
