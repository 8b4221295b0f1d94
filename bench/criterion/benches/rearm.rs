//! Criterion re-arm benches: evd's one-CAS arm against "arm, then poll again" on the same empty
//! evd ring, and against one bare uncontended CAS (see `evd_bench::single`). Instruction counts
//! come from `evd-bench compare` (callgrind), not from here.

use criterion::{Criterion, criterion_group, criterion_main};
use evd_bench::single::{REARM, Rings};
use std::time::Instant;

fn rearm(c: &mut Criterion) {
    let mut g = c.benchmark_group("rearm");
    for l in REARM {
        let mut r = Rings::new();
        g.bench_function(l.row.name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                (l.run)(&mut r, iters).unwrap_or_else(|e| panic!("{}: {e}", l.row.name));
                start.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, rearm);
criterion_main!(benches);
