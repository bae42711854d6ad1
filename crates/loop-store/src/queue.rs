//! The work queue: Redis Streams, for `loop worker` processes on many
//! machines.
//!
//! - **One stream per queue** (`loop:QUEUE:tasks`) read by one consumer
//!   group (`workers`); each worker is a consumer. `XREADGROUP … BLOCK`
//!   waits for work without polling.
//! - **Leases.** A message being worked on stays pending for its consumer;
//!   the worker renews it (`XCLAIM … JUSTID`, which resets its idle time)
//!   while the task runs. A message idle past the visibility timeout (its
//!   worker died) is taken over with `XAUTOCLAIM`, which counts a delivery.
//! - **Bounded attempts.** A message delivered more than `max_attempts`
//!   times goes to the dead-letter stream (`loop:QUEUE:dead`) with the
//!   reason, and leaves the queue.
//! - **Acknowledged at the end.** A worker acknowledges a message only once
//!   the task's terminal state is committed in the store; a redelivered
//!   message whose task has ended is acknowledged without running it.
//! - **Idempotent enqueue.** Each enqueue carries a key (the task id, or
//!   the id and a generation for a budget extension); a key already seen
//!   adds nothing, checked and added in one script.
//! - **Handing back.** A worker that stops while a task runs puts a fresh
//!   message in its place (a drain is not a failed attempt).
//!
//! Every operation reconnects once on a broken connection; a caller that
//! keeps failing sees the error and retries at its own pace.

use redis::streams::{
    StreamAutoClaimReply, StreamId, StreamPendingCountReply, StreamRangeReply, StreamReadReply,
};
use std::sync::Mutex;
use std::time::Duration;

/// A queue failure.
#[derive(Debug, thiserror::Error)]
#[error("queue {url}: {message}")]
pub struct QueueError {
    /// The queue (its URL without a password).
    pub url: String,
    /// What failed.
    pub message: String,
}

/// A message taken from the queue: which task, and how often it has been
/// delivered (1 the first time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The stream entry id.
    pub message: String,
    /// The task to run.
    pub task: String,
    /// Deliveries so far, this one included.
    pub attempts: u64,
}

/// A message moved to the dead-letter stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetter {
    /// The task.
    pub task: String,
    /// Why it was given up on.
    pub reason: String,
    /// Deliveries it had.
    pub attempts: u64,
}

/// How much work the queue holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Depth {
    /// Messages no worker has taken yet.
    pub waiting: u64,
    /// Messages taken and not yet acknowledged (running, or their worker
    /// died and they wait for the visibility timeout).
    pub pending: u64,
    /// Messages in the dead-letter stream.
    pub dead: u64,
}

/// Settings of a queue.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// The queue's name (streams `loop:NAME:tasks` and `loop:NAME:dead`).
    pub name: String,
    /// A pending message idle this long is taken over.
    pub visibility: Duration,
    /// Deliveries before a message goes to the dead-letter stream.
    pub max_attempts: u64,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            name: "default".into(),
            visibility: Duration::from_secs(60),
            max_attempts: 5,
        }
    }
}

const GROUP: &str = "workers";

/// Add a message once per key: `KEYS[1]` the key's marker, `KEYS[2]` the
/// stream; `ARGV[1]` the task, `ARGV[2]` the key.
const ENQUEUE: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', 2592000) then
  redis.call('XADD', KEYS[2], '*', 'task', ARGV[1], 'key', ARGV[2])
  return 1
end
return 0";

/// Renew a message only while it is still this consumer's: `KEYS[1]` the
/// stream; `ARGV` group, consumer, message id.
const RENEW: &str = r"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #p == 0 then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1";

/// Replace a message by a fresh one (a hand-back, not a failed attempt):
/// `KEYS[1]` the stream; `ARGV` group, message id, task. Only a message
/// still pending is replaced (one acknowledged meanwhile stays done).
const HAND_BACK: &str = r"
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('XDEL', KEYS[1], ARGV[2])
  redis.call('XADD', KEYS[1], '*', 'task', ARGV[3], 'key', 'hand-back')
  return 1
end
return 0";

/// Move a message to the dead-letter stream: `KEYS[1]` the stream,
/// `KEYS[2]` the dead letters; `ARGV` group, message id, task, reason,
/// attempts.
const DEAD_LETTER: &str = r"
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('XDEL', KEYS[1], ARGV[2])
  redis.call('XADD', KEYS[2], '*', 'task', ARGV[3], 'reason', ARGV[4], 'attempts', ARGV[5])
  return 1
end
return 0";

/// A handle on a Redis Streams queue: one connection (a blocking read
/// holds it), so each thread that blocks has a handle of its own.
pub struct RedisQueue {
    shown: String,
    client: redis::Client,
    conn: Mutex<Option<redis::Connection>>,
    opts: QueueOptions,
    stream: String,
    dead: String,
}

fn shown(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

fn text(v: &redis::Value) -> String {
    redis::from_redis_value_ref::<String>(v).unwrap_or_default()
}

impl RedisQueue {
    /// A handle on the queue at `url` (`redis://HOST:PORT[/DB]`). Makes
    /// the stream and its group if they are not there.
    pub fn open(url: &str, opts: QueueOptions) -> Result<RedisQueue, QueueError> {
        let shown = shown(url);
        let (url, ca) =
            crate::tls::redis(url).map_err(|crate::tls::TlsSetup(message)| QueueError {
                url: shown.clone(),
                message,
            })?;
        // `rediss://` is encrypted and the server's certificate and name
        // verified (against `cacert` when given).
        let client = match ca {
            Some(pem) => redis::Client::build_with_tls(
                url.as_str(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                },
            ),
            None => redis::Client::open(url.as_str()),
        }
        .map_err(|e| QueueError {
            url: shown.clone(),
            message: format!("not a Redis URL: {e}"),
        })?;
        let valid = |n: &str| {
            !n.is_empty()
                && n.len() <= 64
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !valid(&opts.name) {
            return Err(QueueError {
                url: shown,
                message: format!(
                    "`{}` is not a queue name (letters, digits, - and _, at most 64)",
                    opts.name
                ),
            });
        }
        let q = RedisQueue {
            stream: format!("loop:{}:tasks", opts.name),
            dead: format!("loop:{}:dead", opts.name),
            shown,
            client,
            conn: Mutex::new(None),
            opts,
        };
        q.ensure_group()?;
        Ok(q)
    }

    /// The queue's URL, without a password.
    pub fn url(&self) -> &str {
        &self.shown
    }

    fn err(&self, e: impl std::fmt::Display) -> QueueError {
        QueueError {
            url: self.shown.clone(),
            message: e.to_string(),
        }
    }

    /// Run `op` on the connection, connecting (again) as needed: a broken
    /// connection is replaced and `op` tried once more.
    fn with<T>(
        &self,
        read_timeout: Duration,
        mut op: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, QueueError> {
        let mut guard = self.conn.lock().map_err(|_| self.err("lock poisoned"))?;
        let mut last = None;
        for _ in 0..2 {
            if guard.is_none() {
                let c = self
                    .client
                    .get_connection_with_timeout(Duration::from_secs(5))
                    .map_err(|e| self.err(e))?;
                *guard = Some(c);
            }
            let Some(c) = guard.as_mut() else {
                continue;
            };
            c.set_read_timeout(Some(read_timeout))
                .map_err(|e| self.err(e))?;
            match op(c) {
                Ok(v) => return Ok(v),
                Err(e) if e.is_connection_dropped() || e.is_io_error() || e.is_timeout() => {
                    *guard = None;
                    last = Some(e);
                }
                Err(e) => return Err(self.err(e)),
            }
        }
        Err(self.err(last.map_or_else(|| "no connection".to_string(), |e| e.to_string())))
    }

    fn ensure_group(&self) -> Result<(), QueueError> {
        let stream = self.stream.clone();
        self.with(Duration::from_secs(5), |c| {
            let made: redis::RedisResult<()> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&stream)
                .arg(GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query(c);
            match made {
                Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
                other => other,
            }
        })
    }

    /// The server's version (for `loop doctor`), asked.
    pub fn describe(&self) -> Result<String, QueueError> {
        let info: String = self.with(Duration::from_secs(5), |c| {
            redis::cmd("INFO").arg("server").query(c)
        })?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        let d = self.depth()?;
        let link = if self.shown.starts_with("rediss://") {
            "encrypted, certificate verified"
        } else {
            "unencrypted"
        };
        Ok(format!(
            "redis {} (Redis {version}, {link}, queue `{}`: {} waiting, {} running, {} dead)",
            self.shown, self.opts.name, d.waiting, d.pending, d.dead
        ))
    }

    /// Add task `task` under idempotency key `key`; `false` when that key
    /// was enqueued before (nothing is added).
    pub fn enqueue(&self, task: &str, key: &str) -> Result<bool, QueueError> {
        let marker = format!("loop:{}:key:{key}", self.opts.name);
        let stream = self.stream.clone();
        let added: i64 = self.with(Duration::from_secs(5), |c| {
            redis::Script::new(ENQUEUE)
                .key(&marker)
                .key(&stream)
                .arg(task)
                .arg(key)
                .invoke(c)
        })?;
        Ok(added == 1)
    }

    /// The next message for `consumer`: first one whose worker died (idle
    /// past the visibility timeout), else a new one, waiting up to `wait`.
    /// Its `attempts` say how often it was delivered: the caller gives up
    /// on one past [`QueueOptions::max_attempts`] ([`RedisQueue::dead_letter`])
    /// once it knows the task has not ended.
    pub fn take(&self, consumer: &str, wait: Duration) -> Result<Option<Delivery>, QueueError> {
        match self.take_once(consumer, wait) {
            // The stream or its group is gone (Redis lost its data, or
            // someone deleted them): made again, and read again.
            Err(e) if e.message.contains("NOGROUP") => {
                tracing::warn!("queue {}: {e}; making the group again", self.shown);
                self.ensure_group()?;
                self.take_once(consumer, wait)
            }
            other => other,
        }
    }

    fn take_once(&self, consumer: &str, wait: Duration) -> Result<Option<Delivery>, QueueError> {
        if let Some(d) = self.reclaim(consumer)? {
            return Ok(Some(d));
        }
        let stream = self.stream.clone();
        let block = wait.as_millis().max(1) as u64;
        let reply: Option<StreamReadReply> = self.with(wait + Duration::from_secs(5), |c| {
            redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(consumer)
                .arg("COUNT")
                .arg(1)
                .arg("BLOCK")
                .arg(block)
                .arg("STREAMS")
                .arg(&stream)
                .arg(">")
                .query(c)
        })?;
        let Some(id) = reply
            .and_then(|r| r.keys.into_iter().next())
            .and_then(|k| k.ids.into_iter().next())
        else {
            return Ok(None);
        };
        Ok(Some(self.delivery(id, 1)))
    }

    /// The reason given when a message is given up on.
    pub fn exhausted(&self, d: &Delivery) -> String {
        format!(
            "delivered {} times without ending (at most {}): each worker that took it died or could not run it",
            d.attempts, self.opts.max_attempts
        )
    }

    fn delivery(&self, id: StreamId, attempts: u64) -> Delivery {
        Delivery {
            task: id.map.get("task").map(text).unwrap_or_default(),
            message: id.id,
            attempts,
        }
    }

    /// One message idle past the visibility timeout, now `consumer`'s.
    /// XAUTOCLAIM looks at a bounded run of pending messages per call: the
    /// cursor is followed through all of them (messages still leased, of
    /// tasks that run long, do not hide one whose worker died).
    fn reclaim(&self, consumer: &str) -> Result<Option<Delivery>, QueueError> {
        let stream = self.stream.clone();
        let idle = self.opts.visibility.as_millis() as u64;
        let mut cursor = "0-0".to_string();
        let mut found = None;
        for _ in 0..10_000 {
            let start = cursor.clone();
            let reply: StreamAutoClaimReply = self.with(Duration::from_secs(5), |c| {
                redis::cmd("XAUTOCLAIM")
                    .arg(&stream)
                    .arg(GROUP)
                    .arg(consumer)
                    .arg(idle)
                    .arg(&start)
                    .arg("COUNT")
                    .arg(1)
                    .query(c)
            })?;
            if let Some(id) = reply.claimed.into_iter().next() {
                found = Some(id);
                break;
            }
            if reply.next_stream_id == "0-0" || reply.next_stream_id.is_empty() {
                break;
            }
            cursor = reply.next_stream_id;
        }
        let Some(id) = found else {
            return Ok(None);
        };
        let msg = id.id.clone();
        let pending: StreamPendingCountReply = self.with(Duration::from_secs(5), |c| {
            redis::cmd("XPENDING")
                .arg(&stream)
                .arg(GROUP)
                .arg(&msg)
                .arg(&msg)
                .arg(1)
                .query(c)
        })?;
        let attempts = pending.ids.first().map_or(1, |p| p.times_delivered as u64);
        tracing::info!(
            "queue {}: took over message {msg} (delivery {attempts})",
            self.shown
        );
        Ok(Some(self.delivery(id, attempts)))
    }

    /// Renew `d`'s lease for `consumer`; `false` when it is no longer
    /// theirs (taken over, or acknowledged).
    pub fn renew(&self, d: &Delivery, consumer: &str) -> Result<bool, QueueError> {
        let stream = self.stream.clone();
        let renewed: i64 = self.with(Duration::from_secs(5), |c| {
            redis::Script::new(RENEW)
                .key(&stream)
                .arg(GROUP)
                .arg(consumer)
                .arg(&d.message)
                .invoke(c)
        })?;
        Ok(renewed == 1)
    }

    /// The task of `d` has ended (its end is committed): the message is
    /// done.
    pub fn ack(&self, d: &Delivery) -> Result<(), QueueError> {
        let stream = self.stream.clone();
        self.with(Duration::from_secs(5), |c| {
            redis::pipe()
                .atomic()
                .cmd("XACK")
                .arg(&stream)
                .arg(GROUP)
                .arg(&d.message)
                .ignore()
                .cmd("XDEL")
                .arg(&stream)
                .arg(&d.message)
                .ignore()
                .query::<()>(c)
        })
    }

    /// Put `d` back for another worker at once, as a fresh message (this
    /// worker stops, or another process holds the task for now).
    pub fn hand_back(&self, d: &Delivery) -> Result<bool, QueueError> {
        let stream = self.stream.clone();
        let n: i64 = self.with(Duration::from_secs(5), |c| {
            redis::Script::new(HAND_BACK)
                .key(&stream)
                .arg(GROUP)
                .arg(&d.message)
                .arg(&d.task)
                .invoke(c)
        })?;
        Ok(n == 1)
    }

    /// Give up on `d`: to the dead-letter stream with `reason`.
    pub fn dead_letter(&self, d: &Delivery, reason: &str) -> Result<bool, QueueError> {
        let (stream, dead) = (self.stream.clone(), self.dead.clone());
        let n: i64 = self.with(Duration::from_secs(5), |c| {
            redis::Script::new(DEAD_LETTER)
                .key(&stream)
                .key(&dead)
                .arg(GROUP)
                .arg(&d.message)
                .arg(&d.task)
                .arg(reason)
                .arg(d.attempts)
                .invoke(c)
        })?;
        if n == 1 {
            tracing::warn!(
                "queue {}: task {} dead-lettered: {reason}",
                self.shown,
                d.task
            );
        }
        Ok(n == 1)
    }

    /// Every dead letter, oldest first.
    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>, QueueError> {
        let dead = self.dead.clone();
        let reply: StreamRangeReply = self.with(Duration::from_secs(5), |c| {
            redis::cmd("XRANGE").arg(&dead).arg("-").arg("+").query(c)
        })?;
        Ok(reply
            .ids
            .into_iter()
            .map(|id| DeadLetter {
                task: id.map.get("task").map(text).unwrap_or_default(),
                reason: id.map.get("reason").map(text).unwrap_or_default(),
                attempts: id
                    .map
                    .get("attempts")
                    .map(text)
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0),
            })
            .collect())
    }

    /// How much the queue holds.
    pub fn depth(&self) -> Result<Depth, QueueError> {
        let (stream, dead) = (self.stream.clone(), self.dead.clone());
        let (len, pending, dead): (u64, redis::Value, u64) =
            self.with(Duration::from_secs(5), |c| {
                redis::pipe()
                    .cmd("XLEN")
                    .arg(&stream)
                    .cmd("XPENDING")
                    .arg(&stream)
                    .arg(GROUP)
                    .cmd("XLEN")
                    .arg(&dead)
                    .query(c)
            })?;
        // XPENDING's summary: [count, first, last, consumers].
        let pending = match pending {
            redis::Value::Array(v) => v
                .first()
                .and_then(|c| redis::from_redis_value_ref::<u64>(c).ok())
                .unwrap_or(0),
            _ => 0,
        };
        Ok(Depth {
            waiting: len.saturating_sub(pending),
            pending,
            dead,
        })
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    #[test]
    fn a_shown_queue_url_has_no_password() {
        assert_eq!(
            super::shown("redis://:hunter22@10.0.0.5:6379/2"),
            "redis://10.0.0.5:6379/2"
        );
        assert_eq!(super::shown("redis://127.0.0.1"), "redis://127.0.0.1");
    }
}
