//! CUDA through cudarc's driver API, loaded at run time: device facts, one context and stream per
//! GPU, the embedded fill/verify kernels, and stream waits that poll against a deadline (cudarc's
//! own `synchronize` blocks without one).

use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The check kernels (kernels/check.cu), compiled to PTX by kernels/build-ptx.sh.
const CHECK_PTX: &str = include_str!("../../kernels/check.ptx");

/// Why no GPU can be used.
#[derive(Debug)]
pub enum NoGpu {
    DriverMissing,
    Init(DriverError),
    /// None seen; `CUDA_VISIBLE_DEVICES` as the worker was started with it.
    NoDevice(Option<String>),
}

impl std::fmt::Display for NoGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoGpu::DriverMissing => write!(
                f,
                "no usable GPU: the CUDA driver library (libcuda.so.1) was not found"
            ),
            NoGpu::Init(e) => write!(f, "no usable GPU: cuInit failed: {e}"),
            NoGpu::NoDevice(cvd) => match cvd {
                Some(v) => write!(
                    f,
                    "no usable GPU: no CUDA device visible (CUDA_VISIBLE_DEVICES='{v}')"
                ),
                None => write!(f, "no usable GPU: the driver reports no CUDA device"),
            },
        }
    }
}

/// Initialises the driver and returns the number of visible devices (`cuda_visible_devices`:
/// what CUDA was shown, for the error when it shows none).
pub fn init_driver(cuda_visible_devices: Option<&str>) -> Result<usize, NoGpu> {
    let no_device = || NoGpu::NoDevice(cuda_visible_devices.map(str::to_string));
    // SAFETY: only probes whether libcuda can be opened (cudarc would panic later otherwise).
    if !unsafe { sys::is_culib_present() } {
        return Err(NoGpu::DriverMissing);
    }
    cudarc::driver::result::init().map_err(|e| match e.0 {
        sys::CUresult::CUDA_ERROR_NO_DEVICE => no_device(),
        _ => NoGpu::Init(e),
    })?;
    match cudarc::driver::result::device::get_count() {
        Ok(0) | Err(_) => Err(no_device()),
        Ok(n) => Ok(n as usize),
    }
}

pub use crate::measure::gpu::GpuInfo;

/// Whether CUDA can map `b`'s memory from `a` (NVLink or PCIe peer access). When it can, NCCL
/// is expected to use its P2P transport between them; SHM or sockets there is a fallback.
pub fn can_access_peer(a: usize, b: usize) -> bool {
    use cudarc::driver::result::device;
    let (Ok(da), Ok(db)) = (device::get(a as i32), device::get(b as i32)) else {
        return false;
    };
    let mut can = 0;
    // SAFETY: writes one int; both handles come from cuDeviceGet.
    let rc = unsafe { sys::cuDeviceCanAccessPeer(&mut can, da, db) };
    rc == sys::CUresult::CUDA_SUCCESS && can == 1
}

/// Reads the facts of device `ordinal` (no context needed).
pub fn gpu_info(ordinal: usize) -> Result<GpuInfo, DriverError> {
    use cudarc::driver::result::device;
    let dev = device::get(ordinal as i32)?;
    let attr = |a| unsafe { device::get_attribute(dev, a) };
    let domain = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?;
    let bus = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    let slot = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?;
    let uuid = device::get_uuid(dev)?;
    let b: Vec<u8> = uuid.bytes.iter().map(|&c| c as u8).collect();
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    let pci_bus_id = format!("{domain:04x}:{bus:02x}:{slot:02x}.0");
    Ok(GpuInfo {
        pci_device_id: device_id_from_sysfs(std::path::Path::new("/"), &pci_bus_id),
        device: ordinal,
        name: device::get_name(dev)?,
        pci_bus_id,
        uuid: format!(
            "GPU-{}",
            [0..4, 4..6, 6..8, 8..10, 10..16].map(hex).join("-")
        ),
        memory_bytes: unsafe { device::total_mem(dev) }? as u64,
    })
}

/// One GPU as a worker thread drives it: context, stream, kernels and a device-side counter.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Loaded by [`Gpu::load_kernels`] (the driver compiles their PTX: that can overlap NCCL's
    /// init), else at their first use.
    kernels: std::cell::OnceCell<Kernels>,
    counter: u64,
    blocks: u32,
}

/// The fill and verify kernels of one context.
struct Kernels {
    fill: CudaFunction,
    verify: CudaFunction,
}

/// A stream wait that ended without completion.
#[derive(Debug)]
pub enum StreamWait {
    Cuda(DriverError),
    Deadline,
}

impl Gpu {
    /// Retains the primary context (the one NCCL uses) and makes a non-blocking stream; the
    /// kernels come with [`Gpu::load_kernels`].
    pub fn open(ordinal: usize) -> Result<Gpu, DriverError> {
        let ctx = CudaContext::new(ordinal)?;
        // Raw device pointers are used throughout; cudarc's per-access event tracking would only
        // add API calls to the timed loop.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let counter = unsafe { cudarc::driver::result::malloc_sync(8) }?;
        let sms =
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(Gpu {
            ctx,
            stream,
            kernels: std::cell::OnceCell::new(),
            counter,
            blocks: (sms.max(1) as u32) * 4,
        })
    }

    /// Loads the check kernels (the driver compiles their PTX for this GPU, or takes them from
    /// its cache); once.
    pub fn load_kernels(&self) -> Result<(), DriverError> {
        self.kernels().map(|_| ())
    }

    fn kernels(&self) -> Result<&Kernels, DriverError> {
        if let Some(k) = self.kernels.get() {
            return Ok(k);
        }
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(CHECK_PTX))?;
        let loaded = Kernels {
            fill: module.load_function("nccl_check_fill")?,
            verify: module.load_function("nccl_check_verify")?,
        };
        Ok(self.kernels.get_or_init(|| loaded))
    }

    pub fn raw_stream(&self) -> *mut std::ffi::c_void {
        self.stream.cu_stream() as *mut std::ffi::c_void
    }

    fn launch_cfg(&self, count: u64) -> LaunchConfig {
        let threads = 512u32;
        let needed = count.div_ceil(threads as u64).max(1);
        LaunchConfig {
            grid_dim: (needed.min(self.blocks as u64) as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Writes rank's input values into `count` elements at `buf` (see kernels/check.cu).
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        &self,
        buf: u64,
        count: u64,
        dtype: u32,
        op: u32,
        seed: u32,
        rank: u32,
        nranks: u32,
        index_base: u64,
    ) -> Result<(), DriverError> {
        if count == 0 {
            return Ok(());
        }
        let mut b = self.stream.launch_builder(&self.kernels()?.fill);
        b.arg(&buf)
            .arg(&count)
            .arg(&dtype)
            .arg(&op)
            .arg(&seed)
            .arg(&rank)
            .arg(&nranks)
            .arg(&index_base);
        // SAFETY: buf holds count elements of dtype on this GPU; the kernel stays within them.
        unsafe { b.launch(self.launch_cfg(count)) }.map(|_| ())
    }

    /// Sets `bytes` bytes at `buf` to 0xff, so that an output NCCL never wrote cannot pass.
    pub fn poison(&self, buf: u64, bytes: u64) -> Result<(), DriverError> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: buf holds bytes bytes on this GPU.
        unsafe {
            cudarc::driver::result::memset_d8_async(
                buf,
                0xff,
                bytes as usize,
                self.stream.cu_stream(),
            )
        }
    }

    /// Enqueues the comparison of `count` elements at `buf` with the expected values; the count of
    /// differing elements is read with [`Gpu::read_wrong`] after the stream completes.
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &self,
        buf: u64,
        count: u64,
        dtype: u32,
        op: u32,
        seed: u32,
        nranks: u32,
        expected: crate::model::collectives::ExpectedData,
    ) -> Result<(), DriverError> {
        use crate::model::collectives::ExpectedData;
        let (mode, chunk, src, base) = match expected {
            ExpectedData::Reduction { index_base } => (0u32, 0u64, 0u32, index_base),
            ExpectedData::CopyFrom {
                src_rank,
                index_base,
            } => (1, 0, src_rank, index_base),
            ExpectedData::Chunks { chunk, index_base } => (1, chunk, 0, index_base),
        };
        // SAFETY: counter is an 8-byte device allocation of this context.
        unsafe {
            cudarc::driver::result::memset_d8_async(self.counter, 0, 8, self.stream.cu_stream())
        }?;
        if count == 0 {
            return Ok(());
        }
        let counter = self.counter;
        let mut b = self.stream.launch_builder(&self.kernels()?.verify);
        b.arg(&buf)
            .arg(&count)
            .arg(&dtype)
            .arg(&op)
            .arg(&seed)
            .arg(&nranks);
        b.arg(&mode).arg(&chunk).arg(&src).arg(&base).arg(&counter);
        // SAFETY: buf holds count elements of dtype; counter is 8 bytes; both on this GPU.
        unsafe { b.launch(self.launch_cfg(count)) }.map(|_| ())
    }

    /// Enqueues the copy of `host` to `buf` on this GPU's stream (the localization's round
    /// vector). Pageable memory is staged before this returns, so `host` may go at once.
    pub fn copy_in(&self, buf: u64, host: &[f64]) -> Result<(), DriverError> {
        // SAFETY: buf holds at least host.len() f64s on this GPU (the caller checks).
        unsafe { cudarc::driver::result::memcpy_htod_async(buf, host, self.stream.cu_stream()) }
    }

    /// Reads `host.len()` f64s from `buf`; call only after [`Gpu::wait`] succeeded, so the copy
    /// cannot block on pending work.
    pub fn copy_out(&self, buf: u64, host: &mut [f64]) -> Result<(), DriverError> {
        // SAFETY: buf holds at least host.len() f64s; the stream is idle (waited).
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(host, buf) }
    }

    /// Reads the wrong-element counter; call only after [`Gpu::wait`] succeeded.
    pub fn read_wrong(&self) -> Result<u64, DriverError> {
        let mut host = [0u64; 1];
        // SAFETY: the stream is idle (waited), so this copy cannot block on pending work.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, self.counter) }?;
        Ok(host[0])
    }

    /// Busy-polls the stream (as nccl-tests' testStreamSynchronize does), calling `also` between
    /// polls (the communicator's async-error check), until done, an error, or the deadline.
    pub fn wait<E>(
        &self,
        deadline: Instant,
        mut also: impl FnMut() -> Result<(), E>,
    ) -> Result<(), Result<StreamWait, E>> {
        let raw = self.stream.cu_stream();
        let mut polls = 0u64;
        loop {
            // SAFETY: raw is this context's live stream.
            match unsafe { sys::cuStreamQuery(raw) } {
                sys::CUresult::CUDA_SUCCESS => return Ok(()),
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(Ok(StreamWait::Cuda(DriverError(e)))),
            }
            also().map_err(Err)?;
            polls += 1;
            if polls % 64 == 0 && Instant::now() >= deadline {
                return Err(Ok(StreamWait::Deadline));
            }
            if polls > 200_000 {
                // Long waits (large sizes, slow links) need not burn a core at full speed.
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Reads a PCI device's vendor:device from sysfs (`<root>/sys/bus/pci/devices/<bus id>/`):
/// the device ID when the vendor is NVIDIA, None when it cannot be read. `bus_id` in any of
/// the forms CUDA or NVML write (`0000:18:00.0`, `00000000:18:00.0`, upper or lower case).
pub fn device_id_from_sysfs(root: &std::path::Path, bus_id: &str) -> Option<u16> {
    let bus = crate::config::expected_gpus::bus_id(bus_id)?;
    let dir = root.join("sys/bus/pci/devices").join(&bus);
    let read = |f: &str| -> Option<u16> {
        let text = nccl_check_host::read::attr(&dir.join(f)).ok()?;
        u16::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok()
    };
    (read("vendor")? == crate::model::sku::NVIDIA_VENDOR).then_some(())?;
    read("device")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_id_is_read_from_sysfs_for_nvidia_devices_only() {
        let root = nccl_check_host::test_support::scratch_dir("sku-sysfs");
        let dev = |bus: &str, vendor: &str, device: &str| {
            let d = root.join("sys/bus/pci/devices").join(bus);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(d.join("device"), format!("{device}\n")).unwrap();
        };
        dev("0000:18:00.0", "0x10de", "0x2331");
        dev("0000:19:00.0", "0x8086", "0x1234");
        assert_eq!(
            device_id_from_sysfs(&root, "00000000:18:00.0"),
            Some(0x2331)
        );
        assert_eq!(device_id_from_sysfs(&root, "0000:18:00.0"), Some(0x2331));
        assert_eq!(device_id_from_sysfs(&root, "0000:19:00.0"), None);
        assert_eq!(device_id_from_sysfs(&root, "0000:1a:00.0"), None);
        assert_eq!(device_id_from_sysfs(&root, "../../etc"), None);
    }
}
