//! What is done with tasks from outside their run: the change set applied,
//! undone or discarded (`changes`), listings and status (`query`), receipts
//! verified and replayed (`receipts`), API tokens (`tokens`), `loop eval`
//! (`eval`), `loop audit` (`audit`), `loop exec` (`exec`), garbage
//! collection (`gc`), triggers (`triggers`) and the project's memory notes
//! (`memory`).

pub mod audit;
pub mod changes;
pub mod chat;
pub mod ci_check;
pub mod eval;
pub mod exec;
pub mod gc;
pub mod github;
pub mod memory;
pub mod query;
pub mod receipts;
pub mod signin;
pub mod tokens;
pub mod triggers;

/// An HTTP client for a platform's API (GitHub, Slack, Telegram): its
/// answers all read (a 4xx or 5xx is an answer, not an error), no
/// redirect followed (a token goes only where it was sent), bounded in
/// time (`within` in all, 10 s to connect).
pub(crate) fn platform_agent(within: std::time::Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(std::time::Duration::from_secs(10)))
        .timeout_global(Some(within))
        .build()
        .into()
}
