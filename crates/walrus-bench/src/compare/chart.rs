//! SVG line charts (plotters, SVG backend only: text is written as SVG `<text>` elements
//! and sized by plotters' built-in estimate, so no font files are needed).

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// One line: its legend and its points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A vertical marker line at `x` (e.g. "CHECKPOINT issued").
pub struct Marker {
    pub name: String,
    pub x: f64,
    pub series_index: usize,
}

pub fn line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    markers: &[Marker],
) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Debug| anyhow!("cannot draw {}: {e:?}", path.display());
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    for m in markers {
        let color = Palette99::pick(m.series_index).to_rgba();
        chart
            .draw_series(LineSeries::new(
                vec![(m.x, 0.0), (m.x, y_max)],
                color.stroke_width(1),
            ))
            .map_err(|e| err(&e))?
            .label(m.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y - 5), (x, y + 5)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Per-second TPS as points (x = end of each second).
pub fn per_second(tps: &[f64]) -> Vec<(f64, f64)> {
    tps.iter()
        .enumerate()
        .map(|(i, &v)| ((i + 1) as f64, v))
        .collect()
}
