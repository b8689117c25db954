//! Branch and path globs from the policy: the one `[git]` glob engine of `airlock-policy`
//! ([`airlock_policy::glob::GitGlobs`]), so a push is judged by exactly the reading the
//! proxy's GitHub judge applies to the same branch or file. `*` and `**` match across `/`
//! (a pattern such as `release/*` protects `release/a/b` too; `.github/workflows/**`
//! covers every depth), a `**` component matches no directory too (`**/secrets.env`
//! covers `secrets.env`), and case is ASCII-folded.

pub use airlock_policy::glob::{GitGlobError as GlobError, GitGlobs as Globs};

#[cfg(test)]
mod tests {
    use super::*;

    /// The git API's push judge and the proxy's GitHub contents judge read `[git]` globs the
    /// same way (issue 20): the same policy, the same names, the same answers.
    #[test]
    fn attack_push_and_contents_api_agree_on_git_globs() {
        use crate::push::{Facts, PushRules, Update};
        use airlock_policy::{Host, L7Verdict, Policy, RequestView};

        let text = r#"
[sandbox]
name = "demo"
[l7]
presets = ["github"]
[git]
repositories = ["github.com/o/r"]
push_branches = ["sandbox/demo/*", "main", "x/main", "Main"]
protected_branches = ["**/main"]
restricted_paths = ["**/secrets.env", "src/**/*.pem"]
"#;
        let policy = Policy::parse(text, std::path::Path::new("t.toml")).unwrap();
        let push = PushRules::new(&policy.git, None).unwrap();
        let api = Host::parse("api.github.com").unwrap();
        let contents = |file: &str, branch: &str| {
            let path = format!("/repos/o/r/contents/{file}");
            let req = RequestView {
                host: &api,
                method: "PUT",
                path: &path,
                query: None,
            };
            let body = format!(r#"{{"message":"m","content":"eA==","branch":"{branch}"}}"#);
            match policy.judge_body(&req, body.as_bytes()) {
                L7Verdict::Pass { .. } | L7Verdict::Ask { .. } => Ok(()),
                L7Verdict::Deny { rule, .. } => Err(rule),
            }
        };
        let update = |branch: &str| Update {
            dst: format!("refs/heads/{branch}"),
            old: None,
            new: Some("1".repeat(40)),
        };

        for (file, restricted) in [
            ("secrets.env", true),
            ("Secrets.ENV", true),
            ("a/b/secrets.env", true),
            ("src/a.pem", true),
            ("src/x/y/a.pem", true),
            ("notsecrets.env", false),
            ("src/a.pemx", false),
            ("lib/a.pem", false),
        ] {
            let facts = Facts {
                fast_forward: true,
                touched: vec![file.to_owned()],
            };
            let by_push = push.judge_facts(&update("sandbox/demo/x"), &facts);
            let by_proxy = contents(file, "sandbox/demo/x");
            assert_eq!(
                by_push.is_err(),
                restricted,
                "git push touching {file}: {by_push:?}"
            );
            assert_eq!(
                by_proxy.is_err(),
                restricted,
                "contents PUT {file}: {by_proxy:?}"
            );
        }
        for (branch, protected) in [
            ("main", true),
            ("Main", true),
            ("x/main", true),
            ("sandbox/demo/main", true),
            ("sandbox/demo/mainx", false),
        ] {
            let by_push = push.judge_target(&update(branch));
            let by_proxy = contents("a.rs", branch);
            assert_eq!(
                by_push.is_err(),
                protected,
                "git push to {branch}: {by_push:?}"
            );
            assert_eq!(
                by_proxy.is_err(),
                protected,
                "contents PUT on {branch}: {by_proxy:?}"
            );
        }
    }

    #[test]
    fn globs_cross_slashes() {
        let g = Globs::new(&["release/*", "main", ".github/workflows/**"]).unwrap();
        assert!(g.matches("release/1.0"));
        assert!(g.matches("release/a/b"));
        assert!(g.matches("main"));
        assert!(!g.matches("mainx"));
        assert!(!g.matches("xmain"));
        assert!(g.matches(".github/workflows/x.yml"));
        assert!(g.matches(".github/workflows/a/b.yml"));
        assert!(!g.matches(".github/CODEOWNERS"));
        assert_eq!(g.first_match("release/2"), Some("release/*"));
    }
}
