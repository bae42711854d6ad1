//! One reader of the store per watched task, however many people watch it.
//!
//! Each event stream subscribes to its task's [`Feed`]: the first
//! subscriber starts a poller that reads the task's new events from the
//! store (every [`POLL`], and at once when a task this server runs records
//! one) into a list every subscriber reads from at its own pace. A slow
//! client lags only in its own position; the poller and the task never
//! wait for it. When the last subscriber leaves, the poller stops and the
//! list is dropped. Tasks run by another process (the CLI) are seen by the
//! polling alone.

use loop_runtime::Runtime;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How often a watched task's record is read when nothing wakes it sooner.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// Reads of a record that fail one after another before its streams are
/// closed (about 30 s): a passing failure (a busy store) is retried.
const FAILURES: u32 = 300;

/// One recorded event, ready to send.
#[derive(Debug)]
pub(crate) struct Frame {
    /// Its position in the ledger.
    pub seq: u64,
    /// Its kind (the SSE event name).
    pub kind: String,
    /// The event as JSON.
    pub data: String,
}

#[derive(Debug, Default)]
struct Frames {
    /// Every event from seq 0 on, in order.
    list: Vec<Arc<Frame>>,
    /// The task is over and every event it recorded is in `list`.
    over: bool,
    /// The record could not be read: streams close without `end`.
    failed: bool,
}

/// Where a stream stands after a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// More may come.
    Open,
    /// The task is over and nothing is left after the batch.
    Over,
    /// The record cannot be read.
    Failed,
}

/// A watched task's events, shared by its subscribers.
#[derive(Debug)]
pub(crate) struct Feed {
    frames: RwLock<Frames>,
    /// Bumped whenever `frames` changes.
    changed: watch::Sender<u64>,
    /// Read the store now.
    wake: Arc<Notify>,
}

impl Feed {
    /// Up to `max` events from position `from` on, and where the stream
    /// stands after them.
    pub(crate) fn read(&self, from: u64, max: usize) -> (Vec<Arc<Frame>>, Standing) {
        let f = self.frames.read().unwrap_or_else(PoisonError::into_inner);
        let start = f.list.partition_point(|x| x.seq < from);
        let end = f.list.len().min(start.saturating_add(max));
        let batch = f.list[start..end].to_vec();
        let standing = match (f.over, f.failed) {
            (_, true) => Standing::Failed,
            (true, _) if end == f.list.len() => Standing::Over,
            _ => Standing::Open,
        };
        (batch, standing)
    }

    /// Whether its reader has stopped (the task is over, or its record
    /// could not be read): a new watcher needs a new feed.
    fn finished(&self) -> bool {
        let f = self.frames.read().unwrap_or_else(PoisonError::into_inner);
        f.over || f.failed
    }

    /// A receiver told of every change from now on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// Every watched task's feed.
#[derive(Clone, Default)]
pub(crate) struct Hub {
    feeds: Arc<Mutex<HashMap<String, Weak<Feed>>>>,
    /// Readers of the store running now.
    readers: Arc<AtomicUsize>,
}

/// Whether a task is held here (queued or running in this server's pool).
pub(crate) type Held = Arc<dyn Fn(&str) -> bool + Send + Sync>;

impl Hub {
    /// Task `id`'s feed, started if nobody watches it yet (or its reader
    /// has stopped: a task given more budget goes on). A task `held` says
    /// is held (queued or running here) is not over, whatever its record
    /// says yet.
    pub(crate) fn feed(&self, runtime: &Runtime, held: Held, id: &str) -> Arc<Feed> {
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = feeds
            .get(id)
            .and_then(Weak::upgrade)
            .filter(|f| !f.finished())
        {
            return f;
        }
        let feed = Arc::new(Feed {
            frames: RwLock::default(),
            changed: watch::Sender::new(0),
            wake: Arc::new(Notify::new()),
        });
        // Feeds nobody holds any more leave the table as new ones come.
        feeds.retain(|_, f| f.strong_count() > 0);
        feeds.insert(id.to_string(), Arc::downgrade(&feed));
        self.readers.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(poll(
            self.clone(),
            runtime.clone(),
            held,
            id.to_string(),
            Arc::downgrade(&feed),
        ));
        feed
    }

    /// Task `id` recorded an event: its feed, if anyone watches, reads it
    /// now rather than at its next poll.
    pub(crate) fn poke(&self, id: &str) {
        let feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = feeds.get(id).and_then(Weak::upgrade) {
            f.wake.notify_one();
        }
    }

    /// Readers of the store running now (for `/metrics`).
    pub(crate) fn readers(&self) -> usize {
        self.readers.load(Ordering::Relaxed)
    }

    /// A reader has stopped: forget `id`'s feed if nobody holds it any
    /// more.
    fn stopped(&self, id: &str) {
        self.readers.fetch_sub(1, Ordering::Relaxed);
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if feeds.get(id).is_some_and(|f| f.strong_count() == 0) {
            feeds.remove(id);
        }
    }
}

/// Read task `id`'s new events into its feed until the task is over and
/// all are read, or nobody watches any more.
async fn poll(hub: Hub, runtime: Runtime, held: Held, id: String, feed: Weak<Feed>) {
    let mut next = 0u64;
    let mut failures = 0u32;
    loop {
        let Some(wake) = feed.upgrade().map(|f| f.wake.clone()) else {
            hub.stopped(&id);
            return;
        };
        let (rt, task) = (runtime.clone(), id.clone());
        let read = tokio::task::spawn_blocking(move || {
            // The state first: events read after it include every event
            // of a task it says is over.
            let over = rt
                .task(&task)
                .map(|t| t.liveness() == loop_runtime::Liveness::Over);
            let events = rt.events(&task, next);
            match (over, events) {
                (Ok(over), Ok(events)) => Ok((events, over)),
                (Err(e), _) | (_, Err(e)) => Err(e.message),
            }
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        let Some(f) = feed.upgrade() else {
            hub.stopped(&id);
            return;
        };
        let (events, over) = match read {
            Ok((events, over)) => {
                failures = 0;
                // A task waiting here for a place (given more budget, say)
                // goes on, whatever its record says yet.
                (events, over && !held(&id))
            }
            Err(e) => {
                failures += 1;
                if failures == 1 || failures == FAILURES {
                    tracing::warn!("task {id}: reading its events ({failures} time(s)): {e}");
                }
                if failures >= FAILURES {
                    f.frames
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .failed = true;
                    f.changed.send_modify(|v| *v += 1);
                    drop(f);
                    hub.stopped(&id);
                    return;
                }
                (Vec::new(), false)
            }
        };
        let done = events.is_empty() && over;
        if !events.is_empty() || done {
            let mut frames = f.frames.write().unwrap_or_else(PoisonError::into_inner);
            for r in events {
                next = r.seq + 1;
                frames.list.push(Arc::new(Frame {
                    seq: r.seq,
                    kind: r.event.kind().to_string(),
                    data: serde_json::to_string(&r.event).unwrap_or_default(),
                }));
            }
            frames.over = done;
            drop(frames);
            f.changed.send_modify(|v| *v += 1);
        }
        if done {
            // Kept until its last subscriber has read it.
            drop(f);
            hub.stopped(&id);
            return;
        }
        drop(f);
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = wake.notified() => {}
        }
    }
}
