//! `ImagePipeline`: what every image of an image stream becomes
//! (`zimage::Pipeline`), for the Loader's `record_lens`.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use zimage::{Channels, Crop, Normalize, Pipeline, DEFAULT_MAX_PIXELS};
use zloader::BadImages;

/// An image stream's pipeline: decode (JPEG, PNG, WebP), cut a box (`crop`:
/// `"resize"` the whole image, `"center"` a centre box of `fraction`,
/// `"random"` a random-resized box of `scale` and `ratio`), resize to
/// `height` x `width` (bilinear), mirror on a fair coin when `flip`, and
/// with `mean` and `std` normalise to float32. Each sample's draws come from
/// its seed (seed, step, position in the global batch). With `blank`, a
/// record that is not a decodable image becomes a blank (zero) sample,
/// marked in the batch, instead of failing its step.
#[pyclass(module = "loaderx._native", name = "ImagePipeline", frozen)]
pub struct ImagePipeline {
    pub(crate) inner: Arc<Pipeline>,
    pub(crate) bad: BadImages,
}

#[pymethods]
impl ImagePipeline {
    #[new]
    #[pyo3(signature = (height, width, channels = 3, crop = "resize", fraction = 0.875,
                        scale = (0.08, 1.0), ratio = (0.75, 4.0 / 3.0), flip = false,
                        mean = None, std = None, max_pixels = DEFAULT_MAX_PIXELS, blank = false,
                        draft = false, antialias = true))]
    #[allow(clippy::too_many_arguments)] // Python keywords, one per option.
    fn new(
        height: usize,
        width: usize,
        channels: usize,
        crop: &str,
        fraction: f64,
        scale: (f64, f64),
        ratio: (f64, f64),
        flip: bool,
        mean: Option<Vec<f32>>,
        std: Option<Vec<f32>>,
        max_pixels: usize,
        blank: bool,
        draft: bool,
        antialias: bool,
    ) -> PyResult<Self> {
        let channels = match channels {
            1 => Channels::Gray,
            3 => Channels::Rgb,
            4 => Channels::Rgba,
            n => {
                return Err(PyValueError::new_err(format!(
                    "channels must be 1, 3 or 4, not {n}"
                )))
            }
        };
        let crop = match crop {
            "resize" => Crop::Resize,
            "center" => Crop::Center { fraction },
            "random" => Crop::RandomResized { scale, ratio },
            other => {
                return Err(PyValueError::new_err(format!(
                    "crop must be 'resize', 'center' or 'random', not {other:?}"
                )))
            }
        };
        let normalize = match (mean, std) {
            (None, None) => None,
            (Some(mean), Some(std)) => Some(Normalize { mean, std }),
            _ => return Err(PyValueError::new_err("mean and std go together")),
        };
        let pipeline = Pipeline {
            height,
            width,
            channels,
            crop,
            flip,
            normalize,
            max_pixels,
            draft,
            antialias,
        };
        pipeline
            .validate()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(ImagePipeline {
            inner: Arc::new(pipeline),
            bad: if blank {
                BadImages::Blank
            } else {
                BadImages::Fail
            },
        })
    }

    /// The most pixels an image may declare before it is refused
    /// undecoded, unless the pipeline says otherwise.
    #[classattr]
    const DEFAULT_MAX_PIXELS: usize = DEFAULT_MAX_PIXELS;

    /// Bytes per sample in a batch.
    #[getter]
    fn sample_len(&self) -> usize {
        self.inner.sample_len()
    }
}
