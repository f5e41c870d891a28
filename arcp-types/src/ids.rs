//! Envelope ids, trace ids and timestamps in the forms real runtimes accept.
//!
//! The published Rust runtime (2.0.0) drops the connection on an envelope id
//! without the `msg_` prefix; the published Python runtime (1.1.3) requires a
//! ULID, a UUIDv7 or `prefix_ULID`. `msg_` + ULID satisfies both.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh envelope id: `msg_` followed by a ULID.
pub fn new_message_id() -> String {
    let mut id = String::with_capacity(4 + ulid::ULID_LEN);
    write_new_message_id(&mut id);
    id
}

/// Replaces `out`'s contents with a fresh envelope id, as
/// [`new_message_id`] makes: a sender that keeps one buffer allocates
/// nothing for it.
pub fn write_new_message_id(out: &mut String) {
    let mut buf = [0u8; ulid::ULID_LEN];
    out.clear();
    out.push_str("msg_");
    out.push_str(ulid::Ulid::new().array_to_str(&mut buf));
}

/// Replaces `id` with a fresh envelope id and `timestamp` with the current
/// time, both from one reading of the clock (the id's ULID carries the
/// same instant): what a sender stamps on each envelope, without reading
/// the clock twice.
pub fn write_new_message_id_and_timestamp(id: &mut String, timestamp: &mut String) {
    let now = SystemTime::now();
    let mut buf = [0u8; ulid::ULID_LEN];
    id.clear();
    id.push_str("msg_");
    id.push_str(ulid::Ulid::from_datetime(now).array_to_str(&mut buf));
    let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    timestamp.clear();
    write_rfc3339(
        timestamp,
        since_epoch.as_secs(),
        since_epoch.subsec_micros(),
    );
}

/// A fresh W3C trace id: 32 lowercase hex digits, never all zero.
pub fn new_trace_id() -> String {
    // UUIDv7 bits are time + randomness; hex of its 128 bits is never zero.
    let mut buf = uuid::Uuid::encode_buffer();
    uuid::Uuid::now_v7()
        .simple()
        .encode_lower(&mut buf)
        .to_owned()
}

/// Whether `s` is a valid W3C trace id (32 lowercase hex digits, not all zero).
pub fn is_trace_id(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && s.bytes().any(|b| b != b'0')
}

/// Whether `id` is accepted as an envelope id by both published runtimes:
/// a ULID, a UUID, or `prefix_ULID`, and (for the legacy dialect) `msg_`-prefixed.
pub fn is_message_id(id: &str, legacy: bool) -> bool {
    let ulid_part = match id.rsplit_once('_') {
        Some((prefix, rest)) if !prefix.is_empty() => rest,
        _ => id,
    };
    let shape_ok = ulid::Ulid::from_string(ulid_part).is_ok() || uuid::Uuid::parse_str(id).is_ok();
    shape_ok && (!legacy || id.starts_with("msg_"))
}

/// The current time as RFC 3339 UTC with microseconds, e.g.
/// `2026-11-22T10:21:04.466508Z`.
pub fn now_rfc3339() -> String {
    let mut out = String::with_capacity(27);
    write_now_rfc3339(&mut out);
    out
}

/// Replaces `out`'s contents with the current time as [`now_rfc3339`]
/// formats it: a sender that keeps one buffer allocates nothing per message.
pub fn write_now_rfc3339(out: &mut String) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    out.clear();
    write_rfc3339(out, now.as_secs(), now.subsec_micros());
}

/// Formats seconds since the Unix epoch (plus microseconds) as RFC 3339 UTC.
pub fn format_rfc3339(secs: u64, micros: u32) -> String {
    let mut out = String::with_capacity(27);
    write_rfc3339(&mut out, secs, micros);
    out
}

/// Appends the RFC 3339 form of a time to `out`.
fn write_rfc3339(out: &mut String, secs: u64, micros: u32) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    // Digits written by hand: this runs for every envelope sent.
    if (0..=9999).contains(&y) {
        digits(out, y as u64, 4);
    } else {
        let _ = write!(out, "{y:04}");
    }
    out.push('-');
    digits(out, u64::from(m), 2);
    out.push('-');
    digits(out, u64::from(d), 2);
    out.push('T');
    digits(out, rem / 3600, 2);
    out.push(':');
    digits(out, (rem / 60) % 60, 2);
    out.push(':');
    digits(out, rem % 60, 2);
    out.push('.');
    digits(out, u64::from(micros.min(999_999)), 6);
    out.push('Z');
}

/// Appends `n` as exactly `width` decimal digits (`n < 10^width`).
fn digits(out: &mut String, n: u64, width: u32) {
    let mut div = 10u64.pow(width - 1);
    while div > 0 {
        out.push(char::from(b'0' + ((n / div) % 10) as u8));
        div /= 10;
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_satisfy_both_runtimes() {
        let id = new_message_id();
        assert!(id.starts_with("msg_"));
        assert!(is_message_id(&id, true));
        assert!(is_message_id(&id, false));
        assert!(!is_message_id("not-a-msg-id", false));
        assert!(!is_message_id("01M81BT91MAJGNR4A5M2292MWQ", true));
        assert!(is_message_id("01M81BT91MAJGNR4A5M2292MWQ", false));
    }

    #[test]
    fn an_id_and_timestamp_stamped_together_name_one_instant() {
        let (mut id, mut timestamp) = (String::from("stale"), String::from("stale"));
        let before = SystemTime::now();
        write_new_message_id_and_timestamp(&mut id, &mut timestamp);
        let after = SystemTime::now();
        assert!(is_message_id(&id, true), "{id}");
        let ulid_ms = ulid::Ulid::from_string(&id["msg_".len()..])
            .expect("a ULID after the prefix")
            .timestamp_ms();
        // The timestamp's milliseconds are the ULID's: one clock reading.
        let stamped = |at: SystemTime| {
            let d = at.duration_since(UNIX_EPOCH).unwrap();
            format_rfc3339(d.as_secs(), d.subsec_micros())
        };
        let ms_of = |text: &str| text[..23].to_owned();
        let ulid_time = UNIX_EPOCH + std::time::Duration::from_millis(ulid_ms);
        assert_eq!(
            ms_of(&timestamp),
            ms_of(&stamped(ulid_time)),
            "{timestamp} vs {id}"
        );
        assert!(stamped(before) <= timestamp && timestamp <= stamped(after));
        // Fresh each time.
        let first = id.clone();
        write_new_message_id_and_timestamp(&mut id, &mut timestamp);
        assert_ne!(id, first);
    }

    #[test]
    fn trace_ids_are_32_lowercase_hex() {
        let t = new_trace_id();
        assert!(is_trace_id(&t), "{t}");
        assert_ne!(t, new_trace_id());
        assert!(!is_trace_id(&"0".repeat(32)));
        assert!(!is_trace_id("ABCDEF0123456789ABCDEF0123456789"));
    }

    #[test]
    fn rfc3339_formatting() {
        assert_eq!(format_rfc3339(0, 0), "1970-01-01T00:00:00.000000Z");
        // 2026-11-22T10:21:04.466508Z
        assert_eq!(
            format_rfc3339(1_795_342_864, 466_508),
            "2026-11-22T10:21:04.466508Z"
        );
        assert_eq!(
            format_rfc3339(951_782_400, 1),
            "2000-02-29T00:00:00.000001Z"
        );
        assert_eq!(
            format_rfc3339(253_402_300_799, 999_999),
            "9999-12-31T23:59:59.999999Z"
        );
    }
}
