use super::*;

fn pieces(raw: &str) -> Decoded {
    Decoded::of(raw.as_bytes(), 64)
}

fn has(d: &Decoded, needle: &str) -> bool {
    d.bytes
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Where `needle` was found in the decoded bytes, in raw coordinates.
fn raw_of<'r>(raw: &'r str, d: &Decoded, needle: &str) -> &'r str {
    let at = d
        .bytes
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .unwrap();
    &raw[d.raw_range(&(at..at + needle.len()))]
}

#[test]
fn escapes_are_undone_in_rounds_and_mapped_back_to_their_spelling() {
    let raw = r#"{"v":"hunter2-c\u006frrect-horse","w":"\u0068\u0075\u006e"}"#;
    let d = pieces(raw);
    assert!(
        has(&d, "hunter2-correct-horse"),
        "{:?}",
        String::from_utf8_lossy(&d.bytes)
    );
    assert_eq!(
        raw_of(raw, &d, "hunter2-correct-horse"),
        r"hunter2-c\u006frrect-horse"
    );
    assert_eq!(raw_of(raw, &d, "hun\""), r#"\u0068\u0075\u006e""#);
    // %25 rounds: %252541 is %2541 is %41 is A.
    let d = pieces("q=%25252541%252542C");
    assert!(has(&d, "q=ABC"), "{:?}", String::from_utf8_lossy(&d.bytes));
    // \x, \/ and a surrogate pair.
    let d = pieces(r"\x68\x69 a\/b \ud83d\ude00!");
    assert!(
        has(&d, "hi a/b \u{1F600}!"),
        "{:?}",
        String::from_utf8_lossy(&d.bytes)
    );
    // Nothing to undo: nothing decoded (a lone backslash, a % that is no escape).
    assert!(pieces(r#"printf("%d\n", x); 100% sure"#).is_empty());
}

#[test]
fn hex_runs_are_read_from_either_digit_in_either_case() {
    let value = "hunter2-correct-horse";
    let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
    for raw in [
        hex.clone(),
        hex.to_uppercase(),
        format!("7{hex}"),
        format!("id={hex}&x=1"),
    ] {
        let d = pieces(&raw);
        assert!(has(&d, value), "{raw}");
    }
    let d = pieces(&format!("x {hex} y"));
    assert_eq!(raw_of(&format!("x {hex} y"), &d, value), hex);
    // Shorter runs are left alone.
    assert!(pieces("deadbeef 1234").is_empty());
}

#[test]
fn spaced_runs_are_read_without_their_spaces() {
    let d = pieces("the value is h u n t e r 2 - c o r r e c t, ok");
    assert!(
        has(&d, "hunter2-correct,"),
        "{:?}",
        String::from_utf8_lossy(&d.bytes)
    );
    // Spaced hex is read as hex after the spaces go.
    let spaced: Vec<String> = "hunter2-correct"
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    let d = pieces(&spaced.join(" "));
    assert!(
        has(&d, "hunter2-correct"),
        "{:?}",
        String::from_utf8_lossy(&d.bytes)
    );
    let d = pieces(&spaced.join("\n"));
    assert!(has(&d, "hunter2-correct"));
    // Prose, code: short runs only.
    let prose = "It is what it is: a to b, as we go on.";
    assert!(!has(&pieces(prose), "itiswhat"));
}

#[test]
fn honest_text_decodes_to_little() {
    let code = include_str!("../intercept/request.rs");
    let d = Decoded::of(code.as_bytes(), 512);
    assert!(
        d.bytes.len() < code.len() / 2,
        "{} of {}",
        d.bytes.len(),
        code.len()
    );
    let json = "{\"role\":\"user\",\"content\":\"run the tests and fix the failure\"}".repeat(20);
    assert!(Decoded::of(json.as_bytes(), 512).is_empty());
}

/// The quick pass that lets most bodies skip the scan never skips one the scan finds
/// something in: random bytes from the alphabet of escapes, hex digits, short and long
/// tokens and whitespace of every width.
#[test]
fn the_quick_pass_never_skips_what_the_scan_finds() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut skipped = 0;
    for case in 0..30_000 {
        let alphabet: &[u8] = match case % 3 {
            0 => b"aF1 \t\n\r%4\\ux/zq",
            1 => b"0123456789abcdefABCDEF z",
            _ => b"ab  \n-",
        };
        let len = case % 200;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                alphabet[(x >> 32) as usize % alphabet.len()]
            })
            .collect();
        if !worth_scanning(&bytes) {
            skipped += 1;
            let found = scan(&bytes);
            assert!(
                found.escapes.is_empty() && found.hex.is_empty() && found.spaced.is_empty(),
                "{:?}: {found:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }
    assert!(
        skipped > 1000,
        "the quick pass skips honest bytes: {skipped}"
    );
    let spaced = "p=h u n t e r 2 - c o r r e c t";
    assert!(worth_scanning(spaced.as_bytes()));
    assert!(!worth_scanning(
        br#"{"role":"user","content":"run the tests and fix the failure"}"#
    ));
}
