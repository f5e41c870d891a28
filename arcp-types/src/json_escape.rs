//! Which bytes of a JSON string need escaping: the check that lets the
//! encoder copy plain strings as they are and the header scanner borrow
//! them.

/// The string whose contents start at byte `start` of `text` (just past
/// its opening quote), when it ends at the next special byte (a closing
/// quote: no escape, no control character), borrowed; and where the text
/// goes on after its closing quote. What both readers that borrow strings
/// from a frame (the header scanner, the outcome readers' walk) take.
pub(crate) fn plain_string_at(text: &str, start: usize) -> Option<(&str, usize)> {
    let bytes = text.as_bytes();
    let len = first_special(bytes.get(start..)?)?;
    if bytes[start + len] != b'"' {
        return None;
    }
    // Both ends sit on ASCII bytes of valid UTF-8: char boundaries.
    Some((text.get(start..start + len)?, start + len + 1))
}

/// The position of the first byte that ends or escapes a JSON string, or
/// must be escaped in one: `"`, `\\` or a control character.
///
/// Eight bytes at a time: the classic zero-byte test (`(v - 0x01..) & !v &
/// 0x80..`) is exact for the lowest flagged byte, which is all this needs.
pub(crate) fn first_special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let flagged = |word: [u8; 8]| {
        let v = u64::from_le_bytes(word);
        zero_in(v ^ (ONES * u64::from(b'"')))
            | zero_in(v ^ (ONES * u64::from(b'\\')))
            // Bytes below 0x20: the same test against 0x20 instead of 0x01.
            | (v.wrapping_sub(ONES * 0x20) & !v & HIGHS)
    };
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let found = flagged(word);
        if found != 0 {
            return Some(at + found.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    // The last few bytes as one word too, padded with a byte that is never
    // flagged (most strings end here: ids and timestamps are short).
    let rest = chunks.remainder();
    let mut word = [b'a'; 8];
    word[..rest.len()].copy_from_slice(rest);
    let found = flagged(word);
    (found != 0).then(|| at + found.trailing_zeros() as usize / 8)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Eight at a time finds what one at a time finds.
        #[test]
        fn first_special_is_the_first_one(bytes in proptest::collection::vec(
            prop_oneof![4 => 0x20u8..=0xff, 1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20],
            0..40,
        )) {
            let want = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
            prop_assert_eq!(first_special(&bytes), want);
        }
    }
}
