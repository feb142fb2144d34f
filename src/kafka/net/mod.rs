//! Connections: one TCP connection to one broker with pipelined requests, the addresses a
//! client reconnects to (the brokers the last Metadata named, then the bootstrap servers),
//! the cluster-wide connection that hands out a live one, finding a coordinator, and the
//! reconnect backoff that paces a client's connection attempts to each broker.

pub(crate) mod addresses;
pub(crate) mod backoff;
pub(crate) mod body;
pub(crate) mod bootstrap;
pub(crate) mod connection;
pub(crate) mod coordinator;
pub(crate) mod frame_pool;

/// `host:port` of a broker as Metadata or FindCoordinator name it, with an IPv6 host in
/// brackets.
pub(crate) fn broker_address(host: &str, port: i32) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_bracket_ipv6_hosts() {
        assert_eq!(broker_address("127.0.0.1", 9092), "127.0.0.1:9092");
        assert_eq!(broker_address("kafka-1", 9092), "kafka-1:9092");
        assert_eq!(broker_address("::1", 9092), "[::1]:9092");
        assert_eq!(broker_address("[::1]", 9092), "[::1]:9092");
    }
}
