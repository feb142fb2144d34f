//! Connections: one TCP connection to one broker with pipelined requests, the bootstrap
//! list that hands out a live one, and finding a coordinator.

pub(crate) mod bootstrap;
pub(crate) mod connection;
pub(crate) mod coordinator;
