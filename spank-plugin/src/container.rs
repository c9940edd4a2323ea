//! What a plugin listed before this one (pyxis) did to the task by the time of our `task_init`:
//! the namespaces the task had in `task_init_privileged` (before any plugin's `task_init`)
//! against those it has now, and, where the network namespace changed, whether any interface in
//! it can reach another node.
//!
//! Why: pyxis 0.24's `--container-unshare=net` (or `PYXIS_CONTAINER_UNSHARE=net`) asks enroot for
//! a network namespace of the container's own (`ENROOT_UNSHARE_NET=y`, pyxis_slurmstepd.c
//! `enroot_set_env`), and pyxis's `task_init` then moves every task into it with `setns(2)`
//! (`slurm_spank_task_init`). Nothing configures it: loopback is all it has, so no rank reaches
//! another and the worker would wait for its peers until its deadline. Seen up front it is an
//! ERROR at once, naming the option, and never a FAIL. (enroot 4.1.2 does not act on
//! `ENROOT_UNSHARE_NET`; pyxis then refuses the step itself, "the container is not in a separate
//! network namespace", before any check: tests/pyxis/run.sh shows both.)

use std::ffi::CStr;
use std::io;
use std::os::unix::fs::MetadataExt;

/// The inodes of the task's mount and network namespaces (`/proc/self/ns/*`), where readable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Namespaces {
    mnt: Option<u64>,
    net: Option<u64>,
}

impl Namespaces {
    /// The namespaces this process is in now.
    pub fn now() -> Namespaces {
        let ino = |ns: &str| {
            std::fs::metadata(format!("/proc/self/ns/{ns}"))
                .ok()
                .map(|m| m.ino())
        };
        Namespaces {
            mnt: ino("mnt"),
            net: ino("net"),
        }
    }

    /// Whether a plugin moved the task into another mount namespace (a container) since `self`
    /// was recorded; unknown (unreadable) counts as not moved.
    pub fn container_since(&self, before: &Namespaces) -> bool {
        moved(before.mnt, self.mnt)
    }

    /// Whether a plugin moved the task into another network namespace since `before`.
    pub fn network_since(&self, before: &Namespaces) -> bool {
        moved(before.net, self.net)
    }
}

fn moved(before: Option<u64>, now: Option<u64>) -> bool {
    matches!((before, now), (Some(b), Some(n)) if b != n)
}

/// One network interface of this process's network namespace, as getifaddrs(3) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub up: bool,
    pub loopback: bool,
}

/// The interfaces of this process's network namespace (getifaddrs(3) asks the kernel over
/// netlink, in the calling thread's namespace: unlike `/sys/class/net`, which in a container is
/// often the host's sysfs, it answers for the namespace the task is in). One entry per name.
pub fn interfaces() -> io::Result<Vec<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we own into `head` and returns 0, or -1 with errno.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found: Vec<Interface> = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs made; it stays valid until freeifaddrs.
        let ifa = unsafe { &*p };
        if !ifa.ifa_name.is_null() {
            // SAFETY: ifa_name is a NUL-terminated string inside the same list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
                .to_string_lossy()
                .into_owned();
            let flags = ifa.ifa_flags as libc::c_int;
            let iface = Interface {
                name,
                up: flags & libc::IFF_UP != 0,
                loopback: flags & libc::IFF_LOOPBACK != 0,
            };
            // One name appears once per address family; its flags are the same in each.
            if !found.iter().any(|f| f.name == iface.name) {
                found.push(iface);
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs above and is freed once; no reference outlives it.
    unsafe { libc::freeifaddrs(head) };
    Ok(found)
}

/// Whether any interface could carry the step's traffic to another node: up and not loopback.
/// A namespace made by `unshare(CLONE_NEWNET)` has `lo` and, where their modules are loaded, the
/// kernel's fallback tunnels (`sit0`, `tunl0`, `ip6tnl0`, ...), all down.
pub fn reaches_out(interfaces: &[Interface]) -> bool {
    interfaces.iter().any(|i| i.up && !i.loopback)
}

/// The ERROR's words for a task whose container has a network of its own with nothing but
/// loopback: what happened, the option that does it, what the check cannot do there, and what
/// the user can do.
pub fn unshared_network(world: u32, interfaces: &[Interface]) -> String {
    let seen: Vec<String> = interfaces
        .iter()
        .take(8)
        .map(|i| {
            let state = if i.up { "" } else { " down" };
            format!(
                "{}{state}",
                nccl_check_host::text::escape_clipped(&i.name, 32)
            )
        })
        .collect();
    let seen = match (seen.is_empty(), interfaces.len() > seen.len()) {
        (true, _) => String::from("none"),
        (false, false) => seen.join(", "),
        (false, true) => format!("{}, ...", seen.join(", ")),
    };
    format!(
        "the container's network is unshared (srun --container-unshare=net): its network \
         namespace has no interface up but loopback (seen: {seen}), so the step's {world} ranks \
         cannot meet over the network; the check did not run. Run it in a step without \
         --container-unshare=net"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, up: bool, loopback: bool) -> Interface {
        Interface {
            name: name.into(),
            up,
            loopback,
        }
    }

    /// What `unshare(CLONE_NEWNET)` gives (enroot's ENROOT_UNSHARE_NET): loopback, up or down,
    /// and the kernel's fallback tunnels, down; no way out.
    #[test]
    fn a_fresh_network_namespace_reaches_no_other_node() {
        assert!(!reaches_out(&[]));
        assert!(!reaches_out(&[iface("lo", false, true)]));
        assert!(!reaches_out(&[iface("lo", true, true)]));
        assert!(!reaches_out(&[
            iface("lo", true, true),
            iface("sit0", false, false),
            iface("tunl0", false, false),
            iface("ip6tnl0", false, false),
        ]));
    }

    /// A namespace a site wired up (a veth, a macvlan, an IB child interface) is left to the
    /// check: it may well reach the peers.
    #[test]
    fn a_namespace_with_an_interface_up_is_not_cut_off() {
        assert!(reaches_out(&[
            iface("lo", true, true),
            iface("eth0", true, false)
        ]));
        assert!(reaches_out(&[iface("ib0", true, false)]));
        // Down, it carries nothing.
        assert!(!reaches_out(&[
            iface("lo", true, true),
            iface("eth0", false, false)
        ]));
    }

    #[test]
    fn the_error_names_the_option_the_interfaces_and_the_way_out() {
        let text = unshared_network(
            2,
            &[iface("lo", true, true), iface("sit0\x1b[2J", false, false)],
        );
        assert!(
            text.starts_with("the container's network is unshared (srun --container-unshare=net)"),
            "{text}"
        );
        assert!(text.contains("(seen: lo, sit0\\u{1b}[2J down)"), "{text}");
        assert!(
            text.contains(
                "so the step's 2 ranks cannot meet over the network; the check did not run"
            ),
            "{text}"
        );
        assert!(text.contains("without --container-unshare=net"), "{text}");
        assert!(!text.contains('\x1b'), "{text}");
        assert!(unshared_network(8, &[]).contains("(seen: none), so the step's 8 ranks cannot"));
        let many: Vec<Interface> = (0..20)
            .map(|i| iface(&format!("t{i}"), false, false))
            .collect();
        let text = unshared_network(2, &many);
        assert!(text.contains("t7 down, ...)"), "{text}");
        assert!(!text.contains("t8"), "{text}");
    }

    #[test]
    fn only_a_change_that_both_readings_show_counts_as_moved() {
        let host = Namespaces {
            mnt: Some(1),
            net: Some(10),
        };
        let container = Namespaces {
            mnt: Some(2),
            net: Some(10),
        };
        let unshared = Namespaces {
            mnt: Some(2),
            net: Some(11),
        };
        assert!(container.container_since(&host));
        assert!(!container.network_since(&host));
        assert!(unshared.network_since(&host));
        assert!(!host.container_since(&host));
        let unknown = Namespaces::default();
        assert!(!unknown.network_since(&host) && !host.network_since(&unknown));
    }

    /// The reading itself, in this test's own namespace: every name once, loopback among them
    /// where the kernel has one.
    #[test]
    fn this_process_lists_its_interfaces_once_each() {
        let found = interfaces().expect("getifaddrs");
        let mut names: Vec<&str> = found.iter().map(|i| i.name.as_str()).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "{found:?}");
        assert!(found.iter().all(|i| !i.name.is_empty()), "{found:?}");
        if let Some(lo) = found.iter().find(|i| i.name == "lo") {
            assert!(lo.loopback, "{found:?}");
        }
        let now = Namespaces::now();
        assert!(now.net.is_some() && now.mnt.is_some(), "{now:?}");
    }

    /// Set in the child of the test below, which runs in a network namespace of its own.
    const IN_FRESH_NETNS: &str = "NCCL_CHECK_TEST_IN_FRESH_NETNS";

    /// The real kernel's answer: this test binary run again under `unshare --net` (what enroot
    /// does for `ENROOT_UNSHARE_NET=y`) reads a namespace that reaches no other node, and one
    /// that is not the parent's. Needs root and util-linux's unshare; says "skipped" otherwise.
    #[test]
    fn a_process_in_a_fresh_network_namespace_is_seen_cut_off() {
        if let Some(parent) = std::env::var_os(IN_FRESH_NETNS) {
            let found = interfaces().expect("getifaddrs in the new namespace");
            assert!(!reaches_out(&found), "{found:?}");
            assert!(
                found.iter().any(|i| i.name == "lo" && i.loopback),
                "{found:?}"
            );
            let now = Namespaces::now();
            assert_ne!(now.net.map(|n| n.to_string()), parent.into_string().ok());
            return;
        }
        let net = Namespaces::now().net.expect("own network namespace");
        let exe = std::env::current_exe().expect("test binary");
        let run = std::process::Command::new("unshare")
            .arg("--net")
            .arg(exe)
            .args([
                "--exact",
                "container::tests::a_process_in_a_fresh_network_namespace_is_seen_cut_off",
            ])
            .env(IN_FRESH_NETNS, net.to_string())
            .output();
        match run {
            Ok(out) if out.status.success() => {
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(stdout.contains("1 passed"), "{stdout}");
            }
            Ok(out) if String::from_utf8_lossy(&out.stderr).contains("unshare failed") => {
                nccl_check_host::errln!("skipped: unshare --net is not allowed here");
            }
            Ok(out) => panic!(
                "in a fresh network namespace: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => nccl_check_host::errln!("skipped: no unshare ({e})"),
        }
    }
}
