//! The auto-trait and `Clone` promises of the public docs, one test per
//! promise, checked at compile time: each test's `const _` block fails to
//! type-check, and the file to build, if its promise stops holding. (The
//! negative promises are `compile_fail` doctests on the types themselves.)
//!
//! The RDMA wrappers' promises (`evd_verbs::ibv`) are checked with the
//! `ibverbs` feature, which that module needs.

use evd_verbs::DriverHandle;
use evd_verbs::soft::{SoftChannel, SoftCqProducer};

const fn assert_send<T: Send>() {}
const fn assert_sync<T: Sync>() {}
const fn assert_clone<T: Clone>() {}

/// `DriverHandle`'s doc: "usable from any thread".
#[test]
fn a_driver_handle_is_send_and_sync() {
    const _: () = {
        assert_send::<DriverHandle>();
        assert_sync::<DriverHandle>();
    };
}

/// `SoftCqProducer`'s doc: "Cloneable, usable from any thread".
#[test]
fn a_soft_cq_producer_is_clone_send_and_sync() {
    const _: () = {
        assert_clone::<SoftCqProducer>();
        assert_send::<SoftCqProducer>();
        assert_sync::<SoftCqProducer>();
    };
}

/// `SoftChannel`'s doc: "Cloning the handle shares the channel".
#[test]
fn a_soft_channel_is_clone() {
    const _: () = assert_clone::<SoftChannel>();
}

#[cfg(feature = "ibverbs")]
mod ibv {
    use super::{assert_send, assert_sync};
    use evd_verbs::ibv::{
        CmChannel, CmEvents, CmId, CompletionChannel, Context, IbvAsyncEvents, IbvCq, MemoryRegion,
        ProtectionDomain, QueuePair, Sge,
    };

    /// The `ibv` module's "Thread safety": "each wrapper is `Send`".
    #[test]
    fn every_ibv_wrapper_is_send() {
        const _: () = {
            assert_send::<Context>();
            assert_send::<ProtectionDomain>();
            assert_send::<CompletionChannel>();
            assert_send::<IbvCq>();
            assert_send::<IbvAsyncEvents>();
            assert_send::<MemoryRegion>();
            assert_send::<QueuePair>();
            assert_send::<CmChannel>();
            assert_send::<CmEvents>();
            assert_send::<CmId>();
        };
    }

    /// The `ibv` module's "Thread safety": "the shared ones (`Context`,
    /// `ProtectionDomain`) are `Sync` behind an `Arc`".
    #[test]
    fn a_context_and_a_protection_domain_are_sync() {
        const _: () = {
            assert_sync::<Context>();
            assert_sync::<ProtectionDomain>();
        };
    }

    /// `QueuePair`'s doc ("`Send` and `Sync`: work requests may be posted
    /// from several threads at once") and the `ibv` module's ("`QueuePair`
    /// is `Sync`").
    #[test]
    fn a_queue_pair_is_send_and_sync() {
        const _: () = {
            assert_send::<QueuePair>();
            assert_sync::<QueuePair>();
        };
    }

    /// `Sge`'s doc: "plain data, so it can be kept and posted from any
    /// thread".
    #[test]
    fn an_sge_is_send_and_sync() {
        const _: () = {
            assert_send::<Sge>();
            assert_sync::<Sge>();
        };
    }
}
