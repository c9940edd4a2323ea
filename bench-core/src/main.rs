//! `nccl-check`: the process's life. Parse, set NCCL's environment, start the watchdog, run the
//! check (`orchestrate`), judge it, then print the verdict, write the report and exit with the
//! verdict's code. The one place that turns errors into messages and exit codes.

use bench_core::localize;
use bench_core::measure::nccl_env;
use bench_core::measure::runner::Status;
use bench_core::orchestrate::{self, Ran};
use bench_core::render::progress;
use bench_core::report::json::Report;
use bench_core::settings::environment::Environment;
use bench_core::settings::options::{self, Command, Options, ParseExit};
use nccl_check_contract::exit::ExitCode;
use nccl_check_contract::line;
use nccl_check_contract::report::reason::ReasonCode;
use nccl_check_contract::verdict::Verdict;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

fn main() {
    let t0 = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut env = Environment::of_process();
    let args = options::Args::parse(std::env::args_os());
    if let Some(file) = args.as_ref().ok().and_then(options::Args::check_config) {
        check_config(file, &env);
    }
    // args_os: a non-UTF-8 argument (a user's TMPDIR in a --json path) is a usage error, not a
    // panic; so is a non-UTF-8 value of a variable the options read.
    if let Some(msg) = options::env::non_utf8_env(&|k| env.get_os(k).map(Into::into)) {
        nccl_check_host::errln!("{}", line::write(Verdict::Error, &format!("usage: {msg}")));
        exit(ExitCode::Usage.code());
    }
    let opts = match args.and_then(|a| a.resolve(&env)) {
        Ok(Command::Check(o)) => o,
        // Answered from the config and the model alone: no GPU, no peer.
        Ok(Command::Explain(a)) => match localize::cli::answer(&a, &|k| env.get(k)) {
            Ok(text) => parse_exit(ParseExit::Info(text)),
            Err(e) => parse_exit(e),
        },
        Err(e) => parse_exit(e),
    };
    // A site's NCCL_COMM_BLOCKING=1 would silently turn the bounded non-blocking init into a
    // blocking one that can hang forever (NCCL init.cc envConfigOverride).
    env.remove_for_nccl("NCCL_COMM_BLOCKING");
    let opts: &'static Options = Box::leak(opts);
    let profile = nccl_env::apply_network_profile(opts, &mut env);
    if let Some((k, v)) = nccl_env::p2p_net_chunk(&env) {
        env.set_for_nccl(k, v);
    }
    let nccl_log = nccl_env::capture_nccl_log(opts, profile, &mut env);
    let mut report = Report::for_run(opts, &env, profile, nccl_env::hostname(), started_unix);
    let status: Status = Arc::new(Mutex::new(vec!["starting".to_string()]));
    start_watchdog(
        t0 + opts.timeout,
        status.clone(),
        opts,
        report.clone(),
        nccl_log.clone(),
    );
    // Kept until the process ends (`finish` leaves with `_exit`).
    let _ticker = if progress::wanted(opts.progress, opts.rank) {
        progress::start(
            t0,
            status.clone(),
            opts.timeout,
            progress::EVERY,
            std::io::stderr(),
        )
    } else {
        None
    };

    let (measured, ran) = orchestrate::run(opts, t0, &status, &report.host, &nccl_log);
    report.record_run(measured);
    let code = match ran {
        Ok(Ran::Explained(text)) => {
            nccl_check_host::out!("{text}");
            exit(0);
        }
        Ok(Ran::Measured(basis, log)) => {
            let judged = orchestrate::verdict(opts, &report, &basis, profile, log.as_ref());
            let code = report.record_verdict(judged);
            orchestrate::plot(opts, &report, &basis);
            code
        }
        Err(e) => report.set_error(e.exit_code(), e.reason_code(), e.message()),
    };
    report.record_total(t0.elapsed());
    finish(opts, &report, code, &nccl_log);
}

/// `--check-config [FILE]`: FILE, else $NCCL_CHECK_CONFIG, else the default path
/// (`facts::node_ready` says what is printed).
fn check_config(file: Option<&std::path::Path>, env: &Environment) -> ! {
    let path = file
        .map(std::path::PathBuf::from)
        .or_else(|| env.get_os("NCCL_CHECK_CONFIG").map(Into::into));
    let root = std::path::Path::new("/");
    let checked = bench_core::facts::node_ready::check_file(path.as_deref(), root, env);
    for l in &checked.lines {
        nccl_check_host::outln!("{l}");
    }
    exit(checked.code)
}

/// Where a config error points: --help lists flags, not the config file's keys.
const CONFIG_KEYS: &str = "the keys are documented in /etc/nccl-check/nccl-check.toml and \
                           /usr/share/doc/nccl-check*/defaults.toml";

/// A usage error: one verdict line on stderr, saying where to look (`see`), exit 2.
/// How a command line that runs no check ends: its text and exit 0, or a usage line and exit 2.
fn parse_exit(e: ParseExit) -> ! {
    match e {
        ParseExit::Info(text) => {
            nccl_check_host::out!("{text}");
            exit(0);
        }
        ParseExit::Usage(msg) => usage_error(&msg, "see nccl-check --help"),
        ParseExit::Config(msg) => usage_error(&msg, CONFIG_KEYS),
    }
}

fn usage_error(msg: &str, see: &str) -> ! {
    nccl_check_host::errln!(
        "{}",
        line::write(Verdict::Error, &format!("usage: {msg} ({see})"))
    );
    exit(ExitCode::Usage.code());
}

/// The last resort: whatever is stuck (a CUDA call without a deadline, an abort that blocks), the
/// process reports ERROR and exits shortly after `--timeout`.
fn start_watchdog(
    deadline: Instant,
    status: Status,
    opts: &'static Options,
    mut report: Report,
    nccl_log: nccl_env::LogPlace,
) {
    // Running before NCCL's dlopen can take the loader's lock (running_thread.rs says why).
    let _ = bench_core::measure::running_thread::spawn("watchdog", move |ready| {
        ready.running();
        // The loops poll the same deadline and normally report first; this fires only if they cannot.
        std::thread::sleep(
            deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(400),
        );
        let waiting = status.lock().map(|s| s.join("; ")).unwrap_or_default();
        let msg = format!(
            "no progress within --timeout {:.0}s; waiting for: {waiting}",
            opts.timeout.as_secs_f64()
        );
        let code = report.set_error(ExitCode::Timeout, ReasonCode::Timeout, &msg);
        finish(opts, &report, code, &nccl_log);
    });
}

/// Whether the process is ending: the watchdog's thread and the main thread may both reach
/// [`finish`], and only the first writes the report and the verdict line. Static because the
/// end is the process's, not any stage's: `_exit` follows.
static FINISHED: Mutex<bool> = Mutex::new(false);

/// Prints the verdict line, writes the report, and leaves at once: `_exit` skips NCCL's and
/// CUDA's teardown (seconds, and a hang risk when a peer is gone); the driver frees everything.
fn finish(opts: &Options, report: &Report, code: ExitCode, nccl_log: &nccl_env::LogPlace) -> ! {
    let mut done = FINISHED.lock().unwrap_or_else(|p| p.into_inner());
    if !*done {
        *done = true;
        nccl_env::remove_log_dir(nccl_log);
        report.publish(opts.json.as_deref());
    }
    exit(code.code())
}

fn exit(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: _exit ends the process without running atexit handlers (see finish).
    unsafe { libc::_exit(code) }
}
