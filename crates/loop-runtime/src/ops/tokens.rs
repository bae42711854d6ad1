//! The API's bearer tokens: made once and shown once, kept in the project's
//! store only as their SHA-256, each acting for an owner with a scope.

use crate::{Error, Runtime};
use loop_store::TokenRecord;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read its owner's tasks.
    Read,
    /// Also start, steer and settle them.
    Run,
    /// Every task of the project, whoever started it (the command line's
    /// too).
    Admin,
}

impl std::str::FromStr for Scope {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "read" => Ok(Scope::Read),
            "run" => Ok(Scope::Run),
            "admin" => Ok(Scope::Admin),
            other => Err(Error::usage(format!(
                "unknown scope `{other}` (read, run, admin)"
            ))),
        }
    }
}

impl Scope {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Run => "run",
            Scope::Admin => "admin",
        }
    }
}

/// Who a request acts for: a live token's owner and scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The owner.
    pub owner: String,
    /// The scope.
    pub scope: Scope,
    /// The token's public id.
    pub token_id: String,
}

impl Caller {
    /// Whether this caller may see a task that belongs to `owner` (`None`:
    /// started from the command line).
    pub fn may_see(&self, owner: Option<&str>) -> bool {
        self.scope == Scope::Admin || owner == Some(self.owner.as_str())
    }
}

/// A token just made: the secret (shown once) and what is kept of it.
#[derive(Debug, Clone)]
pub struct NewToken {
    /// The bearer token itself; never stored.
    pub token: String,
    /// What the store keeps.
    pub record: TokenRecord,
}

/// When a session's token (`ses-EXPIRY_MS-…`) stops working.
fn session_expiry(id: &str) -> Option<u64> {
    id.strip_prefix("ses-")?.split('-').next()?.parse().ok()
}

fn digest(token: &str) -> String {
    loop_protocol::hash::sha256_hex(token.as_bytes())
}

impl Runtime {
    /// Make a token for `owner` with `scope`; the token is in the result
    /// only.
    pub fn create_token(&self, owner: &str, scope: Scope) -> Result<NewToken, Error> {
        self.create_token_with_id(owner, scope, None)
    }

    /// [`Runtime::create_token`], one that stops working at `expires_ms`
    /// when given (its id says when: `ses-EXPIRY_MS-…`).
    pub(crate) fn create_token_with_id(
        &self,
        owner: &str,
        scope: Scope,
        expires_ms: Option<u64>,
    ) -> Result<NewToken, Error> {
        let owner = owner.trim();
        if owner.is_empty() || owner.len() > 64 || owner.chars().any(char::is_control) {
            return Err(Error::usage(
                "--owner must be a name of 1 to 64 characters, no control characters",
            ));
        }
        let secret = loop_protocol::random::hex::<24>().map_err(Error::from_cause)?;
        let id = loop_protocol::random::hex::<6>().map_err(Error::from_cause)?;
        let token = format!("loop_{secret}");
        let record = TokenRecord {
            id: match expires_ms {
                Some(at) => format!("ses-{at}-{id}"),
                None => format!("tok-{id}"),
            },
            owner: owner.to_string(),
            scope: scope.as_str().to_string(),
            created_ms: loop_core::Clock::now_ms(&loop_core::SystemClock),
            revoked_ms: None,
        };
        self.store()?
            .create_token(&digest(&token), &record)
            .map_err(Error::from_cause)?;
        Ok(NewToken { token, record })
    }

    /// Who `token` acts for, if it is a live token of this project.
    pub fn authenticate(&self, token: &str) -> Result<Option<Caller>, Error> {
        let Some(r) = self
            .store()?
            .token(&digest(token))
            .map_err(Error::from_cause)?
        else {
            return Ok(None);
        };
        // A session's token lives until the time its id says.
        // (One whose expiry cannot be read is over.)
        if r.id.starts_with("ses-")
            && session_expiry(&r.id)
                .is_none_or(|at| loop_core::Clock::now_ms(&loop_core::SystemClock) >= at)
        {
            return Ok(None);
        }
        Ok(Some(Caller {
            scope: r.scope.parse()?,
            owner: r.owner,
            token_id: r.id,
        }))
    }

    /// Every token (their records; no secret is kept to show).
    pub fn tokens(&self) -> Result<Vec<TokenRecord>, Error> {
        self.store()?.tokens().map_err(Error::from_cause)
    }

    /// Revoke the token with public id `id`.
    pub fn revoke_token(&self, id: &str) -> Result<bool, Error> {
        self.store()?
            .revoke_token(id, loop_core::Clock::now_ms(&loop_core::SystemClock))
            .map_err(Error::from_cause)
    }
}
