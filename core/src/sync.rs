//! The synchronization primitives the core uses, from `std` normally, from
//! `loom` under `--cfg loom` and from `shuttle` under `--cfg shuttle`, so that
//! the loom models and the fuzz crate's `schedule` target exercise the real
//! code; and the eventfd, the kernel's or (under loom) a stand-in
//! ([`eventfd`]).

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, fence},
    sync::{Arc, Mutex},
    thread,
};
#[cfg(not(any(loom, shuttle)))]
pub(crate) use std::{
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, fence},
    sync::{Arc, Mutex},
    thread,
};
#[cfg(shuttle)]
pub(crate) use {
    observed::StateWord,
    shuttle::{
        sync::Mutex,
        sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, fence},
        thread,
    },
    std::sync::Arc,
};
/// The consumer's eventfd and the cell that publishes it; a stand-in under
/// loom.
#[cfg(any(target_os = "linux", loom))]
pub(crate) mod eventfd;

/// The type of the state word: a plain `AtomicU64`, except under shuttle.
#[cfg(not(shuttle))]
pub(crate) type StateWord = AtomicU64;

pub(crate) use std::sync::atomic::Ordering;

/// `UnsafeCell` with loom's closure API, so the same code compiles both ways.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// A new cell (the upcall handler's; the ring's slots are zeroed memory
    /// except under shuttle).
    pub(crate) fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }

    /// Run `f` with a mutable raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }

    /// Run `f` with a shared raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
}

/// The store-buffering barrier pair of the room signal (see `room.rs`): the
/// consumer stores its head, then runs [`RoomBarrier::light`] and loads the
/// room flag; a poster that is about to sleep stores the flag, then runs
/// [`RoomBarrier::heavy`] and loads the head. The pair guarantees that one of
/// the two loads sees the other side's store.
///
/// On Linux with `membarrier(2)` (private expedited, registered once per
/// process) the light side is only a compiler fence, so the consumer pays
/// nothing on its hot path, and the heavy side is the system call: it runs a
/// full memory barrier on every CPU that is running a thread of this process
/// (a thread that is not running passed one when it was switched out), so
/// either the consumer's head store was drained before the poster's head
/// load, or the consumer's flag load comes after the barrier and sees the
/// flag (the folly `asymmetricLightBarrier` / `asymmetricHeavyBarrier` pair).
/// Without it (other systems, Miri, a kernel or sandbox that refuses the
/// registration) both sides are a `SeqCst` fence: the consumer's runs on its
/// cold path, which its flag then always takes (`RoomQueue::wake` in `room.rs`).
///
/// Under loom and shuttle the code is the same but for the system call,
/// which neither can run: it is modelled as what it guarantees, an `AcqRel`
/// read-modify-write of one atomic on both sides (whichever comes second in
/// its modification order sees the other side's store; a little stronger
/// than the real pair, whose light side orders nothing by itself). Which
/// mode an EVD models is chosen per thread before it is made
/// (`model_room_barrier_without_membarrier`, under the model checkers
/// only): with membarrier by default, without it for the models of the
/// fallback.
#[derive(Debug)]
pub(crate) struct RoomBarrier {
    /// `membarrier` private expedited is registered for this process (under
    /// the model checkers: the mode modelled).
    asymmetric: bool,
    /// The modelled system call's atomic.
    #[cfg(any(loom, shuttle))]
    modelled: AtomicU64,
}

impl RoomBarrier {
    pub(crate) fn new() -> Self {
        RoomBarrier {
            #[cfg(not(any(loom, shuttle)))]
            asymmetric: membarrier::registered(),
            #[cfg(any(loom, shuttle))]
            asymmetric: !MODEL_WITHOUT_MEMBARRIER.with(std::cell::Cell::get),
            #[cfg(any(loom, shuttle))]
            modelled: AtomicU64::new(0),
        }
    }

    /// The consumer's side, between its head store and its flag load: a
    /// compiler fence. Without membarrier the consumer's flag is always set
    /// and its cold path runs the `SeqCst` fence instead (see `RoomQueue::wake` in `room.rs`),
    /// so the hot path has no branch on the mode.
    #[inline(always)]
    pub(crate) fn light(&self) {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        // The model's half of what the heavy side's system call gives.
        #[cfg(any(loom, shuttle))]
        if self.asymmetric {
            self.modelled.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The heavy side is `membarrier`, so the light side needs no fence.
    pub(crate) fn is_asymmetric(&self) -> bool {
        self.asymmetric
    }

    /// A waiting poster's side, between its flag store and its head load.
    pub(crate) fn heavy(&self) {
        fence(Ordering::SeqCst);
        if self.asymmetric {
            #[cfg(not(any(loom, shuttle)))]
            membarrier::run();
            #[cfg(any(loom, shuttle))]
            self.modelled.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(any(loom, shuttle))]
std::thread_local! {
    /// The room barrier mode the next EVDs made on this thread model (a
    /// std thread-local: loom and shuttle run a model's threads on the
    /// thread that started it).
    static MODEL_WITHOUT_MEMBARRIER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Under loom and shuttle: whether the EVDs made on this thread from now on
/// model a room barrier without `membarrier` (the fallback of systems
/// without it: `SeqCst` fences on both sides, the consumer's on its cold
/// path) instead of with it (the default).
#[cfg(any(loom, shuttle))]
pub fn model_room_barrier_without_membarrier(without: bool) {
    MODEL_WITHOUT_MEMBARRIER.with(|m| m.set(without));
}

#[cfg(not(any(loom, shuttle)))]
mod membarrier {
    /// Register this process for private expedited membarriers, once; true if
    /// the kernel accepted (Linux 4.14 and later, unless a seccomp filter
    /// refuses the call).
    #[cfg(all(target_os = "linux", not(miri)))]
    pub(super) fn registered() -> bool {
        use rustix::thread::{MembarrierCommand, membarrier};
        static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *REGISTERED.get_or_init(|| membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok())
    }

    /// Run a barrier on every CPU running a thread of this process.
    #[cfg(all(target_os = "linux", not(miri)))]
    pub(super) fn run() {
        use rustix::thread::{MembarrierCommand, membarrier};
        loop {
            match membarrier(MembarrierCommand::PrivateExpedited) {
                Ok(()) => return,
                // The kernel allocates a CPU mask for the barrier (Linux
                // 5.10 and later, with CPUMASK_OFFSTACK): out of memory
                // fails the call, for now. Tried again after a nap: the
                // caller cannot go on without the barrier.
                Err(rustix::io::Errno::NOMEM) => crate::sync::nap(None),
                // Else it fails only with EPERM for an unregistered process:
                // impossible here, and a consumer that relies on it (it
                // skips its fence) would miss a wakeup, so stop.
                Err(e) => panic!(
                    "membarrier(PRIVATE_EXPEDITED) failed after its registration succeeded: {e}"
                ),
            }
        }
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    pub(super) fn registered() -> bool {
        false
    }

    #[cfg(not(all(target_os = "linux", not(miri))))]
    pub(super) fn run() {
        unreachable!("no asymmetric barrier without membarrier")
    }
}

/// A blocking wait's waker (one allocation): it unparks the waiting thread
/// and says it did. A wait registers it, looks at the state, and parks; but
/// registering or looking may run user code on the waiting thread (a
/// replaced waker's `Drop`, an upcall handler a post runs there), and code
/// that parks there takes the unpark token a wake left meanwhile. So the
/// wait [`clear`](ThreadWaker::clear)s the flag before it registers and
/// looks, and parks only if it is still clear after
/// ([`woken`](ThreadWaker::woken)); a wake it finds set sends it round
/// again, to register and look anew.
#[derive(Clone)]
pub(crate) struct ThreadWaker {
    flag: std::sync::Arc<Unparker>,
    waker: std::task::Waker,
}

impl ThreadWaker {
    /// A waker for the thread `t`.
    pub(crate) fn new(t: thread::Thread) -> Self {
        let flag = std::sync::Arc::new(Unparker {
            thread: t,
            woken: AtomicBool::new(false),
        });
        ThreadWaker {
            waker: std::task::Waker::from(flag.clone()),
            flag,
        }
    }

    /// The waker to register.
    pub(crate) fn waker(&self) -> &std::task::Waker {
        &self.waker
    }

    /// Forget the wakes so far: the registration and the look that follow
    /// answer them.
    pub(crate) fn clear(&self) {
        // Relaxed: the flag carries no data (the look reads the state
        // itself). The store is ordered before every wake that can take the
        // waker registered after it: the registration publishes the waker by
        // a Release (the waker slot's lock word, the room queue's lock), and
        // a notifier that takes it acquires it first.
        self.flag.woken.store(false, Ordering::Relaxed);
    }

    /// A wake came since the last [`ThreadWaker::clear`].
    ///
    /// Checked before parking, it closes the gap the token leaves: a wake
    /// whose flag store this load misses has not had its `unpark` taken by
    /// code on this thread (a park that took it synchronizes with that
    /// `unpark`, which the store precedes, so this later load would see the
    /// store), so the park that follows returns.
    pub(crate) fn woken(&self) -> bool {
        self.flag.woken.load(Ordering::Relaxed)
    }
}

/// The shared half of a [`ThreadWaker`]: the thread, and the flag each wake
/// sets before it unparks.
struct Unparker {
    thread: thread::Thread,
    woken: AtomicBool,
}

impl Unparker {
    fn wake(&self) {
        self.woken.store(true, Ordering::Relaxed);
        self.thread.unpark();
    }
}

impl std::task::Wake for Unparker {
    fn wake(self: std::sync::Arc<Self>) {
        Unparker::wake(&self);
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        Unparker::wake(self);
    }
}

/// Park the calling thread until it is unparked or `deadline` passes (it may
/// also return spuriously: callers re-check their condition).
#[cfg(not(loom))]
pub(crate) fn park(deadline: Option<std::time::Instant>) {
    match deadline {
        None => thread::park(),
        Some(d) => thread::park_timeout(d.saturating_duration_since(std::time::Instant::now())),
    }
}

/// Park until unparked: loom has no time, so a model's waits are untimed.
#[cfg(loom)]
pub(crate) fn park(_deadline: Option<std::time::Instant>) {
    thread::park();
}

/// How long [`nap`] sleeps: a wait stuck behind a thread stopped half-way
/// in a short step (a poster publishing its slot, a notifier letting the
/// waker slot go), once its back-off is used up.
#[cfg(not(any(loom, shuttle)))]
const NAP: std::time::Duration = std::time::Duration::from_micros(20);

/// Sleep for [`NAP`], or until `deadline` if that comes first. A sleep, not a
/// yield: under a real-time policy a yield gives the CPU only to threads of
/// the same priority or higher, and the thread waited for may have a lower
/// one. An unpark does not end it.
#[cfg(not(any(loom, shuttle)))]
pub(crate) fn nap(deadline: Option<std::time::Instant>) {
    let left = deadline.map_or(NAP, |d| {
        NAP.min(d.saturating_duration_since(std::time::Instant::now()))
    });
    std::thread::sleep(left);
}

/// Run a unit-test loom model (a model inside the crate, that needs its
/// internals) over every interleaving with at most `LOOM_MAX_PREEMPTIONS`
/// (default 3) preemptions, as the models of `core/tests/loom` run.
#[cfg(all(test, loom))]
pub(crate) fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// How long a back-off spins, by the clock, before it yields the CPU
/// instead: a thread it waits for that was preempted gets to run. The same
/// phase paces the consumer's waits (`consumer/wait.rs`).
#[cfg_attr(any(loom, shuttle), allow(dead_code))]
pub(crate) const SPIN_PHASE: std::time::Duration = std::time::Duration::from_micros(3);

/// When a back-off that may end in sleeping is used up: a yielding phase as
/// long as the spinning one after it (the consumer's default spin budget).
#[cfg(not(any(loom, shuttle)))]
const BACKOFF_BUDGET: std::time::Duration = SPIN_PHASE.saturating_mul(2);

/// Spin-then-yield back-off for the short waits the protocol has (a reserved
/// slot whose poster has not published yet; a resize in progress; a blocking
/// post before it sleeps), timed by the clock: a PAUSE per step while it is
/// younger than [`SPIN_PHASE`], a yield after, used up at `BACKOFF_BUDGET`.
/// A PAUSE lasts a few ns on one CPU and over ten on another, so a count of
/// them would spin for different times on each. The first step is a PAUSE
/// without a clock read (most waits end there); the phases count from the
/// second. A wait that goes on past the budget (the thread it waits for was
/// preempted in its step) naps at each step ([`nap`]): under a real-time
/// policy a yield runs only threads of the same priority or higher, and the
/// one waited for may have a lower one. A step is then up to [`NAP`] late,
/// plus the kernel's timer slack (50 µs by default for a normal thread,
/// none for a real-time one).
#[cfg(not(any(loom, shuttle)))]
pub(crate) struct Backoff(std::cell::Cell<Step>);

/// Where a [`Backoff`] is.
#[cfg(not(any(loom, shuttle)))]
#[derive(Clone, Copy)]
enum Step {
    /// No step yet.
    Fresh,
    /// The first step (a PAUSE) ran.
    Paused,
    /// The phases count from this instant (the second step's).
    Since(std::time::Instant),
}

#[cfg(not(any(loom, shuttle)))]
impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(std::cell::Cell::new(Step::Fresh))
    }

    /// One step: a PAUSE or a yield within the budget, a nap past it.
    pub(crate) fn snooze(&self) {
        self.snooze_until(None);
    }

    /// [`Backoff::snooze`], its nap cut at `deadline`.
    pub(crate) fn snooze_until(&self, deadline: Option<std::time::Instant>) {
        if !self.step() {
            nap(deadline);
        }
    }

    /// One step within the budget (a PAUSE or a yield) and true; false,
    /// without a step, once the budget is used up (time to block). One
    /// clock read decides and acts.
    pub(crate) fn step(&self) -> bool {
        let spinning = match self.0.get() {
            Step::Fresh => {
                self.0.set(Step::Paused);
                true
            }
            Step::Paused => {
                self.0.set(Step::Since(std::time::Instant::now()));
                true
            }
            Step::Since(t) => {
                let age = t.elapsed();
                if age >= BACKOFF_BUDGET {
                    return false;
                }
                age < SPIN_PHASE
            }
        };
        if spinning {
            std::hint::spin_loop();
        } else {
            thread::yield_now();
        }
        true
    }
}

/// Under loom or shuttle a wait must yield so the model lets the other
/// thread progress.
#[cfg(any(loom, shuttle))]
pub(crate) struct Backoff;

#[cfg(any(loom, shuttle))]
impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff
    }
    pub(crate) fn snooze(&self) {
        thread::yield_now()
    }
    pub(crate) fn snooze_until(&self, _deadline: Option<std::time::Instant>) {
        thread::yield_now()
    }
    /// No back-off before blocking in a model: the blocking path is the one
    /// with the races, and a model's retries only multiply its states.
    pub(crate) fn step(&self) -> bool {
        false
    }
}

/// Under shuttle, the state word is shuttle's `AtomicU64`, and every
/// successful compare-exchange on it is reported to the observer that the
/// fuzz crate registers with [`set_cas_observer`](crate::set_cas_observer),
/// called as `observer(address, old, new)` right after the CAS and before
/// any other thread can run.
#[cfg(shuttle)]
mod observed {
    use std::sync::OnceLock;
    use std::sync::atomic::Ordering;

    static OBSERVER: OnceLock<fn(usize, u64, u64)> = OnceLock::new();

    /// Register the observer; false if one was registered already.
    pub fn set_cas_observer(f: fn(usize, u64, u64)) -> bool {
        OBSERVER.set(f).is_ok()
    }

    #[derive(Default, Debug)]
    pub(crate) struct StateWord(shuttle::sync::atomic::AtomicU64);

    impl StateWord {
        pub(crate) fn new(v: u64) -> Self {
            StateWord(shuttle::sync::atomic::AtomicU64::new(v))
        }
        pub(crate) fn load(&self, o: Ordering) -> u64 {
            self.0.load(o)
        }
        pub(crate) fn compare_exchange_weak(
            &self,
            old: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u64, u64> {
            self.observed(
                old,
                new,
                self.0.compare_exchange_weak(old, new, success, failure),
            )
        }
        pub(crate) fn compare_exchange(
            &self,
            old: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u64, u64> {
            self.observed(
                old,
                new,
                self.0.compare_exchange(old, new, success, failure),
            )
        }
        fn observed(&self, old: u64, new: u64, r: Result<u64, u64>) -> Result<u64, u64> {
            if let (Ok(_), Some(f)) = (r, OBSERVER.get()) {
                f(self as *const Self as usize, old, new);
            }
            r
        }
    }
}
#[cfg(shuttle)]
pub use observed::set_cas_observer;
