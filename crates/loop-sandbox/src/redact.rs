//! Redaction of secret-looking values in everything recorded from a
//! command's output: private keys, provider tokens, bearer tokens, and
//! `NAME=value` pairs whose name says "secret".

use regex::Regex;
use std::sync::OnceLock;

/// What replaces a secret.
pub const MARK: &str = "[REDACTED]";

fn patterns() -> &'static [Regex] {
    static P: OnceLock<Vec<Regex>> = OnceLock::new();
    P.get_or_init(|| {
        [
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
            r"\bsk-[A-Za-z0-9_\-]{16,}",
            r"\bgh[opsru]_[A-Za-z0-9]{20,}",
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bAKIA[0-9A-Z]{16}\b",
            r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
            r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*",
        ]
        .iter()
        .filter_map(|p| Regex::new(p).ok())
        .collect()
    })
}

fn assignment() -> Option<&'static Regex> {
    static A: OnceLock<Option<Regex>> = OnceLock::new();
    A.get_or_init(|| {
        Regex::new(
            r#"(?im)(^|[\s"'{,(])([A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY|CREDENTIAL)[A-Z0-9_]*)("?[ \t]*[=:][ \t]*)("[^"\n]*"|'[^'\n]*'|[^\s"',}]+)"#,
        )
        .ok()
    })
    .as_ref()
}

/// `name: value` is only a secret assignment when the name looks like a
/// variable (`DB_PASSWORD`, `api_key`), not a word in prose or a file name
/// in an error message (`cat: secret: Permission denied`).
fn looks_like_variable(name: &str) -> bool {
    name.contains('_') || name.chars().all(|c| !c.is_ascii_lowercase())
}

/// `prompt_tokens: 812`, `max_tokens=96`: a number under a name that
/// counts tokens is usage, not a credential.
fn is_a_count(name: &str, value: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.ends_with("tokens") && !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit())
}

/// Cheap literal hints: without one of them no pattern can match, and the
/// regular expressions (costly to compile) are never built.
fn may_hold_secret(text: &str) -> bool {
    const HINTS: &[&str] = &[
        "private key",
        "sk-",
        "gh",
        "akia",
        "xox",
        "bearer",
        "secret",
        "token",
        "passw",
        "api_key",
        "apikey",
        "private_key",
        "privatekey",
        "access_key",
        "accesskey",
        "credential",
        "github_pat",
    ];
    let lower = text.to_ascii_lowercase();
    HINTS.iter().any(|h| lower.contains(h))
}

/// A credential found in text: where it starts (1-based) and what it looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secret {
    /// Line.
    pub line: usize,
    /// Column, in characters.
    pub col: usize,
    /// What kind of credential it looks like.
    pub kind: &'static str,
    /// The matched text (for comparisons; never shown).
    pub matched: String,
}

const KINDS: &[&str] = &[
    "a private key",
    "an OpenAI-style API key (sk-…)",
    "a GitHub token",
    "a GitHub fine-grained token",
    "an AWS access key id",
    "a Slack token",
    "a bearer token",
];

/// High-confidence credentials in `text` (private keys and provider
/// tokens; not generic `NAME=value` assignments, which code legitimately
/// writes), for the secret gate.
pub fn find_secrets(text: &str) -> Vec<Secret> {
    if !may_hold_secret(text) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (re, kind) in patterns().iter().zip(KINDS) {
        for m in re.find_iter(text) {
            let before = &text[..m.start()];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            out.push(Secret {
                line,
                col,
                kind,
                matched: m.as_str().to_string(),
            });
        }
    }
    out.sort_by_key(|s| (s.line, s.col));
    out
}

/// Replace secret-looking values in `text`.
pub fn redact(text: &str) -> String {
    if !may_hold_secret(text) {
        return text.to_string();
    }
    let mut out = text.to_string();
    for re in patterns() {
        if re.is_match(&out) {
            out = re.replace_all(&out, MARK).into_owned();
        }
    }
    if let Some(re) = assignment()
        && re.is_match(&out)
    {
        out = re
            .replace_all(&out, |c: &regex::Captures<'_>| {
                if (c[3].contains(':') && !looks_like_variable(&c[2])) || is_a_count(&c[2], &c[4]) {
                    return c[0].to_string();
                }
                format!("{}{}{}{MARK}", &c[1], &c[2], &c[3])
            })
            .into_owned();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_found_with_their_position_and_code_reading_env_is_not() {
        let text = "import os\nkey = os.environ['API_KEY']\ntoken = 'ghp_0123456789abcdefghijABCDEFGHIJ'\n";
        let found = find_secrets(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].line, found[0].col, found[0].kind),
            (3, 10, "a GitHub token")
        );
        let pem = "x\n-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(find_secrets(pem)[0].kind, "a private key");
        assert!(find_secrets("password = os.environ.get('PW')").is_empty());
        assert_eq!(
            patterns().len(),
            KINDS.len(),
            "every pattern compiles and has a name"
        );
    }

    #[test]
    fn secrets_are_redacted_and_ordinary_text_is_not() {
        let cases = [
            ("key sk-abcdefghijklmnop1234", "key [REDACTED]"),
            ("ghp_0123456789abcdefghijABCDEFGHIJ", "[REDACTED]"),
            ("id AKIAIOSFODNN7EXAMPLE here", "id [REDACTED] here"),
            ("xoxb-1234567890-abcdef", "[REDACTED]"),
            (
                "Authorization: Bearer abc.def.ghi-jkl_mno",
                "Authorization: [REDACTED]",
            ),
            ("OPENAI_API_KEY=sk-x", "OPENAI_API_KEY=[REDACTED]"),
            ("db_password: 'hunter2'", "db_password: [REDACTED]"),
            ("GITHUB_TOKEN=abc", "GITHUB_TOKEN=[REDACTED]"),
            ("export password=hunter2", "export password=[REDACTED]"),
            ("{\"api_key\": \"abc\"}", "{\"api_key\": [REDACTED]}"),
            // Token counts are usage, not credentials; a token-named secret still is.
            (
                "{\"prompt_tokens\":812,\"total_tokens\":833}",
                "{\"prompt_tokens\":812,\"total_tokens\":833}",
            ),
            ("REFRESH_TOKENS=abc123", "REFRESH_TOKENS=[REDACTED]"),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "{input}");
        }
        let pem = "before\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----\nafter";
        assert_eq!(redact(pem), "before\n[REDACTED]\nafter");
        let plain = "Ran 4 tests in 0.3s\nOK\npath=/usr/bin\ncat: /root/.cargo/credentials.toml: No such file\ncat: secret: Permission denied\ncat: /x/secret: Permission denied";
        assert_eq!(redact("Ran 4 tests in 0.3s\nOK"), "Ran 4 tests in 0.3s\nOK");
        assert_eq!(redact(plain), plain);
    }
}
