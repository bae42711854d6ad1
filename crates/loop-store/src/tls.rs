//! Encrypted links to the store and the queue (rustls; the certificate and
//! the host name are always verified).
//!
//! - PostgreSQL: `sslmode=require`, `verify-ca` or `verify-full` in the
//!   URL's query encrypts every connection and verifies the server's
//!   certificate and name (all three verify fully: an encrypted link to
//!   anyone who answers is no protection); `sslrootcert=PATH` names the CA
//!   (PEM) to trust, else the public roots. `disable`, `prefer` or no
//!   `sslmode` keeps the link unencrypted, as before.
//! - Redis: a `rediss://` URL is encrypted and verified; `cacert=PATH` in
//!   its query names the CA to trust, else the system's roots.

use std::path::Path;

/// A CA file's certificates (PEM), at most this big.
const MAX_CA_BYTES: u64 = 1 << 20;

/// A PostgreSQL URL with the TLS settings taken out, and the connector
/// they ask for (`None`: unencrypted).
pub(crate) struct PgTls {
    /// The URL tokio-postgres reads (`sslmode=require` or `disable`).
    pub url: String,
    /// The connector, when the link is encrypted.
    pub connector: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

/// Split `url`'s query into the TLS settings and the rest.
/// Why the TLS settings of a URL cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TlsSetup(pub String);

impl From<String> for TlsSetup {
    fn from(why: String) -> Self {
        TlsSetup(why)
    }
}

impl From<&str> for TlsSetup {
    fn from(why: &str) -> Self {
        TlsSetup(why.to_string())
    }
}

fn take_params<'a>(url: &'a str, ours: &[&str]) -> (&'a str, Vec<(String, String)>, Vec<String>) {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut taken = Vec::new();
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if ours.contains(&k) {
            taken.push((k.to_string(), percent_decode(v)));
        } else {
            rest.push(pair.to_string());
        }
    }
    (base, taken, rest)
}

fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(x) =
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
        {
            out.push(x);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn join(base: &str, params: &[String]) -> String {
    if params.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", params.join("&"))
    }
}

/// The TLS settings of a PostgreSQL URL (see the module's doc).
pub(crate) fn postgres(url: &str) -> Result<PgTls, TlsSetup> {
    if !url.contains("://") {
        // The key=value form: passed as it is (tokio-postgres reads its
        // `sslmode=disable|prefer`; no TLS is offered).
        return Ok(PgTls {
            url: url.to_string(),
            connector: None,
        });
    }
    let (base, taken, mut rest) = take_params(url, &["sslmode", "sslrootcert"]);
    let get = |k: &str| {
        taken
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    let mode = get("sslmode").unwrap_or_default();
    let encrypted = match mode.as_str() {
        "" | "disable" | "prefer" | "allow" => false,
        "require" | "verify-ca" | "verify-full" => true,
        other => {
            return Err(format!(
                "sslmode `{other}` is not one of disable, prefer, require, verify-ca, verify-full"
            )
            .into());
        }
    };
    let root = get("sslrootcert");
    if !encrypted {
        if root.is_some() {
            return Err(
                "sslrootcert is given but sslmode does not ask for TLS (say sslmode=verify-full)"
                    .into(),
            );
        }
        rest.push("sslmode=disable".into());
        return Ok(PgTls {
            url: join(base, &rest),
            connector: None,
        });
    }
    rest.push("sslmode=require".into());
    let config = client_config(root.as_deref().map(Path::new))?;
    Ok(PgTls {
        url: join(base, &rest),
        connector: Some(tokio_postgres_rustls::MakeRustlsConnect::new(config)),
    })
}

/// A Redis URL without `cacert`, and the CA it names (PEM), if any.
pub(crate) fn redis(url: &str) -> Result<(String, Option<Vec<u8>>), TlsSetup> {
    let (base, taken, rest) = take_params(url, &["cacert"]);
    let Some((_, path)) = taken.last() else {
        return Ok((url.to_string(), None));
    };
    if !base.starts_with("rediss://") {
        return Err(TlsSetup(
            "cacert is given but the URL is not rediss:// (TLS)".into(),
        ));
    }
    let pem = read_ca(Path::new(path))?;
    // Checked here, so a bad file is named now, not at the first command.
    roots(&pem, path)?;
    Ok((join(base, &rest), Some(pem)))
}

/// A client configuration trusting the CA in `root` (PEM), else the
/// public roots.
fn client_config(root: Option<&Path>) -> Result<rustls::ClientConfig, TlsSetup> {
    let store = match root {
        Some(p) => roots(&read_ca(p)?, &p.display().to_string())?,
        None => rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth())
}

/// The certificates of a CA file (the runtime's own reading of a file the
/// person named: a regular file, bounded).
#[allow(clippy::disallowed_methods)] // a CA file the person named in the URL, opened O_NONBLOCK and bounded
fn read_ca(p: &Path) -> Result<Vec<u8>, TlsSetup> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| format!("CA file {}: {e}", p.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("CA file {}: {e}", p.display()))?;
    if !meta.is_file() {
        return Err(format!("CA file {}: not a regular file", p.display()).into());
    }
    let mut out = Vec::new();
    f.take(MAX_CA_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("CA file {}: {e}", p.display()))?;
    if out.len() as u64 > MAX_CA_BYTES {
        return Err(format!("CA file {}: over {MAX_CA_BYTES} bytes", p.display()).into());
    }
    Ok(out)
}

fn roots(pem: &[u8], name: &str) -> Result<rustls::RootCertStore, TlsSetup> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("CA file {name}: {e}"))?;
        store
            .add(cert)
            .map_err(|e| format!("CA file {name}: {e}"))?;
    }
    if store.is_empty() {
        return Err(format!("CA file {name}: no certificate in it").into());
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_settings_are_read_from_the_url_and_what_is_left_passed_on() {
        let p = postgres("postgres://loop@db:5432/loop").unwrap();
        assert_eq!(p.url, "postgres://loop@db:5432/loop?sslmode=disable");
        assert!(p.connector.is_none());
        let p = postgres("postgres://loop@db/loop?application_name=x&sslmode=prefer").unwrap();
        assert_eq!(
            p.url,
            "postgres://loop@db/loop?application_name=x&sslmode=disable"
        );
        // Every TLS mode verifies, with the public roots unless told.
        for mode in ["require", "verify-ca", "verify-full"] {
            let p = postgres(&format!("postgres://loop@db/loop?sslmode={mode}")).unwrap();
            assert_eq!(p.url, "postgres://loop@db/loop?sslmode=require");
            assert!(p.connector.is_some());
        }
        let e = postgres("postgres://db/loop?sslmode=maybe").err().unwrap();
        assert!(e.0.contains("`maybe`"), "{e}");
        let e = postgres("postgres://db/loop?sslmode=disable&sslrootcert=/x")
            .err()
            .unwrap();
        assert!(e.0.contains("does not ask for TLS"), "{e}");
        let e = postgres("postgres://db/loop?sslmode=verify-full&sslrootcert=/no/such/ca.pem")
            .err()
            .unwrap();
        assert!(e.0.contains("/no/such/ca.pem"), "{e}");
        let e = postgres("postgres://db/loop?sslmode=verify-full&sslrootcert=/dev/null")
            .err()
            .unwrap();
        assert!(
            e.0.contains("not a regular file") || e.0.contains("no certificate"),
            "{e}"
        );
        assert_eq!(
            redis("redis://h:1/0").unwrap(),
            ("redis://h:1/0".into(), None)
        );
        let e = redis("redis://h:1/0?cacert=/x").unwrap_err();
        assert!(e.0.contains("not rediss://"), "{e}");
        assert_eq!(percent_decode("%2Ftmp%2Fca.pem"), "/tmp/ca.pem");
    }
}
