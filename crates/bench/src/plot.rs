//! Every plot ferrotx draws, through plotters: a [`Figure`] is drawn once on plotters' SVG
//! backend and once on its bitmap backend, and [`write`] saves the two as `<stem>.svg`
//! and `<stem>.png` (the bitmap encoded by the `png` crate).
//!
//! The bitmap's text is drawn with DejaVu Sans, compiled into the binary (`fonts/`, with
//! its license): no system font is looked up, so a PNG comes out the same on a machine
//! without fonts. An SVG names the family `sans-serif` and leaves the font to its viewer
//! (its layout, like the bitmap's, measured with DejaVu Sans).
//!
//! A new plot is a type implementing [`Figure`] (usually [`titled`], [`chart`] and [`mesh`],
//! then a series or two in [`SERIES`] colours and their [`legend`]), and a call of
//! [`write`]; [`timeline`] is one.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::Context;
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The size of every plot, in pixels (and SVG units).
pub const SIZE: (u32, u32) = (720, 460);

/// The font family of every text: DejaVu Sans in a PNG.
pub const FONT: &str = "sans-serif";
/// Font sizes (plotters' sizes: an SVG's `font-size` is 1/1.24 of them).
pub const TITLE_SIZE: u32 = 18;
pub const LABEL_SIZE: u32 = 15;
pub const SMALL_SIZE: u32 = 13;

/// The colours of a plot's series, in order (matplotlib's, as the plots had).
pub const SERIES: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];
/// The grid, and the frame of a legend.
pub const GRID: RGBColor = RGBColor(0xdd, 0xdd, 0xdd);
pub const FRAME: RGBColor = RGBColor(0x99, 0x99, 0x99);

/// Margins around the chart (more on the right, for the last tick label), and the room
/// for the axes' tick labels and descriptions.
const MARGIN: u32 = 15;
const RIGHT_MARGIN: u32 = 30;
const X_LABEL_AREA: u32 = 45;
const Y_LABEL_AREA: u32 = 75;

/// What a plot draws, on any plotters backend.
pub trait Figure {
    /// Draws the figure on `root`: [`SIZE`], already white.
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>;
}

/// The figure as an SVG document.
pub fn svg(figure: &impl Figure) -> anyhow::Result<String> {
    register_font();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        figure.draw(&root)?;
        root.present()?;
    }
    Ok(svg)
}

/// The figure as a PNG file (8-bit RGB).
pub fn png(figure: &impl Figure) -> anyhow::Result<Vec<u8>> {
    register_font();
    let (width, height) = SIZE;
    let mut rgb = vec![0; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        figure.draw(&root)?;
        root.present()?;
    }
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&rgb)?;
    writer.finish()?;
    Ok(png)
}

/// Writes the figure as `<stem>.svg` and `<stem>.png` (appended: a stem `a/b.c` gives
/// `a/b.c.svg`), and returns the two paths.
pub fn write(figure: &impl Figure, stem: &Path) -> anyhow::Result<[PathBuf; 2]> {
    let with = |extension: &str| {
        let mut path = stem.as_os_str().to_owned();
        path.push(".");
        path.push(extension);
        PathBuf::from(path)
    };
    let paths = [with("svg"), with("png")];
    for (path, data) in paths.iter().zip([svg(figure)?.into_bytes(), png(figure)?]) {
        std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(paths)
}

/// The bundled font, registered with plotters once (for every style: they fall back to
/// the normal one).
fn register_font() {
    static FONT_FILE: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let registered = plotters::style::register_font(FONT, FontStyle::Normal, FONT_FILE);
        assert!(registered.is_ok(), "DejaVuSans.ttf is not a font");
    });
}

/// Draws `title` at the top of `root` and returns the area below it, for [`chart`].
pub fn titled<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    root.margin(MARGIN, 0, 0, 0)
        .titled(title, (FONT, TITLE_SIZE))
}

/// The frame every chart shares, on the `area` below a title ([`titled`]): margins, and
/// room below and left for the axes. Go on with `build_cartesian_2d`, then [`mesh`].
pub fn chart<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(MARGIN)
        .margin_right(RIGHT_MARGIN)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(Y_LABEL_AREA);
    builder
}

/// A tick label: at most three decimals, without trailing zeros (`20`, `0.25`).
pub fn number(value: &f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// The grid, tick labels and axis descriptions every chart shares; `.draw()` it.
pub fn mesh<'m, 'a, 'b, X, Y, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
    x_description: &str,
    y_description: &str,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged,
    Y: Ranged,
    DB: DrawingBackend,
{
    mesh.max_light_lines(0)
        .bold_line_style(GRID)
        .label_style((FONT, LABEL_SIZE))
        .axis_desc_style((FONT, LABEL_SIZE))
        .x_desc(x_description)
        .y_desc(y_description)
}

/// The legend of the series drawn with a `label`: in the plot's top left corner, framed.
pub fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    CT: plotters::coord::CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(FRAME)
        .label_font((FONT, LABEL_SIZE))
        .draw()
}

/// A legend's sample of a line series: a short stroke.
pub fn legend_line(colour: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new([(x, y), (x + 24, y)], colour.stroke_width(2))
}

/// The moving average of [`timeline`]: over this many 1 ms buckets.
pub const TIMELINE_AVERAGE_MS: usize = 10;

/// Writes `<stem>.svg` and `<stem>.png`: committed transactions per 1 ms bucket over time
/// (`buckets_ms[i]`: the commits in `[i, i + 1)` ms), an area, with their moving average
/// over the last [`TIMELINE_AVERAGE_MS`] ms as a line, and a vertical line at each marker
/// (ms since the first bucket, and its label), labelled above the chart. The x axis
/// reads `origin_ms` at the first bucket (-1000 for a plot that starts a second before
/// the time its axis counts from), and is described as `x_label`.
pub fn timeline(
    path_stem: &Path,
    title: &str,
    buckets_ms: &[u64],
    origin_ms: f64,
    x_label: &str,
    markers: &[(f64, &str)],
) -> anyhow::Result<()> {
    let figure = Timeline {
        title,
        buckets_ms,
        origin_ms,
        x_label,
        markers,
    };
    write(&figure, path_stem)?;
    Ok(())
}

struct Timeline<'a> {
    title: &'a str,
    buckets_ms: &'a [u64],
    origin_ms: f64,
    x_label: &'a str,
    markers: &'a [(f64, &'a str)],
}

/// The height of a row of marker labels above a timeline's chart.
const MARKER_ROW: i32 = 16;

impl Figure for Timeline<'_> {
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let buckets = self.buckets_ms;
        let x_max = self
            .markers
            .iter()
            .map(|&(at, _)| at.ceil())
            .fold(buckets.len() as f64, f64::max)
            .max(1.0);
        // The top quarter left to the legend.
        let y_max = buckets.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.3;

        // The labels go in rows between the title and the chart, each in the lowest row
        // where it clears the labels before it; where the chart's left and right edges
        // will be follows from the frame's constants.
        let style = TextStyle::from((FONT, SMALL_SIZE));
        let (left, right) = (
            (MARGIN + Y_LABEL_AREA) as i32,
            (SIZE.0 - RIGHT_MARGIN) as i32 - 1,
        );
        let mut order: Vec<usize> = (0..self.markers.len()).collect();
        order.sort_by(|&a, &b| self.markers[a].0.total_cmp(&self.markers[b].0));
        // Per marker: its row, and whether its label is left of the line (at the right
        // edge).
        let mut placed = vec![(0, false); self.markers.len()];
        let mut row_ends: Vec<i32> = Vec::new();
        for &i in &order {
            let (at, label) = self.markers[i];
            let x = left + ((at / x_max).clamp(0.0, 1.0) * f64::from(right - left)).round() as i32;
            let width = root.estimate_text_size(label, &style)?.0 as i32;
            let leftwards = x + 3 + width > right;
            let (from, to) = if leftwards {
                (x - 3 - width, x)
            } else {
                (x, x + 3 + width)
            };
            let row = match row_ends.iter().position(|&end| end + 6 < from) {
                Some(row) => row,
                None => {
                    row_ends.push(i32::MIN);
                    row_ends.len() - 1
                }
            };
            row_ends[row] = to;
            placed[i] = (row, leftwards);
        }
        let band = MARKER_ROW * row_ends.len() as i32;

        let area = titled(root, self.title)?;
        let mut chart = chart(&area)
            .margin_top(band + 4)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
        let origin = self.origin_ms;
        mesh(
            &mut chart.configure_mesh(),
            self.x_label,
            "committed transactions per ms",
        )
        .x_label_formatter(&|x| number(&(x + origin)))
        .y_label_formatter(&number)
        .draw()?;
        let raw = SERIES[0].mix(0.35);
        chart
            .draw_series(AreaSeries::new(
                buckets
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (i as f64 + 0.5, n as f64)),
                0.0,
                raw,
            ))?
            .label("committed in each 1 ms")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 24, y + 5)], raw.filled()));
        let average = moving_average(buckets, TIMELINE_AVERAGE_MS);
        chart
            .draw_series(LineSeries::new(
                average
                    .iter()
                    .enumerate()
                    .map(|(i, &mean)| (i as f64 + 1.0, mean)),
                SERIES[1].stroke_width(2),
            ))?
            .label(format!("mean of the last {TIMELINE_AVERAGE_MS} ms"))
            .legend(legend_line(SERIES[1]));
        legend(&mut chart)?;

        // Each marker's line runs from the x axis up to its label's row: first every
        // line, then every label on white over them.
        let (pixels_x, pixels_y) = chart.plotting_area().get_pixel_range();
        debug_assert_eq!((pixels_x.start, pixels_x.end - 1), (left, right));
        let (top, bottom) = (pixels_y.start, pixels_y.end - 1);
        let colour = |i: usize| SERIES[2 + i % (SERIES.len() - 2)];
        let row_top = |row: usize| top - band + MARKER_ROW * (row_ends.len() - 1 - row) as i32;
        let xs: Vec<i32> = self
            .markers
            .iter()
            .map(|&(at, _)| chart.backend_coord(&(at.max(0.0), 0.0)).0)
            .collect();
        for (i, &x) in xs.iter().enumerate() {
            let (row, _) = placed[i];
            let line = [(x, bottom), (x, row_top(row))];
            root.draw(&PathElement::new(line, colour(i).stroke_width(1)))?;
        }
        for (i, &(_, label)) in self.markers.iter().enumerate() {
            let (row, leftwards) = placed[i];
            let (x, y) = (xs[i], row_top(row));
            let (anchor, dx) = if leftwards {
                (HPos::Right, -3)
            } else {
                (HPos::Left, 3)
            };
            let colour = colour(i);
            let text = style.color(&colour).pos(Pos::new(anchor, VPos::Top));
            let width = root.estimate_text_size(label, &text)?.0 as i32;
            let from = if leftwards { x + dx - width } else { x + dx };
            root.draw(&Rectangle::new(
                [(from - 1, y), (from + width + 1, y + MARKER_ROW - 2)],
                WHITE.filled(),
            ))?;
            root.draw(&Text::new(label, (x + dx, y + 1), text))?;
        }
        Ok(())
    }
}

/// The mean of each bucket and the `window - 1` before it (fewer at the start).
pub(crate) fn moving_average(buckets: &[u64], window: usize) -> Vec<f64> {
    let mut sum = 0;
    (0..buckets.len())
        .map(|i| {
            sum += buckets[i];
            if i >= window {
                sum -= buckets[i - window];
            }
            sum as f64 / (i + 1).min(window) as f64
        })
        .collect()
}

/// The text of every SVG `<text>` element (as written, escaped).
#[cfg(test)]
pub(crate) fn texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .filter_map(|element| element.split_once('>')?.1.split_once("</text>"))
        .map(|(text, _)| text.trim())
        .collect()
}

/// A PNG's width, height and RGB pixels.
#[cfg(test)]
pub(crate) fn decode_png(png: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .unwrap();
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut rgb).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    rgb.truncate(info.buffer_size());
    (info.width, info.height, rgb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_moving_average_is_over_the_last_buckets() {
        let average = moving_average(&[10, 20, 30, 40], 2);
        assert_eq!(average, [10.0, 15.0, 25.0, 35.0]);
        assert!(moving_average(&[], 10).is_empty());
    }

    /// About 100 commits per ms, none for 80 ms after a kill at 400 ms; and the markers of
    /// a failover.
    fn failover() -> (Vec<u64>, [(f64, &'static str); 5]) {
        let buckets = (0..1000u64)
            .map(|ms| match ms {
                400..480 => 0,
                _ => 95 + ms * 7 % 11,
            })
            .collect();
        let markers = [
            (400.0, "kill"),
            (431.5, "suspected"),
            (433.0, "config committed"),
            (480.0, "recovered"),
            (990.0, "re-replicated"),
        ];
        (buckets, markers)
    }

    #[test]
    fn a_timeline_is_written_as_svg_and_png_with_its_markers() {
        let dir = std::env::temp_dir().join(format!("ferrotx-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (buckets, markers) = failover();
        timeline(
            &dir.join("timeline"),
            "failover <node 2>",
            &buckets,
            0.0,
            "time since the start (ms)",
            &markers,
        )
        .unwrap();
        let svg = std::fs::read_to_string(dir.join("timeline.svg")).unwrap();
        let png = std::fs::read(dir.join("timeline.png")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();

        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let texts = texts(&svg);
        for (_, label) in markers {
            assert!(texts.contains(&label), "{label} not in {texts:?}");
        }
        assert!(texts.contains(&"failover &lt;node 2&gt;"), "{texts:?}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        let (width, height, rgb) = decode_png(&png);
        assert_eq!((width, height), SIZE);
        // The title is text in the bitmap too: dark pixels in the top band.
        let dark = rgb[..width as usize * 3 * 30]
            .chunks(3)
            .filter(|p| p.iter().all(|&c| c < 128))
            .count();
        assert!(dark > 100, "{dark} dark pixels where the title is");
    }

    /// Draws [`failover`]'s timeline to /tmp/ferrotx_timeline_check.svg and .png, to look
    /// at.
    #[test]
    #[ignore]
    fn render_a_timeline() {
        let (buckets, markers) = failover();
        let stem = Path::new("/tmp/ferrotx_timeline_check");
        timeline(
            stem,
            "bench failover: kill -9 of node 2",
            &buckets,
            -1000.0,
            "time since the kill (ms)",
            &markers,
        )
        .unwrap();
    }

    #[test]
    fn tick_labels_are_short() {
        let labels: Vec<String> = [0.0, 20.0, 0.25, 1.0 / 3.0, -0.0001, 1e5]
            .iter()
            .map(number)
            .collect();
        assert_eq!(labels, ["0", "20", "0.25", "0.333", "0", "100000"]);
    }
}
