//! A private PostgreSQL server for tests: `initdb` in a folder of its own, listening on a free
//! loopback port only, stopped when the test process ends (or when dropped). PostgreSQL 15 from
//! Debian's packages (`.ci/run` installs it); a missing server is a test failure that says how
//! to install it, never a skip.
//!
//! As root (CI), the server runs as the `postgres` user the package creates (PostgreSQL refuses
//! root). `setpriv --pdeathsig` stops the server if the test process dies without dropping it:
//! the signal follows the thread that started the server, so that thread lives as long as the
//! server does.
//!
//! Shared by the store's unit tests (`src/store/tests/place.rs`, through `#[path]`), the
//! integration tests (`tests/it`) and the benches on PostgreSQL (`serve_load`, `scale_serve`).

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Settings of a test server that trade durability for speed.
const FAST: [&str; 4] = ["-c", "fsync=off", "-c", "full_page_writes=off"];

/// The superuser of the test cluster (trust authentication on loopback).
pub const USER: &str = "mragent";

/// One private server.
pub struct PrivatePg {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    run_as_postgres: bool,
    /// fsync on (benchmarks) or off (tests).
    durable: bool,
    /// The running postmaster's pid and the receiver told when it exits.
    running: Mutex<Option<(u32, mpsc::Receiver<()>)>>,
    databases: AtomicU32,
}

/// The server shared by every test of this process (started at first use).
pub fn shared() -> &'static PrivatePg {
    static SHARED: OnceLock<PrivatePg> = OnceLock::new();
    SHARED.get_or_init(|| PrivatePg::start().unwrap_or_else(|why| panic!("{why}")))
}

/// The directory holding PostgreSQL's server programs (`initdb`, `postgres`).
fn bin_dir() -> Result<PathBuf, String> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path().join("bin"))).collect())
        .unwrap_or_default();
    found.retain(|bin| bin.join("initdb").is_file());
    found.sort();
    found.pop().ok_or_else(|| {
        "no PostgreSQL server found under /usr/lib/postgresql: install Debian's `postgresql` \
         package (apt-get install postgresql), as .ci/run does"
            .to_string()
    })
}

/// Removes the folders of servers whose test process is gone (a shared server's folder outlives
/// its process: statics are never dropped).
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("mragent-pg-").and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| out.stdout.starts_with(b"0\n"))
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

impl PrivatePg {
    /// Creates a cluster in a new folder and starts its server (without fsync: for tests).
    pub fn start() -> Result<Self, String> {
        Self::start_with(false)
    }

    /// [`PrivatePg::start`] with fsync on, as a production server (for benchmarks).
    pub fn start_durable() -> Result<Self, String> {
        Self::start_with(true)
    }

    fn start_with(durable: bool) -> Result<Self, String> {
        let bin = bin_dir()?;
        let run_as_postgres = is_root();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        remove_stale();
        let dir = std::env::temp_dir().join(format!(
            "mragent-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if run_as_postgres {
            let status =
                Command::new("chown").arg("-R").arg("postgres:postgres").arg(&dir).status();
            if !status.is_ok_and(|status| status.success()) {
                return Err(format!("could not give {} to the postgres user", dir.display()));
            }
        }
        let server = Self {
            dir,
            bin,
            port: free_port(),
            run_as_postgres,
            durable,
            running: Mutex::new(None),
            databases: AtomicU32::new(0),
        };
        let data = server.data_dir();
        let output = server
            .command("initdb")
            .args(["-U", USER, "--auth=trust", "--encoding=UTF8", "--locale=C", "-D"])
            .arg(&data)
            .output()
            .map_err(|e| format!("running initdb: {e}"))?;
        if !output.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&output.stderr)));
        }
        server.run()?;
        Ok(server)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A command running `program` of the server's binaries, as `postgres` when we are root,
    /// stopped with SIGINT (fast shutdown) if the thread that runs it dies.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new("setpriv");
        command.args(["--pdeathsig", "INT"]);
        if self.run_as_postgres {
            command.args(["--reuid=postgres", "--regid=postgres", "--init-groups"]);
        }
        command.arg("--").arg(self.bin.join(program));
        command
    }

    /// Starts the server (again) on its folder and port; returns when it accepts connections.
    pub fn run(&self) -> Result<(), String> {
        let mut running = self.running.lock().expect("the server's state");
        if running.is_some() {
            return Ok(());
        }
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400"])
            .args(["-c", "log_min_messages=fatal"])
            .args(if self.durable { FAST.get(..0) } else { FAST.get(..) }.unwrap_or_default())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::from(
                std::fs::File::create(self.dir.join("server.log")).map_err(|e| e.to_string())?,
            ));
        let (pid_tx, pid_rx) = mpsc::channel();
        let (exit_tx, exit_rx) = mpsc::channel();
        std::thread::spawn(move || match command.spawn() {
            Ok(mut child) => {
                let _ = pid_tx.send(Ok(child.id()));
                let _ = child.wait();
                let _ = exit_tx.send(());
            }
            Err(error) => {
                let _ = pid_tx.send(Err(format!("starting postgres: {error}")));
            }
        });
        let pid = pid_rx.recv().map_err(|e| e.to_string())??;
        *running = Some((pid, exit_rx));
        drop(running);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if postgres::Client::connect(&self.url("postgres"), postgres::NoTls).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                return Err(format!("postgres did not start within 60 s: {log}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (fast shutdown: clients are disconnected) and waits until it is gone.
    pub fn stop(&self) {
        let Some((pid, exited)) = self.running.lock().expect("the server's state").take() else {
            return;
        };
        let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
        let _ = exited.recv_timeout(Duration::from_secs(60));
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{name}", self.port)
    }

    /// A new, empty database; returns its URL.
    pub fn fresh_database(&self) -> String {
        let number = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{number}", std::process::id());
        let mut admin =
            postgres::Client::connect(&self.url("postgres"), postgres::NoTls).expect("admin");
        admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("a new database");
        self.url(&name)
    }

    /// The cluster's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
