//! The `schedule` target: the real `evd`, built with `--cfg shuttle`, run by
//! posters, a consumer and upcall handlers on shuttle threads, with every
//! scheduling decision taken from the fuzz input.
//!
//! # How it works
//!
//! * Under `--cfg shuttle` the core's `sync` module takes its atomics,
//!   threads, parking and waker slot from shuttle, so every atomic operation
//!   of the real code is a scheduling point. The input's schedule bytes feed
//!   [`ByteScheduler`], a `shuttle::scheduler::Scheduler` that picks the next
//!   thread at each point; when they run out it runs the current thread on
//!   and switches round-robin only when that one blocks or yields (fair, so
//!   an execution always ends).
//! * The input also holds one script per actor: up to three posters
//!   ([`PosterOp`]s: post, post_lossy, post_batch, a permit taken, sent
//!   with or given back, the sink, clone, close, drop, query, unwaitable)
//!   and the consumer (try_dequeue, dequeue_batch, arm, disarm,
//!   wait, resize, close, poll a `recv` future, query, post, drop, and
//!   `into_upcalls` with any policy, then set_policy / Teardown / teardown /
//!   set_handler (the plain handler, or one that posts into its own EVD from
//!   inside the upcall) / drop of the `Upcalls`; and the binding to one of two
//!   CNOs: bind, enable, disable, modify, unbind, take the ready keys, poll
//!   a CNO as a stream, drop a CNO; and the eventfd: ask for it, read it).
//!   Upcall handlers run on whichever thread the real code runs them on.
//! * The core reports every successful CAS on its state word to
//!   [`observe`] (registered with `evd::set_cas_observer`), before any other
//!   thread runs. The harness keeps its own copy of the word, so it checks
//!   that no change goes unobserved, and that each new word is a legal
//!   successor of the old one per the reference model
//!   ([`crate::spec::successor`]), with the consumer's head known exactly in
//!   consumer mode and bounded in upcall mode, and the owner's transitions
//!   (arm, policy switch, CNO enable and disable, withdrawal, resize)
//!   accepted only from the owner's thread.
//!
//! # Invariants
//!
//! Exactly-once delivery (no event lost, duplicated or invented; refused
//! events handed back and never delivered); FIFO per poster (outside the
//! windows where ManyInstances handlers may overlap); at most one handler
//! running while the policy is SingleInstance, and never more handlers than
//! instances in the word; no handler and no instance after a teardown
//! returns (until upcalls are enabled again); no lost wake-up (a blocked
//! consumer or teardown nobody will wake is a shuttle deadlock); `query()`
//! snapshots consistent and monotonic; a CNO key only from the live CNO the
//! EVD is bound to, against an enable, and a CNO that holds a key at the
//! end woken at least once since its last poll, if that was pending (a
//! weak check: any wake counts, also the poll's own retry wake); enables
//! of a dropped CNO refused; an eventfd written at least once if a
//! notification was counted after it was asked for (the real eventfd:
//! shuttle runs its system calls as plain steps); the overflow count and reports as
//! [`crate::semantics`] says; every event dropped exactly once.

use crate::payload::{DropLog, Payload};
use crate::semantics::{self, Refusals};
use crate::spec::{self, TICKET_MASK};
use evd::state;
use evd::{
    ArmStatus, BatchPostError, Cno, CnoError, Consumer, Invoke, Lossy, Overflow, OwnedPermit,
    PostError, PostSink, Poster, Query, RecvError, ResizeError, TryDequeueError, UpcallPolicy,
    Upcalls, WaitError,
};
use futures_sink::Sink;
use shuttle::scheduler::{Schedule, Scheduler, Task, TaskId};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// Posters, at most.
pub const MAX_POSTERS: usize = 3;
/// Script lengths, at most.
pub const MAX_CONSUMER_OPS: usize = 24;
pub const MAX_POSTER_OPS: usize = 12;
/// Scheduling points an execution may take before it counts as a livelock.
pub const MAX_STEPS: usize = 50_000;

// ---------------------------------------------------------------------------
// The input

/// One script entry: `kind` chooses the operation, `arg` its argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: u8,
    pub arg: u8,
}

/// One fuzz input. Encoded densely (see [`Input::decode`]) so that a
/// mutated byte is a local change of a script or of the schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// log2 of the initial capacity, 0..=3.
    pub cap_log2: u8,
    /// The EVD's room barrier is modelled as on a system without
    /// `membarrier` (SeqCst fences on both sides, the consumer's on its cold
    /// path) instead of with it.
    pub without_membarrier: bool,
    pub consumer: Vec<Op>,
    /// One script per poster thread (1..=3).
    pub posters: Vec<Vec<Op>>,
    /// The scheduling decisions, one byte each (see [`ByteScheduler`]).
    pub schedule: Vec<u8>,
}

impl Input {
    /// Byte 0: posters − 1 (mod 3); byte 1: cap_log2 (mod 4) and, in its
    /// bit 3, the room barrier without membarrier; byte 2: the
    /// consumer's script length (mod 25); then one length per poster (mod
    /// 13); then two bytes per op (consumer first, then each poster); the
    /// rest is the schedule.
    pub fn decode(bytes: &[u8]) -> Input {
        let mut it = bytes.iter().copied();
        let mut next = || it.next().unwrap_or(0);
        let posters = 1 + next() as usize % MAX_POSTERS;
        let b1 = next();
        let (cap_log2, without_membarrier) = (b1 % 4, b1 & 8 != 0);
        let nc = next() as usize % (MAX_CONSUMER_OPS + 1);
        let np: Vec<usize> = (0..posters)
            .map(|_| next() as usize % (MAX_POSTER_OPS + 1))
            .collect();
        let mut op = || Op {
            kind: next(),
            arg: next(),
        };
        let consumer = (0..nc).map(|_| op()).collect();
        let posters = np.iter().map(|&n| (0..n).map(|_| op()).collect()).collect();
        let used = 3 + np.len() + 2 * (nc + np.iter().sum::<usize>());
        Input {
            cap_log2,
            without_membarrier,
            consumer,
            posters,
            schedule: bytes.get(used..).unwrap_or(&[]).to_vec(),
        }
    }

    /// The bytes [`Input::decode`] reads back as `self`.
    pub fn encode(&self) -> Vec<u8> {
        assert!((1..=MAX_POSTERS).contains(&self.posters.len()));
        assert!(self.consumer.len() <= MAX_CONSUMER_OPS);
        let mut b = vec![
            self.posters.len() as u8 - 1,
            self.cap_log2 | u8::from(self.without_membarrier) << 3,
            self.consumer.len() as u8,
        ];
        for p in &self.posters {
            assert!(p.len() <= MAX_POSTER_OPS);
            b.push(p.len() as u8);
        }
        for op in self.consumer.iter().chain(self.posters.iter().flatten()) {
            b.extend([op.kind, op.arg]);
        }
        b.extend(&self.schedule);
        b
    }
}

impl<'a> arbitrary::Arbitrary<'a> for Input {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Input::decode(u.bytes(u.len())?))
    }

    fn arbitrary_take_rest(u: arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Input::decode(u.take_rest()))
    }
}

/// What a poster's script entry does (`kind % 16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PosterOp {
    Post,
    /// `post_lossy`: queue it, or give it up if the ring is full.
    PostLossy,
    PostBatch(usize),
    Query,
    SetUnwaitable(bool),
    /// Go on with a clone of the handle; the old one is dropped.
    Clone,
    Close,
    /// Drop the handle and end the script.
    Drop,
    /// Through the poster's `PostSink`: post a new event (`poll_ready`,
    /// `start_send`, `poll_flush`), or, while the sink still holds one, poll
    /// it again. A held event waits in the room queue (its waker does
    /// nothing: the next poll is the next op); while one is held, every post
    /// op of this script polls it instead, which keeps the poster's events
    /// in order.
    SinkSend,
    /// With no permit held, take one (`try_reserve_owned`: a slot
    /// promised); with one held, send an event with it (`true`) or give it
    /// back. While the sink holds an event, a sink op instead (the
    /// poster's events stay in order).
    Permit(bool),
}

impl PosterOp {
    pub fn of(op: Op) -> PosterOp {
        match op.kind % 16 {
            6 | 7 => PosterOp::PostLossy,
            8..=10 => PosterOp::PostBatch(1 + op.arg as usize % 5),
            11 => PosterOp::Query,
            12 => PosterOp::SetUnwaitable(op.arg & 1 == 1),
            13 => PosterOp::Clone,
            14 if op.arg < 64 => PosterOp::Close,
            15 if op.arg < 64 => PosterOp::Drop,
            14 | 15 if op.arg >= 192 => PosterOp::SinkSend,
            14 | 15 if op.arg >= 128 => PosterOp::Permit(op.arg & 1 == 1),
            _ => PosterOp::Post,
        }
    }
}

/// What a consumer's script entry does while it holds the `Consumer`
/// (`kind % 16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumerOp {
    TryDequeue,
    Batch(usize),
    Arm,
    Disarm,
    /// Threshold (0 and capacity + 1 are invalid), and a zero timeout
    /// instead of none (shuttle has no time: only these two are
    /// deterministic).
    Wait(usize, bool),
    Resize(usize),
    IntoUpcalls(UpcallPolicy, Invoke),
    Query,
    /// Post through a poster made from the consumer, dropped at once.
    Post,
    /// Under shuttle a non-zero budget is a few back-off steps, whatever its
    /// length (no clock in a schedule).
    SpinBudget(Duration),
    PollRecv,
    Close,
    /// Drop the consumer and end the script.
    Drop,
    /// An operation on the EVD's binding to one of the consumer's two CNOs.
    Cno(CnoOp),
    /// Ask for the EVD's eventfd (`notify_fd`; made by the first ask).
    NotifyFd,
    /// Read the eventfd's counter (`acknowledge`), if there is one.
    Acknowledge,
}

/// What a consumer's CNO entry does (the consumer thread owns two CNOs of
/// one slot each, and is their only waiter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CnoOp {
    /// Bind to CNO 0 or 1 (key 100 + its number).
    Bind(usize),
    Enable,
    Disable,
    /// Move to the other CNO (or bind to CNO 0 if unbound).
    Modify,
    Unbind,
    /// Take every ready key from both CNOs.
    Take,
    /// Drop CNO 0 or 1 and make a new one in its place; a binding to the
    /// dropped one stays.
    Drop(usize),
    /// Poll CNO 0 or 1 once as a `Stream`, with a counting waker.
    Poll(usize),
}

impl ConsumerOp {
    pub fn of(op: Op, cap: usize) -> ConsumerOp {
        let a = op.arg as usize;
        match op.kind % 16 {
            0..=2 => ConsumerOp::TryDequeue,
            3 | 4 => ConsumerOp::Batch(a % (2 * cap + 2)),
            5 | 6 => ConsumerOp::Arm,
            7 => ConsumerOp::Disarm,
            8 | 9 => ConsumerOp::Wait(a % 0x80 % (cap + 2), a & 0x80 != 0),
            10 => ConsumerOp::Resize([0, 1, 2, 4, 8, 16][a % 6]),
            11 => ConsumerOp::IntoUpcalls(
                [
                    UpcallPolicy::Disabled,
                    UpcallPolicy::SingleInstance,
                    UpcallPolicy::ManyInstances,
                ][a % 3],
                invoke(op.arg),
            ),
            12 => ConsumerOp::Query,
            13 => ConsumerOp::Post,
            14 => ConsumerOp::SpinBudget(Duration::from_micros(u64::from(op.arg % 3))),
            _ => match a {
                0..=15 => ConsumerOp::Close,
                16..=23 => ConsumerOp::Drop,
                24..=79 => ConsumerOp::PollRecv,
                80..=83 => ConsumerOp::NotifyFd,
                84..=87 => ConsumerOp::Acknowledge,
                208..=215 => ConsumerOp::Cno(CnoOp::Drop(a & 1)),
                216..=223 => ConsumerOp::Cno(CnoOp::Poll(a & 1)),
                224..=229 => ConsumerOp::Cno(CnoOp::Bind(a & 1)),
                230..=235 => ConsumerOp::Cno(CnoOp::Enable),
                236..=239 => ConsumerOp::Cno(CnoOp::Disable),
                240..=243 => ConsumerOp::Cno(CnoOp::Modify),
                244..=247 => ConsumerOp::Cno(CnoOp::Unbind),
                248..=255 => ConsumerOp::Cno(CnoOp::Take),
                _ => ConsumerOp::TryDequeue,
            },
        }
    }
}

/// What a consumer's script entry does once it is in upcall mode
/// (`kind % 8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpcallOp {
    SetPolicy(UpcallPolicy, Invoke),
    /// `Upcalls::teardown`: back to consumer mode.
    Teardown,
    Post,
    Query,
    /// `Upcalls::set_handler`: the plain handler, or one that also posts
    /// into its own EVD from inside the upcall (re-entry).
    SetHandler {
        reposts: bool,
    },
    /// Drop the `Upcalls` and end the script.
    Drop,
}

impl UpcallOp {
    pub fn of(op: Op) -> UpcallOp {
        let policy = [
            UpcallPolicy::Disabled,
            UpcallPolicy::SingleInstance,
            UpcallPolicy::ManyInstances,
            UpcallPolicy::Teardown,
        ][op.arg as usize % 4];
        match op.kind % 8 {
            3 => UpcallOp::Teardown,
            4 => UpcallOp::Post,
            5 => UpcallOp::Query,
            6 => UpcallOp::SetHandler {
                reposts: op.arg & 0x40 != 0,
            },
            7 if op.arg < 32 => UpcallOp::Drop,
            _ => UpcallOp::SetPolicy(policy, invoke(op.arg)),
        }
    }
}

fn invoke(arg: u8) -> Invoke {
    if arg & 0x10 != 0 {
        Invoke::New
    } else {
        Invoke::Any
    }
}

// ---------------------------------------------------------------------------
// The scheduler

/// A shuttle scheduler whose choices are the input's schedule bytes: each
/// byte picks a runnable thread (`byte >> 4`, modulo how many can run) and
/// lets it run for `byte & 15` more scheduling points before the next byte
/// is read. A thread that yields (a spin loop backing off) is not picked
/// while another can run. When the bytes run out, the current thread runs
/// on until it blocks or yields, then the next runnable one by id.
#[derive(Debug)]
pub struct ByteScheduler {
    bytes: Vec<u8>,
    pos: usize,
    run_left: u8,
    started: bool,
}

impl ByteScheduler {
    pub fn new(bytes: Vec<u8>) -> Self {
        ByteScheduler {
            bytes,
            pos: 0,
            run_left: 0,
            started: false,
        }
    }
}

impl Scheduler for ByteScheduler {
    fn new_execution(&mut self) -> Option<Schedule> {
        if std::mem::replace(&mut self.started, true) {
            return None;
        }
        Some(Schedule::new(0))
    }

    fn next_task(
        &mut self,
        runnable: &[&Task],
        current: Option<TaskId>,
        is_yielding: bool,
    ) -> Option<TaskId> {
        let can_go_on = current.filter(|c| !is_yielding && runnable.iter().any(|t| t.id() == *c));
        if let Some(c) = can_go_on {
            if self.run_left > 0 {
                self.run_left -= 1;
                return Some(c);
            }
        }
        let mut ids: Vec<TaskId> = runnable.iter().map(|t| t.id()).collect();
        if is_yielding && ids.len() > 1 {
            ids.retain(|&t| Some(t) != current);
        }
        if let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            self.run_left = b & 0x0f;
            return Some(ids[(b >> 4) as usize % ids.len()]);
        }
        if let Some(c) = can_go_on {
            return Some(c);
        }
        ids.sort_unstable();
        let next = ids.iter().find(|&&t| Some(t) > current).or(ids.first());
        next.copied()
    }

    fn next_u64(&mut self) -> u64 {
        0
    }
}

// ---------------------------------------------------------------------------
// Events

/// An event: who posted it, its place in that poster's sequence, and a
/// payload that counts its drops.
#[derive(Debug)]
pub struct Ev {
    poster: usize,
    seq: u32,
    payload: Payload,
}

impl Ev {
    fn id(&self) -> u64 {
        self.payload.id
    }
}

// ---------------------------------------------------------------------------
// The checker: what the harness knows, shared by every shuttle thread of an
// execution (they all run on the OS thread that runs the execution, so a
// `thread_local` is per execution, also under a parallel `cargo test`).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The consumer dequeues: the head is exactly what it received.
    Consumer,
    /// Upcall instances dequeue: the head is at least what the handlers got.
    Upcalls,
}

struct Checker {
    /// The state word, as the last observed CAS installed it.
    word: u64,
    /// Where the state word is (the first CAS says).
    addr: Option<usize>,
    mode: Mode,
    /// Events the consumer dequeued or a handler received.
    received: u64,
    /// `received` when the consumer thread's current operation began.
    owner_op_head: u64,
    /// How many events the consumer's dequeue call under way may take: it
    /// may have published a head past `received` before it returns.
    dequeuing: u64,
    attempted: BTreeSet<u64>,
    /// The posts under way (attempted, not yet accepted, refused or lost),
    /// each with `received` when it began: a lower bound of any head its
    /// poster may have loaded, for the draining upcall a post starts on a
    /// ring it saw full ([`spec::successor`]'s `oldest_poster_head`).
    in_flight: BTreeMap<u64, u64>,
    accepted: BTreeSet<u64>,
    delivered: BTreeSet<u64>,
    last_seq: Vec<Option<u32>>,
    /// The threads that may post lossily: the posters and the owner.
    lossy_posters: u64,
    /// ManyInstances handlers may run out of dequeue order: from the moment
    /// the policy may be Many until no instance is left.
    many_window: bool,
    refusals: Refusals,
    reported: u64,
    handlers: u32,
    torn_down: bool,
    /// A call that may close the EVD has begun (close is two steps: a lossy
    /// post may see the first before the state word has CLOSED).
    close_begun: bool,
    /// The close CAS found the EVD enabled on its CNO, and that key has not
    /// been taken, disabled or unbound since: it must be ready at the end.
    close_key_due: bool,
    /// Some poster has begun a `set_unwaitable`: only then may a wait
    /// fail as `Unwaitable`.
    unwaitable_set: bool,
    /// Some poster has begun a `post_lossy`: only then may a loss have
    /// been committed, and a CAS notify of one.
    lossy_begun: bool,
    /// The thread that owns the consumer (or the `Upcalls`): the consumer
    /// thread, then the execution's own once it has joined it.
    owner: Option<shuttle::thread::ThreadId>,
    /// The threads inside `post_lossy` now: while the consumer dequeues
    /// (no upcall instance to restart for a loss), only they notify of one.
    in_post_lossy: Vec<shuttle::thread::ThreadId>,
    /// The consumer's `arm()` is under way, and the queued count its CAS
    /// that set `ARMED` saw (an `Armed` arm over queued events would be the
    /// lost wakeup).
    arming: bool,
    arm_saw: Option<u64>,
    failed: bool,
    trace: bool,
}

thread_local! {
    static CHECKER: RefCell<Option<Checker>> = const { RefCell::new(None) };
}

type Check = Result<(), String>;

fn ensure(ok: bool, msg: impl FnOnce() -> String) -> Check {
    if ok {
        Ok(())
    } else {
        Err(msg())
    }
}

/// Run `f` on the checker; a failure panics after the borrow is released,
/// so that the unwinding code (which may CAS again) can still reach it.
fn check(f: impl FnOnce(&mut Checker) -> Check) {
    if std::thread::panicking() {
        return;
    }
    let r = CHECKER.with(|c| {
        let mut c = c.borrow_mut();
        let c = c.as_mut().expect("inside an execution");
        if c.failed {
            return Ok(());
        }
        let r = f(c);
        c.failed = r.is_err();
        r
    });
    if let Err(e) = r {
        panic!("evd-fuzz schedule: {e}");
    }
}

fn trace(f: impl FnOnce() -> String) {
    if CHECKER.with(|c| c.borrow().as_ref().is_some_and(|c| c.trace)) {
        let me = shuttle::thread::current();
        eprintln!("[{}] {}", me.name().unwrap_or("main"), f());
    }
}

/// The observer the core calls after every successful CAS on a state word.
fn observe(addr: usize, old: u64, new: u64) {
    if std::thread::panicking() {
        return;
    }
    let r = CHECKER.with(|c| {
        let mut c = c.try_borrow_mut().ok()?;
        let c = c.as_mut()?;
        if c.failed {
            return None;
        }
        let r = c.on_cas(addr, old, new).err();
        c.failed = r.is_some();
        r
    });
    if let Some(e) = r {
        panic!("evd-fuzz schedule: {e}");
    }
}

impl Checker {
    fn new(cap_log2: u32, posters: usize) -> Checker {
        Checker {
            word: state::initial(cap_log2),
            addr: None,
            mode: Mode::Consumer,
            received: 0,
            owner_op_head: 0,
            dequeuing: 0,
            attempted: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            accepted: BTreeSet::new(),
            delivered: BTreeSet::new(),
            last_seq: vec![None; HANDLER_POSTER + 1],
            owner: None,
            lossy_posters: posters as u64 + 1,
            many_window: false,
            refusals: Refusals::default(),
            reported: 0,
            handlers: 0,
            torn_down: false,
            close_begun: false,
            close_key_due: false,
            unwaitable_set: false,
            lossy_begun: false,
            in_post_lossy: Vec::new(),
            arming: false,
            arm_saw: None,
            failed: false,
            trace: std::env::var_os("EVD_FUZZ_TRACE").is_some(),
        }
    }

    fn head(&self) -> u64 {
        self.received & TICKET_MASK
    }

    fn queued(&self) -> u64 {
        state::len(self.word, self.head())
    }

    fn closed(&self) -> bool {
        state::has(self.word, state::CLOSED)
    }

    fn on_cas(&mut self, addr: usize, old: u64, new: u64) -> Check {
        if self.addr != Some(addr) {
            // Another EVD's word: a CNO's ready ring.
            return Ok(());
        }
        ensure(old == self.word, || {
            format!(
                "the word changed without an observed CAS: expected {:?}, the CAS replaced {:?}",
                spec::Word::decode(self.word),
                spec::Word::decode(old)
            )
        })?;
        // The head: while the consumer dequeues, what it received, plus what
        // the dequeue under way took; while instances do, what the handlers
        // received plus at most one event per instance in flight (each
        // dequeues one, then enters its handler, which counts it), and no
        // further than the tail. Bounded so, an instance's exit with events
        // queued is seen (a head at the tail would make every exit legal).
        let lo = self.head();
        let heads: Vec<u64> = match self.mode {
            Mode::Consumer => (0..=self.dequeuing)
                .map(|i| (lo + i) & TICKET_MASK)
                .collect(),
            Mode::Upcalls => {
                let ahead = state::instances(old).min(state::len(old, lo));
                let mut h: Vec<u64> = (0..=ahead).map(|i| (lo + i) & TICKET_MASK).collect();
                // `set_policy` (on the owner's thread) computes with a head
                // it loaded before its CAS, while instances may dequeue: it
                // may be as old as the start of the owner's current call.
                h.push(self.owner_op_head & TICKET_MASK);
                h
            }
        };
        // A loss is notified by the lossy post that committed it, or (under
        // an upcall policy) by an instance or a policy switch restarting
        // for one committed earlier.
        let losses = match self.mode {
            Mode::Consumer => self
                .in_post_lossy
                .contains(&shuttle::thread::current().id()),
            Mode::Upcalls => self.lossy_begun,
        };
        let by_owner = self.owner == Some(shuttle::thread::current().id());
        let oldest_poster_head = self.in_flight.values().min().map(|h| h & TICKET_MASK);
        let how = spec::successor(old, new, &heads, oldest_poster_head, losses, by_owner)?;
        // Only a panicking handler abandons its instance; this target's
        // never panic, so one that ends so left its work to nobody.
        ensure(how != "abandon_instance", || {
            format!(
                "an instance ended by abandon_instance with no handler panicking: {:?} -> {:?}",
                spec::Word::decode(old),
                spec::Word::decode(new)
            )
        })?;
        if !state::has(old, state::CLOSED) && state::has(new, state::CLOSED) {
            self.close_key_due = state::has(old, state::CNO_ARMED);
        }
        if self.arming
            && self.mode == Mode::Consumer
            && state::has(new, state::ARMED)
            && !state::has(old, state::ARMED)
        {
            self.arm_saw = Some(state::len(old, self.head()));
        }
        if self.trace {
            eprintln!(
                "    {how}: {:?}\n        -> {:?}",
                spec::Word::decode(old),
                spec::Word::decode(new)
            );
        }
        let (policy, instances) = (state::policy(new), state::instances(new));
        ensure(
            policy != state::PolicyBits::Single || self.handlers <= 1,
            || {
                format!(
                    "SingleInstance installed while {} handlers run",
                    self.handlers
                )
            },
        )?;
        ensure(u64::from(self.handlers) <= instances, || {
            format!(
                "{} handlers run but the word counts {instances} instances",
                self.handlers
            )
        })?;
        ensure(!self.torn_down || instances == 0, || {
            "an upcall instance started after teardown returned".into()
        })?;
        if policy == state::PolicyBits::Many {
            self.many_window = true;
        } else if instances == 0 {
            self.many_window = false;
        }
        self.word = new;
        Ok(())
    }

    fn attempt(&mut self, id: u64) -> Check {
        self.in_flight.insert(id, self.head());
        ensure(self.attempted.insert(id), || {
            format!("event {id} posted twice")
        })
    }

    fn accept(&mut self, id: u64) -> Check {
        ensure(self.attempted.contains(&id), || format!("event {id}"))?;
        self.in_flight.remove(&id);
        self.accepted.insert(id);
        Ok(())
    }

    /// A post handed `back` the event it was given, `id`.
    fn refuse(&mut self, id: u64, back: &Ev) -> Check {
        ensure(back.id() == id, || {
            format!("post of event {id} handed back event {}", back.id())
        })?;
        ensure(!self.delivered.contains(&id), || {
            format!("event {id} was refused, yet delivered")
        })?;
        self.attempted.remove(&id);
        self.in_flight.remove(&id);
        Ok(())
    }

    fn deliver(&mut self, ev: &Ev) -> Check {
        let id = ev.id();
        ensure(self.attempted.contains(&id), || {
            format!("event {id} delivered but never posted")
        })?;
        ensure(self.delivered.insert(id), || {
            format!("event {id} delivered twice")
        })?;
        let last = &mut self.last_seq[ev.poster];
        let ordered = !self.many_window && ev.poster != HANDLER_POSTER;
        if let (Some(l), true) = (*last, ordered) {
            ensure(ev.seq > l, || {
                format!(
                    "poster {}'s event {} delivered after its event {l}",
                    ev.poster, ev.seq
                )
            })?;
        }
        *last = Some(last.map_or(ev.seq, |l| l.max(ev.seq)));
        self.received += 1;
        Ok(())
    }

    fn report(&mut self, o: Overflow) -> Check {
        ensure(o.lost > 0, || "an empty overflow report".into())?;
        self.reported += o.lost;
        let most = semantics::overflows_for(self.refusals);
        // A report may come before the refused post returns: allow the
        // refusals in flight (at most one per poster thread and the owner).
        ensure(self.reported <= most + self.lossy_posters, || {
            format!("{} overflows reported, {most} refusals seen", self.reported)
        })
    }

    /// The EVD reported end of stream to the consumer: closed, drained,
    /// and every loss reported first. A `post_lossy` counted as lost here
    /// returned `Lost`, so it committed its loss before the close (after
    /// it, the post is refused as closed): the report was due first.
    fn end_of_stream(&self) -> Check {
        ensure(self.closed() && self.queued() == 0, || {
            format!(
                "end of stream on {:?} at head {}",
                spec::Word::decode(self.word),
                self.head()
            )
        })?;
        let lost = semantics::overflows_for(self.refusals);
        ensure(self.reported >= lost, || {
            format!(
                "end of stream with {} of {lost} losses reported",
                self.reported
            )
        })
    }

    /// After an enable with `Invoke::Any` returned: no event waits with no
    /// instance to take it. With none in flight the head is what the
    /// handlers received; an event posted since found the token free and
    /// took it (an instance counted), or an instance was running and takes
    /// it before it exits.
    fn nothing_stranded(&self, invoke: Invoke) -> Check {
        if invoke != Invoke::Any || state::instances(self.word) > 0 {
            return Ok(());
        }
        ensure(self.queued() == 0, || {
            format!(
                "set_policy(.., Any) returned with {} events queued and no instance: {:?}",
                self.queued(),
                spec::Word::decode(self.word)
            )
        })
    }

    fn quiesced(&self, what: &str) -> Check {
        ensure(
            self.handlers == 0 && state::instances(self.word) == 0,
            || {
                format!(
                    "{what} returned with {} handlers running, {} instances counted",
                    self.handlers,
                    state::instances(self.word)
                )
            },
        )
    }

    fn handler_enter(&mut self, item: &Result<Ev, Overflow>) -> Check {
        ensure(!self.torn_down, || {
            "an upcall handler runs after teardown returned".into()
        })?;
        match item {
            Ok(ev) => self.deliver(ev)?,
            Err(o) => self.report(*o)?,
        }
        self.handlers += 1;
        ensure(
            state::policy(self.word) != state::PolicyBits::Single || self.handlers <= 1,
            || format!("{} handlers run under SingleInstance", self.handlers),
        )?;
        ensure(
            u64::from(self.handlers) <= state::instances(self.word),
            || {
                format!(
                    "{} handlers run but the word counts {} instances",
                    self.handlers,
                    state::instances(self.word)
                )
            },
        )
    }

    /// A `query()` snapshot; `exact` when the caller is the consumer in
    /// consumer mode (nobody else moves the head).
    fn query(&self, q: &Query, before: &Snapshot, last: &mut Option<Query>, exact: bool) -> Check {
        let bad = |why: &str| format!("query {why}: {q:?}");
        ensure(q.len <= q.capacity, || bad("len above capacity"))?;
        ensure(q.dequeued <= q.posted, || bad("dequeued above posted"))?;
        ensure(q.in_upcall == (q.upcalls_in_flight > 0), || {
            bad("in_upcall disagrees with upcalls_in_flight")
        })?;
        ensure(
            q.policy != UpcallPolicy::SingleInstance || q.upcalls_in_flight <= 1,
            || bad("several upcalls under SingleInstance"),
        )?;
        ensure(q.posted >= before.accepted, || {
            bad(&format!(
                "posted below the {} posts accepted",
                before.accepted
            ))
        })?;
        ensure(q.dequeued >= before.received, || {
            bad(&format!("dequeued below the {} received", before.received))
        })?;
        ensure(q.lost >= before.overflows, || {
            bad(&format!("lost below the {} losses seen", before.overflows))
        })?;
        ensure(!before.closed || q.closed, || bad("open after a close"))?;
        if exact {
            ensure(q.dequeued == self.received, || {
                bad(&format!("dequeued is not the {} received", self.received))
            })?;
        }
        if let Some(p) = last.replace(*q) {
            ensure(
                q.posted >= p.posted
                    && q.dequeued >= p.dequeued
                    && q.lost >= p.lost
                    && q.notifications >= p.notifications
                    && q.upcalls >= p.upcalls
                    && (q.closed || !p.closed),
                || bad(&format!("went back from {p:?}")),
            )?;
        }
        Ok(())
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            accepted: self.accepted.len() as u64,
            received: self.received,
            overflows: semantics::overflows_for(self.refusals),
            closed: self.closed(),
        }
    }
}

/// What the harness knew when a `query()` started.
struct Snapshot {
    accepted: u64,
    received: u64,
    overflows: u64,
    closed: bool,
}

fn with<R>(f: impl FnOnce(&mut Checker) -> R) -> R {
    CHECKER.with(|c| f(c.borrow_mut().as_mut().expect("inside an execution")))
}

/// A scheduling point of no consequence (a handler "doing work").
fn scheduling_point() {
    shuttle::sync::atomic::AtomicBool::new(false).load(std::sync::atomic::Ordering::Relaxed);
}

/// The upcall handler: records what it got, holds still for one scheduling
/// point, leaves. It captures nothing (the checker is thread-local), so it
/// may be dropped after its execution, as crossbeam-epoch defers it.
fn handler(item: Result<Ev, Overflow>, _more: bool) {
    trace(|| format!("handler {:?}", item.as_ref().map(Ev::id)));
    check(|c| c.handler_enter(&item));
    scheduling_point();
    check(|c| {
        c.handlers -= 1;
        Ok(())
    });
    drop(item);
}

/// A handler that re-enters its EVD: for each event of a script's poster it
/// is given, it also posts one event of its own from inside the upcall (on
/// whichever thread runs it), as [`HANDLER_POSTER`]. It owns `poster`, so
/// the EVD stays open until the handler is replaced and dropped, or torn
/// down.
fn reposting(
    poster: Poster<Ev>,
    log: Arc<DropLog>,
) -> impl Fn(Result<Ev, Overflow>, bool) + Send + Sync + 'static {
    let seq = std::sync::atomic::AtomicU32::new(0);
    move |item, more| {
        let reposts = matches!(&item, Ok(ev) if ev.poster != HANDLER_POSTER);
        handler(item, more);
        if reposts {
            let mut me = Actor {
                id: HANDLER_POSTER,
                seq: seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                log: log.clone(),
                last_query: None,
            };
            me.post(&poster);
            HANDLER_POSTS.set(HANDLER_POSTS.get() + 1);
        }
    }
}

thread_local! {
    /// Posts made by [`reposting`] handlers in the executions this OS
    /// thread ran (each runs on one: see [`CHECKER`]), for a test to see the
    /// path taken.
    static HANDLER_POSTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Events posted with a permit in the executions this OS thread ran.
    static PERMIT_SENDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Eventfd checks that had a notification to find, in the executions
    /// this OS thread ran.
    static FD_CHECKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The poster number of the events handlers post ([`reposting`]): above any
/// script's. Handlers post from any thread, overlapping under
/// ManyInstances, so their events have no order to keep.
const HANDLER_POSTER: usize = MAX_POSTERS + 1;

// ---------------------------------------------------------------------------
// The actors

struct Actor {
    /// The poster number for FIFO (the consumer posts as the last one).
    id: usize,
    seq: u32,
    log: Arc<DropLog>,
    last_query: Option<Query>,
}

impl Actor {
    fn event(&mut self) -> Ev {
        self.seq += 1;
        Ev {
            poster: self.id,
            seq: self.seq,
            payload: self.log.make(),
        }
    }

    fn post(&mut self, p: &Poster<Ev>) {
        let ev = self.event();
        let id = ev.id();
        check(|c| c.attempt(id));
        let r = p.post(ev);
        trace(|| format!("post {id}: {:?}", r.as_ref().map_err(|e| format!("{e:?}"))));
        match r {
            Ok(()) => check(|c| c.accept(id)),
            Err(PostError::Full(back)) => {
                check(|c| {
                    c.refusals.full += 1;
                    c.refuse(id, &back)
                });
                drop(back);
            }
            Err(PostError::Closed(back)) => {
                check(|c| {
                    ensure(c.closed(), || {
                        "post refused as closed on an open EVD".into()
                    })?;
                    c.refuse(id, &back)
                });
                drop(back);
            }
        }
    }

    /// [`PosterOp::Permit`]: take a permit if none is `held`, or send an
    /// event with the one held (`send`), or give it back.
    fn permit(&mut self, p: &Poster<Ev>, held: &mut Option<OwnedPermit<Ev>>, send: bool) {
        match held.take() {
            None => match self.take_permit(p) {
                Ok(permit) => *held = Some(permit),
                Err((e, _)) => {
                    trace(|| format!("try_reserve_owned: {e:?}"));
                    // Never at the permit limit: a poster holds one at most.
                    check(|c| {
                        ensure(e == BatchPostError::Full || c.closed(), || {
                            format!("try_reserve_owned refused as {e:?} on an open EVD")
                        })
                    });
                }
            },
            Some(permit) if send => {
                let ev = self.event();
                let id = ev.id();
                check(|c| c.attempt(id));
                let r = permit.send(ev);
                trace(|| {
                    format!(
                        "permit send {id}: {:?}",
                        r.as_ref().map(|_| ()).map_err(|e| format!("{e:?}"))
                    )
                });
                match r {
                    Ok(_) => {
                        PERMIT_SENDS.set(PERMIT_SENDS.get() + 1);
                        check(|c| c.accept(id))
                    }
                    Err(PostError::Closed(back)) => check(|c| {
                        ensure(c.closed(), || {
                            "permit send refused as closed on an open EVD".into()
                        })?;
                        c.refuse(id, &back)
                    }),
                    Err(PostError::Full(back)) => check(|c| {
                        c.refuse(id, &back)?;
                        Err(format!("a permit's send refused as full (event {id})"))
                    }),
                }
            }
            Some(permit) => drop(permit.release()),
        }
    }

    /// `try_reserve_owned`, in flight as a post is while it runs: refused
    /// as full, it may start the draining upcall from the head it loaded.
    fn take_permit(
        &mut self,
        p: &Poster<Ev>,
    ) -> Result<OwnedPermit<Ev>, (BatchPostError, Poster<Ev>)> {
        // No event's id: those count up from 0.
        let key = u64::MAX - self.id as u64;
        check(|c| {
            let h = c.head();
            c.in_flight.insert(key, h);
            Ok(())
        });
        let r = p.clone().try_reserve_owned();
        check(|c| {
            c.in_flight.remove(&key);
            Ok(())
        });
        r
    }

    fn post_lossy(&mut self, p: &Poster<Ev>) {
        let ev = self.event();
        let id = ev.id();
        let me = shuttle::thread::current().id();
        check(|c| {
            c.lossy_begun = true;
            c.in_post_lossy.push(me);
            c.attempt(id)
        });
        let r = p.post_lossy(ev);
        with(|c| c.in_post_lossy.retain(|&t| t != me));
        trace(|| {
            format!(
                "post_lossy {id}: {:?}",
                r.as_ref().map_err(|e| format!("{e:?}"))
            )
        });
        match r {
            Ok(Lossy::Posted) => check(|c| c.accept(id)),
            Ok(Lossy::Lost) => check(|c| {
                c.refusals.lost += 1;
                ensure(!c.delivered.contains(&id), || {
                    format!("event {id} was lost, yet delivered")
                })?;
                c.attempted.remove(&id);
                c.in_flight.remove(&id);
                Ok(())
            }),
            Err(PostError::Full(back)) => {
                check(|c| {
                    c.refuse(id, &back)?;
                    Err("post_lossy returned Full".into())
                });
                drop(back);
            }
            Err(PostError::Closed(back)) => {
                check(|c| {
                    ensure(c.closed() || c.close_begun, || {
                        "lossy post refused as closed before any close began".into()
                    })?;
                    c.refuse(id, &back)
                });
                drop(back);
            }
        }
    }

    fn post_batch(&mut self, p: &Poster<Ev>, n: usize) {
        let mut evs: Vec<Ev> = (0..n).map(|_| self.event()).collect();
        let ids: Vec<u64> = evs.iter().map(Ev::id).collect();
        check(|c| ids.iter().try_for_each(|&id| c.attempt(id)));
        let r = p.post_batch(&mut evs);
        trace(|| format!("post_batch {ids:?}: {r:?}"));
        let posted = match r {
            Ok(k) => {
                check(|_| {
                    ensure((1..=n).contains(&k), || {
                        format!("post_batch of {n} posted {k}")
                    })
                });
                k
            }
            Err(BatchPostError::Full) => {
                check(|c| {
                    c.refusals.full += 1;
                    Ok(())
                });
                0
            }
            Err(BatchPostError::Closed) => {
                check(|c| {
                    ensure(c.closed(), || {
                        "batch refused as closed on an open EVD".into()
                    })
                });
                0
            }
        };
        check(|c| {
            ensure(evs.len() == n - posted, || {
                format!("post_batch posted {posted} of {n} and left {}", evs.len())
            })?;
            ids[..posted].iter().try_for_each(|&id| c.accept(id))?;
            ids[posted..]
                .iter()
                .zip(&evs)
                .try_for_each(|(&id, back)| c.refuse(id, back))
        });
        drop(evs);
    }

    fn query(&mut self, q: impl FnOnce() -> Query, exact: bool) {
        let before = with(|c| c.snapshot());
        let q = q();
        trace(|| format!("query {q:?}"));
        let mut last = self.last_query.take();
        check(|c| c.query(&q, &before, &mut last, exact));
        self.last_query = last;
    }
}

/// A poster's `PostSink` and the id of the event it holds, if any.
#[derive(Default)]
struct SinkSide {
    sink: Option<PostSink<Ev>>,
    held: Option<u64>,
}

impl SinkSide {
    /// One [`PosterOp::SinkSend`].
    fn step(&mut self, p: &Poster<Ev>, me: &mut Actor) {
        let waker = Waker::from(Arc::new(NoopWake));
        let mut cx = Context::from_waker(&waker);
        let sink = self.sink.get_or_insert_with(|| p.clone().into_sink());
        if self.held.is_none() {
            match Pin::new(&mut *sink).poll_ready(&mut cx) {
                Poll::Ready(Ok(())) => {}
                r => {
                    check(|_| Err(format!("poll_ready with nothing held: {r:?}")));
                    return;
                }
            }
            let ev = me.event();
            let id = ev.id();
            check(|c| c.attempt(id));
            if let Err(e) = Pin::new(&mut *sink).start_send(ev) {
                trace(|| format!("sink start_send {id}: {e:?}"));
                let closed = e.is_closed();
                let back = e.into_inner();
                check(|c| {
                    ensure(closed && c.closed(), || {
                        "start_send refused on an open EVD".into()
                    })?;
                    c.refuse(id, &back)
                });
                return;
            }
            self.held = Some(id);
        }
        let id = self.held.expect("an event is in flight");
        // Every reservation of this poll loads a head after this point.
        check(|c| {
            let h = c.head();
            if let Some(start) = c.in_flight.get_mut(&id) {
                *start = h;
            }
            Ok(())
        });
        let r = Pin::new(&mut *sink).poll_flush(&mut cx);
        trace(|| format!("sink flush {id}: {r:?}"));
        match r {
            Poll::Pending => {}
            Poll::Ready(Ok(())) => {
                self.held = None;
                check(|c| c.accept(id));
            }
            Poll::Ready(Err(e)) => {
                self.held = None;
                let closed = e.is_closed();
                let back = e.into_inner();
                check(|c| {
                    ensure(closed && c.closed(), || {
                        "flush refused on an open EVD".into()
                    })?;
                    c.refuse(id, &back)
                });
            }
        }
    }

    /// Drop the sink; the event it still holds is dropped with it, never
    /// posted.
    fn drop_sink(&mut self) {
        self.sink = None;
        if let Some(id) = self.held.take() {
            check(|c| {
                ensure(!c.delivered.contains(&id), || {
                    format!("event {id} was held by a dropped sink, yet delivered")
                })?;
                c.attempted.remove(&id);
                c.in_flight.remove(&id);
                Ok(())
            });
        }
    }
}

fn poster_thread(mut p: Poster<Ev>, ops: Vec<Op>, mut me: Actor) {
    let mut sink = SinkSide::default();
    let mut permit = None;
    for op in ops {
        let mut op = PosterOp::of(op);
        if sink.held.is_some()
            && matches!(
                op,
                PosterOp::Post | PosterOp::PostLossy | PosterOp::PostBatch(_) | PosterOp::Permit(_)
            )
        {
            op = PosterOp::SinkSend;
        }
        trace(|| format!("{op:?}"));
        match op {
            PosterOp::SinkSend => sink.step(&p, &mut me),
            PosterOp::Post => me.post(&p),
            PosterOp::PostLossy => me.post_lossy(&p),
            PosterOp::PostBatch(n) => me.post_batch(&p, n),
            PosterOp::Permit(send) => me.permit(&p, &mut permit, send),
            PosterOp::Query => me.query(|| p.query(), false),
            PosterOp::SetUnwaitable(true) => {
                with(|k| k.unwaitable_set = true);
                p.set_unwaitable()
            }
            PosterOp::SetUnwaitable(false) => p.clear_unwaitable(),
            PosterOp::Clone => p = p.clone(),
            PosterOp::Close => {
                with(|k| k.close_begun = true);
                p.close();
                check(|c| ensure(c.closed(), || "open after close returned".into()));
            }
            PosterOp::Drop => break,
        }
    }
    with(|k| k.close_begun = true);
    sink.drop_sink();
    drop(permit); // given back, with the handle it holds
    drop(p);
}

/// What the consumer thread holds.
enum Side {
    Consumer(Consumer<Ev>),
    Upcalls(Upcalls<Ev>),
    Gone,
}

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// The consumer is about to call something that dequeues up to `n` events.
fn dequeuing(n: usize) {
    with(|k| k.dequeuing = n as u64);
}

fn dequeued(r: Result<Ev, TryDequeueError>) {
    trace(|| format!("dequeued {:?}", r.as_ref().map(Ev::id)));
    with(|k| k.dequeuing = 0);
    match r {
        Ok(ev) => {
            check(|c| c.deliver(&ev));
            drop(ev);
        }
        Err(TryDequeueError::Overflow(o)) => check(|c| c.report(o)),
        Err(TryDequeueError::Empty) => {}
        Err(TryDequeueError::Closed) => check(|c| c.end_of_stream()),
    }
}

/// The consumer thread's two CNOs and what it knows of its binding.
struct CnoSide {
    cnos: [Cno; 2],
    /// The CNO the EVD is bound to (by its place in `cnos`).
    bound: Option<usize>,
    /// The CNO the EVD is bound to was dropped (`cnos` holds a new one in
    /// its place): its keys reach nobody until a move, and enables are
    /// refused.
    bound_dropped: bool,
    /// Enables (returned `Armed`) not yet answered by a key: a key is legal
    /// only against one. Zeroed by disable and unbind (they remove the key);
    /// kept by a drop of the CNO (a move takes the pending key along).
    credit: u32,
    /// Per CNO, the waker of its last poll if that poll was `Pending`: the
    /// first key pushed after it must wake it.
    pending_polls: [Option<Arc<CountWake>>; 2],
}

/// A waker that counts its wakes.
#[derive(Default)]
struct CountWake(std::sync::atomic::AtomicUsize);

/// The consumer thread's eventfd, if it asked for one: every notification
/// counted after the ask must reach it (written by its notifier, or by the
/// ask's own read-back of a `NOTIFIED` left before the fd existed). Checked
/// only while the EVD never had upcalls: `Query::notifications` counts
/// upcall starts too, which wake no target.
#[derive(Default)]
struct FdSide {
    fd: Option<evd::NotifyFd>,
    /// `Query::notifications` just before the first ask.
    notifications_before: u64,
    /// What the acknowledgements read so far.
    counted: u64,
    /// `Query::notifications` when the consumer was dropped (the end's
    /// query has no consumer then).
    notifications_at_drop: Option<u64>,
    /// The consumer went into upcall mode.
    upcalls: bool,
}

impl FdSide {
    fn ask(&mut self, c: &mut Consumer<Ev>) {
        let before = c.query().notifications;
        let fd = c.notify_fd().expect("eventfd");
        trace(|| "notify_fd".into());
        if self.fd.is_none() {
            self.notifications_before = before;
            self.fd = Some(fd);
        }
    }

    fn acknowledge(&mut self) {
        if let Some(fd) = &self.fd {
            let n = fd.acknowledge().expect("eventfd read");
            trace(|| format!("acknowledge: {n}"));
            self.counted += n;
        }
    }

    /// At the end, all threads joined: if a notification was counted after
    /// the fd was asked for, the fd was written at least once. `None`: the
    /// consumer was dropped (its count then is used).
    fn check(mut self, notifications: Option<u64>) {
        let Some(notifications) = notifications.or(self.notifications_at_drop) else {
            return;
        };
        if self.upcalls {
            return;
        }
        self.acknowledge();
        if self.fd.is_some() && notifications > self.notifications_before {
            FD_CHECKS.set(FD_CHECKS.get() + 1);
            let (before, counted) = (self.notifications_before, self.counted);
            check(|_| {
                ensure(counted > 0, || {
                    format!(
                        "{notifications} notifications ({before} before the eventfd), none on it"
                    )
                })
            });
        }
    }
}

impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl CnoSide {
    fn new() -> CnoSide {
        CnoSide {
            cnos: [Cno::new(1).unwrap(), Cno::new(1).unwrap()],
            bound: None,
            bound_dropped: false,
            credit: 0,
            pending_polls: [None, None],
        }
    }

    /// The binding is gone (unbind, drop, into_upcalls): nothing is due.
    fn unbound(&mut self) {
        self.bound = None;
        self.bound_dropped = false;
        self.credit = 0;
        with(|k| k.close_key_due = false);
    }

    /// A key from CNO `i`: it must be the bound (live) CNO's key, against
    /// an enable.
    fn got(&mut self, i: usize, key: u64) {
        trace(|| format!("cno {i}: key {key}"));
        let (bound, dropped, credit) = (self.bound, self.bound_dropped, self.credit);
        check(|_| {
            ensure(
                bound == Some(i) && !dropped && key == 100 + i as u64,
                || format!("key {key} from CNO {i} while bound to {bound:?} (dropped: {dropped})"),
            )?;
            ensure(credit > 0, || format!("key {key} without an enable"))
        });
        self.credit = self.credit.saturating_sub(1);
        with(|k| k.close_key_due = false);
    }

    /// Take every ready key; each must come from the bound CNO, with its
    /// key, against an enable.
    fn take(&mut self) {
        for i in 0..2 {
            while let Some(key) = self.cnos[i].try_next() {
                self.got(i, key);
            }
        }
    }

    /// Poll CNO `i` as a stream: a key is checked as taken, `Pending`
    /// leaves its waker, which a key pushed after must wake.
    fn poll(&mut self, i: usize) {
        use futures_core::Stream;
        let count = Arc::new(CountWake::default());
        let waker = Waker::from(count.clone());
        let r = Pin::new(&mut self.cnos[i]).poll_next(&mut Context::from_waker(&waker));
        trace(|| format!("poll cno {i}: {r:?}"));
        self.pending_polls[i] = None;
        match r {
            Poll::Ready(Some(key)) => self.got(i, key),
            Poll::Ready(None) => check(|_| Err(format!("CNO {i}'s stream ended"))),
            Poll::Pending => self.pending_polls[i] = Some(count),
        }
    }

    /// At the end, all threads joined: a CNO whose last poll was `Pending`
    /// and that holds a key now was woken since that poll.
    fn check_pending_polls(&mut self) {
        for i in 0..2 {
            let Some(count) = self.pending_polls[i].take() else {
                continue;
            };
            if let Some(key) = self.cnos[i].try_next() {
                let wakes = count.0.load(std::sync::atomic::Ordering::Relaxed);
                check(|_| {
                    ensure(wakes > 0, || {
                        format!("CNO {i} holds key {key}, and its pending poll was never woken")
                    })
                });
                self.got(i, key);
            }
        }
    }

    /// After a disable, unbind or move: CNO `i` has no key for this EVD.
    fn none_from(&mut self, i: usize, what: &str) {
        let got = self.cnos[i].try_next();
        check(|_| ensure(got.is_none(), || format!("key {got:?} after {what}")));
    }
}

fn cno_step(c: &mut Consumer<Ev>, op: CnoOp, s: &mut CnoSide) {
    match op {
        CnoOp::Bind(i) => {
            let r = c.bind_cno(&s.cnos[i], 100 + i as u64);
            trace(|| format!("bind to {i}: {r:?}"));
            let was = s.bound;
            check(|_| match (was, r) {
                (None, Ok(())) | (Some(_), Err(CnoError::AlreadyBound)) => Ok(()),
                other => Err(format!("bind_cno: {other:?}")),
            });
            if was.is_none() {
                s.bound = Some(i);
                s.credit = 0;
            }
        }
        CnoOp::Enable => {
            let r = c.enable_cno();
            trace(|| format!("enable_cno: {r:?}"));
            let (bound, dropped) = (s.bound, s.bound_dropped);
            check(|k| match (bound, r) {
                (None, Err(CnoError::NotBound)) => Ok(()),
                (Some(_), Err(CnoError::CnoDropped)) if dropped => Ok(()),
                (Some(_), Ok(ArmStatus::Armed | ArmStatus::Pending)) if !dropped => Ok(()),
                (Some(_), Ok(ArmStatus::Closed)) if !dropped => k.end_of_stream(),
                other => Err(format!("enable_cno: {other:?}")),
            });
            if r == Ok(ArmStatus::Armed) {
                s.credit += 1;
            }
        }
        CnoOp::Disable => {
            c.disable_cno();
            if let Some(i) = s.bound {
                s.credit = 0;
                with(|k| k.close_key_due = false);
                s.none_from(i, "disable_cno");
            }
        }
        CnoOp::Modify => {
            let to = s.bound.map_or(0, |i| 1 - i);
            let r = c.modify_cno(&s.cnos[to], 100 + to as u64);
            trace(|| format!("modify_cno to {to}: {r:?}"));
            check(|_| ensure(r.is_ok(), || format!("modify_cno: {r:?}")));
            if let Some(from) = s.bound.replace(to) {
                s.none_from(from, "modify_cno");
            } else {
                s.credit = 0;
            }
            s.bound_dropped = false;
        }
        CnoOp::Unbind => {
            let r = c.unbind_cno();
            let bound = s.bound;
            check(|_| {
                ensure(r == bound.map(|i| 100 + i as u64), || {
                    format!("unbind_cno: {r:?} while bound to {bound:?}")
                })
            });
            s.unbound();
            if let Some(i) = bound {
                s.none_from(i, "unbind_cno");
            }
        }
        CnoOp::Take => s.take(),
        CnoOp::Drop(i) => {
            s.cnos[i] = Cno::new(1).unwrap();
            s.pending_polls[i] = None;
            if s.bound == Some(i) {
                s.bound_dropped = true;
            }
        }
        CnoOp::Poll(i) => s.poll(i),
    }
}

fn consumer_step(side: Side, op: Op, me: &mut Actor, cno: &mut CnoSide, fd: &mut FdSide) -> Side {
    with(|k| k.owner_op_head = k.received);
    match side {
        Side::Consumer(mut c) => {
            let cap = state::capacity(with(|k| k.word)) as usize;
            let op = ConsumerOp::of(op, cap);
            trace(|| format!("{op:?}"));
            match op {
                ConsumerOp::TryDequeue => {
                    dequeuing(1);
                    dequeued(c.try_dequeue())
                }
                ConsumerOp::Batch(max) => {
                    let mut out = Vec::new();
                    dequeuing(max);
                    let r = c.dequeue_batch(&mut out, max);
                    with(|k| k.dequeuing = 0);
                    match r {
                        Ok(n) => {
                            trace(|| {
                                format!("batch {:?}", out.iter().map(Ev::id).collect::<Vec<_>>())
                            });
                            check(|k| {
                                ensure(n == out.len() && n <= max, || {
                                    format!("dequeue_batch({max}) said {n}, gave {}", out.len())
                                })?;
                                out.iter().try_for_each(|ev| k.deliver(ev))
                            });
                        }
                        Err(TryDequeueError::Empty) => {
                            check(|_| Err("dequeue_batch returned Empty".into()))
                        }
                        Err(e) => dequeued(Err(e)),
                    }
                    drop(out);
                }
                ConsumerOp::Arm => {
                    with(|k| {
                        k.arming = true;
                        k.arm_saw = None;
                    });
                    let r = c.arm();
                    with(|k| k.arming = false);
                    trace(|| format!("arm: {r:?}"));
                    if r == ArmStatus::Armed {
                        check(|k| {
                            ensure(k.arm_saw.is_none_or(|n| n == 0), || {
                                format!("arm() Armed with {:?} events queued at its CAS", k.arm_saw)
                            })
                        });
                    }
                    if r == ArmStatus::Closed {
                        check(|k| k.end_of_stream());
                    }
                }
                ConsumerOp::Disarm => c.disarm(),
                ConsumerOp::Wait(k, zero) => {
                    let timeout = zero.then_some(Duration::ZERO);
                    let r = c.wait(k, timeout);
                    trace(|| format!("wait({k}): {r:?}"));
                    check(|ck| match r {
                        Ok(n) => ensure(n >= k && n as u64 <= ck.queued(), || {
                            format!("wait({k}) found {n} ready, {} queued", ck.queued())
                        }),
                        Err(WaitError::InvalidThreshold {
                            threshold,
                            capacity,
                        }) => ensure(threshold == k && (k == 0 || k > capacity), || {
                            format!("wait({k}) refused: {r:?}")
                        }),
                        Err(WaitError::Timeout { available }) => {
                            ensure(zero && available < k, || format!("wait({k}): {r:?}"))
                        }
                        Err(WaitError::Unwaitable) => ensure(ck.unwaitable_set, || {
                            format!("wait({k}) Unwaitable; no set_unwaitable ever began")
                        }),
                        Err(WaitError::Overflow(o)) => ck.report(o),
                        Err(WaitError::Closed { available }) => {
                            ensure(ck.closed() && available < k, || format!("wait({k}): {r:?}"))
                        }
                        Err(e) => Err(format!("wait({k}): unexpected {e:?}")),
                    });
                }
                ConsumerOp::Resize(cap) => {
                    let r = c.resize(cap);
                    trace(|| format!("resize({cap}): {r:?}"));
                    check(|k| match r {
                        Ok(n) => ensure(n == cap && state::capacity(k.word) == cap as u64, || {
                            format!(
                                "resize({cap}) returned {n}; the word says {}",
                                state::capacity(k.word)
                            )
                        }),
                        Err(ResizeError::ZeroCapacity) => ensure(cap == 0, || "zero?".into()),
                        Err(ResizeError::TooSmall { queued, capacity }) => {
                            ensure(capacity == cap && queued > capacity, || format!("{r:?}"))
                        }
                        Err(e) => Err(format!("resize({cap}): {e:?}")),
                    });
                }
                ConsumerOp::Cno(op) => cno_step(&mut c, op, cno),
                ConsumerOp::IntoUpcalls(policy, invoke) => {
                    fd.upcalls = true;
                    cno.unbound(); // into_upcalls unbinds first
                    with(|k| {
                        k.mode = Mode::Upcalls;
                        k.torn_down = false;
                    });
                    return Side::Upcalls(c.into_upcalls(policy, invoke, handler));
                }
                ConsumerOp::Query => {
                    let q = &c;
                    me.query(|| q.query(), true)
                }
                ConsumerOp::Post => {
                    // The temporary handle may be the last one.
                    with(|k| k.close_begun = true);
                    me.post(&c.poster())
                }
                ConsumerOp::SpinBudget(budget) => c.set_spin_budget(budget),
                ConsumerOp::PollRecv => {
                    let waker = Waker::from(Arc::new(NoopWake));
                    let mut cx = Context::from_waker(&waker);
                    let mut fut = c.recv();
                    dequeuing(1);
                    let r = Pin::new(&mut fut).poll(&mut cx);
                    match r {
                        Poll::Ready(Ok(ev)) => dequeued(Ok(ev)),
                        Poll::Ready(Err(RecvError::Overflow(o))) => {
                            dequeued(Err(TryDequeueError::Overflow(o)))
                        }
                        Poll::Ready(Err(RecvError::Closed)) => {
                            dequeued(Err(TryDequeueError::Closed))
                        }
                        Poll::Ready(Err(e)) => check(|_| Err(format!("recv: unexpected {e:?}"))),
                        Poll::Pending => with(|k| k.dequeuing = 0),
                    }
                }
                ConsumerOp::NotifyFd => fd.ask(&mut c),
                ConsumerOp::Acknowledge => fd.acknowledge(),
                ConsumerOp::Close => {
                    with(|k| k.close_begun = true);
                    c.close();
                    check(|k| ensure(k.closed(), || "open after close returned".into()));
                }
                ConsumerOp::Drop => {
                    with(|k| k.close_begun = true);
                    fd.notifications_at_drop = Some(c.query().notifications);
                    drop(c);
                    if let Some(i) = cno.bound {
                        cno.unbound();
                        cno.none_from(i, "dropping the consumer");
                    }
                    return Side::Gone;
                }
            }
            Side::Consumer(c)
        }
        Side::Upcalls(mut u) => {
            let op = UpcallOp::of(op);
            trace(|| format!("{op:?}"));
            match op {
                UpcallOp::SetPolicy(policy, invoke) => {
                    if policy != UpcallPolicy::Disabled && policy != UpcallPolicy::Teardown {
                        with(|k| k.torn_down = false);
                    }
                    let r = u.set_policy(policy, invoke);
                    check(|k| {
                        ensure(r.is_ok(), || format!("set_policy({policy:?}): {r:?}"))?;
                        match policy {
                            UpcallPolicy::Teardown => {
                                k.quiesced("set_policy(Teardown)")?;
                                k.torn_down = true;
                                Ok(())
                            }
                            UpcallPolicy::SingleInstance => {
                                ensure(k.handlers <= 1 && state::instances(k.word) <= 1, || {
                                    format!(
                                        "set_policy(SingleInstance) returned with {} handlers, {} instances",
                                        k.handlers,
                                        state::instances(k.word)
                                    )
                                })?;
                                k.nothing_stranded(invoke)
                            }
                            UpcallPolicy::ManyInstances => k.nothing_stranded(invoke),
                            _ => Ok(()),
                        }
                    });
                }
                UpcallOp::Teardown => {
                    let c = u.teardown();
                    check(|k| {
                        k.quiesced("teardown")?;
                        k.torn_down = true;
                        k.mode = Mode::Consumer;
                        Ok(())
                    });
                    return Side::Consumer(c);
                }
                UpcallOp::Post => {
                    with(|k| k.close_begun = true);
                    me.post(&u.poster())
                }
                UpcallOp::Query => {
                    let q = &u;
                    me.query(|| q.query(), false)
                }
                UpcallOp::SetHandler { reposts: false } => u.set_handler(handler),
                UpcallOp::SetHandler { reposts: true } => {
                    // The handler owns a poster: whichever thread drops the
                    // handler may close the EVD.
                    with(|k| k.close_begun = true);
                    u.set_handler(reposting(u.poster(), me.log.clone()))
                }
                UpcallOp::Drop => {
                    with(|k| k.close_begun = true);
                    drop(u);
                    check(|k| {
                        k.quiesced("dropping the Upcalls")?;
                        k.torn_down = true;
                        ensure(k.closed(), || "the consumer's drop did not close".into())
                    });
                    return Side::Gone;
                }
            }
            Side::Upcalls(u)
        }
        Side::Gone => Side::Gone,
    }
}

/// Dequeue (and wait) until end of stream.
fn drain(c: &mut Consumer<Ev>) {
    loop {
        dequeuing(1);
        match c.try_dequeue() {
            Err(TryDequeueError::Closed) => return dequeued(Err(TryDequeueError::Closed)),
            Err(TryDequeueError::Empty) => {
                with(|k| k.dequeuing = 0);
                match c.wait(1, None) {
                    Ok(_) | Err(WaitError::Closed { .. }) => {}
                    Err(WaitError::Overflow(o)) => check(|k| k.report(o)),
                    Err(WaitError::Unwaitable) => shuttle::thread::yield_now(),
                    Err(e) => check(|_| Err(format!("draining: wait(1): {e:?}"))),
                }
            }
            r => dequeued(r),
        }
    }
}

fn consumer_thread(
    c: Consumer<Ev>,
    ops: Vec<Op>,
    mut me: Actor,
) -> (Option<Consumer<Ev>>, CnoSide, FdSide) {
    with(|k| k.owner = Some(shuttle::thread::current().id()));
    let mut cno = CnoSide::new();
    let mut fd = FdSide::default();
    let mut side = Side::Consumer(c);
    for op in ops {
        side = consumer_step(side, op, &mut me, &mut cno, &mut fd);
    }
    let mut c = match side {
        Side::Consumer(c) => c,
        Side::Upcalls(u) => {
            trace(|| "finish: teardown".into());
            let c = u.teardown();
            check(|k| {
                k.quiesced("teardown")?;
                k.mode = Mode::Consumer;
                Ok(())
            });
            c
        }
        Side::Gone => return (None, cno, fd),
    };
    trace(|| "finish: drain".into());
    drain(&mut c);
    (Some(c), cno, fd)
}

/// One execution: the body shuttle runs.
fn execution(input: &Input) {
    let posters = input.posters.len();
    let cap_log2 = u32::from(input.cap_log2 % 4);
    CHECKER.with(|c| *c.borrow_mut() = Some(Checker::new(cap_log2, posters)));
    let log = DropLog::new();
    let actor = |id| Actor {
        id,
        seq: 0,
        log: log.clone(),
        last_query: None,
    };
    evd::model_room_barrier_without_membarrier(input.without_membarrier);
    let (poster, consumer) = evd::bounded::<Ev>(1 << cap_log2).unwrap();
    with(|k| k.addr = Some(consumer.state_word_addr()));
    let mut handles = Vec::new();
    let mut first = Some(poster);
    for (i, ops) in input.posters.iter().enumerate() {
        let p = if i + 1 == posters {
            first.take().unwrap()
        } else {
            first.as_ref().unwrap().clone()
        };
        let (ops, me) = (ops.clone(), actor(i));
        handles.push(
            shuttle::thread::Builder::new()
                .name(format!("poster-{i}"))
                .spawn(move || poster_thread(p, ops, me))
                .unwrap(),
        );
    }
    let (ops, me) = (input.consumer.clone(), actor(posters));
    let consumer = shuttle::thread::Builder::new()
        .name("consumer".into())
        .spawn(move || consumer_thread(consumer, ops, me))
        .unwrap();
    for h in handles {
        h.join().unwrap();
    }
    let (consumer, mut cno, fd) = consumer.join().unwrap();
    with(|k| k.owner = Some(shuttle::thread::current().id()));
    cno.check_pending_polls();
    // Closing an enabled EVD is news for its CNO: the key is ready now,
    // unless it was taken, disabled or unbound since, or the CNO dropped.
    if let (Some(i), false, true) = (cno.bound, cno.bound_dropped, with(|k| k.close_key_due)) {
        let got = cno.cnos[i].try_next();
        check(|_| {
            ensure(got == Some(100 + i as u64), || {
                format!("closed while enabled on CNO {i}, but it holds {got:?}")
            })
        });
    }
    cno.take();
    fd.check(consumer.as_ref().map(|c| c.query().notifications));
    if let Some(mut c) = consumer {
        // Every loss is told before the end of stream: nothing comes after.
        dequeuing(1);
        match c.try_dequeue() {
            Err(TryDequeueError::Closed) => {}
            r => check(|_| Err(format!("after end of stream: {:?}", r.map(|e| e.id())))),
        }
        let q = c.query();
        check(|k| {
            k.quiesced("the end")?;
            ensure(k.accepted == k.delivered, || {
                let lost: Vec<_> = k.accepted.difference(&k.delivered).collect();
                let extra: Vec<_> = k.delivered.difference(&k.accepted).collect();
                format!("events lost: {lost:?}; delivered but not accepted: {extra:?}")
            })?;
            let want = semantics::overflows_for(k.refusals);
            ensure(k.reported == want && q.lost == want, || {
                format!(
                    "{:?} should make {want} overflows; {} reported, the counter says {}",
                    k.refusals, k.reported, q.lost
                )
            })?;
            ensure(
                q.posted == k.accepted.len() as u64 && q.dequeued == k.received && q.closed,
                || format!("final query {q:?}"),
            )
        });
    } else {
        check(|k| {
            ensure(k.delivered.is_subset(&k.accepted), || {
                "delivered but not accepted".into()
            })
        });
    }
    // Every handle is gone now: the ring's leftovers were dropped with it.
    let drops = std::panic::catch_unwind(|| log.assert_all_dropped_once());
    check(|_| drops.map_err(|_| "an event was leaked or dropped twice".to_string()));
    CHECKER.with(|c| c.borrow_mut().take());
}

/// Run one input under shuttle; panics on a finding.
pub fn run(input: &Input) {
    static OBSERVER: std::sync::Once = std::sync::Once::new();
    OBSERVER.call_once(|| {
        evd::set_cas_observer(observe);
    });
    let mut config = shuttle::Config::new();
    config.failure_persistence = shuttle::FailurePersistence::None;
    config.max_steps = shuttle::MaxSteps::FailAfter(MAX_STEPS);
    config.silence_warnings = true;
    config.stack_size = 0x4_0000;
    let input = Arc::new(input.clone());
    let runner = shuttle::Runner::new(ByteScheduler::new(input.schedule.clone()), config);
    runner.run(move || execution(&input));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        let mut rng = crate::Rng(0xdec0_de00_1234_5678);
        for _ in 0..200 {
            let bytes = rng.bytes(300);
            let input = Input::decode(&bytes);
            assert_eq!(Input::decode(&input.encode()), input);
        }
    }

    #[test]
    fn seed_corpus_replays() {
        let n = crate::replay::<Input>("schedule", run);
        assert!(n > 0, "no seed corpus for schedule");
    }

    /// Each ran against the real code and failed before its fix (checked
    /// by putting the fix back out): named here so that none goes missing.
    #[test]
    fn regressions_replay_against_the_real_code() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions/schedule");
        for name in [
            // Formerly state_machine/single-instance-two-upcalls: two
            // ManyInstances handlers running, Disabled, then SingleInstance
            // returned without waiting for them.
            "single-instance-two-upcalls",
            // Formerly state_machine/single-instance-two-upcalls-2: Many ->
            // SingleInstance quiesced only if instances were counted at its
            // load; a post started one between the load and the CAS.
            "single-instance-two-upcalls-2",
            // Found by this target on the core before 0eef999: a poster's
            // query() loaded the word, then the head, and a dequeue in
            // between made len wrap to 2^45 - 2 (query() now reads the head
            // before and after the word).
            "poster-query-len-wraps",
            // set_policy(Any) starts an instance for a head it loaded before
            // its CAS; an instance dequeued meanwhile (benign: the new
            // instance finds nothing and ends). The harness allows it.
            "set-policy-any-with-a-stale-head",
            // Found by this target on the first CNO: modify_cno to a CNO of
            // one EVD whose two slots both waited for the waiter's pop of a
            // stale index was refused as Full with nothing bound there (a
            // bind now reclaims a releasing slot).
            "cno-modify-to-a-cno-whose-slots-all-wait-for-a-pop",
        ] {
            let bytes = std::fs::read(dir.join(name)).expect(name);
            run(&Input::decode(&bytes));
        }
    }

    /// A poster's losses before its close, met by a consumer that takes a
    /// report, then an event, then finds nothing ready: under every
    /// schedule tried, each loss is reported before the end of stream.
    #[test]
    fn losses_before_a_close_are_reported_before_the_end_of_stream() {
        let op = |kind, arg| Op { kind, arg };
        let mut rng = crate::Rng(0x1055_bef0_4e00_0e4d);
        for _ in 0..300 {
            run(&Input {
                cap_log2: 0,
                without_membarrier: false,
                consumer: vec![op(0, 0); 8],
                posters: vec![vec![op(0, 0), op(6, 0), op(6, 0), op(6, 0), op(14, 0)]],
                schedule: rng.bytes(64),
            });
        }
    }

    /// A consumer enabled on its CNO and armed waits for three events with
    /// two queued; a poster posts (lossy, then plain), then makes the EVD
    /// unwaitable: the wait gives up, and its withdrawal hands the queued
    /// event to the CNO (under every schedule tried, each word a successor
    /// per the model, which has no plain disarm and no loss notified from
    /// a thread outside `post_lossy`).
    #[test]
    fn a_wait_given_up_hands_its_queued_event_to_the_cno() {
        let op = |kind, arg| Op { kind, arg };
        let mut rng = crate::Rng(0x0c40_d15a_4e00_0001);
        for _ in 0..300 {
            run(&Input {
                cap_log2: 2,
                without_membarrier: false,
                consumer: vec![op(15, 224), op(15, 230), op(5, 0), op(8, 3), op(15, 248)],
                posters: vec![vec![op(6, 0), op(0, 0), op(12, 1), op(11, 0), op(11, 0)]],
                schedule: rng.bytes(64),
            });
        }
    }

    #[test]
    fn random_inputs() {
        let mut rng = crate::Rng(0x5c4e_d01e_f00d_beef);
        for _ in 0..300 {
            let bytes = rng.bytes(600);
            run(&Input::decode(&bytes));
        }
    }

    /// Random inputs whose consumer script is half CNO operations (random
    /// bytes reach them in under 1% of consumer ops).
    pub(crate) fn cno_heavy(rng: &mut crate::Rng) -> Input {
        let mut input = Input::decode(&rng.bytes(600));
        let b = rng.bytes(2 * input.consumer.len());
        for (i, op) in input.consumer.iter_mut().enumerate() {
            if b[2 * i] & 1 == 0 {
                *op = Op {
                    kind: 15,
                    arg: 208 + b[2 * i + 1] % 48,
                };
            }
        }
        input
    }

    /// Random inputs whose consumer goes into upcall mode at once (every
    /// policy) and installs the handler that posts into its own EVD.
    #[test]
    fn random_inputs_with_a_handler_that_posts_into_its_evd() {
        let mut rng = crate::Rng(0x4e47_e1a7_0b05_7001);
        let before = HANDLER_POSTS.get();
        for i in 0..300u32 {
            let mut input = Input::decode(&rng.bytes(600));
            let into = Op {
                kind: 11,
                arg: (i % 3) as u8 | (i as u8 & 0x10),
            };
            let set_handler = Op { kind: 6, arg: 0x40 };
            input.consumer.splice(0..0, [into, set_handler]);
            input.consumer.truncate(MAX_CONSUMER_OPS);
            run(&input);
        }
        assert!(HANDLER_POSTS.get() > before + 100, "the handlers posted");
    }

    /// Random inputs whose posters' scripts are half permit ops (taken,
    /// sent with, given back), the consumer's in upcall mode for a third of
    /// them (a ring full of promised slots has nothing to drain).
    #[test]
    fn random_permit_inputs() {
        let mut rng = crate::Rng(0x9e41_7a11_5e4d_0003);
        let before = PERMIT_SENDS.get();
        for i in 0..300u32 {
            let mut input = Input::decode(&rng.bytes(600));
            let b = rng.bytes(64);
            for (j, op) in input.posters.iter_mut().flatten().enumerate() {
                if b[j % 64] & 1 == 0 {
                    *op = Op {
                        kind: 14,
                        arg: 128 + b[(j + 1) % 64] % 64,
                    };
                }
            }
            if i % 3 == 0 {
                let into = Op {
                    kind: 11,
                    arg: (i / 3 % 3) as u8 | (b[0] & 0x10),
                };
                input.consumer.insert(0, into);
                input.consumer.truncate(MAX_CONSUMER_OPS);
            }
            run(&input);
        }
        assert!(
            PERMIT_SENDS.get() > before + 100,
            "events sent with permits"
        );
    }

    /// Random inputs whose consumer asks for its eventfd early and arms
    /// often, in consumer mode: the end's check of the fd must have
    /// notifications to find in many of them.
    #[test]
    fn random_eventfd_inputs() {
        let mut rng = crate::Rng(0x0e7e_47fd_0000_0005);
        let before = FD_CHECKS.get();
        for _ in 0..300u32 {
            let mut input = Input::decode(&rng.bytes(600));
            let b = rng.bytes(64);
            for (j, op) in input.consumer.iter_mut().enumerate() {
                *op = match b[j % 64] % 4 {
                    // Arm (5, 6), or the fd read (15 with 84..=87).
                    0 => Op { kind: 5, arg: 0 },
                    1 => Op { kind: 15, arg: 84 },
                    // No upcalls: they count notifications too.
                    _ if op.kind % 16 == 11 => Op { kind: 0, arg: 0 },
                    _ => *op,
                };
            }
            let at = usize::from(b[1]) % 3;
            input
                .consumer
                .insert(at.min(input.consumer.len()), Op { kind: 15, arg: 80 });
            input.consumer.truncate(MAX_CONSUMER_OPS);
            run(&input);
        }
        assert!(
            FD_CHECKS.get() > before + 50,
            "fd checks with notifications to find"
        );
    }

    #[test]
    fn random_cno_inputs() {
        let mut rng = crate::Rng(0x00c0_5eed_0fc0_ffee);
        let mut seen = [0usize; 8];
        for _ in 0..400 {
            let input = cno_heavy(&mut rng);
            for op in &input.consumer {
                if let ConsumerOp::Cno(c) = ConsumerOp::of(*op, 1) {
                    let k = match c {
                        CnoOp::Bind(_) => 0,
                        CnoOp::Enable => 1,
                        CnoOp::Disable => 2,
                        CnoOp::Modify => 3,
                        CnoOp::Unbind => 4,
                        CnoOp::Take => 5,
                        CnoOp::Drop(_) => 6,
                        CnoOp::Poll(_) => 7,
                    };
                    seen[k] += 1;
                }
            }
            run(&input);
        }
        assert!(seen.iter().all(|&n| n > 50), "every CNO op drawn: {seen:?}");
    }
}
