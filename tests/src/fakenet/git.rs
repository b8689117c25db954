//! fakenet's git smart-HTTP server: requests to the configured host (github.com in a World)
//! whose path is a smart-HTTP path are answered by `git http-backend` run as a CGI on bare
//! repositories under [`GitHttp::root`] (`<owner>/<repo>.git`).
//!
//! Like GitHub, a push needs the token: `info/refs?service=git-receive-pack` and
//! `git-receive-pack` without `Authorization: Basic base64("x-access-token:" + token)` get
//! `401`; a fetch may be anonymous, but a wrong credential is also `401`. The upstream is
//! otherwise permissive (force pushes and deletions are accepted), so every refusal a test
//! sees comes from airlock. The repositories' hooks (written by the harness) log every ref
//! update that reaches them.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// What fakenet serves as git.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GitHttp {
    /// Directory of bare repositories, `<owner>/<repo>.git`.
    pub root: PathBuf,
    /// The host (Host header without port) served as git.
    pub host: String,
    /// The token a push must carry as the basic-auth password of `x-access-token`.
    pub token: String,
}

static GIT: OnceLock<GitHttp> = OnceLock::new();

/// Serve `config` as git from now on (called once by [`super::run`]).
pub fn install(config: GitHttp) {
    let _ = GIT.set(config);
}

/// A smart-HTTP request this server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `PATH_INFO` for http-backend (`/<owner>/<repo>.git/<rest>`).
    pub path_info: String,
    /// The request is (part of) a push.
    pub push: bool,
}

/// Whether `host`/`path`/`query` is a smart-HTTP request to the git host.
#[must_use]
pub fn route(host: Option<&str>, path: &str, query: &str) -> Option<(Route, &'static GitHttp)> {
    let git = GIT.get()?;
    let host = host?.rsplit_once(':').map_or(host?, |(h, _)| h);
    if !host.eq_ignore_ascii_case(&git.host) {
        return None;
    }
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(3, '/').collect();
    let [owner, repo, rest] = parts.as_slice() else {
        return None;
    };
    let push = match *rest {
        "info/refs" => match query {
            "service=git-receive-pack" => true,
            "service=git-upload-pack" => false,
            _ => return None,
        },
        "git-receive-pack" => true,
        "git-upload-pack" => false,
        _ => return None,
    };
    let ok = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    if !ok(owner) || !ok(repo) {
        return None;
    }
    Some((
        Route {
            path_info: format!("/{owner}/{repo}.git/{rest}"),
            push,
        },
        git,
    ))
}

/// A CGI answer: status, headers, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

fn unauthorized() -> Answer {
    Answer {
        status: 401,
        headers: vec![
            ("www-authenticate".into(), "Basic realm=\"GitHub\"".into()),
            ("content-type".into(), "text/plain".into()),
        ],
        body: b"fakenet git: authentication required\n".to_vec(),
    }
}

/// The request's facts http-backend needs.
#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    pub query: &'a str,
    pub content_type: Option<&'a str>,
    pub content_encoding: Option<&'a str>,
    pub git_protocol: Option<&'a str>,
    pub authorization: Option<&'a str>,
    pub remote_addr: String,
    pub body: Vec<u8>,
}

/// Run `git http-backend` for `req` (blocking).
#[must_use]
pub fn serve(git: &GitHttp, route: &Route, req: &Request<'_>) -> Answer {
    let want = format!(
        "Basic {}",
        base64(format!("x-access-token:{}", git.token).as_bytes())
    );
    let authorized = match req.authorization {
        Some(a) if a == want => true,
        Some(_) => return unauthorized(),
        None => false,
    };
    if route.push && !authorized {
        return unauthorized();
    }
    let mut cmd = Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &git.root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_PROJECT_ROOT", &git.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", &route.path_info)
        .env("QUERY_STRING", req.query)
        .env("REQUEST_METHOD", req.method)
        .env("REMOTE_ADDR", &req.remote_addr)
        .env("CONTENT_LENGTH", req.body.len().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if authorized {
        cmd.env("REMOTE_USER", "x-access-token");
    }
    if let Some(v) = req.content_type {
        cmd.env("CONTENT_TYPE", v);
    }
    if let Some(v) = req.content_encoding {
        cmd.env("HTTP_CONTENT_ENCODING", v);
    }
    if let Some(v) = req.git_protocol {
        cmd.env("GIT_PROTOCOL", v);
    }
    let out = cmd.spawn().and_then(|mut child| {
        if let Some(mut stdin) = child.stdin.take() {
            // http-backend may answer before reading everything (an error): ignore EPIPE.
            let _ = stdin.write_all(&req.body);
        }
        child.wait_with_output()
    });
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return Answer {
                status: 500,
                headers: vec![],
                body: format!("fakenet git: running git http-backend: {e}\n").into_bytes(),
            };
        }
    };
    parse_cgi(&out.stdout).unwrap_or_else(|| Answer {
        status: 500,
        headers: vec![],
        body: [b"fakenet git: bad CGI output: ".as_slice(), &out.stderr].concat(),
    })
}

/// Split CGI output into status, headers and body.
fn parse_cgi(out: &[u8]) -> Option<Answer> {
    let (head, body) = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (&out[..i], &out[i + 4..]))
        .or_else(|| {
            out.windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (&out[..i], &out[i + 2..]))
        })?;
    let head = String::from_utf8_lossy(head);
    let mut status = 200;
    let mut headers = Vec::new();
    for line in head.lines() {
        let (k, v) = line.split_once(':')?;
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
        if k == "status" {
            status = v.split_whitespace().next()?.parse().ok()?;
        } else {
            headers.push((k, v));
        }
    }
    Some(Answer {
        status,
        headers,
        body: body.to_vec(),
    })
}

/// Standard base64 with padding.
#[must_use]
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(T[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn cgi_output_is_split() {
        let a =
            parse_cgi(b"Status: 404 Not Found\r\nContent-Type: text/plain\r\n\r\nnope").unwrap();
        assert_eq!(a.status, 404);
        assert_eq!(
            a.headers,
            vec![("content-type".into(), "text/plain".into())]
        );
        assert_eq!(a.body, b"nope");
        assert_eq!(parse_cgi(b"Expires: x\n\nbody").unwrap().status, 200);
    }
}
