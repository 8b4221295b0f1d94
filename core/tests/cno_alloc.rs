//! What a CNO binding keeps alive, measured by a global allocator that
//! counts the bytes live in the process (one test in this binary, so no
//! other test allocates meanwhile).

use evd::Cno;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: defers to the system allocator; the bookkeeping is one atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A long-lived EVD bound to one short-lived CNO after another (a CNO per
/// session, say): once a CNO is dropped and the EVD unbound from it, the
/// CNO's memory goes. Today every CNO the EVD was ever bound to stays
/// allocated until the EVD drops (`Link::kept` in `cno/engine.rs`).
#[test]
fn an_evd_bound_to_many_cnos_in_turn_does_not_keep_them_all_alive() {
    const CYCLES: usize = 100;
    const MAX_EVDS: usize = 256;
    let (_p, mut c) = evd::bounded::<u8>(4).unwrap();
    let cycle = |c: &mut evd::Consumer<u8>| {
        let cno = Cno::new(MAX_EVDS).unwrap();
        c.bind_cno(&cno, 1).unwrap();
        assert_eq!(c.unbind_cno(), Some(1));
        drop(cno);
    };
    // What one CNO costs while it lives.
    let before = LIVE.load(Relaxed);
    let cno = Cno::new(MAX_EVDS).unwrap();
    let one = LIVE.load(Relaxed) - before;
    drop(cno);
    assert!(one > 0);
    cycle(&mut c); // warm-up: any one-time growth of the EVD's own state
    let before = LIVE.load(Relaxed);
    for _ in 0..CYCLES {
        cycle(&mut c);
    }
    let grown = LIVE.load(Relaxed) - before;
    println!("one CNO: {one} bytes; {CYCLES} bind/unbind/drop cycles left {grown} bytes more");
    assert!(
        grown < one,
        "{CYCLES} dropped CNOs still hold {grown} bytes ({} CNOs' worth) through the EVD",
        grown / one
    );
}
