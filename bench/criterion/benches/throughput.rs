//! Criterion throughput benches: 1, 2 and 4 posters into one consumer, u64
//! and 64-byte events, capacity 1024, every system in `Queue::ALL`. One
//! criterion iteration is one event; the time runs from the start barrier to
//! the consumer's last event (see `evd_bench::throughput`).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use evd_bench::compare::{PAYLOADS, POSTERS, throughput_case};
use evd_bench::payload::Event64;
use evd_bench::throughput::Queue;
use std::time::Duration;

fn throughput(c: &mut Criterion) {
    for payload in PAYLOADS {
        for posters in POSTERS {
            let mut g = c.benchmark_group(throughput_case(payload, posters));
            g.throughput(Throughput::Elements(1))
                .sample_size(10)
                .warm_up_time(Duration::from_millis(300))
                .measurement_time(Duration::from_secs(2));
            for q in Queue::ALL {
                let id =
                    BenchmarkId::from_parameter(format!("{} ({})", q.row().name, q.row().consumer));
                g.bench_function(id, |b| {
                    b.iter_custom(|iters| {
                        let n = iters.max(1);
                        let r = if payload == "u64" {
                            q.run::<u64>(posters, n)
                        } else {
                            q.run::<Event64>(posters, n)
                        };
                        r.unwrap_or_else(|e| panic!("{}: {e}", q.row().name))
                            .elapsed
                    })
                });
            }
            g.finish();
        }
    }
}

criterion_group!(benches, throughput);
criterion_main!(benches);
