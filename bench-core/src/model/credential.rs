//! How the processes of one check prove to each other that they belong to it: chosen by the
//! settings (the secret, else MUNGE under Slurm), used by the rendezvous (`meet::rendezvous::auth`
//! turns it into an authenticator).

/// How the processes of one check prove to each other that they belong to it.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// `NCCL_CHECK_SECRET` (set per step by the srun plugin, or by the user).
    Secret(String),
    /// MUNGE credentials of this uid (under Slurm, when no secret is given).
    Munge,
    /// One process: nobody to prove anything to.
    None,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        match self {
            Credential::Secret(_) => write!(f, "Secret(..)"),
            Credential::Munge => write!(f, "Munge"),
            Credential::None => write!(f, "None"),
        }
    }
}
