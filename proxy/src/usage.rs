//! LLM token usage, read from the providers' own usage fields in their answers: the
//! Anthropic Messages API (a response's `usage`; a stream's `message_start` and
//! `message_delta` events) and the OpenAI Responses and Chat Completions APIs (a response's
//! `usage`; a stream's `response.completed` event or its final usage chunk).
//!
//! Pure: [`Usage::feed`] sees the answer's bytes as they pass and holds none of them back
//! (it keeps only a partial line, or a bounded copy of a JSON answer); the caller sends
//! every byte on at once. What it does not read: an answer in a coding it was not given
//! decoded, a line or JSON answer past its bounds (counted as zero, and said so).

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde_json::Value;

/// The key every usage-bearing event carries (built once: a search per line).
static USAGE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));

/// Longest event line kept whole while it arrives.
pub const MAX_LINE: usize = 256 * 1024;
/// Largest JSON answer kept to be read at its end.
pub const MAX_JSON: usize = 4 * 1024 * 1024;

/// Tokens one answer used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Input tokens (cache writes and reads included).
    pub input: u64,
    pub output: u64,
}

impl Tokens {
    /// Both together.
    #[must_use]
    pub const fn total(self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// The reading of one answer.
#[derive(Debug)]
pub struct Usage {
    sse: bool,
    buf: Vec<u8>,
    /// A line or answer past its bound was skipped.
    pub overflowed: bool,
    seen: Tokens,
}

impl Usage {
    /// An answer whose `Content-Type` is `content_type`.
    #[must_use]
    pub fn new(content_type: Option<&str>) -> Self {
        let sse = content_type.is_some_and(|c| c.starts_with("text/event-stream"));
        Self {
            sse,
            buf: Vec::new(),
            overflowed: false,
            seen: Tokens::default(),
        }
    }

    /// The next bytes of the answer.
    pub fn feed(&mut self, bytes: &[u8]) {
        if !self.sse {
            if self.buf.len() + bytes.len() > MAX_JSON {
                self.overflowed = true;
                self.buf = Vec::new();
            } else if !self.overflowed {
                self.buf.extend_from_slice(bytes);
            }
            return;
        }
        let mut rest = bytes;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            if self.buf.is_empty() {
                self.line(&rest[..i]);
            } else {
                self.buf.extend_from_slice(&rest[..i]);
                let line = std::mem::take(&mut self.buf);
                self.line(&line);
            }
            rest = &rest[i + 1..];
        }
        if self.buf.len() + rest.len() > MAX_LINE {
            self.overflowed = true;
            self.buf.clear();
        } else {
            self.buf.extend_from_slice(rest);
        }
    }

    /// The tokens the answer reported, once it ended.
    #[must_use]
    pub fn finish(mut self) -> Tokens {
        if self.sse {
            let line = std::mem::take(&mut self.buf);
            self.line(&line);
        } else if let Ok(v) = serde_json::from_slice::<Value>(&self.buf) {
            self.event(&v);
        }
        self.seen
    }

    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        // Only events that carry usage are parsed: a stream's text deltas are not.
        if USAGE_KEY.find(data).is_none() {
            return;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(data.trim_ascii()) {
            self.event(&v);
        }
    }

    /// Usage wherever the providers put it: at the top (a response; a Chat Completions
    /// chunk; Anthropic's `message_delta`), in `message` (Anthropic's `message_start`) or
    /// in `response` (the Responses API's `response.completed`). A stream reports running
    /// totals: the largest seen counts.
    fn event(&mut self, v: &Value) {
        for usage in [&v["usage"], &v["message"]["usage"], &v["response"]["usage"]] {
            if !usage.is_object() {
                continue;
            }
            let n = |k: &str| usage[k].as_u64().unwrap_or(0);
            let input = n("input_tokens")
                + n("prompt_tokens")
                + n("cache_creation_input_tokens")
                + n("cache_read_input_tokens");
            let output = n("output_tokens") + n("completion_tokens");
            self.seen.input = self.seen.input.max(input);
            self.seen.output = self.seen.output.max(output);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(content_type: &str, chunks: &[&str]) -> Tokens {
        let mut u = Usage::new(Some(content_type));
        for c in chunks {
            u.feed(c.as_bytes());
        }
        u.finish()
    }

    #[test]
    fn anthropic_messages_whole_and_streamed() {
        let whole = r#"{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":0,"output_tokens":7}}"#;
        // Split anywhere: the JSON is read at its end.
        let (a, b) = whole.split_at(40);
        assert_eq!(
            read("application/json", &[a, b]),
            Tokens {
                input: 112,
                output: 7
            }
        );
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        // Byte by byte: lines are joined across chunks.
        let bytes: Vec<String> = stream.chars().map(String::from).collect();
        let chunks: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(
            read("text/event-stream; charset=utf-8", &chunks),
            Tokens {
                input: 25,
                output: 15
            }
        );
    }

    #[test]
    fn openai_chat_completions_and_responses() {
        let chat = r#"{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":30,"completion_tokens":9,"total_tokens":39}}"#;
        assert_eq!(
            read("application/json", &[chat]),
            Tokens {
                input: 30,
                output: 9
            }
        );
        let chat_stream = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":31,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n";
        assert_eq!(
            read("text/event-stream", &[chat_stream]),
            Tokens {
                input: 31,
                output: 4
            }
        );
        let responses = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":40,\"output_tokens\":11,\"total_tokens\":51}}}\n\n";
        assert_eq!(
            read("text/event-stream", &[responses]),
            Tokens {
                input: 40,
                output: 11
            }
        );
        let whole =
            r#"{"id":"r","object":"response","usage":{"input_tokens":41,"output_tokens":12}}"#;
        assert_eq!(
            read("application/json", &[whole]),
            Tokens {
                input: 41,
                output: 12
            }
        );
    }

    #[test]
    fn what_cannot_be_read_counts_nothing_and_says_so() {
        let mut u = Usage::new(Some("text/event-stream"));
        u.feed(&vec![b'x'; MAX_LINE + 1]);
        assert!(u.overflowed);
        assert_eq!(u.finish(), Tokens::default());
        assert_eq!(read("application/json", &["not json"]), Tokens::default());
        assert_eq!(
            read("text/event-stream", &["data: {\"usage\": garbage\n"]),
            Tokens::default()
        );
    }
}
