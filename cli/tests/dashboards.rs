//! The dashboards and alert rules: Grafana JSON models that are well formed (unique ids and
//! uids, units, the datasource/job/instance variables) and read only metrics the server
//! exports; Prometheus rules that `promtool check rules` and `promtool test rules` pass.
//! `tests/prometheus_e2e.rs` runs every query against a real Prometheus. They are written by
//! `tools/dashboards.py`, and checked to be what it writes.
#![allow(clippy::unwrap_used, missing_docs)]

use crate::prom;
use crate::promql;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use volley::server::ServerConfig;
use volley_arena::Arena;
use volley_arena::bots::{SwarmConfig, SwarmProgress, run_swarm};

fn dashboards() -> Vec<(String, Value)> {
    let dir = prom::root().join("dashboards");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            out.push((p.file_name().unwrap().to_string_lossy().to_string(), v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 2, "a lag and a bandwidth dashboard");
    out
}

/// Every metric name a live server exports (a server with two bots, scraped once).
async fn exported() -> HashSet<String> {
    let key = [4u8; 32];
    let mut config = ServerConfig::new("127.0.0.1:0".parse().unwrap(), key);
    config.admin_addr = Some("127.0.0.1:0".parse().unwrap());
    let server = volley::server::start(config, Arena::new()).await.unwrap();
    let progress = Arc::new(SwarmProgress::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let swarm = tokio::spawn(run_swarm(SwarmConfig::new(server.addr(), 2, key), progress, stop_rx));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (_, text) = volley_fleet::admin_client::get(server.admin_addr().unwrap(), "/metrics", Duration::from_secs(3))
        .await
        .unwrap();
    let _ = stop_tx.send(true);
    let _ = swarm.await;
    server.shutdown().await;
    prom::exported_names(&text).into_iter().chain(["up".to_string()]).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboards_are_well_formed_and_read_only_exported_metrics() {
    let exported = exported().await;
    let mut uids = HashSet::new();
    let mut panels_seen = 0;
    for (file, d) in dashboards() {
        let uid = d["uid"].as_str().unwrap_or_default();
        assert!(!uid.is_empty() && uids.insert(uid.to_string()), "{file}: uid {uid:?} missing or repeated");
        assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()), "{file}: title");
        let vars: Vec<&str> =
            d["templating"]["list"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
        for v in ["datasource", "job", "instance"] {
            assert!(vars.contains(&v), "{file}: template variable {v}");
        }
        let mut ids = HashSet::new();
        for p in d["panels"].as_array().unwrap() {
            let id = p["id"].as_u64().unwrap();
            assert!(ids.insert(id), "{file}: panel id {id} repeated");
            if p["type"] == "row" {
                continue;
            }
            panels_seen += 1;
            let title = p["title"].as_str().unwrap();
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or_default();
            assert!(!unit.is_empty(), "{file}/{title}: no unit");
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{file}/{title}: datasource variable");
            let targets = p["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{file}/{title}: no query");
            let mut refs = HashSet::new();
            for t in targets {
                assert!(refs.insert(t["refId"].as_str().unwrap().to_string()), "{file}/{title}: refId repeated");
                let expr = t["expr"].as_str().unwrap();
                assert!(expr.contains("job=~\"$job\""), "{file}/{title}: {expr} ignores $job");
                assert!(expr.contains("instance=~\"$instance\""), "{file}/{title}: {expr} ignores $instance");
                let names = promql::metric_names(expr);
                assert!(!names.is_empty(), "{file}/{title}: {expr} reads no metric");
                for n in names {
                    assert!(exported.contains(&n), "{file}/{title}: {n} is not exported by the server");
                }
            }
        }
    }
    assert!(panels_seen >= 20, "{panels_seen} panels");
}

#[test]
fn grafana_provisioning_files_name_the_dashboards_and_datasource() {
    let root = prom::root().join("dashboards/provisioning");
    let ds = std::fs::read_to_string(root.join("datasources/prometheus.yaml")).unwrap();
    assert!(ds.contains("apiVersion: 1") && ds.contains("type: prometheus") && ds.contains("url: http://"));
    let dash = std::fs::read_to_string(root.join("dashboards/volley.yaml")).unwrap();
    assert!(dash.contains("apiVersion: 1") && dash.contains("type: file") && dash.contains("path: "));
}

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() {
    let Some(promtool) = prom::require_tool("promtool") else { return };
    let dir = prom::root().join("dashboards/alerts");
    let check = std::process::Command::new(&promtool)
        .args(["check", "rules"])
        .arg(dir.join("volley.rules.yaml"))
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    let test = std::process::Command::new(&promtool)
        .args(["test", "rules"])
        .arg(dir.join("volley.rules.test.yaml"))
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
}

/// The dashboards are what `tools/dashboards.py` writes (it keeps their panels alike: the
/// datasource, job and instance filters, units): a panel added by hand to the JSON alone
/// fails here, and the script is where a panel goes.
#[test]
fn the_dashboards_are_what_the_script_writes() {
    let out = std::process::Command::new("python3")
        .arg(prom::root().join("tools/dashboards.py"))
        .arg("--check")
        .output()
        .unwrap_or_else(|e| panic!("python3 (every machine has it): {e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
