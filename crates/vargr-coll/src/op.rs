//! Reduction operators and the kernels that apply them to byte buffers.
//!
//! Every combine in vargr is *oriented*: the schedule says whether the incoming data
//! comes from lower ranks (the left operand) or higher ranks (the right operand). For the
//! built-in operators on integers orientation does not change the result; for floats it
//! does not either (IEEE `a + b == b + a`), only the *bracketing* does, and that is fixed by
//! the algorithm (see `algo`). For non-commutative user operators orientation is what
//! keeps the result equal to `x0 ∘ x1 ∘ … ∘ x(p-1)`, as MPI requires.
//!
//! Semantics follow MPI: integer `Sum`/`Prod` wrap, `Land`/`Lor` yield 0 or 1, `Band`/`Bor`
//! are bitwise; logical and bitwise operators are integer-only. `Min(a, b)` is
//! `if b < a { b } else { a }` with `a` the left operand (so a NaN on the left sticks,
//! a NaN on the right is ignored), and `Max` likewise.

use std::fmt;
use std::sync::Arc;

use crate::elem::ElemKind;
use crate::error::{CollError, Result};

/// The signature of a user operator: `f(inout, input)` computes, element by element,
/// `inout = input ∘ inout` — `input` is the left operand, as in `MPI_User_function`.
/// Both slices have the same length, a whole number of elements, and are aligned for the
/// element type the caller uses.
pub type UserFn = dyn Fn(&mut [u8], &[u8]) + Send + Sync;

/// A user-defined reduction operator.
#[derive(Clone)]
pub struct UserOp {
    f: Arc<UserFn>,
    commutative: bool,
    name: Arc<str>,
}

impl fmt::Debug for UserOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserOp")
            .field("name", &self.name)
            .field("commutative", &self.commutative)
            .finish()
    }
}

/// A reduction operator.
#[derive(Debug, Clone)]
pub enum Op {
    Sum,
    Prod,
    Min,
    Max,
    Land,
    Lor,
    Band,
    Bor,
    User(UserOp),
}

impl Op {
    /// A commutative, associative user operator (`MPI_Op_create(f, 1, ..)`); every
    /// algorithm may use it.
    pub fn user(name: &str, f: impl Fn(&mut [u8], &[u8]) + Send + Sync + 'static) -> Op {
        Op::User(UserOp {
            f: Arc::new(f),
            commutative: true,
            name: name.into(),
        })
    }

    /// An associative but non-commutative user operator (`MPI_Op_create(f, 0, ..)`): only
    /// order-preserving algorithms run it (flat and binomial reduce, recursive doubling).
    pub fn user_noncommutative(
        name: &str,
        f: impl Fn(&mut [u8], &[u8]) + Send + Sync + 'static,
    ) -> Op {
        Op::User(UserOp {
            f: Arc::new(f),
            commutative: false,
            name: name.into(),
        })
    }

    pub fn is_commutative(&self) -> bool {
        match self {
            Op::User(u) => u.commutative,
            _ => true,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Min => "min",
            Op::Max => "max",
            Op::Land => "land",
            Op::Lor => "lor",
            Op::Band => "band",
            Op::Bor => "bor",
            Op::User(u) => &u.name,
        }
    }

    /// Checks that the operator is defined for `kind`; called before any message is sent
    /// so that every rank fails the same way instead of leaving peers waiting.
    pub fn check(&self, kind: ElemKind) -> Result<()> {
        let integer_only = matches!(self, Op::Land | Op::Lor | Op::Band | Op::Bor);
        if integer_only && kind.is_float() {
            return Err(CollError::OpType {
                op: self.name().to_string(),
                kind,
            });
        }
        Ok(())
    }

    /// `acc = incoming ∘ acc` if `incoming_left`, else `acc = acc ∘ incoming`.
    ///
    /// `acc` must be aligned for `kind` (schedules only hand out aligned work buffers);
    /// `incoming` may be unaligned (a slice of a received frame).
    pub fn apply(
        &self,
        kind: ElemKind,
        acc: &mut [u8],
        incoming: &[u8],
        incoming_left: bool,
    ) -> Result<()> {
        debug_assert_eq!(acc.len(), incoming.len());
        debug_assert_eq!(acc.len() % kind.size(), 0);
        match self {
            Op::User(u) => apply_user(u, kind, acc, incoming, incoming_left),
            _ => apply_builtin(self, kind, acc, incoming, incoming_left),
        }
    }
}

fn apply_user(
    u: &UserOp,
    kind: ElemKind,
    acc: &mut [u8],
    incoming: &[u8],
    incoming_left: bool,
) -> Result<()> {
    let aligned = (incoming.as_ptr() as usize) % kind.size() == 0;
    if incoming_left || u.commutative {
        if aligned {
            (u.f)(acc, incoming);
        } else {
            let tmp = aligned_copy(incoming);
            (u.f)(
                acc,
                &bytemuck::cast_slice::<u64, u8>(&tmp)[..incoming.len()],
            );
        }
    } else {
        // acc ∘ incoming: the incoming data becomes the inout operand, then moves back.
        let mut tmp = aligned_copy(incoming);
        let t = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut tmp)[..incoming.len()];
        (u.f)(t, acc);
        acc.copy_from_slice(t);
    }
    Ok(())
}

fn aligned_copy(b: &[u8]) -> Vec<u64> {
    let mut v = vec![0u64; b.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut v)[..b.len()].copy_from_slice(b);
    v
}

/// Applies `f(left, right)` element-wise, writing into `acc`.
#[inline]
fn combine<T: bytemuck::Pod>(
    acc: &mut [u8],
    incoming: &[u8],
    incoming_left: bool,
    f: impl Fn(T, T) -> T,
) {
    let acc: &mut [T] = bytemuck::cast_slice_mut(acc);
    match bytemuck::try_cast_slice::<u8, T>(incoming) {
        Ok(inc) => {
            if incoming_left {
                for (a, &b) in acc.iter_mut().zip(inc) {
                    *a = f(b, *a);
                }
            } else {
                for (a, &b) in acc.iter_mut().zip(inc) {
                    *a = f(*a, b);
                }
            }
        }
        Err(_) => {
            let size = std::mem::size_of::<T>();
            for (a, chunk) in acc.iter_mut().zip(incoming.chunks_exact(size)) {
                let b: T = bytemuck::pod_read_unaligned(chunk);
                *a = if incoming_left { f(b, *a) } else { f(*a, b) };
            }
        }
    }
}

macro_rules! int_kernel {
    ($t:ty, $op:expr, $acc:expr, $inc:expr, $left:expr) => {
        match $op {
            Op::Sum => combine::<$t>($acc, $inc, $left, |a, b| a.wrapping_add(b)),
            Op::Prod => combine::<$t>($acc, $inc, $left, |a, b| a.wrapping_mul(b)),
            Op::Min => combine::<$t>($acc, $inc, $left, |a, b| if b < a { b } else { a }),
            Op::Max => combine::<$t>($acc, $inc, $left, |a, b| if b > a { b } else { a }),
            Op::Land => combine::<$t>($acc, $inc, $left, |a, b| (a != 0 && b != 0) as $t),
            Op::Lor => combine::<$t>($acc, $inc, $left, |a, b| (a != 0 || b != 0) as $t),
            Op::Band => combine::<$t>($acc, $inc, $left, |a, b| a & b),
            Op::Bor => combine::<$t>($acc, $inc, $left, |a, b| a | b),
            Op::User(_) => unreachable!("user operators take the byte path"),
        }
    };
}

macro_rules! float_kernel {
    ($t:ty, $op:expr, $acc:expr, $inc:expr, $left:expr, $kind:expr) => {
        match $op {
            Op::Sum => combine::<$t>($acc, $inc, $left, |a, b| a + b),
            Op::Prod => combine::<$t>($acc, $inc, $left, |a, b| a * b),
            Op::Min => combine::<$t>($acc, $inc, $left, |a, b| if b < a { b } else { a }),
            Op::Max => combine::<$t>($acc, $inc, $left, |a, b| if b > a { b } else { a }),
            other => {
                return Err(CollError::OpType {
                    op: other.name().to_string(),
                    kind: $kind,
                })
            }
        }
    };
}

fn apply_builtin(op: &Op, kind: ElemKind, acc: &mut [u8], inc: &[u8], left: bool) -> Result<()> {
    match kind {
        ElemKind::I8 => int_kernel!(i8, op, acc, inc, left),
        ElemKind::U8 => int_kernel!(u8, op, acc, inc, left),
        ElemKind::I16 => int_kernel!(i16, op, acc, inc, left),
        ElemKind::U16 => int_kernel!(u16, op, acc, inc, left),
        ElemKind::I32 => int_kernel!(i32, op, acc, inc, left),
        ElemKind::U32 => int_kernel!(u32, op, acc, inc, left),
        ElemKind::I64 => int_kernel!(i64, op, acc, inc, left),
        ElemKind::U64 => int_kernel!(u64, op, acc, inc, left),
        ElemKind::F32 => float_kernel!(f32, op, acc, inc, left, kind),
        ElemKind::F64 => float_kernel!(f64, op, acc, inc, left, kind),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: crate::Elem>(op: &Op, a: &[T], b: &[T], left: bool) -> Vec<T> {
        let mut acc = a.to_vec();
        op.apply(
            T::KIND,
            bytemuck::cast_slice_mut(&mut acc),
            bytemuck::cast_slice(b),
            left,
        )
        .unwrap();
        acc
    }

    #[test]
    fn integer_ops_match_mpi() {
        assert_eq!(run(&Op::Sum, &[250u8], &[10], false), vec![4]);
        assert_eq!(run(&Op::Prod, &[-3i32], &[7], true), vec![-21]);
        assert_eq!(run(&Op::Min, &[5i64, -1], &[3, 9], false), vec![3, -1]);
        assert_eq!(run(&Op::Max, &[5u16, 1], &[3, 9], false), vec![5, 9]);
        assert_eq!(run(&Op::Land, &[5i32, 0], &[3, 9], false), vec![1, 0]);
        assert_eq!(run(&Op::Lor, &[0u32, 0], &[3, 0], false), vec![1, 0]);
        assert_eq!(run(&Op::Band, &[0b1100u8], &[0b1010], false), vec![0b1000]);
        assert_eq!(run(&Op::Bor, &[0b1100u8], &[0b1010], false), vec![0b1110]);
    }

    #[test]
    fn bitwise_on_floats_is_a_typed_error() {
        let mut acc = [0u8; 8];
        let err = Op::Band.apply(ElemKind::F64, &mut acc, &[0u8; 8], false);
        assert!(matches!(err, Err(CollError::OpType { .. })));
        assert!(Op::Lor.check(ElemKind::F32).is_err());
        assert!(Op::Sum.check(ElemKind::F32).is_ok());
    }

    #[test]
    fn unaligned_incoming_is_read_correctly() {
        let mut raw = [0u8; 17];
        raw[1..9].copy_from_slice(&7.5f64.to_ne_bytes());
        raw[9..17].copy_from_slice(&0.25f64.to_ne_bytes());
        let mut acc = [1.0f64, 2.0];
        Op::Sum
            .apply(
                ElemKind::F64,
                bytemuck::cast_slice_mut(&mut acc),
                &raw[1..],
                false,
            )
            .unwrap();
        assert_eq!(acc, [8.5, 2.25]);
    }

    #[test]
    fn noncommutative_user_op_respects_orientation() {
        // "keep the left operand": x ∘ y = x.
        let left = Op::user_noncommutative("left", |inout, input| inout.copy_from_slice(input));
        assert_eq!(run(&left, &[1u8], &[2], true), vec![2]);
        assert_eq!(run(&left, &[1u8], &[2], false), vec![1]);
    }
}
