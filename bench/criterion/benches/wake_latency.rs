//! Criterion wake-latency benches: one criterion iteration is one one-way
//! wake (post → consumer running) of a consumer that is really asleep; the
//! time criterion sees is the sum of those latencies, not the harness's wall
//! time. Criterion reports means; the p50, p99 and p99.9 from an
//! hdrhistogram of each system are printed after its group.

use criterion::{Criterion, criterion_group, criterion_main};
use evd_bench::latency::WAKE;
use std::time::Duration;

fn wake_latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("wake-latency");
    // Each measured wake costs ~20× its latency in harness time (waiting for
    // the consumer to fall asleep), so keep criterion's measured time short.
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(20))
        .measurement_time(Duration::from_millis(60));
    for sys in WAKE {
        g.bench_function(format!("{} ({})", sys.row.name, sys.row.consumer), |b| {
            b.iter_custom(|iters| {
                let (h, _) =
                    (sys.measure)(iters.max(1)).unwrap_or_else(|e| panic!("{}: {e}", sys.row.name));
                Duration::from_nanos((h.mean() * h.len() as f64) as u64)
            })
        });
    }
    g.finish();
    println!("\nwake latency percentiles (2000 wakes each):");
    for sys in WAKE {
        match (sys.measure)(2000) {
            Ok((h, _)) => println!(
                "  {:<42} p50 {:>7} ns  p99 {:>7} ns  p99.9 {:>8} ns",
                sys.row.name,
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999)
            ),
            Err(e) => println!("  {:<42} failed: {e}", sys.row.name),
        }
    }
}

criterion_group!(benches, wake_latency);
criterion_main!(benches);
