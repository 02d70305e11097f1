//! What can go wrong with a shared file, named so that the user can act on it.
//!
//! A collective operation fails on every rank or on none: a rank whose part failed tells
//! the others (see `File::agree`), and they report [`IoError::Elsewhere`] with that rank's
//! reason instead of waiting for it.

use std::path::PathBuf;

use thiserror::Error;
use vargr_coll::CollError;

use crate::view::ViewError;

#[derive(Debug, Error)]
pub enum IoError {
    #[error("{op} {path} (rank {rank}): {source}")]
    Os {
        op: &'static str,
        path: PathBuf,
        rank: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("{op} {path} at bytes {offset}..{end} (rank {rank}): {source}")]
    At {
        op: &'static str,
        path: PathBuf,
        rank: usize,
        offset: u64,
        end: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    View(#[from] ViewError),
    #[error("ranks {first} and {second} both write file bytes {offset}..{end}: views must not overlap for a collective write")]
    Overlap {
        first: usize,
        second: usize,
        offset: u64,
        end: u64,
    },
    #[error("rank {rank} gave {got} bytes for a view of {expected}")]
    Length {
        rank: usize,
        expected: u64,
        got: u64,
    },
    #[error("{what} (rank {rank})")]
    Refused { rank: usize, what: String },
    #[error("rank {rank} failed: {reason}")]
    Elsewhere {
        rank: usize,
        reason: String,
        /// What kind of error the failing rank had, so that every rank can report it as
        /// the same kind (front ends map kinds to their error classes).
        class: ErrorClass,
        /// The failing rank's OS error number, for `ErrorClass::Os`.
        errno: Option<i32>,
    },
    #[error("{0}")]
    Comm(#[from] CollError),
}

/// The kinds of [`IoError`], as they travel between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The operating system refused (`Os`, `At`).
    Os,
    /// A view, an overlap between views, or data of the wrong length.
    View,
    /// Communication failed.
    Comm,
    /// Anything else (`Refused`).
    Other,
}

impl ErrorClass {
    pub(crate) fn code(self) -> u8 {
        match self {
            ErrorClass::Os => 1,
            ErrorClass::View => 2,
            ErrorClass::Comm => 3,
            ErrorClass::Other => 4,
        }
    }

    pub(crate) fn from_code(c: u8) -> ErrorClass {
        match c {
            1 => ErrorClass::Os,
            2 => ErrorClass::View,
            3 => ErrorClass::Comm,
            _ => ErrorClass::Other,
        }
    }
}

impl IoError {
    /// The kind of this error (for `Elsewhere`, the failing rank's kind).
    pub fn class(&self) -> ErrorClass {
        match self {
            IoError::Os { .. } | IoError::At { .. } => ErrorClass::Os,
            IoError::View(_) | IoError::Overlap { .. } | IoError::Length { .. } => ErrorClass::View,
            IoError::Comm(_) => ErrorClass::Comm,
            IoError::Refused { .. } => ErrorClass::Other,
            IoError::Elsewhere { class, .. } => *class,
        }
    }

    /// The OS error number behind this error, if any (for `Elsewhere`, the failing
    /// rank's).
    pub fn errno(&self) -> Option<i32> {
        match self {
            IoError::Os { source, .. } | IoError::At { source, .. } => source.raw_os_error(),
            IoError::Elsewhere { errno, .. } => *errno,
            _ => None,
        }
    }
}

pub type Result<T, E = IoError> = std::result::Result<T, E>;
