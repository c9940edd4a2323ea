//! A host's addresses, looked up within a deadline (both sides of the rendezvous: the member
//! the coordinator's, the coordinator its own to bind).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

/// The addresses of `host`, looked up on a helper thread so that a slow resolver (a name that
/// does not resolve can take 10 s per try) never holds this process past `deadline`.
pub fn resolve_host(host: &str, port: u16, deadline: Instant) -> Result<Vec<SocketAddr>, String> {
    // An address as given needs no resolver, and no thread per try.
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let left = deadline
        .checked_duration_since(Instant::now())
        .ok_or("deadline passed")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let name = host.to_string();
    std::thread::Builder::new()
        .name("resolve".into())
        .spawn(move || {
            let r = (name.as_str(), port)
                .to_socket_addrs()
                .map(|a| a.collect::<Vec<_>>());
            let _ = tx.send(r);
        })
        .map_err(|e| format!("cannot start a resolver thread: {e}"))?;
    match rx.recv_timeout(left) {
        Ok(Ok(all)) => Ok(all),
        Ok(Err(e)) => Err(format!("cannot resolve {host}: {e}")),
        Err(_) => Err(format!("cannot resolve {host} before the deadline")),
    }
}

/// The address of `host` to use: its first IPv4 one, else its first; `None` when it has none.
pub fn preferred(host: &str, port: u16, deadline: Instant) -> Result<Option<SocketAddr>, String> {
    let all = resolve_host(host, port, deadline)?;
    Ok(all.iter().find(|a| a.is_ipv4()).or(all.first()).copied())
}
