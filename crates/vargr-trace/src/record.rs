//! The event record: 32 bytes, fixed layout, so a collector call is four stores.

use serde::{Deserialize, Serialize};

/// What a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum EventOp {
    /// A whole collective call: start = arrival, end = departure.
    Call = 1,
    /// One send of a collective schedule (peer, bytes).
    Send = 2,
    /// One receive of a collective schedule: start = when the rank began waiting, end =
    /// when the message was there; a long wait means the peer arrived late.
    Recv = 3,
    /// A frame leaving a link's stage chain.
    LinkOut = 4,
    /// A frame entering from a link.
    LinkIn = 5,
    /// One filter invocation.
    Filter = 6,
    /// Application-defined.
    User = 7,
}

impl EventOp {
    pub fn from_u8(b: u8) -> Option<EventOp> {
        Some(match b {
            1 => EventOp::Call,
            2 => EventOp::Send,
            3 => EventOp::Recv,
            4 => EventOp::LinkOut,
            5 => EventOp::LinkIn,
            6 => EventOp::Filter,
            7 => EventOp::User,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            EventOp::Call => "call",
            EventOp::Send => "send",
            EventOp::Recv => "recv",
            EventOp::LinkOut => "link-out",
            EventOp::LinkIn => "link-in",
            EventOp::Filter => "filter",
            EventOp::User => "user",
        }
    }
}

/// No peer.
pub const NO_PEER: u32 = u32::MAX;

/// One event. Timestamps are clock ticks (see [`crate::clock`]); trace files convert
/// them to nanoseconds of the host's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub start: u64,
    pub end: u64,
    /// Sequence number (e.g. of the collective call on its communicator).
    pub seq: u32,
    pub bytes: u32,
    /// Collector id (see [`crate::collector`]).
    pub collector: u16,
    pub op: u8,
    /// 0 = ok; anything else is an error code.
    pub status: u8,
    /// Peer rank or node, or [`NO_PEER`].
    pub peer: u32,
}

impl Record {
    pub const LEN: usize = 32;

    /// The record as four words, the form rings store.
    #[inline(always)]
    pub fn to_words(&self) -> [u64; 4] {
        [
            self.start,
            self.end,
            u64::from(self.seq) | (u64::from(self.bytes) << 32),
            u64::from(self.collector)
                | (u64::from(self.op) << 16)
                | (u64::from(self.status) << 24)
                | (u64::from(self.peer) << 32),
        ]
    }

    #[inline]
    pub fn from_words(w: [u64; 4]) -> Record {
        Record {
            start: w[0],
            end: w[1],
            seq: w[2] as u32,
            bytes: (w[2] >> 32) as u32,
            collector: w[3] as u16,
            op: (w[3] >> 16) as u8,
            status: (w[3] >> 24) as u8,
            peer: (w[3] >> 32) as u32,
        }
    }

    /// Little-endian bytes, as in trace files.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for w in self.to_words() {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// Decodes exactly [`Record::LEN`] bytes.
    pub fn decode(b: &[u8]) -> Option<Record> {
        if b.len() != Self::LEN {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Some(Record::from_words([w(0), w(1), w(2), w(3)]))
    }

    pub fn event_op(&self) -> Option<EventOp> {
        EventOp::from_u8(self.op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn records_round_trip(start: u64, end: u64, seq: u32, bytes: u32, collector: u16,
                              op: u8, status: u8, peer: u32) {
            let r = Record { start, end, seq, bytes, collector, op, status, peer };
            prop_assert_eq!(Record::from_words(r.to_words()), r);
            let mut b = Vec::new();
            r.encode(&mut b);
            prop_assert_eq!(b.len(), Record::LEN);
            prop_assert_eq!(Record::decode(&b), Some(r));
        }
    }
}
