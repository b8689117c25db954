//! Running the real git: one place builds every git command the server starts, with a
//! cleared environment and the protected configuration, never through a shell.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where and how git runs. Built once from the command line.
#[derive(Debug, Clone)]
pub struct GitEnv {
    /// The real git binary.
    pub git: PathBuf,
    /// The hidden git dir.
    pub git_dir: PathBuf,
    /// The workspace (canonical).
    pub work_tree: PathBuf,
    /// An empty directory used as `HOME`.
    pub home: PathBuf,
    /// The proxy's service port URL (`http.proxy`).
    pub proxy_url: String,
    /// CA bundle for the proxy's interception (`http.sslCAInfo`).
    pub ca_file: Option<PathBuf>,
    /// The CA directory (`http.sslCAPath`): an empty one, so git trusts exactly `ca_file`.
    /// Unset, Debian's libcurl-gnutls reads and parses every file of `/etc/ssl/certs` on
    /// each HTTPS connection (~20-30 ms per fetch or push) for roots the proxy never shows.
    pub ca_dir: Option<PathBuf>,
    /// Test only (debug builds): repository id → local bare repository used instead of
    /// the https URL. Always empty in release builds.
    pub test_upstreams: Vec<(String, PathBuf)>,
    /// git's system configuration layer: the operator's default commit identity
    /// ([`crate::identity`]); `None` reads no system configuration at all.
    pub system_config: Option<PathBuf>,
}

/// Configuration every git the server runs gets on its command line (which wins over the
/// repository's own config). See docs/design.md §5.
const PROTECTED: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.editor=false",
    "core.sshCommand=false",
    "core.askPass=",
    "credential.helper=",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no",
    "push.followTags=false",
    "protocol.allow=never",
    "protocol.https.allow=always",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "tag.forceSignAnnotated=false",
    "push.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "sequence.editor=false",
    "diff.external=",
    "merge.tool=",
    "diff.tool=",
];

/// The configuration key of an HTTP header git sends with every request. Its values carry
/// the git service port's ticket (a credential): [`GitEnv::command`] gives them to git
/// through its environment (`GIT_CONFIG_COUNT`, `GIT_CONFIG_KEY_<n>`, `GIT_CONFIG_VALUE_<n>`),
/// never on its command line. Any process may read another's argv (`/proc/<pid>/cmdline`);
/// only one allowed to trace it reads its environment, and the git API's git, started with
/// a real and an effective uid that differ, is not dumpable, so nobody but root may.
pub const HEADER_KEY: &str = "http.extraHeader";

/// Environment variables of the git the server runs (besides those listed in the wire's
/// `PASSED_ENV` that the agent sent).
fn base_env(env: &GitEnv) -> BTreeMap<&'static str, OsString> {
    let mut m = BTreeMap::new();
    m.insert("PATH", OsString::from("/usr/bin:/bin"));
    m.insert("HOME", env.home.clone().into_os_string());
    match &env.system_config {
        Some(path) => m.insert("GIT_CONFIG_SYSTEM", path.clone().into_os_string()),
        None => m.insert("GIT_CONFIG_NOSYSTEM", "1".into()),
    };
    m.insert("GIT_CONFIG_GLOBAL", "/dev/null".into());
    m.insert("GIT_TERMINAL_PROMPT", "0".into());
    m.insert("GIT_EDITOR", "false".into());
    m.insert("GIT_SEQUENCE_EDITOR", "false".into());
    m.insert("GIT_PAGER", "cat".into());
    m.insert("PAGER", "cat".into());
    m.insert("TERM", "dumb".into());
    // Belt and braces with the argv policy: git itself refuses abbreviated long options.
    m.insert("GIT_TEST_DISALLOW_ABBREVIATED_OPTIONS", "true".into());
    // The protocol allowlist as an environment variable overrides any configuration.
    let protocols = if env.test_upstreams.is_empty() {
        "https"
    } else {
        "https:file"
    };
    m.insert("GIT_ALLOW_PROTOCOL", protocols.into());
    m
}

impl GitEnv {
    /// A git command with the protected configuration; `args` follow the global options.
    /// `cwd` must already be checked to be inside the work tree.
    #[must_use]
    pub fn command(
        &self,
        cwd: &Path,
        passed_env: &BTreeMap<String, String>,
        extra_config: &[String],
        args: &[String],
    ) -> Command {
        let mut cmd = Command::new(&self.git);
        cmd.env_clear();
        cmd.envs(base_env(self));
        for (k, v) in passed_env {
            cmd.env(k, v);
        }
        cmd.current_dir(cwd);
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(&self.git_dir);
        let mut work_tree = OsString::from("--work-tree=");
        work_tree.push(&self.work_tree);
        cmd.arg(git_dir).arg(work_tree);
        let mut config: Vec<String> = PROTECTED.iter().map(|s| (*s).to_owned()).collect();
        let mut in_env: Vec<(&str, &str)> = Vec::new();
        config.push(format!("http.proxy={}", self.proxy_url));
        if let Some(ca) = &self.ca_file {
            config.push(format!("http.sslCAInfo={}", ca.display()));
        }
        if let Some(dir) = &self.ca_dir {
            config.push(format!("http.sslCAPath={}", dir.display()));
        }
        config.push(format!("safe.directory={}", self.git_dir.display()));
        config.push(format!("safe.directory={}", self.work_tree.display()));
        for (id, path) in &self.test_upstreams {
            // Rewrites the https URL of `id` to the local bare repository (tests only).
            config.push(format!(
                "url.file://{}.insteadOf=https://{id}.git",
                path.display()
            ));
            config.push(format!(
                "url.file://{}.insteadOf=https://{id}",
                path.display()
            ));
        }
        for c in extra_config {
            match c.split_once('=') {
                Some((key, value)) if key.eq_ignore_ascii_case(HEADER_KEY) => {
                    in_env.push((key, value));
                }
                _ => config.push(c.clone()),
            }
        }
        for c in config {
            cmd.arg("-c").arg(c);
        }
        // After the agent's variables (none of which is git's configuration): ours win.
        cmd.env("GIT_CONFIG_COUNT", in_env.len().to_string());
        for (i, (key, value)) in in_env.iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), key);
            cmd.env(format!("GIT_CONFIG_VALUE_{i}"), value);
        }
        cmd.args(args);
        cmd
    }

    /// `url.<https>.insteadOf=<url>`: git talks HTTPS to the SSH URL `url` of the authorized
    /// repository `id` (the sandbox has no SSH). In test builds with a local stand-in for
    /// `id`, the rewrite goes straight to it (rewrites do not chain).
    #[must_use]
    pub fn rewrite(&self, url: &str, https: &str, id: &str) -> String {
        match self.test_upstreams.iter().find(|(i, _)| i == id) {
            Some((_, path)) => format!("url.file://{}.insteadOf={url}", path.display()),
            None => format!("url.{https}.insteadOf={url}"),
        }
    }

    /// Run a git query to completion (no stdin) and return its stdout, or the error with
    /// its stderr. Used by the push resolution; never sees agent-controlled options.
    pub fn query(&self, args: &[&str]) -> io::Result<Query> {
        self.query_with(&[], args)
    }

    /// [`GitEnv::query`] with extra configuration (the server's own, never the agent's).
    pub fn query_with(&self, config: &[String], args: &[&str]) -> io::Result<Query> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let out = self
            .command(&self.work_tree, &BTreeMap::new(), config, &args)
            .env("GIT_OPTIONAL_LOCKS", "0")
            .stdin(Stdio::null())
            .output()?;
        Ok(Query {
            ok: out.status.success(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// A finished query.
#[derive(Debug, Clone)]
pub struct Query {
    /// Exit status 0.
    pub ok: bool,
    /// The exit code.
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Query {
    /// The first line of stdout, trimmed, if the query succeeded.
    #[must_use]
    pub fn line(&self) -> Option<String> {
        if !self.ok {
            return None;
        }
        let l = self.stdout.lines().next()?.trim();
        (!l.is_empty()).then(|| l.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An HTTP header given to git (the service port's ticket) reaches git's configuration
    /// through the environment and is on no command line; the rest stays `-c`.
    #[test]
    fn a_header_goes_to_gits_environment_never_its_argv() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("w");
        let status = Command::new("git")
            .args(["init", "-q"])
            .arg(&work)
            .status()
            .unwrap();
        assert!(status.success(), "git init");
        let env = GitEnv {
            git: PathBuf::from("git"),
            git_dir: work.join(".git"),
            work_tree: work.clone(),
            home: tmp.path().join("home"),
            proxy_url: "http://127.0.0.1:1".to_owned(),
            ca_file: None,
            ca_dir: None,
            test_upstreams: Vec::new(),
            system_config: None,
        };
        let config = [
            "http.extraHeader=x-airlock-ticket: v1.secret.mac".to_owned(),
            "color.ui=always".to_owned(),
        ];
        let args = [
            "config".to_owned(),
            "--get-all".to_owned(),
            HEADER_KEY.to_owned(),
        ];
        let cmd = env.command(&work, &BTreeMap::new(), &config, &args);
        let argv: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(!argv.iter().any(|a| a.contains("secret")), "{argv:?}");
        assert!(argv.iter().any(|a| a == "color.ui=always"), "{argv:?}");
        let mut cmd = cmd;
        let out = cmd.output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "x-airlock-ticket: v1.secret.mac"
        );
        // Without one, git reads no configuration from the environment (the count is 0).
        let out = env
            .command(&work, &BTreeMap::new(), &[], &args)
            .output()
            .unwrap();
        assert!(out.stdout.is_empty(), "{out:?}");
    }

    #[test]
    fn git_reads_the_ca_file_and_the_empty_ca_dir_from_the_command_line() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("w");
        let status = Command::new("git")
            .args(["init", "-q"])
            .arg(&work)
            .status()
            .unwrap();
        assert!(status.success(), "git init");
        let env = GitEnv {
            git: PathBuf::from("git"),
            git_dir: work.join(".git"),
            work_tree: work.clone(),
            home: tmp.path().join("home"),
            proxy_url: "http://127.0.0.1:1".to_owned(),
            ca_file: Some(PathBuf::from("/run/airlock/ca.pem")),
            ca_dir: Some(PathBuf::from("/run/airlock/empty-ca-dir")),
            test_upstreams: Vec::new(),
            system_config: None,
        };
        let get = |key: &str| env.query(&["config", "--get", key]).unwrap().line();
        assert_eq!(
            get("http.sslCAInfo").as_deref(),
            Some("/run/airlock/ca.pem")
        );
        assert_eq!(
            get("http.sslCAPath").as_deref(),
            Some("/run/airlock/empty-ca-dir")
        );
    }
}
