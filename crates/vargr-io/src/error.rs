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
    Elsewhere { rank: usize, reason: String },
    #[error("{0}")]
    Comm(#[from] CollError),
}

pub type Result<T, E = IoError> = std::result::Result<T, E>;
