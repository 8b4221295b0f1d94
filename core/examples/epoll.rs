//! An epoll loop (through rustix) on the EVD's notification eventfd, as a
//! loop that also watches sockets would run it. Linux only. The loop is the
//! one `NotifyFd`'s docs give: drain, arm; on `Pending` drain again, on
//! `Armed` wait for the fd to be readable, acknowledge it, and start over
//! (first the drain and the arm: a post made while nothing was armed writes
//! no fd).
//!
//! Run: `cargo run --release -p evd --example epoll`

#[cfg(target_os = "linux")]
fn main() -> std::io::Result<()> {
    use evd::ArmStatus;
    use rustix::buffer::spare_capacity;
    use rustix::event::epoll;

    const POSTERS: u64 = 2;
    const PER_POSTER: u64 = 100_000;
    const EVD_KEY: u64 = 7; // what epoll hands back for the EVD's fd

    let (poster, mut consumer) = evd::bounded::<u64>(64).expect("valid capacity");
    // From now on every notification (the first post after an arm, or a
    // close while armed) also adds 1 to this eventfd.
    let fd = consumer.notify_fd()?;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    // Level-triggered: the fd stays readable until it is acknowledged.
    let key = epoll::EventData::new_u64(EVD_KEY);
    epoll::add(&ep, &fd, key, epoll::EventFlags::IN)?;

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
    let mut ready = Vec::with_capacity(4);
    loop {
        for ev in consumer.try_iter() {
            let ev = ev.expect("no lossy posts, so no loss report");
            let (p, seq) = ((ev >> 32) as usize, ev & 0xffff_ffff);
            assert_eq!(seq, next[p], "exactly once, FIFO per poster");
            next[p] += 1;
        }
        match consumer.arm() {
            // Nothing slipped in since the drain: the next post writes the
            // eventfd, so it is safe to block in epoll_wait.
            ArmStatus::Armed => {
                sleeps += 1;
                match epoll::wait(&ep, spare_capacity(&mut ready), None) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
                // `e.data` is copied out: the struct may be packed.
                assert!(ready.drain(..).all(|e| { e.data }.u64() == EVD_KEY));
                // Reset the counter before draining, or level-triggered epoll
                // would report the fd readable again at once.
                acknowledged += fd.acknowledge()?;
            }
            ArmStatus::Pending => {} // an event landed after the drain: drain again
            ArmStatus::Closed => break, // closed and drained: end of stream
        }
    }
    threads.into_iter().for_each(|t| t.join().unwrap());

    // Every notification the EVD fired reached the eventfd.
    acknowledged += fd.acknowledge()?;
    assert_eq!(acknowledged, consumer.query().notifications);
    assert_eq!(next, [PER_POSTER; POSTERS as usize], "every event arrived");
    let total = POSTERS * PER_POSTER;
    println!("epoll: {total} events from {POSTERS} posters, exactly once, FIFO per poster");
    println!("epoll: {sleeps} epoll_wait calls, {acknowledged} notifications read from the fd");
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("epoll: Linux only (Consumer::notify_fd is an eventfd)");
}
