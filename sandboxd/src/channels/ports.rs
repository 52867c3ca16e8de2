//! `ports.list` and `port.connect`: what listens inside the sandbox, and a connection to it.
//!
//! `port.connect` dials the sandbox's own loopback and nothing else: its header holds a port
//! alone (the proto refuses any other field), so no request can turn it into a way to the
//! networks the sandbox can see.

use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use agenthold_proto::mux::MuxStream;
use agenthold_proto::{ChannelError, ErrorCode, ListeningPort, Ports, Reply};
use tokio::net::TcpStream;

use super::{refuse, reply};
use crate::fsid::FsIdentity;
use crate::sandbox::Sandbox;

/// How long a connection to the loopback may take to be accepted (a listener whose backlog is
/// full does not answer at all).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `st` of a listening socket in `/proc/net/tcp`.
const TCP_LISTEN: &str = "0A";

pub async fn connect(mut s: MuxStream, port: u16) {
    if port == 0 {
        let err = ChannelError::new(ErrorCode::Invalid, "port must be 1 to 65535");
        return refuse(s, err).await;
    }
    let mut tcp = None;
    for addr in [
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
    ] {
        if let Ok(Ok(t)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            tcp = Some(t);
            break;
        }
    }
    let Some(mut tcp) = tcp else {
        let err = ChannelError::new(
            ErrorCode::Refused,
            format!("nothing accepts connections on port {port} at 127.0.0.1 or ::1"),
        );
        return refuse(s, err).await;
    };
    let _ = tcp.set_nodelay(true);
    if !reply(&mut s, &Reply::ok()).await {
        return;
    }
    // Ends when either side closes or fails; each direction's end is passed on.
    let _ = tokio::io::copy_bidirectional(&mut s, &mut tcp).await;
}

pub async fn list(sb: Sandbox, mut s: MuxStream) {
    let identity = sb.fs_identity().clone();
    let ports = tokio::task::spawn_blocking(move || listening(&identity))
        .await
        .unwrap_or_default();
    reply(&mut s, &Reply::ok_with(&Ports { ports })).await;
}

/// The listening TCP sockets of the sandbox's network namespace, each (port, address) once, by
/// port; with the command of a process that holds it, where `/proc` lets us see one.
///
/// A process's file descriptors are for its owner and for whoever may trace it: in a container
/// sandboxd is root without `CAP_SYS_PTRACE` (Docker does not give it), so root alone sees
/// none of the agent's. The sockets root could not place are looked for again as the account
/// (`identity`, a thread with its filesystem ids), which the kernel lets into the account's own
/// processes.
fn listening(identity: &FsIdentity) -> Vec<ListeningPort> {
    let mut found: BTreeSet<(u16, String, u64)> = BTreeSet::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        if let Ok(text) = std::fs::read_to_string(file) {
            found.extend(parse_table(&text, v6));
        }
    }
    let inodes: BTreeSet<u64> = found.iter().map(|(_, _, i)| *i).collect();
    let mut owners = socket_owners(&inodes);
    let unplaced: BTreeSet<u64> = inodes
        .iter()
        .filter(|i| !owners.contains_key(i))
        .copied()
        .collect();
    if !unplaced.is_empty() && identity.switches() {
        if let Ok(theirs) = identity.run_sync(move || Ok(socket_owners(&unplaced))) {
            owners.extend(theirs);
        }
    }
    let mut seen = BTreeSet::new();
    found
        .into_iter()
        .filter(|(port, address, _)| seen.insert((*port, address.clone())))
        .map(|(port, address, inode)| ListeningPort {
            port,
            address,
            process: owners.get(&inode).cloned(),
        })
        .collect()
}

/// The listening sockets of one `/proc/net/tcp{,6}` table: port, address and inode.
fn parse_table(text: &str, v6: bool) -> Vec<(u16, String, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) != Some(&TCP_LISTEN) {
                return None;
            }
            let (addr, port) = fields.get(1)?.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let address = if v6 { parse_v6(addr)? } else { parse_v4(addr)? };
            let inode = fields.get(9)?.parse().ok()?;
            Some((port, address, inode))
        })
        .collect()
}

/// The kernel prints an address as 32-bit words in host order (little-endian here).
fn parse_v4(hex: &str) -> Option<String> {
    let word = u32::from_str_radix(hex, 16).ok()?;
    Some(Ipv4Addr::from(word.to_le_bytes()).to_string())
}

fn parse_v6(hex: &str) -> Option<String> {
    if hex.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(4).enumerate() {
        let word = u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()?;
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    Some(Ipv6Addr::from(bytes).to_string())
}

/// Which process holds each of `inodes`, by command name: the file descriptors under
/// `/proc/PID/fd` that read `socket:[INODE]`. Processes we may not look into are skipped.
fn socket_owners(inodes: &BTreeSet<u64>) -> HashMap<u64, String> {
    let mut owners = HashMap::new();
    if inodes.is_empty() {
        return owners;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return owners;
    };
    for entry in procs.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse::<u64>().ok())
            else {
                continue;
            };
            if inodes.contains(&inode) && !owners.contains_key(&inode) {
                if let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) {
                    owners.insert(inode, comm.trim().to_string());
                }
            }
        }
        if owners.len() == inodes.len() {
            break;
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_read_from_the_kernel_tables() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0\n\
   1: 00000000:1435 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 222 1 0000000000000000 100 0 0 10 0\n\
   2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0000000000000000 100 0 0 10 0\n";
        assert_eq!(
            parse_table(v4, false),
            vec![
                (8080, "127.0.0.1".to_string(), 12345),
                (5173, "0.0.0.0".to_string(), 222)
            ]
        );
        let v6 = "  sl  local_address                         remote_address                        st\n\
   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1\n\
   1: 00000000000000000000000000000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 78 1\n";
        assert_eq!(
            parse_table(v6, true),
            vec![(80, "::1".to_string(), 77), (8081, "::".to_string(), 78)]
        );
        assert!(parse_table("garbage\n 0: zz:zz 0 0A", false).is_empty());
    }

    #[tokio::test]
    async fn a_listener_of_this_process_is_listed_with_its_command() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = l.local_addr().expect("addr").port();
        let me = FsIdentity::of(&crate::account::Account::current());
        let ports = tokio::task::spawn_blocking(move || listening(&me))
            .await
            .expect("join");
        let me = ports
            .iter()
            .find(|p| p.port == port && p.address == "127.0.0.1")
            .expect("our listener is listed");
        assert!(me.process.is_some(), "our own process is visible: {me:?}");
    }
}
