//! [`AccessFlags`]: what a memory region (or a QP) allows.

use crate::ibv::ffi;
use std::fmt;
use std::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Sub};

/// The access a memory region (or a QP) allows (`ibv_access_flags`).
///
/// Local reads are always allowed. libibverbs refuses `REMOTE_WRITE` or
/// `REMOTE_ATOMIC` without `LOCAL_WRITE` (`EINVAL`).
///
/// ```
/// use evd_verbs::ibv::AccessFlags;
/// let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
/// assert!(rw.contains(AccessFlags::REMOTE_READ));
/// assert!(!rw.contains(AccessFlags::REMOTE_WRITE));
/// assert_eq!(rw - AccessFlags::REMOTE_READ, AccessFlags::LOCAL_WRITE);
/// assert_eq!(rw & AccessFlags::LOCAL_WRITE, AccessFlags::LOCAL_WRITE);
/// assert!(AccessFlags::empty().is_empty());
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// `IBV_ACCESS_LOCAL_WRITE`: the device may write the memory for local
    /// work requests (receives, RDMA read responses).
    pub const LOCAL_WRITE: AccessFlags =
        AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// `IBV_ACCESS_REMOTE_WRITE`: peers may RDMA-write it.
    pub const REMOTE_WRITE: AccessFlags =
        AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// `IBV_ACCESS_REMOTE_READ`: peers may RDMA-read it.
    pub const REMOTE_READ: AccessFlags =
        AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    /// `IBV_ACCESS_REMOTE_ATOMIC`: peers may run atomics on it.
    pub const REMOTE_ATOMIC: AccessFlags =
        AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0);

    /// No flag: local reads only.
    ///
    /// ```
    /// assert_eq!(evd_verbs::ibv::AccessFlags::empty().bits(), 0);
    /// ```
    pub const fn empty() -> AccessFlags {
        AccessFlags(0)
    }

    /// Any `ibv_access_flags` bits, including those without a constant
    /// here (e.g. `IBV_ACCESS_RELAXED_ORDERING`), passed on as they are.
    ///
    /// ```
    /// use evd_verbs::ibv::{ffi, AccessFlags};
    /// let f = AccessFlags::from_bits(ffi::ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0)
    ///     | AccessFlags::LOCAL_WRITE;
    /// assert!(f.contains(AccessFlags::LOCAL_WRITE));
    /// ```
    pub const fn from_bits(bits: u32) -> AccessFlags {
        AccessFlags(bits)
    }

    /// The `ibv_access_flags` bits.
    ///
    /// ```
    /// use evd_verbs::ibv::{ffi, AccessFlags};
    /// assert_eq!(AccessFlags::REMOTE_READ.bits(), ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
    /// ```
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    ///
    /// ```
    /// use evd_verbs::ibv::AccessFlags;
    /// assert!((AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).contains(AccessFlags::REMOTE_WRITE));
    /// ```
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no flag is set.
    ///
    /// ```
    /// assert!(!evd_verbs::ibv::AccessFlags::LOCAL_WRITE.is_empty());
    /// ```
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (AccessFlags::LOCAL_WRITE, "LOCAL_WRITE"),
            (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
            (AccessFlags::REMOTE_READ, "REMOTE_READ"),
            (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        let mut rest = self.0;
        let mut first = true;
        f.write_str("AccessFlags(")?;
        for (flag, name) in names {
            if self.contains(flag) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !flag.0;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str(" | ")?;
            }
            write!(f, "{rest:#x}")?;
        }
        f.write_str(")")
    }
}

impl BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: AccessFlags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for AccessFlags {
    type Output = AccessFlags;
    fn bitand(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 & rhs.0)
    }
}

impl BitAndAssign for AccessFlags {
    fn bitand_assign(&mut self, rhs: AccessFlags) {
        self.0 &= rhs.0;
    }
}

impl Sub for AccessFlags {
    type Output = AccessFlags;
    /// The flags of `self` without those of `rhs`.
    fn sub(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 & !rhs.0)
    }
}
