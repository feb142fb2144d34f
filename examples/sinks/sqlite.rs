//! A sink into SQLite that is safe to run at least once: every record is upserted by its
//! Kafka coordinates, and one database transaction per flush makes a batch durable before
//! its records are acknowledged.
//!
//! Run it with `ack.policy=after.flush`: `put` only buffers, `pre_commit` writes the buffer
//! in one transaction and answers that everything delivered is durable, and only then does
//! the driver ACCEPT the records. A crash anywhere loses nothing (unacknowledged records are
//! delivered again) and duplicates nothing (a record written twice is the same row,
//! `writes` counts how often it arrived).
//!
//! Settings (connector config): `sqlite.path` (default `share-sink.db`), `sqlite.table`
//! (default `records`).

use std::time::Duration;

use kafka_share_sink::{Delivered, Durability, SinkRecord, SinkTask, TaskConfig, TaskError, Value};
use rusqlite::{Connection, params};

/// The class name the standalone runner knows this sink by.
#[allow(dead_code)]
pub(crate) const CLASS: &str = "SqliteSinkConnector";

/// One row to upsert.
struct Row {
    topic: String,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: Option<i64>,
}

/// Buffers in `put`, writes in `pre_commit`.
#[derive(Default)]
pub(crate) struct SqliteSink {
    db: Option<Connection>,
    table: String,
    buffer: Vec<Row>,
}

fn bytes(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::Null => None,
        Value::Bytes(b) => Some(b.to_vec()),
        Value::String(s) => Some(s.as_bytes().to_vec()),
        other => Some(format!("{other:?}").into_bytes()),
    }
}

/// A table name is spliced into SQL: letters, digits and underscores only.
fn table_name(name: &str) -> Result<String, TaskError> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(name.to_owned())
    } else {
        Err(TaskError::fatal(format!(
            "sqlite.table `{name}`: use letters, digits and underscores"
        )))
    }
}

/// Opens (creating if needed) the database and the table.
pub(crate) fn open(path: &str, table: &str) -> rusqlite::Result<Connection> {
    let db = Connection::open(path)?;
    // Readers (a test, a person with the sqlite3 shell) do not block the writer.
    db.pragma_update(None, "journal_mode", "WAL")?;
    // Several tasks (each its own connection) write to one file: wait for the lock.
    db.busy_timeout(Duration::from_secs(30))?;
    db.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (
             kafka_topic     TEXT    NOT NULL,
             kafka_partition INTEGER NOT NULL,
             kafka_offset    INTEGER NOT NULL,
             record_key      BLOB,
             record_value    BLOB,
             record_timestamp INTEGER,
             writes          INTEGER NOT NULL DEFAULT 1,
             PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset)
         )"
    ))?;
    Ok(db)
}

fn retriable(what: &str, e: rusqlite::Error) -> TaskError {
    TaskError::retriable(format!("sqlite {what} failed: {e}"))
}

#[async_trait::async_trait]
impl SinkTask for SqliteSink {
    async fn start(&mut self, config: &TaskConfig) -> Result<(), TaskError> {
        let path = config.get("sqlite.path").unwrap_or("share-sink.db").trim();
        self.table = table_name(config.get("sqlite.table").unwrap_or("records").trim())?;
        let db = open(path, &self.table)
            .map_err(|e| TaskError::fatal(format!("cannot open sqlite.path {path}: {e}")))?;
        self.db = Some(db);
        Ok(())
    }

    async fn put(&mut self, records: &[SinkRecord]) -> Result<(), TaskError> {
        // Nothing is written yet: pre_commit writes the buffer in one transaction.
        self.buffer.extend(records.iter().map(|r| Row {
            // The coordinates the record had in Kafka, whatever transforms did.
            topic: r.original_topic().to_owned(),
            partition: r.original_partition(),
            offset: r.original_offset(),
            key: bytes(r.key()),
            value: bytes(r.value()),
            timestamp: r.timestamp(),
        }));
        Ok(())
    }

    async fn pre_commit(&mut self, _delivered: &Delivered) -> Result<Durability, TaskError> {
        if self.buffer.is_empty() {
            return Ok(Durability::All);
        }
        let db = self
            .db
            .as_mut()
            .ok_or_else(|| TaskError::fatal("the sqlite sink was not started"))?;
        // Blocking I/O on the async task: fine for an example with small transactions; a
        // production sink would use spawn_blocking or an async driver.
        let tx = db.transaction().map_err(|e| retriable("begin", e))?;
        {
            let mut upsert = tx
                .prepare_cached(&format!(
                    "INSERT INTO {} (kafka_topic, kafka_partition, kafka_offset,
                                     record_key, record_value, record_timestamp)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (kafka_topic, kafka_partition, kafka_offset) DO UPDATE SET
                         record_key = excluded.record_key,
                         record_value = excluded.record_value,
                         record_timestamp = excluded.record_timestamp,
                         writes = writes + 1",
                    self.table
                ))
                .map_err(|e| retriable("prepare", e))?;
            for row in &self.buffer {
                upsert
                    .execute(params![
                        row.topic,
                        row.partition,
                        row.offset,
                        row.key,
                        row.value,
                        row.timestamp
                    ])
                    .map_err(|e| retriable("upsert", e))?;
            }
        }
        tx.commit().map_err(|e| retriable("commit", e))?;
        // Everything put since the last pre_commit is in the buffer, and now in the table.
        self.buffer.clear();
        Ok(Durability::All)
    }

    async fn stop(&mut self) -> Result<(), TaskError> {
        // The driver's close ran the last pre_commit; what is left was never acknowledged
        // and comes back to the group.
        self.buffer.clear();
        self.db = None;
        Ok(())
    }
}
