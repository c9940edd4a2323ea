//! `--plot FILE.svg`: a failure at a glance. A headline with the verdict; busbw against message
//! size, one panel per collective, every measurement against the floor that applies to it (red
//! points and their shortfall where below) and the healthy reference for this GPU model and
//! count (nccl-tests, `config/anchors.toml`; a panel says so when none is shipped); then the pair
//! matrix as GPU x GPU heatmaps per node and a node x node heatmap, the culprit marked
//! ([`heatmap`]).

mod heatmap;

use crate::measure::rows::{PairRow, Row};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Deserialize;
use std::path::Path;

const ANCHORS: &str = include_str!("../../config/anchors.toml");
#[derive(Deserialize)]
struct Anchors {
    anchor: Vec<Anchor>,
}

#[derive(Deserialize)]
struct Anchor {
    /// The SKU table's key of the part the curve was measured on.
    sku: String,
    gpus: u32,
    collective: String,
    points: Vec<(u64, f64)>,
}

/// The reference curve for this collective on `gpus` GPUs of SKU `sku`, if one is shipped.
fn anchor(sku: Option<&str>, gpus: u32, collective: &str) -> Option<Vec<(u64, f64)>> {
    let sku = sku?;
    let a: Anchors = toml::from_str(ANCHORS).ok()?;
    a.anchor
        .into_iter()
        .find(|a| a.gpus == gpus && a.collective == collective && a.sku.eq_ignore_ascii_case(sku))
        .map(|a| a.points)
}

/// What a plot shows.
pub struct PlotInput<'a> {
    pub rows: &'a [Row],
    pub pairs: &'a [PairRow],
    pub gpu_name: &'a str,
    /// The SKU table's key of the GPU (its PCI device ID), for the reference curves.
    pub sku: Option<&'a str>,
    /// GPUs measured together (the collectives' rank count).
    pub gpus: u32,
    /// The verdict and its summary, the plot's first line.
    pub headline: &'a str,
    /// `floor(collective, gpus, bytes)`: the threshold that applies, if any.
    pub floor: &'a dyn Fn(&str, u32, u64) -> Option<f64>,
    pub outlier_fraction: f64,
}

/// Height of the headline band, pixels.
const HEADLINE: u32 = 44;
const PANEL: (u32, u32) = (560, 380);
const HEATMAP_H: u32 = 420;

/// Draws the plot into `path` (SVG).
pub fn draw(path: &Path, input: &PlotInput) -> Result<(), String> {
    let mut collectives: Vec<&str> = Vec::new();
    for r in input.rows {
        if !collectives.contains(&&*r.collective) {
            collectives.push(&r.collective);
        }
    }
    let matrices = heatmap::matrices(input.pairs, input.floor, input.outlier_fraction);
    if collectives.is_empty() && matrices.is_empty() {
        return Err("nothing was measured to plot".into());
    }
    let cols = collectives.len().clamp(1, 2) as u32;
    let nrows = collectives.len().div_ceil(2) as u32;
    let heat_cols = (matrices.len() as u32).clamp(1, 3);
    let heat_rows = (matrices.len() as u32).div_ceil(3);
    let width = (PANEL.0 * cols).max(460 * heat_cols).max(720);
    let height = HEADLINE + PANEL.1 * nrows + HEATMAP_H * heat_rows;
    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, rest) = root.split_vertically(HEADLINE);
    let failed = !input.headline.starts_with("PASS");
    top.draw(&Text::new(
        input.headline.chars().take(160).collect::<String>(),
        (10, 12),
        ("sans-serif", 20)
            .into_font()
            .color(if failed { &RED } else { &BLACK }),
    ))
    .map_err(|e| err(&e))?;
    let (curves, heat) = rest.split_vertically(PANEL.1 * nrows);
    if nrows > 0 {
        let panels = curves.split_evenly((nrows as usize, cols as usize));
        for (coll, panel) in collectives.iter().zip(panels.iter()) {
            collective_panel(panel, input, coll).map_err(|e| err(&e))?;
        }
    }
    if !matrices.is_empty() {
        let areas = heat.split_evenly((heat_rows as usize, heat_cols as usize));
        for (m, area) in matrices.iter().zip(areas.iter()) {
            heatmap::draw_matrix(area, m).map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))
}

/// What one collective's panel shows, worked out before drawing: its rows, the floors that apply,
/// the reference points in view and the axes' ranges.
struct PanelData<'a> {
    mine: Vec<&'a Row>,
    floors: Vec<(u64, f64)>,
    shown: Vec<(u64, f64)>,
    lo: u64,
    hi: u64,
    top: f64,
}

/// The rows, floors, visible reference and axis ranges for `coll` (pure, no drawing).
fn panel_data<'a>(input: &PlotInput<'a>, coll: &str) -> PanelData<'a> {
    let mine: Vec<&Row> = input.rows.iter().filter(|r| r.collective == coll).collect();
    let reference = anchor(input.sku, input.gpus, coll).unwrap_or_default();
    let floors: Vec<(u64, f64)> = mine
        .iter()
        .filter_map(|r| (input.floor)(coll, input.gpus, r.size).map(|f| (r.size, f)))
        .collect();
    let lo = mine.iter().map(|r| r.size).min().unwrap_or(1).max(1);
    let hi = mine.iter().map(|r| r.size).max().unwrap_or(1).max(lo * 2);
    let (lo, hi) = (lo / 2, hi.saturating_mul(2));
    // A reference point on each side of the measured sizes keeps the healthy curve visible even
    // for a single size.
    let shown: Vec<(u64, f64)> = reference
        .iter()
        .copied()
        .filter(|p| p.0 >= lo / 4 && p.0 <= hi.saturating_mul(4))
        .collect();
    let top = mine
        .iter()
        .flat_map(|r| [r.out_of_place.busbw, r.in_place.busbw])
        .chain(shown.iter().map(|p| p.1))
        .chain(floors.iter().map(|f| f.1))
        .fold(1.0, f64::max)
        * 1.15;
    let (lo, hi) = match (shown.first(), shown.last()) {
        (Some(a), Some(b)) => (lo.min(a.0), hi.max(b.0)),
        _ => (lo, hi),
    };
    PanelData {
        mine,
        floors,
        shown,
        lo,
        hi,
        top,
    }
}

/// One collective: measured busbw (both placements), the floors, the reference.
fn collective_panel<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    input: &PlotInput,
    coll: &str,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let d = panel_data(input, coll);
    let mut chart = ChartBuilder::on(panel)
        .caption(
            format!("{coll}, {} x {}", input.gpus, input.gpu_name),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(
            (d.lo..d.hi)
                .log_scale()
                .with_key_points(d.mine.iter().map(|r| r.size).collect::<Vec<_>>()),
            0f64..d.top,
        )?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|b| crate::model::size::human(*b))
        .draw()?;
    draw_reference(&mut chart, &d, input)?;
    draw_floors(&mut chart, &d)?;
    draw_measured(&mut chart, &d)?;
    mark_shortfalls(&mut chart, &d)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

/// The healthy nccl-tests curve, or a note that none is shipped, so a reader knows what good
/// looks like for this GPU model and count.
fn draw_reference<DB: DrawingBackend, CT: CoordTranslate<From = (u64, f64)>>(
    chart: &mut ChartContext<DB, CT>,
    d: &PanelData,
    input: &PlotInput,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if d.shown.is_empty() {
        let style = ("sans-serif", 13).into_font().color(&BLACK.mix(0.6));
        chart.plotting_area().draw(&Text::new(
            format!(
                "no healthy reference shipped for {} x {}",
                input.gpus, input.gpu_name
            ),
            (d.lo.saturating_mul(5) / 4, d.top * 0.95),
            style,
        ))?;
    } else {
        chart
            .draw_series(LineSeries::new(
                d.shown.clone(),
                ShapeStyle::from(&BLACK.mix(0.35)).stroke_width(2),
            ))?
            .label(format!(
                "healthy: nccl-tests, {} x {}",
                input.gpus, input.gpu_name
            ))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.35)));
    }
    Ok(())
}

/// A short red bar at each size's floor: the line a measurement must reach.
fn draw_floors<DB: DrawingBackend, CT: CoordTranslate<From = (u64, f64)>>(
    chart: &mut ChartContext<DB, CT>,
    d: &PanelData,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if !d.floors.is_empty() {
        chart
            .draw_series(d.floors.iter().map(|&(x, y)| {
                PathElement::new(vec![(x * 3 / 4, y), (x * 4 / 3, y)], RED.stroke_width(3))
            }))?
            .label("floor (FAIL below)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED));
    }
    Ok(())
}

/// The measured busbw, one line with points per placement (out-of-place, in-place).
fn draw_measured<DB: DrawingBackend, CT: CoordTranslate<From = (u64, f64)>>(
    chart: &mut ChartContext<DB, CT>,
    d: &PanelData,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    for (name, color, pick) in [("out-of-place", BLUE, true), ("in-place", GREEN, false)] {
        let pts: Vec<(u64, f64)> = d
            .mine
            .iter()
            .map(|r| {
                let p = if pick { &r.out_of_place } else { &r.in_place };
                (r.size, p.busbw)
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), &color))?
            .label(format!("measured {name}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    Ok(())
}

/// Each size whose worse placement is below its floor, marked with its shortfall.
fn mark_shortfalls<DB: DrawingBackend, CT: CoordTranslate<From = (u64, f64)>>(
    chart: &mut ChartContext<DB, CT>,
    d: &PanelData,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    // Below the floor: a large red point and the shortfall, so the failure is what one sees.
    for r in &d.mine {
        let Some(&(_, f)) = d.floors.iter().find(|(s, _)| *s == r.size) else {
            continue;
        };
        let b = r.out_of_place.busbw.min(r.in_place.busbw);
        if b < f {
            chart.draw_series([Circle::new((r.size, b), 7, RED.filled())])?;
            chart.plotting_area().draw(&Text::new(
                format!("{b:.1} < {f:.1} GB/s ({:.0}%)", 100.0 * b / f.max(1e-9)),
                (r.size, b + d.top * 0.04),
                ("sans-serif", 14).into_font().color(&RED),
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::rows::{Ends, Placement};

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
            let a = anchor(Some("H200 SXM"), 4, c).unwrap_or_default();
            assert!(a.len() >= 5, "{c}");
        }
        assert!(anchor(Some("H200 SXM"), 8, "all_reduce").is_none());
        assert!(anchor(Some("H200 NVL"), 4, "all_reduce").is_none());
        assert!(anchor(None, 4, "all_reduce").is_none());
    }

    fn row(collective: &'static str, size: u64, busbw: f64) -> Row {
        let p = |busbw| Placement {
            time_us: 1.0,
            algbw: 1.0,
            busbw,
            wrong: Some(0),
            first_busbw: None,
        };
        Row {
            expected: None,
            collective: collective.into(),
            size,
            count: size / 4,
            dtype: "float".into(),
            redop: "sum".into(),
            root: -1,
            out_of_place: p(busbw),
            in_place: p(busbw + 1.0),
        }
    }

    fn pair(ends: Ends, busbw: f64) -> PairRow {
        PairRow {
            ends,
            bytes: 256 << 20,
            busbw,
            ..PairRow::default()
        }
    }

    fn gpus(node: &str, a: u32, b: u32, busbw: f64) -> PairRow {
        let node = node.into();
        pair(Ends::Gpus { node, a, b }, busbw)
    }

    /// Renders the SVG to PNG (system fonts) under target/plot-test/, for a person to look at
    /// and for the pixel checks; returns the pixels (RGBA) and the width.
    fn render(svg: &str, name: &str) -> (Vec<u8>, u32) {
        let mut opt = resvg::usvg::Options::default();
        opt.fontdb_mut().load_system_fonts();
        // fontdb's sans-serif is Arial; Debian ships DejaVu.
        opt.fontdb_mut().set_sans_serif_family("DejaVu Sans");
        let tree = resvg::usvg::Tree::from_str(svg, &opt).expect("valid SVG");
        let size = tree.size().to_int_size();
        let mut pixmap =
            resvg::tiny_skia::Pixmap::new(size.width(), size.height()).expect("pixmap");
        resvg::render(
            &tree,
            resvg::tiny_skia::Transform::default(),
            &mut pixmap.as_mut(),
        );
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plot-test");
        std::fs::create_dir_all(&dir).expect("mkdir");
        pixmap.save_png(dir.join(name)).expect("png");
        (pixmap.data().to_vec(), size.width())
    }

    /// Strong red pixels (the failure marks) in rows y0..y1 of the image.
    fn red_pixels(px: &[u8], width: u32, y0: u32, y1: u32) -> usize {
        px.chunks(4)
            .enumerate()
            .filter(|(i, p)| {
                let y = *i as u32 / width;
                y >= y0 && y < y1 && p[0] > 200 && p[1] < 60 && p[2] < 60
            })
            .count()
    }

    /// Regression: on 2 x H200 with NVLink P2P off the plot showed one point on an axis
    /// to 30 GB/s, no floor, no reference, no pair matrix.
    #[test]
    fn a_failure_shows_at_a_glance_floor_reference_note_and_the_culprit_pair() {
        let rows = vec![row("all_reduce", 256 << 20, 27.6)];
        let pairs = vec![gpus("n1", 0, 1, 24.0)];
        let floor = |c: &str, g: u32, _b: u64| match (c, g) {
            ("all_reduce", 2) => Some(300.0),
            ("sendrecv", 2) => Some(150.0),
            _ => None,
        };
        let input = PlotInput {
            rows: &rows,
            pairs: &pairs,
            gpu_name: "NVIDIA H200",
            sku: Some("H200 SXM"),
            gpus: 2,
            headline: "FAIL: all_reduce 256 MiB busbw 27.6 < 300.0 GB/s (9% of the floor)",
            floor: &floor,
            outlier_fraction: 0.85,
        };
        let path = std::env::temp_dir().join(format!("nccl-check-plot-{}.svg", std::process::id()));
        draw(&path, &input).expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("svg");
        let _ = std::fs::remove_file(&path);
        for text in [
            "FAIL: all_reduce 256 MiB busbw 27.6",
            "floor (FAIL below)",
            "27.6 &lt; 300.0 GB/s (9%)",
            "no healthy reference shipped for 2 x NVIDIA H200",
            "GPU pairs on n1 (sendrecv)",
            "floor 150.0 GB/s",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        let (px, w) = render(&svg, "fail-2xH200.png");
        let h = px.len() as u32 / 4 / w;
        assert!(
            red_pixels(&px, w, HEADLINE, HEADLINE + PANEL.1) > 100,
            "no red failure mark"
        );
        assert!(
            red_pixels(&px, w, HEADLINE + PANEL.1, h) > 100,
            "the culprit pair is not red"
        );
    }

    #[test]
    fn a_healthy_run_shows_the_reference_and_a_multi_node_matrix_names_the_slow_gpu_and_node() {
        let sizes = [32u64 << 20, 128 << 20, 512 << 20];
        let mut rows = Vec::new();
        for c in ["all_reduce", "sendrecv"] {
            for &s in &sizes {
                rows.push(row(c, s, 320.0));
            }
        }
        let mut pairs = Vec::new();
        for node in ["n1", "n2"] {
            for i in 0..4 {
                for j in i + 1..4 {
                    let slow = node == "n2" && (i == 3 || j == 3);
                    let b = if slow { 40.0 } else { 140.0 };
                    pairs.push(gpus(node, i, j, b));
                }
            }
        }
        for (a, b, bw) in [("n1", "n2", 45.0), ("n1", "n3", 45.0), ("n2", "n3", 12.0)] {
            pairs.push(pair(Ends::Nodes(a.into(), b.into()), bw));
        }
        let floor =
            |c: &str, _g: u32, b: u64| (c == "all_reduce" && b >= 128 << 20).then_some(290.0);
        let input = PlotInput {
            rows: &rows,
            pairs: &pairs,
            gpu_name: "NVIDIA H200",
            sku: Some("H200 SXM"),
            gpus: 4,
            headline: "PASS: 4 x NVIDIA H200 on 1 node(s)",
            floor: &floor,
            outlier_fraction: 0.85,
        };
        let path =
            std::env::temp_dir().join(format!("nccl-check-plot2-{}.svg", std::process::id()));
        draw(&path, &input).expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("svg");
        let _ = std::fs::remove_file(&path);
        for text in [
            "healthy: nccl-tests, 4 x NVIDIA H200",
            "GPU pairs on n2 (sendrecv)",
            "GPU3 !",
            "node pairs",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert!(!svg.contains("no healthy reference"), "H200 x4 has one");
        render(&svg, "pairs-4xH200-3nodes.png");
    }
}
