//! Skill bundles people share and trust: a folder with a `SKILL.md` (its
//! front matter may declare `capabilities`), an optional `contract.yaml`
//! and resources, signed by a DSSE envelope over the bundle's Merkle root
//! (`SKILL.sig.json`). A bundle from outside the project is used only when
//! a key the Loopfile's `skills.trust` lists signed it and not one byte
//! changed since; a project's own `loop-patterns/NAME/` stays usable
//! unsigned, marked as such. Every read goes through the project door: a
//! link, a FIFO or a device in a bundle is refused by name, never read
//! through. A skill can only narrow the task that uses it
//! ([`narrow`]).

use crate::Error;
use base64::Engine as _;
use loop_protocol::delegation::{ExecRule, Stricter};
use loop_protocol::skill::{Capabilities, SkillRecord};
use loop_workspace::door;
use loop_workspace::untrusted::Node;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The signed manifest beside a bundle's files.
pub const SIGNATURE_FILE: &str = "SKILL.sig.json";
/// The DSSE payload type of a signed bundle.
pub const PAYLOAD_TYPE: &str = "application/vnd.loop-engine.skill.v1+json";
/// Where a project keeps the skills installed into it.
pub const PROJECT_DIR: &str = "loop-skills";
/// Where a project keeps its own (unsigned) patterns.
pub const PATTERNS_DIR: &str = "loop-patterns";
/// The most files a bundle holds.
pub const MAX_FILES: usize = 256;
/// The largest file in a bundle.
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// All of a bundle's files together.
pub const MAX_BUNDLE_BYTES: u64 = 16 << 20;
/// How deep a bundle's folders go.
const MAX_DEPTH: usize = 8;

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleFile {
    /// Its path in the bundle.
    pub path: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// Whether it is executable (signed too: a script that becomes one
    /// is a change).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub executable: bool,
}

/// A bundle as read from its folder.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Its name (the folder's).
    pub name: String,
    /// The folder.
    pub dir: PathBuf,
    /// Its files (the signature left out), sorted.
    pub files: Vec<BundleFile>,
    /// `sha256:` and the Merkle root of its files.
    pub digest: String,
    /// `SKILL.md` without its front matter.
    pub guidance: String,
    /// What its front matter declares.
    pub capabilities: Capabilities,
    /// Exec rules it declared that could only widen (`allow`), dropped.
    pub widening: Vec<String>,
    /// Its front matter's `description`.
    pub description: Option<String>,
}

/// What the envelope's payload says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Signed {
    kind: String,
    name: String,
    digest: String,
    files: Vec<BundleFile>,
    capabilities: Capabilities,
    /// When it was signed (ms since the epoch; 0 in a signature made
    /// before signing times were kept): what rollback protection compares.
    #[serde(default)]
    signed_at_ms: u64,
}

const KIND: &str = "loop-engine/skill";

fn bad(dir: &Path, why: impl std::fmt::Display) -> Error {
    Error::usage(format!("skill {}: {why}", dir.display()))
}

/// Whether `name` can name a skill: 1 to 64 letters, digits, `.`, `-`,
/// `_`, not starting with a dot.
pub fn name_problem(name: &str) -> Option<String> {
    let ok = (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    (!ok)
        .then(|| format!("`{name}` is not a skill name (1 to 64 letters, digits, `.`, `-` or `_`)"))
}

/// Read the bundle in `dir`: every file, no link followed, bounded.
pub fn read_bundle(dir: &Path) -> Result<Bundle, Error> {
    // A folder a person named as `.` or `..` is named by what it is.
    let named = if dir.file_name().is_none() {
        dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
    } else {
        dir.to_path_buf()
    };
    let name = named
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    if let Some(why) = name_problem(&name) {
        return Err(bad(dir, why));
    }
    let mut files = Vec::new();
    let mut total = 0u64;
    // SKILL.md as it was hashed: what is parsed and given is what is signed.
    let mut skill_md = None;
    walk(dir, "", 0, &mut files, (&mut total, &mut skill_md))?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let skill =
        skill_md.ok_or_else(|| bad(dir, "no SKILL.md: a bundle is a folder with a SKILL.md"))?;
    let skill = String::from_utf8(skill).map_err(|_| bad(dir, "SKILL.md is not UTF-8 text"))?;
    // Line ends and a byte-order mark as editors leave them.
    let skill = skill.trim_start_matches('\u{feff}').replace("\r\n", "\n");
    let (front, guidance) = front_matter(&skill).map_err(|e| bad(dir, e.message))?;
    let mut bundle = Bundle {
        digest: digest_of(&files),
        name,
        dir: dir.to_path_buf(),
        files,
        guidance: guidance.to_string(),
        capabilities: Capabilities::default(),
        widening: Vec::new(),
        description: None,
    };
    if let Some(front) = front {
        read_front(&mut bundle, front)?;
    }
    Ok(bundle)
}

/// Every file beneath `rel` of `dir`, into `out`.
fn walk(
    dir: &Path,
    rel: &str,
    depth: usize,
    out: &mut Vec<BundleFile>,
    (total, skill_md): (&mut u64, &mut Option<Vec<u8>>),
) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(bad(
            dir,
            format!("{rel}: folders nest deeper than {MAX_DEPTH}"),
        ));
    }
    let names =
        door::list_all(dir, (!rel.is_empty()).then(|| Path::new(rel))).map_err(|e| bad(dir, e))?;
    for n in names {
        // The signature, and a repository's own records, are not content.
        if rel.is_empty() && (n == SIGNATURE_FILE || n == ".git") {
            continue;
        }
        let path = if rel.is_empty() {
            n.clone()
        } else {
            format!("{rel}/{n}")
        };
        match door::node(dir, &path).map_err(|e| bad(dir, e))? {
            Node::Dir => walk(dir, &path, depth + 1, out, (&mut *total, &mut *skill_md))?,
            Node::File { size, mode, .. } => {
                if size > MAX_FILE_BYTES {
                    return Err(bad(
                        dir,
                        format!(
                            "{path} is {size} bytes, over the {MAX_FILE_BYTES} a bundle's file may hold"
                        ),
                    ));
                }
                *total += size;
                if *total > MAX_BUNDLE_BYTES || out.len() >= MAX_FILES {
                    return Err(bad(
                        dir,
                        format!("over {MAX_FILES} files or {MAX_BUNDLE_BYTES} bytes"),
                    ));
                }
                let bytes = door::read(dir, &path, MAX_FILE_BYTES)
                    .map_err(|e| bad(dir, e))?
                    .unwrap_or_default();
                out.push(BundleFile {
                    sha256: loop_protocol::hash::sha256_hex(&bytes),
                    size: bytes.len() as u64,
                    path: path.clone(),
                    executable: mode & 0o111 != 0,
                });
                if path == "SKILL.md" {
                    *skill_md = Some(bytes);
                }
            }
            Node::Symlink(t) => {
                return Err(bad(
                    dir,
                    format!(
                        "{path} is a link (to {}): a skill bundle holds no links",
                        t.display()
                    ),
                ));
            }
            Node::Missing => {}
            _ => {
                return Err(bad(
                    dir,
                    format!("{path} is not a file or a folder (a FIFO, socket or device)"),
                ));
            }
        }
    }
    Ok(())
}

/// `sha256:` and the Merkle root of `files` (as a workspace manifest's).
fn digest_of(files: &[BundleFile]) -> String {
    let entries: Vec<loop_workspace::Entry> = files
        .iter()
        .map(|f| loop_workspace::Entry {
            path: f.path.clone(),
            kind: loop_workspace::EntryKind::File,
            sha256: f.sha256.clone(),
            size: f.size,
            executable: f.executable,
            raw_path: None,
        })
        .collect();
    format!("sha256:{}", loop_workspace::manifest::merkle_root(&entries))
}

/// A `SKILL.md`'s front matter (between `---` lines at its top), if any,
/// and the rest.
fn front_matter(text: &str) -> Result<(Option<&str>, &str), Error> {
    let Some(rest) = text.strip_prefix("---\n") else {
        return Ok((None, text));
    };
    match rest.find("\n---\n") {
        Some(end) => Ok((Some(&rest[..end + 1]), &rest[end + 5..])),
        None => match rest.strip_suffix("\n---") {
            Some(front) => Ok((Some(front), "")),
            // Opened and never closed: its capabilities would be lost.
            None => Err(Error::usage(
                "SKILL.md opens a front matter (`---`) that no `---` line closes",
            )),
        },
    }
}

/// The front matter's keys: ours, and those of the shared `SKILL.md`
/// format other agents read (`license`, `compatibility`, `metadata`,
/// `allowed-tools`), taken and not used. Any other key is refused: a
/// misspelt `capabilities` would otherwise leave the skill unbounded.
const FRONT_KEYS: &[&str] = &[
    "name",
    "description",
    "capabilities",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
];

/// Whether `name` names a tool a task can be offered: this build's own,
/// `delegate`, `remember`, or an MCP server's (`mcp__SERVER__TOOL`).
fn is_tool(name: &str) -> bool {
    loop_tools::specs::all()
        .iter()
        .chain(loop_tools::specs::documents().iter())
        .any(|s| s.name == name)
        || [
            loop_tools::browser::NAME,
            crate::task::delegate::TOOL,
            crate::task::memory::TOOL,
        ]
        .contains(&name)
        || name
            .strip_prefix(loop_tools::mcp::PREFIX)
            .is_some_and(|rest| rest.contains("__"))
}
const CAPABILITY_KEYS: &[&str] = &["tools", "exec", "network", "writable"];
const RULE_KEYS: &[&str] = &["prefix", "decision"];

/// Read the front matter's `name`, `description` and `capabilities`.
fn read_front(bundle: &mut Bundle, front: &str) -> Result<(), Error> {
    use loop_protocol::yaml::{self, Reader};
    let origin = format!("{}/SKILL.md front matter", bundle.dir.display());
    let root = yaml::parse(front)
        .map_err(|e| Error::usage(format!("{origin}:{}: {}", e.pos, e.message)))?;
    let mut r = Reader::new(&origin);
    let mut caps = Capabilities::default();
    for (k, v) in r
        .mapping(&root, "the front matter", FRONT_KEYS)
        .unwrap_or_default()
    {
        match k.name.as_str() {
            "name" => {
                if let Some(n) = r.string(v, "`name`")
                    && n != bundle.name
                {
                    r.err(
                        Some(v.pos),
                        format!("`name` is `{n}` but the folder is `{}`", bundle.name),
                        None,
                    );
                }
            }
            "description" => bundle.description = r.string(v, "`description`"),
            "capabilities" => {
                for (k, v) in r
                    .mapping(v, "`capabilities`", CAPABILITY_KEYS)
                    .unwrap_or_default()
                {
                    match k.name.as_str() {
                        "tools" => {
                            caps.tools = r.strings(v, "`capabilities.tools`");
                            for t in caps.tools.iter().flatten().filter(|t| !is_tool(t)) {
                                r.err(
                                    Some(v.pos),
                                    format!("`capabilities.tools`: `{t}` is no tool (a task would be offered none by that name)"),
                                    None,
                                );
                            }
                        }
                        "network" => caps.network = r.strings(v, "`capabilities.network`"),
                        "writable" => caps.writable = r.strings(v, "`capabilities.writable`"),
                        "exec" => {
                            for item in r.seq(v, "`capabilities.exec`").unwrap_or_default() {
                                let mut prefix = None;
                                let mut decision = None;
                                for (k, v) in r
                                    .mapping(item, "an exec rule", RULE_KEYS)
                                    .unwrap_or_default()
                                {
                                    match k.name.as_str() {
                                        "prefix" => prefix = r.nonempty_string(v, "`prefix`"),
                                        "decision" => {
                                            decision = r.one_of(
                                                v,
                                                "`decision`",
                                                &["allow", "prompt", "forbidden"],
                                            )
                                        }
                                        _ => {}
                                    }
                                }
                                match (prefix, decision) {
                                    (Some(p), Some("allow")) => bundle.widening.push(format!(
                                        "exec rule `{p}: allow`: a skill cannot widen the task's exec policy"
                                    )),
                                    (Some(prefix), Some(d)) => caps.exec.push(ExecRule {
                                        prefix,
                                        decision: if d == "prompt" {
                                            Stricter::Prompt
                                        } else {
                                            Stricter::Forbidden
                                        },
                                    }),
                                    _ => r.err(
                                        Some(item.pos),
                                        "an exec rule needs `prefix` and `decision`".into(),
                                        None,
                                    ),
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(paths) = caps.writable.take() {
        let mut normal = Vec::new();
        for p in &paths {
            match loop_protocol::RelPath::parse(p) {
                Ok(rel) if !rel.is_root() => normal.push(rel.as_str().to_string()),
                _ => r.err(
                    None,
                    format!("`capabilities.writable`: `{p}` is not a path inside the workspace (and not the whole of it)"),
                    None,
                ),
            }
        }
        if paths.is_empty() {
            r.err(
                None,
                "`capabilities.writable` names at least one path (a skill that writes nothing names no write tool in `tools`)".into(),
                None,
            );
        }
        caps.writable = Some(normal);
    }
    r.finish(Some(()))
        .map_err(|d| Error::usage(d.to_string()))?;
    bundle.capabilities = caps;
    Ok(())
}

/// What `loop skills sign` did.
#[derive(Debug, Clone, Serialize)]
pub struct SignReport {
    /// The bundle.
    pub name: String,
    /// Its digest.
    pub digest: String,
    /// The key that signed it.
    pub keyid: String,
    /// How many files it holds.
    pub files: usize,
}

/// Sign the bundle in `dir` with this user's signing key: its manifest,
/// enveloped, written to `dir/SKILL.sig.json`.
pub fn sign(dir: &Path) -> Result<SignReport, Error> {
    let key = loop_receipt::KeyPair::load_or_create()
        .map_err(|e| Error::usage(format!("signing key: {e}")))?;
    sign_with(dir, &key)
}

/// [`sign`] with `key`.
pub fn sign_with(dir: &Path, key: &loop_receipt::KeyPair) -> Result<SignReport, Error> {
    let bundle = read_bundle(dir)?;
    let payload = serde_json::to_vec(&Signed {
        kind: KIND.into(),
        name: bundle.name.clone(),
        digest: bundle.digest.clone(),
        files: bundle.files.clone(),
        capabilities: bundle.capabilities.clone(),
        signed_at_ms: loop_core::Clock::now_ms(&loop_core::SystemClock),
    })
    .map_err(Error::from_cause)?;
    let envelope = loop_receipt::Envelope {
        payload_type: PAYLOAD_TYPE.into(),
        payload: base64::engine::general_purpose::STANDARD.encode(&payload),
        signatures: vec![loop_receipt::receipt::Signature {
            keyid: key.keyid().to_string(),
            sig: key.sign_b64(&loop_receipt::receipt::pae(PAYLOAD_TYPE, &payload)),
        }],
    };
    let text = serde_json::to_vec_pretty(&envelope).map_err(Error::from_cause)?;
    door::write(dir, SIGNATURE_FILE, &text).map_err(|e| bad(dir, e))?;
    Ok(SignReport {
        name: bundle.name,
        digest: bundle.digest,
        keyid: key.keyid().to_string(),
        files: bundle.files.len(),
    })
}

/// A bundle that holds: signed by `signer`, a trusted key, and as signed.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The bundle.
    pub bundle: Bundle,
    /// The key id that signed it.
    pub signer: String,
    /// When it was signed (0: before signing times were kept).
    pub signed_at_ms: u64,
}

/// Check the bundle in `dir` against its signature and `trusted`: every
/// reason it does not hold, each naming what (a file, a key).
pub fn verify(dir: &Path, trusted: &[loop_receipt::PublicKey]) -> Result<Verified, Error> {
    let bundle = read_bundle(dir)?;
    let sig = door::read(dir, SIGNATURE_FILE, 1 << 20)
        .map_err(|e| bad(dir, e))?
        .ok_or_else(|| {
            bad(
                dir,
                format!("unsigned: no {SIGNATURE_FILE} (`loop skills sign DIR` signs a bundle)"),
            )
        })?;
    let envelope: loop_receipt::Envelope = serde_json::from_slice(&sig)
        .map_err(|e| bad(dir, format!("{SIGNATURE_FILE} is not a DSSE envelope: {e}")))?;
    if envelope.payload_type != PAYLOAD_TYPE {
        return Err(bad(
            dir,
            format!(
                "{SIGNATURE_FILE}: payload type `{}`, not `{PAYLOAD_TYPE}`",
                envelope.payload_type
            ),
        ));
    }
    let payload = base64::engine::general_purpose::STANDARD
        .decode(envelope.payload.as_bytes())
        .map_err(|e| bad(dir, format!("{SIGNATURE_FILE}: payload is not base64: {e}")))?;
    let message = loop_receipt::receipt::pae(PAYLOAD_TYPE, &payload);
    let signer = envelope.signatures.iter().find_map(|s| {
        trusted
            .iter()
            .any(|k| k.keyid == s.keyid && k.verifies(&message, &s.sig))
            .then(|| s.keyid.clone())
    });
    let Some(signer) = signer else {
        let ids: Vec<&str> = envelope
            .signatures
            .iter()
            .map(|s| s.keyid.as_str())
            .collect();
        let known = envelope
            .signatures
            .iter()
            .any(|s| trusted.iter().any(|k| k.keyid == s.keyid));
        return Err(bad(
            dir,
            if known {
                format!("the signature by {} does not verify", ids.join(", "))
            } else if ids.is_empty() {
                "its envelope holds no signature".to_string()
            } else {
                format!(
                    "signed by {}, not a key the Loopfile's `skills.trust` lists",
                    ids.join(", ")
                )
            },
        ));
    };
    let signed: Signed = serde_json::from_slice(&payload).map_err(|e| {
        bad(
            dir,
            format!("{SIGNATURE_FILE}: its manifest cannot be read: {e}"),
        )
    })?;
    let mut wrong = Vec::new();
    if signed.kind != KIND {
        wrong.push(format!("its manifest is a `{}`, not a skill", signed.kind));
    }
    if signed.name != bundle.name {
        wrong.push(format!(
            "it was signed as `{}`, not `{}`",
            signed.name, bundle.name
        ));
    }
    for f in &signed.files {
        match bundle.files.iter().find(|g| g.path == f.path) {
            None => wrong.push(format!("{} is gone since it was signed", f.path)),
            Some(g) if g.sha256 != f.sha256 => {
                wrong.push(format!("{} changed since it was signed", f.path))
            }
            Some(g) if g.executable != f.executable => wrong.push(format!(
                "{} was made {} since it was signed",
                f.path,
                if g.executable {
                    "executable"
                } else {
                    "not executable"
                }
            )),
            Some(_) => {}
        }
    }
    for g in &bundle.files {
        if !signed.files.iter().any(|f| f.path == g.path) {
            wrong.push(format!("{} was added since it was signed", g.path));
        }
    }
    if wrong.is_empty() && signed.digest != bundle.digest {
        wrong.push("its digest differs from the one signed".into());
    }
    if !wrong.is_empty() {
        return Err(bad(dir, wrong.join("; ")));
    }
    Ok(Verified {
        bundle,
        signer,
        signed_at_ms: signed.signed_at_ms,
    })
}

/// [`verify`], and not older than a copy this machine already took for
/// `project` (rollback protection, see `floor`).
fn verify_current(
    project: &Path,
    dir: &Path,
    trusted: &[loop_receipt::PublicKey],
) -> Result<Verified, Error> {
    let v = verify(dir, trusted)?;
    if let Some(why) = floor::older(project, &v.bundle.name, v.signed_at_ms) {
        return Err(bad(dir, why));
    }
    Ok(v)
}

/// The keys the Loopfile's `skills.trust` lists: each a public key in PEM,
/// or a project path to one (read through the door).
pub fn trusted(
    project: &Path,
    loopfile: &crate::loopfile::Loopfile,
) -> Result<Vec<loop_receipt::PublicKey>, Error> {
    let mut out = Vec::new();
    for entry in &loopfile.skills_trust {
        let text = if entry.trim_start().starts_with("-----BEGIN") {
            entry.clone()
        } else {
            door::read_text(project, entry, 64 << 10)
                .map_err(|e| Error::usage(format!("skills.trust: {e}")))?
                .ok_or_else(|| Error::usage(format!("skills.trust: no file {entry}")))?
        };
        out.push(
            loop_receipt::PublicKey::parse(&text)
                .map_err(|e| Error::usage(format!("skills.trust: {entry}: {e}")))?,
        );
    }
    Ok(out)
}

/// The bundle's contract template (`contract.yaml`), if it has one: read
/// through the door and checked against the digest the bundle was read
/// (and verified) with, so what runs is what was signed.
pub fn contract_template(bundle: &Bundle) -> Result<Option<loop_protocol::Contract>, Error> {
    let Some(listed) = bundle.files.iter().find(|f| f.path == "contract.yaml") else {
        return Ok(None);
    };
    let text = door::read_text(&bundle.dir, "contract.yaml", MAX_FILE_BYTES)
        .map_err(|e| bad(&bundle.dir, e))?
        .unwrap_or_default();
    if loop_protocol::hash::sha256_hex(text.as_bytes()) != listed.sha256 {
        return Err(bad(
            &bundle.dir,
            "contract.yaml changed since the bundle was read",
        ));
    }
    let origin = bundle.dir.join("contract.yaml").display().to_string();
    loop_protocol::Contract::from_yaml(&text, &origin)
        .map(Some)
        .map_err(|e| Error::usage(e.to_string()))
}

/// Where this user keeps skills for every project.
pub fn user_dir() -> PathBuf {
    loop_receipt::state_dir().join("skills")
}

/// Where a skill is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// `loop-skills/NAME/` in the project.
    Project,
    /// This user's skills (`$LOOP_STATE_DIR/skills/NAME/`).
    User,
    /// `loop-patterns/NAME/`: the project's own, unsigned.
    Pattern,
}

impl Place {
    /// The folder its skills are under, as a base the door opens and the
    /// path beneath it (so no link on the way is followed).
    fn base(self, project: &Path) -> (PathBuf, &'static str) {
        match self {
            Place::Project => (project.to_path_buf(), PROJECT_DIR),
            Place::User => (loop_receipt::state_dir(), "skills"),
            Place::Pattern => (project.to_path_buf(), PATTERNS_DIR),
        }
    }

    fn dir(self, project: &Path) -> PathBuf {
        let (base, rel) = self.base(project);
        base.join(rel)
    }

    /// Whether skill `name` is kept here: `Ok(false)` when nothing is
    /// there; a link or a file where its folder should be is refused.
    fn holds(self, project: &Path, name: &str) -> Result<bool, Error> {
        let (base, rel) = self.base(project);
        if self == Place::User && !door::is_dir(&base, rel) {
            return Ok(false);
        }
        match door::node(&base, Path::new(rel).join(name)) {
            Ok(Node::Missing) => Ok(false),
            Ok(Node::Dir) => Ok(true),
            Ok(_) => Err(Error::usage(format!(
                "skill {name}: {} is not a folder (a link?): refused",
                base.join(rel).join(name).display()
            ))),
            Err(e) => Err(Error::usage(format!("skill {name}: {e}"))),
        }
    }

    /// The names kept here.
    fn names(self, project: &Path) -> Result<Vec<String>, Error> {
        let (base, rel) = self.base(project);
        if self == Place::User && !door::is_dir(&base, rel) {
            return Ok(Vec::new());
        }
        door::list(&base, Some(Path::new(rel))).map_err(|e| Error::usage(e.to_string()))
    }
}

/// A skill as `loop skills list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Where it is kept.
    pub place: Place,
    /// Its digest, when it could be read.
    pub digest: Option<String>,
    /// `signed by KEY`, `unsigned, project-local`, or why it is refused.
    pub state: String,
    /// Whether a task may use it.
    pub usable: bool,
    /// Its description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Judge the skill `name` kept at `place`.
fn judge(project: &Path, place: Place, name: &str, trusted: &[loop_receipt::PublicKey]) -> Listed {
    let dir = place.dir(project).join(name);
    // A link (or a file) where a skill's folder should be is never walked.
    if let Err(e) = place.holds(project, name) {
        return Listed {
            name: name.to_string(),
            place,
            digest: None,
            state: format!("refused: {e}"),
            usable: false,
            description: None,
        };
    }
    let (digest, state, usable, description) = match place {
        Place::Pattern => match read_bundle(&dir) {
            Ok(b) => (
                Some(b.digest),
                "unsigned, project-local".to_string(),
                true,
                b.description,
            ),
            Err(e) => (None, e.to_string(), false, None),
        },
        _ => match verify_current(project, &dir, trusted) {
            Ok(v) => (
                Some(v.bundle.digest),
                format!("signed by {}", v.signer),
                true,
                v.bundle.description,
            ),
            Err(e) => (None, format!("refused: {e}"), false, None),
        },
    };
    Listed {
        name: name.to_string(),
        place,
        digest,
        state,
        usable,
        description,
    }
}

/// Every skill this project can see, each judged.
pub fn list(project: &Path) -> Result<Vec<Listed>, Error> {
    let loopfile = crate::loopfile::Loopfile::load(project)?;
    let trusted = trusted(project, &loopfile)?;
    let mut out = Vec::new();
    for place in [Place::Project, Place::User, Place::Pattern] {
        for n in place
            .names(project)?
            .iter()
            .filter(|n| name_problem(n).is_none())
        {
            out.push(judge(project, place, n, &trusted));
        }
    }
    Ok(out)
}

/// The skill `name` a task may use, with how it is vouched for: the
/// project's installed one, else this user's (each must verify), else the
/// project's own pattern (unsigned). Refused with the reason otherwise.
pub fn resolve(
    project: &Path,
    loopfile: &crate::loopfile::Loopfile,
    name: &str,
) -> Result<(Bundle, Option<String>), Error> {
    resolve_taking(project, loopfile, name, false)
}

/// [`resolve`] for a task that uses it: a signed one's signing time is
/// remembered (rollback protection; looking at one changes nothing).
pub(crate) fn resolve_for_task(
    project: &Path,
    loopfile: &crate::loopfile::Loopfile,
    name: &str,
) -> Result<(Bundle, Option<String>), Error> {
    resolve_taking(project, loopfile, name, true)
}

fn resolve_taking(
    project: &Path,
    loopfile: &crate::loopfile::Loopfile,
    name: &str,
    take: bool,
) -> Result<(Bundle, Option<String>), Error> {
    if let Some(why) = name_problem(name) {
        return Err(Error::usage(why));
    }
    let trusted = trusted(project, loopfile)?;
    for place in [Place::Project, Place::User] {
        if place.holds(project, name)? {
            let v = verify_current(project, &place.dir(project).join(name), &trusted)?;
            if take {
                floor::took(project, name, v.signed_at_ms, false)?;
            }
            return Ok((v.bundle, Some(v.signer)));
        }
    }
    if Place::Pattern.holds(project, name)? {
        return Ok((read_bundle(&Place::Pattern.dir(project).join(name))?, None));
    }
    Err(Error::usage(format!(
        "no skill `{name}` (looked in {PROJECT_DIR}/, {} and {PATTERNS_DIR}/)",
        user_dir().display()
    )))
}

/// The bundle's resources the model is given with its `SKILL.md`: each
/// text file but `SKILL.md` and `contract.yaml`, read again through the
/// door and given only if it still has the digest the bundle was
/// verified with (`path`, text), in the bundle's order.
pub fn resources(bundle: &Bundle) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for f in &bundle.files {
        if f.path == "SKILL.md" || f.path == "contract.yaml" || f.size > RESOURCE_BYTES {
            continue;
        }
        let Ok(Some(bytes)) = door::read(&bundle.dir, &f.path, RESOURCE_BYTES) else {
            continue;
        };
        if loop_protocol::hash::sha256_hex(&bytes) != f.sha256 {
            continue;
        }
        if let Ok(text) = String::from_utf8(bytes) {
            out.push((f.path.clone(), text));
        }
    }
    out
}

/// The largest resource given to the model (the skills' guidance has its
/// own bound in all, see `loop_core::prompt`).
const RESOURCE_BYTES: u64 = 64 << 10;

/// What `loop skills install` did.
#[derive(Debug, Clone, Serialize)]
pub struct Installed {
    /// The skill.
    pub name: String,
    /// Where it now is.
    pub path: PathBuf,
    /// Its digest.
    pub digest: String,
    /// Who signed it.
    pub signer: String,
}

/// Install the bundle at `from` (a folder, or a git repository — the top
/// of a working tree, or a bare one — whose HEAD commit holds one) into
/// the project's `loop-skills/` or, with `user`, this user's skills, after
/// it verifies against the project's trusted keys; copied file by file as
/// verified, then verified again in place. From a repository, what is
/// installed is its HEAD commit's tree, never uncommitted files.
pub fn install(
    project: &Path,
    from: &Path,
    (user, allow_older): (bool, bool),
) -> Result<Installed, Error> {
    if !crate::project::commits::is_repository(from) {
        return install_folder(project, from, (user, allow_older));
    }
    // The commit's tree, written out under the repository's own name.
    let named = if from.file_name().is_none() {
        from.canonicalize().unwrap_or_else(|_| from.to_path_buf())
    } else {
        from.to_path_buf()
    };
    let name = named
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.strip_suffix(".git").unwrap_or(n).to_string())
        .unwrap_or_default();
    if let Some(why) = name_problem(&name) {
        return Err(bad(from, why));
    }
    // A private directory of its own (a fresh random name, 0700).
    let scratch = std::env::temp_dir()
        .join(loop_sandbox::unique_name("loop-skill").map_err(Error::from_cause)?);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&scratch)
            .map_err(Error::from_cause)?;
    }
    let tree = scratch.join(&name);
    let installed = crate::project::commits::write_tree(from, "HEAD", &tree, 2 * MAX_BUNDLE_BYTES)
        .and_then(|()| install_folder(project, &tree, (user, allow_older)));
    let _ = loop_workspace::remove_tree(&scratch);
    installed
}

/// [`install`] from a folder.
fn install_folder(
    project: &Path,
    from: &Path,
    (user, allow_older): (bool, bool),
) -> Result<Installed, Error> {
    let loopfile = crate::loopfile::Loopfile::load(project)?;
    let trusted = trusted(project, &loopfile)?;
    let v = if allow_older {
        verify(from, &trusted)?
    } else {
        verify_current(project, from, &trusted)?
    };
    let place = if user { Place::User } else { Place::Project };
    let (base, rel) = place.base(project);
    let dest = place.dir(project).join(&v.bundle.name);
    if place.holds(project, &v.bundle.name)? {
        return Err(Error::usage(format!(
            "{} is there already: `loop skills remove {}` first",
            dest.display(),
            v.bundle.name
        )));
    }
    if place == Place::User {
        make_state_dir(&base)?;
    }
    let copy = || -> Result<(), Error> {
        for f in v
            .bundle
            .files
            .iter()
            .map(|f| f.path.as_str())
            .chain([SIGNATURE_FILE])
        {
            let bytes = door::read(from, f, MAX_FILE_BYTES)
                .map_err(|e| bad(from, e))?
                .unwrap_or_default();
            let executable = v.bundle.files.iter().any(|b| b.path == f && b.executable);
            door::write_as(
                &base,
                Path::new(rel).join(&v.bundle.name).join(f),
                &bytes,
                executable,
            )
            .map_err(|e| bad(&dest, e))?;
        }
        verify(&dest, &trusted).map(|_| ())
    };
    if let Err(e) = copy() {
        let _ = loop_workspace::snapshot::remove_tree(&dest);
        return Err(e);
    }
    floor::took(project, &v.bundle.name, v.signed_at_ms, allow_older)?;
    Ok(Installed {
        name: v.bundle.name,
        path: dest,
        digest: v.bundle.digest,
        signer: v.signer,
    })
}

/// This user's own state directory, made if it is not there yet.
#[allow(clippy::disallowed_methods)] // the user's own state directory, not a project's
fn make_state_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::usage(format!("{}: {e}", dir.display())))
}

/// Remove the installed skill `name` (the project's, or with `user` this
/// user's); a project's own pattern is its files, left to its owner.
pub fn remove(project: &Path, name: &str, user: bool) -> Result<PathBuf, Error> {
    if let Some(why) = name_problem(name) {
        return Err(Error::usage(why));
    }
    let place = if user { Place::User } else { Place::Project };
    let dir = place.dir(project).join(name);
    if !place.holds(project, name)? {
        return Err(Error::usage(format!(
            "no skill `{name}` at {}",
            dir.display()
        )));
    }
    // A folder found through no link: removed whole (nothing followed).
    loop_workspace::snapshot::remove_tree(&dir)
        .map(|_| dir.clone())
        .map_err(|e| Error::usage(format!("{}: {e}", dir.display())))
}

/// What the project gives a task, beyond its contract: the hosts its
/// commands reach (the Loopfile's `network.allow`) and its MCP servers.
#[derive(Debug, Clone, Default)]
pub struct TaskGrants {
    /// The Loopfile's `network.allow`.
    pub command_hosts: Vec<String>,
    /// The names of the Loopfile's `mcp_servers`.
    pub mcp_servers: Vec<String>,
}

impl TaskGrants {
    /// The grants of `loopfile`.
    pub fn of(loopfile: &crate::loopfile::Loopfile) -> TaskGrants {
        TaskGrants {
            command_hosts: loopfile.network.allow.clone(),
            mcp_servers: loopfile
                .mcp_servers
                .iter()
                .map(|m| m.name.clone())
                .collect(),
        }
    }
}

/// Whether a task of `contract` with `grants` is offered tool `name`.
fn offered(name: &str, contract: &loop_protocol::Contract, grants: &TaskGrants) -> bool {
    match name {
        loop_tools::browser::NAME => contract.browser,
        crate::task::delegate::TOOL => {
            contract.limits.max_children > 0 && contract.limits.max_depth > 0
        }
        _ => match name.strip_prefix(loop_tools::mcp::PREFIX) {
            Some(rest) => rest
                .split_once("__")
                .is_some_and(|(server, _)| grants.mcp_servers.iter().any(|s| s == server)),
            None => true,
        },
    }
}

/// Refuse a skill's contract template that would give the task more than
/// a task of this project gets without it: a template from outside the
/// project only narrows (`unprotect`, `allow_check_changes`,
/// `judge_may_change`, `network_allow`, a browser the Loopfile does not
/// grant, and limits above the project's defaults are the Loopfile's or
/// the person's to give, never a skill's).
pub fn template_within(
    name: &str,
    template: &loop_protocol::Contract,
    loopfile: &crate::loopfile::Loopfile,
) -> Result<(), Error> {
    let mut over = Vec::new();
    // A check's word that it may prove nothing is a person's to give.
    for c in template.criteria.iter().flat_map(|c| &c.checks) {
        if let loop_protocol::Check::Run(r) = c {
            if r.allow_vacuous {
                over.push(format!("`allow_vacuous` on `{}`", r.command));
            }
            if r.nonempty_tests == Some(false) {
                over.push(format!("`nonempty_tests: false` on `{}`", r.command));
            }
        }
    }
    for (field, set) in [
        ("unprotect", !template.unprotect.is_empty()),
        (
            "allow_check_changes",
            !template.allow_check_changes.is_empty(),
        ),
        ("judge_may_change", !template.judge_may_change.is_empty()),
        ("network_allow", !template.network_allow.is_empty()),
        ("browser", template.browser && !loopfile.browser),
    ] {
        if set {
            over.push(format!("`{field}`"));
        }
    }
    // The Loopfile's default limits replace a template's; without them the
    // built-in ones are what the template may not exceed.
    if loopfile.defaults.limits.is_none() {
        let (t, d) = (&template.limits, loop_protocol::Limits::default());
        for (field, asked, base) in [
            ("max_steps", u64::from(t.max_steps), u64::from(d.max_steps)),
            ("max_tokens", t.max_tokens, d.max_tokens),
            ("timeout_secs", t.timeout_secs, d.timeout_secs),
            (
                "max_verifications",
                u64::from(t.max_verifications),
                u64::from(d.max_verifications),
            ),
            (
                "max_diff_lines",
                u64::from(t.max_diff_lines),
                u64::from(d.max_diff_lines),
            ),
            ("max_file_bytes", t.max_file_bytes, d.max_file_bytes),
            ("disk_mb", t.disk_mb, d.disk_mb),
            ("write_mb", t.write_mb, d.write_mb),
            (
                "max_children",
                u64::from(t.max_children),
                u64::from(d.max_children),
            ),
            ("max_depth", u64::from(t.max_depth), u64::from(d.max_depth)),
        ] {
            if asked > base {
                over.push(format!("`limits.{field}` {asked} (a task gets {base})"));
            }
        }
    }
    if over.is_empty() {
        return Ok(());
    }
    Err(Error::usage(format!(
        "skill {name}: its contract.yaml would give the task more than this project gives one: {} (a skill only narrows; such grants are the Loopfile's or your own contract's)",
        over.join(", ")
    )))
}

/// Intersect what `bundle` asks with the task's authority (`contract`
/// and the project's `grants`), narrowing the contract's hosts to the
/// skill's: the record of what is in force and what was dropped.
pub fn narrow(
    bundle: &Bundle,
    signer: Option<String>,
    contract: &mut loop_protocol::Contract,
    grants: &TaskGrants,
) -> SkillRecord {
    let asked = &bundle.capabilities;
    let command_hosts = &grants.command_hosts;
    let mut dropped = bundle.widening.clone();
    let mut caps = Capabilities {
        tools: None,
        exec: asked.exec.clone(),
        network: None,
        writable: None,
    };
    // What is in force is what the task has of what was asked: a tool it
    // is not offered, or a path it may not write at all, is listed as
    // dropped (the task was never going to have it).
    if let Some(tools) = &asked.tools {
        let (kept, over): (Vec<String>, Vec<String>) = tools
            .iter()
            .cloned()
            .partition(|t| offered(t, contract, grants));
        for t in over {
            dropped.push(format!("tool `{t}`: the task is not offered it"));
        }
        caps.tools = Some(kept);
    }
    if let Some(paths) = &asked.writable {
        // Protection that cannot be compiled lifts nothing: every path
        // asked for is dropped, naming why.
        let protected = loop_workspace::Protected::new(&contract.protected_globs());
        let writable = |p: &String| {
            protected.as_ref().is_ok_and(|pr| {
                pr.matching(p).is_none() && pr.matching(&format!("{p}/x")).is_none()
            })
        };
        let (kept, over): (Vec<String>, Vec<String>) = paths.iter().cloned().partition(writable);
        for p in over {
            match &protected {
                Ok(_) => dropped.push(format!("writable path `{p}`: protected in this task")),
                Err(e) => dropped.push(format!(
                    "writable path `{p}`: the task's protected paths could not be compiled ({e})"
                )),
            }
        }
        caps.writable = Some(kept);
    }
    if let Some(hosts) = &asked.network {
        let (kept, over): (Vec<String>, Vec<String>) = hosts
            .iter()
            .cloned()
            .partition(|h| contract.network_allow.contains(h) || command_hosts.contains(h));
        for h in over {
            dropped.push(format!(
                "network host `{h}`: not in the task's network allow-list"
            ));
        }
        // Checks and commands alike reach only the skill's hosts (the
        // commands' list is narrowed where the task's network is planned).
        contract.network_allow.retain(|h| kept.contains(h));
        caps.network = Some(kept);
    }
    SkillRecord {
        name: bundle.name.clone(),
        digest: bundle.digest.clone(),
        signer,
        capabilities: caps,
        dropped,
    }
}

mod floor;

#[cfg(test)]
mod tests;
