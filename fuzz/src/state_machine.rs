//! The `state_machine` target: a deterministic simulator of evd's concurrent
//! protocol, stepped by a fuzzer-chosen schedule.
//!
//! The shared memory of an EVD (state word, head, ring slots with stamps,
//! buffer pointer, loss count (its posters are lossy: a full ring loses the event),, unwaitable flag, waker slot, the
//! consumer's park token, poster count) is modelled as plain fields. Every
//! public operation is split into the atomic steps the real code performs, in
//! the real order, computing each new word with the real `evd::state`
//! function. A schedule is a list of (actor, choice, arg): up to three
//! posters, the consumer, and "the upcall" (whichever thread is running an
//! upcall instance: instances run on the posting thread, as in the crate).
//! Each schedule entry advances one actor by one atomic step; an idle actor
//! first picks its next operation from `choice` and `arg`.
//!
//! After every step the simulator compares the word with the sequential
//! reference model in [`crate::spec`] and checks the invariants:
//!
//! * no lost notification: an armed word has fewer queued events than the
//!   threshold it was armed with (the first post after an arm disarms it);
//!   and when nothing can run any more, a parked consumer has nothing to be
//!   woken for;
//! * at most one handler in flight while the policy is SingleInstance;
//! * NOTIFIED is cleared only by a transition that finds the ring empty;
//! * every accepted event is dequeued exactly once, in ticket order, and the
//!   reserved tickets are exactly `[head, tail)`;
//! * no handler runs, and no instance is counted, after a teardown (until
//!   upcalls are enabled again);
//! * the instance count and the token bit match the instances that exist;
//! * no slot is written in a freed buffer, or written twice, or read twice.
//!
//! At the end every operation still running is completed (a close is
//! injected if the consumer waits for events that will never come), upcalls
//! are torn down, the ring is drained, and delivery is checked exactly-once.

use crate::spec::{self, Word, TICKET_MASK};
use arbitrary::Arbitrary;
use evd::state::{self, Arm, Exit, Invoke, Notify, PolicyBits, Reacquire, Reserve};
use std::collections::{BTreeMap, HashMap};

/// Schedules longer than this are cut (keeps each execution short).
pub const MAX_STEPS: usize = 4096;
/// Steps the completion phase may take before it declares a livelock.
const FINISH_BUDGET: usize = 200_000;

/// One fuzz input. Encoded densely: two header bytes, then three bytes per
/// step, so that every mutation of the bytes is a local change of the
/// schedule.
#[derive(Debug, Clone)]
pub struct Input {
    /// Number of posters, 1..=3 (taken modulo 3, plus 1).
    pub posters: u8,
    /// log2 of the initial capacity, 0..=3.
    pub cap_log2: u8,
    /// The interleaving.
    pub schedule: Vec<Step>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Input {
            posters: u.arbitrary()?,
            cap_log2: u.arbitrary()?,
            schedule: u.arbitrary_iter()?.collect::<arbitrary::Result<_>>()?,
        })
    }

    fn arbitrary_take_rest(mut u: arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let posters = u.arbitrary()?;
        let cap_log2 = u.arbitrary()?;
        let mut schedule = Vec::with_capacity(u.len() / 3);
        while u.len() >= 3 {
            schedule.push(Step::arbitrary(&mut u)?);
        }
        Ok(Input {
            posters,
            cap_log2,
            schedule,
        })
    }
}

/// One schedule entry.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Step {
    /// Which actor moves: a poster, the consumer, or the running upcall.
    pub actor: u8,
    /// Chooses the next operation of an idle actor, and nondeterminism
    /// (spurious CAS failure, spurious wake-up, timeout, handler panic).
    pub choice: u8,
    /// The operation's argument (threshold, batch size, capacity, policy...).
    pub arg: u8,
}

/// Run one input; panics on any divergence or broken invariant.
pub fn run(input: &Input) {
    let posters = 1 + (input.posters % 3) as usize;
    let cap_log2 = (input.cap_log2 % 4) as u32;
    let mut sim = Sim::new(posters, cap_log2);
    for s in input.schedule.iter().take(MAX_STEPS) {
        let a = s.actor as usize % (posters + 2);
        let actor = if a == posters + 1 {
            match sim.thread_in_instance() {
                Some(t) => t,
                None => continue,
            }
        } else {
            a
        };
        sim.step(actor, s.choice, s.arg);
        sim.check();
    }
    sim.finish();
}

/// `EVD_FUZZ_TRACE=1` prints every step (to read a minimized crash).
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("EVD_FUZZ_TRACE").is_some())
}

// ---------------------------------------------------------------------------
// Shared memory

/// The stamp that marks a slot as holding ticket `t` (as in the ring).
fn published(t: u64) -> u64 {
    ((t & TICKET_MASK) << 1) | 1
}

type Ev = u32;

fn ev_id(poster: usize, seq: u32) -> Ev {
    ((poster as u32) << 24) | seq
}

#[derive(Debug)]
struct Buf {
    stamps: Vec<u64>,
    values: Vec<Option<Ev>>,
    mask: u64,
}

impl Buf {
    fn new(cap_log2: u32) -> Buf {
        let cap = 1usize << cap_log2;
        Buf {
            stamps: vec![0; cap],
            values: vec![None; cap],
            mask: cap as u64 - 1,
        }
    }
    fn idx(&self, t: u64) -> usize {
        (t & self.mask) as usize
    }
    fn is_published(&self, t: u64) -> bool {
        self.stamps[self.idx(t)] == published(t)
    }
    fn publish(&mut self, t: u64, v: Ev) {
        let i = self.idx(t);
        assert!(
            self.values[i].is_none(),
            "ticket {t} overwrites an event not yet taken"
        );
        assert_ne!(self.stamps[i], published(t), "ticket {t} published twice");
        self.values[i] = Some(v);
        self.stamps[i] = published(t);
    }
    fn take(&mut self, t: u64) -> Ev {
        let i = self.idx(t);
        self.values[i]
            .take()
            .unwrap_or_else(|| panic!("ticket {t} read twice (or never written)"))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Consumer,
    Upcalls,
}

struct Thread {
    op: Option<Op>,
    dead: bool,
    next_seq: u32,
    /// The poster handle's cached head.
    head_hint: u64,
}

struct Sim {
    // --- what the real atomics hold
    word: u64,
    head: u64,
    bufs: Vec<Option<Buf>>,
    cur_buf: usize,
    overflow_pending: u64,
    unwaitable: bool,
    waker_registered: bool,
    unpark_token: bool,
    posters_alive: usize,

    // --- the reference model
    model: Word,
    /// Reserved, not yet dequeued tickets and the event each one carries.
    tickets: BTreeMap<u64, Ev>,
    accepted: HashMap<Ev, u64>,
    dequeued: HashMap<Ev, u32>,
    last_seq: HashMap<usize, u32>,
    by_instance: Vec<Ev>,
    handled: Vec<Ev>,
    rejected_full: u64,
    overflow_reported: u64,
    /// Threshold of the arm that set ARMED.
    armed_threshold: u64,
    handlers_in_flight: u32,
    live_instances: u64,
    token_holders: u32,
    torn_down: bool,
    dequeuer: Option<usize>,
    /// Tickets the dequeuer has moved out but not yet published a head for.
    taken_ahead: u64,
    mode: Mode,

    // --- scheduling
    threads: Vec<Thread>,
    posters: usize,
    finishing: bool,
    blocked: bool,
}

impl Sim {
    fn new(posters: usize, cap_log2: u32) -> Sim {
        // posters, the consumer, and a closer used only when finishing.
        let threads = (0..posters + 2)
            .map(|_| Thread {
                op: None,
                dead: false,
                next_seq: 0,
                head_hint: 0,
            })
            .collect();
        Sim {
            word: state::initial(cap_log2),
            head: 0,
            bufs: vec![Some(Buf::new(cap_log2))],
            cur_buf: 0,
            overflow_pending: 0,
            unwaitable: false,
            waker_registered: false,
            unpark_token: false,
            posters_alive: posters,
            model: Word::initial(cap_log2),
            tickets: BTreeMap::new(),
            accepted: HashMap::new(),
            dequeued: HashMap::new(),
            last_seq: HashMap::new(),
            by_instance: Vec::new(),
            handled: Vec::new(),
            rejected_full: 0,
            overflow_reported: 0,
            armed_threshold: 0,
            handlers_in_flight: 0,
            live_instances: 0,
            token_holders: 0,
            torn_down: false,
            dequeuer: None,
            taken_ahead: 0,
            mode: Mode::Consumer,
            threads,
            posters,
            finishing: false,
            blocked: false,
        }
    }

    fn consumer(&self) -> usize {
        self.posters
    }

    fn closer(&self) -> usize {
        self.posters + 1
    }

    /// A weak CAS may fail spuriously; the schedule decides (never while
    /// finishing, so that completion terminates).
    fn spurious(&self, ch: u8) -> bool {
        !self.finishing && ch & 0xe0 == 0xe0
    }

    /// Install `new` if the word still is `expected`; the model computes the
    /// same transition from its own state and must agree.
    fn cas(&mut self, expected: u64, new: u64, ch: u8, spec: impl FnOnce(Word) -> Word) -> bool {
        if self.word != expected || self.spurious(ch) {
            return false;
        }
        let next = spec(self.model);
        assert_eq!(
            Word::decode(new),
            next,
            "the transition disagrees with the reference model (from {:?})",
            self.model
        );
        if self.model.notified && !next.notified {
            assert_eq!(
                next.len(self.head),
                0,
                "NOTIFIED cleared while events are queued"
            );
        }
        assert!(!self.model.closed || next.closed, "CLOSED was cleared");
        self.model = next;
        self.word = new;
        true
    }

    fn buf(&mut self, gen: usize) -> &mut Buf {
        self.bufs[gen]
            .as_mut()
            .unwrap_or_else(|| panic!("use of freed ring buffer {gen}"))
    }

    fn wake_waker(&mut self) {
        if std::mem::take(&mut self.waker_registered) {
            self.unpark_token = true;
        }
    }

    fn enter_dequeue(&mut self, me: usize, holds_token: bool) {
        assert!(
            self.dequeuer.is_none(),
            "two dequeuers at once: {:?} and {me}",
            self.dequeuer
        );
        if me == self.consumer() && !holds_token {
            assert_eq!(
                self.mode,
                Mode::Consumer,
                "consumer dequeues in upcall mode"
            );
            assert_eq!(
                self.live_instances, 0,
                "consumer dequeues beside an instance"
            );
        } else {
            assert!(holds_token, "an instance dequeues without the token");
        }
        self.dequeuer = Some(me);
    }

    fn leave_dequeue(&mut self, me: usize) {
        assert_eq!(self.dequeuer, Some(me));
        self.dequeuer = None;
    }

    /// Move ticket `t` out of buffer `gen` as a dequeue.
    fn take(&mut self, gen: usize, t: u64, by_instance: bool) -> Ev {
        let v = self.buf(gen).take(t);
        let want = self
            .tickets
            .remove(&t)
            .unwrap_or_else(|| panic!("ticket {t} was never reserved"));
        assert_eq!(v, want, "ticket {t} holds another event");
        let n = self.dequeued.entry(v).or_insert(0);
        *n += 1;
        assert_eq!(*n, 1, "event {v:#x} dequeued twice");
        let poster = (v >> 24) as usize;
        let seq = v & 0xff_ffff;
        if let Some(prev) = self.last_seq.insert(poster, seq) {
            assert!(prev < seq, "poster {poster}'s events out of order");
        }
        if by_instance {
            self.by_instance.push(v);
        }
        self.taken_ahead += 1;
        v
    }

    fn store_head(&mut self, h: u64) {
        assert!(h >= self.head, "head moved back");
        assert_eq!(
            h - self.head,
            self.taken_ahead,
            "head store skips or repeats events"
        );
        self.taken_ahead = 0;
        self.head = h;
    }

    fn handler_enter(&mut self, item: Option<Ev>) {
        assert!(!self.torn_down, "an upcall runs after teardown");
        self.handlers_in_flight += 1;
        if let Some(v) = item {
            self.handled.push(v);
        }
    }

    fn thread_in_instance(&self) -> Option<usize> {
        self.threads
            .iter()
            .position(|t| t.op.as_ref().is_some_and(Op::in_instance))
    }

    /// Invariants that hold between any two steps.
    fn check(&mut self) {
        let d = Word::decode(self.word);
        assert_eq!(d, self.model, "word and reference model diverged");
        assert_eq!(
            self.tickets.len() as u64 + self.taken_ahead,
            d.len(self.head),
            "reserved tickets are not [head, tail)"
        );
        if let (Some((&lo, _)), Some((&hi, _))) = (
            self.tickets.first_key_value(),
            self.tickets.last_key_value(),
        ) {
            assert!(lo >= self.head + self.taken_ahead && hi < self.head + d.len(self.head));
        }
        if d.armed {
            assert!(
                d.len(self.head) < self.armed_threshold,
                "armed with {} events queued (threshold {}): a notification is lost",
                d.len(self.head),
                self.armed_threshold
            );
        }
        assert_eq!(d.instances, self.live_instances, "instance count drifted");
        assert!(self.token_holders <= 1, "two instances hold the token");
        assert_eq!(d.token, self.token_holders == 1, "token bit drifted");
        if d.policy == 1 {
            assert!(
                self.handlers_in_flight <= 1,
                "{} upcalls in flight under SingleInstance",
                self.handlers_in_flight
            );
        }
        if self.torn_down {
            assert_eq!(self.live_instances, 0, "an instance runs after teardown");
            assert_eq!(self.handlers_in_flight, 0, "an upcall runs after teardown");
        }
    }

    /// Advance `actor` by one atomic step.
    fn step(&mut self, actor: usize, ch: u8, arg: u8) {
        if self.threads[actor].dead {
            return;
        }
        let mut op = match self.threads[actor].op.take() {
            Some(op) => op,
            None => match self.start(actor, ch, arg) {
                Some(op) => op,
                None => return,
            },
        };
        if trace() {
            eprintln!("{actor}: {op:?}");
        }
        let done = op.step(self, actor, ch);
        if trace() {
            eprintln!(
                "   -> {:?} head {} done {done:?}",
                Word::decode(self.word),
                self.head
            );
        }
        if done.is_none() {
            self.threads[actor].op = Some(op);
        }
    }

    /// The operation an idle actor starts.
    fn start(&mut self, actor: usize, ch: u8, arg: u8) -> Option<Op> {
        if actor < self.posters {
            let t = &mut self.threads[actor];
            let op = match ch % 8 {
                5 if arg == 0 => Op::Close(CloseOp::default()),
                6 => Op::Unwaitable {
                    set: arg & 1 == 1,
                    pc: 0,
                },
                7 if arg == 0 => Op::DropPoster {
                    pc: 0,
                    close: CloseOp::default(),
                },
                _ => {
                    let ev = ev_id(actor, t.next_seq);
                    t.next_seq += 1;
                    Op::Post(Post::new(ev))
                }
            };
            return Some(op);
        }
        let cap = Word::decode(self.word).capacity() as u8;
        let op = match self.mode {
            Mode::Consumer => match ch % 16 {
                0..=3 => Op::TryDequeue(DequeueOne::default()),
                4 | 5 | 15 => Op::Batch(Batch::new(arg as usize % (2 * cap as usize + 2))),
                6..=8 => Op::Arm(SharedArm::new(1)),
                9 => Op::Disarm(Upd::default()),
                10 | 11 => Op::Wait(Wait::new(
                    arg as usize % (cap as usize + 2),
                    arg & 0x80 != 0,
                    (arg >> 5) & 1,
                )),
                12 => Op::Resize(Resize::new((arg % 5) as u32)),
                13 => Op::IntoUpcalls {
                    disarm: Upd::default(),
                    disarmed: false,
                    set: SetPolicy::new(arg),
                },
                _ if arg == 0 => Op::Close(CloseOp::default()),
                _ => Op::TryDequeue(DequeueOne::default()),
            },
            Mode::Upcalls => match ch % 8 {
                0..=4 => Op::SetPolicy(SetPolicy::new(arg)),
                5 => Op::Teardown(Quiesce::default()),
                _ => return None,
            },
        };
        Some(op)
    }

    /// Run `op` on `actor` alone until it completes (used when finishing).
    fn run_alone(&mut self, actor: usize, op: Op) {
        self.threads[actor].op = Some(op);
        let mut n = 0;
        while self.threads[actor].op.is_some() {
            self.blocked = false;
            self.step(actor, 0, 0);
            self.check();
            assert!(!self.blocked, "{actor} blocks with nobody left to wake it");
            n += 1;
            assert!(n < FINISH_BUDGET, "operation of {actor} does not complete");
        }
    }

    /// Is the parked consumer owed a wake-up?
    fn consumer_owed_wake(&mut self) -> bool {
        let c = self.consumer();
        match &self.threads[c].op {
            Some(Op::Wait(w)) => {
                let k = w.threshold as u64;
                let gen = self.cur_buf;
                let h = self.head;
                let mut ready = 0;
                while ready < k && self.buf(gen).is_published(h + ready) {
                    ready += 1;
                }
                ready >= k || self.unwaitable || Word::decode(self.word).closed
            }
            Some(op) if op.in_quiesce() => state::instances(self.word) == 0,
            _ => false,
        }
    }

    /// Complete every operation, tear down, drain, and check exactly-once.
    fn finish(&mut self) {
        self.finishing = true;
        let mut injected_close = false;
        let mut budget = FINISH_BUDGET;
        loop {
            let mut any = false;
            let mut progressed = false;
            for a in 0..self.threads.len() {
                if self.threads[a].op.is_none() {
                    continue;
                }
                any = true;
                self.blocked = false;
                self.step(a, 0, 0);
                self.check();
                progressed |= !self.blocked;
            }
            if !any {
                break;
            }
            if !progressed {
                assert!(
                    !self.consumer_owed_wake(),
                    "lost wake-up: the consumer is parked with its condition met and nothing left to wake it"
                );
                assert!(
                    !injected_close,
                    "the consumer stays parked after the EVD was closed"
                );
                // The consumer waits for events nobody will post: close.
                let closer = self.closer();
                self.run_alone(closer, Op::Close(CloseOp::default()));
                injected_close = true;
            }
            budget -= 1;
            assert!(budget > 0, "livelock: operations do not complete");
        }
        let c = self.consumer();
        if self.mode == Mode::Upcalls {
            self.run_alone(c, Op::Teardown(Quiesce::default()));
        }
        let closer = self.closer();
        self.run_alone(closer, Op::Close(CloseOp::default()));
        // Drain to end of stream, alternating single and batch dequeues.
        let mut rounds = 0;
        loop {
            let op = if rounds % 2 == 0 {
                Op::TryDequeue(DequeueOne::default())
            } else {
                Op::Batch(Batch::new(3))
            };
            self.threads[c].op = Some(op);
            let mut out = None;
            while let Some(mut op) = self.threads[c].op.take() {
                if let Some(r) = op.step(self, c, 0) {
                    out = Some(r);
                } else {
                    self.threads[c].op = Some(op);
                }
                self.check();
            }
            rounds += 1;
            if out == Some(Done::EndOfStream) {
                break;
            }
            assert!(rounds < 100_000, "drain does not reach end of stream");
        }
        // Exactly once.
        for (ev, t) in &self.accepted {
            assert_eq!(
                self.dequeued.get(ev).copied(),
                Some(1),
                "event {ev:#x} (ticket {t}) lost"
            );
        }
        assert_eq!(self.dequeued.len(), self.accepted.len(), "event invented");
        let mut a = self.by_instance.clone();
        let mut b = self.handled.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "an upcall's event did not reach the handler");
        assert_eq!(
            self.rejected_full, self.overflow_reported,
            "overflow report lost"
        );
        assert_eq!(self.live_instances, 0);
        assert_eq!(self.handlers_in_flight, 0);
        let live_bufs = self.bufs.iter().filter(|b| b.is_some()).count();
        assert_eq!(live_bufs, 1, "a ring buffer leaked");
        let cur = self.cur_buf;
        assert!(
            self.buf(cur).values.iter().all(Option::is_none),
            "events left in the ring"
        );
    }
}

// ---------------------------------------------------------------------------
// Checked transitions: the real function, and the model on the decoded word.

fn reserve(w: u64, hint: u64) -> Reserve {
    let r = state::reserve(w, hint);
    match (r, spec::reserve(Word::decode(w), hint)) {
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
        ) => {
            assert_eq!((ticket, notify), (t, n), "reserve: ticket or notification");
            assert_eq!(Word::decode(new), next, "reserve: new word");
        }
        (Reserve::Closed, spec::Reserve::Closed)
        | (Reserve::Resizing, spec::Reserve::Resizing)
        | (Reserve::Full, spec::Reserve::Full) => {}
        (real, model) => panic!("reserve: {real:?} but the model says {model:?}"),
    }
    r
}

fn notify_overflow(w: u64) -> Option<(u64, Notify)> {
    let r = state::notify_loss(w);
    let m = spec::notify_overflow(Word::decode(w));
    assert_eq!(
        r.map(|(n, k)| (Word::decode(n), k)),
        m,
        "notify_overflow disagrees with the model"
    );
    r
}

fn arm(w: u64, head: u64, k: u64) -> Arm {
    let r = state::arm(w, head, k);
    match (r, spec::arm(Word::decode(w), head, k)) {
        (Arm::Arm(new), spec::Arm::Arm(next)) => assert_eq!(Word::decode(new), next),
        (Arm::Pending, spec::Arm::Pending) | (Arm::Closed, spec::Arm::Closed) => {}
        (real, model) => panic!("arm: {real:?} but the model says {model:?}"),
    }
    r
}

fn exit_instance(w: u64, head: u64) -> Exit {
    let r = state::exit_instance(w, head);
    match (r, spec::exit_instance(Word::decode(w), head)) {
        (Exit::Exit(new), Some(next)) => assert_eq!(Word::decode(new), next),
        (Exit::MoreWork, None) => {}
        (real, model) => panic!("exit_instance: {real:?} but the model says {model:?}"),
    }
    r
}

fn reacquire(w: u64) -> Reacquire {
    let r = state::reacquire(w);
    let (took, next) = spec::reacquire(Word::decode(w));
    match r {
        Reacquire::Token(new) => {
            assert!(took, "reacquire took the token; the model says exit");
            assert_eq!(Word::decode(new), next);
        }
        Reacquire::Exit(new) => {
            assert!(!took, "reacquire exits; the model says take the token");
            assert_eq!(Word::decode(new), next);
        }
    }
    r
}

fn policy_from(bits: u8) -> PolicyBits {
    match bits {
        1 => PolicyBits::Single,
        2 => PolicyBits::Many,
        _ => PolicyBits::Disabled,
    }
}

fn set_policy(w: u64, head: u64, bits: u8, any: bool) -> state::SetPolicy {
    let invoke = if any { Invoke::Any } else { Invoke::New };
    let r = state::set_policy(w, head, policy_from(bits), invoke);
    let (next, start) = spec::set_policy(Word::decode(w), head, bits, any);
    assert_eq!(r.start_instance, start, "set_policy: instance start");
    assert_eq!(Word::decode(r.new), next, "set_policy: new word");
    r
}

// ---------------------------------------------------------------------------
// Operations, each a small program counter over its atomic steps.

/// The `update` helper of the core: load, then compute-and-CAS until the CAS
/// succeeds or the computation declines.
#[derive(Debug, Default)]
struct Upd {
    w: Option<u64>,
}

impl Upd {
    fn step<R>(
        &mut self,
        sim: &mut Sim,
        ch: u8,
        f: impl FnOnce(u64) -> Result<(u64, R), R>,
        model: impl FnOnce(Word) -> Word,
    ) -> Option<R> {
        let Some(w) = self.w else {
            self.w = Some(sim.word);
            return None;
        };
        match f(w) {
            Err(r) => Some(r),
            Ok((new, r)) => {
                if sim.cas(w, new, ch, model) {
                    Some(r)
                } else {
                    self.w = Some(sim.word);
                    None
                }
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Done {
    Unit,
    EndOfStream,
}

#[derive(Debug)]
enum Op {
    Post(Post),
    Close(CloseOp),
    Unwaitable {
        set: bool,
        pc: u8,
    },
    DropPoster {
        pc: u8,
        close: CloseOp,
    },
    TryDequeue(DequeueOne),
    Batch(Batch),
    Arm(SharedArm),
    Disarm(Upd),
    Wait(Wait),
    Resize(Resize),
    IntoUpcalls {
        disarm: Upd,
        disarmed: bool,
        set: SetPolicy,
    },
    SetPolicy(SetPolicy),
    Teardown(Quiesce),
}

impl Op {
    fn in_instance(&self) -> bool {
        match self {
            Op::Post(p) => p.inst.is_some(),
            Op::SetPolicy(s) | Op::IntoUpcalls { set: s, .. } => s.inst.is_some(),
            _ => false,
        }
    }

    fn in_quiesce(&self) -> bool {
        match self {
            Op::Teardown(_) => true,
            Op::SetPolicy(s) | Op::IntoUpcalls { set: s, .. } => s.quiesce.is_some(),
            _ => false,
        }
    }

    /// One atomic step; `Some` when the operation has completed.
    fn step(&mut self, sim: &mut Sim, me: usize, ch: u8) -> Option<Done> {
        match self {
            Op::Post(p) => p.step(sim, me, ch).map(|_| Done::Unit),
            Op::Close(c) => c.step(sim, ch).map(|_| Done::Unit),
            Op::Unwaitable { set, pc } => {
                if !*set {
                    sim.unwaitable = false;
                    return Some(Done::Unit);
                }
                if *pc == 0 {
                    sim.unwaitable = true;
                    *pc = 1;
                    None
                } else {
                    sim.wake_waker();
                    Some(Done::Unit)
                }
            }
            Op::DropPoster { pc, close } => {
                if *pc == 0 {
                    sim.posters_alive -= 1;
                    if sim.posters_alive > 0 {
                        sim.threads[me].dead = true;
                        return Some(Done::Unit);
                    }
                    *pc = 1;
                    return None;
                }
                let r = close.step(sim, ch);
                if r.is_some() {
                    sim.threads[me].dead = true;
                }
                r.map(|_| Done::Unit)
            }
            Op::TryDequeue(d) => d.step(sim, me, false).map(|r| match r {
                DqOut::Closed => Done::EndOfStream,
                _ => Done::Unit,
            }),
            Op::Batch(b) => b.step(sim, me),
            Op::Arm(a) => a.step(sim, ch).map(|_| Done::Unit),
            Op::Disarm(u) => u
                .step(
                    sim,
                    ch,
                    |w| {
                        if state::has(w, state::ARMED) {
                            Ok((state::disarm(w), ()))
                        } else {
                            Err(())
                        }
                    },
                    spec::disarm,
                )
                .map(|_| Done::Unit),
            Op::Wait(w) => w.step(sim, ch),
            Op::Resize(r) => r.step(sim, ch).map(|_| Done::Unit),
            Op::IntoUpcalls {
                disarm,
                disarmed,
                set,
            } => {
                sim.mode = Mode::Upcalls;
                if !*disarmed {
                    let r = disarm.step(
                        sim,
                        ch,
                        |w| {
                            if state::has(w, state::ARMED) {
                                Ok((state::disarm(w), ()))
                            } else {
                                Err(())
                            }
                        },
                        spec::disarm,
                    );
                    *disarmed = r.is_some();
                    return None;
                }
                set.step(sim, me, ch).map(|_| Done::Unit)
            }
            Op::SetPolicy(s) => s.step(sim, me, ch).map(|_| Done::Unit),
            Op::Teardown(q) => {
                let r = q.step(sim, ch);
                if r.is_some() {
                    sim.torn_down = true;
                    sim.mode = Mode::Consumer;
                }
                r.map(|_| Done::Unit)
            }
        }
    }
}

// --- close (Shared::close)

#[derive(Debug, Default)]
struct CloseOp {
    upd: Upd,
    waking: bool,
}

impl CloseOp {
    fn step(&mut self, sim: &mut Sim, ch: u8) -> Option<()> {
        if self.waking {
            sim.wake_waker();
            return Some(());
        }
        let wake = self.upd.step(
            sim,
            ch,
            |w| {
                if state::has(w, state::CLOSED) {
                    Err(false)
                } else {
                    let (new, wake) = state::close(w);
                    let (next, w2) = spec::close(Word::decode(w));
                    assert_eq!((Word::decode(new), wake), (next, w2), "close");
                    Ok((new, wake))
                }
            },
            |m| spec::close(m).0,
        )?;
        if wake {
            self.waking = true;
            None
        } else {
            Some(())
        }
    }
}

// --- post (Poster::post)

#[derive(Debug)]
enum PostPc {
    Load,
    Decide,
    FullWord,
    Overflow,
    OverflowNotify,
    LoadBuf,
    Write,
    Wake,
    Instance,
}

#[derive(Debug)]
struct Post {
    ev: Ev,
    pc: PostPc,
    hint: u64,
    w: u64,
    fresh: u64,
    ticket: u64,
    notify: Notify,
    gen: usize,
    inst: Option<Instance>,
    upd: Upd,
    /// The post was refused (full); the notification it took is the
    /// overflow's.
    overflowed: bool,
}

impl Post {
    fn new(ev: Ev) -> Post {
        Post {
            ev,
            pc: PostPc::Load,
            hint: 0,
            w: 0,
            fresh: 0,
            ticket: 0,
            notify: Notify::None,
            gen: 0,
            inst: None,
            upd: Upd::default(),
            overflowed: false,
        }
    }

    fn step(&mut self, sim: &mut Sim, me: usize, ch: u8) -> Option<()> {
        match self.pc {
            PostPc::Load => {
                self.hint = sim.threads[me].head_hint;
                self.w = sim.word;
                self.pc = PostPc::Decide;
            }
            PostPc::Decide => match reserve(self.w, self.hint) {
                Reserve::Ticket {
                    new,
                    ticket,
                    notify,
                } => {
                    let hint = self.hint;
                    let model = |m| match spec::reserve(m, hint) {
                        spec::Reserve::Ticket { next, .. } => next,
                        other => panic!("model refuses a reservation: {other:?}"),
                    };
                    if sim.cas(self.w, new, ch, model) {
                        let dup = sim.tickets.insert(ticket, self.ev);
                        assert!(dup.is_none(), "ticket {ticket} handed out twice");
                        sim.accepted.insert(self.ev, ticket);
                        if notify == Notify::Upcall {
                            sim.live_instances += 1;
                            sim.token_holders += 1;
                        }
                        self.ticket = ticket;
                        self.notify = notify;
                        self.pc = PostPc::LoadBuf;
                    } else {
                        self.w = sim.word;
                    }
                }
                Reserve::Full => {
                    self.fresh = sim.head;
                    self.pc = PostPc::FullWord;
                }
                Reserve::Closed => return Some(()),
                Reserve::Resizing => self.w = sim.word,
            },
            PostPc::FullWord => {
                let fresh_w = sim.word;
                if self.fresh == self.hint && fresh_w == self.w {
                    self.pc = PostPc::Overflow;
                } else {
                    self.hint = self.fresh;
                    sim.threads[me].head_hint = self.fresh;
                    self.w = fresh_w;
                    self.pc = PostPc::Decide;
                }
            }
            PostPc::Overflow => {
                // `overflowed` and `overflow_pending` are bumped; only the
                // latter is read by the protocol.
                sim.overflow_pending += 1;
                sim.rejected_full += 1;
                self.upd = Upd::default();
                self.pc = PostPc::OverflowNotify;
            }
            PostPc::OverflowNotify => {
                let notify = self.upd.step(
                    sim,
                    ch,
                    // Always one RMW: the word is written back unchanged if
                    // there is nobody to notify.
                    |w| Ok(notify_overflow(w).unwrap_or((w, Notify::None))),
                    |m| spec::notify_overflow(m).map_or(m, |(n, _)| n),
                )?;
                self.notify = notify;
                self.overflowed = true;
                match notify {
                    Notify::None => return Some(()),
                    Notify::Wake => self.pc = PostPc::Wake,
                    Notify::Upcall => {
                        sim.live_instances += 1;
                        sim.token_holders += 1;
                        self.inst = Some(Instance::new());
                        self.pc = PostPc::Instance;
                    }
                }
            }
            PostPc::LoadBuf => {
                self.gen = sim.cur_buf;
                self.pc = PostPc::Write;
            }
            PostPc::Write => {
                let (gen, t, ev) = (self.gen, self.ticket, self.ev);
                sim.buf(gen).publish(t, ev);
                match self.notify {
                    Notify::None => return Some(()),
                    Notify::Wake => self.pc = PostPc::Wake,
                    Notify::Upcall => {
                        self.inst = Some(Instance::new());
                        self.pc = PostPc::Instance;
                    }
                }
            }
            PostPc::Wake => {
                sim.wake_waker();
                return Some(());
            }
            PostPc::Instance => {
                let inst = self.inst.as_mut().expect("instance");
                // A panicking handler unwinds out of `post`; the caller
                // catches it, the event is posted either way.
                inst.step(sim, me, ch)?;
                self.inst = None;
                return Some(());
            }
        }
        None
    }
}

// --- dequeue (Shared::dequeue_one)

#[derive(Debug, Default)]
struct DequeueOne {
    pc: u8,
    h: u64,
    gen: usize,
    v: Ev,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DqOut {
    Ev(Ev),
    Overflow(u64),
    Empty,
    Closed,
}

impl DequeueOne {
    fn step(&mut self, sim: &mut Sim, me: usize, holds_token: bool) -> Option<DqOut> {
        match self.pc {
            0 => self.pc = if sim.overflow_pending == 0 { 2 } else { 1 },
            1 => {
                let r = std::mem::take(&mut sim.overflow_pending);
                if r != 0 {
                    sim.overflow_reported += r;
                    return Some(DqOut::Overflow(r));
                }
                self.pc = 2;
            }
            2 => {
                sim.enter_dequeue(me, holds_token);
                self.h = sim.head;
                self.pc = 3;
            }
            3 => {
                self.gen = sim.cur_buf;
                self.pc = 4;
            }
            4 => {
                let (gen, h) = (self.gen, self.h);
                if sim.buf(gen).is_published(h) {
                    self.v = sim.take(gen, h, holds_token);
                    self.pc = 5;
                } else {
                    self.pc = 6;
                }
            }
            5 => {
                sim.store_head(self.h + 1);
                sim.leave_dequeue(me);
                return Some(DqOut::Ev(self.v));
            }
            _ => {
                let w = sim.word;
                sim.leave_dequeue(me);
                return Some(
                    if state::has(w, state::CLOSED) && state::len(w, self.h) == 0 {
                        DqOut::Closed
                    } else {
                        DqOut::Empty
                    },
                );
            }
        }
        None
    }
}

// --- batch dequeue (Consumer::dequeue_batch)

#[derive(Debug)]
struct Batch {
    max: usize,
    pc: u8,
    w: u64,
    h: u64,
    queued: u64,
    n: u64,
    gen: usize,
}

impl Batch {
    fn new(max: usize) -> Batch {
        Batch {
            max,
            pc: 0,
            w: 0,
            h: 0,
            queued: 0,
            n: 0,
            gen: 0,
        }
    }

    fn step(&mut self, sim: &mut Sim, me: usize) -> Option<Done> {
        match self.pc {
            0 => self.pc = if sim.overflow_pending == 0 { 2 } else { 1 },
            1 => {
                let r = std::mem::take(&mut sim.overflow_pending);
                if r != 0 {
                    sim.overflow_reported += r;
                    return Some(Done::Unit);
                }
                self.pc = 2;
            }
            2 => {
                self.w = sim.word;
                self.pc = 3;
            }
            3 => {
                sim.enter_dequeue(me, false);
                self.h = sim.head;
                self.queued = state::len(self.w, self.h).min(self.max as u64);
                self.pc = if self.queued == 0 { 4 } else { 5 };
            }
            4 => {
                let w = sim.word;
                sim.leave_dequeue(me);
                let end = state::has(w, state::CLOSED) && state::len(w, self.h) == 0;
                return Some(if end { Done::EndOfStream } else { Done::Unit });
            }
            5 => {
                self.gen = sim.cur_buf;
                self.pc = 6;
            }
            6 => {
                let t = self.h + self.n;
                let gen = self.gen;
                if self.n < self.queued && sim.buf(gen).is_published(t) {
                    sim.take(gen, t, false);
                    self.n += 1;
                } else {
                    self.pc = 7;
                }
            }
            _ => {
                sim.store_head(self.h + self.n);
                sim.leave_dequeue(me);
                return Some(Done::Unit);
            }
        }
        None
    }
}

// --- arm (Consumer::arm, threshold 1)

/// `Shared::arm(k)`: an overflow report found waiting after the CAS counts
/// as pending work (the arm is withdrawn).
#[derive(Debug)]
struct SharedArm {
    k: u64,
    pc: u8,
    h: u64,
    upd: Upd,
}

impl SharedArm {
    fn new(k: u64) -> SharedArm {
        SharedArm {
            k,
            pc: 0,
            h: 0,
            upd: Upd::default(),
        }
    }

    fn step(&mut self, sim: &mut Sim, ch: u8) -> Option<Arm> {
        match self.pc {
            0 => {
                self.h = sim.head;
                self.pc = 2;
            }
            2 => {
                let (h, k) = (self.h, self.k);
                let r = self.upd.step(
                    sim,
                    ch,
                    |w| match arm(w, h, k) {
                        Arm::Arm(new) => Ok((new, Arm::Arm(new))),
                        other => Err(other),
                    },
                    |m| match spec::arm(m, h, k) {
                        spec::Arm::Arm(next) => next,
                        other => panic!("model refuses the arm: {other:?}"),
                    },
                )?;
                if matches!(r, Arm::Closed) {
                    // As the core: closed and drained, unless an overflow
                    // report is still to be told (an Acquire load of the
                    // word, then the count: one step).
                    self.pc = 5;
                    return None;
                }
                if !matches!(r, Arm::Arm(_)) {
                    return Some(r);
                }
                sim.armed_threshold = k;
                self.pc = 3;
            }
            5 => {
                return Some(if sim.overflow_pending != 0 {
                    Arm::Pending
                } else {
                    Arm::Closed
                });
            }
            3 => {
                if sim.overflow_pending == 0 {
                    return Some(Arm::Arm(0));
                }
                self.upd = Upd::default();
                self.pc = 4;
            }
            _ => {
                self.upd.step(sim, ch, disarm_fn, spec::disarm)?;
                return Some(Arm::Pending);
            }
        }
        None
    }
}

// --- blocking wait (Consumer::wait)

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum WaitPc {
    Capacity,
    EarlyUnwaitable,
    Register,
    Unwaitable,
    UnwaitableDisarm,
    Arm,
    Deadline,
    Park,
    TimeoutDisarm,
    Overflow,
    OverflowSwap,
    ReadyHead,
    ReadyBuf,
    ReadyLoop,
    PendingWord,
    PendingHead,
}

/// What a `ready()` count is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ReadyFor {
    /// The back-off phase: `ready(k) >= k`?
    Spin,
    /// The back-off phase found enough: `Ok(ready(MAX))`.
    SpinDone,
    /// After a timeout: `Ok(available)` or `Timeout`.
    Timeout,
    /// After an arm that found work.
    Pending,
}

#[derive(Debug)]
struct Wait {
    threshold: usize,
    timeout: bool,
    spins: u8,
    expired: bool,
    pc: WaitPc,
    ready_for: ReadyFor,
    h: u64,
    gen: usize,
    ready: u64,
    w: u64,
    upd: Upd,
    arm: SharedArm,
}

impl Wait {
    fn new(threshold: usize, timeout: bool, spins: u8) -> Wait {
        Wait {
            threshold,
            timeout,
            spins,
            expired: false,
            pc: WaitPc::Capacity,
            ready_for: ReadyFor::Spin,
            h: 0,
            gen: 0,
            ready: 0,
            w: 0,
            upd: Upd::default(),
            arm: SharedArm::new(threshold as u64),
        }
    }

    fn ready(&mut self, why: ReadyFor) {
        self.ready_for = why;
        self.pc = WaitPc::ReadyHead;
    }

    fn step(&mut self, sim: &mut Sim, ch: u8) -> Option<Done> {
        let k = self.threshold as u64;
        match self.pc {
            WaitPc::Capacity => {
                let cap = state::capacity(sim.word);
                if self.threshold == 0 || k > cap {
                    return Some(Done::Unit);
                }
                self.pc = WaitPc::EarlyUnwaitable;
            }
            WaitPc::EarlyUnwaitable => {
                if sim.unwaitable {
                    return Some(Done::Unit);
                }
                if self.spins > 0 {
                    self.ready(ReadyFor::Spin);
                } else {
                    self.pc = WaitPc::Register;
                }
            }
            WaitPc::Register => {
                sim.waker_registered = true;
                self.pc = WaitPc::Unwaitable;
            }
            WaitPc::Unwaitable => {
                if sim.unwaitable {
                    self.upd = Upd::default();
                    self.pc = WaitPc::UnwaitableDisarm;
                } else {
                    self.arm = SharedArm::new(k);
                    self.pc = WaitPc::Arm;
                }
            }
            WaitPc::UnwaitableDisarm => {
                self.upd.step(sim, ch, disarm_fn, spec::disarm)?;
                return Some(Done::Unit);
            }
            WaitPc::Arm => match self.arm.step(sim, ch)? {
                Arm::Arm(_) => self.pc = WaitPc::Deadline,
                Arm::Pending => self.pc = WaitPc::Overflow,
                Arm::Closed => return Some(Done::Unit),
            },
            WaitPc::Deadline => {
                // `Instant::now() >= deadline`: the schedule decides when time
                // has run out; once it has, it stays out.
                if self.timeout && !sim.finishing && ch & 0x18 == 0x18 {
                    self.expired = true;
                }
                if self.timeout && self.expired {
                    self.upd = Upd::default();
                    self.pc = WaitPc::TimeoutDisarm;
                } else {
                    self.pc = WaitPc::Park;
                }
            }
            WaitPc::Park => {
                if std::mem::take(&mut sim.unpark_token) {
                    self.pc = WaitPc::Register;
                } else if !sim.finishing && ch & 0x0f == 0x0f {
                    // A spurious wake-up, or park_timeout returning.
                    self.pc = WaitPc::Register;
                } else {
                    sim.blocked = true;
                }
            }
            WaitPc::TimeoutDisarm => {
                self.upd.step(sim, ch, disarm_fn, spec::disarm)?;
                self.ready(ReadyFor::Timeout);
            }
            // take_overflow: a pending report ends the wait.
            WaitPc::Overflow => {
                self.pc = if sim.overflow_pending != 0 {
                    WaitPc::OverflowSwap
                } else {
                    self.ready(ReadyFor::Pending);
                    WaitPc::ReadyHead
                };
            }
            WaitPc::OverflowSwap => {
                let r = std::mem::take(&mut sim.overflow_pending);
                if r != 0 {
                    sim.overflow_reported += r;
                    return Some(Done::Unit);
                }
                self.ready(ReadyFor::Pending);
            }
            WaitPc::ReadyHead => {
                self.h = sim.head;
                self.ready = 0;
                self.pc = WaitPc::ReadyBuf;
            }
            WaitPc::ReadyBuf => {
                self.gen = sim.cur_buf;
                self.pc = WaitPc::ReadyLoop;
            }
            WaitPc::ReadyLoop => {
                let (gen, t) = (self.gen, self.h + self.ready);
                let limit = if self.ready_for == ReadyFor::Spin {
                    k
                } else {
                    u64::MAX
                };
                if self.ready < limit && sim.buf(gen).is_published(t) {
                    self.ready += 1;
                    return None;
                }
                match self.ready_for {
                    ReadyFor::Spin if self.ready >= k => self.ready(ReadyFor::SpinDone),
                    ReadyFor::Spin => {
                        // Back off, then the next spin or the arm loop.
                        self.spins -= 1;
                        if self.spins > 0 {
                            self.ready(ReadyFor::Spin);
                        } else {
                            self.pc = WaitPc::Register;
                        }
                    }
                    ReadyFor::SpinDone | ReadyFor::Timeout => return Some(Done::Unit),
                    ReadyFor::Pending if self.ready >= k => return Some(Done::Unit),
                    ReadyFor::Pending => self.pc = WaitPc::PendingWord,
                }
            }
            WaitPc::PendingWord => {
                self.w = sim.word;
                self.pc = WaitPc::PendingHead;
            }
            WaitPc::PendingHead => {
                let queued = state::len(self.w, sim.head);
                if state::has(self.w, state::CLOSED) && queued < k && self.ready == queued {
                    return Some(Done::Unit);
                }
                // Reserved slots still being written: snooze, retry.
                self.pc = WaitPc::Register;
            }
        }
        None
    }
}

fn disarm_fn(w: u64) -> Result<(u64, ()), ()> {
    if state::has(w, state::ARMED) {
        Ok((state::disarm(w), ()))
    } else {
        Err(())
    }
}

// --- resize (Consumer::resize)

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ResizePc {
    Check,
    Begin,
    Head,
    Undo,
    LoadOld,
    Move,
    Swap,
    End,
    Free,
}

#[derive(Debug)]
struct Resize {
    log2: u32,
    pc: ResizePc,
    fresh: Option<Buf>,
    upd: Upd,
    w: u64,
    h: u64,
    queued: u64,
    old_log2: u32,
    old: usize,
    i: u64,
}

impl Resize {
    fn new(log2: u32) -> Resize {
        Resize {
            log2,
            pc: ResizePc::Check,
            fresh: None,
            upd: Upd::default(),
            w: 0,
            h: 0,
            queued: 0,
            old_log2: 0,
            old: 0,
            i: 0,
        }
    }

    fn step(&mut self, sim: &mut Sim, ch: u8) -> Option<()> {
        match self.pc {
            ResizePc::Check => {
                if state::cap_log2(sim.word) == self.log2 {
                    return Some(());
                }
                self.fresh = Some(Buf::new(self.log2));
                self.pc = ResizePc::Begin;
            }
            ResizePc::Begin => {
                self.w = self.upd.step(
                    sim,
                    ch,
                    |w| match state::begin_resize(w) {
                        Some(n) => {
                            assert_eq!(spec::begin_resize(Word::decode(w)), Some(Word::decode(n)));
                            Ok((n, n))
                        }
                        None => panic!("a second resize began"),
                    },
                    |m| spec::begin_resize(m).expect("model: resize already running"),
                )?;
                self.pc = ResizePc::Head;
            }
            ResizePc::Head => {
                self.h = sim.head;
                self.queued = state::len(self.w, self.h);
                self.old_log2 = state::cap_log2(self.w);
                self.upd = Upd::default();
                self.pc = if self.queued > 1 << self.log2 {
                    ResizePc::Undo
                } else {
                    ResizePc::LoadOld
                };
            }
            ResizePc::Undo => {
                let old = self.old_log2;
                self.upd.step(
                    sim,
                    ch,
                    |w| Ok((state::end_resize(w, old), ())),
                    |m| spec::end_resize(m, old),
                )?;
                return Some(());
            }
            ResizePc::LoadOld => {
                self.old = sim.cur_buf;
                self.pc = ResizePc::Move;
            }
            ResizePc::Move => {
                if self.i == self.queued {
                    self.pc = ResizePc::Swap;
                    return None;
                }
                let t = self.h + self.i;
                let old = self.old;
                if sim.buf(old).is_published(t) {
                    let v = sim.buf(old).take(t);
                    self.fresh.as_mut().expect("fresh").publish(t, v);
                    self.i += 1;
                }
                // Not yet published: a poster that reserved before RESIZING
                // is still writing; snooze and look again.
            }
            ResizePc::Swap => {
                sim.bufs.push(self.fresh.take());
                self.old = sim.cur_buf;
                sim.cur_buf = sim.bufs.len() - 1;
                self.upd = Upd::default();
                self.pc = ResizePc::End;
            }
            ResizePc::End => {
                let log2 = self.log2;
                self.upd.step(
                    sim,
                    ch,
                    |w| Ok((state::end_resize(w, log2), ())),
                    |m| spec::end_resize(m, log2),
                )?;
                self.pc = ResizePc::Free;
            }
            ResizePc::Free => {
                let old = sim.bufs[self.old].take().expect("old ring");
                assert!(
                    old.values.iter().all(Option::is_none),
                    "resize freed a ring that still held events"
                );
                return Some(());
            }
        }
        None
    }
}

// --- quiesce (Upcalls::quiesce: disable, then block until no instance)

#[derive(Debug, Default)]
struct Quiesce {
    disabled: bool,
    upd: Upd,
    pc: u8,
}

impl Quiesce {
    fn step(&mut self, sim: &mut Sim, ch: u8) -> Option<()> {
        if !self.disabled {
            self.upd.step(
                sim,
                ch,
                |w| {
                    let r = set_policy(w, 0, 0, false);
                    Ok((r.new, ()))
                },
                |m| spec::set_policy(m, 0, 0, false).0,
            )?;
            self.disabled = true;
            return None;
        }
        // wait::block_until: check, register, check, park.
        match self.pc {
            0 | 2 => {
                if state::instances(sim.word) == 0 {
                    return Some(());
                }
                self.pc += 1;
            }
            1 => {
                sim.waker_registered = true;
                self.pc = 2;
            }
            _ => {
                if std::mem::take(&mut sim.unpark_token) || (!sim.finishing && ch & 0x0f == 0x0f) {
                    self.pc = 0;
                } else {
                    sim.blocked = true;
                }
            }
        }
        None
    }
}

// --- set_policy (Upcalls::set_policy; also the tail of into_upcalls)

#[derive(Debug)]
struct SetPolicy {
    /// 0 disabled, 1 single, 2 many, 3 teardown.
    policy: u8,
    any: bool,
    pc: u8,
    quiesce: Option<Quiesce>,
    h: u64,
    upd: Upd,
    inst: Option<Instance>,
}

impl SetPolicy {
    fn new(arg: u8) -> SetPolicy {
        SetPolicy {
            policy: arg % 4,
            any: arg & 4 == 0,
            pc: 0,
            quiesce: None,
            h: 0,
            upd: Upd::default(),
            inst: None,
        }
    }

    fn step(&mut self, sim: &mut Sim, me: usize, ch: u8) -> Option<()> {
        match self.pc {
            0 => {
                // Quiesce for Teardown, and for SingleInstance while
                // instances started under another policy may run (as the
                // core does): always when leaving ManyInstances, where the
                // count read here can go stale before the policy CAS
                // (regression `single-instance-two-upcalls-2`).
                let w = sim.word;
                let running = state::instances(w) > 0 || state::policy(w) == PolicyBits::Many;
                let needs = self.policy == 3
                    || (self.policy == 1 && state::policy(w) != PolicyBits::Single && running);
                if needs {
                    self.quiesce = Some(Quiesce::default());
                    self.pc = 1;
                } else {
                    self.pc = 2;
                }
            }
            1 => {
                self.quiesce.as_mut().expect("quiesce").step(sim, ch)?;
                self.quiesce = None;
                if self.policy == 3 {
                    sim.torn_down = true;
                    return Some(());
                }
                self.pc = 2;
            }
            2 => {
                self.h = sim.head;
                self.upd = Upd::default();
                self.pc = 3;
            }
            3 => {
                let (h, bits, any) = (self.h, self.policy, self.any);
                let start = self.upd.step(
                    sim,
                    ch,
                    |w| {
                        let r = set_policy(w, h, bits, any);
                        Ok((r.new, r.start_instance))
                    },
                    |m| spec::set_policy(m, h, bits, any).0,
                )?;
                if bits != 0 {
                    sim.torn_down = false;
                }
                if !start {
                    return Some(());
                }
                sim.live_instances += 1;
                sim.token_holders += 1;
                self.inst = Some(Instance::new());
                self.pc = 4;
            }
            _ => {
                self.inst.as_mut().expect("instance").step(sim, me, ch)?;
                self.inst = None;
                return Some(());
            }
        }
        None
    }
}

// --- an upcall instance (upcall::run_instance)

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum InstPc {
    Top,
    Dequeue,
    Release,
    DeliverWord,
    DeliverHead,
    Enter,
    HandlerReturn,
    Reacquire,
    ExitHead,
    ExitCas,
    ExitOverflow,
    Restart,
    Abandon,
    WakeTearer,
}

#[derive(Debug)]
struct Instance {
    pc: InstPc,
    holds_token: bool,
    policy: PolicyBits,
    dq: DequeueOne,
    item: Option<Option<Ev>>,
    upd: Upd,
    h: u64,
    exit_word: u64,
}

impl Instance {
    fn new() -> Instance {
        Instance {
            pc: InstPc::Top,
            holds_token: true,
            policy: PolicyBits::Disabled,
            dq: DequeueOne::default(),
            item: None,
            upd: Upd::default(),
            h: 0,
            exit_word: 0,
        }
    }

    /// `wake_tearer`: after an instance ended.
    fn end(&mut self, sim: &mut Sim, new: u64) -> Option<()> {
        sim.live_instances -= 1;
        self.tearer_check(new)
    }

    /// `wake_tearer`: a teardown may wait for exactly this exit.
    fn tearer_check(&mut self, new: u64) -> Option<()> {
        if state::policy(new) == PolicyBits::Disabled && state::instances(new) == 0 {
            self.pc = InstPc::WakeTearer;
            None
        } else {
            Some(())
        }
    }

    fn step(&mut self, sim: &mut Sim, me: usize, ch: u8) -> Option<()> {
        match self.pc {
            InstPc::Top => {
                self.policy = state::policy(sim.word);
                if self.policy == PolicyBits::Disabled {
                    self.pc = InstPc::ExitHead;
                } else {
                    self.dq = DequeueOne::default();
                    self.pc = InstPc::Dequeue;
                }
            }
            InstPc::Dequeue => {
                let out = self.dq.step(sim, me, self.holds_token)?;
                self.item = match out {
                    DqOut::Ev(v) => Some(Some(v)),
                    DqOut::Overflow(_) => Some(None),
                    DqOut::Empty | DqOut::Closed => None,
                };
                self.upd = Upd::default();
                self.pc = match (self.item.is_some(), self.policy) {
                    (true, PolicyBits::Many) => InstPc::Release,
                    (true, _) => InstPc::DeliverWord,
                    (false, _) => InstPc::ExitHead,
                };
            }
            InstPc::Release => {
                self.upd.step(
                    sim,
                    ch,
                    |w| {
                        let n = state::release_token(w);
                        assert_eq!(Word::decode(n), spec::release_token(Word::decode(w)));
                        Ok((n, ()))
                    },
                    spec::release_token,
                )?;
                self.holds_token = false;
                sim.token_holders -= 1;
                self.pc = InstPc::DeliverWord;
            }
            // `deliver`: compute `more` (two loads), then call the handler.
            InstPc::DeliverWord => self.pc = InstPc::DeliverHead,
            InstPc::DeliverHead => self.pc = InstPc::Enter,
            InstPc::Enter => {
                sim.handler_enter(self.item.take().flatten());
                self.pc = InstPc::HandlerReturn;
            }
            InstPc::HandlerReturn => {
                sim.handlers_in_flight -= 1;
                self.upd = Upd::default();
                // The schedule may make the handler panic.
                self.pc = if !sim.finishing && ch & 0x3f == 0x2a {
                    InstPc::Abandon
                } else if self.policy == PolicyBits::Many {
                    InstPc::Reacquire
                } else {
                    InstPc::Top
                };
            }
            InstPc::Reacquire => {
                let (took, new) = self.upd.step(
                    sim,
                    ch,
                    |w| match reacquire(w) {
                        Reacquire::Token(n) => Ok((n, (true, n))),
                        Reacquire::Exit(n) => Ok((n, (false, n))),
                    },
                    |m| spec::reacquire(m).1,
                )?;
                if took {
                    self.holds_token = true;
                    sim.token_holders += 1;
                    self.pc = InstPc::Top;
                } else {
                    return self.end(sim, new);
                }
            }
            InstPc::ExitHead => {
                self.h = sim.head;
                self.upd = Upd::default();
                self.pc = InstPc::ExitCas;
            }
            InstPc::ExitCas => {
                let h = self.h;
                let ended = self.upd.step(
                    sim,
                    ch,
                    |w| match exit_instance(w, h) {
                        Exit::Exit(n) => Ok((n, Some(n))),
                        Exit::MoreWork => Err(None),
                    },
                    |m| spec::exit_instance(m, h).expect("model refuses the exit"),
                )?;
                match ended {
                    Some(new) => {
                        self.holds_token = false;
                        sim.token_holders -= 1;
                        sim.live_instances -= 1;
                        self.exit_word = new;
                        self.pc = InstPc::ExitOverflow;
                    }
                    // Work arrived (or a slot is being written): go on.
                    None => self.pc = InstPc::Top,
                }
            }
            // try_exit: an overflow counted by a poster whose RMW came
            // before the exit saw the token and started nothing.
            InstPc::ExitOverflow => {
                if sim.overflow_pending == 0 {
                    return self.tearer_check(self.exit_word);
                }
                self.upd = Upd::default();
                self.pc = InstPc::Restart;
            }
            InstPc::Restart => {
                let restarted = self.upd.step(
                    sim,
                    ch,
                    |w| match notify_overflow(w) {
                        Some((n, Notify::Upcall)) => Ok((n, true)),
                        _ => Err(false),
                    },
                    |m| spec::notify_overflow(m).expect("model: no restart").0,
                )?;
                if !restarted {
                    return self.tearer_check(self.exit_word);
                }
                sim.live_instances += 1;
                sim.token_holders += 1;
                self.holds_token = true;
                self.pc = InstPc::Top;
            }
            InstPc::Abandon => {
                let held = self.holds_token;
                let new = self.upd.step(
                    sim,
                    ch,
                    |w| {
                        let n = state::abandon_instance(w, held);
                        assert_eq!(
                            Word::decode(n),
                            spec::abandon_instance(Word::decode(w), held)
                        );
                        Ok((n, n))
                    },
                    |m| spec::abandon_instance(m, held),
                )?;
                if held {
                    sim.token_holders -= 1;
                }
                self.holds_token = false;
                return self.end(sim, new);
            }
            InstPc::WakeTearer => {
                sim.wake_waker();
                return Some(());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbitrary::{Arbitrary, Unstructured};

    #[test]
    fn seed_corpus_replays() {
        let n = crate::replay::<Input>("state_machine", run);
        assert!(n > 0, "no seed corpus for state_machine");
    }

    /// Random schedules, so that `cargo test` exercises the simulator
    /// without libFuzzer.
    #[test]
    fn random_schedules() {
        let mut rng = crate::Rng(0x5eed_cafe_f00d_beef);
        for _ in 0..300 {
            let bytes = rng.bytes(3000);
            let input = Input::arbitrary_take_rest(Unstructured::new(&bytes)).unwrap();
            run(&input);
        }
    }
}
