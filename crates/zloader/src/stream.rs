//! A stream: one store read in lockstep with the others of a loader.

use std::sync::Arc;

use zrecord::Store;

/// A store of fixed-size records, gathered at every step of a loader. All
/// streams of a loader are indexed by the same sampler indices, so record
/// `i` of every stream belongs to sample `i` (the data and its label).
#[derive(Clone)]
pub struct Stream {
    /// The store; shared, so a loader keeps it open (and free of `delete` and
    /// `compact`, which need it exclusively) for as long as it runs.
    pub store: Arc<Store>,
    /// Bytes of one record: the stride of the gathered buffer. A record
    /// shorter than this leaves zeros after it; a longer one is an error.
    pub record_len: usize,
}

impl Stream {
    pub fn new(store: Arc<Store>, record_len: usize) -> Stream {
        Stream { store, record_len }
    }
}
