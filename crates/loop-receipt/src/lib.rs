//! # loop-receipt
//!
//! The evidence trail of a task: the hash-chained [`ledger`] (written entry
//! by entry, durable before the next step), and the [`receipt`] — an in-toto
//! Statement in a DSSE envelope whose subjects are the artifacts and the
//! ledger file — with offline verification of every layer.

pub mod keys;
pub mod ledger;
pub mod provenance;
pub mod read;
pub mod receipt;

pub use keys::{KeyError, KeyPair, PublicKey, signing_key_path, state_dir};
pub use ledger::{ChainReport, Entries, FileLedger, GENESIS_PREV, LedgerError, verify_chain};
pub use provenance::ContractProvenance;
pub use receipt::{
    ADDENDUM_TYPE, Addenda, Addendum, AddendumFact, Budgets, Change, ChangeSetRecord, ChildCheck,
    Envelope, LedgerRef, NetworkReport, PAYLOAD_TYPE, PREDICATE_TYPE, Predicate, Provenance,
    ReceiptBuilder, ReceiptError, RecordedEgress, STATEMENT_TYPE, SharedEnvironment,
    SignatureStatus, Statement, Subject, VerifyReport, addenda, ledger_digest_named, pae,
    revoked_by_addenda, subject, verify_receipt, write_addendum, write_dsse, write_envelope,
};

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests;
