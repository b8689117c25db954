//! A read-only second remote: `git remote add upstream https://github.com/other/app.git`
//! for a repository the policy does not authorize, on a host it allows, then `git fetch
//! upstream`, `git pull upstream main` and `git ls-remote upstream` work; a push there is
//! refused with what works instead; another sandbox's branches stay hidden there too; the
//! operator's remotes cannot be re-pointed, renamed or removed; and a remote never gets a
//! key that runs a program.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{OTHER, Options, World};

const UPSTREAM_URL: &str = "https://github.com/other/app.git";

#[test]
fn a_read_only_remote_fetches_pulls_and_lists_but_never_pushes() {
    let w = World::new(Options::default());
    w.ok(&["remote", "add", "upstream", UPSTREAM_URL]);
    let config = w.config();
    assert!(
        config.contains(UPSTREAM_URL) && config.contains("agentRemote = upstream"),
        "{config}"
    );
    assert_eq!(
        w.ok(&["config", "--get", "remote.upstream.url"]).trim(),
        UPSTREAM_URL
    );
    assert!(w.ok(&["remote"]).lines().any(|l| l == "upstream"));
    // ls-remote: the fork's branches, another sandbox's hidden.
    let listed = w.ok(&["ls-remote", "upstream"]);
    assert!(
        listed.contains("refs/heads/main") && listed.contains("refs/heads/develop"),
        "{listed}"
    );
    assert!(!listed.contains("sandbox/someone"), "{listed}");
    // fetch: remote-tracking refs of the visible branches only.
    w.ok(&["fetch", "upstream"]);
    let refs = w.operator_git(&[
        "for-each-ref",
        "--format=%(refname)",
        "refs/remotes/upstream",
    ]);
    assert!(
        refs.contains("refs/remotes/upstream/main")
            && refs.contains("refs/remotes/upstream/develop"),
        "{refs}"
    );
    assert!(!refs.contains("sandbox/someone"), "{refs}");
    // pull: the upstream change merges into the sandbox's branch.
    w.ok(&["pull", "--no-rebase", "upstream", "main"]);
    assert!(w.ws.join("UPSTREAM.md").exists());
    // fetch --all takes both remotes.
    w.ok(&["fetch", "--all"]);
    // A push there: refused before git runs, naming the remote that takes it.
    let before = w.operator_git(&["--git-dir", w.other.to_str().unwrap(), "for-each-ref"]);
    let r = w.call(&["push", "upstream", "HEAD:sandbox/demo/x"]);
    assert_eq!(
        r.reason(),
        Some("repository_not_authorized"),
        "{}",
        r.outcome()
    );
    assert!(
        r.message().contains(OTHER)
            && r.message().contains("fetch from but not push to")
            && r.message().contains("git push origin"),
        "{}",
        r.message()
    );
    let after = w.operator_git(&["--git-dir", w.other.to_str().unwrap(), "for-each-ref"]);
    assert_eq!(before, after, "the read-only upstream moved");
    // The same commits go to origin's sandbox branch.
    w.ok(&["push", "origin", "HEAD:sandbox/demo/x"]);
    // A branch tracking upstream: a plain `git push` says the same.
    w.ok(&["branch", "--set-upstream-to=upstream/main"]);
    let r = w.call(&["push"]);
    assert_eq!(
        r.reason(),
        Some("repository_not_authorized"),
        "{}",
        r.outcome()
    );
    w.ok(&["pull", "--no-rebase"]);
}

#[test]
fn the_ssh_form_is_the_same_repository_over_https() {
    let w = World::new(Options::default());
    w.ok(&["remote", "add", "gh", "git@github.com:other/app.git"]);
    w.ok(&["fetch", "gh"]);
    let refs = w.operator_git(&["for-each-ref", "--format=%(refname)", "refs/remotes/gh"]);
    assert!(refs.contains("refs/remotes/gh/develop"), "{refs}");
}

#[test]
fn only_the_agents_own_remotes_change_and_never_to_a_program() {
    let w = World::new(Options::default());
    let config = w.config();
    for argv in [
        &[
            "remote",
            "set-url",
            "origin",
            "https://github.com/other/app",
        ][..],
        &["remote", "rename", "origin", "mine"],
        &["remote", "remove", "origin"],
        &["remote", "rm", "origin"],
    ] {
        let r = w.call(argv);
        assert_eq!(
            r.reason(),
            Some("subcommand_not_allowed"),
            "{argv:?}: {}",
            r.outcome()
        );
        assert!(r.message().contains("git remote add"), "{}", r.message());
    }
    assert_eq!(w.config(), config, "the operator's remotes changed");
    w.ok(&["remote", "add", "upstream", UPSTREAM_URL]);
    w.ok(&[
        "remote",
        "set-url",
        "upstream",
        "https://github.com/other/app2",
    ]);
    w.ok(&["remote", "rename", "upstream", "theirs"]);
    assert!(
        w.config().contains("agentRemote = theirs"),
        "{}",
        w.config()
    );
    assert!(
        !w.config().contains("agentRemote = upstream"),
        "{}",
        w.config()
    );
    w.ok(&["remote", "remove", "theirs"]);
    assert!(!w.config().contains("agentRemote"), "{}", w.config());
    assert!(!w.config().contains("other/app"), "{}", w.config());
    // Not a path, file://, ext::, credentials in the URL, or git's own fetch with -f.
    for url in [
        "/tmp/x.git",
        "file:///tmp/x.git",
        "ext::sh -c id",
        "https://u:p@github.com/other/app",
    ] {
        let r = w.call(&["remote", "add", "x", url]);
        assert_eq!(
            r.reason(),
            Some("repository_not_authorized"),
            "{url}: {}",
            r.outcome()
        );
    }
    let r = w.call(&["remote", "add", "-f", "x", UPSTREAM_URL]);
    assert_eq!(
        r.reason(),
        Some("subcommand_not_allowed"),
        "{}",
        r.outcome()
    );
    // A host the policy does not allow: refused at add, saying what the operator allows.
    let r = w.call(&["remote", "add", "x", "https://evil.example/o/r"]);
    assert_eq!(
        r.reason(),
        Some("repository_not_authorized"),
        "{}",
        r.outcome()
    );
    assert!(r.message().contains("[network]"), "{}", r.message());
    // The program-valued keys of a remote stay impossible.
    w.ok(&["remote", "add", "upstream", UPSTREAM_URL]);
    for (argv, reason) in [
        (
            &["config", "remote.upstream.uploadpack", "/tmp/x"][..],
            "config_key_not_writable",
        ),
        (
            &["config", "remote.upstream.receivepack", "/tmp/x"],
            "config_key_not_writable",
        ),
        (
            &["config", "remote.upstream.vcs", "x"],
            "config_key_not_writable",
        ),
        (
            &["config", "remote.upstream.proxy", "http://x"],
            "config_key_not_writable",
        ),
        (
            &["config", "remote.upstream.url", "/tmp/x"],
            "config_key_not_writable",
        ),
        (
            &[
                "-c",
                "remote.upstream.uploadpack=/tmp/x",
                "fetch",
                "upstream",
            ],
            "global_option_refused",
        ),
        (
            &["fetch", "--upload-pack=/tmp/x", "upstream"],
            "option_refused",
        ),
        (
            &["ls-remote", "--upload-pack=/tmp/x", "upstream"],
            "option_refused",
        ),
        (
            &["pull", "--upload-pack", "/tmp/x", "upstream", "main"],
            "option_refused",
        ),
    ] {
        let r = w.call(argv);
        assert_eq!(r.reason(), Some(reason), "{argv:?}: {}", r.outcome());
    }
    let config = w.config();
    for key in ["uploadpack", "receivepack", "vcs", "proxy"] {
        assert!(!config.to_lowercase().contains(key), "{key}: {config}");
    }
}

/// Without the policy's network table (nothing says which hosts the sandbox reads), a remote
/// outside `[git] repositories` is not fetched: the refusal names the fix.
#[test]
fn a_read_only_remote_needs_its_host_allowed() {
    let w = World::new(Options {
        network: None,
        ..Options::default()
    });
    let r = w.call(&["remote", "add", "upstream", UPSTREAM_URL]);
    assert_eq!(
        r.reason(),
        Some("repository_not_authorized"),
        "{}",
        r.outcome()
    );
    assert!(
        r.message().contains("allow = [\"github.com\"]"),
        "{}",
        r.message()
    );
}
