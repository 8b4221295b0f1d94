//! The crate's public API, one module per module of `src`: every system
//! delivers every event, every record carries its case, system and metric,
//! and the tables and targets read them as documented.

mod cno;
mod compare;
mod latency;
mod paths;
mod payload;
mod pingpong;
mod report;
mod room;
mod single;
mod stamp_ring;
mod stats;
mod table;
mod throughput;
