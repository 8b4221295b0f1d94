//! `evd-bench`: run the side-by-side comparison of evd and its peers (`compare`), or run what
//! callgrind counts: re-arms (`rearm-insns`) and CNO cycles (`cno-insns`).

use clap::builder::PossibleValuesParser;
use clap::{Parser, Subcommand};
use evd_bench::compare::{Plan, compare};
use evd_bench::single::{CNO_INSNS, Loop, REARM, Rings};
use evd_bench::{chart, table};
use std::path::{Path, PathBuf};
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
    /// Run every system, interleaved, in at most 70 s (20 s with --quick); print the table, write
    /// report.json, report.md and report.svg.
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
        /// Which re-arm loop.
        #[arg(long, value_parser = PossibleValuesParser::new(REARM.map(|l| l.kind)))]
        kind: String,
        /// Number of re-arms.
        #[arg(long)]
        iters: u64,
    },
    /// Run N CNO cycles (or plain post+dequeue pairs) single-threaded (for callgrind to count).
    CnoInsns {
        /// Which loop: the CNO cycle or a pair it is compared with.
        #[arg(long, value_parser = PossibleValuesParser::new(CNO_INSNS.map(|l| l.kind)))]
        kind: String,
        /// Number of cycles.
        #[arg(long)]
        iters: u64,
    },
}

fn main() -> ExitCode {
    let done = match Cli::parse().command {
        Command::RearmInsns { kind, iters } => run_loop(&REARM, &kind, iters),
        Command::CnoInsns { kind, iters } => run_loop(&CNO_INSNS, &kind, iters),
        Command::Compare {
            quick,
            out,
            no_callgrind,
            no_progress,
        } => {
            let mut plan = if quick { Plan::quick() } else { Plan::full() };
            plan.callgrind = !no_callgrind;
            let cwd = std::env::current_dir().unwrap_or_default();
            let target_dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from);
            let dir = out.unwrap_or_else(|| evd_bench::report_dir(target_dir, &cwd));
            run_compare(&plan, &dir, !no_progress)
        }
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Run `iters` iterations of the loop of `loops` whose `--kind` is `kind`.
fn run_loop(loops: &[Loop], kind: &str, iters: u64) -> Result<(), String> {
    let l = loops.iter().find(|l| l.kind == kind);
    (l.expect("clap checked --kind").run)(&mut Rings::new(), iters)
}

/// Run the comparison, print its tables (the run and the machine first, CPU model first) and write
/// them with the JSON and the chart into `dir`.
fn run_compare(plan: &Plan, dir: &Path, progress: bool) -> Result<(), String> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let exe = std::env::current_exe().ok();
    let report = compare(plan, &command, exe.as_deref(), progress);
    let md = table::markdown(&report);
    println!("{md}");
    let write = || -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("report.json"), json + "\n").map_err(|e| e.to_string())?;
        std::fs::write(dir.join("report.md"), &md).map_err(|e| e.to_string())?;
        chart::draw(&report, &dir.join("report.svg"))
    };
    write().map_err(|e| format!("writing the report to {}: {e}", dir.display()))?;
    println!(
        "wrote {0}/report.json, {0}/report.md and {0}/report.svg",
        dir.display()
    );
    if report.records.is_empty() {
        return Err("no measurement succeeded".into());
    }
    Ok(())
}
