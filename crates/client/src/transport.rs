//! One TCP connection to the server, re-established when it drops. A call that was in
//! flight when the connection broke is re-sent byte for byte on the new connection: same
//! slot, same sequence id, so the server's reply cache makes it exactly-once.

use crate::ClientError;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use txnfs_rpc::{
    AuthStat, CallHandler, ClientConfig as RpcConfig, ClientTls, Credential, Gathered, RpcClient,
    RpcError,
};

const NFS_PROGRAM: u32 = 100003;
const NFS_V4: u32 = 4;
pub(crate) const PROC_COMPOUND: u32 = 1;

/// The reply to a call, and whether the call had to be re-sent to get it.
pub(crate) struct Answer {
    pub(crate) reply: Bytes,
    pub(crate) resent: bool,
}

pub(crate) struct Transport {
    addr: SocketAddr,
    cred: Credential,
    conn: Mutex<Option<(u64, Arc<RpcClient>)>>,
    /// Answers the server's CALLs on every connection (the back channel).
    handler: Option<CallHandler>,
    generation: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    max_attempts: u32,
    /// How long to wait for a reply before giving the call up. Some servers drop a
    /// request they cannot decode without answering (Ganesha 4.3 for more than 1,024
    /// ops): without a bound the call would wait forever.
    timeout: Duration,
    /// RPC-with-TLS on every connection (ADR 0049).
    tls: Option<ClientTls>,
    /// RPCSEC_GSS on every connection (ADR 0051).
    gss: Option<txnfs_rpc::gss::GssClientConfig>,
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((50u64 << attempt.min(7)).min(5000))
}

impl Transport {
    pub(crate) async fn connect(
        addr: SocketAddr,
        cred: Credential,
        max_attempts: u32,
        timeout: Duration,
        handler: Option<CallHandler>,
        tls: Option<ClientTls>,
        gss: Option<txnfs_rpc::gss::GssClientConfig>,
    ) -> Result<Self, ClientError> {
        let t = Transport {
            addr,
            cred,
            conn: Mutex::new(None),
            handler,
            generation: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            max_attempts,
            timeout,
            tls,
            gss,
        };
        t.current().await?;
        Ok(t)
    }

    async fn current(&self) -> Result<(u64, Arc<RpcClient>), ClientError> {
        let mut g = self.conn.lock().await;
        if let Some(c) = g.as_ref() {
            return Ok(c.clone());
        }
        let mut last = String::new();
        for attempt in 0..self.max_attempts.max(1) {
            let conn = RpcClient::connect_with_handler(
                self.addr,
                self.cred.clone(),
                RpcConfig {
                    tls: self.tls.clone(),
                    gss: self.gss.clone(),
                    ..RpcConfig::default()
                },
                self.handler.clone(),
            );
            match conn.await {
                Ok(c) => {
                    let gen = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
                    if gen > 1 {
                        self.reconnects.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(addr = %self.addr, "reconnected");
                    }
                    let c = (gen, Arc::new(c));
                    *g = Some(c.clone());
                    return Ok(c);
                }
                // A refused probe, an untrusted certificate or a refused Kerberos
                // ticket stays so: say it now.
                Err(
                    e @ (RpcError::TlsRefused { .. }
                    | RpcError::TlsHandshake { .. }
                    | RpcError::Gss { .. }),
                ) => {
                    return Err(e.into());
                }
                Err(e) => {
                    last = e.to_string();
                    tokio::time::sleep(backoff(attempt)).await;
                }
            }
        }
        Err(ClientError::Unreachable {
            addr: self.addr.to_string(),
            msg: last,
        })
    }

    /// The NFS NULL procedure (program 100003, version 4) on the current connection,
    /// answered within `within`: anything else means the peer is not an NFSv4 server.
    pub(crate) async fn probe(&self, within: Duration) -> Result<(), ClientError> {
        let (_, conn) = self.current().await?;
        let not_nfs = |why: String| ClientError::NotNfsServer {
            addr: self.addr.to_string(),
            why,
        };
        match tokio::time::timeout(within, conn.call(NFS_PROGRAM, 4, 0, Bytes::new())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(RpcError::Disconnected)) => Err(not_nfs(
                "it closed the connection or sent something that is not an RPC reply".into(),
            )),
            Ok(Err(e)) => Err(not_nfs(e.to_string())),
            Err(_) => Err(not_nfs(format!("no RPC reply within {within:?}"))),
        }
    }

    async fn drop_conn(&self, gen: u64) {
        let mut g = self.conn.lock().await;
        if g.as_ref().is_some_and(|(cur, _)| *cur == gen) {
            *g = None;
        }
    }

    /// Send an encoded COMPOUND4args; on a broken connection, reconnect and re-send the
    /// same bytes.
    pub(crate) async fn compound(&self, args: Gathered) -> Result<Bytes, ClientError> {
        Ok(self.call(PROC_COMPOUND, args).await?.reply)
    }

    /// Send `args` as procedure `proc_num`; on a broken connection, reconnect and re-send
    /// the same bytes. The answer says whether it was re-sent: then an earlier sending
    /// may have been executed by a server that has since lost its session (a restart).
    pub(crate) async fn call(&self, proc_num: u32, args: Gathered) -> Result<Answer, ClientError> {
        let mut attempt = 0;
        loop {
            let (gen, c) = self.current().await?;
            let call = c.call_parts(NFS_PROGRAM, NFS_V4, proc_num, args.clone());
            let Ok(reply) = tokio::time::timeout(self.timeout, call).await else {
                return Err(ClientError::Timeout(self.timeout));
            };
            match reply {
                Ok(reply) => {
                    return Ok(Answer {
                        reply,
                        resent: attempt > 0,
                    })
                }
                // The server forgot or expired our Kerberos context (RFC 2203
                // §5.3.3.3; the call was not executed): a new connection creates a new
                // one, with the ticket the cache holds now.
                Err(RpcError::AuthError(
                    AuthStat::RpcsecGssCredProblem | AuthStat::RpcsecGssCtxProblem,
                )) if self.gss.is_some() => {
                    self.drop_conn(gen).await;
                    attempt += 1;
                    if attempt >= self.max_attempts {
                        return Err(ClientError::Unreachable {
                            addr: self.addr.to_string(),
                            msg: "the server keeps refusing our Kerberos context".into(),
                        });
                    }
                }
                Err(RpcError::Disconnected | RpcError::Io(_)) => {
                    self.drop_conn(gen).await;
                    attempt += 1;
                    if attempt >= self.max_attempts {
                        return Err(ClientError::Unreachable {
                            addr: self.addr.to_string(),
                            msg: "connection lost".into(),
                        });
                    }
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The number of the connection made last (1 for the first; each reconnect adds one).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Close the current connection: with an RPCSEC_GSS context, RPCSEC_GSS_DESTROY
    /// first (at most `txnfs_rpc::DESTROY_WAIT`) so the server frees it at once. A
    /// connection still used by a call in flight is only dropped (its DESTROY is then
    /// sent unanswered when the last user lets go).
    pub(crate) async fn close(&self) {
        let taken = self.conn.lock().await.take();
        if let Some((_, c)) = taken {
            if let Ok(c) = Arc::try_unwrap(c) {
                c.close().await;
            }
        }
    }

    /// Break the current connection (tests use it to simulate a network failure).
    pub(crate) async fn sever(&self) {
        let mut g = self.conn.lock().await;
        if let Some((_, c)) = g.take() {
            c.abort();
        }
    }
}
