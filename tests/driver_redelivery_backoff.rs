//! The redelivery backoff on the embedded share group, in paused time: a batch whose `put`
//! fails with a retriable error is held (its locks renewed) for a delay that grows with its
//! delivery count, then released; a target down for 30 s loses nothing at the broker's
//! default delivery-count limit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kafka_share_sink::embedded::{
    AutoOffsetReset, ConsumerOptions, EmbeddedBroker, EmbeddedShareConsumer, GroupConfig, OnDrop,
    ProduceRecord, RecordState,
};
use kafka_share_sink::{
    CommitPolicy, DriverConfig, ErrorHandling, IterationReport, PutRetriablePolicy, ShareConsumer,
    ShareSinkTask, SinkRecord, SinkTask, TaskConfig, TaskError,
};
use tokio::time::Instant;

#[path = "support/prompt_shutdown.rs"]
mod prompt_shutdown;

#[path = "support/slow_queue.rs"]
mod slow_queue;

use slow_queue::SlowQueue;

const GROUP: &str = "sink";
const LOCK: Duration = Duration::from_secs(15);

fn broker(records: usize) -> EmbeddedBroker {
    let broker = EmbeddedBroker::new();
    broker.create_topic("t", 1).unwrap();
    broker
        .set_group_config(
            GROUP,
            GroupConfig::new()
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .record_lock_duration(LOCK)
                .delivery_count_limit(5),
        )
        .unwrap();
    for i in 0..records {
        broker
            .produce("t", ProduceRecord::new().value(format!("{i}")))
            .unwrap();
    }
    broker
}

fn state(broker: &EmbeddedBroker, offset: i64) -> (RecordState, u16) {
    let view = broker.record_state(GROUP, "t", 0, offset).unwrap();
    (view.state(), view.delivery_count())
}

/// One `put`: when, which (offset, delivery count), and whether it succeeded.
type Puts = Arc<Mutex<Vec<(Instant, Vec<(i64, u16)>, bool)>>>;

/// A target that is down until `up_at`: `put` fails with a retriable error before.
struct Target {
    up_at: Instant,
    backoff: Option<Duration>,
    puts: Puts,
}

#[async_trait]
impl SinkTask for Target {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let up = now >= self.up_at;
        let batch = records
            .iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect();
        self.puts.lock().unwrap().push((now, batch, up));
        if up {
            return Ok(());
        }
        let error = TaskError::retriable("target down");
        Err(match self.backoff {
            Some(backoff) => error.with_backoff(backoff),
            None => error,
        })
    }
}

fn config() -> DriverConfig {
    DriverConfig::new(["t"])
        .commit_policy(CommitPolicy::every_iteration())
        .poll_timeout(Duration::from_millis(10))
}

fn driver(
    broker: &EmbeddedBroker,
    down_for: Duration,
    config: DriverConfig,
    options: ConsumerOptions,
) -> (ShareSinkTask<EmbeddedShareConsumer>, Puts) {
    let puts = Puts::default();
    let target = Target {
        up_at: Instant::now() + down_for,
        backoff: None,
        puts: Arc::clone(&puts),
    };
    let consumer = broker.share_consumer_with(GROUP, options);
    (ShareSinkTask::new(Box::new(target), consumer, config), puts)
}

/// Iterates until every one of `records` is acknowledged or archived, or `limit` passes.
async fn drain(
    d: &mut ShareSinkTask<EmbeddedShareConsumer>,
    b: &EmbeddedBroker,
    records: u64,
    limit: Duration,
) -> Vec<IterationReport> {
    let start = Instant::now();
    let mut reports = Vec::new();
    loop {
        let counts = b.state_counts(GROUP);
        if counts.acknowledged + counts.archived == records {
            return reports;
        }
        assert!(start.elapsed() < limit, "not drained: {counts:?}");
        reports.push(d.iteration().await.unwrap());
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_batch_is_held_for_a_backoff_that_doubles_per_delivery_then_released() {
    let b = broker(2);
    let (mut d, puts) = driver(
        &b,
        Duration::from_secs(600),
        config(),
        ConsumerOptions::new(),
    );
    d.initialize().await.unwrap();
    let first = d.iteration().await.unwrap();
    assert_eq!((first.records, first.retained, first.released), (2, 2, 0));
    assert_eq!(
        state(&b, 0),
        (RecordState::Acquired, 1),
        "held, not released"
    );
    // The next iteration waits out the backoff, releases, polls the batch again (count 2)
    // and holds it again.
    let second = d.iteration().await.unwrap();
    assert_eq!(
        (second.released, second.records, second.retained),
        (2, 2, 2)
    );
    assert_eq!(state(&b, 1), (RecordState::Acquired, 2));
    d.iteration().await.unwrap();
    d.iteration().await.unwrap();
    let puts = puts.lock().unwrap();
    let counts: Vec<u16> = puts.iter().map(|(_, batch, _)| batch[0].1).collect();
    assert_eq!(counts, [1, 2, 3, 4]);
    // 3 s, 6 s, 12 s, each less up to a fifth.
    for (i, nominal) in [3u64, 6, 12].into_iter().enumerate() {
        let gap = puts[i + 1].0 - puts[i].0;
        let nominal = Duration::from_secs(nominal);
        assert!(
            gap >= nominal * 4 / 5 && gap <= nominal + Duration::from_millis(100),
            "backoff {i}: {gap:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_target_down_for_thirty_seconds_loses_nothing_at_the_default_limit_of_five() {
    let b = broker(20);
    let (mut d, puts) = driver(
        &b,
        Duration::from_secs(30),
        config(),
        ConsumerOptions::new().max_poll_records(7),
    );
    d.initialize().await.unwrap();
    drain(&mut d, &b, 20, Duration::from_secs(600)).await;
    let counts = b.state_counts(GROUP);
    assert_eq!((counts.acknowledged, counts.archived), (20, 0));
    let puts = puts.lock().unwrap();
    let mut written: Vec<i64> = puts
        .iter()
        .filter(|(_, _, ok)| *ok)
        .flat_map(|(_, batch, _)| batch.iter().map(|(offset, _)| *offset))
        .collect();
    written.sort_unstable();
    assert_eq!(written, (0..20).collect::<Vec<_>>(), "each written once");
    let failed_at_most = puts
        .iter()
        .filter(|(_, _, ok)| !*ok)
        .flat_map(|(_, batch, _)| batch.iter().map(|(_, count)| *count))
        .max();
    assert_eq!(
        failed_at_most,
        Some(4),
        "four failed deliveries held 36 s at least: the fifth, the last, found the target \
         up: {puts:?}"
    );
    // Holds of 12 s and more outlast half the 15 s lock: renewed, never lost.
    assert!(d.metrics().records_renewed > 0);
    assert_eq!(d.metrics().lock_losses, 0);
    assert_eq!(d.metrics().records_released_at_limit, 0);
}

#[tokio::test(start_paused = true)]
async fn without_the_backoff_the_same_outage_archives_records() {
    // The control for the test above: released at once, the records spend their five
    // deliveries within seconds and the broker archives them.
    let b = broker(20);
    let (mut d, _) = driver(
        &b,
        Duration::from_secs(30),
        config().redelivery_backoff(Duration::ZERO, Duration::ZERO),
        ConsumerOptions::new().max_poll_records(7),
    );
    d.initialize().await.unwrap();
    drain(&mut d, &b, 20, Duration::from_secs(600)).await;
    assert!(b.state_counts(GROUP).archived > 0);
}

#[tokio::test(start_paused = true)]
async fn a_consumer_without_renew_releases_at_once() {
    let b = broker(2);
    let (mut d, _) = driver(
        &b,
        Duration::from_secs(600),
        config(),
        ConsumerOptions::new().renew(false),
    );
    d.initialize().await.unwrap();
    let report = d.iteration().await.unwrap();
    assert_eq!((report.retained, report.released), (0, 2));
    assert_eq!(state(&b, 0), (RecordState::Available, 1));
}

#[tokio::test(start_paused = true)]
async fn an_error_with_its_own_backoff_is_held_that_long() {
    let b = broker(1);
    let puts = Puts::default();
    let target = Target {
        up_at: Instant::now() + Duration::from_secs(600),
        backoff: Some(Duration::from_secs(40)),
        puts: Arc::clone(&puts),
    };
    let mut d = ShareSinkTask::new(Box::new(target), b.share_consumer(GROUP), config());
    d.initialize().await.unwrap();
    d.iteration().await.unwrap();
    d.iteration().await.unwrap();
    let puts = puts.lock().unwrap();
    assert_eq!(puts.len(), 2);
    assert_eq!(puts[1].0 - puts[0].0, Duration::from_secs(40));
    assert_eq!(puts[1].1, [(0, 2)]);
}

#[tokio::test(start_paused = true)]
async fn dropped_during_the_backoff_the_batch_stays_held_and_the_next_iteration_releases_it() {
    let b = broker(2);
    let (mut d, puts) = driver(
        &b,
        Duration::from_secs(600),
        config(),
        ConsumerOptions::new(),
    );
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().retained, 2);
    let dropped = tokio::time::timeout(Duration::from_secs(1), d.iteration()).await;
    assert!(dropped.is_err(), "still backing off after 1 s");
    assert_eq!(state(&b, 0), (RecordState::Acquired, 1));
    let report = d.iteration().await.unwrap();
    assert_eq!((report.released, report.records), (2, 2));
    assert_eq!(
        puts.lock().unwrap().len(),
        2,
        "put again once, after the release"
    );
    assert_eq!(state(&b, 0), (RecordState::Acquired, 2));
}

#[tokio::test(start_paused = true)]
async fn a_process_that_dies_during_the_backoff_loses_nothing() {
    let b = broker(2);
    // A crash: the member stops without a word, and its locks run out.
    let (mut d, _) = driver(
        &b,
        Duration::from_secs(600),
        config().redelivery_backoff(Duration::from_secs(40), Duration::from_secs(60)),
        ConsumerOptions::new().on_drop(OnDrop::Stall),
    );
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().retained, 2);
    drop(d);
    tokio::time::advance(LOCK).await;
    for offset in 0..2 {
        assert_eq!(state(&b, offset), (RecordState::Available, 1));
    }
    // Another member gets them.
    let (mut d, puts) = driver(&b, Duration::ZERO, config(), ConsumerOptions::new());
    d.initialize().await.unwrap();
    drain(&mut d, &b, 2, Duration::from_secs(60)).await;
    assert_eq!(b.state_counts(GROUP).acknowledged, 2);
    // Redelivered by the crash: put one by one (half the poll).
    let puts = puts.lock().unwrap();
    let batches: Vec<&[(i64, u16)]> = puts.iter().map(|(_, batch, _)| &batch[..]).collect();
    assert_eq!(batches, [&[(0, 2)][..], &[(1, 2)][..]]);
}

#[tokio::test(start_paused = true)]
async fn run_stops_at_once_on_shutdown_during_the_backoff_and_releases_the_batch() {
    let b = broker(2);
    let (mut d, _) = driver(
        &b,
        Duration::from_secs(600),
        config().redelivery_backoff(Duration::from_secs(50), Duration::from_secs(60)),
        ConsumerOptions::new(),
    );
    prompt_shutdown::run_until_shutdown_at_5_s(&mut d).await;
    assert_eq!(
        state(&b, 0),
        (RecordState::Available, 1),
        "released by close"
    );
}

fn retry_in_place(timeout: Duration) -> DriverConfig {
    config()
        .put_retriable_policy(PutRetriablePolicy::RetryInPlace)
        .errors(ErrorHandling::new().retry_timeout(Some(timeout)))
}

#[tokio::test(start_paused = true)]
async fn retry_in_place_longer_than_the_backoff_releases_at_the_timeout() {
    let b = broker(1);
    let (mut d, _) = driver(
        &b,
        Duration::from_secs(600),
        retry_in_place(Duration::from_secs(10)),
        ConsumerOptions::new(),
    );
    d.initialize().await.unwrap();
    let start = Instant::now();
    loop {
        let report = d.iteration().await.unwrap();
        if report.released > 0 {
            break;
        }
        assert_eq!(report.retained, 1);
    }
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(10) && elapsed < Duration::from_secs(13),
        "the in-place retries were the backoff: {elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_in_place_shorter_than_the_backoff_holds_for_the_rest_of_it() {
    let b = broker(1);
    let (mut d, puts) = driver(
        &b,
        Duration::from_secs(600),
        retry_in_place(Duration::from_secs(1))
            .redelivery_backoff(Duration::from_secs(20), Duration::from_secs(60)),
        ConsumerOptions::new(),
    );
    d.initialize().await.unwrap();
    let start = Instant::now();
    loop {
        let report = d.iteration().await.unwrap();
        if report.released > 0 {
            break;
        }
    }
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(16) && elapsed <= Duration::from_secs(21),
        "{elapsed:?}"
    );
    let puts = puts.lock().unwrap();
    assert!(
        puts.iter()
            .filter(|(_, batch, _)| batch[0].1 == 1)
            .all(|(at, _, _)| *at - start <= Duration::from_secs(1)),
        "no put after errors.retry.timeout: only held"
    );
}

/// A sink whose process dies whenever it puts the record at `poison`: the put never returns
/// (the test then drops the driver, as a crash would), after noting the death.
struct DiesOn {
    poison: i64,
    puts: Puts,
    died: Arc<Mutex<bool>>,
    broker: EmbeddedBroker,
    /// Records acknowledged in the group at each put.
    acknowledged_at_put: Arc<Mutex<Vec<u64>>>,
}

#[async_trait]
impl SinkTask for DiesOn {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        let batch: Vec<(i64, u16)> = records
            .iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect();
        let dies = batch.iter().any(|(offset, _)| *offset == self.poison);
        self.puts
            .lock()
            .unwrap()
            .push((Instant::now(), batch, !dies));
        self.acknowledged_at_put
            .lock()
            .unwrap()
            .push(self.broker.state_counts(GROUP).acknowledged);
        if dies {
            *self.died.lock().unwrap() = true;
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// One process of a crash loop: iterates until its sink dies (then drops it, which closes
/// its connection: the group releases what it held at once) or the group is drained.
async fn one_life(b: &EmbeddedBroker, poison: i64, config: DriverConfig, puts: &Puts) -> bool {
    let died = Arc::new(Mutex::new(false));
    let sink = DiesOn {
        poison,
        puts: Arc::clone(puts),
        died: Arc::clone(&died),
        broker: b.clone(),
        acknowledged_at_put: Arc::default(),
    };
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new());
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    loop {
        let counts = b.state_counts(GROUP);
        if counts.acknowledged + counts.archived == 8 {
            return false;
        }
        // A dead sink never returns: the minute is paused time, far past any hold.
        let iteration = tokio::time::timeout(Duration::from_secs(600), d.iteration()).await;
        if *died.lock().unwrap() {
            return true;
        }
        iteration.expect("a live sink returns").unwrap();
    }
}

/// A driver whose sink never dies, noting its puts in `puts`, with the default settings.
fn healthy_driver(b: &EmbeddedBroker, puts: &Puts) -> ShareSinkTask<EmbeddedShareConsumer> {
    let sink = DiesOn {
        poison: -1,
        puts: Arc::clone(puts),
        died: Arc::default(),
        broker: b.clone(),
        acknowledged_at_put: Arc::default(),
    };
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new());
    ShareSinkTask::new(Box::new(sink), consumer, config())
}

#[tokio::test(start_paused = true)]
async fn after_a_crash_redelivered_records_are_put_first_in_halving_batches() {
    // Eight records went to a process that died putting them; four more arrived since.
    let b = broker(8);
    let puts = Puts::default();
    assert!(
        one_life(&b, 3, config(), &puts).await,
        "the first process dies"
    );
    for offset in 0..8 {
        assert_eq!(state(&b, offset), (RecordState::Available, 1));
    }
    for i in 8..12 {
        b.produce("t", ProduceRecord::new().value(format!("{i}")))
            .unwrap();
    }

    let recorded = Puts::default();
    let acknowledged_at_put = Arc::new(Mutex::new(Vec::new()));
    let sink = DiesOn {
        poison: -1,
        puts: Arc::clone(&recorded),
        died: Arc::default(),
        broker: b.clone(),
        acknowledged_at_put: Arc::clone(&acknowledged_at_put),
    };
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new());
    // A commit policy that would commit nothing for an hour: the redelivered batches are
    // committed one by one all the same.
    let lazy = config().commit_policy(CommitPolicy::interval(Duration::from_secs(3600)));
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, lazy);
    d.initialize().await.unwrap();
    let polled_at = Instant::now();
    for _ in 0..3 {
        d.iteration().await.unwrap();
    }
    assert_eq!(
        b.state_counts(GROUP).acknowledged,
        8,
        "the first-delivery batch waits for the commit policy"
    );
    d.close().await.unwrap();
    assert_eq!(b.state_counts(GROUP).acknowledged, 12);
    assert_eq!(d.metrics().records_put_first, 8);
    let puts = recorded.lock().unwrap();
    let batches: Vec<Vec<(i64, u16)>> = puts.iter().map(|(_, batch, _)| batch.clone()).collect();
    // Twelve polled: batches of 12 / 2 redelivered records, the first-delivery ones last.
    assert_eq!(
        batches,
        [
            vec![(0, 2), (1, 2), (2, 2), (3, 2), (4, 2), (5, 2)],
            vec![(6, 2), (7, 2)],
            vec![(8, 1), (9, 1), (10, 1), (11, 1)],
        ]
    );
    // Not held back: nothing is polled while a poll waits, and a consumer's fetched-ahead
    // records would come back through their locks.
    assert_eq!(puts[0].0, polled_at);
    // Each batch of redelivered records was committed before the next was put.
    assert_eq!(*acknowledged_at_put.lock().unwrap(), [0, 6, 8]);
    assert_eq!(b.state_counts(GROUP).archived, 0);
}

#[tokio::test(start_paused = true)]
async fn in_a_crash_loop_only_the_record_that_brings_the_process_down_is_archived() {
    let b = broker(8);
    let puts = Puts::default();
    let mut lives = 0;
    while one_life(&b, 5, config(), &puts).await {
        lives += 1;
        assert!(lives <= 5, "the group archives at delivery 5");
    }
    assert_eq!(
        lives, 5,
        "each delivery of the poison record took a process down"
    );
    for offset in 0..8 {
        let (state, _) = state(&b, offset);
        let expected = if offset == 5 {
            RecordState::Archived
        } else {
            RecordState::Acknowledged
        };
        assert_eq!(state, expected, "offset {offset}");
    }
    // Every healthy record was written, at least once.
    let written: std::collections::BTreeSet<i64> = puts
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, _, ok)| *ok)
        .flat_map(|(_, batch, _)| batch.iter().map(|(offset, _)| *offset))
        .collect();
    assert_eq!(written, (0..8).filter(|o| *o != 5).collect());
}

#[tokio::test(start_paused = true)]
async fn without_the_backoff_a_crash_loop_archives_the_whole_poll() {
    // The control: whole polls put at once, every death costs every record a delivery.
    let b = broker(8);
    let puts = Puts::default();
    let off = config().redelivery_backoff(Duration::ZERO, Duration::ZERO);
    let mut lives = 0;
    while one_life(&b, 5, off.clone(), &puts).await {
        lives += 1;
        assert!(lives <= 5);
    }
    assert_eq!(b.state_counts(GROUP).archived, 8);
}

/// A sink whose first `put` never returns; later ones succeed. Every put is recorded.
struct HangsOnce {
    hung: bool,
    puts: Puts,
}

#[async_trait]
impl SinkTask for HangsOnce {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        let batch = records
            .iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect();
        self.puts
            .lock()
            .unwrap()
            .push((Instant::now(), batch, true));
        if !std::mem::replace(&mut self.hung, true) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn an_iteration_dropped_during_a_queued_put_leaves_the_batch_to_the_next() {
    let b = broker(8);
    assert!(one_life(&b, 3, config(), &Puts::default()).await);
    let puts = Puts::default();
    let sink = HangsOnce {
        hung: false,
        puts: Arc::clone(&puts),
    };
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new());
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config());
    d.initialize().await.unwrap();
    let dropped = tokio::time::timeout(Duration::from_secs(1), d.iteration()).await;
    assert!(dropped.is_err(), "the first put hangs");
    for _ in 0..4 {
        d.iteration().await.unwrap();
    }
    assert_eq!(b.state_counts(GROUP).acknowledged, 8);
    let batches: Vec<Vec<(i64, u16)>> = puts
        .lock()
        .unwrap()
        .iter()
        .map(|(_, batch, _)| batch.clone())
        .collect();
    let first_half: Vec<(i64, u16)> = (0..4).map(|o| (o, 2)).collect();
    let second_half: Vec<(i64, u16)> = (4..8).map(|o| (o, 2)).collect();
    assert_eq!(
        batches,
        [first_half.clone(), first_half, second_half],
        "the dropped batch is put again, then the rest"
    );
}

#[tokio::test(start_paused = true)]
async fn run_puts_a_queued_poll_to_the_end_before_it_takes_a_shutdown() {
    // Released at close, a queued record on its last delivery would be archived: run drains
    // the queue first.
    let b = broker(8);
    assert!(one_life(&b, 3, config(), &Puts::default()).await);
    let puts = Puts::default();
    let mut d = healthy_driver(&b, &puts);
    // Shut down as soon as the first queued batch was put (run polls the signal between
    // iterations).
    let seen = Arc::clone(&puts);
    let shutdown = std::future::poll_fn(move |_| {
        if seen.lock().unwrap().is_empty() {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    });
    d.run(shutdown).await.unwrap();
    assert_eq!(
        puts.lock().unwrap().len(),
        2,
        "both halves of the poll were put"
    );
    assert_eq!(b.state_counts(GROUP).acknowledged, 8);
}

/// A queued poll is put to the end before a shutdown only while its batches go through: one
/// that waits for a retry in place (the target down, asking for 10 minutes between tries)
/// lets the shutdown in at once, also during the wait, and close releases the batch and the
/// rest of the queue.
#[tokio::test(start_paused = true)]
async fn run_takes_a_shutdown_while_a_queued_batch_waits_for_a_retry_in_place() {
    let b = broker(8);
    assert!(one_life(&b, 3, config(), &Puts::default()).await);
    let puts = Puts::default();
    let target = Target {
        up_at: Instant::now() + Duration::from_secs(7200),
        backoff: Some(Duration::from_secs(600)),
        puts: Arc::clone(&puts),
    };
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new());
    let config = retry_in_place(Duration::from_secs(3600));
    let mut d = ShareSinkTask::new(Box::new(target), consumer, config);
    prompt_shutdown::run_until_shutdown_at_5_s(&mut d).await;
    let puts = puts.lock().unwrap();
    assert!(!puts.is_empty() && puts.iter().all(|(_, batch, up)| !up && batch.len() == 4));
    let counts = b.state_counts(GROUP);
    assert_eq!(
        (counts.acknowledged, counts.available),
        (0, 8),
        "{counts:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn close_with_last_deliveries_queued_counts_them_as_released_at_the_limit() {
    // A group limit of 2: after one crash the records are on their last delivery, put one
    // at a time. `close` (unlike `run`) does not drain the queue: what is left is released,
    // archived by the group, and counted.
    let b = broker(8);
    last_delivery_is_the_second(&b);
    assert!(one_life(&b, 3, config(), &Puts::default()).await);
    let puts = Puts::default();
    let mut d = healthy_driver(&b, &puts);
    d.initialize().await.unwrap();
    d.iteration().await.unwrap();
    assert_eq!(puts.lock().unwrap().len(), 1);
    assert_eq!(puts.lock().unwrap()[0].1.len(), 1, "one at a time");
    d.close().await.unwrap();
    let counts = b.state_counts(GROUP);
    assert_eq!((counts.acknowledged, counts.archived), (1, 7), "{counts:?}");
    assert_eq!(d.metrics().records_released_at_limit, 7);
}

/// Puts its first non-empty batch after `first_put_takes`, then fails every one.
struct FailsAfterFirst {
    first_put_takes: Duration,
    puts: Puts,
}

#[async_trait]
impl SinkTask for FailsAfterFirst {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        let first = self.puts.lock().unwrap().is_empty();
        let batch = records
            .iter()
            .map(|r| (r.offset(), r.delivery_count()))
            .collect();
        self.puts
            .lock()
            .unwrap()
            .push((Instant::now(), batch, first));
        if first {
            tokio::time::sleep(self.first_put_takes).await;
            return Ok(());
        }
        Err(TaskError::retriable("target down"))
    }
}

/// Offset 0 (redelivered) was put alone, then offsets 1 (on its second delivery) and 2
/// together.
fn assert_first_two_batches(puts: &Puts) {
    let batches: Vec<Vec<(i64, u16)>> = puts
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b, _)| b.clone())
        .collect();
    assert_eq!(batches, [vec![(0, 2)], vec![(1, 2), (2, 1)]]);
}

/// The group's delivery-count limit set to 2: a record's second delivery is its last.
fn last_delivery_is_the_second(b: &EmbeddedBroker) {
    b.set_group_config(
        GROUP,
        GroupConfig::new()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .record_lock_duration(LOCK)
            .delivery_count_limit(2),
    )
    .unwrap();
}

/// Offsets 0 and 1 of `b` delivered once to a member that goes away; offset 2 produced.
async fn deliver_two_once_then_produce_a_third(b: &EmbeddedBroker) {
    let mut crashed = b.share_consumer(GROUP);
    crashed.subscribe(vec!["t".to_owned()]).await.unwrap();
    assert_eq!(
        crashed.poll(Duration::from_millis(10)).await.unwrap().len(),
        2
    );
    drop(crashed);
    b.produce("t", ProduceRecord::new().value("2")).unwrap();
}

/// Offsets 0 and 1 of `b` (holding 0 and 1) delivered once to a member that went away,
/// offset 2 produced; then a driver with `config`, whose first batch (offset 0, redelivered,
/// put alone) succeeds and outlasts a third of the lock, so that offsets 1 (on its second
/// delivery) and 2 go together in the next batch, which fails. Returns the driver after
/// that failure and how many records it retained.
async fn fail_a_batch_with_a_second_delivery(
    b: &EmbeddedBroker,
    config: DriverConfig,
    options: ConsumerOptions,
) -> (ShareSinkTask<EmbeddedShareConsumer>, usize) {
    deliver_two_once_then_produce_a_third(b).await;
    let puts = Puts::default();
    let sink = FailsAfterFirst {
        first_put_takes: LOCK / 2,
        puts: Arc::clone(&puts),
    };
    let consumer = b.share_consumer_with(GROUP, options);
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let mut retained = 0;
    for _ in 0..3 {
        retained = d.iteration().await.unwrap().retained;
        if retained > 0 {
            break;
        }
    }
    assert_first_two_batches(&puts);
    (d, retained)
}

/// Closing while a failed batch waits out its redelivery backoff, or between retries in
/// place, gives the batch up as a final failure would: a record on its last delivery goes to
/// the dead-letter queue before the release that would let the group archive it; the
/// others are released. Held for a backoff, the batch's last deliveries were dead-lettered
/// when the hold began; retried in place, they are still being put until the close.
#[tokio::test(start_paused = true)]
async fn close_during_a_backoff_or_a_retry_dead_letters_the_last_deliveries_first() {
    for retry in [false, true] {
        let b = broker(2);
        let dlq = b.dead_letter_queue("t-dlq").unwrap();
        // The driver's own limit: a second delivery is the last.
        let config = if retry {
            retry_in_place(Duration::from_secs(600))
        } else {
            config().redelivery_backoff(Duration::from_secs(50), Duration::from_secs(60))
        }
        .max_delivery_attempts(Some(2))
        .dead_letter_queue(Arc::new(dlq), false);
        let (mut d, retained) =
            fail_a_batch_with_a_second_delivery(&b, config, ConsumerOptions::new()).await;
        let letters_before_close = b.read_log("t-dlq", 0).unwrap().len();
        if retry {
            assert_eq!(retained, 2, "the failed batch is retried whole");
            assert_eq!(letters_before_close, 0, "still being put");
        } else {
            assert_eq!(retained, 1, "only offset 2 waits out the backoff");
            assert_eq!(letters_before_close, 1, "offset 1 given up on at once");
        }
        d.close().await.unwrap();
        let letters = b.read_log("t-dlq", 0).unwrap();
        assert_eq!(letters.len(), 1, "retry {retry}");
        assert_eq!(letters[0].value().map(|v| v.as_ref()), Some(&b"1"[..]));
        assert!(
            state(&b, 1).0.is_terminal(),
            "retry {retry}: {:?}",
            state(&b, 1)
        );
        assert_eq!(state(&b, 2), (RecordState::Available, 1), "retry {retry}");
    }
}

/// The group's own limit (2) and the driver's dead-letter queue: a failed batch holding a
/// record on its last delivery is held for its backoff, and the process dies during it. The
/// record was dead-lettered (and settled) when the hold began, not left to the group to
/// archive without a dead-letter write when its lock runs out. The rest comes back.
#[tokio::test(start_paused = true)]
async fn a_process_that_dies_during_the_backoff_does_not_leave_a_last_delivery_to_be_archived() {
    let b = broker(2);
    last_delivery_is_the_second(&b);
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    let config = config()
        .redelivery_backoff(Duration::from_secs(50), Duration::from_secs(60))
        .dead_letter_queue(Arc::new(dlq), false);
    let (d, retained) = fail_a_batch_with_a_second_delivery(
        &b,
        config,
        ConsumerOptions::new().on_drop(OnDrop::Stall),
    )
    .await;
    assert_eq!(retained, 1, "offset 2 waits out the backoff");
    let letters = b.read_log("t-dlq", 0).unwrap();
    assert_eq!(letters.len(), 1, "offset 1 dead-lettered before the hold");
    assert_eq!(letters[0].value().map(|v| v.as_ref()), Some(&b"1"[..]));
    // REJECTed after the write (the group has no dead-letter queue of its own) and
    // committed, not left to expire.
    assert_eq!(state(&b, 1), (RecordState::Archived, 2));
    assert_eq!(
        (
            d.metrics().records_rejected,
            d.metrics().records_dead_lettered
        ),
        (1, 1)
    );
    drop(d);
    tokio::time::advance(LOCK * 2).await;
    assert_eq!(b.read_log("t-dlq", 0).unwrap().len(), 1);
    assert_eq!(state(&b, 2), (RecordState::Available, 1));
}

/// The hold's dead-letter write is cut short: the iteration that held the batch (offset 1 on
/// its last delivery, offset 2 not) is dropped while the queue writes offset 1. The next
/// iteration writes it again and settles it; the release after the backoff leaves it
/// alone and releases offset 2. Each record is written once, nothing is left held.
#[tokio::test(start_paused = true)]
async fn an_iteration_dropped_during_the_holds_dead_letter_write_leaves_it_to_the_next() {
    let b = broker(2);
    last_delivery_is_the_second(&b);
    deliver_two_once_then_produce_a_third(&b).await;
    let queue = SlowQueue {
        inner: Arc::new(b.dead_letter_queue("t-dlq").unwrap()),
        delay: LOCK * 2,
    };
    let config = config()
        .redelivery_backoff(Duration::from_secs(50), Duration::from_secs(60))
        .dead_letter_queue(Arc::new(queue), false);
    let puts = Puts::default();
    // Offset 0 (redelivered) is put alone, in just under half the lock (so nothing is
    // renewed during it), past the third after which the rest of the poll goes together.
    let sink = FailsAfterFirst {
        first_put_takes: LOCK / 2 - Duration::from_secs(1),
        puts: Arc::clone(&puts),
    };
    let mut d = ShareSinkTask::new(Box::new(sink), b.share_consumer(GROUP), config);
    d.initialize().await.unwrap();
    assert_eq!(d.iteration().await.unwrap().retained, 0);
    // The application's loop does something else for 2 s: offsets 1 and 2 pass half their
    // lock before the next iteration, which renews them and takes them without a poll.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let dropped = tokio::time::timeout(LOCK, d.iteration()).await;
    assert!(
        dropped.is_err(),
        "the hold's dead-letter write outlasts the timeout"
    );
    assert_first_two_batches(&puts);
    assert!(b.read_log("t-dlq", 0).unwrap().is_empty());
    assert_eq!(state(&b, 1), (RecordState::Acquired, 2), "held meanwhile");
    let report = d.iteration().await.unwrap();
    // Offset 1 written again; then the backoff, offset 2 released, delivered again (its
    // last delivery), put, failed, and dead-lettered in turn.
    assert_eq!((report.released, report.dead_lettered), (1, 2));
    let letters: Vec<Vec<u8>> = b
        .read_log("t-dlq", 0)
        .unwrap()
        .iter()
        .map(|r| r.value().unwrap().to_vec())
        .collect();
    assert_eq!(letters, [b"1".to_vec(), b"2".to_vec()], "each written once");
    assert_eq!(state(&b, 1), (RecordState::Archived, 2));
    assert_eq!(state(&b, 2), (RecordState::Archived, 2));
    assert_eq!(d.metrics().records_dead_lettered, 2);
    d.close().await.unwrap();
    assert_eq!(b.read_log("t-dlq", 0).unwrap().len(), 2);
    assert_eq!(b.state_counts(GROUP).acquired, 0);
}

/// Puts everything and never makes any of it durable.
struct NeverFlushes;

#[async_trait]
impl SinkTask for NeverFlushes {
    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, _: &[SinkRecord]) -> Result<(), TaskError> {
        Ok(())
    }

    async fn pre_commit(
        &mut self,
        _: &kafka_share_sink::Delivered,
    ) -> Result<kafka_share_sink::Durability, TaskError> {
        Ok(kafka_share_sink::Durability::Nothing)
    }
}

/// Nor does a queued poll hold a shutdown back once a wait for a flush found too much still
/// waiting for one (`ack.policy=after.flush`, at most 4 records awaiting a flush, a task that
/// never flushes): the second half of the poll could never be taken.
#[tokio::test(start_paused = true)]
async fn run_takes_a_shutdown_while_a_queued_poll_waits_for_a_flush_that_does_not_come() {
    let b = broker(8);
    assert!(one_life(&b, 3, config(), &Puts::default()).await);
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new());
    let config = config()
        .ack_policy(kafka_share_sink::AckPolicy::AfterFlush)
        .max_awaiting_flush(4, 0);
    let mut d = ShareSinkTask::new(Box::new(NeverFlushes), consumer, config);
    prompt_shutdown::run_until_shutdown_at_5_s(&mut d).await;
    let counts = b.state_counts(GROUP);
    assert_eq!(
        (counts.acknowledged, counts.available),
        (0, 8),
        "{counts:?}"
    );
}

/// Down for good, and fails `pre_commit` fatally; asks for a commit at each `put`.
struct DownAndBroken {
    context: Option<kafka_share_sink::SinkTaskContext>,
}

#[async_trait]
impl SinkTask for DownAndBroken {
    fn initialize(&mut self, context: kafka_share_sink::SinkTaskContext) {
        self.context = Some(context);
    }

    async fn start(&mut self, _: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        if records.is_empty() {
            return Ok(());
        }
        if let Some(context) = &self.context {
            context.request_commit();
        }
        Err(TaskError::retriable("target down"))
    }

    async fn pre_commit(
        &mut self,
        _: &kafka_share_sink::Delivered,
    ) -> Result<kafka_share_sink::Durability, TaskError> {
        Err(TaskError::fatal("the flush broke"))
    }
}

/// A driver that fails (its `pre_commit`) while a batch waits for a retry in place still
/// gives that batch up at close as after a final failure: the records on their last
/// delivery go to the dead-letter queue rather than being released for the group to archive.
#[tokio::test(start_paused = true)]
async fn close_of_a_failed_driver_dead_letters_the_last_deliveries_of_a_retried_batch() {
    let b = broker(2);
    let dlq = b.dead_letter_queue("t-dlq").unwrap();
    // The driver's own limit: the first delivery is the last.
    let config = retry_in_place(Duration::from_secs(600))
        .max_delivery_attempts(Some(1))
        .dead_letter_queue(Arc::new(dlq), false);
    let consumer = b.share_consumer_with(GROUP, ConsumerOptions::new());
    let sink = DownAndBroken { context: None };
    let mut d = ShareSinkTask::new(Box::new(sink), consumer, config);
    d.initialize().await.unwrap();
    let error = d.iteration().await.expect_err("pre_commit fails");
    assert!(!error.is_retriable(), "{error:?}");
    assert!(b.read_log("t-dlq", 0).unwrap().is_empty(), "still retried");
    d.close().await.unwrap();
    assert_eq!(b.read_log("t-dlq", 0).unwrap().len(), 2);
    for offset in 0..2 {
        assert_eq!(state(&b, offset), (RecordState::Archived, 1), "rejected");
    }
    assert_eq!(d.metrics().records_dead_lettered, 2);
}
