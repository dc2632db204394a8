//! One volley world over several server processes: the bus shell that carries zones' border
//! frames over [NATS](https://nats.io).
//!
//! The framework does the zone's work ([`volley::server::zone`]: which entities stand near
//! which border, encoding and decoding them, the border world every player watches). This
//! crate only moves the bytes: each zone subscribes to its own subject,
//! `{prefix}.{zone}.border`, and publishes each tick's frame for a neighbour on the
//! neighbour's subject. NATS' core pub/sub delivers at most once, which is what per-tick
//! state wants: a lost frame is replaced by the next.
//!
//! While the bus is down, the zone runs alone: its frames are left out (counted in
//! [`ZoneCounters::frames_dropped`](volley::server::zone::ZoneCounters)), its neighbours'
//! entities fade, and the client reconnects every [`BusConfig::reconnect_every`] until the
//! bus returns, when both flow again.
//!
//! ```no_run
//! # async fn f(link: volley::server::zone::ZoneLink) -> Result<(), volley_zones::BusError> {
//! let bus = volley_zones::ZoneBus::start(link, volley_zones::BusConfig::new("nats://127.0.0.1:4222")).await?;
//! // ... the server runs ...
//! bus.stop();
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use volley::protocol::zone::ZoneId;
use volley::protocol::zone::handoff::{Offer, Outcome, PlayerId};
use volley::server::zone::{ZoneCounters, ZoneInbox, ZoneLink, ZoneTick};

/// Where the bus is and how to use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusConfig {
    /// The NATS server (`nats://host:port`; several, comma-separated, for a cluster).
    pub url: String,
    /// The subjects' prefix: zone `k` listens on `{prefix}.{k}.border`. Several maps can share
    /// one NATS with different prefixes.
    pub prefix: String,
    /// How long to wait between attempts to reach the bus when it is down.
    pub reconnect_every: Duration,
}

impl BusConfig {
    /// The bus at `url`, prefix `volley.zone`, reconnecting every 250 ms.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), prefix: "volley.zone".into(), reconnect_every: Duration::from_millis(250) }
    }

    /// The subject zone `zone` takes handoff offers on (request-reply).
    pub fn handoff_subject(&self, zone: ZoneId) -> String {
        format!("{}.{zone}.handoff", self.prefix)
    }

    /// The subject zone `zone` times its round trips to the bus on.
    pub fn rtt_subject(&self, zone: ZoneId) -> String {
        format!("{}.{zone}.rtt", self.prefix)
    }

    /// The subject zone `zone` receives its neighbours' border frames on.
    pub fn border_subject(&self, zone: ZoneId) -> String {
        format!("{}.{zone}.border", self.prefix)
    }

    /// The subject zone `zone` publishes its whole state on each tick, when it does
    /// ([`ZoneOptions::publish_state`](volley::server::zone::ZoneOptions::publish_state)).
    pub fn state_subject(&self, zone: ZoneId) -> String {
        format!("{}.{zone}.state", self.prefix)
    }

    /// The subject every zone's state matches (a wildcard, for [`watch_states`]).
    pub fn all_states_subject(&self) -> String {
        format!("{}.*.state", self.prefix)
    }
}

/// Hands `each` every zone's [`StateFrame`](volley::protocol::zone::StateFrame) bytes as the
/// zones publish them (those that do), from a task that runs until the bus goes away or it
/// is aborted: for observers of the whole map, such as the global oracle of `volley run
/// --zones N --oracle`. Subscribed when this returns.
///
/// # Errors
/// The bus cannot be reached, or refuses the subscription.
pub async fn watch_states(
    config: &BusConfig,
    mut each: impl FnMut(bytes::Bytes) + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, BusError> {
    let client = async_nats::connect(config.url.as_str())
        .await
        .map_err(|e| BusError::Connect { url: config.url.clone(), error: e.to_string() })?;
    let subject = config.all_states_subject();
    let mut sub =
        client.subscribe(subject.clone()).await.map_err(|e| BusError::Subscribe { subject, error: e.to_string() })?;
    Ok(tokio::spawn(async move {
        // The client lives as long as the task.
        let _client = client;
        while let Some(m) = sub.next().await {
            each(m.payload);
        }
    }))
}

/// Why the bus shell did not start.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The URL or options were refused.
    #[error("cannot use the bus at {url}: {error}")]
    Connect {
        /// The URL.
        url: String,
        /// Why.
        error: String,
    },
    /// The subscription was refused.
    #[error("cannot subscribe to {subject}: {error}")]
    Subscribe {
        /// The subject.
        subject: String,
        /// Why.
        error: String,
    },
}

/// A zone's bus shell, running (see the crate docs).
#[derive(Debug)]
pub struct ZoneBus {
    client: async_nats::Client,
    counters: Arc<ZoneCounters>,
    inbox: ZoneInbox,
    timeout: Duration,
    handoff_subjects: Arc<[String]>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ZoneBus {
    /// Connects to the bus (or keeps trying: a zone starts whether or not the bus is up),
    /// subscribes to the zone's subject and starts moving frames both ways.
    ///
    /// # Errors
    /// When the URL is not one NATS' client can use.
    pub async fn start(mut link: ZoneLink, config: BusConfig) -> Result<Self, BusError> {
        let me = link.me();
        let counters = link.counters().clone();
        let bus_up = counters.clone();
        let (handoffs, timeout, link_zones) = (link.inbox(), link.handoff_timeout(), link.layout().len());
        let every = config.reconnect_every;
        let client = async_nats::ConnectOptions::new()
            .name(format!("volley-zone-{me}"))
            .retry_on_initial_connect()
            .max_reconnects(None)
            .reconnect_delay_callback(move |attempts| if attempts <= 1 { Duration::ZERO } else { every })
            .connection_timeout(Duration::from_secs(1))
            .event_callback(move |event| {
                let bus_up = bus_up.clone();
                async move {
                    match event {
                        async_nats::Event::Connected => {
                            bus_up.bus_up.store(1, Ordering::Relaxed);
                            tracing::info!(zone = me, "the zone bus is connected");
                        }
                        async_nats::Event::Disconnected => {
                            bus_up.bus_up.store(0, Ordering::Relaxed);
                            tracing::warn!(zone = me, "the zone bus is down: this zone runs alone until it returns");
                        }
                        other => tracing::debug!(zone = me, event = %other, "zone bus event"),
                    }
                }
            })
            .connect(config.url.as_str())
            .await
            .map_err(|e| BusError::Connect { url: config.url.clone(), error: e.to_string() })?;
        let subject = config.border_subject(me);
        let mut subscriber = client
            .subscribe(subject.clone())
            .await
            .map_err(|e| BusError::Subscribe { subject: subject.clone(), error: e.to_string() })?;
        let offers_subject = config.handoff_subject(me);
        let mut offers = client
            .subscribe(offers_subject.clone())
            .await
            .map_err(|e| BusError::Subscribe { subject: offers_subject, error: e.to_string() })?;
        let (answering, answerer) = (client.clone(), link.inbox());
        let answer = tokio::spawn(async move {
            while let Some(offer) = offers.next().await {
                let Some(reply) = offer.reply else { continue };
                let answer = answerer.handle_offer(&offer.payload, answerer.now());
                let _ = answering.publish(reply, answer.into()).await;
            }
        });
        let inbox = link.inbox();
        let receive = tokio::spawn(async move {
            while let Some(message) = subscriber.next().await {
                if let Err(e) = inbox.handle_frame(&message.payload) {
                    tracing::debug!(zone = me, error = %e, "a border frame was not used");
                }
            }
        });
        let handoff_subjects: Arc<[String]> = (0..link_zones).map(|z| config.handoff_subject(z as ZoneId)).collect();
        let departures = link.take_departures();
        let (offering, subjects, offers_inbox) = (client.clone(), handoff_subjects.clone(), link.inbox());
        let depart = tokio::spawn(async move {
            let Some(mut departures) = departures else { return };
            while let Some(d) = departures.recv().await {
                // Each offer on its own task: one slow answer holds up no other handoff.
                let (client, subjects, inbox) = (offering.clone(), subjects.clone(), offers_inbox.clone());
                tokio::spawn(async move {
                    let answer = request(&client, &subjects, timeout, d.to, d.offer).await;
                    let outcome = inbox.end_handoff(d.player, answer.as_deref().map_err(Clone::clone), inbox.now());
                    if let Some(o) = outcome {
                        tracing::debug!(
                            zone = inbox.me(),
                            player = d.player,
                            to = d.to,
                            outcome = o.label(),
                            "handoff"
                        );
                    }
                });
            }
        });
        let (publisher, dropped) = (client.clone(), counters.clone());
        let subjects: Vec<String> = (0..link.layout().len()).map(|z| config.border_subject(z as ZoneId)).collect();
        let state_subject = config.state_subject(me);
        let publish = tokio::spawn(async move {
            while let Some(ZoneTick { frames, state }) = link.next_tick().await {
                // While the bus is down nothing is queued for it: a stale frame is worth
                // nothing once it returns.
                if dropped.bus_up.load(Ordering::Relaxed) == 0 {
                    dropped.frames_dropped.fetch_add(frames.len() as u64, Ordering::Relaxed);
                    continue;
                }
                if let Some(state) = state {
                    let _ = publisher.publish(state_subject.clone(), state).await;
                }
                for f in frames {
                    let Some(subject) = subjects.get(usize::from(f.to)) else { continue };
                    if publisher.publish(subject.clone(), f.bytes).await.is_err() {
                        dropped.frames_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let rtt = tokio::spawn(measure_rtt(client.clone(), config.rtt_subject(me), counters.clone()));
        Ok(Self {
            client,
            counters,
            inbox: handoffs,
            timeout,
            handoff_subjects,
            tasks: vec![answer, receive, publish, rtt, depart],
        })
    }

    /// Offers `player` to zone `to` ([`Offer`]: who it is and the game's state for it) and
    /// waits for the answer, at most the zone's handoff timeout: accepted (the new zone's
    /// address), refused, or timed out (no answer, no zone listening, or the bus down). Only
    /// an acceptance lets the player go; otherwise it stays where it is. `None` when a
    /// handoff of the player is already under way.
    pub async fn hand_off(&self, player: PlayerId, to: ZoneId, offer: &Offer) -> Option<Outcome> {
        self.inbox.begin_handoff(player, to, self.inbox.now()).ok()?;
        let answer = request(&self.client, &self.handoff_subjects, self.timeout, to, offer.encode().into()).await;
        let outcome = self.inbox.end_handoff(player, answer.as_deref().map_err(Clone::clone), self.inbox.now());
        if let Some(o) = &outcome {
            tracing::debug!(zone = self.inbox.me(), player, to, outcome = o.label(), "handoff");
        }
        outcome
    }

    /// The handoffs' clock now ([`ZoneInbox::now`]).
    pub fn now(&self) -> Duration {
        self.inbox.now()
    }

    /// The receiving side of the zone's link (accepted handoffs waiting for their players).
    pub fn inbox(&self) -> &ZoneInbox {
        &self.inbox
    }

    /// Whether the bus is reachable now.
    pub fn is_connected(&self) -> bool {
        self.counters.bus_up.load(Ordering::Relaxed) == 1
    }

    /// The zone's figures.
    pub fn counters(&self) -> &Arc<ZoneCounters> {
        &self.counters
    }

    /// The NATS client (for the game's own subjects).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// Stops moving frames (the zone's neighbours see it go quiet).
    pub fn stop(self) {
        drop(self);
    }
}

/// Sends an offer to zone `to` and waits at most `timeout` for its answer.
async fn request(
    client: &async_nats::Client,
    subjects: &[String],
    timeout: Duration,
    to: ZoneId,
    offer: bytes::Bytes,
) -> Result<bytes::Bytes, String> {
    let Some(subject) = subjects.get(usize::from(to)) else { return Err(format!("zone {to} is not on the map")) };
    match tokio::time::timeout(timeout, client.request(subject.clone(), offer)).await {
        Ok(Ok(message)) => Ok(message.payload),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in time".to_string()),
    }
}

/// Once a second, a message to the zone's own subject and back through the bus: its round
/// trip is `volley_zone_bus_rtt_seconds`.
async fn measure_rtt(client: async_nats::Client, subject: String, counters: Arc<ZoneCounters>) {
    let Ok(mut echoes) = client.subscribe(subject.clone()).await else { return };
    let base = std::time::Instant::now();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = every.tick() => {
                let sent = base.elapsed().as_micros() as u64;
                let _ = client.publish(subject.clone(), bytes::Bytes::copy_from_slice(&sent.to_le_bytes())).await;
            }
            echo = echoes.next() => {
                let Some(echo) = echo else { return };
                if let Ok(sent) = <[u8; 8]>::try_from(&echo.payload[..]) {
                    let rtt = (base.elapsed().as_micros() as u64).saturating_sub(u64::from_le_bytes(sent));
                    counters.bus_rtt_us.store(rtt, Ordering::Relaxed);
                }
            }
        }
    }
}

impl Drop for ZoneBus {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
