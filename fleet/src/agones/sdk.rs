//! A thin client of the Agones SDK server: the calls the lifecycle makes, over the gRPC code
//! kept in `generated/` (generated from `fleet/proto/`, the protos of the `agones` crate
//! 1.61.0, and checked against them by `fleet/tests/agones_protos.rs`). Keeping the
//! generated code rather than depending on the `agones` crate means building the program
//! needs no `protoc`: that crate's build script runs one, and a fresh machine has none.

use std::time::Duration;

use tonic::transport::Channel;

/// The generated messages and clients (`agones.dev.sdk`).
#[allow(clippy::all, clippy::pedantic, missing_docs, dead_code)]
pub(crate) mod proto {
    include!("generated/agones.dev.sdk.rs");
    /// The beta service (counters and lists).
    #[allow(clippy::all, clippy::pedantic, missing_docs, dead_code)]
    pub(crate) mod beta {
        include!("generated/agones.dev.sdk.beta.rs");
    }
}

pub(crate) use proto::GameServer;

/// Why an SDK call failed.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    /// The SDK server's address is not a URI.
    #[error("the SDK server's address: {0}")]
    Address(String),
    /// The call was refused or failed.
    #[error("rpc failure: {0}")]
    Rpc(#[from] tonic::Status),
}

/// A connection to the SDK server (cheap to clone: the clones share one HTTP/2 channel).
#[derive(Debug, Clone)]
pub(crate) struct Sdk {
    sdk: proto::sdk_client::SdkClient<Channel>,
    beta: proto::beta::sdk_client::SdkClient<Channel>,
}

fn empty() -> proto::Empty {
    proto::Empty {}
}

impl Sdk {
    /// Connects to `localhost:port` (`None`: `AGONES_SDK_GRPC_PORT`, else 9357), retrying
    /// every 100 ms until the server answers `GetGameServer`; the caller bounds the wait.
    pub(crate) async fn connect(port: Option<u16>) -> Result<Self, SdkError> {
        let port =
            port.or_else(|| std::env::var("AGONES_SDK_GRPC_PORT").ok().and_then(|p| p.parse().ok())).unwrap_or(9357);
        let channel = Channel::from_shared(format!("http://localhost:{port}"))
            .map_err(|e| SdkError::Address(e.to_string()))?
            .connect_timeout(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(30))
            .connect_lazy();
        let mut sdk = Self {
            sdk: proto::sdk_client::SdkClient::new(channel.clone()),
            beta: proto::beta::sdk_client::SdkClient::new(channel),
        };
        let mut every = tokio::time::interval(Duration::from_millis(100));
        loop {
            every.tick().await;
            if sdk.get_gameserver().await.is_ok() {
                return Ok(sdk);
            }
        }
    }

    /// `Ready`: the server takes players.
    pub(crate) async fn ready(&mut self) -> Result<(), SdkError> {
        self.sdk.ready(empty()).await?;
        Ok(())
    }

    /// `Shutdown`: Agones deletes the pod.
    pub(crate) async fn shutdown(&mut self) -> Result<(), SdkError> {
        self.sdk.shutdown(empty()).await?;
        Ok(())
    }

    /// `GetGameServer`: the GameServer record.
    pub(crate) async fn get_gameserver(&mut self) -> Result<GameServer, SdkError> {
        Ok(self.sdk.get_game_server(empty()).await?.into_inner())
    }

    /// `WatchGameServer`: the record each time it changes.
    pub(crate) async fn watch_gameserver(&mut self) -> Result<tonic::Streaming<GameServer>, SdkError> {
        Ok(self.sdk.watch_game_server(empty()).await?.into_inner())
    }

    /// `Health` as a client stream: each `()` sent on the returned channel is one ping (at
    /// most 10 wait; a full channel means the stream is behind). The stream runs on a task
    /// of the caller's runtime and ends when the sender is dropped or the call fails.
    pub(crate) fn health_check(&self) -> tokio::sync::mpsc::Sender<()> {
        let (tx, rx) = tokio::sync::mpsc::channel::<()>(10);
        let mut client = self.sdk.clone();
        tokio::spawn(async move {
            use tokio_stream::StreamExt;
            let pings = tokio_stream::wrappers::ReceiverStream::new(rx).map(|()| empty());
            if let Err(e) = client.health(pings).await {
                tracing::debug!(error = %e, "Agones: the Health stream ended");
            }
        });
        tx
    }

    /// `UpdateCounter` (beta): sets the counter's capacity.
    pub(crate) async fn set_counter_capacity(&mut self, name: &str, capacity: i64) -> Result<(), SdkError> {
        self.update_counter(name, None, Some(capacity)).await
    }

    /// `UpdateCounter` (beta): sets the counter's count.
    pub(crate) async fn set_counter_count(&mut self, name: &str, count: i64) -> Result<(), SdkError> {
        self.update_counter(name, Some(count), None).await
    }

    async fn update_counter(&mut self, name: &str, count: Option<i64>, capacity: Option<i64>) -> Result<(), SdkError> {
        let request = proto::beta::UpdateCounterRequest {
            counter_update_request: Some(proto::beta::CounterUpdateRequest {
                name: name.to_string(),
                count,
                capacity,
                count_diff: 0,
            }),
        };
        self.beta.update_counter(request).await?;
        Ok(())
    }
}
