//! Budgets: granted limits against what has been used. The Director
//! consults this before every model call; the model never sees a way around it.

use loop_protocol::{BudgetUse, LimitKind, Limits};

/// Granted limits and their use.
#[derive(Debug, Clone)]
pub struct Budget {
    limits: Limits,
    used: BudgetUse,
    started_ms: u64,
}

impl Budget {
    /// Start counting at `now_ms`.
    pub fn new(limits: Limits, now_ms: u64) -> Self {
        Budget {
            limits,
            used: BudgetUse::default(),
            started_ms: now_ms,
        }
    }

    /// The limits granted.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Use so far, with elapsed time as of `now_ms`.
    pub fn used(&self, now_ms: u64) -> BudgetUse {
        BudgetUse {
            elapsed_ms: now_ms.saturating_sub(self.started_ms),
            ..self.used
        }
    }

    /// Count one model turn and its tokens.
    pub fn charge_turn(&mut self, tokens: u64, usd: f64) {
        self.used.steps += 1;
        self.used.tokens = self.used.tokens.saturating_add(tokens);
        self.used.usd += usd;
    }

    /// Count one verification attempt; returns its number.
    pub fn charge_verification(&mut self) -> u32 {
        self.used.verifications += 1;
        self.used.verifications
    }

    /// Verification attempts so far.
    pub fn verifications(&self) -> u32 {
        self.used.verifications
    }

    /// The first exhausted limit, with a reason, if any. Checked before each
    /// model call: a limit is reached when there is nothing left to spend.
    pub fn exhausted(&self, now_ms: u64) -> Option<(LimitKind, String)> {
        let l = &self.limits;
        let u = self.used(now_ms);
        if u.steps >= l.max_steps {
            return Some((
                LimitKind::Steps,
                format!(
                    "step limit reached: {} of {} model turns used",
                    u.steps, l.max_steps
                ),
            ));
        }
        if u.tokens >= l.max_tokens {
            return Some((
                LimitKind::Tokens,
                format!(
                    "token limit reached: {} of {} tokens used",
                    u.tokens, l.max_tokens
                ),
            ));
        }
        if let Some(max_usd) = l.budget_usd {
            // A zero budget allows only free calls; otherwise spending reaches it.
            let over = if max_usd > 0.0 {
                u.usd >= max_usd
            } else {
                u.usd > 0.0
            };
            if over {
                return Some((
                    LimitKind::Cost,
                    format!("budget reached: ${:.4} of ${max_usd:.2} spent", u.usd),
                ));
            }
        }
        if u.elapsed_ms >= l.timeout_secs.saturating_mul(1000) {
            return Some((
                LimitKind::Time,
                format!(
                    "time limit reached: {:.1}s of {}s elapsed",
                    u.elapsed_ms as f64 / 1000.0,
                    l.timeout_secs
                ),
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_steps: 2,
            max_tokens: 100,
            budget_usd: None,
            timeout_secs: 10,
            max_verifications: 3,
            max_diff_lines: 250,
        }
    }

    #[test]
    fn each_limit_is_reported_by_kind() {
        let mut b = Budget::new(limits(), 1_000);
        assert_eq!(b.exhausted(1_000), None);
        b.charge_turn(10, 0.0);
        b.charge_turn(10, 0.0);
        assert_eq!(b.exhausted(1_000).unwrap().0, LimitKind::Steps);

        let mut b = Budget::new(limits(), 0);
        b.charge_turn(100, 0.0);
        assert_eq!(b.exhausted(0).unwrap().0, LimitKind::Tokens);

        let b = Budget::new(limits(), 0);
        assert_eq!(b.exhausted(9_999), None);
        let (kind, reason) = b.exhausted(10_000).unwrap();
        assert_eq!(kind, LimitKind::Time);
        assert!(reason.contains("10.0s of 10s"), "{reason}");

        let mut b = Budget::new(
            Limits {
                budget_usd: Some(0.5),
                ..limits()
            },
            0,
        );
        b.charge_turn(1, 0.6);
        assert_eq!(b.exhausted(0).unwrap().0, LimitKind::Cost);
    }
}
