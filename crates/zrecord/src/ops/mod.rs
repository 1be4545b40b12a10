//! The store's operations, each an `impl Store` block of its own: append
//! (the commit protocol) and the encoding it starts with, gather (the hot
//! read path), delete, compact, verify and stats.

pub(crate) mod append;
pub(crate) mod compact;
pub(crate) mod delete;
pub(crate) mod encode;
pub(crate) mod gather;
pub(crate) mod stats;
pub(crate) mod verified_records;
pub(crate) mod verify;
