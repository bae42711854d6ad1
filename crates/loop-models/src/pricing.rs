//! Prices per million tokens. The built-in table holds list prices the
//! providers published for a few common models; the Loopfile's
//! `models.pricing` overrides or extends it, and a model found in neither is
//! unpriced (cost 0, said in the provenance) — never guessed.

use loop_protocol::Price;
use std::collections::BTreeMap;

/// Built-in list prices, USD per million tokens: (model prefix, input,
/// cached input, output). Longest matching prefix wins.
const BUILT_IN: &[(&str, f64, f64, f64)] = &[
    ("gpt-4o-mini", 0.15, 0.075, 0.60),
    ("gpt-4o", 2.50, 1.25, 10.00),
    ("gpt-4.1-nano", 0.10, 0.025, 0.40),
    ("gpt-4.1-mini", 0.40, 0.10, 1.60),
    ("gpt-4.1", 2.00, 0.50, 8.00),
    ("claude-3-5-haiku", 0.80, 0.08, 4.00),
    ("claude-3-5-sonnet", 3.00, 0.30, 15.00),
    ("claude-3-7-sonnet", 3.00, 0.30, 15.00),
    ("claude-sonnet-4", 3.00, 0.30, 15.00),
    ("claude-opus-4", 15.00, 1.50, 75.00),
    ("deepseek-chat", 0.27, 0.07, 1.10),
];

/// A pricing table: built-in entries plus overrides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pricing {
    overrides: BTreeMap<String, Price>,
}

impl Pricing {
    /// Set (or replace) the price of models starting with `prefix`.
    pub fn set(&mut self, prefix: impl Into<String>, price: Price) {
        self.overrides.insert(prefix.into(), price);
    }

    /// The price for `model`: the longest matching override, else the
    /// longest matching built-in entry, else none.
    pub fn lookup(&self, model: &str) -> Option<Price> {
        let best_override = self
            .overrides
            .iter()
            .filter(|(p, _)| model.starts_with(p.as_str()))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, price)| *price);
        best_override.or_else(|| {
            BUILT_IN
                .iter()
                .filter(|(p, ..)| model.starts_with(p))
                .max_by_key(|(p, ..)| p.len())
                .map(|&(_, i, c, o)| Price {
                    input_per_mtok: i,
                    cached_input_per_mtok: c,
                    output_per_mtok: o,
                })
        })
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use loop_protocol::Usage;

    #[test]
    fn longest_prefix_wins_and_overrides_beat_the_table() {
        let p = Pricing::default();
        assert_eq!(
            p.lookup("gpt-4o-mini-2024-07-18").unwrap().input_per_mtok,
            0.15
        );
        assert_eq!(p.lookup("gpt-4o-2024-08-06").unwrap().input_per_mtok, 2.50);
        assert_eq!(
            p.lookup("smollm2"),
            None,
            "unknown models are unpriced, not guessed"
        );
        let mut p = Pricing::default();
        p.set(
            "gpt-4o",
            Price {
                input_per_mtok: 1.0,
                cached_input_per_mtok: 0.5,
                output_per_mtok: 2.0,
            },
        );
        assert_eq!(p.lookup("gpt-4o-mini").unwrap().input_per_mtok, 1.0);
    }

    #[test]
    fn cost_splits_cached_input() {
        let price = Pricing::default()
            .lookup("claude-sonnet-4-20250514")
            .unwrap();
        let u = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 400_000,
            output_tokens: 100_000,
            ..Usage::default()
        };
        // 600k × $3 + 400k × $0.30 + 100k × $15, per million.
        let want = 1.8 + 0.12 + 1.5;
        assert!((price.cost(&u) - want).abs() < 1e-9, "{}", price.cost(&u));
    }
}
