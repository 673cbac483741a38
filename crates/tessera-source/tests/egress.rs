//! The egress guard as a client meets it: credentials required, private
//! destinations refused unless listed, tunnels and plain requests carried.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use base64::Engine;
use tessera_source::{EgressPolicy, egress_guard};

/// Sends `request` to the guard and returns everything it answers until
/// it closes the connection or goes quiet.
fn exchange(guard: SocketAddr, request: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(guard).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    (stream, String::from_utf8(head).unwrap())
}

/// A one-shot server on loopback that answers every connection with `reply`.
fn answering(reply: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    address
}

#[test]
fn the_guard_wants_its_credentials_refuses_private_hosts_and_carries_listed_ones() {
    let upstream =
        answering("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
    let guard = egress_guard(EgressPolicy {
        allowed_private_hosts: vec![upstream.to_string()],
        connect_timeout: Duration::from_secs(5),
    })
    .unwrap();
    let auth = format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(&guard.credentials)
    );

    // Without credentials: 407, whatever the destination.
    let (_, head) = exchange(
        guard.address,
        &format!("GET http://{upstream}/x HTTP/1.1\r\nHost: {upstream}\r\n\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 407"), "{head}");

    // A private destination that is not listed: 403, never connected.
    let unlisted = answering("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    let (_, head) = exchange(
        guard.address,
        &format!("GET http://{unlisted}/x HTTP/1.1\r\nHost: {unlisted}\r\n{auth}\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let (_, head) = exchange(
        guard.address,
        &format!("CONNECT {unlisted} HTTP/1.1\r\nHost: {unlisted}\r\n{auth}\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");

    // A listed host: plain requests are forwarded...
    let (mut stream, head) = exchange(
        guard.address,
        &format!("GET http://{upstream}/x HTTP/1.1\r\nHost: {upstream}\r\n{auth}\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = [0u8; 5];
    stream.read_exact(&mut body).unwrap();
    assert_eq!(&body, b"hello");

    // ...and CONNECT opens a tunnel to it.
    let (mut stream, head) = exchange(
        guard.address,
        &format!("CONNECT {upstream} HTTP/1.1\r\nHost: {upstream}\r\n{auth}\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    assert!(reply.ends_with("hello"), "{reply}");
}
