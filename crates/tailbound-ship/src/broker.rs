//! A real Kafka broker for tests and benches: Kafka 4 in KRaft mode (broker and controller in one
//! JVM), from the official jars, listening on 127.0.0.1 only.
//!
//! The jars are resolved once from Maven Central with `mvn dependency:copy-dependencies` (the
//! versions are in `crates/tailbound-ship/kafka/pom.xml`) into `target/kafka-jars`, or
//! `$TAILBOUND_KAFKA_JARS`, and reused. Each broker runs under a small `sh` guard that reads its
//! standard input: when the guard's pipe closes — the [`TestBroker`] dropped, or the process that
//! started it gone, even by `kill -9` — it kills the JVM, so no broker outlives its test.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::proxy::Proxy;
use crate::ShipError;

/// How long a broker may take to answer after it starts (a JVM on a loaded 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// Where the jars are: `$TAILBOUND_KAFKA_JARS`, else the workspace's `target/kafka-jars`.
pub fn jars_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TAILBOUND_KAFKA_JARS") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/kafka-jars")
}

fn has_jar(dir: &Path, prefix: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(prefix) && name.ends_with(".jar")
        })
    })
}

/// The jars' directory, resolving them with Maven first if they are not there.
pub fn jars() -> Result<PathBuf, ShipError> {
    let dir = jars_dir();
    if has_jar(&dir, "kafka_2.13-") && has_jar(&dir, "kafka-tools-") {
        return Ok(dir);
    }
    let pom = Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka/pom.xml");
    let out = Command::new("mvn")
        .args(["-q", "-B", "-f"])
        .arg(&pom)
        .arg("dependency:copy-dependencies")
        .arg(format!("-DoutputDirectory={}", dir.display()))
        .arg("-DincludeScope=runtime")
        .output()
        .map_err(|e| ShipError::Broker(format!("running mvn (is Maven installed?): {e}")))?;
    if !out.status.success() || !has_jar(&dir, "kafka_2.13-") {
        return Err(ShipError::Broker(format!(
            "mvn dependency:copy-dependencies failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(dir)
}

/// Makes a child started with `cmd` die with this thread's process (`PR_SET_PDEATHSIG`), so a
/// killed bench or test leaves no tool running.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent; it runs in the
    // child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// A free TCP port on 127.0.0.1 (free when asked; the broker binds it right after).
pub fn free_port() -> Result<u16, ShipError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| ShipError::Broker(format!("finding a free port: {e}")))
}

/// The guard processes (one per launch) and the JVM running now.
#[derive(Default)]
struct Running {
    guards: Vec<Child>,
    java_pid: Option<i32>,
}

impl Running {
    /// `kill -9` of the JVM; its guard stays, so the directory stays for a restart.
    fn kill_java(&mut self) {
        if let Some(pid) = self.java_pid.take() {
            // SAFETY: kill(2) on the pid of a JVM its guard started and has not reaped (the guard
            // waits only after its pipe closes); no memory is involved.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }

    /// Kills the JVM and lets every guard finish: each removes the broker's directory.
    fn stop(&mut self) {
        self.kill_java();
        for mut g in self.guards.drain(..) {
            drop(g.stdin.take());
            let _ = g.wait();
        }
    }
}

/// A running single-node broker; killed and its directory removed when dropped.
pub struct TestBroker {
    dir: tempfile::TempDir,
    jars: PathBuf,
    port: u16,
    controller_port: u16,
    proxy: Option<Proxy>,
    running: Running,
}

impl TestBroker {
    /// Starts a broker and waits until it answers.
    pub fn start() -> Result<TestBroker, ShipError> {
        TestBroker::start_with(false)
    }

    /// Starts a broker that clients reach through a [`Proxy`] ([`TestBroker::cut`]).
    pub fn start_behind_proxy() -> Result<TestBroker, ShipError> {
        TestBroker::start_with(true)
    }

    fn start_with(proxied: bool) -> Result<TestBroker, ShipError> {
        let jars = jars()?;
        let dir = tempfile::Builder::new()
            .prefix("tailbound-ship-broker-")
            .tempdir()
            .map_err(|e| ShipError::Broker(format!("making its directory: {e}")))?;
        let port = free_port()?;
        let controller_port = free_port()?;
        let proxy = if proxied {
            let target: SocketAddr = ([127, 0, 0, 1], port).into();
            Some(
                Proxy::start(target)
                    .map_err(|e| ShipError::Broker(format!("starting the proxy: {e}")))?,
            )
        } else {
            None
        };
        let advertised = proxy.as_ref().map_or(port, Proxy::port);
        let config = format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{controller_port}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{advertised}\n\
             controller.listener.names=CONTROLLER\n\
             inter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={logs}\n\
             num.partitions=1\n\
             auto.create.topics.enable=false\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=1\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             group.initial.rebalance.delay.ms=0\n\
             message.max.bytes=67108864\n\
             num.network.threads=2\n\
             num.io.threads=2\n",
            logs = dir.path().join("data").display(),
        );
        let props = dir.path().join("server.properties");
        std::fs::write(&props, config)
            .map_err(|e| ShipError::Broker(format!("writing {}: {e}", props.display())))?;
        let cluster_id = {
            let mut id = [0u8; 16];
            fastrand::fill(&mut id);
            base64_url(&id)
        };
        let out = Command::new("java")
            .arg("-cp")
            .arg(classpath(&jars))
            // `=`: an id may start with '-', which would read as an option.
            .args(["kafka.tools.StorageTool", "format"])
            .arg(format!("--cluster-id={cluster_id}"))
            .arg("-c")
            .arg(&props)
            .output()
            .map_err(|e| {
                ShipError::Broker(format!("running java (is a JRE 17 installed?): {e}"))
            })?;
        if !out.status.success() {
            return Err(ShipError::Broker(format!(
                "formatting the KRaft storage failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let mut broker = TestBroker {
            dir,
            jars,
            port,
            controller_port,
            proxy,
            running: Running::default(),
        };
        broker.launch()?;
        Ok(broker)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("broker.log")
    }

    /// Starts the JVM (the storage is formatted) and waits until the broker answers.
    fn launch(&mut self) -> Result<(), ShipError> {
        // The guard: starts the JVM, prints its pid, and when its standard input closes kills the
        // JVM and removes the broker's directory.
        let script = r#"dir="$1"; log="$2"; shift 2; "$@" >>"$log" 2>&1 </dev/null & pid=$!; echo "$pid"; read _; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"; exit 0"#;
        let mut guard = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(self.dir.path())
            .arg(self.log_path())
            .arg("java")
            .args(["-Xms256m", "-Xmx1g", "-XX:+UseParallelGC", "-cp"])
            .arg(classpath(&self.jars))
            .arg("kafka.Kafka")
            .arg(self.dir.path().join("server.properties"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| ShipError::Broker(format!("starting sh: {e}")))?;
        let mut line = String::new();
        let stdout = guard
            .stdout
            .take()
            .ok_or_else(|| ShipError::Broker("no pipe from sh".into()))?;
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| ShipError::Broker(format!("reading the JVM's pid: {e}")))?;
        let java_pid: i32 = line
            .trim()
            .parse()
            .map_err(|_| ShipError::Broker(format!("the guard printed {line:?}, not a pid")))?;
        self.running.guards.push(guard);
        self.running.java_pid = Some(java_pid);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), ShipError> {
        let started = Instant::now();
        let rt = crate::runtime()?;
        let broker = format!("127.0.0.1:{}", self.port);
        loop {
            let ready = rt.block_on(async {
                let client = tokio::time::timeout(
                    Duration::from_secs(5),
                    rskafka::client::ClientBuilder::new(vec![broker.clone()]).build(),
                )
                .await
                .ok()?
                .ok()?;
                tokio::time::timeout(Duration::from_secs(5), client.list_topics())
                    .await
                    .ok()?
                    .ok()
            });
            if ready.is_some() {
                return Ok(());
            }
            if let Some(pid) = self.running.java_pid {
                // SAFETY: signal 0 only checks that the pid exists; no memory is involved.
                if unsafe { libc::kill(pid, 0) } != 0 {
                    return Err(self.failed("the broker's JVM exited"));
                }
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(self.failed("the broker did not answer in time"));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn failed(&self, what: &str) -> ShipError {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        ShipError::Broker(format!("{what}; its log ends:\n{}", tail.join("\n")))
    }

    /// `HOST:PORT` clients bootstrap from (the proxy's, when there is one).
    pub fn bootstrap(&self) -> String {
        format!(
            "127.0.0.1:{}",
            self.proxy.as_ref().map_or(self.port, Proxy::port)
        )
    }

    /// `kafka://HOST:PORT/TOPIC` for `topic`.
    pub fn url(&self, topic: &str) -> crate::KafkaUrl {
        crate::KafkaUrl {
            broker: self.bootstrap(),
            topic: topic.to_string(),
        }
    }

    /// The broker's own port and its controller's.
    pub fn ports(&self) -> (u16, u16) {
        (self.port, self.controller_port)
    }

    /// `kill -9` of the broker's JVM: no shutdown of any kind.
    pub fn kill9(&mut self) {
        self.running.kill_java();
    }

    /// Starts the broker again on the same storage and ports; waits until it answers.
    pub fn restart(&mut self) -> Result<(), ShipError> {
        self.kill9();
        self.launch()
    }

    /// Makes the broker unreachable (every connection cut, new ones refused) or reachable again.
    /// Only for a broker started behind a proxy.
    pub fn cut(&self, unreachable: bool) {
        if let Some(p) = &self.proxy {
            p.cut(unreachable);
        }
    }

    /// The classpath of the jars, for running Kafka's own tools.
    /// Creates `topic` (one partition) unless it exists: the test broker creates none by itself,
    /// and a tool that waits for a topic's metadata would wait for ever.
    pub fn ensure_topic(&self, topic: &str) -> Result<(), ShipError> {
        crate::runtime()?.block_on(crate::kafka::Dest::connect_to(
            &self.url(topic),
            "topic",
            None,
        ))?;
        Ok(())
    }

    pub fn classpath(&self) -> String {
        classpath(&self.jars)
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.running.stop();
    }
}

fn classpath(jars: &Path) -> String {
    format!("{}/*", jars.display())
}

/// Base64url without padding, as Kafka's cluster ids are written.
fn base64_url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_url_matches_the_rfc_examples_without_padding() {
        assert_eq!(super::base64_url(b"foobar"), "Zm9vYmFy");
        assert_eq!(super::base64_url(b"fooba"), "Zm9vYmE");
        assert_eq!(super::base64_url(b"foob"), "Zm9vYg");
        assert_eq!(super::base64_url(&[0xfb, 0xff]), "-_8");
        assert_eq!(super::base64_url(&[0u8; 16]).len(), 22);
    }
}
