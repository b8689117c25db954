//! `airlock-bench usage`: what reading an LLM API's answer for its token usage adds to each
//! frame the agent receives (`airlock_proxy::usage`, the tap every frame of such an answer
//! passes through before it goes on). The same frames are passed twice in one run, without
//! and with the reading, and the difference per frame is printed: the delay the reading adds
//! to a streamed byte.

use std::hint::black_box;
use std::time::Instant;

use airlock_proxy::usage::Usage;

/// An Anthropic Messages stream of `deltas` text deltas, as the API sends it.
fn stream(deltas: usize) -> Vec<u8> {
    let mut s = String::from(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":2500,\"output_tokens\":1}}}\n\n",
    );
    for i in 0..deltas {
        s.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word {i} of the answer, \"}}}}\n\n"
        ));
    }
    s.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":900}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s.into_bytes()
}

/// Nanoseconds per frame to pass `frames` `rounds` times, reading them (`read`) or not.
fn per_frame(frames: &[&[u8]], rounds: usize, read: bool) -> f64 {
    let start = Instant::now();
    for _ in 0..rounds {
        let mut usage = read.then(|| Usage::new(Some("text/event-stream")));
        let mut passed = 0usize;
        for f in frames {
            if let Some(u) = usage.as_mut() {
                u.feed(f);
            }
            passed += black_box(f).len();
        }
        black_box(passed);
        if let Some(u) = usage {
            black_box(u.finish());
        }
    }
    start.elapsed().as_nanos() as f64 / (rounds * frames.len()) as f64
}

/// Prints the table: per frame size, ns per frame without and with the reading.
pub fn run(rounds: usize) {
    let body = stream(2000);
    println!(
        "| frame | frames | without (ns/frame) | with usage read (ns/frame) | added (ns/frame) | added per MiB (µs) |"
    );
    println!("|---|---|---|---|---|---|");
    for size in [64usize, 1024, 16 * 1024] {
        let frames: Vec<&[u8]> = body.chunks(size).collect();
        // One warm-up of each, then the measured rounds.
        per_frame(&frames, 1, false);
        per_frame(&frames, 1, true);
        let without = per_frame(&frames, rounds, false);
        let with = per_frame(&frames, rounds, true);
        let added = with - without;
        let per_mib = added * (1024.0 * 1024.0 / size as f64) / 1000.0;
        println!(
            "| {size} B | {} | {without:.0} | {with:.0} | {added:.0} | {per_mib:.0} |",
            frames.len()
        );
    }
}
