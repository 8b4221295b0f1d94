//! Event-driven RC ping-pong over an EVD (feature `ibverbs`, needs an RDMA
//! device, e.g. Soft-RoCE's rxe0; `verbs/tests/softroce/run.sh` runs it in a
//! guest).
//!
//! Two RC QPs on one device, connected to each other. Both CQs are fed into one
//! EVD by a [`Driver`] (io_uring, or epoll where it is refused) in event-driven
//! mode; the application thread only sleeps on the EVD (`wait`) and reacts to
//! completions: the "server" QP echoes every message, the "client" sends the
//! next one when the echo arrives.
//!
//! `cargo run --release -p evd-verbs --features ibverbs --example rc_pingpong -- [ROUNDS]`

use evd::{TryDequeueError, WaitError};
use evd_verbs::ibv::{ConnectParams, Context, QpCaps, SendOp};
use evd_verbs::{CqId, Driver, DriverConfig, Feed, FeedMode, VerbsEvent, WcOpcode};
use std::time::{Duration, Instant};

const CLIENT: CqId = CqId(1);
const SERVER: CqId = CqId(2);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: u64 = std::env::args().nth(1).map_or(Ok(1000), |s| s.parse())?;
    let ctx = Context::open(None)?;
    let pd = ctx.alloc_pd()?;
    let cq_client = ctx.create_cq(64, CLIENT)?;
    let cq_server = ctx.create_cq(64, SERVER)?;
    let mut client = pd.create_rc_qp(&cq_client, &cq_client, &QpCaps::default(), 1)?;
    let mut server = pd.create_rc_qp(&cq_server, &cq_server, &QpCaps::default(), 1)?;
    // Port 1, GID index 0; each side picks its first send PSN and tells
    // the other (here in memory, in real life out of band).
    let (client_end, server_end) = (client.endpoint(1, 0, 100)?, server.endpoint(1, 0, 200)?);
    let mut params = ConnectParams::default();
    params.sq_psn = client_end.psn;
    client.connect(server_end, &params)?;
    params.sq_psn = server_end.psn;
    server.connect(client_end, &params)?;
    let mut mr_client = pd.register(4096)?;
    let mut mr_server = pd.register(4096)?;

    let (poster, mut evd) = evd::bounded::<VerbsEvent>(256)?;
    let mut driver = Driver::new(DriverConfig::default())?;
    driver.register(
        Feed::new(cq_client, CLIENT, poster.clone()),
        FeedMode::Event,
    )?;
    driver.register(Feed::new(cq_server, SERVER, poster), FeedMode::Event)?;
    let driver = driver.spawn()?;

    for i in 0..4 {
        client.post_recv(i, &mr_client, 64, 64)?;
        server.post_recv(i, &mr_server, 64, 64)?;
    }
    let start = Instant::now();
    mr_client.write(0, &0u64.to_le_bytes())?;
    client.post_send(0, SendOp::Send, &mr_client, 0, 8, true)?;
    let mut done = 0u64;
    let mut idle = 0;
    while done < rounds {
        let ev = match evd.try_dequeue() {
            Ok(ev) => ev,
            Err(TryDequeueError::Empty) => {
                // Sleep on the EVD; ten silent seconds in a row mean
                // something is stuck.
                match evd.wait(1, Some(Duration::from_secs(1))) {
                    Ok(_) => idle = 0,
                    Err(WaitError::Timeout { .. }) => {
                        idle += 1;
                        if idle >= 10 {
                            return Err(format!("stalled after {done} round trips").into());
                        }
                    }
                    Err(e) => return Err(format!("wait: {e}").into()),
                }
                continue;
            }
            Err(e) => return Err(format!("{e:?}").into()),
        };
        let VerbsEvent::Completion { cq, wc } = ev else {
            return Err(format!("async event {ev:?}").into());
        };
        if !wc.status.is_success() {
            return Err(format!("{cq:?}: {wc:?}").into());
        }
        match (cq, wc.opcode) {
            (_, WcOpcode::SEND) => {}
            (SERVER, WcOpcode::RECV) => {
                // Echo the message back.
                let mut msg = [0u8; 8];
                mr_server.read(64, &mut msg)?;
                mr_server.write(0, &msg)?;
                server.post_recv(wc.wr_id, &mr_server, 64, 64)?;
                server.post_send(wc.wr_id, SendOp::Send, &mr_server, 0, 8, true)?;
            }
            (CLIENT, WcOpcode::RECV) => {
                let mut seq = [0u8; 8];
                mr_client.read(64, &mut seq)?;
                let seq = u64::from_le_bytes(seq);
                if seq != done {
                    return Err(format!("echo {seq}, expected {done}").into());
                }
                done += 1;
                client.post_recv(wc.wr_id, &mr_client, 64, 64)?;
                if done < rounds {
                    mr_client.write(0, &done.to_le_bytes())?;
                    client.post_send(done, SendOp::Send, &mr_client, 0, 8, true)?;
                }
            }
            other => return Err(format!("unexpected completion {other:?}").into()),
        }
    }
    let elapsed = start.elapsed();
    let stopped = driver.shutdown()?;
    println!(
        "rc_pingpong: {rounds} round trips in {elapsed:.2?} ({:.1} µs each), driver CPU {:.2?}",
        elapsed.as_secs_f64() * 1e6 / rounds as f64,
        stopped.cpu_time
    );
    // Feeds first (they ack their CQ events), then QPs, then the CQs go.
    drop(stopped);
    drop((client, server));
    Ok(())
}
