//! The EVD's notification eventfd in tokio's reactor, through `AsyncFd`, as
//! beside sockets in one reactor (on tokio alone `recv().await` is simpler:
//! see `async_recv`). Linux only. The loop is the one `NotifyFd`'s docs give:
//! drain, arm; on `Pending` drain again, on `Armed` wait for the fd to be
//! readable, acknowledge it, and start over (first the drain and the arm: a
//! post made while nothing was armed writes no fd).
//!
//! Run: `cargo run --release -p evd --example tokio_asyncfd`

#[cfg(target_os = "linux")]
fn main() -> std::io::Result<()> {
    use evd::ArmStatus;
    use tokio::io::{Interest, unix::AsyncFd};

    const POSTERS: u64 = 2;
    const PER_POSTER: u64 = 100_000;

    // `enable_io`: AsyncFd needs the runtime's I/O driver.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async {
        let (poster, mut consumer) = evd::bounded::<u64>(64).expect("valid capacity");
        // Register the fd with tokio's reactor, readable interest only (an
        // eventfd is always writable).
        let notify_fd = consumer.notify_fd()?;
        // SAFETY: tokio needs the raw fd to stay open and the same while it is
        // registered. `NotifyFd` owns its fd (a duplicate of the EVD's
        // eventfd), closes it only on drop, and always returns that same fd;
        // the `AsyncFd` owns the `NotifyFd`, so it outlives the registration.
        let fd = unsafe { AsyncFd::register_with_interest(notify_fd, Interest::READABLE)? };

        let threads: Vec<_> = (0..POSTERS)
            .map(|p| {
                let poster = poster.clone();
                std::thread::spawn(move || {
                    for seq in 0..PER_POSTER {
                        let mut ev = p << 32 | seq; // `poster << 32 | sequence`
                        while let Err(e) = poster.post(ev) {
                            assert!(e.is_full(), "the EVD closed under a poster");
                            ev = e.into_inner(); // backpressure: retry
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        drop(poster); // the last Poster to go closes the EVD

        let mut next = [0u64; POSTERS as usize]; // next sequence number per poster
        let (mut sleeps, mut acknowledged) = (0u64, 0u64);
        loop {
            for ev in consumer.try_iter() {
                let ev = ev.expect("no lossy posts, so no loss report");
                let (p, seq) = ((ev >> 32) as usize, ev & 0xffff_ffff);
                assert_eq!(seq, next[p], "exactly once, FIFO per poster");
                next[p] += 1;
            }
            match consumer.arm() {
                ArmStatus::Armed => {
                    sleeps += 1;
                    // Await readiness, read the eventfd back to zero, then
                    // tell tokio the fd is drained. Clearing before the next
                    // arm is safe: no notification can fire until we arm.
                    let mut guard = fd.readable().await?;
                    acknowledged += guard.get_inner().acknowledge()?;
                    guard.clear_ready();
                }
                ArmStatus::Pending => {} // an event landed after the drain
                ArmStatus::Closed => break, // closed and drained: end of stream
            }
        }
        threads.into_iter().for_each(|t| t.join().unwrap());

        // Every notification the EVD fired reached the eventfd.
        acknowledged += fd.get_ref().acknowledge()?;
        assert_eq!(acknowledged, consumer.query().notifications);
        assert_eq!(next, [PER_POSTER; POSTERS as usize], "every event arrived");
        let total = POSTERS * PER_POSTER;
        println!("tokio_asyncfd: {total} events, {POSTERS} posters, exactly once, FIFO per poster");
        println!("tokio_asyncfd: {sleeps} awaits, {acknowledged} notifications read from the fd");
        Ok(())
    })
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("tokio_asyncfd: Linux only (Consumer::notify_fd is an eventfd)");
}
