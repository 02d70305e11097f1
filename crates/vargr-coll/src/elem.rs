//! Element types that reductions understand.
//!
//! Data movement (bcast, gather, alltoall, ...) works on any `bytemuck::Pod` type, since
//! it only copies bytes. Reductions need to know the arithmetic, so their buffers must hold
//! one of the [`Elem`] types; the schedule executor carries an [`ElemKind`] tag instead of a
//! type parameter so that schedules and transports stay untyped.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The numeric element types a reduction can run on. `U8` doubles as "raw bytes".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElemKind {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl ElemKind {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            ElemKind::I8 | ElemKind::U8 => 1,
            ElemKind::I16 | ElemKind::U16 => 2,
            ElemKind::I32 | ElemKind::U32 | ElemKind::F32 => 4,
            ElemKind::I64 | ElemKind::U64 | ElemKind::F64 => 8,
        }
    }

    pub const fn is_float(self) -> bool {
        matches!(self, ElemKind::F32 | ElemKind::F64)
    }

    pub const fn name(self) -> &'static str {
        match self {
            ElemKind::I8 => "i8",
            ElemKind::U8 => "u8",
            ElemKind::I16 => "i16",
            ElemKind::U16 => "u16",
            ElemKind::I32 => "i32",
            ElemKind::U32 => "u32",
            ElemKind::I64 => "i64",
            ElemKind::U64 => "u64",
            ElemKind::F32 => "f32",
            ElemKind::F64 => "f64",
        }
    }
}

impl fmt::Display for ElemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A plain numeric type a reduction can combine. Sealed: the kernels in `op.rs` cover
/// exactly these types.
pub trait Elem: bytemuck::Pod + Send + Sync + sealed::Sealed {
    const KIND: ElemKind;
}

macro_rules! elem {
    ($($t:ty => $k:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Elem for $t { const KIND: ElemKind = ElemKind::$k; }
    )*};
}

elem!(i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
      i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// The element kind of a plain type, if it is one of the numeric types (what a
/// point-to-point send of `&[T]` tells the link, so floats meet a float codec).
pub fn kind_of<T: 'static>() -> Option<ElemKind> {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    macro_rules! find {
        ($($ty:ty => $k:ident),*) => {$(
            if t == TypeId::of::<$ty>() {
                return Some(ElemKind::$k);
            }
        )*};
    }
    find!(i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
          i64 => I64, u64 => U64, f32 => F32, f64 => F64);
    None
}
