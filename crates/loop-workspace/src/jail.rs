//! The path jail: every path a tool touches resolves inside the workspace
//! root, symlinks included, and writes to protected paths are refused with
//! the rule that matched.

use globset::{Glob, GlobSet, GlobSetBuilder};
use loop_protocol::RelPath;
use loop_protocol::path::PathError;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// Lexically invalid (absolute, `..`, …).
    #[error(transparent)]
    Path(#[from] PathError),
    /// Resolves (through a symlink) outside the workspace.
    #[error("`{path}` resolves outside the workspace (to {resolved})")]
    Escapes {
        /// As requested.
        path: String,
        /// Where it led.
        resolved: String,
    },
    /// A protected path.
    #[error("`{path}` is protected by the rule `{rule}`")]
    Protected {
        /// As requested (or as resolved).
        path: String,
        /// The glob that matched.
        rule: String,
    },
    /// The filesystem failed while resolving.
    #[error("cannot resolve `{path}`: {source}")]
    Io {
        /// As requested.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

impl JailError {
    /// The rule name recorded with a refusal.
    pub fn rule(&self) -> String {
        match self {
            JailError::Path(PathError::Absolute(_)) => "jail: absolute path".into(),
            JailError::Path(PathError::ParentDir(_)) => "jail: `..` component".into(),
            JailError::Path(_) => "jail: invalid path".into(),
            JailError::Escapes { .. } => "jail: symlink escape".into(),
            JailError::Protected { rule, .. } => format!("protected: {rule}"),
            JailError::Io { .. } => "jail: unresolvable path".into(),
        }
    }
}

/// Protected-path globs, compiled when the rules are made (again, all of
/// them, as rules are added).
#[derive(Debug, Clone)]
pub struct Protected {
    rules: Vec<Rule>,
    sets: Sets,
}

/// How the rules' globs are matched.
#[derive(Debug, Clone)]
enum Sets {
    /// Every rule's globs in one set (a set per rule cost a build each,
    /// most of a one-command `loop exec`'s own work before its sandbox),
    /// with the index of the rule each glob comes from.
    One { any: GlobSet, owner: Vec<usize> },
    /// A set per rule, where one set of them all is more than the matcher
    /// builds (its size limit) though each rule's alone is not: as before
    /// there was one set.
    PerRule(Vec<GlobSet>),
}

#[derive(Debug, Clone)]
struct Rule {
    /// What [`Protected::matching`] names.
    name: String,
    /// The glob as given.
    glob: String,
    /// What it matches (see [`globs_of`]).
    globs: Vec<Glob>,
    /// Paths this rule does not protect after all.
    unless: Option<GlobSet>,
    /// Exact paths this rule does not protect (no glob, no depth).
    unless_exact: std::collections::BTreeSet<String>,
    /// The only directories this rule protects that [`Protected::existing`]
    /// looks into for paths its exceptions lift (`None`: every one).
    enter: Option<std::collections::BTreeSet<String>>,
}

fn globs_of(glob: &str) -> Result<Vec<Glob>, globset::Error> {
    let mut out = vec![Glob::new(glob)?];
    if !glob.contains('/') {
        out.push(Glob::new(&format!("**/{glob}"))?);
    }
    if let Some(dir) = glob.strip_suffix("/**") {
        out.push(Glob::new(dir)?);
    }
    Ok(out)
}

/// One set of `globs`.
fn set_of<'g>(globs: impl IntoIterator<Item = &'g Glob>) -> Result<GlobSet, globset::Error> {
    let mut b = GlobSetBuilder::new();
    for g in globs {
        b.add(g.clone());
    }
    b.build()
}

impl Protected {
    /// `rules`, with their globs built into one set (else a set each).
    fn of(rules: Vec<Rule>) -> Result<Self, globset::Error> {
        match Self::one_set(&rules) {
            Ok(sets) => Ok(Protected { rules, sets }),
            Err(_) => Self::set_each(rules),
        }
    }

    fn one_set(rules: &[Rule]) -> Result<Sets, globset::Error> {
        let owner = rules
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.globs.iter().map(move |_| i))
            .collect();
        Ok(Sets::One {
            any: set_of(rules.iter().flat_map(|r| &r.globs))?,
            owner,
        })
    }

    /// `rules`, a set each (a rule whose own set cannot be built is an
    /// error, as it always was).
    fn set_each(rules: Vec<Rule>) -> Result<Self, globset::Error> {
        let sets = rules
            .iter()
            .map(|r| set_of(&r.globs))
            .collect::<Result<_, _>>()?;
        Ok(Protected {
            rules,
            sets: Sets::PerRule(sets),
        })
    }

    /// Compile `rules`. A rule without `/` matches at any depth (`*.pem`),
    /// as in `.gitignore`; `dir/**` also protects `dir` itself, so it cannot
    /// be replaced by a symlink.
    pub fn new(rules: &[String]) -> Result<Self, globset::Error> {
        let mut compiled = Vec::with_capacity(rules.len());
        for r in rules {
            compiled.push(Rule {
                name: r.clone(),
                glob: r.clone(),
                globs: globs_of(r)?,
                unless: None,
                unless_exact: Default::default(),
                enter: None,
            });
        }
        Protected::of(compiled)
    }

    /// Add rules named for why they exist (`(glob, name)`), each lifted for
    /// paths that match one of `unless` (globs compiled as rules are).
    pub fn with_named(
        self,
        rules: &[(String, String)],
        unless: &[String],
    ) -> Result<Self, globset::Error> {
        self.with_named_except(rules, unless, &[])
    }

    /// [`Protected::with_named`], each rule also lifted for exactly the
    /// paths in `exact` (a bare name there means that path at the root,
    /// never the same name deeper).
    pub fn with_named_except(
        self,
        rules: &[(String, String)],
        unless: &[String],
        exact: &[String],
    ) -> Result<Self, globset::Error> {
        let unless = if unless.is_empty() {
            None
        } else {
            // Compiled as rules are (`globs_of`): lifting `dir/**` lifts
            // `dir` too, since a rule's `dir/**` protects the directory
            // itself, and a command that writes inside a lifted directory
            // touches it.
            let mut globs = Vec::new();
            for u in unless {
                globs.extend(globs_of(u)?);
            }
            Some(set_of(&globs)?)
        };
        let mut all = self.rules;
        for (glob, name) in rules {
            all.push(Rule {
                name: name.clone(),
                glob: glob.clone(),
                globs: globs_of(glob)?,
                unless: unless.clone(),
                unless_exact: exact.iter().cloned().collect(),
                enter: None,
            });
        }
        Protected::of(all)
    }

    /// Confine writes to `writable` (workspace-relative directories or
    /// files in normal form; `""` is the whole workspace, and adds no
    /// rule): one rule, `name`, protects every other path. Their
    /// ancestors are lifted exactly (a command making `pkg/a/x` makes
    /// `pkg`), so nothing the rule protects holds a path it lifts:
    /// [`Protected::existing`] lists each protected entry whole, once.
    pub fn confined_to(self, writable: &[String], name: &str) -> Result<Self, globset::Error> {
        if writable.is_empty() || writable.iter().any(|w| w.is_empty()) {
            return Ok(self);
        }
        let unless: Vec<String> = writable
            .iter()
            .map(|w| format!("{}/**", globset::escape(w)))
            .collect();
        let mut ancestors = std::collections::BTreeSet::new();
        for w in writable {
            let mut at = w.as_str();
            while let Some((up, _)) = at.rsplit_once('/') {
                ancestors.insert(up.to_string());
                at = up;
            }
        }
        let exact: Vec<String> = ancestors.into_iter().collect();
        let mut out = self.with_named_except(&[("**".into(), name.into())], &unless, &exact)?;
        if let Some(rule) = out.rules.last_mut() {
            rule.enter = Some(Default::default());
        }
        Ok(out)
    }

    /// The first rule that protects `rel`, if any.
    pub fn matching(&self, rel: &str) -> Option<&str> {
        self.rule_for(rel).map(|r| r.name.as_str())
    }

    /// The first rule that protects `rel`, its exceptions considered.
    fn rule_for(&self, rel: &str) -> Option<&Rule> {
        let holds = |r: &&Rule| {
            !r.unless.as_ref().is_some_and(|u| u.is_match(rel)) && !r.unless_exact.contains(rel)
        };
        match &self.sets {
            Sets::One { any, owner } => {
                let mut hits: Vec<usize> = any.matches(rel).into_iter().map(|g| owner[g]).collect();
                hits.sort_unstable();
                hits.dedup();
                hits.into_iter().map(|i| &self.rules[i]).find(holds)
            }
            Sets::PerRule(sets) => self
                .rules
                .iter()
                .zip(sets)
                .filter(|(_, s)| s.is_match(rel))
                .map(|(r, _)| r)
                .find(holds),
        }
    }

    /// Existing paths under `root` that a rule protects, for the sandbox to
    /// bind read-only. A protected directory is listed once, not entered,
    /// unless a rule's exceptions may lift paths inside it.
    pub fn existing(&self, root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        self.collect(root, root, &mut out);
        out
    }

    #[allow(clippy::disallowed_methods)] // the jail resolves every path beneath its root before these calls
    fn collect(&self, root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(items) = std::fs::read_dir(dir) else {
            return;
        };
        for item in items.flatten() {
            let path = item.path();
            let rel = to_slash(path.strip_prefix(root).unwrap_or(&path));
            let Ok(ft) = item.file_type() else { continue };
            if ft.is_symlink() {
                continue;
            }
            match self.rule_for(&rel) {
                Some(r)
                    if !(ft.is_dir()
                        && (r.unless.is_some() || !r.unless_exact.is_empty())
                        && r.enter.as_ref().is_none_or(|e| e.contains(&rel))) =>
                {
                    out.push(path)
                }
                _ if ft.is_dir() => self.collect(root, &path, out),
                _ => {}
            }
        }
    }

    /// The rules' globs, as given.
    pub fn rules(&self) -> Vec<&str> {
        self.rules.iter().map(|r| r.glob.as_str()).collect()
    }
}

/// The workspace root and its protection rules.
#[derive(Debug, Clone)]
pub struct Jail {
    root: PathBuf,
    protected: Protected,
}

/// What the path will be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Reading or listing.
    Read,
    /// Creating, writing or deleting.
    Write,
}

impl Jail {
    /// A jail at `root` (canonicalised) with `protected` rules.
    pub fn new(root: &Path, protected: Protected) -> std::io::Result<Self> {
        Ok(Jail {
            root: root.canonicalize()?,
            protected,
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The protection rules.
    pub fn protected(&self) -> &Protected {
        &self.protected
    }

    /// Resolve `requested` for `intent`: lexically valid, inside the root
    /// after following every existing symlink, and (for writes) not
    /// protected either as requested or as resolved.
    #[allow(clippy::disallowed_methods)] // the jail resolves every path beneath its root before these calls
    pub fn resolve(
        &self,
        requested: &str,
        intent: Intent,
    ) -> Result<(RelPath, PathBuf), JailError> {
        let rel = RelPath::parse(requested)?;
        if intent == Intent::Write {
            if rel.is_root() {
                return Err(JailError::Protected {
                    path: ".".into(),
                    rule: "the workspace root".into(),
                });
            }
            self.check_protected(rel.as_str())?;
        }
        let joined = self.root.join(rel.as_str());
        // The deepest existing ancestor (or the path itself) decides where
        // the path really is; components below it do not exist yet and so
        // cannot be symlinks.
        let mut existing = joined.as_path();
        let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
        loop {
            match existing.symlink_metadata() {
                Ok(_) => break,
                Err(_) => {
                    let Some(name) = existing.file_name() else {
                        break;
                    };
                    rest.push(name);
                    match existing.parent() {
                        Some(p) => existing = p,
                        None => break,
                    }
                }
            }
        }
        let canon = existing.canonicalize().map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                // A dangling symlink: writing through it could create a file anywhere.
                let target = std::fs::read_link(existing)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                return JailError::Escapes {
                    path: requested.to_string(),
                    resolved: format!("dangling link to {target}"),
                };
            }
            JailError::Io {
                path: requested.to_string(),
                source,
            }
        })?;
        if !canon.starts_with(&self.root) {
            return Err(JailError::Escapes {
                path: requested.to_string(),
                resolved: canon.display().to_string(),
            });
        }
        let mut full = canon;
        for name in rest.iter().rev() {
            full.push(name);
        }
        let resolved_rel = full
            .strip_prefix(&self.root)
            .map(to_slash)
            .unwrap_or_default();
        if intent == Intent::Write && resolved_rel != rel.as_str() {
            self.check_protected(&resolved_rel)?;
        }
        Ok((rel, full))
    }

    fn check_protected(&self, rel: &str) -> Result<(), JailError> {
        match self.protected.matching(rel) {
            Some(rule) => Err(JailError::Protected {
                path: rel.to_string(),
                rule: rule.to_string(),
            }),
            None => Ok(()),
        }
    }
}

/// A relative path as a `/`-separated string.
pub fn to_slash(p: &Path) -> String {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod exact_exceptions {
    use super::Protected;

    #[test]
    fn one_set_and_a_set_each_name_the_same_first_rule() {
        let mut defaults: Vec<String> = loop_protocol::contract::DEFAULT_PROTECTED
            .iter()
            .map(|s| s.to_string())
            .collect();
        defaults.push("*.pem".into());
        defaults.push("docs/**".into());
        let named = [
            ("**/*.lock".to_string(), "lockfiles".to_string()),
            ("docs/**".to_string(), "documents".to_string()),
        ];
        let one = Protected::new(&defaults)
            .unwrap()
            .with_named_except(&named, &["docs/ok/**".into()], &["Cargo.lock".into()])
            .unwrap()
            .confined_to(&["src".into(), "pkg/a".into()], "outside")
            .unwrap();
        assert!(matches!(one.sets, super::Sets::One { .. }));
        let each = Protected::set_each(one.rules.clone()).unwrap();
        let paths = [
            ".git",
            ".git/config",
            "a/.git/HEAD",
            ".gitmodules",
            "x/.gitmodules",
            ".loop/state",
            "Loopfile.yaml",
            "sub/Loopfile.yaml",
            ".env",
            ".env.local",
            "secrets",
            "secrets/k",
            "cert.pem",
            "a/b/c.key",
            "Cargo.lock",
            "sub/Cargo.lock",
            "docs",
            "docs/a.md",
            "docs/ok/a.md",
            "src/main.rs",
            "pkg",
            "pkg/a/x",
            "pkg/b/x",
            "README.md",
        ];
        for p in paths {
            assert_eq!(one.matching(p), each.matching(p), "{p}");
        }
        assert_eq!(one.matching(".git/config"), Some("**/.git/**"));
        assert_eq!(one.matching("docs/a.md"), Some("docs/**"));
        assert_eq!(one.matching("src/main.rs"), None);
        assert_eq!(one.matching("README.md"), Some("outside"));
    }

    #[test]
    fn lifting_a_directorys_contents_lifts_the_directory() {
        let rules = [("node_modules/**".to_string(), "packages".to_string())];
        let kept = Protected::new(&[])
            .unwrap()
            .with_named(&rules, &[])
            .unwrap();
        assert_eq!(kept.matching("node_modules"), Some("packages"));
        assert_eq!(kept.matching("node_modules/.bin/x"), Some("packages"));
        let lifted = Protected::new(&[])
            .unwrap()
            .with_named(&rules, &["node_modules/**".into()])
            .unwrap();
        assert_eq!(lifted.matching("node_modules"), None);
        assert_eq!(lifted.matching("node_modules/.bin/x"), None);
        // A sibling of the same prefix stays protected by its own rule.
        let other = Protected::new(&["node_modules_old/**".into()])
            .unwrap()
            .with_named(&rules, &["node_modules/**".into()])
            .unwrap();
        assert_eq!(
            other.matching("node_modules_old"),
            Some("node_modules_old/**")
        );
    }

    #[test]
    fn an_exact_exception_lifts_that_path_and_no_other_of_its_name() {
        let p = Protected::new(&[])
            .unwrap()
            .with_named_except(
                &[("**/conftest.py".into(), "pytest hooks".into())],
                &[],
                &["conftest.py".into(), "tests/test_new.py".into()],
            )
            .unwrap();
        assert_eq!(p.matching("conftest.py"), None);
        assert_eq!(p.matching("tests/conftest.py"), Some("pytest hooks"));
        assert_eq!(p.matching("a/b/conftest.py"), Some("pytest hooks"));
        // A glob-shaped name is only itself.
        let q = Protected::new(&[])
            .unwrap()
            .with_named_except(
                &[("**/test*.py".into(), "t".into())],
                &[],
                &["test_*.py".into()],
            )
            .unwrap();
        assert_eq!(q.matching("test_a.py"), Some("t"));
        assert_eq!(q.matching("test_*.py"), None);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod confinement {
    use super::{Intent, Jail, JailError, Protected};
    use std::fs;

    const NAME: &str = "delegation: outside the child's paths";

    fn confined() -> Protected {
        Protected::new(&["**/.git/**".into()])
            .unwrap()
            .confined_to(&["docs/a.md".into(), "pkg/a".into()], NAME)
            .unwrap()
    }

    #[test]
    fn writes_land_only_beneath_the_paths_given_and_other_rules_still_hold() {
        let p = confined();
        for inside in ["pkg/a", "pkg/a/src/lib.rs", "pkg/a/new/dir/f", "docs/a.md"] {
            assert_eq!(p.matching(inside), None, "{inside}");
        }
        // Ancestors are made by a command writing inside; nothing else is lifted.
        assert_eq!(p.matching("pkg"), None);
        assert_eq!(p.matching("docs"), None);
        for outside in [
            "pkg/b/x",
            "pkg/ab",
            "pkg/a.txt",
            "docs/b.md",
            "docs/a.md.bak",
            "README.md",
            "a/pkg/a/x",
        ] {
            assert_eq!(p.matching(outside), Some(NAME), "{outside}");
        }
        assert_eq!(p.matching("pkg/a/.git/config"), Some("**/.git/**"));
        // The whole workspace: no rule at all.
        let all = Protected::new(&[])
            .unwrap()
            .confined_to(&[String::new()], NAME)
            .unwrap();
        assert!(all.rules().is_empty());
        assert_eq!(all.matching("anything/at/all"), None);
    }

    #[test]
    fn the_jail_refuses_a_write_outside_even_through_a_link_inside() {
        let dir = crate::testdir::TestDir::new("confined");
        let root = dir.path();
        fs::create_dir_all(root.join("pkg/a")).unwrap();
        fs::create_dir_all(root.join("pkg/b")).unwrap();
        std::os::unix::fs::symlink("../b", root.join("pkg/a/link")).unwrap();
        let jail = Jail::new(root, confined()).unwrap();
        assert!(jail.resolve("pkg/a/new/f.txt", Intent::Write).is_ok());
        assert!(jail.resolve("docs/a.md", Intent::Write).is_ok());
        for (path, at) in [
            ("pkg/b/f.txt", "pkg/b/f.txt"),
            ("pkg/a/link/f.txt", "pkg/b/f.txt"),
        ] {
            match jail.resolve(path, Intent::Write) {
                Err(JailError::Protected { path, rule }) => {
                    assert_eq!((path.as_str(), rule.as_str()), (at, NAME))
                }
                other => panic!("{path}: {other:?}"),
            }
        }
        // Reading outside stays allowed.
        assert!(jail.resolve("pkg/b", Intent::Read).is_ok());
    }

    #[test]
    fn the_sandbox_binds_each_entry_outside_once_not_file_by_file() {
        let dir = crate::testdir::TestDir::new("confined");
        let root = dir.path();
        for f in [
            "pkg/a/src/lib.rs",
            "pkg/b/y",
            "pkg/b/z/w",
            "docs/a.md",
            "docs/b.md",
            "README.md",
        ] {
            fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
            fs::write(root.join(f), "x").unwrap();
        }
        fs::create_dir_all(root.join("big")).unwrap();
        for i in 0..200 {
            fs::write(root.join(format!("big/{i}")), "x").unwrap();
        }
        let mut got: Vec<String> = confined()
            .existing(root)
            .iter()
            .map(|p| super::to_slash(p.strip_prefix(root).unwrap()))
            .collect();
        got.sort();
        assert_eq!(got, vec!["README.md", "big", "docs/b.md", "pkg/b"]);
    }
}
