//! The reference model of the EVD state word: the documented bit layout and
//! transition table of `evd::state`, written out again on a plain struct.
//!
//! Two uses: the `transitions` target computes every `evd::state` function
//! and the model here on the same (random) word and arguments, and the two
//! must agree (outcome and new word); the `schedule` target checks, after
//! every CAS the real code makes on the state word, that the word it
//! installed is a legal successor of the one it replaced ([`successor`]).
//! The model is sequential: it knows nothing of threads, only of the word
//! before and after one transition.

use evd::state::{self, Notify, PolicyBits};

/// Bits of the ticket counter (bits 28–63 of the word).
pub const TICKET_MASK: u64 = (1 << 36) - 1;

/// Most permits out at once (bits 20–27 of the word).
pub const MAX_PERMITS: u64 = 255;

/// The word's fields, decoded by the layout documented in `evd::state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word {
    pub tail: u64,
    pub armed: bool,
    pub notified: bool,
    pub closed: bool,
    pub resizing: bool,
    pub token: bool,
    /// 0 disabled, 1 single, 2 many (3 is never valid).
    pub policy: u8,
    pub instances: u64,
    pub cap_log2: u32,
    /// Enabled on the CNO (bit 19).
    pub cno_armed: bool,
    /// Slots promised to permits (bits 20–27).
    pub permits: u64,
}

impl Word {
    /// Decode `w` by the documented layout, cross-checked with the crate's own
    /// accessors so that layout and accessors cannot drift apart.
    pub fn decode(w: u64) -> Word {
        let d = Word {
            armed: w & 1 != 0,
            notified: (w >> 1) & 1 != 0,
            closed: (w >> 2) & 1 != 0,
            resizing: (w >> 3) & 1 != 0,
            token: (w >> 4) & 1 != 0,
            policy: ((w >> 5) & 0b11) as u8,
            instances: (w >> 7) & 0b11_1111,
            cap_log2: ((w >> 13) & 0b11_1111) as u32,
            cno_armed: (w >> 19) & 1 != 0,
            permits: (w >> 20) & 0xff,
            tail: w >> 28,
        };
        assert_ne!(d.policy, 3, "policy bits 3 are not a policy: {w:#x}");
        assert_eq!(d.tail, state::tail(w));
        assert_eq!(d.cap_log2, state::cap_log2(w));
        assert_eq!(d.instances, state::instances(w));
        assert_eq!(d.policy, policy_bits(state::policy(w)));
        assert_eq!(d.armed, state::has(w, state::ARMED));
        assert_eq!(d.notified, state::has(w, state::NOTIFIED));
        assert_eq!(d.closed, state::has(w, state::CLOSED));
        assert_eq!(d.resizing, state::has(w, state::RESIZING));
        assert_eq!(d.token, state::has(w, state::TOKEN));
        assert_eq!(d.cno_armed, state::has(w, state::CNO_ARMED));
        assert_eq!(d.permits, state::permits(w));
        d
    }

    pub fn initial(cap_log2: u32) -> Word {
        Word {
            tail: 0,
            armed: false,
            notified: false,
            closed: false,
            resizing: false,
            token: false,
            policy: 0,
            instances: 0,
            cap_log2,
            cno_armed: false,
            permits: 0,
        }
    }

    pub fn len(&self, head: u64) -> u64 {
        self.tail.wrapping_sub(head) & TICKET_MASK
    }

    pub fn capacity(&self) -> u64 {
        1 << self.cap_log2
    }
}

pub fn policy_bits(p: PolicyBits) -> u8 {
    match p {
        PolicyBits::Disabled => 0,
        PolicyBits::Single => 1,
        PolicyBits::Many => 2,
    }
}

/// Instances a policy allows in flight.
pub fn limit(policy: u8) -> u64 {
    match policy {
        1 => 1,
        2 => 63,
        _ => 0,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserve {
    Ticket {
        ticket: u64,
        notify: Notify,
        next: Word,
    },
    Closed,
    Resizing,
    Full,
}

/// post: take the tail ticket; the first post after an arm owns the wake; a
/// post that finds the token free under an enabled policy below its limit
/// starts an instance.
pub fn reserve(a: Word, hint: u64) -> Reserve {
    if a.closed {
        return Reserve::Closed;
    }
    if a.resizing {
        return Reserve::Resizing;
    }
    if a.len(hint) + a.permits >= a.capacity() {
        return Reserve::Full;
    }
    ticket(a)
}

/// The ticket of a reservation that goes ahead, with its notification.
fn ticket(a: Word) -> Reserve {
    let mut n = a;
    n.tail = (a.tail + 1) & TICKET_MASK;
    let notify = if a.armed {
        n.armed = false;
        n.notified = true;
        Notify::Wake
    } else if a.cno_armed {
        n.cno_armed = false;
        n.notified = true;
        Notify::Cno
    } else if a.policy != 0 && !a.token && a.instances < limit(a.policy) {
        n.token = true;
        n.notified = true;
        n.instances += 1;
        Notify::Upcall
    } else {
        Notify::None
    };
    Reserve::Ticket {
        ticket: a.tail,
        notify,
        next: n,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveBatch {
    Tickets {
        first: u64,
        count: u64,
        notify: Notify,
        next: Word,
    },
    Closed,
    Resizing,
    Full,
}

/// batch post: as many of `want` (≥ 1) tickets as there is room for, with
/// the notification of a single reservation.
pub fn reserve_batch(a: Word, hint: u64, want: u64) -> ReserveBatch {
    match reserve(a, hint) {
        Reserve::Closed => ReserveBatch::Closed,
        Reserve::Resizing => ReserveBatch::Resizing,
        Reserve::Full => ReserveBatch::Full,
        Reserve::Ticket {
            ticket,
            notify,
            mut next,
        } => {
            let room = a.capacity() - a.len(hint) - a.permits;
            let count = want.clamp(1, room);
            next.tail = (a.tail + count) & TICKET_MASK;
            ReserveBatch::Tickets {
                first: ticket,
                count,
                notify,
                next,
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakePermit {
    Taken(Word),
    Closed,
    Resizing,
    Full,
    AtLimit,
}

/// take a permit: where a post would get a ticket (and fewer than 255 are
/// out), one more slot is promised; nothing is queued, nobody notified.
pub fn take_permit(a: Word, hint: u64) -> TakePermit {
    if a.closed {
        return TakePermit::Closed;
    }
    if a.resizing {
        return TakePermit::Resizing;
    }
    if a.len(hint) + a.permits >= a.capacity() {
        return TakePermit::Full;
    }
    if a.permits == MAX_PERMITS {
        return TakePermit::AtLimit;
    }
    let mut n = a;
    n.permits += 1;
    TakePermit::Taken(n)
}

/// send with a permit (one is out): the promised slot becomes the tail's
/// ticket, with a post's notification; refused only when closed or resizing.
pub fn send_permit(a: Word) -> Reserve {
    if a.closed {
        return Reserve::Closed;
    }
    if a.resizing {
        return Reserve::Resizing;
    }
    let mut b = a;
    b.permits -= 1;
    ticket(b)
}

/// give a permit back (one is out).
pub fn release_permit(a: Word) -> Word {
    let mut n = a;
    n.permits -= 1;
    n
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    Arm(Word),
    Pending,
    Closed,
}

/// arm: below the threshold and not closed-and-drained, set ARMED; clear
/// NOTIFIED only on an empty ring.
pub fn arm(a: Word, head: u64, threshold: u64) -> Arm {
    let n = a.len(head);
    if n >= threshold {
        return Arm::Pending;
    }
    if a.closed {
        return if n == 0 { Arm::Closed } else { Arm::Pending };
    }
    let mut next = a;
    next.armed = true;
    if n == 0 {
        next.notified = false;
    }
    Arm::Arm(next)
}

pub fn disarm(a: Word) -> Word {
    Word { armed: false, ..a }
}

/// withdraw: a direct wait gives up; with events queued or a loss report
/// pending on an enabled EVD the CNO is told (it was preempted). None if
/// nothing changes.
pub fn withdraw(a: Word, head: u64, report: bool) -> Option<(Word, Notify)> {
    if a.cno_armed && (a.len(head) > 0 || report) {
        return Some((
            Word {
                armed: false,
                cno_armed: false,
                notified: true,
                ..a
            },
            Notify::Cno,
        ));
    }
    a.armed.then_some((disarm(a), Notify::None))
}

/// close: set CLOSED, take the wake of an armed consumer and the CNO
/// trigger of an enabled one: (new word, wake, trigger the CNO).
pub fn close(a: Word) -> (Word, bool, bool) {
    let mut n = a;
    n.closed = true;
    n.armed = false;
    n.cno_armed = false;
    if a.armed || a.cno_armed {
        n.notified = true;
    }
    (n, a.armed, a.cno_armed)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enable {
    Armed(Word),
    AlreadyArmed,
    Pending,
    Closed,
}

/// enable_cno: the arm with threshold 1 on the CNO_ARMED bit.
pub fn enable_cno(a: Word, head: u64) -> Enable {
    if a.len(head) > 0 {
        Enable::Pending
    } else if a.closed {
        Enable::Closed
    } else if a.cno_armed {
        Enable::AlreadyArmed
    } else {
        Enable::Armed(Word {
            cno_armed: true,
            notified: false,
            ..a
        })
    }
}

pub fn disable_cno(a: Word) -> Option<Word> {
    a.cno_armed.then_some(Word {
        cno_armed: false,
        ..a
    })
}

pub fn note_notification(a: Word) -> Word {
    Word {
        notified: true,
        ..a
    }
}

pub fn begin_resize(a: Word) -> Option<Word> {
    (!a.resizing).then_some(Word {
        resizing: true,
        ..a
    })
}

pub fn end_resize(a: Word, cap_log2: u32) -> Word {
    Word {
        resizing: false,
        cap_log2,
        ..a
    }
}

/// set_policy: install the policy; with Invoke::Any, queued events and a free
/// token below the new limit, start an instance.
pub fn set_policy(a: Word, head: u64, policy: u8, any: bool) -> (Word, bool) {
    let mut n = a;
    n.policy = policy;
    let start = any && a.len(head) > 0 && !a.token && a.instances < limit(policy);
    if start {
        n.token = true;
        n.notified = true;
        n.instances += 1;
    }
    (n, start)
}

/// exit_instance: refused (None) while events are queued under an enabled
/// policy; otherwise drop the token and the count, and NOTIFIED if empty.
pub fn exit_instance(a: Word, head: u64) -> Option<Word> {
    let n = a.len(head);
    if n != 0 && a.policy != 0 {
        return None;
    }
    let mut next = a;
    next.token = false;
    next.instances = a.instances.saturating_sub(1);
    if n == 0 {
        next.notified = false;
    }
    Some(next)
}

pub fn release_token(a: Word) -> Word {
    Word { token: false, ..a }
}

/// reacquire: (took the token, new word).
/// (Also ends while more instances are in flight than the policy allows.)
pub fn reacquire(a: Word) -> (bool, Word) {
    if a.token || a.instances > limit(a.policy) {
        (
            false,
            Word {
                instances: a.instances.saturating_sub(1),
                ..a
            },
        )
    } else {
        (true, Word { token: true, ..a })
    }
}

pub fn abandon_instance(a: Word, held: bool) -> Word {
    Word {
        token: if held { false } else { a.token },
        instances: a.instances.saturating_sub(1),
        ..a
    }
}

/// start_upcall_on_full: a post that found the ring full under an enabled
/// policy with the token free takes the token and starts an instance (which
/// drains the ring); None otherwise (the refusal writes nothing).
pub fn start_upcall_on_full(a: Word) -> Option<Word> {
    (!a.token && a.instances < limit(a.policy)).then_some(Word {
        token: true,
        notified: true,
        instances: a.instances + 1,
        ..a
    })
}

/// notify_loss: a lossy post that gave its event up takes the notification
/// as a reservation would (wake an armed consumer, or start an instance),
/// without a ticket, also on a closed EVD (the report must still be told);
/// None if there is nobody to notify.
pub fn notify_loss(a: Word) -> Option<(Word, Notify)> {
    let mut n = a;
    if a.armed {
        n.armed = false;
        n.notified = true;
        return Some((n, Notify::Wake));
    }
    if a.cno_armed {
        n.cno_armed = false;
        n.notified = true;
        return Some((n, Notify::Cno));
    }
    if !a.token && a.instances < limit(a.policy) {
        n.token = true;
        n.notified = true;
        n.instances += 1;
        return Some((n, Notify::Upcall));
    }
    None
}

/// a post or permit refused as full starts an upcall only if there are
/// queued events for it to drain.
pub fn start_upcall_to_drain(a: Word, head: u64) -> Option<Word> {
    if a.len(head) == 0 {
        None
    } else {
        start_upcall_on_full(a)
    }
}

/// strands_a_full_ring: posts are refused as full, and only one of them
/// would start the upcall that drains the queued events.
pub fn strands_a_full_ring(a: Word, head: u64) -> bool {
    a.len(head) + a.permits >= a.capacity() && start_upcall_to_drain(a, head).is_some()
}

/// Largest `cap_log2` a word may hold (`evd::state::MAX_CAP_LOG2`).
pub const MAX_CAP_LOG2: u32 = 32;

/// Properties every word must have, whatever transition made it.
pub fn well_formed(w: Word) -> Result<(), String> {
    if w.cap_log2 > MAX_CAP_LOG2 {
        return Err(format!("capacity 2^{} above the maximum", w.cap_log2));
    }
    if w.instances > limit(2) {
        return Err(format!("{} instances", w.instances));
    }
    if w.token && w.instances == 0 {
        return Err("the token is held by no instance".into());
    }
    // (A handler nested on its own thread's stack may switch to
    // SingleInstance with its outer calls still counted; the `schedule`
    // harness makes no policy switch from a handler, so there more than
    // one instance under SingleInstance is a fault.)
    if w.policy == 1 && w.instances > 1 {
        return Err(format!("{} instances under SingleInstance", w.instances));
    }
    if w.closed && w.armed {
        return Err("armed on a closed EVD".into());
    }
    if w.closed && w.cno_armed {
        return Err("enabled on the CNO on a closed EVD".into());
    }
    if w.cno_armed && w.policy != 0 {
        return Err("enabled on a CNO under an upcall policy".into());
    }
    Ok(())
}

/// Is `new` what one transition of the table makes of `old`, for a consumer
/// head among `heads`? Returns the name of the first transition that
/// explains it. The arguments the real call passed and this function does
/// not know (a threshold, a batch size, a policy, the poster's head hint)
/// range over every value; the head ranges over `heads` (one value when the
/// caller knows it exactly), and for the upcall a post starts to drain a
/// ring it saw full also over `oldest_poster_head`, a head no later than
/// the oldest post under way began with. `losses` says whether a loss may have been
/// committed (some `post_lossy` has begun): without one, no CAS notifies of
/// a loss. `by_owner` says whether the CAS was made on the thread that owns
/// the consumer (or the `Upcalls`): only there are the owner's transitions
/// (`arm`, `set_policy`, `enable_cno`, `withdraw`, `disable_cno`,
/// `note_notification`, the two steps of a resize) legal. That is a
/// condition on the thread, not on the call: the owner's own posts, and
/// handlers running on its thread, pass it too. And a word some other row
/// also explains passes as that row (a `notify_loss` on a NOTIFIED word
/// makes the word a `withdraw` would). Only the `schedule` harness's owner
/// makes these calls; a handler that called `Upcalls::set_policy` from
/// another thread would need this widened.
pub fn successor(
    old: u64,
    new: u64,
    heads: &[u64],
    oldest_poster_head: Option<u64>,
    losses: bool,
    by_owner: bool,
) -> Result<&'static str, String> {
    let a = Word::decode(old);
    let n = Word::decode(new);
    well_formed(n).map_err(|e| format!("ill-formed word {n:?}: {e}"))?;
    if a.closed && !n.closed {
        return Err("CLOSED was cleared".into());
    }
    // Started for a loss (`notify_loss`, `restart_for_loss`), or to drain
    // the events a post saw queued (`start_upcall_to_drain`,
    // `start_draining_upcall`), whose head may be as old as its start (an
    // instance may take and hand back the token between the post's loads
    // and its CAS, leaving the word as it was): never with no loss on a
    // ring empty at every head that post could have loaded.
    let drain_heads = heads.iter().copied().chain(oldest_poster_head);
    if start_upcall_on_full(a) == Some(n)
        && (losses || drain_heads.into_iter().any(|h| a.len(h) > 0))
    {
        return Ok("start_upcall_on_full");
    }
    match notify_loss(a) {
        Some((next, _)) if next == n && losses => return Ok("notify_loss"),
        None if a == n => return Ok("notify_loss (nobody to notify)"),
        _ => {}
    }
    if a.permits > 0 {
        if let Reserve::Ticket { next, .. } = send_permit(a) {
            if next == n {
                return Ok("send_permit");
            }
        }
        if release_permit(a) == n {
            return Ok("release_permit");
        }
    }
    for &h in heads {
        if let Reserve::Ticket { next, .. } = reserve(a, h) {
            if next == n {
                return Ok("reserve");
            }
        }
        if take_permit(a, h) == TakePermit::Taken(n) {
            return Ok("take_permit");
        }
        let count = n.tail.wrapping_sub(a.tail) & TICKET_MASK;
        if count >= 1 {
            if let ReserveBatch::Tickets { next, count: c, .. } = reserve_batch(a, h, count) {
                if c == count && next == n {
                    return Ok("reserve_batch");
                }
            }
        }
        // Only the token holder exits (`exit_instance` assumes it).
        if a.token && a.instances > 0 && exit_instance(a, h) == Some(n) {
            return Ok("exit_instance");
        }
        if by_owner {
            if let Some(how) = owner_successor(a, n, h) {
                return Ok(how);
            }
        }
    }
    if by_owner && disable_cno(a) == Some(n) {
        return Ok("disable_cno");
    }
    // Only on a bound EVD, which has no upcall policy (so no token).
    if by_owner && a.policy == 0 && !a.token && note_notification(a) == n {
        return Ok("note_notification");
    }
    // No plain `disarm` here: the core withdraws an arm only through
    // `withdraw` (above), which hands queued work to an enabled CNO; a
    // word that only lost ARMED would be that hand-off skipped.
    if close(a).0 == n {
        return Ok("close");
    }
    if by_owner && begin_resize(a) == Some(n) {
        return Ok("begin_resize");
    }
    // The new ring holds everything queued and promised (a resize that
    // would not is refused, and ends with the old capacity).
    if by_owner
        && a.resizing
        && end_resize(a, n.cap_log2) == n
        && heads.iter().any(|&h| n.len(h) + n.permits <= n.capacity())
    {
        return Ok("end_resize");
    }
    if a.token && release_token(a) == n {
        return Ok("release_token");
    }
    if reacquire(a).1 == n {
        return Ok("reacquire");
    }
    if abandon_instance(a, true) == n || abandon_instance(a, false) == n {
        return Ok("abandon_instance");
    }
    Err(format!(
        "no transition of the table makes\n  {n:?}\nof\n  {a:?}\nfor a head in {heads:?}"
    ))
}

/// The owner's transitions that depend on the head: an arm, a policy
/// switch, a CNO enable, a withdrawal.
fn owner_successor(a: Word, n: Word, h: u64) -> Option<&'static str> {
    if let Arm::Arm(next) = arm(a, h, a.len(h) + 1) {
        if next == n {
            return Some("arm");
        }
    }
    for p in 0..3 {
        for any in [false, true] {
            if set_policy(a, h, p, any).0 == n {
                return Some("set_policy");
            }
        }
    }
    if enable_cno(a, h) == Enable::Armed(n) {
        return Some("enable_cno");
    }
    if withdraw(a, h, false).map(|(w, _)| w) == Some(n)
        || withdraw(a, h, true).map(|(w, _)| w) == Some(n)
    {
        return Some("withdraw");
    }
    None
}

/// The loss word (`evd::state::loss`): bit 0 says close has begun, bits
/// 1–63 count the losses not yet reported.
pub mod loss {
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Loss {
        pub closed: bool,
        pub pending: u64,
    }

    pub fn decode(l: u64) -> Loss {
        Loss {
            closed: l & 1 != 0,
            pending: l >> 1,
        }
    }

    /// A lossy post counts one loss, unless close has begun.
    pub fn commit(l: Loss) -> Option<Loss> {
        (!l.closed).then_some(Loss {
            pending: l.pending + 1,
            ..l
        })
    }

    pub fn close(l: Loss) -> Loss {
        Loss { closed: true, ..l }
    }

    /// The consumer takes the report: (new word, count), if anything was lost.
    pub fn take(l: Loss) -> Option<(Loss, u64)> {
        (l.pending > 0).then_some((Loss { pending: 0, ..l }, l.pending))
    }
}

/// The CNO slot word (`evd::cno::slot`): bit 0 IN_RING, bit 1 PENDING, bit
/// 2 FREEING, bits 32–63 the count of triggers that reached the slot.
pub mod cno_slot {
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Slot {
        pub in_ring: bool,
        pub pending: bool,
        pub freeing: bool,
        pub fired: u32,
    }

    pub fn decode(s: u64) -> Slot {
        assert_eq!(s & 0xffff_fff8, 0, "bits 3-31 are zero: {s:#x}");
        Slot {
            in_ring: s & 1 != 0,
            pending: s & 2 != 0,
            freeing: s & 4 != 0,
            fired: (s >> 32) as u32,
        }
    }

    /// A release by the unbinding consumer: (new, free now). A slot whose
    /// index is queued is freed by its pop.
    pub fn release(a: Slot) -> (Slot, bool) {
        if a.in_ring {
            (Slot { freeing: true, ..a }, false)
        } else {
            (a, true)
        }
    }

    /// A trigger: the key is due, the count goes up, and the index is pushed
    /// unless it is in the ring: (new, push).
    pub fn trigger(a: Slot) -> (Slot, bool) {
        (
            Slot {
                in_ring: true,
                pending: true,
                fired: a.fired.wrapping_add(1),
                ..a
            },
            !a.in_ring,
        )
    }

    /// A pop of the index: (new, deliver the key, free the slot).
    pub fn take(a: Slot) -> (Slot, bool, bool) {
        (
            Slot {
                in_ring: false,
                pending: false,
                freeing: false,
                ..a
            },
            a.pending,
            a.freeing,
        )
    }

    /// The consumer removes its pending key.
    pub fn remove(a: Slot) -> Slot {
        Slot {
            pending: false,
            ..a
        }
    }

    /// A bind with no free slot takes a releasing one back.
    pub fn reclaim(a: Slot) -> Slot {
        Slot {
            freeing: false,
            ..a
        }
    }
}
