//! Payloads that count their drops, to catch leaks and double drops.

use std::sync::{Arc, Mutex};

/// How many times each payload was dropped, by id.
#[derive(Default)]
pub struct DropLog {
    counts: Mutex<Vec<u32>>,
}

impl DropLog {
    pub fn new() -> Arc<DropLog> {
        Arc::new(DropLog::default())
    }

    /// A new payload with the next id.
    pub fn make(self: &Arc<Self>) -> Payload {
        let mut c = self.counts.lock().unwrap();
        c.push(0);
        Payload {
            id: c.len() as u64 - 1,
            log: self.clone(),
        }
    }

    pub fn created(&self) -> usize {
        self.counts.lock().unwrap().len()
    }

    pub fn drops(&self, id: u64) -> u32 {
        self.counts.lock().unwrap()[id as usize]
    }

    /// Every payload made was dropped exactly once.
    pub fn assert_all_dropped_once(&self) {
        for (id, &n) in self.counts.lock().unwrap().iter().enumerate() {
            assert_eq!(n, 1, "payload {id} dropped {n} times (0 = leaked)");
        }
    }

    fn dropped(&self, id: u64) {
        let mut c = self.counts.lock().unwrap();
        c[id as usize] += 1;
        let n = c[id as usize];
        drop(c);
        assert_eq!(n, 1, "payload {id} dropped twice");
    }
}

/// An event that records its drop in a [`DropLog`].
pub struct Payload {
    pub id: u64,
    log: Arc<DropLog>,
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({})", self.id)
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.log.dropped(self.id);
    }
}
