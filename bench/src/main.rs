//! `evd-bench`: run the side-by-side comparison of evd and its peers
//! (`compare`), or run what callgrind counts: re-arms (`rearm-insns`) and
//! CNO cycles (`cno-insns`).

use clap::{Parser, Subcommand};
use evd_bench::cno::CnoInsnKind;
use evd_bench::compare::{compare, Plan};
use evd_bench::rearm::{Rearm, RearmKind};
use evd_bench::{chart, report, table};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "evd-bench",
    version,
    about = "Benchmarks of evd against other bounded queues and channels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every system, interleaved, in at most 70 s (20 s with --quick);
    /// print the table, write report.json, report.md and report.svg.
    Compare {
        /// Fewer, shorter rounds: at most 20 s.
        #[arg(long)]
        quick: bool,
        /// Output directory (default: <target dir>/evd-bench).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Do not count re-arm instructions with valgrind's callgrind.
        #[arg(long)]
        no_callgrind: bool,
        /// Hide the progress bar.
        #[arg(long)]
        no_progress: bool,
    },
    /// Run N re-arms of one kind single-threaded (for callgrind to count).
    RearmInsns {
        /// `evd`, `arm-then-poll` or `cas-floor`.
        #[arg(long)]
        kind: String,
        /// Number of re-arms.
        #[arg(long)]
        iters: u64,
    },
    /// Run N CNO cycles (or plain post+dequeue pairs) single-threaded (for
    /// callgrind to count).
    CnoInsns {
        /// `cno`, `plain` or `bound`.
        #[arg(long)]
        kind: String,
        /// Number of cycles.
        #[arg(long)]
        iters: u64,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::RearmInsns { kind, iters } => {
            let Some(kind) = RearmKind::from_cli(&kind) else {
                eprintln!("unknown --kind {kind:?}: use `evd`, `arm-then-poll` or `cas-floor`");
                return ExitCode::FAILURE;
            };
            Rearm::new().run(kind, iters);
            ExitCode::SUCCESS
        }
        Command::CnoInsns { kind, iters } => {
            let Some(kind) = CnoInsnKind::from_cli(&kind) else {
                eprintln!("unknown --kind {kind:?}: use `cno`, `plain` or `bound`");
                return ExitCode::FAILURE;
            };
            match kind.run(iters) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Compare {
            quick,
            out,
            no_callgrind,
            no_progress,
        } => {
            let mut plan = if quick { Plan::quick() } else { Plan::full() };
            plan.callgrind = !no_callgrind;
            let command = std::env::args().collect::<Vec<_>>().join(" ");
            let cwd = std::env::current_dir().unwrap_or_default();
            let dir = out.unwrap_or_else(|| {
                evd_bench::report_dir(
                    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from),
                    &cwd,
                )
            });
            let exe = std::env::current_exe().ok();
            let report = compare(&plan, &command, exe.as_deref(), !no_progress);
            // The table output starts with the run and the machine, CPU
            // model first.
            let md = table::markdown(&report);
            println!("{md}");
            if let Err(e) = write_outputs(&report, &md, &dir) {
                eprintln!("writing the report to {}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
            println!(
                "wrote {0}/report.json, {0}/report.md and {0}/report.svg",
                dir.display()
            );
            if report.records.is_empty() {
                eprintln!("no measurement succeeded");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
    }
}

fn write_outputs(report: &report::Report, md: &str, dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("report.json"), json + "\n").map_err(|e| e.to_string())?;
    std::fs::write(dir.join("report.md"), md).map_err(|e| e.to_string())?;
    chart::draw(report, &dir.join("report.svg"))
}
