//! The command line: every subcommand, its flags and its examples (`--help`).

use crate::exit;
use crate::flags::DEFAULT_IMAGE;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  airlock new fix-login --repo ~/src/app      # a sandbox on branch sandbox/fix-login
  airlock list --json                         # every sandbox, machine-readable
  airlock exec fix-login -- git log -1        # run a command in it
  airlock fetch fix-login                     # its commits, as branch sandbox/fix-login
  airlock destroy fix-login                   # refuses while it holds unfetched commits
  airlock completions bash > /etc/bash_completion.d/airlock";

/// Run AI coding agents in airlock sandboxes: one container per sandbox, each on its own
/// branch of your repository, managed through the Docker Engine API.
#[derive(Debug, Parser)]
#[command(name = "airlock", version, after_help = format!("{EXAMPLES}\n\n{}", exit::TABLE))]
pub struct Cli {
    /// Where the registry and the sandboxes' checkouts live
    /// (default: $XDG_DATA_HOME/airlock, else ~/.local/share/airlock).
    #[arg(long, env = "AIRLOCK_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// The appliance image.
    #[arg(long, env = "AIRLOCK_IMAGE", global = true, default_value = DEFAULT_IMAGE)]
    pub image: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// One session on a new sandbox: a new branch, your terminal attached, the branch fetched
    /// back and the sandbox removed at the end (kept if that would lose work).
    #[command(after_help = "\
Examples:
  airlock run                                   # a shell on the repository here
  airlock run ~/src/app --agent claude          # Claude Code in airlock:claude
  airlock run . -- sh -c 'make test'            # exits with the command's status

The sandbox's branch (sandbox/<name>) is fetched back into the repository when the session
ends; with no terminal the command's stdin is empty. Ctrl-C without a terminal stops it.")]
    Run(RunArgs),
    /// Create a sandbox on its own branch of a repository and start it.
    #[command(after_help = "\
Examples:
  airlock new fix-login                        # the repository in the current directory
  airlock new fix-login --repo ~/src/app --branch agent/login
  airlock new tests --repo . -- claude -p 'make the tests pass'")]
    New(NewArgs),
    /// List the sandboxes with their state as the engine reports it.
    #[command(after_help = "\
Examples:
  airlock list
  airlock list --json | jq -r '.[] | select(.state == \"missing\") | .name'

JSON: an array of objects with the fields name, repository, branch, base, agent, image,
image_digest, policy_hash, container_id, created, last_seen, ttl_seconds, state, oneshot,
sessions (times are Unix seconds; state is one of creating, running, stopped, missing;
oneshot is true for the sandbox of an `airlock run`).")]
    List(ListArgs),
    /// Show one sandbox: its registry row, its sessions and its engine state; while it runs,
    /// what its proxy says (admin API): the policy revision in force, the live sessions, the
    /// counters, the audit log's state and the open connections.
    #[command(after_help = "\
Examples:
  airlock status fix-login
  airlock status fix-login --json | jq .admin.counters
  airlock status k8s:sandboxes/fix-login       # a pod, through kubectl exec (docs/kubernetes.md)

JSON: the fields of `list --json` plus session_list (id, started), ahead (commits on the
sandbox branch that the operator's repository does not have yet), admin (null unless it
runs: {status, policy, sessions, counters} as the admin API answers them) and admin_error
(why the admin API did not answer, else null).")]
    Status(NameJson),
    /// Attach to the agent's terminal; detach with ctrl-p ctrl-q. Exits with the agent's
    /// status if it ends, 0 on a detach.
    #[command(after_help = "\
Examples:
  airlock attach fix-login
  printf 'make test\\nexit\\n' | airlock attach fix-login   # without a terminal: stdin is sent")]
    Attach(NameArg),
    /// Run a command as the agent in a running sandbox, confined as the agent is (its uid, no
    /// capabilities, seccomp, the proxy: the entrypoint's session mode), as a session of its
    /// own (the proxy and the approvals tell it apart); exits with its status.
    #[command(after_help = "\
Examples:
  airlock exec fix-login -- git status
  airlock exec fix-login -- bash               # a second shell (a terminal if you have one)
  airlock exec fix-login -- sh -c 'cd /workspace && cargo test'")]
    Exec(ExecArgs),
    /// Stop a sandbox's container (its checkout and branch stay); fetches its branch first.
    #[command(after_help = "Examples:\n  airlock stop fix-login")]
    Stop(NameArg),
    /// Read the sandbox's workspace secret files again (`.env*`, `*.pem`, ...): a secret the
    /// agent wrote since the start is refused on its way to any host from then on.
    #[command(after_help = "\
Examples:
  airlock rescan fix-login
  airlock exec fix-login -- cat /run/airlock/workspace-secrets   # what it found (names, never values)

Sends SIGHUP to the sandbox's entrypoint (as `docker kill -s HUP <container>` would); the
secrets already found stay refused. The result is a line in `airlock logs <name>`.")]
    Rescan(NameArg),
    /// Start a stopped sandbox again (a new session is recorded).
    #[command(after_help = "Examples:\n  airlock start fix-login")]
    Start(NameArg),
    /// Remove a sandbox: container, checkout and registry row.
    #[command(after_help = "\
Examples:
  airlock destroy fix-login            # refuses if it holds commits not fetched back
  airlock destroy fix-login --force    # loses them")]
    Destroy(DestroyArgs),
    /// Print a sandbox's container output, or with --audit its proxy's and git API's
    /// decisions.
    #[command(
        after_help = "Examples:\n  airlock logs fix-login\n  airlock logs fix-login --tail 50\n  airlock logs fix-login --audit --denied\n  airlock logs fix-login --audit -f"
    )]
    Logs(LogsArgs),
    /// A running sandbox's network policy: show the revision in force, or load a new one
    /// without a restart.
    #[command(after_help = "\
Examples:
  airlock policy show fix-login
  airlock policy reload fix-login ./policy.toml   # this file's rules, from now on
  airlock policy reload fix-login                 # the policy file it runs from, read again")]
    Policy(PolicyArgs),
    /// The operator's inbox: hosts an agent asked for that the policy asks you about
    /// ([network] unlisted = "ask"), in every running sandbox or one.
    #[command(after_help = "\
Examples:
  airlock approvals
  airlock approvals fix-login --json
  airlock approvals show 3f2a9c1d        # the item and its review token
  airlock approvals --watch --notify 'notify-send \"airlock: $AIRLOCK_SANDBOX asks for $AIRLOCK_HOST\"'

The agent was refused at once (approval-required) and nothing was sent; answer with
`airlock approve ID` or `airlock deny ID`. JSON: [{sandbox, id, session, host, port, hits,
first_ms, last_ms, state, scope, by, until_ms, reason, notes}]; `show` adds `token`.")]
    Approvals(ApprovalsArgs),
    /// Let an asked host through for the session that asked: its next connection
    /// (--once) or every one (--session, optionally --for a time); or for every session,
    /// across restarts, until revoked (--always).
    #[command(after_help = "\
Examples:
  airlock approve 3f2a9c1d --once
  airlock approve 3f2a9c1d --session --for 30m
  airlock approve fix-login/3f2a9c1d --session --token 0011223344556677
  airlock approve fix-login/3f2a9c1d --always  # a grant: every session, kept, revocable
  airlock approve --all --session --for 1h    # every pending item without a note

Returns once the proxy holds the answer; the session's next request then passes. An item
carrying notes (a credential bound to the host, a passthrough host) says so first. With
--token (from `approvals show`), refused if the item or the policy changed since.

--always makes a grant: a new policy revision that allows the host and port, in force when
the command returns, kept beside the sandbox's audit log (so a restart keeps it) with who
granted it and when. `airlock policy show NAME` lists it with its id; `airlock revoke
NAME/ID` takes it back.")]
    Approve(ApproveArgs),
    /// Refuse an asked host for the session that asked, with a reason the agent reads; or
    /// for every session, across restarts, until revoked (--always).
    #[command(after_help = "\
Examples:
  airlock deny 3f2a9c1d --reason \"use the internal mirror\"
  airlock deny 3f2a9c1d --reason \"not needed for this task\" --for 1h
  airlock deny fix-login/3f2a9c1d --always --reason \"never: a paste site\"

The session's requests to the host are refused approval-denied with your reason, for the
time given or until the sandbox stops; other sessions are asked anew. --always makes a
grant that denies the host and port to every session (a policy revision, kept, listed by
`airlock policy show`, taken back with `airlock revoke`).")]
    Deny(DenyArgs),
    /// Take back a grant that `approve --always` or `deny --always` made: a new policy
    /// revision without it, in force when the command returns.
    #[command(after_help = "\
Examples:
  airlock revoke fix-login/3f2a9c1d
  airlock revoke 3f2a9c1d                      # looked for in every running sandbox

The grants and their ids are listed by `airlock policy show NAME` (origin `approve --always
ID by uid N at TIME`). Open connections the revision without the grant refuses are closed;
the host is asked about (or refused) again.")]
    Revoke(RevokeArgs),
    /// A terminal view of every running sandbox: requests, denials, open connections, the
    /// latest denials first, and the inbox of what the agents asked for; Enter shows one
    /// sandbox, i the inbox, q quits.
    #[command(after_help = "\
Keys: up/down (or k/j) choose a sandbox, Enter shows it, Esc goes back, q quits. i opens
the inbox (every sandbox's pending items, the agent's reason marked untrusted): up/down
choose an item, o approves it once, s approves it for its session, d denies it (the agent
reads \"denied by the operator in airlock top\"; `airlock deny --reason` gives your own).

Fed by each sandbox's admin API (its event stream and counters); needs a terminal. Plain
ANSI, usable over SSH. A sandbox that started before the admin API is listed without
numbers (restart it).")]
    Top(TopArgs),
    /// Bring a sandbox's commits back as the branch sandbox/<name> of your repository,
    /// with the sandbox's hooks and config ignored.
    #[command(after_help = "Examples:\n  airlock fetch fix-login && git log sandbox/fix-login")]
    Fetch(NameArg),
    /// Remove expired stopped sandboxes (never one holding unfetched commits), finish the
    /// sandboxes of killed `airlock run`s (branch fetched back first), and remove what a
    /// killed `new` left.
    #[command(after_help = "\
Examples:
  airlock gc
  airlock gc --dry-run --json

A sandbox a live `new` or `run` is working on is left alone. A killed `run`'s sandbox is
finished once its container has stopped or gone: its branch fetched back, then removed, or
kept (saying why) when that would lose work. `run` and `new` do the same on their way.
JSON: {removed, kept}, arrays of {name, reason}.")]
    Gc(GcArgs),
    /// Keep secrets on this machine (0600 files under the XDG config directory) for
    /// `--secret NAME`; a sandbox gets each as a read-only file /run/secrets/<NAME>.
    #[command(after_help = "\
Examples:
  airlock secret set github_token              # prompts; the value is not echoed
  gh auth token | airlock secret set github_token
  airlock secret ls
  airlock new fix-login --secret github_token
  airlock secret rm github_token

The value never goes through an argument or an environment variable. Files live in
$XDG_CONFIG_HOME/airlock/secrets (else ~/.config/airlock/secrets, or
$AIRLOCK_CONFIG_DIR/secrets). `ls --json` gives an array of {name, file}.")]
    Secret(SecretArgs),
    /// Check this machine for sandboxes: engine and version, image, cgroup v2, iptables
    /// backend, IPv6, seccomp, free disk; one line each, with the fix when something is wrong.
    #[command(after_help = "\
Examples:
  airlock doctor
  airlock doctor --json | jq -r '.[] | select(.level != \"ok\") | .fix'

Each line is `ok`, `warn` or `FAIL`, the check, what was found and, when it is not ok, the
fix. The iptables and IPv6 lines come from a throwaway container of the image (root with
NET_ADMIN only, removed at once): the firewall's tools on the engine's kernel.
JSON: an array of objects with the fields check, level (ok, warn, fail), detail, fix (null
when ok). Exits 0 when nothing fails (warnings allowed), 1 otherwise.")]
    Doctor(DoctorArgs),
    /// Print the run flags for another engine: compose, devcontainer, k8s, docker, engine.
    #[command(after_help = "\
Examples:
  airlock render compose --repo ~/src/app > compose.yaml
  airlock render devcontainer --repo . > .devcontainer/devcontainer.json
  airlock render k8s --repo /srv/app | kubectl apply -f -")]
    Render(RenderArgs),
    /// Build the images with the repository's scripts (scripts/build-image, and
    /// scripts/build-agent-image for an agent); offline, cached after the first time.
    #[command(after_help = "\
Examples:
  airlock build                                 # airlock:latest
  airlock build --agent claude                  # airlock:claude, on airlock:latest
  airlock build --tag airlock:dev --source ~/src/airlock

Prints the tag built on stdout; exits with the script's status.")]
    Build(BuildArgs),
    /// Write PATH/.devcontainer/devcontainer.json: the same run flags, for VS Code and the
    /// devcontainer CLI (the image's entrypoint stays PID 1).
    #[command(after_help = "\
Examples:
  airlock devcontainer .                        # .devcontainer/devcontainer.json here
  airlock devcontainer ~/src/app --secret github_token --policy ./policy.toml
  airlock devcontainer . --force                # replace an existing one")]
    Devcontainer(DevcontainerArgs),
    /// Kubernetes: a Pod or the SIG's agent-sandbox objects, airlock's NetworkPolicy and the
    /// namespace's admission policy, from the same run flags.
    #[command(after_help = "\
Examples:
  airlock k8s render fix-login --clone https://github.com/acme/app.git | kubectl apply -f -
  airlock k8s render app --template --claim fix-login --warm-pool 2 | kubectl apply -f -
  airlock k8s render fix-login --secret github_token > /dev/stdout   # the Secret holds the value

docs/kubernetes.md says what differs from Docker.")]
    K8s(K8sArgs),
    /// Check a sandbox's audit log: `airlock audit verify FILE…` (no container needed).
    #[command(after_help = "\
Examples:
  airlock audit verify ~/.local/share/airlock/sandboxes/fix-login/audit/audit.jsonl*
  airlock audit verify audit.jsonl audit.jsonl.1 audit.jsonl.2")]
    Audit(AuditArgs),
    /// Print a shell completion script.
    #[command(after_help = "\
Examples:
  airlock completions bash > /etc/bash_completion.d/airlock
  airlock completions zsh > \"${fpath[1]}/_airlock\"")]
    Completions(CompletionsArgs),
}

/// `new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The sandbox name: lowercase letters, digits and `-`, 1 to 32, starting with a letter.
    pub name: String,
    /// The operator's repository (a git checkout).
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The sandbox's branch (default sandbox/<name>); created from the checkout's HEAD.
    #[arg(long)]
    pub branch: Option<String>,
    /// The agent: one with a profile in agents/ (claude) runs in its image airlock:<agent>
    /// and is the default command; `shell` is the base image's shell.
    #[arg(long, default_value = "shell")]
    pub agent: String,
    /// Seconds a stopped sandbox is kept before `gc` may remove it.
    #[arg(long, default_value_t = 7 * 24 * 3600)]
    pub ttl: i64,
    /// A secret from `airlock secret set` (NAME) or a host file (NAME=FILE), mounted
    /// read-only at /run/secrets/<NAME>.
    #[arg(long = "secret", value_name = "NAME[=FILE]")]
    pub secrets: Vec<String>,
    /// A host policy file instead of the image's default.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Print the new sandbox as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where the container goes and how its image is found.
    #[command(flatten)]
    pub place: PlaceArgs,
    /// The agent command (default: the image's, a shell).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The repository (a git checkout).
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// The agent: one with a profile in agents/ (claude) runs in its image airlock:<agent>
    /// and is the default command; `shell` is the base image's shell.
    #[arg(long, default_value = "shell")]
    pub agent: String,
    /// The sandbox name (default <agent>-<6 hex digits>); its branch is sandbox/<name>.
    #[arg(long)]
    pub name: Option<String>,
    /// A secret from `airlock secret set` (NAME) or a host file (NAME=FILE), mounted
    /// read-only at /run/secrets/<NAME>.
    #[arg(long = "secret", value_name = "NAME[=FILE]")]
    pub secrets: Vec<String>,
    /// A host policy file instead of the image's default.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Seconds a kept (stopped) sandbox stays before `gc` may remove it.
    #[arg(long, default_value_t = 7 * 24 * 3600)]
    pub ttl: i64,
    /// Where the container goes and how its image is found.
    #[command(flatten)]
    pub place: PlaceArgs,
    /// The command (default: the agent's, or the image's shell).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// The options of `new` and `run` that place the container and find its image.
#[derive(Debug, Args)]
pub struct PlaceArgs {
    /// An engine network to join instead of the default bridge (`docker network ls`).
    #[arg(long, value_name = "NETWORK")]
    pub network: Option<String>,
    /// A DNS server the engine's resolver forwards to (repeatable), as `docker run --dns`.
    #[arg(long = "dns", value_name = "IP")]
    pub dns: Vec<String>,
    /// A PEM file of your extra CA (a TLS-inspecting corporate proxy's, a private
    /// mirror's): the proxy verifies upstreams with it and the agent's tools trust it
    /// (AIRLOCK_EXTRA_CA, as scripts/docker-run's EXTRA_CA_FILE).
    #[arg(long, value_name = "FILE")]
    pub extra_ca: Option<PathBuf>,
    /// Test configuration: a PEM file of roots the proxy alone trusts for upstreams (a fake
    /// internet's CA; AIRLOCK_UPSTREAM_CA); the agent never trusts it.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,
    /// Build the image first (`airlock build`) when the engine does not have it, instead of
    /// failing with exit 6. `scripts/airlock` sets it.
    #[arg(long, env = "AIRLOCK_BUILD_MISSING", value_parser = clap::builder::BoolishValueParser::new(), num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    pub build_missing: bool,
}

/// `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Machine-readable output (fields in `airlock list --help`).
    #[arg(long)]
    pub json: bool,
}

/// A sandbox name.
#[derive(Debug, Args)]
pub struct NameArg {
    /// The sandbox.
    pub name: String,
}

/// A sandbox name and `--json`.
#[derive(Debug, Args)]
pub struct NameJson {
    /// The sandbox.
    pub name: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// `exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The sandbox.
    pub name: String,
    /// The command.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `destroy`.
#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// The sandbox.
    pub name: String,
    /// Destroy even if the sandbox holds commits not fetched back.
    #[arg(long)]
    pub force: bool,
}

/// `logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The sandbox (with --audit also a pod, k8s:NAMESPACE/POD).
    pub name: String,
    /// Only the last N lines.
    #[arg(long)]
    pub tail: Option<u32>,
    /// The proxy's and the git API's decisions (audit.jsonl, git-api.jsonl) instead of the
    /// container's output, one line per decision (a refusal followed by how to allow it); a
    /// removed sandbox's are kept for 30 days.
    #[arg(long)]
    pub audit: bool,
    /// With --audit: keep printing decisions as they are written, until ctrl-c or the
    /// sandbox's removal: the proxy's from its admin API's event stream (pushed as written;
    /// an operator who may not read the root-owned files gets those since the proxy's
    /// start), else from the files, polled and followed across rotation.
    #[arg(short = 'f', long, requires = "audit")]
    pub follow: bool,
    /// With --audit: only refusals (and the counts of lines that left the log).
    #[arg(long, requires = "audit")]
    pub denied: bool,
    /// With --audit: the lines as written (JSON), not the human lines.
    #[arg(long, requires = "audit")]
    pub json: bool,
    /// With --audit: only the session S (its id, or the short form the human lines show).
    #[arg(long, value_name = "S", requires = "audit")]
    pub session: Option<String>,
}

/// `approvals`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ApprovalsArgs {
    /// One item with its review token.
    #[command(subcommand)]
    pub show: Option<ApprovalsCmd>,
    /// Only this sandbox, or the pod k8s:NAMESPACE/POD (none: every running sandbox).
    pub name: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Keep watching: print each new pending item as it is filed (in the sandboxes that
    /// run, as they start and stop), until ctrl-c.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: run CMD (sh -c, on this host, never in a sandbox) for each new item,
    /// with AIRLOCK_SANDBOX, AIRLOCK_APPROVAL_ID, AIRLOCK_SESSION, AIRLOCK_HOST, AIRLOCK_PORT
    /// and AIRLOCK_SAID (the agent's reason: untrusted text, never to be pasted into a
    /// command line) in its environment: a desktop notification, a chat webhook with curl.
    #[arg(long, value_name = "CMD", requires = "watch")]
    pub notify: Option<String>,
}

/// `approvals show`.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCmd {
    /// One item: what approving it would let through, its notes and its review token.
    Show {
        /// The item: ID, SANDBOX/ID, or k8s:NAMESPACE/POD/ID.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// `approve`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["once", "session", "always"])))]
pub struct ApproveArgs {
    /// The item: ID, SANDBOX/ID, or k8s:NAMESPACE/POD/ID.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub id: Option<String>,
    /// Every pending item without a security note, in every running sandbox (or
    /// --sandbox's); an item with a note (a credential bound to the host, a passthrough
    /// host, a write, a name that looks encoded) is left pending and listed, to approve by
    /// its id.
    #[arg(long, conflicts_with = "token")]
    pub all: bool,
    /// With --all: only this sandbox (or pod, k8s:NAMESPACE/POD).
    #[arg(long, value_name = "NAME", requires = "all")]
    pub sandbox: Option<String>,
    /// Only the session's next connection to the host and port.
    #[arg(long)]
    pub once: bool,
    /// Every connection of that session to it.
    #[arg(long)]
    pub session: bool,
    /// Every session's, across restarts, until `airlock revoke`: a grant in the policy
    /// (one item at a time: not with --all).
    #[arg(long, conflicts_with = "all")]
    pub always: bool,
    /// How long a --session approval holds (90s, 30m, 2h, 7d; none: until the sandbox
    /// stops).
    #[arg(long = "for", value_name = "SPAN", requires = "session")]
    pub for_span: Option<String>,
    /// The review token `approvals show` printed: refused if the item changed since.
    #[arg(long)]
    pub token: Option<String>,
}

/// `deny`.
#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The item: ID, SANDBOX/ID, or k8s:NAMESPACE/POD/ID.
    pub id: String,
    /// Why, for the agent (one line; it reads it in its refusals).
    #[arg(long, required = true)]
    pub reason: String,
    /// How long the denial holds (90s, 30m, 2h, 7d; none: until the sandbox stops).
    #[arg(long = "for", value_name = "SPAN")]
    pub for_span: Option<String>,
    /// Every session's, across restarts, until `airlock revoke`: a grant in the policy.
    #[arg(long, conflicts_with = "for_span")]
    pub always: bool,
    /// The review token `approvals show` printed: refused if the item changed since.
    #[arg(long)]
    pub token: Option<String>,
}

/// `revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// The grant: ID, SANDBOX/ID, or k8s:NAMESPACE/POD/ID (the id `policy show` lists).
    pub id: String,
}

/// `policy`.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: PolicyCmd,
}

/// `policy show|reload`.
#[derive(Debug, Subcommand)]
pub enum PolicyCmd {
    /// Print the policy revision in force (its number, hash, when it was loaded and from
    /// where) and its effective rules, each with where it came from: the file's key, a
    /// registry or preset the file lists, or built into airlock.
    #[command(after_help = "\
Examples:
  airlock policy show fix-login
  airlock policy show fix-login --json

JSON: {revision, hash, loaded_at_ms, origin, rules: [{list, rule, origin}]}.")]
    Show {
        /// The sandbox.
        name: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Load a new policy into a running sandbox: checked as at start (a broken one is
    /// refused with FILE:LINE and the old one stays), swapped at once, audited; open
    /// connections the new rules refuse are closed, the others stay up.
    #[command(after_help = "\
Examples:
  airlock policy reload fix-login ./policy.toml
  airlock policy reload fix-login                 # the policy file it runs from, read again

Prints `revision N (HASH) loaded at TIME` and how many open connections it closed, or
`unchanged` when the rules are the same. Exits 2 when the policy does not load (the
proxy's FILE:LINE message), 4 when the change needs a restart (the [git] rules, for
instance). A restart loads the policy the sandbox was created with again: edit that file
to keep a change.")]
    Reload {
        /// The sandbox.
        name: String,
        /// A policy file on this machine, sent as it is (none: the proxy reads the policy
        /// file it started from again).
        file: Option<PathBuf>,
    },
    /// What the policy in force would decide for a URL, nothing sent: allow or deny, the
    /// reason, the rule that decides, and for a denial how to allow it.
    #[command(after_help = "\
Examples:
  airlock policy check fix-login https://api.github.com/repos/o/r --method POST
  airlock policy check fix-login evil.example:443         # a tunnel: the host only
  airlock policy check fix-login https://pypi.org/ --json

Prints the decision first (allow, deny, or report: denied but only reported), the reason,
the rule and the revision that decide, then one line for a person. Exits 0 whatever the
decision (it is in the output); JSON: {revision, decision, stage, reason, rule, intercepted,
message}.")]
    Check {
        /// The sandbox.
        name: String,
        /// The URL the agent would ask for (https://host/path, http://..., or host:port).
        url: String,
        /// The request's method (none: only the host and port are judged).
        #[arg(long)]
        method: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The fewest policy lines that would have allowed what the proxy refused, read from
    /// the sandbox's audit log, for you to review: exact hosts, an allow rule per host and
    /// method for a write, and apart from them what no line lifts. Changes nothing.
    #[command(after_help = "\
Examples:
  airlock policy suggest fix-login
  airlock policy suggest fix-login --since 2h
  airlock policy suggest fix-login --json

Reads the live sandbox's audit log, or the kept one of the last sandbox of that name
(report mode's lines included: what enforce mode would refuse). Prints a fragment of a
policy file, each line with how often and when it was refused; merge the values into the
lists of the same name, then `airlock policy reload NAME FILE`. JSON: {refusals, network:
{LIST: {VALUE: {count, first_ms, last_ms, reasons}}}, rules: [{host, method, path, tally}],
edits, never}.")]
    Suggest {
        /// The sandbox.
        name: String,
        /// Only refusals since then: a span back from now (90s, 30m, 2h, 7d) or a time as
        /// the logs write it (2026-11-28T10:00:00.000Z).
        #[arg(long)]
        since: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// `top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between two readings of the counters.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
}

/// `audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AuditCmd,
}

/// `audit verify`.
#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// Check the hash chain of audit.jsonl and its rotated files: exit 0 when every line
    /// follows the one written before it, else exit 7 with one line naming the first
    /// edited, dropped, moved or added line (FILE:LINE).
    #[command(after_help = "\
Examples:
  airlock audit verify ~/.local/share/airlock/sandboxes/fix-login/audit/audit.jsonl*
  airlock audit verify ~/.local/share/airlock/audit/fix-login-1764300000/audit.jsonl*

The files are taken oldest first by their names (audit.jsonl.aging, the highest
audit.jsonl.N, ... audit.jsonl), whatever order they are given in. The archives
(audit.jsonl.allowed*, audit.jsonl.first*) are sorted copies outside the chain: named as
not checked. On success one line: the lines checked, where the chain starts (the log's
first line, or after a line a rotated line says left) and the last line's chain, to keep
elsewhere and compare later. The chain is not keyed: docs/audit.md says what it proves.")]
    Verify {
        /// audit.jsonl and its rotated files (audit.jsonl.1 ..., audit.jsonl.aging).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// `secret`.
#[derive(Debug, Args)]
pub struct SecretArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SecretCmd,
}

/// `secret set|ls|rm`.
#[derive(Debug, Subcommand)]
pub enum SecretCmd {
    /// Store a secret: its value from stdin, or a prompt on a terminal.
    #[command(
        after_help = "Examples:\n  airlock secret set github_token\n  airlock secret set anthropic_api_key < ~/key.txt"
    )]
    Set {
        /// Lowercase letters, digits and '_', starting with a letter (e.g. github_token).
        name: String,
    },
    /// List the stored secrets' names (never their values).
    #[command(after_help = "Examples:\n  airlock secret ls\n  airlock secret ls --json")]
    Ls {
        /// Machine-readable output: an array of {name, file}.
        #[arg(long)]
        json: bool,
    },
    /// Remove a stored secret.
    #[command(after_help = "Examples:\n  airlock secret rm github_token")]
    Rm {
        /// The secret.
        name: String,
    },
}

/// `doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Machine-readable output (fields in `airlock doctor --help`).
    #[arg(long)]
    pub json: bool,
}

/// `gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Machine-readable output: {removed, kept} arrays of {name, reason}.
    #[arg(long)]
    pub json: bool,
}

/// What `render` prints.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Target {
    /// A `compose.yaml` service.
    Compose,
    /// A `devcontainer.json`.
    Devcontainer,
    /// A Kubernetes Pod (JSON, which kubectl reads as YAML).
    K8s,
    /// `docker run` flags, one per line.
    Docker,
    /// The Docker Engine API container-create body.
    Engine,
}

/// `render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The format.
    pub target: Target,
    /// The repository to mount at /workspace.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The name of the service, container or pod.
    #[arg(long, default_value = "airlock")]
    pub name: String,
}

/// `build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Build this agent's image (agents/<AGENT>.toml) instead of the base image.
    #[arg(long)]
    pub agent: Option<String>,
    /// The tag (default: --image for the base, airlock:<AGENT> for an agent).
    #[arg(long)]
    pub tag: Option<String>,
    /// The airlock source tree (default: the one this binary was built from).
    #[arg(long, env = "AIRLOCK_SOURCE")]
    pub source: Option<PathBuf>,
}

/// `devcontainer`.
#[derive(Debug, Args)]
pub struct DevcontainerArgs {
    /// The project directory (its .git, if any, is handed to the git service).
    pub path: PathBuf,
    /// The devcontainer's name.
    #[arg(long, default_value = "airlock")]
    pub name: String,
    /// A secret from `airlock secret set` (NAME) or a host file (NAME=FILE).
    #[arg(long = "secret", value_name = "NAME[=FILE]")]
    pub secrets: Vec<String>,
    /// A host policy file instead of the image's default.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Replace an existing .devcontainer/devcontainer.json.
    #[arg(long)]
    pub force: bool,
    /// The agent (its image airlock:<agent> and its command), or `shell`.
    #[arg(long, default_value = "shell")]
    pub agent: String,
}

/// `k8s`.
#[derive(Debug, Args)]
pub struct K8sArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: K8sCmd,
}

/// `k8s render`.
#[derive(Debug, Subcommand)]
pub enum K8sCmd {
    /// Print the objects of one sandbox as one YAML stream for kubectl: by default a Pod
    /// (NAME) whose workspace is a claim seeded by an init container, its claims, Secret,
    /// policy ConfigMap and airlock's NetworkPolicy (NAME-fence); the SIG's agent-sandbox
    /// objects with --sandbox or --template; the namespace's admission policy with
    /// --admission.
    #[command(after_help = "\
Examples:
  airlock k8s render fix-login --clone https://github.com/acme/app.git | kubectl apply -f -
  airlock k8s render app --template --claim fix-login --claim feature/parser --warm-pool 2
  airlock k8s render app --template --runtime-class gvisor --pod-cidr 10.42.0.0/16 --service-cidr 10.43.0.0/16
  airlock k8s render sandboxes --admission | kubectl apply -f -       # the namespace, first
  airlock k8s render fix-login --host-paths --repo /srv/app            # one node: hostPath

docs/kubernetes.md says what each object is for and what differs from Docker.")]
    Render(Box<K8sRenderArgs>),
    /// Say whether the cluster kubectl reaches serves the agent-sandbox API version that
    /// `render --sandbox/--template` writes (v1beta1), or only the older v1alpha1 (exit 4),
    /// or none (exit 3). kubectl is AIRLOCK_KUBECTL's command, else kubectl.
    #[command(after_help = "\
Examples:
  airlock k8s check
  AIRLOCK_KUBECTL='microk8s kubectl' airlock k8s check")]
    Check,
}

/// `k8s render`'s flags.
#[derive(Debug, Args)]
pub struct K8sRenderArgs {
    /// The name of the Pod, Sandbox or SandboxTemplate (a DNS label: lowercase letters,
    /// digits, '-'); with --admission, the namespace's.
    pub name: String,
    /// The repository: the default of --clone (its origin's URL) and, with --host-paths,
    /// the node's directory mounted at /workspace.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The URL the seed container fetches the repository from (https:// or http://, no
    /// credential; default: the origin remote of --repo).
    #[arg(long, value_name = "URL")]
    pub clone: Option<String>,
    /// The commit or ref the sandbox's branch starts at.
    #[arg(long, default_value = "HEAD", value_name = "REF")]
    pub base: String,
    /// The branch the sandbox works on (default: airlock/<pod name>).
    #[arg(long)]
    pub branch: Option<String>,
    /// A secret from `airlock secret set` (NAME) or a host file (NAME=FILE): its value
    /// goes into the Secret, mounted at /run/secrets/<NAME>.
    #[arg(long = "secret", value_name = "NAME[=FILE]")]
    pub secrets: Vec<String>,
    /// A policy file instead of the image's default: a ConfigMap (with --host-paths, the
    /// node's file); its ports are the fence's.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// The agent (its image airlock:<agent> and its command), or `shell`.
    #[arg(long, default_value = "shell")]
    pub agent: String,
    /// The node's paths as hostPath volumes instead of claims: one node only (kind, k3s,
    /// minikube).
    #[arg(long)]
    pub host_paths: bool,
    /// The size of the workspace claim.
    #[arg(long, default_value = "10Gi", value_name = "SIZE")]
    pub workspace_size: String,
    /// An existing claim for the audit log instead of one per sandbox made by the rendering.
    #[arg(long, value_name = "CLAIM")]
    pub audit_claim: Option<String>,
    /// The size of the audit claim the rendering makes.
    #[arg(long, default_value = "1Gi", value_name = "SIZE")]
    pub audit_size: String,
    /// The pod's RuntimeClass (gvisor, kata, ...).
    #[arg(long, value_name = "CLASS")]
    pub runtime_class: Option<String>,
    /// The SIG's bare Sandbox (agents.x-k8s.io/v1beta1) instead of a Pod.
    #[arg(long, conflicts_with_all = ["template", "admission"])]
    pub sandbox: bool,
    /// A SandboxTemplate (extensions.agents.x-k8s.io/v1beta1) instead of a Pod, its
    /// NetworkPolicy left to airlock's fence (networkPolicyManagement: Unmanaged).
    #[arg(long, conflicts_with = "admission")]
    pub template: bool,
    /// With --template: a SandboxClaim working on BRANCH (once per branch).
    #[arg(long = "claim", value_name = "BRANCH", requires = "template")]
    pub claims: Vec<String>,
    /// With --template: a SandboxWarmPool of N pods (a claim names a pool: with --claim and
    /// no --warm-pool, a pool of none).
    #[arg(long, value_name = "N", requires = "template")]
    pub warm_pool: Option<u32>,
    /// With --template: an existing SandboxTemplate (JSON: kubectl get sandboxtemplate NAME
    /// -o json) whose labels, annotations and pod scheduling are kept; refused unless its
    /// networkPolicyManagement is Unmanaged.
    #[arg(long, value_name = "FILE", requires = "template")]
    pub base_template: Option<PathBuf>,
    /// The cluster's pod range, kept out of the fence (once per family).
    #[arg(
        long = "pod-cidr",
        value_name = "CIDR",
        default_value = "10.244.0.0/16"
    )]
    pub pod_cidrs: Vec<String>,
    /// The cluster's service range, kept out of the fence (once per family).
    #[arg(
        long = "service-cidr",
        value_name = "CIDR",
        default_value = "10.96.0.0/12"
    )]
    pub service_cidrs: Vec<String>,
    /// The namespace NAME (Pod Security labels) and the ValidatingAdmissionPolicy that admits
    /// in it only the pod these flags render.
    #[arg(long)]
    pub admission: bool,
}

/// `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    pub shell: clap_complete::Shell,
}
