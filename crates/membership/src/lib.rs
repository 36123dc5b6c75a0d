//! Membership: who is alive, agreed by the whole cluster (FaRM section 5.1 and 5.2).
//!
//! [`Membership`] is one node's state machine for leases and reconfiguration. It is
//! sans-IO: the caller gives it the time, the datagrams that arrived on the node's lease
//! socket and the coordination service's answers, and carries out the [`Action`]s it
//! asks for (send a message, read or compare-and-swap the view, switch the workers to a
//! view, start serving). The real node drives it on a dedicated lease thread; the
//! simulator drives the same code from a seed.
//!
//! As in Quinn, inputs go in through `handle_*` ([`Membership::handle_timeout`],
//! [`Membership::handle_datagram`], [`Membership::handle_read`],
//! [`Membership::handle_cas`], [`Membership::handle_installed`], ...) and outputs come
//! out through [`Membership::poll_action`] and [`Membership::poll_timeout`], the earliest
//! of a table of named timers. The holder's side of leases and the CM's side (grants, the
//! reconfiguration under way, joiners) are structs of their own, and transitions assert
//! what they rely on: a view adopted is newer, a commit comes while installing, a lease
//! only moves on.
//!
//! In short (details in `docs/membership.md`):
//! - **Leases.** Every member holds a lease at the configuration manager (CM), renewed
//!   every fifth of its length by a three-way handshake (request, grant that is also the
//!   CM's request, ack that grants the CM its lease at the member). A member serves reads
//!   and commits only while its lease runs; the CM only while it holds leases at a
//!   majority. The CM caps the leases it grants at what is left of its own, so when a CM
//!   loses its majority every lease it granted runs out with it.
//! - **Reconfiguration.** The CM suspects a member whose lease ran out; a backup CM
//!   suspects the CM when its own lease at it runs out. The suspecting node probes the
//!   members, and with a majority of the view answering it swaps in the next view (id + 1)
//!   at the coordination service. Remap promotes a surviving backup where a primary was
//!   lost and adds no backup. NEW-CONFIG goes to every member, which switches every thread
//!   and answers NEW-CONFIG-ACK; once all have and every lease of a removed node has run
//!   out, NEW-CONFIG-COMMIT lets them serve again.
//! - **Joining.** A process that is not a member (a new node, or a restarted one: a new
//!   life never pretends to be its earlier one) asks the CM to admit it; it joins holding
//!   no partition. A cluster starts the same way: the node of lowest id in the
//!   configuration file admits every node of the file at once.

mod membership;
mod message;

pub use membership::{Action, Membership, Options, Phase, RESTART_WAIT_LEASES, Stats};
pub use message::{Body, DecodeError, MESSAGE_BYTES_MAX, Message};
