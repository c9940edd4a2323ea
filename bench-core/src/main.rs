//! `nccl-check`: parse, load CUDA and NCCL, meet the other processes, drive one thread per GPU,
//! then print the verdict, write the report and exit with the verdict's code. The one place that
//! turns errors into messages and exit codes.

use bench_core::config::network::NetworkProfile;
use bench_core::cuda;
use bench_core::nccl::Nccl;
use bench_core::options::{self, Options, ParseExit};
use bench_core::rendezvous::{self, Member};
use bench_core::report::json::{GpuEntry, NcclInfo, Reason, ReasonCode, Report, Settings};
use bench_core::runner::{GpuThread, RunError, Start, Status};
use bench_core::team::Team;
use bench_core::transport::TransportSummary;
use bench_core::verdict::ExitCode;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

fn main() {
    let t0 = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let opts = match options::parse(std::env::args(), &|k| std::env::var(k).ok()) {
        Ok(o) => o,
        Err(ParseExit::Info(text)) => {
            print!("{text}");
            exit(0);
        }
        Err(ParseExit::Usage(msg)) => {
            eprintln!("nccl-check: ERROR usage: {msg} (see nccl-check --help)");
            exit(ExitCode::Usage.code());
        }
    };
    // A site's NCCL_COMM_BLOCKING=1 would silently turn the bounded non-blocking init into a
    // blocking one that can hang forever (NCCL init.cc envConfigOverride).
    std::env::remove_var("NCCL_COMM_BLOCKING");
    let opts: &'static Options = Box::leak(Box::new(opts));
    let profile = apply_network_profile(opts);
    let nccl_log = capture_nccl_log(opts, profile);
    let mut report = Report::new(hostname(), started_unix);
    report.network_profile = profile
        .map(|p| serde_json::json!({ "name": p.name, "env": p.env, "expect_net": p.expect_net }));
    report.process_rank = opts.rank;
    report.world = opts.world;
    report.rendezvous = opts.rendezvous.clone();
    report.settings = Some(settings(opts));
    let status: Status = Arc::new(Mutex::new(vec!["starting".to_string()]));
    start_watchdog(t0 + opts.timeout, status.clone(), opts, report.clone());

    let outcome = run(opts, t0, &status, &mut report);
    let code = match outcome {
        Ok(()) => {
            let (info, summary) = read_transports(&nccl_log);
            report.transports = Some(info);
            judge(opts, &mut report, profile, summary.as_ref())
        }
        Err(e) => {
            report.error = Some(e.message().to_string());
            report
                .reasons
                .push(Reason::plain(reason_code(&e), e.message().to_string()));
            report.set_outcome(e.exit_code(), e.message().to_string());
            e.exit_code()
        }
    };
    report.phases.total_ms = t0.elapsed().as_secs_f64() * 1e3;
    finish(opts, &report, code);
}

fn reason_code(e: &RunError) -> ReasonCode {
    match e {
        RunError::Library(_) => ReasonCode::NcclLibrary,
        RunError::NoGpu(_) => ReasonCode::NoGpu,
        RunError::Rendezvous(_) => ReasonCode::Rendezvous,
        RunError::Timeout(_) => ReasonCode::Timeout,
        RunError::Runtime(_) | RunError::Stopped(_) => ReasonCode::Runtime,
    }
}

/// PASS or FAIL from the measurements (bench_core::analysis), and the summary line.
fn judge(
    opts: &Options,
    report: &mut Report,
    profile: Option<&NetworkProfile>,
    transports: Option<&TransportSummary>,
) -> ExitCode {
    let mut by_coll: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for r in &report.results {
        let e = by_coll.entry(r.collective.to_string()).or_default();
        e.0 += r.out_of_place.busbw + r.in_place.busbw;
        e.1 += 2.0;
    }
    report.avg_busbw = by_coll.into_iter().map(|(k, (s, n))| (k, s / n)).collect();
    let gpus = report.nranks;
    let hosts = report
        .processes
        .iter()
        .map(|p| p.host.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        .max(1) as u32;
    let gpu_name = report
        .gpus
        .first()
        .map(|g| g.info.name.clone())
        .unwrap_or_default();
    let floor = |coll: &str, n: u32, bytes: u64| {
        use bench_core::thresholds;
        let rule = thresholds::floor(&opts.config.thresholds, &gpu_name, hosts, coll, n, bytes);
        // --min-busbw is for the check's collectives, not for each GPU pair.
        let pair = thresholds::is_pair(coll, n) && n != gpus;
        thresholds::with_min(rule, opts.min_busbw.filter(|_| !pair))
    };
    let special = report
        .transports
        .as_ref()
        .is_some_and(|t| t.collnet_used || t.nvls_used);
    // CollNet/NVLS busbw is not ring-equivalent: judge collectives only by the outlier rule and
    // thresholds written for that algorithm (none are built in).
    let floor = |coll: &str, n: u32, bytes: u64| {
        if special && !bench_core::thresholds::is_pair(coll, n) {
            None
        } else {
            floor(coll, n, bytes)
        }
    };
    let mut reasons = bench_core::analysis::judge(
        &report.results,
        &report.pairs,
        gpus,
        hosts,
        opts.config.outliers.fraction,
        &floor,
    );
    if let Some(summary) = transports {
        reasons.extend(transport_reasons(opts, report, profile, summary));
    }
    if let Some(path) = opts.plot.as_ref().filter(|_| opts.rank == 0) {
        let plot_floor = |c: &str, b: u64| floor(c, gpus, b);
        match bench_core::plot::draw(path, &report.results, &gpu_name, gpus, &plot_floor) {
            Ok(()) => eprintln!("nccl-check: plot written to {}", path.display()),
            Err(e) => eprintln!("nccl-check: WARNING no plot: {e}"),
        }
    }
    let best = report
        .results
        .iter()
        .max_by(|a, b| a.out_of_place.busbw.total_cmp(&b.out_of_place.busbw))
        .map(|r| {
            format!(
                ", {} {} busbw {:.1} GB/s",
                r.collective,
                bench_core::size::human(r.size),
                r.out_of_place.busbw
            )
        })
        .unwrap_or_default();
    let pair_min = report
        .pairs
        .iter()
        .filter(|p| p.kind == bench_core::report::PairKind::Gpu)
        .map(|p| p.busbw)
        .fold(f64::INFINITY, f64::min);
    let pairs_text = if pair_min.is_finite() {
        format!(
            ", {} GPU pairs >= {pair_min:.1} GB/s",
            report
                .pairs
                .iter()
                .filter(|p| p.kind == bench_core::report::PairKind::Gpu)
                .count()
        )
    } else {
        String::new()
    };
    let code = if reasons.is_empty() {
        ExitCode::Pass
    } else {
        ExitCode::Fail
    };
    let summary = match reasons.first() {
        None => format!("{gpus} x {gpu_name} on {hosts} node(s){best}{pairs_text}"),
        Some(first) if reasons.len() == 1 => first.message.clone(),
        Some(first) => format!("{} (and {} more)", first.message, reasons.len() - 1),
    };
    report.reasons = reasons;
    report.set_outcome(code, summary);
    code
}

/// Where NCCL's INFO log of this process goes: a private temporary file, unless the user set
/// `NCCL_DEBUG` (then their settings stand and transports are not recorded). Set before NCCL
/// is loaded: NCCL reads these once, at its first call.
fn capture_nccl_log(
    opts: &Options,
    profile: Option<&NetworkProfile>,
) -> Result<std::path::PathBuf, String> {
    let collnet = opts.expect_collnet || profile.is_some_and(|p| p.expect_collnet);
    if collnet && std::env::var_os("NCCL_COLLNET_ENABLE").is_none() {
        std::env::set_var("NCCL_COLLNET_ENABLE", "1");
    }
    if opts.expect_nvls || profile.is_some_and(|p| p.expect_nvls) {
        std::env::set_var("NCCL_NVLS_ENABLE", "1");
    }
    if let Ok(level) = std::env::var("NCCL_DEBUG") {
        return Err(format!(
            "not recorded: NCCL_DEBUG={level} was set by the caller"
        ));
    }
    // A fresh private directory (0700; creation fails if the name exists, so no planted
    // symlink can redirect NCCL's fopen when the prolog runs this as root).
    let dir = std::env::temp_dir().join(format!(
        "nccl-check-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("not recorded: cannot create {}: {e}", dir.display()))?;
    }
    let _ = NCCL_LOG_DIR.set(dir.clone());
    let path = dir.join("nccl.log");
    std::env::set_var("NCCL_DEBUG", "INFO");
    std::env::set_var("NCCL_DEBUG_FILE", &path);
    if std::env::var_os("NCCL_DEBUG_SUBSYS").is_none() {
        std::env::set_var("NCCL_DEBUG_SUBSYS", "INIT,P2P,SHM,NET,COLL,GRAPH,TUNING");
    }
    Ok(path)
}

/// The site's network profile for this job (partition from Slurm, this host), its environment
/// set before NCCL loads: the check runs with exactly the settings the site's jobs use.
fn apply_network_profile(opts: &'static Options) -> Option<&'static NetworkProfile> {
    let partition = std::env::var("SLURM_JOB_PARTITION").ok();
    let p = bench_core::config::network::select(
        &opts.config.network,
        partition.as_deref(),
        &hostname(),
    )?;
    for (k, v) in p.env_pairs() {
        std::env::set_var(k, v);
    }
    Some(p)
}

/// What NCCL's log says, for the report, and the parsed log for the transport rule (none when
/// the log was not recorded).
fn read_transports(
    log: &Result<std::path::PathBuf, String>,
) -> (
    bench_core::report::json::TransportInfo,
    Option<TransportSummary>,
) {
    use bench_core::report::json::TransportInfo;
    let empty = |source: String| TransportInfo {
        source,
        paths: Vec::new(),
        network: None,
        collnet_used: false,
        nvls_used: false,
        busbw_note: None,
    };
    let path = match log {
        Ok(p) => p,
        Err(why) => return (empty(why.clone()), None),
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir(dir);
    }
    let s = bench_core::transport::parse_log(&text);
    let (collnet, nvls) = (s.collnet_used(), s.nvls_used());
    let mut info = empty(format!(
        "NCCL_DEBUG=INFO log, {} connection lines",
        s.connection_lines
    ));
    info.paths = s.paths();
    info.network = s.network.clone();
    info.collnet_used = collnet;
    info.nvls_used = nvls;
    if collnet || nvls {
        info.busbw_note = Some(format!(
            "{} carried collectives: busbw is not the ring-equivalent figure (it can exceed the link speed); only thresholds written for that algorithm apply",
            if collnet { "CollNet (SHARP)" } else { "NVLS" }
        ));
    }
    (info, Some(s))
}

/// FAIL reasons for silent fallbacks: SHM or sockets between GPUs that CUDA says can reach each
/// other directly, no CollNet/NVLS when they were asked for.
fn transport_reasons(
    opts: &Options,
    report: &Report,
    profile: Option<&NetworkProfile>,
    summary: &TransportSummary,
) -> Vec<Reason> {
    if !summary.has_connections() {
        return Vec::new();
    }
    // Ranks of this process -> device index; only those pairs can be asked to CUDA.
    let first = report
        .processes
        .iter()
        .find(|p| p.proc_rank == report.process_rank)
        .map_or(0, |p| p.first_rank);
    let devices: Vec<usize> = match &opts.gpus {
        Some(list) => list.clone(),
        None => (0..report.gpus.len()).collect(),
    };
    let device_of = |rank: u32| -> Option<usize> {
        rank.checked_sub(first)
            .and_then(|i| devices.get(i as usize).copied())
    };
    let p2p_expected = |a: u32, b: u32| match (device_of(a), device_of(b)) {
        (Some(da), Some(db)) => cuda::can_access_peer(da, db),
        _ => false,
    };
    let host_of = |rank: u32| {
        report
            .processes
            .iter()
            .find(|p| rank >= p.first_rank && rank < p.first_rank + p.ngpus)
            .map(|p| p.host.clone())
    };
    let same_node = |a: u32, b: u32| {
        let same = host_of(a).is_some() && host_of(a) == host_of(b);
        // Judged as intra-node only where P2P is possible; other same-node paths are left alone.
        same && p2p_expected(a, b)
    };
    let expect = bench_core::transport::Expectation {
        intra_node_p2p: profile.and_then(|p| p.expect_nvlink).unwrap_or(true),
        inter_node_net: profile.and_then(|p| p.net_expect()),
        collnet: opts.expect_collnet || profile.is_some_and(|p| p.expect_collnet),
        nvls: opts.expect_nvls || profile.is_some_and(|p| p.expect_nvls),
    };
    bench_core::transport::check(summary, &same_node, &expect)
        .iter()
        .map(|f| f.to_reason())
        .collect()
}

fn run(
    opts: &'static Options,
    t0: Instant,
    status: &Status,
    report: &mut Report,
) -> Result<(), RunError> {
    let deadline = t0 + opts.timeout;
    // dlopen NCCL while the driver starts: both take a while, neither needs the other.
    let lib_path = opts.nccl_lib.clone();
    let loader = std::thread::spawn(move || {
        let t = Instant::now();
        (Nccl::load(lib_path.as_deref()), t.elapsed())
    });
    let t = Instant::now();
    let driver = cuda::init_driver();
    report.phases.cuda_init_ms = ms(t.elapsed());
    let (nccl, load_time) = loader
        .join()
        .map_err(|_| RunError::Runtime("NCCL loader thread panicked".into()))?;
    report.phases.nccl_load_ms = ms(load_time);
    let nccl: &'static Nccl = Box::leak(Box::new(
        nccl.map_err(|e| RunError::Library(e.to_string()))?,
    ));
    report.nccl = Some(NcclInfo {
        version: nccl.version_string(),
        version_code: nccl.version,
        library: nccl.path.display().to_string(),
    });
    let visible = driver.map_err(|e| RunError::NoGpu(e.to_string()))?;
    let devices: Vec<usize> = match &opts.gpus {
        None => (0..visible).collect(),
        Some(list) => {
            if let Some(bad) = list.iter().find(|&&g| g >= visible) {
                return Err(RunError::NoGpu(format!(
                    "no usable GPU: --gpus names device {bad}, but only {visible} are visible"
                )));
            }
            list.clone()
        }
    };
    if opts.explain_thresholds {
        let name = devices
            .first()
            .and_then(|&d| cuda::gpu_info(d).ok())
            .map(|i| i.name)
            .unwrap_or_default();
        print!(
            "{}",
            bench_core::thresholds::explain(
                &opts.config.thresholds,
                &name,
                devices.len() as u32,
                1
            )
        );
        println!(
            "Outlier rule: a GPU, pair or node below {:.2} x its peers' median is FAIL; retest: {}.\nConfig: {}",
            opts.config.outliers.fraction,
            opts.config.outliers.retest,
            opts.config
                .path
                .as_ref()
                .map_or("built-in defaults only".to_string(), |p| format!("{} over the built-in defaults", p.display()))
        );
        exit(0);
    }
    if !opts.quiet && opts.rank == 0 {
        println!(
            "# nccl-check {} (nccl-tests 2.19.6 table format) nccl-library={} {}",
            env!("CARGO_PKG_VERSION"),
            nccl.version,
            nccl.path.display()
        );
    }

    // One thread per GPU starts its context now; the rendezvous runs meanwhile.
    *status.lock().unwrap_or_else(|p| p.into_inner()) = vec![String::new(); devices.len()];
    let mut senders = Vec::new();
    let mut handles = Vec::new();
    for (slot, &device) in devices.iter().enumerate() {
        let (tx, rx) = std::sync::mpsc::channel();
        senders.push(tx);
        let thread = GpuThread {
            slot,
            device,
            nccl,
            opts,
            deadline,
            status: status.clone(),
        };
        let h = std::thread::Builder::new()
            .name(format!("gpu{device}"))
            .spawn(move || thread.run(rx))
            .map_err(|e| RunError::Runtime(format!("cannot start a thread: {e}")))?;
        handles.push(h);
    }

    let t = Instant::now();
    let me = Member {
        proc_rank: opts.rank,
        // The node identity: NCCL_HOSTID when set (NCCL treats such processes as separate
        // nodes, and so does the verdict), else the host name.
        host: std::env::var("NCCL_HOSTID")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| report.host.clone()),
        pid: std::process::id(),
        ngpus: devices.len() as u32,
        first_rank: 0,
    };
    let addr = opts.rendezvous.clone().unwrap_or_default();
    let joined = rendezvous::join(&addr, &opts.token, opts.world, me, deadline, || {
        nccl.unique_id()
            .map(|id| id.internal)
            .map_err(|e| e.to_string())
    });
    report.phases.rendezvous_ms = ms(t.elapsed());
    let joined = match joined {
        Ok(j) => j,
        Err(e) => {
            drop(senders);
            for h in handles {
                let _ = h.join();
            }
            return Err(RunError::Rendezvous(e));
        }
    };
    let nranks = joined.nranks();
    let first_rank = joined.members[opts.rank as usize].first_rank;
    report.nranks = nranks;
    report.processes = joined.members.clone();
    let team = Arc::new(Team::new(devices.len(), joined.plane, deadline));
    // Which node each global rank is on, and its index there (GPU0, GPU1, ...).
    let mut node_of = vec![(String::new(), 0usize); nranks as usize];
    let mut per_node: std::collections::BTreeMap<String, usize> = Default::default();
    let mut members = joined.members.clone();
    members.sort_by_key(|m| m.first_rank);
    for m in &members {
        for r in m.first_rank..m.first_rank + m.ngpus {
            let i = per_node.entry(m.host.clone()).or_default();
            node_of[r as usize] = (m.host.clone(), *i);
            *i += 1;
        }
    }
    let nodes = per_node.len() as u32;
    let node_of = Arc::new(node_of);
    let gpu_name = Arc::new(
        cuda::gpu_info(devices[0])
            .map(|i| i.name)
            .unwrap_or_default(),
    );
    let id = bench_core::nccl::UniqueId {
        internal: joined.unique_id,
    };
    for (slot, tx) in senders.iter().enumerate() {
        let rank = first_rank + slot as u32;
        let _ = tx.send(Start {
            team: team.clone(),
            id,
            rank,
            nranks,
            printer: rank == 0 && !opts.quiet,
            recorder: slot == 0,
            node_of: node_of.clone(),
            nodes,
            gpu_name: gpu_name.clone(),
            opts,
        });
    }

    let mut errors = Vec::new();
    for h in handles {
        let out = h
            .join()
            .map_err(|_| RunError::Runtime("a GPU thread panicked".into()))?;
        let p = &mut report.phases;
        p.contexts_ms = p.contexts_ms.max(out.phases.contexts_ms);
        p.nccl_init_ms = p.nccl_init_ms.max(out.phases.nccl_init_ms);
        p.allocation_ms = p.allocation_ms.max(out.phases.allocation_ms);
        if !out.rows.is_empty() {
            p.warmup_ms = out.phases.warmup_ms;
            p.timed_loop_ms = out.phases.timed_loop_ms;
            p.verification_ms = out.phases.verification_ms;
            report.results = out.rows;
            report.pairs = out.pairs;
        }
        if let Some(info) = out.info {
            let rank = out.rank.unwrap_or(u32::MAX);
            report.gpus.push(GpuEntry {
                rank,
                host: report.host.clone(),
                info,
            });
        }
        errors.extend(out.error);
    }
    // The first real cause, not the threads that stopped because of it.
    errors.sort_by_key(|e| matches!(e, RunError::Stopped(_)));
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn settings(o: &Options) -> Settings {
    Settings {
        collectives: o.collectives.iter().map(|c| c.name()).collect(),
        min_bytes: o.min_bytes,
        max_bytes: o.max_bytes,
        step_factor: o.step_factor,
        warmup_iters: o.warmup_iters,
        iters: o.iters,
        datatype: o.datatype.name(),
        op: o.op.name(),
        root: o.root,
        check: o.check,
        timeout_s: o.timeout.as_secs_f64(),
        min_busbw: o.min_busbw,
    }
}

/// The last resort: whatever is stuck (a CUDA call without a deadline, an abort that blocks), the
/// process reports ERROR and exits shortly after `--timeout`.
fn start_watchdog(deadline: Instant, status: Status, opts: &'static Options, mut report: Report) {
    let _ = std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            // The loops poll the same deadline and normally report first; this fires only if they cannot.
            std::thread::sleep(
                deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(400),
            );
            let waiting = status.lock().map(|s| s.join("; ")).unwrap_or_default();
            let msg = format!(
                "no progress within --timeout {:.0}s; waiting for: {waiting}",
                opts.timeout.as_secs_f64()
            );
            report.set_outcome(ExitCode::Timeout, msg.clone());
            report.error = Some(msg.clone());
            report.reasons.push(Reason::plain(ReasonCode::Timeout, msg));
            finish(opts, &report, ExitCode::Timeout);
        });
}

static FINISHED: Mutex<bool> = Mutex::new(false);
/// The private directory of NCCL's log, removed however the process ends.
static NCCL_LOG_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Prints the verdict line, writes the report, and leaves at once: `_exit` skips NCCL's and
/// CUDA's teardown (seconds, and a hang risk when a peer is gone); the driver frees everything.
fn finish(opts: &Options, report: &Report, code: ExitCode) -> ! {
    let mut done = FINISHED.lock().unwrap_or_else(|p| p.into_inner());
    if !*done {
        *done = true;
        if let Some(dir) = NCCL_LOG_DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some(path) = &opts.json {
            if let Err(e) = write_json(path, report) {
                eprintln!(
                    "nccl-check: cannot write the report to {}: {e}",
                    path.display()
                );
            }
        }
        let _ = std::io::stdout().flush();
        eprintln!("nccl-check: {} {}", report.verdict, report.summary);
        let _ = std::io::stderr().flush();
    }
    exit(code.code())
}

fn write_json(path: &std::path::Path, report: &Report) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    // Write then rename, so a reader never sees half a report.
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n")?;
    std::fs::rename(&tmp, path)
}

fn exit(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: _exit ends the process without running atexit handlers (see finish).
    unsafe { libc::_exit(code) }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
