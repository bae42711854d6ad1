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
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How often a watched task's record is read when nothing wakes it sooner.
pub(crate) const POLL: Duration = Duration::from_millis(100);

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
    /// Up to `max` events from position `from` on, and whether the task is
    /// over with nothing left after them.
    pub(crate) fn read(&self, from: u64, max: usize) -> (Vec<Arc<Frame>>, bool) {
        let f = self.frames.read().unwrap_or_else(PoisonError::into_inner);
        let start = f.list.partition_point(|x| x.seq < from);
        let end = f.list.len().min(start.saturating_add(max));
        let batch = f.list[start..end].to_vec();
        let over = f.over && end == f.list.len();
        (batch, over)
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
}

impl Hub {
    /// Task `id`'s feed, started if nobody watches it yet.
    pub(crate) fn feed(&self, runtime: &Runtime, id: &str) -> Arc<Feed> {
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = feeds.get(id).and_then(Weak::upgrade) {
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
        tokio::spawn(poll(
            self.clone(),
            runtime.clone(),
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

    /// Feeds being polled now (for `/metrics`).
    pub(crate) fn watched(&self) -> usize {
        let feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        feeds.values().filter(|f| f.strong_count() > 0).count()
    }

    /// Forget `id`'s feed if nobody holds it any more.
    fn forget(&self, id: &str) {
        let mut feeds = self.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        if feeds.get(id).is_some_and(|f| f.strong_count() == 0) {
            feeds.remove(id);
        }
    }
}

/// Read task `id`'s new events into its feed until the task is over and
/// all are read, or nobody watches any more.
async fn poll(hub: Hub, runtime: Runtime, id: String, feed: Weak<Feed>) {
    let mut next = 0u64;
    loop {
        let Some(wake) = feed.upgrade().map(|f| f.wake.clone()) else {
            hub.forget(&id);
            return;
        };
        let (rt, task) = (runtime.clone(), id.clone());
        let read = tokio::task::spawn_blocking(move || {
            // The state first: events read after it include every event
            // of a task it says is over.
            let over = rt
                .task(&task)
                .map(|t| t.liveness() == loop_runtime::layout::Liveness::Over)
                .unwrap_or(true);
            (rt.events(&task, next), over)
        })
        .await;
        let Some(f) = feed.upgrade() else {
            hub.forget(&id);
            return;
        };
        let (events, over) = match read {
            Ok((Ok(events), over)) => (events, over),
            // The record cannot be read: the stream ends rather than
            // waits for what will not come.
            Ok((Err(e), _)) => {
                tracing::warn!("task {id}: reading its events: {}", e.message);
                (Vec::new(), true)
            }
            Err(e) => {
                tracing::warn!("task {id}: reading its events: {e}");
                (Vec::new(), true)
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
            hub.forget(&id);
            return;
        }
        drop(f);
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = wake.notified() => {}
        }
    }
}
