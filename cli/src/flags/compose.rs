//! `compose.yaml` service text for a [`RunSpec`]: the same container as `docker run` with
//! [`RunSpec::docker_args`], in Compose's keys.

use super::RunSpec;
use std::fmt::Write as _;

/// One Compose service named `service` (YAML text, two-space indented under `services:`),
/// followed by the top-level `volumes:` for every named volume it uses.
pub fn render(spec: &RunSpec, service: &str) -> String {
    let mut y = String::new();
    let _ = writeln!(y, "services:");
    let _ = writeln!(y, "  {service}:");
    let _ = writeln!(y, "    image: {}", spec.image);
    let _ = writeln!(y, "    cap_drop: [ALL]");
    let _ = writeln!(y, "    cap_add: [{}]", spec.cap_add.join(", "));
    if spec.no_new_privileges {
        let _ = writeln!(y, "    security_opt: [\"no-new-privileges:true\"]");
    }
    let _ = writeln!(y, "    read_only: {}", spec.read_only);
    let _ = writeln!(y, "    tmpfs:");
    for t in &spec.tmpfs {
        let _ = writeln!(y, "      - {}:{}", t.target, t.options);
    }
    let _ = writeln!(y, "    pids_limit: {}", spec.pids_limit);
    let _ = writeln!(y, "    mem_limit: {}", spec.memory);
    let _ = writeln!(y, "    cpus: {}", spec.cpus);
    let _ = writeln!(y, "    stdin_open: {}", spec.tty);
    let _ = writeln!(y, "    tty: {}", spec.tty);
    if !spec.env.is_empty() {
        let _ = writeln!(y, "    environment:");
        for (k, v) in &spec.env {
            let _ = writeln!(y, "      - {k}={v}");
        }
    }
    if !spec.labels.is_empty() {
        let _ = writeln!(y, "    labels:");
        for (k, v) in &spec.labels {
            let _ = writeln!(y, "      - {k}={v}");
        }
    }
    let _ = writeln!(y, "    volumes:");
    for m in &spec.mounts {
        let _ = writeln!(y, "      - {}", m.bind_spec());
    }
    let volumes: Vec<&str> = spec
        .mounts
        .iter()
        .filter_map(|m| match &m.source {
            super::Source::Volume(v) => Some(v.as_str()),
            super::Source::Host(_) => None,
        })
        .collect();
    if !volumes.is_empty() {
        let _ = writeln!(y, "\nvolumes:");
        for v in volumes {
            let _ = writeln!(y, "  {v}:");
        }
    }
    y
}
