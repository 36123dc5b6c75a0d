//! PNG encoding without dependencies: 8-bit RGB, filter 0 on every row, and one zlib
//! stream of fixed-Huffman deflate whose only matches repeat the previous pixel or the
//! row above (plots are mostly runs of one colour, so that suffices).

/// Encodes `rgb` (`width * height` pixels, three bytes each, row by row) as a PNG file.
pub fn encode(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let stride = width as usize * 3;
    assert_eq!(
        rgb.len(),
        stride * height as usize,
        "{width}x{height} pixels"
    );
    let mut raw = Vec::with_capacity(rgb.len() + height as usize);
    for row in rgb.chunks(stride.max(1)) {
        raw.push(0); // filter type 0: none
        raw.extend_from_slice(row);
    }
    let mut zlib = vec![0x78, 0x01]; // deflate, 32 KiB window, no dictionary, fastest
    zlib.extend(deflate(&raw, &[3, stride + 1]));
    zlib.extend(adler32(&raw).to_be_bytes());
    // 8 bits, RGB, deflate, filter method 0, no interlace
    let header = [
        &width.to_be_bytes()[..],
        &height.to_be_bytes(),
        &[8, 2, 0, 0, 0],
    ]
    .concat();
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, data) in [(b"IHDR", header), (b"IDAT", zlib), (b"IEND", Vec::new())] {
        png.extend((data.len() as u32).to_be_bytes());
        let start = png.len();
        png.extend(kind);
        png.extend(&data);
        let crc = crc32(&png[start..]);
        png.extend(crc.to_be_bytes());
    }
    png
}

/// The CRC-32 of PNG and zlib (reflected, polynomial 0xEDB88320), table-driven.
pub fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0; 256];
        let mut n = 0;
        while n < 256 {
            let mut c = n as u32;
            let mut k = 0;
            while k < 8 {
                c = (c >> 1) ^ (0xEDB8_8320 * (c & 1));
                k += 1;
            }
            table[n] = c;
            n += 1;
        }
        table
    };
    !data.iter().fold(!0u32, |c, &b| {
        TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

/// zlib's Adler-32 checksum.
pub fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        // 5552 bytes is the most that cannot overflow `b` before the reduction.
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        (a, b) = (a % 65521, b % 65521);
    }
    (b << 16) | a
}

/// Deflate's length codes from 257, for match lengths 3..=258: each code's smallest
/// length and how many extra bits add to it.
#[rustfmt::skip]
const LENGTHS: [(u16, u8); 29] = [
    (3, 0), (4, 0), (5, 0), (6, 0), (7, 0), (8, 0), (9, 0), (10, 0), (11, 1), (13, 1),
    (15, 1), (17, 1), (19, 2), (23, 2), (27, 2), (31, 2), (35, 3), (43, 3), (51, 3), (59, 3),
    (67, 4), (83, 4), (99, 4), (115, 4), (131, 5), (163, 5), (195, 5), (227, 5), (258, 0),
];
/// The same for the distance codes from 0, for distances 1..=32768.
#[rustfmt::skip]
const DISTANCES: [(u16, u8); 30] = [
    (1, 0), (2, 0), (3, 0), (4, 0), (5, 1), (7, 1), (9, 2), (13, 2),
    (17, 3), (25, 3), (33, 4), (49, 4), (65, 5), (97, 5), (129, 6), (193, 6),
    (257, 7), (385, 7), (513, 8), (769, 8), (1025, 9), (1537, 9), (2049, 10), (3073, 10),
    (4097, 11), (6145, 11), (8193, 12), (12289, 12), (16385, 13), (24577, 13),
];

/// One final fixed-Huffman deflate block of `data`: at each byte, the longest match at
/// one of `distances` back if it is at least 3 bytes long, else a literal.
fn deflate(data: &[u8], distances: &[usize]) -> Vec<u8> {
    let mut out = Bits::default();
    out.put(0b011, 3); // BFINAL, then BTYPE 01: fixed Huffman codes
    let mut i = 0;
    while i < data.len() {
        let longest = |d: usize| {
            let most = (data.len() - i).min(258);
            (0..most)
                .take_while(|&k| data[i + k] == data[i + k - d])
                .count()
        };
        let (length, distance) = distances
            .iter()
            .filter(|&&d| (1..=i.min(32768)).contains(&d))
            .map(|&d| (longest(d), d))
            .max()
            .unwrap_or((0, 0));
        if length < 3 {
            out.symbol(u32::from(data[i]));
            i += 1;
            continue;
        }
        // The code of `v` in `table`, and its extra bits.
        let code = |v: usize, table: &[(u16, u8)]| {
            let code = table
                .iter()
                .rposition(|&(b, _)| usize::from(b) <= v)
                .unwrap();
            (
                code as u32,
                (v - usize::from(table[code].0)) as u32,
                table[code].1,
            )
        };
        let (l, extra, bits) = code(length, &LENGTHS);
        out.symbol(257 + l);
        out.put(extra, bits);
        let (d, extra, bits) = code(distance, &DISTANCES);
        out.huffman(d, 5);
        out.put(extra, bits);
        i += length;
    }
    out.symbol(256); // end of block
    out.finish()
}

/// Deflate's bit stream: values least significant bit first, Huffman codes most
/// significant bit first.
#[derive(Default)]
struct Bits {
    bytes: Vec<u8>,
    pending: u32,
    count: u8,
}

impl Bits {
    fn put(&mut self, value: u32, bits: u8) {
        self.pending |= value << self.count;
        self.count += bits;
        while self.count >= 8 {
            self.bytes.push(self.pending as u8);
            self.pending >>= 8;
            self.count -= 8;
        }
    }

    fn huffman(&mut self, code: u32, bits: u8) {
        self.put(code.reverse_bits() >> (32 - bits), bits);
    }

    /// A literal/length symbol in the fixed code (RFC 1951, 3.2.6).
    fn symbol(&mut self, s: u32) {
        match s {
            0..=143 => self.huffman(0x30 + s, 8),
            144..=255 => self.huffman(0x190 + s - 144, 9),
            256..=279 => self.huffman(s - 256, 7),
            _ => self.huffman(0xC0 + s - 280, 8),
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.count > 0 {
            self.bytes.push(self.pending as u8);
        }
        self.bytes
    }
}

/// Decodes what [`encode`] writes (fixed-Huffman deflate only), checking every chunk's
/// CRC and the Adler-32: `(width, height, rgb)`.
#[cfg(test)]
pub(crate) fn decode(png: &[u8]) -> (u32, u32, Vec<u8>) {
    let be32 = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (mut at, mut chunks) = (8, Vec::new());
    while at < png.len() {
        let len = be32(at) as usize;
        let body = &png[at + 4..at + 8 + len];
        assert_eq!(
            crc32(body),
            be32(at + 8 + len),
            "CRC of chunk {}",
            chunks.len()
        );
        chunks.push((&body[..4], &body[4..]));
        at += 12 + len;
    }
    let kinds: Vec<&[u8]> = chunks.iter().map(|c| c.0).collect();
    assert_eq!(kinds, [&b"IHDR"[..], b"IDAT", b"IEND"]);
    let (header, zlib) = (chunks[0].1, chunks[1].1);
    assert_eq!(&header[8..], [8, 2, 0, 0, 0]);
    let width = u32::from_be_bytes(header[..4].try_into().unwrap());
    let height = u32::from_be_bytes(header[4..8].try_into().unwrap());
    assert_eq!(&zlib[..2], [0x78, 0x01]);
    let raw = inflate(&zlib[2..zlib.len() - 4]);
    assert_eq!(adler32(&raw).to_be_bytes(), zlib[zlib.len() - 4..]);
    assert_eq!(raw.len(), (width as usize * 3 + 1) * height as usize);
    let rows = raw.chunks(width as usize * 3 + 1);
    assert!(rows.clone().all(|row| row[0] == 0), "filter type 0");
    let rgb = rows.flat_map(|row| &row[1..]).copied().collect();
    (width, height, rgb)
}

/// Inflates one final fixed-Huffman block.
#[cfg(test)]
fn inflate(data: &[u8]) -> Vec<u8> {
    let mut at = 0; // in bits
    let mut bit = || {
        let b = u32::from(data[at / 8] >> (at % 8)) & 1;
        at += 1;
        b
    };
    let mut bits = |n: u8, huffman: bool| {
        (0..n).fold(0, |v, k| {
            if huffman {
                v << 1 | bit()
            } else {
                v | bit() << k
            }
        })
    };
    assert_eq!(bits(3, false), 0b011, "one final fixed-Huffman block");
    let mut out: Vec<u8> = Vec::new();
    loop {
        let code = bits(7, true);
        let code = if code < 24 {
            code
        } else {
            code << 1 | bits(1, true)
        };
        let symbol = match code {
            0..24 => 256 + code,
            0x30..=0xBF => code - 0x30,
            0xC0..=0xC7 => 280 + code - 0xC0,
            _ => 144 + (code << 1 | bits(1, true)) - 0x190,
        };
        match symbol {
            0..=255 => out.push(symbol as u8),
            256 => return out,
            _ => {
                let (base, extra) = LENGTHS[symbol as usize - 257];
                let length = u32::from(base) + bits(extra, false);
                let (base, extra) = DISTANCES[bits(5, true) as usize];
                let distance = usize::from(base) + bits(extra, false) as usize;
                for _ in 0..length {
                    out.push(out[out.len() - distance]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn the_checksums_match_the_reference_values() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"IEND"), 0xAE42_6082);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(&[0xff; 100_000]), 0x149A_302C);
    }

    #[test]
    fn an_encoded_image_decodes_to_the_same_pixels() {
        // Runs, noise and patterns: literals of both code lengths, matches of both kinds.
        // Every row twice, for matches with the row above.
        let (width, height) = (97, 41);
        let rgb: Vec<u8> = (0..width * height * 3)
            .map(|i| {
                let (x, y) = (i % (width * 3), i / (width * 3) / 2);
                let noise = ((x * 7919 + y * 104_729) as u32).wrapping_mul(2_654_435_761) >> 13;
                [255, noise as u8, [31, 119, 180][x % 3], (x % 7) as u8][y % 4]
            })
            .collect();
        let png = encode(width as u32, height as u32, &rgb);
        assert_eq!(decode(&png), (width as u32, height as u32, rgb.clone()));
        assert_eq!(decode(&encode(1, 1, &[1, 2, 3])), (1, 1, vec![1, 2, 3]));
        // Python's zlib, where there is one, reads the IDAT too.
        let idat = &png[8 + 25 + 8..png.len() - 12 - 4];
        let python = std::process::Command::new("python3")
            .arg("-c")
            .arg(
                "import sys, zlib; \
                 sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))",
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn();
        let Ok(mut python) = python else { return };
        python.stdin.take().unwrap().write_all(idat).unwrap();
        let output = python.wait_with_output().unwrap();
        assert!(output.status.success(), "python3's zlib rejected the IDAT");
        let rows: Vec<u8> = rgb
            .chunks(width * 3)
            .flat_map(|r| [&[0][..], r].concat())
            .collect();
        assert_eq!(output.stdout, rows);
    }
}
