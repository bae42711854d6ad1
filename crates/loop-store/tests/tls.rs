//! Encrypted links to the store and the queue: PostgreSQL (the test
//! cluster scripts/services.sh configures with a CA of its own) and a
//! redis-server started here with TLS and certificates made here. The
//! link is encrypted and the server's certificate and name verified; a
//! certificate another CA signed, or one for another name, is refused;
//! a plain URL still connects, unencrypted, and says so.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_store::{PgStore, QueueOptions, RedisQueue, Store};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn required() -> bool {
    std::env::var("LOOP_REQUIRE_SERVICES").as_deref() == Ok("1")
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A CA `name` in `dir`: `name.pem`, `name.key`.
fn ca(dir: &Path, name: &str) -> PathBuf {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    dir.join(format!("{name}.pem"))
}

/// A server certificate `name` (`name.pem`, `name.key`) for `san`, signed
/// by CA `by`.
fn server_cert(dir: &Path, name: &str, by: &str, san: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            "/CN=server",
        ],
    );
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!("subjectAltName={san}\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{by}.pem"),
            "-CAkey",
            &format!("{by}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loop-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_store_over_tls_is_encrypted_verified_and_a_foreign_certificate_refused() {
    let (Some(admin), Some(ca_file)) = (
        std::env::var("LOOP_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty()),
        std::env::var("LOOP_TEST_POSTGRES_CA")
            .ok()
            .filter(|u| !u.is_empty()),
    ) else {
        assert!(
            !required(),
            "LOOP_REQUIRE_SERVICES=1 but LOOP_TEST_POSTGRES_URL or LOOP_TEST_POSTGRES_CA is not set"
        );
        eprintln!("PostgreSQL with TLS missing: skipped");
        return;
    };
    let db = format!("loop_tls_{}", std::process::id());
    let mut c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .unwrap();
    c.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let base = format!("{}/{db}", admin.rsplit_once('/').unwrap().0);
    // Encrypted and verified against the cluster's CA.
    let store =
        PgStore::connect(&format!("{base}?sslmode=verify-full&sslrootcert={ca_file}")).unwrap();
    let said = store.describe().unwrap();
    assert!(said.contains("encrypted (TLSv1."), "{said}");
    assert!(said.contains("certificate verified"), "{said}");
    assert!(!said.contains("unencrypted"), "{said}");
    // A plain URL: unencrypted, and said so.
    let plain = PgStore::connect(&base).unwrap();
    assert!(plain.describe().unwrap().contains("unencrypted"));
    // A certificate the trusted CA did not sign is refused.
    let dir = scratch("pg");
    let other = ca(&dir, "other-ca");
    let e = PgStore::connect(&format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        other.display()
    ))
    .err()
    .expect("a server another CA vouches for is refused");
    assert!(e.to_string().contains("certificate"), "{e}");
    // `require` verifies too: without the cluster's CA among the public
    // roots, it is refused.
    let e = PgStore::connect(&format!("{base}?sslmode=require"))
        .err()
        .expect("an unverifiable server is refused");
    assert!(e.to_string().contains("certificate"), "{e}");
    drop((store, plain));
    let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
    let _ = std::fs::remove_dir_all(&dir);
}

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A redis-server on 127.0.0.1 speaking TLS only, with certificate `cert`.
fn redis_tls(dir: &Path, cert: &str, ca: &str) -> (Redis, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
        .arg("--tls-cert-file")
        .arg(dir.join(format!("{cert}.pem")))
        .arg("--tls-key-file")
        .arg(dir.join(format!("{cert}.key")))
        .arg("--tls-ca-cert-file")
        .arg(dir.join(format!("{ca}.pem")))
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "redis did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (Redis(child), port)
}

#[test]
fn the_queue_over_tls_is_encrypted_verified_and_a_foreign_certificate_refused() {
    let have = Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            !required(),
            "LOOP_REQUIRE_SERVICES=1 but redis-server is missing"
        );
        eprintln!("redis-server missing: skipped");
        return;
    }
    let dir = scratch("redis");
    let ca_file = ca(&dir, "ca");
    let other = ca(&dir, "other-ca");
    server_cert(&dir, "good", "ca", "IP:127.0.0.1,DNS:localhost");
    server_cert(&dir, "elsewhere", "ca", "DNS:elsewhere.invalid");
    let (_r, port) = redis_tls(&dir, "good", "ca");
    let opts = || QueueOptions {
        name: "tls".into(),
        ..QueueOptions::default()
    };
    // Encrypted and verified: the queue works.
    let q = RedisQueue::open(
        &format!("rediss://127.0.0.1:{port}/?cacert={}", ca_file.display()),
        opts(),
    )
    .unwrap();
    assert!(q.enqueue("t-1", "t-1").unwrap());
    let d = q.take("c", Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(d.task, "t-1");
    q.ack(&d).unwrap();
    assert!(
        q.describe().unwrap().contains("encrypted"),
        "{}",
        q.describe().unwrap()
    );
    // Plain text to a TLS port, another CA, another name: refused.
    assert!(RedisQueue::open(&format!("redis://127.0.0.1:{port}/"), opts()).is_err());
    let refused = |port: u16, ca: &Path, what: &str| {
        let e = RedisQueue::open(
            &format!("rediss://127.0.0.1:{port}/?cacert={}", ca.display()),
            opts(),
        )
        .err()
        .unwrap_or_else(|| panic!("{what} is refused"));
        assert!(
            e.to_string().to_lowercase().contains("certificate"),
            "{what}: {e}"
        );
    };
    refused(port, &other, "a server another CA vouches for");
    let (_r2, port2) = redis_tls(&dir, "elsewhere", "ca");
    refused(port2, &ca_file, "a certificate for another name");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A PostgreSQL store nobody answers at is unavailable (try again later),
/// told apart from one whose URL is wrong (the caller's to fix); neither
/// is taken for the other.
#[test]
fn a_store_nobody_answers_at_is_unavailable_and_a_wrong_url_is_not() {
    // Port 1 of 127.0.0.1: refused at once, again and again until the
    // store's retries run out.
    let started = Instant::now();
    let down = PgStore::connect("postgres://loop@127.0.0.1:1/loop?sslmode=disable")
        .err()
        .expect("nothing listens on port 1");
    assert!(
        matches!(down, loop_store::StoreError::Unavailable { .. }),
        "{down:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(20),
        "retried before giving up: {:?}",
        started.elapsed()
    );
    let wrong = PgStore::connect("postgres://loop@127.0.0.1:1/loop?sslmode=sometimes")
        .err()
        .expect("not a setting PostgreSQL knows");
    assert!(
        matches!(wrong, loop_store::StoreError::Db { .. }),
        "{wrong:?}"
    );
}
