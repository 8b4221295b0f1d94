//! Where each member CQ of a [`ChannelFeed`](super::ChannelFeed) is: dirty
//! (it must run `arm_and_drain`) and done (it failed), one bit per member
//! in each of two sets, kept apart from the members' feeds. A pass over a
//! channel of many CQs finds the few it serves 64 members at a time
//! ([`MemberFlags::next`]), and the feed knows whether every member failed
//! from a count.
//!
//! Invariants: bit `i` of each set is member `i`'s, and no bit at or past
//! `len` is set; a done member is never dirty; `failed` is the number of
//! done members.

/// Which members a pass visits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Which {
    /// Those that must run `arm_and_drain` (none of them done).
    Dirty,
    /// Those that did not fail.
    Live,
}

/// The two sets and the count of done members.
#[derive(Debug, Default)]
pub(super) struct MemberFlags {
    dirty: Vec<u64>,
    done: Vec<u64>,
    len: usize,
    failed: usize,
}

fn bit(i: usize) -> (usize, u64) {
    (i / 64, 1 << (i % 64))
}

/// Remove bit `i` of `set`, moving every bit above it down one place.
fn remove_bit(set: &mut [u64], i: usize) {
    let (w, _) = bit(i);
    let below = (1u64 << (i % 64)) - 1;
    set[w] = (set[w] & below) | ((set[w] >> 1) & !below);
    for k in w + 1..set.len() {
        set[k - 1] |= (set[k] & 1) << 63;
        set[k] >>= 1;
    }
}

impl MemberFlags {
    /// A new member: dirty (to be armed and drained), not done.
    pub(super) fn push(&mut self) {
        if self.len % 64 == 0 {
            self.dirty.push(0);
            self.done.push(0);
        }
        self.len += 1;
        self.set_dirty(self.len - 1, true);
    }

    /// Forget member `i`; the members after it move down one place.
    pub(super) fn remove(&mut self, i: usize) {
        assert!(i < self.len, "member {i} of {}", self.len);
        if self.is_done(i) {
            self.failed -= 1;
        }
        remove_bit(&mut self.dirty, i);
        remove_bit(&mut self.done, i);
        self.len -= 1;
        if self.len % 64 == 0 {
            self.dirty.pop();
            self.done.pop();
        }
    }

    pub(super) fn is_dirty(&self, i: usize) -> bool {
        debug_assert!(i < self.len, "member {i} of {}", self.len);
        let (w, b) = bit(i);
        self.dirty[w] & b != 0
    }

    pub(super) fn is_done(&self, i: usize) -> bool {
        debug_assert!(i < self.len, "member {i} of {}", self.len);
        let (w, b) = bit(i);
        self.done[w] & b != 0
    }

    /// Mark member `i` dirty or clean; a done member stays clean.
    pub(super) fn set_dirty(&mut self, i: usize, dirty: bool) {
        debug_assert!(i < self.len, "member {i} of {}", self.len);
        let (w, b) = bit(i);
        if dirty && self.done[w] & b == 0 {
            self.dirty[w] |= b;
        } else {
            self.dirty[w] &= !b;
        }
    }

    /// Member `i` failed: done, and clean from now on. True if it was not
    /// done before.
    pub(super) fn fail(&mut self, i: usize) -> bool {
        debug_assert!(i < self.len, "member {i} of {}", self.len);
        let (w, b) = bit(i);
        let newly = self.done[w] & b == 0;
        self.done[w] |= b;
        self.dirty[w] &= !b;
        self.failed += usize::from(newly);
        newly
    }

    /// There are members, and every one failed.
    pub(super) fn all_failed(&self) -> bool {
        self.len > 0 && self.failed == self.len
    }

    /// The first member at or after `from` that a pass over `which` visits.
    pub(super) fn next(&self, which: Which, from: usize) -> Option<usize> {
        let mut w = from / 64;
        let mut mask = u64::MAX.checked_shl((from % 64) as u32).unwrap_or(0);
        while w < self.dirty.len() {
            let word = match which {
                Which::Dirty => self.dirty[w],
                Which::Live => !self.done[w],
            };
            let bits = word & mask;
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                return (i < self.len).then_some(i);
            }
            w += 1;
            mask = u64::MAX;
        }
        None
    }
}

/// One pass over the members: from `start` round to just before it, each
/// member that `which` takes once, in order, whatever the flags of those
/// behind it become meanwhile.
pub(super) struct Pass {
    start: usize,
    pos: usize,
    wrapped: bool,
}

impl Pass {
    pub(super) fn new(start: usize) -> Self {
        Pass {
            start,
            pos: start,
            wrapped: false,
        }
    }

    /// The next member to visit, read from the flags as they are now.
    pub(super) fn next(&mut self, flags: &MemberFlags, which: Which) -> Option<usize> {
        if !self.wrapped {
            if let Some(i) = flags.next(which, self.pos) {
                self.pos = i + 1;
                return Some(i);
            }
            self.wrapped = true;
            self.pos = 0;
        }
        let i = flags.next(which, self.pos).filter(|&i| i < self.start)?;
        self.pos = i + 1;
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same operations on the sets and on a plain model: every query
    /// agrees, across word boundaries, after pushes, removals, marks and
    /// failures in a random order.
    #[test]
    fn the_sets_agree_with_a_plain_model() {
        let mut rng = 0x243f_6a88_85a3_08d3u64;
        let mut next = |m: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % m as u64) as usize
        };
        let mut flags = MemberFlags::default();
        let mut model: Vec<(bool, bool)> = Vec::new(); // (dirty, done)
        for _ in 0..20_000 {
            let len = model.len();
            match next(10) {
                0..=2 if len < 300 => {
                    flags.push();
                    model.push((true, false));
                }
                3 if len > 0 => {
                    let i = next(len);
                    flags.remove(i);
                    model.remove(i);
                }
                4..=6 if len > 0 => {
                    let (i, d) = (next(len), next(2) == 0);
                    flags.set_dirty(i, d);
                    model[i].0 = d && !model[i].1;
                }
                7 if len > 0 => {
                    let i = next(len);
                    assert_eq!(flags.fail(i), !model[i].1);
                    model[i] = (false, true);
                }
                _ => {}
            }
            let len = model.len();
            assert_eq!(flags.len, len);
            for (i, &(dirty, done)) in model.iter().enumerate() {
                assert_eq!(
                    (flags.is_dirty(i), flags.is_done(i)),
                    (dirty, done),
                    "member {i}"
                );
            }
            let failed = model.iter().filter(|m| m.1).count();
            assert_eq!(flags.all_failed(), len > 0 && failed == len);
            let from = next(len + 2);
            let want = |f: fn(&(bool, bool)) -> bool| (from..len).find(|&i| f(&model[i]));
            assert_eq!(
                flags.next(Which::Dirty, from),
                want(|m| m.0),
                "dirty from {from}"
            );
            assert_eq!(
                flags.next(Which::Live, from),
                want(|m| !m.1),
                "live from {from}"
            );
        }
    }

    /// A pass visits each member `which` takes once, from `start` round,
    /// and not one that becomes dirty behind it.
    #[test]
    fn a_pass_visits_each_member_once_from_its_start_round() {
        let mut flags = MemberFlags::default();
        for _ in 0..130 {
            flags.push();
        }
        for i in (0..130).filter(|i| i % 3 != 0) {
            flags.set_dirty(i, false);
        }
        flags.fail(3);
        let mut pass = Pass::new(64);
        let mut seen = Vec::new();
        while let Some(i) = pass.next(&flags, Which::Dirty) {
            seen.push(i);
            if i == 66 {
                flags.set_dirty(65, true); // behind the pass: not visited
            }
        }
        let want: Vec<usize> = (64..130)
            .chain(0..64)
            .filter(|i| i % 3 == 0 && *i != 3)
            .collect();
        assert_eq!(seen, want);
        let mut live = Pass::new(0);
        let mut count = 0;
        while live.next(&flags, Which::Live).is_some() {
            count += 1;
        }
        assert_eq!(count, 129);
    }

    /// Members marked dirty or clean ahead of a pass, in the part before
    /// its wrap and in the part after, are seen as they are when it gets
    /// there.
    #[test]
    fn a_pass_sees_the_flags_ahead_of_it_as_they_are_when_it_gets_there() {
        let mut flags = MemberFlags::default();
        for _ in 0..200 {
            flags.push();
        }
        for i in 0..200 {
            flags.set_dirty(i, i == 150);
        }
        let mut pass = Pass::new(100);
        let mut seen = Vec::new();
        while let Some(i) = pass.next(&flags, Which::Dirty) {
            seen.push(i);
            if i == 150 {
                flags.set_dirty(170, true); // ahead, before the wrap
                flags.set_dirty(10, true); // ahead, after the wrap
                flags.set_dirty(20, true);
            }
            if i == 170 {
                flags.set_dirty(20, false); // cleared ahead
            }
        }
        assert_eq!(seen, [150, 170, 10]);
    }

    /// Removing members down through several word boundaries keeps the
    /// others' flags, pops the emptied words, and leaves nothing set past
    /// the last member.
    #[test]
    fn removals_through_word_boundaries_keep_the_others_flags() {
        let mut flags = MemberFlags::default();
        for _ in 0..200 {
            flags.push();
        }
        let mark = |i: usize| i % 5 == 0;
        for i in 0..200 {
            flags.set_dirty(i, mark(i));
        }
        let mut alive: Vec<usize> = (0..200).collect();
        while !alive.is_empty() {
            let at = alive.len() / 2;
            flags.remove(at);
            alive.remove(at);
            assert_eq!(flags.dirty.len(), alive.len().div_ceil(64));
            for (i, &orig) in alive.iter().enumerate() {
                assert_eq!(flags.is_dirty(i), mark(orig), "member {i} (was {orig})");
            }
            assert_eq!(flags.next(Which::Dirty, alive.len()), None);
            if let Some(&last) = flags.dirty.last() {
                let used = alive.len() - (flags.dirty.len() - 1) * 64;
                assert_eq!(
                    last.checked_shr(used as u32).unwrap_or(0),
                    0,
                    "bits past the last"
                );
            }
        }
    }
}
