//! The contract's making and judging: drafted from an instruction
//! (`draft`), judged with no model (`critic`), the checker's judges
//! (`judges`), and the project's patterns (`patterns`).

pub mod critic;
pub mod draft;
pub mod judges;
pub mod patterns;
