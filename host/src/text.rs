//! Text from others made safe to print: what a peer sent over the network and what a process
//! says of itself (its `comm`, its user's name) reaches log lines, verdict lines and Slurm's
//! drain reasons only through [`escape_control`], so it can neither obey (terminal escape
//! sequences, carriage returns, newlines that would forge a log line, bidirectional overrides
//! that reorder what is shown) nor split a field (`|` separates a drain reason's short part from
//! its sentence).

/// `s` with every control character (C0, DEL, C1), the line and paragraph separators
/// (U+2028, U+2029), the bidirectional formatting characters and `|` written as `\u{..}`, other
/// text unchanged. A backslash is kept as it is, so escaping twice changes nothing more.
pub fn escape_control(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if shown_escaped(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `c` is written escaped by [`escape_control`].
fn shown_escaped(c: char) -> bool {
    c.is_control()
        || c == '|'
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
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

    /// A process named `a|b` adds no field to a drain reason; a right-to-left override or a
    /// line separator cannot reorder or break the line it is shown in.
    #[test]
    fn separators_and_bidirectional_overrides_are_shown_not_obeyed() {
        assert_eq!(escape_control("a|b"), "a\\u{7c}b");
        assert_eq!(
            escape_control("x\u{202e}gpj.exe\u{2028}y\u{2066}"),
            "x\\u{202e}gpj.exe\\u{2028}y\\u{2066}"
        );
        let once = escape_control("x\x1b[2J|y");
        assert_eq!(
            escape_control(&once),
            once,
            "escaping twice changes nothing more"
        );
    }

    #[test]
    fn a_clipped_piece_counts_characters_and_escapes_what_is_left() {
        assert_eq!(escape_clipped("Grüße\nmehr", 6), "Grüße\\u{a}");
        assert_eq!(escape_clipped("ab", 40), "ab");
    }
}
