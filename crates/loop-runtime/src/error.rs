//! The runtime's error: what went wrong, and whose doing it was.

/// Whose doing a failure was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad usage, configuration or input (the caller can fix it).
    Usage,
    /// What was asked for is not there (no such task): the caller's
    /// doing too, told apart so a front end need not read the message.
    NotFound,
    /// What was asked for no longer fits the task's state (a question
    /// answered meanwhile, a claim another runtime took over).
    Conflict,
    /// A service the runtime needs (the store, the queue) cannot be
    /// reached now: trying again later may work.
    Unavailable,
    /// The runtime could not do its work.
    Internal,
}

/// A failure of a runtime operation, with a message that says what to do,
/// and the failure that caused it when there was one (kept, for
/// `Error::source` and for a front end that wants more than the message).
#[derive(Debug, Clone)]
pub struct Error {
    /// Whose doing it was.
    pub kind: ErrorKind,
    /// What went wrong.
    pub message: String,
    /// What caused it.
    pub cause: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Error {
    /// Bad usage, configuration or input.
    pub fn usage(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Usage,
            message: message.into(),
            cause: None,
        }
    }

    /// What was asked for is not there.
    pub fn not_found(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::NotFound,
            message: message.into(),
            cause: None,
        }
    }

    /// The task's state no longer allows it.
    pub fn conflict(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Conflict,
            message: message.into(),
            cause: None,
        }
    }

    /// A service the runtime needs cannot be reached now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Unavailable,
            message: message.into(),
            cause: None,
        }
    }

    /// An internal failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Internal,
            message: message.into(),
            cause: None,
        }
    }

    /// This error, caused by `cause`.
    pub fn because(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(std::sync::Arc::new(cause));
        self
    }

    /// A fault stopped the run (its claim could not be renewed): the task
    /// was left interrupted, nothing decided, and may be run again.
    pub fn is_interruption(&self) -> bool {
        self.cause.as_ref().is_some_and(|c| {
            matches!(
                c.downcast_ref::<loop_core::DirectorError>(),
                Some(loop_core::DirectorError::Interrupted(_))
            )
        })
    }

    /// An internal failure whose message is its cause's.
    pub fn from_cause(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::internal(cause.to_string()).because(cause)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}
