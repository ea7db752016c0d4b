//! The main chart: peak VRAM against length as stacked components, GPU
//! lines, the chosen length and measured points. Generic over plotters'
//! `DrawingBackend`: a canvas in the page, SVG in the native tests.
//!
//! The feature's files: this one (native, drawn to SVG in the tests) and
//! `panel.rs` (the page's canvas, settings and exports).

/// The chart panel on the page: canvas, settings, tooltip and exports.
#[cfg(target_arch = "wasm32")]
pub mod panel;

use crate::curve::{Band, CurveData};
use crate::format::{gb, length as fmt_length};
use headroom_core::estimate::Component;
use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{
    AsRangedCoord, KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter,
};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

/// Colors of the page and the chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Theme {
    /// Dark text on white.
    Light,
    /// Light text on near-black.
    Dark,
}

impl Theme {
    /// Its background colour.
    pub fn background(self) -> RGBColor {
        match self {
            Theme::Light => RGBColor(255, 255, 255),
            Theme::Dark => RGBColor(22, 27, 34),
        }
    }
    /// Its foreground colour.
    pub fn foreground(self) -> RGBColor {
        match self {
            Theme::Light => RGBColor(31, 35, 40),
            Theme::Dark => RGBColor(230, 237, 243),
        }
    }
    /// Its grid colour.
    pub fn grid(self) -> RGBColor {
        match self {
            Theme::Light => RGBColor(225, 228, 232),
            Theme::Dark => RGBColor(48, 54, 61),
        }
    }
    fn limit(self) -> RGBColor {
        match self {
            Theme::Light => RGBColor(207, 34, 46),
            Theme::Dark => RGBColor(255, 123, 114),
        }
    }
}

/// The color of a component, as RGB.
pub fn color(c: Component) -> (u8, u8, u8) {
    match c {
        Component::CudaContext => (110, 118, 129),
        Component::Libraries => (160, 167, 176),
        Component::Weights => (31, 111, 235),
        Component::Gradients => (130, 80, 223),
        Component::OptimizerState => (191, 57, 137),
        Component::KvCache => (26, 127, 55),
        Component::Activations => (219, 109, 40),
        Component::PairRepresentation => (154, 103, 0),
        Component::PairTransient => (212, 167, 44),
        Component::Transient => (240, 136, 62),
        Component::LibraryWorkspace => (84, 174, 255),
        Component::AllocatorSlack => (175, 184, 193),
    }
}

/// The color of a component for CSS (`#rrggbb`).
pub fn css_color(c: Component) -> String {
    let (r, g, b) = color(c);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// The legend's name for the band around the total.
pub const LIKELY_RANGE_LABEL: &str = "likely range";

/// The peak axis's title.
pub const Y_LABEL: &str = "peak VRAM (GB)";

/// The peak axis's title for a job on several GPUs: one rank's peak.
pub const Y_LABEL_PER_GPU: &str = "peak VRAM per GPU (GB)";

/// Everything the chart shows.
#[derive(Clone, Debug)]
pub struct ChartSpec<'a> {
    /// The estimates.
    pub curve: &'a CurveData,
    /// Stacked components of the curve.
    pub bands: &'a [Band],
    /// The likely range of the total at each of the curve's lengths: low
    /// and high GB (empty: none drawn).
    pub likely: &'a [(f64, f64)],
    /// Length range on the axis.
    pub from: u32,
    /// Length range on the axis.
    pub to: u32,
    /// Logarithmic length axis.
    pub log_x: bool,
    /// Axis title of the length.
    pub x_label: &'a str,
    /// Axis title of the peak ([`Y_LABEL`], or [`Y_LABEL_PER_GPU`] for a
    /// job on several GPUs).
    pub y_label: &'a str,
    /// The chosen length and, when it estimated, its peak in GB.
    pub marker: Option<(u32, Option<f64>)>,
    /// GPU lines: label and usable memory in GB.
    pub gpu_lines: &'a [(String, f64)],
    /// Measured points: length and driver peak in GB.
    pub measured: &'a [(u32, f64)],
    /// Colors.
    pub theme: Theme,
    /// Device pixels per CSS pixel (fonts and lines scale with it).
    pub scale: f64,
}

/// Where the plot landed, to map pointer positions back to lengths.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Layout {
    /// Left and right edges of the plotting area, backend pixels.
    pub x_px: (i32, i32),
    /// Top and bottom edges of the plotting area, backend pixels.
    pub y_px: (i32, i32),
    /// Length range.
    pub from: f64,
    /// Length range.
    pub to: f64,
    /// Logarithmic length axis.
    pub log_x: bool,
    /// Top of the GB axis.
    pub y_max: f64,
    /// GPU lines above the top of the axis (label and GB).
    pub off_scale: Vec<(String, f64)>,
}

impl Layout {
    /// The length under backend pixel `x`, or `None` outside the plot.
    pub fn length_at(&self, x: f64) -> Option<f64> {
        let (l, r) = (self.x_px.0 as f64, self.x_px.1 as f64);
        if r <= l || x < l - 0.5 || x > r + 0.5 {
            return None;
        }
        let t = ((x - l) / (r - l)).clamp(0.0, 1.0);
        Some(if self.log_x {
            (self.from.ln() + t * (self.to.ln() - self.from.ln())).exp()
        } else {
            self.from + t * (self.to - self.from)
        })
    }

    /// Backend pixel of `length` on the x axis.
    pub fn x_of(&self, length: f64) -> f64 {
        let (l, r) = (self.x_px.0 as f64, self.x_px.1 as f64);
        let t = if self.log_x {
            (length.ln() - self.from.ln()) / (self.to.ln() - self.from.ln())
        } else {
            (length - self.from) / (self.to - self.from)
        };
        l + t * (r - l)
    }
}

/// The top of the GB axis: the curve and measured points, plus the lowest
/// GPU line above them when it is within 3x (so the limit shows).
fn y_max(spec: &ChartSpec) -> (f64, Vec<(String, f64)>) {
    let data_top = spec
        .measured
        .iter()
        .map(|m| m.1)
        .chain(spec.likely.iter().map(|r| r.1))
        .fold(spec.curve.max_gb(), f64::max);
    let mut top = data_top;
    if data_top > 0.0 {
        if let Some(line) = spec
            .gpu_lines
            .iter()
            .map(|g| g.1)
            .filter(|&v| v >= data_top && v <= 3.0 * data_top)
            .min_by(f64::total_cmp)
        {
            top = line;
        }
    } else {
        top = spec.gpu_lines.iter().map(|g| g.1).fold(0.0, f64::max);
    }
    let top = if top > 0.0 { top * 1.08 } else { 1.0 };
    let off = spec
        .gpu_lines
        .iter()
        .filter(|g| g.1 > top)
        .cloned()
        .collect();
    (top, off)
}

/// The label of one or more GPU lines drawn close together.
#[derive(Clone, Debug, PartialEq)]
struct LineLabel {
    names: Vec<String>,
    /// Usable memory, one figure or a range.
    amount: String,
    /// Where it sits, GB.
    at: f64,
}

impl LineLabel {
    /// Every name and the amount.
    fn text(&self) -> String {
        format!("{}: {} usable", self.names.join(", "), self.amount)
    }

    /// The fullest text that `fits`: every name, else the first and how
    /// many more, else the amount alone (a phone's chart is too narrow for
    /// "NVIDIA H100 80GB HBM3, ...").
    fn fitted(&self, fits: impl Fn(&str) -> bool) -> String {
        let full = self.text();
        if fits(&full) {
            return full;
        }
        if self.names.len() > 1 {
            let first = format!(
                "{} +{} more: {} usable",
                self.names[0],
                self.names.len() - 1,
                self.amount
            );
            if fits(&first) {
                return first;
            }
        }
        format!("{} usable", self.amount)
    }
}

/// Labels of the GPU lines inside the axis: lines closer than 4% of the
/// axis share one label (so labels do not overlap), which names them all
/// and gives the range of their usable memory.
fn line_labels(lines: &[(String, f64)], y_top: f64) -> Vec<LineLabel> {
    let mut sorted: Vec<&(String, f64)> = lines.iter().filter(|g| g.1 <= y_top).collect();
    crate::sort::by_key(&mut sorted, |g| (crate::sort::f64_key(g.1), 0));
    let mut groups: Vec<(Vec<&str>, f64, f64)> = Vec::new();
    for (name, value) in sorted {
        match groups.last_mut() {
            Some(last) if value - last.2 < 0.04 * y_top => {
                last.0.push(name);
                last.2 = *value;
            }
            _ => groups.push((vec![name], *value, *value)),
        }
    }
    groups
        .into_iter()
        .map(|(names, lo, hi)| LineLabel {
            names: names.into_iter().map(str::to_string).collect(),
            amount: if hi - lo < 0.005 {
                gb(lo)
            } else {
                format!("{:.2}–{}", lo, gb(hi))
            },
            at: lo,
        })
        .collect()
}

/// Plots narrower than this (in CSS pixels) leave the component legend
/// out: on a phone it would cover most of the curve, and the breakdown
/// table under the chart names the same colours.
const LEGEND_MIN_PLOT_WIDTH: f64 = 420.0;

/// The length axis, linear or logarithmic, as one type: the drawing code,
/// generic over the axis, is compiled once (half the chart's share of the
/// page's bundle).
enum LengthAxis {
    Linear(RangedCoordf64),
    Log(LogCoord<f64>),
}

impl Ranged for LengthAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        match self {
            LengthAxis::Linear(c) => c.map(value, limit),
            LengthAxis::Log(c) => c.map(value, limit),
        }
    }
    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match self {
            LengthAxis::Linear(c) => c.key_points(hint),
            LengthAxis::Log(c) => c.key_points(hint),
        }
    }
    fn range(&self) -> Range<f64> {
        match self {
            LengthAxis::Linear(c) => c.range(),
            LengthAxis::Log(c) => c.range(),
        }
    }
}

impl ValueFormatter<f64> for LengthAxis {
    fn format(value: &f64) -> String {
        fmt_length(value.round() as u64)
    }
}

/// Draws the chart on `root`.
pub fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    spec: &ChartSpec,
) -> Result<Layout, String> {
    root.fill(&spec.theme.background())
        .map_err(|e| e.to_string())?;
    let (from, to) = (spec.from as f64, spec.to.max(spec.from + 1) as f64);
    let (y_top, off_scale) = y_max(spec);
    let axis = if spec.log_x {
        LengthAxis::Log((from..to).log_scale().into())
    } else {
        LengthAxis::Linear((from..to).into())
    };
    let (x_px, y_px) = draw_in(root, axis, spec, y_top)?;
    root.present().map_err(|e| e.to_string())?;
    Ok(Layout {
        x_px,
        y_px,
        from,
        to,
        log_x: spec.log_x,
        y_max: y_top,
        off_scale,
    })
}

type PixelRange = (i32, i32);

fn draw_in<DB, X>(
    root: &DrawingArea<DB, Shift>,
    x: X,
    spec: &ChartSpec,
    y_top: f64,
) -> Result<(PixelRange, PixelRange), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let s = spec.scale;
    let fg = spec.theme.foreground();
    // A generic family, not a name: plotters lowercases a named family
    // with Unicode tables that would add 10 KB to the page's bundle.
    let font = (FontFamily::SansSerif, 13.0 * s).into_font().color(&fg);
    let small = (FontFamily::SansSerif, 11.5 * s).into_font().color(&fg);
    let mut legend: Vec<(&str, Swatch)> = Vec::new();
    let mut chart = ChartBuilder::on(root)
        .margin((12.0 * s) as u32)
        .margin_right((20.0 * s) as u32)
        .x_label_area_size((40.0 * s) as u32)
        .y_label_area_size((56.0 * s) as u32)
        .build_cartesian_2d(x, 0f64..y_top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(spec.x_label)
        .y_desc(spec.y_label)
        .label_style(font.clone())
        .axis_desc_style(font.clone())
        .bold_line_style(spec.theme.grid().stroke_width(s.max(1.0) as u32))
        .light_line_style(spec.theme.grid().mix(0.4))
        .axis_style(fg.stroke_width(s.max(1.0) as u32))
        .x_labels(8)
        .y_labels(8)
        .x_label_formatter(&|v| fmt_length(v.round() as u64))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| err(&e))?;

    let xs: Vec<f64> = spec.curve.lengths.iter().map(|&l| l as f64).collect();
    for band in spec.bands {
        let (r, g, b) = color(band.component);
        let fill = RGBColor(r, g, b);
        let mut outline: Vec<(f64, f64)> =
            xs.iter().copied().zip(band.upper.iter().copied()).collect();
        outline.extend(xs.iter().copied().zip(band.lower.iter().copied()).rev());
        chart
            .draw_series(std::iter::once(Polygon::new(
                outline,
                fill.mix(0.85).filled(),
            )))
            .map_err(|e| err(&e))?;
        legend.push((band.component.label(), Swatch::Fill(fill.to_rgba())));
    }
    if spec.likely.len() == xs.len() && !xs.is_empty() {
        // The likely range around the total: a translucent band, drawn
        // over the stacked components so both ends show.
        let shade = fg.mix(0.18);
        let mut outline: Vec<(f64, f64)> = xs
            .iter()
            .copied()
            .zip(spec.likely.iter().map(|r| r.1))
            .collect();
        outline.extend(
            xs.iter()
                .copied()
                .zip(spec.likely.iter().map(|r| r.0))
                .rev(),
        );
        chart
            .draw_series(std::iter::once(Polygon::new(outline, shade.filled())))
            .map_err(|e| err(&e))?;
        legend.push((LIKELY_RANGE_LABEL, Swatch::Fill(shade)));
    }
    if let Some(top) = spec.bands.last() {
        chart
            .draw_series(LineSeries::new(
                xs.iter().copied().zip(top.upper.iter().copied()),
                fg.stroke_width((1.5 * s).max(1.0) as u32),
            ))
            .map_err(|e| err(&e))?;
    }
    let (x0, x1) = (spec.from as f64, spec.to.max(spec.from + 1) as f64);
    let limit = spec.theme.limit();
    for (_, gb_value) in spec.gpu_lines.iter().filter(|g| g.1 <= y_top) {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x0, *gb_value), (x1, *gb_value)],
                limit.stroke_width((1.5 * s).max(1.0) as u32),
            )))
            .map_err(|e| err(&e))?;
    }
    let (plot_x, _) = chart.plotting_area().get_pixel_range();
    let plot_width = f64::from(plot_x.end - plot_x.start);
    for label in line_labels(spec.gpu_lines, y_top) {
        let style = small
            .clone()
            .color(&limit)
            .pos(Pos::new(HPos::Right, VPos::Bottom));
        let area = chart.plotting_area();
        let text = label.fitted(|t| {
            area.estimate_text_size(t, &style)
                .is_ok_and(|(w, _)| f64::from(w) <= plot_width - 4.0 * s)
        });
        chart
            .draw_series(std::iter::once(Text::new(text, (x1, label.at), style)))
            .map_err(|e| err(&e))?;
    }
    if let Some((length, total)) = spec.marker {
        let x = (length as f64).clamp(x0, x1);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, y_top)],
                fg.mix(0.7).stroke_width(s.max(1.0) as u32),
            )))
            .map_err(|e| err(&e))?;
        if let Some(total) = total {
            chart
                .draw_series(std::iter::once(Circle::new(
                    (x, total),
                    (4.0 * s) as i32,
                    fg.filled(),
                )))
                .map_err(|e| err(&e))?;
        }
    }
    if !spec.measured.is_empty() {
        let bg = spec.theme.background();
        let r = (4.5 * s) as i32;
        chart
            .draw_series(
                spec.measured
                    .iter()
                    .filter(|m| m.0 as f64 >= x0 && m.0 as f64 <= x1)
                    .map(|&(l, v)| {
                        EmptyElement::at((l as f64, v))
                            + Circle::new((0, 0), r, bg.filled())
                            + Circle::new((0, 0), r, fg.stroke_width((2.0 * s) as u32))
                    }),
            )
            .map_err(|e| err(&e))?;
        legend.push(("measured", Swatch::Ring));
    }
    let legend_fits = plot_width >= LEGEND_MIN_PLOT_WIDTH * s;
    if legend_fits && !legend.is_empty() {
        draw_legend(
            &chart.plotting_area().strip_coord_spec(),
            &legend,
            &small,
            spec.theme,
        )?;
    }
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    Ok(((xr.start, xr.end), (yr.start, yr.end)))
}

/// What a legend entry shows beside its label.
enum Swatch {
    /// A filled square of the series' colour.
    Fill(RGBAColor),
    /// A ring, as the measured points are drawn.
    Ring,
}

/// The legend in the plot's upper left corner: a framed box of labels, each
/// with its swatch. Plotters' own series legend would do the same but builds
/// a named default font, whose lowercasing pulls Unicode tables into the
/// bundle; this draws the same box with the chart's font.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(&str, Swatch)],
    font: &TextStyle,
    theme: Theme,
) -> Result<(), String> {
    const CORNER: i32 = 5;
    const MARGIN: i32 = 10;
    const SWATCH_AREA: i32 = 30;
    let mut labels = MultiLineText::<_, &str>::new((0, 0), font.clone());
    for (label, _) in entries {
        labels.push_line(*label);
    }
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let (w, h) = labels.estimate_dimension().map_err(|e| err(&e))?;
    let (w, h) = (w + SWATCH_AREA + 2 * MARGIN, h + 2 * MARGIN);
    let corners = [(CORNER, CORNER), (CORNER + w, CORNER + h)];
    area.draw(&Rectangle::new(
        corners,
        theme.background().mix(0.85).filled(),
    ))
    .map_err(|e| err(&e))?;
    area.draw(&Rectangle::new(corners, theme.grid()))
        .map_err(|e| err(&e))?;
    labels.relocate((CORNER + SWATCH_AREA + MARGIN, CORNER + MARGIN));
    area.draw(&labels).map_err(|e| err(&e))?;
    let lines = labels.compute_line_layout().map_err(|e| err(&e))?;
    for (((_, y0), (_, y1)), (_, swatch)) in lines.into_iter().zip(entries) {
        let (x, y) = (CORNER + MARGIN, (y0 + y1) / 2);
        let drawn = match swatch {
            Swatch::Fill(color) => area.draw(&Rectangle::new(
                [(x, y - 5), (x + 10, y + 5)],
                color.filled(),
            )),
            Swatch::Ring => area.draw(&Circle::new(
                (x + 5, y),
                4,
                theme.foreground().stroke_width(2),
            )),
        };
        drawn.map_err(|e| err(&e))?;
    }
    Ok(())
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::curve::bands;
    use crate::curve::tests::fake_curve;
    use headroom_core::search::lengths;

    fn svg(spec: &ChartSpec) -> (String, Layout) {
        let mut out = String::new();
        let layout = {
            let root = SVGBackend::with_string(&mut out, (800, 420)).into_drawing_area();
            draw(&root, spec).unwrap()
        };
        (out, layout)
    }

    fn spec<'a>(
        curve: &'a CurveData,
        b: &'a [Band],
        lines: &'a [(String, f64)],
        measured: &'a [(u32, f64)],
        log_x: bool,
    ) -> ChartSpec<'a> {
        ChartSpec {
            curve,
            bands: b,
            likely: &[],
            from: 128,
            to: 131_072,
            log_x,
            x_label: "sequence length (tokens)",
            y_label: Y_LABEL,
            marker: Some((4096, Some(17.5))),
            gpu_lines: lines,
            measured,
            theme: Theme::Light,
            scale: 1.0,
        }
    }

    #[test]
    fn draws_the_likely_range_around_the_total_and_fits_its_top() {
        let curve = fake_curve(&lengths(128, 131_072, 64, true));
        let b = bands(&curve);
        let totals: Vec<f64> = curve
            .estimates
            .iter()
            .map(|e| e.driver_peak.as_gb())
            .collect();
        let likely: Vec<(f64, f64)> = totals.iter().map(|t| (t * 0.97, t * 1.5)).collect();
        let without = spec(&curve, &b, &[], &[], true);
        let (plain, plain_layout) = svg(&without);
        assert!(!plain.contains(LIKELY_RANGE_LABEL));
        let mut with = without.clone();
        with.likely = &likely;
        let (banded, layout) = svg(&with);
        assert!(banded.contains(LIKELY_RANGE_LABEL));
        assert_eq!(
            banded.matches("<polygon").count(),
            plain.matches("<polygon").count() + 1,
            "one more polygon: the range"
        );
        let highest = likely.iter().map(|r| r.1).fold(0.0, f64::max);
        assert!(layout.y_max >= highest, "{} < {highest}", layout.y_max);
        assert!(layout.y_max > plain_layout.y_max);
    }

    #[test]
    fn draws_bands_lines_marker_and_points_to_svg() {
        let curve = fake_curve(&lengths(128, 131_072, 256, true));
        let b = bands(&curve);
        let lines = vec![("H200".to_string(), 149.5), ("tiny".to_string(), 8.0)];
        let measured = vec![(2048, 17.4), (65536, 37.0)];
        for log_x in [true, false] {
            // A job on several GPUs plots one rank's peak.
            let mut chart = spec(&curve, &b, &lines, &measured, log_x);
            let y_label = if log_x { Y_LABEL_PER_GPU } else { Y_LABEL };
            chart.y_label = y_label;
            let (svg, layout) = svg(&chart);
            assert!(svg.starts_with("<svg"));
            assert_eq!(svg.contains("per GPU"), log_x);
            for label in [
                "weights",
                "KV cache",
                "CUDA context",
                "measured",
                y_label,
                "tiny: 8.00 GB usable",
            ] {
                assert!(svg.contains(label), "svg lacks {label}");
            }
            assert!(
                svg.matches("<polygon").count() >= b.len(),
                "one polygon per band"
            );
            assert!(
                svg.contains(&css_color(Component::Weights).to_uppercase())
                    || svg.contains(&css_color(Component::Weights))
            );
            // H200 (149.5 GB) is more than 3x the curve's top: listed off scale.
            assert_eq!(layout.off_scale, vec![("H200".to_string(), 149.5)]);
            assert!(layout.x_px.0 < layout.x_px.1);
            let mid = layout.x_of(4096.0);
            assert!((layout.length_at(mid).unwrap() - 4096.0).abs() < 1e-6);
            assert_eq!(layout.length_at(layout.x_px.0 as f64 - 10.0), None);
        }
    }

    #[test]
    fn close_gpu_lines_share_one_label() {
        let lines = vec![
            ("A".to_string(), 25.4),
            ("B".to_string(), 25.4),
            ("C".to_string(), 27.0),
            ("D".to_string(), 48.0),
            ("E".to_string(), 500.0),
        ];
        let labels = line_labels(&lines, 100.0);
        let texts: Vec<(String, f64)> = labels.iter().map(|l| (l.text(), l.at)).collect();
        assert_eq!(
            texts,
            vec![
                ("A, B, C: 25.40–27.00 GB usable".to_string(), 25.4),
                ("D: 48.00 GB usable".to_string(), 48.0)
            ]
        );
        // Shortened to what fits: the first name and a count, then the amount.
        assert_eq!(labels[0].fitted(|_| true), "A, B, C: 25.40–27.00 GB usable");
        assert_eq!(
            labels[0].fitted(|t| !t.contains(", ")),
            "A +2 more: 25.40–27.00 GB usable"
        );
        assert_eq!(
            labels[0].fitted(|t| !t.contains('A')),
            "25.40–27.00 GB usable"
        );
        assert_eq!(labels[1].fitted(|_| false), "48.00 GB usable");
    }

    /// A phone-width chart keeps its GPU labels inside the plot and leaves
    /// the legend to the breakdown table; a laptop-width one shows both.
    #[test]
    fn a_narrow_chart_shortens_labels_and_drops_the_legend() {
        let curve = fake_curve(&lengths(128, 131_072, 64, true));
        let b = bands(&curve);
        let lines = vec![
            ("NVIDIA H100 80GB HBM3".to_string(), 8.0),
            ("NVIDIA A100-SXM4-80GB".to_string(), 8.05),
        ];
        let draw_at = |width: u32| {
            let mut out = String::new();
            {
                let root = SVGBackend::with_string(&mut out, (width, 420)).into_drawing_area();
                draw(&root, &spec(&curve, &b, &lines, &[], false)).unwrap();
            }
            out
        };
        let wide = draw_at(900);
        assert!(
            wide.contains("NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-80GB"),
            "{wide}"
        );
        assert!(wide.contains(b[0].component.label()));
        let narrow = draw_at(300);
        assert!(!narrow.contains("NVIDIA A100-SXM4-80GB"), "{narrow}");
        assert!(narrow.contains("usable"));
        assert!(!narrow.contains(b[0].component.label()));
    }

    #[test]
    fn an_empty_curve_still_draws_axes() {
        let curve = CurveData::default();
        let (svg, layout) = svg(&spec(&curve, &[], &[], &[], false));
        assert!(svg.contains("peak VRAM (GB)"));
        assert_eq!(layout.y_max, 1.0);
    }
}
