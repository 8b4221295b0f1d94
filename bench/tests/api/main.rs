//! The crate's public API, one module per module of `src`: every system
//! delivers every event, every record carries its case, system and metric,
//! and the tables and targets read them as documented.

mod cno;
mod latency;
mod pair;
mod paths;
mod payload;
mod pingpong;
mod rearm;
mod report;
mod room;
mod stamp_ring;
mod stats;
mod table;
mod throughput;
