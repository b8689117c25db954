//! What a sandbox's branch brings back, judged for the operator: which paths run something
//! on the operator's machine without being asked, and how any path is shown on a terminal.

/// `bytes` for a terminal: printable text as it is, a backslash doubled, every control
/// character (C0, DEL, C1), every bidirectional override and isolate, and every byte that is
/// not UTF-8 written as an escape (`\n`, `\t`, `\x1b`, `\u{202e}`), so a name can neither move
/// the cursor, erase a line, nor reorder what is shown around it.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    out.push_str(&format!("\\x{:02x}", c as u32));
                }
                c if (0x80..0xa0).contains(&(c as u32)) || bidi(c) => {
                    out.push_str(&format!("\\u{{{:x}}}", c as u32));
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Bidirectional embeddings, overrides and isolates, and the marks that reorder text.
fn bidi(c: char) -> bool {
    matches!(c as u32, 0x200e | 0x200f | 0x061c | 0x202a..=0x202e | 0x2066..=0x2069)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_bidi_and_bad_bytes_are_escaped() {
        assert_eq!(escape(b"src/main.rs"), "src/main.rs");
        assert_eq!(escape("ci-\u{e9}.yml".as_bytes()), "ci-\u{e9}.yml");
        assert_eq!(
            escape(b"a\x1b[2K\x1b[1Ab\r\n\t\x7f"),
            "a\\x1b[2K\\x1b[1Ab\\r\\n\\t\\x7f"
        );
        assert_eq!(escape(b"x\\y"), "x\\\\y");
        assert_eq!(escape(b"\xff\xfe.vscode"), "\\xff\\xfe.vscode");
        assert_eq!(escape("\u{9b}2K".as_bytes()), "\\u{9b}2K");
        assert_eq!(escape("a\u{202e}txt.exe".as_bytes()), "a\\u{202e}txt.exe");
    }
}
