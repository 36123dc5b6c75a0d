//! Load sweeps: one cluster benchmark per offered load (coroutines per worker thread),
//! and a throughput-latency plot of the results, like FaRM's Figure 7.

use std::path::Path;

use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};

use crate::kv::{ClusterBenchOptions, ClusterBenchReport};
use crate::plot::{self, Figure};

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
    let json_path = prefix.with_extension("json");
    let json = serde_json::to_string_pretty(report)? + "\n";
    std::fs::write(&json_path, json).with_context(|| format!("writing {}", json_path.display()))?;
    let [svg, png] = plot::write(report, &prefix.with_extension(""))?;
    println!(
        "  sweep written to {}, {} and {}",
        json_path.display(),
        svg.display(),
        png.display()
    );
    Ok(())
}

/// The plot: throughput (thousands per second) across, latency (microseconds, log scale)
/// up, one line for the median and one for the 99th percentile, each point labelled with
/// its coroutines per thread.
impl Figure for SweepReport {
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let points = &self.points;
        let x_max = points
            .iter()
            .map(|p| p.throughput_per_s / 1e3)
            .fold(1.0, f64::max)
            * 1.1;
        let latencies = points.iter().flat_map(|p| [p.p50_us, p.p99_us]);
        let y_max = latencies.clone().fold(1.0, f64::max);
        let y_min = latencies.fold(f64::MAX, f64::min).max(0.1).min(y_max);
        // Whole decades.
        let (log_min, log_max) = (
            y_min.log10().floor(),
            y_max.log10().ceil().max(y_min.log10().floor() + 1.0),
        );
        let area = plot::titled(root, &self.title)?;
        // Room above the chart for a note.
        let mut chart = plot::chart(&area).margin_top(20).build_cartesian_2d(
            0.0..x_max,
            (10f64.powf(log_min)..10f64.powf(log_max)).log_scale(),
        )?;
        plot::mesh(
            &mut chart.configure_mesh(),
            "committed transactions per second (thousands)",
            "latency (us, log scale)",
        )
        .x_labels(6)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&plot::number)
        .draw()?;
        let [median, p99] = [plot::SERIES[0], plot::SERIES[1]];
        for (colour, name, latency) in [(median, "median", 0), (p99, "99th percentile", 1)] {
            let at = |p: &SweepPoint| (p.throughput_per_s / 1e3, [p.p50_us, p.p99_us][latency]);
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(at),
                    colour.stroke_width(2),
                ))?
                .label(name)
                .legend(plot::legend_line(colour));
            chart.draw_series(
                points
                    .iter()
                    .map(|p| Circle::new(at(p), 4, colour.filled())),
            )?;
        }
        // The offered load at each median point: below and to the right, or just to the
        // right if the x axis is near.
        let bottom = chart.plotting_area().get_pixel_range().1.end;
        let labels: Vec<_> = points
            .iter()
            .map(|p| {
                let at = (p.throughput_per_s / 1e3, p.p50_us);
                let below = chart.backend_coord(&at).1 + 20 < bottom;
                let offset = if below { (5, 6) } else { (7, -6) };
                let style = TextStyle::from((plot::FONT, plot::SMALL_SIZE));
                EmptyElement::at(at) + Text::new(p.coroutines.to_string(), offset, style)
            })
            .collect();
        chart.draw_series(labels)?;
        plot::legend(&mut chart)?;
        let (x, y) = chart.plotting_area().get_pixel_range();
        root.draw(&Text::new(
            "point labels: coroutines per worker thread",
            (x.end, y.start - 4),
            TextStyle::from((plot::FONT, plot::SMALL_SIZE))
                .pos(Pos::new(HPos::Right, VPos::Bottom)),
        ))?;
        Ok(())
    }
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
        let svg = plot::svg(&report).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 6);
        let texts = plot::texts(&svg);
        for text in [
            "tatp &lt;test&gt;",
            "median",
            "99th percentile",
            "committed transactions per second (thousands)",
            "latency (us, log scale)",
            "point labels: coroutines per worker thread",
            "1",
            "4",
            "16",
            "1000",
        ] {
            assert!(texts.contains(&text), "{text:?} not in {texts:?}");
        }
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn the_png_plot_has_the_plots_size_and_both_lines() {
        let report = report(&[(1, 10e3, 8.0, 20.0), (4, 40e3, 12.0, 60.0)]);
        let (width, height, rgb) = plot::decode_png(&plot::png(&report).unwrap());
        assert_eq!((width, height), plot::SIZE);
        let pixel = |x: f64, y: f64| {
            let i = (y as usize * width as usize + x as usize) * 3;
            [rgb[i], rgb[i + 1], rgb[i + 2]]
        };
        let count = |c: RGBColor| rgb.chunks(3).filter(|p| *p == [c.0, c.1, c.2]).count();
        // Each line: two discs of 4 pixels and a segment between them 2 pixels wide.
        assert!(count(plot::SERIES[0]) > 300 && count(plot::SERIES[1]) > 300);
        assert_eq!(pixel(0.0, 0.0), [255; 3]);
        // Every point has its colour where the SVG puts it.
        let svg = plot::svg(&report).unwrap();
        for circle in svg.split("<circle ").skip(1) {
            let attribute = |name: &str| {
                let value = circle.split(&format!(r#"{name}=""#)).nth(1).unwrap();
                value.split('"').next().unwrap().to_owned()
            };
            let (x, y) = (attribute("cx").parse(), attribute("cy").parse());
            let [r, g, b] = pixel(x.unwrap(), y.unwrap());
            let fill = attribute("fill").to_lowercase();
            assert_eq!(format!("#{r:02x}{g:02x}{b:02x}"), fill);
        }
        assert_eq!(svg.matches("<circle").count(), 4);
    }

    #[test]
    fn a_sweep_without_points_still_plots() {
        let svg = plot::svg(&report(&[])).unwrap();
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        assert_eq!(svg.matches("<circle").count(), 0);
    }

    /// Renders docs/results/tatp.json's sweep and docs/results/smallbank_sweep.json to
    /// /tmp/tatp_sweep_check.{svg,png} and /tmp/smallbank_sweep_check.{svg,png}, to look
    /// at.
    #[test]
    #[ignore]
    fn render_the_docs_sweeps() {
        let read = |name: &str| -> serde_json::Value {
            let path = format!("{}/../../docs/results/{name}", env!("CARGO_MANIFEST_DIR"));
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
        };
        for (sweep, stem) in [
            (read("tatp.json")["sweep"].clone(), "/tmp/tatp_sweep_check"),
            (read("smallbank_sweep.json"), "/tmp/smallbank_sweep_check"),
        ] {
            let report = SweepReport {
                title: sweep["title"].as_str().unwrap().to_owned(),
                points: serde_json::from_value(sweep["points"].clone()).unwrap(),
                runs: Vec::new(),
            };
            plot::write(&report, Path::new(stem)).unwrap();
        }
    }
}
