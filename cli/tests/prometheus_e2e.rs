//! End to end with a real Prometheus (Debian's package): the `volley run` binary with bots,
//! Prometheus scraping its admin listener every second with the alert rules loaded, then
//! **every** query of **every** dashboard panel through Prometheus' HTTP API, with the
//! template variables substituted: each must return a non-empty, finite result.
#![allow(clippy::unwrap_used, missing_docs)]

use crate::prom;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Kills a child process when dropped (a failing assertion must not leave servers behind).
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn query(prom_addr: &str, expr: &str) -> Value {
    let (status, body) = prom::http_get(prom_addr, &format!("/api/v1/query?query={}", prom::urlencode(expr))).unwrap();
    assert_eq!(status, 200, "{expr}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{expr}: {body}");
    v["data"]["result"].clone()
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    let Some(prometheus) = prom::require_tool("prometheus") else { return };
    let dir = std::env::temp_dir().join(format!("volley-prom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The server with bots; its first stdout line names the admin address.
    let mut server = Command::new(env!("CARGO_BIN_EXE_volley"))
        .args([
            "run",
            "--bots",
            "12",
            // Two of them watch a match: every world kind runs (the spectators' too).
            "--spectators",
            "2",
            "--match-size",
            "4",
            "--match-seconds",
            "5",
            "--bind",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--duration",
            "90",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let mut server = Reaper(Some(server));
    let mut lines = BufReader::new(stdout).lines();
    let admin = loop {
        let line = lines.next().expect("the server printed its admin address").unwrap();
        if let Some(rest) = line.strip_prefix("admin: http://") {
            break rest.split('/').next().unwrap().to_string();
        }
    };
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let prom_addr = format!("127.0.0.1:{port}");
    let rules = prom::root().join("dashboards/alerts/volley.rules.yaml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: volley\n    static_configs:\n      - targets: ['{admin}']\n",
        rules.display()
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let prometheus = Command::new(prometheus)
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={prom_addr}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _prometheus = Reaper(Some(prometheus));

    // The target is up, and has been scraped for a while (rates need a few samples).
    wait_until("the server target to be up", Duration::from_secs(30), || {
        prom::http_get(&prom_addr, "/api/v1/query?query=up").is_ok_and(|(s, b)| s == 200 && b.contains("\"1\""))
    });
    wait_until("eight scrapes", Duration::from_secs(30), || {
        let r = query(&prom_addr, "count_over_time(volley_players[1m])");
        r[0]["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()).is_some_and(|n| n >= 8.0)
    });

    let (status, targets) = prom::http_get(&prom_addr, "/api/v1/targets").unwrap();
    assert_eq!(status, 200);
    let targets: Value = serde_json::from_str(&targets).unwrap();
    let active = targets["data"]["activeTargets"].as_array().unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0]["health"], "up", "{}", active[0]);

    // Every query of every panel.
    let mut ran = 0;
    for e in std::fs::read_dir(prom::root().join("dashboards")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for p in d["panels"].as_array().unwrap().iter().filter(|p| p["type"] != "row") {
            for t in p["targets"].as_array().unwrap() {
                let expr = t["expr"]
                    .as_str()
                    .unwrap()
                    .replace("$job", "volley")
                    .replace("$instance", &admin.replace('.', "\\\\."))
                    .replace("$__rate_interval", "4s");
                let result = query(&prom_addr, &expr);
                let series = result.as_array().unwrap();
                assert!(!series.is_empty(), "{}: panel {:?}: {expr} returned nothing", path.display(), p["title"]);
                for s in series {
                    let v: f64 = s["value"][1].as_str().unwrap().parse().unwrap();
                    assert!(v.is_finite(), "{}: panel {:?}: {expr} = {v}", path.display(), p["title"]);
                }
                ran += 1;
            }
        }
    }
    assert!(ran >= 30, "{ran} queries");

    // The alert rules are loaded and evaluate cleanly; a healthy server fires none of the
    // critical ones.
    let (_, rules) = prom::http_get(&prom_addr, "/api/v1/rules").unwrap();
    let rules: Value = serde_json::from_str(&rules).unwrap();
    let list = rules["data"]["groups"][0]["rules"].as_array().unwrap();
    assert_eq!(list.len(), 11);
    for r in list {
        assert_eq!(r["health"], "ok", "{r}");
    }
    let (_, alerts) = prom::http_get(&prom_addr, "/api/v1/alerts").unwrap();
    for quiet in ["VolleyTickStalled", "VolleyDown", "VolleyActorFailed", "VolleyRecordingFailed", "VolleyZoneBusDown"]
    {
        assert!(!alerts.contains(quiet), "{quiet}: {alerts}");
    }

    // The server still stops cleanly.
    let mut child = server.0.take().unwrap();
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
