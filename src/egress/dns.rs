//! The sandboxes' resolver, for programs that ignore the proxy variables: the firewall sends a
//! sandbox's DNS queries here. A name the agent's rules could allow is answered with the
//! server's own address on the agent's network (the firewall then hands its ports 80 and 443
//! to the proxy, which decides on the Host header or the TLS server name, and resolves for
//! itself); any other name is `NXDOMAIN` at once, so a refused name fails fast and clearly
//! instead of timing out. No real address ever reaches a sandbox, so DNS rebinding has nothing
//! to work with.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::rule::normalize_name;
use super::rules::EgressRules;

/// How long a sandbox may keep an answer: short, so a rule change shows at once.
const TTL_SECS: u32 = 5;
/// Queries answered at once; more wait (UDP: a flood of them is dropped by the kernel first).
const MAX_IN_FLIGHT: usize = 64;
/// A query larger than this is not a question a sandbox needs answered.
const MAX_QUERY: usize = 2048;
/// Queries one source address may have answered a second; the rest are dropped before they
/// cost a look at the database, so one sandbox's flood leaves the others their answers.
const PER_SOURCE_PER_SEC: u32 = 200;
/// How long an answer may take (it reads the agent's rules); past it the query is dropped.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Counts each source's queries in the current second.
#[derive(Default)]
struct PerSource {
    window: Option<std::time::Instant>,
    counts: std::collections::HashMap<IpAddr, u32>,
}

impl PerSource {
    fn admit(&mut self, source: IpAddr, now: std::time::Instant) -> bool {
        if self
            .window
            .is_none_or(|w| now.duration_since(w) >= std::time::Duration::from_secs(1))
        {
            self.window = Some(now);
            self.counts.clear();
        }
        let n = self.counts.entry(source).or_insert(0);
        *n += 1;
        *n <= PER_SOURCE_PER_SEC
    }
}

/// What the responder needs to know about the asker.
#[async_trait::async_trait]
pub trait Askers: Send + Sync + 'static {
    /// The agent whose sandbox sent from `peer`, and the server's address on its network.
    async fn asker(&self, peer: IpAddr) -> Option<(String, IpAddr)>;
    /// The agent's rules now.
    async fn rules_of(&self, id: &str) -> Option<EgressRules>;
}

/// Answers queries on `socket` until `shutdown`.
pub async fn serve(socket: UdpSocket, askers: Arc<dyn Askers>, shutdown: CancellationToken) {
    let socket = Arc::new(socket);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut per_source = PerSource::default();
    let mut buf = vec![0u8; MAX_QUERY];
    loop {
        let (len, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!("egress resolver: receive failed: {e}");
                    continue;
                }
            },
        };
        if !per_source.admit(peer.ip(), std::time::Instant::now()) {
            continue;
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let query = buf[..len].to_vec();
        let (socket, askers) = (socket.clone(), askers.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let reply =
                tokio::time::timeout(ANSWER_WITHIN, reply_to(&query, peer, askers.as_ref()));
            if let Ok(Some(reply)) = reply.await {
                let _ = socket.send_to(&reply, peer).await;
            }
        });
    }
}

async fn reply_to(query: &[u8], peer: SocketAddr, askers: &dyn Askers) -> Option<Vec<u8>> {
    // Not from a sandbox: no answer at all (the firewall sends only sandboxes here).
    let (id, server) = askers.asker(peer.ip()).await?;
    let rules = askers.rules_of(&id).await.unwrap_or_default();
    answer(query, &rules, server)
}

/// The answer to `query` under `rules`, pointing allowed names at `server`; `None` for
/// something that is not a DNS query at all.
pub fn answer(query: &[u8], rules: &EgressRules, server: IpAddr) -> Option<Vec<u8>> {
    let q = Message::from_vec(query).ok()?;
    if q.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut reply = Message::response(q.metadata.id, q.metadata.op_code);
    reply.metadata.recursion_desired = q.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_queries(q.queries.iter().cloned());
    let code = match (q.metadata.op_code, q.queries.as_slice()) {
        (OpCode::Query, [question]) => {
            let asked = question.name().to_ascii();
            match normalize_name(&asked) {
                Some(name) if rules.may_resolve(&name) => {
                    if let (RecordType::A, IpAddr::V4(v4)) = (question.query_type(), server) {
                        reply.add_answer(Record::from_rdata(
                            question.name().clone(),
                            TTL_SECS,
                            RData::A(A(v4)),
                        ));
                    }
                    // Other types of an allowed name (AAAA, MX…): an empty answer, so the
                    // client goes on with the A record.
                    ResponseCode::NoError
                }
                _ => ResponseCode::NXDomain,
            }
        }
        (OpCode::Query, _) => ResponseCode::FormErr,
        _ => ResponseCode::NotImp,
    };
    reply.metadata.response_code = code;
    reply.to_vec().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use std::str::FromStr;

    fn ask(name: &str, kind: RecordType) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = 4242;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_str(name).unwrap(), kind));
        m.to_vec().unwrap()
    }

    fn rules(allow: &[&str], deny: &[&str]) -> EgressRules {
        EgressRules {
            allow: allow.iter().map(|r| r.parse().unwrap()).collect(),
            deny: deny.iter().map(|r| r.parse().unwrap()).collect(),
        }
    }

    const SERVER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 213, 0, 1));

    #[test]
    fn allowed_names_point_at_the_server_and_others_do_not_exist() {
        let r = rules(
            &["pypi.org", "*.pythonhosted.org:443"],
            &["evil.pythonhosted.org"],
        );
        let got = Message::from_vec(&answer(&ask("PyPI.org.", RecordType::A), &r, SERVER).unwrap())
            .unwrap();
        assert_eq!(got.metadata.id, 4242);
        assert_eq!(got.metadata.response_code, ResponseCode::NoError);
        assert_eq!(got.answers.len(), 1);
        assert_eq!(
            got.answers[0].data,
            RData::A(A("10.213.0.1".parse().unwrap()))
        );
        assert_eq!(got.answers[0].ttl, TTL_SECS);

        let got = Message::from_vec(
            &answer(
                &ask("files.pythonhosted.org.", RecordType::AAAA),
                &r,
                SERVER,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (got.metadata.response_code, got.answers.len()),
            (ResponseCode::NoError, 0)
        );

        for denied in [
            "evil.pythonhosted.org.",
            "example.org.",
            "pythonhosted.org.",
        ] {
            let got = Message::from_vec(&answer(&ask(denied, RecordType::A), &r, SERVER).unwrap())
                .unwrap();
            assert_eq!(
                got.metadata.response_code,
                ResponseCode::NXDomain,
                "{denied}"
            );
            assert!(got.answers.is_empty());
        }
    }

    #[test]
    fn one_source_gets_its_share_a_second() {
        let mut p = PerSource::default();
        let t0 = std::time::Instant::now();
        let a: IpAddr = "10.213.0.18".parse().unwrap();
        let b: IpAddr = "10.213.0.34".parse().unwrap();
        let admitted = (0..500).filter(|_| p.admit(a, t0)).count();
        assert_eq!(admitted, PER_SOURCE_PER_SEC as usize);
        assert!(p.admit(b, t0), "another source has its own share");
        assert!(
            p.admit(a, t0 + std::time::Duration::from_secs(1)),
            "a new second"
        );
    }

    #[test]
    fn garbage_gets_no_answer_and_no_panic() {
        let r = rules(&["*"], &[]);
        assert!(answer(b"", &r, SERVER).is_none());
        assert!(answer(&[0xff; 40], &r, SERVER).is_none());
        let q = ask("pypi.org.", RecordType::A);
        for cut in 0..q.len() {
            let _ = answer(&q[..cut], &r, SERVER);
        }
    }
}
