//! The report's chart kinds, drawn as SVG by plotters: lines over time, stacked areas over
//! time, step CDFs on a log axis, and horizontal bars (with 95% intervals or a limit mark).
//! Each returns the `<svg>` element as text; text is left to the browser's sans-serif font.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Width and height of every chart, pixels.
const SIZE: (u32, u32) = (880, 340);

/// Series colours (Tableau 10): distinct, readable on white, and in a fixed order so the same
/// series keeps its colour across charts.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of series `i`.
pub fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// A named series of `(x, y)` points.
pub struct Line {
    /// Legend text.
    pub name: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a limit rather than a measure).
    pub dashed: bool,
}

/// Axis texts of a chart.
pub struct Axes<'a> {
    /// What x measures.
    pub x: &'a str,
    /// What y measures.
    pub y: &'a str,
}

/// Draws into an SVG string; a drawing error (which plotters reports only for impossible
/// sizes) becomes the error text.
fn svg(draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>) -> Result<String, String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        draw(&root)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(text)
}

/// A tick label: whole numbers on wide axes, two decimals on narrow ones.
fn tick(range: f64) -> impl Fn(&f64) -> String {
    move |v| if range >= 10.0 { format!("{v:.0}") } else { format!("{v:.2}") }
}

/// The range a set of values spans, widened so that a flat or empty series still has an axis.
fn span(values: impl Iterator<Item = f64>, from_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() || !hi.is_finite() {
        return 0.0..1.0;
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-9 {
        hi = lo + 1.0;
    }
    lo..hi + (hi - lo) * 0.05
}

/// A chart of linear axes over `x` and `y`, with its title, axis texts and ticks drawn.
fn plane<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    axes: &Axes<'_>,
    x: Range<f64>,
    y: Range<f64>,
) -> Result<ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>, String> {
    let (x_tick, y_tick) = (tick(x.end - x.start), tick(y.end - y.start));
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(axes.y)
        .x_label_formatter(&x_tick)
        .y_label_formatter(&y_tick)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(chart)
}

/// Lines over a shared x axis, with a legend when there is more than one.
pub fn lines(title: &str, axes: &Axes<'_>, lines: &[Line]) -> Result<String, String> {
    let x = span(lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)), false);
    let y = span(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)), true);
    svg(|root| {
        let mut chart = plane(root, title, axes, x, y)?;
        for (i, line) in lines.iter().enumerate() {
            let style = ShapeStyle::from(colour(i)).stroke_width(2);
            let drawn = if line.dashed {
                chart.draw_series(DashedLineSeries::new(line.points.iter().copied(), 6, 4, style))
            } else {
                chart.draw_series(LineSeries::new(line.points.iter().copied(), style))
            }
            .map_err(|e| e.to_string())?;
            drawn.label(line.name.as_str()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        if lines.len() > 1 {
            legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        }
        Ok(())
    })
}

/// Layers stacked on top of each other over a shared x axis (`layers[i].points` share xs).
pub fn stacked(title: &str, axes: &Axes<'_>, layers: &[Line]) -> Result<String, String> {
    let xs: Vec<f64> = layers.first().map(|l| l.points.iter().map(|p| p.0).collect()).unwrap_or_default();
    // Running totals, bottom layer first.
    let mut tops: Vec<Vec<f64>> = Vec::with_capacity(layers.len());
    for layer in layers {
        let below = tops.last().cloned().unwrap_or_else(|| vec![0.0; xs.len()]);
        tops.push(below.iter().zip(&layer.points).map(|(b, p)| b + p.1).collect());
    }
    let x = span(xs.iter().copied(), false);
    let y = span(tops.last().into_iter().flatten().copied(), true);
    svg(|root| {
        let mut chart = plane(root, title, axes, x, y)?;
        // Top layer first: each lower area is drawn over the one above it.
        for (i, (layer, top)) in layers.iter().zip(&tops).enumerate().rev() {
            let fill = colour(i).mix(0.75);
            let points: Vec<(f64, f64)> = xs.iter().copied().zip(top.iter().copied()).collect();
            chart
                .draw_series(AreaSeries::new(points, 0.0, fill).border_style(colour(i)))
                .map_err(|e| e.to_string())?
                .label(layer.name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], fill.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

/// Empirical CDFs of positive durations (seconds) on a log x axis; zeros count at the axis'
/// left end, one second.
pub fn cdfs(title: &str, axes: &Axes<'_>, samples: &[(String, Vec<u64>)]) -> Result<String, String> {
    let max = samples.iter().flat_map(|(_, s)| s.iter().copied()).max().unwrap_or(1).max(10) as f64;
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d((1.0..max * 1.5).log_scale(), 0.0..1.0)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(axes.x)
            .y_desc(axes.y)
            .x_label_formatter(&|s| crate::report::human_duration(*s))
            .y_label_formatter(&|p| format!("{:.0}%", p * 100.0))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, values)) in samples.iter().enumerate() {
            let style = ShapeStyle::from(colour(i)).stroke_width(2);
            chart
                .draw_series(LineSeries::new(cdf_steps(values), style))
                .map_err(|e| e.to_string())?
                .label(format!("{name} ({})", values.len()))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// The step outline of the empirical CDF of `values`, at most about 400 steps.
fn cdf_steps(values: &[u64]) -> Vec<(f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let stride = n.div_ceil(400);
    let mut points = vec![(1.0, 0.0)];
    let mut i = 0;
    while i < n {
        // The last index holding this value (or the stride's end), so equal values make one step.
        let mut j = (i + stride).min(n) - 1;
        while j + 1 < n && sorted[j + 1] == sorted[j] {
            j += 1;
        }
        let x = (sorted[j] as f64).max(1.0);
        points.push((x, points.last().map_or(0.0, |p| p.1)));
        points.push((x, (j + 1) as f64 / n as f64));
        i = j + 1;
    }
    points
}

/// One horizontal bar: its label, value, and either a 95% interval's half-width or a limit.
pub struct Bar {
    /// Label on the y axis.
    pub label: String,
    /// Length of the bar.
    pub value: f64,
    /// Half-width of the interval drawn around the value's end.
    pub ci95: Option<f64>,
    /// A limit marked across the bar (a quota).
    pub limit: Option<f64>,
}

/// Horizontal bars, one per row from the top, with their intervals or limits.
pub fn bars(title: &str, x_axis: &str, bars: &[Bar]) -> Result<String, String> {
    let x = span(bars.iter().flat_map(|b| [b.value + b.ci95.unwrap_or(0.0), b.limit.unwrap_or(0.0)]), true);
    let x_tick = tick(x.end - x.start);
    let longest = bars.iter().map(|b| b.label.chars().count()).max().unwrap_or(4) as u32;
    let rows = bars.len().max(1);
    let height = (60 + 26 * rows as u32).max(160);
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (SIZE.0, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size((longest * 7 + 14).min(420))
            .build_cartesian_2d(x, (0..rows).into_segmented())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(x_axis)
            .x_label_formatter(&x_tick)
            .y_labels(rows)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(row) => {
                    rows.checked_sub(row + 1).and_then(|i| bars.get(i)).map_or_else(String::new, |b| b.label.clone())
                }
                _ => String::new(),
            })
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let i = rows - 1 - i;
                let style = colour(0).mix(0.8).filled();
                let mut bar =
                    Rectangle::new([(0.0, SegmentValue::Exact(i)), (b.value, SegmentValue::Exact(i + 1))], style);
                bar.set_margin(3, 3, 0, 0);
                bar
            }))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                let half = b.ci95.filter(|h| *h > 0.0)?;
                let i = rows - 1 - i;
                Some(ErrorBar::new_horizontal(
                    SegmentValue::CenterOf(i),
                    b.value - half,
                    b.value,
                    b.value + half,
                    BLACK.stroke_width(2),
                    8,
                ))
            }))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                let limit = b.limit?;
                let i = rows - 1 - i;
                let style = ShapeStyle::from(colour(3)).stroke_width(3);
                Some(PathElement::new(
                    vec![(limit, SegmentValue::Exact(i)), (limit, SegmentValue::Exact(i + 1))],
                    style,
                ))
            }))
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(text)
}

/// The legend box, where the series leave room.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_steps_end_at_one_and_never_fall() {
        let steps = cdf_steps(&[0, 0, 5, 5, 5, 60, 3600]);
        assert_eq!(steps.last(), Some(&(3600.0, 1.0)));
        assert!(steps.windows(2).all(|w| w[1].1 >= w[0].1 && w[1].0 >= w[0].0));
        // The two zeros make one step to 2/7 at the axis' left end.
        assert_eq!(steps[2], (1.0, 2.0 / 7.0));
    }

    #[test]
    fn cdf_steps_are_bounded_for_long_inputs() {
        let values: Vec<u64> = (0..100_000).collect();
        let steps = cdf_steps(&values);
        assert!(steps.len() <= 2 * 401 + 1, "{} steps", steps.len());
        assert_eq!(steps.last().map(|p| p.1), Some(1.0));
    }

    #[test]
    fn charts_are_svg_with_their_series() {
        let axes = Axes { x: "hours", y: "GPUs" };
        let line = |name: &str| Line { name: name.into(), points: vec![(0.0, 1.0), (1.0, 3.0)], dashed: false };
        let svg = lines("Busy GPUs", &axes, &[line("busy"), line("free")]).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("Busy GPUs") && svg.contains("busy") && svg.contains("free"));
        let svg = stacked("Reasons", &axes, &[line("quota"), line("capacity")]).unwrap();
        assert!(svg.contains("quota") && svg.contains("capacity"));
        let svg = cdfs("Waits", &axes, &[("1".into(), vec![0, 10, 100])]).unwrap();
        assert!(svg.contains("1 (3)"));
        let bar = |label: &str| Bar { label: label.into(), value: 2.0, ci95: Some(0.5), limit: Some(3.0) };
        let svg = bars("Usage", "GPUs", &[bar("vc-a"), bar("vc-b")]).unwrap();
        assert!(svg.contains("vc-a") && svg.contains("vc-b"));
    }

    #[test]
    fn empty_series_still_draw_axes() {
        let axes = Axes { x: "x", y: "y" };
        assert!(lines("Empty", &axes, &[]).unwrap().contains("Empty"));
        assert!(cdfs("Empty", &axes, &[]).unwrap().contains("Empty"));
        assert!(bars("Empty", "x", &[]).unwrap().contains("Empty"));
    }
}
