//! `loaderx._native`: the Python bindings of loaderx.
//!
//! Thin by design: argument checking (`convert`), GIL release and error
//! conversion (`error`) around the engine crates zrecord, zsampler and
//! zloader, which know nothing of Python. One file per Python class.

mod batch_array;
mod batch_message;
mod collection;
mod convert;
mod error;
mod image;
mod loader;
mod mixture;
mod packing;
mod record_reads;
mod sampler;
mod zrecord;

/// Native core of loaderx: the Zrecord store, the Sampler and the Loader
/// behind DataLoader.
#[pyo3::pymodule]
mod _native {
    use pyo3::prelude::*;

    #[pymodule_export]
    use crate::batch_array::{array_address, BatchMemory};
    #[pymodule_export]
    use crate::batch_message::{message_places, pack_batch, shared_place, unpack_batch};
    #[pymodule_export]
    use crate::collection::{Collection, CollectionWriter};
    #[pymodule_export]
    use crate::error::ZrecordError;
    #[pymodule_export]
    use crate::image::ImagePipeline;
    #[pymodule_export]
    use crate::loader::Loader;
    #[pymodule_export]
    use crate::mixture::MixtureSampler;
    #[pymodule_export]
    use crate::packing::pack;
    #[pymodule_export]
    use crate::sampler::Sampler;
    #[pymodule_export]
    use crate::zrecord::Zrecord;

    /// Threads one gather may use, which is also the most worker threads a
    /// Loader starts: the cores, or RAYON_NUM_THREADS where it is set.
    #[pyfunction]
    fn gather_threads() -> usize {
        ::zrecord::gather_threads()
    }

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("MAX_RECORD_LEN", ::zrecord::MAX_RECORD_LEN)?;
        m.add("MAX_RECORDS", ::zrecord::MAX_RECORDS)?;
        m.add("V1_MAX_RECORD_LEN", ::zrecord::V1_MAX_RECORD_LEN)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("BATCH_ALIGN", crate::batch_message::ALIGN)?;
        m.add("PLACE_WRITTEN", crate::batch_message::WRITTEN)?;
        m.add("PLACE_CAME_IN", crate::batch_message::CAME_IN)?;
        m.add("PLACE_SHARED", crate::batch_message::SHARED)?;
        crate::error::add_kinds(m)?;
        Ok(())
    }
}
