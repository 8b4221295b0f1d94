//! The `transitions` target: every transition function of `evd::state`,
//! computed on random words and arguments, against the reference model in
//! [`crate::spec`] (outcome and new word), plus the accessors against the
//! documented layout ([`Word::decode`] cross-checks them), and the loss
//! word's functions (`evd::state::loss`) against [`crate::spec::loss`].
//!
//! Pure: no threads, no EVD. The words are arbitrary 64-bit values (with the
//! one policy encoding that is no policy, 3, mapped to another), so states no
//! execution reaches are covered too: the functions are total, and the model
//! must agree on all of them.

use crate::spec::{self, Word, TICKET_MASK};
use arbitrary::{Arbitrary, Unstructured};
use evd::cno::slot as cno_slot;
use evd::state::{
    self, loss, Arm, Enable, Exit, Invoke, PolicyBits, Reacquire, Reserve, ReserveBatch,
};

/// One case: a word and the arguments of every function.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Case {
    pub word: u64,
    /// Chooses the head: near the tail (0 ..= capacity + 1 behind it) or any.
    pub head: u64,
    pub threshold: u8,
    pub want: u8,
    pub cap_log2: u8,
    pub policy: u8,
    pub flags: u8,
}

/// Cases are read until the input runs out.
#[derive(Debug, Clone)]
pub struct Input {
    pub cases: Vec<Case>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Self::arbitrary_take_rest(Unstructured::new(u.bytes(u.len())?))
    }

    fn arbitrary_take_rest(mut u: Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut cases = Vec::new();
        while u.len() >= std::mem::size_of::<Case>() {
            cases.push(Case::arbitrary(&mut u)?);
        }
        Ok(Input { cases })
    }
}

fn policy_from(bits: u8) -> PolicyBits {
    match bits % 3 {
        1 => PolicyBits::Single,
        2 => PolicyBits::Many,
        _ => PolicyBits::Disabled,
    }
}

/// Check one case; panics on a disagreement.
pub fn check(c: &Case) {
    // Policy bits 3 are not a policy (the model refuses to decode them).
    let mut w = c.word;
    if (w >> 5) & 0b11 == 0b11 {
        w &= !(1 << 6);
    }
    // A tail a few tickets short of the field's wrap (random words reach
    // it once in 2^33 or so): the wrap of every tail and length sum.
    if c.flags & 8 != 0 {
        w = (w & ((1 << 28) - 1)) | ((TICKET_MASK - u64::from(c.want % 4)) << 28);
    }
    let a = Word::decode(w);
    let head = if c.flags & 1 == 0 {
        let behind = c.head % (a.capacity().min(1 << 20) + 2);
        state::tail(w).wrapping_sub(behind) & TICKET_MASK
    } else {
        c.head
    };
    let k = 1 + c.threshold as u64;
    let want = 1 + c.want as u64;
    let any = c.flags & 2 != 0;
    let held = c.flags & 4 != 0;
    let dec = |w: u64| Word::decode(w);

    assert_eq!(state::len(w, head), a.len(head), "len");
    assert_eq!(state::capacity(w), a.capacity(), "capacity");
    assert_eq!(
        state::is_full(w, head),
        a.len(head) + a.permits >= a.capacity(),
        "is_full"
    );

    same_reserve("reserve", state::reserve(w, head), spec::reserve(a, head));

    // The post's plain try: exactly a reservation that owes nothing on a
    // word with no arm, enable, policy, permit, close or resize.
    let plain_applies =
        !a.armed && !a.cno_armed && !a.closed && !a.resizing && a.policy == 0 && a.permits == 0;
    let plain_model = match spec::reserve(a, head) {
        spec::Reserve::Ticket {
            ticket,
            notify: state::Notify::None,
            next,
        } if plain_applies => Some((ticket, next)),
        _ => None,
    };
    assert_eq!(
        state::reserve_plain(w, head).map(|p| (p.ticket, dec(p.new))),
        plain_model,
        "reserve_plain"
    );
    // The engine's one verdict for any `want`: a batch of tickets (one
    // included), or for a permit the taken word with no ticket.
    for want in [1, want] {
        let any = state::reserve_any(w, head, want).expect("tickets are never at the limit");
        let batch = state::reserve_batch(w, head, want);
        assert_eq!(
            format!("{any:?}"),
            format!("{batch:?}"),
            "reserve_any({want})"
        );
    }
    match (
        state::reserve_any(w, head, state::WANT_PERMIT),
        spec::take_permit(a, head),
    ) {
        (None, spec::TakePermit::AtLimit) => {}
        (
            Some(ReserveBatch::Tickets {
                new,
                count: 0,
                notify,
                ..
            }),
            spec::TakePermit::Taken(next),
        ) => {
            assert_eq!(
                (notify, dec(new)),
                (state::Notify::None, next),
                "reserve_any(permit)"
            )
        }
        (Some(ReserveBatch::Closed), spec::TakePermit::Closed)
        | (Some(ReserveBatch::Resizing), spec::TakePermit::Resizing)
        | (Some(ReserveBatch::Full), spec::TakePermit::Full) => {}
        (real, model) => panic!("reserve_any(permit): {real:?} but the model says {model:?}"),
    }

    match (
        state::reserve_batch(w, head, want),
        spec::reserve_batch(a, head, want),
    ) {
        (
            ReserveBatch::Tickets {
                new,
                first,
                count,
                notify,
            },
            spec::ReserveBatch::Tickets {
                first: f,
                count: n,
                notify: k,
                next,
            },
        ) => assert_eq!(
            (first, count, notify, dec(new)),
            (f, n, k, next),
            "reserve_batch"
        ),
        (ReserveBatch::Closed, spec::ReserveBatch::Closed)
        | (ReserveBatch::Resizing, spec::ReserveBatch::Resizing)
        | (ReserveBatch::Full, spec::ReserveBatch::Full) => {}
        (real, model) => panic!("reserve_batch: {real:?} but the model says {model:?}"),
    }

    assert_eq!(
        state::notify_loss(w).map(|(n, k)| (dec(n), k)),
        spec::notify_loss(a),
        "notify_loss"
    );

    match (state::take_permit(w, head), spec::take_permit(a, head)) {
        (state::TakePermit::Taken(new), spec::TakePermit::Taken(next)) => {
            assert_eq!(dec(new), next, "take_permit")
        }
        (state::TakePermit::Closed, spec::TakePermit::Closed)
        | (state::TakePermit::Resizing, spec::TakePermit::Resizing)
        | (state::TakePermit::Full, spec::TakePermit::Full)
        | (state::TakePermit::AtLimit, spec::TakePermit::AtLimit) => {}
        (real, model) => panic!("take_permit: {real:?} but the model says {model:?}"),
    }
    // Sending and giving back debug-assert that a permit is out.
    if a.permits > 0 {
        same_reserve("send_permit", state::send_permit(w), spec::send_permit(a));
        assert_eq!(
            dec(state::release_permit(w)),
            spec::release_permit(a),
            "release_permit"
        );
    }

    assert_eq!(
        state::start_upcall_to_drain(w, head).map(dec),
        spec::start_upcall_to_drain(a, head),
        "start_upcall_to_drain"
    );
    assert_eq!(
        state::strands_a_full_ring(w, head),
        spec::strands_a_full_ring(a, head),
        "strands_a_full_ring"
    );
    assert_eq!(
        state::start_upcall_on_full(w).map(dec),
        spec::start_upcall_on_full(a),
        "start_upcall_on_full"
    );

    match (state::arm(w, head, k), spec::arm(a, head, k)) {
        (Arm::Armed(new), spec::Arm::Arm(next)) => assert_eq!(dec(new), next, "arm"),
        (Arm::Pending, spec::Arm::Pending) | (Arm::Closed, spec::Arm::Closed) => {}
        (real, model) => panic!("arm: {real:?} but the model says {model:?}"),
    }

    assert_eq!(dec(state::disarm(w)), spec::disarm(a), "disarm");
    let closed = state::close(w);
    assert_eq!(
        (dec(closed.new), closed.wake, closed.trigger_cno),
        spec::close(a),
        "close"
    );
    // enable_cno debug-asserts that no upcall policy is set (a bound EVD
    // has none).
    if a.policy == 0 {
        match (state::enable_cno(w, head), spec::enable_cno(a, head)) {
            (Enable::Armed(new), spec::Enable::Armed(next)) => {
                assert_eq!(dec(new), next, "enable_cno")
            }
            (Enable::AlreadyArmed, spec::Enable::AlreadyArmed)
            | (Enable::Pending, spec::Enable::Pending)
            | (Enable::Closed, spec::Enable::Closed) => {}
            (real, model) => panic!("enable_cno: {real:?} but the model says {model:?}"),
        }
    }
    assert_eq!(
        state::disable_cno(w).map(dec),
        spec::disable_cno(a),
        "disable_cno"
    );
    // note_notification debug-asserts a bound EVD's word: no upcall policy.
    if a.policy == 0 && !a.token {
        assert_eq!(
            dec(state::note_notification(w)),
            spec::note_notification(a),
            "note_notification"
        );
    }
    for report in [false, true] {
        assert_eq!(
            state::withdraw(w, head, report).map(|(n, k)| (dec(n), k)),
            spec::withdraw(a, head, report),
            "withdraw"
        );
    }
    // The CNO slot word, from the same random bits (bits 3-31 are zero in
    // every slot word). Each transition debug-asserts its precondition:
    // only words that meet it are its.
    let sw = c.word & !0xffff_fff8;
    let sm = spec::cno_slot::decode(sw);
    let sd = spec::cno_slot::decode;
    assert_eq!(
        (
            cno_slot::fired(sw),
            cno_slot::is_pending(sw),
            cno_slot::awaits_its_pop(sw)
        ),
        (sm.fired, sm.pending, sm.freeing),
        "cno slot layout"
    );
    assert_eq!(
        sd(cno_slot::remove(sw)),
        spec::cno_slot::remove(sm),
        "cno remove"
    );
    if !sm.freeing {
        let t = cno_slot::trigger(sw);
        assert_eq!(
            (sd(t.new), t.push),
            spec::cno_slot::trigger(sm),
            "cno trigger"
        );
    }
    if sm.in_ring && !(sm.freeing && sm.pending) {
        let t = cno_slot::take(sw);
        assert_eq!(
            (sd(t.new), t.deliver, t.free),
            spec::cno_slot::take(sm),
            "cno take"
        );
    }
    assert_eq!(
        sd(cno_slot::reclaim(sw)),
        spec::cno_slot::reclaim(sm),
        "cno reclaim"
    );
    if !sm.pending && !sm.freeing {
        let r = cno_slot::release(sw);
        assert_eq!(
            (sd(r.new), r.free_now),
            spec::cno_slot::release(sm),
            "cno release"
        );
    }
    assert_eq!(
        state::begin_resize(w).map(dec),
        spec::begin_resize(a),
        "begin_resize"
    );
    let cap = c.cap_log2 as u32 % (state::MAX_CAP_LOG2 + 1);
    assert_eq!(
        dec(state::end_resize(w, cap)),
        spec::end_resize(a, cap),
        "end_resize"
    );

    let p = policy_from(c.policy);
    let invoke = if any { Invoke::Any } else { Invoke::New };
    let r = state::set_policy(w, head, p, invoke);
    assert_eq!(
        (dec(r.new), r.start_instance),
        spec::set_policy(a, head, spec::policy_bits(p), any),
        "set_policy"
    );

    // The instance transitions debug-assert that an instance is running (and
    // exit and abandon that it holds the token it gives back): only words
    // that meet that are theirs.
    let running = a.instances > 0;
    if running && a.token {
        match (state::exit_instance(w, head), spec::exit_instance(a, head)) {
            (Exit::Ended(new), Some(next)) => assert_eq!(dec(new), next, "exit_instance"),
            (Exit::MoreWork, None) => {}
            (real, model) => panic!("exit_instance: {real:?} but the model says {model:?}"),
        }
    }

    assert_eq!(
        dec(state::release_token(w)),
        spec::release_token(a),
        "release_token"
    );
    if running {
        let (took, next) = spec::reacquire(a);
        match state::reacquire(w) {
            Reacquire::Token(new) => assert!(took && dec(new) == next, "reacquire: token"),
            Reacquire::Exit(new) => assert!(!took && dec(new) == next, "reacquire: exit"),
        }
    }
    if running && (a.token || !held) {
        assert_eq!(
            dec(state::abandon_instance(w, held)),
            spec::abandon_instance(a, held),
            "abandon_instance"
        );
    }

    // The loss word, from the same random bits (a count below the debug
    // assertion's overflow bound).
    let l = c.word >> 2 << 1 | (c.word & 1);
    let m = spec::loss::decode(l);
    assert_eq!(
        (loss::pending(l), loss::is_closed(l)),
        (m.pending, m.closed),
        "loss word layout"
    );
    let ld = spec::loss::decode;
    assert_eq!(
        loss::commit(l).map(ld),
        spec::loss::commit(m),
        "loss::commit"
    );
    assert_eq!(ld(loss::close(l)), spec::loss::close(m), "loss::close");
    assert_eq!(
        loss::take(l).map(|(n, k)| (ld(n), k)),
        spec::loss::take(m),
        "loss::take"
    );
    assert_eq!(dec(state::initial(cap)), Word::initial(cap), "initial word");
}

/// The real reservation `real` and the model's `model` agree: the same
/// ticket, notification and new word, or the same refusal.
fn same_reserve(what: &str, real: Reserve, model: spec::Reserve) {
    match (real, model) {
        (
            Reserve::Ticket {
                new,
                ticket,
                notify,
            },
            spec::Reserve::Ticket {
                ticket: t,
                notify: n,
                next,
            },
        ) => assert_eq!((ticket, notify, Word::decode(new)), (t, n, next), "{what}"),
        (Reserve::Closed, spec::Reserve::Closed)
        | (Reserve::Resizing, spec::Reserve::Resizing)
        | (Reserve::Full, spec::Reserve::Full) => {}
        (real, model) => panic!("{what}: {real:?} but the model says {model:?}"),
    }
}

/// Run one input.
pub fn run(input: &Input) {
    for c in &input.cases {
        check(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_corpus_replays() {
        let n = crate::replay::<Input>("transitions", run);
        assert!(n > 0, "no seed corpus for transitions");
    }

    #[test]
    fn random_words() {
        let mut rng = crate::Rng(0x7a11_5eed_0bad_c0de);
        for _ in 0..200 {
            let bytes = rng.bytes(4000);
            run(&Input::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap());
        }
    }
}
