//! The trace id a W3C `traceparent` header carries
//! ([`InvokeBuilder::traceparent`](crate::InvokeBuilder::traceparent)).

/// The trace id of a W3C `traceparent` header (version 00, or a later
/// version read as 00 as the recommendation asks), if well formed.
pub(super) fn trace_id_of_traceparent(header: &str) -> Option<&str> {
    let mut parts = header.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
    let valid = hex(version, 2)
        && version != "ff"
        && (version != "00" || parts.next().is_none())
        && hex(trace, 32)
        && nonzero(trace)
        && hex(parent, 16)
        && nonzero(parent)
        && hex(flags, 2);
    valid.then_some(trace)
}

#[cfg(test)]
mod tests {
    use super::trace_id_of_traceparent as parse;

    #[test]
    fn the_trace_id_of_a_w3c_traceparent() {
        assert_eq!(
            parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        // A later version may append fields.
        assert_eq!(
            parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more"),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-é-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
