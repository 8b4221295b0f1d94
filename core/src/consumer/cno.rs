//! Binding a consumer's EVD to a [`Cno`](crate::Cno): bind, enable (the
//! EVD's own arm-then-check), disable (a barrier), move, unbind. The
//! protocol is in [`crate::cno`]; every atomic operation is `Shared`'s or
//! the CNO engine's.

use crate::cno::CnoHandle;
use crate::cno::engine::{Binding, CnoCore};
use crate::consumer::{ArmStatus, Consumer};
use crate::engine::Owed;
use crate::error::CnoError;
use crate::notify::Reached;
use crate::state::Arm;
use crate::sync::Arc;
use crate::unwind::Panics;

impl<T> Consumer<T> {
    /// Bind this EVD to `cno` with `key` (what [`Cno::wait`](crate::Cno::wait)
    /// hands back for it; keys are the caller's, the CNO does not check them
    /// for uniqueness). The EVD is not enabled yet: see
    /// [`Consumer::enable_cno`]. Works while posters run.
    ///
    /// # Errors
    /// [`CnoError::AlreadyBound`] if this EVD is bound (to any CNO: move it
    /// with [`Consumer::modify_cno`]); [`CnoError::Full`] if the CNO holds
    /// as many EVDs as it can; [`CnoError::CnoDropped`] if `cno` is a
    /// [`CnoHandle`] whose CNO was dropped.
    ///
    /// ```
    /// let cno = evd::Cno::new(1).unwrap();
    /// let (_p1, mut a) = evd::bounded::<u8>(4).unwrap();
    /// let (_p2, mut b) = evd::bounded::<String>(4).unwrap(); // any event type
    /// a.bind_cno(&cno, 1).unwrap();
    /// assert_eq!(a.bind_cno(&cno, 1), Err(evd::CnoError::AlreadyBound));
    /// assert_eq!(b.bind_cno(&cno, 2), Err(evd::CnoError::Full { capacity: 1 }));
    /// ```
    pub fn bind_cno(&mut self, cno: &impl AsRef<CnoHandle>, key: u64) -> Result<(), CnoError> {
        self.bind_with(cno.as_ref(), Some(key)).map(|_| ())
    }

    /// Bind this EVD to `cno` with a key the CNO hands out: one that no EVD
    /// bound to it now holds (whether the CNO handed it out or the caller
    /// chose it), below twice its capacity, so it can index a table of the
    /// caller's. It is the key nobody has held for the longest (never held
    /// ones first, lowest first), so a freed key, which the CNO's waiter may
    /// still have in hand from an earlier wait, names a new EVD as late as
    /// possible.
    ///
    /// ```
    /// let cno = evd::Cno::new(8).unwrap();
    /// let (_p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// let key = c.bind_cno_new_key(&cno).unwrap();
    /// assert!(key < 16);
    /// assert_eq!(c.cno_key(), Some(key));
    /// ```
    pub fn bind_cno_new_key(&mut self, cno: &impl AsRef<CnoHandle>) -> Result<u64, CnoError> {
        self.bind_with(cno.as_ref(), None)
    }

    fn bind_with(&mut self, cno: &CnoHandle, key: Option<u64>) -> Result<u64, CnoError> {
        if self.cno_key().is_some() {
            return Err(CnoError::AlreadyBound);
        }
        if cno.core.is_gone() {
            return Err(CnoError::CnoDropped);
        }
        let (slot, key) = cno.core.bind(key, true)?;
        self.install(&cno.core, slot, key);
        Ok(key)
    }

    /// Make `slot` of `core` this EVD's binding. Caller: not enabled, no
    /// trigger in flight (unbound, or past the disable barrier).
    fn install(&mut self, core: &Arc<CnoCore>, slot: u32, key: u64) {
        self.cno_fired = core.fired(slot);
        self.shared().set_cno_target(Some((core.clone(), slot)));
        self.cno = Some(Binding {
            core: core.clone(),
            slot,
            key,
        });
    }

    /// The key this EVD is bound with, if it is bound.
    ///
    /// ```
    /// let cno = evd::Cno::new(4).unwrap();
    /// let (_p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// assert_eq!(c.cno_key(), None);
    /// c.bind_cno(&cno, 42).unwrap();
    /// assert_eq!(c.cno_key(), Some(42));
    /// ```
    pub fn cno_key(&self) -> Option<u64> {
        self.cno.as_ref().map(|b| b.key)
    }

    /// Enable the EVD on its CNO: the EVD's own one-CAS arm-then-check.
    /// `Armed`: the next post (or close, or loss) puts the key in the CNO's
    /// ready set, exactly once. `Pending`: events (or a loss report) are
    /// queued now, so drain, then enable again. `Closed`: closed and
    /// drained. Enabling an enabled EVD with nothing queued and no loss to
    /// report leaves it enabled (it withdraws a direct arm, as below).
    ///
    /// A direct waiter ([`Consumer::wait`], [`Consumer::recv`], ...)
    /// preempts the CNO: while it is armed, a post wakes it and leaves the
    /// enable for the next post. Enabling again with that post's event still
    /// queued (or a loss a direct waiter was woken for) answers `Pending`
    /// and takes the enable back, so the CNO gets no key for the news that
    /// woke the direct waiter (a post that takes the enable first still
    /// brings its key). A direct arm still set when this is
    /// called (an explicit [`Consumer::arm`], or an async wait that returned
    /// `Pending` and was dropped) is withdrawn: nobody is waiting on it, and
    /// the next post's news is the CNO's. A direct wait that gives up with
    /// events queued or a loss report pending hands them to the CNO.
    ///
    /// ```
    /// use evd::ArmStatus;
    /// let cno = evd::Cno::new(4).unwrap();
    /// let (p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// assert_eq!(c.enable_cno(), Err(evd::CnoError::NotBound));
    /// c.bind_cno(&cno, 1).unwrap();
    /// p.post(1).unwrap();
    /// assert_eq!(c.enable_cno(), Ok(ArmStatus::Pending));
    /// c.try_dequeue().unwrap();
    /// assert_eq!(c.enable_cno(), Ok(ArmStatus::Armed));
    /// ```
    pub fn enable_cno(&mut self) -> Result<ArmStatus, CnoError> {
        match self.cno.as_ref().map(|b| b.core.is_gone()) {
            None => return Err(CnoError::NotBound),
            Some(true) => return Err(CnoError::CnoDropped),
            Some(false) => {}
        }
        let (arm, owed) = self.shared().cno_enable();
        match owed {
            Owed::Nothing => {}
            Owed::TakenBack => self.cno_fired = self.cno_fired.wrapping_sub(1),
            Owed::Trigger | Owed::TriggerByClose => self.cno_fired = self.cno_fired.wrapping_add(1),
        }
        if owed == Owed::TriggerByClose {
            // After the count, which the close's trigger meets: a waker the
            // close runs may panic out of here.
            self.shared().finish_close();
        }
        Ok(match arm {
            Arm::Armed(_) => ArmStatus::Armed,
            Arm::Pending => ArmStatus::Pending,
            Arm::Closed => ArmStatus::Closed,
        })
    }

    /// Disable the EVD on its CNO, and remove its key from the ready set if
    /// it is there. A barrier: once this returns, no post (or close) that
    /// started before adds the key. A key the CNO's waiter took before may
    /// still be in its hands. Nothing happens if the EVD is not bound.
    ///
    /// ```
    /// let mut cno = evd::Cno::new(4).unwrap();
    /// let (p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// c.bind_cno(&cno, 1).unwrap();
    /// c.enable_cno().unwrap();
    /// p.post(1).unwrap(); // key 1 is ready...
    /// c.disable_cno(); // ...and removed
    /// assert_eq!(cno.try_next(), None);
    /// assert_eq!(c.try_dequeue(), Ok(1), "the event stays");
    /// ```
    pub fn disable_cno(&mut self) {
        if let Some(b) = self.cno.clone() {
            self.settle(&b);
            b.core.remove(b.slot);
            if b.core.is_queued(b.slot) {
                // The removed key's entry is still in the ready ring: a later
                // enable would revive it there, ahead of keys that became
                // ready before. Move to a fresh slot, so the next trigger
                // joins the ring at its tail. (With every spare slot waiting
                // for the waiter's pop, keep this one: nothing is lost, the
                // key is only served early.)
                if let Some(slot) = b.core.bind_fresh(b.key) {
                    b.core.release(b.slot, false);
                    self.install(&b.core, slot, b.key);
                }
            }
        }
    }

    /// The disable barrier: clear `CNO_ARMED`, then wait for every trigger
    /// owed by this consumer's enables to reach the slot. Returns true if
    /// the EVD was enabled (the clear took the enable back).
    fn settle(&mut self, b: &Binding) -> bool {
        let was_enabled = self.shared().cno_disarm();
        if was_enabled {
            self.cno_fired = self.cno_fired.wrapping_sub(1);
        }
        b.core.wait_fired(b.slot, self.cno_fired);
        was_enabled
    }

    /// Move the EVD to another CNO (DAT's `dat_evd_modify_cno`) with `key`;
    /// binds it if it is not bound. No re-check is needed: an enable and a
    /// pending key move with the EVD, and a notification reaches exactly one
    /// of the two CNOs (the old one only if its waiter took the key before
    /// the move; from a dropped CNO, whose trigger may have told the EVD's
    /// own waiter too, see [`Cno`](crate::Cno)'s notes). On an error the EVD
    /// stays as it was. An enabled EVD is enabled on the new CNO as by
    /// [`enable_cno`](Consumer::enable_cno), with one difference: a direct
    /// arm still set is withdrawn as there, but events a direct waiter was
    /// woken for and left queued give the new CNO a key (a plain enable
    /// answers `Pending` for them): one notification more, never one less.
    ///
    /// ```
    /// let mut old = evd::Cno::new(4).unwrap();
    /// let mut new = evd::Cno::new(4).unwrap();
    /// let (p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// c.bind_cno(&old, 1).unwrap();
    /// c.enable_cno().unwrap();
    /// p.post(1).unwrap(); // pending on the old CNO
    /// c.modify_cno(&new, 2).unwrap();
    /// assert_eq!((old.try_next(), new.try_next()), (None, Some(2)));
    /// ```
    pub fn modify_cno(&mut self, cno: &impl AsRef<CnoHandle>, key: u64) -> Result<(), CnoError> {
        let cno = cno.as_ref();
        let Some(old) = self.cno.clone() else {
            return self.bind_cno(cno, key);
        };
        if cno.core.is_gone() {
            return Err(CnoError::CnoDropped);
        }
        // A move within one CNO is not a new binding there.
        let same = Arc::ptr_eq(&old.core, &cno.core);
        // The new slot first: a full CNO leaves the old binding as it was.
        let (slot, key) = cno.core.bind(Some(key), !same)?;
        let was_enabled = self.settle(&old);
        // A key still pending moves, also from a dropped CNO (its ready set
        // was discarded with it): the new CNO gets it. After a trigger that
        // found the CNO gone and told the EVD's own targets, that is one
        // wake more.
        let had_pending = old.core.remove(old.slot);
        old.core.release(old.slot, !same);
        self.install(&cno.core, slot, key);
        // News for the new CNO: events (or the end of the stream) that came
        // while the EVD was disabled for the move, which no poster triggered.
        let mut news = false;
        // A panic of a waker the enable or the trigger runs, raised once the
        // counts agree with the slot's.
        let mut panics = Panics::default();
        if was_enabled {
            let (arm, owed) = self.shared().cno_enable();
            // The barrier above cleared an enable left with news.
            debug_assert_ne!(owed, Owed::TakenBack);
            if owed == Owed::Nothing {
                news = !matches!(arm, Arm::Armed(_));
            } else {
                // The enable holds, or a trigger took it (a loss or a close,
                // during the move) and carries the news itself.
                self.cno_fired = self.cno_fired.wrapping_add(1);
            }
            if owed == Owed::TriggerByClose {
                let shared = self.shared();
                panics.run(|| shared.finish_close());
            }
        }
        if had_pending || news {
            if news {
                // `NOTIFIED` as the poster's reservation would have set it.
                self.shared().note_notification();
            }
            // This thread's own trigger: its count is in the slot once the
            // trigger's slot CAS is done, before it wakes the CNO's waiter
            // (user code: a waker that may panic). Counted first, so that a
            // panic out of the wake leaves the count and the slot agreeing,
            // and the next disable's barrier waits for nothing more.
            self.cno_fired = self.cno_fired.wrapping_add(1);
            let shared = self.shared();
            if cno.core.trigger(slot, &mut panics) == Reached::CnoGone {
                // Dropped since the check: the news goes to the EVD's own
                // targets, as any trigger's would, `NOTIFIED` first (a
                // poster's trigger has it set): an eventfd made later
                // carries it.
                shared.note_notification();
                panics.run(|| shared.notify_consumer());
            }
        }
        panics.resume();
        Ok(())
    }

    /// Unbind the EVD from its CNO: disable (the barrier), remove its key,
    /// free its place. Returns the key it had, or `None` if it was not bound.
    /// Dropping the consumer unbinds it; so does
    /// [`Consumer::into_upcalls`] (an EVD under an upcall policy is never
    /// bound).
    ///
    /// ```
    /// let cno = evd::Cno::new(4).unwrap();
    /// let (_p, mut c) = evd::bounded::<u8>(4).unwrap();
    /// c.bind_cno(&cno, 6).unwrap();
    /// assert_eq!(c.unbind_cno(), Some(6));
    /// assert_eq!((c.unbind_cno(), cno.bound()), (None, 0));
    /// ```
    pub fn unbind_cno(&mut self) -> Option<u64> {
        let b = self.cno.clone()?;
        self.settle(&b);
        b.core.remove(b.slot);
        b.core.release(b.slot, true);
        self.shared().set_cno_target::<CnoCore>(None);
        self.cno = None;
        Some(b.key)
    }
}
