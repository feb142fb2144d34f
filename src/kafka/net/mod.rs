//! Connections: one TCP connection to one broker with pipelined requests, and the bootstrap
//! list that hands out a live one.

pub(crate) mod bootstrap;
pub(crate) mod connection;
