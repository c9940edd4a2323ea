//! `--explain-plan`'s own arguments, as clap reads them; `localize::cli::answer` answers them.

use clap::builder::NonEmptyStringValueParser;

/// What `--explain-plan` was asked, as typed. The counts stay text until
/// `localize::cli::answer` reads them, so that a bad one is named in this mode's own words.
#[derive(clap::Args, Debug, Default, Clone)]
#[command(after_help = "Examples:\n  \
    nccl-check --explain-plan --nodes 1024 --gpus-per-node 8\n  \
    nccl-check --explain-plan --nodes 64 --gpus-per-node 8 --config site.toml \
    --gpu-model H100 --json")]
pub struct ExplainArgs {
    /// Nodes in the allocation to explain
    #[arg(long, value_name = "N", value_parser = NonEmptyStringValueParser::new())]
    pub nodes: Option<String>,
    /// GPUs per node
    #[arg(long = "gpus-per-node", value_name = "G", value_parser = NonEmptyStringValueParser::new())]
    pub gpus_per_node: Option<String>,
    /// The worker's config whose plan and thresholds apply [env: NCCL_CHECK_CONFIG; default:
    /// /etc/nccl-check/nccl-check.toml when it exists, over the built-in defaults]
    #[arg(long, value_name = "FILE", value_parser = NonEmptyStringValueParser::new())]
    pub config: Option<String>,
    /// The plan to explain, from the config's [plans] [default: quick]
    #[arg(long, value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    pub plan: Option<String>,
    /// The GPU model, so that threshold rules naming a GPU can apply (e.g. H100)
    #[arg(long = "gpu-model", value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    pub gpu_model: Option<String>,
    /// The busbw between nodes to model, GB/s (e.g. 1 for 10 GbE or sockets) [default: the
    /// model's 400 Gb/s NIC]
    #[arg(long = "network-gbs", value_name = "GBS", value_parser = NonEmptyStringValueParser::new())]
    pub network_gbs: Option<String>,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
}
