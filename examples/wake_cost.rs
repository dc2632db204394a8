//! What waking a task costs on this machine: the floor under any design that gives each
//! player a task of its own (issue 38's "one owner per player").
//!
//! Run with `cargo run --release --example wake_cost`. On a runtime of two workers, 500
//! receivers are woken once each per round, 60 rounds a second for ten seconds, as a tick's
//! fan-out would wake 500 player actors; each does nothing but count. Three ways: a ractor
//! actor (`cast`), a tokio task reading an unbounded `mpsc` channel, and a tokio task waiting
//! on a `Notify`. It prints the process's CPU time (user + system, from `/proc/self/stat`)
//! per wake-up, which includes the kernel's work to unpark an idle worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::Notify;

/// How many receivers are woken each round.
const RECEIVERS: usize = 500;
/// Rounds measured (ten seconds at 60 a second).
const ROUNDS: usize = 600;

/// The process's user + system CPU time in seconds, if readable.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Counts down the receivers of a round; the last wakes the driver.
type Countdown = Arc<(AtomicUsize, Notify)>;

fn arrive(c: &Countdown) {
    if c.0.fetch_sub(1, Ordering::AcqRel) == 1 {
        c.1.notify_one();
    }
}

/// A receiver as a ractor actor.
struct Receiver;

impl Actor for Receiver {
    type Msg = ();
    type State = Countdown;
    type Arguments = Countdown;
    async fn pre_start(&self, _: ActorRef<()>, c: Countdown) -> Result<Countdown, ActorProcessingErr> {
        Ok(c)
    }
    async fn handle(&self, _: ActorRef<()>, _: (), c: &mut Countdown) -> Result<(), ActorProcessingErr> {
        arrive(c);
        Ok(())
    }
}

/// One way of waking the receivers.
enum Wakers {
    Ractor(Vec<ActorRef<()>>),
    Mpsc(Vec<tokio::sync::mpsc::UnboundedSender<()>>),
    Notify(Vec<Arc<Notify>>),
}

impl Wakers {
    async fn start(kind: &str, c: &Countdown) -> Result<Self, Box<dyn std::error::Error>> {
        Ok(match kind {
            "ractor" => {
                let mut v = Vec::new();
                for _ in 0..RECEIVERS {
                    v.push(Actor::spawn(None, Receiver, c.clone()).await?.0);
                }
                Wakers::Ractor(v)
            }
            "mpsc" => Wakers::Mpsc(
                (0..RECEIVERS)
                    .map(|_| {
                        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
                        let c = c.clone();
                        tokio::spawn(async move {
                            while rx.recv().await.is_some() {
                                arrive(&c);
                            }
                        });
                        tx
                    })
                    .collect(),
            ),
            _ => Wakers::Notify(
                (0..RECEIVERS)
                    .map(|_| {
                        let n = Arc::new(Notify::new());
                        let (n2, c) = (n.clone(), c.clone());
                        tokio::spawn(async move {
                            loop {
                                n2.notified().await;
                                arrive(&c);
                            }
                        });
                        n
                    })
                    .collect(),
            ),
        })
    }

    fn wake_all(&self) {
        match self {
            Wakers::Ractor(v) => {
                for r in v {
                    let _ = r.cast(());
                }
            }
            Wakers::Mpsc(v) => {
                for t in v {
                    let _ = t.send(());
                }
            }
            Wakers::Notify(v) => v.iter().for_each(|n| n.notify_one()),
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let countdown: Countdown = Arc::new((AtomicUsize::new(0), Notify::new()));
    for kind in ["ractor", "mpsc", "notify", "ractor", "mpsc", "notify"] {
        let wakers = Wakers::start(kind, &countdown).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = cpu_seconds().ok_or("no /proc/self/stat")?;
        let mut tick = tokio::time::interval(Duration::from_micros(16_667));
        for _ in 0..ROUNDS {
            tick.tick().await;
            countdown.0.store(RECEIVERS, Ordering::Release);
            let all_woken = countdown.1.notified();
            wakers.wake_all();
            all_woken.await;
        }
        let cpu = cpu_seconds().ok_or("no /proc/self/stat")? - before;
        println!("{kind:>6}: {:.2} µs of CPU per wake-up", cpu * 1e6 / (RECEIVERS * ROUNDS) as f64);
        if let Wakers::Ractor(v) = wakers {
            v.iter().for_each(|r| r.stop(None));
        }
    }
    Ok(())
}
