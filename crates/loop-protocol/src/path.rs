//! Workspace-relative paths, validated lexically.
//!
//! Every path that crosses a boundary (a contract's artifact, a tool's
//! argument) is relative to the task workspace. This is the lexical half of
//! the jail; `loop-workspace` adds the filesystem half (symlinks).

use std::fmt;

/// Why a path string is not an acceptable workspace-relative path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The empty string.
    #[error("the path is empty")]
    Empty,
    /// Starts at the filesystem root.
    #[error("`{0}` is absolute; paths are relative to the workspace root")]
    Absolute(String),
    /// Contains a `..` component.
    #[error("`{0}` contains `..`; paths may not leave the workspace")]
    ParentDir(String),
    /// Contains a NUL byte or a backslash.
    #[error("`{0}` contains a NUL byte or a backslash")]
    BadChar(String),
    /// Contains a control character (a newline could forge a line of a
    /// patch a person reviews).
    #[error("{0:?} contains a control character; file names may not")]
    Control(String),
}

/// A normalised, relative path inside a workspace: no leading `/`, no `..`,
/// no `.` components, `/`-separated.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct RelPath(String);

impl RelPath {
    /// Validate and normalise `s`. `"."` and `"./"` name the root (empty path).
    pub fn parse(s: &str) -> Result<RelPath, PathError> {
        if s.is_empty() {
            return Err(PathError::Empty);
        }
        if s.contains('\0') || s.contains('\\') {
            return Err(PathError::BadChar(s.to_string()));
        }
        if s.chars().any(char::is_control) {
            return Err(PathError::Control(s.to_string()));
        }
        if s.starts_with('/') || s.starts_with('~') {
            return Err(PathError::Absolute(s.to_string()));
        }
        let mut parts = Vec::new();
        for part in s.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err(PathError::ParentDir(s.to_string())),
                p => parts.push(p),
            }
        }
        Ok(RelPath(parts.join("/")))
    }

    /// The root of the workspace.
    pub fn root() -> RelPath {
        RelPath(String::new())
    }

    /// The path as a `/`-separated string ("" for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the workspace root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str(".")
        } else {
            f.write_str(&self.0)
        }
    }
}

impl<'de> serde::Deserialize<'de> for RelPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        RelPath::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn normalises_and_refuses_escapes() {
        assert_eq!(RelPath::parse("./a//b/").unwrap().as_str(), "a/b");
        assert_eq!(RelPath::parse(".").unwrap(), RelPath::root());
        assert!(matches!(
            RelPath::parse("/etc/passwd"),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(RelPath::parse("~/x"), Err(PathError::Absolute(_))));
        assert!(matches!(
            RelPath::parse("a/../../b"),
            Err(PathError::ParentDir(_))
        ));
        assert!(matches!(RelPath::parse(".."), Err(PathError::ParentDir(_))));
        assert!(matches!(RelPath::parse(""), Err(PathError::Empty)));
        assert!(matches!(
            RelPath::parse("a\\..\\b"),
            Err(PathError::BadChar(_))
        ));
    }
}
