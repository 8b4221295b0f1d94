//! Real libibverbs (cargo feature `ibverbs`): a device context, protection
//! domains, memory regions, RC queue pairs, and CQs with their own
//! completion channel, implementing [`CompletionQueue`](crate::CompletionQueue).
//!
//! The bindings are `rdma-mummy-sys` ([`ffi`]): verbs and rdma_cm in one
//! crate, with libibverbs and librdmacm loaded at run time (a host without
//! them gets `EOPNOTSUPP` errors, not a link failure), and no rdma-core
//! build. The verbs `verbs.h` defines `static inline` (`ibv_poll_cq`,
//! `ibv_req_notify_cq`, `ibv_post_send`, `ibv_post_recv`) are wrapped by
//! the bindings the way libibverbs' own inline functions call them: through
//! the context's ops table.
//!
//! Bring your own objects: every wrapper gives its raw handle (`as_ptr`,
//! and [`IbvCq::channel_ptr`]), and a context or CQ made elsewhere (by
//! librdmacm, another crate, raw [`ffi`] calls) can be wrapped with the
//! unsafe [`Context::from_raw`] and [`IbvCq::from_raw`], either taking it
//! over ([`Ownership::Owned`]) or leaving its destruction to its maker
//! ([`Ownership::Borrowed`]). A QP can be made on raw CQs
//! ([`ProtectionDomain::create_rc_qp_raw`]) and moved through any
//! transition ([`QueuePair::modify`]); memory can be registered with
//! chosen [`AccessFlags`], from the caller's buffer or raw memory. The
//! CQ's `cq_context` is the caller's ([`CqConfig`]): async CQ errors find
//! the CQ's id in the context's registry instead. Applications polling a
//! CQ themselves convert with [`work_completion`].
//!
//! One channel for many CQs: [`Context::create_channel`] makes a
//! [`CompletionChannel`] and [`Context::create_cq_on`] CQs on it, served
//! together by a [`ChannelFeed`](crate::ChannelFeed).
//!
//! Work requests: [`QueuePair::post_send_wr`] takes a [`SendRequest`]
//! (send, send with immediate, RDMA write with or without immediate, RDMA
//! read; up to [`MAX_SGES`] [`Sge`]s; signaled or not, solicited, fenced,
//! inline) and [`QueuePair::post_recv_sges`] a list of SGEs, both without
//! allocating. An [`Sge`] is made safely only from a [`MemoryRegion`]
//! ([`MemoryRegion::sge`], range-checked).
//!
//! Memory the device writes: posting with a safe [`Sge`] is sound because
//! the HCA checks an entry's key before it writes its memory, and a region
//! closed or dropped is deregistered first, so a request still naming it
//! fails. Two providers can write a receive's bytes with the CPU instead,
//! when the CQ is polled, with no key check: mlx5 (ConnectX, BlueField)
//! puts a small receive (and, on a QP with `sq_sig_all`, a small RDMA
//! read) in the completion itself by default (scatter-to-CQE), and its QPs
//! are therefore created here with that turned off
//! (`MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`); hns (HiSilicon) copies
//! inline receives at poll time on every QP, which no creation flag turns
//! off: a QP that takes receives is made there only with the caller's
//! promise to keep each region alive until its receives' completions are
//! polled ([`QpCaps::allow_cpu_copied_receives`], an `unsafe fn`), and is
//! refused otherwise.
//!
//! Thread safety: libibverbs objects may be used from any thread
//! (libibverbs is thread-safe); each wrapper is `Send`, the shared ones
//! (`Context`, `ProtectionDomain`) are `Sync` behind an `Arc`, and
//! `QueuePair` is `Sync` so that several threads may post on it (its state
//! changes take `&mut self`: no post may run beside them).
//!
//! Teardown: each object has an explicit `close`, which returns a failed
//! destroy as a [`TeardownError`] and, for the shared objects, refuses
//! while other handles are alive ([`CloseError::InUse`](crate::CloseError::InUse)). Dropping an
//! object runs the same destroy; a failure there is counted and handed to
//! the hook of the [`teardown`] module. An object whose destroy failed is
//! leaked with what it depends on. The order is the reverse of creation:
//! QPs and memory regions, then CQs, then protection domains, then the
//! context. A [`Borrowed`](Ownership::Borrowed) object is never destroyed
//! here.
//!
//! Needs an RDMA device to run (see `verbs/tests/softroce/run.sh`):
//!
//! ```no_run
//! use evd_verbs::ibv::{ConnectParams, Context, QpCaps, SendOp};
//! use evd_verbs::{CqId, Driver, DriverConfig, Feed, FeedMode, VerbsEvent};
//! let ctx = Context::open(None)?; // the first device, e.g. rxe0
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64, CqId(1))?; // with its own completion channel
//! let mut qp = pd.create_rc_qp(&cq, &cq, &QpCaps::default(), 1)?; // port 1
//! qp.connect(qp.endpoint(1, 0, 0)?, &ConnectParams::default())?; // loopback to itself
//! let mr = pd.register(4096)?;
//! let (poster, mut evd) = evd::bounded::<VerbsEvent>(256)?;
//! let mut driver = Driver::new(DriverConfig::default())?;
//! driver.register(Feed::new(cq, CqId(1), poster), FeedMode::Event)?;
//! let driver = driver.spawn()?;
//! qp.post_recv(1, &mr, 0, 64)?;
//! qp.post_send(2, SendOp::Send, &mr, 64, 8, true)?;
//! evd.wait(2, None)?; // the send and the receive completion
//! driver.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod async_events;
mod channel;
mod cm;
mod context;
mod cq;
mod mr;
mod pd;
mod qp;
pub mod teardown;

pub use async_events::IbvAsyncEvents;
pub use channel::CompletionChannel;
pub use cm::{CmChannel, CmConnParams, CmEvents, CmId};
pub use context::{Context, CqConfig, Ownership, device_names};
pub use cq::{IbvCq, work_completion};
pub use mr::{AccessFlags, MemoryRegion, RangeError, Sge};
pub use pd::ProtectionDomain;
pub use qp::{
    ConnectParams, Endpoint, MAX_SGES, Mtu, PostWrError, QpCaps, QpState, QueuePair, SendOp,
    SendRequest,
};

/// The raw bindings (`rdma-mummy-sys`), for the raw handles every object
/// here exposes and for verbs this module does not wrap.
pub use rdma_mummy_sys as ffi;

use std::io;
use std::mem::{self, MaybeUninit};
use std::os::fd::RawFd;
use std::sync::Arc;
use teardown::{TeardownError, VerbsObject};

/// Binding structs whose all-zero bit pattern is a valid value: integers,
/// raw pointers, and unions and arrays of them. libibverbs and librdmacm
/// expect such structs zero-filled where a field is not set.
///
/// # Safety
/// Only for types of which all-zero is a valid value.
unsafe trait Zeroable: Sized {}
// SAFETY: each is a C struct or union of integers, raw pointers and nested
// such structs (no references, no Rust enums, no NonNull).
unsafe impl Zeroable for ffi::ibv_gid {}
// SAFETY: as above.
unsafe impl Zeroable for ffi::ibv_qp_attr {}
// SAFETY: as above.
unsafe impl Zeroable for ffi::ibv_qp_init_attr {}
// SAFETY: as above.
unsafe impl Zeroable for ffi::ibv_qp_init_attr_ex {}
// SAFETY: as above (`dc_type` is a C enum's integer).
unsafe impl Zeroable for ffi::mlx5dv_qp_init_attr {}
// SAFETY: as above.
unsafe impl Zeroable for ffi::mlx5dv_context {}
// SAFETY: as above.
unsafe impl Zeroable for ffi::ibv_send_wr {}
// SAFETY: as above.
unsafe impl Zeroable for ffi::ibv_wc {}

/// A zero-filled binding struct.
fn zeroed<T: Zeroable>() -> T {
    // SAFETY: `Zeroable` promises all-zero is a valid `T`.
    unsafe { MaybeUninit::zeroed().assume_init() }
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// A verbs call that returns 0 or an errno (directly, or -1 with errno set).
fn check(ret: i32) -> io::Result<()> {
    match ret {
        0 => Ok(()),
        -1 => Err(last_err()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// The outcome of the destroy verb `op` on an `object`, which returned `ret`.
fn destroyed(object: VerbsObject, op: &'static str, ret: i32) -> Result<(), TeardownError> {
    check(ret).map_err(|error| TeardownError { object, op, error })
}

/// The end of a teardown in `Drop`: a failure goes to the counter and hook.
fn report_failure(result: Result<(), TeardownError>) {
    if let Err(e) = result {
        teardown::report(&e);
    }
}

/// Keep what `arc` points to alive for the rest of the process: an object
/// whose destroy failed still exists and still depends on it.
fn keep_forever<T>(arc: &Arc<T>) {
    mem::forget(Arc::clone(arc));
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd owned by libibverbs; only the O_NONBLOCK flag
    // changes, which libibverbs documents as the way to poll its channels.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(last_err());
        }
    }
    Ok(())
}
