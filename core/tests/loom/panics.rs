/// An event whose `Drop` panics while it is live: the handler (and the drain
/// after teardown) defuse the ones they are given, so only an event a lossy
/// post gives up panics.
struct Grenade {
    live: bool,
}

impl Drop for Grenade {
    fn drop(&mut self) {
        if self.live {
            panic!("a given-up event's drop fails");
        }
    }
}

/// A waker that panics when woken (a broken executor's).
struct PanickingWaker;

impl std::task::Wake for PanickingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        panic!("a waker fails");
    }
}

#[test]
fn a_lossy_post_whose_event_panics_on_drop_still_wakes_the_consumer_it_disarmed() {
    // `loss_vs_arm_no_lost_report` with an event whose `Drop` panics: the
    // consumer drains the full ring and arms between the lossy post's
    // refusal and its RMW on the word, which takes the arm. The wake is owed
    // before the event is dropped; dropped first, its panic leaves the
    // consumer asleep with the report pending: a loom deadlock.
    quiet_panics_from("a given-up event's drop fails");
    model(|| {
        let (poster, mut consumer) = evd::bounded::<Grenade>(1).unwrap();
        poster.post(Grenade { live: false }).unwrap(); // the ring is full
        consumer.set_spin_budget(Duration::ZERO);
        let c = thread::spawn(move || {
            take_events_and_reports(&mut consumer, 2, |mut g: Grenade| g.live = false)
        });
        let lossy = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            poster.post_lossy(Grenade { live: true })
        }));
        assert!(
            matches!(lossy, Ok(Ok(evd::Lossy::Posted)) | Err(_)),
            "a lossy post either queues or gives up"
        );
        let (events, reports) = c.join().unwrap();
        assert_eq!(
            events + reports,
            2,
            "each event taken once or reported lost"
        );
        drop(poster);
    });
}

#[test]
fn a_lossy_post_whose_event_panics_on_drop_still_delivers_the_upcall_it_took() {
    // Capacity 1, SingleInstance. The spawned thread's post takes the token
    // and runs the instance; this thread's lossy post finds the ring full
    // while that instance holds the token, the instance drains and exits,
    // then the loss's RMW on the word finds the token free and takes it (and
    // an instance count): an upcall is owed, to report the loss. It must be
    // run before the given-up event is dropped. Had the event's panicking
    // `Drop` run first, the token and the count would be taken forever: no
    // instance in flight could ever end, and teardown would hang.
    quiet_panics_from("a given-up event's drop fails");
    model(|| {
        let (poster, consumer) = evd::bounded::<Grenade>(1).unwrap();
        let (upcalls, heard) =
            counting_upcalls(consumer, UpcallPolicy::SingleInstance, |ev| match ev {
                Ok(mut g) => {
                    g.live = false;
                    1
                }
                Err(o) => o.lost as usize,
            });
        let p2 = poster.clone();
        // Refused as full while this thread's event is being delivered: then
        // it comes back (defused) and counts for nothing.
        let t = thread::spawn(move || match p2.post(Grenade { live: false }) {
            Ok(()) => 1,
            Err(PostError::Full(_)) => 0,
            Err(e) => panic!("unexpected {e}"),
        });
        let lossy = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            poster.post_lossy(Grenade { live: true })
        }));
        // Queued (and defused by the handler), or given up: its drop panics.
        assert!(
            matches!(lossy, Ok(Ok(evd::Lossy::Posted)) | Err(_)),
            "a lossy post either queues or gives up"
        );
        let posted = t.join().unwrap() + 1;
        // Both posts returned, and every instance runs inside a post.
        let q = upcalls.query();
        if (q.upcalls_in_flight, q.in_upcall) != (0, false) {
            // Its drop would wait for the stranded instance forever.
            std::mem::forget(upcalls);
            panic!("an upcall was taken and never run: {q:?}");
        }
        assert_eq!(
            count_after_teardown(upcalls, &heard, |mut g: Grenade| g.live = false),
            posted,
            "each event handled once or reported lost"
        );
    });
}

#[test]
fn a_blocking_post_whose_notification_panics_leaves_the_room_queue() {
    // The ring is full; a blocking post finds it full, joins the room queue
    // and posts again. The consumer drains the ring and arms with a waker
    // that panics in between, so that second post goes in, takes the arm
    // and panics in its wake. The panic unwinds out of `post_blocking`
    // (caught on its thread); the post is over, so its seat must have left
    // the room queue. Left there, it stays `room_wanted` and eats the wake
    // of the next freed slot, which a real waiter behind it then misses.
    use std::future::Future;
    quiet_panics_from("a waker fails");
    model(|| {
        let (poster, mut consumer) = full_ring(1);
        let p = poster.clone();
        let t = thread::spawn(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.post_blocking(2))).is_err()
        });
        assert_eq!(consumer.try_dequeue(), Ok(1));
        let waker = std::task::Waker::from(std::sync::Arc::new(PanickingWaker));
        let mut cx = std::task::Context::from_waker(&waker);
        {
            // The poll may wake its own task (a reserved slot still being
            // written: it yields to the executor), and this waker panics.
            let mut recv = consumer.recv();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                std::pin::Pin::new(&mut recv).poll(&mut cx)
            }));
        }
        t.join().unwrap();
        assert!(
            !consumer.query().room_wanted,
            "a post_blocking that unwound left its seat in the room queue"
        );
    });
}
