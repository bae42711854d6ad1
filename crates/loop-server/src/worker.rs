//! `loop worker`: run tasks from a Redis Streams queue, `jobs` at a time in
//! one process (each on a thread of its own, so a running task costs a
//! thread and its buffers, not a process).
//!
//! A task is run by [`Runtime::run`] exactly as `loop resume` runs it: a
//! task just submitted starts, one whose worker died goes on from its last
//! committed step (the store's claim decides who runs it; the queue only
//! says what to run). The message is acknowledged only once the task's end
//! is committed, so a worker killed at any instant leaves either a task
//! that has ended (its message, redelivered, is acknowledged unrun) or one
//! another worker resumes after the visibility timeout.
//!
//! SIGTERM (or Ctrl-C) drains: no new message is taken, running tasks get
//! `grace` to end, and those still running are handed back (a fresh message
//! each, not counted as a failed attempt) and left interrupted when the
//! process ends, for another worker to resume.

use loop_runtime::{OnPrompt, Runtime};
use loop_store::{Delivery, QueueOptions, RedisQueue};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to work.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The project whose tasks are run (its store is the shared one).
    pub project: PathBuf,
    /// The queue (`redis://…`).
    pub queue_url: String,
    /// The queue's name, visibility timeout and attempts.
    pub queue: QueueOptions,
    /// Tasks run at once.
    pub jobs: usize,
    /// On SIGTERM, how long running tasks may take to end before they are
    /// handed back.
    pub grace: Duration,
    /// Where to serve `/metrics`, if anywhere.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// What a worker counts (served as Prometheus text).
#[derive(Default)]
pub struct WorkerMetrics {
    taken: AtomicU64,
    reclaimed: AtomicU64,
    renewals: AtomicU64,
    renewals_lost: AtomicU64,
    acked: AtomicU64,
    acked_unrun: AtomicU64,
    handed_back: AtomicU64,
    dead_lettered: AtomicU64,
    errors: AtomicU64,
    running: AtomicU64,
    /// Messages of other projects' tasks handed back unrun.
    foreign: AtomicU64,
    /// Those tasks already named on stderr (at most [`FOREIGN_NAMED`]).
    foreign_seen: Mutex<std::collections::BTreeSet<String>>,
    outcomes: Mutex<BTreeMap<String, u64>>,
}

/// How many other projects' tasks a worker names on stderr, at most.
const FOREIGN_NAMED: usize = 1000;

impl WorkerMetrics {
    fn outcome(&self, kind: &str) {
        if let Ok(mut m) = self.outcomes.lock() {
            *m.entry(kind.to_string()).or_default() += 1;
        }
    }

    /// The metrics as Prometheus text, with the queue's depth as `queue`
    /// answers it now.
    pub fn render(&self, queue: Option<&RedisQueue>) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, v: u64| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"
            ));
        };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(
            "loop_worker_messages_taken_total",
            "Messages taken from the queue.",
            get(&self.taken),
        );
        counter(
            "loop_worker_reclaims_total",
            "Messages taken over from a worker that died (idle past the visibility timeout).",
            get(&self.reclaimed),
        );
        counter(
            "loop_worker_lease_renewals_total",
            "Leases renewed while a task ran.",
            get(&self.renewals),
        );
        counter(
            "loop_worker_lease_renewals_lost_total",
            "Renewals that found the message no longer this worker's.",
            get(&self.renewals_lost),
        );
        counter(
            "loop_worker_foreign_handed_back_total",
            "Messages of other projects' tasks handed back unrun (no attempt of theirs spent).",
            get(&self.foreign),
        );
        counter(
            "loop_worker_acks_total",
            "Messages acknowledged after their task's end was committed.",
            get(&self.acked),
        );
        counter(
            "loop_worker_acks_unrun_total",
            "Redelivered messages whose task had already ended (acknowledged without running).",
            get(&self.acked_unrun),
        );
        counter(
            "loop_worker_hand_backs_total",
            "Messages put back for another worker (a drain, or the task held elsewhere).",
            get(&self.handed_back),
        );
        counter(
            "loop_worker_dead_letters_total",
            "Messages this worker moved to the dead-letter stream.",
            get(&self.dead_lettered),
        );
        counter(
            "loop_worker_errors_total",
            "Runs that failed without ending their task (left for another attempt).",
            get(&self.errors),
        );
        out.push_str(&format!(
            "# HELP loop_worker_running Tasks running now.\n# TYPE loop_worker_running gauge\nloop_worker_running {}\n",
            get(&self.running)
        ));
        out.push_str("# HELP loop_worker_outcomes_total Tasks this worker ran to their end, by outcome.\n# TYPE loop_worker_outcomes_total counter\n");
        if let Ok(m) = self.outcomes.lock() {
            for (k, v) in m.iter() {
                out.push_str(&format!(
                    "loop_worker_outcomes_total{{outcome=\"{k}\"}} {v}\n"
                ));
            }
        }
        if let Some(d) = queue.and_then(|q| q.depth().ok()) {
            out.push_str(&format!(
                "# HELP loop_queue_depth Messages in the queue, by where they stand.\n# TYPE loop_queue_depth gauge\nloop_queue_depth{{state=\"waiting\"}} {}\nloop_queue_depth{{state=\"pending\"}} {}\nloop_queue_depth{{state=\"dead\"}} {}\n",
                d.waiting, d.pending, d.dead
            ));
        }
        out
    }
}

/// Set by SIGTERM or SIGINT: stop taking work.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_stop() {
    // SAFETY: a zeroed sigaction is a valid starting value; the handler
    // only stores to an atomic (async-signal-safe).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_stop as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

/// What is running now, per slot: the message, to hand back on a drain.
type Running = Arc<Mutex<BTreeMap<usize, Delivery>>>;

/// `loop worker`: take and run tasks until SIGTERM, then drain. Returns
/// when the process should end (tasks still running are handed back and
/// left interrupted).
pub fn work(opts: &WorkerOptions) -> Result<(), loop_runtime::Error> {
    let runtime = Runtime::open(&opts.project)?;
    // Both must answer before any work is taken.
    let store = runtime.describe_store()?;
    let queue = RedisQueue::open(&opts.queue_url, opts.queue.clone())
        .map_err(|e| loop_runtime::Error::usage(e.to_string()))?;
    let described = queue
        .describe()
        .map_err(|e| loop_runtime::Error::usage(e.to_string()))?;
    install_stop();
    let metrics = Arc::new(WorkerMetrics::default());
    let host = hostname();
    println!(
        "worker {host}-{} on {}: {} at a time\n  store  {store}\n  queue  {described}",
        std::process::id(),
        runtime.project().display(),
        opts.jobs
    );
    // A store or queue shared with other projects: say so once, and take
    // only this project's tasks (and those it serves).
    let scope = runtime.scope()?;
    println!(
        "  project {}{}",
        scope.identity.id,
        if scope.serves.is_empty() {
            String::new()
        } else {
            format!(" (also serving {})", scope.serves.join(", "))
        }
    );
    match runtime.others_unfinished() {
        Ok(others) if !others.is_empty() => println!(
            "  the store holds {} unfinished task(s) of {} other project(s) ({}): left for their own workers",
            others.values().sum::<usize>(),
            others.len(),
            others.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot list the store's other projects: {}", e.message),
    }
    if let Some(addr) = opts.metrics_addr {
        serve_metrics(addr, metrics.clone(), opts)?;
    }
    let running: Running = Arc::default();
    // Slots that have left their loop (after the stop).
    let exited = Arc::new(AtomicU64::new(0));
    // The places this worker's tasks and their children run in.
    let places = loop_runtime::Places::new(opts.jobs);
    std::thread::scope(|scope| {
        for slot in 0..opts.jobs {
            let (runtime, metrics, running) = (runtime.clone(), metrics.clone(), running.clone());
            let places = places.clone();
            let consumer = format!("{host}-{}-{slot}", std::process::id());
            let exited = exited.clone();
            scope.spawn(move || {
                loop_runtime::Places::enter(Some(places));
                slot_loop(slot, &consumer, &runtime, opts, &metrics, &running);
                exited.fetch_add(1, Ordering::SeqCst);
            });
        }
        // The drain: once told to stop, wait for the running tasks up to
        // the grace, then hand back what still runs.
        while !STOP.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        // (On stderr: whoever started the worker may have stopped reading
        // its output, and a write to a closed pipe would end it here.)
        eprintln!(
            "worker: stopping (no new tasks; {} s for running ones to end)",
            opts.grace.as_secs()
        );
        let deadline = Instant::now() + opts.grace;
        while Instant::now() < deadline && running.lock().is_ok_and(|r| !r.is_empty()) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let left: Vec<Delivery> = running
            .lock()
            .map(|r| r.values().cloned().collect())
            .unwrap_or_default();
        if let Ok(q) = RedisQueue::open(&opts.queue_url, opts.queue.clone()) {
            for d in &left {
                match q.hand_back(d) {
                    // Acknowledged meanwhile (its task just ended): done.
                    Ok(false) => {}
                    Ok(true) => {
                        metrics.handed_back.fetch_add(1, Ordering::Relaxed);
                        eprintln!(
                            "worker: task {} handed back (another worker resumes it)",
                            d.task
                        );
                    }
                    Err(e) => tracing::warn!("task {}: cannot hand back: {e}", d.task),
                }
            }
        }
        // A slot waiting for work may take a message (a hand-back among
        // them) as the stop comes: it hands that back and leaves. The
        // process waits for those (a read waits at most a second), so no
        // message stays with a consumer that is gone.
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            let busy = running.lock().map_or(0, |r| r.len()) as u64;
            if exited.load(Ordering::SeqCst) + busy >= opts.jobs as u64 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The process ends here with its tasks interrupted mid-step, as a
        // kill would leave them: each resumes from its last committed step.
        std::process::exit(0);
    })
}

#[allow(clippy::disallowed_methods)] // the kernel's host name (/proc)
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "worker".into())
}

/// One slot: take a message, run its task, settle the message; again.
fn slot_loop(
    slot: usize,
    consumer: &str,
    runtime: &Runtime,
    opts: &WorkerOptions,
    metrics: &WorkerMetrics,
    running: &Running,
) {
    let mut queue = None;
    let mut pause = Duration::from_millis(100);
    while !STOP.load(Ordering::SeqCst) {
        let q = match &queue {
            Some(q) => q,
            None => match RedisQueue::open(&opts.queue_url, opts.queue.clone()) {
                Ok(q) => queue.insert(q),
                Err(e) => {
                    tracing::warn!("{e}; trying again");
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(2));
                    continue;
                }
            },
        };
        // A free place first (the children of running tasks may hold them
        // all), not taken while waiting for a message: children use it
        // meanwhile. Taken with the message; if a child took it in
        // between, the message goes back at once (never held unrun while
        // its lease runs out).
        let places = loop_runtime::Places::current();
        if places
            .as_ref()
            .is_some_and(|p| !p.free_within(Duration::from_secs(1)))
        {
            continue;
        }
        let d = match q.take(consumer, Duration::from_secs(1)) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("{e}; trying again");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        pause = Duration::from_millis(100);
        let place = match places.as_ref().map(|p| p.try_take()) {
            Some(None) => {
                if q.hand_back(&d).unwrap_or(false) {
                    metrics.handed_back.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            taken => taken.flatten(),
        };
        {
            // The stop is looked at under the lock the drain takes to see
            // what runs: a message is either handed back here or seen there.
            let Ok(mut r) = running.lock() else {
                let _ = q.hand_back(&d);
                break;
            };
            if STOP.load(Ordering::SeqCst) {
                drop(r);
                // Taken as the stop came: back at once.
                let _ = q.hand_back(&d);
                break;
            }
            r.insert(slot, d.clone());
        }
        metrics.taken.fetch_add(1, Ordering::Relaxed);
        if d.attempts > 1 {
            metrics.reclaimed.fetch_add(1, Ordering::Relaxed);
        }
        settle(q, consumer, runtime, opts, metrics, &d);
        drop(place);
        if let Ok(mut r) = running.lock() {
            r.remove(&slot);
        }
    }
}

/// Run the task of `d` (or find it ended) and settle the message.
fn settle(
    q: &RedisQueue,
    consumer: &str,
    runtime: &Runtime,
    opts: &WorkerOptions,
    metrics: &WorkerMetrics,
    d: &Delivery,
) {
    let view = match runtime.task(&d.task) {
        Ok(v) => v,
        Err(e) if e.kind == loop_runtime::ErrorKind::NotFound => {
            let reason = format!("the store has no task `{}`", d.task);
            if q.dead_letter(d, &reason).unwrap_or(false) {
                metrics.dead_lettered.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        Err(e) => return back_in_a_moment(q, metrics, d, &e.message),
    };
    if view.state != loop_store::StoredState::TERMINAL {
        match runtime.foreign(&d.task) {
            Ok(None) => {}
            Ok(Some(why)) => return hand_back_foreign(q, metrics, d, &why),
            Err(e) => return back_in_a_moment(q, metrics, d, &e.message),
        }
    }
    if view.running && view.state != loop_store::StoredState::TERMINAL {
        // Another live process runs it (a slow renewal let the message go):
        // it is theirs; the message comes back in a moment. (Looked at
        // before the attempts: a task running elsewhere is no failure.)
        std::thread::sleep(Duration::from_secs(1));
        if q.hand_back(d).unwrap_or(false) {
            metrics.handed_back.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    if view.state != loop_store::StoredState::TERMINAL && d.attempts > opts.queue.max_attempts {
        // Delivered too often without ending, and the store says it has
        // not ended and nobody runs it: given up on, with the reason, in
        // the stream and with the task (so `loop status` says so).
        let reason = q.exhausted(d);
        if q.dead_letter(d, &reason).unwrap_or(false) {
            metrics.dead_lettered.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = runtime.mark_dead_lettered(&d.task, &opts.queue.name, &reason) {
                tracing::warn!(
                    "task {}: dead-lettered, but the store did not take the note: {}",
                    d.task,
                    e.message
                );
            }
        }
        return;
    }
    if view.state == loop_store::StoredState::TERMINAL {
        // It ended before (its worker died between the end's commit and
        // the acknowledgement): done, not run again.
        if ack(q, d) {
            metrics.acked_unrun.fetch_add(1, Ordering::Relaxed);
        }
        return;
    }
    run_and_settle(q, consumer, runtime, opts, metrics, d);
}

/// Another project's task: never run here, never one of its attempts
/// spent (a hand-back is a fresh message). Back at once (held no longer
/// than the look took), then a pause, so a queue of others' work is not
/// spun through; the first few are named.
fn hand_back_foreign(q: &RedisQueue, metrics: &WorkerMetrics, d: &Delivery, why: &str) {
    metrics.foreign.fetch_add(1, Ordering::Relaxed);
    let first = metrics
        .foreign_seen
        .lock()
        .map(|mut s| s.len() < FOREIGN_NAMED && s.insert(d.task.clone()))
        .unwrap_or(false);
    if q.hand_back(d).unwrap_or(false) {
        metrics.handed_back.fetch_add(1, Ordering::Relaxed);
    }
    if first {
        eprintln!("worker: {why}");
    }
    std::thread::sleep(Duration::from_secs(1));
}

/// Run the task of `d` here, its claim renewed meanwhile, and settle the
/// message by how the run went: acknowledged once the task ended, handed
/// back when stopped by the drain or run elsewhere, else left for another
/// attempt.
fn run_and_settle(
    q: &RedisQueue,
    consumer: &str,
    runtime: &Runtime,
    opts: &WorkerOptions,
    metrics: &WorkerMetrics,
    d: &Delivery,
) {
    metrics.running.fetch_add(1, Ordering::Relaxed);
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| renew_while(&done, consumer, opts, metrics, d));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // A worker's tasks are watched through the store: it says
            // nothing, but a chat that asked hears its questions.
            let mut asks = ChatAsks {
                runtime: runtime.clone(),
                id: d.task.clone(),
            };
            runtime.run(&d.task, OnPrompt::Wait, &mut asks)
        }));
        done.store(true, Ordering::SeqCst);
        r
    });
    metrics.running.fetch_sub(1, Ordering::Relaxed);
    let ended = runtime
        .task(&d.task)
        .is_ok_and(|v| v.state == loop_store::StoredState::TERMINAL);
    // A task a GitHub trigger started is reported by whoever ran it.
    if ended {
        crate::pool::report_back(runtime, &d.task);
    }
    match result {
        Ok(Ok(report)) if ended => {
            metrics.outcome(report.outcome.kind.name());
            if ack(q, d) {
                metrics.acked.fetch_add(1, Ordering::Relaxed);
            }
        }
        _ if STOP.load(Ordering::SeqCst) => {
            // Stopped during the drain without ending: back for another
            // worker (a no-op if the drain already handed it back).
            if q.hand_back(d).unwrap_or(false) {
                metrics.handed_back.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(Err(e)) if runtime.task(&d.task).is_ok_and(|v| v.running) => {
            tracing::info!("task {}: {} (handing the message back)", d.task, e.message);
            std::thread::sleep(Duration::from_secs(1));
            if q.hand_back(d).unwrap_or(false) {
                metrics.handed_back.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(Ok(_)) => {
            metrics.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "task {}: its run returned but the task has not ended",
                d.task
            );
        }
        Ok(Err(e)) => {
            metrics.errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "task {}: {} (left for another attempt, {} of {})",
                d.task,
                e.message,
                d.attempts,
                opts.queue.max_attempts
            );
        }
        Err(_) => {
            metrics.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                "task {}: its run panicked (left for another attempt)",
                d.task
            );
        }
    }
}

/// The store cannot answer now (`why`): that is no failed attempt of the
/// task's. Its message goes back in a moment, for whoever can reach it.
fn back_in_a_moment(q: &RedisQueue, metrics: &WorkerMetrics, d: &Delivery, why: &str) {
    tracing::warn!("task {}: {why} (handing the message back)", d.task);
    metrics.errors.fetch_add(1, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    if q.hand_back(d).unwrap_or(false) {
        metrics.handed_back.fetch_add(1, Ordering::Relaxed);
    }
}

/// Acknowledge, retrying while the queue cannot be reached (up to a
/// minute: past that, a redelivery finds the task ended and acknowledges
/// it then).
fn ack(q: &RedisQueue, d: &Delivery) -> bool {
    let start = Instant::now();
    loop {
        match q.ack(d) {
            Ok(()) => return true,
            Err(e) if start.elapsed() < Duration::from_secs(60) => {
                tracing::warn!("task {}: {e}; acknowledging again", d.task);
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => {
                tracing::warn!("task {}: {e}; a redelivery will find it ended", d.task);
                return false;
            }
        }
    }
}

/// Renew `d`'s lease every third of the visibility timeout until `done`.
fn renew_while(
    done: &AtomicBool,
    consumer: &str,
    opts: &WorkerOptions,
    metrics: &WorkerMetrics,
    d: &Delivery,
) {
    let every = (opts.queue.visibility / 3).max(Duration::from_millis(200));
    let mut q: Option<RedisQueue> = None;
    let mut last = Instant::now();
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
        if last.elapsed() < every {
            continue;
        }
        last = Instant::now();
        if q.is_none() {
            q = RedisQueue::open(&opts.queue_url, opts.queue.clone()).ok();
        }
        let Some(handle) = &q else {
            continue;
        };
        match handle.renew(d, consumer) {
            Ok(true) => {
                metrics.renewals.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {
                metrics.renewals_lost.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!("task {}: lease not renewed: {e}", d.task);
                q = None;
            }
        }
    }
}

/// Serve `/metrics` on `addr` from a thread of its own.
fn serve_metrics(
    addr: std::net::SocketAddr,
    metrics: Arc<WorkerMetrics>,
    opts: &WorkerOptions,
) -> Result<(), loop_runtime::Error> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| loop_runtime::Error::usage(format!("cannot listen on {addr}: {e}")))?;
    let (url, qopts) = (opts.queue_url.clone(), opts.queue.clone());
    println!(
        "  metrics http://{}/metrics",
        listener.local_addr().map_or(addr, |a| a)
    );
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let queue = Arc::new(Mutex::new(RedisQueue::open(&url, qopts).ok()));
            let app = axum::Router::new().route(
                "/metrics",
                axum::routing::get(move || {
                    let (metrics, queue) = (metrics.clone(), queue.clone());
                    async move {
                        tokio::task::spawn_blocking(move || {
                            let q = queue.lock().ok();
                            metrics.render(q.as_ref().and_then(|q| q.as_ref()))
                        })
                        .await
                        .unwrap_or_default()
                    }
                }),
            );
            if listener.set_nonblocking(true).is_err() {
                return;
            }
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            // Never stopped: the process ends with the worker.
            let (_keep, never) = tokio::sync::watch::channel(false);
            crate::accept_loop(listener, app, crate::HEAD_TIMEOUT, never).await;
        });
    });
    Ok(())
}

/// What a worker's run tells: only a question a person must answer, to
/// the chat that asked for the task (if one did).
struct ChatAsks {
    runtime: Runtime,
    id: String,
}

impl loop_core::Observer for ChatAsks {
    fn on_event(&mut self, event: &loop_protocol::Event) {
        if matches!(event, loop_protocol::Event::ApprovalRequested { .. }) {
            self.runtime.chat_notify(&self.id, event);
        }
    }
}

impl loop_runtime::Observer for ChatAsks {
    fn note(&mut self, _line: &str) {}
}
