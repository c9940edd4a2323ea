//! `--plot FILE.svg`: busbw against message size, one panel per collective, with the thresholds
//! that apply and the reference curve (nccl-tests on the same GPU model and count, from
//! `config/anchors.toml`), for people who would rather look than read.

use crate::report::Row;
use plotters::prelude::*;
use serde::Deserialize;
use std::path::Path;

const ANCHORS: &str = include_str!("../config/anchors.toml");

#[derive(Deserialize)]
struct Anchors {
    anchor: Vec<Anchor>,
}

#[derive(Deserialize)]
struct Anchor {
    gpu: String,
    gpus: u32,
    collective: String,
    points: Vec<(u64, f64)>,
}

/// The reference curve for this collective on `gpus` x `gpu_name`, if one is shipped.
fn anchor(gpu_name: &str, gpus: u32, collective: &str) -> Option<Vec<(u64, f64)>> {
    let a: Anchors = toml::from_str(ANCHORS).ok()?;
    a.anchor
        .into_iter()
        .find(|a| {
            a.gpus == gpus
                && a.collective == collective
                && gpu_name
                    .to_ascii_lowercase()
                    .contains(&a.gpu.to_ascii_lowercase())
        })
        .map(|a| a.points)
}

/// Draws the rows of every collective into `path`. `floor(collective, bytes)` gives the
/// threshold that applied to a row, if any.
pub fn draw(
    path: &Path,
    rows: &[Row],
    gpu_name: &str,
    gpus: u32,
    floor: &dyn Fn(&str, u64) -> Option<f64>,
) -> Result<(), String> {
    let mut collectives: Vec<&str> = Vec::new();
    for r in rows {
        if !collectives.contains(&r.collective) {
            collectives.push(r.collective);
        }
    }
    if collectives.is_empty() {
        return Err("no collective rows to plot (a pair-matrix-only plan?)".into());
    }
    let cols = collectives.len().min(2);
    let nrows = collectives.len().div_ceil(cols);
    let root = SVGBackend::new(path, (560 * cols as u32, 380 * nrows as u32)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((nrows, cols));
    for (coll, panel) in collectives.iter().zip(panels.iter()) {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.collective == *coll).collect();
        let reference = anchor(gpu_name, gpus, coll).unwrap_or_default();
        let floors: Vec<(u64, f64)> = mine
            .iter()
            .filter_map(|r| floor(coll, r.size).map(|f| (r.size, f)))
            .collect();
        let lo = mine.iter().map(|r| r.size).min().unwrap_or(1).max(1);
        let hi = mine.iter().map(|r| r.size).max().unwrap_or(1).max(lo * 2);
        let (lo, hi) = (lo / 2, hi * 2);
        let top = mine
            .iter()
            .flat_map(|r| [r.out_of_place.busbw, r.in_place.busbw])
            .chain(
                reference
                    .iter()
                    .filter(|p| p.0 >= lo && p.0 <= hi)
                    .map(|p| p.1),
            )
            .chain(floors.iter().map(|f| f.1))
            .fold(1.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{coll}, {gpus} x {gpu_name}"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(
                (lo..hi)
                    .log_scale()
                    .with_key_points(mine.iter().map(|r| r.size).collect::<Vec<_>>()),
                0f64..top,
            )
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes)")
            .y_desc("busbw (GB/s)")
            .x_label_formatter(&|b| crate::size::human(*b))
            .draw()
            .map_err(|e| err(&e))?;
        if !reference.is_empty() {
            let pts: Vec<(u64, f64)> = reference
                .iter()
                .copied()
                .filter(|p| p.0 >= lo && p.0 <= hi)
                .collect();
            chart
                .draw_series(LineSeries::new(
                    pts,
                    ShapeStyle::from(&BLACK.mix(0.35)).stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label("nccl-tests reference (same GPUs)")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.35)));
        }
        for (name, color, pick) in [("out-of-place", BLUE, true), ("in-place", GREEN, false)] {
            let pts: Vec<(u64, f64)> = mine
                .iter()
                .map(|r| {
                    let p = if pick { &r.out_of_place } else { &r.in_place };
                    (r.size, p.busbw)
                })
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), &color))
                .map_err(|e| err(&e))?
                .label(format!("nccl-check {name}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
        if !floors.is_empty() {
            chart
                .draw_series(floors.iter().map(|&(x, y)| {
                    PathElement::new(vec![(x * 3 / 4, y), (x * 4 / 3, y)], RED.stroke_width(3))
                }))
                .map_err(|e| err(&e))?
                .label("threshold (FAIL below)")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Placement;

    #[test]
    fn the_shipped_anchors_parse_and_cover_h200x4() {
        for c in [
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "broadcast",
            "alltoall",
            "sendrecv",
        ] {
            let a = anchor("NVIDIA H200", 4, c).unwrap_or_default();
            assert!(a.len() >= 5, "{c}");
        }
        assert!(anchor("NVIDIA H200", 8, "all_reduce").is_none());
    }

    #[test]
    fn draws_an_svg_with_thresholds_and_the_reference() {
        let p = |busbw| Placement {
            time_us: 1.0,
            algbw: 1.0,
            busbw,
            wrong: Some(0),
            first_busbw: None,
        };
        let rows: Vec<Row> = [32u64 << 20, 64 << 20, 128 << 20]
            .iter()
            .map(|&size| Row {
                collective: "all_reduce",
                size,
                count: size / 4,
                dtype: "float",
                redop: "sum",
                root: -1,
                out_of_place: p(300.0),
                in_place: p(301.0),
            })
            .collect();
        let path = std::env::temp_dir().join(format!("nccl-check-plot-{}.svg", std::process::id()));
        draw(&path, &rows, "NVIDIA H200", 4, &|_, b| {
            (b == 128 << 20).then_some(290.0)
        })
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        for text in [
            "all_reduce, 4 x NVIDIA H200",
            "threshold (FAIL below)",
            "nccl-tests reference",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
    }
}
