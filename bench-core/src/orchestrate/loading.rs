//! Before any peer is met: CUDA and NCCL loaded side by side, the devices this process drives,
//! and what is read of them alone (their identity, `--explain`).

use super::gather_facts;
use crate::facts::interconnect::Interconnect;
use crate::measure::cuda;
use crate::measure::nccl::Nccl;
use crate::measure::runner::{RunError, Status};
use crate::model::thresholds::GpuModel;
use crate::report::json::NcclInfo;
use crate::settings::options::Options;
use std::time::Instant;

/// What the report records of loading CUDA and NCCL, as far as it got.
#[derive(Debug, Clone, Default)]
pub(super) struct Loading {
    pub(super) cuda_init_ms: f64,
    pub(super) nccl_load_ms: f64,
    pub(super) nccl: Option<NcclInfo>,
}

/// CUDA and NCCL loaded: NCCL, how many GPUs are visible, which of them this process drives.
pub(super) struct Loaded {
    pub(super) nccl: &'static Nccl,
    pub(super) visible: usize,
    pub(super) devices: Vec<usize>,
    pub(super) record: Loading,
}

/// dlopen NCCL while the driver starts (both take a while, neither needs the other); NCCL, the
/// visible GPUs and the devices this process drives, or how far it got and why not.
pub(super) fn load(opts: &Options, status: &Status) -> Result<Loaded, (Loading, RunError)> {
    // What the progress line and the watchdog name while the libraries load.
    *status.lock().unwrap_or_else(|p| p.into_inner()) =
        vec!["loading NCCL and the CUDA driver".to_string()];
    let lib_path = opts.nccl_lib.clone();
    let loader = std::thread::spawn(move || {
        let t = Instant::now();
        (Nccl::load(lib_path.as_deref()), t.elapsed())
    });
    let t = Instant::now();
    let driver = cuda::init_driver(opts.cuda_visible_devices.as_deref());
    let mut record = Loading {
        cuda_init_ms: t.elapsed().as_secs_f64() * 1e3,
        ..Loading::default()
    };
    let Ok((nccl, load_time)) = loader.join() else {
        let e = RunError::Runtime("NCCL loader thread panicked".into());
        return Err((record, e));
    };
    record.nccl_load_ms = load_time.as_secs_f64() * 1e3;
    let nccl: &'static Nccl = match nccl {
        Ok(nccl) => Box::leak(Box::new(nccl)),
        Err(e) => return Err((record, RunError::Library(e.to_string()))),
    };
    record.nccl = Some(NcclInfo {
        version: nccl.version_string(),
        version_code: nccl.version,
        library: nccl.path.display().to_string(),
    });
    let visible = driver.map_err(|e| RunError::NoGpu(e.to_string()));
    match visible.and_then(|visible| Ok((visible, devices(opts, visible)?))) {
        Ok((visible, devices)) => Ok(Loaded {
            nccl,
            visible,
            devices,
            record,
        }),
        Err(e) => Err((record, e)),
    }
}

/// The devices this process drives: `--gpus`, else every visible one.
fn devices(opts: &Options, visible: usize) -> Result<Vec<usize>, RunError> {
    match &opts.gpus {
        None => Ok((0..visible).collect()),
        Some(list) => match list.iter().find(|&&g| g >= visible) {
            Some(bad) => Err(RunError::NoGpu(format!(
                "no usable GPU: --gpus names device {bad}, but only {visible} are visible"
            ))),
            None => Ok(list.clone()),
        },
    }
}

/// The text of `--explain-thresholds`: for this node's GPUs (`devices`), or for
/// `--gpu-model NAME --gpus N` without asking CUDA.
pub(super) fn explain_check(
    opts: &Options,
    devices: Option<&[usize]>,
    nvml: Option<&crate::facts::gpu_health::HealthFacts>,
) -> String {
    let (name, count, device_id, interconnect) = match (&opts.gpu_model, devices, nvml) {
        (None, Some(devices), Some(nvml)) => {
            let (name, id, interconnect) = read_gpus(devices, nvml);
            (name, devices.len() as u32, id, interconnect)
        }
        (Some((model, count)), ..) => {
            // Offline: the SKU by its whole name, the interconnect its form factor implies.
            let interconnect = match crate::model::sku::sku_named(model) {
                Some(s) => Interconnect::assumed(s.form, s.nvlink.map_or(0, |l| l.links), *count),
                None => Interconnect::unknown(
                    "the name is no whole name of the SKU table, so its form factor is unknown",
                ),
            };
            (model.clone(), *count, None, interconnect)
        }
        _ => (String::new(), 0, None, Interconnect::unknown("no GPU")),
    };
    let (model, identity) = identify(name, device_id, &interconnect);
    let rules = crate::model::thresholds::explain(
        &opts.config.thresholds,
        &model.gpu(),
        &identity,
        &interconnect.to_string(),
        count,
        1,
    );
    let node = gather_facts::explain_node(
        opts,
        device_id,
        &model.name,
        &crate::measure::nccl_env::hostname(),
    );
    format!(
        "{rules}{node}Outlier rule: a GPU, pair or node below {:.2} x its peers' median is FAIL; retest: {}.\nConfig: {}\n",
        opts.config.outliers.fraction,
        opts.config.outliers.retest,
        opts.config.path.as_ref().map_or("built-in defaults only".to_string(), |p| format!(
            "{} over the built-in defaults",
            p.display()
        ))
    )
}

/// The GPU model of a first GPU's driver name and PCI device ID and of the GPUs' interconnect
/// (its SKU by device ID, else by the whole name), and its identity as the report shows it.
pub(super) fn identify(
    name: String,
    device_id: Option<u16>,
    interconnect: &Interconnect,
) -> (GpuModel, String) {
    let identity = crate::model::sku::Identity::resolve(device_id, &name);
    let model = GpuModel {
        name,
        sku: identity.sku(),
        interconnect: interconnect.class,
    };
    (model, identity.to_string())
}

/// This process's GPUs as the node reports them: the first one's driver name and PCI device ID
/// (sysfs, else NVML's), and how they reach each other (NVML's links).
pub(super) fn read_gpus(
    devices: &[usize],
    nvml: &crate::facts::gpu_health::HealthFacts,
) -> (String, Option<u16>, Interconnect) {
    let infos: Vec<_> = devices
        .iter()
        .filter_map(|&d| cuda::gpu_info(d).ok())
        .collect();
    let buses: Vec<String> = infos.iter().map(|i| i.pci_bus_id.clone()).collect();
    let interconnect = crate::facts::interconnect::of_node(nvml, &buses);
    let first = infos.first();
    let id = first.and_then(|i| i.pci_device_id).or_else(|| match nvml {
        crate::facts::gpu_health::HealthFacts::Available { gpus, .. } => gpus
            .iter()
            .find(|g| crate::config::expected_gpus::bus_id(&g.bus_id) == buses.first().cloned())
            .and_then(|g| g.pci_device_id),
        _ => None,
    });
    let name = first.map(|i| i.name.clone()).unwrap_or_default();
    (name, id, interconnect)
}
