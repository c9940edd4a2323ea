//! Reading a report back as the worker's own type: a pair's ends back to their kind (what
//! serde needs to read the worker's report). Only tests read a whole report back this way
//! (`tests::parse_report`); the plugin and the prolog read the contract's plain report, with
//! the contract's bounded reader, head checks and errors ([`nccl_check_contract::report::read`]).

use crate::measure::rows::{Ends, EndsWire, PairKind};
use nccl_check_contract::report::culprit::Culprit;

/// A pair's ends as the report writes them, back to their kind: a GPU pair's `a` and `b` are
/// the worker's names of its GPUs (`GPU2`), read as a reason's subject is.
impl TryFrom<EndsWire> for Ends {
    type Error = String;

    fn try_from(w: EndsWire) -> Result<Ends, String> {
        if w.kind == PairKind::Node {
            return Ok(Ends::Nodes(w.a, w.b));
        }
        let gpu = |name: &str| match Culprit::parse(name) {
            Culprit::Gpu { node: None, gpu } => Ok(gpu),
            _ => Err(format!(
                "pair on '{}': '{name}' is not a GPU's name (GPU<n>)",
                w.node
            )),
        };
        let (a, b) = (gpu(&w.a)?, gpu(&w.b)?);
        Ok(Ends::Gpus { node: w.node, a, b })
    }
}

#[cfg(test)]
mod tests {
    use crate::report::json::Report;
    use nccl_check_contract::report::read::{not_a_report, report_value, ReportError};
    use nccl_check_contract::report::Head;

    /// Parses the worker's own report type from its bytes, through the contract's checks of
    /// the head ([`report_value`]). Every name is read into an owned copy
    /// ([`crate::measure::rows::Name`]).
    fn parse_report(bytes: &[u8]) -> Result<Report, ReportError> {
        let value = report_value(bytes)?;
        // The head first, so that a bad head field is named by its path (inside the flattened
        // head serde names none).
        serde_path_to_error::deserialize::<_, Head>(&value).map_err(not_a_report)?;
        serde_path_to_error::deserialize(value).map_err(not_a_report)
    }
    use nccl_check_contract::exit::ExitCode;
    use nccl_check_contract::report::reason::{Reason, ReasonCode};
    use nccl_check_contract::verdict::Verdict;

    #[test]
    fn a_written_report_reads_back_field_for_field() {
        let mut r = Report::new("node017".into(), 12.5);
        r.set_outcome(ExitCode::Fail, "busbw 12.3 < 300.0 GB/s".into());
        r.head.reasons.push(Reason {
            subject: Some("GPU2<->GPU3".into()),
            measured: Some(12.3),
            limit: Some(300.0),
            ..Reason::plain(
                nccl_check_contract::report::reason::ReasonCode::BusbwBelowThreshold,
                "busbw 12.3 < 300.0 GB/s",
            )
        });
        r.avg_busbw.insert("all_reduce".into(), 12.3);
        let text = serde_json::to_string_pretty(&r).expect("serialize");
        let back = parse_report(text.as_bytes()).expect("parses");
        // Serializing again gives the same text: no field was lost or changed.
        assert_eq!(
            serde_json::to_string_pretty(&back).expect("serialize"),
            text
        );
        assert_eq!(back.head.verdict, Verdict::Fail);
        assert_eq!(
            back.head.reasons[0].code,
            nccl_check_contract::report::reason::ReasonCode::BusbwBelowThreshold
        );
    }

    /// The report's bytes, key by key in their order, for a report of every top-level field: the
    /// head the contract defines comes first, as it always did (readers may rely on the order a
    /// person sees; a change here is a change of the report's shape).
    #[test]
    fn the_report_keeps_its_keys_and_their_order() {
        let mut r = Report::new("node017".into(), 12.5);
        r.head.tool_version = "0.0.0".into();
        r.pid = 7;
        r.set_error(ExitCode::Runtime, ReasonCode::NcclLibrary, "no NCCL");
        r.warnings
            .push(Reason::plain(ReasonCode::HostInterference, "busy"));
        let text = serde_json::to_string(&r).expect("serialize");
        let want = concat!(
            r#"{"schema_version":1,"tool":"nccl-check","tool_version":"0.0.0","verdict":"ERROR","#,
            r#""exit_code":7,"summary":"no NCCL","reasons":[{"code":"nccl_library","cause":"setup","#,
            r#""message":"no NCCL"}],"started_unix":12.5,"host":"node017","pid":7,"#,
            r#""process_rank":0,"world":1,"nranks":0,"rendezvous":null,"nccl":null,"nccl_env":{},"#,
            r#""settings":null,"gpus":[],"processes":[],"results":[],"pairs":[],"#,
            r#""network_profile":null,"transports":null,"avg_busbw":{},"facts":null,"#,
            r#""warnings":[{"code":"host_interference","cause":"busy","message":"busy"}],"#,
            r#""phases":{"cuda_init_ms":0.0,"nccl_load_ms":0.0,"contexts_ms":0.0,"#,
            r#""rendezvous_ms":0.0,"nccl_init_ms":0.0,"allocation_ms":0.0,"warmup_ms":0.0,"#,
            r#""timed_loop_ms":0.0,"verification_ms":0.0,"probe_ms":0.0,"pairs_ms":0.0,"#,
            r#""comms_ready_at_ms":0.0,"total_ms":0.0},"error":"no NCCL"}"#
        );
        assert_eq!(text, want);
    }

    #[test]
    fn unknown_fields_are_ignored_and_missing_ones_default() {
        let r = parse_report(
            br#"{"schema_version":1,"tool":"t","tool_version":"0","verdict":"PASS","exit_code":0,
                 "summary":"s","new_field":{"x":[1]},
                 "reasons":[{"code":"a_new_code","message":"m","new":1}]}"#,
        )
        .expect("parses");
        assert_eq!(
            (r.head.verdict, r.head.summary.as_str()),
            (Verdict::Pass, "s")
        );
        assert_eq!(
            r.head.reasons[0].code,
            nccl_check_contract::report::reason::ReasonCode::Unknown
        );
        assert!(r.results.is_empty() && r.host.is_empty());
        assert_eq!(r.world, 1, "a report that names no world is one process's");
    }

    /// The worker's report, written, reads as the contract's plain report that the plugin and
    /// the prolog use: every field they act on arrives (two types, one schema).
    #[test]
    fn a_written_report_reads_as_the_contracts_plain_report() {
        use crate::facts::gpu_health::GpuHealth;
        use crate::measure::gpu::GpuInfo;
        use crate::measure::rows::{Expected, Row};
        use crate::report::json::GpuEntry;
        use nccl_check_contract::report::process::GpuProcess;
        let mut r = Report::new("node017".into(), 12.5);
        r.set_outcome(ExitCode::Fail, "busbw 12.3 < 300.0 GB/s".into());
        r.head.reasons.push(Reason {
            subject: Some("GPU2<->GPU3".into()),
            measured: Some(12.3),
            limit: Some(300.0),
            ..Reason::plain(
                nccl_check_contract::report::reason::ReasonCode::BusbwBelowThreshold,
                "busbw 12.3 < 300.0 GB/s",
            )
        });
        r.warnings.push(Reason::plain(
            nccl_check_contract::report::reason::ReasonCode::HostInterference,
            "w",
        ));
        let mut gpu = GpuEntry::new(
            3,
            "node017".into(),
            GpuInfo {
                uuid: "GPU-abc".into(),
                pci_bus_id: "0000:18:00.0".into(),
                name: "H100".into(),
                ..GpuInfo::default()
            },
        );
        let process = GpuProcess {
            pid: 4242,
            user: "bob".into(),
            used_bytes: Some(1 << 30),
        };
        gpu.health = Some(GpuHealth {
            index: 0,
            bus_id: "00000000:18:00.0".into(),
            name: "H100".into(),
            pci_device_id: None,
            nvlink: None,
            links: vec![],
            processes: vec![process.clone()],
            pcie: None,
            ecc_uncorrected_volatile: None,
            row_remap: None,
            throttle: None,
            clocks: None,
            errors: vec![],
        });
        r.gpus.push(gpu);
        r.results.push(Row {
            collective: "all_reduce".into(),
            size: 1 << 20,
            expected: Some(Expected::new(12.3, 300.0, "built-in".into())),
            ..Row::default()
        });
        r.avg_busbw.insert("all_reduce".into(), 12.3);
        r.error = Some("e".into());
        let text = serde_json::to_string_pretty(&r).expect("serialize");
        let plain = nccl_check_contract::report::read::parse_report(text.as_bytes())
            .expect("the contract reads it");
        let want = nccl_check_contract::report::Report {
            head: r.head.clone(),
            body: nccl_check_contract::report::Body {
                warnings: r.warnings.clone(),
                host: "node017".into(),
                gpus: vec![nccl_check_contract::report::Gpu {
                    rank: 3,
                    host: "node017".into(),
                    uuid: "GPU-abc".into(),
                    pci_bus_id: "0000:18:00.0".into(),
                    name: "H100".into(),
                    health: Some(nccl_check_contract::report::Health {
                        processes: vec![process],
                    }),
                }],
                results: vec![nccl_check_contract::report::Measured {
                    collective: "all_reduce".into(),
                    size: 1 << 20,
                    expected: Some(nccl_check_contract::report::Expected {
                        floor_gbs: 300.0,
                        margin: 12.3 / 300.0,
                        source: "built-in".into(),
                    }),
                }],
                avg_busbw: r.avg_busbw.clone(),
                error: Some("e".into()),
            },
        };
        assert_eq!(plain, want);
    }

    /// A pair row's bytes, key by key, for a GPU pair and a node pair (the GPUs written by
    /// their worker's names, `GPU2`), and each read back as it was written.
    #[test]
    fn pair_rows_keep_their_keys_and_read_back_the_same() {
        let text = concat!(
            r#"[{"kind":"gpu","node":"n7","a":"GPU2","b":"GPU10","ranks":[2,10],"bytes":1048576,"#,
            r#""time_us":12.5,"busbw":80.0,"gpu_busbw":90.0,"first_busbw":70.0,"#,
            r#""expected":{"floor_gbs":100.0,"margin":0.8,"source":"built-in"}},"#,
            r#"{"kind":"node","node":"","a":"n1","b":"n2","ranks":[0,8],"bytes":4096,"#,
            r#""time_us":1.0,"busbw":2.0}]"#
        );
        let rows: Vec<crate::measure::rows::PairRow> = serde_json::from_str(text).expect("reads");
        assert_eq!(serde_json::to_string(&rows).expect("writes"), text);
        let culprits: Vec<String> = rows.iter().map(|p| p.culprit(true).to_string()).collect();
        assert_eq!(culprits, ["n7 GPU2<->GPU10", "n1<->n2"]);
        // A GPU pair's end that is no GPU's name is no pair row, said with its node and name.
        let bad = r#"{"kind":"gpu","node":"n7","a":"GPU 2","b":"GPU3"}"#;
        let e =
            serde_json::from_str::<crate::measure::rows::PairRow>(bad).expect_err("no GPU name");
        assert!(
            e.to_string()
                .contains("pair on 'n7': 'GPU 2' is not a GPU's name"),
            "{e}"
        );
    }

    /// Names read back are the report's own, whole, however many reports a process reads (a
    /// leaking interner once read every new name past 16 KiB in total as `<unknown>`).
    #[test]
    fn names_read_back_are_kept_whole_however_many_reports_are_read() {
        for i in 0..4 {
            let name = format!("{i}{}", "x".repeat(10 << 10));
            let text = format!(
                r#"{{"schema_version":1,"verdict":"PASS","tool":"{name}","tool_version":"0",
                    "exit_code":0,"summary":"s","reasons":[],
                    "results":[{{"collective":"{name}","type":"{name}","redop":"sum"}}]}}"#
            );
            let r = parse_report(text.as_bytes()).expect("parses");
            assert_eq!(r.head.tool, name);
            assert_eq!(r.results[0].collective, name);
            assert_eq!(r.results[0].dtype, name);
        }
    }
}
