//! Packets and their values: MRNet format strings between Python objects and
//! [`vargr_wire::Value`]s.
//!
//! Numeric arrays arrive as numpy arrays that own the received `Vec` (no copy: numpy
//! takes the vector's memory). Going out, a numpy array of the field's type is copied
//! once into the packet (the wire encoder needs the elements in a `Vec`); lists, tuples
//! and arrays of another numeric type are converted element by element, refusing
//! conversions that lose information (float to int).

use bytes::Bytes;
use numpy::{
    dtype, Element, PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use vargr_wire::{Elem, Field, Format, Packet, Value};

use crate::errors::{self, Kind};

/// A numeric array field from any array-like: a numpy array of the type (one copy), of
/// another numeric type (cast where no information is lost), or a sequence.
fn array_of<T>(obj: &Bound<'_, PyAny>) -> PyResult<Vec<T>>
where
    T: Element + Copy + for<'py> pyo3::conversion::FromPyObjectOwned<'py>,
{
    let py = obj.py();
    if let Ok(a) = obj.cast::<PyArrayDyn<T>>() {
        let ro = a.readonly();
        if a.is_c_contiguous() {
            if let Ok(s) = ro.as_slice() {
                return Ok(s.to_vec());
            }
        }
        return Ok(ro.as_array().iter().copied().collect());
    }
    if obj.cast::<PyUntypedArray>().is_ok() {
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("casting", "same_kind")?;
        let cast = obj.call_method("astype", (dtype::<T>(py),), Some(&kw))?;
        return array_of::<T>(&cast);
    }
    obj.extract::<Vec<T>>()
}

/// Raw bytes from anything with the buffer protocol or `bytes()`.
fn raw_of(obj: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    let b = obj.py().get_type::<PyBytes>().call1((obj,))?;
    let b = b.cast::<PyBytes>()?;
    Ok(Bytes::copy_from_slice(b.as_bytes()))
}

macro_rules! numeric {
    ($elem:expr, $obj:expr, scalar) => {
        match $elem {
            Elem::Char => $obj.extract::<i8>().map(Value::Char),
            Elem::UChar => $obj.extract::<u8>().map(Value::UChar),
            Elem::Short => $obj.extract::<i16>().map(Value::Short),
            Elem::UShort => $obj.extract::<u16>().map(Value::UShort),
            Elem::Int => $obj.extract::<i32>().map(Value::Int),
            Elem::UInt => $obj.extract::<u32>().map(Value::UInt),
            Elem::Long => $obj.extract::<i64>().map(Value::Long),
            Elem::ULong => $obj.extract::<u64>().map(Value::ULong),
            Elem::Float => $obj.extract::<f32>().map(Value::Float),
            Elem::Double => $obj.extract::<f64>().map(Value::Double),
            Elem::Str => $obj.extract::<String>().map(Value::Str),
        }
    };
    ($elem:expr, $obj:expr, array) => {
        match $elem {
            Elem::Char => array_of::<i8>($obj).map(Value::CharArray),
            Elem::UChar => array_of::<u8>($obj).map(Value::UCharArray),
            Elem::Short => array_of::<i16>($obj).map(Value::ShortArray),
            Elem::UShort => array_of::<u16>($obj).map(Value::UShortArray),
            Elem::Int => array_of::<i32>($obj).map(Value::IntArray),
            Elem::UInt => array_of::<u32>($obj).map(Value::UIntArray),
            Elem::Long => array_of::<i64>($obj).map(Value::LongArray),
            Elem::ULong => array_of::<u64>($obj).map(Value::ULongArray),
            Elem::Float => array_of::<f32>($obj).map(Value::FloatArray),
            Elem::Double => array_of::<f64>($obj).map(Value::DoubleArray),
            Elem::Str => $obj.extract::<Vec<String>>().map(Value::StrArray),
        }
    };
}

/// Converts one Python value for `field` (value number `index` of the packet).
pub fn to_value(obj: &Bound<'_, PyAny>, field: Field, index: usize) -> PyResult<Value> {
    let r: PyResult<Value> = match field {
        Field::Raw => raw_of(obj).map(Value::Raw),
        Field::Scalar(e) => numeric!(e, obj, scalar),
        Field::Array(e) => numeric!(e, obj, array),
    };
    r.map_err(|e| {
        let shown = obj
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "?".into());
        let shown: String = shown.chars().take(60).collect();
        errors::new_err(
            Kind::Format,
            format!("value {index} ({shown}) does not fit {field}: {e}"),
        )
    })
}

/// Converts Python values for a parsed format.
pub fn to_values(format: &Format, values: &Bound<'_, PyTuple>) -> PyResult<Vec<Value>> {
    let fields = format.fields();
    if fields.len() != values.len() {
        return Err(errors::new_err(
            Kind::Format,
            format!(
                "format {:?} has {} fields, {} values were given",
                format.as_str(),
                fields.len(),
                values.len()
            ),
        ));
    }
    fields
        .iter()
        .zip(values.iter())
        .enumerate()
        .map(|(i, (f, v))| to_value(&v, *f, i))
        .collect()
}

/// A value as a Python object; numeric arrays become numpy arrays owning the vector.
pub fn to_py(py: Python<'_>, v: Value) -> PyResult<Bound<'_, PyAny>> {
    Ok(match v {
        Value::Char(x) => x.into_pyobject(py)?.into_any(),
        Value::UChar(x) => x.into_pyobject(py)?.into_any(),
        Value::Short(x) => x.into_pyobject(py)?.into_any(),
        Value::UShort(x) => x.into_pyobject(py)?.into_any(),
        Value::Int(x) => x.into_pyobject(py)?.into_any(),
        Value::UInt(x) => x.into_pyobject(py)?.into_any(),
        Value::Long(x) => x.into_pyobject(py)?.into_any(),
        Value::ULong(x) => x.into_pyobject(py)?.into_any(),
        Value::Float(x) => f64::from(x).into_pyobject(py)?.into_any(),
        Value::Double(x) => x.into_pyobject(py)?.into_any(),
        Value::Str(s) => PyString::new(py, &s).into_any(),
        Value::CharArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::UCharArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::ShortArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::UShortArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::IntArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::UIntArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::LongArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::ULongArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::FloatArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::DoubleArray(v) => PyArray1::from_vec(py, v).into_any(),
        Value::StrArray(v) => PyList::new(py, v)?.into_any(),
        Value::Raw(b) => PyBytes::new(py, &b).into_any(),
    })
}

/// Parses a format string, as a `FormatError`.
pub fn parse_format(fmt: &str) -> PyResult<Format> {
    Format::parse(fmt).map_err(errors::wire)
}

/// Builds a wire packet from Python values.
pub fn build(stream: u32, tag: i32, fmt: &str, values: &Bound<'_, PyTuple>) -> PyResult<Packet> {
    let format = parse_format(fmt)?;
    let values = to_values(&format, values)?;
    Packet::with_format(stream, tag, format, values).map_err(errors::wire)
}

/// A typed message on a stream: its tag, the stream it travels on, the back-end that
/// sent it (`None` for the front-end or a filter), its format and its values.
///
/// `Packet(tag, fmt, *values, stream=0, source=None)` makes one, e.g. in a custom
/// filter: `vargr.Packet(p.tag, "%d", total)`. Values are checked against the format
/// and stored as they arrive from the network (numeric arrays as numpy arrays).
#[pyclass(frozen, module = "vargr", name = "Packet")]
pub struct PyPacket {
    /// The stream id.
    #[pyo3(get)]
    pub stream: u32,
    /// The application's tag.
    #[pyo3(get)]
    pub tag: i32,
    pub source: u32,
    /// The canonical format string (fields separated by one space).
    #[pyo3(get)]
    pub format: String,
    pub values: Py<PyTuple>,
}

impl PyPacket {
    /// Converts a received packet (its arrays move into numpy without a copy).
    pub fn from_rust(py: Python<'_>, p: Packet) -> PyResult<PyPacket> {
        let format = p.format.as_str().to_string();
        let values: Vec<Bound<'_, PyAny>> = p
            .values
            .into_iter()
            .map(|v| to_py(py, v))
            .collect::<PyResult<_>>()?;
        Ok(PyPacket {
            stream: p.stream,
            tag: p.tag,
            source: p.source,
            format,
            values: PyTuple::new(py, values)?.unbind(),
        })
    }

    /// Back to a wire packet (values converted again, arrays copied).
    pub fn to_rust(&self, py: Python<'_>) -> PyResult<Packet> {
        let mut p = build(self.stream, self.tag, &self.format, self.values.bind(py))?;
        p.source = self.source;
        Ok(p)
    }

    pub fn values<'py>(&self, py: Python<'py>) -> &Bound<'py, PyTuple> {
        self.values.bind(py)
    }
}

#[pymethods]
impl PyPacket {
    #[new]
    #[pyo3(signature = (tag, fmt, *values, stream = 0, source = None))]
    fn new(
        py: Python<'_>,
        tag: i32,
        fmt: &str,
        values: &Bound<'_, PyTuple>,
        stream: u32,
        source: Option<u32>,
    ) -> PyResult<PyPacket> {
        let mut p = build(stream, tag, fmt, values)?;
        p.source = source.unwrap_or(u32::MAX);
        PyPacket::from_rust(py, p)
    }

    /// The back-end rank that sent the packet; `None` for the front-end or a filter.
    #[getter]
    fn source(&self) -> Option<u32> {
        (self.source != u32::MAX).then_some(self.source)
    }

    /// The values, in format order.
    #[getter(values)]
    fn py_values(&self, py: Python<'_>) -> Py<PyTuple> {
        self.values.clone_ref(py)
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.values.bind(py).len()
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.values.bind(py).as_any().get_item(index)
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.values.bind(py).as_any().try_iter()?.into_any())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let source = match self.source {
            u32::MAX => "None".to_string(),
            s => s.to_string(),
        };
        Ok(format!(
            "Packet(tag={}, stream={}, source={}, format={}, values={})",
            self.tag,
            self.stream,
            source,
            PyString::new(py, &self.format).repr()?,
            self.values.bind(py).repr()?
        ))
    }
}
