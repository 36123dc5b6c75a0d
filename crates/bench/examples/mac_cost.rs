//! What sealing and opening one datagram costs (`ferrotx_wire::auth`: AES-128-GCM over the
//! datagram and its trailer), by datagram size, on one core, beside BLAKE3's keyed hash of
//! the same bytes (the MAC ferrotx used first):
//!
//! ```sh
//! cargo run --release -p ferrotx-bench --example mac_cost
//! ```
//!
//! Prints nanoseconds per datagram and per KiB for each size, for sealing (encrypt and tag)
//! and opening (check and decrypt), and for the keyed hash. A micro-benchmark: what it says
//! of the data path is checked by `bench rpc` and `bench tatp` with and without
//! `--no-auth` (scripts/ab_compare.py).

use std::hint::black_box;
use std::time::Instant;

use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys, Sender, TRAILER_BYTES};

fn main() {
    let auth = Auth::new(
        Keys::one(Key::from_material(&[0x42; KEY_BYTES])),
        ClusterId([7; 16]),
        [9; 16],
    );
    let sender = auth.sealer(Sender::Rpc {
        endpoint: 2,
        incarnation: 1,
    });
    let mut receiver = auth.sealer(Sender::Rpc {
        endpoint: 1,
        incarnation: 1,
    });
    let blake3_key = [0x42; 32];
    println!(
        "bytes  seal_ns  open_ns  blake3_ns  seal_ns_per_kib  open_ns_per_kib  blake3_ns_per_kib"
    );
    for size in [64usize, 256, 1024, 1472, 4096, 16384, 65000] {
        let body: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut buf = Vec::with_capacity(size + TRAILER_BYTES);
        // About 0.3 s per size and operation.
        let rounds = (300_000_000 / (size as u64 + 200)).max(1_000);
        let start = Instant::now();
        for seq in 0..rounds {
            buf.clear();
            buf.extend_from_slice(&body);
            sender.seal(&mut buf, 1, seq);
            black_box(&buf);
        }
        let seal_ns = start.elapsed().as_nanos() as f64 / rounds as f64;
        let sealed = buf.clone();
        let start = Instant::now();
        for _ in 0..rounds {
            // Opening decrypts in place: each round opens a fresh copy (the copy is a
            // memcpy, which a receive into the same buffer would cost too).
            buf.clear();
            buf.extend_from_slice(&sealed);
            black_box(receiver.open(black_box(&mut buf), 1).expect("opens"));
        }
        let open_ns = start.elapsed().as_nanos() as f64 / rounds as f64;
        let start = Instant::now();
        for _ in 0..rounds {
            black_box(blake3::keyed_hash(&blake3_key, black_box(&body)));
        }
        let blake3_ns = start.elapsed().as_nanos() as f64 / rounds as f64;
        let kib = size as f64 / 1024.0;
        println!(
            "{size:>5}  {seal_ns:>7.0}  {open_ns:>7.0}  {blake3_ns:>9.0}  {:>15.0}  {:>15.0}  {:>17.0}",
            seal_ns / kib,
            open_ns / kib,
            blake3_ns / kib
        );
    }
}
