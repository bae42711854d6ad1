//! Budgets: granted limits against what has been used. The Director
//! consults this before every model call; the model never sees a way around it.

use loop_protocol::{BudgetUse, CallLimits, LimitKind, Limits, Price, Usage};

/// The fewest completion tokens worth asking a model for.
pub const MIN_OUTPUT_TOKENS: u64 = 32;

/// Granted limits and their use.
#[derive(Debug, Clone)]
pub struct Budget {
    limits: Limits,
    used: BudgetUse,
    started_ms: u64,
    /// Wall time not charged (waits for a person, with `pause_clock`).
    paused_ms: u64,
}

impl Budget {
    /// Start counting at `now_ms`.
    pub fn new(limits: Limits, now_ms: u64) -> Self {
        Budget {
            limits,
            used: BudgetUse::default(),
            started_ms: now_ms,
            paused_ms: 0,
        }
    }

    /// Grant more: the limits grow by these amounts (the contract's own
    /// limits, which its hash locks, do not change).
    pub fn extend(&mut self, add_steps: u32, add_tokens: u64, add_usd: f64, add_secs: u64) {
        let l = &mut self.limits;
        l.max_steps = l.max_steps.saturating_add(add_steps);
        l.max_tokens = l.max_tokens.saturating_add(add_tokens);
        if add_usd > 0.0 {
            l.budget_usd = Some(l.budget_usd.unwrap_or(0.0) + add_usd);
        }
        l.timeout_secs = l.timeout_secs.saturating_add(add_secs);
    }

    /// The limits granted.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Do not charge `ms` of wall time (a wait for a person).
    pub fn pause(&mut self, ms: u64) {
        self.paused_ms = self.paused_ms.saturating_add(ms);
    }

    fn elapsed_ms(&self, now_ms: u64) -> u64 {
        now_ms
            .saturating_sub(self.started_ms)
            .saturating_sub(self.paused_ms)
    }

    /// Use so far, with elapsed time as of `now_ms`.
    pub fn used(&self, now_ms: u64) -> BudgetUse {
        BudgetUse {
            elapsed_ms: self.elapsed_ms(now_ms),
            ..self.used
        }
    }

    /// Count one model turn and what it cost, as the provider reported it.
    pub fn charge_turn(&mut self, usage: &Usage) {
        self.used.steps += 1;
        self.charge_review(usage);
    }

    /// Count what a call cost without taking a step (the checker's review).
    pub fn charge_review(&mut self, usage: &Usage) {
        self.charge_child(&BudgetUse {
            tokens: usage.total(),
            input_tokens: usage.input_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            output_tokens: usage.output_tokens,
            estimated: usage.estimated,
            usd: usage.cost_usd,
            model_calls: usage.attempts,
            ..BudgetUse::default()
        });
    }

    /// Count what a child task used (the `delegate` tool) against this
    /// task's budget: its steps, tokens, dollars and model calls (its wall
    /// time is this task's own, spent waiting for it). Every other charge
    /// but a step's comes through here too.
    pub fn charge_child(&mut self, child: &BudgetUse) {
        let u = &mut self.used;
        u.steps = u.steps.saturating_add(child.steps);
        u.tokens = u.tokens.saturating_add(child.tokens);
        u.input_tokens = u.input_tokens.saturating_add(child.input_tokens);
        u.cached_input_tokens = u
            .cached_input_tokens
            .saturating_add(child.cached_input_tokens);
        u.output_tokens = u.output_tokens.saturating_add(child.output_tokens);
        u.estimated |= child.estimated;
        u.usd += child.usd;
        u.model_calls = u.model_calls.saturating_add(child.model_calls);
    }

    /// What a child could still be given at `now_ms`: the limits less what
    /// was used (a child's use included), and `children` more to start.
    pub fn left_for_child(&self, now_ms: u64, children: u32) -> loop_protocol::delegation::Left {
        let (l, u) = (&self.limits, self.used(now_ms));
        loop_protocol::delegation::Left {
            steps: l.max_steps.saturating_sub(u.steps),
            tokens: l.max_tokens.saturating_sub(u.tokens),
            usd: l.budget_usd.map(|b| (b - u.usd).max(0.0)),
            secs: self.time_left_ms(now_ms) / 1000,
            children,
        }
    }

    /// Milliseconds left of the wall-time budget at `now_ms`.
    pub fn time_left_ms(&self, now_ms: u64) -> u64 {
        self.limits
            .timeout_secs
            .saturating_mul(1000)
            .saturating_sub(self.elapsed_ms(now_ms))
    }

    /// Limits for the next model call: its context needs about
    /// `context_tokens`, it would like `want_output` completion tokens, and
    /// `reserve` tokens must stay unspent (kept for review and verification
    /// feedback). The completion is clamped to what remains of the token and
    /// dollar budgets; when not even a minimal call fits, the limit is reached
    /// now, before anything is spent.
    pub fn call_limits(
        &self,
        context_tokens: u64,
        want_output: u64,
        price: Option<Price>,
        reserve: u64,
    ) -> Result<CallLimits, (LimitKind, String)> {
        let l = &self.limits;
        let left = l
            .max_tokens
            .saturating_sub(self.used.tokens)
            .saturating_sub(reserve);
        let need = context_tokens.saturating_add(MIN_OUTPUT_TOKENS);
        if left < need {
            return Err((
                LimitKind::Tokens,
                format!(
                    "token limit reached: the next call needs about {need} tokens ({context_tokens} of context), \
                     {left} remain of {} ({} used, {reserve} reserved)",
                    l.max_tokens, self.used.tokens
                ),
            ));
        }
        let mut max_out = want_output.min(left - context_tokens);
        if let (Some(max_usd), Some(p)) = (l.budget_usd, price) {
            let left_usd = max_usd - self.used.usd;
            let input_cost = context_tokens as f64 * p.input_per_mtok / 1e6;
            let out_cost = MIN_OUTPUT_TOKENS as f64 * p.output_per_mtok / 1e6;
            if input_cost + out_cost > left_usd {
                return Err((
                    LimitKind::Cost,
                    format!(
                        "budget reached: the next call would cost about ${:.6}, ${:.6} of ${max_usd:.2} remain",
                        input_cost + out_cost,
                        left_usd.max(0.0)
                    ),
                ));
            }
            if p.output_per_mtok > 0.0 {
                let affordable = ((left_usd - input_cost) / p.output_per_mtok * 1e6).floor() as u64;
                max_out = max_out.min(affordable);
            }
        }
        Ok(CallLimits {
            max_output_tokens: max_out,
            time_left_ms: None,
        })
    }

    /// Count one verification attempt; returns its number.
    pub fn charge_verification(&mut self) -> u32 {
        self.used.verifications += 1;
        self.used.verifications
    }

    /// Dollars spent so far.
    pub fn usd_spent(&self) -> f64 {
        self.used.usd
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
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
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
            max_file_bytes: loop_protocol::contract::DEFAULT_MAX_FILE_BYTES,
            disk_mb: loop_protocol::contract::DEFAULT_DISK_MB,
            write_mb: loop_protocol::contract::DEFAULT_WRITE_MB,
            ..Limits::default()
        }
    }

    fn tokens(n: u64, usd: f64) -> Usage {
        Usage {
            input_tokens: n,
            cost_usd: usd,
            attempts: 1,
            ..Usage::default()
        }
    }

    #[test]
    fn calls_are_clamped_to_what_remains_and_refused_before_spending() {
        let mut b = Budget::new(
            Limits {
                max_tokens: 1_000,
                max_steps: 100,
                ..limits()
            },
            0,
        );
        // Plenty left: the model gets what it asked for.
        assert_eq!(
            b.call_limits(100, 256, None, 0).unwrap().max_output_tokens,
            256
        );
        // 700 used: 300 left, 100 of context, 150 reserved -> 50 for output.
        b.charge_turn(&tokens(700, 0.0));
        assert_eq!(
            b.call_limits(100, 256, None, 150)
                .unwrap()
                .max_output_tokens,
            50
        );
        // Not even a minimal call fits: refused, nothing spent.
        let (kind, reason) = b.call_limits(280, 256, None, 0).unwrap_err();
        assert_eq!(kind, LimitKind::Tokens);
        assert!(reason.contains("needs about 312 tokens"), "{reason}");
        assert_eq!(b.used(0).tokens, 700);

        // Dollars: $1/M in, $10/M out, $0.001 left after $0.009 spent.
        let price = Price {
            input_per_mtok: 1.0,
            cached_input_per_mtok: 0.1,
            output_per_mtok: 10.0,
        };
        let mut b = Budget::new(
            Limits {
                budget_usd: Some(0.01),
                max_tokens: 1_000_000,
                ..limits()
            },
            0,
        );
        b.charge_turn(&tokens(0, 0.009));
        // 200 input tokens cost $0.0002; $0.0008 buys 80 output tokens.
        assert_eq!(
            b.call_limits(200, 4096, Some(price), 0)
                .unwrap()
                .max_output_tokens,
            80
        );
        let (kind, _) = b.call_limits(900, 4096, Some(price), 0).unwrap_err();
        assert_eq!(kind, LimitKind::Cost);
    }

    #[test]
    fn each_limit_is_reported_by_kind() {
        let mut b = Budget::new(limits(), 1_000);
        assert_eq!(b.exhausted(1_000), None);
        b.charge_turn(&tokens(10, 0.0));
        b.charge_turn(&tokens(10, 0.0));
        assert_eq!(b.exhausted(1_000).unwrap().0, LimitKind::Steps);

        let mut b = Budget::new(limits(), 0);
        b.charge_turn(&tokens(100, 0.0));
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
        b.charge_turn(&tokens(1, 0.6));
        assert_eq!(b.exhausted(0).unwrap().0, LimitKind::Cost);
    }
}
