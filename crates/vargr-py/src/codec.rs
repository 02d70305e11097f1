//! Codecs and the adaptive engine from Python (`vargr.codec`): compress a buffer with a
//! named codec, read a frame back, measure every codec on some data, and ask the
//! engine what pays on a link, as `vargr codec bench` does.
//!
//! Buffers are `bytes`-like objects or numpy arrays; a C-contiguous numpy array is read
//! in place (no copy) and gives the element type (`f64` arrays meet FPC).

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use vargr_codec::{Codec, ElemKind, LinkKey};

use crate::errors;

/// Bytes of a buffer argument, and the element kind a numpy array implies.
pub struct Input {
    owned: Option<Vec<u8>>,
    ptr: *const u8,
    len: usize,
    pub elem: Option<ElemKind>,
}

// SAFETY: the memory is owned, or belongs to an array the caller keeps referenced for
// the duration of the call; it is only read.
unsafe impl Send for Input {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for Input {}

impl Input {
    pub fn of(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
        if let Ok(a) = obj.cast::<PyUntypedArray>() {
            if a.is_c_contiguous() {
                let d = a.dtype();
                let elem = match (d.kind(), d.itemsize()) {
                    (b'i', 1) => Some(ElemKind::I8),
                    (b'u', 1) | (b'b', 1) => Some(ElemKind::U8),
                    (b'i', 2) => Some(ElemKind::I16),
                    (b'u', 2) => Some(ElemKind::U16),
                    (b'i', 4) => Some(ElemKind::I32),
                    (b'u', 4) => Some(ElemKind::U32),
                    (b'i', 8) => Some(ElemKind::I64),
                    (b'u', 8) => Some(ElemKind::U64),
                    (b'f', 4) => Some(ElemKind::F32),
                    (b'f', 8) => Some(ElemKind::F64),
                    _ => None,
                };
                // SAFETY: a live ndarray; its data pointer is read, not written.
                let ptr = unsafe { (*a.as_array_ptr()).fields.data } as *const u8;
                return Ok(Input {
                    owned: None,
                    ptr,
                    len: a.len() * d.itemsize(),
                    elem,
                });
            }
        }
        let b = match obj.cast::<PyBytes>() {
            Ok(b) => b.as_bytes().to_vec(),
            Err(_) => {
                let b = obj.py().get_type::<PyBytes>().call1((obj,)).map_err(|_| {
                    PyTypeError::new_err("expected bytes, a buffer or a numpy array")
                })?;
                b.cast::<PyBytes>()?.as_bytes().to_vec()
            }
        };
        Ok(Input {
            ptr: b.as_ptr(),
            len: b.len(),
            owned: Some(b),
            elem: None,
        })
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.owned {
            Some(v) => v,
            // SAFETY: see `unsafe impl Send`.
            None if self.len == 0 => &[],
            None => unsafe { std::slice::from_raw_parts(self.ptr, self.len) },
        }
    }
}

fn elem_arg(elem: Option<&str>, input: &Input) -> PyResult<ElemKind> {
    match elem {
        Some(e) => e.parse::<ElemKind>().map_err(|e| errors::codec(e.into())),
        None => Ok(input.elem.unwrap_or(ElemKind::BYTES)),
    }
}

fn codec_arg(name: &str) -> PyResult<Codec> {
    name.parse().map_err(errors::codec)
}

/// Compresses `data` with `codec` (`lz4`, `zstd:3`, `fpc`, `shuffle-zstd:1`, …) into a
/// self-describing frame; incompressible data is framed raw. `elem` says what the bytes
/// hold (`f64`, `i32`, …; default: the numpy dtype, else bytes).
#[pyfunction]
#[pyo3(signature = (data, codec = "lz4", elem = None))]
pub fn compress<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    codec: &str,
    elem: Option<&str>,
) -> PyResult<Bound<'py, PyBytes>> {
    let input = Input::of(data)?;
    let elem = elem_arg(elem, &input)?;
    let codec = codec_arg(codec)?;
    if !codec.supports(elem) {
        return Err(errors::new_err(
            errors::Kind::Codec,
            format!("{codec} does not handle {elem} elements"),
        ));
    }
    let out = py.detach(|| vargr_codec::encode_to_vec(codec, elem, input.bytes()));
    Ok(PyBytes::new(py, &out))
}

/// The original bytes of a frame made by `compress` (or by a codec stage). Refuses a
/// frame announcing more than `max_len` bytes before allocating anything.
#[pyfunction]
#[pyo3(signature = (frame, max_len = 1 << 30))]
pub fn decompress<'py>(
    py: Python<'py>,
    frame: &Bound<'py, PyAny>,
    max_len: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let input = Input::of(frame)?;
    let (_, out) = py
        .detach(|| vargr_codec::decode_to_vec(input.bytes(), max_len))
        .map_err(errors::codec)?;
    Ok(PyBytes::new(py, &out))
}

/// A frame's header: {"codec", "elem", "original_len", "frame_len"}.
#[pyfunction]
pub fn frame_info<'py>(py: Python<'py>, frame: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let input = Input::of(frame)?;
    let (h, _) = vargr_codec::Header::parse(input.bytes()).map_err(errors::codec)?;
    let d = PyDict::new(py);
    d.set_item("codec", h.codec.name())?;
    d.set_item("elem", h.elem.name())?;
    d.set_item("original_len", h.original_len)?;
    d.set_item("frame_len", input.bytes().len())?;
    Ok(d)
}

/// The codecs the engine and the benchmarks try, by name.
#[pyfunction]
pub fn codecs() -> Vec<String> {
    Codec::CATALOG.iter().map(|c| c.to_string()).collect()
}

fn measures_to_py<'py>(
    py: Python<'py>,
    ms: &[vargr_codec::CodecMeasure],
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for m in ms {
        let d = PyDict::new(py);
        d.set_item("codec", m.codec.to_string())?;
        d.set_item("original_len", m.original_len)?;
        d.set_item("compressed_len", m.compressed_len)?;
        d.set_item("ratio", m.ratio)?;
        d.set_item("compress_mb_s", m.compress_mb_s)?;
        d.set_item("decompress_mb_s", m.decompress_mb_s)?;
        d.set_item("verified", m.verified)?;
        out.append(d)?;
    }
    Ok(out)
}

/// Ratio and speed (MB/s of original data) of every codec that fits `elem` on `data`.
#[pyfunction]
#[pyo3(signature = (data, elem = None))]
pub fn measure<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    elem: Option<&str>,
) -> PyResult<Bound<'py, PyList>> {
    let input = Input::of(data)?;
    let elem = elem_arg(elem, &input)?;
    let ms = py.detach(|| vargr_codec::measure_all(input.bytes(), elem));
    measures_to_py(py, &ms)
}

fn link_model(bandwidth: Option<&str>, latency: &str) -> PyResult<vargr_codec::LinkModel> {
    let bps = match bandwidth {
        Some(b) => vargr_emu::parse_bandwidth(b)
            .map_err(|e| PyValueError::new_err(format!("bandwidth {b:?}: {e}")))?,
        None => None,
    };
    let lat = vargr_emu::parse_duration(latency)
        .map_err(|e| PyValueError::new_err(format!("latency {latency:?}: {e}")))?;
    Ok(vargr_codec::stage::link_model(lat, bps))
}

/// The runtime adaptive compression engine (CoMPI's strategy): it studies each (link,
/// element type) by compressing samples with every candidate, prices them with a model
/// of the link and the codecs' speeds, and decides per message.
///
/// `Engine(bandwidth="100mbit", latency="1ms")` describes link 0; other links are
/// described with `set_link` or learned with `observe_transfer`.
#[pyclass(module = "vargr.codec", name = "Engine")]
pub struct PyEngine {
    inner: vargr_codec::Engine,
}

#[pymethods]
impl PyEngine {
    #[new]
    #[pyo3(signature = (bandwidth = None, latency = "0ms"))]
    fn new(bandwidth: Option<&str>, latency: &str) -> PyResult<PyEngine> {
        let mut inner = vargr_codec::Engine::new(vargr_codec::EngineConfig::default())
            .map_err(errors::codec)?;
        inner.set_link_model(LinkKey(0), link_model(bandwidth, latency)?);
        Ok(PyEngine { inner })
    }

    /// Describes link `link`: bandwidth (`100mbit`, `1gbit`, `50MB/s`; None: unlimited)
    /// and one-way latency (`1ms`, `150us`).
    #[pyo3(signature = (link, bandwidth = None, latency = "0ms"))]
    fn set_link(&mut self, link: u64, bandwidth: Option<&str>, latency: &str) -> PyResult<()> {
        self.inner
            .set_link_model(LinkKey(link), link_model(bandwidth, latency)?);
        Ok(())
    }

    /// Tells the engine that `nbytes` took `seconds` to cross `link`.
    fn observe_transfer(&mut self, link: u64, nbytes: usize, seconds: f64) {
        self.inner.observe_transfer(LinkKey(link), nbytes, seconds);
    }

    /// Seeds the codecs' figures for `data`'s element type from measurements on it
    /// (what a codec stage does at start-up).
    #[pyo3(signature = (data, elem = None))]
    fn calibrate(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        elem: Option<&str>,
    ) -> PyResult<()> {
        let input = Input::of(data)?;
        let elem = elem_arg(elem, &input)?;
        let ms = py.detach(|| vargr_codec::measure_all(input.bytes(), elem));
        self.inner.calibrate_codecs(elem, &ms);
        Ok(())
    }

    /// The engine's decision for sending `data` over `link`: (codec name, reason).
    #[pyo3(signature = (data, elem = None, link = 0, backlog = 0.0))]
    fn decide(
        &mut self,
        data: &Bound<'_, PyAny>,
        elem: Option<&str>,
        link: u64,
        backlog: f64,
    ) -> PyResult<(String, String)> {
        let input = Input::of(data)?;
        let elem = elem_arg(elem, &input)?;
        let d = self
            .inner
            .decide_behind(LinkKey(link), elem, input.bytes(), backlog.max(0.0));
        Ok((d.codec.to_string(), format!("{:?}", d.reason)))
    }

    /// Compresses `data` with the codec the engine picks for `link` (raw-framed when
    /// nothing pays); `decompress` reads it back.
    #[pyo3(signature = (data, elem = None, link = 0))]
    fn compress<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        elem: Option<&str>,
        link: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let input = Input::of(data)?;
        let elem = elem_arg(elem, &input)?;
        let d = self.inner.decide(LinkKey(link), elem, input.bytes());
        let out = py.detach(|| vargr_codec::encode_to_vec(d.codec, elem, input.bytes()));
        Ok(PyBytes::new(py, &out))
    }

    /// What the engine thinks of (link, element type), or None before any message.
    #[pyo3(signature = (link = 0, elem = "u8"))]
    fn summary<'py>(
        &self,
        py: Python<'py>,
        link: u64,
        elem: &str,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let elem: ElemKind = elem
            .parse()
            .map_err(|e: vargr_wire::ParseElemError| errors::codec(e.into()))?;
        let Some(s) = self.inner.summary(LinkKey(link), elem) else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("codec", s.codec.map(|c| c.to_string()))?;
        d.set_item("raw_below", s.raw_below)?;
        d.set_item(
            "compress_from",
            (s.compress_from != usize::MAX).then_some(s.compress_from),
        )?;
        d.set_item("messages", s.messages)?;
        d.set_item("studies", s.studies)?;
        d.set_item("forced_studies", s.forced_studies)?;
        d.set_item("disabled", s.disabled)?;
        Ok(Some(d))
    }
}

/// What the adaptive engine picks for one message of `data` on a link of `bandwidth`
/// and `latency`, after measuring every codec on it (`vargr codec bench`'s engine
/// line): {"codec", "reason", "measures"}.
#[pyfunction]
#[pyo3(signature = (data, elem = None, bandwidth = "100mbit", latency = "0ms"))]
pub fn choose<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    elem: Option<&str>,
    bandwidth: Option<&str>,
    latency: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let input = Input::of(data)?;
    let elem = elem_arg(elem, &input)?;
    let model = link_model(bandwidth, latency)?;
    let (decision, ms) = py
        .detach(|| -> Result<_, vargr_codec::CodecError> {
            let mut e = vargr_codec::Engine::new(vargr_codec::EngineConfig::default())?;
            e.set_link_model(LinkKey(0), model);
            let ms = vargr_codec::measure_all(input.bytes(), elem);
            e.calibrate_codecs(elem, &ms);
            Ok((e.decide(LinkKey(0), elem, input.bytes()), ms))
        })
        .map_err(errors::codec)?;
    let d = PyDict::new(py);
    d.set_item("codec", decision.codec.to_string())?;
    d.set_item("reason", format!("{:?}", decision.reason))?;
    d.set_item("measures", measures_to_py(py, &ms)?)?;
    Ok(d)
}

/// Registers the `vargr._vargr.codec` submodule.
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "codec")?;
    m.add_function(wrap_pyfunction!(compress, &m)?)?;
    m.add_function(wrap_pyfunction!(decompress, &m)?)?;
    m.add_function(wrap_pyfunction!(frame_info, &m)?)?;
    m.add_function(wrap_pyfunction!(codecs, &m)?)?;
    m.add_function(wrap_pyfunction!(measure, &m)?)?;
    m.add_function(wrap_pyfunction!(choose, &m)?)?;
    m.add_class::<PyEngine>()?;
    parent.add_submodule(&m)?;
    Ok(())
}
