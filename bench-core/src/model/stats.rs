//! Small statistics and the way a message prints a number beside its limit, shared by the
//! stages that compare a measurement with its peers or its floor.

/// Median of `v` (mean of the middle two for an even count); 0 for none.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// A value as a message prints it beside the limit it is compared with: at least two
/// significant digits, so that `0.19 < 0.2` never reads `0.2 < 0.2`.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        let digits = (1 - a.log10().floor() as i32).clamp(1, 6) as usize;
        format!("{v:.digits$}")
    }
}

/// A measured value and the limit it missed, each with enough digits that they differ when
/// the values do (`0.198 < 0.2` prints `0.198 < 0.200`, never `0.20 < 0.20`).
pub fn num_vs(value: f64, limit: f64) -> (String, String) {
    let (mut a, mut b) = (num(value), num(limit));
    if a == b && value != limit {
        for decimals in 1..=6usize {
            a = format!("{value:.decimals$}");
            b = format!("{limit:.decimals$}");
            if a != b {
                break;
            }
        }
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compared_value_keeps_two_significant_digits_so_the_comparison_reads_true() {
        // The issue-24 case: 0.19 < 0.2 printed as "0.2 < 0.2".
        assert_eq!(format!("{} < {}", num(0.19), num(0.2)), "0.19 < 0.20");
        assert_eq!(num(0.0123), "0.012");
        assert_eq!(num(7.5), "7.5");
        assert_eq!(num(25.24), "25.2");
        assert_eq!(num(728.4), "728");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(1005.0), "1005");
        // The fabric run's line: "busbw 0.20 GB/s < 0.20 GB/s".
        assert_eq!(num_vs(0.1987, 0.2012), ("0.199".into(), "0.201".into()));
        assert_eq!(num_vs(0.24, 0.25), ("0.24".into(), "0.25".into()));
        assert_eq!(num_vs(300.2, 300.4), ("300.2".into(), "300.4".into()));
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
