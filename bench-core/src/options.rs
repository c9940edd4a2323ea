//! The command line, parsed low (clap, raw strings) then high (a validated [`Options`]); the
//! rest of the program never sees a raw string. Slurm's environment fills rank, world and the
//! rendezvous address when flags do not.

use crate::collectives::{self, Collective};
use crate::config::worker::{Step, WorkerConfig};
use crate::datatype::{DataType, RedOp};
pub use crate::rendezvous::auth::Credential;
use crate::size::parse_size;
use crate::verdict::ExitCode;
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

pub mod env;
mod gpus;

const AFTER_HELP: &str = "\
Examples:
  nccl-check                                  quick plan: all_reduce 256M + every GPU pair (~2.5 s)
  nccl-check --explain-thresholds             which thresholds apply to these GPUs, and their sources
  nccl-check --explain-thresholds --gpu-model H200 --gpus 8   the same for a model, without a GPU
  nccl-check --explain-plan --nodes 1024 --gpus-per-node 8 [--config F] [--gpu-model M] [--json]
                                              rounds, modeled time, the rule that ends a healthy check (no GPU)
  nccl-check --check-config [FILE]            validate the config, print what it sets and where (exit 0/2)
  nccl-check --plan full --plot r.svg         six collectives 32M..1G + pairs; busbw drawn vs size
  nccl-check all -b 32M -e 8G                 all six collectives, 32 MiB to 8 GiB (nccl-tests sweep)
  nccl-check sendrecv,alltoall --json r.json  two collectives, JSON report
  srun -N2 --ntasks-per-node=1 nccl-check     one process per node, ranks and rendezvous from Slurm
  nccl-check --rank 1 --world 2 --rendezvous node01:29500   without Slurm (run rank 0 on node01)

Output: nccl-tests' table on stdout (same columns), progress and the verdict line on stderr.

Exit codes:
";

#[derive(Parser, Debug)]
#[command(
    name = "nccl-check",
    version,
    about = "Measure NCCL collectives on this node's GPUs (or a whole job's) exactly as \
             nccl-tests does, verify every byte, and say PASS, FAIL or ERROR.",
    after_help = after_help()
)]
struct Raw {
    /// Collectives to run, comma-separated: all_reduce, all_gather, reduce_scatter, broadcast,
    /// alltoall, sendrecv, or all [default: from --plan]
    collectives: Option<String>,

    /// What to run, from the config's [plans]: quick = all_reduce 256M + the GPU pair matrix;
    /// full = all six collectives 32M..1G + the pair matrix. Collectives or -b/-e on the command
    /// line replace the plan's steps (no pair matrix then)
    #[arg(long, default_value = "quick")]
    plan: String,
    /// Thresholds, outlier rule and plans [env: NCCL_CHECK_CONFIG; default:
    /// /etc/nccl-check/nccl-check.toml when it exists, over the built-in defaults]
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print which thresholds apply to this node's GPUs and why, then exit
    #[arg(long = "explain-thresholds")]
    explain_thresholds: bool,
    /// With --explain-thresholds: this GPU model instead of this node's (--gpus N: count, default 8)
    #[arg(long = "gpu-model")]
    gpu_model: Option<String>,
    /// Print the GPUs this version knows by PCI device ID (form factor, memory, NVLink, source)
    /// and exit; `sku` in a [[thresholds]] rule names one of them
    #[arg(long = "list-skus")]
    list_skus: bool,

    /// Smallest size in bytes (K, M, G suffixes) [default: from --plan]
    #[arg(short = 'b', long = "minbytes")]
    min_bytes: Option<String>,
    /// Largest size in bytes [default: --minbytes when given, else from --plan]
    #[arg(short = 'e', long = "maxbytes")]
    max_bytes: Option<String>,
    /// Multiply the size by this between rows
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    step_factor: u64,
    /// Timed iterations per size [default: from --plan; 20 with command-line collectives/sizes]
    #[arg(short = 'n', long)]
    iters: Option<u32>,
    /// Warm-up operations per size before timing [default: from --plan; 5 with command-line
    /// collectives/sizes]
    #[arg(short = 'w', long = "warmup-iters")]
    warmup_iters: Option<u32>,
    /// Data type: float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64
    #[arg(short = 'd', long, default_value = "float")]
    datatype: String,
    /// Reduction: sum, prod, max, min
    #[arg(short = 'o', long, default_value = "sum")]
    op: String,
    /// Root rank of broadcast
    #[arg(short = 'r', long, default_value_t = 0)]
    root: u32,
    /// Verify the results bit for bit (1) or not (0)
    #[arg(short = 'c', long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    check: u8,

    /// GPUs this process drives, as device indices (e.g. 0,1) [default: every visible GPU]
    #[arg(long)]
    gpus: Option<String>,
    /// This process's rank among --world processes [default: $SLURM_PROCID or 0]
    #[arg(long)]
    rank: Option<String>,
    /// Number of processes joined into one check [default: $SLURM_NTASKS or 1]
    #[arg(long)]
    world: Option<String>,
    /// HOST:PORT where rank 0 listens for the others [default: $NCCL_CHECK_RENDEZVOUS; under
    /// Slurm the first task of the step's first node coordinates, on a port in 29501-29999 from the job and step ids]
    /// Peers prove they belong to the check with $NCCL_CHECK_SECRET (the srun plugin sets one
    /// per step; outside Slurm: export NCCL_CHECK_SECRET=$(openssl rand -hex 32) for every
    /// process), else under Slurm with MUNGE credentials of your own uid.
    #[arg(long, verbatim_doc_comment)]
    rendezvous: Option<String>,
    /// Under Slurm: derive the rendezvous ports from this range, LO-HI [default: 29501-29999]
    #[arg(long = "port-range")]
    port_range: Option<String>,
    /// A line on stderr every few seconds while the check runs: phase, elapsed, budget
    #[arg(long)]
    progress: bool,
    /// Tests and labs only: processes of this check may share a GPU (emulated nodes with
    /// NCCL_HOSTID); their local probes take turns and the report says they shared it.
    /// Without it two processes on one GPU are an ERROR [env: NCCL_CHECK_SHARED_GPUS=1]
    #[arg(long = "shared-gpus")]
    shared_gpus: bool,

    /// Give up after this many seconds with ERROR (exit 6), saying what was awaited
    #[arg(long, default_value = "60")]
    timeout: String,
    /// FAIL when any row's busbw (GB/s) is below this (in addition to the config's thresholds)
    #[arg(long = "min-busbw")]
    min_busbw: Option<f64>,
    /// Path of libnccl.so.2 [env: NCCL_CHECK_NCCL_LIB; default: the library path]
    #[arg(long = "nccl-lib")]
    nccl_lib: Option<PathBuf>,
    /// Write the JSON report here
    #[arg(long)]
    json: Option<PathBuf>,
    /// SHARP: enable CollNet (NCCL_COLLNET_ENABLE=1) and FAIL when NCCL did not use it
    #[arg(long = "expect-collnet")]
    expect_collnet: bool,
    /// NVLink SHARP: enable NVLS (NCCL_NVLS_ENABLE=1) and FAIL when NCCL did not use it
    #[arg(long = "expect-nvls")]
    expect_nvls: bool,
    /// Draw busbw against message size per collective, with the thresholds and the reference
    /// curve, into this SVG file (process rank 0)
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Print only the verdict line (no table)
    #[arg(short, long)]
    quiet: bool,
    /// Node pairs: adaptive (localization rounds only when the allocation-wide collective is
    /// slow), full (every node pair, N-1 rounds), auto (full up to 3 nodes, else adaptive)
    #[arg(long = "pair-matrix", default_value = "auto", value_parser = crate::localize::PairMatrix::parse)]
    pair_matrix: crate::localize::PairMatrix,
}

fn after_help() -> String {
    format!("{AFTER_HELP}{}", ExitCode::help_table())
}

/// Validated options.
#[derive(Debug)]
pub struct Options {
    /// The steps to run: the plan's, or one per command-line collective.
    pub steps: Vec<Step>,
    pub plan: String,
    pub config: WorkerConfig,
    pub explain_thresholds: bool,
    /// `--gpu-model NAME --gpus N`: explain for this model and GPU count, asking no GPU.
    pub gpu_model: Option<(String, u32)>,
    pub expect_collnet: bool,
    pub expect_nvls: bool,
    pub plot: Option<PathBuf>,
    pub collectives: Vec<&'static dyn Collective>,
    pub sizes: Vec<u64>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    pub iters: u32,
    pub warmup_iters: u32,
    pub datatype: DataType,
    pub op: RedOp,
    pub root: u32,
    pub check: bool,
    pub gpus: Option<Vec<usize>>,
    pub rank: u32,
    pub world: u32,
    pub rendezvous: Option<String>,
    /// Candidate ports of the rendezvous, in order (one when given explicitly).
    pub ports: Vec<u16>,
    /// The range the Slurm candidates come from (`--port-range`).
    pub port_range: crate::slurm_rendezvous::PortRange,
    pub progress: bool,
    /// Processes of this check may share a GPU (`--shared-gpus`, NCCL_CHECK_SHARED_GPUS=1).
    pub shared_gpus: bool,
    /// This step's name in every proof: `slurm-<job>.<step>`, or `manual`.
    pub label: String,
    /// True in the process that listens (see `rendezvous::Setup::coordinator`).
    pub coordinator: bool,
    /// How peers prove they belong to this check.
    pub credential: Credential,
    /// munged's socket when not the default ($NCCL_CHECK_MUNGE_SOCKET).
    pub munge_socket: Option<PathBuf>,
    pub timeout: Duration,
    pub min_busbw: Option<f64>,
    pub nccl_lib: Option<PathBuf>,
    pub json: Option<PathBuf>,
    pub quiet: bool,
    /// `--pair-matrix`: how node pairs are measured (`localize`).
    pub pair_matrix: crate::localize::PairMatrix,
}

/// Parses the command line; `Err` carries clap's own exit (help, version) or a usage error line.
pub fn parse<I, T>(args: I, env: &dyn Fn(&str) -> Option<String>) -> Result<Options, ParseExit>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    // --explain-plan needs no GPU or NCCL, and its --json is a flag (localize::cli).
    let lossy: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(done) = crate::localize::cli::intercept(&lossy, env) {
        return Err(done.map_or_else(ParseExit::Usage, ParseExit::Info));
    }
    let raw = Raw::try_parse_from(args).map_err(|e| match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            ParseExit::Info(e.to_string())
        }
        _ => ParseExit::Usage(first_line(&e.to_string())),
    })?;
    if raw.list_skus {
        return Err(ParseExit::Info(crate::sku::list()));
    }
    validate(raw, env).map_err(ParseExit::Usage)
}

/// How parsing ended without options.
#[derive(Debug)]
pub enum ParseExit {
    /// `--help` or `--version`: print and exit 0.
    Info(String),
    /// A usage error: one line, exit 2.
    Usage(String),
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

fn parse_u32(what: &str, v: &str) -> Result<u32, String> {
    v.trim()
        .parse::<u32>()
        .map_err(|_| format!("invalid {what} '{v}': expected a non-negative integer"))
}

fn validate(raw: Raw, env: &dyn Fn(&str) -> Option<String>) -> Result<Options, String> {
    let config_path = raw.config.clone().or_else(|| {
        env("NCCL_CHECK_CONFIG")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    });
    let config = WorkerConfig::load(config_path.as_deref()).map_err(|e| format!("config: {e}"))?;
    let plan = config.plans.get(&raw.plan).ok_or_else(|| {
        format!(
            "unknown plan '{}' (plans: {})",
            raw.plan,
            config.plans.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    })?;
    if raw.step_factor < 2 {
        return Err(format!(
            "invalid stepfactor {}: must be at least 2",
            raw.step_factor
        ));
    }
    if raw.iters == Some(0) {
        return Err("invalid iters 0: at least one timed iteration is needed".into());
    }
    // Command-line collectives or sizes make an ad-hoc plan, nccl-tests style.
    let adhoc = raw.collectives.is_some() || raw.min_bytes.is_some() || raw.max_bytes.is_some();
    let steps: Vec<Step> = if adhoc {
        let collectives =
            collectives::parse_list(raw.collectives.as_deref().unwrap_or("all_reduce"))?;
        let min_bytes = parse_size(raw.min_bytes.as_deref().unwrap_or("256M"))?;
        let max_bytes = match raw.max_bytes.as_deref() {
            Some(m) => parse_size(m)?,
            // -b alone measures just that size.
            None if raw.min_bytes.is_some() => min_bytes,
            None => parse_size("256M")?,
        };
        if min_bytes > max_bytes {
            return Err(format!(
                "minbytes {min_bytes} is larger than maxbytes {max_bytes}"
            ));
        }
        let mut sizes = vec![];
        let mut s = min_bytes;
        while s <= max_bytes {
            sizes.push(s);
            if s == 0 {
                break;
            }
            s = s.saturating_mul(raw.step_factor);
        }
        collectives
            .into_iter()
            .map(|collective| Step::Collective {
                collective,
                sizes: sizes.clone(),
                warmup: raw.warmup_iters.unwrap_or(5),
                iters: raw.iters.unwrap_or(20),
            })
            .collect()
    } else {
        plan.steps
            .iter()
            .map(|s| match s.clone() {
                Step::Collective {
                    collective,
                    sizes,
                    warmup,
                    iters,
                } => Step::Collective {
                    collective,
                    sizes,
                    warmup: raw.warmup_iters.unwrap_or(warmup),
                    iters: raw.iters.unwrap_or(iters),
                },
                Step::Pairs {
                    bytes,
                    warmup,
                    iters,
                } => Step::Pairs {
                    bytes,
                    warmup: raw.warmup_iters.unwrap_or(warmup),
                    iters: raw.iters.unwrap_or(iters),
                },
            })
            .collect()
    };
    let collectives: Vec<&'static dyn Collective> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Collective { collective, .. } => Some(*collective),
            Step::Pairs { .. } => None,
        })
        .collect();
    let all_sizes: Vec<u64> = steps
        .iter()
        .flat_map(|s| match s {
            Step::Collective { sizes, .. } => sizes.clone(),
            Step::Pairs { bytes, .. } => vec![*bytes],
        })
        .collect();
    let min_bytes = all_sizes.iter().copied().min().unwrap_or(0);
    let max_bytes = all_sizes.iter().copied().max().unwrap_or(0);
    let sizes = match steps.first() {
        Some(Step::Collective { sizes, .. }) => sizes.clone(),
        _ => vec![],
    };
    let (warmup_iters, iters) = match steps.first() {
        Some(Step::Collective { warmup, iters, .. } | Step::Pairs { warmup, iters, .. }) => {
            (*warmup, *iters)
        }
        None => (0, 1),
    };
    let datatype = DataType::parse(&raw.datatype)?;
    let op = RedOp::parse(&raw.op)?;

    let gpus::GpuSelection {
        devices: gpus,
        model: gpu_model,
    } = gpus::parse(
        raw.gpus.as_deref(),
        raw.gpu_model.as_deref(),
        raw.explain_thresholds,
    )?;

    let world = match raw.world.or_else(|| env("SLURM_NTASKS")) {
        Some(w) => parse_u32("world", &w)?,
        None => 1,
    };
    let rank = match raw.rank.or_else(|| env("SLURM_PROCID")) {
        Some(r) => parse_u32("rank", &r)?,
        None => 0,
    };
    if world == 0 {
        return Err("invalid world 0: at least one process is needed".into());
    }
    if rank >= world {
        return Err(format!("invalid rank {rank}: must be below world {world}"));
    }
    let job = env("SLURM_JOB_ID");
    let step = env("SLURM_STEP_ID").unwrap_or_else(|| "0".into());
    let port_range = match &raw.port_range {
        Some(r) => crate::slurm_rendezvous::PortRange::parse(r).map_err(|e| e.to_string())?,
        None => crate::slurm_rendezvous::PortRange::DEFAULT,
    };
    let explicit = raw.rendezvous.or_else(|| env("NCCL_CHECK_RENDEZVOUS"));
    let (rendezvous, ports, coordinator) = match explicit {
        Some(r) => {
            let port = r
                .rsplit_once(':')
                .filter(|(h, _)| !h.is_empty())
                .and_then(|(_, p)| p.parse::<u16>().ok().filter(|&p| p > 0))
                .ok_or_else(|| format!("invalid rendezvous '{r}': expected HOST:PORT"))?;
            (Some(r), vec![port], rank == 0)
        }
        None if world > 1 => {
            let nodes = env("SLURM_STEP_NODELIST").or_else(|| env("SLURM_JOB_NODELIST"));
            match (nodes, &job) {
                (Some(nodes), Some(job)) => {
                    let secret = env("NCCL_CHECK_SECRET");
                    let ids = (job.as_str(), step.as_str(), secret.as_deref());
                    let (host, ports) = crate::slurm_rendezvous::of_step(&nodes, ids, port_range)?;
                    // The first task on the step's first node coordinates, whatever its rank
                    // (with -m arbitrary rank 0 may run elsewhere); without Slurm's node name, rank 0.
                    let coordinator = match (env("SLURMD_NODENAME"), env("SLURM_LOCALID")) {
                        (Some(node), Some(local)) => node == host && local == "0",
                        _ => rank == 0,
                    };
                    (Some(format!("{host}:{}", ports[0])), ports, coordinator)
                }
                _ => {
                    return Err(format!(
                        "world {world} needs --rendezvous HOST:PORT (or run under Slurm)"
                    ))
                }
            }
        }
        None => (None, Vec::new(), true),
    };
    let label = match &job {
        Some(j) => format!("slurm-{j}.{step}"),
        None => "manual".into(),
    };
    let credential = match env("NCCL_CHECK_SECRET") {
        Some(secret) => Credential::Secret(secret),
        None if job.is_some() => Credential::Munge,
        None if world > 1 => {
            return Err(format!(
                "world {world} outside Slurm needs a shared secret: export NCCL_CHECK_SECRET=$(openssl rand -hex 32) to every process"
            ))
        }
        None => Credential::None,
    };
    let timeout = raw
        .timeout
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t > 0.0 && *t <= 86400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("invalid timeout '{}': expected seconds, > 0", raw.timeout))?;
    if let Some(b) = raw.min_busbw {
        if !(b.is_finite() && b >= 0.0) {
            return Err(format!("invalid min-busbw '{b}'"));
        }
    }
    let nccl_lib = raw.nccl_lib.or_else(|| {
        env("NCCL_CHECK_NCCL_LIB")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    });
    let nccl_lib = nccl_lib.or_else(|| config.nccl_lib.clone()); // the site's, last
    Ok(Options {
        steps,
        plan: raw.plan,
        config,
        explain_thresholds: raw.explain_thresholds,
        gpu_model,
        expect_collnet: raw.expect_collnet,
        expect_nvls: raw.expect_nvls,
        plot: raw.plot,
        collectives,
        sizes,
        min_bytes,
        max_bytes,
        step_factor: raw.step_factor,
        iters,
        warmup_iters,
        datatype,
        op,
        root: raw.root,
        check: raw.check == 1,
        gpus,
        rank,
        world,
        rendezvous,
        ports,
        port_range,
        progress: raw.progress,
        shared_gpus: raw.shared_gpus
            || env("NCCL_CHECK_SHARED_GPUS").is_some_and(|v| v.trim() == "1"),
        label,
        coordinator,
        credential,
        munge_socket: env("NCCL_CHECK_MUNGE_SOCKET").map(PathBuf::from),
        timeout,
        min_busbw: raw.min_busbw,
        nccl_lib,
        quiet: raw.quiet || raw.json.as_deref() == Some("-".as_ref()), // --json -: no table
        json: raw.json,
        pair_matrix: raw.pair_matrix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(args: &[&str], vars: &[(&str, &str)]) -> Result<Options, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let mut a = vec!["nccl-check".to_string()];
        a.extend(args.iter().map(|s| s.to_string()));
        parse(a, &env).map_err(|e| match e {
            ParseExit::Usage(u) => u,
            ParseExit::Info(i) => i,
        })
    }

    #[test]
    fn quick_defaults() {
        let o = parse_with(&[], &[]).unwrap();
        assert_eq!(o.collectives.len(), 1);
        assert_eq!(o.sizes, vec![256 << 20]);
        assert_eq!((o.warmup_iters, o.iters, o.world, o.rank), (2, 5, 1, 0));
        assert!(matches!(o.steps[1], Step::Pairs { bytes, .. } if bytes == 256 << 20));
        let e = parse_with(&["--plan", "nope"], &[]).unwrap_err();
        assert!(
            e.contains("unknown plan 'nope' (plans: full, quick)"),
            "{e}"
        );
        assert!(o.check && o.rendezvous.is_none());
    }

    #[test]
    fn sweeps_double_like_nccl_tests() {
        let o = parse_with(&["all", "-b", "32M", "-e", "8G"], &[]).unwrap();
        assert_eq!(o.collectives.len(), 6);
        assert_eq!(o.sizes.len(), 9);
        assert_eq!(*o.sizes.last().unwrap(), 8 << 30);
        let o = parse_with(&["-b", "1M"], &[]).unwrap();
        assert_eq!(o.sizes, vec![1 << 20]);
    }

    #[test]
    fn bad_input_is_one_clear_line() {
        let cases = [
            (&["all_reduse"][..], "unknown collective 'all_reduse'"),
            (&["-b", "12Q"], "malformed size '12Q'"),
            (&["-b", "1G", "-e", "1M"], "larger than maxbytes"),
            (
                &["--rank", "2", "--world", "2"],
                "invalid rank 2: must be below world 2",
            ),
            (&["--rank", "x"], "invalid rank 'x'"),
            (&["--world", "0"], "invalid world 0"),
            (&["--world", "2"], "needs --rendezvous"),
            (
                &["--world", "2", "--rank", "1", "--rendezvous", "nohost"],
                "invalid rendezvous 'nohost'",
            ),
            (&["--timeout=-1"], "invalid timeout '-1'"),
            (&["-d", "float128"], "unknown datatype 'float128'"),
            (&["--gpus", "0,0"], "lists a GPU twice"),
            (&["--bogus"], "unexpected argument '--bogus'"),
        ];
        for (args, want) in cases {
            let e = parse_with(args, &[]).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
            assert!(!e.contains('\n'), "{args:?}: not one line: {e}");
        }
    }

    #[test]
    fn slurm_environment_fills_rank_world_and_rendezvous() {
        let env = [
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_NODELIST", "gpu[07-08]"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_ID", "0"),
        ];
        let o = parse_with(&[], &env).unwrap();
        assert_eq!((o.rank, o.world), (3, 4));
        // The plugin's address for the same step (bench_core::slurm_rendezvous pins the port).
        assert_eq!(o.rendezvous.as_deref(), Some("gpu07:29748"));
        assert_eq!(o.label, "slurm-1234.0");
        assert_eq!(o.credential, Credential::Munge);
        // flags win over the environment
        let o = parse_with(&["--rank", "0", "--world", "1"], &env).unwrap();
        assert_eq!((o.rank, o.world), (0, 1));
    }

    #[test]
    fn with_a_step_secret_the_ports_come_from_the_secret_not_the_ids() {
        let secret = "f00d".repeat(16);
        let env = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_NODELIST", "gpu[07-08]"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_ID", "0"),
            ("NCCL_CHECK_SECRET", secret.as_str()),
        ];
        let o = parse_with(&[], &env).unwrap();
        let want = crate::slurm_rendezvous::secret_candidates(
            secret.as_bytes(),
            "slurm-1234.0",
            crate::slurm_rendezvous::PortRange::DEFAULT,
        );
        assert_eq!(o.ports, want);
        assert_ne!(o.ports[0], 29748, "the port anyone computes from the ids");
        assert_eq!(o.rendezvous, Some(format!("gpu07:{}", want[0])));
    }

    #[test]
    fn the_slurm_rendezvous_host_is_a_host_of_the_list() {
        let with = |nodes: &str, job: &str| {
            let env = [
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_NODELIST", nodes),
                ("SLURM_JOB_ID", job),
                ("SLURM_STEP_ID", "0"),
            ];
            parse_with(&[], &env).map(|o| o.rendezvous.unwrap_or_default())
        };
        // Two bracket groups: this was "rack2-n[1-2]:PORT", which no node is called.
        assert_eq!(
            with("rack[2-3]-n[1-2]", "1234").as_deref(),
            Ok("rack2-n1:29748")
        );
        let e = with("rack[2-3", "1234").unwrap_err();
        assert!(e.contains("cannot read host list 'rack[2-3'"), "{e}");
        let e = with("n1", "12x").unwrap_err();
        assert!(e.contains("invalid SLURM_JOB_ID '12x'"), "{e}");
    }

    #[test]
    fn help_lists_exit_codes() {
        let h = parse_with(&["--help"], &[]).unwrap_err();
        assert!(
            h.contains("Exit codes:") && h.contains("6  ERROR timeout"),
            "{h}"
        );
    }

    #[test]
    fn pair_matrix_is_full_up_to_three_nodes_unless_told() {
        use crate::localize::PairMatrix;
        let o = parse_with(&[], &[]).unwrap();
        assert_eq!(o.pair_matrix, PairMatrix::Auto);
        assert!(o.pair_matrix.full_for(3) && !o.pair_matrix.full_for(4));
        let o = parse_with(&["--pair-matrix", "full"], &[]).unwrap();
        assert!(o.pair_matrix.full_for(64));
        let o = parse_with(&["--pair-matrix", "adaptive"], &[]).unwrap();
        assert!(!o.pair_matrix.full_for(2));
        let e = parse_with(&["--pair-matrix", "some"], &[]).unwrap_err();
        assert!(e.contains("invalid pair-matrix 'some'"), "{e}");
    }
}
