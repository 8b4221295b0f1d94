//! Criterion re-arm benches: evd's one-CAS arm against "arm, then poll
//! again" on the same empty evd ring, and against one bare uncontended CAS
//! (see `evd_bench::rearm`). Instruction counts come from `evd-bench
//! compare` (callgrind), not from here.

use criterion::{criterion_group, criterion_main, Criterion};
use evd_bench::rearm::{Rearm, RearmKind};
use std::time::Instant;

fn rearm(c: &mut Criterion) {
    let mut g = c.benchmark_group("rearm");
    for kind in RearmKind::ALL {
        let mut r = Rearm::new();
        g.bench_function(kind.row().name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                r.run(kind, iters);
                start.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, rearm);
criterion_main!(benches);
