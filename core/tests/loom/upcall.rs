/// An `FnMut` handler's plain state, handed out when the handler is dropped.
struct Sink {
    seen: Vec<u32>,
    out: Arc<loom::sync::Mutex<Vec<u32>>>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        *self.out.lock().unwrap() = std::mem::take(&mut self.seen);
    }
}

/// Posts 1 from another thread and 2 from this one, and returns when both
/// posts have.
fn post_from_two_threads(poster: &evd::Poster<u32>) {
    let p2 = poster.clone();
    let t = thread::spawn(move || p2.post(1).unwrap());
    poster.post(2).unwrap();
    t.join().unwrap();
}

/// After [`post_from_two_threads`] under an upcall handler that adds each
/// event to `delivered`: each event was delivered once, and none is left
/// queued for an instance that will not come.
fn assert_delivered_once(delivered: &AtomicUsize, upcalls: evd::Upcalls<u32>) {
    assert_eq!(
        delivered.load(Ordering::SeqCst),
        3,
        "delivered exactly once"
    );
    let mut consumer = upcalls.teardown();
    assert_eq!(
        consumer.try_dequeue(),
        Err(TryDequeueError::Empty),
        "none stranded"
    );
}

#[test]
fn post_during_upcall_single_instance() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let in_flight = Arc::new(AtomicUsize::new(0));
        let delivered = Arc::new(AtomicUsize::new(0));
        let (f, d) = (in_flight.clone(), delivered.clone());
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
                assert_eq!(
                    f.fetch_add(1, Ordering::SeqCst),
                    0,
                    "a second concurrent upcall"
                );
                d.fetch_add(ev.unwrap() as usize, Ordering::SeqCst);
                f.fetch_sub(1, Ordering::SeqCst);
            });
        post_from_two_threads(&poster);
        // Instances run inside the posts, so once both returned none runs,
        // and no event may be left queued for one: each was delivered once.
        assert_delivered_once(&delivered, upcalls);
    });
}

#[test]
fn fnmut_handler_single_instance_two_posters_exactly_once() {
    // The handler mutates a plain Vec. It lives in loom's UnsafeCell inside
    // the EVD, so two calls not ordered by the token's hand-off would fail
    // the model as a causality violation, not only as a wrong count.
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let out = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let mut sink = Sink {
            seen: Vec::new(),
            out: out.clone(),
        };
        let upcalls = consumer.into_upcalls_mut(Invoke::Any, move |ev, _| {
            sink.seen.push(ev.unwrap());
        });
        post_from_two_threads(&poster);
        // Both posts returned, so no instance runs and none is owed: every
        // event went to the handler. Teardown drops it, handing out `seen`.
        let mut consumer = upcalls.teardown();
        assert_eq!(
            consumer.try_dequeue(),
            Err(TryDequeueError::Empty),
            "none stranded"
        );
        let mut got = std::mem::take(&mut *out.lock().unwrap());
        got.sort_unstable();
        assert_eq!(got, [1, 2], "each event exactly once, by the handler");
    });
}

#[test]
fn many_instances_dequeue_exactly_once() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let (upcalls, delivered) = counting_upcalls(consumer, UpcallPolicy::ManyInstances, |ev| {
            ev.unwrap() as usize
        });
        post_from_two_threads(&poster);
        // As under SingleInstance: the instances ran inside the posts, and
        // an instance ends only when it finds nothing to take.
        assert_delivered_once(&delivered, upcalls);
    });
}

#[test]
fn teardown_vs_post_no_upcall_after_teardown() {
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(2).unwrap();
        let torn = Arc::new(AtomicUsize::new(0));
        let delivered = Arc::new(AtomicUsize::new(0));
        let (tn, d) = (torn.clone(), delivered.clone());
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
                assert_eq!(
                    tn.load(Ordering::SeqCst),
                    0,
                    "upcall after teardown returned"
                );
                d.fetch_add(ev.unwrap() as usize, Ordering::SeqCst);
            });
        let tear = thread::spawn(move || {
            let consumer = upcalls.teardown();
            torn.store(1, Ordering::SeqCst);
            consumer
        });
        // The post may start an upcall before the teardown, or queue behind it.
        let _ = poster.post(5);
        let mut consumer = tear.join().unwrap();
        let mut total = delivered.load(Ordering::SeqCst);
        while let Ok(v) = consumer.try_dequeue() {
            total += v as usize;
        }
        assert_eq!(total, 5);
    });
}

#[test]
fn refused_post_vs_invoc_new_on_a_full_ring() {
    // Upcalls are enabled with INVOC_NEW while the ring is full and a poster
    // is refused: either the refusal came first (plain backpressure) or the
    // poster runs the upcall that drains the ring and its post goes in. No
    // event is stranded, none delivered twice, nothing reported as lost.
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
        poster.post(1).unwrap();
        let heard = Arc::new(AtomicUsize::new(0));
        let p2 = poster.clone();
        let t = thread::spawn(move || p2.post(2).is_ok());
        let h = heard.clone();
        let upcalls =
            consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::New, move |ev, _| {
                assert!(ev.is_ok(), "nothing was lost");
                h.fetch_add(1, Ordering::SeqCst);
            });
        let second = t.join().unwrap();
        let mut consumer = upcalls.teardown();
        let mut total = heard.load(Ordering::SeqCst);
        while consumer.try_dequeue().is_ok() {
            total += 1;
        }
        assert_eq!(total, if second { 2 } else { 1 });
        drop(poster);
    });
}

/// An event that counts its drops.
struct CountsDrops(Arc<AtomicUsize>);

impl Drop for CountsDrops {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn upcalls_dropped_in_its_own_handler_vs_post_queued_events_dropped() {
    // Under ManyInstances the first handler call drops its own `Upcalls`
    // (upcalls disabled, the consumer dropped, the EVD closed) while the
    // other thread posts: its event is delivered, refused as closed, or
    // left queued by an instance that stops at the disable, and then the
    // last instance to leave drops it. Once both posts returned, with the
    // posters still alive, every event was dropped exactly once.
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (poster, consumer) = evd::bounded::<CountsDrops>(2).unwrap();
        let slot: Arc<loom::sync::Mutex<Option<evd::Upcalls<CountsDrops>>>> = Arc::default();
        let s = slot.clone();
        let up = consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::Any, move |ev, _| {
            drop(ev);
            let up = s.lock().unwrap().take();
            drop(up);
        });
        *slot.lock().unwrap() = Some(up);
        let (p2, d2) = (poster.clone(), drops.clone());
        let t = thread::spawn(move || drop(p2.post(CountsDrops(d2))));
        drop(poster.post(CountsDrops(drops.clone())));
        t.join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 2, "each event dropped once");
        drop(poster);
    });
}

/// Where a handler finds its own dispatcher, to drop it from inside.
type UpcallsSlot<T> = loom::sync::Mutex<Option<evd::Upcalls<T>>>;

#[test]
fn early_leaver_vs_upcalls_dropped_in_a_later_instance_queue_dropped_once() {
    // One thread's instance delivers 1 and leaves (none in flight); the
    // other thread's post of 2 and 3 starts the next instance, whose handler
    // drops its own `Upcalls` on 2, leaving 3 queued. Only an instance that
    // leaves after that drop may drop 3, and only one: the early leaver,
    // resumed late, must not drop it too (a double drop).
    model(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let (poster, consumer) = evd::bounded::<(u32, CountsDrops)>(4).unwrap();
        let slot: Arc<UpcallsSlot<(u32, CountsDrops)>> = Arc::default();
        let s = slot.clone();
        let up = consumer.into_upcalls(UpcallPolicy::SingleInstance, Invoke::Any, move |ev, _| {
            let (n, ev) = ev.unwrap();
            drop(ev);
            if n == 2 {
                let up = s.lock().unwrap().take();
                drop(up);
            }
        });
        *slot.lock().unwrap() = Some(up);
        let (p2, d2) = (poster.clone(), drops.clone());
        let t = thread::spawn(move || drop(p2.post((1, CountsDrops(d2)))));
        let mut batch = vec![
            (2, CountsDrops(drops.clone())),
            (3, CountsDrops(drops.clone())),
        ];
        let _ = poster.post_batch(&mut batch);
        drop(batch);
        t.join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 3, "each event dropped once");
        drop(poster);
    });
}

#[test]
fn post_during_a_switch_from_many_to_single_instance_is_delivered() {
    // A switch from ManyInstances to SingleInstance disables upcalls while
    // it waits for the instances to end. A post that lands in that window
    // was made while the caller had upcalls enabled: with `Invoke::New`
    // asked, it is still a new arrival, and delivered (a miss leaves it
    // queued with no instance to come).
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(4).unwrap();
        let delivered = Arc::new(AtomicUsize::new(0));
        let d = delivered.clone();
        let mut up =
            consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::New, move |ev, _| {
                d.fetch_add(ev.unwrap() as usize, Ordering::SeqCst);
            });
        let switch = thread::spawn(move || {
            up.set_policy(UpcallPolicy::SingleInstance, Invoke::New)
                .unwrap();
            up
        });
        poster.post(1).unwrap();
        let up = switch.join().unwrap();
        assert_eq!(delivered.load(Ordering::SeqCst), 1, "delivered once");
        let mut consumer = up.teardown();
        assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
    });
}

#[test]
fn lossy_post_during_a_switch_from_many_to_single_instance_is_reported() {
    // The same window for a loss: a full ring (a permit holds its one slot,
    // nothing queued), a lossy post while the switch holds upcalls
    // disabled. Its loss is committed with nobody to notify; it must still
    // be reported (a miss leaves the report pending with no instance).
    model(|| {
        let (poster, consumer) = evd::bounded::<u32>(1).unwrap();
        let permit = poster.try_reserve().unwrap();
        let reported = Arc::new(AtomicUsize::new(0));
        let r = reported.clone();
        let mut up =
            consumer.into_upcalls(UpcallPolicy::ManyInstances, Invoke::New, move |ev, _| {
                let lost = ev.expect_err("only the loss comes").lost;
                r.fetch_add(lost as usize, Ordering::SeqCst);
            });
        let switch = thread::spawn(move || {
            up.set_policy(UpcallPolicy::SingleInstance, Invoke::New)
                .unwrap();
            up
        });
        assert_eq!(poster.post_lossy(1), Ok(evd::Lossy::Lost));
        let up = switch.join().unwrap();
        assert_eq!(reported.load(Ordering::SeqCst), 1, "the loss reported once");
        drop(permit);
        let mut consumer = up.teardown();
        assert_eq!(consumer.try_dequeue(), Err(TryDequeueError::Empty));
    });
}
