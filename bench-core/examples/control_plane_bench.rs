//! The control plane at N processes on 127.0.0.1 (CPU only): N real processes join through the
//! authenticated rendezvous (shared secret, NCCL_CHECK_SECRET), then sum vectors of several
//! lengths through the control plane; one JSON line per run on stdout with join time, per-round
//! sum times, and the coordinator's and a member's memory. With `--dead R --dead-mode exit|hang`
//! process R leaves after joining (exits, or stops answering), with `--dead-mode absent` it never
//! starts; the run then reports whether and when the coordinator named it (within the deadline
//! plus 1 s is the requirement). `--max-len L` sums no vector longer than L; `--silence S` and
//! `--every S` override the beats' silence and period (the budget's otherwise, as the worker's).
//!
//! After the sums, a whole localization as a real check runs it (8 simulated GPUs per process,
//! one node's NICs at half speed so that screening and confirmation rounds run) through the star:
//! the coordinator runs the localizer (`localize::conduct::decide_in`), every process follows
//! through `Team::gather` (the star's round, which GPU checks no longer use: their rounds are
//! NCCL all_reduces, `runner/localized.rs`); the
//! time of every gather (after a barrier, timed apart, so that the processes' skew on a loaded
//! machine is not counted as the plane's cost), the coordinator's time deciding, as the
//! coordinator and a member see them, and the verdict are recorded.
//!
//! cargo build --release -p bench-core --features sim --example control_plane_bench
//! NCCL_CHECK_SECRET=$(openssl rand -hex 32) target/release/examples/control_plane_bench --procs 1024

// A benchmark for people: its JSON lines go to stdout.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use bench_core::localize::conduct::{decide_in, follow, group_of, Conductor, ConductorStep};
use bench_core::localize::layout::Layout;
use bench_core::localize::sim::{Fabric, Fault};
use bench_core::localize::{LocalizeConfig, Localizer};
use bench_core::meet::rendezvous::{self, auth::SharedSecret, Member};
use bench_core::meet::team::Team;
use bench_core::meet::topology::Topology;
use bench_core::model::floors::PairFloors;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

struct Args {
    procs: u32,
    port: u16,
    rounds: u32,
    timeout_s: f64,
    dead: Option<u32>,
    dead_mode: String,
    child: Option<u32>,
    /// Unix seconds at which the parent started every child (join time is measured from it).
    t0: f64,
    out_dir: String,
    /// Longest vector summed (`--max-len`): at 4,096 processes the 8N-value sums of the old
    /// per-round design would move gigabytes through 2 cores and say nothing new.
    max_len: usize,
    /// The silence that names a process (`--silence S`), instead of the budget's (5-15 s): at
    /// 4,096 processes on 2 cores a process can go unscheduled for longer than 15 s.
    silence_s: Option<f64>,
    /// How often beats go out (`--every S`, default a sixth of the silence): a long one takes
    /// the beats out of the measurement.
    every_s: Option<f64>,
}

fn parse() -> Args {
    let mut a = Args {
        procs: 1024,
        port: 31650, // outside 29501-29999, where Slurm steps rendezvous
        rounds: 20,
        timeout_s: 120.0,
        dead: None,
        dead_mode: "exit".into(),
        child: None,
        t0: 0.0,
        out_dir: std::env::temp_dir().display().to_string(),
        max_len: usize::MAX,
        silence_s: None,
        every_s: None,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for w in v.chunks(2) {
        let val = w.get(1).cloned().unwrap_or_default();
        match w[0].as_str() {
            "--procs" => a.procs = val.parse().expect("--procs N"),
            "--port" => a.port = val.parse().expect("--port P"),
            "--rounds" => a.rounds = val.parse().expect("--rounds R"),
            "--timeout" => a.timeout_s = val.parse().expect("--timeout S"),
            "--dead" => a.dead = Some(val.parse().expect("--dead RANK")),
            "--dead-mode" => a.dead_mode = val,
            "--child" => a.child = Some(val.parse().expect("--child RANK")),
            "--t0" => a.t0 = val.parse().expect("--t0"),
            "--out-dir" => a.out_dir = val,
            "--max-len" => a.max_len = val.parse().expect("--max-len L"),
            "--silence" => a.silence_s = Some(val.parse().expect("--silence S")),
            "--every" => a.every_s = Some(val.parse().expect("--every S")),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// VmHWM (peak resident) and VmRSS of this process, KiB.
fn memory_kib() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn quantiles(mut v: Vec<f64>) -> serde_json::Value {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    serde_json::json!({ "n": v.len(), "median_ms": q(0.5), "p90_ms": q(0.9), "max_ms": q(1.0) })
}

/// Joins as the worker does, with the plane's liveness set from the budget; a join that fails
/// is written down (ranks 0 and 1) and ends the process.
fn join(a: &Args, rank: u32) -> rendezvous::Joined {
    let secret = std::env::var("NCCL_CHECK_SECRET").expect("NCCL_CHECK_SECRET");
    let auth = SharedSecret::new(&secret, "NCCL_CHECK_SECRET").expect("secret");
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout_s);
    let setup = rendezvous::Setup {
        host: "127.0.0.1".into(),
        ports: vec![a.port],
        label: "bench".into(),
        world: a.procs,
        coordinator: rank == 0,
        auth: &auth,
        deadline,
        expected: None,
    };
    let me = Member {
        proc_rank: rank,
        host: format!("h{rank}"),
        pid: std::process::id(),
        ngpus: 8,
        first_rank: 0,
    };
    let joined = setup.join(me, || Ok([1u8; 128]));
    let join_s = unix_now() - a.t0;
    match joined {
        Ok(mut j) => {
            // As the worker sets it (orchestrate::meet): beats, and the silence that names a
            // process, from the budget.
            let mut live =
                rendezvous::plane::Liveness::for_budget(Duration::from_secs_f64(a.timeout_s));
            if let Some(s) = a.silence_s {
                live.silence = Duration::from_secs_f64(s);
            }
            if let Some(s) = a.every_s {
                live.every = Duration::from_secs_f64(s);
            }
            j.plane.set_liveness(live);
            j
        }
        Err(e) => {
            if rank <= 1 {
                let line = serde_json::json!({ "rank": rank, "join_error": e, "join_s": join_s, "timeout_s": a.timeout_s });
                let _ = std::fs::write(
                    format!("{}/cp-bench-{rank}.json", a.out_dir),
                    line.to_string(),
                );
            }
            std::process::exit(1);
        }
    }
}

/// A failed sum: why, and after how many seconds.
type Failure = (String, f64);

/// `a.rounds` timed sums at each length: their quantiles by length, or the first failure.
fn timed_sums(
    a: &Args,
    joined: &mut rendezvous::Joined,
) -> (Vec<serde_json::Value>, Option<Failure>) {
    // Lengths: one number (a barrier or a flag), a confirmation round's groups, one per process
    // (a screening round at one GPU per node), one per rank (the old per-round vector at 8 GPUs).
    let nranks = joined.nranks() as usize;
    let lengths: Vec<usize> = [1usize, 64, a.procs as usize, nranks]
        .into_iter()
        .filter(|&l| l <= a.max_len)
        .collect();
    let mut seq = 0u64;
    let mut by_len = Vec::new();
    for &len in &lengths {
        let mut times = Vec::new();
        for _ in 0..a.rounds {
            seq += 1;
            let v = vec![1.0; len];
            let t = Instant::now();
            let sum_deadline = Instant::now() + Duration::from_secs_f64(a.timeout_s);
            match joined.plane.sum(seq, &v, sum_deadline) {
                Ok(s) => {
                    let expect = a.procs as f64;
                    if a.dead.is_none() && s[0] != expect {
                        return (
                            by_len,
                            Some((format!("wrong sum {} != {expect}", s[0]), 0.0)),
                        );
                    }
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
                Err(e) => return (by_len, Some((e.to_string(), t.elapsed().as_secs_f64()))),
            }
        }
        by_len.push(serde_json::json!({ "len": len, "sum": quantiles(times) }));
    }
    (by_len, None)
}

fn child(a: &Args, rank: u32) {
    let mut joined = join(a, rank);
    let join_s = unix_now() - a.t0;
    if a.dead == Some(rank) {
        if a.dead_mode == "hang" {
            std::thread::sleep(Duration::from_secs_f64(a.timeout_s + 5.0));
        }
        std::process::exit(0);
    }
    let (by_len, failure) = timed_sums(a, &mut joined);
    let localization = if failure.is_none() {
        localize(joined, rank, a.timeout_s)
    } else {
        serde_json::Value::Null
    };
    let (hwm, rss) = memory_kib();
    let line = serde_json::json!({
        "rank": rank,
        "procs": a.procs,
        "join_s": join_s,
        "sums": by_len,
        "localization": localization,
        "vm_hwm_kib": hwm,
        "vm_rss_kib": rss,
        "failure": failure.as_ref().map(|f| f.0.clone()),
        "failure_after_s": failure.as_ref().map(|f| f.1),
        "timeout_s": a.timeout_s,
    });
    if rank <= 1 || failure.is_some() {
        let path = format!("{}/cp-bench-{rank}.json", a.out_dir);
        let _ = std::fs::write(path, line.to_string());
    }
}

/// One localization through the real plane: the coordinator conducts, everyone follows.
fn localize(joined: rendezvous::Joined, rank: u32, timeout_s: f64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs_f64(timeout_s);
    let topology = Topology::new(&joined.members);
    let layout = Layout::new(&topology);
    let nranks = topology.nranks() as usize;
    let process_of = topology.processes_by_rank();
    let first = joined.members[rank as usize].first_rank as usize;
    let mine: Vec<usize> = (first..first + 8).collect();
    let team = Team::new(1, joined.plane, deadline);
    let (n, g) = (layout.names.len(), layout.rails.max(1));
    let mut fabric = Fabric::healthy(n, g, 1);
    fabric.inject(Fault::NodeNet {
        node: n / 3,
        factor: 0.5,
    });
    let cfg = LocalizeConfig {
        floors: PairFloors {
            allocation: Some(0.85 * fabric.allocation_nominal),
            ..PairFloors::default()
        },
        ..LocalizeConfig::default()
    };
    let mut conductor: Option<Conductor> = None;
    let known_fabric = fabric.clone();
    let (mut times, mut barriers, mut decides) = (Vec::new(), Vec::new(), Vec::new());
    let gather = |len: usize, led: &[(u64, f64)]| -> Result<ConductorStep, String> {
        // A barrier first, timed apart: on a loaded machine the processes reach a round's end
        // seconds apart, and that skew is not the control plane's cost.
        let t = Instant::now();
        team.barrier().map_err(|e| e.to_string())?;
        barriers.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let step = team
            .gather(len, led, |sums| {
                let d = Instant::now();
                let make = || -> Result<Conductor, String> {
                    let l = Localizer::new(n, g, cfg.clone()).map_err(|e| e.to_string())?;
                    let mut f = known_fabric.clone();
                    Ok(Conductor::new(
                        l,
                        layout.clone(),
                        process_of.clone(),
                        rank,
                        "bench",
                        cfg.floors.allocation,
                        Box::new(move |r| f.measure(r)),
                    ))
                };
                let steps = decide_in(&mut conductor, make, sums);
                decides.push(d.elapsed().as_secs_f64() * 1e3);
                steps
            })
            .map_err(|e| e.to_string());
        times.push(t.elapsed().as_secs_f64() * 1e3);
        step
    };
    let measure = |_, _, _, places: &[bench_core::localize::conduct::Place]| {
        Ok(places
            .iter()
            .map(|p| group_of(&layout, p).map_or(0.0, |g| fabric.measure_group(&g)))
            .collect())
    };
    let t = Instant::now();
    let result = follow(&mine, nranks, gather, measure);
    let total_ms = t.elapsed().as_secs_f64() * 1e3;
    match result {
        Ok(s) => serde_json::json!({
            "gathers": times.len(),
            "gather_ms_in_order": times.clone(),
            "gather": quantiles(times),
            "barrier_before_gather": quantiles(barriers),
            "decide_ms_in_order": decides,
            "total_ms": total_ms,
            "rounds": s.rounds,
            "localization_rounds": s.localization_rounds,
            "pair_groups": s.pair_groups,
            "reasons": s.reasons.iter().map(|r| r.message.clone()).collect::<Vec<_>>(),
        }),
        Err(e) => serde_json::json!({ "error": format!("{e:?}"), "total_ms": total_ms }),
    }
}

fn main() {
    let a = parse();
    if let Some(rank) = a.child {
        child(&a, rank);
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let t0 = unix_now();
    let started = Instant::now();
    let mut children = Vec::new();
    for rank in 0..a.procs {
        if a.dead == Some(rank) && a.dead_mode == "absent" {
            continue; // never starts: the rendezvous must name it at its deadline
        }
        // The children take the parent's own arguments, and their rank and start time.
        let mut c = Command::new(&exe);
        c.args(std::env::args().skip(1))
            .args(["--child", &rank.to_string(), "--t0", &t0.to_string()])
            .stdin(Stdio::null());
        children.push(c.spawn().expect("spawn"));
    }
    let spawn_s = started.elapsed().as_secs_f64();
    for mut c in children {
        let _ = c.wait();
    }
    let total_s = started.elapsed().as_secs_f64();
    let read = |r: u32| -> serde_json::Value {
        std::fs::read_to_string(format!("{}/cp-bench-{r}.json", a.out_dir))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(serde_json::Value::Null)
    };
    let out = serde_json::json!({
        "procs": a.procs,
        "rounds_per_length": a.rounds,
        "max_len": a.max_len,
        "silence_s": a.silence_s,
        "every_s": a.every_s,
        "dead": a.dead,
        "dead_mode": a.dead.map(|_| a.dead_mode.clone()),
        "spawn_s": spawn_s,
        "total_s": total_s,
        "coordinator": read(0),
        "member": read(1),
    });
    println!("{out}");
    let _ = std::io::stdout().flush();
}
