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

    /// The timeout for a first transmission, within `[min, max]`.
    pub(crate) fn rto_ns(&self, min: u64, max: u64) -> u64 {
        (self.srtt_ns + 4 * self.rttvar_ns).clamp(min, max)
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
        let rto = e.rto_ns(1, 1_000_000);
        assert!((200..=260).contains(&rto), "{rto}");
        e.sample(1_000_000);
        assert!(e.rto_ns(1, u64::MAX) > 200_000);
        assert_eq!(e.rto_ns(1, 5000), 5000);
    }
}
