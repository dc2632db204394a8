//! The `volley` command: connect tokens and keys today; the server, bots and health check as
//! the actor server lands.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use volley::protocol::netcode::token::{ConnectToken, TokenParams};
use volley::protocol::netcode::{self, USER_DATA_BYTES};
use volley::util::hex;

/// volley: an authoritative real-time multiplayer game server framework.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print a new random 32-byte private key (hex), to share between backend and servers.
    Keygen,
    /// Mint a netcode.io 1.02 connect token, as a matchmaker or backend would.
    Token(TokenArgs),
}

#[derive(Debug, clap::Args)]
struct TokenArgs {
    /// The private key shared with the servers, 64 hex digits.
    #[arg(long, env = "VOLLEY_PRIVATE_KEY", hide_env_values = true)]
    private_key: String,
    /// The game's protocol id.
    #[arg(long, env = "VOLLEY_PROTOCOL_ID", default_value_t = volley::DEFAULT_PROTOCOL_ID)]
    protocol_id: u64,
    /// The client's globally unique id.
    #[arg(long)]
    client_id: u64,
    /// A server the client may connect to (repeat for several, tried in order).
    #[arg(long = "server", required = true)]
    servers: Vec<SocketAddr>,
    /// Seconds the token may be used to start connecting.
    #[arg(long, default_value_t = 30)]
    expire_seconds: u64,
    /// Connection timeout in seconds (negative: none, for development only).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    timeout_seconds: i32,
    /// Up to 256 bytes of user data for the server, in hex.
    #[arg(long, default_value = "")]
    user_data: String,
    /// Write the 2048 raw bytes here instead of printing hex.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn mint(args: &TokenArgs) -> Result<(), String> {
    let key = hex::decode_array::<32>(&args.private_key).map_err(|e| format!("--private-key: {e}"))?;
    let data = hex::decode(&args.user_data).map_err(|e| format!("--user-data: {e}"))?;
    if data.len() > USER_DATA_BYTES {
        return Err(format!("--user-data: {} bytes, at most {USER_DATA_BYTES}", data.len()));
    }
    let mut user_data = [0u8; USER_DATA_BYTES];
    user_data[..data.len()].copy_from_slice(&data);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| format!("system clock: {e}"))?;
    let params = TokenParams {
        protocol_id: args.protocol_id,
        client_id: args.client_id,
        now_unix_secs: now.as_secs(),
        expire_seconds: args.expire_seconds,
        timeout_seconds: args.timeout_seconds,
        server_addresses: args.servers.clone(),
        user_data,
    };
    let token = ConnectToken::generate(&params, &key).map_err(|e| e.to_string())?;
    let bytes = token.to_bytes();
    match &args.out {
        Some(path) => std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display())),
        None => writeln!(std::io::stdout(), "{}", hex::encode(&bytes)).map_err(|e| e.to_string()),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Keygen => {
            netcode::generate_key().map_err(|e| format!("no randomness: {e}")).map(|k| println!("{}", hex::encode(&k)))
        }
        Command::Token(args) => mint(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
