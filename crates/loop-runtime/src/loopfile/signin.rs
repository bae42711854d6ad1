//! The Loopfile's `console:`: how people sign in to the web console
//! besides pasting a token. `github:` is GitHub's OAuth (the authorization
//! code flow with PKCE), a GitHub login or an organisation's team mapped
//! to the owner and scope of a short-lived server token.
//!
//! ```yaml
//! console:
//!   github:
//!     client_id: Iv1.0123456789abcdef
//!     client_secret_env: LOOP_GITHUB_CLIENT_SECRET
//!     redirect_url: https://loop.example.test/auth/github/callback
//!     users: { octocat: { owner: octo, scope: run } }
//!     teams: { acme/maintainers: { owner: acme, scope: admin } }
//!     session_hours: 8
//! ```

use loop_protocol::yaml::{Node, Reader};
use std::collections::BTreeMap;

/// `console:`'s keys.
pub(crate) const CONSOLE_KEYS: &[&str] = &["github"];
/// `console.github:`'s keys.
pub(crate) const GITHUB_KEYS: &[&str] = &[
    "client_id",
    "client_secret_env",
    "redirect_url",
    "authorize_url",
    "token_url",
    "api_url",
    "users",
    "teams",
    "session_hours",
];

/// Who a GitHub login acts as once signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The owner of the tasks it makes and sees.
    pub owner: String,
    /// `read`, `run` or `admin`.
    pub scope: crate::Scope,
}

/// `console.github:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubSignIn {
    /// The OAuth app's client id.
    pub client_id: String,
    /// The environment variable holding its client secret.
    pub client_secret_env: String,
    /// Where GitHub sends the person back (this server's
    /// `/auth/github/callback`, as registered with the app).
    pub redirect_url: String,
    /// GitHub's authorization page.
    pub authorize_url: String,
    /// GitHub's token endpoint.
    pub token_url: String,
    /// GitHub's REST API.
    pub api_url: String,
    /// Logins (lower-case) and what each acts as.
    pub users: BTreeMap<String, Grant>,
    /// `ORG/TEAM-SLUG` (lower-case) and what their members act as.
    pub teams: BTreeMap<String, Grant>,
    /// How long a session's token lives, in hours.
    pub session_hours: u64,
}

/// Whether `url` may be one of the flow's addresses.
fn url_ok(url: &str) -> bool {
    url.starts_with("https://") || url.starts_with("http://127.0.0.1:")
}

/// `console:`.
pub(crate) fn read_console(r: &mut Reader, node: &Node) -> Option<GithubSignIn> {
    let mut out = None;
    for (k, v) in r
        .mapping(node, "`console`", CONSOLE_KEYS)
        .unwrap_or_default()
    {
        if k.name == "github" {
            out = read_github(r, v);
        }
    }
    out
}

fn read_grants(r: &mut Reader, node: &Node, what: &str) -> BTreeMap<String, Grant> {
    let mut out = BTreeMap::new();
    for (k, v) in r.entries(node, what).unwrap_or_default() {
        let mut owner = None;
        let mut scope = None;
        for (f, fv) in r.mapping(v, what, &["owner", "scope"]).unwrap_or_default() {
            match f.name.as_str() {
                "owner" => owner = r.string(fv, "`owner`"),
                _ => match r.string(fv, "`scope`").map(|s| s.parse::<crate::Scope>()) {
                    Some(Ok(s)) => scope = Some(s),
                    Some(Err(e)) => r.err(Some(fv.pos), e.message, None),
                    None => {}
                },
            }
        }
        match (
            owner.filter(|o| !o.trim().is_empty() && o.len() <= 64),
            scope,
        ) {
            // A user is a login, or `id:N`, GitHub's number for the
            // account (which no rename changes).
            (Some(_), Some(_))
                if k.name
                    .strip_prefix("id:")
                    .is_some_and(|n| n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit())) =>
            {
                r.err(
                    Some(k.pos),
                    format!(
                        "{what} `{}`: `id:` is followed by GitHub's number for the account",
                        k.name
                    ),
                    None,
                )
            }
            (Some(owner), Some(scope)) => {
                out.insert(k.name.to_ascii_lowercase(), Grant { owner, scope });
            }
            _ => r.err(
                Some(v.pos),
                format!(
                    "{what} `{}` needs an `owner` and a `scope` (read, run or admin)",
                    k.name
                ),
                None,
            ),
        }
    }
    out
}

fn read_github(r: &mut Reader, node: &Node) -> Option<GithubSignIn> {
    let mut g = GithubSignIn {
        client_id: String::new(),
        client_secret_env: String::new(),
        redirect_url: String::new(),
        authorize_url: "https://github.com/login/oauth/authorize".into(),
        token_url: "https://github.com/login/oauth/access_token".into(),
        api_url: "https://api.github.com".into(),
        users: BTreeMap::new(),
        teams: BTreeMap::new(),
        session_hours: 8,
    };
    for (k, v) in r
        .mapping(node, "`console.github`", GITHUB_KEYS)
        .unwrap_or_default()
    {
        let text = |r: &mut Reader, what: &str| r.string(v, what).unwrap_or_default();
        match k.name.as_str() {
            "client_id" => g.client_id = text(r, "`client_id`"),
            "client_secret_env" => g.client_secret_env = text(r, "`client_secret_env`"),
            "redirect_url" => g.redirect_url = text(r, "`redirect_url`"),
            "authorize_url" => g.authorize_url = text(r, "`authorize_url`"),
            "token_url" => g.token_url = text(r, "`token_url`"),
            "api_url" => g.api_url = text(r, "`api_url`").trim_end_matches('/').to_string(),
            "users" => g.users = read_grants(r, v, "a user"),
            "teams" => g.teams = read_grants(r, v, "a team"),
            _ => g.session_hours = r.unsigned(v, "`session_hours`", 1).unwrap_or(8).min(24 * 7),
        }
    }
    let mut wrong = Vec::new();
    if g.client_id.is_empty() || g.client_secret_env.is_empty() || g.redirect_url.is_empty() {
        wrong.push("needs `client_id`, `client_secret_env` and `redirect_url`".to_string());
    }
    for (name, url) in [
        ("redirect_url", &g.redirect_url),
        ("authorize_url", &g.authorize_url),
        ("token_url", &g.token_url),
        ("api_url", &g.api_url),
    ] {
        if !url.is_empty() && !url_ok(url) {
            wrong.push(format!(
                "`{name}` `{url}` is not an https:// URL (or http://127.0.0.1:PORT)"
            ));
        }
    }
    if g.users.is_empty() && g.teams.is_empty() {
        wrong.push("maps no `users` or `teams`: nobody could sign in".into());
    }
    if !wrong.is_empty() {
        r.err(
            Some(node.pos),
            format!("`console.github` {}", wrong.join("; ")),
            None,
        );
        return None;
    }
    Some(g)
}

/// The schema of `console:`.
pub(crate) fn schema() -> serde_json::Value {
    use serde_json::json;
    let grants = |what: &str| {
        json!({"type": "object", "description": what, "additionalProperties": {
            "type": "object", "additionalProperties": false, "required": ["owner", "scope"],
            "properties": {"owner": {"type": "string", "minLength": 1, "maxLength": 64},
                "scope": {"enum": ["read", "run", "admin"]}}}})
    };
    let url = |what: &str| json!({"type": "string", "pattern": "^(https://|http://127\\.0\\.0\\.1:)", "description": what});
    json!({"type": "object", "additionalProperties": false,
    "description": "how people sign in to the web console besides pasting a token",
    "properties": {"github": {"type": "object", "additionalProperties": false,
        "required": ["client_id", "client_secret_env", "redirect_url"],
        "description": "GitHub sign-in (OAuth authorization code with PKCE): a login or a team mapped to an owner and scope of a short-lived token",
        "properties": {
            "client_id": {"type": "string", "minLength": 1},
            "client_secret_env": {"type": "string", "minLength": 1, "description": "the environment variable holding the OAuth app's client secret"},
            "redirect_url": url("this server's /auth/github/callback, as registered with the app"),
            "authorize_url": url("GitHub's authorization page (GitHub Enterprise: https://HOST/login/oauth/authorize)"),
            "token_url": url("GitHub's token endpoint"),
            "api_url": url("GitHub's REST API"),
            "users": grants("GitHub accounts and what each acts as: `id:N` (GitHub's number for the account, which no rename changes; preferred) or a login"),
            "teams": grants("ORG/TEAM-SLUG and what their members act as"),
            "session_hours": {"type": "integer", "minimum": 1, "maximum": 168, "default": 8}
        }}}})
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_user_is_a_login_or_githubs_number_for_the_account() {
        let with = |users: &str| {
            format!(
                "console:\n  github:\n    client_id: Iv1.x\n    client_secret_env: S\n    redirect_url: https://loop.example.test/auth/github/callback\n    users: {users}\n"
            )
        };
        let ok = crate::loopfile::Loopfile::parse(
            &with("{octocat: {owner: o, scope: read}, 'id:4242': {owner: n, scope: run}}"),
            "Loopfile.yaml",
        )
        .unwrap();
        let g = ok.github_sign_in.unwrap();
        assert!(g.users.contains_key("id:4242") && g.users.contains_key("octocat"));
        for bad in ["'id:'", "'id:42x'", "'id:-1'"] {
            let e = crate::loopfile::Loopfile::parse(
                &with(&format!("{{{bad}: {{owner: n, scope: run}}}}")),
                "Loopfile.yaml",
            )
            .unwrap_err()
            .message;
            assert!(e.contains("GitHub's number for the account"), "{bad}: {e}");
        }
    }
}
