//! The EVD state word: one `u64` that holds the ring's tail and every flag the
//! notification protocol needs, and the pure transition functions on it.
//!
//! # Why one word
//!
//! The classic verbs consumer loop is *drain, re-arm, poll again*: an event that
//! lands between the last dequeue and the re-arm is otherwise never signalled.
//! evd puts the ring's **tail** (the next ticket a poster will take) in the same
//! atomic word as the **ARMED** flag. The consumer knows its own head, so
//! "arm if the ring is empty" is a single compare-and-swap whose expected value
//! says `tail == head`: if any post reserved a ticket since the consumer last
//! looked, the tail moved, the CAS fails, and [`arm`] reports *pending* instead
//! of arming. A poster reserves its ticket with a CAS on the same word; if that
//! word has ARMED set, the very same CAS clears it, so exactly one post (the
//! first after the arm) owns the notification. There is no second poll.
//!
//! This is the NAPI `SCHED|MISSED` idea (one CAS on a state word) extended with
//! the ring index. It is free for posters: the disarm rides on the
//! reservation CAS every post makes anyway, so a post into an armed EVD
//! costs the same one CAS as a post into an unarmed one.
//!
//! # Bit layout (least significant bit first)
//!
//! | bits   | field        | meaning |
//! |--------|--------------|---------|
//! | 0      | `ARMED`      | the consumer asked to be notified by the next post (waker, thread, eventfd) |
//! | 1      | `NOTIFIED`   | sticky: a notification fired; cleared only by an arm or an upcall exit that finds the ring empty |
//! | 2      | `CLOSED`     | posts are refused; the consumer drains what is left, then sees end-of-stream |
//! | 3      | `RESIZING`   | the consumer is moving the ring to a new buffer; reservations wait |
//! | 4      | `TOKEN`      | an upcall instance holds the consumer side (the *in-upcall* bit under SingleInstance) |
//! | 5–6    | `POLICY`     | upcall policy: 0 = none/disabled, 1 = SingleInstance, 2 = ManyInstances |
//! | 7–12   | `INSTANCES`  | upcall instances in flight (0..=63) |
//! | 13–18  | `CAP_LOG2`   | log2 of the ring capacity (capacities are powers of two) |
//! | 19     | `CNO_ARMED`  | the consumer enabled the EVD on its CNO: the next post puts its key in the CNO's ready set |
//! | 20–27  | `PERMITS`    | slots promised to [`Permit`](crate::Permit)s not yet sent or given back (0..=255) |
//! | 28–63  | `TAIL`       | ticket counter, modulo 2^36 |
//!
//! The permits sit in the word for the same reason as the tail: a post's
//! room is `capacity − len − permits`, and a permit must be taken against
//! the same tail a concurrent post's reservation is checked against, or
//! both could take the last slot. A word with permits out is never a plain
//! reservation ([`reserve_plain`] declines it), so a post that nobody
//! reserves against pays nothing for permits beyond the flag test it makes
//! anyway.
//!
//! The capacity sits in the word so that a poster's "is it full?" check and
//! its reservation are made against the same capacity. A reservation computed
//! before a resize succeeds after it only if the resize left the word as it
//! was (a refused one, or a shrink grown back with nothing taken between):
//! then the capacity it checked is the capacity in force, the head it
//! checked against has only grown since, and the ring it
//! writes is the one the poster loads after its CAS, so nothing it decided
//! on changed (no ABA through a resize).
//!
//! The consumer's head is *not* in the word: it is written only by the consumer
//! (or the upcall instance holding `TOKEN`), published in its own cache line,
//! and passed to the functions below as an argument. The tail wraps modulo
//! 2^36; all distances are computed with [`len`], modulo 2^36. That is exact
//! when the head passed in is less than 2^36 − capacity behind the tail: the
//! consumer's own head is at most `capacity` (at most 2^32) behind, and a
//! poster's cached head is reloaded once it is more than one head epoch
//! (2^32 events) old, so it is less than 2^33 behind.
//!
//! # Transition table
//!
//! Every concurrent operation loads the word, computes the new word with one
//! of these functions, and installs it with a CAS (retrying on failure). No
//! other code changes the word.
//!
//! | operation (who) | function | precondition | new word | side effect after CAS |
//! |---|---|---|---|---|
//! | post (poster) | [`reserve`] | !CLOSED, !RESIZING, len + PERMITS < capacity | tail+1; if ARMED: −ARMED +NOTIFIED; else if CNO_ARMED: −CNO_ARMED +NOTIFIED; else if policy enabled, !TOKEN and INSTANCES below the policy's limit: +TOKEN +NOTIFIED, INSTANCES+1 | write the slot, publish its stamp, then wake / trigger the CNO / run the upcall |
//! | batch post (poster) | [`reserve_batch`] | as for post | tail+count (count = min(asked, capacity − len − PERMITS)); notification as for post | publish every slot, then wake / run the upcall |
//! | take a permit (poster) | [`take_permit`] | as for post, and PERMITS < 255 | PERMITS+1 | — (the slot is promised; nothing is queued); at the limit, wait for a permit back |
//! | send with a permit (poster) | [`send_permit`] | PERMITS > 0, !CLOSED, !RESIZING (no full check: the permit's slot is free) | tail+1, PERMITS−1; notification as for post | as for post; from the limit, wake every reservation waiting for a permit back |
//! | give a permit back (poster) | [`release_permit`] | PERMITS > 0 | PERMITS−1 | wake one poster waiting for room (and, from the limit, every reservation waiting for a permit back) |
//! | post refused, ring full (poster) | — | full, no upcall can start | no change: the event is handed back, nothing is counted, no RMW | — |
//! | post finds the ring full under an idle upcall policy (poster); a room waiter starts the draining upcall (`Poster::start_draining_upcall`) | [`start_upcall_to_drain`] | events queued (a post: at a ring it saw full), policy enabled, !TOKEN, INSTANCES below the limit | +TOKEN +NOTIFIED, INSTANCES+1 | run the upcall (it drains the ring), then retry the post |
//! | lossy post drops its event (poster) | [`loss::commit`] on the loss word, then [`notify_loss`] | full, loss word not closed | loss word: count+1; word: as for a reservation, without the tail (an RMW even when unchanged) | wake / run the upcall (it reports the loss) |
//! | a loss committed while an instance held the token, seen after its exit or a policy switch (instance, upcall owner) | [`notify_loss`] (`restart_for_loss`) | a loss report pending, policy enabled, !TOKEN, INSTANCES below the limit | +TOKEN +NOTIFIED, INSTANCES+1 | run an upcall (it reports the loss) |
//! | arm (consumer) | [`arm`] | len < threshold, not closed | +ARMED, and −NOTIFIED if empty | park / await / epoll |
//! | arm on a closed EVD | [`arm`] | closed, len < threshold | none (no CAS): pending if len > 0, end of stream if 0 | drain, or stop |
//! | arm finds work | [`arm`] | len ≥ threshold | none (no CAS) | keep draining |
//! | disarm (consumer, on timeout) | [`withdraw`] | ARMED, and CNO_ARMED clear or (the ring empty and no loss report) | −ARMED | — |
//! | a direct wait gives up with events queued on an enabled EVD (consumer) | [`withdraw`] | CNO_ARMED, len > 0 or a loss report | −ARMED −CNO_ARMED +NOTIFIED | trigger the CNO |
//! | an enable finds the last enable left with news (consumer; a direct waiter took a post's or a loss's wake) | [`withdraw`] | CNO_ARMED, len > 0 or a loss report | −ARMED −CNO_ARMED +NOTIFIED | none: report pending (the CNO gets no key for news the enable reports) |
//! | a dequeue meets the EVD unwaitable with its events reserved (consumer) | [`withdraw_unless_reserved`] | len ≥ want | — (it takes them once published) | — |
//! | enable on the CNO (consumer of a bound EVD) | [`enable_cno`] | empty, not closed, !CNO_ARMED | +CNO_ARMED −NOTIFIED | wait on the CNO |
//! | enable finds work / end / an enable | [`enable_cno`] | len > 0, or closed, or CNO_ARMED | none (no CAS) | drain, stop, or wait on the CNO |
//! | disable on the CNO (consumer) | [`disable_cno`] | CNO_ARMED | −CNO_ARMED | none; without CNO_ARMED, wait for the trigger that took it to land |
//! | a CNO move triggers the new CNO itself (consumer) | [`note_notification`] | no upcall policy, !TOKEN (a bound EVD); news came while the EVD was disabled for the move, or the new CNO was dropped | +NOTIFIED | trigger the new CNO; if it was dropped, notify the EVD's own targets |
//! | close (anyone) | [`loss::close`] on the loss word, then [`close`] | — | loss word: +CLOSED; word: +CLOSED −ARMED −CNO_ARMED, +NOTIFIED if either was set | wake every waiting poster (room, permit limit, `closed()`); wake if it was ARMED, trigger the CNO if it was CNO_ARMED |
//! | take the loss report (consumer, token holder) | [`loss::take`] | count > 0 | loss word: count = 0 | report `Overflow { lost: count }` |
//! | begin resize (consumer) | [`begin_resize`] | !RESIZING | +RESIZING | refuse if len + PERMITS exceeds the new capacity; else wait for reserved slots, move them |
//! | end resize (consumer) | [`end_resize`] | RESIZING | −RESIZING, new CAP_LOG2 | — |
//! | set policy (upcall owner) | [`set_policy`] | — | new POLICY; with [`Invoke::Any`], queued events, !TOKEN and INSTANCES below the new policy's limit: +TOKEN +NOTIFIED INSTANCES+1 | run an upcall instance inline; after the switch's own disable, events reserved since are [`Invoke::Any`]'s ([`invoke_after_quiesce`]), and so is a pending loss report (the engine's load after the CAS) |
//! | instance exits (token holder) | [`exit_instance`] | policy disabled, or ring empty | −TOKEN, INSTANCES−1, −NOTIFIED if empty | — |
//! | instance hands the token back (ManyInstances) | [`release_token`] | TOKEN | −TOKEN | run the handler without the token |
//! | instance returns after its handler (ManyInstances) | [`reacquire`] | — | token free and INSTANCES within the policy's limit: +TOKEN; otherwise INSTANCES−1 | continue, or stop |
//! | upcall unwinds (guard) | [`abandon_instance`] | — | −TOKEN if held, INSTANCES−1 | re-raise the panic |
//!
//! After a permit taken, a policy installed without an instance, a token
//! handed back, a [`reacquire`] that exits and an [`abandon_instance`], a word
//! that [`strands_a_full_ring`] wakes every poster waiting for room: one of
//! them starts the draining instance.
//!
//! # Memory orderings (argued at each call site; summarised here)
//!
//! * A poster's reservation CAS is `AcqRel` on success. `Acquire`: it must see
//!   the waker or thread the consumer registered before its `Release` arm CAS,
//!   and the buffer pointer the consumer stored before its `Release`
//!   end-of-resize CAS; the CASes on the word form one release sequence, so
//!   any later reservation inherits that visibility. `Release`: a `query`
//!   that reads the new tail with `Acquire` then sees a head at least the one
//!   the reservation was checked against, so it never pairs the new tail with
//!   an older head (`len <= capacity`). Do not weaken it to `Acquire`.
//! * The consumer decides "empty" from the head slot's stamp and the loss
//!   word (see [`loss`]): close closes the loss word before the state word, so
//!   an open loss word means an open EVD; once it is closed, an `Acquire` load
//!   of the state word shows every reservation that will ever succeed.
//! * Slot data is published by the slot's own stamp (`Release` store by the
//!   poster, `Acquire` load by the consumer), not by the word: the word only
//!   hands out tickets and notifications.
//! * The consumer's arm CAS is `AcqRel`: `Release` so the waker registered just
//!   before is visible to the poster that disarms; `Acquire` is not needed for
//!   data but costs nothing on the CAS and keeps the reasoning local.
//! * The enable CAS is `AcqRel` like the arm's: `Release` publishes the CNO
//!   binding (written by the consumer before it) to the poster whose
//!   `Acquire` reservation takes `CNO_ARMED`.
//! * Taking a permit is `AcqRel` like a reservation (its `Release` keeps a
//!   `query`'s `len + permits <= capacity`), sending with one *is* a
//!   reservation, and giving one back is `Relaxed`: it frees room and
//!   publishes nothing; the room barrier orders it against a waiting
//!   poster's re-check (the room barrier).
//! * Token hand-offs between upcall instances are `AcqRel` CASes: the instance
//!   that takes the token must see the head and slot reads of the one that
//!   released it.

/// The consumer asked to be notified by the next post.
pub const ARMED: u64 = 1 << 0;
/// Sticky "you have been notified".
pub const NOTIFIED: u64 = 1 << 1;
/// Posts are refused.
pub const CLOSED: u64 = 1 << 2;
/// A resize is in progress; reservations wait.
pub const RESIZING: u64 = 1 << 3;
/// An upcall instance holds the consumer side.
pub const TOKEN: u64 = 1 << 4;

const POLICY_SHIFT: u32 = 5;
const POLICY_MASK: u64 = 0b11 << POLICY_SHIFT;
const INSTANCES_SHIFT: u32 = 7;
const INSTANCES_BITS: u32 = 6;
const INSTANCES_MASK: u64 = ((1 << INSTANCES_BITS) - 1) << INSTANCES_SHIFT;
const CAP_SHIFT: u32 = 13;
const CAP_MASK: u64 = 0b11_1111 << CAP_SHIFT;
/// The consumer enabled the EVD on its CNO (see [`crate::Cno`]): the next
/// post, close or loss puts the EVD's key in the CNO's ready set. A direct
/// waiter's `ARMED` takes precedence (DAT: a direct waiter preempts the CNO).
pub const CNO_ARMED: u64 = 1 << 19;
const PERMITS_SHIFT: u32 = 20;
const PERMITS_BITS: u32 = 8;
const PERMITS_MASK: u64 = ((1 << PERMITS_BITS) - 1) << PERMITS_SHIFT;
const ONE_PERMIT: u64 = 1 << PERMITS_SHIFT;
/// Most permits that may be out at once: a further [`take_permit`] finds
/// the ring full until one is sent or given back.
pub const MAX_PERMITS: u64 = (1 << PERMITS_BITS) - 1;
const TAIL_SHIFT: u32 = PERMITS_SHIFT + PERMITS_BITS;

/// Number of bits of the tail ticket counter.
pub const TAIL_BITS: u32 = 64 - TAIL_SHIFT;
/// Mask of a ticket (tail and head are compared modulo `2^TAIL_BITS`).
pub const TICKET_MASK: u64 = (1 << TAIL_BITS) - 1;
/// Largest capacity, as a power of two exponent. Kept far below `TAIL_BITS`
/// so that distances modulo `2^TAIL_BITS` are never ambiguous.
pub const MAX_CAP_LOG2: u32 = 32;
/// Most upcall instances that may be in flight at once under ManyInstances.
pub const MAX_INSTANCES: u64 = (1 << INSTANCES_BITS) - 1;

/// Upcall policy bits, as stored in the word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PolicyBits {
    /// No upcalls start (normal consumer mode, or upcalls disabled).
    Disabled = 0,
    /// At most one upcall instance at any moment; it holds the token throughout.
    Single = 1,
    /// Several instances may run their handlers at once; dequeues stay serialized.
    Many = 2,
}

impl PolicyBits {
    /// How many instances may be in flight under this policy.
    ///
    /// ```
    /// assert_eq!(evd::state::PolicyBits::Single.instance_limit(), 1);
    /// ```
    pub const fn instance_limit(self) -> u64 {
        match self {
            PolicyBits::Disabled => 0,
            PolicyBits::Single => 1,
            PolicyBits::Many => MAX_INSTANCES,
        }
    }
}

/// What to do when upcalls are enabled while events are already queued
/// (DAT's `DAT_UPCALL_INVOC_ANY` / `DAT_UPCALL_INVOC_NEW`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Invoke {
    /// Start an upcall at once if events are queued (`INVOC_ANY`, the default).
    #[default]
    Any,
    /// Wait for the next arrival; it delivers the queued events too (`INVOC_NEW`).
    New,
}

/// The tail ticket in `w`.
/// ```
/// use evd::state::*;
/// let w = initial(4);
/// let Reserve::Ticket { new, .. } = reserve(w, 0) else { unreachable!() };
/// assert_eq!((tail(w), tail(new)), (0, 1));
/// ```
#[inline]
pub const fn tail(w: u64) -> u64 {
    w >> TAIL_SHIFT
}

/// log2 of the capacity in `w`.
/// ```
/// assert_eq!(evd::state::cap_log2(evd::state::initial(6)), 6);
/// ```
#[inline]
pub const fn cap_log2(w: u64) -> u32 {
    ((w & CAP_MASK) >> CAP_SHIFT) as u32
}

/// The capacity in `w`.
/// ```
/// assert_eq!(evd::state::capacity(evd::state::initial(6)), 64);
/// ```
#[inline]
pub const fn capacity(w: u64) -> u64 {
    1 << cap_log2(w)
}

/// The upcall policy in `w`.
/// ```
/// use evd::state::*;
/// assert_eq!(policy(initial(2)), PolicyBits::Disabled);
/// let on = set_policy(initial(2), 0, PolicyBits::Single, Invoke::Any).new;
/// assert_eq!(policy(on), PolicyBits::Single);
/// ```
#[inline]
pub const fn policy(w: u64) -> PolicyBits {
    match (w & POLICY_MASK) >> POLICY_SHIFT {
        1 => PolicyBits::Single,
        2 => PolicyBits::Many,
        _ => PolicyBits::Disabled,
    }
}

/// Upcall instances in flight in `w`.
/// ```
/// use evd::state::*;
/// let on = set_policy(initial(2), 0, PolicyBits::Many, Invoke::Any).new;
/// let Reserve::Ticket { new, .. } = reserve(on, 0) else { unreachable!() };
/// assert_eq!(instances(new), 1);
/// ```
#[inline]
pub const fn instances(w: u64) -> u64 {
    (w & INSTANCES_MASK) >> INSTANCES_SHIFT
}

/// Permits out in `w`: slots promised and not yet sent or given back.
/// ```
/// use evd::state::*;
/// let TakePermit::Taken(w) = take_permit(initial(2), 0) else { unreachable!() };
/// assert_eq!((permits(w), permits(release_permit(w))), (1, 0));
/// ```
#[inline]
pub const fn permits(w: u64) -> u64 {
    (w & PERMITS_MASK) >> PERMITS_SHIFT
}

/// Reserved tickets not yet dequeued, for a consumer at `head`.
/// ```
/// use evd::state::*;
/// let Reserve::Ticket { new, .. } = reserve(initial(2), 0) else { unreachable!() };
/// assert_eq!((len(new, 0), len(new, 1)), (1, 0));
/// ```
#[inline]
pub const fn len(w: u64, head: u64) -> u64 {
    tail(w).wrapping_sub(head) & TICKET_MASK
}

/// The tail of `w` as a full 64-bit ticket count, for a consumer at `head`
/// that loaded `w` after its head reached `head` (so `head` ≤ the tail ≤
/// `head` + capacity, and the word's 36-bit tail extends uniquely).
/// ```
/// use evd::state::*;
/// let Reserve::Ticket { new, .. } = reserve(initial(2), 0) else { unreachable!() };
/// assert_eq!((tail_count(new, 0), tail_count(new, 1)), (1, 1));
/// ```
#[inline]
pub const fn tail_count(w: u64, head: u64) -> u64 {
    head.wrapping_add(len(w, head))
}

/// Events a consumer at `head` knows to be reserved, from the tail count
/// [`tail_count`] gave it at an earlier load of the word: every ticket below
/// that tail was reserved, and a reserved ticket is always published, so
/// that many events are queued or on their way, whatever the word says
/// now. 0 once the head has reached that tail.
/// ```
/// use evd::state::*;
/// assert_eq!(known_queued(10, 7), 3);
/// assert_eq!(known_queued(10, 10), 0);
/// assert_eq!(known_queued(10, 12), 0); // the head passed it: nothing known
/// ```
#[inline]
pub const fn known_queued(seen_tail: u64, head: u64) -> u64 {
    let d = seen_tail.wrapping_sub(head);
    // A head past the seen tail makes `d` wrap to near 2^64; a real count is
    // at most the capacity, far below 2^36.
    if d <= TICKET_MASK { d } else { 0 }
}

/// True if a reservation in `w` would exceed the capacity, given `head`:
/// every slot is queued or promised to a permit.
/// ```
/// use evd::state::*;
/// let Reserve::Ticket { new, .. } = reserve(initial(0), 0) else { unreachable!() };
/// assert!(is_full(new, 0));
/// assert!(!is_full(new, 1));
/// let TakePermit::Taken(promised) = take_permit(initial(0), 0) else { unreachable!() };
/// assert!(is_full(promised, 0));
/// ```
#[inline]
pub const fn is_full(w: u64, head: u64) -> bool {
    len(w, head) + permits(w) >= capacity(w)
}

/// True if the flag `f` is set in `w`.
/// ```
/// use evd::state::*;
/// let Arm::Armed(w) = arm(initial(2), 0, 1) else { unreachable!() };
/// assert!(has(w, ARMED) && !has(w, NOTIFIED));
/// ```
#[inline]
pub const fn has(w: u64, f: u64) -> bool {
    w & f != 0
}

/// The initial word for a ring of `2^cap_log2` slots.
/// ```
/// use evd::state::*;
/// let w = initial(10);
/// assert_eq!((capacity(w), tail(w), instances(w)), (1024, 0, 0));
/// ```
#[inline]
pub const fn initial(cap_log2: u32) -> u64 {
    (cap_log2 as u64) << CAP_SHIFT
}

#[inline]
pub(crate) const fn with_tail(w: u64, t: u64) -> u64 {
    (w & ((1 << TAIL_SHIFT) - 1)) | ((t & TICKET_MASK) << TAIL_SHIFT)
}

#[inline]
const fn with_instances(w: u64, n: u64) -> u64 {
    (w & !INSTANCES_MASK) | (n << INSTANCES_SHIFT)
}

#[inline]
const fn with_policy(w: u64, p: PolicyBits) -> u64 {
    (w & !POLICY_MASK) | ((p as u64) << POLICY_SHIFT)
}

#[inline]
const fn with_cap_log2(w: u64, c: u32) -> u64 {
    (w & !CAP_MASK) | ((c as u64) << CAP_SHIFT)
}

/// The notification a successful reservation owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// Nothing to do after publishing.
    None,
    /// Wake the registered waker (and the eventfd, if any).
    Wake,
    /// This poster started an upcall instance and holds the token.
    Upcall,
    /// Put the EVD's key in its CNO's ready set (it was `CNO_ARMED`).
    Cno,
}

/// Outcome of [`reserve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserve {
    /// Install `new`; the poster owns `ticket` and must perform `notify` after
    /// publishing its slot.
    Ticket {
        /// The word to CAS in.
        new: u64,
        /// The reserved ticket (slot index is `ticket & (capacity - 1)`).
        ticket: u64,
        /// What the poster must do after publishing.
        notify: Notify,
    },
    /// The EVD is closed: hand the event back.
    Closed,
    /// A resize is in progress: back off and reload.
    Resizing,
    /// The ring is full for a consumer at the given head: hand the event back
    /// (after re-checking with a fresh head).
    Full,
}

/// A poster's reservation: take ticket `tail`, and take the notification if
/// the consumer is armed or an upcall instance may start.
///
/// ```
/// use evd::state::*;
/// let Arm::Armed(armed) = arm(initial(2), 0, 1) else { unreachable!() };
/// // The first post takes ticket 0 and the notification...
/// let Reserve::Ticket { new, ticket: 0, notify: Notify::Wake } = reserve(armed, 0) else { unreachable!() };
/// // ...the second only a ticket.
/// assert!(matches!(reserve(new, 0), Reserve::Ticket { ticket: 1, notify: Notify::None, .. }));
/// ```
#[inline]
pub const fn reserve(w: u64, head: u64) -> Reserve {
    if w & PLAIN_RESERVE_BLOCKERS == 0 {
        return match reserve_plain(w, head) {
            Some(Plain { new, ticket }) => Reserve::Ticket {
                new,
                ticket,
                notify: Notify::None,
            },
            None => Reserve::Full,
        };
    }
    reserve_general(w, head)
}

/// A reservation that only moves the tail: [`reserve`]'s outcome when it is
/// a ticket that owes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plain {
    /// The word to CAS in.
    pub new: u64,
    /// The reserved ticket.
    pub ticket: u64,
}

/// [`reserve`]'s first branch alone: the reservation of a post on an open
/// ring that is not resizing, with nobody to notify and no upcall policy
/// (every post of a consumer that is not waiting), or `None` when that
/// branch does not apply or the ring is full. Where it returns `Some`,
/// [`reserve`] returns the same ticket with [`Notify::None`]; where it
/// returns `None`, [`reserve`] decides.
///
/// ```
/// use evd::state::*;
/// let w = initial(1); // 2 slots
/// let Some(Plain { new, ticket: 0 }) = reserve_plain(w, 0) else { unreachable!() };
/// let Some(Plain { new, ticket: 1 }) = reserve_plain(new, 0) else { unreachable!() };
/// assert_eq!(reserve_plain(new, 0), None); // full
/// let Arm::Armed(armed) = arm(w, 0, 1) else { unreachable!() };
/// assert_eq!(reserve_plain(armed, 0), None); // owes a wake: not plain
/// ```
#[inline]
pub const fn reserve_plain(w: u64, head: u64) -> Option<Plain> {
    // Open, not resizing, nobody to notify and no upcall policy: the general
    // path would only move the tail (it reaches `Notify::None`, leaving every
    // other bit as it is).
    // No permit is out (PERMITS is among the blockers), so the full check is
    // the tail's distance alone: the same instructions as a ring without
    // permits.
    if w & PLAIN_RESERVE_BLOCKERS != 0 || len(w, head) >= capacity(w) {
        return None;
    }
    Some(Plain {
        // The tail is the top field: adding one there wraps it modulo 2^36
        // and touches no other bit, as `with_tail` would.
        new: w.wrapping_add(1 << TAIL_SHIFT),
        ticket: tail(w),
    })
}

/// The bits under which a reservation does more than move the tail (or is
/// refused for another reason than a full ring): see [`reserve`]'s first
/// branch. A set `TOKEN` is not among them: without a policy it starts
/// nothing either way. Permits out are: the room is then smaller than the
/// tail's distance says.
const PLAIN_RESERVE_BLOCKERS: u64 =
    ARMED | CLOSED | RESIZING | CNO_ARMED | POLICY_MASK | PERMITS_MASK;

/// [`reserve`] for any word: the transition table's row, flag by flag.
#[inline]
const fn reserve_general(w: u64, head: u64) -> Reserve {
    if has(w, CLOSED) {
        return Reserve::Closed;
    }
    if has(w, RESIZING) {
        return Reserve::Resizing;
    }
    if is_full(w, head) {
        return Reserve::Full;
    }
    take_ticket(w)
}

/// The ticket and the notification of a reservation that may go ahead
/// ([`reserve`] past its refusals, [`send_permit`]): tail+1, and the first
/// of ARMED, CNO_ARMED or an idle upcall policy is taken.
#[inline]
const fn take_ticket(w: u64) -> Reserve {
    let ticket = tail(w);
    let mut new = with_tail(w, ticket + 1);
    let notify = if has(w, ARMED) {
        new = (new & !ARMED) | NOTIFIED;
        Notify::Wake
    } else if has(w, CNO_ARMED) {
        new = (new & !CNO_ARMED) | NOTIFIED;
        Notify::Cno
    } else if !has(w, TOKEN) && instances(w) < policy(w).instance_limit() {
        new = with_instances(new | TOKEN | NOTIFIED, instances(w) + 1);
        Notify::Upcall
    } else {
        Notify::None
    };
    Reserve::Ticket {
        new,
        ticket,
        notify,
    }
}

/// Outcome of [`reserve_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReserveBatch {
    /// Install `new`; the poster owns tickets `first .. first + count`
    /// (modulo 2^36) and must publish them all, then perform `notify`.
    Tickets {
        /// The word to CAS in.
        new: u64,
        /// The first reserved ticket.
        first: u64,
        /// How many tickets (1 ..= the number asked for).
        count: u64,
        /// What the poster must do after publishing every slot.
        notify: Notify,
    },
    /// As for [`reserve`].
    Closed,
    /// As for [`reserve`].
    Resizing,
    /// Not even one slot is free for a consumer at the given head.
    Full,
}

/// A batch reservation: as many of `want` (≥ 1) tickets as there is room for,
/// in one step, taking the notification exactly as [`reserve`] does. The
/// notification is owed after the *whole* batch is published, so the woken
/// consumer finds the first ticket (the head, when it was armed) ready.
///
/// ```
/// use evd::state::*;
/// let w = initial(2); // 4 slots
/// let ReserveBatch::Tickets { new, first: 0, count: 3, .. } = reserve_batch(w, 0, 3) else { unreachable!() };
/// assert!(matches!(reserve_batch(new, 0, 3), ReserveBatch::Tickets { first: 3, count: 1, .. }));
/// ```
#[inline]
pub const fn reserve_batch(w: u64, head: u64, want: u64) -> ReserveBatch {
    let single = reserve(w, head);
    match single {
        Reserve::Closed => ReserveBatch::Closed,
        Reserve::Resizing => ReserveBatch::Resizing,
        Reserve::Full => ReserveBatch::Full,
        Reserve::Ticket {
            new,
            ticket,
            notify,
        } => {
            let room = capacity(w) - len(w, head) - permits(w);
            let count = if want < room { want } else { room };
            let count = if count == 0 { 1 } else { count };
            ReserveBatch::Tickets {
                new: with_tail(new, ticket + count),
                first: ticket,
                count,
                notify,
            }
        }
    }
}

/// Outcome of [`take_permit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakePermit {
    /// Install the word: one more slot is promised.
    Taken(u64),
    /// As for [`reserve`].
    Closed,
    /// As for [`reserve`].
    Resizing,
    /// No slot is free for a consumer at the given head.
    Full,
    /// [`MAX_PERMITS`] are out: wait for one to be sent or given back.
    AtLimit,
}

/// Promise a slot to a permit: PERMITS+1 where a post would get a ticket.
/// Nothing is queued, so nobody is notified; the post that later uses the
/// permit ([`send_permit`]) takes the ticket and the notification.
///
/// ```
/// use evd::state::*;
/// let w = initial(1); // 2 slots
/// let TakePermit::Taken(w) = take_permit(w, 0) else { unreachable!() };
/// let Reserve::Ticket { new: w, .. } = reserve(w, 0) else { unreachable!() };
/// assert_eq!(reserve(w, 0), Reserve::Full); // one queued, one promised
/// assert_eq!(take_permit(w, 0), TakePermit::Full);
/// ```
#[inline]
pub const fn take_permit(w: u64, head: u64) -> TakePermit {
    if has(w, CLOSED) {
        return TakePermit::Closed;
    }
    if has(w, RESIZING) {
        return TakePermit::Resizing;
    }
    if is_full(w, head) {
        return TakePermit::Full;
    }
    if permits(w) == MAX_PERMITS {
        return TakePermit::AtLimit;
    }
    TakePermit::Taken(w + ONE_PERMIT)
}

/// The `want` of [`reserve_any`] that asks for a permit instead of tickets.
pub const WANT_PERMIT: u64 = 0;

/// The engine's reservation for any `want`, as one verdict: one ticket by
/// [`reserve`] (every post: `want` is a constant there, so the other
/// branches fold away), a permit by [`take_permit`] (`want` =
/// [`WANT_PERMIT`]: `Tickets` with the tail as `first`, `count` 0 and
/// nothing owed), more by [`reserve_batch`]. `None`: a permit asked for
/// while [`MAX_PERMITS`] are out.
///
/// ```
/// use evd::state::*;
/// let w = initial(1); // 2 slots
/// let Some(ReserveBatch::Tickets { new, first: 0, count: 0, notify: Notify::None }) =
///     reserve_any(w, 0, WANT_PERMIT) else { unreachable!() };
/// assert_eq!(permits(new), 1);
/// assert!(matches!(reserve_any(new, 0, 1), Some(ReserveBatch::Tickets { count: 1, .. })));
/// ```
#[inline(always)]
pub const fn reserve_any(w: u64, head: u64, want: u64) -> Option<ReserveBatch> {
    Some(if want == 1 {
        match reserve(w, head) {
            Reserve::Ticket {
                new,
                ticket,
                notify,
            } => ReserveBatch::Tickets {
                new,
                first: ticket,
                count: 1,
                notify,
            },
            Reserve::Full => ReserveBatch::Full,
            Reserve::Closed => ReserveBatch::Closed,
            Reserve::Resizing => ReserveBatch::Resizing,
        }
    } else if want == WANT_PERMIT {
        match take_permit(w, head) {
            TakePermit::Taken(new) => ReserveBatch::Tickets {
                new,
                first: tail(w),
                count: 0,
                notify: Notify::None,
            },
            TakePermit::Full => ReserveBatch::Full,
            TakePermit::AtLimit => return None,
            TakePermit::Closed => ReserveBatch::Closed,
            TakePermit::Resizing => ReserveBatch::Resizing,
        }
    } else {
        reserve_batch(w, head, want)
    })
}

/// A permit's post: the ticket its promised slot stands for (tail+1,
/// PERMITS−1) and the notification, as [`reserve`] takes them. Never
/// [`Reserve::Full`]: the slot was free when the permit was taken and
/// nothing else could take it. [`Reserve::Closed`]: the event is handed
/// back and the permit given back ([`release_permit`]).
///
/// ```
/// use evd::state::*;
/// let TakePermit::Taken(w) = take_permit(initial(0), 0) else { unreachable!() };
/// let Arm::Armed(armed) = arm(w, 0, 1) else { unreachable!() };
/// let Reserve::Ticket { new, ticket: 0, notify: Notify::Wake } = send_permit(armed) else { unreachable!() };
/// assert_eq!((permits(new), len(new, 0)), (0, 1));
/// ```
#[inline]
pub const fn send_permit(w: u64) -> Reserve {
    debug_assert!(permits(w) > 0, "a permit sent that was never taken");
    if has(w, CLOSED) {
        return Reserve::Closed;
    }
    if has(w, RESIZING) {
        return Reserve::Resizing;
    }
    take_ticket(w - ONE_PERMIT)
}

/// A permit dropped unsent gives its slot back: PERMITS−1.
///
/// ```
/// use evd::state::*;
/// let TakePermit::Taken(w) = take_permit(initial(0), 0) else { unreachable!() };
/// assert_eq!(release_permit(w), initial(0));
/// ```
#[inline]
pub const fn release_permit(w: u64) -> u64 {
    debug_assert!(permits(w) > 0, "a permit given back that was never taken");
    w - ONE_PERMIT
}

/// A lossy post gave its event up because the ring is full (DAT's
/// `EVD_OVERFLOW`: the provider could not queue it). The loss is news for the
/// consumer, so after committing it on the loss word ([`loss::commit`]) the
/// poster takes the notification the same way a reservation would, without a
/// ticket. `None`: nobody to notify (the poster still installs the word
/// unchanged, for the ordering argued in the module doc).
///
/// Without this, upcalls enabled with [`Invoke::New`] on a full ring would
/// wait for an arrival that can never come.
///
/// ```
/// use evd::state::*;
/// let Arm::Armed(armed) = arm(initial(2), 0, 1) else { unreachable!() };
/// assert!(matches!(notify_loss(armed), Some((_, Notify::Wake))));
/// assert_eq!(notify_loss(initial(2)), None);
/// ```
///
/// A closed EVD still gets the report of a loss committed before the close:
/// its remaining events and the report are drained, by the consumer or by an
/// upcall (ARMED is never set on a closed word, so only the upcall branch
/// applies there).
#[inline]
pub const fn notify_loss(w: u64) -> Option<(u64, Notify)> {
    if has(w, ARMED) {
        return Some(((w & !ARMED) | NOTIFIED, Notify::Wake));
    }
    if has(w, CNO_ARMED) {
        return Some(((w & !CNO_ARMED) | NOTIFIED, Notify::Cno));
    }
    match start_upcall_on_full(w) {
        Some(new) => Some((new, Notify::Upcall)),
        None => None,
    }
}

/// A post found the ring full while an upcall policy is enabled and no
/// instance holds the token (upcalls enabled with [`Invoke::New`] on a ring
/// that filled up): no arrival can start an upcall, so the refused poster
/// takes the token and runs one, which drains the ring; then it retries. The
/// refusal is not reported (nothing was lost). `None` when an instance runs
/// or upcalls are off: the refusal writes nothing.
///
/// ```
/// use evd::state::*;
/// let on = set_policy(initial(0), 0, PolicyBits::Single, Invoke::New).new;
/// let Reserve::Ticket { new: full, .. } = reserve(initial(0), 0) else { unreachable!() };
/// let full_on = set_policy(full, 0, PolicyBits::Single, Invoke::New).new;
/// assert!(start_upcall_on_full(full_on).is_some_and(|w| has(w, TOKEN)));
/// assert_eq!(start_upcall_on_full(initial(0)), None); // upcalls off
/// # let _ = on;
/// ```
#[inline]
pub const fn start_upcall_on_full(w: u64) -> Option<u64> {
    if !has(w, TOKEN) && instances(w) < policy(w).instance_limit() {
        Some(with_instances(w | TOKEN | NOTIFIED, instances(w) + 1))
    } else {
        None
    }
}

/// [`start_upcall_on_full`] for a post (or a permit) refused as full, for a
/// consumer at `head`: only if events are queued. An upcall makes room by
/// draining them; on a ring full of promised slots alone it would drain
/// nothing, and the refused poster would start it again and again.
///
/// ```
/// use evd::state::*;
/// let TakePermit::Taken(promised) = take_permit(initial(0), 0) else { unreachable!() };
/// let on = set_policy(promised, 0, PolicyBits::Single, Invoke::New).new;
/// assert!(is_full(on, 0));
/// assert_eq!(start_upcall_to_drain(on, 0), None); // nothing to drain
/// ```
#[inline]
pub const fn start_upcall_to_drain(w: u64, head: u64) -> Option<u64> {
    if len(w, head) == 0 {
        return None;
    }
    start_upcall_on_full(w)
}

/// True if `w` leaves a full ring to an upcall nobody runs, for a consumer
/// at `head`: posts are refused, events are queued, an upcall policy is
/// enabled and the token is free with room for an instance. Only a post or
/// permit refused as full starts that instance ([`start_upcall_to_drain`]),
/// so the posters waiting for room must be told. A ring with room strands
/// nobody: every slot freed since the waiters joined was announced to one
/// of them, whose post starts the instance ([`reserve`]), and a permit that
/// takes the last slot instead (it starts nothing) makes this check itself.
///
/// ```
/// use evd::state::*;
/// let Reserve::Ticket { new: one, .. } = reserve(initial(1), 0) else { unreachable!() };
/// let Reserve::Ticket { new: two, .. } = reserve(one, 0) else { unreachable!() };
/// let on = |w| set_policy(w, 0, PolicyBits::Many, Invoke::New).new;
/// assert!(strands_a_full_ring(on(two), 0));
/// assert!(!strands_a_full_ring(on(one), 0)); // room left: a post starts it
/// assert!(!strands_a_full_ring(two, 0)); // no upcall policy
/// ```
#[inline]
pub const fn strands_a_full_ring(w: u64, head: u64) -> bool {
    is_full(w, head) && start_upcall_to_drain(w, head).is_some()
}

/// Outcome of [`arm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Install `new`: the next post will notify.
    Armed(u64),
    /// At least `threshold` events are queued: keep draining, do not sleep.
    Pending,
    /// Closed and empty: end of stream.
    Closed,
}

/// The consumer's arm-then-check for a consumer at `head` that wants to be
/// woken once `threshold` (≥ 1) events are queued.
///
/// Arms when fewer than `threshold` events are queued. NOTIFIED is cleared only
/// when the ring is empty: that is the "drained after re-enabling" rule.
///
/// ```
/// use evd::state::*;
/// let w = initial(2);
/// assert!(matches!(arm(w, 0, 1), Arm::Armed(_)));
/// let Reserve::Ticket { new, .. } = reserve(w, 0) else { unreachable!() };
/// assert_eq!(arm(new, 0, 1), Arm::Pending); // the event that slipped in
/// ```
#[inline]
pub const fn arm(w: u64, head: u64, threshold: u64) -> Arm {
    let n = len(w, head);
    if n >= threshold {
        return Arm::Pending;
    }
    if has(w, CLOSED) {
        // A closed EVD never gets another post: with fewer than `threshold`
        // events there is nothing to wait for.
        return if n == 0 { Arm::Closed } else { Arm::Pending };
    }
    let mut new = w | ARMED;
    if n == 0 {
        new &= !NOTIFIED;
    }
    Arm::Armed(new)
}

/// The consumer withdraws its arm (a timed-out wait, a dropped future).
///
/// ```
/// use evd::state::*;
/// let Arm::Armed(w) = arm(initial(2), 0, 1) else { unreachable!() };
/// assert!(!has(disarm(w), ARMED));
/// ```
#[inline]
pub const fn disarm(w: u64) -> u64 {
    w & !ARMED
}

/// A direct wait ends without handing its events over (timeout, dropped
/// future, explicit disarm) for a consumer at `head`: withdraw ARMED. A
/// direct waiter preempts the CNO, so posts (and losses) that came while it
/// was armed woke it and left `CNO_ARMED` set: if events are queued or a
/// loss report is pending (`report`, read from the loss word after this
/// word), the CNO must be told now, or an enabled EVD with news would never
/// reach it. `None`: nothing to change.
///
/// ```
/// use evd::state::*;
/// let Enable::Armed(on) = enable_cno(initial(2), 0) else { unreachable!() };
/// let Arm::Armed(both) = arm(on, 0, 2) else { unreachable!() };
/// let Reserve::Ticket { new, notify: Notify::Wake, .. } = reserve(both, 0) else { unreachable!() };
/// // The direct waiter gives up with the event queued: the CNO gets it.
/// let (after, n) = withdraw(new, 0, false).unwrap();
/// assert_eq!(n, Notify::Cno);
/// assert!(!has(after, CNO_ARMED | ARMED));
/// assert_eq!(withdraw(on, 0, false), None, "nothing queued, not armed");
/// // A loss that woke the direct waiter is news for the CNO too.
/// let Some((lost, Notify::Wake)) = notify_loss(both) else { unreachable!() };
/// assert_eq!(withdraw(lost, 0, true).map(|(_, n)| n), Some(Notify::Cno));
/// assert_eq!(withdraw(lost, 0, false), None, "no report, nothing queued");
/// ```
#[inline]
pub const fn withdraw(w: u64, head: u64, report: bool) -> Option<(u64, Notify)> {
    if has(w, CNO_ARMED) && (len(w, head) > 0 || report) {
        return Some(((w & !(ARMED | CNO_ARMED)) | NOTIFIED, Notify::Cno));
    }
    if has(w, ARMED) {
        Some((w & !ARMED, Notify::None))
    } else {
        None
    }
}

/// A direct wait that takes the events it waited for (a blocking dequeue)
/// ends on an unwaitable EVD: [`withdraw`], unless `want` events are
/// reserved (published or still being written). The post that took the
/// wait's arm told the waiter, not the CNO, and the waiter will take them:
/// withdrawing would hand the same news to the CNO too. `Err(())`: reserved,
/// nothing to change (the caller waits for the publish and takes them).
///
/// ```
/// use evd::state::*;
/// let Enable::Armed(on) = enable_cno(initial(2), 0) else { unreachable!() };
/// let Arm::Armed(both) = arm(on, 0, 1) else { unreachable!() };
/// let Reserve::Ticket { new, notify: Notify::Wake, .. } = reserve(both, 0) else { unreachable!() };
/// assert_eq!(withdraw_unless_reserved(new, 0, 1, false), Err(()), "the dequeue takes it");
/// assert_eq!(withdraw_unless_reserved(new, 0, 2, false), Ok(withdraw(new, 0, false)));
/// assert_eq!(withdraw_unless_reserved(both, 0, 1, false), Ok(withdraw(both, 0, false)));
/// ```
#[inline]
#[allow(clippy::result_unit_err)]
pub const fn withdraw_unless_reserved(
    w: u64,
    head: u64,
    want: u64,
    report: bool,
) -> Result<Option<(u64, Notify)>, ()> {
    if len(w, head) >= want {
        Err(())
    } else {
        Ok(withdraw(w, head, report))
    }
}

/// Outcome of [`close`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Close {
    /// The word to install.
    pub new: u64,
    /// The consumer was armed: the closer wakes it.
    pub wake: bool,
    /// The EVD was enabled on its CNO: the closer puts its key in the ready
    /// set (the CNO's consumer then drains it and sees the end of stream).
    pub trigger_cno: bool,
}

/// Close: refuse posts from now on. Both arms are spent: the end of stream is
/// news for a direct waiter and for the CNO alike.
///
/// ```
/// use evd::state::*;
/// let Arm::Armed(w) = arm(initial(2), 0, 1) else { unreachable!() };
/// let c = close(w);
/// assert!(c.wake && !c.trigger_cno && has(c.new, CLOSED));
/// assert_eq!(reserve(c.new, 0), Reserve::Closed);
/// ```
#[inline]
pub const fn close(w: u64) -> Close {
    let wake = has(w, ARMED);
    let trigger_cno = has(w, CNO_ARMED);
    let mut new = (w | CLOSED) & !(ARMED | CNO_ARMED);
    if wake || trigger_cno {
        new |= NOTIFIED;
    }
    Close {
        new,
        wake,
        trigger_cno,
    }
}

/// Outcome of [`enable_cno`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enable {
    /// Install `new`: the next post (or close, or loss) triggers the CNO.
    Armed(u64),
    /// Already enabled and still empty: nothing to install, nothing owed twice.
    AlreadyArmed,
    /// Events are queued: the EVD has work now.
    Pending,
    /// Closed and empty: end of stream.
    Closed,
}

/// The consumer enables its EVD on its CNO: the CNO's own arm-then-check, the
/// same single CAS as [`arm`] with threshold 1, setting `CNO_ARMED`. Not
/// under an upcall policy (a bound EVD has none).
///
/// ```
/// use evd::state::*;
/// let Enable::Armed(w) = enable_cno(initial(2), 0) else { unreachable!() };
/// assert_eq!(enable_cno(w, 0), Enable::AlreadyArmed);
/// let Reserve::Ticket { new, notify: Notify::Cno, .. } = reserve(w, 0) else { unreachable!() };
/// assert!(!has(new, CNO_ARMED) && has(new, NOTIFIED));
/// assert_eq!(enable_cno(new, 0), Enable::Pending);
/// ```
#[inline]
pub const fn enable_cno(w: u64, head: u64) -> Enable {
    debug_assert!(
        matches!(policy(w), PolicyBits::Disabled),
        "a CNO binding under an upcall policy"
    );
    let n = len(w, head);
    if n > 0 {
        return Enable::Pending;
    }
    if has(w, CLOSED) {
        return Enable::Closed;
    }
    if has(w, CNO_ARMED) {
        return Enable::AlreadyArmed;
    }
    Enable::Armed((w | CNO_ARMED) & !NOTIFIED)
}

/// The consumer withdraws its CNO enable. `None`: not enabled (a post, close
/// or loss took it, or it was never set).
///
/// ```
/// use evd::state::*;
/// let Enable::Armed(w) = enable_cno(initial(2), 0) else { unreachable!() };
/// assert_eq!(disable_cno(w), Some(initial(2)));
/// assert_eq!(disable_cno(initial(2)), None);
/// ```
#[inline]
pub const fn disable_cno(w: u64) -> Option<u64> {
    if has(w, CNO_ARMED) {
        Some(w & !CNO_ARMED)
    } else {
        None
    }
}

/// The consumer's own notification, as a poster's would set it: a CNO move
/// that triggers the new CNO for news (events or the end of the stream that
/// came while the EVD was disabled for the move), or whose trigger finds the
/// new CNO dropped and notifies the EVD's own targets instead. Nothing else
/// changes (an enable the move made stays).
///
/// ```
/// use evd::state::*;
/// let Enable::Armed(w) = enable_cno(initial(2), 0) else { unreachable!() };
/// assert_eq!(note_notification(w), w | NOTIFIED);
/// assert_eq!(note_notification(initial(2) | NOTIFIED), initial(2) | NOTIFIED);
/// ```
#[inline]
pub const fn note_notification(w: u64) -> u64 {
    debug_assert!(
        matches!(policy(w), PolicyBits::Disabled) && !has(w, TOKEN),
        "a CNO move under an upcall policy"
    );
    w | NOTIFIED
}

/// Begin a resize; `None` if one is already running.
///
/// ```
/// use evd::state::*;
/// let r = begin_resize(initial(2)).unwrap();
/// assert_eq!(reserve(r, 0), Reserve::Resizing);
/// assert_eq!(begin_resize(r), None);
/// ```
#[inline]
pub const fn begin_resize(w: u64) -> Option<u64> {
    if has(w, RESIZING) {
        None
    } else {
        Some(w | RESIZING)
    }
}

/// End a resize, installing the new capacity.
///
/// ```
/// use evd::state::*;
/// let r = begin_resize(initial(2)).unwrap();
/// assert_eq!(capacity(end_resize(r, 5)), 32);
/// ```
#[inline]
pub const fn end_resize(w: u64, new_cap_log2: u32) -> u64 {
    with_cap_log2(w & !RESIZING, new_cap_log2)
}

/// Outcome of [`set_policy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetPolicy {
    /// The word to install.
    pub new: u64,
    /// The caller took the token and must run an upcall instance now.
    pub start_instance: bool,
}

/// Change the upcall policy. With [`Invoke::Any`], events already queued start
/// an instance at once (the caller runs it).
///
/// ```
/// use evd::state::*;
/// let Reserve::Ticket { new: queued, .. } = reserve(initial(2), 0) else { unreachable!() };
/// assert!(set_policy(queued, 0, PolicyBits::Single, Invoke::Any).start_instance);
/// assert!(!set_policy(queued, 0, PolicyBits::Single, Invoke::New).start_instance);
/// ```
#[inline]
pub const fn set_policy(w: u64, head: u64, p: PolicyBits, invoke: Invoke) -> SetPolicy {
    let new = with_policy(w, p);
    let start = matches!(invoke, Invoke::Any)
        && len(w, head) > 0
        && !has(w, TOKEN)
        && instances(w) < p.instance_limit();
    if start {
        SetPolicy {
            new: with_instances(new | TOKEN | NOTIFIED, instances(w) + 1),
            start_instance: true,
        }
    } else {
        SetPolicy {
            new,
            start_instance: false,
        }
    }
}

/// The [`Invoke`] of a policy switch that went through its own disable (a
/// switch from `ManyInstances` to `SingleInstance` waits there for the
/// instances to end) when the tail count ([`tail_count`]) was `since`: an
/// event reserved after that was posted while the caller had upcalls
/// enabled, so it is a new arrival whatever `invoke` asks ([`Invoke::Any`]);
/// with none, `invoke` stands.
///
/// ```
/// use evd::state::*;
/// let w = initial(2);
/// let since = tail_count(w, 0);
/// assert_eq!(invoke_after_quiesce(w, 0, since, Invoke::New), Invoke::New);
/// let Reserve::Ticket { new: posted, .. } = reserve(w, 0) else { unreachable!() };
/// assert_eq!(invoke_after_quiesce(posted, 0, since, Invoke::New), Invoke::Any);
/// ```
#[inline]
pub const fn invoke_after_quiesce(w: u64, head: u64, since: u64, invoke: Invoke) -> Invoke {
    if tail_count(w, head) != since {
        Invoke::Any
    } else {
        invoke
    }
}

/// Outcome of [`exit_instance`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Install `new`: the instance has ended.
    Ended(u64),
    /// Events are queued and upcalls are enabled: keep the token and go on.
    MoreWork,
}

/// An instance holding the token found nothing to dequeue (or upcalls were
/// disabled under it) and wants to end. It may end only if the ring is empty
/// for its `head` — otherwise a post slipped in and this instance must deliver
/// it, since that post saw `TOKEN` and started no instance of its own.
///
/// ```
/// use evd::state::*;
/// let on = set_policy(initial(2), 0, PolicyBits::Single, Invoke::Any).new;
/// let Reserve::Ticket { new: running, .. } = reserve(on, 0) else { unreachable!() };
/// assert_eq!(exit_instance(running, 0), Exit::MoreWork); // its own event is still queued
/// assert!(matches!(exit_instance(running, 1), Exit::Ended(w) if instances(w) == 0));
/// ```
#[inline]
pub const fn exit_instance(w: u64, head: u64) -> Exit {
    let n = len(w, head);
    let enabled = !matches!(policy(w), PolicyBits::Disabled);
    if n != 0 && enabled {
        return Exit::MoreWork;
    }
    debug_assert!(
        has(w, TOKEN) && instances(w) > 0,
        "exit without a running instance"
    );
    let mut new = with_instances(w & !TOKEN, instances(w) - 1);
    if n == 0 {
        new &= !NOTIFIED;
    }
    Exit::Ended(new)
}

/// ManyInstances: the token holder has taken one event out and hands the token
/// back before running its handler.
///
/// ```
/// use evd::state::*;
/// let on = set_policy(initial(2), 0, PolicyBits::Many, Invoke::Any).new;
/// let Reserve::Ticket { new: running, .. } = reserve(on, 0) else { unreachable!() };
/// assert!(has(running, TOKEN) && !has(release_token(running), TOKEN));
/// ```
#[inline]
pub const fn release_token(w: u64) -> u64 {
    w & !TOKEN
}

/// Outcome of [`reacquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reacquire {
    /// Install `new`: the instance holds the token again.
    Token(u64),
    /// Install `new`: the instance has ended.
    Exit(u64),
}

/// ManyInstances: an instance whose handler returned either takes the token
/// again (to look for more work) or ends. It may end while another instance
/// holds the token, because that holder checks for work before it ends. It
/// also ends while more instances are in flight than the policy allows (the
/// policy changed under it), so that it never adds a handler beyond the
/// limit; the last one within the limit keeps draining.
///
/// ```
/// use evd::state::*;
/// let on = set_policy(initial(2), 0, PolicyBits::Many, Invoke::Any).new;
/// let Reserve::Ticket { new: running, .. } = reserve(on, 0) else { unreachable!() };
/// let handed_back = release_token(running);
/// assert!(matches!(reacquire(handed_back), Reacquire::Token(_)));
/// assert!(matches!(reacquire(running), Reacquire::Exit(_))); // someone holds it
/// ```
#[inline]
pub const fn reacquire(w: u64) -> Reacquire {
    debug_assert!(instances(w) > 0, "reacquire without a running instance");
    if has(w, TOKEN) || instances(w) > policy(w).instance_limit() {
        Reacquire::Exit(with_instances(w, instances(w) - 1))
    } else {
        Reacquire::Token(w | TOKEN)
    }
}

/// An instance unwinds out of a panicking handler: give back the token if it
/// held it, and leave. Queued events stay queued for the next instance.
///
/// ```
/// use evd::state::*;
/// let on = set_policy(initial(2), 0, PolicyBits::Single, Invoke::Any).new;
/// let Reserve::Ticket { new: running, .. } = reserve(on, 0) else { unreachable!() };
/// let after = abandon_instance(running, true);
/// assert_eq!((instances(after), has(after, TOKEN)), (0, false));
/// ```
#[inline]
pub const fn abandon_instance(w: u64, held_token: bool) -> u64 {
    debug_assert!(instances(w) > 0, "abandon without a running instance");
    debug_assert!(!held_token || has(w, TOKEN), "abandon of a token not held");
    let w = if held_token { w & !TOKEN } else { w };
    with_instances(w, instances(w) - 1)
}

/// The loss word: the second atomic word of an EVD, written only by `close`
/// and by lossy posts that gave their event up, and read by the consumer on
/// every dequeue (a read-mostly line: posters and the consumer never write it
/// in steady state).
///
/// | bits | field | meaning |
/// |------|-------|---------|
/// | 0    | [`CLOSED`](loss::CLOSED) | close has begun: no loss can be committed from now on |
/// | 1–63 | count | events lost and not yet reported to the consumer |
///
/// # Why a second word
///
/// * **End of stream without the posters' line.** The consumer must tell
///   "empty" from "closed and drained", and loading the state word on every
///   empty poll pulls the posters' line across cores (the empty-poll convoy).
///   Close sets [`loss::CLOSED`] here *before* it sets `CLOSED` in the state
///   word, so a consumer that finds its head slot unpublished loads only this
///   line; it looks at the state word only once this bit is set.
/// * **Every loss told before end of stream.** A loss is committed by one RMW
///   here that refuses once `CLOSED` is set ([`loss::commit`]). Because close sets
///   this bit before the state word's `CLOSED`, a consumer that has seen the
///   state word closed (with `Acquire`) sees the final loss count: no loss can
///   be committed after it decides "end of stream".
pub mod loss {
    /// Close has begun: losses are refused (the lossy post hands its event back
    /// as closed).
    pub const CLOSED: u64 = 1;
    /// One lost event in the count field.
    const UNIT: u64 = 2;

    /// Losses not yet reported in `l`.
    /// ```
    /// use evd::state::loss;
    /// assert_eq!(loss::pending(loss::commit(0).unwrap()), 1);
    /// ```
    pub const fn pending(l: u64) -> u64 {
        l >> 1
    }

    /// True once close has begun.
    /// ```
    /// use evd::state::loss;
    /// assert!(loss::is_closed(loss::close(0)));
    /// ```
    pub const fn is_closed(l: u64) -> bool {
        l & CLOSED != 0
    }

    /// A lossy post commits one lost event; `None` once close has begun (the
    /// post hands its event back instead).
    /// ```
    /// use evd::state::loss;
    /// let l = loss::commit(loss::commit(0).unwrap()).unwrap();
    /// assert_eq!(loss::pending(l), 2);
    /// assert_eq!(loss::commit(loss::close(l)), None);
    /// ```
    pub const fn commit(l: u64) -> Option<u64> {
        if is_closed(l) {
            return None;
        }
        debug_assert!(pending(l) < u64::MAX >> 1, "loss count overflow");
        Some(l + UNIT)
    }

    /// Close begins: no loss is committed after this.
    /// ```
    /// use evd::state::loss;
    /// let l = loss::close(loss::commit(0).unwrap());
    /// assert!(loss::is_closed(l) && loss::pending(l) == 1);
    /// ```
    pub const fn close(l: u64) -> u64 {
        l | CLOSED
    }

    /// The consumer takes the report: the new word (count 0, the close bit
    /// kept) and the count it reports; `None` if nothing was lost.
    /// ```
    /// use evd::state::loss;
    /// let l = loss::close(loss::commit(0).unwrap());
    /// assert_eq!(loss::take(l), Some((loss::CLOSED, 1)));
    /// assert_eq!(loss::take(loss::CLOSED), None);
    /// ```
    pub const fn take(l: u64) -> Option<(u64, u64)> {
        if pending(l) == 0 {
            None
        } else {
            Some((l & CLOSED, pending(l)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP4: u64 = initial(2);

    fn ticket(r: Reserve) -> (u64, u64, Notify) {
        match r {
            Reserve::Ticket {
                new,
                ticket,
                notify,
            } => (new, ticket, notify),
            other => panic!("expected a ticket, got {other:?}"),
        }
    }

    #[test]
    fn layout_fields_do_not_overlap() {
        let fields = [
            ARMED,
            NOTIFIED,
            CLOSED,
            RESIZING,
            TOKEN,
            POLICY_MASK,
            INSTANCES_MASK,
            CAP_MASK,
            CNO_ARMED,
            PERMITS_MASK,
            TICKET_MASK << TAIL_SHIFT,
        ];
        let mut seen = 0u64;
        for f in fields {
            assert_eq!(seen & f, 0, "field {f:#x} overlaps");
            seen |= f;
        }
        assert_eq!(seen, u64::MAX, "every bit belongs to a field");
        const { assert!(MAX_CAP_LOG2 + 2 < TAIL_BITS) };
    }

    #[test]
    fn initial_word_is_empty_and_unarmed() {
        let w = initial(10);
        assert_eq!(capacity(w), 1024);
        assert_eq!(tail(w), 0);
        assert_eq!(len(w, 0), 0);
        assert_eq!(policy(w), PolicyBits::Disabled);
        assert_eq!(instances(w), 0);
        assert!(!has(
            w,
            ARMED | NOTIFIED | CLOSED | RESIZING | TOKEN | CNO_ARMED
        ));
    }

    #[test]
    fn reserve_bumps_tail_and_owns_no_notification_when_unarmed() {
        let (new, t, n) = ticket(reserve(CAP4, 0));
        assert_eq!((t, tail(new), n), (0, 1, Notify::None));
        assert_eq!(new & !(TICKET_MASK << TAIL_SHIFT), CAP4);
    }

    #[test]
    fn reserve_on_armed_word_disarms_and_owns_the_wake() {
        let w = CAP4 | ARMED;
        let (new, _, n) = ticket(reserve(w, 0));
        assert_eq!(n, Notify::Wake);
        assert!(!has(new, ARMED));
        assert!(has(new, NOTIFIED));
        // The next post finds nothing to notify: exactly one notification per arm.
        let (_, _, n2) = ticket(reserve(new, 0));
        assert_eq!(n2, Notify::None);
    }

    #[test]
    fn reserve_refuses_when_closed_resizing_or_full() {
        assert_eq!(reserve(CAP4 | CLOSED, 0), Reserve::Closed);
        assert_eq!(reserve(CAP4 | RESIZING, 0), Reserve::Resizing);
        let full = with_tail(CAP4, 4);
        assert_eq!(reserve(full, 0), Reserve::Full);
        assert!(matches!(
            reserve(full, 1),
            Reserve::Ticket { ticket: 4, .. }
        ));
    }

    #[test]
    fn reserve_wraps_the_ticket_counter() {
        let w = with_tail(CAP4, TICKET_MASK);
        let head = TICKET_MASK; // empty ring at the last ticket
        let (new, t, _) = ticket(reserve(w, head));
        assert_eq!(t, TICKET_MASK);
        assert_eq!(tail(new), 0);
        assert_eq!(len(new, head), 1);
        assert_eq!(len(new, head.wrapping_add(1)), 0);
    }

    #[test]
    fn reserve_starts_one_instance_under_single() {
        let w = with_policy(CAP4, PolicyBits::Single);
        let (new, _, n) = ticket(reserve(w, 0));
        assert_eq!(n, Notify::Upcall);
        assert!(has(new, TOKEN) && has(new, NOTIFIED));
        assert_eq!(instances(new), 1);
        // A post during the upcall starts no second instance.
        let (new2, _, n2) = ticket(reserve(new, 0));
        assert_eq!(n2, Notify::None);
        assert_eq!(instances(new2), 1);
    }

    #[test]
    fn reserve_under_many_starts_instances_only_while_token_is_free() {
        let w = with_policy(CAP4, PolicyBits::Many);
        let (w1, _, n1) = ticket(reserve(w, 0));
        assert_eq!(n1, Notify::Upcall);
        let (w2, _, n2) = ticket(reserve(w1, 0));
        assert_eq!(n2, Notify::None, "token held: no second instance");
        let w3 = release_token(w2);
        let (w4, _, n4) = ticket(reserve(w3, 0));
        assert_eq!(n4, Notify::Upcall);
        assert_eq!(instances(w4), 2);
    }

    #[test]
    fn reserve_under_many_respects_the_instance_limit() {
        let w = with_instances(with_policy(initial(8), PolicyBits::Many), MAX_INSTANCES);
        let (_, _, n) = ticket(reserve(w, 0));
        assert_eq!(n, Notify::None);
    }

    #[test]
    fn disabled_policy_never_starts_an_instance() {
        let (_, _, n) = ticket(reserve(CAP4, 0));
        assert_eq!(n, Notify::None);
    }

    #[test]
    fn reserve_batch_takes_what_fits_and_one_notification() {
        let armed = CAP4 | ARMED;
        match reserve_batch(armed, 0, 10) {
            ReserveBatch::Tickets {
                new,
                first,
                count,
                notify,
            } => {
                assert_eq!((first, count, notify), (0, 4, Notify::Wake));
                assert_eq!(tail(new), 4);
                assert!(!has(new, ARMED) && has(new, NOTIFIED));
                assert_eq!(reserve_batch(new, 0, 1), ReserveBatch::Full);
                assert!(matches!(
                    reserve_batch(new, 2, 5),
                    ReserveBatch::Tickets {
                        first: 4,
                        count: 2,
                        notify: Notify::None,
                        ..
                    }
                ));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(reserve_batch(CAP4 | CLOSED, 0, 2), ReserveBatch::Closed);
        assert_eq!(reserve_batch(CAP4 | RESIZING, 0, 2), ReserveBatch::Resizing);
        let wrap = with_tail(CAP4, TICKET_MASK - 1);
        match reserve_batch(wrap, TICKET_MASK - 1, 3) {
            ReserveBatch::Tickets { new, count, .. } => {
                assert_eq!((count, tail(new)), (3, 1), "wraps modulo 2^36");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn overflow_takes_the_notification_like_a_post() {
        assert_eq!(notify_loss(CAP4), None);
        assert_eq!(notify_loss(CAP4 | CLOSED), None);
        let closed_single = with_policy(CAP4 | CLOSED, PolicyBits::Single);
        assert!(
            matches!(notify_loss(closed_single), Some((_, Notify::Upcall))),
            "a closed EVD's overflow is still reported"
        );
        assert_eq!(
            notify_loss(CAP4 | ARMED),
            Some((CAP4 | NOTIFIED, Notify::Wake))
        );
        let single = with_policy(with_tail(CAP4, 4), PolicyBits::Single);
        let (new, n) = notify_loss(single).unwrap();
        assert_eq!(n, Notify::Upcall);
        assert!(has(new, TOKEN));
        assert_eq!((instances(new), tail(new)), (1, 4), "no ticket taken");
        assert_eq!(notify_loss(new), None, "one instance is running");
    }

    #[test]
    fn arm_on_empty_ring_arms_and_clears_notified() {
        let w = with_tail(CAP4 | NOTIFIED, 3);
        assert_eq!(arm(w, 3, 1), Arm::Armed((w | ARMED) & !NOTIFIED));
    }

    #[test]
    fn arm_with_queued_events_reports_pending_and_keeps_notified() {
        let w = with_tail(CAP4 | NOTIFIED, 3);
        assert_eq!(arm(w, 2, 1), Arm::Pending);
    }

    #[test]
    fn arm_below_threshold_arms_but_keeps_notified() {
        let w = with_tail(CAP4 | NOTIFIED, 3);
        assert_eq!(arm(w, 2, 2), Arm::Armed(w | ARMED));
        assert_eq!(arm(w, 1, 2), Arm::Pending);
    }

    #[test]
    fn tail_count_extends_a_wrapped_tail_field() {
        for head in [
            0,
            5,
            TICKET_MASK - 1,
            TICKET_MASK,
            TICKET_MASK + 1,
            3 << 44,
            u64::MAX - 2,
        ] {
            for queued in 0..4u64 {
                let w = with_tail(CAP4, head.wrapping_add(queued));
                assert_eq!(tail_count(w, head), head.wrapping_add(queued));
                assert_eq!(known_queued(tail_count(w, head), head), queued);
            }
        }
    }

    /// The consumer's shortcut is sound: a tail seen at any earlier load
    /// (tail and head only grow) never claims more events than the word
    /// now holds, so "known queued ≥ threshold" implies `arm` says Pending.
    #[test]
    fn known_queued_never_exceeds_what_arm_sees() {
        let base = TICKET_MASK - 6; // across the tail field's wrap
        for seen_at in 0..6u64 {
            for seen_len in 0..=4u64 {
                let seen_tail =
                    tail_count(with_tail(CAP4, base + seen_at + seen_len), base + seen_at);
                for head in seen_at..seen_at + 6 {
                    for now_len in 0..=4u64 {
                        let (h, t) = (base + head, base + head + now_len);
                        if t < seen_tail {
                            continue; // the tail never moves back
                        }
                        for flags in [0, CLOSED, NOTIFIED, ARMED | NOTIFIED] {
                            let w = with_tail(CAP4 | flags, t);
                            for threshold in 1..=4 {
                                if known_queued(seen_tail, h) >= threshold {
                                    assert_eq!(arm(w, h, threshold), Arm::Pending);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn arm_is_idempotent() {
        let w = CAP4 | ARMED;
        assert_eq!(arm(w, 0, 1), Arm::Armed(w));
    }

    #[test]
    fn arm_after_close_drains_then_ends() {
        let w = with_tail(CAP4 | CLOSED, 2);
        assert_eq!(arm(w, 1, 1), Arm::Pending);
        assert_eq!(arm(w, 1, 4), Arm::Pending, "nothing more will come");
        assert_eq!(arm(w, 2, 1), Arm::Closed);
    }

    #[test]
    fn the_classic_race_is_reported_as_pending() {
        // Consumer drained to head 0 and read the word; a post lands; the arm
        // computed from the fresh word must say pending, and the one computed
        // from the stale word must not be installable (the word changed).
        let stale = CAP4;
        let (fresh, _, _) = ticket(reserve(stale, 0));
        assert_ne!(stale, fresh, "the CAS expecting the stale word fails");
        assert_eq!(arm(fresh, 0, 1), Arm::Pending);
    }

    #[test]
    fn disarm_clears_only_armed() {
        let w = CAP4 | ARMED | NOTIFIED;
        assert_eq!(disarm(w), CAP4 | NOTIFIED);
    }

    #[test]
    fn close_takes_the_wake_of_an_armed_consumer() {
        let c = |new, wake, trigger_cno| Close {
            new,
            wake,
            trigger_cno,
        };
        assert_eq!(
            close(CAP4 | ARMED),
            c(CAP4 | CLOSED | NOTIFIED, true, false)
        );
        assert_eq!(close(CAP4), c(CAP4 | CLOSED, false, false));
        assert_eq!(close(CAP4 | CLOSED), c(CAP4 | CLOSED, false, false));
        assert_eq!(
            close(CAP4 | CNO_ARMED),
            c(CAP4 | CLOSED | NOTIFIED, false, true)
        );
        assert_eq!(
            close(CAP4 | ARMED | CNO_ARMED),
            c(CAP4 | CLOSED | NOTIFIED, true, true),
            "the end of stream is news for both"
        );
    }

    #[test]
    fn a_post_triggers_the_cno_only_without_a_direct_waiter() {
        let (new, _, n) = ticket(reserve(CAP4 | CNO_ARMED, 0));
        assert_eq!(n, Notify::Cno);
        assert_eq!(new & (CNO_ARMED | NOTIFIED), NOTIFIED);
        // A direct waiter preempts the CNO: it takes the wake, the enable stays.
        let (new, _, n) = ticket(reserve(CAP4 | ARMED | CNO_ARMED, 0));
        assert_eq!(n, Notify::Wake);
        assert!(has(new, CNO_ARMED) && !has(new, ARMED));
        let (_, _, n) = ticket(reserve(new, 0));
        assert_eq!(n, Notify::Cno, "once the direct wait is over");
        // A batch owes the same notification once.
        assert!(matches!(
            reserve_batch(CAP4 | CNO_ARMED, 0, 3),
            ReserveBatch::Tickets {
                count: 3,
                notify: Notify::Cno,
                ..
            }
        ));
    }

    #[test]
    fn a_loss_triggers_an_enabled_cno() {
        let (new, n) = notify_loss(CAP4 | CNO_ARMED).unwrap();
        assert_eq!((new, n), (CAP4 | NOTIFIED, Notify::Cno));
        let (new, n) = notify_loss(CAP4 | ARMED | CNO_ARMED).unwrap();
        assert_eq!((new, n), (CAP4 | CNO_ARMED | NOTIFIED, Notify::Wake));
    }

    #[test]
    fn a_move_s_own_notification_sets_notified_and_nothing_else() {
        for bits in [
            0,
            ARMED,
            CNO_ARMED,
            CLOSED,
            NOTIFIED,
            ARMED | CNO_ARMED | RESIZING,
        ] {
            for t in [0, 3, TICKET_MASK] {
                let w = with_instances(with_tail(CAP4 | bits, t), 1) | (2 << PERMITS_SHIFT);
                let new = note_notification(w);
                assert!(has(new, NOTIFIED));
                assert_eq!(new & !NOTIFIED, w & !NOTIFIED, "word {w:#x}");
            }
        }
        // Sticky: the next enable on the drained ring clears it.
        let n = note_notification(CAP4);
        assert_eq!(enable_cno(n, 0), Enable::Armed(CAP4 | CNO_ARMED));
    }

    #[test]
    fn enable_cno_is_arm_then_check_with_threshold_one() {
        let Enable::Armed(on) = enable_cno(CAP4 | NOTIFIED, 0) else {
            panic!()
        };
        assert_eq!(on, CAP4 | CNO_ARMED, "drained after enabling: not notified");
        assert_eq!(enable_cno(on, 0), Enable::AlreadyArmed);
        let (queued, _, _) = ticket(reserve(CAP4, 0));
        assert_eq!(enable_cno(queued, 0), Enable::Pending);
        assert!(matches!(enable_cno(queued, 1), Enable::Armed(_)));
        assert_eq!(enable_cno(CAP4 | CLOSED, 0), Enable::Closed);
        assert_eq!(enable_cno(queued | CLOSED, 0), Enable::Pending);
        // The direct arm leaves the enable alone, and the enable the arm.
        let Arm::Armed(both) = arm(on, 0, 1) else {
            panic!()
        };
        assert!(has(both, ARMED | CNO_ARMED));
        assert_eq!(disable_cno(both), Some(CAP4 | ARMED));
        assert_eq!(disarm(both), CAP4 | CNO_ARMED);
        assert_eq!(disable_cno(CAP4 | ARMED), None);
    }

    #[test]
    fn resize_sets_and_clears_the_flag_and_changes_capacity() {
        let r = begin_resize(CAP4).unwrap();
        assert!(has(r, RESIZING));
        assert_eq!(begin_resize(r), None);
        let done = end_resize(r, 5);
        assert!(!has(done, RESIZING));
        assert_eq!(capacity(done), 32);
        assert_eq!(
            done,
            (CAP4 & !CAP_MASK) | (5 << CAP_SHIFT),
            "only the capacity changed"
        );
        // A refused resize ends with the old capacity: the word as it was.
        let w = with_tail(CAP4 | ARMED, 3) | (2 << PERMITS_SHIFT);
        assert_eq!(end_resize(begin_resize(w).unwrap(), cap_log2(w)), w);
    }

    #[test]
    fn a_switch_after_a_quiesce_counts_arrivals_by_the_extended_tail() {
        // Past 2^36 events the word's tail field has wrapped: the count the
        // quiesce took (`tail_count`) is compared with the same extension,
        // not with the bare field.
        for head in [5, TICKET_MASK - 1, TICKET_MASK + 7, 3 << 40] {
            let w = with_tail(CAP4, head.wrapping_add(1));
            let since = tail_count(w, head);
            assert_eq!(
                invoke_after_quiesce(w, head, since, Invoke::New),
                Invoke::New
            );
            let (later, _, _) = ticket(reserve(w, head));
            assert_eq!(
                invoke_after_quiesce(later, head, since, Invoke::New),
                Invoke::Any
            );
        }
    }

    #[test]
    fn set_policy_any_starts_an_instance_for_queued_events() {
        let w = with_tail(CAP4, 2);
        let s = set_policy(w, 0, PolicyBits::Single, Invoke::Any);
        assert!(s.start_instance);
        assert!(has(s.new, TOKEN));
        assert_eq!(instances(s.new), 1);
        assert_eq!(policy(s.new), PolicyBits::Single);
    }

    #[test]
    fn set_policy_new_waits_for_the_next_arrival() {
        let w = with_tail(CAP4, 2);
        let s = set_policy(w, 0, PolicyBits::Single, Invoke::New);
        assert!(!s.start_instance);
        let (_, _, n) = ticket(reserve(s.new, 0));
        assert_eq!(n, Notify::Upcall);
    }

    #[test]
    fn set_policy_any_on_empty_ring_starts_nothing() {
        let s = set_policy(CAP4, 0, PolicyBits::Many, Invoke::Any);
        assert!(!s.start_instance);
        assert_eq!(policy(s.new), PolicyBits::Many);
    }

    #[test]
    fn set_policy_does_not_start_while_an_instance_runs() {
        let w = with_instances(with_tail(CAP4 | TOKEN, 2), 1);
        let s = set_policy(
            with_policy(w, PolicyBits::Single),
            0,
            PolicyBits::Single,
            Invoke::Any,
        );
        assert!(!s.start_instance);
        assert_eq!(instances(s.new), 1);
    }

    #[test]
    fn exit_instance_refuses_while_work_is_queued() {
        let w = with_instances(
            with_policy(with_tail(CAP4 | TOKEN, 2), PolicyBits::Single),
            1,
        );
        assert_eq!(exit_instance(w, 1), Exit::MoreWork);
        match exit_instance(w, 2) {
            Exit::Ended(new) => {
                assert!(!has(new, TOKEN | NOTIFIED));
                assert_eq!(instances(new), 0);
            }
            Exit::MoreWork => panic!("empty ring must let the instance exit"),
        }
    }

    #[test]
    fn exit_instance_when_disabled_leaves_events_and_notified() {
        let w = with_instances(with_tail(CAP4 | TOKEN | NOTIFIED, 2), 1);
        match exit_instance(w, 1) {
            Exit::Ended(new) => {
                assert!(!has(new, TOKEN));
                assert!(has(new, NOTIFIED), "not drained: notified stays");
                assert_eq!(len(new, 1), 1);
            }
            Exit::MoreWork => panic!("disabled policy must let the instance exit"),
        }
    }

    #[test]
    fn reacquire_takes_a_free_token_and_leaves_a_held_one() {
        let w = with_instances(with_policy(CAP4, PolicyBits::Many), 2);
        assert_eq!(reacquire(w), Reacquire::Token(w | TOKEN));
        let held = w | TOKEN;
        assert_eq!(reacquire(held), Reacquire::Exit(with_instances(held, 1)));
        let disabled = with_policy(w, PolicyBits::Disabled);
        assert_eq!(
            reacquire(disabled),
            Reacquire::Exit(with_instances(disabled, 1))
        );
        // Two ManyInstances-era instances under SingleInstance: the first to
        // come back leaves, the last one takes the token.
        let single = with_policy(w, PolicyBits::Single);
        assert_eq!(
            reacquire(single),
            Reacquire::Exit(with_instances(single, 1))
        );
        let last = with_instances(single, 1);
        assert_eq!(reacquire(last), Reacquire::Token(last | TOKEN));
    }

    #[test]
    fn abandon_instance_frees_token_and_count() {
        let w = with_instances(CAP4 | TOKEN | NOTIFIED, 1);
        let new = abandon_instance(w, true);
        assert!(!has(new, TOKEN));
        assert!(has(new, NOTIFIED));
        assert_eq!(instances(new), 0);
        let many = with_instances(CAP4 | TOKEN, 2);
        let new = abandon_instance(many, false);
        assert!(has(new, TOKEN), "another instance's token is not ours");
        assert_eq!(instances(new), 1);
    }

    #[test]
    fn only_a_full_ring_with_events_and_a_free_token_under_an_enabled_policy_is_stranded() {
        let many = with_policy(CAP4, PolicyBits::Many);
        let full = with_tail(many, 4);
        assert!(strands_a_full_ring(full, 0));
        assert!(
            !strands_a_full_ring(full, 1),
            "a slot free: a post starts it"
        );
        let three_and_a_permit = with_tail(many, 3) + ONE_PERMIT;
        assert!(strands_a_full_ring(three_and_a_permit, 0));
        let promised_only = many + 4 * ONE_PERMIT;
        assert!(is_full(promised_only, 0));
        assert!(!strands_a_full_ring(promised_only, 0), "nothing to drain");
        assert!(
            !strands_a_full_ring(full | TOKEN, 0),
            "an instance drains it"
        );
        let at_limit = with_instances(with_policy(full, PolicyBits::Single), 1);
        assert!(!strands_a_full_ring(at_limit, 0), "no room for an instance");
        assert!(
            !strands_a_full_ring(with_tail(CAP4, 4), 0),
            "no upcall policy"
        );
    }

    #[test]
    fn the_plain_reservations_are_the_general_one() {
        // Every combination of the flag and policy bits, instance counts at
        // the edges, capacities 1 and 1024, and tails near the wrap, against
        // heads from empty to full. Under Miri, which checks these pure
        // functions for nothing but arithmetic overflow (there is no unsafe
        // here, and the fuzz target `transitions` runs them with overflow
        // checks on), every seventh flag combination: 0 and all bits among
        // them. The whole grid would be most of Miri's time over this
        // crate's unit tests.
        let flags = [ARMED, NOTIFIED, CLOSED, RESIZING, TOKEN, CNO_ARMED];
        let step = if cfg!(miri) { 7 } else { 1 };
        let masks = (0..(1u32 << flags.len())).step_by(step);
        let mut checked = 0;
        for mask in masks.clone() {
            let mut bits = 0;
            for (i, f) in flags.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    bits |= f;
                }
            }
            for pol in 0..4u64 {
                for (inst, out) in [(0, 0), (1, 1), (MAX_INSTANCES, MAX_PERMITS)] {
                    for log2 in [0, 10] {
                        for t in [0, 1, 5, TICKET_MASK - 1, TICKET_MASK] {
                            let w = with_instances(
                                with_tail(initial(log2) | bits | (pol << POLICY_SHIFT), t),
                                inst,
                            ) | (out << PERMITS_SHIFT);
                            let cap = 1u64 << log2;
                            for behind in [0, 1, cap - 1, cap] {
                                let head = t.wrapping_sub(behind) & TICKET_MASK;
                                let general = reserve_general(w, head);
                                assert_eq!(reserve(w, head), general, "word {w:#x}, head {head}");
                                // The plain try takes exactly the tickets that
                                // owe nothing on a word with no blocker, and
                                // leaves every other case to `reserve`.
                                let plain = reserve_plain(w, head).map(|p| Reserve::Ticket {
                                    new: p.new,
                                    ticket: p.ticket,
                                    notify: Notify::None,
                                });
                                let applies = w & PLAIN_RESERVE_BLOCKERS == 0
                                    && matches!(general, Reserve::Ticket { .. });
                                assert_eq!(
                                    plain,
                                    applies.then_some(general),
                                    "plain try, word {w:#x}, head {head}"
                                );
                                assert_reserve_any_composes(w, head);
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        // Flags, policies, instance counts, capacities, tails, heads.
        assert_eq!(checked, masks.count() * 4 * 3 * 2 * 5 * 4);
    }

    /// [`reserve_any`] agrees with the general transitions: for tickets it is
    /// [`reserve_batch`] (one ticket included, which it takes through the
    /// cheaper [`reserve`]); for a permit, [`take_permit`]'s word with no
    /// ticket and nothing owed, and `None` only at the permit limit.
    fn assert_reserve_any_composes(w: u64, head: u64) {
        for want in [1, 2, 3, 1 << 20] {
            assert_eq!(
                reserve_any(w, head, want),
                Some(reserve_batch(w, head, want)),
                "{want} tickets, word {w:#x}, head {head}"
            );
        }
        match (reserve_any(w, head, WANT_PERMIT), take_permit(w, head)) {
            (
                Some(ReserveBatch::Tickets {
                    new,
                    first,
                    count: 0,
                    notify: Notify::None,
                }),
                TakePermit::Taken(taken),
            ) => assert_eq!((new, first), (taken, tail(w))),
            (None, TakePermit::AtLimit)
            | (Some(ReserveBatch::Full), TakePermit::Full)
            | (Some(ReserveBatch::Closed), TakePermit::Closed)
            | (Some(ReserveBatch::Resizing), TakePermit::Resizing) => {}
            (got, permit) => panic!("permit, word {w:#x}, head {head}: {got:?} for {permit:?}"),
        }
    }

    #[test]
    fn a_permit_takes_room_as_a_post_would_and_sends_without_a_full_check() {
        let w = initial(1); // 2 slots
        let TakePermit::Taken(one) = take_permit(w, 0) else {
            panic!("room for a permit")
        };
        assert_eq!((permits(one), tail(one)), (1, 0));
        // A post and a permit share the room: one post fills the ring.
        let (full, _, _) = ticket(reserve(one, 0));
        assert!(is_full(full, 0));
        assert_eq!(reserve(full, 0), Reserve::Full);
        assert_eq!(
            reserve_plain(one, 0),
            None,
            "a word with permits is not plain"
        );
        assert_eq!(take_permit(full, 0), TakePermit::Full);
        // The permit's send takes the promised slot's ticket.
        let (sent, t, notify) = ticket(send_permit(full));
        assert_eq!(
            (t, notify, permits(sent), len(sent, 0)),
            (1, Notify::None, 0, 2)
        );
        // A batch counts the promised slots out.
        let ReserveBatch::Tickets { count, .. } = reserve_batch(one, 0, 8) else {
            panic!("room for a batch")
        };
        assert_eq!(count, 1);
    }

    #[test]
    fn a_permit_send_takes_the_notification_as_a_post_would() {
        let TakePermit::Taken(w) = take_permit(initial(2), 0) else {
            panic!("room")
        };
        let Arm::Armed(armed) = arm(w, 0, 1) else {
            panic!("arms with only a permit out: nothing is queued")
        };
        let (new, _, notify) = ticket(send_permit(armed));
        assert_eq!(notify, Notify::Wake);
        assert!(!has(new, ARMED) && has(new, NOTIFIED));
        let on = set_policy(w, 0, PolicyBits::Single, Invoke::New).new;
        assert_eq!(ticket(send_permit(on)).2, Notify::Upcall);
    }

    #[test]
    fn permits_are_refused_when_closed_resizing_or_at_the_limit() {
        let TakePermit::Taken(w) = take_permit(initial(10), 0) else {
            panic!("room")
        };
        let closed = close(w).new;
        assert_eq!(take_permit(closed, 0), TakePermit::Closed);
        assert_eq!(send_permit(closed), Reserve::Closed);
        assert_eq!(permits(release_permit(closed)), 0, "given back after close");
        let resizing = begin_resize(w).unwrap();
        assert_eq!(take_permit(resizing, 0), TakePermit::Resizing);
        assert_eq!(send_permit(resizing), Reserve::Resizing);
        assert_eq!(
            permits(release_permit(resizing)),
            0,
            "given back mid-resize"
        );
        let mut w = initial(10);
        for _ in 0..MAX_PERMITS {
            let TakePermit::Taken(n) = take_permit(w, 0) else {
                panic!("room for {MAX_PERMITS}")
            };
            w = n;
        }
        assert_eq!(permits(w), MAX_PERMITS);
        assert_eq!(take_permit(w, 0), TakePermit::AtLimit);
        assert!(
            matches!(reserve(w, 0), Reserve::Ticket { .. }),
            "posts still go in"
        );
        assert_eq!(tail(w), 0, "permits never touch the tail");
    }

    #[test]
    fn policy_limits() {
        assert_eq!(PolicyBits::Disabled.instance_limit(), 0);
        assert_eq!(PolicyBits::Single.instance_limit(), 1);
        assert_eq!(PolicyBits::Many.instance_limit(), MAX_INSTANCES);
    }

    #[test]
    fn loss_commit_counts_until_close_then_refuses() {
        let mut l = 0;
        for i in 1..=5 {
            l = loss::commit(l).unwrap();
            assert_eq!(loss::pending(l), i);
        }
        let closed = loss::close(l);
        assert!(loss::is_closed(closed));
        assert_eq!(loss::pending(closed), 5, "close keeps the count");
        assert_eq!(loss::commit(closed), None, "no loss after close begins");
        assert_eq!(loss::close(closed), closed, "close is idempotent");
    }

    #[test]
    fn loss_take_reports_everything_once_and_keeps_close() {
        let l = loss::commit(loss::commit(0).unwrap()).unwrap();
        let (after, n) = loss::take(l).unwrap();
        assert_eq!((after, n), (0, 2));
        assert_eq!(loss::take(after), None);
        let (after, n) = loss::take(loss::close(l)).unwrap();
        assert_eq!((after, n), (loss::CLOSED, 2));
    }
}
