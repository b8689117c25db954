//! Git smart-HTTP request paths: which repository and which service a request is for.
//!
//! Recognised (and nothing else): `/<owner>/<repo>[.git]/info/refs?service=git-upload-pack`
//! (or `git-receive-pack`) and `/<owner>/<repo>[.git]/git-upload-pack` (or
//! `git-receive-pack`). Owner and repository are read as the policy reads them
//! ([`airlock_policy::repo`]): lowercase, without `.git` in any case.
//! [`is_push`] is deliberately broader: any request whose decoded path or query mentions
//! `git-receive-pack` counts as a push attempt, whatever its shape.

/// The two smart-HTTP services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Fetch / clone.
    UploadPack,
    /// Push.
    ReceivePack,
}

/// A recognised smart-HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRequest {
    /// Owner, lowercase.
    pub owner: String,
    /// Repository, lowercase, without `.git`.
    pub repo: String,
    /// Which service.
    pub service: Service,
}

impl GitRequest {
    /// `host/owner/repo` as [`airlock_policy::repo::repository_id`] reads it, the reading of
    /// `[git] repositories` and of the git API's remotes; empty (matching no listed
    /// repository) when `host` is an address or no host at all.
    #[must_use]
    pub fn repository(&self, host: &str) -> String {
        airlock_policy::repo::repository_id(host, &self.owner, &self.repo).unwrap_or_default()
    }
}

fn service(name: &str) -> Option<Service> {
    match name {
        "git-upload-pack" => Some(Service::UploadPack),
        "git-receive-pack" => Some(Service::ReceivePack),
        _ => None,
    }
}

/// Parses a request's raw path and query. `None` for anything but the four smart-HTTP
/// shapes (percent-encoding, extra segments or parameters included: git never sends them).
#[must_use]
pub fn parse(path: &str, query: Option<&str>) -> Option<GitRequest> {
    let rest = path.strip_prefix('/')?;
    let mut parts = rest.split('/');
    let owner = parts.next()?;
    let repo = parts.next()?;
    let tail: Vec<&str> = parts.collect();
    let svc = match (tail.as_slice(), query) {
        (["info", "refs"], Some(q)) => service(q.strip_prefix("service=")?)?,
        ([name], None) => service(name)?,
        _ => return None,
    };
    let repo = airlock_policy::repo::without_git_suffix(repo);
    if !airlock_policy::repo::name_ok(owner) || !airlock_policy::repo::name_ok(repo) {
        return None;
    }
    Some(GitRequest {
        owner: owner.to_ascii_lowercase(),
        repo: repo.to_ascii_lowercase(),
        service: svc,
    })
}

/// Whether a request looks like a push in any form: `git-receive-pack` anywhere in the
/// path or query, raw or after any round of percent-decoding the L7 judge applies to a
/// path ([`airlock_policy::path::decode_rounds`]), case-insensitively.
/// A path or query still encoded after those rounds counts as a push (fail closed).
#[must_use]
pub fn is_push(path: &str, query: Option<&str>) -> bool {
    let mentions = |b: &[u8]| {
        b.windows(b"git-receive-pack".len())
            .any(|w| w.eq_ignore_ascii_case(b"git-receive-pack"))
    };
    let hit = |s: &str| {
        let rounds = airlock_policy::path::decode_rounds(s.as_bytes());
        airlock_policy::path::too_many_encodings(&rounds)
            || mentions(s.as_bytes())
            || rounds.iter().any(|r| mentions(r))
    };
    hit(path) || query.is_some_and(hit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(owner: &str, repo: &str, service: Service) -> Option<GitRequest> {
        Some(GitRequest {
            owner: owner.into(),
            repo: repo.into(),
            service,
        })
    }

    #[test]
    fn the_four_smart_http_shapes() {
        assert_eq!(
            parse("/Owner/Repo.git/info/refs", Some("service=git-upload-pack")),
            req("owner", "repo", Service::UploadPack)
        );
        assert_eq!(
            parse("/o/r/info/refs", Some("service=git-receive-pack")),
            req("o", "r", Service::ReceivePack)
        );
        assert_eq!(
            parse("/o/r.git/git-upload-pack", None),
            req("o", "r", Service::UploadPack)
        );
        assert_eq!(
            parse("/o/my.repo_x-1/git-receive-pack", None),
            req("o", "my.repo_x-1", Service::ReceivePack)
        );
        assert_eq!(
            req("o", "r", Service::UploadPack)
                .unwrap()
                .repository("github.com"),
            "github.com/o/r"
        );
    }

    /// The agent reaches the authorized repository through another spelling of its host
    /// (trailing dot, capitals, IDN) or of its `.git` suffix: the proxy reads it as the policy
    /// and the git API do (`airlock_policy::repo::repository_id`), one repository.
    #[test]
    fn host_and_suffix_spellings_read_as_the_policy_does() {
        let g = parse("/Acme/App.Git/git-upload-pack", None).unwrap();
        for host in [
            "github.com",
            "GitHub.com.",
            "ｇｉｔｈｕｂ.com",
            "github\u{ff0e}com",
        ] {
            assert_eq!(g.repository(host), "github.com/acme/app", "{host:?}");
        }
        let g = parse("/o/r/git-upload-pack", None).unwrap();
        assert_eq!(g.repository("bücher.example"), "xn--bcher-kva.example/o/r");
        // An address or a broken name is no repository a policy can list: it matches none.
        assert_eq!(g.repository("203.0.113.7"), "");
        assert_eq!(g.repository("xn--a.com"), "");
    }

    /// The policy writes the repository one way, the agent's request spells host and
    /// repository another: the check the proxy makes before lending the token
    /// (`[git] repositories` contains `repository(host)`) sees one repository, and a
    /// look-alike host or another repository none.
    #[test]
    fn policy_and_request_spellings_name_one_repository() {
        let text = "[sandbox]\nname = \"demo\"\n[git]\nrepositories = [\"GitHub.com./Acme/App\"]\n";
        let policy = airlock_policy::Policy::parse(text, std::path::Path::new("t.toml")).unwrap();
        let listed = |path: &str, host: &str| {
            let g = parse(path, None).unwrap();
            policy.git.repositories.contains(&g.repository(host))
        };
        assert!(listed("/acme/app/git-upload-pack", "github.com"));
        assert!(listed("/Acme/App.GIT/git-upload-pack", "ＧＩＴＨＵＢ.com"));
        assert!(listed("/acme/app.git/git-upload-pack", "GitHub.com."));
        assert!(!listed("/acme/app/git-upload-pack", "g\u{456}thub.com"));
        assert!(!listed("/acme/app2/git-upload-pack", "github.com"));
        assert!(!listed("/acme/app/git-upload-pack", "github.com.evil"));
    }

    #[test]
    fn everything_else_is_not_git() {
        for (p, q) in [
            ("/", None),
            ("/o/r", None),
            ("/o/r/info/refs", None),
            ("/o/r/info/refs", Some("service=git-upload-pack&x=1")),
            ("/o/r/info/refs", Some("service=git-upload-archive")),
            ("/o/r/git-upload-pack", Some("x=1")),
            ("/o/r/x/git-upload-pack", None),
            ("/o/../git-upload-pack", None),
            ("/o/%72/git-upload-pack", None),
            ("/api/graphql", None),
            ("o/r/git-upload-pack", None),
        ] {
            assert_eq!(parse(p, q), None, "{p} {q:?}");
        }
    }

    #[test]
    fn a_push_is_seen_in_any_spelling() {
        assert!(is_push("/o/r/git-receive-pack", None));
        assert!(is_push("/o/r/info/refs", Some("service=git-receive-pack")));
        assert!(is_push("/o/r/GIT-RECEIVE-PACK", None));
        assert!(is_push("/o/r/git%2Dreceive%2dpack", None));
        assert!(is_push(
            "/o/r/info/refs",
            Some("service=git%2dreceive-pack")
        ));
        // Decoded as many rounds as the L7 path readings are (issue 20).
        assert!(is_push("/o/r/git%252Dreceive-pack", None));
        assert!(is_push("/o/r/git%25252Dreceive%2525252dpack", None));
        assert!(is_push(
            "/o/r/info/refs",
            Some("service=git%252dreceive-pack")
        ));
        // Still encoded after the rounds a path may take: judged a push (fail closed).
        assert!(is_push("/o/r/%2525252525252F", None));
        assert!(!is_push("/o/r/git-upload-pack", None));
        assert!(!is_push("/o/r/info/refs", Some("service=git-upload-pack")));
    }

    /// Whatever reading the L7 judge finds `git-receive-pack` in, `is_push` finds it too.
    #[test]
    fn is_push_reads_every_path_form_the_l7_judge_reads() {
        use airlock_policy::path::PathForms;
        for p in [
            "/o/r/git-receive-pack",
            "/o/r/git%2Dreceive-pack",
            "/o/r/git%252Dreceive-pack",
            "/o/r/git%25252Dreceive-pack",
            "/o/r/GIT%2525252Dreceive-pack",
            "/o/r/x%2F..%2Fgit%2Dreceive-pack",
        ] {
            let forms = PathForms::analyse(p).unwrap();
            let seen = forms
                .all()
                .iter()
                .flatten()
                .any(|s| s.contains("git-receive-pack"));
            assert!(seen, "{p}");
            assert!(is_push(p, None), "{p}");
        }
    }
}
