//! The command line, parsed low (clap, raw strings: `raw.rs`) then high (a validated
//! [`Options`], or a mode that is not a check); the rest of the program never sees a raw string.
//! Slurm's environment fills rank, world and the rendezvous address when flags do not
//! (`peers.rs`); the plan or the command line gives the steps (`steps.rs`).

use crate::config::worker::WorkerConfig;
use crate::model::collectives::Collective;
use crate::model::credential::Credential;
use crate::model::datatype::{DataType, RedOp};
use crate::model::step::Step;
use crate::settings::environment::{Environment, Lookup};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod env;
mod explain;
mod gpus;
mod peers;
mod raw;
mod steps;

pub use explain::ExplainArgs;
use raw::{Mode, RawArgs};

/// Validated options.
#[derive(Debug)]
pub struct Options {
    /// The node this process checks, as the environment names it: NCCL_HOSTID when set (NCCL
    /// treats such processes as separate nodes, and so does the verdict), else Slurm's node name
    /// (what an admin drains; with MULTIPLE_SLURMD every slurmd has the same host name); None:
    /// the host name.
    pub node_name: Option<String>,
    /// The Slurm partition of the job (`SLURM_JOB_PARTITION`): the network profile's selector.
    pub partition: Option<String>,
    /// `NCCL_CHECK_COMM_MODE` (how the node's GPU-pair communicators are made; for tests).
    pub comm_mode: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`, to say why no GPU is visible.
    pub cuda_visible_devices: Option<String>,
    /// `NCCL_CHECK_DEBUG_TIMING` is set: each timed loop records what it did (`loop_probe`).
    pub debug_timing: bool,
    /// The environment the worker started with, for the stages that read Slurm's and CUDA's
    /// variables (the node's facts, the step's layout).
    pub env: Environment,
    /// `NCCL_CHECK_SETUP` (for time-to-verdict comparisons on one binary): setup steps run in
    /// the older order, comma-separated: `probe-first` (the buffers and the local probe before
    /// NCCL's init starts), `pairs-by-round` (each round's warm-up connects its GPU pairs).
    pub setup: Option<String>,
    /// The steps to run: the plan's, or one per command-line collective.
    pub steps: Vec<Step>,
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
    pub port_range: nccl_check_contract::slurm_rendezvous::PortRange,
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
    pub pair_matrix: crate::model::pairs::PairMatrix,
}

impl Options {
    /// The node this process checks: [`Options::node_name`], else `host` (the host name). The
    /// one rule for the name the coordinator holds against the step's node list, a verdict
    /// names and the node's facts are looked up by.
    pub fn node_or_host(&self, host: &str) -> String {
        self.node_name.clone().unwrap_or_else(|| host.to_string())
    }
}

/// The command line as typed (clap has parsed it; no environment is read yet), and its
/// arguments too long to quote whole in a usage error.
#[derive(Debug)]
pub struct Args(RawArgs, Echo);

/// Most characters of one argument a usage error quotes. Clap quotes a bad value twice (its
/// own words and the parser's), `validate` once or twice: a 100 KB `--pair-matrix` value made
/// 200 KB of stderr. Every usage line goes through [`Echo::bound`], so the bound holds for
/// every option, present and future.
const MAX_ECHO: usize = 64;

/// The command line's arguments longer than [`MAX_ECHO`].
#[derive(Debug, Default)]
struct Echo(Vec<String>);

impl Echo {
    fn of(args: &[std::ffi::OsString]) -> Echo {
        let long = args.iter().map(|a| a.to_string_lossy().into_owned());
        Echo(long.filter(|a| a.chars().count() > MAX_ECHO).collect())
    }

    /// `msg` with each long argument (or its `--flag=` value) cut to its first [`MAX_ECHO`]
    /// characters and its length: the line still names the option and what is wrong.
    fn bound(&self, msg: String) -> String {
        self.0.iter().fold(msg, |msg, arg| {
            let value = match arg.split_once('=') {
                Some((flag, v)) if flag.starts_with("--") && v.chars().count() > MAX_ECHO => v,
                _ => arg.as_str(),
            };
            let cut: String = value.chars().take(MAX_ECHO).collect();
            msg.replace(value, &format!("{cut}... ({} bytes)", value.len()))
        })
    }
}

/// What a validated command line asks.
#[derive(Debug)]
pub enum Command {
    /// Run a check with these options.
    Check(Box<Options>),
    /// `--explain-plan`: answer it (`localize::cli::answer`) and exit 0.
    Explain(ExplainArgs),
}

impl Args {
    /// Clap's parse; `Err` carries clap's own exit (help, version) or a usage error line.
    pub fn parse(
        args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
    ) -> Result<Args, ParseExit> {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let echo = Echo::of(&args);
        let raw = RawArgs::try_parse_from(args).map_err(|e| match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                ParseExit::Info(e.to_string())
            }
            _ => ParseExit::Usage(echo.bound(first_line(&e.to_string()))),
        })?;
        if raw.list_skus {
            return Err(ParseExit::Info(crate::model::sku::list()));
        }
        Ok(Args(raw, echo))
    }

    /// `--check-config [FILE]`: `Some(FILE)` (itself optional) when that mode was asked. It
    /// runs before the environment is read (`facts::node_ready::check_file`).
    pub fn check_config(&self) -> Option<Option<&Path>> {
        match &self.0.mode {
            Some(Mode::CheckConfig { file }) => Some(file.as_deref()),
            _ => None,
        }
    }

    /// Validates the command line against the config and the environment.
    pub fn resolve(self, env: &Environment) -> Result<Command, ParseExit> {
        match &self.0.mode {
            None => {
                let config = load_config(&self.0, &|k| env.get(k))
                    .map_err(|e| ParseExit::Config(self.1.bound(e)))?;
                validate(self.0, config, env)
                    .map(|o| Command::Check(Box::new(o)))
                    .map_err(|e| ParseExit::Usage(self.1.bound(e)))
            }
            Some(Mode::ExplainPlan(args)) => Ok(Command::Explain(args.clone())),
            Some(Mode::CheckConfig { .. }) => Err(ParseExit::Usage(
                "--check-config is run by nccl-check itself, before its options".into(),
            )),
        }
    }
}

/// Parses the command line into the options of a check; `Err` carries clap's own exit (help,
/// version) or a usage error line (`--explain-plan` is one: it runs no check).
pub fn parse(
    args: impl IntoIterator<Item = impl Into<std::ffi::OsString> + Clone>,
    env: &Environment,
) -> Result<Options, ParseExit> {
    match Args::parse(args)?.resolve(env)? {
        Command::Check(o) => Ok(*o),
        Command::Explain(_) => Err(ParseExit::Usage(
            "--explain-plan runs no check: nccl-check answers it before any".into(),
        )),
    }
}

/// How parsing ended without options.
#[derive(Debug)]
pub enum ParseExit {
    /// `--help`, `--version`, `--list-skus` or `--explain-plan`: print and exit 0.
    Info(String),
    /// A usage error: one line, exit 2.
    Usage(String),
    /// The config file cannot be used (`config: FILE:LINE: ...`): one line, exit 2. Its keys
    /// are documented in the config files, not in `--help`.
    Config(String),
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

/// The high layer: every check in the order a user meets its error, then the options.
fn validate(
    raw: RawArgs,
    config: WorkerConfig,
    environment: &Environment,
) -> Result<Options, String> {
    let env = &|k: &str| environment.get(k);
    let plan = config.plan(&raw.plan)?;
    steps::check_counts(&raw)?;
    let steps = steps::of(&raw, &plan.steps)?;
    let summary = steps::Summary::of(&steps);
    let datatype = DataType::parse(&raw.datatype)?;
    let op = RedOp::parse(&raw.op)?;
    let (gpus, model) = (raw.gpus.as_deref(), raw.gpu_model.as_deref());
    let selected = gpus::parse_gpu_list(gpus, model, raw.explain_thresholds)?;
    let peers = peers::Peers::of(&raw, env)?;
    let timeout = timeout(&raw.timeout)?;
    if let Some(b) = raw.min_busbw.filter(|b| !(b.is_finite() && *b >= 0.0)) {
        return Err(format!("invalid min-busbw '{b}'"));
    }
    let nccl_lib = flag_or_env(&raw.nccl_lib, env, "NCCL_CHECK_NCCL_LIB");
    let nccl_lib = nccl_lib.or_else(|| config.nccl_lib.clone()); // the site's, last
    Ok(Options {
        node_name: ["NCCL_HOSTID", "SLURMD_NODENAME"]
            .iter()
            .find_map(|k| env(k).filter(|h| !h.is_empty())),
        partition: env("SLURM_JOB_PARTITION"),
        comm_mode: env("NCCL_CHECK_COMM_MODE"),
        cuda_visible_devices: env("CUDA_VISIBLE_DEVICES"),
        debug_timing: environment.get_os("NCCL_CHECK_DEBUG_TIMING").is_some(),
        env: environment.clone(),
        setup: env("NCCL_CHECK_SETUP"),
        steps,
        config,
        explain_thresholds: raw.explain_thresholds,
        gpu_model: selected.model,
        expect_collnet: raw.expect_collnet,
        expect_nvls: raw.expect_nvls,
        plot: raw.plot,
        collectives: summary.collectives,
        sizes: summary.sizes,
        min_bytes: summary.min_bytes,
        max_bytes: summary.max_bytes,
        step_factor: raw.step_factor,
        iters: summary.iters,
        warmup_iters: summary.warmup_iters,
        datatype,
        op,
        root: raw.root,
        check: raw.check == 1,
        gpus: selected.devices,
        rank: peers.rank,
        world: peers.world,
        rendezvous: peers.rendezvous,
        ports: peers.ports,
        port_range: peers.port_range,
        progress: raw.progress,
        shared_gpus: raw.shared_gpus
            || env("NCCL_CHECK_SHARED_GPUS").is_some_and(|v| v.trim() == "1"),
        label: peers.label,
        coordinator: peers.coordinator,
        credential: peers.credential,
        munge_socket: env("NCCL_CHECK_MUNGE_SOCKET").map(PathBuf::from),
        timeout,
        min_busbw: raw.min_busbw,
        nccl_lib,
        quiet: raw.quiet || raw.json.as_deref() == Some("-".as_ref()), // --json -: no table
        json: raw.json,
        pair_matrix: raw.pair_matrix,
    })
}

/// `--config`, else `$NCCL_CHECK_CONFIG`, else the default path, over the built-in defaults.
fn load_config(raw: &RawArgs, env: Lookup) -> Result<WorkerConfig, String> {
    let path = flag_or_env(&raw.config, env, "NCCL_CHECK_CONFIG");
    WorkerConfig::load(path.as_deref()).map_err(|e| format!("config: {e}"))
}

/// A path flag, else the environment's `key` when set and not empty.
fn flag_or_env(flag: &Option<PathBuf>, env: Lookup, key: &str) -> Option<PathBuf> {
    let from_env = || env(key).filter(|s| !s.is_empty()).map(PathBuf::from);
    flag.clone().or_else(from_env)
}

/// `--timeout`: seconds, above 0, at most a day.
fn timeout(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t > 0.0 && *t <= 86400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("invalid timeout '{text}': expected seconds, > 0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(args: &[&str], vars: &[(&str, &str)]) -> Result<Options, String> {
        let env = Environment::of_pairs(vars.iter().copied());
        let mut a = vec!["nccl-check".to_string()];
        a.extend(args.iter().map(|s| s.to_string()));
        parse(a, &env).map_err(|e| match e {
            ParseExit::Usage(u) | ParseExit::Config(u) => u,
            ParseExit::Info(i) => i,
        })
    }

    /// Regression: `--pair-matrix <100 KB>` wrote 200 KB to stderr (clap quotes a bad value
    /// twice). Every option's echo is bounded in one place, whoever (clap or `validate`)
    /// quotes the value, and the line still names the option.
    #[test]
    fn a_huge_bad_value_is_quoted_in_a_bounded_line_for_every_option() {
        let huge = "x".repeat(100_000);
        let flag_eq = format!("--pair-matrix={huge}");
        let unknown = format!("--{huge}");
        let cases: [(&[&str], &str); 6] = [
            (&["--pair-matrix", &huge], "--pair-matrix"),
            (&[&flag_eq], "--pair-matrix"),
            (&["--gpus", &huge], "--gpus"),
            (&["--timeout", &huge], "timeout"),
            (&["--minbytes", &huge], "malformed size"),
            (&[&unknown], "unexpected argument"),
        ];
        for (args, names) in cases {
            let e = parse_with(args, &[]).expect_err("a bad value");
            assert!(e.len() < 600, "{names}: {} bytes: {}", e.len(), &e[..300]);
            assert!(e.contains(names), "{e}");
            assert!(e.contains(" bytes)"), "{e}");
        }
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
    fn counts_given_on_the_command_line_end_the_time_budgets() {
        let budget = |s: &Step| match s {
            Step::Collective { budget, .. } | Step::Pairs { budget, .. } => *budget,
        };
        let quick = parse_with(&[], &[]).unwrap();
        assert_eq!(budget(&quick.steps[0]), Some(0.5));
        assert_eq!(budget(&quick.steps[1]), Some(0.3));
        // nccl-tests' numbers at a given count stay reproducible: -n, -w, -b and --plan full.
        for args in [
            &["-n", "20"][..],
            &["-w", "1"],
            &["-b", "256M"],
            &["--plan", "full"],
        ] {
            let o = parse_with(args, &[]).unwrap();
            assert!(o.steps.iter().all(|s| budget(s).is_none()), "{args:?}");
        }
        let counted = parse_with(&["-n", "20"], &[]).unwrap();
        assert!(matches!(
            counted.steps[0],
            Step::Collective {
                iters: 20,
                warmup: 2,
                ..
            }
        ));
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
        // The plugin's address for the same step (nccl_check_contract::slurm_rendezvous pins the port).
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
        let want = nccl_check_contract::slurm_rendezvous::secret_candidates(
            secret.as_bytes(),
            "slurm-1234.0",
            nccl_check_contract::slurm_rendezvous::PortRange::DEFAULT,
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
        use crate::model::pairs::PairMatrix;
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

    #[test]
    fn check_config_is_a_clap_mode_with_an_optional_file() {
        let mode = |args: &[&str]| {
            let v = std::iter::once("nccl-check").chain(args.iter().copied());
            Args::parse(v).map(|a| a.check_config().map(|f| f.map(Path::to_path_buf)))
        };
        assert!(matches!(mode(&["--check-config"]), Ok(Some(None))));
        assert!(
            matches!(mode(&["--check-config", "/etc/x.toml"]), Ok(Some(Some(p))) if p == Path::new("/etc/x.toml"))
        );
        assert!(matches!(mode(&["--plan", "full"]), Ok(None)));
        // One FILE at most, and no check flag beside the mode: a usage error, as before clap.
        for bad in [
            &["--check-config", "a", "b"][..],
            &["--check-config", "--plan", "full"],
            &["--plan", "full", "--check-config"],
        ] {
            assert!(
                matches!(mode(bad), Err(ParseExit::Usage(_))),
                "{bad:?}: {:?}",
                mode(bad)
            );
        }
        // The mode is never a check: resolving it without running it is a usage error.
        let a = Args::parse(["nccl-check", "--check-config"]).expect("parsed");
        assert!(matches!(
            a.resolve(&Environment::default()),
            Err(ParseExit::Usage(_))
        ));
    }

    #[test]
    fn help_teaches_the_modes() {
        let h = parse_with(&["--help"], &[]).unwrap_err();
        assert!(
            h.contains("--check-config") && h.contains("--explain-plan"),
            "{h}"
        );
        let h = parse_with(&["--check-config", "--help"], &[]).unwrap_err();
        assert!(
            h.contains("[FILE]") && h.contains("NCCL_CHECK_CONFIG"),
            "{h}"
        );
        // `help` is still a word clap does not take: a collective, refused by name.
        let e = parse_with(&["help"], &[]).unwrap_err();
        assert!(e.contains("unknown collective 'help'"), "{e}");
    }
}
