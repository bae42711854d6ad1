//! One person, one question at a time: a task and its children (running
//! together on threads of one process) share the person the task's front
//! end asks (a terminal). Each asks through its own [`Turn`]; a question
//! is put to the person only when no other one is open, so an answer
//! typed goes to the question on the screen and never to a child that
//! asked at the same moment. The others wait, in the order they asked,
//! and are put in turn once the open one is settled (answered here, by
//! `loop approve` elsewhere, or by the timeout).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// Who answers a question the task asks (an exec-policy `prompt`, a
/// checkpoint) when it is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnPrompt {
    /// A person at this terminal, asked inline (`loop approve` from
    /// another terminal still works; whichever answers first wins).
    Ask,
    /// Nobody can answer here: deny (the default without a terminal).
    Deny,
    /// Answer yes (`--on-prompt allow`).
    Allow,
    /// Answer yes (`--yes`): as `Allow`, and the record says `--yes`.
    Yes,
    /// Wait for `loop approve`, until the approval timeout.
    Wait,
}

impl std::str::FromStr for OnPrompt {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "deny" => Ok(OnPrompt::Deny),
            "allow" => Ok(OnPrompt::Allow),
            "wait" => Ok(OnPrompt::Wait),
            other => Err(crate::Error::usage(format!(
                "--on-prompt must be deny, allow or wait, not `{other}`"
            ))),
        }
    }
}

impl OnPrompt {
    /// The mode for this process: on a terminal a person is asked, unless
    /// told otherwise; without one, `--on-prompt` (default `deny`).
    pub fn choose(flag: Option<OnPrompt>, yes: bool) -> OnPrompt {
        use std::io::IsTerminal;
        match (flag, yes) {
            (Some(m), _) => m,
            (None, true) => OnPrompt::Yes,
            (None, false) if std::io::stdin().is_terminal() => OnPrompt::Ask,
            (None, false) => OnPrompt::Deny,
        }
    }
}

/// A question put to a person inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Question<'a> {
    /// May this command run?
    Approval {
        /// The task.
        task_id: &'a str,
        /// Its parent, when the task is a child (asked of the person who
        /// runs the parent).
        parent: Option<&'a str>,
        /// The command (or the call's arguments).
        detail: &'a str,
        /// The exec-policy rule that asks.
        rule: &'a str,
    },
    /// May the task go on (with guidance)?
    Checkpoint {
        /// The task.
        task_id: &'a str,
        /// Its parent, when the task is a child.
        parent: Option<&'a str>,
        /// Why it stopped to ask.
        detail: &'a str,
    },
}

/// A person asked inline, as a front end provides one (the CLI: the
/// terminal). Whichever answers first wins: this, or `loop approve` from
/// anywhere.
pub trait Prompter: Send {
    /// Put `question` to the person; lines typed before it are not its
    /// answer.
    fn ask(&mut self, question: &Question<'_>);
    /// What the person typed since, if anything; never blocks.
    fn answer(&mut self) -> Option<String>;
    /// The last answer could not be read; `expected` says what would be.
    fn again(&mut self, expected: &str);
    /// The question last asked is settled (here, elsewhere, or by the
    /// timeout): nothing more is read for it.
    fn settled(&mut self) {}
}

/// A question kept until it can be put (its borrowed parts owned).
#[derive(Debug, Clone)]
struct Kept {
    checkpoint: bool,
    task_id: String,
    parent: Option<String>,
    detail: String,
    rule: String,
}

impl Kept {
    fn of(q: &Question<'_>) -> Kept {
        match *q {
            Question::Approval {
                task_id,
                parent,
                detail,
                rule,
            } => Kept {
                checkpoint: false,
                task_id: task_id.into(),
                parent: parent.map(str::to_string),
                detail: detail.into(),
                rule: rule.into(),
            },
            Question::Checkpoint {
                task_id,
                parent,
                detail,
            } => Kept {
                checkpoint: true,
                task_id: task_id.into(),
                parent: parent.map(str::to_string),
                detail: detail.into(),
                rule: String::new(),
            },
        }
    }

    fn question(&self) -> Question<'_> {
        let parent = self.parent.as_deref();
        if self.checkpoint {
            Question::Checkpoint {
                task_id: &self.task_id,
                parent,
                detail: &self.detail,
            }
        } else {
            Question::Approval {
                task_id: &self.task_id,
                parent,
                detail: &self.detail,
                rule: &self.rule,
            }
        }
    }
}

struct Floor {
    person: Box<dyn Prompter>,
    /// The turn whose question is on the screen.
    open: Option<u64>,
    /// Questions asked while another was open, oldest first.
    waiting: VecDeque<(u64, Kept)>,
    next: u64,
}

impl Floor {
    /// Put the oldest waiting question, if none is open.
    fn put_next(&mut self) {
        if self.open.is_some() {
            return;
        }
        if let Some((turn, kept)) = self.waiting.pop_front() {
            self.open = Some(turn);
            self.person.ask(&kept.question());
        }
    }

    fn settle(&mut self, turn: u64) {
        self.waiting.retain(|(t, _)| *t != turn);
        if self.open == Some(turn) {
            self.open = None;
            self.person.settled();
        }
        self.put_next();
    }
}

/// The person a task's front end asks, shared by the task and its
/// children.
#[derive(Clone)]
pub(crate) struct Person(Arc<Mutex<Floor>>);

impl Person {
    pub fn new(person: Box<dyn Prompter>) -> Person {
        Person(Arc::new(Mutex::new(Floor {
            person,
            open: None,
            waiting: VecDeque::new(),
            next: 0,
        })))
    }

    /// A new asker of this person.
    pub fn turn(&self) -> Turn {
        let mut f = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f.next += 1;
        Turn {
            floor: self.0.clone(),
            id: f.next,
        }
    }
}

/// One asker (a task) of a shared [`Person`].
pub(crate) struct Turn {
    floor: Arc<Mutex<Floor>>,
    id: u64,
}

impl Turn {
    fn floor(&self) -> std::sync::MutexGuard<'_, Floor> {
        self.floor.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Prompter for Turn {
    fn ask(&mut self, question: &Question<'_>) {
        let id = self.id;
        let mut f = self.floor();
        f.waiting.retain(|(t, _)| *t != id);
        match f.open {
            None => {
                f.open = Some(id);
                f.person.ask(question);
            }
            // Asked again (a new question of the same task): put at once.
            Some(open) if open == id => f.person.ask(question),
            Some(_) => f.waiting.push_back((id, Kept::of(question))),
        }
    }

    fn answer(&mut self) -> Option<String> {
        let id = self.id;
        let mut f = self.floor();
        if f.open == Some(id) {
            f.person.answer()
        } else {
            None
        }
    }

    fn again(&mut self, expected: &str) {
        let id = self.id;
        let mut f = self.floor();
        if f.open == Some(id) {
            f.person.again(expected);
        }
    }

    fn settled(&mut self) {
        let id = self.id;
        self.floor().settle(id);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let id = self.id;
        self.floor().settle(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A person who records what was put to them and answers from a list.
    struct Screen {
        shown: Arc<Mutex<Vec<String>>>,
        typed: Arc<Mutex<VecDeque<String>>>,
    }

    impl Prompter for Screen {
        fn ask(&mut self, q: &Question<'_>) {
            let Question::Approval {
                task_id, parent, ..
            } = *q
            else {
                panic!("an approval was asked");
            };
            self.shown
                .lock()
                .unwrap()
                .push(format!("{task_id} of {}", parent.unwrap_or("-")));
        }
        fn answer(&mut self) -> Option<String> {
            self.typed.lock().unwrap().pop_front()
        }
        fn again(&mut self, _: &str) {}
    }

    fn approval<'a>(task_id: &'a str, parent: Option<&'a str>) -> Question<'a> {
        Question::Approval {
            task_id,
            parent,
            detail: "touch x",
            rule: "touch",
        }
    }

    #[test]
    fn a_second_question_waits_until_the_first_is_settled_and_answers_go_to_the_one_shown() {
        let shown = Arc::new(Mutex::new(Vec::new()));
        let typed = Arc::new(Mutex::new(VecDeque::new()));
        let person = Person::new(Box::new(Screen {
            shown: shown.clone(),
            typed: typed.clone(),
        }));
        let (mut a, mut b) = (person.turn(), person.turn());
        a.ask(&approval("child-a", Some("parent")));
        b.ask(&approval("child-b", Some("parent")));
        assert_eq!(*shown.lock().unwrap(), ["child-a of parent"]);
        typed.lock().unwrap().push_back("y".into());
        // b is not on the screen: what was typed is not its answer.
        assert_eq!(b.answer(), None);
        assert_eq!(a.answer().as_deref(), Some("y"));
        assert_eq!(shown.lock().unwrap().len(), 1);
        a.settled();
        assert_eq!(
            *shown.lock().unwrap(),
            ["child-a of parent", "child-b of parent"]
        );
        typed.lock().unwrap().push_back("n".into());
        assert_eq!(a.answer(), None);
        assert_eq!(b.answer().as_deref(), Some("n"));
    }

    #[test]
    fn a_turn_that_ends_without_an_answer_here_lets_the_next_one_ask() {
        let shown = Arc::new(Mutex::new(Vec::new()));
        let person = Person::new(Box::new(Screen {
            shown: shown.clone(),
            typed: Arc::new(Mutex::new(VecDeque::new())),
        }));
        let mut a = person.turn();
        let mut b = person.turn();
        let mut c = person.turn();
        a.ask(&approval("a", None));
        b.ask(&approval("b", Some("a")));
        c.ask(&approval("c", Some("a")));
        // b was answered elsewhere (`loop approve`) before it was shown.
        b.settled();
        // a's run ended (answered elsewhere too, or its thread gone).
        drop(a);
        assert_eq!(*shown.lock().unwrap(), ["a of -", "c of a"]);
    }
}
