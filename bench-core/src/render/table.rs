//! The stdout table, column for column as nccl-tests 2.19.6 prints it (`src/util.cu`), so parsers
//! written for nccl-tests read nccl-check's output unchanged.

use crate::measure::rows::{Placement, Row};

/// nccl-tests' `getFloatStr`: two decimals if they fit the width, else fewer, else exponent.
pub fn float_str(value: f64, width: usize) -> String {
    for prec in [2, 1, 0] {
        let s = format!("{value:>width$.prec$}");
        if s.len() <= width {
            return s;
        }
    }
    let s = if width >= 7 {
        format!("{value:.1e}")
    } else {
        format!("{value:.0e}")
    };
    // C prints exponents with a sign and two digits (1.2e+05); match that.
    let s = match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    };
    format!("{s:>width$}")
}

/// C's `%g` (6 significant digits, trailing zeros removed), used for #wrong and the average.
pub fn g(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let exp = value.abs().log10().floor() as i32;
    if !(-5..6).contains(&exp) {
        let s = format!("{value:.5e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = m.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().unwrap_or(0);
        let sign = if e < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", e.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    let s = format!("{value:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[allow(clippy::too_many_arguments)] // the nccl-tests header line has this many fields
pub fn header(
    binary: &str,
    nthreads: usize,
    min_bytes: u64,
    max_bytes: u64,
    step_factor: u64,
    warmup: u32,
    iters: u32,
    check: bool,
) -> String {
    format!(
        "# Collective test starting: {binary}\n\
         # nThread {nthreads} nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: {step_factor}(factor) \
         warmup iters: {warmup} iters: {iters} agg iters: 1 validation: {} graph: 0 unalign: 0\n",
        check as u8
    )
}

pub fn column_header() -> String {
    let mut s = String::from("#\n");
    s += &format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          \n",
        "", "", "", "", ""
    );
    s += &format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} \n",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"
    );
    s += &format!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} \n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
    );
    s
}

fn body(p: &Placement) -> String {
    let head = format!(
        "  {}  {}  {}",
        float_str(p.time_us, 7),
        float_str(p.algbw, 6),
        float_str(p.busbw, 6)
    );
    match p.wrong {
        Some(w) => format!("{head}  {:>6}", g(w as f64)),
        None => format!("{head}    N/A"),
    }
}

/// One data row: `%12li  %12li  %8s  %6s  %6s` then the two placements.
pub fn row(r: &Row) -> String {
    format!(
        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}{}{}",
        r.size,
        r.count,
        r.dtype,
        r.redop,
        r.root,
        body(&r.out_of_place),
        body(&r.in_place)
    )
}

pub fn footer(binary: &str, wrong_ranks: u64, avg_busbw: f64) -> String {
    format!(
        "# {:<20} : {} {}\n# {:<20} : {} \n#\n# Collective test concluded: {binary}\n#\n",
        "Out of bounds values",
        wrong_ranks,
        if wrong_ranks > 0 { "FAILED" } else { "OK" },
        "Avg bus bandwidth",
        g(avg_busbw)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_fit_their_columns_like_get_float_str() {
        assert_eq!(float_str(613.39, 7), " 613.39");
        assert_eq!(float_str(35300.04, 7), "35300.0");
        assert_eq!(float_str(218.81, 6), "218.81");
        assert_eq!(float_str(1234.5, 6), "1234.5");
        assert_eq!(float_str(123456.0, 6), "123456");
        assert_eq!(float_str(0.0, 6), "  0.00");
    }

    #[test]
    fn g_matches_c() {
        assert_eq!(g(0.0), "0");
        assert_eq!(g(124.666), "124.666");
        assert_eq!(g(365.0), "365");
        assert_eq!(g(12.5), "12.5");
        assert_eq!(g(1234567.0), "1.23457e+06");
    }

    #[test]
    fn a_row_lines_up_with_an_nccl_tests_row() {
        // From the 4x H200 anchor: all_reduce 128 MiB
        let expected = "   134217728      33554432     float     sum      -1   613.39  218.81  328.22       0   610.79  219.74  329.62       0";
        let p = |t, a, b| Placement {
            first_busbw: None,
            time_us: t,
            algbw: a,
            busbw: b,
            wrong: Some(0),
        };
        let r = Row {
            expected: None,
            collective: "all_reduce".into(),
            size: 134217728,
            count: 33554432,
            dtype: "float".into(),
            redop: "sum".into(),
            root: -1,
            out_of_place: p(613.39, 218.81, 328.22),
            in_place: p(610.79, 219.74, 329.62),
        };
        assert_eq!(row(&r), expected);
    }

    #[test]
    fn unchecked_placements_print_na() {
        let p = Placement {
            first_busbw: None,
            time_us: 1.0,
            algbw: 2.0,
            busbw: 3.0,
            wrong: None,
        };
        assert!(body(&p).ends_with("    N/A"));
    }
}
