//! Places to run tasks in: the bound a process puts on the tasks it runs
//! at once (`loop serve --jobs`, `loop worker --jobs`), children included.
//!
//! A task takes a place before it runs. A parent waiting for its children
//! lends them its own place, so one child always runs; each other child of
//! the same turn runs beside it only if it finds a free place at once (none
//! is waited for: a parent never holds its place while waiting for
//! another, so nothing waits in a circle). A process that sets no bound
//! (`loop run`) runs a turn's children together, as many as the turn has.
//!
//! The bound in force is the calling thread's: a runner of tasks enters it
//! ([`Places::enter`]) and the children's threads carry it on.

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// A number of places, some taken.
#[derive(Debug)]
pub struct Places {
    total: usize,
    taken: Mutex<usize>,
    freed: Condvar,
}

/// One place taken, given back when dropped.
#[derive(Debug)]
pub struct Place(Arc<Places>);

impl Drop for Place {
    fn drop(&mut self) {
        let mut taken = self.0.lock();
        *taken = taken.saturating_sub(1);
        drop(taken);
        self.0.freed.notify_one();
    }
}

impl Places {
    /// `total` places (at least one), none taken.
    pub fn new(total: usize) -> Arc<Places> {
        Arc::new(Places {
            total: total.max(1),
            taken: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.taken.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place, once one is free.
    pub fn take(self: &Arc<Self>) -> Place {
        let mut taken = self.lock();
        while *taken >= self.total {
            taken = self
                .freed
                .wait(taken)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *taken += 1;
        Place(self.clone())
    }

    /// Whether a place is free within `wait` (none is taken: a runner
    /// that waits for work leaves free places to children meanwhile).
    pub fn free_within(&self, wait: std::time::Duration) -> bool {
        let (taken, _) = self
            .freed
            .wait_timeout_while(self.lock(), wait, |t| *t >= self.total)
            .unwrap_or_else(PoisonError::into_inner);
        let free = *taken < self.total;
        drop(taken);
        if free {
            // Another waiter may want the news too.
            self.freed.notify_one();
        }
        free
    }

    /// A place if one is free now.
    pub fn try_take(self: &Arc<Self>) -> Option<Place> {
        let mut taken = self.lock();
        (*taken < self.total).then(|| {
            *taken += 1;
            Place(self.clone())
        })
    }

    /// How many places are taken now.
    pub fn taken(&self) -> usize {
        *self.lock()
    }

    /// How many places there are.
    pub fn total(&self) -> usize {
        self.total
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Places>>> = const { RefCell::new(None) };
}

impl Places {
    /// The tasks this thread runs (and their children) count against
    /// `places` from now on (`None`: no bound).
    pub fn enter(places: Option<Arc<Places>>) {
        CURRENT.with(|c| *c.borrow_mut() = places);
    }

    /// The bound this thread's tasks count against, if any.
    pub fn current() -> Option<Arc<Places>> {
        CURRENT.with(|c| c.borrow().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_taken_up_to_the_total_and_given_back_when_dropped() {
        let p = Places::new(2);
        let a = p.take();
        let b = p.try_take().expect("a second place");
        assert!(p.try_take().is_none(), "a third place of two");
        assert_eq!(p.taken(), 2);
        drop(a);
        assert_eq!(p.taken(), 1);
        // A waiter is woken by a place given back on another thread.
        let waiter = {
            let p = p.clone();
            let c = p.take();
            std::thread::spawn(move || {
                let got = p.take();
                drop(got);
                drop(c);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "took a place while none was free");
        drop(b);
        waiter.join().unwrap();
        assert_eq!(p.taken(), 0);
        assert_eq!(Places::new(0).total(), 1);
        // Looking for a free place takes none.
        let one = Places::new(1);
        assert!(one.free_within(std::time::Duration::ZERO));
        assert!(one.free_within(std::time::Duration::ZERO));
        let held = one.take();
        let t = std::time::Instant::now();
        assert!(!one.free_within(std::time::Duration::from_millis(30)));
        assert!(t.elapsed() >= std::time::Duration::from_millis(30));
        drop(held);
        assert!(one.free_within(std::time::Duration::ZERO));
        assert_eq!(one.taken(), 0);
    }

    #[test]
    fn the_bound_is_the_threads_own() {
        let p = Places::new(3);
        Places::enter(Some(p.clone()));
        assert_eq!(Places::current().map(|c| c.total()), Some(3));
        let other = std::thread::spawn(|| Places::current().is_none())
            .join()
            .unwrap();
        assert!(other, "another thread has no bound unless it enters one");
        Places::enter(None);
        assert!(Places::current().is_none());
    }
}
