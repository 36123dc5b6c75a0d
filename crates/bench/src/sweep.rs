//! Load sweeps: one cluster benchmark per offered load (coroutines per worker thread),
//! and a throughput-latency plot of the results, like FaRM's Figure 7.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::kv::{ClusterBenchOptions, ClusterBenchReport};

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

/// Writes `prefix.json` (the data) and `prefix.svg` (the plot).
pub fn write(report: &SweepReport, prefix: &Path) -> anyhow::Result<()> {
    let json = prefix.with_extension("json");
    std::fs::write(&json, serde_json::to_string_pretty(report)? + "\n")
        .with_context(|| format!("writing {}", json.display()))?;
    let svg = prefix.with_extension("svg");
    std::fs::write(&svg, plot(report)).with_context(|| format!("writing {}", svg.display()))?;
    println!(
        "  sweep written to {} and {}",
        json.display(),
        svg.display()
    );
    Ok(())
}

/// The plot: throughput (thousands per second) across, latency (microseconds, log scale)
/// up, one line for the median and one for the 99th percentile, each point labelled with
/// its coroutines per thread.
pub fn plot(report: &SweepReport) -> String {
    const W: f64 = 720.0;
    const H: f64 = 460.0;
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 30.0;
    const TOP: f64 = 50.0;
    const BOTTOM: f64 = 60.0;
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
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="25" text-anchor="middle" font-size="14">{}</text>"#,
        W / 2.0,
        escape(&report.title)
    );
    // Axes, grid and ticks.
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#,
        H - BOTTOM
    );
    for i in 0..=5 {
        let v = x_max / 5.0 * f64::from(i);
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1}" stroke="#ddd"/><text x="{0:.1}" y="{2}" text-anchor="middle">{3:.0}</text>"##,
            x(v),
            H - BOTTOM,
            H - BOTTOM + 18.0,
            v
        );
    }
    let mut decade = log_min;
    while decade <= log_max {
        let v = 10f64.powf(decade);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            y(v),
            W - RIGHT,
            LEFT - 6.0,
            y(v) + 4.0,
            v
        );
        decade += 1.0;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">committed transactions per second (thousands)</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 15.0
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">latency (us, log scale)</text>"#,
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0
    );
    // The two lines, with the offered load at each median point.
    for (name, colour, pick) in [
        (
            "median",
            "#1f77b4",
            (|p: &SweepPoint| p.p50_us) as fn(&SweepPoint) -> f64,
        ),
        ("p99", "#d62728", |p: &SweepPoint| p.p99_us),
    ] {
        let path: Vec<String> = points
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.throughput_per_s / 1e3), y(pick(p))))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for p in points {
            let (px, py) = (x(p.throughput_per_s / 1e3), y(pick(p)));
            let _ = writeln!(
                s,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="3.5" fill="{colour}"/>"#
            );
            if name == "median" {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" font-size="10">{}</text>"#,
                    px + 5.0,
                    py + 14.0,
                    p.coroutines
                );
            }
        }
    }
    let _ = writeln!(
        s,
        r##"<rect x="{0}" y="{1}" width="170" height="44" fill="white" stroke="#999"/><line x1="{2}" y1="{3}" x2="{4}" y2="{3}" stroke="#1f77b4" stroke-width="2"/><text x="{5}" y="{6}">median</text><line x1="{2}" y1="{7}" x2="{4}" y2="{7}" stroke="#d62728" stroke-width="2"/><text x="{5}" y="{8}">99th percentile</text>"##,
        LEFT + 10.0,
        TOP + 5.0,
        LEFT + 18.0,
        TOP + 18.0,
        LEFT + 42.0,
        LEFT + 48.0,
        TOP + 22.0,
        TOP + 36.0,
        TOP + 40.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="10" text-anchor="end">point labels: coroutines per worker thread</text>"#,
        W - RIGHT,
        TOP - 8.0
    );
    s.push_str("</svg>\n");
    s
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plot_is_an_svg_with_a_point_per_load() {
        let report = SweepReport {
            title: "tatp <test>".to_owned(),
            points: [
                (1, 10e3, 8.0, 20.0),
                (4, 40e3, 12.0, 60.0),
                (16, 90e3, 40.0, 400.0),
            ]
            .into_iter()
            .map(|(c, t, p50, p99)| SweepPoint {
                coroutines: c,
                throughput_per_s: t,
                throughput_per_cpu_s: t / 2.0,
                p50_us: p50,
                p99_us: p99,
                abort_rate: 0.0,
            })
            .collect(),
            runs: Vec::new(),
        };
        let svg = plot(&report);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 6);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("tatp &lt;test&gt;"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
