//! Retransmission timeout from measured round trips (RFC 6298's estimator).

/// Smoothed round-trip time and deviation of one session, in nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RttEstimator {
    srtt_ns: u64,
    rttvar_ns: u64,
}

impl RttEstimator {
    /// Adds a sample from a request answered without retransmission (Karn's rule).
    pub(crate) fn sample(&mut self, rtt_ns: u64) {
        if self.srtt_ns == 0 {
            self.srtt_ns = rtt_ns.max(1);
            self.rttvar_ns = rtt_ns / 2;
        } else {
            let deviation = self.srtt_ns.abs_diff(rtt_ns);
            self.rttvar_ns = (3 * self.rttvar_ns + deviation) / 4;
            self.srtt_ns = ((7 * self.srtt_ns + rtt_ns) / 8).max(1);
        }
    }

    /// The timeout for a first transmission, within `[min, max]`: RFC 6298's smoothed
    /// round trip plus four deviations, but at least three smoothed round trips.
    ///
    /// The floor is for loaded nodes sharing cores. Karn's rule keeps samples only from
    /// requests answered without retransmission, which leaves out the slowest ones, so
    /// under a steady load the deviation reads small and the estimate sits just above the
    /// typical round trip; every answer delayed by a descheduled peer was then sent for
    /// again. In TATP at 64 coroutines per node (3 node processes on 2 cores), 157 K to
    /// 168 K of about 15 M requests were retransmitted without the floor and 30 K to 35 K
    /// with it, for 2 to 4% more transactions; `bench rpc --loss 0.01` recovered from loss
    /// as fast (4.70-4.72 M against 4.75-4.76 M RPCs/s), its timeouts being at the
    /// minimum anyway (runs back to back).
    pub(crate) fn rto_ns(&self, min: u64, max: u64) -> u64 {
        (self.srtt_ns + 4 * self.rttvar_ns)
            .max(3 * self.srtt_ns)
            .clamp(min, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_samples_within_bounds() {
        let mut e = RttEstimator::default();
        assert_eq!(e.rto_ns(100, 1000), 100);
        for _ in 0..50 {
            e.sample(200);
        }
        // Steady samples: the deviation decays, and three round trips are the floor.
        let rto = e.rto_ns(1, 1_000_000);
        assert_eq!(rto, 600);
        let mut jumpy = RttEstimator::default();
        for i in 0..50 {
            jumpy.sample(if i % 2 == 0 { 100 } else { 300 });
        }
        // Varying samples: smoothed round trip plus four deviations, above the floor.
        let rto = jumpy.rto_ns(1, 1_000_000);
        assert!(rto > 3 * 200 && rto < 1_000, "{rto}");
        e.sample(1_000_000);
        assert!(e.rto_ns(1, u64::MAX) > 200_000);
        assert_eq!(e.rto_ns(1, 5000), 5000);
    }
}
