//! The network faults the lease and queued-lock models share: a request held up (it lands
//! later, or never), applied with its answer held up or lost, or failed without being applied.
//! Each model says where a participant's request is and what answering it does ([`Net`]); the
//! fault itself is the same everywhere ([`inject`]), and so is where a request is ([`Flight`]).
//! The lease and queued-lock models also share their requests and answers ([`Req`],
//! [`Answer`]); the fence model has its own (a fenced write reads metadata and writes it).

use std::time::SystemTime;

use bytes::Bytes;
use lease::store::{Cond, Get, Put, Version};

/// A request on its way, or its answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Req {
    Get {
        if_none_match: Option<Version>,
    },
    Put {
        bytes: Bytes,
        cond: Cond,
    },
    /// Write the probe object and read its stamp back: the store's own clock (an acquirer's
    /// `Step::Stamp`). It never touches the lease record.
    Stamp,
}

/// Where a request is. Without faults a request is applied and answered within the tick it
/// is sent in; faults hold it up across ticks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Flight<R = Req, A = Answer> {
    /// Sent; it will be applied and answered at once, unless a fault intervenes.
    Sent(R),
    /// Held up in the network: applied (and answered) at a later tick, or never.
    Delayed(R),
    /// Applied; the answer is held up.
    Answered(R, A),
    /// Applied; the answer was lost (the client will time out).
    Lost(R),
}

impl<R: Clone, A> Flight<R, A> {
    /// The request, wherever it is.
    pub fn req(&self) -> R {
        match self {
            Flight::Sent(r) | Flight::Delayed(r) | Flight::Answered(r, _) | Flight::Lost(r) => {
                r.clone()
            }
        }
    }
}

/// A store's answer (errors are only `Unavailable`: the model's network fails, the store does
/// not).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    Get(Get),
    Put(Put),
    /// The store's stamp of the probe write.
    Stamp(SystemTime),
    Unavailable,
}

/// A fault on one participant's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Held up in the network: applied at a later tick, or never.
    Delay,
    /// Applied; the answer is held up.
    DelayAnswer,
    /// Applied; the answer is lost.
    LoseReply,
    /// Failed without being applied (`Unavailable`).
    Fail,
}

/// What a model's participants do with the network.
pub(crate) trait Net {
    type State;
    type Req: Clone;
    type Answer;
    /// The count of faults so far (bounded by the model).
    fn faults(s: &mut Self::State) -> &mut u8;
    /// The request participant `c` has sent and that is not yet applied.
    fn pending_req(&self, s: &Self::State, c: usize) -> Option<Self::Req>;
    fn set_flight(&self, s: &mut Self::State, c: usize, f: Flight<Self::Req, Self::Answer>);
    /// The store applies participant `c`'s request.
    fn apply(&self, s: &mut Self::State, c: usize, req: &Self::Req) -> Self::Answer;
    /// Participant `c` gets an answer.
    fn answer(&self, s: &mut Self::State, c: usize, a: Self::Answer);
    /// The answer of a request that failed without being applied.
    fn unavailable() -> Self::Answer;
}

/// Apply `fault` to participant `c`'s request; `None` when it has none to fault.
pub(crate) fn inject<N: Net>(n: &N, s: &mut N::State, c: usize, fault: Fault) -> Option<()> {
    *N::faults(s) += 1;
    match fault {
        Fault::Delay => {
            let req = n.pending_req(s, c)?;
            n.set_flight(s, c, Flight::Delayed(req));
        }
        Fault::DelayAnswer => {
            let req = n.pending_req(s, c)?;
            let answer = n.apply(s, c, &req);
            n.set_flight(s, c, Flight::Answered(req, answer));
        }
        Fault::LoseReply => {
            let req = n.pending_req(s, c)?;
            n.apply(s, c, &req);
            n.set_flight(s, c, Flight::Lost(req));
        }
        Fault::Fail => n.answer(s, c, N::unavailable()),
    }
    Some(())
}
