//! The Agones lifecycle of one game server, a gRPC client of the Agones SDK server (its code
//! generated from the SDK's protos and kept in the repository: building needs no `protoc`).
//!
//! In a GameServer pod the SDK server (a sidecar) listens on `localhost:$AGONES_SDK_GRPC_PORT`.
//! [`Lifecycle::start`] connects to it and, while the server runs:
//!
//! | when | call |
//! | --- | --- |
//! | the socket is bound and the first tick has run | `Ready` |
//! | every [`AgonesConfig::health_every`], if a tick finished within it | `Health` (a stalled tick stops the pings, and Agones marks the server `Unhealthy`) |
//! | at start, and when the number of players changes (checked with each ping) | `UpdateCounter` on [`AgonesConfig::players_counter`]: capacity = slots, count = players |
//! | the GameServer turns `Allocated` | the game's callback gets its labels and annotations ([`Allocation`]) |
//! | the game asks ([`ShutdownRequest::request`], e.g. its match ended), or SIGTERM | the caller drains the server, then [`Lifecycle::shutdown`]: `Shutdown` |
//!
//! Before the server starts, [`public_addr`] reads the address and port Agones gave the
//! GameServer (what connect tokens must name).
//!
//! Off unless enabled: `volley server --agones`, or on its own when
//! `AGONES_SDK_GRPC_PORT` is set ([`AgonesConfig::from_env`]), as it is in a pod. The tests
//! run it against `agones-sdk-standin`, the SDK's services generated from the same protos.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

mod sdk;
use sdk::Sdk;
pub use sdk::SdkError;
use volley::server::metrics::ServerMetrics;

/// Lifecycle settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgonesConfig {
    /// The SDK server's port (`None`: `AGONES_SDK_GRPC_PORT`, else 9357).
    pub port: Option<u16>,
    /// How often `Health` is sent while ticks run (Agones' default `periodSeconds` is 5; the
    /// manifests in `deploy/` say 5 with this at 1 s, so a stall is caught within seconds).
    pub health_every: Duration,
    /// The Counter that holds the player count (declared in the GameServer spec), if any.
    pub players_counter: Option<String>,
    /// How long to wait for the SDK server at start.
    pub connect_timeout: Duration,
}

impl Default for AgonesConfig {
    fn default() -> Self {
        Self {
            port: None,
            health_every: Duration::from_secs(1),
            players_counter: Some("players".into()),
            connect_timeout: Duration::from_secs(30),
        }
    }
}

impl AgonesConfig {
    /// The defaults, if `AGONES_SDK_GRPC_PORT` is set (as it is in a GameServer pod).
    pub fn from_env() -> Option<Self> {
        std::env::var_os("AGONES_SDK_GRPC_PORT").map(|_| Self::default())
    }
}

/// Why the lifecycle could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum AgonesError {
    /// No SDK server answered in time.
    #[error("no Agones SDK server answered within {0:?} (is AGONES_SDK_GRPC_PORT right?)")]
    Unreachable(Duration),
    /// The SDK call failed.
    #[error("Agones SDK: {0}")]
    Sdk(#[from] SdkError),
    /// The lifecycle's thread could not start.
    #[error("the Agones thread: {0}")]
    Thread(std::io::Error),
    /// The lifecycle's thread has ended.
    #[error("the Agones lifecycle has stopped")]
    Stopped,
}

/// The address clients reach this GameServer at: its `status.address` and the host port of
/// its port named `game` (else its first), as Agones allocated them before the process
/// started. `None` while the record has no address yet. Tokens must name this address, so
/// the program sets it as the server's public address (`volley server --agones`, unless
/// `--public-addr` is given).
///
/// # Errors
/// When no SDK server answers within [`AgonesConfig::connect_timeout`].
pub async fn public_addr(config: &AgonesConfig) -> Result<Option<std::net::SocketAddr>, AgonesError> {
    let connect = Sdk::connect(config.port);
    let mut sdk = match tokio::time::timeout(config.connect_timeout, connect).await {
        Ok(r) => r?,
        Err(_) => return Err(AgonesError::Unreachable(config.connect_timeout)),
    };
    let status = sdk.get_gameserver().await?.status.unwrap_or_default();
    let port = status.ports.iter().find(|p| p.name == "game").or(status.ports.first()).map(|p| p.port);
    let ip = status.address.parse::<std::net::IpAddr>().ok();
    Ok(match (ip, port.and_then(|p| u16::try_from(p).ok())) {
        (Some(ip), Some(port)) => Some(std::net::SocketAddr::new(ip, port)),
        _ => None,
    })
}

/// What an allocation said: the GameServer's labels and annotations once it turned
/// `Allocated` (a GameServerAllocation's `metadata` sets them: the match to host, its map).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocation {
    /// The GameServer's labels.
    pub labels: BTreeMap<String, String>,
    /// The GameServer's annotations.
    pub annotations: BTreeMap<String, String>,
}

/// The game's way to end the server (its match ended): cheap to clone, give it to a world.
/// The program then drains the server and calls `Shutdown`.
#[derive(Debug, Clone)]
pub struct ShutdownRequest(Arc<watch::Sender<bool>>);

impl ShutdownRequest {
    /// Asks for the server to end.
    pub fn request(&self) {
        self.0.send_replace(true);
    }

    /// Whether it was asked.
    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }
}

/// The lifecycle of a running server (see the module docs). It runs on a thread and
/// runtime of its own (as the admin listener does), so only the tick's progress decides the
/// pings: a world that blocks a worker of the server's runtime cannot hold up the gRPC
/// connection, nor keep it pinging. It stops when dropped or shut down.
pub struct Lifecycle {
    request: ShutdownRequest,
    requested: watch::Receiver<bool>,
    commands: Option<tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<Result<(), AgonesError>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifecycle").field("requested", &*self.requested.borrow()).finish_non_exhaustive()
    }
}

impl Drop for Lifecycle {
    fn drop(&mut self) {
        // Closing the command channel ends the thread; its runtime drops the tasks.
        self.commands = None;
        self.thread = None;
    }
}

impl Lifecycle {
    /// Connects to the SDK server and starts the lifecycle for the server whose figures are
    /// `metrics`: `Ready` after its first tick, then `Health` and the player counter, and
    /// `allocated` called (once, on the lifecycle's thread) when the GameServer turns
    /// `Allocated`.
    ///
    /// # Errors
    /// When no SDK server answers within [`AgonesConfig::connect_timeout`], or the thread
    /// cannot be started.
    pub async fn start(
        config: AgonesConfig,
        metrics: Arc<ServerMetrics>,
        allocated: impl FnMut(Allocation) + Send + 'static,
    ) -> Result<Self, AgonesError> {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(AgonesError::Thread)?;
        let (connected_tx, connected) = tokio::sync::oneshot::channel();
        let (commands, mut inbox) =
            tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<Result<(), AgonesError>>>();
        let thread = std::thread::Builder::new()
            .name("volley-agones".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let timeout = config.connect_timeout;
                    let sdk = match tokio::time::timeout(timeout, Sdk::connect(config.port)).await {
                        Ok(Ok(sdk)) => sdk,
                        Ok(Err(e)) => return drop(connected_tx.send(Err(AgonesError::Sdk(e)))),
                        Err(_) => return drop(connected_tx.send(Err(AgonesError::Unreachable(timeout)))),
                    };
                    let _ = connected_tx.send(Ok(()));
                    let ticking = tokio::spawn(ticking(sdk.clone(), config, metrics));
                    let watching = tokio::spawn(watch_allocation(sdk.clone(), allocated));
                    if let Some(reply) = inbox.recv().await {
                        ticking.abort();
                        watching.abort();
                        let mut sdk = sdk;
                        let done = sdk.shutdown().await.map_err(AgonesError::Sdk);
                        if done.is_ok() {
                            tracing::info!("Agones: Shutdown sent");
                        }
                        let _ = reply.send(done);
                    }
                });
            })
            .map_err(AgonesError::Thread)?;
        connected.await.map_err(|_| AgonesError::Unreachable(Duration::ZERO))??;
        let (tx, requested) = watch::channel(false);
        Ok(Self { request: ShutdownRequest(Arc::new(tx)), requested, commands: Some(commands), thread: Some(thread) })
    }

    /// The handle the game uses to end the server.
    pub fn shutdown_request(&self) -> ShutdownRequest {
        self.request.clone()
    }

    /// Resolves when the game has asked for the server to end.
    pub async fn requested(&mut self) {
        let _ = self.requested.wait_for(|r| *r).await;
    }

    /// After the server has drained: stops the pings and sends `Shutdown` (Agones then
    /// deletes the pod).
    ///
    /// # Errors
    /// When the SDK server does not take the call.
    pub async fn shutdown(self) -> Result<(), AgonesError> {
        let (reply, done) = tokio::sync::oneshot::channel();
        let sent = self.commands.as_ref().is_some_and(|c| c.send(reply).is_ok());
        if !sent {
            return Err(AgonesError::Stopped);
        }
        done.await.unwrap_or(Err(AgonesError::Stopped))
    }
}

/// `Ready` after the first tick; then, every period, `Health` if a tick finished within it,
/// and the player counter when it changed.
async fn ticking(mut sdk: Sdk, config: AgonesConfig, metrics: Arc<ServerMetrics>) {
    let period = config.health_every.max(Duration::from_millis(50));
    while metrics.totals().ticks == 0 || !metrics.is_ready() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match sdk.ready().await {
        Ok(()) => tracing::info!("Agones: Ready"),
        Err(e) => tracing::warn!(error = %e, "Agones: Ready failed"),
    }
    let health = sdk.health_check();
    let mut counted: Option<u64> = None;
    let mut counter_failed = false;
    if let Some(name) = &config.players_counter {
        let slots = metrics.totals().slots;
        if let Err(e) = sdk.set_counter_capacity(name, i64::try_from(slots).unwrap_or(i64::MAX)).await {
            tracing::warn!(error = %e, counter = %name, "Agones: the players counter cannot be set (is it declared in the GameServer spec?)");
            counter_failed = true;
        }
    }
    let mut every = tokio::time::interval(period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if metrics.since_last_tick() < period {
            // The SDK's stream takes at most 10 pings queued; a full one skips this ping.
            let _ = health.try_send(());
        }
        if let (Some(name), false) = (&config.players_counter, counter_failed) {
            let players = metrics.totals().players;
            if counted != Some(players) {
                match sdk.set_counter_count(name, i64::try_from(players).unwrap_or(i64::MAX)).await {
                    Ok(()) => counted = Some(players),
                    Err(e) => tracing::debug!(error = %e, "Agones: the players counter was not updated"),
                }
            }
        }
    }
}

/// Watches the GameServer record; calls `allocated` the first time it reads `Allocated`.
async fn watch_allocation(mut sdk: Sdk, mut allocated: impl FnMut(Allocation) + Send) {
    loop {
        match sdk.watch_gameserver().await {
            Ok(mut stream) => {
                while let Ok(Some(gs)) = stream.message().await {
                    if gs.status.as_ref().is_some_and(|s| s.state == "Allocated") {
                        let meta = gs.object_meta.unwrap_or_default();
                        let allocation = Allocation {
                            labels: meta.labels.into_iter().collect(),
                            annotations: meta.annotations.into_iter().collect(),
                        };
                        tracing::info!(labels = ?allocation.labels, "Agones: Allocated");
                        allocated(allocation);
                        return;
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "Agones: WatchGameServer failed; again in 1 s"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
