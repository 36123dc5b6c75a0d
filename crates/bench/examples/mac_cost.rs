//! What sealing and opening one datagram costs (`ferrotx_wire::auth`: BLAKE3 in keyed mode
//! over the datagram, plus the trailer), by datagram size, on one core:
//!
//! ```sh
//! cargo run --release -p ferrotx-bench --example mac_cost
//! ```
//!
//! Prints nanoseconds per datagram and per KiB for each size, for sealing and for opening
//! (opening checks the tag again). A micro-benchmark: what it says of the data path is
//! checked by `bench rpc` and `bench tatp` with and without `--no-auth`
//! (scripts/ab_compare.py).

use std::hint::black_box;
use std::time::Instant;

use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys, TRAILER_BYTES};

fn main() {
    let auth = Auth::new(
        Keys::one(Key::from_material(&[0x42; KEY_BYTES])),
        ClusterId([7; 16]),
    );
    println!("bytes  seal_ns  open_ns  seal_ns_per_kib  open_ns_per_kib");
    for size in [64usize, 256, 1024, 4096, 16384, 65000] {
        let body: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut buf = Vec::with_capacity(size + TRAILER_BYTES);
        // About 0.3 s per size.
        let rounds = (300_000_000 / (size as u64 + 200)).max(1_000);
        let start = Instant::now();
        for seq in 0..rounds {
            buf.clear();
            buf.extend_from_slice(&body);
            auth.seal(&mut buf, 1, seq);
            black_box(&buf);
        }
        let seal_ns = start.elapsed().as_nanos() as f64 / rounds as f64;
        let start = Instant::now();
        for _ in 0..rounds {
            black_box(auth.open(black_box(&buf), 1).expect("opens"));
        }
        let open_ns = start.elapsed().as_nanos() as f64 / rounds as f64;
        let kib = size as f64 / 1024.0;
        println!(
            "{size:>5}  {seal_ns:>7.0}  {open_ns:>7.0}  {:>15.0}  {:>15.0}",
            seal_ns / kib,
            open_ns / kib
        );
    }
}
