//! The caller's side of shipping ([`crate::ship`]): one SHIP request to the primary of an
//! operation's partition, asked again after a configuration change.

use ferrotx_exec::Co;
use ferrotx_rpc::RpcError;
use ferrotx_wire::EndpointId;

use super::{Abort, Coordinator, NO_PRIMARY};
use crate::ship::{Origin, SHIP, ShipResult, ShipStatus, encode_ship};

/// How long the caller waits before asking again after a "retry" answer (the primary
/// was not the primary any more, or a configuration change aborted the operation there).
const RETRY_PAUSE_NS: u64 = 1_000_000;

impl Coordinator {
    /// Runs procedure `procedure` with `args` at the primary of `partition` (every key
    /// of the operation must be in partitions with that primary; the primary refuses the
    /// others with "retry" until the caller's placement agrees), and returns its result.
    ///
    /// - A configuration change that cuts the call off: asked again, with the same
    ///   [`Origin`], of the partition's primary once the new configuration is committed.
    ///   The primary answers from the first run if there was one: the same primary
    ///   remembers it, and a new one learns it from the batch's records (their note),
    ///   applied by truncation or by recovery's commit, before it runs anything on the
    ///   partitions recovery blocks. An operation it never heard of never committed,
    ///   and runs now. Forgotten ones (long ago) answer [`Abort::OutcomeUnknown`].
    /// - Nothing sent yet, or a "retry" answer: nothing changed, asked again up to
    ///   `deadline_ns`, then [`Abort::Unavailable`].
    /// - Conflicts that outlasted the primary's retries: [`Abort::Conflict`] (nothing
    ///   changed); too large for one commit: [`Abort::TooLarge`].
    pub async fn ship(
        &self,
        co: &Co,
        procedure: u8,
        partition: u32,
        args: &[u8],
        deadline_ns: u64,
    ) -> ShipResult {
        let seq = self.next_ship_seq.get();
        self.next_ship_seq.set(seq + 1);
        let origin = Origin {
            node: self.local.node(),
            thread: self.local.thread(),
            incarnation: self.incarnation,
            seq,
        };
        let thread =
            u16::try_from(partition % u32::from(self.ship_threads.get())).expect("below a u16");
        // The primary a request went to whose fate is unknown (cut off by a configuration
        // change): the operation may have run, so giving up answers "outcome unknown".
        let mut in_doubt: Option<u16> = None;
        loop {
            if !self.accepting.get() && !self.wait_accepting(co, deadline_ns).await {
                return Err(self.gave_up(in_doubt));
            }
            let primary = self.primary_of_partition(partition);
            if primary == NO_PRIMARY {
                return Err(self.gave_up(in_doubt));
            }
            let view = self.configuration();
            let target = EndpointId::new(primary, thread);
            let outcome = if target == self.local {
                let Some(shipping) = self.shipping.borrow().clone() else {
                    return Err(self.gave_up(in_doubt));
                };
                let mut request = Vec::new();
                encode_ship(&origin, procedure, partition, args, &mut request);
                let local = shipping.submit_local(co, request);
                loop {
                    if let Some(answer) = local.answer.borrow_mut().take() {
                        break Ok(ShipStatus::outcome(&answer));
                    }
                    if !co.wait_until(&local.ready, deadline_ns).await
                        && local.answer.borrow().is_none()
                    {
                        // Queued here and not run yet: it may still run.
                        return Err(Abort::OutcomeUnknown);
                    }
                }
            } else {
                co.push_with(target, SHIP, |buffer| {
                    encode_ship(&origin, procedure, partition, args, buffer);
                });
                co.call().await;
                co.result(0, |result| match result {
                    Ok(answer) => Ok(ShipStatus::outcome(answer)),
                    Err(error) => Err(error),
                })
            };
            match outcome {
                Ok(Some(result)) => {
                    self.count(|s| s.shipped += 1);
                    return result;
                }
                Ok(None) => {
                    // Not run there: nothing changed by this request, and any earlier one
                    // to that primary was answered before it (one queue per partition).
                    in_doubt = None;
                    if co.now_ns() >= deadline_ns {
                        return Err(Abort::Unavailable);
                    }
                    co.sleep_until((co.now_ns() + RETRY_PAUSE_NS).min(deadline_ns))
                        .await;
                }
                Err(RpcError::NotSent | RpcError::NotMember) => {
                    if co.now_ns() >= deadline_ns {
                        return Err(self.gave_up(in_doubt));
                    }
                    co.sleep_until((co.now_ns() + RETRY_PAUSE_NS).min(deadline_ns))
                        .await;
                }
                Err(RpcError::ConfigurationChanged | RpcError::TargetRestarted) => {
                    in_doubt = Some(primary);
                    if co.now_ns() >= deadline_ns {
                        return Err(Abort::OutcomeUnknown);
                    }
                    if self.configuration() == view {
                        // The engine moved on first: wait a little for the coordinator.
                        co.sleep_until((co.now_ns() + RETRY_PAUSE_NS).min(deadline_ns))
                            .await;
                    }
                }
                Err(_) => return Err(self.gave_up(in_doubt)),
            }
        }
    }

    /// The error of a shipped operation given up: unknown if a request may have run.
    fn gave_up(&self, in_doubt: Option<u16>) -> Abort {
        if in_doubt.is_some() {
            Abort::OutcomeUnknown
        } else {
            Abort::Unavailable
        }
    }
}
