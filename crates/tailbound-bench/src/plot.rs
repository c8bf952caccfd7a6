//! SVG plots of experiment results (plotters, SVG backend): latency box plots and grouped bars.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::fmt_us;
use crate::stats::BoxStats;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("plotting {path}: {message}")]
pub struct PlotError {
    pub path: String,
    pub message: String,
}

/// Horizontal room per box; 30 series make a 1,500 px wide figure.
const BOX_PITCH_PX: u32 = 46;
const PLOT_HEIGHT_PX: u32 = 480;
const LABEL_FONT_PX: u32 = 14;
/// Labels longer than this are cut (with `…`) so the label area stays a sensible height.
const LABEL_CHARS_MAX: usize = 64;
/// Rough width of one label character at `LABEL_FONT_PX`, to size the label area.
const LABEL_CHAR_PX: u32 = 7;
/// Half the width of a box, in x units (one unit per series).
const BOX_HALF: f64 = 0.3;

/// A box plot of latency distributions on a log scale in µs, like the paper's Fig. 4: one box per
/// series (q1–q3, a median line), whiskers from min to max, a red cross at p99, each box
/// labelled below the axis (rotated; labels over 64 characters are cut). `deadline_us` draws a
/// dashed red horizontal line there (e.g. the period). Values at or below zero (an empty
/// histogram) are drawn at the bottom of the axis. Creates the parent directories of `path`.
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
        std::fs::create_dir_all(parent).map_err(|e| err(format!("creating {parent:?}: {e}")))?;
    }
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let values = || {
        series
            .iter()
            .flat_map(|(_, b)| [b.min_us, b.max_us])
            .chain(deadline_us)
            .filter(|&v| positive(v))
    };
    let lo = values().fold(f64::INFINITY, f64::min);
    let hi = values().fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() {
        (lo, hi)
    } else {
        (1.0, 10.0)
    };
    let y_min = lo / 2.0;
    let y_max = hi * 2.0;
    // Anything not drawable on a log axis sits at its bottom.
    let y = |v: f64| {
        if positive(v) {
            v.clamp(y_min, y_max)
        } else {
            y_min
        }
    };

    let labels: Vec<String> = series.iter().map(|(l, _)| cut_label(l)).collect();
    let label_chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u32;
    let label_area_px = 24 + LABEL_CHAR_PX * label_chars;
    let n = series.len();
    let width = (140 + BOX_PITCH_PX * n as u32).max(640);
    let height = PLOT_HEIGHT_PX + label_area_px;

    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    let draw = |e: Result<(), DrawingAreaErrorKind<_>>| e.map_err(|e| err(e.to_string()));
    draw(root.fill(&WHITE))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(label_area_px)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), (y_min..y_max).log_scale())
        .map_err(|e| err(e.to_string()))?;
    let y_label = |v: &f64| fmt_us(*v);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&y_label)
        .y_desc("latency (µs, log scale)")
        .draw()
        .map_err(|e| err(e.to_string()))?;

    for (i, (_, b)) in series.iter().enumerate() {
        let x = i as f64;
        let (x0, x1) = (x - BOX_HALF, x + BOX_HALF);
        let (c0, c1) = (x - BOX_HALF / 2.0, x + BOX_HALF / 2.0);
        let color = Palette99::pick(i).to_rgba();
        let elements: Vec<DynElement<'static, SVGBackend<'_>, (f64, f64)>> = vec![
            // Whiskers and their caps.
            PathElement::new(vec![(x, y(b.max_us)), (x, y(b.q3_us))], BLACK).into_dyn(),
            PathElement::new(vec![(x, y(b.q1_us)), (x, y(b.min_us))], BLACK).into_dyn(),
            PathElement::new(vec![(c0, y(b.max_us)), (c1, y(b.max_us))], BLACK).into_dyn(),
            PathElement::new(vec![(c0, y(b.min_us)), (c1, y(b.min_us))], BLACK).into_dyn(),
            // The box and its median.
            Rectangle::new(
                [(x0, y(b.q3_us)), (x1, y(b.q1_us))],
                color.mix(0.5).filled(),
            )
            .into_dyn(),
            Rectangle::new([(x0, y(b.q3_us)), (x1, y(b.q1_us))], BLACK).into_dyn(),
            PathElement::new(
                vec![(x0, y(b.median_us)), (x1, y(b.median_us))],
                BLACK.stroke_width(2),
            )
            .into_dyn(),
            Cross::new((x, y(b.p99_us)), 4, RED.stroke_width(2)).into_dyn(),
        ];
        chart
            .draw_series(elements)
            .map_err(|e| err(e.to_string()))?;
    }

    // Labels hang below the axis, rotated to read top to bottom, starting at their box.
    let label_style = ("sans-serif", LABEL_FONT_PX)
        .into_font()
        .transform(FontTransform::Rotate90)
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, label) in labels.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64, y_min));
        draw(root.draw(&Text::new(label.clone(), (px, py + 8), label_style.clone())))?;
    }

    if let Some(d) = deadline_us.filter(|&d| positive(d)) {
        let d = y(d);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-0.5, d), (n as f64 - 0.5, d)],
                6,
                4,
                RED.stroke_width(1),
            ))
            .map_err(|e| err(e.to_string()))?;
        let (px, py) = chart.backend_coord(&(-0.5, d));
        let note = format!("deadline {} µs", fmt_us(d));
        let style = ("sans-serif", LABEL_FONT_PX).into_font().color(&RED);
        draw(root.draw(&Text::new(note, (px + 4, py - 14), style)))?;
    }
    let key = "box: q1–q3, line: median, whiskers: min–max, ×: p99";
    let (kx, ky) = chart.backend_coord(&(n as f64 - 0.5, y_max));
    let key_style = ("sans-serif", LABEL_FONT_PX)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Top));
    draw(root.draw(&Text::new(key, (kx - 4, ky + 4), key_style)))?;
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// Horizontal room per bar of a grouped bar chart.
const BAR_PITCH_PX: u32 = 18;
/// Share of a group's width its bars fill; the rest separates groups.
const BAR_GROUP_FILL: f64 = 0.85;
const VALUE_FONT_PX: u32 = 10;

/// A grouped bar chart on a linear axis from zero, like the paper's Fig. 6–7: one group per entry of
/// `groups` (labelled below the axis), and in each group one bar per series, coloured by series and
/// named in a key. `series[j].1[i]` is series `j`'s value in group `i`; a missing, negative or
/// non-finite value draws no bar. Creates the parent directories of `path`.
pub fn grouped_bar_svg(
    path: &Path,
    title: &str,
    y_desc: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
) -> Result<(), PlotError> {
    let err = |message: String| PlotError {
        path: path.display().to_string(),
        message,
    };
    if groups.is_empty() || series.is_empty() {
        return Err(err("nothing to plot".into()));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| err(format!("creating {parent:?}: {e}")))?;
    }
    let drawable = |v: f64| v.is_finite() && v > 0.0;
    let hi = series
        .iter()
        .flat_map(|(_, values)| values.iter().copied())
        .filter(|&v| drawable(v))
        .fold(0.0, f64::max);
    // Head room for the key and the values written above the bars.
    let y_max = if hi > 0.0 { hi * 1.3 } else { 1.0 };
    let n_groups = groups.len();
    let n_series = series.len();
    let width = (160 + BAR_PITCH_PX * (n_groups * (n_series + 1)) as u32).max(720);
    let labels: Vec<String> = groups.iter().map(|g| cut_label(g)).collect();
    let root = SVGBackend::new(path, (width, PLOT_HEIGHT_PX + 60)).into_drawing_area();
    let draw = |e: Result<(), DrawingAreaErrorKind<_>>| e.map_err(|e| err(e.to_string()));
    draw(root.fill(&WHITE))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..(n_groups as f64 - 0.5), 0.0..y_max)
        .map_err(|e| err(e.to_string()))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let bar_width = BAR_GROUP_FILL / n_series as f64;
    for (j, (name, values)) in series.iter().enumerate() {
        let color = Palette99::pick(j).to_rgba();
        let bars: Vec<Rectangle<(f64, f64)>> = values
            .iter()
            .take(n_groups)
            .enumerate()
            .filter(|(_, v)| drawable(**v))
            .map(|(i, &v)| {
                let x0 = i as f64 - BAR_GROUP_FILL / 2.0 + j as f64 * bar_width;
                Rectangle::new([(x0, 0.0), (x0 + bar_width, v.min(y_max))], color.filled())
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(e.to_string()))?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        // Each bar's value above it, reading upwards, so short bars stay readable.
        let value_style = ("sans-serif", VALUE_FONT_PX)
            .into_font()
            .transform(FontTransform::Rotate270)
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        for (i, &v) in values.iter().take(n_groups).enumerate() {
            if !drawable(v) {
                continue;
            }
            let x = i as f64 - BAR_GROUP_FILL / 2.0 + (j as f64 + 0.5) * bar_width;
            let (px, py) = chart.backend_coord(&(x, v.min(y_max)));
            let text = format!("{v:.1}");
            draw(root.draw(&Text::new(text, (px, py - 4), value_style.clone())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", LABEL_FONT_PX))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    let label_style = ("sans-serif", LABEL_FONT_PX)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (i, label) in labels.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64, 0.0));
        draw(root.draw(&Text::new(label.clone(), (px, py + 8), label_style.clone())))?;
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// `label`, cut to [`LABEL_CHARS_MAX`] characters with a trailing `…` when longer.
fn cut_label(label: &str) -> String {
    if label.chars().count() <= LABEL_CHARS_MAX {
        return label.to_string();
    }
    let mut cut: String = label.chars().take(LABEL_CHARS_MAX - 1).collect();
    cut.push('…');
    cut
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
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("write() latency"));
        assert!(svg.contains("NONE@none"));
        assert!(svg.contains("tailbound@buffered-writer"));
        assert!(svg.contains("deadline 5,000 µs"));
        assert!(svg.contains("<rect"));
    }

    #[test]
    fn thirty_long_labels_all_appear_and_widen_the_figure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("thirty.svg");
        let series: Vec<_> = (0..30)
            .map(|i| {
                let label = format!("tailbound-decoupled-recycle@buffered-writer #{i}");
                (label, stats(1.0 + f64::from(i)))
            })
            .collect();
        latency_boxplot_svg(&path, "write() latency", &series, None).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for (label, _) in &series {
            assert!(svg.contains(&format!("\n{label}\n")), "{label}");
        }
        assert!(svg.contains(r#"width="1520""#), "{}", &svg[..200]);
        assert!(!svg.contains("deadline"));
    }

    #[test]
    fn empty_and_odd_values_still_draw_and_long_labels_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd.svg");
        let zero = BoxStats {
            min_us: 0.0,
            q1_us: 0.0,
            median_us: 0.0,
            q3_us: 0.0,
            p99_us: f64::NAN,
            max_us: 0.0,
        };
        let long = "x".repeat(100);
        let series = vec![("empty".to_string(), zero), (long.clone(), zero)];
        latency_boxplot_svg(&path, "t", &series, Some(0.0)).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("empty"));
        assert!(!svg.contains(&long));
        assert!(svg.contains(&format!("{}…", "x".repeat(LABEL_CHARS_MAX - 1))));
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }

    #[test]
    fn grouped_bars_draw_every_group_and_key_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plots/bars.svg");
        let groups: Vec<String> = vec!["write 4 KiB".into(), "rewrite 4 KiB".into()];
        let series = vec![
            ("ext4".to_string(), vec![12.0, 10.0]),
            ("tbfs relaxed".to_string(), vec![30.0, f64::NAN]),
            ("tbfs strict".to_string(), vec![-1.0]),
        ];
        grouped_bar_svg(&path, "O_SYNC throughput", "MB/s", &groups, &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in [
            "O_SYNC throughput",
            "write 4 KiB",
            "rewrite 4 KiB",
            "ext4",
            "tbfs strict",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        let e = grouped_bar_svg(&path, "t", "y", &[], &series).unwrap_err();
        assert!(e.to_string().contains("nothing to plot"));
    }

    #[test]
    fn nothing_to_plot_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = latency_boxplot_svg(&dir.path().join("x.svg"), "t", &[], None).unwrap_err();
        assert!(e.to_string().contains("nothing to plot"));
    }
}
