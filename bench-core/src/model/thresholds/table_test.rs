//! The table test: every built-in rule against every size 8 B..8 GiB and the
//! committed healthy sweeps (`bench-core/tests/data/sweeps/`, provenance in its README). A rule
//! either has a committed sweep of its own GPU model, GPU count and collective, and then every
//! measurement inside its range lies at or above its floor, or its source measured one size
//! elsewhere (`NO_SWEEP`), and then its range may only extend from that size as far as the
//! committed sweeps show busbw to be flat or rising (`extension_is_safe`).

use super::*;
use crate::config::worker::WorkerConfig;

const G: u64 = 1 << 30;
const M: u64 = 1 << 20;

/// One nccl-tests output row: size, and the lower of out-of-place and in-place busbw.
#[derive(Debug, Clone, Copy)]
struct Row {
    bytes: u64,
    busbw: f64,
}

/// `(collective, rows)` for every `*_perf` section of an nccl-tests output.
fn parse_nccl_tests(text: &str) -> Vec<(String, Vec<Row>)> {
    let mut out: Vec<(String, Vec<Row>)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.split("Collective test starting: ").nth(1) {
            let name = rest.trim().trim_end_matches("_perf").to_string();
            out.push((name, Vec::new()));
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        // size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
        if f.len() < 13 {
            continue;
        }
        let (Ok(bytes), Ok(oop), Ok(ip)) =
            (f[0].parse(), f[7].parse::<f64>(), f[11].parse::<f64>())
        else {
            continue;
        };
        if let Some((_, rows)) = out.last_mut() {
            rows.push(Row {
                bytes,
                busbw: oop.min(ip),
            });
        }
    }
    out
}

/// Every committed 4x H200 measurement, by collective.
fn h200x4() -> Vec<(String, Vec<Row>)> {
    let files = [
        include_str!("../../../tests/data/sweeps/h200x4-8B-8G-x4.txt"),
        include_str!("../../../tests/data/sweeps/h200x4-32M-8G-x2-all_reduce.txt"),
        include_str!("../../../tests/data/sweeps/h200x4-32M-8G-x2-all_gather.txt"),
        include_str!("../../../tests/data/sweeps/h200x4-32M-8G-x2-reduce_scatter.txt"),
        include_str!("../../../tests/data/sweeps/h200x4-32M-8G-x2-broadcast.txt"),
        include_str!("../../../tests/data/sweeps/h200x4-32M-8G-x2-alltoall.txt"),
        include_str!("../../../tests/data/sweeps/h200x4-32M-8G-x2-sendrecv.txt"),
    ];
    let mut all: Vec<(String, Vec<Row>)> = Vec::new();
    for text in files {
        for (coll, rows) in parse_nccl_tests(text) {
            match all.iter_mut().find(|(c, _)| *c == coll) {
                Some((_, have)) => have.extend(rows),
                None => all.push((coll, rows)),
            }
        }
    }
    all
}

/// busbw of each 2-GPU sendrecv pair at 256M.
fn pairs_256m() -> Vec<f64> {
    include_str!("../../../tests/data/sweeps/h200-pairs-sendrecv-256M.txt")
        .lines()
        .filter_map(|l| l.split("busbw=").nth(1)?.trim().parse().ok())
        .collect()
}

/// The healthy measurements for `(gpu model, gpus, collective)`, if any are committed.
fn healthy(gpu: &str, gpus: Option<u32>, coll: &str) -> Option<Vec<Row>> {
    let sweeps = h200x4();
    let rows = |c: &str| sweeps.iter().find(|(n, _)| n == c).map(|(_, r)| r.clone());
    match (gpu, gpus) {
        ("H200 SXM", Some(4)) => rows(coll),
        // The pair rule: the 2-GPU pairs at 256M, and the 4-GPU sendrecv ring elsewhere (each
        // GPU sends to one peer and receives from another, as in a pair; agreement at 256M is
        // checked by `the_ring_stands_in_for_a_pair`).
        ("H200 SXM", Some(2)) if coll == "sendrecv" => {
            let mut r = rows("sendrecv")?;
            r.extend(pairs_256m().into_iter().map(|busbw| Row {
                bytes: 256 * M,
                busbw,
            }));
            Some(r)
        }
        _ => None,
    }
}

/// Rules whose source measured elsewhere, with the size it measured at.
const NO_SWEEP: [(&str, u32, &str, u64); 7] = [
    ("H200 SXM", 8, "all_reduce", 256 * M), // AWS p5e warn at 256M
    ("H100 SXM", 8, "all_reduce", 256 * M), // AWS p5 warn at 256M
    ("H100 SXM", 4, "all_reduce", 256 * M), // as the 4x H200 rule
    ("A100 SXM4 80GB", 8, "all_reduce", 256 * M), // SuperBench 256M
    ("A100 SXM4 40GB", 8, "all_reduce", 256 * M), // as the 80GB part
    ("B200", 8, "all_reduce", 256 * M),     // AWS p6 warn at 256M
    ("GB200", 4, "all_reduce", 256 * M),    // as B200
];
/// The 8x H200 rule from Azure's 16G measurement.
const AZURE_H200X8: (&str, u32, &str, u64) = ("H200 SXM", 8, "all_reduce", 16 * G);

/// The range a floor measured at `at` may cover: up to 16G from >= 256M (sweeps rise or stay
/// flat there), and for all_reduce down to 2G from >= 2G (its sweep is within 3% of its 8G
/// value there; all_gather, for one, is not).
fn extension_is_safe(coll: &str, at: u64, lo: u64, hi: u64) -> bool {
    let lowest = if at >= 2 * G && coll == "all_reduce" {
        2 * G
    } else {
        at
    };
    at >= 256 * M && lo >= lowest && lo <= at && hi >= at && hi <= 16 * G
}

/// A GPU of this whole name on an NVSwitch fabric.
fn nvswitch(name: &'static str) -> super::GpuKey<'static> {
    super::GpuKey {
        interconnect: crate::model::link_class::Class::Nvswitch,
        ..super::GpuKey::by_name(name)
    }
}

fn powers_of_two() -> impl Iterator<Item = u64> {
    (3..=33).map(|e| 1u64 << e)
}

#[test]
fn every_default_rule_is_bounded_and_below_every_healthy_measurement_in_its_range() {
    let c = WorkerConfig::from_texts(None).unwrap();
    let mut checked = 0;
    for t in &c.thresholds {
        // Every built-in rule names its SKU and the interconnect its source measured.
        let sku = t.sku.unwrap_or_else(|| panic!("{} has no sku", t.origin));
        assert_eq!(
            t.interconnect,
            Some(crate::model::link_class::Class::Nvswitch),
            "{}",
            t.origin
        );
        let (Some(lo), Some(hi)) = (t.min_bytes, t.max_bytes) else {
            panic!("{sku} {:?} {} has no size range", t.gpus, t.collective);
        };
        match healthy(sku, t.gpus, t.collective) {
            Some(rows) => {
                for size in powers_of_two() {
                    let here: Vec<f64> = rows
                        .iter()
                        .filter(|r| r.bytes == size)
                        .map(|r| r.busbw)
                        .collect();
                    if !in_range(t, size) {
                        continue;
                    }
                    assert!(
                        !here.is_empty(),
                        "{} x{:?} {}: no healthy measurement at {size} inside its range",
                        sku,
                        t.gpus,
                        t.collective
                    );
                    for busbw in here {
                        assert!(
                            busbw >= t.min_busbw,
                            "{} x{:?} {} at {size}: healthy {busbw} < floor {}",
                            sku,
                            t.gpus,
                            t.collective,
                            t.min_busbw
                        );
                        checked += 1;
                    }
                }
            }
            None => {
                let key = (sku, t.gpus.unwrap_or(0), t.collective);
                let at = NO_SWEEP
                    .iter()
                    .chain([&AZURE_H200X8])
                    .filter(|(g, n, c, _)| (*g, *n, *c) == key)
                    .map(|e| e.3)
                    .find(|&at| extension_is_safe(t.collective, at, lo, hi));
                assert!(
                    at.is_some(),
                    "{key:?} {lo}..{hi}: neither a committed sweep nor a source size it extends"
                );
            }
        }
    }
    // 4x all_reduce 256M..8G: 9 rows (3 of the x4 sweep, 6 of the x2 sweep); the pair rule: 9,
    // plus the 5 pairs at 256M.
    assert!(checked >= 23, "only {checked} measurements checked");
}

#[test]
fn a_healthy_all_8b_to_8g_sweep_on_4x_h200_never_fails_a_floor() {
    // `nccl-check all -b 8 -e 8G` on the 4x H200 whose sweeps are committed, and the pair
    // matrix at every size.
    let c = WorkerConfig::from_texts(None).unwrap();
    let h200 = nvswitch("NVIDIA H200");
    let mut judged = 0;
    for (coll, rows) in h200x4() {
        for r in rows {
            if let Some(min) =
                floor(&c.thresholds, &h200, 1, &coll, 4, r.bytes).map(|t| t.min_busbw)
            {
                assert!(r.busbw >= min, "{coll} {} {} < {min}", r.bytes, r.busbw);
                judged += 1;
            }
            if coll == "sendrecv" {
                if let Some(min) =
                    floor(&c.thresholds, &h200, 1, "sendrecv", 2, r.bytes).map(|t| t.min_busbw)
                {
                    assert!(r.busbw >= min, "pair {} {} < {min}", r.bytes, r.busbw);
                }
            }
        }
    }
    assert!(judged >= 9, "{judged}");
}

#[test]
fn the_ring_stands_in_for_a_pair() {
    let ring: Vec<f64> = healthy("H200 SXM", Some(4), "sendrecv")
        .unwrap()
        .iter()
        .filter(|r| r.bytes == 256 * M)
        .map(|r| r.busbw)
        .collect();
    let pairs = pairs_256m();
    assert_eq!(pairs.len(), 5);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let ratio = mean(&ring) / mean(&pairs);
    assert!(
        (0.97..=1.03).contains(&ratio),
        "ring/pair at 256M = {ratio}"
    );
}

#[test]
fn the_sweeps_support_the_documented_extensions() {
    // defaults.toml: non-decreasing from 256M (within 1%); all_reduce within 3% of 8G from 2G.
    for (coll, rows) in h200x4() {
        let at = |s: u64| {
            let v: Vec<f64> = rows
                .iter()
                .filter(|r| r.bytes == s)
                .map(|r| r.busbw)
                .collect();
            assert!(!v.is_empty(), "{coll}: no row at {s}");
            v.iter().sum::<f64>() / v.len() as f64
        };
        let mut prev = at(256 * M);
        for e in 29..=33 {
            let now = at(1 << e);
            assert!(now >= 0.99 * prev, "{coll}: {now} at 2^{e} after {prev}");
            prev = now;
        }
        if coll == "all_reduce" {
            for e in 31..=33 {
                assert!(at(1 << e) >= 0.97 * at(8 * G), "{coll} at 2^{e}");
            }
        }
    }
    let ar = "all_reduce";
    assert!(extension_is_safe(ar, 256 * M, 256 * M, 16 * G));
    assert!(!extension_is_safe(ar, 256 * M, 128 * M, 16 * G));
    assert!(!extension_is_safe(ar, 256 * M, 256 * M, 32 * G));
    assert!(!extension_is_safe(ar, 16 * G, G, 16 * G));
    assert!(extension_is_safe(ar, 16 * G, 2 * G, 16 * G));
    assert!(!extension_is_safe("all_gather", 16 * G, 2 * G, 16 * G));
}

#[test]
fn the_parser_reads_both_columns_and_every_section() {
    let s = h200x4();
    assert_eq!(
        s.len(),
        6,
        "{:?}",
        s.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    let ar = &s.iter().find(|x| x.0 == "all_reduce").unwrap().1;
    // 16 rows of the x4 sweep (8..8G) plus 9 of the x2 sweep (32M..8G).
    assert_eq!(ar.len(), 25);
    let first = ar[0];
    assert_eq!((first.bytes, first.busbw), (8, 0.0));
    let r512 = ar.iter().find(|r| r.bytes == 524288).unwrap();
    assert_eq!(r512.busbw, 17.35); // the lower of 24.77 (out-of-place) and 17.35 (in-place)
}
