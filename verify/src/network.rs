//! The network faults the lease and queued-lock models share: a request held up (it lands
//! later, or never), applied with its answer held up or lost, or failed without being applied.
//! Each model says where a participant's request is and what answering it does ([`Net`]); the
//! fault itself is the same everywhere ([`inject`]).

use crate::lease_model::{Answer, Flight, Req};

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
    /// The count of faults so far (bounded by the model).
    fn faults(s: &mut Self::State) -> &mut u8;
    /// The request participant `c` has sent and that is not yet applied.
    fn pending_req(&self, s: &Self::State, c: usize) -> Option<Req>;
    fn set_flight(&self, s: &mut Self::State, c: usize, f: Flight);
    /// The store applies participant `c`'s request.
    fn apply(&self, s: &mut Self::State, c: usize, req: &Req) -> Answer;
    /// Participant `c` gets an answer.
    fn answer(&self, s: &mut Self::State, c: usize, a: Answer);
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
        Fault::Fail => n.answer(s, c, Answer::Unavailable),
    }
    Some(())
}
