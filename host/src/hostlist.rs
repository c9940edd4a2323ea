//! Slurm hostlist expressions (`rack[1-2]-n[01-04,7],gpu5`): parsed once into ranges, expanded
//! lazily in Slurm's order, and matched against one host name without expanding. The one parser
//! of the workspace: the worker's and the plugin's rendezvous host (`SLURM_STEP_NODELIST`) and the
//! network profiles' `nodes` patterns all read lists through it.
//!
//! The syntax is Slurm's (`src/common/hostlist.c`, checked with `scontrol show hostnames` of Slurm
//! 22.05 and the source of 23.11+): hosts separated by commas or whitespace (empty entries are
//! skipped); any number of bracket groups per host, each a comma list of numbers and `LO-HI`
//! ranges; a range is as wide as its `LO` is written (`n[001-010]` is `n001`..`n010`,
//! `n[8-10]` is `n8 n9 n10`); text may follow the last group (`n[1-2]-ib`, Slurm 23.11+); a group
//! without text before it is allowed (`[1-2]` is the hosts `1` and `2`, as Slurm expands it).
//! Slurm has no stride syntax (`n[1-10:2]` is an error there and here).
//!
//! Stricter than Slurm, on purpose (these lists come from a user's environment and name hosts we
//! connect to): host text is ASCII letters, digits, `-`, `_` and `.`; no signs or spaces inside
//! brackets (Slurm's `strtoul` reads `n[ 1-2]` as `n01 n02`); a `]` without `[` is an error (Slurm
//! keeps `n]1` as a name). Inputs are bounded: [`MAX_INPUT_LEN`] bytes, [`MAX_HOSTS`] hosts,
//! [`MAX_HOST_LEN`] bytes per host, all checked before anything is expanded.

use std::collections::HashSet;
use std::fmt;

/// Longest expression read, in bytes (a 10,000-node irregular list is about 100 KB).
pub const MAX_INPUT_LEN: usize = 1 << 20;
/// Most hosts one expression may expand to.
pub const MAX_HOSTS: u64 = 1_000_000;
/// Longest host name one expression may produce (DNS names are at most 253 bytes).
pub const MAX_HOST_LEN: usize = 255;
/// Numbers in brackets have at most this many digits (so every value fits a `u64`).
const MAX_DIGITS: usize = 18;

/// An expression that cannot be read, with what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostlistError {
    /// The start of the expression (at most 64 characters: it may be 1 MiB of user input).
    pub list: String,
    pub problem: Problem,
}

/// What is wrong with an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No host at all.
    Empty,
    /// Longer than [`MAX_INPUT_LEN`]; the length in bytes.
    TooLong(usize),
    /// Expands to more than [`MAX_HOSTS`] hosts.
    TooManyHosts,
    /// Produces a host name longer than [`MAX_HOST_LEN`].
    HostTooLong,
    /// A `[` without its `]`.
    Unclosed,
    /// A `]` without its `[`.
    UnexpectedClose,
    /// A `[` inside a bracket group.
    Nested,
    /// Two commas in a row, or a comma at either end (patterns only: Slurm lists skip them).
    EmptyEntry,
    /// Whitespace (patterns only: in Slurm lists it separates hosts).
    Whitespace,
    /// A character that is not part of a host name.
    Character(char),
    /// A bracket group that is not a comma list of numbers and ascending `LO-HI` ranges.
    Range(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Empty => write!(f, "no host in it"),
            Problem::TooLong(n) => write!(f, "{n} bytes, more than {MAX_INPUT_LEN}"),
            Problem::TooManyHosts => write!(f, "more than {MAX_HOSTS} hosts"),
            Problem::HostTooLong => write!(f, "a host name longer than {MAX_HOST_LEN} bytes"),
            Problem::Unclosed => write!(f, "'[' without ']'"),
            Problem::UnexpectedClose => write!(f, "']' without '['"),
            Problem::Nested => write!(f, "'[' inside brackets"),
            Problem::EmptyEntry => write!(f, "an empty entry between commas"),
            Problem::Whitespace => write!(f, "whitespace inside the expression"),
            Problem::Character(c) => write!(
                f,
                "unexpected character {c:?} (host names are letters, digits, '-', '_', '.')"
            ),
            Problem::Range(g) => write!(
                f,
                "'[{}]' is not a list of numbers and ascending LO-HI ranges",
                g.escape_debug()
            ),
        }
    }
}

impl fmt::Display for HostlistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot read host list '{}': {}",
            self.list.escape_debug(),
            self.problem
        )
    }
}

impl std::error::Error for HostlistError {}

/// The first host of a Slurm hostlist expression (`rack[2-3]-n[1-2]` → `rack2-n1`), without
/// expanding the rest; the whole expression must be valid.
pub fn first(list: &str) -> Result<String, HostlistError> {
    let parsed = Hostlist::parse(list)?;
    let first = parsed.iter().next();
    first.ok_or_else(|| error(list, Problem::Empty))
}

/// A parsed Slurm hostlist expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hostlist {
    entries: Vec<Entry>,
    len: u64,
}

impl Hostlist {
    /// Reads `list` with Slurm's syntax (see the module documentation) and its bounds.
    pub fn parse(list: &str) -> Result<Hostlist, HostlistError> {
        let entries = parse_entries(list, Syntax::Slurm)?;
        let mut len = 0u64;
        for entry in &entries {
            if entry.max_len() > MAX_HOST_LEN {
                return Err(error(list, Problem::HostTooLong));
            }
            len = entry
                .count()
                .and_then(|n| len.checked_add(n))
                .filter(|&n| n <= MAX_HOSTS)
                .ok_or_else(|| error(list, Problem::TooManyHosts))?;
        }
        Ok(Hostlist { entries, len })
    }

    /// How many hosts the expression names (duplicates counted, as Slurm counts them).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never true for a parsed list (an expression without hosts is an error).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hosts, one at a time, in Slurm's order: entries left to right; within an entry the
    /// last bracket group varies fastest, then the others from the first to the one before last
    /// (`a[1-2]b[3-4]c[5-6]` → `a1b3c5 a1b3c6 a2b3c5 a2b3c6 a1b4c5 ...`, as Slurm expands it).
    pub fn iter(&self) -> Hosts<'_> {
        Hosts {
            entries: &self.entries,
            next_entry: 0,
            current: None,
        }
    }

    /// Whether `host` is one of the hosts, decided without expanding.
    pub fn contains(&self, host: &str) -> bool {
        self.entries.iter().any(|e| e.matches(host))
    }
}

/// A host pattern of a configuration file: a hostlist expression whose entries are separated by
/// commas only (no empty entries, no whitespace: those are likely typos in a file) and may use
/// `*` for any characters (`dgx-*`). Matched, never expanded, so it has no count bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    entries: Vec<Entry>,
}

impl Pattern {
    pub fn parse(pattern: &str) -> Result<Pattern, HostlistError> {
        Ok(Pattern {
            entries: parse_entries(pattern, Syntax::Pattern)?,
        })
    }

    /// Whether the whole of `host` matches one of the entries.
    pub fn matches(&self, host: &str) -> bool {
        self.entries.iter().any(|e| e.matches(host))
    }
}

/// Iterator over the hosts of a [`Hostlist`]; builds one name per step.
#[derive(Debug, Clone)]
pub struct Hosts<'a> {
    entries: &'a [Entry],
    next_entry: usize,
    /// The entry being expanded and, per bracket group, (range index, value).
    current: Option<(&'a Entry, Vec<(usize, u64)>)>,
}

impl Iterator for Hosts<'_> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.current.is_none() {
            let entry = self.entries.get(self.next_entry)?;
            self.next_entry += 1;
            let start = entry.groups().map(|g| (0, g[0].lo)).collect();
            self.current = Some((entry, start));
        }
        let (entry, position) = self.current.as_mut()?;
        let host = entry.render(position);
        if !entry.advance(position) {
            self.current = None;
        }
        Some(host)
    }
}

/// Which rules a text is read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Syntax {
    /// Slurm's: commas and whitespace separate, empty entries are skipped.
    Slurm,
    /// Configuration patterns: commas separate, no empty entries, `*` allowed.
    Pattern,
}

/// One host expression: text, bracket groups and (patterns only) wildcards.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    /// A bracket group: its ranges in written order (never empty).
    Group(Vec<Range>),
    /// `*`: any characters (patterns only).
    Any,
}

/// `lo..=hi`, each value printed zero-padded to `width` digits (the written width of `lo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn format(&self, value: u64, out: &mut String) {
        use std::fmt::Write;
        let _ = write!(out, "{value:0width$}", width = self.width);
    }
}

fn digits(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

impl Entry {
    fn groups(&self) -> impl Iterator<Item = &[Range]> {
        self.parts.iter().filter_map(|p| match p {
            Part::Group(g) => Some(g.as_slice()),
            _ => None,
        })
    }

    /// Hosts of this entry, None when the product overflows.
    fn count(&self) -> Option<u64> {
        self.groups().try_fold(1u64, |product, group| {
            let size = group.iter().try_fold(0u64, |sum, r| {
                sum.checked_add((r.hi - r.lo).checked_add(1)?)
            })?;
            product.checked_mul(size)
        })
    }

    /// The longest host name this entry can produce.
    fn max_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.len(),
                Part::Group(g) => g
                    .iter()
                    .map(|r| r.width.max(digits(r.hi)))
                    .max()
                    .unwrap_or(0),
                Part::Any => 0,
            })
            .fold(0usize, usize::saturating_add)
    }

    fn render(&self, position: &[(usize, u64)]) -> String {
        let mut host = String::new();
        let mut groups = position.iter();
        for part in &self.parts {
            match part {
                Part::Text(t) => host.push_str(t),
                Part::Group(g) => {
                    if let Some(&(i, value)) = groups.next() {
                        g[i].format(value, &mut host);
                    }
                }
                Part::Any => host.push('*'),
            }
        }
        host
    }

    /// Steps `position` to the next host in Slurm's order; false after the last one.
    fn advance(&self, position: &mut [(usize, u64)]) -> bool {
        let groups: Vec<&[Range]> = self.groups().collect();
        let Some(last) = groups.len().checked_sub(1) else {
            return false;
        };
        // Slurm expands the last group innermost, then recurses over the groups before it from
        // the rightmost (outermost loop) to the leftmost, so the first group is the next fastest.
        let order = std::iter::once(last).chain(0..last);
        for g in order {
            let (i, value) = &mut position[g];
            let range = groups[g][*i];
            if *value < range.hi {
                *value += 1;
                return true;
            }
            if let Some(next) = groups[g].get(*i + 1) {
                *i += 1;
                *value = next.lo;
                return true;
            }
            *i = 0;
            *value = groups[g][0].lo;
        }
        false
    }

    /// Whether the whole of `host` is a host of this entry (memoised backtracking: `*` and
    /// digit runs can split a name several ways, so failed (part, offset) pairs are remembered).
    fn matches(&self, host: &str) -> bool {
        if !self.parts.contains(&Part::Any) && host.len() > self.max_len() {
            return false;
        }
        let mut failed = HashSet::new();
        match_from(&self.parts, 0, host, 0, &mut failed)
    }
}

fn match_from(
    parts: &[Part],
    p: usize,
    host: &str,
    at: usize,
    failed: &mut HashSet<(usize, usize)>,
) -> bool {
    let Some(part) = parts.get(p) else {
        return at == host.len();
    };
    if failed.contains(&(p, at)) {
        return false;
    }
    let rest = &host[at..];
    let ok = match part {
        Part::Text(t) => {
            rest.starts_with(t.as_str()) && match_from(parts, p + 1, host, at + t.len(), failed)
        }
        Part::Any => (at..=host.len())
            .filter(|&i| host.is_char_boundary(i))
            .any(|i| match_from(parts, p + 1, host, i, failed)),
        Part::Group(group) => {
            let run = rest.bytes().take_while(u8::is_ascii_digit).count();
            (1..=run.min(MAX_DIGITS + 1)).any(|n| {
                let text = &rest[..n];
                let Ok(value) = text.parse::<u64>() else {
                    return false;
                };
                let in_group = group.iter().any(|r| {
                    let mut formatted = String::new();
                    r.format(value, &mut formatted);
                    (r.lo..=r.hi).contains(&value) && formatted == text
                });
                in_group && match_from(parts, p + 1, host, at + n, failed)
            })
        }
    };
    if !ok {
        failed.insert((p, at));
    }
    ok
}

fn error(list: &str, problem: Problem) -> HostlistError {
    HostlistError {
        list: list.chars().take(64).collect(),
        problem,
    }
}

fn parse_entries(list: &str, syntax: Syntax) -> Result<Vec<Entry>, HostlistError> {
    let fail = |problem| Err(error(list, problem));
    if list.len() > MAX_INPUT_LEN {
        return fail(Problem::TooLong(list.len()));
    }
    let mut entries = Vec::new();
    let mut parts: Vec<Part> = Vec::new();
    let mut text = String::new();
    let mut chars = list.chars();
    let end_entry = |parts: &mut Vec<Part>, text: &mut String, entries: &mut Vec<Entry>| {
        flush(text, parts);
        if parts.is_empty() {
            return false;
        }
        entries.push(Entry {
            parts: std::mem::take(parts),
        });
        true
    };
    while let Some(c) = chars.next() {
        match c {
            '[' => {
                flush(&mut text, &mut parts);
                let mut group = String::new();
                loop {
                    match chars.next() {
                        Some(']') => break,
                        Some('[') => return fail(Problem::Nested),
                        Some(c) => group.push(c),
                        None => return fail(Problem::Unclosed),
                    }
                }
                let ranges =
                    parse_group(&group).ok_or_else(|| error(list, Problem::Range(group)))?;
                parts.push(Part::Group(ranges));
            }
            ']' => return fail(Problem::UnexpectedClose),
            ',' => {
                let ended = end_entry(&mut parts, &mut text, &mut entries);
                if syntax == Syntax::Pattern && !ended {
                    return fail(Problem::EmptyEntry);
                }
            }
            c if c.is_whitespace() => {
                if syntax == Syntax::Pattern {
                    return fail(Problem::Whitespace);
                }
                end_entry(&mut parts, &mut text, &mut entries);
            }
            '*' if syntax == Syntax::Pattern => {
                flush(&mut text, &mut parts);
                parts.push(Part::Any);
            }
            c if c.is_ascii_alphanumeric() || "-_.".contains(c) => text.push(c),
            c => return fail(Problem::Character(c)),
        }
    }
    end_entry(&mut parts, &mut text, &mut entries);
    // (Whitespace is an error in patterns, so a final comma is the last character.)
    if syntax == Syntax::Pattern && list.ends_with(',') {
        return fail(Problem::EmptyEntry);
    }
    if entries.is_empty() {
        return fail(Problem::Empty);
    }
    Ok(entries)
}

fn flush(text: &mut String, parts: &mut Vec<Part>) {
    if !text.is_empty() {
        parts.push(Part::Text(std::mem::take(text)));
    }
}

/// `1,3-5,007` → ranges; None when anything else is inside the brackets.
fn parse_group(group: &str) -> Option<Vec<Range>> {
    let number = |s: &str| {
        (!s.is_empty() && s.len() <= MAX_DIGITS && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    group
        .split(',')
        .map(|r| {
            let (lo_text, hi_text) = r.split_once('-').unwrap_or((r, r));
            let (lo, hi) = (number(lo_text)?, number(hi_text)?);
            (lo <= hi).then_some(Range {
                lo,
                hi,
                width: lo_text.len(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hosts(list: &str) -> Vec<String> {
        let parsed = Hostlist::parse(list).unwrap_or_else(|e| panic!("{list}: {e}"));
        parsed.iter().collect()
    }

    fn problem(list: &str) -> Problem {
        Hostlist::parse(list).expect_err(list).problem
    }

    #[test]
    fn slurms_own_examples_expand_as_slurm_expands_them() {
        // testsuite/slurm_unit/common/hostlist/hostlist_nth-test.c
        assert_eq!(
            hosts("host[1-3],host5"),
            ["host1", "host2", "host3", "host5"]
        );
        // testsuite/slurm_unit/common/hostlist/hostlist_iterator-test.c
        assert_eq!(
            hosts("b[1-3],d[1,3-5],e1"),
            ["b1", "b2", "b3", "d1", "d3", "d4", "d5", "e1"]
        );
        // contribs/perlapi/libslurm/perl/t/21-hostlist.t (its ranged string of 12 hosts)
        let perl = hosts("node[0,3-4,8],linux,linux[2,5],node[4,12,15],linux[8,23]");
        assert_eq!(perl.len(), 12);
        assert_eq!(perl[..5], ["node0", "node3", "node4", "node8", "linux"]);
        assert_eq!(perl[11], "linux23");
        // src/common/hostlist.h, hostlist_create(): the documented forms
        assert_eq!(hosts("alpha,beta,gamma"), ["alpha", "beta", "gamma"]);
        let tux = hosts("tux[0-5,12,20-25]");
        assert_eq!(tux.len(), 13);
        assert_eq!((&tux[6][..], &tux[12][..]), ("tux12", "tux25"));
        let linux = hosts("linux[0000-1023]");
        assert_eq!((linux.len(), &linux[0][..]), (1024, "linux0000"));
        assert_eq!(linux[1023], "linux1023");
        // doc/man/man1/scontrol.1: "scontrol: show hostnames tux[1-3]"
        assert_eq!(hosts("tux[1-3]"), ["tux1", "tux2", "tux3"]);
    }

    #[test]
    fn several_bracket_groups_expand_in_slurms_order() {
        // The bug: the old rendezvous parser returned "rack2-n[1-2]", which is not a host.
        assert_eq!(first("rack[2-3]-n[1-2]").as_deref(), Ok("rack2-n1"));
        // `scontrol show hostnames` of Slurm 22.05 for each expression below.
        assert_eq!(
            hosts("rack[2-3]-n[1-2]"),
            ["rack2-n1", "rack2-n2", "rack3-n1", "rack3-n2"]
        );
        assert_eq!(
            hosts("a[1-2]b[3-4]c[5-6]"),
            ["a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"]
        );
        let four = hosts("a[1-2]b[3-4]c[5-6]d[7-8]");
        assert_eq!(four[..4], ["a1b3c5d7", "a1b3c5d8", "a2b3c5d7", "a2b3c5d8"]);
        assert_eq!(four[8], "a1b3c6d7");
        assert_eq!(four.len(), 16);
        assert_eq!(
            hosts("n[1-2,5]-[7,8-9]"),
            ["n1-7", "n1-8", "n1-9", "n2-7", "n2-8", "n2-9", "n5-7", "n5-8", "n5-9"]
        );
        assert_eq!(hosts("n[1-2][3-4]"), ["n13", "n14", "n23", "n24"]);
        assert_eq!(hosts("n[1,2]x[3]"), ["n1x3", "n2x3"]);
        // Text after the last group: Slurm 23.11+ ("Extend hostlist to support suffix").
        assert_eq!(hosts("n[1-2]-ib"), ["n1-ib", "n2-ib"]);
    }

    #[test]
    fn ranges_keep_the_width_of_their_first_number() {
        // `scontrol show hostnames` of Slurm 22.05.
        assert_eq!(hosts("n[001-003]"), ["n001", "n002", "n003"]);
        assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(hosts("x[00-02]"), ["x00", "x01", "x02"]);
        let wide = hosts("n[01-100]");
        assert_eq!(
            (&wide[0][..], &wide[98][..], &wide[99][..]),
            ("n01", "n99", "n100")
        );
        assert_eq!(
            hosts("n[3,1-2]"),
            ["n3", "n1", "n2"],
            "written order, not sorted"
        );
        assert_eq!(hosts("a,a"), ["a", "a"], "duplicates kept");
        assert_eq!(hosts("n[0],n[00]"), ["n0", "n00"]);
    }

    #[test]
    fn commas_and_whitespace_separate_and_empty_entries_are_skipped() {
        // `scontrol show hostnames` of Slurm 22.05: "a b,,c" -> a b c; ",,a" -> a; "n[1-2]," -> n1 n2.
        assert_eq!(hosts("a b,,c"), ["a", "b", "c"]);
        assert_eq!(hosts(",,a"), ["a"]);
        assert_eq!(hosts("n[1-2],"), ["n1", "n2"]);
        assert_eq!(hosts(" n1 \t n2\n"), ["n1", "n2"]);
        assert_eq!(hosts("a[1,3-5],b7"), ["a1", "a3", "a4", "a5", "b7"]);
    }

    #[test]
    fn a_group_without_a_prefix_names_numeric_hosts_as_slurm_does() {
        // Slurm 22.05: `scontrol show hostnames '[1-2]'` prints 1 and 2.
        assert_eq!(hosts("[1-2]"), ["1", "2"]);
        assert_eq!(first("[1-2]").as_deref(), Ok("1"));
    }

    #[test]
    fn malformed_expressions_are_errors_naming_the_problem() {
        // Slurm has no stride: "Invalid range: `1-10:2'" (22.05).
        assert_eq!(problem("n[1-10:2]"), Problem::Range("1-10:2".into()));
        for (list, want) in [
            ("n[2-1]", Problem::Range("2-1".into())),
            ("n[007-5]", Problem::Range("007-5".into())),
            ("n[a]", Problem::Range("a".into())),
            ("n[]", Problem::Range(String::new())),
            ("n[1,]", Problem::Range("1,".into())),
            ("n[1--2]", Problem::Range("1--2".into())),
            ("n[ 1-2]", Problem::Range(" 1-2".into())),
            ("n[+1]", Problem::Range("+1".into())),
            (
                "n[1234567890123456789]",
                Problem::Range("1234567890123456789".into()),
            ),
            ("n[1-2", Problem::Unclosed),
            ("n]1", Problem::UnexpectedClose),
            ("n[1]]", Problem::UnexpectedClose),
            ("n[[1]]", Problem::Nested),
            ("n:1", Problem::Character(':')),
            ("ñ[1-2]", Problem::Character('ñ')),
            ("", Problem::Empty),
            (" , ,", Problem::Empty),
        ] {
            assert_eq!(problem(list), want, "{list:?}");
            assert_eq!(first(list).map_err(|e| e.problem), Err(want), "{list:?}");
        }
        let e = Hostlist::parse("n[1-").expect_err("unclosed");
        assert_eq!(
            e.to_string(),
            "cannot read host list 'n[1-': '[' without ']'"
        );
    }

    #[test]
    fn input_and_expansion_are_bounded_before_expanding() {
        let million = Hostlist::parse("n[1-1000000]").expect("at the bound");
        assert_eq!(million.len(), MAX_HOSTS);
        assert_eq!(million.iter().next().as_deref(), Some("n1"));
        assert_eq!(problem("n[0-1000000]"), Problem::TooManyHosts);
        assert_eq!(problem("a[1-1000]b[1-1001]"), Problem::TooManyHosts);
        assert_eq!(problem("n[1-1000000],m"), Problem::TooManyHosts);
        // src/common/hostlist.h's MAX_PREFIX_CNT example of an expression that eats memory.
        assert_eq!(problem("a[0-999999999].b[0-9]"), Problem::TooManyHosts);
        let overflow = "a[0-999999999999999999]b[0-999999999999999999]c[0-99]";
        assert_eq!(problem(overflow), Problem::TooManyHosts);
        assert_eq!(problem(&"a".repeat(256)), Problem::HostTooLong);
        assert!(Hostlist::parse(&"a".repeat(255)).is_ok());
        assert_eq!(
            problem(&format!("{}[1-10]", "a".repeat(254))),
            Problem::HostTooLong
        );
        let long = "a,".repeat(MAX_INPUT_LEN / 2 + 1);
        assert_eq!(problem(&long), Problem::TooLong(long.len()));
        let e = Hostlist::parse(&long).expect_err("too long");
        assert!(
            e.list.chars().count() <= 64,
            "the error does not carry 1 MiB"
        );
    }

    #[test]
    fn contains_agrees_with_the_expansion() {
        let list = Hostlist::parse("rack[1-2]-n[01-04,7],gpu[8-10],[5-6]").expect("valid");
        for host in list.iter() {
            assert!(list.contains(&host), "{host}");
        }
        for host in [
            "rack2-n07",
            "rack3-n01",
            "rack1-n1",
            "gpu08",
            "gpu11",
            "7",
            "",
            "rack1-n01x",
        ] {
            assert!(!list.contains(host), "{host}");
        }
        assert!(list.contains("rack2-n7") && list.contains("gpu10") && list.contains("6"));
    }

    #[test]
    fn patterns_allow_wildcards_and_reject_likely_typos() {
        let p = |s: &str| Pattern::parse(s).unwrap_or_else(|e| panic!("{e}"));
        assert!(p("dgx-*").matches("dgx-h200-17") && !p("dgx-*").matches("gpu1"));
        assert!(p("*-n[1-2]").matches("rack9-n2") && !p("*-n[1-2]").matches("rack9-n3"));
        assert!(p("a*b*c").matches("abc") && p("a*b*c").matches("axxbyyc"));
        assert!(!p("a*b*c").matches("axxbyy"));
        assert!(p("n[1-2]0").matches("n10") && !p("n[1-2]0").matches("n30"));
        let many_stars = p(&"*a".repeat(30));
        assert!(
            !many_stars.matches(&"a".repeat(29)),
            "memoised: no exponential search"
        );
        assert!(many_stars.matches(&"ba".repeat(30)));
        for (bad, want) in [
            ("a,,b", Problem::EmptyEntry),
            ("a,", Problem::EmptyEntry),
            (",a", Problem::EmptyEntry),
            ("gpu 1", Problem::Whitespace),
            ("gpu[1-", Problem::Unclosed),
        ] {
            assert_eq!(
                Pattern::parse(bad).map_err(|e| e.problem),
                Err(want),
                "{bad}"
            );
        }
        assert_eq!(
            problem("dgx-*"),
            Problem::Character('*'),
            "no wildcard in Slurm lists"
        );
    }

    /// Slurm's expansion order, written the way `_push_range_list` recurses: the last group is
    /// the innermost loop; over the groups before it, the rightmost is the outermost loop.
    fn model(texts: &[String], groups: &[Vec<String>]) -> Vec<String> {
        fn prefixes(texts: &[String], groups: &[Vec<String>]) -> Vec<String> {
            let Some((group, rest)) = groups.split_last() else {
                return vec![texts[0].clone()];
            };
            let (tail, head) = texts.split_last().expect("one more text than groups");
            let inner = prefixes(head, rest);
            group
                .iter()
                .flat_map(|v| inner.iter().map(move |p| format!("{p}{v}{tail}")))
                .collect()
        }
        let Some((last, rest)) = groups.split_last() else {
            return vec![texts[0].clone()];
        };
        let (suffix, head) = texts.split_last().expect("one more text than groups");
        prefixes(head, rest)
            .iter()
            .flat_map(|p| last.iter().map(move |v| format!("{p}{v}{suffix}")))
            .collect()
    }

    /// (written text, values) of one range: `lo` padded to a random width, `span` more values.
    fn range() -> impl Strategy<Value = (String, Vec<String>)> {
        (0u64..120, 0u64..4, 1usize..4).prop_map(|(lo, span, pad)| {
            let width = pad.max(digits(lo));
            let values = (lo..=lo + span).map(|v| format!("{v:0width$}")).collect();
            (format!("{lo:0width$}-{}", lo + span), values)
        })
    }

    fn entry() -> impl Strategy<Value = (String, Vec<String>)> {
        let group = prop::collection::vec(range(), 1..4).prop_map(|ranges| {
            let written: Vec<String> = ranges.iter().map(|(w, _)| w.clone()).collect();
            let values = ranges.into_iter().flat_map(|(_, v)| v).collect::<Vec<_>>();
            (format!("[{}]", written.join(",")), values)
        });
        (
            "[a-z]{0,3}",
            prop::collection::vec((group, "[a-z0-9._-]{0,3}"), 0..4),
        )
            .prop_filter("an entry names at least one character", |(t, g)| {
                !t.is_empty() || !g.is_empty()
            })
            .prop_map(|(head, groups)| {
                let mut written = head.clone();
                let mut texts = vec![head];
                let mut values = Vec::new();
                for ((group, vals), text) in groups {
                    written.push_str(&group);
                    written.push_str(&text);
                    texts.push(text);
                    values.push(vals);
                }
                (written, model(&texts, &values))
            })
    }

    proptest! {
        #[test]
        fn expansion_matches_slurms_recursion(
            entries in prop::collection::vec(entry(), 1..4),
            separator in prop::sample::select(vec![",", " ", ",\n"]),
        ) {
            let list = entries.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>().join(separator);
            let want: Vec<String> = entries.into_iter().flat_map(|(_, h)| h).collect();
            let parsed = Hostlist::parse(&list).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(parsed.len(), want.len() as u64);
            prop_assert_eq!(first(&list).ok(), want.first().cloned());
            for host in &want {
                prop_assert!(parsed.contains(host), "{} not in {}", host, list);
            }
            prop_assert_eq!(parsed.iter().collect::<Vec<_>>(), want);
        }

        #[test]
        fn arbitrary_input_never_panics(text in "[a-c0-9\\[\\],\\- *:+]{0,24}|\\PC{0,24}") {
            if let Ok(list) = Hostlist::parse(&text) {
                let all: Vec<String> = list.iter().collect();
                prop_assert_eq!(all.len() as u64, list.len());
                prop_assert!(all.iter().all(|h| list.contains(h)));
            }
            if let Ok(pattern) = Pattern::parse(&text) {
                let _ = pattern.matches(&text);
            }
        }
    }
}
