//! The first host of a Slurm hostlist expression (`node[01-03,7],gpu5` → `node01`), parsed here
//! because running `scontrol show hostnames` in every task would cost a process per task.

use std::fmt;

/// A hostlist expression this parser cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostlistError {
    pub list: String,
    pub reason: &'static str,
}

impl fmt::Display for HostlistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot read node list '{}': {}",
            self.list.escape_debug(),
            self.reason
        )
    }
}

impl std::error::Error for HostlistError {}

/// Returns the first host of `list`, keeping the zero padding written in the expression.
/// Supports several bracket groups (`rack[1-2]-n[01-04]` → `rack1-n01`).
pub fn first_host(list: &str) -> Result<String, HostlistError> {
    let err = |reason| HostlistError {
        list: list.to_string(),
        reason,
    };
    let mut host = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                let mut group = String::new();
                loop {
                    match chars.next() {
                        Some(']') => break,
                        Some('[') => return Err(err("nested '['")),
                        Some(c) => group.push(c),
                        None => return Err(err("unclosed '['")),
                    }
                }
                let first = group.split(',').next().unwrap_or("");
                let start = first.split('-').next().unwrap_or("");
                if start.is_empty() || !start.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err("a bracket group must start with a number"));
                }
                host.push_str(start);
            }
            ']' => return Err(err("']' without '['")),
            c if c.is_whitespace() => return Err(err("whitespace inside the list")),
            c => host.push(c),
        }
    }
    if host.is_empty() {
        return Err(err("empty"));
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_host_of_common_expressions() {
        for (list, first) in [
            ("node01", "node01"),
            ("n1,n2", "n1"),
            ("node[01-03,7]", "node01"),
            ("node[7,01-03]", "node7"),
            ("gpu[007-010],cpu1", "gpu007"),
            ("rack[1-2]-n[01-04]", "rack1-n01"),
            ("n[3]", "n3"),
            ("a-b.example.com,c", "a-b.example.com"),
        ] {
            assert_eq!(first_host(list).as_deref(), Ok(first), "{list}");
        }
    }

    #[test]
    fn malformed_expressions_are_errors_not_panics() {
        for bad in [
            "", ",n1", "n[01-03", "n]1", "n[]", "n[a-b]", "n[[1]]", "n 1",
        ] {
            assert!(first_host(bad).is_err(), "{bad:?} accepted");
        }
    }
}
