//! Signing in to the web console with GitHub: OAuth's authorization code
//! flow with PKCE (RFC 7636, `S256`). The server makes a `state` and a
//! code verifier per attempt ([`Runtime::github_sign_in`]) and keeps them;
//! GitHub sends the person back with a code and the state; the server
//! checks the state (once), exchanges the code with its verifier and the
//! app's secret, asks GitHub who signed in (and, when teams are mapped,
//! their teams), and maps that to the owner and scope the Loopfile's
//! `console.github` gives them ([`Runtime::github_signed_in`]): a server
//! token like any other, that lives `session_hours`. GitHub's own token is
//! used for those two questions and dropped.

use crate::loopfile::signin::{GithubSignIn, Grant};
use crate::{Error, NewToken, Runtime, Scope};
use serde_json::Value;

/// A sign-in begun: where to send the person, and what to keep until
/// they come back.
#[derive(Debug, Clone)]
pub struct SignInStart {
    /// GitHub's authorization page, with the request.
    pub url: String,
    /// The state GitHub gives back.
    pub state: String,
    /// The PKCE code verifier (never sent until the exchange).
    pub verifier: String,
    /// The console is reached over https (its cookie is then `Secure`).
    pub secure: bool,
}

/// `s` percent-encoded for a URL's query.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// PKCE's `S256` challenge of `verifier`: BASE64URL(SHA-256(verifier)).
pub fn challenge(verifier: &str) -> String {
    use base64::Engine;
    let hex = loop_protocol::hash::sha256_hex(verifier.as_bytes());
    let raw: Vec<u8> = (0..32)
        .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// Pages of a signed-in account's teams read, at most (100 teams each).
const TEAM_PAGES: u32 = 10;

/// HTTP Basic authentication of `user` with `password`.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

fn agent() -> ureq::Agent {
    super::platform_agent(std::time::Duration::from_secs(30))
}

/// The JSON GitHub answered, or what went wrong.
fn answer(
    r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    what: &str,
) -> Result<Value, Error> {
    use std::io::Read;
    let resp = r.map_err(|e| Error::unavailable(format!("GitHub did not answer {what}: {e}")))?;
    let status = resp.status().as_u16();
    let mut bytes = Vec::new();
    let _ = resp
        .into_body()
        .into_reader()
        .take(1 << 20)
        .read_to_end(&mut bytes);
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !(200..300).contains(&status) || v.get("error").is_some() {
        let said = v["error_description"]
            .as_str()
            .or(v["error"].as_str())
            .or(v["message"].as_str())
            .unwrap_or("(nothing said)");
        return Err(Error::usage(format!(
            "GitHub refused {what} ({status}): {said}"
        )));
    }
    Ok(v)
}

impl Runtime {
    /// The project's GitHub sign-in, if its Loopfile sets one up.
    fn sign_in_config(&self) -> Result<Option<GithubSignIn>, Error> {
        Ok(crate::loopfile::Loopfile::load(self.project())?.github_sign_in)
    }

    /// Whether the console offers GitHub sign-in here.
    pub fn github_sign_in_offered(&self) -> bool {
        self.sign_in_config().ok().flatten().is_some()
    }

    /// Begin a GitHub sign-in (`None`: the project offers none).
    pub fn github_sign_in(&self) -> Result<Option<SignInStart>, Error> {
        let Some(g) = self.sign_in_config()? else {
            return Ok(None);
        };
        let state = loop_protocol::random::hex::<16>().map_err(Error::from_cause)?;
        let verifier = loop_protocol::random::hex::<32>().map_err(Error::from_cause)?;
        let scope = if g.teams.is_empty() { "" } else { "read:org" };
        let url = format!(
            "{}?client_id={}&redirect_uri={}&state={state}&code_challenge={}&code_challenge_method=S256&scope={}&allow_signup=false",
            g.authorize_url,
            encode(&g.client_id),
            encode(&g.redirect_url),
            challenge(&verifier),
            encode(scope)
        );
        Ok(Some(SignInStart {
            url,
            state,
            verifier,
            secure: g.redirect_url.starts_with("https://"),
        }))
    }

    /// Finish a GitHub sign-in: exchange `code` with `verifier`, learn who
    /// signed in, and make their session's token.
    pub fn github_signed_in(&self, code: &str, verifier: &str) -> Result<NewToken, Error> {
        let g = self
            .sign_in_config()?
            .ok_or_else(|| Error::not_found("this server offers no GitHub sign-in"))?;
        if code.is_empty() || code.len() > 256 || !code.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::usage("the code GitHub gave back is not one"));
        }
        let secret = std::env::var(&g.client_secret_env)
            .ok()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                Error::unavailable(format!(
                    "{} is not set where the server runs",
                    g.client_secret_env
                ))
            })?;
        let a = agent();
        let body = serde_json::json!({
            "client_id": g.client_id, "client_secret": secret, "code": code,
            "redirect_uri": g.redirect_url, "code_verifier": verifier,
        })
        .to_string();
        let t = answer(
            a.post(&g.token_url)
                .header("Accept", "application/json")
                .header("Content-Type", "application/json")
                .header("User-Agent", "loop-engine")
                .send(body.as_bytes()),
            "the code",
        )?;
        let token = t["access_token"]
            .as_str()
            .ok_or_else(|| Error::usage("GitHub gave no access token"))?
            .to_string();
        let get = |path: &str| {
            answer(
                a.get(&format!("{}{path}", g.api_url))
                    .header("Authorization", &format!("Bearer {token}"))
                    .header("Accept", "application/vnd.github+json")
                    .header("User-Agent", "loop-engine")
                    .call(),
                path,
            )
        };
        let asked = (|| -> Result<(String, Option<u64>, Vec<String>), Error> {
            let user = get("/user")?;
            let login = user["login"]
                .as_str()
                .ok_or_else(|| Error::usage("GitHub did not say who signed in"))?
                .to_ascii_lowercase();
            // GitHub's number for the account: it never changes, where a
            // login can be renamed and taken by someone else.
            let id = user["id"].as_u64();
            let mapped = id.is_some_and(|n| g.users.contains_key(&format!("id:{n}")))
                || g.users.contains_key(&login);
            let mut teams: Vec<String> = Vec::new();
            // Every page of its teams (100 a page), up to TEAM_PAGES.
            if !g.teams.is_empty() && !mapped {
                for page in 1..=TEAM_PAGES {
                    let got = get(&format!("/user/teams?per_page=100&page={page}"))?;
                    let list = got.as_array().cloned().unwrap_or_default();
                    teams.extend(list.iter().filter_map(|t| {
                        Some(
                            format!(
                                "{}/{}",
                                t["organization"]["login"].as_str()?,
                                t["slug"].as_str()?
                            )
                            .to_ascii_lowercase(),
                        )
                    }));
                    if list.len() < 100 {
                        break;
                    }
                }
            }
            Ok((login, id, teams))
        })();
        // GitHub's token is needed no more: given back (best effort), so
        // it cannot be used after the sign-in, whoever saw it; on every
        // way out, the questions answered or not.
        let revoked = a
            .delete(&format!("{}/applications/{}/token", g.api_url, g.client_id))
            .header("Authorization", &basic(&g.client_id, &secret))
            .header("Accept", "application/vnd.github+json")
            .header("Content-Type", "application/json")
            .header("User-Agent", "loop-engine")
            .force_send_body()
            .send(
                serde_json::json!({"access_token": token})
                    .to_string()
                    .as_bytes(),
            );
        match revoked {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => tracing::warn!(
                "GitHub kept the sign-in's token: it answered {}",
                r.status()
            ),
            Err(e) => tracing::warn!("GitHub kept the sign-in's token: {e}"),
        }
        let (login, id, teams) = asked?;
        let grant = grant_for(&g, (&login, id), &teams).ok_or_else(|| {
            Error::usage(format!(
                "the GitHub account `{login}` may not sign in here (neither it nor its teams are in console.github)"
            ))
        })?;
        self.create_session_token(&grant.owner, grant.scope, g.session_hours * 3_600_000)
    }

    /// A token for `owner` with `scope` that stops working `ttl_ms` from
    /// now (its id says until when: `ses-EXPIRY_MS-…`).
    pub fn create_session_token(
        &self,
        owner: &str,
        scope: Scope,
        ttl_ms: u64,
    ) -> Result<NewToken, Error> {
        let expires = loop_core::Clock::now_ms(&loop_core::SystemClock) + ttl_ms;
        self.create_token_with_id(owner, scope, Some(expires))
    }
}

/// What `login` (with `teams`) acts as: its own mapping, else the widest
/// of its teams'.
fn grant_for(
    g: &GithubSignIn,
    (login, id): (&str, Option<u64>),
    teams: &[String],
) -> Option<Grant> {
    // By the account's number first (`id:N`), then by its login.
    if let Some(u) = id
        .and_then(|n| g.users.get(&format!("id:{n}")))
        .or_else(|| g.users.get(login))
    {
        return Some(u.clone());
    }
    let rank = |s: Scope| match s {
        Scope::Read => 0,
        Scope::Run => 1,
        Scope::Admin => 2,
    };
    // The widest scope; between equals, the first mapped team by name
    // (not the order GitHub lists them in).
    g.teams
        .iter()
        .filter(|(name, _)| teams.contains(name))
        .map(|(_, gr)| gr)
        .fold(None::<&Grant>, |best, gr| match best {
            Some(b) if rank(b.scope) >= rank(gr.scope) => Some(b),
            _ => Some(gr),
        })
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_rfc_7636s_example() {
        // RFC 7636, appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert_eq!(encode("a b/c?d"), "a%20b%2Fc%3Fd");
    }
}
