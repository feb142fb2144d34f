//! Two `eos_mirror` processes (examples/eos_mirror.rs, ledger mode) mirror 100,000 records
//! while the test kills one of them with SIGKILL at a random moment, at least 20 times while
//! records are still unfinished, and starts it again at once. Afterwards the target, read
//! `read_committed`, must hold every source record exactly once: checked by the tests' own
//! Fetch reader and, independently, by Kafka's Java console consumer.
//!
//! The single-node run is part of the main suite; the three-node run (`--ignored`, with
//! leader moves and a broker killed in the middle) runs in the cluster phase of
//! `scripts/test.sh`. The example binary must be built first (`cargo build --all-features
//! --examples`; `cargo test` and `scripts/test.sh` do).
#![cfg(feature = "exactly-once")]

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/eos.rs"]
mod eos;
#[path = "support/read_committed.rs"]
mod read_committed;
#[allow(unreachable_pub)]
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kafka_share_sink::KafkaAdmin;
use tokio::time::Instant;

const RECORDS: usize = 100_000;
const KILLS: usize = 20;
const WORKERS: u32 = 2;

fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> → target/<profile>/examples/eos_mirror
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let binary = profile.join("examples").join("eos_mirror");
    assert!(
        binary.exists(),
        "{} is missing: build it with `cargo build --all-features --examples` (scripts/test.sh does)",
        binary.display()
    );
    binary
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Workers {
    binary: PathBuf,
    setup_args: Vec<String>,
    children: Vec<Child>,
    /// The stderr log of each child, by task.
    logs: Vec<PathBuf>,
    log_dir: PathBuf,
    starts: usize,
}

impl Workers {
    fn start(s: &eos::Setup) -> Self {
        let log_dir = root().join("target/tmp").join(&s.group);
        std::fs::create_dir_all(&log_dir).expect("log dir");
        let mut workers = Self {
            binary: example_binary(),
            setup_args: vec![
                "--bootstrap".into(),
                s.bootstrap.clone(),
                "--topic".into(),
                s.source.clone(),
                "--group".into(),
                s.group.clone(),
                "--prefix".into(),
                "copy.".into(),
                "--tasks".into(),
                WORKERS.to_string(),
                "--transaction-timeout-ms".into(),
                "10000".into(),
                // Small transactions: many of them, so that kills land mid-run.
                "--max-poll-records".into(),
                "100".into(),
                "--pause-ms".into(),
                "60".into(),
            ],
            children: Vec::new(),
            logs: Vec::new(),
            log_dir,
            starts: 0,
        };
        for task in 0..WORKERS {
            let (child, log) = workers.spawn(task);
            workers.children.push(child);
            workers.logs.push(log);
        }
        workers
    }

    /// Starts task `task`; returns the child and the path of its stderr log.
    fn spawn(&mut self, task: u32) -> (Child, PathBuf) {
        self.starts += 1;
        let path = self
            .log_dir
            .join(format!("task-{task}-start-{}.log", self.starts));
        let log = std::fs::File::create(&path).expect("log file");
        let child = Command::new(&self.binary)
            .args(&self.setup_args)
            .args(["--task", &task.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start eos_mirror");
        (child, path)
    }

    /// SIGKILL, then start again with the same task id.
    fn kill_and_restart(&mut self, task: u32) {
        let i = task as usize;
        let child = &mut self.children[i];
        if let Ok(Some(status)) = child.try_wait() {
            // CI keeps only the test's output: the error the process ended with goes there.
            let log = std::fs::read_to_string(&self.logs[i]).unwrap_or_default();
            panic!(
                "eos_mirror task {task} exited by itself ({status}); its stderr ({}):\n{log}",
                self.logs[i].display()
            );
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let (fresh, log) = self.spawn(task);
        self.children[i] = fresh;
        self.logs[i] = log;
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A small deterministic generator (xorshift64*), seeded and printed so a run can be
/// repeated.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Unfinished source records, as the share group counts them (`None` while unknown).
async fn lag(admin: &KafkaAdmin, group: &str) -> Option<i64> {
    let offsets = admin.share_group_offsets(group).await.ok()?;
    if offsets.len() < eos::PARTITIONS as usize {
        return None;
    }
    offsets.iter().map(|o| o.lag).sum()
}

/// Kafka's own console consumer, `read_committed`: every value of `topic`.
fn java_read_committed(bootstrap: &str, topic: &str) -> BTreeMap<String, usize> {
    let output = Command::new(root().join("scripts/kafka.sh"))
        .args([
            "run-class",
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--timeout-ms",
            "15000",
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("run the console consumer");
    let mut seen = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if line.starts_with("r-") {
            *seen.entry(line.to_owned()).or_insert(0) += 1;
        }
    }
    seen
}

/// Mid-run chaos beside the kills: after this many kills, what (a task to wait for).
type Chaos<'a> = &'a (dyn Fn(usize, &eos::Setup) -> Option<tokio::task::JoinHandle<()>> + Sync);

async fn crash_run(bootstrap: String, replicas: i16, chaos: Chaos<'_>) {
    let s = eos::setup(bootstrap, RECORDS, replicas).await;
    let admin = KafkaAdmin::connect(&s.bootstrap).await.expect("admin");
    // Kafka archives a record delivered `share.delivery.count.limit` times (5 by default)
    // without an acknowledgement, by design. Killed every 150–600 ms, a task that restarts
    // acquires hundreds of records at once (the sized acquisition) and may be killed again
    // before it finishes them: one run lost 69 records to the broker this way (archived at
    // delivery count 5, seen in __share_group_state), not to the exactly-once protocol this
    // test is about. The group's highest limit keeps the kills from reaching it.
    admin
        .set_share_group_config(&s.group, &[("share.delivery.count.limit", "10")])
        .await
        .expect("delivery count limit");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("crash run: seed {seed}, group {}", s.group);
    let mut rng = Rng(seed);
    let mut workers = Workers::start(&s);
    let mut mid_run_kills = 0;
    let mut chaos_tasks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    while mid_run_kills < KILLS {
        tokio::time::sleep(Duration::from_millis(150 + rng.below(450))).await;
        let unfinished = lag(&admin, &s.group).await;
        assert_ne!(
            unfinished,
            Some(0),
            "all records finished after only {mid_run_kills} kills: the kills would not test anything"
        );
        let task = u32::try_from(rng.below(u64::from(WORKERS))).expect("small");
        workers.kill_and_restart(task);
        mid_run_kills += 1;
        eprintln!("kill {mid_run_kills}: task {task}, {unfinished:?} records unfinished");
        if let Some(handle) = chaos(mid_run_kills, &s) {
            chaos_tasks.push(handle);
        }
        assert!(
            Instant::now() < deadline,
            "the crash run took more than 10 minutes"
        );
    }
    for handle in chaos_tasks {
        handle.await.expect("chaos task");
    }
    // Let the survivors finish everything.
    loop {
        if lag(&admin, &s.group).await == Some(0) && eos::output(&s).await.len() >= RECORDS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not finished within 10 minutes: lag {:?}, logs in target/tmp/{}",
            lag(&admin, &s.group).await,
            s.group
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(workers);
    assert!(mid_run_kills >= KILLS);
    eos::assert_exactly_once(&eos::output(&s).await, RECORDS);
    let java = java_read_committed(&s.bootstrap, &s.target);
    eos::assert_exactly_once(&java, RECORDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mirror_processes_killed_twenty_times_duplicate_and_lose_nothing() {
    let Some(bootstrap) =
        support::bootstrap("two_mirror_processes_killed_twenty_times_duplicate_and_lose_nothing")
    else {
        return;
    };
    crash_run(bootstrap, 1, &|_, _| None).await;
}

/// Moves the leader of every partition of `topic` to the next broker of 1..=3.
fn move_leaders(bootstrap: String, topic: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let admin = KafkaAdmin::connect(&bootstrap).await.expect("admin");
        for p in admin.partitions(&topic).await.expect("partitions") {
            let to = p.leader.map_or(1, |l| l % 3 + 1);
            // A broker just killed and started again (the chaos does that) leads nothing until
            // it has caught up: wait for it to be in sync before asking it to lead.
            wait_in_sync(&admin, &topic, p.partition, to).await;
            admin
                .move_leader(&topic, p.partition, to)
                .await
                .expect("leader moved");
            eprintln!("moved the leader of {topic}-{} to broker {to}", p.partition);
        }
    })
}

/// Waits until `broker` is live (registered, not fenced) and an in-sync replica of `topic`'s
/// `partition` (at most two minutes, far beyond a restarted broker's catch-up here).
async fn wait_in_sync(admin: &KafkaAdmin, topic: &str, partition: i32, broker: i32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let live = admin
            .broker_ids()
            .await
            .is_ok_and(|ids| ids.contains(&broker));
        let placements = admin.partitions(topic).await;
        let in_sync = placements.as_ref().is_ok_and(|ps| {
            ps.iter()
                .any(|p| p.partition == partition && p.isr.contains(&broker))
        });
        if live && in_sync {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker {broker} not in sync for `{topic}` partition {partition} after 120 s: {placements:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The same on three brokers (source, target and ledger replicated three times), with the
/// leaders of the source and of the ledger moved, and broker 2 killed for five seconds,
/// while the processes are being killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the three-node cluster: KAFKA_NODES=3 scripts/kafka.sh start (scripts/test.sh does)"]
async fn on_three_brokers_with_leader_moves_and_a_broker_killed() {
    let Some((bootstrap, script)) =
        cluster::cluster("on_three_brokers_with_leader_moves_and_a_broker_killed")
    else {
        return;
    };
    // Until a killed broker is fenced (broker.session.timeout.ms, longer than it is down here)
    // the metadata still lists it and its in-sync replicas: the ledger's leaders move only
    // once broker 2 has started again.
    let (restarted, started_again) = tokio::sync::watch::channel(false);
    // Taken by the task that kills broker 2: if it fails, the sender goes with it and the
    // ledger's move fails too instead of waiting.
    let restarted = std::sync::Mutex::new(Some(restarted));
    let chaos = move |kills: usize, s: &eos::Setup| match kills {
        4 => Some(move_leaders(s.bootstrap.clone(), s.source.clone())),
        8 => {
            let script = script.clone();
            let restarted = restarted
                .lock()
                .expect("not poisoned")
                .take()
                .expect("broker 2 is killed once");
            Some(tokio::task::spawn_blocking(move || {
                let killed = cluster::Killed::node(&script, 2);
                eprintln!("broker 2 killed");
                std::thread::sleep(Duration::from_secs(5));
                drop(killed);
                eprintln!("broker 2 started again");
                restarted.send_replace(true);
            }))
        }
        14 => {
            let (bootstrap, ledger) = (s.bootstrap.clone(), format!("{}.eos-ledger", s.group));
            let mut started_again = started_again.clone();
            Some(tokio::spawn(async move {
                started_again
                    .wait_for(|started| *started)
                    .await
                    .expect("the chaos task that restarts broker 2 ended without a word");
                move_leaders(bootstrap, ledger)
                    .await
                    .expect("ledger leaders moved");
            }))
        }
        _ => None,
    };
    crash_run(bootstrap, 3, &chaos).await;
}
