//! One message of a protocol phase to each of a set of nodes, and their answers.

use ferrotx_exec::Co;
use ferrotx_rpc::RpcError;
use ferrotx_wire::RequestType;

use super::Coordinator;
use crate::answer::Answer;
use crate::participant::Participant;

impl Coordinator {
    /// Sends one message to each of `nodes`, written by `encode(node, buffer)`: straight
    /// into the RPC batch for the other nodes, sent in batches of at most the engine's
    /// `max_batch` requests (one batch, one round trip, unless a phase reaches more
    /// remote nodes than that); into a scratch buffer for this node, handled here and now
    /// by this thread's participant. Returns, for each node, whether `read` took its
    /// answer as a yes (most phases: [`yes`], exactly [`Answer::Granted`]: locked,
    /// valid, logged, done); an answer that did not arrive (an RPC error) is a no.
    pub(super) async fn round(
        &self,
        co: &Co,
        request_type: RequestType,
        nodes: &[u16],
        encode: impl Fn(u16, &mut Vec<u8>),
        mut read: impl FnMut(u16, &[u8]) -> bool,
    ) -> Vec<(u16, bool)> {
        self.round_results(co, request_type, nodes, encode, |node, result| {
            result.is_ok_and(|answer| read(node, answer))
        })
        .await
    }

    /// [`Coordinator::round`] whose `read` also sees the calls that failed, with why (a
    /// handler's refusal here is [`RpcError::Handler`]).
    pub(super) async fn round_results(
        &self,
        co: &Co,
        request_type: RequestType,
        nodes: &[u16],
        encode: impl Fn(u16, &mut Vec<u8>),
        mut read: impl FnMut(u16, Result<&[u8], RpcError>) -> bool,
    ) -> Vec<(u16, bool)> {
        // The request this node sends itself runs the handler the engine would.
        let handler = Participant::handler(request_type).expect("a participant's request");
        let mut answers = Vec::with_capacity(nodes.len());
        let local = self.local.node();
        let batch_max = co.engine().config().max_batch;
        assert!(batch_max > 0);
        // The nodes of the batch being filled start at `nodes[batch_start]`.
        let mut batch_start = 0;
        let mut batched = 0;
        for (i, &node) in nodes.iter().enumerate() {
            if node == local {
                // `sync` mode: COMMIT-BACKUP, COMMIT-PRIMARY and recovery's decisions are
                // answered once the log is durable, as a remote participant answers
                // (`crate::durable`).
                // The buffers are shared by this thread's coroutines: the one-byte
                // answer is kept across the wait.
                let waiting = {
                    let (mut request, mut response) =
                        (self.scratch.borrow_mut(), self.response.borrow_mut());
                    request.clear();
                    response.clear();
                    encode(node, &mut request);
                    let mut participant = self.participant.borrow_mut();
                    participant.take_wait();
                    let result = handler(&mut participant, &request, &mut response);
                    let wait = if participant.waits_for_disk()
                        && matches!(
                            request_type,
                            RequestType::CommitBackup
                                | RequestType::CommitPrimary
                                | RequestType::CommitRecovery
                                | RequestType::AbortRecovery
                        ) {
                        participant.take_wait()
                    } else {
                        0
                    };
                    drop(participant);
                    if wait == 0 {
                        let ok = match result {
                            Ok(()) => read(node, Ok(&response)),
                            Err(_) => read(node, Err(RpcError::Handler)),
                        };
                        answers.push((node, ok));
                        None
                    } else {
                        // A COMMIT-PRIMARY whose install waits is recovery's if the view
                        // changes first (`crate::durable`): its answer is then
                        // "undecided".
                        let view = (request_type == RequestType::CommitPrimary)
                            .then(|| crate::messages::decode_tx(&request).ok())
                            .flatten()
                            .map(|tx| tx.view);
                        Some((result, wait, [response.first().copied().unwrap_or(0)], view))
                    }
                };
                if let Some((result, wait, mut answer, view)) = waiting {
                    let durable = Participant::wait_durable(&self.participant, co, wait).await;
                    if view.is_some_and(|v| v < self.participant.borrow().view()) {
                        answer = [Answer::Undecided as u8];
                    }
                    let ok = match result {
                        Ok(()) if durable => read(node, Ok(&answer)),
                        _ => read(node, Err(RpcError::Handler)),
                    };
                    answers.push((node, ok));
                }
                continue;
            }
            if batched == batch_max {
                self.call(co, &nodes[batch_start..i], &mut read, &mut answers)
                    .await;
                batch_start = i;
                batched = 0;
            }
            co.push_with(self.endpoint(node), request_type.into(), |buffer| {
                encode(node, buffer)
            });
            batched += 1;
        }
        if batched > 0 {
            self.call(co, &nodes[batch_start..], &mut read, &mut answers)
                .await;
        }
        debug_assert_eq!(answers.len(), nodes.len());
        answers
    }

    /// Sends the batch of requests pushed for the remote ones of `nodes`, in that order,
    /// and appends each one's answer as `read` takes it.
    async fn call(
        &self,
        co: &Co,
        nodes: &[u16],
        read: &mut impl FnMut(u16, Result<&[u8], RpcError>) -> bool,
        answers: &mut Vec<(u16, bool)>,
    ) {
        co.call().await;
        let local = self.local.node();
        let mut i = 0;
        for &node in nodes {
            if node != local {
                let ok = co.result(i, |r| read(node, r));
                answers.push((node, ok));
                i += 1;
            }
        }
        debug_assert_eq!(i, co.batch_len());
    }
}

/// The answer of most phases: exactly [`Answer::Granted`].
pub(super) fn yes(_: u16, answer: &[u8]) -> bool {
    Answer::is_granted(answer)
}
