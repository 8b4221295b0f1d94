//! One thread serving 64 "connections" through one CNO.
//!
//! Each connection is an EVD; a few poster threads (think: the NIC's
//! completion handlers, or the peers) each own some of them and post
//! messages to them. Instead of one waiting thread per connection, or a
//! loop that polls all 64, every connection is bound to one `Cno` with a
//! key, and the serving thread's loop is:
//!
//! 1. `cno.wait(&mut keys)`: sleep until at least one connection has work,
//!    then take the keys of every connection ready now (no scan: idle
//!    connections cost nothing);
//! 2. for each key: drain that connection;
//! 3. `enable_cno()` it again: `Armed` means its next message puts its key
//!    back in the ready set (once); `Pending` means messages came during the
//!    drain, so drain again; `Closed` means the connection is gone.
//!
//! The example asserts what the CNO promises: every message exactly once and
//! in order per connection, and a key only for a connection that was
//! enabled, once per enable.
//!
//! Run: `cargo run --release -p evd --example cno`

use evd::{ArmStatus, Consumer, PostError, TryDequeueError};

const CONNECTIONS: usize = 64;
const POSTER_THREADS: usize = 4;

/// Messages on connection `c`: not all connections are equally busy.
fn messages(c: usize) -> u64 {
    200 + 40 * c as u64
}

fn main() {
    // Room for every connection's key.
    let mut cno = evd::Cno::new(CONNECTIONS).expect("valid capacity");

    // The connections: small rings (8 slots) so posters sometimes find one
    // full and retry. `bind_cno_new_key` hands out keys below twice the
    // CNO's capacity, so a key indexes a table of that size directly.
    let keys_max = 2 * cno.capacity();
    let mut conns: Vec<Option<Consumer<u64>>> = (0..keys_max).map(|_| None).collect();
    let mut bound = Vec::with_capacity(CONNECTIONS);
    let mut owners: Vec<Vec<(usize, evd::Poster<u64>)>> =
        (0..POSTER_THREADS).map(|_| Vec::new()).collect();
    for c in 0..CONNECTIONS {
        let (poster, mut consumer) = evd::bounded::<u64>(8).expect("valid capacity");
        let key = consumer.bind_cno_new_key(&cno).expect("room for 64") as usize;
        owners[c % POSTER_THREADS].push((key, poster));
        conns[key] = Some(consumer);
        bound.push(key);
    }

    // Each poster thread interleaves messages to the connections it owns
    // (`key << 32 | sequence`), then drops its posters: each connection
    // closes when its last poster goes.
    let threads: Vec<_> = owners
        .into_iter()
        .map(|mine| {
            std::thread::spawn(move || {
                let mut sent = vec![0u64; mine.len()];
                let mut live = mine.len();
                let mut i = 0;
                while live > 0 {
                    let (key, poster) = &mine[i];
                    if sent[i] < messages(*key) {
                        let mut msg = (*key as u64) << 32 | sent[i];
                        loop {
                            match poster.post(msg) {
                                Ok(()) => break,
                                Err(PostError::Full(back)) => {
                                    msg = back; // backpressure: retry
                                    std::thread::yield_now();
                                }
                                Err(PostError::Closed(_)) => unreachable!("the server is alive"),
                            }
                        }
                        sent[i] += 1;
                        if sent[i] == messages(*key) {
                            live -= 1;
                        }
                    }
                    i = (i + 1) % mine.len();
                }
            })
        })
        .collect();

    // The serving thread (this one). Enable every connection first: each
    // says Armed (nothing posted yet) or Pending (drain it now).
    let mut next = vec![0u64; keys_max]; // next sequence number per connection
    let mut enabled = vec![false; keys_max];
    let mut open = CONNECTIONS;
    let (mut waits, mut keys_served, mut drained, mut most) = (0u64, 0u64, 0u64, 0usize);

    // Drain connection `key`, then enable it again; false once it is closed.
    let mut serve = |key: usize, conn: &mut Consumer<u64>, enabled: &mut bool| -> bool {
        loop {
            loop {
                match conn.try_dequeue() {
                    Ok(msg) => {
                        let (c, seq) = ((msg >> 32) as usize, msg & 0xffff_ffff);
                        assert_eq!(c, key, "a message on the wrong connection");
                        assert_eq!(seq, next[c], "exactly once, in order per connection");
                        next[c] += 1;
                        drained += 1;
                    }
                    Err(TryDequeueError::Empty) => break,
                    Err(TryDequeueError::Closed) => return false, // closed and drained
                    Err(TryDequeueError::Overflow(_)) => unreachable!("no lossy posts"),
                }
            }
            match conn.enable_cno().expect("bound, CNO alive") {
                ArmStatus::Armed => {
                    *enabled = true;
                    return true;
                }
                ArmStatus::Pending => {} // more came during the drain
                ArmStatus::Closed => return false,
            }
        }
    };

    for &key in &bound {
        let conn = conns[key].as_mut().expect("bound");
        if !serve(key, conn, &mut enabled[key]) {
            open -= 1;
        }
    }
    let mut keys = Vec::with_capacity(CONNECTIONS);
    while open > 0 {
        keys.clear();
        // Sleeps until a key is ready; returns every key ready now.
        let n = cno.wait(&mut keys);
        waits += 1;
        most = most.max(n);
        for &key in &keys {
            let key = key as usize;
            assert!(enabled[key], "a key only for an enabled connection, once");
            enabled[key] = false;
            keys_served += 1;
            let conn = conns[key].as_mut().expect("a key the CNO handed out");
            if !serve(key, conn, &mut enabled[key]) {
                open -= 1;
            }
        }
    }
    threads.into_iter().for_each(|t| t.join().unwrap());

    for &c in &bound {
        assert_eq!(
            next[c],
            messages(c),
            "connection {c}: every message arrived"
        );
    }
    assert_eq!(cno.try_next(), None, "nothing left in the ready set");
    drop(conns); // dropping a bound consumer unbinds it
    assert_eq!(cno.bound(), 0);
    println!(
        "cno: {drained} messages on {CONNECTIONS} connections from {POSTER_THREADS} threads, \
         exactly once, in order per connection"
    );
    println!(
        "cno: one thread, {waits} waits, {keys_served} keys served ({:.1} per wait, at most {most})",
        keys_served as f64 / waits.max(1) as f64
    );
}
