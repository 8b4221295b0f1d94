#[test]
fn resize_vs_post() {
    model(|| {
        let (poster, mut consumer) = evd::bounded::<u32>(1).unwrap();
        let c = thread::spawn(move || {
            let mut got = Vec::new();
            if let Ok(v) = consumer.try_dequeue() {
                got.push(v);
            }
            consumer.resize(4).unwrap();
            got.extend(drain_to_end(&mut consumer));
            got
        });
        poster.post(1).unwrap();
        // The second post may find the 1-slot ring full before the resize.
        let mut second = 2;
        loop {
            match poster.post(second) {
                Ok(()) => break,
                Err(e) => {
                    second = e.into_inner();
                    thread::yield_now();
                }
            }
        }
        drop(poster);
        let got = c.join().unwrap();
        assert_eq!(got, [1, 2], "no loss, no duplicate, FIFO");
    });
}
