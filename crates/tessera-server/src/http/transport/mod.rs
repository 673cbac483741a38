//! The transport under the protocols: the accept loop and its connection
//! threads, `sendfile` for file answers, request bodies read by pull, CORS,
//! and the access log with its batching writer.

pub mod access;
pub mod access_lines;
pub mod body;
pub(crate) mod cors;
pub mod listener;
pub mod sendfile;
