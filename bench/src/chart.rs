//! The SVG chart of a report: one horizontal bar panel per case and metric (p99.9 is left to the
//! table); bars are medians, whiskers the min–max over rounds, evd's bars in red; labels carry the
//! ratio (above 1 = evd better) and the below-floor and oversubscription marks.

use crate::report::{Record, Report, Role, format_value, grouped};
use plotters::coord::{Shift, ranged1d::SegmentValue};
use plotters::prelude::*;
use std::path::Path;

/// Draw `report` as an SVG file at `path`.
pub fn draw(report: &Report, path: &Path) -> Result<(), String> {
    let drawn = report
        .records
        .iter()
        .filter(|r| r.metric != "latency_p999_ns");
    let panels = grouped(drawn, |r| (r.case.clone(), r.metric.clone()));
    if panels.is_empty() {
        return Err("nothing to draw".into());
    }
    let (cols, rows) = (2, panels.len().div_ceil(2));
    let panel_h = 60 + 26 * panels.iter().map(|(_, p)| p.len()).max().unwrap_or(1) as u32;
    let size = (1600u32, 50 + panel_h * rows as u32);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let m = &report.machine;
    let quick = if report.quick { " --quick" } else { "" };
    let title = format!(
        "evd-bench compare{quick}: {} ({} CPUs), {}",
        m.cpu, m.logical_cpus, m.kernel
    );
    let root = root
        .titled(&title, ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
    for ((_, rows), area) in panels.iter().zip(root.split_evenly((rows, cols)).iter()) {
        draw_panel(rows, area).map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

fn draw_panel<DB: DrawingBackend>(
    rows: &[&Record],
    area: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (n, first) = (rows.len(), rows[0]);
    let better = if first.higher_is_better {
        "higher is better; ratio = evd ÷ peer"
    } else {
        "lower is better; ratio = peer ÷ evd"
    };
    let (case, metric, unit) = (&first.case, &first.metric, &first.unit);
    let title = format!("{case}: {metric} ({unit}, {better}: above 1 = evd better)");
    let xmax = rows
        .iter()
        .map(|r| r.max.max(r.median))
        .fold(0.0f64, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(&title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(24)
        .y_label_area_size(270)
        .build_cartesian_2d(0f64..xmax.max(1e-9) * 1.08, (0..n).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => rows.get(*i).map_or(String::new(), |r| r.system.clone()),
            _ => String::new(),
        })
        .x_labels(6)
        .x_label_formatter(&|x| format_value(*x, unit))
        .label_style(("sans-serif", 12))
        .draw()?;
    for (i, r) in rows.iter().enumerate() {
        let evd = r.role == Role::Evd;
        let color = if evd {
            RGBColor(200, 50, 40)
        } else {
            RGBColor(70, 110, 180)
        };
        let (at, next) = (SegmentValue::Exact(i), SegmentValue::Exact(i + 1));
        let bar = Rectangle::new([(0.0, at), (r.median, next)], color.mix(0.8).filled());
        chart.draw_series(std::iter::once(bar))?;
        let mid = |x| (x, SegmentValue::CenterOf(i));
        let whisker = PathElement::new(vec![mid(r.min), mid(r.max)], BLACK.stroke_width(2));
        chart.draw_series(std::iter::once(whisker))?;
        let mut label = format_value(r.median, &r.unit);
        match (&r.baseline, r.ratio_to_evd) {
            (Some(b), Some(x)) if *b != r.system => label += &format!("  ratio {x:.2}"),
            _ => {}
        }
        if r.below_floor == Some(true) {
            label += "  (below floor: noise)";
        }
        if r.oversubscribed {
            label += "  (oversubscribed)";
        }
        let text = Text::new(label, mid(r.max.max(r.median)), ("sans-serif", 11));
        chart.draw_series(std::iter::once(text))?;
    }
    Ok(())
}
