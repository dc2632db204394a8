//! Test support shared by the workspace's crates (not part of any crate's API): finding an
//! external program a test needs, and checking an exposition with `promtool`. Include with
//! `#[path = "…/tests/support/tools.rs"] mod tools;` (relative to the including test file).
#![allow(dead_code)]

/// Asserts that a Prometheus text exposition passes `promtool check metrics` with nothing to
/// say (names, units, help, types). Needs `promtool` (`require_tool`, skipped with
/// `VOLLEY_SKIP_PROMETHEUS=1`).
///
/// # Panics
/// When promtool finds anything, or cannot be run.
pub fn assert_promtool_clean(exposition: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let Some(promtool) = require_tool("promtool", "prometheus", "VOLLEY_SKIP_PROMETHEUS") else { return };
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("promtool does not start: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(exposition.as_bytes()).unwrap_or_else(|e| panic!("promtool's stdin: {e}"));
    }
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("promtool: {e}"));
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(), "promtool: {out:?}");
}

/// The path of an external program a test needs (`promtool`, `prometheus`, `nats-server`),
/// looked up on `PATH`. CI installs them (`tests/run.sh`), so a missing one fails the test
/// with how to install it (`package`), unless the environment variable `skip_var` is `1`:
/// then it says so on stderr and returns `None`, and the test returns early.
///
/// # Panics
/// When the program is missing and `skip_var` is not `1`.
pub fn require_tool(name: &str, package: &str, skip_var: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    match found {
        Some(p) => Some(p),
        None if std::env::var(skip_var).as_deref() == Ok("1") => {
            eprintln!("SKIPPED: {name} is not installed and {skip_var}=1");
            None
        }
        None => panic!(
            "{name} is not installed: `apt-get install {package}` (tests/run.sh does), or set {skip_var}=1 to skip"
        ),
    }
}
