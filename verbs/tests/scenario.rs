//! The every-source scenario (`scenarios/every_source.rs`) on the soft
//! devices: two soft CQs (one in event mode, one adaptive) completed by
//! two threads, a soft connection manager and a soft device raising their
//! events from a third; every device event counted and checked in order.

mod common;
mod scenarios;

use common::{Res, e2s, ensure};
use evd::Poster;
use evd_verbs::soft::SoftCq;
use evd_verbs::soft::{SoftAsyncEvents, SoftCm, SoftCmEvents, SoftCqProducer, SoftDevice};
use evd_verbs::{
    AsyncElement, AsyncEvent, AsyncEventKind, CmEvent, CmEventKind, CmToken, CqId, Driver, Feed,
    FeedMode, WorkCompletion,
};
use scenarios::every_source::{Apps, Devices, Event, Log, Traffic, every_source_at_once};
use std::thread;

const COMPLETIONS: u64 = 3000; // per CQ
const CM_EVENTS: u64 = 300;
const ASYNC_EVENTS: u8 = 50;
const APPS: Apps = Apps {
    events: 3000,
    follow_up_every: 100,
};

#[derive(Default)]
struct Soft {
    hcas: Vec<SoftCqProducer>,
    cm: Option<SoftCm>,
    device: Option<SoftDevice>,
}

impl Soft {
    /// Everything phase 1 delivers: the devices' events and the
    /// application's with their follow-ups.
    fn expected() -> usize {
        (2 * COMPLETIONS + CM_EVENTS + 2 * APPS.events + APPS.follow_ups()) as usize
            + usize::from(ASYNC_EVENTS)
    }
}

impl Devices for Soft {
    const THREADS: usize = 3;

    type Cm = SoftCmEvents;
    type Async = SoftAsyncEvents;

    fn sources(&mut self) -> Result<(SoftCmEvents, SoftAsyncEvents), String> {
        let (cm_events, cm) = SoftCm::new().map_err(e2s)?;
        let (async_events, device) = SoftDevice::new().map_err(e2s)?;
        (self.cm, self.device) = (Some(cm), Some(device));
        Ok((cm_events, async_events))
    }

    fn register(&mut self, driver: &mut Driver, poster: &Poster<Event>) -> Res {
        for id in 0..2 {
            let (cq, hca) = SoftCq::new(COMPLETIONS as usize).map_err(e2s)?;
            let mode = if id == 0 {
                FeedMode::Event
            } else {
                FeedMode::Adaptive(Default::default())
            };
            driver
                .register(Feed::new(cq, CqId(id), poster.clone()), mode)
                .map_err(e2s)?;
            self.hcas.push(hca);
        }
        Ok(())
    }

    fn traffic(&mut self, t: Traffic<'_>) -> Res {
        let mut threads = Vec::new();
        for (i, hca) in self.hcas.iter().enumerate() {
            let (hca, go) = (hca.clone(), t.go.clone());
            threads.push(thread::spawn(move || {
                go.wait();
                for n in 0..COMPLETIONS {
                    hca.push(WorkCompletion::new(n).with_qp_num(i as u32))
                        .unwrap();
                }
            }));
        }
        let (cm, device, go) = (self.cm.clone(), self.device.take(), t.go.clone());
        let (cm, device) = (cm.ok_or("not registered")?, device.ok_or("not registered")?);
        threads.push(thread::spawn(move || {
            go.wait();
            for n in 0..CM_EVENTS {
                cm.raise(CmEvent::new(CmEventKind::Established, CmToken(n)));
                if n < u64::from(ASYNC_EVENTS) {
                    device.raise(AsyncEvent::new(
                        AsyncEventKind::PortActive,
                        AsyncElement::Port(n as u8),
                    ));
                }
            }
        }));
        t.go.wait();
        for t in threads {
            t.join().map_err(|_| "a device thread panicked")?;
        }
        Ok(())
    }

    fn delivered(&self, log: &Log) -> bool {
        log.delivered >= Self::expected()
    }

    fn check(&self, log: &Log) -> Res {
        ensure!(
            log.delivered == Self::expected(),
            "{} events delivered, not {}",
            log.delivered,
            Self::expected()
        );
        for id in 0..2 {
            ensure!(
                log.per_cq.get(&CqId(id)) == Some(&(0..COMPLETIONS).collect()),
                "CQ {id}: {} completions, not 0..{COMPLETIONS} in order",
                log.completions(CqId(id))
            );
        }
        let cm: Vec<_> = log.cm.iter().map(|c| c.id.0).collect();
        ensure!(
            cm == (0..CM_EVENTS).collect::<Vec<_>>(),
            "CM events not in order: {cm:?}"
        );
        let ports: Vec<_> = log.async_events.iter().map(|a| a.element).collect();
        ensure!(
            ports
                == (0..ASYNC_EVENTS)
                    .map(AsyncElement::Port)
                    .collect::<Vec<_>>(),
            "async events not on ports 0..{ASYNC_EVENTS} in order: {ports:?}"
        );
        Ok(())
    }

    fn finish(&mut self) -> Res {
        Ok(())
    }
}

#[test]
fn every_source_at_once_under_single_instance_upcalls() {
    every_source_at_once(Soft::default(), APPS).unwrap();
}
