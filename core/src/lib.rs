//! # evd — a lock-free event dispatcher
//!
//! An EVD collects events (RDMA completions, connection events, async errors,
//! software events) from any number of posting threads and hands them to one
//! consumer: by dequeue, blocking wait, async await, an eventfd, or an upcall
//! run on the posting thread.
//!
//! Its core is a bounded MPSC ring whose tail lives in the same atomic word as
//! the notification flags ([`state`]). Re-enabling notification is one CAS
//! that either arms or reports that events are pending, so the consumer never
//! needs the "arm, then poll once more" of verbs, UCX or libfabric:
//!
//! ```
//! use evd::ArmStatus;
//! let (poster, mut consumer) = evd::bounded::<u64>(1024).unwrap();
//! let producer = std::thread::spawn(move || {
//!     // A full ring makes the post wait for room; a closed EVD would be an error.
//!     for i in 0..10_000 { poster.post_blocking(i).expect("the consumer outlives the producer"); }
//! });
//! let mut next = 0;
//! while next < 10_000 {
//!     loop {
//!         match consumer.try_dequeue() {
//!             Ok(v) => { assert_eq!(v, next); next += 1; }
//!             // Events given up by `post_lossy` are reported here, in order.
//!             Err(evd::TryDequeueError::Overflow(o)) => eprintln!("{} lost", o.lost),
//!             Err(_) => break, // empty, or closed (the arm says which)
//!         }
//!     }
//!     match consumer.arm() {
//!         // Nothing was posted since the last dequeue: safe to sleep (a
//!         // wait that meets a loss report returns it).
//!         ArmStatus::Armed => {
//!             if let Err(evd::WaitError::Overflow(o)) = consumer.wait(1, None) {
//!                 eprintln!("{} lost", o.lost);
//!             }
//!         }
//!         // An event slipped in between the dequeue and the arm: drain again.
//!         ArmStatus::Pending => {}
//!         ArmStatus::Closed => break,
//!     }
//! }
//! producer.join().unwrap();
//! ```
//!
//! [`Consumer::wait`] makes that arm itself, once its back-off (which reads
//! only the slots) has found nothing: a loop that only ever sleeps in `wait`
//! can call `wait(1, None)` after draining, and spares the posters' state
//! word a CAS at every empty poll. Arm explicitly to sleep elsewhere (an fd,
//! a CNO, a future).
//!
//! Handles: [`Poster`] (clone it; `Send + Sync`; lock-free, allocation-free
//! posts) and one [`Consumer`] (`Send`, not `Clone`: the single-consumer rule
//! is in the types). [`Consumer::into_upcalls`] turns the consumer into an
//! [`Upcalls`] dispatcher under DAT's upcall policies.
//!
//! # A tour
//!
//! Every mode below keeps the same two promises. **Exactly once**: each event
//! a post accepted reaches the consumer once, never twice, never dropped
//! (unless the consumer itself is dropped: that closes the EVD and drops
//! what is queued). **FIFO per poster**: events leave the ring in the order
//! their posts reserved slots, so one poster's events arrive in the order it
//! posted them (under `ManyInstances` upcalls they leave the ring in that
//! order, but the handler calls overlap and may finish in any order).
//!
//! The examples in the repository's `core/examples/` show each mode and
//! assert both: `cargo run --release -p evd --example busy` (and `batch`,
//! `blocking`, `async_recv`, `epoll`, `tokio_asyncfd`, `upcalls`, `lossy`);
//! `arm_then_check` shows the one-CAS arm at work, `room` posters that wait
//! for room, `cno` one thread serving many EVDs, and `soak` every consumer
//! mode at random against two posters for as many events as it is given.
//!
//! ## Posting
//!
//! * [`Poster::post`]: one CAS on the state word reserves a slot, then the
//!   event is written and published; allocation-free, and lock-free except
//!   while a [`Consumer::resize`] moves the ring. A full ring hands the
//!   event back as [`PostError::Full`]: that is **backpressure, not a
//!   loss**. Nothing is counted, the consumer is told nothing, and the
//!   refusal writes none of the EVD's shared lines (at most the handle's
//!   own hint of the head); retry ([`PostError::into_inner`] gives
//!   the event back), or give it up with `post_lossy`. A closed EVD hands it
//!   back as [`PostError::Closed`].
//! * [`Poster::post_batch`]: one reservation for as many events from the
//!   front of a `Vec` as there is room for, drained from it in order (the
//!   rest stay); one notification once the whole batch is published.
//!   [`BatchPostError::Full`] only when not one slot was free (an empty
//!   batch is `Ok(0)`).
//! * [`Poster::post_lossy`]: as `post`, but a full ring **gives the event
//!   up**: it is dropped, counted ([`Query::lost`]), and `Ok(`[`Lossy::Lost`]`)`
//!   is returned; the consumer later gets an [`Overflow`]` { lost }` report.
//!   It never returns `Full`; a closed EVD still hands the event back.
//! * Close: [`Poster::close`] or [`Consumer::close`]; dropping the last
//!   `Poster` closes too. Later posts are refused as `Closed`; the consumer
//!   dequeues what is queued, then sees the end of stream.
//!   [`Poster::closed`]`().await` ([`Closed`]) resolves once the EVD is
//!   closed, whoever closed it.
//!   [`Poster::set_unwaitable`] is the softer stop: blocking waits fail with
//!   [`WaitError::Unwaitable`] while posts keep queueing.
//!
//! ## Waiting for room
//!
//! A poster that would rather wait than retry a full ring:
//! [`Poster::post_blocking`], [`post_timeout`](Poster::post_timeout) and
//! [`post_deadline`](Poster::post_deadline) park the thread;
//! [`post_async`](Poster::post_async)`(ev).await` ([`PostAsync`]) waits in a
//! task; [`Poster::into_sink`] ([`PostSink`]) is a `futures` `Sink` that
//! holds one event and waits for room for it. Waiting posters queue FIFO; each slot the consumer
//! frees wakes one of them (no herd), and a woken poster that loses the slot
//! to another is first in line again. Nothing is lost or counted: the
//! timeout forms hand the event back as `Full` when the time is up, and
//! close hands it back as `Closed` to every waiter. While no poster waits
//! the consumer pays one load of its own cache line per head store (and a
//! fence where Linux's `membarrier(2)` is unavailable); a poster that starts
//! waiting pays a lock and one `membarrier`, which briefly interrupts every
//! CPU running a thread of this process. A pending `post_async` or a sink
//! holding an event keeps its place in the queue: poll it or drop it.
//! Inside an upcall of its own EVD (where the thread is the consumer) a
//! waiting post refuses a full ring at once instead of waiting for itself.
//!
//! A poster that must have the slot *before* it makes the event reserves
//! it: [`Poster::try_reserve`], or [`reserve`](Poster::reserve)`().await`
//! ([`Reserving`]), which waits in the same room queue, hands out a
//! [`Permit`] (an [`OwnedPermit`] from the `_owned` forms, to move into
//! another task) whose [`send`](Permit::send) is never refused as full. The
//! wait is cancel-safe: it holds no event and no slot until it resolves. A
//! permit's slot counts as taken for posts ([`Query::permits`]) but holds
//! nothing up for the consumer, which sees nothing queued until the send;
//! dropped unsent, the permit gives the slot back and wakes the next waiter.
//! At most [`Permit::MAX_OUT`] are out at once. While nobody holds one, a
//! post costs exactly what it did without them.
//!
//! ## Consuming
//!
//! | mode | call | wakes by | guarantees |
//! |---|---|---|---|
//! | busy | [`try_dequeue`](Consumer::try_dequeue), [`try_iter`](Consumer::try_iter) | never sleeps; pair it with [`arm`](Consumer::arm) to sleep | an event, a loss report, `Empty` or `Closed`, waiting for no post (an empty poll right after a run lingers, up to [`linger_cap`](Consumer::linger_cap)); `try_iter` stops at the first empty poll |
//! | batch | [`dequeue_batch`](Consumer::dequeue_batch) | never sleeps; pair it with `wait` | up to `max` events appended to a `Vec`, one head store; `Ok(0)` when nothing is ready |
//! | blocking | [`wait`](Consumer::wait), [`wait_deadline`](Consumer::wait_deadline) | spins, yields, then parks; the notifying post unparks the thread (behind a poster preempted in the middle of writing a slot it needs, it naps in 20 µs steps) | returns once `threshold` events are ready; dequeues no event (a loss report it meets, it returns: `Overflow`) |
//! | blocking | [`dequeue`](Consumer::dequeue), [`dequeue_timeout`](Consumer::dequeue_timeout), [`dequeue_deadline`](Consumer::dequeue_deadline), [`iter`](Consumer::iter), `for ev in &mut consumer` or `consumer` ([`IntoIter`]) | as `wait` | one event per call or item; the iterators end at the end of stream (or when one would block while the EVD is unwaitable) |
//! | async | [`recv`](Consumer::recv)`().await`, [`recv_batch`](Consumer::recv_batch)`(buf, max).await`, the [`Stream`](futures_core::Stream) impl | the notifying post wakes the task's waker (behind a poster preempted in the middle of writing a slot it needs, the task wakes itself and polls again: no nap on an executor's thread) | one event per `recv`, 1 to `max` per `recv_batch`, a stream of them ending at the end of stream; dropping a future loses nothing |
//! | eventfd (Linux) | [`notify_fd`](Consumer::notify_fd) in epoll, poll or io_uring | the notifying post adds 1 to the eventfd | readable until [`acknowledge`](NotifyFd::acknowledge)d; drain with the busy calls, then arm, and wait for the fd only after `Armed` |
//! | tokio | tokio's `AsyncFd` on the [`NotifyFd`] | tokio's reactor sees the eventfd readable | as the eventfd: readable, acknowledge, drain, arm |
//! | upcalls | [`into_upcalls`](Consumer::into_upcalls) | no thread parks: a post that finds no upcall running runs the handler on its own thread (an instance behind a poster preempted in the middle of writing its slot naps in 20 µs steps) | `SingleInstance`: one handler call at a time; `ManyInstances`: handlers overlap |
//!
//! The blocking and async calls arm for themselves; the busy, batch and
//! eventfd loops call [`Consumer::arm`] before they sleep. The blocking
//! waits spin and yield first ([`Consumer::set_spin_budget`], default
//! [`DEFAULT_SPIN_BUDGET`]); their timeout and deadline forms give up with
//! `Timeout`. A `wait` with a `threshold` above 1 is woken by the first post
//! after its arm, re-arms, and returns once `threshold` events are ready.
//!
//! ## Arm, then check: when a notification fires
//!
//! [`Consumer::arm`] is one CAS on the word that also holds the ring's tail
//! (just a load when it finds events), so it cannot miss a post that lands
//! after the last dequeue: [`ArmStatus::Armed`] (nothing queued: the next
//! post notifies, sleeping is safe), [`ArmStatus::Pending`] (events are
//! queued, or a post is still writing its slot: drain again; there is no
//! second poll to make) or [`ArmStatus::Closed`] (closed and drained).
//!
//! A notification fires when a post, a batch post, a lossy post's loss or a
//! close finds the EVD armed. That one operation disarms it in the same
//! atomic step (for a post, the CAS that takes its slot) and notifies once:
//! the registered waker (a parked thread or an awaiting task) and, if one
//! was made, the eventfd. Posts after it notify nothing until the consumer
//! arms again: one arm, at most one notification. It is sticky:
//! [`Query::notified`] stays set until the consumer finds the ring empty
//! on re-enabling (an arm, or a CNO enable that arms it, finding it
//! empty; the end of an upcall instance that finds it empty), and the
//! eventfd stays readable until it is acknowledged.
//!
//! ```
//! use evd::ArmStatus;
//! let (poster, mut consumer) = evd::bounded(8).unwrap();
//! assert_eq!(consumer.arm(), ArmStatus::Armed);
//! poster.post(1).unwrap(); // disarms and notifies
//! poster.post(2).unwrap(); // not armed any more: no notification
//! assert_eq!(consumer.query().notifications, 1);
//! assert_eq!(consumer.arm(), ArmStatus::Pending); // events are waiting: no arm
//! assert!(consumer.query().notified); // sticky until an arm finds the ring empty
//! assert_eq!(consumer.try_iter().collect::<Vec<_>>(), [Ok(1), Ok(2)]);
//! assert_eq!(consumer.arm(), ArmStatus::Armed);
//! assert!(!consumer.query().notified);
//! ```
//!
//! ## Loss reports and the end of stream
//!
//! Only `post_lossy` loses events (a post whose own call panics in user
//! code it runs before its event is in the ring, such as an upcall handler
//! run to make room or a waker a close it finishes notifies, drops that
//! event with the panic: the poster hears of it, not the consumer; see the
//! Panics sections of the posting calls). The consumer hears of
//! `post_lossy`'s losses as one
//! [`Overflow`]` { lost }` report covering every loss since the last one:
//! [`TryDequeueError::Overflow`] from `try_dequeue` and `dequeue_batch`,
//! [`DequeueError::Overflow`] from the blocking dequeues,
//! [`WaitError::Overflow`] from a `wait` that would otherwise block,
//! [`RecvError::Overflow`] from `recv`, an `Err(Overflow)` item from the
//! iterators and the `Stream`, and an `Err(Overflow)` call of an upcall
//! handler. A loss wakes an armed consumer (or starts an upcall). A pending
//! report comes first, ahead of the queued events, but a dequeue right after
//! a report takes an event if one is ready, so a flood of losses cannot
//! starve the consumer: two reports come back to back only when no event
//! was ready between them (a dequeue right after a report that finds none
//! ready returns the next report at once if one came, else `Empty`, or
//! `Ok(0)` from a batch). A `wait` whose threshold is met
//! returns `Ok` and leaves a pending report to the next dequeue.
//!
//! Once the EVD is closed and drained, the consumer sees the **end of
//! stream**: [`TryDequeueError::Closed`], [`DequeueError::Closed`],
//! [`RecvError::Closed`], [`ArmStatus::Closed`], and the iterators and the
//! `Stream` end; a `wait` whose threshold can no longer be met fails with
//! [`WaitError::Closed`]. **Every loss is reported before the end of
//! stream.**
//!
//! ```
//! use evd::{Lossy, Overflow, PostError, TryDequeueError};
//! let (poster, mut consumer) = evd::bounded(2).unwrap();
//! poster.post(1u8).unwrap();
//! poster.post(2).unwrap();
//! assert_eq!(poster.post(3), Err(PostError::Full(3))); // handed back, not counted
//! assert_eq!(poster.post_lossy(3), Ok(Lossy::Lost)); // given up, counted
//! assert_eq!(poster.post_lossy(4), Ok(Lossy::Lost));
//! poster.close();
//! let all: Vec<_> = consumer.try_iter().collect();
//! assert_eq!(all, [Err(Overflow { lost: 2 }), Ok(1), Ok(2)]);
//! assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
//! ```
//!
//! ## Upcalls
//!
//! [`Consumer::into_upcalls`]`(policy, invoke, handler)` hands the consumer
//! to an [`Upcalls`] dispatcher. The handler (a `Fn(Result<T, Overflow>,
//! bool)`, `Send + Sync`) gets each event (or loss report) and whether
//! another event was ready behind it. A post that finds upcalls enabled and
//! none running takes the consumer's token in its reservation CAS and, after
//! publishing its own event, runs the handler on its own thread before it
//! returns. A post that finds the ring full while none runs starts one too,
//! which drains the ring, then posts.
//!
//! * [`UpcallPolicy::SingleInstance`]: at most one handler call at any
//!   moment; the running upcall delivers what other threads post meanwhile
//!   and ends only when the ring is empty (or upcalls are disabled).
//! * [`UpcallPolicy::ManyInstances`]: an upcall takes one event out, hands
//!   the token back and runs the handler, so posts meanwhile start more
//!   (at most 63 in flight). Events leave the ring in FIFO order; handlers
//!   overlap and may finish in any order. A post that lands while an
//!   instance holds the token (between its dequeue and the hand-back)
//!   starts none: its event waits for that instance's next round, after its
//!   handler, or for the next post. So a handler must not wait for a later
//!   event of its own EVD to be handled.
//! * [`Invoke::Any`]: enabling upcalls with events queued runs one at once,
//!   on the enabling thread. [`Invoke::New`]: the queued events wait for the
//!   next post, which delivers them too.
//! * [`Upcalls::set_policy`] and [`Upcalls::set_handler`] are race-free
//!   against posts and running upcalls. [`Upcalls::teardown`] disables
//!   upcalls, waits until none runs, drops the handler and gives the
//!   [`Consumer`] back (queued events can then be dequeued); called from
//!   inside one of its own upcalls it panics, and the dispatcher it consumed
//!   is dropped (the EVD closes; [`Upcalls::try_teardown`] hands it back
//!   instead). A panicking handler gives the
//!   token back; the EVD stays usable (but for a panic in the upcall that
//!   [`Consumer::into_upcalls`] runs itself, which has no dispatcher to
//!   return yet: see there).
//!
//! ## One waiter for many EVDs: the CNO
//!
//! A [`Cno`] (DAT's consumer notification object) lets one thread sleep on
//! many EVDs, of any event types, and wake with the keys of those that have
//! work: a ready set, not a hint, so nothing is scanned. Bind each EVD with
//! a key ([`Consumer::bind_cno`]); [`Consumer::enable_cno`] is the EVD's own
//! one-CAS arm-then-check (`Armed`, or `Pending`: drain now). The loop:
//!
//! ```
//! use evd::{ArmStatus, Cno};
//! let mut cno = Cno::new(64).unwrap();
//! let mut conns = Vec::new();
//! let mut posters = Vec::new();
//! for key in 0..4u64 {
//!     let (p, mut c) = evd::bounded::<u64>(16).unwrap();
//!     c.bind_cno(&cno, key).unwrap();
//!     conns.push(c);
//!     posters.push(p);
//! }
//! let mut ready: Vec<u64> = (0..4).collect(); // enable each once
//! posters[2].post(7).unwrap();
//! let mut served = Vec::new();
//! while served.len() < 1 {
//!     for &key in &ready {
//!         let c = &mut conns[key as usize];
//!         loop {
//!             // (A loss report ends this drain as `Empty` would: a loop
//!             // with lossy posters matches `Err(Overflow)` too.)
//!             while let Ok(ev) = c.try_dequeue() {
//!                 served.push((key, ev));
//!             }
//!             match c.enable_cno().unwrap() {
//!                 ArmStatus::Armed | ArmStatus::Closed => break,
//!                 ArmStatus::Pending => {} // more came: drain again
//!             }
//!         }
//!     }
//!     ready.clear();
//!     if served.is_empty() {
//!         cno.wait(&mut ready); // sleeps; wakes with the keys that have work
//!     }
//! }
//! assert_eq!(served, [(2, 7)]);
//! ```
//!
//! A direct waiter on an EVD preempts the CNO for it;
//! [`Consumer::disable_cno`] is a barrier; [`Consumer::modify_cno`] moves an
//! EVD between CNOs with no re-check; the CNO waits blocking
//! ([`Cno::wait`], with timeouts), async ([`Cno::ready_set`], a `Stream` of
//! keys) or through an eventfd ([`Cno::notify_fd`]). The protocol is in
//! [`cno`].
//!
//! ## Platforms and cfgs
//!
//! * Linux only (`target_os = "linux"`): [`Consumer::notify_fd`] and
//!   [`NotifyFd`], an eventfd made through rustix, evd's only
//!   platform-specific dependency. Everything else is portable `std` code
//!   (thread park/unpark, `std::task` wakers) on any 64-bit target: the
//!   state word is an `AtomicU64`, and a ring may hold 2^32 events
//!   ([`MAX_CAPACITY`], a `usize`). A 32-bit target is refused at compile
//!   time.
//! * Not for users: `--cfg loom --features __loom` builds the crate for its
//!   loom models (its `NotifyFd` is a stand-in, an atomic counter with no
//!   file descriptor, and waits are untimed), `--cfg
//!   shuttle --features __shuttle` for the fuzz crate's schedules. loom and
//!   shuttle are optional dependencies behind those hidden features, so they
//!   never reach a dependent's `Cargo.lock`. The `state` module is public
//!   only for the fuzz crate and hidden from these docs.
//!
//! ## Observability
//!
//! [`Consumer::query`], [`Poster::query`] and [`Upcalls::query`] give a
//! [`Query`]: the EVD's state and its counters, which only grow. Read it
//! from a thread of its own to export it periodically (evd-verbs'
//! `examples/metrics_export.rs` does so with a driver's counters beside).
//!
//! With the cargo feature `tracing` (off by default; without it there is no
//! `tracing` dependency and no code), evd emits [`tracing`] events at its
//! control-plane points, never on a post's or a dequeue's path:
//!
//! | event | level | target |
//! |---|---|---|
//! | an EVD closed (once) | DEBUG | `evd::engine::word` |
//! | [`Consumer::resize`] done | DEBUG | `evd::consumer` |
//! | [`Upcalls::set_policy`] done | DEBUG | `evd::upcall` |
//! | a blocking post slept longer than 1 ms for room (once, when it ends) | INFO | `evd::poster::wait` |
//!
//! [`tracing`]: https://docs.rs/tracing
//!
//! # Where things live
//!
//! Read top-down: each module uses only modules in rows above it or named
//! before it in its own row, so there is no import circle
//! (`scripts/module-circles` checks it, file by file, and prints the files
//! in such an order).
//!
//! | module | concept | a change goes here when… |
//! |---|---|---|
//! | [`state`] | the state word and the loss word: bit layout, transition table, pure `const fn` transitions | a new bit or transition (and the fuzz crate's reference model, `fuzz/src/spec.rs`) |
//! | `sync`, `pace`, `unwind`, `frames`, `trace` | std/loom/shuttle switch; the consumer's linger; panic collection; the thread's chain of handler calls (am I inside this EVD's handler?); the control-plane events of the `tracing` feature | — (a new traced event: `trace`'s `event!` at the point, and the table above) |
//! | `ring`, `error`, `query` | slot storage, stamps and the capacity; typed errors; [`Query`] | the slot layout changes |
//! | `room` | the room signal: the waiting posters' queue, its flags in the consumer's line, the barrier pair | how posters wait for room |
//! | `waker_list` | wakers woken all at once: tasks awaiting [`Poster::closed`] (woken by close) and [`Poster::reserve`] at the permit limit (woken by a permit back) | how posters wait for close or a permit |
//! | `waker_slot` | the consumer's one registered waker: atomic-waker's lock word, with a registration that survives a waker whose clone or drop panics | how the consumer's waker is kept |
//! | `notify` | where a notification goes: waker, eventfd, and the CNO link (a trait the CNO implements) | a new way to be notified |
//! | `upcall/handler` | the replaceable upcall handler | handler replacement |
//! | `engine/` | `Shared`, a composition of owners, each with its atomics and its ordering argument: `word` (every CAS on the state word, the release sequence as a whole), `consumer_line` and `dequeue` (the head and the dequeue paths), `loss` (the loss word), `resize` (the ring replaced under posters), `snapshot` (queries), `waits` (the engine's calls into the room signal and the waker lists) | an ordering question: the owner of that atomic |
//! | `upcall/instance` | one upcall run on a posting thread | how an instance takes, delivers, exits |
//! | `poster/` | [`Poster`], [`Lossy`]; `attempt` (one try of a waiting post), `wait`, `future` ([`PostAsync`]), `closed` ([`Closed`]), `sink` ([`PostSink`]), `room` ([`RoomWaiter`]), `permit` ([`Permit`], [`OwnedPermit`], [`Reserving`]), `snapshot` (what a poster sees: `query`, `len`, `free_slots`) | a new way to post |
//! | `cno/slot`, `cno/engine` | the slot word's pure transitions; the CNO's slot table, ready ring and the typed binding | CNO behaviour (a new slot bit: `slot` and the fuzz model) |
//! | `consumer/` | [`Consumer`], [`ArmStatus`]; `wait` (blocking waits and dequeues), `iter` ([`TryIter`], [`Iter`], [`IntoIter`]), `future` ([`Recv`], [`RecvBatch`], `Stream`), `eventfd` ([`NotifyFd`]) | a new consumer behaviour |
//! | [`cno`] | [`Cno`], [`CnoHandle`]: the ready ring's consumer; the protocol | the CNO's waiting API |
//! | `consumer/cno` | bind, enable, disable, move (the consumer holds the binding) | how an EVD joins a CNO |
//! | `upcall/` | [`Upcalls`] and its policies | upcall policy changes |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!(
    "evd needs a 64-bit target: a ring may hold 2^32 events (`MAX_CAPACITY`, a `usize`)"
);
#[cfg(all(loom, not(feature = "__loom")))]
compile_error!("`--cfg loom` needs `--features __loom` (the loom dependency is optional)");
#[cfg(all(shuttle, not(feature = "__shuttle")))]
compile_error!("`--cfg shuttle` needs `--features __shuttle` (the shuttle dependency is optional)");

pub mod cno;
mod consumer;
mod engine;
mod error;
mod frames;
mod notify;
mod pace;
mod poster;
mod query;
mod ring;
mod room;
// Not part of the semver API: exposed for the fuzz crate's reference model
// (`fuzz/src/spec.rs`), and may change in any release.
#[doc(hidden)]
pub mod state;
mod sync;
mod trace;
mod unwind;
mod upcall;
mod waker_list;
mod waker_slot;

pub use cno::{Cno, CnoHandle, ReadySet};
#[cfg(any(target_os = "linux", loom))]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
pub use consumer::NotifyFd;
pub use consumer::{
    ArmStatus, Consumer, DEFAULT_LINGER_CAP, DEFAULT_SPIN_BUDGET, IntoIter, Iter, Recv, RecvBatch,
    TryIter,
};
pub use error::{
    BatchPostError, CnoError, CreateError, DequeueError, Overflow, PolicyError, PostError,
    RecvError, ResizeError, TryDequeueError, WaitError,
};
pub use poster::{
    Closed, Lossy, OwnedPermit, Permit, PostAsync, PostSink, Poster, Reserving, RoomWaiter,
};
pub use query::{Query, UpcallPolicy};
pub use ring::MAX_CAPACITY;
pub use state::Invoke;
pub use upcall::{Handler, Upcalls};

/// Create an EVD holding at least `capacity` events, split into its posting
/// handle and its consumer.
///
/// The capacity is rounded up to a power of two (as DAT's `evd_min_qlen` is a
/// minimum); [`Consumer::query`] reports the real one.
///
/// ```
/// let (poster, mut consumer) = evd::bounded::<&str>(8).unwrap();
/// poster.post("hello").unwrap();
/// assert_eq!(consumer.try_dequeue(), Ok("hello"));
///
/// assert_eq!(evd::bounded::<u8>(0).unwrap_err(), evd::CreateError::ZeroCapacity);
/// ```
pub fn bounded<T: Send>(capacity: usize) -> Result<(Poster<T>, Consumer<T>), CreateError> {
    if capacity == 0 {
        return Err(CreateError::ZeroCapacity);
    }
    let log2 = ring::cap_log2_for(capacity).ok_or(CreateError::CapacityTooLarge {
        requested: capacity,
    })?;
    let buffer = ring::Buffer::try_new(log2).ok_or(CreateError::AllocFailed {
        capacity: 1 << log2,
    })?;
    let shared = sync::Arc::new(engine::Shared::new(log2, buffer));
    Ok((Poster::new(shared.clone(), 0), Consumer::new(shared)))
}

/// Under `--cfg shuttle` only: the fuzz crate's hook on the state word (see
/// `sync.rs`). Not part of the API.
#[cfg(shuttle)]
#[doc(hidden)]
pub use sync::set_cas_observer;

/// Under `--cfg loom` and `--cfg shuttle` only: the room barrier mode the
/// models' EVDs use (see `sync.rs`). Not part of the API.
#[cfg(any(loom, shuttle))]
#[doc(hidden)]
pub use sync::model_room_barrier_without_membarrier;
