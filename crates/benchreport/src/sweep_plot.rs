//! Line plots with 95 % CI error bars over a logarithmic x axis (threads 1 … 512), the
//! shape of seed 001's Figures 8-11 and seed 004's batching curves.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::plots::server_color;
use crate::stats::{fmt_num, Summary};

/// One line: a label (the legend entry) and its points (x, mean ± ci95).
pub struct CiLine {
    pub label: String,
    pub points: Vec<(f64, Summary)>,
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

/// Draw `lines` into an SVG at `path`: x logarithmic (base 2 labels), y from 0.
pub fn ci_line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[CiLine],
) -> Result<()> {
    let finite = |s: &Summary| s.mean.is_finite();
    let (mut xmin, mut xmax, mut ymax) = (f64::INFINITY, 1f64, 0f64);
    for (x, s) in lines
        .iter()
        .flat_map(|l| &l.points)
        .filter(|(_, s)| finite(s))
    {
        xmin = xmin.min(*x);
        xmax = xmax.max(*x);
        ymax = ymax.max(s.mean + s.ci95.unwrap_or(0.0));
    }
    let xmin = if xmin.is_finite() && xmin > 0.0 {
        xmin
    } else {
        1.0
    };
    let xmax = if xmax > xmin { xmax * 1.2 } else { xmin * 2.0 };
    let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
    let root = SVGBackend::new(path, (800, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((xmin / 1.2..xmax).log_scale(), 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| fmt_num(*y))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    for (i, line) in lines.iter().enumerate() {
        let color = server_color(i);
        let pts: Vec<(f64, Summary)> = line
            .points
            .iter()
            .copied()
            .filter(|(x, s)| *x > 0.0 && finite(s))
            .collect();
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|(x, s)| (*x, s.mean)),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(line.label.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        chart
            .draw_series(pts.iter().filter_map(|(x, s)| {
                let h = s.ci95?;
                Some(ErrorBar::new_vertical(
                    *x,
                    (s.mean - h).max(0.0),
                    s.mean,
                    s.mean + h,
                    color.stroke_width(1),
                    8,
                ))
            }))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_series_with_its_error_bars() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.svg");
        let s = |m: f64| Summary::new(m, Some(m / 10.0), 3);
        let lines = [
            CiLine {
                label: "none".into(),
                points: vec![(1.0, s(100.0)), (4.0, s(300.0)), (16.0, s(350.0))],
            },
            CiLine {
                label: "dynamic".into(),
                points: vec![(1.0, s(90.0)), (4.0, s(500.0)), (16.0, s(900.0))],
            },
        ];
        ci_line_chart(&path, "randread", "threads", "ops/s", &lines).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let text = |t: &str| svg.lines().any(|l| l.trim() == t);
        assert!(text("none") && text("dynamic"), "legend entries");
        // Two polylines (the lines) at least, and the error bars' whiskers as lines.
        assert!(svg.matches("<polyline").count() >= 2);
        assert!(svg.matches("<line").count() >= 6, "error bars drawn");
    }
}
