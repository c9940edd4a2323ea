//! `nccl-check --explain-plan --nodes N --gpus-per-node G [--json]`: parsed by hand before the
//! worker's own options (no config, no CUDA, no NCCL is loaded for it), because `--json` is a
//! flag here while the worker's `--json` takes a path.

use super::explain_plan;

/// How `--explain-plan` ended: `Ok`: the text to print (exit 0); `Err`: a usage error (exit 2).
pub type PlanCli = Result<String, String>;

/// `None` when `args` (program name first) do not ask for `--explain-plan`.
pub fn intercept(args: &[String]) -> Option<PlanCli> {
    if !args.iter().skip(1).any(|a| a == "--explain-plan") {
        return None;
    }
    Some(match parse(&args[1..]) {
        Ok((nodes, gpus, json)) => {
            let text = explain_plan(nodes, gpus, json);
            if text.starts_with("error: ") || text.starts_with("{\"error\"") {
                Err(first_error(&text))
            } else if json {
                Ok(text + "\n")
            } else {
                Ok(text)
            }
        }
        Err(e) => Err(e),
    })
}

fn first_error(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => v["error"].as_str().unwrap_or(text).to_string(),
        Err(_) => text.trim().trim_start_matches("error: ").to_string(),
    }
}

fn parse(args: &[String]) -> Result<(usize, usize, bool), String> {
    let (mut nodes, mut gpus, mut json) = (None, None, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        let mut value = |what: &str| -> Result<usize, String> {
            let v = inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("--explain-plan: {what} needs a value"))?;
            v.parse::<usize>().map_err(|_| {
                format!("--explain-plan: invalid {what} '{v}': expected a positive integer")
            })
        };
        match key {
            "--explain-plan" if inline.is_none() => {}
            "--json" if inline.is_none() => json = true,
            "--nodes" => nodes = Some(value("--nodes")?),
            "--gpus-per-node" => gpus = Some(value("--gpus-per-node")?),
            other => {
                return Err(format!(
                    "--explain-plan takes only --nodes N --gpus-per-node G [--json], not '{other}'"
                ))
            }
        }
    }
    match (nodes, gpus) {
        (Some(n), Some(g)) => Ok((n, g, json)),
        _ => Err("--explain-plan needs --nodes N and --gpus-per-node G".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Option<PlanCli> {
        let v: Vec<String> = std::iter::once("nccl-check")
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        intercept(&v)
    }

    #[test]
    fn only_explain_plan_is_intercepted() {
        assert_eq!(run(&["--json", "r.json"]), None);
        assert_eq!(run(&["--plan", "quick"]), None);
    }

    #[test]
    fn json_is_one_object_with_rounds_and_modeled_seconds() {
        let Some(Ok(text)) = run(&[
            "--explain-plan",
            "--nodes",
            "1024",
            "--gpus-per-node=8",
            "--json",
        ]) else {
            panic!("not printed")
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["rounds"].as_u64(), Some(24));
        assert!(v["modeled_seconds"].as_f64().unwrap() <= 10.0);
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        let usage = |args: &[&str]| match run(args) {
            Some(Err(e)) => e,
            other => panic!("{args:?}: {other:?}"),
        };
        assert!(usage(&["--explain-plan", "--nodes", "8"]).contains("--gpus-per-node"));
        assert!(
            usage(&["--explain-plan", "--nodes", "x", "--gpus-per-node", "8"])
                .contains("invalid --nodes 'x'")
        );
        assert!(
            usage(&["--explain-plan", "--nodes", "0", "--gpus-per-node", "8"])
                .contains("need 1..=")
        );
        assert!(usage(&[
            "--explain-plan",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--plot"
        ])
        .contains("'--plot'"));
        assert!(usage(&["--explain-plan", "--nodes"]).contains("needs a value"));
    }
}
