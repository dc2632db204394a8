//! The Kubernetes manifests under deploy/agones agree with each other and with the server:
//! the GameServer the Fleet stamps out is gameserver.yaml's, its UDP port is the one the
//! server binds, Agones' health period leaves room for the server's pings, the players
//! counter is the one the server updates with the server's slots as its capacity, the pod
//! outlives the drain, every environment variable is one the server reads, and the
//! autoscaler scales this Fleet on this counter. (No cluster here: this is what can be
//! checked without one.)
#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::path::Path;

use volley_fleet::agones::AgonesConfig;
use yaml_rust2::{Yaml, YamlLoader};

fn load(name: &str) -> Yaml {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/agones").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut docs = YamlLoader::load_from_str(&text).unwrap();
    assert_eq!(docs.len(), 1, "{name}: one document");
    docs.remove(0)
}

fn env<'a>(container: &'a Yaml, name: &str) -> &'a str {
    container["env"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some(name))
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("no {name} in the container's env"))
}

#[test]
fn the_manifests_agree_with_each_other_and_with_the_server() {
    let gs = load("gameserver.yaml");
    let fleet = load("fleet.yaml");
    let scaler = load("fleetautoscaler.yaml");
    assert_eq!((gs["apiVersion"].as_str(), gs["kind"].as_str()), (Some("agones.dev/v1"), Some("GameServer")));
    assert_eq!((fleet["apiVersion"].as_str(), fleet["kind"].as_str()), (Some("agones.dev/v1"), Some("Fleet")));
    assert_eq!(scaler["kind"].as_str(), Some("FleetAutoscaler"));

    // The Fleet's GameServer is gameserver.yaml's.
    let spec = &gs["spec"];
    assert_eq!(&fleet["spec"]["template"]["spec"], spec, "fleet.yaml's template differs from gameserver.yaml");

    let container = &spec["template"]["spec"]["containers"][0];
    assert_eq!(container["image"].as_str(), Some("volley:latest"), "the image docker/Dockerfile and compose build");
    assert_eq!(container["args"][0].as_str(), Some("server"));

    // The game port: UDP, the port the server binds.
    let port = &spec["ports"][0];
    assert_eq!(port["protocol"].as_str(), Some("UDP"));
    let bind: SocketAddr = env(container, "VOLLEY_BIND").parse().unwrap();
    assert_eq!(port["containerPort"].as_i64(), Some(i64::from(bind.port())));
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docker/Dockerfile")).unwrap();
    assert!(dockerfile.contains(&format!("EXPOSE {}/udp", bind.port())), "the image exposes the game port");

    // Health: Agones' period leaves room for two of the server's pings, and it waits for the first.
    let pings = AgonesConfig::default().health_every.as_secs_f64();
    let period = spec["health"]["periodSeconds"].as_i64().unwrap() as f64;
    assert!(period >= 2.0 * pings, "periodSeconds {period} against a ping every {pings} s");
    assert!(spec["health"]["failureThreshold"].as_i64().unwrap() >= 1);
    assert!(spec["health"]["initialDelaySeconds"].as_i64().unwrap() >= 1);

    // The players counter: the one the server updates, with its slots as capacity.
    let counter = AgonesConfig::default().players_counter.unwrap();
    let capacity = spec["counters"][counter.as_str()]["capacity"].as_i64().unwrap();
    assert_eq!(capacity.to_string(), env(container, "VOLLEY_MAX_PLAYERS"));

    // The pod outlives the drain.
    let grace: f64 = env(container, "VOLLEY_SHUTDOWN_GRACE").parse().unwrap();
    assert!(spec["template"]["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap() as f64 > grace + 2.0);

    // The admin port and the probe on it.
    let admin: SocketAddr = env(container, "VOLLEY_ADMIN").parse().unwrap();
    assert_eq!(container["ports"][0]["containerPort"].as_i64(), Some(i64::from(admin.port())));
    assert_eq!(container["readinessProbe"]["httpGet"]["port"].as_i64(), Some(i64::from(admin.port())));

    // Every variable is one `volley server` reads.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_volley")).args(["server", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for e in container["env"].as_vec().unwrap() {
        let name = e["name"].as_str().unwrap();
        assert!(help.contains(&format!("env: {name}")), "volley server does not read {name}");
    }

    // The autoscaler scales this Fleet on this counter.
    assert_eq!(scaler["spec"]["fleetName"].as_str(), fleet["metadata"]["name"].as_str());
    assert_eq!(scaler["spec"]["policy"]["type"].as_str(), Some("Counter"));
    assert_eq!(scaler["spec"]["policy"]["counter"]["key"].as_str(), Some(counter.as_str()));
}
