//! The contract's worker arguments ([`WorkerArgs`]) through the worker's real parser: every
//! field a caller sets comes back from `crate::settings::options::parse` (a test only; the contract crate
//! cannot see the parser).

use crate::settings::options::{parse, Options, ParseExit};
use nccl_check_contract::args::{PlanName, WorkerArgs};

fn parse_args(args: &WorkerArgs) -> Options {
    let mut argv = vec!["nccl-check".to_string()];
    argv.extend(
        args.to_args()
            .into_iter()
            .map(|a| a.into_string().expect("utf-8")),
    );
    // No environment but the shared secret a multi-process check needs outside Slurm:
    // everything else must come from the command line.
    let env = crate::settings::environment::Environment::of_pairs([(
        "NCCL_CHECK_SECRET",
        "0123456789abcdef0123",
    )]);
    match parse(argv, &env) {
        Ok(o) => o,
        Err(ParseExit::Usage(e) | ParseExit::Config(e) | ParseExit::Info(e)) => {
            panic!("{args:?}: {e}")
        }
    }
}

#[test]
fn every_field_survives_the_workers_parser() {
    let dir = std::env::temp_dir().join(format!("nccl-check-args-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let config = dir.join("site.toml");
    // A plan only this file defines: it parses only if --config reached the worker.
    std::fs::write(
        &config,
        "[plans.site_nvlink-2]\nsteps = [{ collective = \"sendrecv\", bytes = \"1M\" }]\n",
    )
    .expect("write config");
    for bits in 0u32..64 {
        let on = |b: u32| bits & (1 << b) != 0;
        let mut a = WorkerArgs::new(
            if on(0) {
                PlanName::new("site_nvlink-2").expect("valid")
            } else {
                PlanName::full()
            },
            7 + bits as u64,
        );
        if on(0) {
            a.config = Some(config.clone());
        }
        if on(1) {
            a.json = Some(dir.join(format!("r{bits}.json")));
        }
        a.quiet = on(2);
        if on(3) {
            a.gpus = Some(vec![3, 0, 2]);
        }
        if on(4) {
            a.rank = Some(1);
            a.world = Some(3);
            a.rendezvous = Some("node-a07:29511".into());
        }
        a.expect_collnet = on(5);
        a.progress = on(2);
        if on(1) {
            a.port_range = Some(
                nccl_check_contract::slurm_rendezvous::PortRange::new(40000, 40100).expect("valid"),
            );
        }
        let o = parse_args(&a);
        // The steps are the named plan's (no count on the command line changes them).
        let plan = &o.config.plans[a.plan.as_str()];
        assert_eq!(
            format!("{:?}", o.steps),
            format!("{:?}", plan.steps),
            "{bits}"
        );
        assert_eq!(o.json, a.json, "{bits}");
        assert_eq!(o.timeout, std::time::Duration::from_secs(a.timeout_s));
        assert_eq!(o.quiet, a.quiet, "{bits}");
        assert_eq!(o.gpus, a.gpus, "{bits}");
        assert_eq!(o.rank, a.rank.unwrap_or(0), "{bits}");
        assert_eq!(o.world, a.world.unwrap_or(1), "{bits}");
        assert_eq!(o.rendezvous, a.rendezvous, "{bits}");
        assert_eq!(o.expect_collnet, a.expect_collnet, "{bits}");
        assert_eq!(o.progress, a.progress, "{bits}");
        assert_eq!(o.port_range, a.port_range.unwrap_or_default(), "{bits}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
