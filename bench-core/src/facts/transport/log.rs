//! Reading NCCL's `NCCL_DEBUG=INFO` log into a [`TransportSummary`] (the formats: see `transport`).

use super::{Connection, Transport, TransportSummary};

/// NCCL's algorithm names by the index older versions print (`Algo 4`): `ncclAlgoStr` in
/// init.cc, the same order since 2.18 (PAT from 2.23).
const ALGO_NAMES: [&str; 7] = [
    "Tree",
    "Ring",
    "CollNetDirect",
    "CollNetChain",
    "NVLS",
    "NVLSTree",
    "PAT",
];

/// Splits one log line into (host of the printing process, level, message). Lines that are not
/// NCCL INFO/WARN lines give `None`. Tolerates a timestamp before the host
/// (`NCCL_DEBUG_TIMESTAMP_FORMAT`) and `\r`.
fn split_line(line: &str) -> Option<(Option<&str>, &'static str, &str)> {
    let line = line.trim_end_matches(['\r', '\n']);
    let markers = [("INFO", " NCCL INFO "), ("WARN", " NCCL WARN ")];
    let (pos, level, marker) = (markers.into_iter())
        .find_map(|(level, marker)| Some((line.find(marker)?, level, marker)))?;
    let message = line[pos + marker.len()..].trim();
    // prefix: `[timestamp] host:pid:tid [dev]`
    let prefix = line[..pos].trim_end();
    let mut words = prefix.rsplit(' ').filter(|w| !w.is_empty());
    let host_word = match words.next() {
        Some(w) if w.starts_with('[') => words.next(), // the `[dev]` after the host
        other => other,
    };
    // `host:pid:tid`: the host is what is left before the last two colons.
    let host = host_word.and_then(|w| w.rsplitn(3, ':').nth(2));
    let host = host.filter(|h| !h.is_empty());
    Some((host, level, message))
}

/// `12[3]` → (12, 3).
fn rank_dev(s: &str) -> Option<(u32, u32)> {
    let (rank, dev) = s.trim().strip_suffix(']')?.split_once('[')?;
    Some((rank.parse().ok()?, dev.parse().ok()?))
}

/// Parses `Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0` (and the SHM form without `/0`).
/// Returns the connection and whether the printing process is the receiver.
pub fn parse_channel_line(message: &str) -> Option<(Connection, bool)> {
    let rest = message.strip_prefix("Channel ")?;
    let (chan, rest) = rest.split_once(" : ")?;
    let (channel, conn_index) = match chan.split_once('/') {
        Some((c, i)) => (c.trim().parse().ok()?, Some(i.trim().parse().ok()?)),
        None => (chan.trim().parse().ok()?, None),
    };
    let (left, right) = rest.split_once(" -> ")?;
    let (from_rank, from_dev) = rank_dev(left)?;
    let (to_part, via) = right.split_once(" via ")?;
    let mut to_words = to_part.split_whitespace();
    let (to_rank, to_dev) = rank_dev(to_words.next()?)?;
    let receiver = to_words.any(|w| w == "[receive]");
    let via = via.trim().to_string();
    Some((
        Connection {
            channel,
            conn_index,
            from_rank,
            from_dev,
            to_rank,
            to_dev,
            transport: Transport::from_via(&via),
            via,
        },
        receiver,
    ))
}

/// The number just before `word` (`16 nvls channels` → 16).
fn number_before(message: &str, word: &str) -> Option<u32> {
    let end = message.find(word)?;
    message[..end].split_whitespace().last()?.parse().ok()
}

/// Reads a whole NCCL_DEBUG=INFO log (one communicator; any number of processes and hosts
/// interleaved).
pub fn parse_log(text: &str) -> TransportSummary {
    let mut s = TransportSummary::default();
    for line in text.lines() {
        let Some((host, level, msg)) = split_line(line) else {
            continue;
        };
        if level == "WARN" {
            if msg.contains("Cannot initialize CollNet") {
                s.collnet_disabled = Some(msg.to_string());
            }
            continue;
        }
        if let Some((c, receiver)) = parse_channel_line(msg) {
            s.connection_lines += 1;
            if let Some(h) = host {
                let printer = if receiver { c.to_rank } else { c.from_rank };
                s.rank_hosts.entry(printer).or_insert_with(|| h.to_string());
            }
            let p = s.pairs.entry((c.from_rank, c.to_rank)).or_default();
            p.from_dev = c.from_dev;
            p.to_dev = c.to_dev;
            p.transports.insert(c.transport);
            continue;
        }
        if (msg.starts_with("CollNet ") && msg.contains(" via COLLNET/"))
            || msg.contains("Connected CollNet")
            || msg.starts_with("Connected Collnet Chains")
            || msg.starts_with("Connected collnet + chain")
        {
            s.collnet_connected = true;
        } else if msg.contains("less than CollNet node threshold") {
            s.collnet_disabled = Some(msg.to_string());
        } else if let Some(rest) = msg.strip_prefix("NVLS multicast support is ") {
            let available = !rest.starts_with("not ");
            s.nvls_available = Some(s.nvls_available.unwrap_or(true) && available);
        } else if msg.starts_with("NVLS comm ") || msg.starts_with("Connected NVLS tree") {
            s.nvls_connected = true;
        } else if msg.contains(" nvls channels") && msg.contains(" coll channels") {
            if let Some(n) = number_before(msg, " nvls channels") {
                s.nvls_channels = Some(s.nvls_channels.unwrap_or(0).max(n));
            }
        } else if msg.starts_with("NET/") && msg.contains(" Using [") {
            // Bounded: one line per process and network plugin.
            if s.net_using.len() < 64 && !s.net_using.iter().any(|l| l == msg) {
                s.net_using.push(msg.to_string());
            }
        } else if let Some(net) = msg.strip_prefix("Using network ") {
            s.network = Some(net.trim().to_string());
        } else if msg.contains(" Bytes -> Algo ") {
            if let Some((coll, algo)) = parse_tuning(msg) {
                s.algorithms.entry(coll).or_default().insert(algo);
            }
        } else if let Some(t) =
            (msg.strip_prefix("Pattern ")).and_then(|m| m.split(", type ").nth(1))
        {
            let intra = t.split('/').next().unwrap_or(t);
            s.graph_intra_types.insert(intra.trim().to_string());
        } else if msg.ends_with("Init COMPLETE") {
            // `[ncclCommInitRankConfig ]comm 0x.. rank 3 nranks 4 ...`: the printing host holds rank 3.
            let mut after_rank = msg.split_whitespace().skip_while(|w| *w != "rank").skip(1);
            if let (Some(r), Some(h)) = (after_rank.next().and_then(|w| w.parse().ok()), host) {
                s.rank_hosts.entry(r).or_insert_with(|| h.to_string());
            }
        }
    }
    if s.nvls_channels.unwrap_or(0) > 0 && s.nvls_available == Some(true) {
        s.nvls_connected = true;
    }
    s
}

/// `AllReduce: 268435456 Bytes -> Algo NVLS proto Simple ...` (2.24+),
/// `AllReduce: 1024 Bytes -> Algo 1 proto 2 time 12.3` (2.22-2.23), `1024 Bytes -> Algo 1 ...` (2.21).
fn parse_tuning(msg: &str) -> Option<(String, String)> {
    let (head, tail) = msg.split_once(" Bytes -> Algo ")?;
    let coll = match head.split_once(':') {
        Some((c, _)) => c.trim().trim_end_matches(" [Symmetric]").to_string(),
        None => String::from("?"),
    };
    let algo = tail.split_whitespace().next()?;
    let algo = match algo.parse::<usize>() {
        Ok(i) => ALGO_NAMES.get(i)?.to_string(),
        // 2.24+ prints ncclAlgoToString's `RING`, `COLLNET_DIRECT`, `NVLS_TREE`: use the
        // NCCL_ALGO spelling (`Ring`, `CollNetDirect`, `NVLSTree`).
        Err(_) => {
            let key = algo.replace('_', "").to_ascii_uppercase();
            ALGO_NAMES
                .iter()
                .find(|n| n.to_ascii_uppercase() == key)
                .map_or_else(|| algo.to_string(), |n| n.to_string())
        }
    };
    Some((coll, algo))
}
