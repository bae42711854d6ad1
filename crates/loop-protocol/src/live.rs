//! What is happening now, for a person watching a run: a model being asked,
//! the text it streams, a verification's checks starting and landing.
//! Never recorded: the ledger's [`Event`](crate::Event)s are the record;
//! these only say what a recorded event will later settle.

use std::sync::Arc;

/// One moment of a run that no event records yet.
#[derive(Debug, Clone, PartialEq)]
pub enum Live {
    /// The model is being asked for turn `step`.
    Thinking {
        /// The turn being asked for.
        step: u32,
    },
    /// A fragment of the text the model streams while it answers.
    Text {
        /// The fragment, as it arrived.
        fragment: String,
    },
    /// A verification pass begins, with `total` checks to run.
    Verifying {
        /// Which verification of the task.
        attempt: u32,
        /// How many checks it will run.
        total: usize,
    },
    /// Check `index` (counted from 1) of `total` starts.
    CheckStarted {
        /// Its position, from 1.
        index: usize,
        /// How many checks the pass runs.
        total: usize,
        /// The criterion it belongs to.
        criterion: String,
        /// What it checks, in one line.
        check: String,
    },
    /// Check `index` of `total` has its result.
    CheckDone {
        /// Its position, from 1.
        index: usize,
        /// How many checks the pass runs.
        total: usize,
        /// The criterion it belongs to.
        criterion: String,
        /// Whether it passed.
        passed: bool,
        /// `exit 0`, or why it failed.
        status: String,
        /// How long it took.
        duration_ms: u64,
    },
}

/// Where [`Live`] moments go: a front end's renderer. Cheap to clone and
/// safe to call from any thread; a feed that nobody set drops everything.
#[derive(Clone)]
pub struct LiveFeed(Arc<dyn Fn(&Live) + Send + Sync>);

impl LiveFeed {
    /// A feed that hands every moment to `sink`.
    pub fn new(sink: impl Fn(&Live) + Send + Sync + 'static) -> Self {
        LiveFeed(Arc::new(sink))
    }

    /// Hand `moment` on.
    pub fn emit(&self, moment: Live) {
        (self.0)(&moment);
    }
}

impl std::fmt::Debug for LiveFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveFeed")
    }
}

/// Emit `moment` to `feed` if there is one.
pub fn emit(feed: Option<&LiveFeed>, moment: Live) {
    if let Some(f) = feed {
        f.emit(moment);
    }
}
