#!/usr/bin/env bash
# The whole test suite, as CI runs it: lints, bounded fuzzing, then every test.
# Installs what it needs on a fresh machine: cargo-fuzz from crates.io, Prometheus and promtool
# from Debian's `prometheus` package (the observability tests run a real Prometheus),
# Debian's `nats-server` (the zone tests run a real NATS), and for the C library's clients in
# other languages (ffi/tests/languages.rs) `valgrind` (the C client runs under it) and Mono's
# C# compiler and runtime (`mono-mcs`, `mono-runtime`), and Debian's `chromium` (the arena's
# page is tested in it, examples/arena/tests/browser.rs). No protoc: nothing may need one (the
# Agones SDK's gRPC code is kept generated), and every build here runs with PROTOC pointing at
# nothing, so a build that needed one fails.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian installs nats-server in /usr/sbin, which a user's PATH may lack.
export PATH="$PATH:/usr/sbin:/sbin"
# Ten seconds a target: a smoke test of every target on every run (at twenty, the thirteen
# targets took two and a half minutes of CI).
FUZZ_SECONDS="${FUZZ_SECONDS:-10}"
# One build from scratch: incremental compilation's bookkeeping buys nothing, and line
# tables (file and line in a backtrace) are all a failing test's report needs; full debug
# information made the test build's codegen and its 40-odd links the suite's longest step.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
# prost-build (the one thing that runs protoc) reads PROTOC before PATH.
export PROTOC=/nonexistent/protoc
# Each step says how far into the run it starts (CI's log is the only record of where the time goes).
START=$SECONDS
step() { printf '\n== %s (at %ss) ==\n' "$*" "$((SECONDS - START))"; }

step "tools"
# cargo-fuzz builds from crates.io while apt fetches packages (the network, not the cores).
FUZZ_INSTALL=""
if [ "$FUZZ_SECONDS" -gt 0 ] && ! command -v cargo-fuzz >/dev/null; then
  FUZZ_INSTALL_LOG=$(mktemp)
  cargo install cargo-fuzz --locked --quiet >"$FUZZ_INSTALL_LOG" 2>&1 &
  FUZZ_INSTALL=$!
fi
missing=""
for tool in promtool:prometheus prometheus:prometheus nats-server:nats-server valgrind:valgrind mcs:mono-mcs mono:mono-runtime chromium:chromium; do
  command -v "${tool%%:*}" >/dev/null || missing="$missing ${tool##*:}"
done
if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086 # one package per word
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
prometheus --version 2>&1 | head -n 1
nats-server --version
valgrind --version
mono --version | head -n 1
chromium --version
# The tests that use them fail, rather than skip, when one is missing.
export VOLLEY_REQUIRE_TOOLS=1
# The program's build runs no protobuf compiler: no build script among its dependencies
# (the default members) uses prost-build or tonic-build.
if cargo tree --locked --edges build,normal -p volley -p volley-cli --prefix none 2>/dev/null | grep -E '^(prost-build|tonic-build|protoc|protobuf-src) ' ; then
  echo "the program's build needs a protobuf compiler (above)"; exit 1
fi

# The Docker proof's stand-in base images (network and disk more than cores) are built while
# the lints run; the docker step waits for them (and builds what this could not).
STANDINS_LOG=$(mktemp)
STANDINS=""
if docker info >/dev/null 2>&1; then
  bash docker/ci/standins.sh >"$STANDINS_LOG" 2>&1 &
  STANDINS=$!
fi

step "format"
cargo fmt --all -- --check

step "layers"
# src/server's five layer folders: no import circle, no import of a higher layer (docs/architecture.md).
python3 tools/layers.py

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "docs"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

if [ "$FUZZ_SECONDS" -gt 0 ]; then
  step "fuzz (${FUZZ_SECONDS}s per target)"
  if [ -n "$FUZZ_INSTALL" ] && ! wait "$FUZZ_INSTALL"; then
    cat "$FUZZ_INSTALL_LOG"; exit 1
  fi
  # cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP lets the stable toolchain accept them.
  export RUSTC_BOOTSTRAP=1
  (cd fuzz && cargo fuzz build 2>&1 | tail -n 2)
  # Two targets at a time (the machine's two cores; each libFuzzer run is one process), each
  # one's lines printed together when it ends.
  mkdir -p fuzz/logs
  # Every kind of finding fails the step, not crashes alone: a timeout (an input taking over
  # 10 s), an out-of-memory (over 512 MiB resident, or one allocation over 64 MiB: no decoder
  # may allocate anything near that from an input of a few KiB) or a leak leaves its artifact.
  # What a connected client's packets reach (the reliability layer, the input section) may
  # not allocate 1 MiB at once (libFuzzer's smallest unit; a player's whole budget,
  # ServerConfig::player_budget, is 250 KiB).
  fuzz_one() {
    mkdir -p "corpus/$1"
    local malloc=64
    case "$1" in reliability_receive|input_packet) malloc=1 ;; esac
    cargo fuzz run "$1" -- -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=512 -malloc_limit_mb="$malloc" \
      -print_final_stats=1 >"logs/$1.log" 2>&1 || true
    { echo "-- $1"; grep -E '^(stat::number_of_executed_units|Done|==|SUMMARY|thread)' "logs/$1.log" || true; }
  }
  export -f fuzz_one
  export FUZZ_SECONDS
  (cd fuzz && cargo fuzz list | xargs -P 2 -I{} bash -c 'fuzz_one {}')
  for target in $(cd fuzz && cargo fuzz list); do
    # Each finding leaves an artifact (crash-, timeout-, oom-, leak-, slow-unit-); fail on any.
    for kind in crash timeout oom leak slow-unit; do
      if compgen -G "fuzz/artifacts/$target/$kind-*" >/dev/null; then
        echo "fuzz target $target: a $kind finding: see fuzz/artifacts/$target and fuzz/logs/$target.log"; exit 1
      fi
    done
    # A libFuzzer run that ended without its final stats did not run to its end.
    if ! grep -q '^Done' "fuzz/logs/$target.log"; then
      echo "fuzz target $target did not finish its run: see fuzz/logs/$target.log"; tail -n 20 "fuzz/logs/$target.log"; exit 1
    fi
  done
  unset RUSTC_BOOTSTRAP
fi

step "tests"
# The README's run command builds the program in release. That build runs beside the tests,
# niced: while the tests build it gets almost nothing, while they run (one live server at a
# time, mostly waiting on the network) it takes the idle time, and the README step below then
# finds it built (the same command line's packages, so the same features: cargo rebuilds
# nothing). Cargo locks the release and the test profiles' directories apart.
RELEASE_LOG=$(mktemp)
nice -n 19 cargo build --release --locked --bin volley >"$RELEASE_LOG" 2>&1 &
RELEASE=$!
cargo nextest run --workspace --locked --no-fail-fast
# cargo-nextest does not run documentation examples; cargo test does.
cargo test --workspace --doc --locked --quiet

step "the README's run command (15 s)"
if ! wait "$RELEASE"; then
  # The README step builds it again and shows why it fails.
  tail -n 20 "$RELEASE_LOG"
fi
python3 tests/readme_run.py

step "docker"
if [ -n "$STANDINS" ]; then
  wait "$STANDINS" || echo "stand-in images in the background failed; the docker proof builds them"
  grep -vE 'DEPRECATED|BuildKit|environment-variable|^$' "$STANDINS_LOG" || true
fi
bash docker/ci/e2e.sh
step "done"
