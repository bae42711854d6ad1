//! GitHub sign-in to the console (see `loop_runtime::ops::signin`):
//! `GET /auth/github` begins an attempt (a state and a PKCE verifier
//! kept here for ten minutes, at most 1,024 at once; the state also in a
//! cookie of this browser, so a sign-in begun elsewhere cannot be finished
//! here) and sends the person to GitHub; `GET /auth/github/callback`
//! takes the code back once, checks the state against both, and gives the
//! console a session's token in the address's fragment.

use crate::{ApiError, AppState, blocking};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an attempt may take.
const ATTEMPT: Duration = Duration::from_secs(600);
/// Attempts kept at once.
const MAX_ATTEMPTS: usize = 1024;
/// The cookie that ties an attempt to its browser.
const COOKIE: &str = "loop_github_state";

/// Sign-ins under way: state → (verifier, the console's nonce, when begun).
pub(crate) type Attempts = Arc<Mutex<HashMap<String, (String, String, Instant)>>>;

/// Sign-ins one address may begin in a minute.
const PER_ADDRESS: u32 = 20;

/// `GET /auth/providers`: which sign-ins the console may offer.
pub(crate) async fn providers(State(s): State<AppState>) -> Response {
    let rt = s.runtime.clone();
    let github = tokio::task::spawn_blocking(move || rt.github_sign_in_offered())
        .await
        .unwrap_or(false);
    axum::Json(serde_json::json!({"github": github})).into_response()
}

/// `GET /auth/github`: off to GitHub.
pub(crate) async fn begin(
    State(s): State<AppState>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Result<Response, ApiError> {
    // (Read by hand: a malformed query is this route's JSON 400 too.)
    let nonce = q
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .find_map(|kv| kv.strip_prefix("nonce="))
        .map(str::to_string)
        .filter(|n| (16..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric()))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "a `nonce` of 16 to 64 letters and digits is needed (the console makes one)",
            )
        })?;
    // One address cannot fill the table of attempts for everyone.
    s.check_rate_with(&format!("signin:{}", peer.ip()), PER_ADDRESS)?;
    let rt = s.runtime.clone();
    let start = blocking(move || rt.github_sign_in().map_err(ApiError::from)).await?;
    let Some(start) = start else {
        return Err(ApiError::not_found(
            "GitHub sign-in (the Loopfile sets up none)",
        ));
    };
    {
        let mut a = s
            .sign_ins
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        a.retain(|_, (_, _, at)| at.elapsed() < ATTEMPT);
        if a.len() >= MAX_ATTEMPTS {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "too many sign-ins under way: try again in a few minutes",
            ));
        }
        a.insert(start.state.clone(), (start.verifier, nonce, Instant::now()));
    }
    Ok((
        StatusCode::FOUND,
        [
            (header::LOCATION, start.url),
            (
                header::SET_COOKIE,
                format!(
                    "{COOKIE}={}; Path=/auth/github; HttpOnly; SameSite=Lax; Max-Age=600{}",
                    start.state,
                    if start.secure { "; Secure" } else { "" }
                ),
            ),
        ],
    )
        .into_response())
}

/// The callback's query.
#[derive(serde::Deserialize)]
pub(crate) struct Back {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// A plain page saying why signing in did not work.
fn refused(status: StatusCode, why: &str) -> Response {
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                "text/plain; charset=utf-8".to_string(),
            ),
            (
                header::SET_COOKIE,
                format!("{COOKIE}=; Path=/auth/github; HttpOnly; SameSite=Lax; Max-Age=0"),
            ),
        ],
        format!("Signing in with GitHub did not work: {why}\n"),
    )
        .into_response()
}

/// `GET /auth/github/callback`: the code back from GitHub.
pub(crate) async fn callback(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(back): Query<Back>,
) -> Response {
    if let Some(e) = back.error {
        return refused(
            StatusCode::FORBIDDEN,
            &format!("GitHub said `{}`", e.chars().take(100).collect::<String>()),
        );
    }
    let (Some(code), Some(state)) = (back.code, back.state) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "the answer has no code or no state",
        );
    };
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(&format!("{COOKIE}=")))
        .any(|v| v == state);
    // The state is used up whatever happens next.
    let kept = s
        .sign_ins
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&state)
        .filter(|(_, _, at)| at.elapsed() < ATTEMPT);
    let Some((verifier, nonce, _)) = kept else {
        return refused(
            StatusCode::BAD_REQUEST,
            "the sign-in's state is unknown, used or expired: start again",
        );
    };
    if !cookie {
        return refused(
            StatusCode::BAD_REQUEST,
            "the sign-in was begun in another browser: start again here",
        );
    }
    let rt = s.runtime.clone();
    let made = tokio::task::spawn_blocking(move || rt.github_signed_in(&code, &verifier)).await;
    match made {
        Ok(Ok(t)) => (
            StatusCode::FOUND,
            [
                (
                    header::LOCATION,
                    format!("/#signed-in={}&nonce={nonce}", t.token),
                ),
                // The console's page is not to name where it came from.
                (header::REFERRER_POLICY, "no-referrer".to_string()),
                (
                    header::SET_COOKIE,
                    format!("{COOKIE}=; Path=/auth/github; HttpOnly; SameSite=Lax; Max-Age=0"),
                ),
                (header::CACHE_CONTROL, "no-store".to_string()),
            ],
        )
            .into_response(),
        Ok(Err(e)) if e.kind == loop_runtime::ErrorKind::Unavailable => {
            refused(StatusCode::BAD_GATEWAY, &e.message)
        }
        Ok(Err(e)) => refused(StatusCode::FORBIDDEN, &e.message),
        Err(_) => refused(StatusCode::INTERNAL_SERVER_ERROR, "the server failed"),
    }
}
