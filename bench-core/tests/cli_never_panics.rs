//! The worker never panics, hangs or aborts on any argument, environment value or
//! config file: a table of hostile inputs, then generated command lines from a token pool.
//! Each run must end by itself within [`LIMIT`] with an exit code of the contract (never 101, the
//! panic exit, never a signal). CI runs it on the release binary:
//! `NCCL_CHECK_CLI_BIN=target/release/nccl-check cargo test -p bench-core --test cli_never_panics`
//! (without the variable it runs the test profile's binary).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a single run may take: usage errors are instant, the rest stop at the missing NCCL.
const LIMIT: Duration = Duration::from_secs(20);
/// Generated command lines per run of the test.
const GENERATED: u64 = 150;

fn bin() -> OsString {
    std::env::var_os("NCCL_CHECK_CLI_BIN")
        .unwrap_or_else(|| OsString::from(env!("CARGO_BIN_EXE_nccl-check")))
}

fn os(b: &[u8]) -> OsString {
    OsStr::from_bytes(b).to_os_string()
}

/// What a case is called, its arguments and the variables set for it.
type Case = (&'static str, Vec<OsString>, Vec<(&'static str, OsString)>);

/// Runs one case; panics (fails the test) on a panic exit, a signal or a hang.
fn run(what: &str, args: &[OsString], env: &[(&str, OsString)]) {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for k in [
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "SLURM_STEP_NODELIST",
        "NCCL_CHECK_CONFIG",
        "NCCL_CHECK_SECRET",
        "NCCL_CHECK_RENDEZVOUS",
    ] {
        cmd.env_remove(k);
    }
    // No NCCL: a command line that parses stops at loading it (exit 3), fast.
    cmd.env("NCCL_CHECK_NCCL_LIB", "/nonexistent/libnccl.so.2");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the worker starts");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {LIMIT:?}: {args:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    let code = status.code();
    assert!(
        code.is_some(),
        "{what}: killed by a signal ({status:?}): {args:?}\n{err}"
    );
    assert_ne!(code, Some(101), "{what}: panicked: {args:?}\n{err}");
    assert!(!err.contains("panicked"), "{what}: {args:?}\n{err}");
}

#[test]
fn hostile_arguments_environments_and_config_files_never_panic_or_hang() {
    let dir = std::env::temp_dir().join(format!("nccl-check-cli-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let fifo = dir.join("fifo.toml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let garbage = dir.join("garbage.toml");
    std::fs::write(
        &garbage,
        (0..=255u8).cycle().take(4096).collect::<Vec<u8>>(),
    )
    .expect("write");
    let bad_utf8_dir = dir.join(OsStr::from_bytes(b"tmp-\xff\xfe"));
    std::fs::create_dir_all(&bad_utf8_dir).expect("mkdir non-UTF-8");
    let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
    let p = |x: &std::path::Path| x.as_os_str().to_os_string();

    let mut cases: Vec<Case> = vec![
        ("non-UTF-8 collective", vec![os(b"all_\xffreduce")], vec![]),
        (
            "non-UTF-8 --plan",
            vec!["--plan".into(), os(b"\xc3")],
            vec![],
        ),
        (
            "non-UTF-8 --rank",
            vec!["--rank".into(), os(b"1\xff")],
            vec![],
        ),
        (
            "--json under a non-UTF-8 TMPDIR",
            vec!["--json".into(), p(&bad_utf8_dir.join("r.json"))],
            vec![("TMPDIR", p(&bad_utf8_dir))],
        ),
        ("--config /dev/zero", a(&["--config", "/dev/zero"]), vec![]),
        ("--config a FIFO", vec!["--config".into(), p(&fifo)], vec![]),
        (
            "--config a directory",
            vec!["--config".into(), p(&dir)],
            vec![],
        ),
        (
            "--config binary garbage",
            vec!["--config".into(), p(&garbage)],
            vec![],
        ),
        (
            "NCCL_CHECK_CONFIG=/dev/zero",
            vec![],
            vec![("NCCL_CHECK_CONFIG", "/dev/zero".into())],
        ),
        (
            "NCCL_CHECK_CONFIG=FIFO",
            vec![],
            vec![("NCCL_CHECK_CONFIG", p(&fifo))],
        ),
        (
            "non-UTF-8 SLURM_PROCID",
            vec![],
            vec![("SLURM_PROCID", os(b"\xff"))],
        ),
        (
            "non-UTF-8 secret",
            vec![],
            vec![("NCCL_CHECK_SECRET", os(b"\xff\xfe"))],
        ),
        (
            "non-UTF-8 rendezvous",
            a(&["--world", "2"]),
            vec![("NCCL_CHECK_RENDEZVOUS", os(b"h\xff:1"))],
        ),
        (
            "Slurm job id out of range",
            vec![],
            vec![
                ("SLURM_NTASKS", "2".into()),
                ("SLURM_PROCID", "1".into()),
                ("SLURM_JOB_ID", "99999999999999999999".into()),
                ("SLURM_STEP_NODELIST", "n[1-2".into()),
            ],
        ),
        (
            "huge rank",
            a(&["--rank", "4294967296", "--world", "4294967295"]),
            vec![],
        ),
        ("timeout 1e308", a(&["--timeout", "1e308"]), vec![]),
        ("timeout NaN", a(&["--timeout", "NaN"]), vec![]),
        (
            "max sizes",
            a(&["-b", "18446744073709551615", "-e", "16E"]),
            vec![],
        ),
        (
            "max step factor",
            a(&["-b", "1", "-e", "8G", "-f", "18446744073709551615"]),
            vec![],
        ),
        (
            "max iterations",
            a(&["-n", "4294967295", "-w", "4294967295"]),
            vec![],
        ),
        (
            "huge GPU index",
            a(&["--gpus", "99999999999999999999999"]),
            vec![],
        ),
        ("empty GPU list", a(&["--gpus", ","]), vec![]),
        ("bad port range", a(&["--port-range", "70000-1"]), vec![]),
        (
            "empty rendezvous",
            a(&["--world", "2", "--rendezvous", ":"]),
            vec![],
        ),
        (
            "rendezvous port 0",
            a(&["--world", "2", "--rendezvous", "[::1]:0"]),
            vec![],
        ),
        ("root out of range", a(&["-r", "4294967295"]), vec![]),
        ("--json -", a(&["--json", "-"]), vec![]),
    ];
    // Generated command lines: tokens that each mean something, in random orders and counts.
    let pool: Vec<OsString> = [
        "all",
        "all_reduce",
        "sendrecv,alltoall",
        "-b",
        "-e",
        "-f",
        "-n",
        "-w",
        "-d",
        "-o",
        "-r",
        "-c",
        "--gpus",
        "--rank",
        "--world",
        "--rendezvous",
        "--timeout",
        "--plan",
        "--json",
        "--plot",
        "--min-busbw",
        "--port-range",
        "--progress",
        "--quiet",
        "--expect-collnet",
        "0",
        "1",
        "2",
        "-1",
        "1K",
        "1G",
        "999999999999T",
        "nan",
        "inf",
        "full",
        "quick",
        "",
        "=",
        ":",
        "h:1",
        "29500-29501",
        "float",
        "bfloat16",
        "max",
        "/dev/zero",
        "-",
        "--explain-thresholds",
        "--config",
    ]
    .iter()
    .map(OsString::from)
    .chain([os(b"\xff"), os(b"-\xff")])
    .collect();
    let mut seed: u64 = 0x5eed_cafe_f00d_1234;
    let mut next = || {
        // xorshift64: a fixed sequence, so a failure reproduces.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let generated: Vec<Vec<OsString>> = (0..GENERATED)
        .map(|_| {
            let n = (next() % 7) as usize;
            (0..n)
                .map(|_| pool[(next() % pool.len() as u64) as usize].clone())
                .collect()
        })
        .collect();
    for g in &generated {
        cases.push(("generated", g.clone(), vec![]));
    }
    for (what, args, env) in &cases {
        run(what, args, env);
    }
    std::fs::remove_dir_all(&dir).ok();
}
