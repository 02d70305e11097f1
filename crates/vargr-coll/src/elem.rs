//! Element types that reductions understand.
//!
//! Data movement (bcast, gather, alltoall, ...) works on any `bytemuck::Pod` type, since
//! it only copies bytes. Reductions need to know the arithmetic, so their buffers must hold
//! one of the [`Elem`] types; the schedule executor carries an [`ElemKind`] tag instead of a
//! type parameter so that schedules and transports stay untyped.

/// The numeric element types a reduction can run on (vargr's one element vocabulary).
/// `U8` doubles as "raw bytes".
pub use vargr_wire::ElemKind;

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
