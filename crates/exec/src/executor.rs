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
    /// Coroutines in the background ([`Executor::spawn_background`]), by slot: not
    /// counted by [`Executor::live`].
    background: Vec<bool>,
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
            background: vec![false; callers],
            round: Vec::with_capacity(callers),
        }
    }

    /// The state shared with the coroutines (engine, time).
    pub fn shared(&self) -> &Rc<Shared> {
        &self.shared
    }

    /// Number of coroutines that have not finished, background ones left out.
    pub fn live(&self) -> usize {
        self.live - self.background.iter().filter(|b| **b).count()
    }

    /// Number of free coroutine slots.
    pub fn free_slots(&self) -> usize {
        self.slots.len() - self.live
    }

    /// [`Executor::spawn`] for a coroutine that runs for as long as the thread does (a
    /// protocol's driver): [`Executor::live`] does not count it.
    pub fn spawn_background<F, Fut>(&mut self, body: F) -> CallerId
    where
        F: FnOnce(Co) -> Fut,
        Fut: Future<Output = ()> + 'static,
    {
        let id = self.spawn(body);
        self.background[usize::from(id.0)] = true;
        id
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

    /// True if [`Executor::run`] would poll a coroutine: one spawned, yielded or notified
    /// ([`crate::Signal`]), one whose batch completed, or one whose deadline came.
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
            self.shared.fire_timers();
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
            self.background[usize::from(id.0)] = false;
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
                server.handle_datagram(now, Some(a), &mut d.to_vec());
            }
            tx.clear();
            server.poll_transmit(&mut tx);
            // The coroutine is only resumed through `run`, never by the delivery itself.
            let before = finished.get();
            for (_, d) in tx.iter() {
                exec.shared()
                    .engine()
                    .handle_datagram(now, Some(b), &mut d.to_vec());
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

    fn executor(callers: usize) -> Executor {
        Executor::new(Engine::new(
            EndpointId::new(0, 0),
            Config {
                callers,
                ..Config::default()
            },
        ))
    }

    type Log = Rc<std::cell::RefCell<Vec<(u8, u8)>>>;

    /// Waiters are not polled until the signal is notified, however long that takes,
    /// then each is polled once; a coroutine can notify too.
    #[test]
    fn waiters_wake_on_notify_and_not_before() {
        let mut exec = executor(4);
        let signal = Rc::new(crate::Signal::new(4));
        let log: Log = Rc::default();
        for name in 0..3u8 {
            let (signal, log) = (signal.clone(), log.clone());
            exec.spawn(move |co| async move {
                for step in 0..3 {
                    log.borrow_mut().push((name, step));
                    co.wait(&signal).await;
                }
                log.borrow_mut().push((name, 3));
            });
        }
        exec.shared().set_now_ns(1_000);
        assert_eq!(exec.run(), 3);
        assert_eq!(signal.waiters(), 3);
        for t in 1..5 {
            exec.shared().set_now_ns(t * 1_000_000_000);
            assert!(!exec.has_work());
            assert_eq!(exec.run(), 0, "a waiter was polled before the notification");
        }
        assert_eq!(exec.next_timer_ns(), None);
        assert_eq!(log.borrow().len(), 3);

        // From the event loop.
        assert_eq!(exec.shared().notify_all(&signal), 3);
        assert_eq!(signal.waiters(), 0);
        assert_eq!(exec.shared().notify_all(&signal), 0);
        assert!(exec.has_work());
        assert_eq!(exec.run(), 3, "each waiter is polled once");
        assert_eq!(log.borrow().len(), 6);
        assert!(!exec.has_work());

        // From a coroutine: the waiters run in the next round.
        let s = signal.clone();
        exec.spawn(move |co| async move {
            assert_eq!(co.notify_all(&s), 3);
        });
        assert_eq!(exec.run(), 1);
        assert!(exec.has_work());
        assert_eq!(exec.run(), 3);
        assert_eq!(exec.shared().notify_all(&signal), 3);
        assert_eq!(exec.run(), 3);
        assert_eq!(log.borrow().len(), 12);
        assert_eq!(exec.live(), 0);
    }

    /// `wait_until` returns false at its deadline, and not before; a deadline already
    /// past returns at once.
    #[test]
    fn wait_until_times_out() {
        let mut exec = executor(2);
        let signal = Rc::new(crate::Signal::new(2));
        let out = Rc::new(Cell::new(None));
        let (s, o) = (signal.clone(), out.clone());
        exec.spawn(move |co| async move {
            assert!(!co.wait_until(&s, 500).await, "a past deadline waits");
            let notified = co.wait_until(&s, 5_000).await;
            o.set(Some((notified, co.now_ns())));
        });
        exec.shared().set_now_ns(1_000);
        assert_eq!(exec.run(), 1);
        assert_eq!(out.get(), None);
        assert_eq!(exec.next_timer_ns(), Some(5_000));
        exec.shared().set_now_ns(4_999);
        assert!(!exec.has_work());
        assert_eq!(exec.run(), 0);
        exec.shared().set_now_ns(5_000);
        assert!(exec.has_work());
        assert_eq!(exec.run(), 1);
        assert_eq!(out.get(), Some((false, 5_000)));
        assert_eq!(
            signal.waiters(),
            0,
            "a timed-out waiter stays on the signal"
        );
        assert_eq!(exec.next_timer_ns(), None);
        assert_eq!(exec.shared().notify_all(&signal), 0);
        assert_eq!(exec.live(), 0);
    }

    /// Whichever of the deadline and the notification comes first ends the wait; the
    /// other never polls the coroutine again.
    #[test]
    fn a_wait_ended_by_one_wake_up_is_not_polled_by_the_other() {
        let mut exec = executor(4);
        let signal = Rc::new(crate::Signal::new(4));
        let other = Rc::new(crate::Signal::new(4));
        let log: Log = Rc::default();
        // A: times out at 5,000, then waits on `other`.
        let (s, t, l) = (signal.clone(), other.clone(), log.clone());
        exec.spawn(move |co| async move {
            let notified = co.wait_until(&s, 5_000).await;
            l.borrow_mut().push((b'A', u8::from(notified)));
            co.wait(&t).await;
            l.borrow_mut().push((b'A', 9));
        });
        // B: wakes at 4,000 (before A in the same round) and notifies A's signal, whose
        // deadline fired in the same round: A is polled once, timed out.
        let (s, l) = (signal.clone(), log.clone());
        exec.spawn(move |co| async move {
            co.sleep_until(4_000).await;
            let woken = co.notify_all(&s);
            l.borrow_mut().push((b'B', woken as u8));
        });
        exec.shared().set_now_ns(1_000);
        assert_eq!(exec.run(), 2);
        exec.shared().set_now_ns(6_000);
        assert_eq!(exec.run(), 2);
        assert_eq!(*log.borrow(), vec![(b'B', 0), (b'A', 0)]);
        // Notified after its timeout: A, now waiting on `other`, is not polled.
        assert_eq!(exec.shared().notify_all(&signal), 0);
        assert!(!exec.has_work());
        assert_eq!(exec.run(), 0);

        // C: notified before its deadline; the deadline then does nothing.
        let (s, l) = (signal.clone(), log.clone());
        exec.spawn(move |co| async move {
            let notified = co.wait_until(&s, 10_000).await;
            l.borrow_mut().push((b'C', u8::from(notified)));
            co.sleep_until(1_000_000).await;
        });
        assert_eq!(exec.run(), 1);
        assert_eq!(exec.next_timer_ns(), Some(10_000));
        exec.shared().set_now_ns(7_000);
        assert_eq!(exec.shared().notify_all(&signal), 1);
        assert_eq!(exec.run(), 1);
        assert_eq!(
            exec.next_timer_ns(),
            Some(1_000_000),
            "the notified wait's deadline"
        );
        exec.shared().set_now_ns(20_000);
        assert!(!exec.has_work());
        assert_eq!(exec.run(), 0);

        // D: its deadline has passed but not fired when the signal comes: notified, and
        // polled once.
        let (s, l) = (signal.clone(), log.clone());
        exec.spawn(move |co| async move {
            let notified = co.wait_until(&s, 25_000).await;
            l.borrow_mut().push((b'D', u8::from(notified)));
        });
        assert_eq!(exec.run(), 1);
        exec.shared().set_now_ns(30_000);
        assert_eq!(exec.shared().notify_all(&signal), 1);
        assert_eq!(exec.run(), 1);
        assert_eq!(exec.run(), 0);
        assert_eq!(
            *log.borrow(),
            vec![(b'B', 0), (b'A', 0), (b'C', 1), (b'D', 1)]
        );
        assert_eq!(exec.shared().notify_all(&other), 1);
        assert_eq!(exec.run(), 1);
        assert_eq!(log.borrow().last(), Some(&(b'A', 9)));
    }

    /// A wait dropped before it ended leaves neither its place on the signal nor its
    /// deadline.
    #[test]
    fn an_abandoned_wait_leaves_no_trace() {
        let mut exec = executor(1);
        let signal = Rc::new(crate::Signal::new(1));
        let s = signal.clone();
        exec.spawn(move |co| async move {
            {
                let mut wait = std::pin::pin!(co.wait_until(&s, 5_000));
                std::future::poll_fn(|cx| {
                    assert!(wait.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
                assert_eq!(s.waiters(), 1);
            }
            assert_eq!(s.waiters(), 0);
            co.yield_now().await;
        });
        exec.shared().set_now_ns(1_000);
        assert_eq!(exec.run(), 1);
        assert_eq!(exec.next_timer_ns(), None);
        assert_eq!(exec.shared().notify_all(&signal), 0);
        assert_eq!(exec.run(), 1);
        exec.shared().set_now_ns(10_000);
        assert!(!exec.has_work());
        assert_eq!(exec.live(), 0);
    }

    /// Many coroutines wait on one signal, round after round, some with deadlines: each
    /// notification wakes all of them once, and nothing grows.
    #[test]
    fn many_coroutines_wait_on_one_signal_without_allocating() {
        const N: usize = 64;
        const ROUNDS: u32 = 100;
        let mut exec = executor(N);
        let signal = Rc::new(crate::Signal::new(N));
        let woken = Rc::new(Cell::new(0u32));
        for i in 0..N {
            let (s, w) = (signal.clone(), woken.clone());
            exec.spawn(move |co| async move {
                for _ in 0..ROUNDS {
                    if i % 2 == 0 {
                        co.wait(&s).await;
                    } else {
                        assert!(co.wait_until(&s, u64::MAX).await);
                    }
                    w.set(w.get() + 1);
                }
            });
        }
        let capacity = signal.waiters.borrow().capacity();
        let timers = exec.shared().timers.borrow().capacity();
        let mut now = 1_000;
        exec.shared().set_now_ns(now);
        assert_eq!(exec.run(), N);
        for round in 1..=ROUNDS {
            assert_eq!(signal.waiters(), N);
            assert!(exec.shared().timers.borrow().len() <= N / 2);
            now += 1_000;
            exec.shared().set_now_ns(now);
            assert_eq!(exec.run(), 0);
            assert_eq!(exec.shared().notify_all(&signal), N);
            assert_eq!(exec.run(), N);
            assert_eq!(woken.get(), round * N as u32);
        }
        assert_eq!(exec.live(), 0);
        assert_eq!(signal.waiters.borrow().capacity(), capacity);
        assert_eq!(exec.shared().timers.borrow().capacity(), timers);
        assert_eq!(exec.next_timer_ns(), None);
    }
}
