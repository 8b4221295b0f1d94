//! A device's async events (`ibv_get_async_event`) as an
//! [`AsyncEventSource`](crate::AsyncEventSource).

use super::*;
use crate::cq::AsyncEventSource;
use crate::event::{AsyncElement, AsyncEvent, AsyncEventKind, CqId};
use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::Arc;

/// A device's async events (the context's async fd).
#[derive(Debug)]
pub struct IbvAsyncEvents {
    pub(super) ctx: Arc<Context>,
}

impl Drop for IbvAsyncEvents {
    fn drop(&mut self) {
        // One listener fewer: with none left, a later driver may take them.
        self.ctx
            .listeners
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl AsyncEventSource for IbvAsyncEvents {
    fn fd(&self) -> RawFd {
        // SAFETY: a live context.
        unsafe { (*self.ctx.ctx).async_fd }
    }

    fn next_event(&mut self) -> io::Result<Option<AsyncEvent>> {
        // SAFETY: pointers, an int and an enum whose zero is a valid value
        // (IBV_EVENT_CQ_ERR); libibverbs overwrites it.
        let mut ev: ffi::ibv_async_event = unsafe { mem::zeroed() };
        // SAFETY: a live context with a non-blocking async fd.
        if unsafe { ffi::ibv_get_async_event(self.ctx.ctx, &mut ev) } != 0 {
            let e = last_err();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let kind = AsyncEventKind::from_raw(
            // Read as the C int it is: a value newer than the bindings'
            // enum must not be materialised as that Rust enum.
            // SAFETY: the field is a 4-byte C enum, initialised by the call.
            unsafe { ptr::addr_of!(ev.event_type).cast::<u32>().read() },
        );
        // SAFETY: the union member to read is the one the event type names
        // (ibv_get_async_event(3)).
        let element = unsafe {
            use AsyncEventKind::*;
            match kind {
                CqError => AsyncElement::Cq(CqId((*ev.element.cq).cq_context as usize as u32)),
                QpFatal | QpRequestError | QpAccessError | CommEstablished | SqDrained
                | PathMigrated | PathMigrationError | QpLastWqeReached => {
                    AsyncElement::Qp((*ev.element.qp).qp_num)
                }
                SrqError | SrqLimitReached => AsyncElement::Srq,
                WqFatal => AsyncElement::Wq,
                PortActive | PortError | LidChange | PkeyChange | SmChange | ClientReregister
                | GidChange => AsyncElement::Port(ev.element.port_num as u8),
                DeviceFatal | Other(_) => AsyncElement::Device,
            }
        };
        // Copied out: acknowledge at once (ibv_ack_async_event(3)).
        // SAFETY: the event just got, acked once.
        unsafe { ffi::ibv_ack_async_event(&mut ev) };
        Ok(Some(AsyncEvent { kind, element }))
    }
}
