//! Negative controls for the model checker: each [`Mutant`] brings back one bug that the safety
//! fixes removed (issue 11) or that the queued locks' rules exclude (issues 13 and 22), so
//! `verify/tests/negative_controls.rs` can show that the checker finds it. The switch exists only with the `negative-controls` feature, which nothing that
//! ships turns on; without it the check is a constant `false` and the mutant code is dead.

/// One bug, brought back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mutant {
    /// A resent write takes the time of its latest send as `t_send`: when an earlier copy
    /// lands late, the holder's deadline is later than what the store's readers go by.
    ResendResetsSendTime = 3,
    /// A fenced write whose outcome was unknown takes any change since as proof that it did
    /// not land, so a write that landed and was then overwritten by a newer holder is reported
    /// `Fenced`.
    UnknownOutcomeTakenAsNotLanded = 4,
    /// Epochs go by the client's known epoch + 1, not above the clock: a record made where none
    /// is starts there, and the write that takes it counts on from its epoch alone, so a record
    /// deleted by hand is made again with an epoch that was already handed out.
    RecreateAtKnownEpoch = 1,
    /// A holder goes on believing while its release is in flight, although the release may
    /// land (and a waiter take over) before the answer comes back.
    BelieveWhileReleasing = 2,
    /// Queued locks: a waiter that fits beside the grants is granted even when an earlier,
    /// competing waiter is still waiting (readers overtake a waiting writer: it can starve).
    QueueOvertakes = 5,
    /// Queued locks: shared and exclusive grants are not told apart when deciding what fits
    /// (a writer is granted beside readers).
    QueueIgnoresModes = 6,
    /// Queued locks: only the waiters at the head of their line check anyone's session, so a
    /// dead head waiter behind a dead holder strands everyone behind it.
    QueueOnlyHeadsCheck = 7,
    /// Fencing: one token per object, as before scopes — every recorded token refuses every
    /// lower one, whatever the scopes and modes, and a write records only its own token (a
    /// live holder of a disjoint scope is refused once a later grant wrote).
    FenceIgnoresScopes = 20,
    /// Fencing: a fenced read does not record the reader's token on the object (a stale
    /// writer's write lands under readers with later grants).
    ReadersDoNotPin = 21,
    /// The store-clock rule trusts an answer's `Date` as the store's clock (issue 29): a
    /// gateway whose clock runs ahead makes a live holder's record look expired.
    TrustDate = 8,
    /// A holder on this machine is taken for gone when its pids are absent (or other processes)
    /// in the waiter's pid namespace, whatever namespace its own pids were in: a live holder in
    /// a container sharing the directory is taken over.
    DeadHolderAnyPidNamespace = 9,
    /// A holder is taken for gone when its pids are absent here, whatever boot its record names:
    /// a live holder on another machine sharing the directory over a network file system (whose
    /// init pid namespace has the same name as ours, as on every Linux host) is taken over.
    DeadHolderAnyBoot = 10,
    /// A holder that shortens its ttl goes on believing by the longer one until the shorter
    /// one's write is known to have landed, although waiters go by the shorter one from when it
    /// lands.
    NoCapOnShorterTtl = 11,
    /// Queued locks: a join is checked only against its own size, not against the room every
    /// later settle needs, so a release that grants the waiters can overflow the record and
    /// strand the lock (issue 22 item 2).
    QueueJoinIgnoresReserve = 22,
    /// Queued locks: tokens go by the participant's known epoch + 1, not above the clock: a
    /// record made where none is starts there, and the writes that grant count on from the
    /// record's epoch alone, so a deleted record's tokens are handed out again.
    QueueRecreateAtKnownEpoch = 23,
    /// Queued locks: a holder never reads the lock's record again after its grant, so a record
    /// deleted and made again without it leaves it believing (issue 22 item 1).
    QueueHolderSkipsConfirmation = 24,
    /// Queued locks: a record written by a newer version is taken over like a corrupt one
    /// (issue 22 item 3).
    QueueNewerTakenAsCorrupt = 25,
    /// Queued locks: a participant whose session lapsed still writes its join (it may have been
    /// granted, proven gone and removed while an earlier join's outcome was unknown).
    QueueRejoinWhenLapsed = 26,
    /// Queued locks: a waiter checks a blocker's session only when the takeover rule's own
    /// estimate says (which adds a whole resolution), so with a coarse store clock it can look
    /// just too early and then wait a whole interval more (issue 22 item 6).
    QueueSessionCheckLate = 27,
    /// Queued locks: a write that makes the record where none is (`Create`) grants at once,
    /// with tokens above the clock it was sent with; landing late — after a record made
    /// meanwhile handed out tokens and was deleted — it hands those tokens out again (issue 22
    /// item 1; before, the model assumed no deletion while a `Create` was in flight).
    QueueCreateGrants = 28,
    /// The exclusive lease: a write that makes the record where none is (`Create`) grants at
    /// once, with the epoch of the clock it was sent with; landing late — after a record made
    /// meanwhile handed that epoch out and was deleted — it hands it out again (issue 22's
    /// finding on the exclusive lease).
    LeaseCreateGrants = 29,
    /// Queued locks: a wake hint is taken as the news of a grant — the waiter goes ahead with
    /// the record it last read and its token counter, without reading (issue 23: a hint carries
    /// no authority, and the model's forged, duplicated and early hints must show why).
    HintTakenAsGrant = 40,
    /// Queued locks: a grant to a later-joined waiter does not advance the bypass count of the
    /// earlier competing waiters it passed, so a stream of higher priorities starves a lower
    /// one (issue 23, "Priorities").
    QueueBypassNotCounted = 30,
    /// Queued locks: a waiter is due only by its own bypass count, not by a later competing
    /// one's of its priority, so a due later waiter goes before an earlier one of the same
    /// priority (issue 23, "Priorities").
    QueueDueNotInherited = 31,
    /// Shared sessions: a grant's join is sent as soon as its number is handed out, before a
    /// session write that holds it has landed: a checker that reads the record, then the
    /// session, finds the number detached and removes a grant its owner will believe (issue 24).
    SessionJoinBeforeAttach = 41,
    /// Shared sessions: a released grant's number is detached while its owner still believes
    /// it (the detach lands before the belief ends): rule 4 removes a believed grant.
    SessionDetachWhileBelieved = 42,
    /// Shared sessions: a grant's belief outlives its session's loss (lapse, takeover): every
    /// grant attached stays believed while checkers remove them.
    SessionBeliefOutlivesLoss = 43,
    /// Queued locks: a yield request outlives the tenures it named — the write that removes
    /// the last of them keeps it, and a holder takes any standing request for its own — so a
    /// later holder is told to yield (issue 23, "Yield on request").
    YieldOutlivesTenure = 44,
    /// Preemption (issue 23): the write that takes a live holder's lease keeps its epoch
    /// instead of the next one, so the preempted holder's fenced writes are not refused.
    PreemptSameEpoch = 50,
    /// Preemption (issue 23): one preemption per acquire call, whatever became of it — a
    /// preemption that lost the race with the holder's renewal is spent, and the acquirer
    /// waits for the live holder it set out to displace (CI stop 38).
    PreemptOncePerCall = 51,
    /// Yield for a plain lease (issue 23): the holder takes any request in `KEY.yield` for its
    /// own, whatever epoch it names, so a request written for a tenure that has ended (the
    /// asker read the record, then the holder released) reaches the next holder.
    LeaseYieldAnyTenure = 52,
    /// Preemption of a queued lock (issue 23): the preempting write grants the preemptor but
    /// keeps the grants in its way, so their holders go on confirming and believing beside it.
    QueuePreemptKeepsGrants = 53,
    /// Preemption of a queued lock (issue 23): a preempting acquisition preempts whatever is in
    /// its way at each write, not only the grants it first set out to preempt, so a grant made
    /// after its acquisition began (to a waiter, or to another preemptor) is taken too.
    QueuePreemptAnyTenure = 54,
    /// Shared sessions (issue 24): an attach is accepted after the session's release was
    /// decided (`Owner::decide_release`: idle for its idle time), so a grant takes a number in
    /// a session whose next write is its release — attached to a session released idle, its
    /// join never sendable, instead of being refused and opening another session.
    SessionAttachWhileReleasing = 60,
}

#[cfg(feature = "negative-controls")]
static BYPASS_LIMIT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Set the queued locks' bypass bound for the whole process (`None`: [`MAX_BYPASS`]): the model
/// checker checks the rule at 1 or 2 to reach the bound in few steps. Test processes only.
///
/// [`MAX_BYPASS`]: super::queue::MAX_BYPASS
#[cfg(feature = "negative-controls")]
pub fn set_bypass_limit(limit: Option<u32>) {
    BYPASS_LIMIT.store(limit.unwrap_or(0), std::sync::atomic::Ordering::SeqCst);
}

/// The bypass bound a test process set, if any.
#[inline]
pub(crate) fn bypass_limit() -> Option<u32> {
    #[cfg(feature = "negative-controls")]
    {
        match BYPASS_LIMIT.load(std::sync::atomic::Ordering::SeqCst) {
            0 => None,
            n => Some(n),
        }
    }
    #[cfg(not(feature = "negative-controls"))]
    {
        None
    }
}

#[cfg(feature = "negative-controls")]
static ON: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Bring `mutant` back for the whole process (`None`: none). Test processes only.
#[cfg(feature = "negative-controls")]
pub fn set(mutant: Option<Mutant>) {
    ON.store(
        mutant.map_or(0, |m| m as u8),
        std::sync::atomic::Ordering::SeqCst,
    );
}

/// Whether `mutant` is on.
#[inline]
pub(crate) fn on(mutant: Mutant) -> bool {
    #[cfg(feature = "negative-controls")]
    {
        ON.load(std::sync::atomic::Ordering::SeqCst) == mutant as u8
    }
    #[cfg(not(feature = "negative-controls"))]
    {
        let _ = mutant;
        false
    }
}
