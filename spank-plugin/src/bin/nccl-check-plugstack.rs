//! `nccl-check-plugstack --check [FILE]`: the admin's check of the `nccl_check.so` plugin line,
//! on any node (no slurmd, no GPU), with the plugin's own parser; the work is in
//! [`nccl_check::plugstack`], this file is the command line and the printout.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use nccl_check::plugstack;
use nccl_check_contract::check_line::CheckProblem;

const ABOUT: &str = "Check the nccl_check.so line(s) of Slurm's plugstack.conf with the \
plugin's own parser, as srun, sbatch and salloc will read them";

const AFTER: &str = "\
Reads plugstack.conf where this node's slurm.conf puts it ($SLURM_CONF, /etc/slurm, a configless
node's cache; PlugStackConfig= or plugstack.conf beside slurm.conf) and every file it includes,
finds each 'required|optional .../nccl_check.so ARGS' line, and checks its arguments with the
parser --nccl-check uses, the plugin file (PluginDir for a bare name) and the worker.

Examples:
  nccl-check-plugstack --check
  nccl-check-plugstack --check /etc/slurm/plugstack.conf.d/zz-nccl-check.conf

Output: '# ' lines (where it looked, each line's effective arguments, notes), then one
'INVALID FILE:LINE: ...' line per problem, e.g.
  INVALID /etc/slurm/plugstack.conf.d/zz-nccl-check.conf:11: unknown argument 'timout' (did you mean 'timeout'?) ...

Exit codes: 0 valid, or no enabled line (--nccl-check is off: said in a note); 2 a problem.";

#[derive(Parser, Debug)]
#[command(name = "nccl-check-plugstack", version, about = ABOUT, after_help = AFTER)]
struct Cli {
    /// Check the plugin line(s) (the only action; required)
    #[arg(long, required = true)]
    check: bool,
    /// The plugstack file to read instead of the one Slurm's config names (its includes are
    /// followed)
    file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let root = Path::new("/");
    let slurm_conf = std::env::var("SLURM_CONF").ok();
    let found = plugstack::locate(root, slurm_conf.as_deref());
    let (main, source) = match &cli.file {
        Some(f) => (f.clone(), "given".to_string()),
        None => (found.plugstack.clone(), found.source.clone()),
    };
    let stack = plugstack::read(&main);
    nccl_check_host::outln!("# plugstack: {} ({source})", main.display());
    if stack.files.len() > 1 {
        nccl_check_host::outln!("# included: {}", plugstack::joined(&stack.files[1..]));
    }
    let f = plugstack::check(&stack, found.plugin_dir.as_deref(), root);
    for e in &f.effective {
        nccl_check_host::outln!("# {e}");
    }
    for n in &f.notes {
        nccl_check_host::outln!("# {n}");
    }
    for p in &f.problems {
        nccl_check_host::outln!("{}", CheckProblem::invalid(p.as_str()));
    }
    ExitCode::from(if f.problems.is_empty() { 0 } else { 2 })
}
