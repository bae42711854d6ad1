//! What is done with tasks from outside their run: the change set applied,
//! undone or discarded (`changes`), listings and status (`query`), receipts
//! verified and replayed (`receipts`), API tokens (`tokens`), `loop eval`
//! (`eval`), `loop audit` (`audit`), `loop exec` (`exec`), garbage
//! collection (`gc`), triggers (`triggers`) and the project's memory notes
//! (`memory`).

pub mod audit;
pub mod changes;
pub mod chat;
pub mod ci_check;
pub mod eval;
pub mod exec;
pub mod gc;
pub mod github;
pub mod memory;
pub mod query;
pub mod receipts;
pub mod signin;
pub mod tokens;
pub mod triggers;
