//! The command line as typed: clap's definition of every flag, mode and help text (the "low"
//! layer; `options.rs` turns it into validated [`super::Options`]). Reads no environment.

use super::explain::ExplainArgs;
use clap::{Parser, Subcommand};
use nccl_check_contract::exit::ExitCode;
use std::path::PathBuf;

/// The width clap wraps help to when it cannot ask the terminal; every line of the text below
/// fits in it, so clap never breaks one mid-sentence (a test renders it).
const HELP_WIDTH: usize = 100;

const AFTER_HELP: &str = "\
Examples:
  nccl-check                                  quick plan: all_reduce 256M + every GPU pair (~2.5 s)
  nccl-check --explain-thresholds             which thresholds apply to these GPUs, and why
  nccl-check --explain-thresholds --gpu-model H200 --gpus 8
                                              the same for a model, without a GPU
  nccl-check --explain-plan --nodes 1024 --gpus-per-node 8 [--config F] [--gpu-model M] [--json]
                                              rounds, modeled time, the rule that ends a healthy
                                              check (no GPU)
  nccl-check --check-config [FILE]            validate the config, print what it sets and where
                                              (exit 0/2)
  nccl-check --plan full --plot r.svg         six collectives 32M..1G + pairs; busbw drawn vs size
  nccl-check all -b 32M -e 8G                 all six collectives, 32 MiB to 8 GiB (nccl-tests'
                                              sweep)
  nccl-check sendrecv,alltoall --json r.json  two collectives, JSON report
  srun -N2 --ntasks-per-node=1 nccl-check     one process per node, ranks and rendezvous from Slurm
  nccl-check --rank 1 --world 2 --rendezvous node01:29500
                                              without Slurm (run rank 0 on node01)

Output: nccl-tests' table on stdout (same columns), progress and the verdict line on stderr.

Exit codes:
";

#[derive(Parser, Debug)]
#[command(
    name = "nccl-check",
    version,
    about = "Measure NCCL collectives on this node's GPUs (or a whole job's) exactly as \
             nccl-tests does, verify every byte, and say PASS, FAIL or ERROR.",
    after_help = after_help(),
    // The modes are flags (`nccl-check --check-config`), not words: `help` stays a collective
    // name clap would otherwise take, and a check's flags before a mode are refused, not dropped.
    disable_help_subcommand = true,
    args_conflicts_with_subcommands = true
)]
pub(super) struct RawArgs {
    /// A mode other than the check itself (`--check-config`, `--explain-plan`).
    #[command(subcommand)]
    pub mode: Option<Mode>,

    /// Collectives to run, comma-separated: all_reduce, all_gather, reduce_scatter, broadcast,
    /// alltoall, sendrecv, or all [default: from --plan]
    pub collectives: Option<String>,

    /// What to run, from the config's [plans]: quick = all_reduce 256M + the GPU pair matrix;
    /// full = all six collectives 32M..1G + the pair matrix. Collectives or -b/-e on the command
    /// line replace the plan's steps (no pair matrix then)
    #[arg(long, default_value = "quick")]
    pub plan: String,
    /// Thresholds, outlier rule and plans [env: NCCL_CHECK_CONFIG; default:
    /// /etc/nccl-check/nccl-check.toml when it exists, over the built-in defaults]
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print which thresholds apply to this node's GPUs and why, then exit
    #[arg(long = "explain-thresholds")]
    pub explain_thresholds: bool,
    /// With --explain-thresholds: this GPU model instead of this node's (--gpus N: count, default 8)
    #[arg(long = "gpu-model")]
    pub gpu_model: Option<String>,
    /// Print the GPUs this version knows by PCI device ID (form factor, memory, NVLink, source)
    /// and exit; `sku` in a [[thresholds]] rule names one of them
    #[arg(long = "list-skus")]
    pub list_skus: bool,

    /// Smallest size in bytes (K, M, G suffixes) [default: from --plan]
    #[arg(short = 'b', long = "minbytes")]
    pub min_bytes: Option<String>,
    /// Largest size in bytes [default: --minbytes when given, else from --plan]
    #[arg(short = 'e', long = "maxbytes")]
    pub max_bytes: Option<String>,
    /// Multiply the size by this between rows
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub step_factor: u64,
    /// Timed iterations per size [default: from --plan; 20 with command-line collectives/sizes]
    #[arg(short = 'n', long)]
    pub iters: Option<u32>,
    /// Warm-up operations per size before timing [default: from --plan; 5 with command-line
    /// collectives/sizes]
    #[arg(short = 'w', long = "warmup-iters")]
    pub warmup_iters: Option<u32>,
    /// Data type: float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64
    #[arg(short = 'd', long, default_value = "float")]
    pub datatype: String,
    /// Reduction: sum, prod, max, min
    #[arg(short = 'o', long, default_value = "sum")]
    pub op: String,
    /// Root rank of broadcast
    #[arg(short = 'r', long, default_value_t = 0)]
    pub root: u32,
    /// Verify the results bit for bit (1) or not (0)
    #[arg(short = 'c', long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub check: u8,

    /// GPUs this process drives, as device indices (e.g. 0,1) [default: every visible GPU]
    #[arg(long)]
    pub gpus: Option<String>,
    /// This process's rank among --world processes [default: $SLURM_PROCID or 0]
    #[arg(long)]
    pub rank: Option<String>,
    /// Number of processes joined into one check [default: $SLURM_NTASKS or 1]
    #[arg(long)]
    pub world: Option<String>,
    /// HOST:PORT where rank 0 listens for the others [default: $NCCL_CHECK_RENDEZVOUS; under
    /// Slurm the first task of the step's first node coordinates, on a port in 29501-29999 from
    /// the job and step ids]. Peers prove they belong to the check with $NCCL_CHECK_SECRET (the
    /// srun plugin sets one per step; outside Slurm: export NCCL_CHECK_SECRET=$(openssl rand -hex
    /// 32) for every process), else under Slurm with MUNGE credentials of your own uid.
    #[arg(long)]
    pub rendezvous: Option<String>,
    /// Under Slurm: derive the rendezvous ports from this range, LO-HI [default: 29501-29999]
    #[arg(long = "port-range")]
    pub port_range: Option<String>,
    /// Lines on stderr while the check runs: one as each phase begins, and one every few
    /// seconds (phase, elapsed, budget)
    #[arg(long)]
    pub progress: bool,
    /// Tests and labs only: processes of this check may share a GPU (emulated nodes with
    /// NCCL_HOSTID); their local probes take turns and the report says they shared it.
    /// Without it two processes on one GPU are an ERROR [env: NCCL_CHECK_SHARED_GPUS=1]
    #[arg(long = "shared-gpus")]
    pub shared_gpus: bool,

    /// Give up after this many seconds with ERROR (exit 6), saying what was awaited
    #[arg(long, default_value = "60")]
    pub timeout: String,
    /// FAIL when any row's busbw (GB/s) is below this (in addition to the config's thresholds)
    #[arg(long = "min-busbw")]
    pub min_busbw: Option<f64>,
    /// Path of libnccl.so.2 [env: NCCL_CHECK_NCCL_LIB; default: the library path]
    #[arg(long = "nccl-lib")]
    pub nccl_lib: Option<PathBuf>,
    /// Write the JSON report here
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// SHARP: enable CollNet (NCCL_COLLNET_ENABLE=1) and FAIL when NCCL did not use it
    #[arg(long = "expect-collnet")]
    pub expect_collnet: bool,
    /// NVLink SHARP: enable NVLS (NCCL_NVLS_ENABLE=1) and FAIL when NCCL did not use it
    #[arg(long = "expect-nvls")]
    pub expect_nvls: bool,
    /// Draw busbw against message size per collective, with the thresholds and the reference
    /// curve, into this SVG file (process rank 0)
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print only the verdict line (no table)
    #[arg(short, long)]
    pub quiet: bool,
    /// Node pairs: adaptive (localization rounds only when the allocation-wide collective is
    /// slow), full (every node pair, N-1 rounds), auto (full up to 3 nodes, else adaptive)
    #[arg(long = "pair-matrix", default_value = "auto", value_parser = crate::model::pairs::PairMatrix::parse)]
    pub pair_matrix: crate::model::pairs::PairMatrix,
}

fn after_help() -> String {
    // The contract's table, its long meanings wrapped under their own column.
    let mut table = String::new();
    for line in ExitCode::help_table().lines() {
        let indent = " ".repeat(line.find(|c: char| c.is_ascii_lowercase()).unwrap_or(0));
        let lead = line.len() - line.trim_start().len();
        let mut row = line[..lead].to_string();
        for word in line[lead..].split(' ') {
            if row.len() > indent.len() && row.len() + 1 + word.len() > HELP_WIDTH {
                table += &format!("{}\n", row.trim_end());
                row = indent.clone();
            } else if row.len() > lead {
                row.push(' ');
            }
            row.push_str(word);
        }
        table += &format!("{}\n", row.trim_end());
    }
    format!("{AFTER_HELP}{table}")
}

/// The modes that are not a check: each needs no GPU and loads no NCCL.
#[derive(Subcommand, Debug)]
pub(super) enum Mode {
    /// Validate the worker's config over the built-in defaults and print every effective key
    /// with the file and line it comes from, then whether this node can run a check (GPUs
    /// listed, NCCL loadable). Exit 0: valid and ready; 2: INVALID or NOT READY (said on stdout)
    #[command(
        name = "check-config",
        long_flag = "check-config",
        after_help = "The file: FILE, else $NCCL_CHECK_CONFIG, else /etc/nccl-check/nccl-check.toml \
                      when it exists (else the built-in defaults alone).\n\
                      Example: nccl-check --check-config /etc/nccl-check/nccl-check.toml"
    )]
    CheckConfig {
        /// The config to check [default: $NCCL_CHECK_CONFIG, else /etc/nccl-check/nccl-check.toml]
        file: Option<PathBuf>,
    },
    /// Explain the plan of a check of N nodes x G GPUs without running it: the rounds of each
    /// phase, the modeled seconds (healthy and worst case) and the config rule that ends a
    /// healthy check. Exit 0, or 2 with one usage line
    #[command(name = "explain-plan", long_flag = "explain-plan")]
    ExplainPlan(ExplainArgs),
}
