//! Bad input gets one clear line and its own exit code (no GPU needed; CI runs these).
//! The no-GPU case needs a real libnccl: CI provides one from the nvidia-nccl-cu12 wheel through
//! NCCL_CHECK_TEST_NCCL_LIB (see tests/setup-deps.sh); without it that test fails, never skips.

use std::process::Command;

fn nccl_check(args: &[&str]) -> (i32, String, String) {
    nccl_check_with(args, &[])
}

/// Runs the worker with `env` set on top of this process's environment.
fn nccl_check_with(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-check"))
        .args(args)
        .env_remove("SLURM_PROCID")
        .env_remove("SLURM_NTASKS")
        .env_remove("NCCL_CHECK_NCCL_LIB")
        .envs(env.iter().copied())
        .output()
        .expect("nccl-check runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_one_line_error(args: &[&str], code: i32, needle: &str) {
    let (rc, _, err) = nccl_check(args);
    assert_eq!(rc, code, "{args:?}: {err}");
    assert_eq!(
        err.trim().lines().count(),
        1,
        "{args:?}: not one line: {err}"
    );
    assert!(err.starts_with("nccl-check: ERROR"), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn unknown_collective_is_a_usage_error() {
    assert_one_line_error(&["all_reduse"], 2, "unknown collective 'all_reduse'");
}

#[test]
fn malformed_size_is_a_usage_error() {
    assert_one_line_error(&["-b", "32X"], 2, "malformed size '32X'");
    assert_one_line_error(&["-e", "lots"], 2, "malformed size 'lots'");
}

#[test]
fn invalid_rank_or_world_is_a_usage_error() {
    assert_one_line_error(&["--rank", "4", "--world", "4"], 2, "invalid rank 4");
    assert_one_line_error(&["--world", "0"], 2, "invalid world 0");
    assert_one_line_error(&["--rank", "-1"], 2, "");
}

#[test]
fn missing_nccl_library_is_error_3() {
    assert_one_line_error(
        &["--nccl-lib", "/nonexistent/libnccl.so.2"],
        3,
        "/nonexistent/libnccl.so.2",
    );
}

#[test]
fn a_library_that_is_not_nccl_is_error_3() {
    assert_one_line_error(&["--nccl-lib", "libm.so.6"], 3, "is not an NCCL library");
}

#[test]
fn no_gpu_is_error_4_and_the_report_says_error() {
    let lib = std::env::var("NCCL_CHECK_TEST_NCCL_LIB").expect(
        "set NCCL_CHECK_TEST_NCCL_LIB to a real libnccl.so.2 (tests/setup-deps.sh fetches one)",
    );
    let json = std::env::temp_dir().join(format!("nccl-check-nogpu-{}.json", std::process::id()));
    let json_s = json.to_string_lossy().into_owned();
    // An empty CUDA_VISIBLE_DEVICES hides every GPU, so this holds on GPU machines too
    // (there the driver reports no device; elsewhere libcuda is missing: both are "no GPU").
    let (rc, _, err) = nccl_check_with(
        &["--nccl-lib", &lib, "--json", &json_s],
        &[("CUDA_VISIBLE_DEVICES", "")],
    );
    assert_eq!(rc, 4, "{err}");
    assert!(err.contains("no usable GPU"), "{err}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report written"))
            .expect("valid JSON");
    let _ = std::fs::remove_file(&json);
    assert_eq!(report["verdict"], "ERROR");
    assert_eq!(report["exit_code"], 4);
    assert_eq!(report["schema_version"], 1);
    assert!(
        report["nccl"]["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("2.")),
        "{report}"
    );
    assert_eq!(report["reasons"][0]["code"], "no_gpu");
}

/// The report's `nccl_env` is what NCCL sees: the caller's NCCL variables and those the worker
/// sets before NCCL loads (the site's network profile, its INFO log, the p2p chunk), never `NCCL_COMM_BLOCKING` (removed: it would make
/// the bounded init a blocking one) nor the rendezvous secret.
#[test]
fn the_report_records_the_nccl_variables_nccl_sees() {
    let lib = std::env::var("NCCL_CHECK_TEST_NCCL_LIB").expect(
        "set NCCL_CHECK_TEST_NCCL_LIB to a real libnccl.so.2 (tests/setup-deps.sh fetches one)",
    );
    let json = std::env::temp_dir().join(format!("nccl-check-env-{}.json", std::process::id()));
    let json_s = json.to_string_lossy().into_owned();
    let config = json.with_extension("toml");
    let profile = "[[network]]\nname = \"lo\"\nenv = { NCCL_SOCKET_IFNAME = \"lo\" }\n";
    std::fs::write(&config, profile).expect("config written");
    let config_s = config.to_string_lossy().into_owned();
    let (rc, _, err) = nccl_check_with(
        &["--nccl-lib", &lib, "--json", &json_s, "--config", &config_s],
        &[
            ("CUDA_VISIBLE_DEVICES", ""),
            ("NCCL_IB_HCA", "mlx5_0"),
            ("NCCL_COMM_BLOCKING", "1"),
            ("NCCL_CHECK_SECRET", "0123456789abcdef0123"),
        ],
    );
    assert_eq!(rc, 4, "{err}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("report written"))
            .expect("valid JSON");
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&config);
    let env = &report["nccl_env"];
    assert_eq!(env["NCCL_IB_HCA"], "mlx5_0", "{env}");
    assert_eq!(env["NCCL_SOCKET_IFNAME"], "lo", "{env}");
    assert_eq!(env["NCCL_DEBUG"], "INFO", "{env}");
    assert!(
        env["NCCL_DEBUG_FILE"]
            .as_str()
            .is_some_and(|f| f.ends_with("/nccl.log")),
        "{env}"
    );
    assert!(env.get("NCCL_DEBUG_SUBSYS").is_some(), "{env}");
    // The p2p chunk that reads links, not a busy host's pace (`nccl_env::P2P_NET_CHUNK`).
    assert_eq!(env["NCCL_P2P_NET_CHUNKSIZE"], "524288", "{env}");
    assert!(env.get("NCCL_COMM_BLOCKING").is_none(), "{env}");
    assert!(env.get("NCCL_CHECK_SECRET").is_none(), "{env}");
}

/// Regression: `--help` broke `--rendezvous` and the Examples mid-sentence (hard line breaks in the
/// doc comment, example lines longer than clap's width re-wrapped at column 0).
#[test]
fn help_breaks_no_line_mid_sentence() {
    let (rc, out, _) = nccl_check(&["--help"]);
    assert_eq!(rc, 0);
    for l in out.lines() {
        assert!(l.chars().count() <= 100, "longer than clap's width: {l:?}");
    }
    let examples = out.split("Examples:").nth(1).expect("Examples");
    let (examples, codes) = examples.split_once("Exit codes:").expect("Exit codes");
    let description_column = " ".repeat(46);
    for l in examples.lines().filter(|l| !l.trim().is_empty()) {
        let example = l.starts_with("  nccl-check") || l.starts_with("  srun ");
        let continued = l.starts_with(&description_column);
        assert!(
            example || continued || l.starts_with("Output:"),
            "an Examples line broken mid-sentence: {l:?}\n{examples}"
        );
    }
    for l in codes.lines().filter(|l| !l.trim().is_empty()) {
        let row = l.len() > 4 && l.as_bytes()[2].is_ascii_digit();
        assert!(
            row || l.starts_with(&" ".repeat(11)),
            "an exit code's meaning broken: {l:?}\n{codes}"
        );
    }
    // The --rendezvous entry is one paragraph filled to the width: only its last line is short.
    let entry: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("--rendezvous"))
        .take_while(|l| !l.trim_start().starts_with("--port-range"))
        .collect();
    assert!(entry.len() > 2, "{out}");
    for l in &entry[..entry.len() - 1] {
        assert!(
            l.len() >= 80,
            "--rendezvous broken mid-sentence: {l:?}\n{}",
            entry.join("\n")
        );
    }
}

/// Regression: `--explain-thresholds --gpu-model M` printed the expected GPUs of the node it ran on
/// (its hostname, its gres.conf) beside the asked-for model's thresholds.
#[test]
fn explain_thresholds_for_a_model_says_nothing_of_this_node() {
    let (rc, out, err) =
        nccl_check(&["--explain-thresholds", "--gpu-model", "H200", "--gpus", "8"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("8 x H200"), "{out}");
    assert!(!out.contains("Node facts"), "{out}");
    assert!(!out.contains("expected GPUs on"), "{out}");
    let host = nix_hostname();
    assert!(
        host.is_empty() || !out.contains(&format!(" {host}")),
        "names this host {host}: {out}"
    );
}

fn nix_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

#[test]
fn help_teaches_and_lists_exit_codes() {
    let (rc, out, _) = nccl_check(&["--help"]);
    assert_eq!(rc, 0);
    for needle in [
        "Examples:",
        "Exit codes:",
        "--rendezvous",
        "--timeout",
        "4  ERROR no usable GPU",
        "--port-range",
        "--progress",
    ] {
        assert!(out.contains(needle), "{needle}");
    }
    // The help (and the man page made from it) opens with a sentence, not a "[nccl-check]" tag.
    assert!(
        !out.contains("[nccl-check]"),
        "{}",
        &out[..out.len().min(200)]
    );
}

#[test]
fn a_broken_config_is_error_2_naming_file_line_and_field() {
    let path = std::env::temp_dir().join(format!("nccl-check-bad-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[outliers]\nfraction = 0.9\n\n[[thresholds]]\ngpu = \"H200\"\ncollective = \"all_reduce\"\nmin_busbw = \"fast\"\n",
    )
    .expect("test setup");
    let p = path.to_string_lossy().into_owned();
    assert_one_line_error(
        &["--config", &p],
        2,
        &format!("config: {p}:7: thresholds[0].min_busbw: "),
    );
    // --help lists no config keys: the error points at the documented file instead, for a
    // check and for --explain-plan alike; any other usage error points at --help.
    let explain = [
        "--explain-plan",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--config",
        &p,
    ];
    for args in [&["--config", p.as_str()][..], &explain[..]] {
        let (rc, _, err) = nccl_check(args);
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(!err.contains("--help"), "{args:?}: {err}");
        assert!(
            err.contains("config: ")
                && err.contains("documented in /etc/nccl-check/nccl-check.toml"),
            "{args:?}: {err}"
        );
    }
    std::fs::write(&path, "").expect("test setup");
    let (_, _, err) = nccl_check(&["--plan", "nope", "--config", &p]);
    assert!(err.contains("unknown plan 'nope'"), "{err}");
    assert!(err.contains("(see nccl-check --help)"), "{err}");
    let _ = std::fs::remove_file(&path);
}

/// Regression: `--json -` wrote a file named `-`.
#[test]
fn json_dash_writes_the_report_to_stdout_and_nothing_else() {
    let dir = std::env::temp_dir().join(format!("nccl-check-json-dash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test setup");
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-check"))
        .args(["--json", "-"])
        .current_dir(&dir)
        .env_remove("SLURM_PROCID")
        .env_remove("SLURM_NTASKS")
        .env("NCCL_CHECK_NCCL_LIB", "/nonexistent/libnccl.so.2")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(3));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not the JSON report ({e}): {:?}", out.stdout));
    assert_eq!(report["verdict"], "ERROR");
    assert!(!dir.join("-").exists(), "a file named '-' was written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_plan_is_error_2() {
    assert_one_line_error(&["--plan", "fastest"], 2, "unknown plan 'fastest'");
}

#[test]
fn explain_plan_needs_no_gpu_and_prints_one_json_object() {
    // No NCCL library at all: --explain-plan must not load one.
    let (rc, out, err) = nccl_check_with(
        &[
            "--explain-plan",
            "--nodes",
            "1024",
            "--gpus-per-node",
            "8",
            "--json",
        ],
        &[("NCCL_CHECK_NCCL_LIB", "/nonexistent/libnccl.so.2")],
    );
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let rounds = v["rounds"].as_u64().expect("test setup");
    assert!(rounds <= 24, "{rounds}");
    assert!(
        v["modeled_seconds"].as_f64().expect("test setup") <= 10.0,
        "{out}"
    );
    let (rc, text, _) = nccl_check(&["--explain-plan", "--nodes", "64", "--gpus-per-node", "8"]);
    assert_eq!(rc, 0);
    assert!(text.contains("Plan for 64 nodes x 8 GPUs"), "{text}");
    assert_one_line_error(
        &["--explain-plan", "--nodes", "64"],
        2,
        "--explain-plan needs --nodes N and --gpus-per-node G",
    );
}

/// Regression: `--explain-plan` refused `--config` and quoted a healthy time (B at its floor) that
/// the site's config did not give: without a multi-node rule a healthy allocation screens.
#[test]
fn explain_plan_reads_the_site_config_and_names_the_rule_that_ends_a_healthy_check() {
    let dir = std::env::temp_dir().join(format!("nccl-check-cli-ep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let site = dir.join("site.toml");
    std::fs::write(
        &site,
        "# site\n[[thresholds]]\nsku = \"H100 SXM\"\ncollective = \"all_reduce\"\nmin_nodes = 2\nmin_bytes = \"256M\"\nmax_bytes = \"16G\"\nmin_busbw = 300.0\nsource = \"our fleet\"\n",
    )
    .expect("write");
    let site = site.to_str().expect("utf-8 path");
    let plan = |extra: &[&str]| {
        let mut args = vec!["--explain-plan", "--nodes", "64", "--gpus-per-node", "8"];
        args.extend_from_slice(extra);
        let (rc, out, err) = nccl_check_with(&args, &[("NCCL_CHECK_CONFIG", "")]);
        assert_eq!(rc, 0, "{args:?}: {err}");
        out
    };
    let h100 = ["--gpu-model", "NVIDIA H100 80GB HBM3"];
    let with_rule = plan(&["--config", site, h100[0], h100[1]]);
    assert!(
        with_rule.contains(&format!("admin rule [{site}:2]: our fleet"))
            && with_rule.contains("healthy (ends after B, at or above its floor)"),
        "{with_rule}"
    );
    // The built-in defaults know no fabric: no floor for B, so a healthy check screens.
    let builtin = plan(&[h100[0], h100[1]]);
    assert!(
        builtin.contains("Config: built-in defaults")
            && builtin.contains("B has no floor, so 2 screening rounds run"),
        "{builtin}"
    );
    // The rule names a SKU: without --gpu-model it cannot be known to apply, and it says so.
    let no_model = plan(&["--config", site]);
    assert!(
        no_model.contains("rules naming a GPU need --gpu-model"),
        "{no_model}"
    );
    // JSON: the healthy time under the config, and the rule.
    let (rc, out, err) = nccl_check_with(
        &[
            "--explain-plan",
            "--nodes",
            "64",
            "--gpus-per-node",
            "8",
            "--json",
            "--config",
            site,
            h100[0],
            h100[1],
        ],
        &[],
    );
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["healthy_rounds"].as_u64(), Some(0));
    assert_eq!(
        v["workload"]["floor"]["min_busbw_gbs"].as_f64(),
        Some(300.0)
    );
    // $NCCL_CHECK_CONFIG is read as the worker reads it.
    let (rc, out, _) = nccl_check_with(
        &[
            "--explain-plan",
            "--nodes",
            "64",
            "--gpus-per-node",
            "8",
            h100[0],
            h100[1],
        ],
        &[("NCCL_CHECK_CONFIG", site)],
    );
    assert_eq!(rc, 0);
    assert!(out.contains("ends after B"), "{out}");
    // A broken config is the config's one-line error; an unknown plan is named.
    let broken = dir.join("broken.toml");
    std::fs::write(&broken, "[outliers]\nfracton = 0.9\n").expect("write");
    let broken = broken.to_str().expect("utf-8 path");
    assert_one_line_error(
        &[
            "--explain-plan",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--config",
            broken,
        ],
        2,
        "fracton",
    );
    assert_one_line_error(
        &[
            "--explain-plan",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--plan",
            "fastest",
        ],
        2,
        "unknown plan 'fastest'",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Regression: no way to validate the worker's config before deploying it.
#[test]
fn check_config_validates_and_says_where_each_setting_comes_from() {
    let dir = std::env::temp_dir().join(format!("nccl-check-cli-cc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "[outliers]\nfraction = 0.8\n\n[plans.site]\nsteps = [{ collective = \"all_reduce\", bytes = \"1M\" }]\n",
    )
    .expect("write");
    let g = good.display().to_string();
    let (rc, out, _) = nccl_check(&["--check-config", &g]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains(&format!("outliers.fraction = 0.8    # {g}:2\n")),
        "{out}"
    );
    assert!(
        out.contains("outliers.retest = true    # built-in defaults\n"),
        "{out}"
    );
    assert!(
        out.contains(&format!("plans.site = 1 steps    # {g}:4\n")),
        "{out}"
    );
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[outliers]\nfraktion = 0.8\n").expect("write");
    let (rc, out, _) = nccl_check(&["--check-config", &bad.display().to_string()]);
    assert_eq!(rc, 2, "{out}");
    assert!(
        out.starts_with(&format!("INVALID {}:2", bad.display())),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Regression: the printout left out `nccl_lib`, `[[network]]` and `[[expected_gpus]]`;
/// every effective key is shown.
#[test]
fn check_config_shows_nccl_lib_network_and_expected_gpus() {
    let dir = std::env::temp_dir().join(format!("nccl-check-cli-cc3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let f = dir.join("site.toml");
    std::fs::write(
        &f,
        "nccl_lib = \"/opt/nccl/lib/libnccl.so.2\"\n\n[[network]]\nname = \"ib\"\n\
         partitions = [\"gpu\"]\n[network.env]\nNCCL_IB_HCA = \"=mlx5_0:1\"\n\n\
         [[expected_gpus]]\nnodes = [\"gpu[001-128]\"]\ncount = 8\n",
    )
    .expect("write");
    let g = f.display().to_string();
    let (rc, out, _) = nccl_check(&["--check-config", &g]);
    // No GPU here: the readiness part may say NOT READY; the printout is what is checked.
    assert!(rc == 0 || rc == 2, "{rc}: {out}");
    assert!(
        out.contains(&format!(
            "nccl_lib = \"/opt/nccl/lib/libnccl.so.2\"    # {g}:1\n"
        )),
        "{out}"
    );
    assert!(
        out.contains("network[0] = \"ib\": partitions gpu, nodes any, env NCCL_IB_HCA==mlx5_0:1"),
        "{out}"
    );
    assert!(
        out.contains("expected_gpus[0] = 8 GPUs: partitions any, nodes gpu[001-128]"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The explain text's APPLIES lines (collective and floor) for `--gpu-model MODEL --gpus 8`.
fn applied(model: &str) -> Vec<String> {
    let (rc, out, err) = nccl_check(&["--explain-thresholds", "--gpu-model", model, "--gpus", "8"]);
    assert_eq!(rc, 0, "{model}: {err}");
    out.lines()
        .filter(|l| l.trim_start().starts_with("APPLIES"))
        .map(String::from)
        .collect()
}

#[test]
fn an_8x_h100_pcie_node_gets_no_nvlink_floor_and_the_sxm_parts_keep_theirs() {
    // "H100" was a part of "NVIDIA H100 PCIe", so the PCIe server got the SXM floor.
    for pcie in [
        "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL",
        "NVIDIA H200 NVL",
        "NVIDIA A100 80GB PCIe",
    ] {
        assert!(applied(pcie).is_empty(), "{pcie}: {:?}", applied(pcie));
        let (_, out, _) = nccl_check(&["--explain-thresholds", "--gpu-model", pcie, "--gpus", "8"]);
        assert!(out.contains("interconnect: 8 GPUs on PCIe"), "{out}");
    }
    for (sxm, floor) in [
        ("NVIDIA H100 80GB HBM3", "400.0"),
        ("NVIDIA H200", "400.0"),
        ("NVIDIA A100-SXM4-80GB", "190.0"),
    ] {
        let lines = applied(sxm);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("all_reduce") && l.contains(floor)),
            "{sxm}: {lines:?}"
        );
        let (_, out, _) = nccl_check(&["--explain-thresholds", "--gpu-model", sxm, "--gpus", "8"]);
        assert!(out.contains("one NVLink fabric (NVSwitch)"), "{out}");
    }
    // A name the table does not know: said, and no floor.
    let (_, out, _) = nccl_check(&[
        "--explain-thresholds",
        "--gpu-model",
        "NVIDIA H100",
        "--gpus",
        "8",
    ]);
    assert!(out.contains("unknown part"), "{out}");
    assert!(applied("NVIDIA H100").is_empty());
}

#[test]
fn list_skus_names_every_part_by_device_id() {
    let (rc, out, _) = nccl_check(&["--list-skus"]);
    assert_eq!(rc, 0);
    for needle in [
        "H100 PCIe",
        "10de:2331",
        "H200 SXM",
        "10de:2335",
        "GB200",
        "L40S",
        "source:",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
}

#[test]
fn a_rule_that_names_part_of_a_gpu_name_is_refused_with_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("nccl-check-cli-partial-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        "[[thresholds]]\ngpu = \"H100\"\ncollective = \"all_reduce\"\nmin_busbw = 1.0\n",
    )
    .expect("write");
    let (rc, _, err) = nccl_check(&["--config", &cfg.to_string_lossy(), "--explain-thresholds"]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("c.toml:2: thresholds[0].gpu"), "{err}");
    assert!(err.contains("sku = "), "{err}");
}

#[test]
fn a_rank_or_secret_that_is_not_utf8_is_a_usage_error_not_rank_0_or_munge() {
    use std::os::unix::ffi::OsStrExt;
    for var in ["SLURM_PROCID", "NCCL_CHECK_SECRET"] {
        let out = Command::new(env!("CARGO_BIN_EXE_nccl-check"))
            .env(var, std::ffi::OsStr::from_bytes(b"1\xff"))
            .output()
            .expect("nccl-check runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {err}");
        assert!(
            err.starts_with(&format!("nccl-check: ERROR usage: invalid {var} "))
                && err.contains("not UTF-8"),
            "{var}: {err}"
        );
    }
}

/// Regression: `--explain-plan` at its stated maximum (65,536 nodes of 8 GPUs) built the whole
/// pair matrix of the nodes (2 billion pairs, 24 GB) to count its rounds and was killed by the
/// kernel. Under an address-space limit of 512 MiB it answers, both as text and as JSON.
#[test]
fn explain_plan_at_its_maximum_runs_under_a_512_mib_address_space_limit() {
    use std::os::unix::process::CommandExt;
    const LIMIT: libc::rlim_t = 512 << 20;
    for json in [false, true] {
        let mut args = vec![
            "--explain-plan",
            "--nodes",
            "65536",
            "--gpus-per-node",
            "64",
        ];
        if json {
            args.push("--json");
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-check"));
        cmd.args(&args).env_remove("NCCL_CHECK_CONFIG");
        // SAFETY: only setrlimit (async-signal-safe) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: LIMIT,
                    rlim_max: LIMIT,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().expect("nccl-check runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {:?} {err}",
            out.status
        );
        let text = String::from_utf8_lossy(&out.stdout);
        if json {
            let v: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
            assert_eq!(v["nodes"].as_u64(), Some(65536), "{text}");
            assert_eq!(v["full_matrix_rounds"].as_u64(), Some(65535), "{text}");
        } else {
            assert!(text.contains("Plan for 65536 nodes x 64 GPUs"), "{text}");
        }
    }
}
