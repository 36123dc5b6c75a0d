//! An RGB raster for the plots: filled rectangles, lines of any whole width, discs, and
//! text in a 5x7 bitmap font (printable ASCII), across or upwards. Written out as PNG.

use crate::sweep::{Anchor, Canvas, Colour, TextStyle};

/// The glyphs of `' '..='~'`: five columns, the first in the high byte; in each column
/// bit 0 is the top row, bit 6 the row on the baseline and bit 7 the descender.
#[rustfmt::skip]
const FONT: [u64; 95] = [
    0x0000000000, 0x00005f0000, 0x0007000700, 0x147f147f14, 0x242a7f2a12, 0x2313086462,
    0x3649552250, 0x0005030000, 0x001c224100, 0x0041221c00, 0x14083e0814, 0x08083e0808,
    0x0050300000, 0x0808080808, 0x0060600000, 0x2010080402, 0x3e5149453e, 0x00427f4000,
    0x4261514946, 0x2141454b31, 0x1814127f10, 0x2745454539, 0x3c4a494930, 0x0171090503,
    0x3649494936, 0x064949291e, 0x0036360000, 0x0056360000, 0x0814224100, 0x1414141414,
    0x0041221408, 0x0201510906, 0x324979413e, 0x7e1111117e, 0x7f49494936, 0x3e41414122,
    0x7f4141221c, 0x7f49494941, 0x7f09090901, 0x3e4149497a, 0x7f0808087f, 0x00417f4100,
    0x2040413f01, 0x7f08142241, 0x7f40404040, 0x7f020c027f, 0x7f0408107f, 0x3e4141413e,
    0x7f09090906, 0x3e4151215e, 0x7f09192946, 0x4649494931, 0x01017f0101, 0x3f4040403f,
    0x1f2040201f, 0x3f4038403f, 0x6314081463, 0x0708700807, 0x6151494543, 0x007f414100,
    0x0204081020, 0x0041417f00, 0x0402010204, 0x8080808080, 0x0001020400, 0x2054545478,
    0x7f48444438, 0x3844444420, 0x384444487f, 0x3854545418, 0x087e090102, 0x18a4a4a47c,
    0x7f08040478, 0x00447d4000, 0x4080847d00, 0x7f10284400, 0x00417f4000, 0x7c04180478,
    0x7c08040478, 0x3844444438, 0xfc24242418, 0x18242424fc, 0x7c08040408, 0x4854545420,
    0x043f444020, 0x3c4040207c, 0x1c2040201c, 0x3c4030403c, 0x4428102844, 0x9ca0a0a07c,
    0x4464544c44, 0x0008364100, 0x00007f0000, 0x0041360800, 0x0804081008,
];

/// The advance of a glyph, in font pixels: five columns and a gap.
const ADVANCE: i64 = 6;

/// Pixels, row by row, three bytes each; white when new.
#[derive(Debug)]
pub struct Raster {
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

impl Raster {
    pub fn new(width: usize, height: usize) -> Raster {
        Raster {
            width,
            height,
            rgb: vec![255; width * height * 3],
        }
    }

    /// The picture as a PNG file.
    pub fn png(&self) -> Vec<u8> {
        crate::png::encode(self.width as u32, self.height as u32, &self.rgb)
    }

    /// Fills the pixels from `(x0, y0)` up to but not including `(x1, y1)`.
    fn fill(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), colour: Colour) {
        let clip = |v: i64, max: usize| v.clamp(0, max as i64) as usize;
        for y in clip(y0, self.height)..clip(y1, self.height) {
            let row = y * self.width * 3;
            for x in clip(x0, self.width)..clip(x1, self.width) {
                self.rgb[row + x * 3..row + x * 3 + 3].copy_from_slice(&colour);
            }
        }
    }

    /// Bresenham's line with a square pen `width` pixels wide.
    fn stroke(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), width: i64, c: Colour) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = ((x1 - x0).signum(), (y1 - y0).signum());
        let (mut x, mut y, mut error) = (x0, y0, dx + dy);
        loop {
            let corner = (x - width / 2, y - width / 2);
            self.fill(corner, (corner.0 + width, corner.1 + width), c);
            if (x, y) == (x1, y1) {
                return;
            }
            let twice = 2 * error;
            if twice >= dy {
                error += dy;
                x += sx;
            }
            if twice <= dx {
                error += dx;
                y += sy;
            }
        }
    }
}

fn pixel(x: f64, y: f64) -> (i64, i64) {
    (x.round() as i64, y.round() as i64)
}

impl Canvas for Raster {
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: Colour, stroke: Option<Colour>) {
        let (from, to) = (pixel(x, y), pixel(x + w, y + h));
        self.fill(from, to, fill);
        if let Some(c) = stroke {
            self.fill(from, (to.0, from.1 + 1), c);
            self.fill((from.0, to.1 - 1), to, c);
            self.fill(from, (from.0 + 1, to.1), c);
            self.fill((to.0 - 1, from.1), to, c);
        }
    }

    fn line(&mut self, from: (f64, f64), to: (f64, f64), width: f64, colour: Colour) {
        let width = (width.round() as i64).max(1);
        self.stroke(pixel(from.0, from.1), pixel(to.0, to.1), width, colour);
    }

    fn disc(&mut self, x: f64, y: f64, r: f64, colour: Colour) {
        let (from, to) = (
            pixel(x - r - 1.0, y - r - 1.0),
            pixel(x + r + 1.0, y + r + 1.0),
        );
        for py in from.1..=to.1 {
            for px in from.0..=to.0 {
                let (cx, cy) = (px as f64 + 0.5 - x, py as f64 + 0.5 - y);
                if cx * cx + cy * cy <= r * r {
                    self.fill((px, py), (px + 1, py + 1), colour);
                }
            }
        }
    }

    /// Text 14 pixels or larger is drawn at twice the font's size if that fits across.
    fn text(&mut self, x: f64, y: f64, text: &str, style: TextStyle, colour: Colour) {
        let length = (text.chars().count() as i64 * ADVANCE - 1).max(0);
        let scale = if style.size >= 14.0 && 2 * length < self.width as i64 - 20 {
            2
        } else {
            1
        };
        let length = length * scale;
        let start = match style.anchor {
            Anchor::Start => 0,
            Anchor::Middle => -length / 2,
            Anchor::End => -length,
        };
        let (x, y) = pixel(x, y);
        for (i, ch) in text.chars().enumerate() {
            let glyph = match ch {
                ' '..='~' => FONT[ch as usize - 32],
                _ => FONT[usize::from(b'?' - b' ')],
            };
            for column in 0..5 {
                let bits = glyph >> (8 * (4 - column));
                for row in (0..8).filter(|row| bits >> row & 1 == 1) {
                    // The pixel's corner along and down from the start of the baseline.
                    let (along, down) = (
                        start + (i as i64 * ADVANCE + column) * scale,
                        (row - 7) * scale,
                    );
                    let corner = if style.upwards {
                        (x + down, y - along - scale)
                    } else {
                        (x + along, y + down)
                    };
                    self.fill(corner, (corner.0 + scale, corner.1 + scale), colour);
                }
            }
        }
    }
}
