//! The caller's side of shipping ([`crate::ship`]): SHIP requests to the primaries of
//! operations' partitions, sent together, each asked again after a configuration change.

use std::rc::Rc;

use ferrotx_exec::Co;
use ferrotx_rpc::RpcError;
use ferrotx_wire::{EndpointId, RequestType};

use super::{Abort, Coordinator, NO_PRIMARY};
use crate::ship::{LocalAnswer, Origin, ShipResult, ShipStatus, encode_ship};

/// How long the caller waits before asking again after a "retry" answer (the primary
/// was not the primary any more, or a configuration change aborted the operation there).
const RETRY_PAUSE_NS: u64 = 1_000_000;

/// One operation of [`Coordinator::ship_many`] on its way.
struct Shipment<'a> {
    origin: Origin,
    partition: u32,
    args: &'a [u8],
    /// The primary a request went to whose fate is unknown (cut off by a configuration
    /// change): the operation may have run, so giving up answers "outcome unknown".
    in_doubt: Option<u16>,
    result: Option<ShipResult>,
}

/// How one request of a round ended.
enum Round {
    /// An answer: a result, or `None` for "retry".
    Answer(Option<ShipResult>),
    /// Not sent (nothing ran): ask again.
    Unsent,
    /// Cut off by a configuration change or a restart: it may have run there.
    CutOff,
    /// Failed otherwise: give up.
    Failed,
}

impl Coordinator {
    /// Runs procedure `procedure` with `args` at the primary of `partition`, and returns
    /// its result: [`Coordinator::ship_many`] of one operation.
    pub async fn ship(
        &self,
        co: &Co,
        procedure: u8,
        partition: u32,
        args: &[u8],
        deadline_ns: u64,
    ) -> ShipResult {
        self.ship_many(co, procedure, &[(partition, args)], deadline_ns)
            .await
            .pop()
            .expect("one result per operation")
    }

    /// Runs procedure `procedure` once per operation `(partition, args)` at the primary of
    /// its partition (every key of an operation must be in partitions with that primary),
    /// all sent together, and returns their results in order. The operations are
    /// independent: each commits or not on its own, in any order.
    ///
    /// - A configuration change that cuts a request off: asked again, with the same
    ///   [`Origin`], of the partition's primary once the new configuration is committed.
    ///   The primary answers from the first run if there was one: the same primary
    ///   remembers it, and a new one learns it from the batch's records (their note),
    ///   applied by truncation or by recovery's commit, before it runs anything on the
    ///   partitions recovery blocks. An operation it never heard of never committed,
    ///   and runs now. Forgotten ones (long ago) answer [`Abort::OutcomeUnknown`].
    /// - An operation whose keys the new configuration gave several primaries (theirs
    ///   failed) cannot run at one any more: the primary asked answers from its first
    ///   run if it knows it, else that it did not run there (`ShipStatus::Split`), and
    ///   the operation ends with [`Abort::Protocol`] (nothing changed: the caller runs
    ///   it another way), or [`Abort::OutcomeUnknown`] if an earlier request of it may
    ///   have run. Asked again, it would never run within the configuration.
    /// - Nothing sent yet, or a "retry" answer: nothing changed, asked again up to
    ///   `deadline_ns`, then [`Abort::Unavailable`] ([`Abort::OutcomeUnknown`] if an
    ///   earlier request of it may have run).
    /// - Conflicts that outlasted the primary's retries: [`Abort::Conflict`] (nothing
    ///   changed); too large for one commit: [`Abort::TooLarge`].
    pub async fn ship_many(
        &self,
        co: &Co,
        procedure: u8,
        operations: &[(u32, &[u8])],
        deadline_ns: u64,
    ) -> Vec<ShipResult> {
        let mut shipments: Vec<Shipment<'_>> = operations
            .iter()
            .map(|&(partition, args)| {
                let seq = self.next_ship_seq.get();
                self.next_ship_seq.set(seq + 1);
                Shipment {
                    origin: Origin {
                        node: self.local.node(),
                        thread: self.local.thread(),
                        incarnation: self.incarnation,
                        seq,
                    },
                    partition,
                    args,
                    in_doubt: None,
                    result: None,
                }
            })
            .collect();
        loop {
            if shipments.iter().all(|s| s.result.is_some()) {
                break;
            }
            if !self.accepting.get() && !self.wait_accepting(co, deadline_ns).await {
                for s in shipments.iter_mut().filter(|s| s.result.is_none()) {
                    s.result = Some(Err(gave_up(s.in_doubt)));
                }
                break;
            }
            let view = self.view();
            // This round's requests: (shipment, primary, remote batch index or local answer).
            let mut round: Vec<(usize, u16, Result<usize, Rc<LocalAnswer>>)> = Vec::new();
            let mut remote = 0;
            for (i, s) in shipments.iter_mut().enumerate() {
                if s.result.is_some() {
                    continue;
                }
                let primary = self.primary_of_partition(s.partition);
                if primary == NO_PRIMARY {
                    s.result = Some(Err(gave_up(s.in_doubt)));
                    continue;
                }
                let target = EndpointId::new(primary, self.ship_thread(s.partition));
                if target == self.local {
                    let Some(shipping) = self.shipping.borrow().clone() else {
                        s.result = Some(Err(gave_up(s.in_doubt)));
                        continue;
                    };
                    let mut request = Vec::new();
                    encode_ship(&s.origin, procedure, s.partition, s.args, &mut request);
                    round.push((i, primary, Err(shipping.submit_local(co, request))));
                } else {
                    co.push_with(target, RequestType::Ship.into(), |buffer| {
                        encode_ship(&s.origin, procedure, s.partition, s.args, buffer);
                    });
                    round.push((i, primary, Ok(remote)));
                    remote += 1;
                }
            }
            if remote > 0 {
                co.call().await;
            }
            let mut pause = false;
            for (i, primary, how) in round {
                let sent = match how {
                    Ok(index) => co.result(index, |result| match result {
                        Ok(answer) => Round::Answer(ShipStatus::outcome(answer)),
                        Err(RpcError::NotSent | RpcError::NotMember) => Round::Unsent,
                        // Never sent: the caller runs it another way.
                        Err(RpcError::TooLarge) => Round::Answer(Some(Err(Abort::Protocol))),
                        Err(
                            RpcError::ConfigurationChanged
                            | RpcError::TargetRestarted
                            | RpcError::Overtaken,
                        ) => Round::CutOff,
                        Err(_) => Round::Failed,
                    }),
                    Err(local) => loop {
                        if let Some(answer) = local.answer.borrow_mut().take() {
                            break Round::Answer(ShipStatus::outcome(&answer));
                        }
                        if !co.wait_until(&local.ready, deadline_ns).await
                            && local.answer.borrow().is_none()
                        {
                            // Queued here and not answered in time: it may still run.
                            break Round::Answer(Some(Err(Abort::OutcomeUnknown)));
                        }
                    },
                };
                let s = &mut shipments[i];
                match sent {
                    Round::Answer(Some(Err(Abort::Protocol))) if s.in_doubt.is_some() => {
                        // Not run by this request, but an earlier one may have run: the
                        // caller must not run it another way.
                        s.result = Some(Err(Abort::OutcomeUnknown));
                    }
                    Round::Answer(Some(result)) => {
                        self.count(|c| c.shipped += 1);
                        s.result = Some(result);
                    }
                    Round::Answer(None) => {
                        // Not run by this request (not the primary there any more, or
                        // still blocked by recovery): an earlier request, if one may have
                        // run, stays in doubt until a primary answers from what it knows.
                        pause = true;
                    }
                    Round::Unsent => pause = true,
                    Round::CutOff => {
                        s.in_doubt = Some(primary);
                        // The engine moved on first: wait a little for the coordinator.
                        pause |= self.view() == view;
                    }
                    Round::Failed => s.result = Some(Err(gave_up(s.in_doubt))),
                }
            }
            if shipments.iter().all(|s| s.result.is_some()) {
                break;
            }
            if co.now_ns() >= deadline_ns {
                for s in shipments.iter_mut().filter(|s| s.result.is_none()) {
                    s.result = Some(Err(gave_up(s.in_doubt)));
                }
                break;
            }
            if pause {
                co.sleep_until((co.now_ns() + RETRY_PAUSE_NS).min(deadline_ns))
                    .await;
            }
        }
        shipments
            .into_iter()
            .map(|s| s.result.expect("every operation ended"))
            .collect()
    }
}

/// The error of a shipped operation given up: unknown if a request may have run.
fn gave_up(in_doubt: Option<u16>) -> Abort {
    if in_doubt.is_some() {
        Abort::OutcomeUnknown
    } else {
        Abort::Unavailable
    }
}
