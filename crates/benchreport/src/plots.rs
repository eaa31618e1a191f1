//! SVG plots with `plotters` (SVG backend only, no font files: text is
//! written as SVG `<text>` elements in the `sans-serif` family, and plotters
//! only estimates its size for the layout).

use std::ops::Range;
use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::stats::{fmt_num, Summary};

/// An axis label: whole numbers without decimals.
fn fmt_axis(v: &f64) -> String {
    if v.is_finite() && (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        fmt_num(*v)
    }
}

/// Colour of the `i`-th server: txnfs first (blue), Ganesha (orange), ...
pub fn server_color(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    PALETTE[i % PALETTE.len()]
}

/// The colour index of a server: txnfs always blue, Ganesha always orange,
/// others by position after those.
pub fn color_index(name: &str, position: usize) -> usize {
    match name {
        "txnfs" => 0,
        "ganesha" => 1,
        _ => position + 2,
    }
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

/// A white SVG canvas of `size` pixels, written to `path`.
fn canvas(path: &Path, size: (u32, u32)) -> Result<DrawingArea<SVGBackend<'_>, Shift>> {
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    Ok(root)
}

/// The chart every plot draws on: its caption, margins and room for the axis
/// labels, over `x` × `y`.
fn chart_on<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    x: Range<f64>,
    y: Range<f64>,
) -> Result<ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>> {
    ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x, y)
        .map_err(err)
}

/// The legend of `chart` at `position`, in the same framed box on every chart.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)
}

/// A grouped bar chart: one group per category (workload), one bar per
/// series (server) with its 95 % CI as an error bar and its mean written
/// above. `value(series, category)`.
pub fn bar_chart(
    path: &Path,
    title: &str,
    y_desc: &str,
    categories: &[String],
    series: &[String],
    value: &dyn Fn(usize, usize) -> Option<Summary>,
) -> Result<()> {
    let n = categories.len().max(1);
    let k = series.len().max(1);
    let mut ymax: f64 = 0.0;
    for s in 0..series.len() {
        for c in 0..categories.len() {
            if let Some(e) = value(s, c) {
                if e.mean.is_finite() {
                    ymax = ymax.max(e.mean + e.ci95.unwrap_or(0.0));
                }
            }
        }
    }
    let ymax = if ymax > 0.0 { ymax * 1.18 } else { 1.0 };
    let width = (160 + 110 * n * k.max(2) / 2).clamp(640, 1800) as u32;
    let root = canvas(path, (width, 480))?;
    let mut chart = chart_on(&root, title, -0.5f64..(n as f64 - 0.5), 0f64..ymax)?;
    let label_of = |x: &f64| -> String {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < categories.len() {
            categories[i as usize].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&label_of)
        .y_label_formatter(&fmt_axis)
        .y_desc(y_desc)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;

    let group = 0.8;
    let w = group / k as f64;
    let value_style = TextStyle::from(("sans-serif", 11).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for (s, name) in series.iter().enumerate() {
        let color = server_color(color_index(name, s));
        let bars: Vec<(f64, Summary)> = (0..categories.len())
            .filter_map(|c| value(s, c).map(|e| (c as f64 - group / 2.0 + s as f64 * w, e)))
            .filter(|(_, e)| e.mean.is_finite())
            .collect();
        chart
            .draw_series(bars.iter().map(|(x0, e)| {
                Rectangle::new(
                    [(*x0 + w * 0.05, 0.0), (*x0 + w * 0.95, e.mean)],
                    color.filled(),
                )
            }))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart
            .draw_series(bars.iter().filter_map(|(x0, e)| {
                let h = e.ci95?;
                Some(ErrorBar::new_vertical(
                    x0 + w / 2.0,
                    (e.mean - h).max(0.0),
                    e.mean,
                    e.mean + h,
                    BLACK.stroke_width(1),
                    8,
                ))
            }))
            .map_err(err)?;
        chart
            .draw_series(bars.iter().map(|(x0, e)| {
                Text::new(
                    fmt_num(e.mean),
                    (x0 + w / 2.0, e.mean + e.ci95.unwrap_or(0.0)),
                    value_style.clone(),
                )
            }))
            .map_err(err)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One line of a line chart.
pub struct Line {
    /// Legend entry (`None`: no entry, e.g. for the later repeats of a server).
    pub label: Option<String>,
    /// Index into [`server_color`].
    pub color: usize,
    pub points: Vec<(f64, f64)>,
}

/// A line chart, e.g. per-second throughput of each repeat of each server.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
) -> Result<()> {
    let pts = lines.iter().flat_map(|l| l.points.iter());
    let (mut xmax, mut ymax) = (0f64, 0f64);
    for (x, y) in pts {
        if x.is_finite() && y.is_finite() {
            xmax = xmax.max(*x);
            ymax = ymax.max(*y);
        }
    }
    let xmax = if xmax > 0.0 { xmax } else { 1.0 };
    let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
    let root = canvas(path, (800, 420))?;
    let mut chart = chart_on(&root, title, 0f64..xmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .y_label_formatter(&fmt_axis)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    let mut any_label = false;
    for line in lines {
        let color = server_color(line.color);
        let series = chart
            .draw_series(LineSeries::new(
                line.points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite()),
                color.stroke_width(2),
            ))
            .map_err(err)?;
        if let Some(label) = &line.label {
            any_label = true;
            series.label(label.as_str()).legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
            });
        }
    }
    if any_label {
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
