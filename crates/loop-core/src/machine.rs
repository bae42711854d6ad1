//! The task state machine: which transitions are legal, and the record of
//! every transition taken.

use loop_protocol::{Event, TaskState};

/// A transition the machine refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid transition {from} → {to}")]
pub struct InvalidTransition {
    /// Current state.
    pub from: TaskState,
    /// Requested state.
    pub to: TaskState,
}

/// Whether `from → to` is a legal transition.
///
/// `Terminal` is reachable from every live state (a budget, a cancel or an
/// error can end a task anywhere), but only `Verifying` can end it
/// *verified*; that distinction is enforced by [`Outcome`](loop_protocol::Outcome)
/// needing an `Acceptance`, and checked again in the driver.
pub fn allowed(from: TaskState, to: TaskState) -> bool {
    use TaskState::*;
    matches!(
        (from, to),
        (Pending, Planning)
            | (Pending, Terminal)
            | (Planning, Acting)
            | (Planning, AwaitingInput)
            | (Planning, Terminal)
            | (Acting, Planning)
            | (Acting, Verifying)
            | (Acting, AwaitingApproval)
            | (Acting, AwaitingInput)
            | (Acting, Terminal)
            | (Verifying, Planning)
            | (Verifying, Terminal)
            | (AwaitingInput, Planning)
            | (AwaitingInput, Terminal)
            | (AwaitingApproval, Acting)
            | (AwaitingApproval, Planning)
            | (AwaitingApproval, Terminal)
    )
}

/// The current state and a counter of transitions taken.
#[derive(Debug, Clone)]
pub struct Machine {
    state: TaskState,
    taken: u32,
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            state: TaskState::Pending,
            taken: 0,
        }
    }
}

impl Machine {
    /// A machine in `Pending`.
    pub fn new() -> Self {
        Self::default()
    }

    /// A machine in `state` after `taken` transitions (a resumed task).
    pub fn restore(state: TaskState, taken: u32) -> Self {
        Machine { state, taken }
    }

    /// Transitions taken so far.
    pub fn taken(&self) -> u32 {
        self.taken
    }

    /// The current state.
    pub fn state(&self) -> TaskState {
        self.state
    }

    /// Take a transition, or refuse it. The returned event is to be recorded.
    pub fn go(
        &mut self,
        to: TaskState,
        reason: impl Into<String>,
    ) -> Result<Event, InvalidTransition> {
        let from = self.state;
        if !allowed(from, to) {
            return Err(InvalidTransition { from, to });
        }
        self.state = to;
        self.taken += 1;
        Ok(Event::Transition {
            n: self.taken,
            from,
            to,
            reason: reason.into(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use TaskState::*;

    #[test]
    fn every_transition_outside_the_table_is_refused() {
        let legal = [
            (Pending, Planning),
            (Pending, Terminal),
            (Planning, Acting),
            (Planning, AwaitingInput),
            (Planning, Terminal),
            (Acting, Planning),
            (Acting, Verifying),
            (Acting, AwaitingApproval),
            (Acting, AwaitingInput),
            (Acting, Terminal),
            (Verifying, Planning),
            (Verifying, Terminal),
            (AwaitingInput, Planning),
            (AwaitingInput, Terminal),
            (AwaitingApproval, Acting),
            (AwaitingApproval, Planning),
            (AwaitingApproval, Terminal),
        ];
        let mut refused = 0;
        for from in TaskState::ALL {
            for to in TaskState::ALL {
                let mut m = Machine {
                    state: from,
                    taken: 0,
                };
                let expected = legal.contains(&(from, to));
                let result = m.go(to, "test");
                assert_eq!(result.is_ok(), expected, "{from} → {to}");
                if expected {
                    assert_eq!(m.state(), to);
                } else {
                    refused += 1;
                    assert_eq!(result.unwrap_err(), InvalidTransition { from, to });
                    assert_eq!(
                        m.state(),
                        from,
                        "a refused transition leaves the state unchanged"
                    );
                }
            }
        }
        assert_eq!(refused, 49 - legal.len());
    }

    #[test]
    fn terminal_is_final_and_self_loops_are_refused() {
        for to in TaskState::ALL {
            assert!(!allowed(Terminal, to), "terminal → {to}");
            assert!(!allowed(to, to), "{to} → {to}");
        }
        assert!(
            !allowed(Pending, Verifying),
            "nothing is verified before work starts"
        );
        assert!(
            !allowed(Planning, Verifying),
            "verification follows an action"
        );
    }

    #[test]
    fn transitions_are_numbered_with_their_reason() {
        let mut m = Machine::new();
        let e1 = m.go(Planning, "start").unwrap();
        let e2 = m.go(Acting, "model proposed").unwrap();
        assert_eq!(
            e1,
            Event::Transition {
                n: 1,
                from: Pending,
                to: Planning,
                reason: "start".into()
            }
        );
        match e2 {
            Event::Transition { n, from, to, .. } => {
                assert_eq!((n, from, to), (2, Planning, Acting))
            }
            other => panic!("{other:?}"),
        }
    }
}
