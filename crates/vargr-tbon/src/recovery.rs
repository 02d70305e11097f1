//! Fault recovery as MRNet has it: the orphans of a dead commnode are adopted by the
//! nearest live ancestor, and the tree goes on with the survivors.
//!
//! Why: a commnode holds no application state, so losing one need not lose the healthy
//! back-ends below it. Every node learns its ancestors' listening addresses with its
//! sub-tree ([`crate::proto::SubtreeMsg::ancestors`]), and every internal node keeps its
//! listener (a [`vargr_net::gate::Gate`], same secret) open after start-up.
//!
//! When a node's parent link dies (closed, or silent past the heartbeat time-out) and
//! the policy is [`Recovery::Ancestor`], the node becomes an *orphan* instead of
//! stopping: it keeps serving its own children and, on a thread of its own, asks its
//! ancestors, nearest first (the lost parent included: a refused connection costs
//! nothing, and a parent that only dropped it takes it back), to adopt it ([`rejoin`]): handshake, then an
//! [`AdoptMsg`] "I am node N, orphaned by node M", with its back-ends and how far it
//! got on each stream. The first ancestor that answers [`AdoptedMsg`] is its new parent.
//! An orphan with nowhere to go stops as before, reporting [`TbonError::NotAdopted`]; a
//! commnode with no live child left stops at once (its children were adopted elsewhere,
//! and claiming their back-ends would take them back).
//!
//! A node that loses a child reports, per stream, the first wave that goes without the
//! child's back-ends (an open-ended `WavesLost`); the front-end keeps it until an
//! adopter reports where the loss ends, and then tells the user the whole range. So a
//! loss that began at a node that died too (a parent and child killed together) is
//! still reported from its first wave.
//!
//! The adopter ([`crate::router::Router::adopt`]) first treats any live child that
//! still claims the orphan's back-ends as lost (the orphan could not reach it), then
//! adds the orphan as a child of every stream it has members in, and reports two
//! events to the front-end: [`TreeEvent::Reparented`] (who moved where) and, per
//! stream, [`TreeEvent::WavesLost`] (which waves went without the orphan's back-ends).
//! The front-end has already had [`TreeEvent::NodeLost`] for the dead node itself.
//!
//! # Waves in flight
//!
//! Waves are numbered per stream from 0, in the order the front-end receives them
//! (an empty wave, one every contribution of which was lost, arrives as
//! [`TbonError::WaveEmpty`] so the count stays right). For a wait-for-all stream in
//! which every back-end answers every multicast once, in order (MRNet's wave model):
//!
//! - A wave the dead node had reduced and sent on before it died completes normally.
//! - A wave the dead node had not finished (its packets were in the dead node or on the
//!   dead links, or it was multicast while the orphan was unreachable) completes without the orphaned back-ends' contributions, and is
//!   reported lost for exactly those back-ends: `WavesLost { stream, first, end,
//!   backends, lost }` covers waves `first..end`. Its result is the exact reduction of
//!   the back-ends that did contribute; nothing is counted twice or mixed with another
//!   wave: the adopter drops the orphan's late answers to waves it already released and
//!   puts holes in place of the waves the orphan never heard of
//!   ([`vargr_filter::SyncFilter::join_child`]).
//! - Waves multicast after the adoption include the adopted back-ends.
//!
//! Back-ends below the dead node that are never adopted (they died with it, or the
//! policy is [`Recovery::Off`]) are lost as before: the `NodeLost` event names them and
//! later waves reduce over the others. Streams in other modes (time-out, don't-wait)
//! get the adopted child added as is: their waves are not numbered, so only the events
//! are reported.
//!
//! Adopted links carry no emulated WAN stages (both ends agree on that).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use vargr_net::auth::{self, Secret};
use vargr_net::{Addr, LinkSecurity, SecureConn};
use vargr_wire::{Frame, FrameKind};

use crate::proto::{self, AdoptMsg, AdoptedMsg, Ancestor};
use crate::TbonError;

/// What the orphans of a dead node do; part of [`crate::NetworkOptions`].
///
/// The default is [`Recovery::Ancestor`], as in MRNet: a commnode is plumbing, and the
/// back-ends below it are usually healthy and expensive to restart. [`Recovery::Off`]
/// is for tools that prefer a fault to stop a sub-tree (a lost commnode takes its
/// sub-tree with it and the front-end is told which back-ends went).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Recovery {
    /// A node whose parent dies stops, and its sub-tree with it.
    Off,
    /// A node whose parent dies asks its ancestors, nearest first, to adopt it.
    #[default]
    Ancestor,
}

impl Recovery {
    pub fn name(self) -> &'static str {
        match self {
            Recovery::Off => "off",
            Recovery::Ancestor => "ancestor",
        }
    }
}

impl std::str::FromStr for Recovery {
    type Err = String;
    fn from_str(s: &str) -> Result<Recovery, String> {
        match s {
            "off" => Ok(Recovery::Off),
            "ancestor" => Ok(Recovery::Ancestor),
            other => Err(format!("recovery {other:?}: expected off or ancestor")),
        }
    }
}

/// A change of the tree, as the front-end hears of it ([`crate::Network::events`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeEvent {
    /// Node `node` on `host` died; `backends` were below it (some may be adopted later).
    NodeLost {
        node: u32,
        host: String,
        backends: Vec<u32>,
    },
    /// Node `node` lost its parent `lost_parent` and was adopted by `new_parent`; the
    /// back-ends `backends` are reachable again through it.
    Reparented {
        node: u32,
        lost_parent: u32,
        new_parent: u32,
        backends: Vec<u32>,
    },
    /// Waves `first..end` of `stream` went without `backends`, whose path up died with
    /// node `lost`.
    WavesLost {
        stream: u32,
        first: u64,
        end: u64,
        backends: Vec<u32>,
        lost: u32,
    },
}

/// A node whose parent died, waiting to be adopted.
#[derive(Debug, Clone)]
pub struct Orphan {
    pub lost_parent: u32,
    pub reason: String,
    /// A rejoin thread is running.
    pub rejoining: bool,
    /// Faults raised while there was no parent to send them to.
    pub pending: Vec<proto::FaultMsg>,
    /// Frames for the parent (answers, holes) produced meanwhile, by stream: sent to
    /// the adopter, which knows them for answers to waves gone by and drops them.
    pub held: Vec<(u32, bytes::Bytes)>,
}

/// How long one ancestor may take to connect, authenticate and answer.
pub const ADOPT_TIMEOUT: Duration = Duration::from_secs(3);

/// Asks `ancestors` (nearest first) to adopt node `msg.node`; returns the connection to
/// the first that did, its answer and who it is.
pub fn rejoin(
    secret: &Secret,
    ancestors: &[Ancestor],
    msg: &AdoptMsg,
    timeout: Duration,
) -> Result<(SecureConn, AdoptedMsg, Ancestor), TbonError> {
    let mut tried = Vec::new();
    for a in ancestors {
        match ask(secret, a, msg, timeout) {
            Ok((conn, reply)) => return Ok((conn, reply, a.clone())),
            Err(e) => tried.push((a.node, e.to_string())),
        }
    }
    Err(TbonError::NotAdopted {
        node: msg.node,
        lost_parent: msg.lost_parent,
        tried,
    })
}

fn ask(
    secret: &Secret,
    a: &Ancestor,
    msg: &AdoptMsg,
    timeout: Duration,
) -> Result<(SecureConn, AdoptedMsg), TbonError> {
    let addr: Addr = a.addr.parse()?;
    let peer = format!("node {} at {}", a.node, a.addr);
    // Refused means dead: on to the next ancestor without waiting.
    let conn = vargr_net::connect_once(&addr, timeout)?;
    let mut conn = auth::connect(conn, secret, msg.node, LinkSecurity::Auto, timeout, &peer)?;
    conn.set_timeout(Some(timeout));
    conn.write_frame(&Frame::new(FrameKind::Adopt, 0, 0, proto::to_json(msg)))?;
    let f = conn.read_frame(64 << 20)?;
    match f.kind {
        FrameKind::Adopted => Ok((conn, proto::from_json("Adopted", &f.payload)?)),
        FrameKind::Refused => Err(TbonError::Net(format!(
            "{peer} refused: {}",
            String::from_utf8_lossy(&f.payload)
        ))),
        k => Err(TbonError::Net(format!(
            "{peer} answered {} to an adoption request",
            k.name()
        ))),
    }
}
