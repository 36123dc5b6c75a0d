//! One message of a protocol phase to each of a set of nodes, and their answers.

use ferrotx_exec::Co;

use super::Coordinator;
use crate::participant::ParticipantHandler;

impl Coordinator {
    /// Sends one message to each of `nodes`, written by `encode(node, buffer)`: straight
    /// into the RPC batch for the other nodes, sent as one batch; into a scratch buffer
    /// for this node, handled here and now by this thread's participant. Returns, for
    /// each node, whether `read` took its answer as a yes (most phases: [`yes`], an
    /// answer of exactly `1`: granted, valid, logged, done).
    pub(super) async fn round(
        &self,
        co: &Co,
        request_type: u8,
        handler: ParticipantHandler,
        nodes: &[u16],
        encode: impl Fn(u16, &mut Vec<u8>),
        mut read: impl FnMut(u16, &[u8]) -> bool,
    ) -> Vec<(u16, bool)> {
        let mut answers = Vec::with_capacity(nodes.len());
        let local = self.local.node();
        let mut remote = 0;
        for &node in nodes {
            if node == local {
                let (mut request, mut response) =
                    (self.scratch.borrow_mut(), self.response.borrow_mut());
                request.clear();
                response.clear();
                encode(node, &mut request);
                let ok = handler(&mut self.participant.borrow_mut(), &request, &mut response)
                    .is_ok()
                    && read(node, &response);
                answers.push((node, ok));
            } else {
                co.push_with(self.endpoint(node), request_type, |buffer| {
                    encode(node, buffer)
                });
                remote += 1;
            }
        }
        if remote > 0 {
            co.call().await;
            let mut i = 0;
            for &node in nodes {
                if node != local {
                    let ok = co.result(i, |r| r.is_ok_and(|answer| read(node, answer)));
                    answers.push((node, ok));
                    i += 1;
                }
            }
        }
        answers
    }
}

/// The answer of most phases: exactly `1`.
pub(super) fn yes(_: u16, answer: &[u8]) -> bool {
    answer == [1]
}
