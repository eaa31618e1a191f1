//! CREATE_SESSION (RFC 8881 §18.36): channel negotiation, the reply-cache
//! reservation of the new session's slots, its replay, and the confirmation of the
//! client record.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::slots::SlotTable;

/// Smallest `ca_maxrequestsize` we accept: a COMPOUND of SEQUENCE alone with an
/// empty tag (tag length, minor version, op count, opcode, 32 bytes of SEQUENCE4args
/// = 48) fits. Small sizes are negotiated, not refused (RFC 8881 §18.36.3); requests
/// above them are refused one by one (NFS4ERR_REQ_TOO_BIG).
const MIN_REQUEST_SIZE: u32 = 48;

/// Smallest `ca_maxresponsesize` we accept: the reply to SEQUENCE alone with an empty
/// tag (status, tag length, result count, opcode, status, 36 bytes of
/// SEQUENCE4resok = 56); larger replies get NFS4ERR_REP_TOO_BIG.
const MIN_RESPONSE_SIZE: u32 = 56;

impl SessionTable {
    /// Fit the session's slots into what is left of the reply-cache budget: fewer slots
    /// than asked when they do not all fit (the client follows the granted count), DELAY
    /// when not one does. Returns the bytes to reserve (the caller commits them).
    fn reserve_reply_cache(&mut self, fore: &mut ChannelAttrs) -> Result<usize, SessionError> {
        let per_slot = (fore.max_response_cached as usize).max(1);
        let free = self
            .limits
            .reply_cache_bytes
            .saturating_sub(self.cache_reserved);
        let fits = u32::try_from(free / per_slot).unwrap_or(u32::MAX);
        if fits == 0 {
            return Err(SessionError::Delay);
        }
        fore.max_requests = fore.max_requests.min(fits);
        let bytes = fore.max_requests as usize * per_slot;
        self.cache_reserved += bytes;
        Ok(bytes)
    }

    fn negotiate(req: &ChannelAttrs, max: &ChannelAttrs) -> Result<ChannelAttrs, SessionError> {
        if req.max_request < MIN_REQUEST_SIZE || req.max_response < MIN_RESPONSE_SIZE {
            return Err(SessionError::TooSmall);
        }
        Ok(ChannelAttrs {
            max_request: req.max_request.min(max.max_request),
            max_response: req.max_response.min(max.max_response),
            max_response_cached: req.max_response_cached.min(max.max_response_cached),
            max_ops: req.max_ops.clamp(1, max.max_ops),
            max_requests: req.max_requests.clamp(1, max.max_requests),
        })
    }

    /// CREATE_SESSION (RFC 8881 §18.36) sent by `principal`, recording `callback` on
    /// the new session. On success returns the outcome and, if this confirmed a
    /// client that replaced an older incarnation, that old client id (its record and
    /// sessions are gone; the caller releases its opens and locks).
    pub fn create_session(
        &mut self,
        principal: &Principal,
        args: &CreateSessionArgs,
        callback: CallbackParams,
        now: Instant,
    ) -> Result<(CreateSessionOutcome, Option<ClientId>), SessionError> {
        let clientid = args.clientid;
        let seq = args.seq;
        // §18.36.3: flags the specification does not define are an error, not ignored.
        if args.flags & !CREATE_SESSION4_FLAG_MASK != 0 {
            return Err(SessionError::Inval);
        }
        let rec = self
            .clients
            .get(&clientid)
            .ok_or(SessionError::StaleClientId)?;
        // §18.36.4: only the principal that sent EXCHANGE_ID may confirm the record
        // (a confirmed record's sessions may be created by others, as in knfsd).
        if !rec.confirmed && rec.principal != *principal {
            return Err(SessionError::ClidInUse);
        }
        if let Some((s, out)) = &rec.last_create {
            if seq == *s {
                return Ok((out.clone(), None));
            }
        }
        if seq != rec.create_seq {
            return Err(SessionError::SeqMisordered);
        }
        if rec.sessions.len() >= self.limits.max_sessions_per_client {
            return Err(SessionError::Resource);
        }
        let mut fore = Self::negotiate(&args.fore, &self.limits.server_fore)?;
        let back = Self::negotiate(&args.back, &self.limits.server_back)?;
        let cache_reserved = self.reserve_reply_cache(&mut fore)?;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&clientid.to_be_bytes());
        id[8..12].copy_from_slice(&self.boot_epoch.to_be_bytes());
        id[12..].copy_from_slice(&self.next_session.to_be_bytes());
        self.next_session = self.next_session.wrapping_add(1);
        let activity = self
            .clients
            .get(&clientid)
            .map(|c| c.activity.clone())
            .unwrap_or_default();
        // Persistence only when configured and asked for; never RDMA; the back-channel
        // flag only when connections may carry callbacks.
        let mut flags = if self.limits.back_channel {
            args.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        } else {
            0
        };
        if self.persistence {
            flags |= args.flags & CREATE_SESSION4_FLAG_PERSIST;
        }
        self.sessions.insert(
            id,
            SessionRecord {
                shared: Arc::new(Session {
                    id,
                    client: clientid,
                    fore,
                    persistent: flags & CREATE_SESSION4_FLAG_PERSIST != 0,
                    activity,
                }),
                slots: SlotTable::new(fore.max_requests),
                conns: HashSet::from([args.conn]),
                callback,
                cache_reserved,
                flags,
                back,
                rebind_back: false,
            },
        );
        let outcome = CreateSessionOutcome {
            id,
            seq,
            flags,
            fore,
            back,
        };
        let mut replaced = None;
        let owner;
        {
            let rec = self
                .clients
                .get_mut(&clientid)
                .ok_or(SessionError::StaleClientId)?;
            rec.create_seq = seq.wrapping_add(1);
            rec.last_create = Some((seq, outcome.clone()));
            rec.sessions.push(id);
            rec.last_renew = now;
            owner = rec.owner.clone();
            if !rec.confirmed {
                rec.confirmed = true;
                let (old_conf, _) = self.by_owner.get(&owner).cloned().unwrap_or((None, None));
                if let Some(old) = old_conf.filter(|o| *o != clientid) {
                    replaced = Some(old);
                }
                self.by_owner.insert(owner.clone(), (Some(clientid), None));
            }
        }
        if let Some(old) = replaced {
            self.remove_client(old);
        }
        Ok((outcome, replaced))
    }
}
