//! SVG plots of experiment results (plotters, SVG backend).

use std::path::Path;

use plotters::prelude::*;

use crate::bench::stats::BoxStats;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("plotting {path}: {message}")]
pub struct PlotError {
    pub path: String,
    pub message: String,
}

const BOX_WIDTH_PX: u32 = 46;
const LABEL_AREA_PX: u32 = 190;

/// A box plot of latency distributions on a log scale in µs, like the paper's Fig. 4: one box per
/// series (q1–q3, median line), whiskers from min to max, a cross at p99. `deadline_us` draws a
/// dashed horizontal line (e.g. the period).
pub fn latency_boxplot_svg(
    path: &Path,
    title: &str,
    series: &[(String, BoxStats)],
    deadline_us: Option<f64>,
) -> Result<(), PlotError> {
    let err = |message: String| PlotError {
        path: path.display().to_string(),
        message,
    };
    if series.is_empty() {
        return Err(err("nothing to plot".into()));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| err(e.to_string()))?;
    }
    let lo = series
        .iter()
        .map(|(_, b)| b.min_us)
        .fold(f64::INFINITY, f64::min)
        .max(0.1);
    let hi = series
        .iter()
        .map(|(_, b)| b.max_us)
        .chain(deadline_us)
        .fold(1.0, f64::max);
    let y_range = (lo / 2.0)..(hi * 2.0);
    let width = (120 + BOX_WIDTH_PX * series.len() as u32).max(640);
    let root = SVGBackend::new(path, (width, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let n = series.len() as i32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(LABEL_AREA_PX)
        .y_label_area_size(70)
        .build_cartesian_2d(-1..n, y_range.log_scale())
        .map_err(|e| err(e.to_string()))?;
    let labels: Vec<String> = series.iter().map(|(l, _)| l.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(series.len() + 2)
        .x_label_formatter(&|i| {
            usize::try_from(*i)
                .ok()
                .and_then(|i| labels.get(i).cloned())
                .unwrap_or_default()
        })
        .x_label_style(
            ("sans-serif", 12)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .y_desc("latency (µs, log scale)")
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let half = 0.3;
    for (i, (_, b)) in series.iter().enumerate() {
        let x = i as i32;
        let color = Palette99::pick(i).to_rgba();
        // Plotters' integer x axis: draw in a float sub-coordinate around each box's index.
        let area = chart.plotting_area();
        let to_px = |xf: f64, y: f64| {
            let left = area.map_coordinate(&(x, y));
            let right = area.map_coordinate(&(x + 1, y));
            let px = left.0 as f64 + (right.0 - left.0) as f64 * xf;
            (px.round() as i32, left.1)
        };
        let root_area = chart.plotting_area().strip_coord_spec();
        let (bx0, by_q3) = to_px(-half, b.q3_us);
        let (bx1, by_q1) = to_px(half, b.q1_us);
        let (cx, by_max) = to_px(0.0, b.max_us);
        let (_, by_min) = to_px(0.0, b.min_us);
        let (_, by_med) = to_px(0.0, b.median_us);
        let (_, by_p99) = to_px(0.0, b.p99_us);
        let draw = |e: Result<(), DrawingAreaErrorKind<_>>| e.map_err(|e| err(e.to_string()));
        draw(root_area.draw(&PathElement::new(vec![(cx, by_max), (cx, by_q3)], BLACK)))?;
        draw(root_area.draw(&PathElement::new(vec![(cx, by_q1), (cx, by_min)], BLACK)))?;
        draw(root_area.draw(&PathElement::new(
            vec![(bx0 + 6, by_max), (bx1 - 6, by_max)],
            BLACK,
        )))?;
        draw(root_area.draw(&PathElement::new(
            vec![(bx0 + 6, by_min), (bx1 - 6, by_min)],
            BLACK,
        )))?;
        draw(root_area.draw(&Rectangle::new(
            [(bx0, by_q3), (bx1, by_q1)],
            color.mix(0.5).filled(),
        )))?;
        draw(root_area.draw(&Rectangle::new([(bx0, by_q3), (bx1, by_q1)], BLACK)))?;
        draw(root_area.draw(&PathElement::new(
            vec![(bx0, by_med), (bx1, by_med)],
            BLACK.stroke_width(2),
        )))?;
        draw(root_area.draw(&Cross::new((cx, by_p99), 4, RED)))?;
    }
    if let Some(d) = deadline_us {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-1, d), (n, d)],
                6,
                4,
                RED.stroke_width(1),
            ))
            .map_err(|e| err(e.to_string()))?
            .label(format!("deadline {d:.0} µs"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(scale: f64) -> BoxStats {
        BoxStats {
            min_us: 80.0 * scale,
            q1_us: 150.0 * scale,
            median_us: 170.0 * scale,
            q3_us: 190.0 * scale,
            p99_us: 300.0 * scale,
            max_us: 4454.0 * scale,
        }
    }

    #[test]
    fn draws_an_svg_with_every_label() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plots/latency.svg");
        let series = vec![
            ("NONE@none".to_string(), stats(1.0)),
            ("tailbound@buffered-writer".to_string(), stats(0.1)),
        ];
        latency_boxplot_svg(&path, "write() latency", &series, Some(5000.0)).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.contains("NONE@none"));
        assert!(svg.contains("tailbound@buffered-writer"));
        assert!(svg.contains("deadline 5000"));
        assert!(svg.contains("<rect"));
    }

    #[test]
    fn nothing_to_plot_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = latency_boxplot_svg(&dir.path().join("x.svg"), "t", &[], None).unwrap_err();
        assert!(e.to_string().contains("nothing to plot"));
    }
}
