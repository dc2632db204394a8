//! Helpers for tests that use Prometheus' own tools: finding `promtool` and `prometheus`,
//! reading a text exposition, and a tiny HTTP client for Prometheus' API.
//! Include with `#[path = "support/prom.rs"] mod prom;`.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The path of a Prometheus tool. `tests/run.sh` installs Debian's `prometheus` package, so a
/// missing tool fails the test, unless `VOLLEY_SKIP_PROMETHEUS=1` says to skip (then it says
/// so on stderr and returns `None`).
pub fn require_tool(name: &str) -> Option<PathBuf> {
    crate::tools::require_tool(name, "prometheus", "VOLLEY_SKIP_PROMETHEUS")
}

/// Runs `tool args` with `input` on stdin.
pub fn run_with_stdin(tool: &PathBuf, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// The value of one series (`name` or `name{labels}` exactly as rendered) in a text exposition.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// Every metric name in a text exposition (from its `# TYPE` lines), with the `_bucket`,
/// `_sum` and `_count` series of histograms.
pub fn exported_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("# TYPE ") else { continue };
        let mut it = rest.split(' ');
        let (Some(name), Some(kind)) = (it.next(), it.next()) else { continue };
        names.push(name.to_string());
        if kind == "histogram" || kind == "summary" {
            for s in ["_bucket", "_sum", "_count"] {
                names.push(format!("{name}{s}"));
            }
        }
    }
    names
}

/// Percent-encodes a query parameter.
pub fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `GET path` from `addr` over plain HTTP/1.0: status and body.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, body.to_string()))
}

/// The repository's root (this crate is `cli/` in it).
pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}
