//! Why talking to the other processes failed: by kind (deadline, peer gone, peer gave up),
//! so callers pick exit codes without reading the text.

/// Why a sum over the processes failed: the kind decides the exit code, the text says who.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaneError {
    /// A process did not answer before the deadline.
    Deadline(String),
    /// A process went away, sent something malformed, or is out of step.
    Peer(String),
    /// Another process gave up first (its reason is in the text).
    Aborted(String),
}

impl std::fmt::Display for PlaneError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlaneError::Deadline(m) | PlaneError::Peer(m) | PlaneError::Aborted(m) => {
                f.write_str(m)
            }
        }
    }
}

/// Why a message could not be sent or read: the deadline, or anything else.
#[derive(Debug)]
pub(super) enum WireError {
    Deadline(&'static str),
    Failed(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Deadline(m) => f.write_str(m),
            WireError::Failed(m) => f.write_str(m),
        }
    }
}

impl From<WireError> for String {
    fn from(e: WireError) -> String {
        e.to_string()
    }
}

impl WireError {
    pub(super) fn failed(e: impl std::fmt::Display) -> WireError {
        WireError::Failed(e.to_string())
    }

    /// The control plane's error, with `context` (which peer) before the message.
    pub(super) fn in_plane(self, context: impl std::fmt::Display) -> PlaneError {
        let message = format!("{context}: {self}");
        match self {
            WireError::Deadline(_) => PlaneError::Deadline(message),
            WireError::Failed(_) => PlaneError::Peer(message),
        }
    }
}
