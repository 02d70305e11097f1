//! Global redundancy elimination between two peers (the seed's Canidae).
//!
//! Both peers keep a cache of segments they have exchanged. The sender cuts a message
//! into segments ([`segment`]), names each by a short *optimistic* fingerprint
//! ([`fp`]), and covers groups of segments by one *conservative* hash; the receiver
//! rebuilds segments it already holds from its cache ([`cache`]) and asks only for the
//! rest ([`protocol`]). Short fingerprints make small segments pay; the group hash makes
//! a fingerprint collision cost a resend, never a wrong byte. A new segment that
//! resembles cached ones ([`similar`]) crosses as a delta against them ([`delta`]).
//!
//! Everything here is sans-IO: the tools (`vargr sync`, `vargr proxy`) and the link
//! stage move the bytes.

mod aged;
pub mod cache;
pub mod delta;
pub mod fp;
pub mod model;
pub mod protocol;
pub mod segment;
pub mod similar;
pub mod stage;
pub mod stream;
#[cfg(test)]
mod testdata;

pub use cache::CacheError;
pub use fp::{Fingerprint, FpBits};
pub use protocol::{Config, Delivered, Prepared, ProtocolError, Receiver, Sender};
pub use segment::{by_name, Cut, SegmentError, Segmenter, Shape};
