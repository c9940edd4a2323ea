//! The pair matrix as heatmaps: GPU x GPU for each node, node x node across nodes. A cell's
//! colour is its busbw against the level it is judged by (the sendrecv floor for two GPUs when
//! one applies, else the median of its matrix); a cell below that floor or below the outlier
//! fraction of the median is a culprit: red, crossed, its value printed, and the GPU or node
//! that is part of the most culprit cells gets a red label.

use crate::measure::rows::{EndsWire, PairRow};
use crate::model::collectives::{Collective, SendRecv};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One matrix to draw.
pub struct Matrix {
    pub title: String,
    /// Row and column labels (GPU2, or node names), in order.
    pub labels: Vec<String>,
    /// (i, j, busbw) for each measured pair, i < j.
    pub cells: Vec<(usize, usize, f64)>,
    /// The level a cell is judged by, and what it is ("floor 150.0" or "median 140.2").
    pub level: f64,
    pub level_name: String,
    pub outlier_fraction: f64,
}

impl Matrix {
    fn bad(&self, busbw: f64) -> bool {
        busbw < self.level * self.outlier_fraction.min(1.0) || busbw < self.floor_part()
    }

    /// The floor itself when the level is one (cells below a floor are culprits outright).
    fn floor_part(&self) -> f64 {
        if self.level_name.starts_with("floor") {
            self.level
        } else {
            0.0
        }
    }

    /// Index of the label in the most culprit cells, if any cell is one.
    pub fn culprit(&self) -> Option<usize> {
        let mut count = vec![0usize; self.labels.len()];
        for &(i, j, b) in &self.cells {
            if self.bad(b) {
                count[i] += 1;
                count[j] += 1;
            }
        }
        let max = *count.iter().max()?;
        // A tie (the two ends of one slow pair) names no one: the cell itself is marked.
        let unique = count.iter().filter(|&&c| c == max).count() == 1;
        (max > 0 && unique)
            .then(|| count.iter().position(|&c| c == max))
            .flatten()
    }
}

/// The matrices of a report's pairs: one per node with GPU pairs, then the node matrix.
pub fn matrices(
    pairs: &[PairRow],
    floor: &dyn Fn(&str, u32, u64) -> Option<f64>,
    outlier_fraction: f64,
) -> Vec<Matrix> {
    let mut out = Vec::new();
    let mut nodes: Vec<&str> = Vec::new();
    for (node, ..) in pairs.iter().filter_map(PairRow::gpus) {
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    for node in nodes {
        let mine: Vec<&PairRow> = pairs
            .iter()
            .filter(|p| p.gpus().is_some_and(|g| g.0 == node))
            .collect();
        let bytes = mine.first().map_or(0, |p| p.bytes);
        let title = if node.is_empty() {
            "GPU pairs (sendrecv)".to_string()
        } else {
            format!("GPU pairs on {node} (sendrecv)")
        };
        out.push(matrix(
            title,
            &mine,
            floor(SendRecv.name(), 2, bytes),
            outlier_fraction,
        ));
    }
    let node_pairs: Vec<&PairRow> = pairs.iter().filter(|p| p.nodes().is_some()).collect();
    if !node_pairs.is_empty() {
        out.push(matrix(
            "node pairs (sendrecv, all GPUs at once)".into(),
            &node_pairs,
            None,
            outlier_fraction,
        ));
    }
    out
}

fn matrix(title: String, pairs: &[&PairRow], floor: Option<f64>, fraction: f64) -> Matrix {
    // Labelled as the report names the ends: `GPU2`, or the node.
    let ends: Vec<EndsWire> = pairs.iter().map(|p| p.ends.clone().into()).collect();
    let mut labels: Vec<String> = Vec::new();
    for l in ends.iter().flat_map(|e| [&e.a, &e.b]) {
        if !labels.contains(l) {
            labels.push(l.clone());
        }
    }
    // GPU2 before GPU10: by the number in the label, then by name.
    labels.sort_by_key(|l| {
        let digits: String = l.chars().filter(|c| c.is_ascii_digit()).collect();
        (digits.parse::<u64>().unwrap_or(u64::MAX), l.clone())
    });
    let at = |l: &String| labels.iter().position(|x| x == l).unwrap_or(0);
    let cells: Vec<(usize, usize, f64)> = (pairs.iter().zip(&ends))
        .map(|(p, e)| {
            let (i, j) = (at(&e.a), at(&e.b));
            (i.min(j), i.max(j), p.busbw)
        })
        .collect();
    let mut values: Vec<f64> = cells.iter().map(|c| c.2).collect();
    values.sort_by(f64::total_cmp);
    let median = values.get(values.len() / 2).copied().unwrap_or(0.0);
    let (level, level_name) = match floor {
        Some(f) => (f, format!("floor {f:.1} GB/s")),
        None => (median, format!("median {median:.1} GB/s")),
    };
    Matrix {
        title,
        labels,
        cells,
        level,
        level_name,
        outlier_fraction: fraction,
    }
}

/// Draws one matrix into `area`.
pub fn draw_matrix<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    m: &Matrix,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let n = m.labels.len().max(1) as i32;
    let left = 70;
    let top = 56;
    let side = ((w - left - 12).min(h - top - 30) / n).clamp(8, 80);
    let culprit = m.culprit();
    area.draw(&Text::new(
        m.title.clone(),
        (8, 6),
        ("sans-serif", 17).into_font().color(&BLACK),
    ))?;
    area.draw(&Text::new(
        format!(
            "colour: busbw / {}; crossed red: below {}",
            m.level_name,
            if m.floor_part() > 0.0 {
                "the floor".to_string()
            } else {
                format!("{:.0}% of the median", m.outlier_fraction * 100.0)
            }
        ),
        (8, 28),
        ("sans-serif", 12).into_font().color(&BLACK.mix(0.7)),
    ))?;
    for (k, label) in m.labels.iter().enumerate() {
        let (size, color, text) = if culprit == Some(k) {
            (14, &RED, format!("{label} !"))
        } else {
            (12, &BLACK, label.clone())
        };
        let style = ("sans-serif", size).into_font().color(color);
        let k = k as i32;
        area.draw(&Text::new(
            text.clone(),
            (4, top + k * side + side / 2 - 6),
            style.clone(),
        ))?;
        area.draw(&Text::new(
            short(&text),
            (left + k * side + 2, top - 16),
            style,
        ))?;
    }
    for &(i, j, busbw) in &m.cells {
        for (r, c) in [(i, j), (j, i)] {
            let (x0, y0) = (left + c as i32 * side, top + r as i32 * side);
            let rect = [(x0, y0), (x0 + side - 2, y0 + side - 2)];
            let ratio = if m.level > 0.0 { busbw / m.level } else { 1.0 };
            area.draw(&Rectangle::new(rect, colour(ratio).filled()))?;
            if m.bad(busbw) {
                area.draw(&Rectangle::new(rect, RED.stroke_width(3)))?;
                area.draw(&PathElement::new(
                    vec![rect[0], rect[1]],
                    RED.stroke_width(2),
                ))?;
            }
            if side >= 34 {
                area.draw(&Text::new(
                    format!("{busbw:.0}"),
                    (x0 + 4, y0 + side / 2 - 6),
                    ("sans-serif", 11).into_font().color(&BLACK),
                ))?;
            }
        }
    }
    Ok(())
}

/// A column label short enough for its cell.
fn short(label: &str) -> String {
    label.chars().take(8).collect()
}

/// Green at or above the level, through yellow, to red at half of it or below.
fn colour(ratio: f64) -> RGBColor {
    let t = ((ratio - 0.5) / 0.5).clamp(0.0, 1.0);
    let (r, g) = if t > 0.5 {
        (((1.0 - t) * 2.0 * 230.0) as u8, 200)
    } else {
        (230, (t * 2.0 * 200.0) as u8)
    };
    RGBColor(r, g, 90)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(node: &str, a: u32, b: u32, busbw: f64) -> PairRow {
        PairRow {
            ends: crate::measure::rows::Ends::Gpus {
                node: node.into(),
                a,
                b,
            },
            bytes: 256 << 20,
            busbw,
            ..PairRow::default()
        }
    }

    #[test]
    fn the_gpu_in_the_slow_pairs_is_the_culprit() {
        let mut pairs = Vec::new();
        for i in 0..4 {
            for j in i + 1..4 {
                let slow = i == 2 || j == 2;
                pairs.push(pair("n1", i, j, if slow { 20.0 } else { 140.0 }));
            }
        }
        let m = matrices(&pairs, &|_, _, _| None, 0.85);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].labels, ["GPU0", "GPU1", "GPU2", "GPU3"]);
        assert_eq!(m[0].culprit(), Some(2));
        // With a floor, cells below it are culprits even when all are equally slow.
        let even: Vec<PairRow> = (1..4).map(|j| pair("n1", 0, j, 20.0)).collect();
        let m = matrices(
            &even,
            &|c, g, _| (c == "sendrecv" && g == 2).then_some(100.0),
            0.85,
        );
        assert_eq!(m[0].level_name, "floor 100.0 GB/s");
        assert_eq!(m[0].culprit(), Some(0));
        let one = vec![pair("n1", 0, 1, 20.0)];
        assert_eq!(
            matrices(&one, &|_, _, _| Some(100.0), 0.85)[0].culprit(),
            None
        );
        let healthy: Vec<PairRow> = (1..4).map(|j| pair("n1", 0, j, 140.0)).collect();
        assert_eq!(matrices(&healthy, &|_, _, _| None, 0.85)[0].culprit(), None);
    }
}
