//! Fixed coroutine slots, polled when the engine says their batch is done.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use ferrotx_rpc::{CallerId, Engine};

use crate::co::{Co, Shared};

type Coroutine = Pin<Box<dyn Future<Output = ()>>>;

/// The coroutines of one worker thread. Call [`Executor::run`] once per event-loop
/// iteration, after the engine took the received datagrams and before it transmits.
pub struct Executor {
    shared: Rc<Shared>,
    slots: Vec<Option<Coroutine>>,
    live: usize,
    /// Scratch list of coroutines to poll this round; kept to avoid allocating.
    round: Vec<CallerId>,
}

impl Executor {
    /// An executor with one coroutine slot per caller of `engine`.
    pub fn new(engine: Engine) -> Self {
        let callers = engine.config().callers;
        Self {
            shared: Rc::new(Shared::new(engine)),
            slots: (0..callers).map(|_| None).collect(),
            live: 0,
            round: Vec::with_capacity(callers),
        }
    }

    /// The state shared with the coroutines (engine, time).
    pub fn shared(&self) -> &Rc<Shared> {
        &self.shared
    }

    /// Number of coroutines that have not finished.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Number of free coroutine slots.
    pub fn free_slots(&self) -> usize {
        self.slots.len() - self.live
    }

    /// Starts a coroutine in the first free slot; it first runs in the next
    /// [`Executor::run`]. Panics if every slot is taken.
    pub fn spawn<F, Fut>(&mut self, body: F) -> CallerId
    where
        F: FnOnce(Co) -> Fut,
        Fut: Future<Output = ()> + 'static,
    {
        let index = self
            .slots
            .iter()
            .position(Option::is_none)
            .expect("no free coroutine slot");
        let id = CallerId(index as u16);
        let co = Co::new(self.shared.clone(), id);
        self.slots[index] = Some(Box::pin(body(co)));
        self.live += 1;
        self.shared.runnable.borrow_mut().push(id);
        id
    }

    /// True if [`Executor::run`] would poll a coroutine.
    pub fn has_work(&self) -> bool {
        !self.shared.runnable.borrow().is_empty()
            || self.shared.engine().has_ready()
            || self.shared.timer_due()
    }

    /// The earliest deadline of a sleeping coroutine ([`Co::sleep_until`]).
    pub fn next_timer_ns(&self) -> Option<u64> {
        self.shared.next_timer_ns()
    }

    /// Polls every coroutine that can progress: those spawned or yielded since the last
    /// round, then those whose batch completed (repeatedly, until none is left). Returns
    /// the number of polls.
    pub fn run(&mut self) -> usize {
        let mut polls = 0;
        if self.shared.timer_due() {
            let now = self.shared.now_ns();
            let mut timers = self.shared.timers.borrow_mut();
            let mut runnable = self.shared.runnable.borrow_mut();
            while let Some(&std::cmp::Reverse((at, id))) = timers.peek() {
                if at > now {
                    break;
                }
                timers.pop();
                runnable.push(CallerId(id));
            }
            let next = timers
                .peek()
                .map_or(u64::MAX, |std::cmp::Reverse((at, _))| *at);
            self.shared.next_deadline_ns.set(next);
        }
        std::mem::swap(&mut self.round, &mut *self.shared.runnable.borrow_mut());
        let mut round = std::mem::take(&mut self.round);
        for &id in &round {
            polls += self.poll(id);
        }
        round.clear();
        self.round = round;
        loop {
            let next = self.shared.engine().poll_ready();
            let Some(id) = next else { break };
            polls += self.poll(id);
        }
        polls
    }

    fn poll(&mut self, id: CallerId) -> usize {
        let slot = &mut self.slots[usize::from(id.0)];
        let Some(coroutine) = slot.as_mut() else {
            return 0;
        };
        let mut cx = Context::from_waker(Waker::noop());
        if let Poll::Ready(()) = coroutine.as_mut().poll(&mut cx) {
            *slot = None;
            self.live -= 1;
        }
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotx_rpc::Config;
    use ferrotx_wire::EndpointId;
    use ferrotx_wire::batch::TxBatch;
    use std::cell::Cell;

    /// Two engines wired back to back, the second echoing; one coroutine on the first
    /// sends three batches and checks every response.
    #[test]
    fn coroutine_resumes_only_when_its_batch_is_complete() {
        let a = EndpointId::new(0, 0);
        let b = EndpointId::new(1, 0);
        let mut server = Engine::new(
            b,
            Config {
                callers: 1,
                ..Config::default()
            },
        );
        server.register(
            7,
            Box::new(|req, resp| {
                resp.extend_from_slice(req.payload);
                resp.push(b'!');
                Ok(())
            }),
        );
        let mut exec = Executor::new(Engine::new(
            a,
            Config {
                callers: 2,
                ..Config::default()
            },
        ));
        let finished = Rc::new(Cell::new(0));
        let f = finished.clone();
        exec.spawn(move |co| async move {
            for round in 0..3u8 {
                for i in 0..5u8 {
                    co.push(b, 7, &[round, i]);
                }
                co.call().await;
                assert_eq!(co.batch_len(), 5);
                for i in 0..5u8 {
                    co.result(usize::from(i), |r| {
                        assert_eq!(r.unwrap(), &[round, i, b'!'])
                    });
                }
                f.set(f.get() + 1);
            }
        });
        let mut tx = TxBatch::new(16, 65_507);
        let mut now = 0;
        for _ in 0..10 {
            now += 1000;
            exec.shared().set_now_ns(now);
            exec.run();
            exec.shared().engine().poll_transmit(&mut tx);
            for (_, d) in tx.iter() {
                server.handle_datagram(now, Some(a), d);
            }
            tx.clear();
            server.poll_transmit(&mut tx);
            // The coroutine is only resumed through `run`, never by the delivery itself.
            let before = finished.get();
            for (_, d) in tx.iter() {
                exec.shared().engine().handle_datagram(now, Some(b), d);
            }
            assert_eq!(finished.get(), before);
            tx.clear();
        }
        assert_eq!(finished.get(), 3);
        assert_eq!(exec.live(), 0);
    }

    /// Sleeping coroutines wake in deadline order once the loop's time reaches their
    /// deadline, and not before; the executor reports the next deadline.
    #[test]
    fn sleeping_coroutines_wake_at_their_deadlines() {
        let mut exec = Executor::new(Engine::new(
            EndpointId::new(0, 0),
            Config {
                callers: 3,
                ..Config::default()
            },
        ));
        let woke = Rc::new(std::cell::RefCell::new(Vec::new()));
        for (name, deadline) in [(b'a', 5_000u64), (b'b', 2_000), (b'c', 0)] {
            let woke = woke.clone();
            exec.spawn(move |co| async move {
                co.sleep_until(deadline).await;
                woke.borrow_mut().push((name, co.now_ns()));
            });
        }
        exec.shared().set_now_ns(1_000);
        exec.run();
        // A deadline already past does not sleep.
        assert_eq!(*woke.borrow(), vec![(b'c', 1_000)]);
        assert_eq!(exec.next_timer_ns(), Some(2_000));
        assert!(!exec.has_work());
        exec.shared().set_now_ns(1_999);
        exec.run();
        assert_eq!(woke.borrow().len(), 1);
        exec.shared().set_now_ns(6_000);
        assert!(exec.has_work());
        exec.run();
        assert_eq!(
            *woke.borrow(),
            vec![(b'c', 1_000), (b'b', 6_000), (b'a', 6_000)]
        );
        assert_eq!(exec.next_timer_ns(), None);
        assert_eq!(exec.live(), 0);
    }
}
