//! The tasks this server runs: at most `jobs` at once, each on a thread of
//! its own (the Director blocks), the rest waiting their turn in order.
//!
//! A task waiting here is stored and prepared, and nobody has claimed it:
//! if the server stops, the next one (or `loop resume`) takes it up like
//! any interrupted task. A task waiting for a person's answer keeps its
//! place, as it would in a terminal.

use crate::feed::Hub;
use loop_runtime::{OnPrompt, Runtime};
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How long an idle worker thread waits for work before it ends.
const IDLE: Duration = Duration::from_secs(30);

struct Job {
    id: String,
    extension: Option<loop_core::Extension>,
    /// Runs a fault interrupted so far (see [`RETRIES`]).
    retries: u32,
}

/// How often a task a fault interrupted (its store unreachable, its claim
/// not renewable) is run again here, 5 s after the first time and twice as
/// long each time after; past that it waits, interrupted, for a person or
/// the next server.
const RETRIES: u32 = 6;

/// How often a task whose run failed with an error (not a fault, not a
/// decision: the task did not end) is run again here, on the same
/// schedule; past that it waits, interrupted, for `loop resume` or the
/// next server.
const ERROR_RETRIES: u32 = 3;

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Job>,
    /// Tasks running here now (a task never runs twice at once).
    running: HashSet<String>,
    /// Of those, the ones whose worker still waits for a place (the
    /// children of other tasks hold them all): not running yet.
    placing: HashSet<String>,
    workers: usize,
}

impl Queue {
    /// The first waiting job whose task is not running now.
    fn take(&mut self) -> Option<Job> {
        let at = self
            .waiting
            .iter()
            .position(|j| !self.running.contains(&j.id))?;
        let job = self.waiting.remove(at)?;
        self.running.insert(job.id.clone());
        // It waits for its place until its worker has one.
        self.placing.insert(job.id.clone());
        Some(job)
    }
}

struct Inner {
    jobs: usize,
    /// The `jobs` places this server's tasks and their children run in
    /// (a child beyond the place its parent lends it takes one of these).
    places: Arc<loop_runtime::Places>,
    runtime: Runtime,
    hub: Hub,
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Workers' queue (`loop serve --queue`): tasks go there to be run by
    /// `loop worker` processes, not here.
    shared: Option<Arc<loop_store::RedisQueue>>,
}

/// The server's runner of tasks.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// A pool running at most `jobs` (at least 1) of `runtime`'s tasks at
    /// once, telling `hub` of every event they record.
    pub(crate) fn new(runtime: Runtime, hub: Hub, jobs: usize) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                jobs: jobs.max(1),
                places: loop_runtime::Places::new(jobs),
                runtime,
                hub,
                queue: Mutex::default(),
                ready: Condvar::new(),
                shared: None,
            }),
        }
    }

    /// Hand tasks to the workers of `queue` instead of running them here
    /// (but for budget extensions, which carry their budget with them and
    /// run here).
    pub(crate) fn with_queue(
        runtime: Runtime,
        hub: Hub,
        jobs: usize,
        queue: loop_store::RedisQueue,
    ) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                jobs: jobs.max(1),
                places: loop_runtime::Places::new(jobs),
                runtime,
                hub,
                queue: Mutex::default(),
                ready: Condvar::new(),
                shared: Some(Arc::new(queue)),
            }),
        }
    }

    /// The workers' queue, when tasks go to one.
    pub(crate) fn shared(&self) -> Option<&loop_store::RedisQueue> {
        self.inner.shared.as_deref()
    }

    /// Resume task `id` (a person asked): to the workers' queue under a
    /// key of its own (so a task given up on before can be queued again),
    /// or here.
    pub(crate) fn resume(&self, id: String, extension: Option<loop_core::Extension>) {
        if extension.is_none() && self.shared().is_some() {
            let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
            let key = format!("{id}:resume:{now}");
            self.enqueue_or_run(id, &key);
            return;
        }
        self.start(id, extension);
    }

    /// To the workers' queue; if it cannot be reached, run here (the task
    /// is not left waiting for a queue that may not come back).
    /// (Off the caller's thread: the queue's client blocks, and the
    /// caller may be the async executor.)
    fn enqueue_or_run(&self, id: String, key: &str) {
        let pool = self.clone();
        let key = key.to_string();
        let spawned = std::thread::Builder::new()
            .name("loop enqueue".into())
            .spawn(move || {
                let Some(q) = pool.shared() else {
                    return pool.run_here(id, None);
                };
                if let Err(e) = q.enqueue(&id, &key) {
                    tracing::warn!("task {id}: {e}; running it here instead");
                    pool.run_here(id, None);
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a thread to queue a task: {e}");
        }
    }

    /// Run task `id` (given `extension` more budget, if any) when a place
    /// is free. A task already waiting or running here is not queued
    /// twice, unless this brings it more budget.
    pub(crate) fn start(&self, id: String, extension: Option<loop_core::Extension>) {
        if extension.is_none() && self.shared().is_some() {
            // Enqueued once per task, however often it is started here.
            let key = id.clone();
            return self.enqueue_or_run(id, &key);
        }
        self.run_here(id, extension);
    }

    fn run_here(&self, id: String, extension: Option<loop_core::Extension>) {
        self.push(Job {
            id,
            extension,
            retries: 0,
        });
    }

    /// Queue `job` here, with a worker for it when a place is free.
    fn push(&self, job: Job) {
        let mut q = self.lock();
        let held = q.running.contains(&job.id) || q.waiting.iter().any(|j| j.id == job.id);
        if job.extension.is_none() && held {
            return;
        }
        q.waiting.push_back(job);
        let idle = q.workers.saturating_sub(q.running.len());
        if idle < q.waiting.len() && q.workers < self.inner.jobs {
            let inner = self.inner.clone();
            let spawned = std::thread::Builder::new()
                .name("loop task".into())
                .spawn(move || work(&inner));
            match spawned {
                Ok(_) => q.workers += 1,
                // The task waits for the next place a worker frees (or the
                // next start that can make a worker).
                Err(e) => tracing::error!("cannot start a thread for tasks: {e}"),
            }
        }
        drop(q);
        self.inner.ready.notify_one();
    }

    /// Tasks waiting for a place, and tasks running.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let q = self.lock();
        (
            q.waiting.len() + q.placing.len(),
            q.running.len().saturating_sub(q.placing.len()),
        )
    }

    /// Whether task `id` waits for a place here.
    pub(crate) fn is_waiting(&self, id: &str) -> bool {
        let q = self.lock();
        q.placing.contains(id) || q.waiting.iter().any(|j| j.id == id)
    }

    /// Whether task `id` waits or runs here.
    pub(crate) fn holds(&self, id: &str) -> bool {
        let q = self.lock();
        q.running.contains(id) || q.waiting.iter().any(|j| j.id == id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.inner
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// How far below the server's own threads its tasks' work runs (the
/// `nice` value added): on a busy machine the server answers first and the
/// work takes what is left; on an idle one nothing changes.
const WORK_NICENESS: libc::c_int = 10;

/// Lower the calling thread's CPU priority for a task's work (its
/// preparation or its run), and so that of every command and check it
/// starts. Once lowered it stays lowered: only threads that do nothing
/// else call this. Best effort (said in the log when refused).
pub(crate) fn as_background_work() {
    // SAFETY: getpriority/setpriority on the calling thread's own id.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now == -1 && *libc::__errno_location() != 0 {
            return;
        }
        let target = (now + WORK_NICENESS).min(19);
        if target > now && libc::setpriority(libc::PRIO_PROCESS, tid, target) != 0 {
            tracing::debug!(
                "a task's thread keeps its priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Report task `id`'s end to GitHub when a GitHub trigger started it;
/// what went wrong is logged (and kept in the task's report).
pub(crate) fn report_back(runtime: &loop_runtime::Runtime, id: &str) {
    match runtime.report_back(id) {
        Ok(Some(r)) => match r.error {
            Some(e) => tracing::warn!("task {id}: reporting to GitHub stopped: {e}"),
            None => tracing::info!(
                "task {id}: reported to {} #{}",
                r.origin.repository,
                r.origin.number
            ),
        },
        Ok(None) => {}
        Err(e) => tracing::warn!("task {id}: cannot report to GitHub: {}", e.message),
    }
    // And one a chat started, in its chat.
    let _ = runtime.chat_report(id);
}

/// A worker: run waiting tasks one after another; end when none has come
/// for a while.
fn work(inner: &Arc<Inner>) {
    as_background_work();
    loop_runtime::Places::enter(Some(inner.places.clone()));
    loop {
        let job = {
            let mut q = inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                if let Some(job) = q.take() {
                    break job;
                }
                let (guard, timeout) = inner
                    .ready
                    .wait_timeout(q, IDLE)
                    .unwrap_or_else(PoisonError::into_inner);
                q = guard;
                if timeout.timed_out() && q.waiting.is_empty() {
                    q.workers -= 1;
                    return;
                }
            }
        };
        // Its place, once the children of other tasks leave one free
        // (until then it waits, and says so: `take` marked it).
        let place = inner.places.take();
        inner
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .placing
            .remove(&job.id);
        let mut observer = Poke {
            hub: inner.hub.clone(),
            id: job.id.clone(),
            runtime: inner.runtime.clone(),
        };
        // A task that panics frees its place like any other (its record
        // stays where it stopped: interrupted, resumable).
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match job.extension {
                Some(ext) => inner
                    .runtime
                    .extend(&job.id, ext, OnPrompt::Wait, &mut observer),
                None => inner.runtime.run(&job.id, OnPrompt::Wait, &mut observer),
            }));
        drop(place);
        // A task a GitHub trigger started is reported where it was asked,
        // once it has ended, however its run returned.
        report_back(&inner.runtime, &job.id);
        let again = match result {
            Ok(Ok(_)) => false,
            Ok(Err(e)) if e.is_interruption() && job.retries < RETRIES => {
                tracing::warn!(
                    "task {}: {} (it runs again here in {} s)",
                    job.id,
                    e.message,
                    5u64 << job.retries
                );
                true
            }
            // A run that failed (its workspace could not be made, the
            // store refused a write) is not an end either: tried again a
            // few times before it waits for a person or the next server.
            Ok(Err(e))
                if matches!(
                    e.kind,
                    loop_runtime::ErrorKind::Internal | loop_runtime::ErrorKind::Unavailable
                ) && job.retries < ERROR_RETRIES =>
            {
                tracing::warn!(
                    "task {}: its run failed: {} (it runs again here in {} s, {} of {ERROR_RETRIES})",
                    job.id,
                    e.message,
                    5u64 << job.retries,
                    job.retries + 1
                );
                true
            }
            Ok(Err(e)) => {
                tracing::warn!("task {}: {}", job.id, e.message);
                false
            }
            Err(_) => {
                tracing::error!("task {}: its run panicked", job.id);
                false
            }
        };
        let mut q = inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
        q.running.remove(&job.id);
        drop(q);
        if again {
            // Not decided, only interrupted: once the fault may have
            // passed, it runs on from its record.
            let pool = Pool {
                inner: inner.clone(),
            };
            let (id, retries) = (job.id.clone(), job.retries + 1);
            let spawned = std::thread::Builder::new()
                .name("loop retry".into())
                .spawn(move || {
                    std::thread::sleep(Duration::from_secs(5u64 << (retries - 1)));
                    pool.push(Job {
                        id,
                        extension: None,
                        retries,
                    });
                });
            if let Err(e) = spawned {
                tracing::error!("task {}: cannot schedule its next run: {e}", job.id);
            }
        }
        // A job of the same task may have waited for this one to end.
        inner.ready.notify_one();
    }
}

/// Tells the task's watchers of each event the moment it is recorded.
struct Poke {
    hub: Hub,
    id: String,
    runtime: Runtime,
}

impl loop_core::Observer for Poke {
    fn on_event(&mut self, event: &loop_protocol::Event) {
        self.hub.poke(&self.id);
        // A question a person must answer goes to the chat that asked.
        if matches!(event, loop_protocol::Event::ApprovalRequested { .. }) {
            self.runtime.chat_notify(&self.id, event);
        }
    }
}

impl loop_runtime::Observer for Poke {
    fn note(&mut self, _line: &str) {}
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, clippy::unwrap_used)] // tests make and read their own fixtures
mod tests {
    use super::*;

    /// A task whose worker waits for a place (the children of other
    /// tasks hold every one) is counted and said as waiting, not running,
    /// until it has its place.
    #[test]
    fn a_task_waiting_for_a_place_is_not_counted_as_running() {
        let dir = std::env::temp_dir().join(format!("loop-pool-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rt = Runtime::open(&dir).unwrap();
        let pool = Pool::new(rt, Hub::default(), 1);
        // A child of another task holds the one place.
        let held = pool.inner.places.take();
        pool.start("t-waits".into(), None);
        let start = std::time::Instant::now();
        while !pool.lock().placing.contains("t-waits") {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no worker took it"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(pool.counts(), (1, 0));
        assert!(pool.is_waiting("t-waits"));
        assert!(pool.holds("t-waits"));
        // The place freed, it runs (here: a task the store does not hold,
        // so its run fails at once), and no longer waits.
        drop(held);
        while pool.lock().placing.contains("t-waits") {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "it never got its place"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
