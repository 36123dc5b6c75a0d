//! What sealing and opening one datagram costs (`ferrotx_wire::auth`: AEGIS-128X2 over the
//! datagram), by datagram size, on one core, beside BLAKE3's keyed hash of the same bytes
//! (the MAC ferrotx used first):
//!
//! ```sh
//! cargo run --release -p ferrotx-bench --example mac_cost
//! ```
//!
//! Prints nanoseconds per datagram and per KiB for each size, for sealing (encrypt and tag)
//! and opening (check and decrypt), and for the keyed hash. Then sealing alone by AEAD:
//! ring's AES-128-GCM (what `auth` used before AEGIS) and AEGIS-128L, -128X2 and -128X4. A micro-benchmark: what it says
//! of the data path is checked by `bench rpc` and `bench tatp` with and without
//! `--no-auth` (scripts/ab_compare.py).

use std::hint::black_box;
use std::time::Instant;

use aegis::aegis128l::Aegis128L;
use aegis::aegis128x2::Aegis128X2;
use aegis::aegis128x4::Aegis128X4;
use ferrotx_wire::auth::{Auth, ClusterId, KEY_BYTES, Key, Keys, Sender, TRAILER_BYTES};
use ring::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};

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
    println!();
    println!("sealing alone (no associated data), by AEAD");
    println!("bytes  aes128gcm_ring_ns  aegis128l_ns  aegis128x2_ns  aegis128x4_ns");
    let gcm = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[3; 16]).expect("a key"));
    for size in [64usize, 65, 128, 256, 1024, 1472, 4096, 9600, 65000] {
        let mut buf = vec![7u8; size];
        let rounds = (200_000_000 / (size as u64 + 200)).max(1_000);
        let mut time = |seal: &mut dyn FnMut(&mut [u8], u64)| {
            let start = Instant::now();
            for seq in 0..rounds {
                seal(&mut buf, seq);
            }
            start.elapsed().as_nanos() as f64 / rounds as f64
        };
        let nonce = |seq: u64| {
            let mut n = [0u8; 16];
            n[4..12].copy_from_slice(&seq.to_le_bytes());
            n
        };
        let ring_ns = time(&mut |b, seq| {
            let mut n = [0u8; 12];
            n[4..].copy_from_slice(&seq.to_le_bytes());
            let tag = gcm
                .seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::empty(), b)
                .expect("seals");
            let _ = black_box(tag);
        });
        let l_ns = time(&mut |b, seq| {
            black_box(Aegis128L::<16>::new(&[3; 16], &nonce(seq)).encrypt_in_place(b, &[]));
        });
        let x2_ns = time(&mut |b, seq| {
            black_box(Aegis128X2::<16>::new(&[3; 16], &nonce(seq)).encrypt_in_place(b, &[]));
        });
        let x4_ns = time(&mut |b, seq| {
            black_box(Aegis128X4::<16>::new(&[3; 16], &nonce(seq)).encrypt_in_place(b, &[]));
        });
        println!("{size:>5}  {ring_ns:>17.0}  {l_ns:>12.0}  {x2_ns:>13.0}  {x4_ns:>13.0}");
    }
}
