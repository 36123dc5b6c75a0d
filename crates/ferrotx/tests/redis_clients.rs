//! Real Redis clients against this build's `ferrotx`: runs the suites of tests/redis
//! (`python3 tests/redis/run.py`): the differential suite against a real redis-server,
//! redis-py and redis-cli on both servers, and concurrent clients on every node of a
//! local cluster. See tests/redis/run.py and docs/redis.md.
//!
//! They need redis-server and redis-cli (Debian: redis-server, redis-tools) and redis-py
//! (Debian: python3-redis). Without them this test says SKIPPED on the terminal and
//! passes, unless FERROTX_REQUIRE_REDIS=1 (CI's `.ci/run` sets it, after installing
//! them), when it fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `run.py`'s exit status when a dependency is missing.
const MISSING: i32 = 77;

/// The suites take about 15 s; past this something hangs.
const TIMEOUT: Duration = Duration::from_secs(600);

fn run_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/redis/run.py")
}

/// Writes to the terminal, past the test harness's capture of `println!`.
fn loud(message: &str) {
    let mut stderr = std::io::stderr();
    let _ = writeln!(stderr, "\n{message}");
    let _ = stderr.flush();
}

/// Missing dependencies: a failure if they are required, a loud skip otherwise.
fn missing(why: &str) {
    let required = std::env::var("FERROTX_REQUIRE_REDIS").is_ok_and(|value| value == "1");
    assert!(
        !required,
        "FERROTX_REQUIRE_REDIS=1 but the Redis client suites cannot run: {why}\n\
         install: apt-get install -y redis-server redis-tools python3-redis"
    );
    loud(&format!(
        "SKIPPED: install redis-server redis-tools python3-redis (the Redis client suites \
         of tests/redis did not run: {why})"
    ));
}

#[test]
fn real_redis_clients_agree_with_redis_server() {
    let run = run_py();
    let check = Command::new("python3")
        .arg(&run)
        .arg("--check-deps")
        .output();
    match check {
        Err(error) => return missing(&format!("python3: {error}")),
        Ok(output) if output.status.code() == Some(MISSING) => {
            return missing(String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(output) => assert!(
            output.status.success(),
            "{} --check-deps failed: {}",
            run.display(),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
    // Output to files, read at the end (a pipe could fill while we wait).
    let dir = std::env::temp_dir().join(format!("ferrotx-redis-suites-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new("python3")
        .arg(&run)
        .arg("--ferrotx")
        .arg(env!("CARGO_BIN_EXE_ferrotx"))
        .arg("--quiet")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("python3 runs");
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            // SIGTERM lets run.py stop its servers; then give up on it.
            // SAFETY: kill(2) on our own child, not reaped yet.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            std::thread::sleep(Duration::from_secs(15));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    // Shown by the test harness if the test fails.
    println!("{stdout}");
    eprintln!("{stderr}");
    let status = status.unwrap_or_else(|| panic!("the suites took more than {TIMEOUT:?}"));
    assert!(status.success(), "tests/redis/run.py failed ({status})");
    let summary = stdout
        .lines()
        .rev()
        .find(|line| line.starts_with("redis: "))
        .unwrap_or("redis: no summary");
    loud(&format!(
        "tests/redis (redis-server, redis-cli, redis-py) {summary}"
    ));
}
