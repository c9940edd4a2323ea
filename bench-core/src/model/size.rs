//! Byte sizes as nccl-tests accepts them: `8`, `32M`, `1.5K`, `8G` (binary multiples).

/// Parses a size such as `256M`. Suffixes K, M, G, T are powers of 1024 (as nccl-tests'
/// `parsesize`); a trailing `B` or `iB` is accepted. Fractions are allowed before a suffix.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let bad = || format!("malformed size '{text}': expected a number such as 8, 32M or 8G");
    if t.is_empty() {
        return Err(bad());
    }
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(format!(
                        "malformed size '{text}': unknown suffix '{c}' (use K, M, G or T)"
                    ))
                }
            };
            (&t[..i], 1u64 << shift)
        }
        _ => (t, 1u64),
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let value: f64 = num.parse().map_err(|_| bad())?;
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > (1u64 << 50) as f64 {
        return Err(format!("size '{text}' is out of range (at most 1 PiB)"));
    }
    Ok(bytes as u64)
}

/// A size for humans: `256 MiB`, `8 GiB`, `512 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{} {}", v as u64, UNITS[u])
    } else {
        format!("{:.1} {}", v, UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_nccl_tests() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("32M").unwrap(), 32 << 20);
        assert_eq!(parse_size("32m").unwrap(), 32 << 20);
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("1.5K").unwrap(), 1536);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("64MB").unwrap(), 64 << 20);
    }

    #[test]
    fn malformed_sizes_are_rejected_with_the_input_named() {
        for bad in ["", "M", "12Q", "-5", "1e3", "abc", "4 4"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
        assert!(parse_size("9999999T").is_err());
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(256 << 20), "256 MiB");
        assert_eq!(human(8 << 30), "8 GiB");
        assert_eq!(human(1536), "1.5 KiB");
    }
}
