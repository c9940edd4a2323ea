//! No output cites a file that is not installed. `--explain-thresholds`,
//! `--explain-plan` and the rules' `source` strings cited `shared/notes/...` and
//! `bench-core/benchmarks/results/...`, paths of the source tree that an admin with the package
//! does not have. Every text the worker prints for people is scanned here for a path relative to
//! the repository (or to the project's steering repository, `shared/`); a measurement it cites
//! must be under /usr/share/nccl-check/results/, which packaging/build.sh fills from
//! bench-core/benchmarks/results/ (the packaging suite checks the installed files).

use std::path::{Path, PathBuf};
use std::process::Command;

const RESULTS: &str = "/usr/share/nccl-check/results/";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn worker(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-check"))
        .args(args)
        .env("NCCL_CHECK_CONFIG", "")
        .env_remove("SLURM_PROCID")
        .env_remove("NCCL_CHECK_NCCL_LIB")
        .output()
        .expect("nccl-check runs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The words of `text` that name a file or directory of the source tree: a path starting with
/// one of the repository's top-level directories (or `shared/`, the steering repository's), or
/// a top-level file of it (`README.md`), not preceded by `/` (an absolute path or a URL).
pub fn repo_relative_paths(text: &str, top: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || "()[]\"'`,;<>".contains(c)) {
        let word = word.trim_end_matches(['.', ':']);
        if word.is_empty() || word.contains("://") || word.starts_with('/') {
            continue;
        }
        let first = word.split('/').next().unwrap_or("");
        if (word.contains('/') && top.iter().any(|t| t == first))
            || top.iter().any(|t| t == word && t.ends_with(".md"))
        {
            found.push(word.to_string());
        }
    }
    found
}

/// The repository's top-level names people would cite, and `shared` (the steering repo's notes).
fn top_level() -> Vec<String> {
    let mut top: Vec<String> = std::fs::read_dir(repo())
        .expect("repo root")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    top.push("shared".into());
    top
}

/// Every cited installed result (`/usr/share/nccl-check/results/...`) in `text`.
fn cited_results(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "()[]\"'`,;<>".contains(c))
        .filter_map(|w| w.find(RESULTS).map(|i| &w[i + RESULTS.len()..]))
        .map(|rest| rest.trim_end_matches(['.', ':']).to_string())
        .collect()
}

/// What the worker prints for people without a GPU: help, the SKU table, the plan model and its
/// constants, the thresholds of every model in the SKU table at every GPU count a rule names.
fn printed() -> String {
    let mut all = worker(&["--help"]);
    all += &worker(&["--list-skus"]);
    all += &worker(&["--check-config"]);
    all += &worker(&["--explain-plan", "--nodes", "64", "--gpus-per-node", "8"]);
    all += &worker(&[
        "--explain-plan",
        "--nodes",
        "64",
        "--gpus-per-node",
        "8",
        "--json",
    ]);
    let models: Vec<String> = worker(&["--list-skus"])
        .lines()
        .flat_map(|l| l.split('|').map(str::trim).map(str::to_string))
        .filter(|w| w.starts_with("NVIDIA "))
        .collect();
    let mut models = models;
    models.extend(
        [
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H200",
            "NVIDIA A100-SXM4-80GB",
            "NVIDIA B200",
        ]
        .map(String::from),
    );
    for m in &models {
        for g in ["2", "4", "8"] {
            all += &worker(&["--explain-thresholds", "--gpu-model", m, "--gpus", g]);
        }
    }
    // Every rule's source, whether or not a model above reaches it.
    let defaults = std::fs::read_to_string(repo().join("bench-core/config/defaults.toml"))
        .expect("defaults.toml");
    for line in defaults
        .lines()
        .filter(|l| l.trim_start().starts_with("source"))
    {
        all += line;
        all += "\n";
    }
    all
}

#[test]
fn the_scanner_finds_repo_paths_and_passes_installed_ones_and_urls() {
    let top: Vec<String> = ["bench-core", "shared", "README.md", "tests"]
        .map(String::from)
        .to_vec();
    let text = "(shared/notes/peer-tools.md sec. 5) bench-core/benchmarks/results/x/: README.md \
                'Measured' /usr/share/doc/nccl-check-slurm24.11/README.md \
                https://github.com/coreweave/nccl-tests/blob/master/README.md GB/s tests";
    assert_eq!(
        repo_relative_paths(text, &top),
        [
            "shared/notes/peer-tools.md",
            "bench-core/benchmarks/results/x/",
            "README.md"
        ]
    );
    assert_eq!(
        cited_results("(medians in /usr/share/nccl-check/results/a/b.txt)."),
        ["a/b.txt"]
    );
}

#[test]
fn printed_text_cites_no_file_of_the_source_tree() {
    let text = printed();
    let bad = repo_relative_paths(&text, &top_level());
    assert!(
        bad.is_empty(),
        "the worker prints paths of the source tree, which the package does not install \
         (cite the installed copy under {RESULTS} or a public URL): {bad:?}"
    );
}

#[test]
fn every_cited_result_exists_in_the_tree_build_sh_ships_from() {
    let text = printed();
    let cited = cited_results(&text);
    assert!(
        !cited.is_empty(),
        "the plan model cites its measurements: {text:.400}"
    );
    let results = repo().join("bench-core/benchmarks/results");
    for c in &cited {
        assert!(
            results.join(c).exists(),
            "{RESULTS}{c} is cited but bench-core/benchmarks/results/{c} does not exist"
        );
    }
}
