//! A small `kafka-share-groups.sh`: describes a share group, shows its lag, and resets its
//! offsets, with [`KafkaAdmin`].
//!
//! ```text
//! share_groups_admin [--bootstrap HOST:PORT] describe --group G
//! share_groups_admin [--bootstrap HOST:PORT] lag      --group G
//! share_groups_admin [--bootstrap HOST:PORT] reset    --group G --topic T --to earliest|latest|OFFSET
//! ```
//!
//! - `describe`: the group's state and epochs, then one line per member: member id, client id,
//!   host, subscribed topics and assigned partitions
//!   ([`KafkaAdmin::describe_share_group`]).
//! - `lag`: one line per partition the group has state for: start offset, leader epoch and
//!   lag, then the total lag ([`KafkaAdmin::share_group_offsets`]); `-` where the broker gives
//!   no value (the lag needs Kafka 4.4).
//! - `reset`: moves the group's start offsets in every partition of the topic
//!   ([`KafkaAdmin::reset_share_group_offsets`]) and prints the offsets set. The group must
//!   be empty: stop its consumers first, or the broker refuses and this says so.
//!
//! The bootstrap address defaults to `KAFKA_BOOTSTRAP`, then `127.0.0.1:9092`. Run with, e.g.:
//!
//! ```text
//! cargo run --example share_groups_admin -- --bootstrap 127.0.0.1:9092 lag --group order-sink
//! ```
//!
//! Exit status: 0 on success, 1 when the call failed (the error is printed), 2 on a usage
//! error.

use std::process::ExitCode;

use kafka_share_sink::{AdminError, KafkaAdmin, ResetTo};

const USAGE: &str = "usage: share_groups_admin [--bootstrap HOST:PORT] \
    (describe --group G | lag --group G | reset --group G --topic T --to earliest|latest|OFFSET)";

/// What to do, from the command line.
enum Command {
    Describe {
        group: String,
    },
    Lag {
        group: String,
    },
    Reset {
        group: String,
        topic: String,
        to: ResetTo,
    },
}

/// The bootstrap address and the command, or a usage error.
fn parse(args: &[String]) -> Result<(String, Command), String> {
    let mut bootstrap = std::env::var("KAFKA_BOOTSTRAP")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "127.0.0.1:9092".to_owned());
    let mut command = None;
    let (mut group, mut topic, mut to) = (None, None, None);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |name: &str| {
            rest.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--bootstrap" => bootstrap = value("--bootstrap")?,
            "--group" => group = Some(value("--group")?),
            "--topic" => topic = Some(value("--topic")?),
            "--to" => to = Some(value("--to")?),
            "describe" | "lag" | "reset" if command.is_none() => command = Some(arg.clone()),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    let group = group.ok_or("--group is required")?;
    let command = match command.as_deref() {
        Some("describe") => Command::Describe { group },
        Some("lag") => Command::Lag { group },
        Some("reset") => {
            let topic = topic.ok_or("reset needs --topic")?;
            let to =
                match to.ok_or("reset needs --to")?.as_str() {
                    "earliest" => ResetTo::Earliest,
                    "latest" => ResetTo::Latest,
                    offset => ResetTo::Offset(offset.parse().map_err(|_| {
                        format!("--to `{offset}`: give earliest, latest or an offset")
                    })?),
                };
            Command::Reset { group, topic, to }
        }
        _ => return Err("give a command: describe, lag or reset".to_owned()),
    };
    Ok((bootstrap, command))
}

/// Prints an optional number, `-` for none.
fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

async fn run(bootstrap: &str, command: Command) -> Result<(), AdminError> {
    let admin = KafkaAdmin::connect(bootstrap).await?;
    match command {
        Command::Describe { group } => {
            let g = admin.describe_share_group(&group).await?;
            println!(
                "GROUP {} STATE {} GROUP-EPOCH {} ASSIGNMENT-EPOCH {} MEMBERS {}",
                g.group_id,
                g.state,
                g.group_epoch,
                g.assignment_epoch,
                g.members.len()
            );
            for m in &g.members {
                let assignment: Vec<String> = m
                    .assignment
                    .iter()
                    .map(|(topic, partitions)| format!("{topic}:{partitions:?}"))
                    .collect();
                println!(
                    "  {} client={} host={} topics={} assignment={}",
                    m.member_id,
                    m.client_id,
                    m.host,
                    m.subscribed_topics.join(","),
                    assignment.join(" ")
                );
            }
        }
        Command::Lag { group } => {
            let offsets = admin.share_group_offsets(&group).await?;
            println!("TOPIC PARTITION START-OFFSET LEADER-EPOCH LAG");
            let mut total = Some(0i64);
            for p in &offsets {
                println!(
                    "{} {} {} {} {}",
                    p.topic,
                    p.partition,
                    or_dash(p.start_offset),
                    or_dash(p.leader_epoch),
                    or_dash(p.lag)
                );
                total = total.zip(p.lag).map(|(t, l)| t.saturating_add(l));
            }
            println!("TOTAL LAG {}", or_dash(total));
        }
        Command::Reset { group, topic, to } => {
            let set = admin.reset_share_group_offsets(&group, &topic, to).await?;
            for (partition, offset) in set {
                println!("{topic} {partition} start offset set to {offset}");
            }
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (bootstrap, command) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(problem) => {
            eprintln!("{problem}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&bootstrap, command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}
