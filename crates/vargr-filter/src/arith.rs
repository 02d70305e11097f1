//! Numeric element types, written once.
//!
//! MRNet repeats a nine-way type switch in every arithmetic filter. Here the list of
//! numeric types appears twice, both in this file: [`Num`] is implemented for each type
//! by one macro, and [`with_num!`] maps a runtime [`Elem`] to a call of a generic
//! function. Filters are then generic over `T: Num`.
//!
//! Integer sums wrap (two's complement, as MPI and C do on common hardware); float
//! `min`/`max` ignore a NaN operand when the other is a number (`f64::min` semantics).

use vargr_wire::{Elem, Field, Format, Packet, Value};

use crate::FilterError;

/// A numeric element type of the format language.
pub(crate) trait Num: Copy + PartialOrd + Send + 'static {
    fn scalar(v: &Value) -> Option<Self>;
    fn array(v: &Value) -> Option<&[Self]>;
    fn into_scalar(self) -> Value;
    fn into_array(v: Vec<Self>) -> Value;
    /// Wrapping for integers.
    fn add(self, o: Self) -> Self;
    fn min_of(self, o: Self) -> Self;
    fn max_of(self, o: Self) -> Self;
    fn to_f64(self) -> f64;
    /// Truncates toward zero and saturates for integers (`as` semantics).
    fn from_f64(x: f64) -> Self;
    /// The value as an `i64`, for integers that fit.
    fn to_i64(self) -> Option<i64>;
}

macro_rules! impl_num {
    ($($t:ty => $s:ident, $a:ident, $add:expr, $min:expr, $max:expr, $int:literal;)*) => {$(
        impl Num for $t {
            fn scalar(v: &Value) -> Option<Self> {
                match v { Value::$s(x) => Some(*x), _ => None }
            }
            fn array(v: &Value) -> Option<&[Self]> {
                match v { Value::$a(x) => Some(x), _ => None }
            }
            fn into_scalar(self) -> Value { Value::$s(self) }
            fn into_array(v: Vec<Self>) -> Value { Value::$a(v) }
            fn add(self, o: Self) -> Self { ($add)(self, o) }
            fn min_of(self, o: Self) -> Self { ($min)(self, o) }
            fn max_of(self, o: Self) -> Self { ($max)(self, o) }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(x: f64) -> Self { x as $t }
            fn to_i64(self) -> Option<i64> {
                if $int { i64::try_from(self as i128).ok() } else { None }
            }
        }
    )*};
}

impl_num! {
    i8 => Char, CharArray, <i8>::wrapping_add, <i8>::min, <i8>::max, true;
    u8 => UChar, UCharArray, <u8>::wrapping_add, <u8>::min, <u8>::max, true;
    i16 => Short, ShortArray, <i16>::wrapping_add, <i16>::min, <i16>::max, true;
    u16 => UShort, UShortArray, <u16>::wrapping_add, <u16>::min, <u16>::max, true;
    i32 => Int, IntArray, <i32>::wrapping_add, <i32>::min, <i32>::max, true;
    u32 => UInt, UIntArray, <u32>::wrapping_add, <u32>::min, <u32>::max, true;
    i64 => Long, LongArray, <i64>::wrapping_add, <i64>::min, <i64>::max, true;
    u64 => ULong, ULongArray, <u64>::wrapping_add, <u64>::min, <u64>::max, true;
    f32 => Float, FloatArray, |a: f32, b: f32| a + b, <f32>::min, <f32>::max, false;
    f64 => Double, DoubleArray, |a: f64, b: f64| a + b, <f64>::min, <f64>::max, false;
}

/// `with_num!(elem, f(args..))` calls `f::<T>(args..)` with `T` the Rust type of a numeric
/// `elem`, giving `Some(result)`, or `None` for `Elem::Str`.
macro_rules! with_num {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            vargr_wire::Elem::Char => Some($f::<i8>($($arg),*)),
            vargr_wire::Elem::UChar => Some($f::<u8>($($arg),*)),
            vargr_wire::Elem::Short => Some($f::<i16>($($arg),*)),
            vargr_wire::Elem::UShort => Some($f::<u16>($($arg),*)),
            vargr_wire::Elem::Int => Some($f::<i32>($($arg),*)),
            vargr_wire::Elem::UInt => Some($f::<u32>($($arg),*)),
            vargr_wire::Elem::Long => Some($f::<i64>($($arg),*)),
            vargr_wire::Elem::ULong => Some($f::<u64>($($arg),*)),
            vargr_wire::Elem::Float => Some($f::<f32>($($arg),*)),
            vargr_wire::Elem::Double => Some($f::<f64>($($arg),*)),
            vargr_wire::Elem::Str => None,
        }
    };
}
pub(crate) use with_num;

/// The format-string spelling of one element type, e.g. `uld`.
pub(crate) fn elem_code(e: Elem) -> &'static str {
    match e {
        Elem::Char => "c",
        Elem::UChar => "uc",
        Elem::Short => "hd",
        Elem::UShort => "uhd",
        Elem::Int => "d",
        Elem::UInt => "ud",
        Elem::Long => "ld",
        Elem::ULong => "uld",
        Elem::Float => "f",
        Elem::Double => "lf",
        Elem::Str => "s",
    }
}

/// The format-string spelling of one field, e.g. `%aud`.
pub(crate) fn field_text(f: Field) -> String {
    match f {
        Field::Scalar(e) => format!("%{}", elem_code(e)),
        Field::Array(e) => format!("%a{}", elem_code(e)),
        Field::Raw => "%b".to_string(),
    }
}

/// Element type of a numeric field, or the error `"{filter}: field {i} is %s, {filter}
/// needs numbers"`.
pub(crate) fn numeric_elem(filter: &str, index: usize, f: Field) -> Result<Elem, FilterError> {
    match f {
        Field::Scalar(e) | Field::Array(e) if e != Elem::Str => Ok(e),
        other => Err(FilterError::format(
            filter,
            format!(
                "field {index} is {}, {filter} needs numbers",
                field_text(other)
            ),
        )),
    }
}

/// Checks that every packet of the wave has the first packet's format and that each
/// packet's values agree with its format.
pub(crate) fn check_same_format(filter: &str, wave: &[Packet]) -> Result<(), FilterError> {
    let Some(first) = wave.first() else {
        return Ok(());
    };
    for (i, p) in wave.iter().enumerate() {
        if p.format != first.format {
            return Err(FilterError::format(
                filter,
                format!(
                    "packet {i} has format {:?} but packet 0 has {:?}; a wave must share one format",
                    p.format.as_str(),
                    first.format.as_str()
                ),
            ));
        }
        check_values(filter, i, p)?;
    }
    Ok(())
}

/// Checks that a packet's values match its own format (its fields are public, so a
/// hand-built packet may not).
pub(crate) fn check_values(filter: &str, i: usize, p: &Packet) -> Result<(), FilterError> {
    let fields = p.format.fields();
    let ok = fields.len() == p.values.len()
        && fields
            .iter()
            .zip(&p.values)
            .all(|(f, v)| *f == Format::field_of(v));
    if ok {
        Ok(())
    } else {
        Err(FilterError::format(
            filter,
            format!(
                "packet {i}: values do not match its format {:?}",
                p.format.as_str()
            ),
        ))
    }
}

/// Builds a filter output packet (source `u32::MAX`) with an already checked format.
pub(crate) fn output(ctx_stream: u32, tag: i32, format: Format, values: Vec<Value>) -> Packet {
    Packet {
        stream: ctx_stream,
        tag,
        source: u32::MAX,
        format,
        values,
    }
}

/// Parses a format string the filter built itself.
pub(crate) fn parse_format(filter: &str, text: &str) -> Result<Format, FilterError> {
    Format::parse(text).map_err(|e| FilterError::wire(filter, e))
}

/// Element-wise combination of equal-length slices, or an error naming the field.
pub(crate) fn zip_with<T: Num>(
    filter: &str,
    index: usize,
    acc: &mut [T],
    x: &[T],
    f: impl Fn(T, T) -> T,
) -> Result<(), FilterError> {
    if acc.len() != x.len() {
        return Err(FilterError::format(
            filter,
            format!(
                "field {index}: arrays of length {} and {} cannot be combined element-wise",
                acc.len(),
                x.len()
            ),
        ));
    }
    for (a, b) in acc.iter_mut().zip(x) {
        *a = f(*a, *b);
    }
    Ok(())
}
