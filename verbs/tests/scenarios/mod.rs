//! The verbs scenarios, written once over the devices that feed them: the
//! soft devices of `evd_verbs::soft` under `cargo test`, and a real RDMA
//! device (rdma_rxe, through `evd_verbs::ibv`) in the guest suite of
//! `softroce/`. Each scenario is a function generic over a small trait
//! that makes its devices' events; the checks that only one kind of
//! device allows stay in that trait's implementation.

// Each test crate runs a part of the scenarios.
#![allow(dead_code)]

pub mod every_source;
pub mod shared_channel;
