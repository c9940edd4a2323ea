//! `nccl-check --explain-plan --nodes N --gpus-per-node G [--config FILE] [--plan NAME]
//! [--gpu-model NAME] [--network-gbs GBS] [--json]`: a mode of the worker's command line (`settings/options/explain.rs`,
//! parsed by clap), answered here for `main.rs`; no CUDA, no NCCL is loaded for it. Its `--json` is a flag, while the check's `--json`
//! takes a path. The config is the worker's (`--config`, else `$NCCL_CHECK_CONFIG`, else
//! /etc/nccl-check/nccl-check.toml when it exists, over the built-in defaults): the plan it
//! explains and the rule that ends a healthy check after phase B are the ones a check would use.

use super::explain_plan;
use super::site::Workload;
use crate::config::worker::WorkerConfig;
use crate::settings::options::{ExplainArgs, ParseExit};
use std::path::PathBuf;

/// The text `--explain-plan` prints (exit 0), or its usage or config error (exit 2). `env` is
/// the worker's environment (`NCCL_CHECK_CONFIG`).
pub fn answer(
    args: &ExplainArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ParseExit> {
    let (nodes, gpus) = match (&args.nodes, &args.gpus_per_node) {
        (Some(n), Some(g)) => (count("--nodes", n)?, count("--gpus-per-node", g)?),
        _ => {
            return Err(ParseExit::Usage(
                "--explain-plan needs --nodes N and --gpus-per-node G".into(),
            ))
        }
    };
    let path = args.config.as_ref().map(PathBuf::from).or_else(|| {
        env("NCCL_CHECK_CONFIG")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    });
    let config = WorkerConfig::load(path.as_deref())
        .map_err(|e| ParseExit::Config(format!("config: {e}")))?;
    let plan = args.plan.as_deref().unwrap_or("quick");
    // A shape the model refuses is said by the model (its error names the limits).
    let mut workload = Workload::from_config(&config, plan, args.gpu_model.as_deref(), nodes, gpus)
        .map_err(ParseExit::Usage)?;
    workload.network_gbs = args.network_gbs.as_deref().map(rate).transpose()?;
    let text = explain_plan(nodes, gpus, args.json, &workload)
        .map_err(|e| ParseExit::Usage(e.to_string()))?;
    Ok(if args.json { text + "\n" } else { text })
}

/// `--network-gbs`: a positive, finite GB/s.
fn rate(v: &str) -> Result<f64, ParseExit> {
    match v.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(ParseExit::Usage(format!(
            "--explain-plan: invalid --network-gbs '{v}': expected a positive number of GB/s"
        ))),
    }
}

fn count(what: &str, v: &str) -> Result<usize, ParseExit> {
    v.parse::<usize>().map_err(|_| {
        ParseExit::Usage(format!(
            "--explain-plan: invalid {what} '{v}': expected a positive integer"
        ))
    })
}

#[cfg(test)]
mod tests {
    use crate::settings::options::{Args, Command, ParseExit};

    /// What the worker's command line does with `args`, as `main.rs` runs it: the printed
    /// text, or the usage error.
    fn explain(args: &[&str]) -> Result<String, String> {
        let v = std::iter::once("nccl-check").chain(args.iter().copied());
        let env = crate::settings::environment::Environment::default();
        let answered = match Args::parse(v).and_then(|a| a.resolve(&env)) {
            Ok(Command::Explain(a)) => super::answer(&a, &|k| env.get(k)),
            Ok(Command::Check(o)) => return Err(format!("a check, not --explain-plan: {o:?}")),
            Err(e) => Err(e),
        };
        match answered {
            Ok(text) | Err(ParseExit::Info(text)) => Ok(text),
            Err(ParseExit::Usage(e) | ParseExit::Config(e)) => Err(e),
        }
    }

    #[test]
    fn only_explain_plan_is_explained() {
        assert!(explain(&["--json", "r.json"]).is_err_and(|e| e.starts_with("a check")));
        assert!(explain(&["--plan", "quick"]).is_err_and(|e| e.starts_with("a check")));
    }

    #[test]
    fn json_is_one_object_with_rounds_and_modeled_seconds() {
        let text = explain(&[
            "--explain-plan",
            "--nodes",
            "1024",
            "--gpus-per-node=8",
            "--json",
        ])
        .expect("printed");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["rounds"].as_u64(), Some(24));
        assert!(v["modeled_seconds"].as_f64().unwrap() <= 10.0);
    }

    #[test]
    fn a_slower_network_costs_a_budgeted_quick_plan_little() {
        let healthy = |gbs: &str| {
            let text = explain(&[
                "--explain-plan",
                "--nodes",
                "8",
                "--gpus-per-node",
                "1",
                "--network-gbs",
                gbs,
                "--json",
            ])
            .expect("printed");
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["workload"]["network_gbs"].as_f64(), gbs.parse().ok());
            v["modeled_seconds_healthy"].as_f64().unwrap()
        };
        // From 48 GB/s to 1 GB/s the budgets hold the check after NCCL init to a few seconds
        // (counted, the quick plan's 256M would take tens).
        let (fast, slow) = (healthy("48"), healthy("1"));
        assert!(slow > fast && slow < 3.0, "{fast} {slow}");
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        let usage = |args: &[&str]| match explain(args) {
            Err(e) => e,
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
        assert!(usage(&["--explain-plan", "--nodes"]).contains("--nodes"));
        for bad in ["0", "fast", "inf", "nan"] {
            let args = [
                "--explain-plan",
                "--nodes",
                "8",
                "--gpus-per-node",
                "1",
                "--network-gbs",
                bad,
            ];
            assert!(usage(&args).contains("invalid --network-gbs"), "{bad}");
        }
        // A check's flag before the mode is refused, not silently dropped.
        let e = usage(&["--plan", "full", "--explain-plan", "--nodes", "2"]);
        assert!(e.contains("cannot be used with"), "{e}");
    }

    #[test]
    fn help_teaches_the_mode() {
        let h = explain(&["--explain-plan", "--help"]).expect("help");
        assert!(
            h.contains("--gpus-per-node <G>") && h.contains("Examples:"),
            "{h}"
        );
    }
}
