//! `airlock-fakenet CONFIG.json`: the fake internet's servers, started by the test harness
//! inside a World's upstream namespace. Prints `ready` on stdout once every listener is
//! bound; serves until killed. See `airlock_tests::fakenet` for what it serves and logs.

use std::io::Write as _;

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let path = std::env::args_os()
        .nth(1)
        .context("usage: airlock-fakenet CONFIG.json")?;
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.to_string_lossy()))?;
    let config: airlock_tests::fakenet::Config = serde_json::from_str(&text)
        .with_context(|| format!("parsing {}", path.to_string_lossy()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(airlock_tests::fakenet::run(config, || {
        let mut out = std::io::stdout().lock();
        // The harness waits for this line; if stdout is gone there is nobody to tell.
        let _ = writeln!(out, "ready");
        let _ = out.flush();
    }))
}
