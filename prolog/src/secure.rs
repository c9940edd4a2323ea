//! Files the root prolog writes, safely: every directory it writes into must be owned by root
//! (the prolog's own uid) and not writable by group or others, and so must every directory above
//! it (a sticky one such as /tmp excepted: nobody else can rename what is in it); a symlink in
//! the last place is refused (`lstat`). Files are created with `O_EXCL | O_NOFOLLOW` under a random
//! name in the same directory (`tempfile`) and renamed into place, so a planted symlink can never
//! redirect a write or a chmod to another file.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A directory the prolog will not write into, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsafe {
    pub path: PathBuf,
    pub why: String,
}

impl fmt::Display for Unsafe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for Unsafe {}

fn unsafe_dir(path: &Path, why: impl Into<String>) -> Unsafe {
    Unsafe {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// `mode NNNN is writable by group or others` when it is (`sticky_ok`: unless the sticky bit is
/// set, as on /tmp, where nobody else can rename what is in it).
fn group_writable(mode: u32, sticky_ok: bool) -> Option<String> {
    let sticky = sticky_ok && mode & 0o1000 != 0;
    (mode & 0o022 != 0 && !sticky)
        .then(|| format!("mode {:04o} is writable by group or others", mode & 0o7777))
}

/// The uid that must own what the prolog writes: root in production (slurmd runs it as root);
/// the test suites' own uid otherwise.
pub fn owner() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Creates `dir` (and missing parents, mode 0755) when absent, then checks it with [`check_dir`].
/// An existing directory is never chmod'ed or chown'ed: one that someone else could write may
/// hold files planted there (a forged cache), so it is refused, not repaired.
pub fn ensure_dir(dir: &Path) -> Result<(), Unsafe> {
    if std::fs::symlink_metadata(dir).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| unsafe_dir(dir, format!("cannot create: {e}")))?;
    }
    check_dir(dir)
}

/// `dir` is a directory (not a symlink) owned by root and not writable by group or others, and
/// every directory above it is owned by root and not writable by group or others unless sticky.
pub fn check_dir(dir: &Path) -> Result<(), Unsafe> {
    if !dir.is_absolute() {
        return Err(unsafe_dir(dir, "not an absolute path"));
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| unsafe_dir(dir, e.to_string()))?;
    if m.file_type().is_symlink() {
        return Err(unsafe_dir(dir, "is a symlink; refused (use the real path)"));
    }
    if !m.is_dir() {
        return Err(unsafe_dir(dir, "not a directory"));
    }
    let me = owner();
    if m.uid() != me {
        return Err(unsafe_dir(
            dir,
            format!("owned by uid {}, not {me} (root); refused", m.uid()),
        ));
    }
    if let Some(w) = group_writable(m.mode(), false) {
        let why = format!("{w}; refused (chmod go-w, and check what is in it)");
        return Err(unsafe_dir(dir, why));
    }
    for up in dir.ancestors().skip(1) {
        // Follows symlinks here (/var/run -> /run); the link's own directory is checked too, as
        // one of the ancestors of the path as given.
        let m = std::fs::metadata(up).map_err(|e| unsafe_dir(up, e.to_string()))?;
        if m.uid() != me && m.uid() != 0 {
            return Err(unsafe_dir(
                up,
                format!(
                    "owned by uid {} (above {}); refused",
                    m.uid(),
                    dir.display()
                ),
            ));
        }
        if let Some(w) = group_writable(m.mode(), true) {
            let why = format!("{w} (above {}); refused", dir.display());
            return Err(unsafe_dir(up, why));
        }
    }
    Ok(())
}

/// A textfile collector's directory, open: the writes go through the descriptor
/// ([`TextfileDir::file`]), so nothing renamed in the path after the checks can move them.
#[derive(Debug)]
pub struct TextfileDir {
    fd: std::os::fd::OwnedFd,
    /// The directory as configured, for messages.
    pub shown: PathBuf,
}

impl TextfileDir {
    /// `name` in the open directory, as a path that resolves through the descriptor
    /// (`/proc/self/fd/N/name`), never through the configured path again.
    pub fn file(&self, name: &std::ffi::OsStr) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).join(name)
    }
}

/// The directory of `metrics_file`. Node exporter packages put the textfile directory under one
/// owned by their service user (Debian and Ubuntu: `/var/lib/prometheus`, prometheus:prometheus;
/// the directory itself root:root 0755), which [`check_dir`] refuses as an ancestor. Here the part
/// of the path that passes [`check_dir`] is opened as usual, and each directory below it is
/// opened with `O_NOFOLLOW` from its parent's descriptor: it may belong to another user, but must
/// be a real directory not writable by group or others (unless sticky), and the last one must be
/// owned by root (the prolog's uid) and not writable by group or others. A user who owns an
/// ancestor can rename what is in it, but can bring in no root-owned directory of elsewhere, nor
/// have a symlink followed: the write lands in that directory or nowhere.
pub fn open_textfile_dir(dir: &Path) -> Result<TextfileDir, Unsafe> {
    use std::os::unix::fs::OpenOptionsExt;
    if !dir.is_absolute() {
        return Err(unsafe_dir(dir, "not an absolute path"));
    }
    let trusted = dir
        .ancestors()
        .find(|a| check_dir(a).is_ok())
        .ok_or_else(|| unsafe_dir(Path::new("/"), "no trusted directory above it"))?;
    let open_flags = libc::O_DIRECTORY | libc::O_CLOEXEC;
    let mut fd: std::os::fd::OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(open_flags)
        .open(trusted)
        .map_err(|e| unsafe_dir(trusted, e.to_string()))?
        .into();
    let rest = dir.strip_prefix(trusted).unwrap_or(Path::new(""));
    let mut here = trusted.to_path_buf();
    for c in rest.components() {
        let std::path::Component::Normal(name) = c else {
            return Err(unsafe_dir(dir, "`..` or `.` in the path; refused"));
        };
        here.push(name);
        fd =
            openat_dir(&fd, name, open_flags | libc::O_NOFOLLOW | libc::O_RDONLY).map_err(|e| {
                match e.raw_os_error() {
                    Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                        unsafe_dir(&here, "not a directory (a symlink?); refused")
                    }
                    _ => unsafe_dir(&here, e.to_string()),
                }
            })?;
        let m = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&fd))
            .map_err(|e| unsafe_dir(&here, std::io::Error::from(e).to_string()))?;
        if let Some(w) = group_writable(m.st_mode, true) {
            return Err(unsafe_dir(&here, format!("{w}; refused")));
        }
        if here == dir && (m.st_uid != owner() || m.st_mode & 0o022 != 0) {
            return Err(unsafe_dir(
                &here,
                format!(
                    "owned by uid {} mode {:04o}: the textfile directory must be owned by {} \
                     (root) and not writable by group or others; refused",
                    m.st_uid,
                    m.st_mode & 0o7777,
                    owner()
                ),
            ));
        }
    }
    Ok(TextfileDir {
        fd,
        shown: dir.to_path_buf(),
    })
}

/// `openat(2)` of `name` below the open directory `dir`.
fn openat_dir(
    dir: &std::os::fd::OwnedFd,
    name: &std::ffi::OsStr,
    flags: i32,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::OFlag;
    use std::os::fd::{AsRawFd, FromRawFd};
    let flags = OFlag::from_bits_retain(flags);
    let raw = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        name,
        flags,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// Writes `bytes` to `path`: a new file with a random name in the same directory (created with
/// `O_EXCL`, so never through a planted name or link), its mode set on the open descriptor, then
/// renamed over `path` (which replaces a symlink there, never its target). Readers see the old
/// file or the new one, never half of one.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    // The umask may have narrowed the mode given at creation; fchmod on our own descriptor.
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nccl_check_host::test_support::scratch_dir;
    use std::os::unix::fs::symlink;

    fn chown(p: &Path, uid: u32) {
        std::os::unix::fs::lchown(p, Some(uid), None).expect("chown (the tests run as root)");
    }

    fn root() -> bool {
        owner() == 0
    }

    #[test]
    fn a_root_owned_private_directory_is_accepted_and_created() {
        let d = scratch_dir("secure-ok");
        let sub = d.join("a/b");
        ensure_dir(&sub).expect("created and accepted");
        assert_eq!(std::fs::metadata(&sub).expect("stat").mode() & 0o777, 0o755);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_world_writable_directory_is_refused_by_name_and_left_as_it_is() {
        let d = scratch_dir("secure-0777");
        let s = d.join("state");
        std::fs::create_dir(&s).expect("mkdir");
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let e = ensure_dir(&s).unwrap_err();
        assert_eq!(e.path, s);
        assert!(e.why.contains("0777"), "{e}");
        // Refused, not repaired: what someone planted there is not blessed by a chmod.
        assert_eq!(std::fs::metadata(&s).expect("stat").mode() & 0o777, 0o777);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_directory_owned_by_another_uid_or_below_one_is_refused() {
        if !root() {
            panic!("needs root (chown): the prolog's tests run as root");
        }
        let d = scratch_dir("secure-uid");
        let s = d.join("metrics");
        std::fs::create_dir(&s).expect("mkdir");
        chown(&s, 65534);
        let e = check_dir(&s).unwrap_err();
        assert!(e.why.contains("uid 65534"), "{e}");
        let below = s.join("sub");
        std::fs::create_dir(&below).expect("mkdir");
        chown(&below, 0);
        let e = check_dir(&below).unwrap_err();
        assert_eq!(e.path, s, "{e}");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let d = scratch_dir("secure-link");
        std::fs::create_dir(d.join("real")).expect("mkdir");
        symlink(d.join("real"), d.join("link")).expect("symlink");
        let e = check_dir(&d.join("link")).unwrap_err();
        assert!(e.why.contains("symlink"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }

    /// The old writer opened `.<name>.<pid>.tmp` without O_EXCL|O_NOFOLLOW, so a link planted
    /// under that name made root write through it and chmod the target.
    #[test]
    fn planted_symlinks_never_redirect_a_write_or_a_chmod() {
        let d = scratch_dir("secure-plant");
        let target = d.join("secret");
        std::fs::write(&target, b"root only").expect("write");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let dest = d.join("nccl_check.prom");
        for pid in 0..600 {
            symlink(&target, d.join(format!(".nccl_check.prom.{pid}.tmp"))).expect("plant");
        }
        // This process's own name too, unless the loop above planted it already (a pid below
        // 600 on a freshly booted machine).
        let own = d.join(format!(".nccl_check.prom.{}.tmp", std::process::id()));
        if !own.exists() && std::fs::symlink_metadata(&own).is_err() {
            symlink(&target, &own).expect("plant");
        }
        // The destination itself a link to the target: the rename replaces the link.
        symlink(&target, &dest).expect("plant");
        write_atomic(&dest, b"metrics\n", 0o644).expect("write");
        assert_eq!(std::fs::read(&target).expect("read"), b"root only");
        assert_eq!(
            std::fs::metadata(&target).expect("stat").mode() & 0o777,
            0o600
        );
        let m = std::fs::symlink_metadata(&dest).expect("stat");
        assert!(m.is_file() && m.mode() & 0o777 == 0o644, "{m:?}");
        assert_eq!(std::fs::read(&dest).expect("read"), b"metrics\n");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_textfile_dir_below_a_service_users_directory_is_opened_and_written() {
        if !root() {
            panic!("needs root (chown): the prolog's tests run as root");
        }
        let d = scratch_dir("secure-textfile");
        let prom = d.join("prometheus");
        let tf = prom.join("node-exporter");
        std::fs::create_dir_all(&tf).expect("mkdir");
        chown(&prom, 65534);
        assert!(check_dir(&tf).is_err(), "the strict rule refuses it");
        let open = open_textfile_dir(&tf).expect("the Debian layout is accepted");
        write_atomic(&open.file("x.prom".as_ref()), b"m 1\n", 0o644).expect("write");
        assert_eq!(std::fs::read(tf.join("x.prom")).expect("read"), b"m 1\n");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_textfile_dir_reached_through_a_service_users_symlink_is_refused() {
        if !root() {
            panic!("needs root (chown): the prolog's tests run as root");
        }
        let d = scratch_dir("secure-textfile-link");
        let prom = d.join("prometheus");
        std::fs::create_dir_all(&prom).expect("mkdir");
        let elsewhere = d.join("etc-like");
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        chown(&prom, 65534);
        symlink(&elsewhere, prom.join("node-exporter")).expect("plant");
        let e = open_textfile_dir(&prom.join("node-exporter")).unwrap_err();
        assert!(e.why.contains("symlink"), "{e}");
        // The service user's own directory as the textfile directory: refused too.
        let own = prom.join("own");
        std::fs::create_dir(&own).expect("mkdir");
        chown(&own, 65534);
        let e = open_textfile_dir(&own).unwrap_err();
        assert!(e.why.contains("owned by uid 65534"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }
}
