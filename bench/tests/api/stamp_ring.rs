use evd_bench::stamp_ring::*;

#[test]
fn every_value_arrives_once_in_order_per_poster_across_threads() {
    let per = 50_000u64;
    for (reserve, n) in [
        (Reserve::Own, 1u64),
        (Reserve::CasTail, 1),
        (Reserve::CasTail, 3),
        (Reserve::FaaTail, 1),
        (Reserve::FaaTail, 3),
    ] {
        let (first, mut rx) = stamp_ring::<u64>(8, reserve);
        let mut posters: Vec<StampPoster<u64>> = (1..n).map(|_| first.another().unwrap()).collect();
        posters.insert(0, first);
        let threads: Vec<_> = posters
            .into_iter()
            .enumerate()
            .map(|(k, tx)| {
                std::thread::spawn(move || {
                    for i in 0..per {
                        let mut v = (k as u64) << 32 | i;
                        while let Err(back) = tx.try_send(v) {
                            v = back;
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        let mut next = vec![0u64; n as usize];
        let mut got = 0;
        while got < per * n {
            if let Some(v) = rx.try_recv() {
                let (k, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                assert_eq!(i, next[k], "poster {k} out of order or duplicated");
                next[k] += 1;
                got += 1;
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(rx.try_recv(), None);
        assert!(next.iter().all(|&c| c == per));
    }
}

#[test]
fn a_stamp_ring_delivers_in_order() {
    use evd_bench::stamp_ring::{Reserve, stamp_ring};
    let (tx, mut rx) = stamp_ring::<u64>(2, Reserve::CasTail);
    let tx2 = tx.another().unwrap();
    assert!(tx.try_send(1).is_ok());
    assert!(tx2.try_send(2).is_ok());
    assert_eq!(tx.try_send(3), Err(3));
    assert_eq!(
        (rx.try_recv(), rx.try_recv(), rx.try_recv()),
        (Some(1), Some(2), None)
    );
    let (own, _rx) = stamp_ring::<u64>(2, Reserve::Own);
    assert!(own.another().is_none());
}
