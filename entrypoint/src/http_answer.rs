//! A whole HTTP/1.1 answer the entrypoint read from the proxy (the readiness probe, a
//! second session's begin): its status and its body, cut at its `Content-Length`. Pure:
//! the callers read the bytes and word the failure for their own line.

/// Why an answer cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// The head, or the body its length announces, broke off.
    Incomplete,
    /// The head is not HTTP.
    NotHttp(httparse::Error),
    /// The head has no usable `Content-Length`.
    NoLength,
}

/// An answer's status and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer<'a> {
    /// The status code (0 when the head carried none).
    pub status: u16,
    /// The body, exactly as long as the head said.
    pub body: &'a [u8],
}

/// Reads the whole `answer`.
///
/// # Errors
/// [`Unread`]: what is wrong with it.
pub fn parse(answer: &[u8]) -> Result<Answer<'_>, Unread> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut head = httparse::Response::new(&mut headers);
    let start = match head.parse(answer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(Unread::Incomplete),
        Err(e) => return Err(Unread::NotHttp(e)),
    };
    let length = (head.headers.iter())
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .ok_or(Unread::NoLength)?;
    let body = (answer.get(start..))
        .and_then(|b| b.get(..length))
        .ok_or(Unread::Incomplete)?;
    Ok(Answer {
        status: head.code.unwrap_or_default(),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_its_status_and_the_body_its_length_says() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}trailing";
        assert_eq!(
            parse(ok),
            Ok(Answer {
                status: 200,
                body: b"{}"
            })
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}"),
            Err(Unread::Incomplete)
        );
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-"),
            Err(Unread::Incomplete)
        );
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n\r\n{}"), Err(Unread::NoLength));
        // A length past the address space is cut short, never an overflow.
        let huge = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{{}}",
            usize::MAX
        );
        assert_eq!(parse(huge.as_bytes()), Err(Unread::Incomplete));
        assert!(matches!(parse(b"SSH-2.0\r\n\r\n"), Err(Unread::NotHttp(_))));
    }
}
