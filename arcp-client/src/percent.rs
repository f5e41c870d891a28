//! Percent-decoding of the `%XX` escapes in a URL's user info or query
//! (proxy credentials, PostgreSQL connection parameters).

/// `%XX` escapes decoded; anything else, a malformed escape included, kept
/// as it is.
pub(crate) fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Two hexadecimal digits exactly: `from_str_radix` would also take
        // a sign (`%+f`).
        let digit = |at: usize| bytes.get(at).and_then(|&b| (b as char).to_digit(16));
        let hex = digit(i + 1)
            .zip(digit(i + 2))
            .map(|(hi, lo)| (hi * 16 + lo) as u8);
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn escapes_are_decoded_and_malformed_ones_kept() {
        assert_eq!(percent_decode("us%3Aer%40x%2f"), b"us:er@x/");
        assert_eq!(percent_decode("a+b%20c"), b"a+b c");
        assert_eq!(percent_decode("%e2%82%ac"), "\u{20ac}".as_bytes());
        assert_eq!(percent_decode("%zz%4"), b"%zz%4");
        assert_eq!(percent_decode("100%"), b"100%");
        // Two hexadecimal digits, nothing else: no sign.
        assert_eq!(percent_decode("%+f%-1"), b"%+f%-1");
    }
}
