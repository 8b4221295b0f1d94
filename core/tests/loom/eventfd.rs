/// An EVD armed while empty; its consumer makes its eventfd on a thread of
/// its own while `answer` runs here with the only poster. After both, the
/// fd's count (and the consumer).
fn fd_made_while(answer: impl FnOnce(evd::Poster<u32>)) -> (u64, evd::Consumer<u32>) {
    let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
    assert_eq!(consumer.arm(), ArmStatus::Armed);
    let c = thread::spawn(move || {
        let fd = consumer.notify_fd().unwrap();
        (fd, consumer)
    });
    answer(poster);
    let (fd, consumer) = c.join().unwrap();
    (fd.acknowledge().unwrap(), consumer)
}

/// A post that answers an arm, against the consumer making its eventfd
/// after that arm: the post either finds the fd published and writes it, or
/// leaves `NOTIFIED` where the maker's read-back of the state word finds it
/// and the maker writes it; both, at worst (one spurious count).
#[test]
fn a_post_answering_an_arm_reaches_an_eventfd_made_meanwhile() {
    model(|| {
        let (n, mut consumer) = fd_made_while(|poster| poster.post(7).unwrap());
        assert!((1..=2).contains(&n), "the answered arm's fd counts {n}");
        assert_eq!(consumer.try_dequeue(), Ok(7));
    });
}

/// The last poster's drop closing an armed EVD, against the consumer making
/// its eventfd after the arm: as a post, the close notifies the fd or
/// leaves `NOTIFIED` for its maker.
#[test]
fn a_close_of_an_armed_evd_reaches_an_eventfd_made_meanwhile() {
    model(|| {
        let (n, mut consumer) = fd_made_while(drop);
        assert!((1..=2).contains(&n), "the close's fd counts {n}");
        assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Closed));
    });
}

/// How many times the eventfd loop below looks at an fd nothing has written
/// before it fails: far more than the posters' steps (each yield lets them
/// run), so only an fd that will never be written reaches it.
const FD_LOOKS: usize = 100;

/// The eventfd loop of `consumer/eventfd.rs` (drain, arm; on `Pending`
/// drain again, on `Armed` wait for the fd, acknowledge, round again)
/// against two posters: both events come, each once, and the loop never
/// waits on an fd nothing will write. The wait for the fd is a yielding
/// spin (loom has no blocking read), as is the drain that finds a slot
/// reserved but not yet written.
#[test]
fn the_eventfd_loop_vs_two_posters_takes_each_event_once() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(2).unwrap();
        let fd = consumer.notify_fd().unwrap();
        let p2 = poster.clone();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            while got.len() < 2 {
                while let Ok(v) = consumer.try_dequeue() {
                    got.push(v);
                }
                if got.len() == 2 {
                    break;
                }
                match consumer.arm() {
                    ArmStatus::Armed => {
                        let mut looks = 0;
                        while fd.acknowledge().unwrap() == 0 {
                            looks += 1;
                            assert!(looks < FD_LOOKS, "armed, and the fd is never written");
                            thread::yield_now();
                        }
                    }
                    // A post reserved and has not written its slot yet.
                    ArmStatus::Pending => thread::yield_now(),
                    ArmStatus::Closed => unreachable!("`poster` lives until the join"),
                }
            }
            got.sort_unstable();
            got
        });
        let t = thread::spawn(move || p2.post(2).unwrap());
        poster.post(1).unwrap();
        t.join().unwrap();
        assert_eq!(c.join().unwrap(), [1, 2], "each event exactly once");
    });
}
