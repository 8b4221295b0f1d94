//! # evd-bench — evd against its peers
//!
//! Shared harness of the criterion benches (`bench/benches/*.rs`) and of the
//! `evd-bench compare` command:
//!
//! * [`throughput`]: 1, 2 or 4 posters into one consumer, capacity 1024, for
//!   evd and crossbeam-queue, crossbeam-channel, std, tokio, flume, kanal and
//!   thingbuf; every poster retries a refused send the same way, every
//!   consumer is labelled busy/blocking and item/batch and compared with the
//!   evd row of its style; per-run empty polls, full refusals and same-CPU
//!   share, and evd's room wakes (0: no poster waits there).
//! * [`peers`]: the peer channels behind one interface ([`peers::Channel`]),
//!   so that [`throughput`], [`room`] and [`latency`] drive each the same way.
//! * [`room`]: posters that wait for room. A slow consumer (fixed work per
//!   event) behind a ring of 64 or 1024 slots; 1 or 2 posters sleep in their
//!   system's blocking bounded send (evd `post_blocking`); evd's room wakes
//!   per event. And the room-wake latency: from the dequeue that frees the
//!   slot of a full 1-slot ring to the blocked poster running, evd against
//!   crossbeam-channel's `send` and the raw park/unpark floor.
//! * [`latency`]: one-way wake latency of a consumer that is really asleep
//!   (checked in `/proc/self/task/TID/stat`), into an hdrhistogram; evd's
//!   four ways to be woken, three peers and two floors.
//! * [`rearm`]: evd's one-CAS arm against "arm, then poll again", in ns and in
//!   instructions (callgrind), and against one bare uncontended CAS (ns).
//! * [`pair`]: one post and one dequeue on one thread, evd against `ArrayQueue`.
//! * [`pingpong`]: the round trip of two busy-polling threads over two
//!   queues, evd against rtrb, `ArrayQueue`, crossbeam-channel and a floor of
//!   two atomics.
//! * [`cno`]: one waiter for many EVDs: evd's `Cno` against epoll over the
//!   EVDs' eventfds and a scan-every-EVD CNO; its wake latency against the
//!   park/unpark floor, the cost of one trigger cycle at 1 to 1024 bound
//!   EVDs, throughput and fairness over 16 and 256 busy EVDs, and its
//!   instructions per cycle (callgrind).
//! * [`compare`]: all of it interleaved round-robin within a time budget;
//!   [`report`] holds the records and evaluates the [`targets`] (data);
//!   [`table`] writes them as Markdown and [`chart`] as SVG.
//!   Every ratio points the same way: above 1 = evd better.
//!
//! ```
//! use evd_bench::throughput::Queue;
//! let run = Queue::EvdSingle.run::<u64>(2, 100_000).unwrap();
//! println!("{:.1} M events/s", run.ops_per_sec() / 1e6);
//! ```
#![deny(missing_docs)]

pub mod chart;
pub mod cno;
pub mod compare;
pub mod latency;
pub mod pair;
pub mod payload;
pub mod peers;
pub mod pingpong;
pub mod rearm;
pub mod report;
pub mod room;
pub mod stamp_ring;
pub mod stats;
pub mod table;
pub mod targets;
pub mod throughput;

use std::path::{Path, PathBuf};

/// Where `compare` writes its report: `<target dir>/evd-bench`, the target
/// dir being `$CARGO_TARGET_DIR` if set (relative to `cwd` if relative, as
/// cargo resolves it) and otherwise the workspace's `target/`.
pub fn report_dir(cargo_target_dir: Option<PathBuf>, cwd: &Path) -> PathBuf {
    let target = match cargo_target_dir {
        Some(d) if d.is_absolute() => d,
        Some(d) => cwd.join(d),
        None => workspace_root().join("target"),
    };
    target.join("evd-bench")
}

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}
