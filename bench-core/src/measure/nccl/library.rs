//! Finding and loading libnccl, and the table of the functions nccl-check calls.

use super::error::NcclError;
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};

pub type RawComm = *mut c_void;
pub type RawStream = *mut c_void;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

/// `ncclConfig_t` as of NCCL 2.28 (`version = 22800`). NCCL copies `min(size, its own size)`
/// bytes and ignores fields newer than `version`, so older and newer libraries read it correctly.
#[repr(C)]
pub struct NcclConfig {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub blocking: c_int,
    pub cga_cluster_size: c_int,
    pub min_ctas: c_int,
    pub max_ctas: c_int,
    pub net_name: *const c_char,
    pub split_share: c_int,
    pub traffic_class: c_int,
    pub comm_name: *const c_char,
    pub collnet_enable: c_int,
    pub cta_policy: c_int,
    pub shrink_share: c_int,
    pub nvls_ctas: c_int,
    pub n_channels_per_net_peer: c_int,
    pub nvlink_centric_sched: c_int,
}

impl NcclConfig {
    /// `NCCL_CONFIG_INITIALIZER` with `blocking = 0`: every field left to NCCL's default.
    pub fn non_blocking() -> Self {
        const UNDEF: c_int = c_int::MIN;
        NcclConfig {
            size: std::mem::size_of::<NcclConfig>(),
            magic: 0xcafe_beef,
            version: 22800,
            blocking: 0,
            cga_cluster_size: UNDEF,
            min_ctas: UNDEF,
            max_ctas: UNDEF,
            net_name: std::ptr::null(),
            split_share: UNDEF,
            traffic_class: UNDEF,
            comm_name: c"nccl-check".as_ptr(),
            collnet_enable: UNDEF,
            cta_policy: UNDEF,
            shrink_share: UNDEF,
            nvls_ctas: UNDEF,
            n_channels_per_net_peer: UNDEF,
            nvlink_centric_sched: UNDEF,
        }
    }

    /// The communicator that measures: blocking, sharing its parent's resources when split.
    pub fn blocking_shared() -> Self {
        NcclConfig {
            blocking: 1,
            split_share: 1,
            ..NcclConfig::non_blocking()
        }
    }
}

type FnVoid = unsafe extern "C" fn() -> c_int;
type FnVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type FnUniqueId = unsafe extern "C" fn(*mut UniqueId) -> c_int;
type FnInitRankConfig =
    unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int, *mut NcclConfig) -> c_int;
type FnSplit = unsafe extern "C" fn(RawComm, c_int, c_int, *mut RawComm, *mut NcclConfig) -> c_int;
type FnAsyncError = unsafe extern "C" fn(RawComm, *mut c_int) -> c_int;
type FnComm = unsafe extern "C" fn(RawComm) -> c_int;
type FnErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type FnLastError = unsafe extern "C" fn(RawComm) -> *const c_char;
type FnMemAlloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
pub(super) type FnReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    RawStream,
) -> c_int;
pub(super) type FnGather =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, RawComm, RawStream) -> c_int;
pub(super) type FnSend =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, RawStream) -> c_int;
pub(super) type FnRecv =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, RawStream) -> c_int;

/// Non-blocking communicators (`ncclConfig_t.blocking`) arrived in NCCL 2.14.
pub const MIN_VERSION: i32 = 21400;

/// A loaded libnccl: where it came from, its version, and its functions.
pub struct Nccl {
    pub(super) _lib: Library,
    pub path: PathBuf,
    pub version: i32,
    pub(super) get_unique_id: FnUniqueId,
    pub(super) init_rank_config: FnInitRankConfig,
    pub(super) async_error: FnAsyncError,
    /// `ncclCommSplit` (NCCL 2.18+): turns the bounded non-blocking communicator into the
    /// blocking one that measures (see [`super::Comm::into_blocking`]).
    pub(super) split: Option<FnSplit>,
    pub(super) abort: FnComm,
    pub(super) error_string: FnErrorString,
    pub(super) last_error: Option<FnLastError>,
    pub(super) mem_alloc: Option<FnMemAlloc>,
    pub(super) group_start: FnVoid,
    pub(super) group_end: FnVoid,
    pub(super) all_reduce: FnReduce,
    pub(super) all_gather: FnGather,
    pub(super) reduce_scatter: FnReduce,
    /// `ncclBroadcast`: `ncclAllReduce`'s signature, with the root where the op is.
    pub(super) broadcast: FnReduce,
    pub(super) send: FnSend,
    pub(super) recv: FnRecv,
    /// `ncclAlltoAll`, used from 2.28 on (as nccl-tests does); grouped send/recv before.
    pub(super) alltoall: Option<FnGather>,
}

/// Why NCCL could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// No candidate could be opened; each attempt with the loader's message.
    NotFound(Vec<(String, String)>),
    /// The file opened but lacks an NCCL symbol: not NCCL, or a broken install.
    NotNccl { path: String, symbol: &'static str },
    /// NCCL older than 2.14 has no non-blocking init, so a hang could not be bounded.
    TooOld { path: String, version: i32 },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::NotFound(tries) => {
                let tried: Vec<String> = tries.iter().map(|(n, w)| format!("{n}: {w}")).collect();
                let (tried, hint) = (tried.join("; "), nccl_check_contract::exit::NCCL_LIB_HINT);
                write!(f, "NCCL library not found (tried {tried}); {hint}")
            }
            LoadError::NotNccl { path, symbol } => {
                write!(f, "{path} is not an NCCL library (no symbol {symbol})")
            }
            LoadError::TooOld { path, version } => write!(
                f,
                "{path} is NCCL {}, older than 2.14: its init cannot be bounded in time",
                version_string(*version)
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// `22809` -> `2.28.9` (the encoding since NCCL 2.9: major*10000 + minor*100 + patch).
pub fn version_string(code: i32) -> String {
    let major = if code >= 10000 { 10000 } else { 1000 };
    format!("{}.{}.{}", code / major, (code % major) / 100, code % 100)
}

/// Candidate names when no path is given: the runtime package's SONAME first, then the dev link.
pub const DEFAULT_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

impl Nccl {
    /// Loads NCCL from `explicit` (no fallback when given) or from the library path.
    pub fn load(explicit: Option<&Path>) -> Result<Nccl, LoadError> {
        let candidates: Vec<String> = match explicit {
            Some(p) => vec![p.display().to_string()],
            None => DEFAULT_NAMES.iter().map(|s| s.to_string()).collect(),
        };
        let mut tries = Vec::new();
        for name in candidates {
            // SAFETY: loading NCCL runs its initialisers, which only set up NCCL's own state.
            match unsafe { Library::new(&name) } {
                Ok(lib) => return Self::from_library(lib, &name),
                Err(e) => {
                    let why =
                        std::error::Error::source(&e).map_or(e.to_string(), |s| s.to_string());
                    let why = why
                        .strip_prefix(&format!("{name}: "))
                        .unwrap_or(&why)
                        .to_string();
                    tries.push((name, why))
                }
            }
        }
        Err(LoadError::NotFound(tries))
    }

    fn from_library(lib: Library, name: &str) -> Result<Nccl, LoadError> {
        let get_version: FnVersion = sym(&lib, name, "ncclGetVersion")?;
        let path = loaded_path(get_version as *const c_void).unwrap_or_else(|| PathBuf::from(name));
        let shown = path.display().to_string();
        let mut version = 0;
        // SAFETY: ncclGetVersion writes one int.
        unsafe { get_version(&mut version) };
        if version < MIN_VERSION {
            return Err(LoadError::TooOld {
                path: shown,
                version,
            });
        }
        Ok(Nccl {
            get_unique_id: sym(&lib, &shown, "ncclGetUniqueId")?,
            init_rank_config: sym(&lib, &shown, "ncclCommInitRankConfig")?,
            async_error: sym(&lib, &shown, "ncclCommGetAsyncError")?,
            split: sym(&lib, &shown, "ncclCommSplit").ok(),
            abort: sym(&lib, &shown, "ncclCommAbort")?,
            error_string: sym(&lib, &shown, "ncclGetErrorString")?,
            last_error: sym(&lib, &shown, "ncclGetLastError").ok(),
            mem_alloc: sym(&lib, &shown, "ncclMemAlloc").ok(),
            group_start: sym(&lib, &shown, "ncclGroupStart")?,
            group_end: sym(&lib, &shown, "ncclGroupEnd")?,
            all_reduce: sym(&lib, &shown, "ncclAllReduce")?,
            all_gather: sym(&lib, &shown, "ncclAllGather")?,
            reduce_scatter: sym(&lib, &shown, "ncclReduceScatter")?,
            broadcast: sym(&lib, &shown, "ncclBroadcast")?,
            send: sym(&lib, &shown, "ncclSend")?,
            recv: sym(&lib, &shown, "ncclRecv")?,
            alltoall: if version >= 22800 {
                sym(&lib, &shown, "ncclAlltoAll").ok()
            } else {
                None
            },
            _lib: lib,
            path,
            version,
        })
    }

    pub fn version_string(&self) -> String {
        version_string(self.version)
    }

    /// A fresh unique id (rank 0's job; the others receive it through the rendezvous).
    pub fn unique_id(&self) -> Result<UniqueId, NcclError> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: writes 128 bytes into id.
        let rc = unsafe { (self.get_unique_id)(&mut id) };
        self.check(rc, "ncclGetUniqueId", std::ptr::null_mut())?;
        Ok(id)
    }

    /// `ncclMemAlloc` (as nccl-tests uses from NCCL 2.19), or `None` when the library lacks it.
    pub fn mem_alloc(&self, bytes: usize) -> Option<Result<u64, NcclError>> {
        let f = self.mem_alloc?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: NCCL allocates on the current CUDA context and writes the pointer.
        let rc = unsafe { f(&mut p, bytes.max(1)) };
        Some(
            self.check(rc, "ncclMemAlloc", std::ptr::null_mut())
                .map(|_| p as u64),
        )
    }

    /// Turns a return code into a result, with NCCL's own error text.
    pub(super) fn check(
        &self,
        rc: c_int,
        call: &'static str,
        comm: RawComm,
    ) -> Result<(), NcclError> {
        if rc == 0 || rc == super::IN_PROGRESS {
            return Ok(());
        }
        Err(self.error(rc, call, comm))
    }

    pub(super) fn error(&self, rc: c_int, call: &'static str, comm: RawComm) -> NcclError {
        // SAFETY: both return static or library-owned NUL-terminated strings (or null).
        let text = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                unsafe { CStr::from_ptr(p) }
                    .to_string_lossy()
                    .trim()
                    .to_string()
            }
        };
        let mut detail = text(unsafe { (self.error_string)(rc) });
        if let Some(last) = self.last_error {
            let l = text(unsafe { last(comm) });
            if !l.is_empty() {
                detail = format!("{detail}: {l}");
            }
        }
        NcclError::new(rc, call, detail)
    }
}

fn sym<T: Copy>(lib: &Library, path: &str, name: &'static str) -> Result<T, LoadError> {
    let cname = format!("{name}\0");
    // SAFETY: T is the function-pointer type of `name` as declared in nccl.h.
    unsafe { lib.get::<T>(cname.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| LoadError::NotNccl {
            path: path.to_string(),
            symbol: name,
        })
}

/// The file a symbol was loaded from (dladdr), so the report names the real library.
fn loaded_path(addr: *const c_void) -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    let name = unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned();
    Some(std::fs::canonicalize(&name).unwrap_or_else(|_| PathBuf::from(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_matches_nccl_2_28_layout() {
        // nccl.h 2.28: ncclConfig_v22800 is 80 bytes on x86-64 (cudarc's bindgen layout).
        assert_eq!(std::mem::size_of::<NcclConfig>(), 80);
        assert_eq!(std::mem::size_of::<UniqueId>(), 128);
    }

    #[test]
    fn version_codes_read_like_nccl() {
        assert_eq!(version_string(22809), "2.28.9");
        assert_eq!(version_string(21400), "2.14.0");
        assert_eq!(version_string(2804), "2.8.4");
    }

    #[test]
    fn missing_library_lists_what_was_tried() {
        let e = Nccl::load(Some(Path::new("/nonexistent/libnccl.so.2")))
            .err()
            .map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains("/nonexistent/libnccl.so.2"), "{e}");
        assert!(e.contains("--nccl-lib"), "{e}");
    }

    #[test]
    fn a_library_that_is_not_nccl_is_named() {
        let e = Nccl::load(Some(Path::new("libc.so.6")))
            .err()
            .map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(
            e.contains("is not an NCCL library (no symbol ncclGetVersion)"),
            "{e}"
        );
    }
}
