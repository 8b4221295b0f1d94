//! The SVG chart of a report: one horizontal bar panel per throughput case, wake-latency percentile
//! and re-arm metric; bars are medians, whiskers the min–max over rounds, evd's bars in red; labels
//! carry the ratio (above 1 = evd better) and the below-floor and oversubscription marks.

use crate::report::{format_value, Record, Report};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use std::path::Path;

/// A panel: a title and the records it draws (one metric).
struct Panel<'a> {
    title: String,
    rows: Vec<&'a Record>,
}

fn panels(report: &Report) -> Vec<Panel<'_>> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in &report.records {
        if r.metric == "latency_p999_ns" {
            continue; // p50 and p99 panels are enough to read; the table has p99.9.
        }
        let k = (r.case.as_str(), r.metric.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(case, metric)| {
            let rows: Vec<&Record> = report
                .records
                .iter()
                .filter(|r| r.case == case && r.metric == metric)
                .collect();
            let unit = rows.first().map_or("", |r| r.unit.as_str());
            let better = match rows.first() {
                Some(r) if r.higher_is_better => "higher is better; ratio = evd ÷ peer",
                _ => "lower is better; ratio = peer ÷ evd",
            };
            Panel {
                title: format!("{case}: {metric} ({unit}, {better}: above 1 = evd better)"),
                rows,
            }
        })
        .collect()
}

/// Draw `report` as an SVG file at `path`.
pub fn draw(report: &Report, path: &Path) -> Result<(), String> {
    let panels = panels(report);
    if panels.is_empty() {
        return Err("nothing to draw".into());
    }
    let cols = 2usize;
    let rows = panels.len().div_ceil(cols);
    let panel_h = 60 + 26 * panels.iter().map(|p| p.rows.len()).max().unwrap_or(1) as u32;
    let size = (1600u32, 50 + panel_h * rows as u32);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let title = format!(
        "evd-bench compare{}: {} ({} CPUs), {}",
        if report.quick { " --quick" } else { "" },
        report.machine.cpu,
        report.machine.logical_cpus,
        report.machine.kernel
    );
    let root = root
        .titled(&title, ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
    let areas = root.split_evenly((rows, cols));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        draw_panel(panel, area).map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    panel: &Panel<'_>,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let n = panel.rows.len();
    let xmax = panel
        .rows
        .iter()
        .map(|r| r.max.max(r.median))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.08;
    let unit = panel
        .rows
        .first()
        .map_or("", |r| r.unit.as_str())
        .to_string();
    let names: Vec<String> = panel.rows.iter().map(|r| r.system.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(24)
        .y_label_area_size(270)
        .build_cartesian_2d(0f64..xmax, (0..n).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_labels(6)
        .x_label_formatter(&|x| format_value(*x, &unit))
        .label_style(("sans-serif", 12))
        .draw()?;
    let evd_color = RGBColor(200, 50, 40);
    let peer_color = RGBColor(70, 110, 180);
    for (i, r) in panel.rows.iter().enumerate() {
        let color = if r.role == crate::report::Role::Evd {
            evd_color
        } else {
            peer_color
        };
        let bar = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(i)),
                (r.median, SegmentValue::Exact(i + 1)),
            ],
            color.mix(0.8).filled(),
        );
        chart.draw_series(std::iter::once(bar))?;
        let whisker = PathElement::new(
            vec![
                (r.min, SegmentValue::CenterOf(i)),
                (r.max, SegmentValue::CenterOf(i)),
            ],
            BLACK.stroke_width(2),
        );
        chart.draw_series(std::iter::once(whisker))?;
        let ratio = match (&r.baseline, r.ratio_to_evd) {
            (Some(b), Some(x)) if *b != r.system => format!("  ratio {x:.2}"),
            _ => String::new(),
        };
        let mut marks = String::new();
        if r.below_floor == Some(true) {
            marks.push_str("  (below floor: noise)");
        }
        if r.oversubscribed {
            marks.push_str("  (oversubscribed)");
        }
        let label = Text::new(
            format!("{}{}{}", format_value(r.median, &r.unit), ratio, marks),
            (r.max.max(r.median), SegmentValue::CenterOf(i)),
            ("sans-serif", 11),
        );
        chart.draw_series(std::iter::once(label))?;
    }
    Ok(())
}
