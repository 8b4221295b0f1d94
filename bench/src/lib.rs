//! # evd-bench — evd against its peers
//!
//! The `evd-bench compare` command and the criterion benches (package `evd-criterion`,
//! `bench/criterion/benches`) share this crate.
//! One module per section measures ([`throughput`], [`room`], [`latency`], [`pingpong`], [`cno`],
//! and [`single`] for the single-thread loops), the peer channels sit behind one interface ([`peers`]) and the
//! throughput floors are [`stamp_ring`]s; [`compare`] interleaves every system within a time
//! budget, [`report`] holds the records and evaluates the [`targets`], [`table`] writes them as
//! Markdown and [`chart`] as SVG. What each section runs and what each field means:
//! `bench/README.md`. Every ratio points one way: above 1 = evd better.
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
pub mod payload;
pub mod peers;
pub mod pingpong;
pub mod report;
pub mod room;
pub mod single;
pub mod stamp_ring;
pub mod stats;
pub mod table;
pub mod targets;
pub mod throughput;

use std::path::{Path, PathBuf};

/// Where `compare` writes its report: `<target dir>/evd-bench`, the target dir being
/// `$CARGO_TARGET_DIR` if set (relative to `cwd` if relative, as cargo resolves it) and otherwise
/// the workspace's `target/`.
pub fn report_dir(cargo_target_dir: Option<PathBuf>, cwd: &Path) -> PathBuf {
    let target = match cargo_target_dir {
        Some(d) if d.is_absolute() => d,
        Some(d) => cwd.join(d),
        None => {
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            manifest.parent().unwrap_or(manifest).join("target")
        }
    };
    target.join("evd-bench")
}
