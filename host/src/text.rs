//! Text from the network made safe to print: control characters (terminal escape sequences,
//! carriage returns, newlines that would forge a log line) are shown escaped, never sent raw.

/// `s` with every control character (C0, DEL, C1) written as `\u{..}`, other text unchanged.
pub fn escape_control(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The first `n` characters of a peer's `text`, control characters escaped: a bounded piece of
/// what a peer sent, for a message.
pub fn escape_clipped(text: &str, n: usize) -> String {
    escape_control(&text.chars().take(n).collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_newlines_are_shown_not_obeyed() {
        assert_eq!(escape_control("ok: 12.5 GB/s"), "ok: 12.5 GB/s");
        assert_eq!(escape_control("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(
            escape_control("x\nFAIL y\r\u{9b}"),
            "x\\u{a}FAIL y\\u{d}\\u{9b}"
        );
        assert_eq!(escape_control("Grüße"), "Grüße");
    }

    #[test]
    fn a_clipped_piece_counts_characters_and_escapes_what_is_left() {
        assert_eq!(escape_clipped("Grüße\nmehr", 6), "Grüße\\u{a}");
        assert_eq!(escape_clipped("ab", 40), "ab");
    }
}
