//! The runtime's error: what went wrong, and whose doing it was.

/// Whose doing a failure was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad usage, configuration or input (the caller can fix it).
    Usage,
    /// The runtime could not do its work.
    Internal,
}

/// A failure of a runtime operation, with a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Whose doing it was.
    pub kind: ErrorKind,
    /// What went wrong.
    pub message: String,
}

impl Error {
    /// Bad usage, configuration or input.
    pub fn usage(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Usage,
            message: message.into(),
        }
    }

    /// An internal failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Internal,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
