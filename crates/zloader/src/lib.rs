//! Zloader: the engine of the loaderx `DataLoader`.
//!
//! A [`Loader`] walks the steps of a [`zsampler::Sampler`] (or of a
//! [`zsampler::Mixture`] of several sources) in order. For each
//! step it takes the sampler's batch of indices and gathers every
//! [`Stream`] (a zrecord store of fixed-size records — the data, the labels,
//! … — or of variable-length ones, [`Layout::Ragged`]) into
//! [`BatchBuffer`]s, memory recycled from earlier batches, on a pool of
//! worker threads of its own.
//! Finished steps wait in a bounded window and come out strictly in step
//! order, whatever the number of workers, so a run is reproducible from
//! `(seed, step)` alone.
//!
//! ```
//! use std::sync::Arc;
//! use zloader::{Loader, LoaderOptions, Stream};
//! use zrecord::{AppendOptions, Store};
//! use zsampler::{Mode, Sampler};
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().join("data.zr"))?;
//! let records: Vec<u8> = (0..40).collect();
//! store.append_fixed(&records, 10, 4, &AppendOptions::default())?;
//!
//! let sampler = Sampler::new(10, 2, Mode::Sequential, 0).unwrap();
//! let streams = vec![Stream::new(Arc::new(store), 4)];
//! let loader = Loader::new(streams, sampler, LoaderOptions::default())?;
//! let batch = loader.next()?;
//! assert_eq!(batch.step, 0);
//! assert_eq!(batch.indices, [0, 1]);
//! assert_eq!(batch.buffers[0], [0, 1, 2, 3, 4, 5, 6, 7]);
//! loader.close();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
mod error;
mod loader;
mod picker;
mod schedule;
mod stream;

pub use batch::Batch;
pub use error::{LoaderError, Result};
pub use loader::{Loader, LoaderOptions};
pub use stream::{BadImages, Layout, Stream};
/// Batch memory lives in the store crate, which gathers into it on its own
/// too; re-exported because [`Batch`] holds it.
pub use zrecord::BatchBuffer;
