//! The durable invocation journal: a call is recorded *before* it is sent, so
//! a process that crashes mid-call resumes the same call (same key, same
//! intent) after a restart instead of starting a new one.
//!
//! ```text
//!  prepare (durable, awaited) ──▶ sent(attempts) ──▶ accepted(job id) ──▶ terminal(outcome)
//!       the call is sent only          recorded asynchronously: lookup and
//!       after this write commits       recovery precision, never needed for safety
//! ```
//!
//! The prepared record alone is what prevents a duplicate: it holds the key
//! and the byte-exact intent (the serialized `Invoke` payload), so a
//! restarted process can re-send exactly what the crashed one may have sent,
//! and the runtime deduplicates it. [`Client::recover`](crate::Client::recover)
//! re-drives unfinished records; [`Client::lookup`](crate::Client::lookup)
//! reads what became of a key.
//!
//! Three implementations ship: [`SqliteJournal`] (one file, WAL mode, held
//! exclusively by one client: one host), `PostgresJournal` (feature
//! `postgres`: one database shared by a fleet of workers, each unfinished
//! call owned by one worker under a lease and a fencing generation) and
//! [`MemoryJournal`] (for tests, and for in-process lookups without
//! durability). Any store can implement [`Journal`].
//!
//! One file per concern: [`Journal`] (`store.rs`) is the contract a store
//! implements; `entry.rs`, `outcome.rs` and `write.rs` hold the records it
//! stores and the writes it applies, `discard.rs` what discarding a record
//! writes; `retention.rs` the purge policy and
//! `recovery.rs` the recovery mode; `rows.rs` the column rules the SQL
//! stores share; `memory.rs`, `sqlite/` and `postgres/` the stores;
//! `writer/` the thread that batches the client's writes and the handle
//! the client holds.

mod discard;
mod entry;
mod memory;
mod outcome;
#[cfg(feature = "postgres")]
mod postgres;
mod recovery;
mod redaction;
mod retention;
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
mod rows;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod write;
mod writer;

pub use crate::error::{JournalError, JournalErrorKind};
pub use entry::{JournalEntry, JournalState};
pub use memory::MemoryJournal;
pub use outcome::JournalOutcome;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresJournal, PostgresOptions};
pub use recovery::RecoveryMode;
pub(crate) use redaction::Redaction;
pub use retention::{PurgeReport, Retention};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::{SqliteJournal, SqliteOptions, Synchronous};
pub use store::{ClaimPosition, Journal};
pub use write::JournalWrite;
pub(crate) use writer::{Claimed, DriveGuard, JournalHandle, JournalSetup};
