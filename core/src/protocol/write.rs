//! One conditional write of a lease record, until its outcome is known.
//!
//! A write is sent; a failed condition or an unknown outcome (`Unavailable`: a timeout, a 5xx)
//! is followed by a read of the record:
//! - it carries our nonce: the write landed (an SDK retry of a write that had landed answers
//!   412 — the dynamolock#280 bug class);
//! - it names our nonce in `prev`: the write landed and has already been replaced;
//! - the condition still holds (the record is unchanged, or still absent for a create): the
//!   write has not landed (yet) and the same bytes are sent again, so at most one copy lands;
//! - anything else: someone else's write won.
//!
//! `t_send` is read before the first send: whichever copy landed was sent after it.

use std::time::Duration;

use bytes::Bytes;

use super::{Backoff, Entropy};
use crate::clock::Instant;
use crate::error::{Error, ErrorKind, Result};
use crate::options::Timing;
use crate::record::{Parsed, Record};
use crate::store::{Cond, Get, Put, Version};

/// The outcome of a conditional write, once known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Written {
    /// The write is in the store. `t_send` was read before the first attempt was sent.
    Landed { version: Version, t_send: Instant },
    /// The write is not in the store and never will be; `current` is what is there instead.
    Rejected { current: Get },
    /// The write landed, and another write has already replaced it (`current` names it as
    /// its `prev`).
    Replaced { current: Get },
}

/// What happened since the last step.
#[derive(Debug)]
pub enum WriteEvent {
    Start,
    Put(Result<Put>),
    Read(Result<Get>),
    Slept,
}

/// What to do next.
#[derive(Debug)]
pub enum WriteStep {
    /// Send the write (the same bytes every time).
    Put {
        bytes: Bytes,
        cond: Cond,
    },
    /// Read the record (no `if_none_match`).
    Read,
    Sleep(Duration),
    Done(Result<Written>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum After {
    Put,
    Read,
}

/// One write in progress.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WriteOp {
    url: String,
    nonce: String,
    bytes: Bytes,
    cond: Cond,
    give_up_at: Instant,
    backoff: Backoff,
    t_send: Option<Instant>,
    after_sleep: After,
    /// Whether this write paused (a backoff) since it was last sent: two sends of it are always
    /// at least one pause apart, and never more than one (see `read_back`).
    paused_since_send: bool,
}

impl WriteOp {
    /// Write `record` (which carries its nonce) at `cond`, trying until `give_up_at`. `url`
    /// names the lease in messages.
    pub fn new(
        url: &str,
        record: &Record,
        cond: Cond,
        give_up_at: Instant,
        timing: &Timing,
    ) -> Self {
        WriteOp {
            url: url.to_string(),
            nonce: record.write.clone().expect("every write carries a nonce"),
            bytes: record.to_bytes(),
            cond,
            give_up_at,
            backoff: Backoff::for_timing(timing),
            t_send: None,
            after_sleep: After::Put,
            paused_since_send: false,
        }
    }

    /// The instant read before the first send, once sent.
    pub fn t_send(&self) -> Option<Instant> {
        self.t_send
    }

    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// The next step, given what happened (`now` on our monotonic clock).
    pub fn step(&mut self, event: WriteEvent, now: Instant, entropy: &dyn Entropy) -> WriteStep {
        match event {
            WriteEvent::Start => {
                self.t_send = Some(now);
                self.put()
            }
            WriteEvent::Slept => match self.after_sleep {
                After::Put => {
                    if super::mutants::on(super::mutants::Mutant::ResendResetsSendTime) {
                        self.t_send = Some(now);
                    }
                    self.put()
                }
                After::Read => WriteStep::Read,
            },
            WriteEvent::Put(Ok(Put::Written { version, .. })) => self.done(Ok(Written::Landed {
                version,
                t_send: self.t_send.unwrap_or(now),
            })),
            WriteEvent::Put(Ok(Put::ConditionFailed)) => WriteStep::Read,
            WriteEvent::Put(Err(e)) if e.kind() == ErrorKind::Unavailable => WriteStep::Read,
            WriteEvent::Put(Err(e)) | WriteEvent::Read(Err(e))
                if e.kind() != ErrorKind::Unavailable =>
            {
                WriteStep::Done(Err(e))
            }
            WriteEvent::Read(Err(e)) => {
                if now >= self.give_up_at {
                    return WriteStep::Done(Err(
                        e.context(format!("the outcome of a write to {} is unknown", self.url))
                    ));
                }
                self.sleep(After::Read, entropy)
            }
            WriteEvent::Put(Err(_)) => unreachable!("both error arms are above"),
            WriteEvent::Read(Ok(current)) => self.read_back(current, now, entropy),
        }
    }

    fn put(&mut self) -> WriteStep {
        self.paused_since_send = false;
        WriteStep::Put {
            bytes: self.bytes.clone(),
            cond: self.cond.clone(),
        }
    }

    fn done(&self, r: Result<Written>) -> WriteStep {
        WriteStep::Done(r)
    }

    fn sleep(&mut self, after: After, entropy: &dyn Entropy) -> WriteStep {
        self.after_sleep = after;
        self.paused_since_send = true;
        WriteStep::Sleep(self.backoff.next(entropy))
    }

    fn read_back(&mut self, current: Get, now: Instant, entropy: &dyn Entropy) -> WriteStep {
        let t_send = self.t_send.unwrap_or(now);
        let condition_holds = match &current {
            Get::Found(obj) => {
                if let Parsed::Valid(r) = Record::parse(obj.bytes.as_deref(), obj.size) {
                    if r.is_write(&self.nonce) {
                        return self.done(Ok(Written::Landed {
                            version: obj.version.clone(),
                            t_send,
                        }));
                    }
                    if r.replaced_write(&self.nonce) {
                        return self.done(Ok(Written::Replaced { current }));
                    }
                }
                self.cond == Cond::Match(obj.version.clone())
            }
            Get::NotFound { .. } => self.cond == Cond::Create,
            Get::NotModified { .. } => unreachable!("a read-back sends no if-none-match"),
        };
        if !condition_holds {
            return self.done(Ok(Written::Rejected { current }));
        }
        // The condition still holds: our write did not land (yet). Send it again, same bytes,
        // so that at most one copy can ever land.
        if now >= self.give_up_at {
            return self.done(Err(Error::unavailable(format!(
                "could not write {} before giving up",
                self.url
            ))));
        }
        // Read-backs that failed (a partition) already paused since the last send: the store
        // answers again, so send at once. A renewal's deadline does not wait, and one more
        // backoff here (up to renew/2) was what kept a healed holder from renewing in time.
        // Otherwise (the store answered the read at once) pause first, so that a store that
        // keeps failing writes is not sent them back to back.
        if self.paused_since_send {
            return self.put();
        }
        self.sleep(After::Put, entropy)
    }
}

#[cfg(test)]
mod tests;
