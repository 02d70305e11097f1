//! Redundancy elimination from Python (`vargr.dedup`): cut a byte stream into
//! content-defined segments, fingerprint them, and run the two-level fingerprint
//! protocol between an in-memory sender and receiver to see what a transfer costs
//! given everything sent before (what `vargr sync` and a dedup link stage send).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use vargr_dedup::cache::MemCache;
use vargr_dedup::{Config, Fingerprint, FpBits, Receiver, Segmenter, Sender};

use crate::codec::Input;
use crate::errors;

fn segmenter(spec: &str) -> PyResult<Box<dyn Segmenter>> {
    vargr_dedup::by_name(spec).map_err(errors::dedup)
}

fn read_data(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
    // A path (str or os.PathLike) is read; anything else is a buffer.
    if obj.cast::<numpy::PyUntypedArray>().is_err() && obj.cast::<PyBytes>().is_err() {
        if let Ok(p) = obj.extract::<std::path::PathBuf>() {
            let data = std::fs::read(&p)
                .map_err(|e| errors::dedup(format!("reading {}: {e}", p.display())))?;
            let py = obj.py();
            return Input::of(PyBytes::new(py, &data).as_any());
        }
    }
    Input::of(obj)
}

/// The segments of `data` (bytes, a buffer, or a file path) as (offset, length) pairs,
/// cut by `segmenter` (`cdc`, `cdc:MIN:AVG:MAX`, `static:4k`, `sw`; byte-stream
/// segmenters only).
#[pyfunction]
#[pyo3(signature = (data, segmenter = "cdc"))]
pub fn segment(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    segmenter: &str,
) -> PyResult<Vec<(usize, usize)>> {
    let seg = self::segmenter(segmenter)?;
    let input = read_data(data)?;
    let ends = py
        .detach(|| seg.boundaries(input.bytes(), true))
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "{segmenter} cuts images or arrays, not byte streams: use cdc, static or sw"
            ))
        })?;
    let mut start = 0;
    Ok(ends
        .into_iter()
        .map(|end| {
            let r = (start, end - start);
            start = end;
            r
        })
        .collect())
}

/// The 64-bit fingerprint (xxh3) vargr names `segment` by, cut to `bits` if given (the
/// protocol sends 40 bits by default).
#[pyfunction]
#[pyo3(signature = (segment, bits = None))]
pub fn fingerprint(segment: &Bound<'_, PyAny>, bits: Option<u8>) -> PyResult<u64> {
    let input = Input::of(segment)?;
    let fp = Fingerprint::full(input.bytes());
    Ok(match bits {
        None => fp.0,
        Some(b) => {
            let bits = FpBits::new(b)
                .ok_or_else(|| PyValueError::new_err(format!("bits {b}: expected 16..=64")))?;
            fp.truncate(bits).0
        }
    })
}

/// A sender and a receiver that share a history, in memory: `transfer(data)` sends one
/// message through the two-level fingerprint protocol, checks that the receiver rebuilt
/// it byte for byte, and says what crossed. Repeated content costs fingerprints; new
/// content similar to old crosses as deltas.
#[pyclass(module = "vargr.dedup", name = "Session")]
pub struct PySession {
    tx: Sender<MemCache>,
    rx: Receiver<MemCache>,
    seg: Box<dyn Segmenter>,
    next_channel: u32,
}

#[pymethods]
impl PySession {
    #[new]
    #[pyo3(signature = (segmenter = "cdc", cache_bytes = 256 << 20, bits = 40, group = 20))]
    fn new(segmenter: &str, cache_bytes: u64, bits: u8, group: u32) -> PyResult<PySession> {
        let fb = FpBits::new(bits)
            .ok_or_else(|| PyValueError::new_err(format!("bits {bits}: expected 16..=64")))?;
        let config = Config {
            bits: fb,
            group,
            ..Config::default()
        };
        Ok(PySession {
            tx: Sender::new(config, MemCache::new(fb, cache_bytes)).map_err(errors::dedup)?,
            rx: Receiver::new(config, MemCache::new(fb, cache_bytes)).map_err(errors::dedup)?,
            seg: self::segmenter(segmenter)?,
            next_channel: 0,
        })
    }

    /// Sends `data` (bytes, a buffer or a file path) and returns {"bytes", "wire_bytes"
    /// (sender to receiver), "back_bytes" (requests and acknowledgements), "segments",
    /// "ratio" (bytes / wire_bytes)}.
    fn transfer<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let input = read_data(data)?;
        let channel = self.next_channel;
        self.next_channel = self.next_channel.wrapping_add(1);
        let PySession { tx, rx, seg, .. } = self;
        let (wire, back, nseg) = py
            .detach(|| transfer(tx, rx, seg.as_ref(), channel, input.bytes()))
            .map_err(errors::dedup)?;
        let d = PyDict::new(py);
        let n = input.bytes().len();
        d.set_item("bytes", n)?;
        d.set_item("wire_bytes", wire)?;
        d.set_item("back_bytes", back)?;
        d.set_item("segments", nseg)?;
        d.set_item(
            "ratio",
            if wire == 0 {
                0.0
            } else {
                n as f64 / wire as f64
            },
        )?;
        Ok(d)
    }

    /// The sender's counters since the session began (pushed, fingerprinted, deltas,
    /// requested, collisions, overhead_bytes, …).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = serde_json::to_string(self.tx.stats())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        py.import("json")?.call_method1("loads", (text,))
    }
}

/// One message through the protocol; returns (forward bytes, backward bytes, segments).
fn transfer(
    tx: &mut Sender<MemCache>,
    rx: &mut Receiver<MemCache>,
    seg: &dyn Segmenter,
    channel: u32,
    data: &[u8],
) -> Result<(usize, usize, usize), String> {
    let cut = seg
        .cut(data, &vargr_dedup::Shape::Bytes)
        .map_err(|e| e.to_string())?;
    let segs: Vec<&[u8]> = cut.segments.iter().map(|s| s.as_ref()).collect();
    tx.send_message(channel, &cut.layout, &segs)
        .map_err(|e| e.to_string())?;
    tx.flush();
    let (mut wire, mut back) = (0, 0);
    let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
    let mut delivered = None;
    // Each round trip answers the previous one's requests; a handful always suffice.
    for _ in 0..1000 {
        tx.take_output(&mut fwd);
        wire += fwd.len();
        rx.handle_input(&fwd).map_err(|e| e.to_string())?;
        fwd.clear();
        while let Some(d) = rx.poll_delivered() {
            let parts: Vec<&[u8]> = d.segments.iter().map(|b| b.as_ref()).collect();
            let mut out = Vec::with_capacity(d.len());
            seg.reassemble(&d.layout, &parts, &mut out)
                .map_err(|e| e.to_string())?;
            delivered = Some(out);
        }
        rx.take_output(&mut bwd);
        back += bwd.len();
        if bwd.is_empty() && tx.is_idle() {
            break;
        }
        tx.handle_input(&bwd).map_err(|e| e.to_string())?;
        bwd.clear();
    }
    match delivered {
        Some(out) if out == data => Ok((wire, back, segs.len())),
        Some(out) => Err(format!(
            "the receiver rebuilt {} bytes that differ from the {} sent",
            out.len(),
            data.len()
        )),
        None => Err("the receiver did not deliver the message".into()),
    }
}

/// Registers the `vargr._vargr.dedup` submodule.
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "dedup")?;
    m.add_function(wrap_pyfunction!(segment, &m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint, &m)?)?;
    m.add_class::<PySession>()?;
    parent.add_submodule(&m)?;
    Ok(())
}
