//! git's credential helper for plain git outside the workspace. See
//! `airlock_git_shim::credential`.

use airlock_git_shim::credential;
use airlock_git_shim::env::session_key;
use std::io::{Read, Write};

fn main() {
    let op = std::env::args().nth(1).unwrap_or_default();
    let mut input = String::new();
    let _ = std::io::stdin().take(64 * 1024).read_to_string(&mut input);
    if op != "get" {
        return;
    }
    let req = credential::parse(&input);
    let (Ok(key), Ok(session)) = (session_key(), std::env::var("AIRLOCK_SESSION")) else {
        return;
    };
    let password = airlock_wire::placeholder::placeholder(&key, &session);
    if let Some(a) = credential::answer(&req, &password) {
        let _ = std::io::stdout().write_all(a.as_bytes());
    }
}
