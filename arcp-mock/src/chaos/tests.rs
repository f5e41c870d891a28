//! The frame parser and the schedule, on byte streams fed in every chunking.

use std::net::SocketAddr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::frames::{DirParser, Side, MAX_FRAME_HEADER};
use super::report::KillReason;
use super::schedule::{jitter, lock, Config, Conn, Shared};
use super::upgrade::MAX_HTTP_HEAD;

fn shared_with(config: Config) -> Shared {
    Shared::new(config, SocketAddr::from(([127, 0, 0, 1], 9)))
}

fn frame(payload_len: usize, masked: bool) -> Vec<u8> {
    let mut f = vec![0x82];
    let m = if masked { 0x80 } else { 0 };
    if payload_len < 126 {
        f.push(m | payload_len as u8);
    } else if payload_len <= 0xffff {
        f.push(m | 126);
        f.extend_from_slice(&(payload_len as u16).to_be_bytes());
    } else {
        f.push(m | 127);
        f.extend_from_slice(&(payload_len as u64).to_be_bytes());
    }
    if masked {
        f.extend_from_slice(&[1, 2, 3, 4]);
    }
    f.extend((0..payload_len).map(|i| i as u8));
    f
}

/// Feed `stream` in chunks, returning (forwarded bytes, frames, kill).
fn run(
    side: Side,
    stream: &[u8],
    chunks: &mut dyn FnMut() -> usize,
    shared: &Shared,
    conn: &Conn,
) -> (Vec<u8>, u64, Option<KillReason>) {
    let mut parser = DirParser::new(side);
    let mut out = Vec::new();
    let mut frames = 0;
    let mut pos = 0;
    while pos < stream.len() {
        let n = chunks().clamp(1, stream.len() - pos);
        let plan = parser.plan(&stream[pos..pos + n], conn, shared);
        out.extend_from_slice(&plan.prefix[..plan.prefix_len]);
        out.extend_from_slice(&stream[pos..pos + plan.end]);
        frames += plan.frames;
        if plan.kill.is_some() {
            return (out, frames, plan.kill);
        }
        pos += n;
    }
    (out, frames, None)
}

const UPGRADE: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";

fn sample_stream() -> (Vec<u8>, usize) {
    let mut s = UPGRADE.to_vec();
    let sizes = [0, 1, 125, 126, 127, 300, 65535, 65536, 70000, 5];
    for (i, &n) in sizes.iter().enumerate() {
        s.extend(frame(n, i % 2 == 0));
    }
    (s, sizes.len())
}

#[test]
fn counts_frames_under_any_chunking() {
    let (stream, n_frames) = sample_stream();
    for chunk in [1usize, 2, 3, 7, 13, 14, 100, 4096, 1 << 20] {
        let shared = shared_with(Config::default());
        let conn = Conn::new(0, &shared.config);
        let (out, frames, kill) = run(Side::Server, &stream, &mut || chunk, &shared, &conn);
        assert_eq!(out, stream, "chunk {chunk}");
        assert_eq!(frames, n_frames as u64, "chunk {chunk}");
        assert_eq!(kill, None);
    }
}

#[test]
fn kill_drops_the_threshold_frame_only() {
    let (stream, _) = sample_stream();
    let mut rng = StdRng::seed_from_u64(1);
    for _ in 0..50 {
        let config = Config {
            kill_every_frames: Some(4),
            ..Config::default()
        };
        let shared = shared_with(config);
        let conn = Conn::new(3, &shared.config);
        let t = lock(&conn.schedule).frame_threshold.unwrap_or(0);
        assert!((2..=6).contains(&t));
        let (out, frames, kill) = run(
            Side::Server,
            &stream,
            &mut || rng.random_range(1..20_000),
            &shared,
            &conn,
        );
        assert_eq!(kill, Some(KillReason::FrameSchedule));
        assert_eq!(frames, t - 1);
        // Exactly the upgrade and the first t-1 frames were forwarded.
        let mut expect = UPGRADE.to_vec();
        let sizes = [0, 1, 125, 126, 127, 300, 65535, 65536, 70000, 5];
        for (i, &n) in sizes.iter().enumerate().take((t - 1) as usize) {
            expect.extend(frame(n, i % 2 == 0));
        }
        assert_eq!(out, expect);
    }
}

#[test]
fn non_upgrade_response_is_raw() {
    let shared = shared_with(Config {
        kill_every_frames: Some(1),
        ..Config::default()
    });
    let conn = Conn::new(0, &shared.config);
    let mut stream = b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec();
    stream.extend(frame(10, false));
    let (out, frames, kill) = run(Side::Server, &stream, &mut || 5, &shared, &conn);
    assert_eq!(out, stream);
    assert_eq!((frames, kill), (0, None));
}

#[test]
fn garbage_never_panics() {
    let mut rng = StdRng::seed_from_u64(42);
    for round in 0..300 {
        let shared = shared_with(Config {
            kill_probability: 0.01,
            kill_every_bytes: Some(5000),
            ..Config::default()
        });
        let conn = Conn::new(round, &shared.config);
        let len = rng.random_range(0..5000);
        let mut stream: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        if round % 2 == 0 {
            let mut s = b"GET / HTTP/1.1\r\n\r\n".to_vec();
            s.append(&mut stream);
            stream = s;
        }
        let side = if round % 3 == 0 {
            Side::Server
        } else {
            Side::Client
        };
        let (out, _, kill) = run(
            side,
            &stream,
            &mut || rng.random_range(1..64),
            &shared,
            &conn,
        );
        if kill.is_none() {
            // Everything but a trailing partial header was forwarded.
            assert!(stream.len() - out.len() < MAX_FRAME_HEADER);
        }
        assert!(stream.starts_with(&out));
    }
    // An endless HTTP head falls back to raw forwarding.
    let shared = shared_with(Config::default());
    let conn = Conn::new(0, &shared.config);
    let stream = vec![b'a'; MAX_HTTP_HEAD + 10];
    let (out, _, _) = run(Side::Client, &stream, &mut || 1000, &shared, &conn);
    assert_eq!(out, stream);
}

#[test]
fn jitter_stays_in_range() {
    for n in [1u64, 2, 3, 10, 1000, u64::MAX] {
        for r in [0, 1, u64::MAX / 2, u64::MAX] {
            let t = jitter(n, r);
            assert!(
                t >= (n / 2).max(1) && t <= n.saturating_add(n / 2),
                "{n} {r} {t}"
            );
        }
    }
    assert_eq!(jitter(10, 0), 5);
    assert_eq!(jitter(10, u64::MAX), 15);
}
