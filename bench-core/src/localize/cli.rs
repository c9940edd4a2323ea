//! `nccl-check --explain-plan --nodes N --gpus-per-node G [--config FILE] [--plan NAME]
//! [--gpu-model NAME] [--json]`: parsed by hand before the worker's own options (no CUDA, no NCCL
//! is loaded for it), because `--json` is a flag here while the worker's `--json` takes a path.
//! The config is the worker's (`--config`, else `$NCCL_CHECK_CONFIG`, else
//! /etc/nccl-check/nccl-check.toml when it exists, over the built-in defaults): the plan it
//! explains and the rule that ends a healthy check after phase B are the ones a check would use.

use super::explain_plan;
use super::site::Workload;
use crate::config::worker::WorkerConfig;
use std::path::PathBuf;

/// How `--explain-plan` ended: `Ok`: the text to print (exit 0); `Err`: a usage error (exit 2).
pub type PlanCli = Result<String, String>;

/// What `--explain-plan` was asked.
#[derive(Debug, Default)]
struct Request {
    nodes: usize,
    gpus: usize,
    json: bool,
    config: Option<PathBuf>,
    plan: Option<String>,
    gpu_model: Option<String>,
}

/// `None` when `args` (program name first) do not ask for `--explain-plan`. `env` is the
/// worker's environment (`NCCL_CHECK_CONFIG`).
pub fn intercept(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Option<PlanCli> {
    if !args.iter().skip(1).any(|a| a == "--explain-plan") {
        return None;
    }
    Some(parse(&args[1..]).and_then(|r| run(r, env)))
}

fn run(r: Request, env: &dyn Fn(&str) -> Option<String>) -> PlanCli {
    let path = r.config.clone().or_else(|| {
        env("NCCL_CHECK_CONFIG")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    });
    let config = WorkerConfig::load(path.as_deref()).map_err(|e| format!("config: {e}"))?;
    let plan = r.plan.as_deref().unwrap_or("quick");
    // A shape the model refuses is said by the model (its error names the limits).
    let workload = Workload::from_config(&config, plan, r.gpu_model.as_deref(), r.nodes, r.gpus)?;
    let text = explain_plan(r.nodes, r.gpus, r.json, &workload);
    if text.starts_with("error: ") || text.starts_with("{\"error\"") {
        Err(first_error(&text))
    } else if r.json {
        Ok(text + "\n")
    } else {
        Ok(text)
    }
}

fn first_error(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => v["error"].as_str().unwrap_or(text).to_string(),
        Err(_) => text.trim().trim_start_matches("error: ").to_string(),
    }
}

const USAGE: &str =
    "--nodes N --gpus-per-node G [--config FILE] [--plan NAME] [--gpu-model NAME] [--json]";

fn parse(args: &[String]) -> Result<Request, String> {
    let mut r = Request::default();
    let (mut nodes, mut gpus) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("--explain-plan: {what} needs a value"))
        };
        let count = |what: &str, v: String| -> Result<usize, String> {
            v.parse::<usize>().map_err(|_| {
                format!("--explain-plan: invalid {what} '{v}': expected a positive integer")
            })
        };
        match key {
            "--explain-plan" if inline.is_none() => {}
            "--json" if inline.is_none() => r.json = true,
            "--nodes" => nodes = Some(count("--nodes", value("--nodes")?)?),
            "--gpus-per-node" => gpus = Some(count("--gpus-per-node", value("--gpus-per-node")?)?),
            "--config" => r.config = Some(PathBuf::from(value("--config")?)),
            "--plan" => r.plan = Some(value("--plan")?),
            "--gpu-model" => r.gpu_model = Some(value("--gpu-model")?),
            other => return Err(format!("--explain-plan takes only {USAGE}, not '{other}'")),
        }
    }
    match (nodes, gpus) {
        (Some(n), Some(g)) => {
            r.nodes = n;
            r.gpus = g;
            Ok(r)
        }
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
        intercept(&v, &|_| None)
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
