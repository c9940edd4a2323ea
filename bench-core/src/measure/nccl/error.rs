//! NCCL result codes as errors that keep the code, the call and NCCL's own last-error text.

use std::fmt;

/// `ncclInProgress`: a non-blocking communicator is still working; poll `ncclCommGetAsyncError`.
pub const IN_PROGRESS: i32 = 7;

/// A failed NCCL call.
#[derive(Debug, Clone)]
pub struct NcclError {
    /// The `ncclResult_t` value (an int, so values from newer libraries stay representable).
    pub code: i32,
    /// The NCCL function that returned it.
    pub call: &'static str,
    /// `ncclGetErrorString(code)` plus `ncclGetLastError()`, when the library gave them.
    pub detail: String,
}

impl NcclError {
    /// The error of `call` with result `code` and `detail`.
    pub fn new(code: i32, call: &'static str, detail: impl Into<String>) -> NcclError {
        let detail = detail.into();
        NcclError { code, call, detail }
    }

    /// The name of an `ncclResult_t` value, as in nccl.h.
    pub fn code_name(code: i32) -> &'static str {
        match code {
            0 => "ncclSuccess",
            1 => "ncclUnhandledCudaError",
            2 => "ncclSystemError",
            3 => "ncclInternalError",
            4 => "ncclInvalidArgument",
            5 => "ncclInvalidUsage",
            6 => "ncclRemoteError",
            7 => "ncclInProgress",
            8 => "ncclTimeout",
            _ => "unknown ncclResult_t",
        }
    }
}

impl fmt::Display for NcclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} returned {} ({})",
            self.call,
            Self::code_name(self.code),
            self.code
        )?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for NcclError {}
