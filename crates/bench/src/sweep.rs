//! Load sweeps: one cluster benchmark per offered load (coroutines per worker thread),
//! and a throughput-latency plot of the results, like FaRM's Figure 7.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::kv::{ClusterBenchOptions, ClusterBenchReport};
use crate::raster::Raster;

/// The default offered loads: coroutines per worker thread.
pub const DEFAULT_COROUTINES: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// One point of a sweep.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Coroutines per worker thread.
    pub coroutines: usize,
    /// Committed transactions per second.
    pub throughput_per_s: f64,
    /// Per CPU-second.
    pub throughput_per_cpu_s: f64,
    /// Median latency.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Share of transactions aborted.
    pub abort_rate: f64,
}

/// A sweep, as written to `PREFIX.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepReport {
    /// What ran.
    pub title: String,
    /// The points, by offered load.
    pub points: Vec<SweepPoint>,
    /// Every run's full report.
    pub runs: Vec<ClusterBenchReport>,
}

/// Runs `options` once per number of coroutines in `coroutines`; fails if any run's data
/// check fails.
pub fn run(
    options: &ClusterBenchOptions,
    coroutines: &[usize],
    title: &str,
) -> anyhow::Result<SweepReport> {
    // One cluster, loaded once, runs every point in turn.
    let runs = crate::kv::run_points(options, coroutines)?;
    for report in &runs {
        anyhow::ensure!(
            report.checks.ok,
            "the data is wrong at the end of the sweep: {:?}",
            report.checks
        );
        eprintln!(
            "  {:>3} coroutines: {:.0} txn/s, p50 {:.1} us, p99 {:.1} us",
            report.options.coroutines,
            report.throughput_per_s,
            report.latency_us.p50,
            report.latency_us.p99
        );
    }
    let points = runs
        .iter()
        .map(|r| SweepPoint {
            coroutines: r.options.coroutines,
            throughput_per_s: r.throughput_per_s,
            throughput_per_cpu_s: r.throughput_per_cpu_s,
            p50_us: r.latency_us.p50,
            p99_us: r.latency_us.p99,
            abort_rate: r.abort_rate,
        })
        .collect();
    Ok(SweepReport {
        title: title.to_owned(),
        points,
        runs,
    })
}

/// Writes `prefix.json` (the data), and `prefix.svg` and `prefix.png` (the plot).
pub fn write(report: &SweepReport, prefix: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report)? + "\n";
    let files = [
        (prefix.with_extension("json"), json.into_bytes()),
        (prefix.with_extension("svg"), plot(report).into_bytes()),
        (prefix.with_extension("png"), plot_png(report)),
    ];
    for (path, data) in &files {
        std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    }
    println!(
        "  sweep written to {}, {} and {}",
        files[0].0.display(),
        files[1].0.display(),
        files[2].0.display()
    );
    Ok(())
}

/// The plot as SVG: throughput (thousands per second) across, latency (microseconds, log
/// scale) up, one line for the median and one for the 99th percentile, each point
/// labelled with its coroutines per thread.
pub fn plot(report: &SweepReport) -> String {
    let mut svg = Svg(String::new());
    let _ = writeln!(
        svg.0,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">"#
    );
    draw(report, &mut svg);
    svg.0 + "</svg>\n"
}

/// The same plot as PNG.
pub fn plot_png(report: &SweepReport) -> Vec<u8> {
    let mut raster = Raster::new(W as usize, H as usize);
    draw(report, &mut raster);
    raster.png()
}

/// An RGB colour.
pub(crate) type Colour = [u8; 3];

const BLACK: Colour = [0; 3];
const WHITE: Colour = [255; 3];
const GRID: Colour = [0xdd; 3];
const FRAME: Colour = [0x99; 3];
const MEDIAN: Colour = [0x1f, 0x77, 0xb4];
const P99: Colour = [0xd6, 0x27, 0x28];

/// Which end of a text is at its point.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Anchor {
    Start,
    Middle,
    End,
}

/// How a text is drawn: its size in pixels, its anchor, and whether it runs upwards (turned
/// a quarter anticlockwise) instead of across.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TextStyle {
    pub size: f64,
    pub anchor: Anchor,
    pub upwards: bool,
}

const fn style(size: f64, anchor: Anchor) -> TextStyle {
    TextStyle {
        size,
        anchor,
        upwards: false,
    }
}

/// What a plot draws on: an SVG document or a [`Raster`]. Coordinates are pixels from the
/// top left; a text's `y` is its baseline.
pub(crate) trait Canvas {
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: Colour, stroke: Option<Colour>);
    fn line(&mut self, from: (f64, f64), to: (f64, f64), width: f64, colour: Colour);
    fn polyline(&mut self, points: &[(f64, f64)], width: f64, colour: Colour) {
        for pair in points.windows(2) {
            self.line(pair[0], pair[1], width, colour);
        }
    }
    fn disc(&mut self, x: f64, y: f64, r: f64, colour: Colour);
    fn text(&mut self, x: f64, y: f64, text: &str, style: TextStyle, colour: Colour);
}

/// The plot's size and margins.
const W: f64 = 720.0;
const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

/// Draws the plot of [`plot`] on `canvas`.
fn draw(report: &SweepReport, canvas: &mut impl Canvas) {
    let points = &report.points;
    let x_max = points
        .iter()
        .map(|p| p.throughput_per_s / 1e3)
        .fold(1.0, f64::max)
        * 1.1;
    let latencies = points.iter().flat_map(|p| [p.p50_us, p.p99_us]);
    let y_min = latencies.clone().fold(f64::MAX, f64::min).max(0.1);
    let y_max = latencies.fold(1.0, f64::max);
    let (log_min, log_max) = (
        y_min.log10().floor(),
        y_max.log10().ceil().max(y_min.log10().floor() + 1.0),
    );
    let x = |v: f64| LEFT + v / x_max * (W - LEFT - RIGHT);
    let y = |v: f64| {
        let t = (v.max(1e-3).log10() - log_min) / (log_max - log_min);
        H - BOTTOM - t * (H - TOP - BOTTOM)
    };
    let (start, middle, end) = (Anchor::Start, Anchor::Middle, Anchor::End);
    canvas.rect(0.0, 0.0, W, H, WHITE, None);
    canvas.text(W / 2.0, 25.0, &report.title, style(14.0, middle), BLACK);
    // Grid and ticks, then the axes over them.
    for i in 0..=5 {
        let v = x_max / 5.0 * f64::from(i);
        canvas.line((x(v), TOP), (x(v), H - BOTTOM), 1.0, GRID);
        let label = format!("{v:.0}");
        canvas.text(x(v), H - BOTTOM + 18.0, &label, style(12.0, middle), BLACK);
    }
    let mut decade = log_min;
    while decade <= log_max {
        let v = 10f64.powf(decade);
        canvas.line((LEFT, y(v)), (W - RIGHT, y(v)), 1.0, GRID);
        let label = format!("{v}");
        canvas.text(LEFT - 6.0, y(v) + 4.0, &label, style(12.0, end), BLACK);
        decade += 1.0;
    }
    canvas.line((LEFT, H - BOTTOM), (W - RIGHT, H - BOTTOM), 1.0, BLACK);
    canvas.line((LEFT, TOP), (LEFT, H - BOTTOM), 1.0, BLACK);
    let label = "committed transactions per second (thousands)";
    let across = style(12.0, middle);
    canvas.text((LEFT + W - RIGHT) / 2.0, H - 15.0, label, across, BLACK);
    let upwards = TextStyle {
        upwards: true,
        ..across
    };
    let label = "latency (us, log scale)";
    canvas.text(20.0, (TOP + H - BOTTOM) / 2.0, label, upwards, BLACK);
    // The two lines, with the offered load at each median point.
    for (colour, which) in [(MEDIAN, 0), (P99, 1)] {
        let at = |p: &SweepPoint| (x(p.throughput_per_s / 1e3), y([p.p50_us, p.p99_us][which]));
        canvas.polyline(&points.iter().map(at).collect::<Vec<_>>(), 2.0, colour);
        for p in points {
            let (px, py) = at(p);
            canvas.disc(px, py, 3.5, colour);
            if colour == MEDIAN {
                // Below and to the right, or just to the right if the x axis is near.
                let below = py + 14.0 < H - BOTTOM - 2.0;
                let (lx, ly) = if below {
                    (px + 5.0, py + 14.0)
                } else {
                    (px + 7.0, py + 4.0)
                };
                let label = p.coroutines.to_string();
                canvas.text(lx, ly, &label, style(10.0, start), BLACK);
            }
        }
    }
    canvas.rect(LEFT + 10.0, TOP + 5.0, 170.0, 44.0, WHITE, Some(FRAME));
    for (row, colour, name) in [(0.0, MEDIAN, "median"), (1.0, P99, "99th percentile")] {
        let y = TOP + 18.0 + 18.0 * row;
        canvas.line((LEFT + 18.0, y), (LEFT + 42.0, y), 2.0, colour);
        canvas.text(LEFT + 48.0, y + 4.0, name, style(12.0, start), BLACK);
    }
    let label = "point labels: coroutines per worker thread";
    canvas.text(W - RIGHT, TOP - 8.0, label, style(10.0, end), BLACK);
}

/// SVG elements, written as drawn.
struct Svg(String);

fn hex(c: Colour) -> String {
    format!("#{:02x}{:02x}{:02x}", c[0], c[1], c[2])
}

impl Canvas for Svg {
    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: Colour, stroke: Option<Colour>) {
        let stroke = stroke.map_or(String::new(), |c| format!(r#" stroke="{}""#, hex(c)));
        let _ = writeln!(
            self.0,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}"{stroke}/>"#,
            hex(fill)
        );
    }

    fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), width: f64, c: Colour) {
        let _ = writeln!(
            self.0,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{}" stroke-width="{width}"/>"#,
            hex(c)
        );
    }

    fn polyline(&mut self, points: &[(f64, f64)], width: f64, colour: Colour) {
        let points: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            self.0,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{width}"/>"#,
            points.join(" "),
            hex(colour)
        );
    }

    fn disc(&mut self, x: f64, y: f64, r: f64, colour: Colour) {
        let fill = hex(colour);
        let _ = writeln!(
            self.0,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{fill}"/>"#
        );
    }

    fn text(&mut self, x: f64, y: f64, text: &str, style: TextStyle, colour: Colour) {
        let anchor = match style.anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let turn = if style.upwards {
            format!(r#" transform="rotate(-90 {x:.1} {y:.1})""#)
        } else {
            String::new()
        };
        let _ = writeln!(
            self.0,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{}" text-anchor="{anchor}" fill="{}"{turn}>{}</text>"#,
            style.size,
            hex(colour),
            escape(text)
        );
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(loads: &[(usize, f64, f64, f64)]) -> SweepReport {
        SweepReport {
            title: "tatp <test>".to_owned(),
            points: loads
                .iter()
                .map(|&(c, t, p50, p99)| SweepPoint {
                    coroutines: c,
                    throughput_per_s: t,
                    throughput_per_cpu_s: t / 2.0,
                    p50_us: p50,
                    p99_us: p99,
                    abort_rate: 0.0,
                })
                .collect(),
            runs: Vec::new(),
        }
    }

    #[test]
    fn the_plot_is_an_svg_with_a_point_per_load() {
        let report = report(&[
            (1, 10e3, 8.0, 20.0),
            (4, 40e3, 12.0, 60.0),
            (16, 90e3, 40.0, 400.0),
        ]);
        let svg = plot(&report);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 6);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("tatp &lt;test&gt;"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn the_png_plot_has_the_plots_size_and_both_lines() {
        let report = report(&[(1, 10e3, 8.0, 20.0), (4, 40e3, 12.0, 60.0)]);
        let (width, height, rgb) = crate::png::decode(&plot_png(&report));
        assert_eq!((width, height), (W as u32, H as u32));
        let pixel = |x: f64, y: f64| {
            let i = (y as usize * width as usize + x as usize) * 3;
            [rgb[i], rgb[i + 1], rgb[i + 2]]
        };
        let count = |c: Colour| rgb.chunks(3).filter(|p| *p == c).count();
        // Each line: two discs of 3.5 pixels and a segment between them 2 pixels wide.
        assert!(count(MEDIAN) > 300 && count(P99) > 300);
        assert_eq!(pixel(0.0, 0.0), WHITE);
        assert_eq!(pixel(LEFT, H - BOTTOM - 100.0), BLACK, "the y axis");
        // Every point has its colour where the SVG puts it.
        let svg = plot(&report);
        for circle in svg.split("<circle ").skip(1) {
            let attribute = |name: &str| {
                let value = circle.split(&format!(r#"{name}=""#)).nth(1).unwrap();
                value.split('"').next().unwrap().to_owned()
            };
            let (x, y) = (attribute("cx").parse(), attribute("cy").parse());
            assert_eq!(hex(pixel(x.unwrap(), y.unwrap())), attribute("fill"));
        }
        assert_eq!(svg.matches("<circle").count(), 4);
    }

    /// Renders docs/results/tatp.json's sweep to /tmp/tatp_sweep_check.png (and .svg), to
    /// look at.
    #[test]
    #[ignore]
    fn render_the_tatp_results() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/results/tatp.json");
        let results: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let report = SweepReport {
            title: results["sweep"]["title"].as_str().unwrap().to_owned(),
            points: serde_json::from_value(results["sweep"]["points"].clone()).unwrap(),
            runs: Vec::new(),
        };
        std::fs::write("/tmp/tatp_sweep_check.png", plot_png(&report)).unwrap();
        std::fs::write("/tmp/tatp_sweep_check.svg", plot(&report)).unwrap();
    }
}
