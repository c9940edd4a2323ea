//! `nccl-check-prolog --where-configured`: every place in this node's Slurm configuration that
//! still runs this prolog (the controller's live `Prolog`/`Epilog` list, each slurm.conf the node
//! may read with its `Include` files, a configless node's cache). The package's prerm asks it
//! before removing the binary: a removed prolog that Slurm still runs fails every job's prolog and
//! drains the node.

use nccl_check_host::slurm_config::Sources;
use std::path::Path;
use std::time::Duration;

/// The installed path the packages put the prolog at.
pub const INSTALLED: &str = "/usr/sbin/nccl-check-prolog";
/// How long the controller is asked (the prerm must not hang an apt run).
const SCONTROL_WAIT: Duration = Duration::from_secs(10);

/// The lines to print: one per place that runs the prolog; empty when none does.
pub fn places(
    root: &Path,
    slurm_conf: Option<&str>,
    scontrol: Option<&Path>,
) -> (Vec<String>, Vec<String>) {
    let s = Sources::read(root, slurm_conf, scontrol, SCONTROL_WAIT);
    let mut notes = Vec::new();
    if let Some(e) = &s.live_error {
        notes.push(format!("no live settings ({e}); the files decide"));
    }
    notes.extend(s.file_errors.iter().map(|e| format!("unreadable: {e}")));
    let mut found = s.running(Path::new(INSTALLED), root);
    found.dedup();
    (found, notes)
}

/// The command: prints each place; exit 1 when there is one, 0 when none.
pub fn run(scontrol: &Path, slurm_conf: Option<&str>) -> i32 {
    let sc = scontrol.is_file().then_some(scontrol);
    let (found, notes) = places(Path::new("/"), slurm_conf, sc);
    for n in &notes {
        nccl_check_host::outln!("# {n}");
    }
    if found.is_empty() {
        nccl_check_host::outln!("# no Prolog= or Epilog= of this node's Slurm runs {INSTALLED}");
        return 0;
    }
    for f in &found {
        nccl_check_host::outln!("{f}");
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_included_prolog_on_a_configless_node_is_found_and_named_with_its_line() {
        let d = nccl_check_host::test_support::scratch_dir("slurm-uses");
        let cache = d.join("run/slurm/conf");
        std::fs::create_dir_all(&cache).expect("mkdir");
        std::fs::write(
            cache.join("slurm.conf"),
            "ClusterName=c\ninclude gate.conf\n",
        )
        .expect("w");
        std::fs::write(
            cache.join("gate.conf"),
            "# gate\nProlog=/usr/sbin/nccl-check-prolog\n",
        )
        .expect("w");
        let (found, notes) = places(&d, None, None);
        assert_eq!(found.len(), 1, "{found:?} {notes:?}");
        assert!(
            found[0].ends_with(
                "run/slurm/conf/gate.conf:2: Prolog=/usr/sbin/nccl-check-prolog -> remove that \
                 Prolog= line (or this entry of its list)"
            ),
            "{found:?}"
        );
        std::fs::write(cache.join("gate.conf"), "Prolog=/etc/slurm/other\n").expect("w");
        assert!(places(&d, None, None).0.is_empty());
        std::fs::remove_dir_all(&d).ok();
    }

    /// Regression (issue 46, S1): with the gate's link the glob's only file, the refusal said
    /// "remove that file, keep the Prolog= line (it runs the site's others)": there were none,
    /// the glob then matched nothing and slurmd drained the node at the next job.
    #[test]
    fn the_glob_s_only_file_asks_to_remove_the_line_too_and_an_empty_glob_is_named() {
        let d = nccl_check_host::test_support::scratch_dir("slurm-uses-only");
        let conf = d.join("etc/slurm");
        std::fs::create_dir_all(conf.join("prolog.d")).expect("mkdir");
        std::fs::create_dir_all(d.join("usr/sbin")).expect("mkdir");
        std::fs::write(d.join("usr/sbin/nccl-check-prolog"), "bin").expect("w");
        std::os::unix::fs::symlink(INSTALLED, conf.join("prolog.d/50-gate")).expect("ln");
        std::fs::write(
            conf.join("slurm.conf"),
            "ClusterName=c\nProlog=/etc/slurm/prolog.d/*\n",
        )
        .expect("w");
        let (found, notes) = places(&d, None, None);
        assert_eq!(found.len(), 1, "{found:?} {notes:?}");
        assert!(
            found[0].ends_with(
                "etc/slurm/slurm.conf:2: Prolog=/etc/slurm/prolog.d/* -> through \
                 /etc/slurm/prolog.d/50-gate, the only file it matches: remove that file and the \
                 Prolog= line (or this entry of its list); a Prolog= pattern left matching \
                 nothing: slurmd fails every job's prolog on a pattern that matches nothing and \
                 drains the node ('Prolog error')"
            ),
            "{found:?}"
        );
        // Done as the old advice said: the empty glob is what --check-config names.
        std::fs::remove_file(conf.join("prolog.d/50-gate")).expect("rm");
        let s = nccl_check_host::slurm_config::Sources::read(&d, None, None, SCONTROL_WAIT);
        let p = s
            .effective()
            .expect("settings")
            .entry_problems(Path::new(INSTALLED), &d);
        std::fs::remove_dir_all(&d).ok();
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("Prolog=/etc/slurm/prolog.d/* (")
                && p[0].contains("matches no file: slurmd fails every job's prolog"),
            "{p:?}"
        );
    }

    /// Regression: the refusal named the site's glob ("Remove that Prolog= entry"), and knew
    /// neither an Epilog= alone by its name nor HealthCheckProgram=nccl-check-recheck.
    #[test]
    fn a_glob_epilog_names_its_link_and_the_health_check_is_found() {
        let d = nccl_check_host::test_support::scratch_dir("slurm-uses-glob");
        let conf = d.join("etc/slurm");
        std::fs::create_dir_all(conf.join("epilog.d")).expect("mkdir");
        std::fs::create_dir_all(d.join("usr/sbin")).expect("mkdir");
        std::fs::write(d.join("usr/sbin/nccl-check-prolog"), "bin").expect("w");
        std::fs::write(conf.join("epilog.d/10-site"), "#!/bin/sh\ntrue\n").expect("w");
        std::os::unix::fs::symlink(INSTALLED, conf.join("epilog.d/50-gate")).expect("ln");
        std::fs::write(
            conf.join("slurm.conf"),
            "ClusterName=c\nEpilog=/etc/slurm/epilog.d/*\n\
             HealthCheckProgram=/usr/sbin/nccl-check-recheck\n",
        )
        .expect("w");
        let (found, notes) = places(&d, None, None);
        std::fs::remove_dir_all(&d).ok();
        assert_eq!(found.len(), 2, "{found:?} {notes:?}");
        assert!(
            found[0].ends_with(
                "etc/slurm/slurm.conf:2: Epilog=/etc/slurm/epilog.d/* -> through \
                 /etc/slurm/epilog.d/50-gate: remove that file, keep the Epilog= line (it runs \
                 the site's others)"
            ),
            "{found:?}"
        );
        assert!(!found[0].contains("10-site"), "{found:?}");
        assert!(
            found[1].ends_with(
                "etc/slurm/slurm.conf:3: HealthCheckProgram=/usr/sbin/nccl-check-recheck -> \
                 remove the HealthCheckProgram= line (and HealthCheckInterval=, \
                 HealthCheckNodeState= if only it used them)"
            ),
            "{found:?}"
        );
        assert!(found.iter().all(|f| !f.contains("Prolog")), "{found:?}");
    }
}
