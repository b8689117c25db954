//! The `github` preset: what a sandbox must never do with the GitHub token it is lent.
//!
//! The principle: **git data changes only through the git API** (which enforces
//! `git.push_branches`, fast-forward only, `git.protected_branches` and
//! `git.restricted_paths`), and the token never administers anything. So on
//! `api.github.com` the preset denies, for every write method (anything but `GET`, `HEAD`,
//! `OPTIONS`), under `/repos/<owner>/<repo>` **and** its id form `/repositories/<id>`
//! (GitHub serves both):
//!
//! | what | paths (after the repository prefix) |
//! |---|---|
//! | change, rename, archive, delete or transfer the repository | *(the repository itself)*, `transfer`, `generate`, `import/**` |
//! | merge | `pulls/*/merge` (merge a PR), `merges` (merge a branch), `merge-upstream` |
//! | dismiss a review | `pulls/*/reviews/*/dismissals` |
//! | create, move, force-update or delete a ref: all of `git/refs/**` and `git/ref/**` (a REST ref update would skip every git rule, so even a fast-forward is refused) | `git/refs/**`, `git/ref/**` |
//! | branch protection and renaming, rulesets, tag protection | `branches/**`, `rulesets/**`, `tags/protection/**` |
//! | Actions: workflows (dispatch, enable, disable), runs and jobs (re-run, cancel, approve, pending deployments), variables, permissions, runners, OIDC, caches | `actions/**`, `dispatches` |
//! | environments, deployments, releases, Pages | `environments/**`, `deployments/**`, `releases/**`, `pages/**` |
//! | forge CI results | `statuses/**`, `check-runs/**`, `check-suites/**` |
//! | access: deploy keys, collaborators, invitations, webhooks, codespaces | `keys/**`, `collaborators/**`, `invitations/**`, `hooks/**`, `codespaces/**` |
//! | security settings and alerts | `vulnerability-alerts`, `automated-security-fixes`, `private-vulnerability-reporting`, `code-scanning/**`, `secret-scanning/**`, `dependabot/**`, `autolinks/**`, `properties/**`, `interaction-limits`, `lfs` |
//!
//! and for **every method**, reads included: `actions/secrets/**`,
//! `environments/*/secrets/**`, `dependabot/secrets/**`, `codespaces/secrets/**`. Outside
//! repositories it denies writes to `/orgs/**`, `/teams/**`, `/user/**` (SSH and GPG keys,
//! e-mails, new repositories), `/enterprises/**`, `/admin/**` and `/gists/**` (a paste site
//! out of the sandbox), every method on `/authorizations/**` and `/applications/**`, and
//! any method but `POST` on `/graphql`.
//!
//! Three endpoints are judged on their body ([`crate::l7::BodyRule`]):
//! - `POST /graphql` (at most [`GRAPHQL_BODY_CAP`] bytes): the JSON request (or a batch,
//!   each judged) is read strictly ([`crate::json`]); its `query` is parsed
//!   ([`crate::graphql`]) and denied if a mutation operation runs any of
//!   [`DENIED_MUTATIONS`] (or a name starting with one of [`DENIED_MUTATION_PREFIXES`]),
//!   or runs `addPullRequestReview`/`submitPullRequestReview` while the document or the
//!   variables mention `APPROVE`. `createCommitOnBranch` is always denied: its files and
//!   branch may sit in variables, and it would skip `git.restricted_paths`. Anything
//!   unparseable is denied.
//! - `PUT`/`DELETE` of `contents/**` (at most [`CONTENTS_BODY_CAP`] bytes): allowed only
//!   when the body names a `branch` that matches `git.push_branches` and none of
//!   `git.protected_branches`, and the file path matches none of `git.restricted_paths`
//!   (the same rules as a push, compiled by the same engine: [`crate::glob::GitGlobs`];
//!   the start branch the git API adds at runtime is not known here, so it is refused). Without `branch` (the default branch) it is denied. Other
//!   write methods on `contents/**` are denied.
//! - `POST pulls/*/reviews` and `POST pulls/*/reviews/*/events` (at most
//!   [`REVIEW_BODY_CAP`] bytes): denied when `event` is `APPROVE`: a sandbox may review,
//!   never approve (an approval can satisfy a required review).
//!
//! On these three a non-empty query string is denied (it could override the judged
//! body) and the body must be JSON ([`crate::l7::judged_body_content_type_ok`]).
//!
//! Forks, issues, pull requests (opening, editing, commenting, reviewing), labels and
//! every read stay allowed. A preset deny cannot be re-allowed by a `[[rules]]` allow
//! (deny wins).

use serde_json::Value;

use crate::glob::{GitRules, PathGlob};
use crate::graphql::{Token, mutation_fields, tokenize};
use crate::json::{contains_string, parse_strict};
use crate::l7::{Action, BodyJudge, BodyRule, L7Rule, Methods};
use crate::path::PathForms;
use crate::rule::HostRule;

/// The host the preset's rules are for.
pub const API_HOST: &str = "api.github.com";
/// Largest GraphQL request body judged.
pub const GRAPHQL_BODY_CAP: usize = 256 * 1024;
/// Largest contents write body judged (the file travels base64-encoded in it).
pub const CONTENTS_BODY_CAP: usize = 1024 * 1024;
/// Largest review body judged.
pub const REVIEW_BODY_CAP: usize = 256 * 1024;

/// Repository prefixes: GitHub serves every repository endpoint under both.
const REPO_PREFIXES: [&str; 2] = ["/repos/*/*", "/repositories/*"];

#[derive(Clone, Copy)]
enum M {
    /// Every method but GET, HEAD, OPTIONS.
    Writes,
    /// Every method.
    Any,
    /// Every method but POST.
    NotPost,
    /// Writes other than PUT and DELETE (judged on their body).
    WritesButPutDelete,
}

/// `(methods, path, what)`; `{repo}` stands for each of [`REPO_PREFIXES`].
const DENY: &[(M, &str, &str)] = &[
    (M::Writes, "{repo}", "change or delete the repository"),
    (M::Writes, "{repo}/transfer", "transfer the repository"),
    (
        M::Writes,
        "{repo}/generate",
        "create a repository from a template",
    ),
    (M::Writes, "{repo}/import/**", "import into the repository"),
    (M::Writes, "{repo}/pulls/*/merge", "merge a pull request"),
    (M::Writes, "{repo}/merges", "merge a branch"),
    (M::Writes, "{repo}/merge-upstream", "sync a fork branch"),
    (
        M::Writes,
        "{repo}/pulls/*/reviews/*/dismissals",
        "dismiss a review",
    ),
    (
        M::Writes,
        "{repo}/git/refs/**",
        "update a ref (git goes through the git API)",
    ),
    (
        M::Writes,
        "{repo}/git/ref/**",
        "update a ref (git goes through the git API)",
    ),
    (
        M::WritesButPutDelete,
        "{repo}/contents/**",
        "write contents",
    ),
    (
        M::Writes,
        "{repo}/branches/**",
        "change branch protection or rename a branch",
    ),
    (M::Writes, "{repo}/rulesets/**", "change rulesets"),
    (
        M::Writes,
        "{repo}/tags/protection/**",
        "change tag protection",
    ),
    (M::Any, "{repo}/actions/secrets/**", "Actions secrets"),
    (
        M::Any,
        "{repo}/environments/*/secrets/**",
        "environment secrets",
    ),
    (M::Any, "{repo}/dependabot/secrets/**", "Dependabot secrets"),
    (M::Any, "{repo}/codespaces/secrets/**", "Codespaces secrets"),
    (
        M::Writes,
        "{repo}/actions/**",
        "change Actions (workflows, runs, variables, permissions, runners)",
    ),
    (M::Writes, "{repo}/dispatches", "trigger workflows"),
    (M::Writes, "{repo}/environments/**", "change environments"),
    (M::Writes, "{repo}/deployments/**", "deploy"),
    (M::Writes, "{repo}/releases/**", "publish releases"),
    (M::Writes, "{repo}/pages/**", "change Pages"),
    (M::Writes, "{repo}/statuses/**", "set commit statuses"),
    (M::Writes, "{repo}/check-runs/**", "write check runs"),
    (M::Writes, "{repo}/check-suites/**", "write check suites"),
    (M::Writes, "{repo}/keys/**", "change deploy keys"),
    (M::Writes, "{repo}/collaborators/**", "change collaborators"),
    (M::Writes, "{repo}/invitations/**", "change invitations"),
    (M::Writes, "{repo}/hooks/**", "change webhooks"),
    (M::Writes, "{repo}/codespaces/**", "create codespaces"),
    (
        M::Writes,
        "{repo}/vulnerability-alerts",
        "change security settings",
    ),
    (
        M::Writes,
        "{repo}/automated-security-fixes",
        "change security settings",
    ),
    (
        M::Writes,
        "{repo}/private-vulnerability-reporting",
        "change security settings",
    ),
    (M::Writes, "{repo}/code-scanning/**", "change code scanning"),
    (
        M::Writes,
        "{repo}/secret-scanning/**",
        "change secret scanning",
    ),
    (M::Writes, "{repo}/dependabot/**", "change Dependabot"),
    (M::Writes, "{repo}/autolinks/**", "change autolinks"),
    (
        M::Writes,
        "{repo}/properties/**",
        "change repository properties",
    ),
    (
        M::Writes,
        "{repo}/interaction-limits",
        "change interaction limits",
    ),
    (M::Writes, "{repo}/lfs", "change LFS settings"),
    (M::Writes, "/orgs/**", "administer an organization"),
    (M::Writes, "/teams/**", "administer a team"),
    (M::Writes, "/user/**", "change the token owner's account"),
    (M::Writes, "/enterprises/**", "administer an enterprise"),
    (M::Writes, "/admin/**", "administer the server"),
    (M::Writes, "/gists/**", "write gists"),
    (M::Any, "/authorizations/**", "manage tokens"),
    (M::Any, "/applications/**", "manage tokens"),
    (M::NotPost, "/graphql", "GraphQL other than POST"),
];

/// GraphQL mutations denied outright (compared ASCII case-insensitively).
pub const DENIED_MUTATIONS: &[&str] = &[
    "mergePullRequest",
    "enablePullRequestAutoMerge",
    "enqueuePullRequest",
    "mergeBranch",
    "dismissPullRequestReview",
    "createRef",
    "updateRef",
    "updateRefs",
    "deleteRef",
    "createLinkedBranch",
    "createCommitOnBranch",
    "createRepository",
    "cloneTemplateRepository",
    "deleteRepository",
    "updateRepository",
    "archiveRepository",
    "unarchiveRepository",
    "transferRepository",
    "updateRepositoryWebCommitSignoffSetting",
    "createBranchProtectionRule",
    "updateBranchProtectionRule",
    "deleteBranchProtectionRule",
    "createRepositoryRuleset",
    "updateRepositoryRuleset",
    "deleteRepositoryRuleset",
    "addDeployKey",
    "deleteDeployKey",
    "createEnvironment",
    "updateEnvironment",
    "deleteEnvironment",
    "createDeployment",
    "createDeploymentStatus",
    "approveDeployments",
    "createCheckRun",
    "updateCheckRun",
    "createCheckSuite",
    "rerequestCheckSuite",
    "updateTeamsRepository",
    "addEnterpriseAdmin",
    "removeEnterpriseAdmin",
    "deleteIssue",
];

/// GraphQL mutation name prefixes denied (organization and enterprise administration).
pub const DENIED_MUTATION_PREFIXES: &[&str] = &[
    "updateEnterprise",
    "updateOrganization",
    "updateIpAllowList",
];

/// Mutations that approve when their event is `APPROVE`.
const APPROVING_MUTATIONS: [&str; 2] = ["addPullRequestReview", "submitPullRequestReview"];

/// The preset's deny rules and body judges, built from the tables above.
///
/// # Errors
/// A table entry that does not parse (a bug caught by the tests; the policy refuses to
/// load rather than run without it).
pub(crate) fn rules() -> Result<(Vec<L7Rule>, Vec<BodyRule>), String> {
    let host = HostRule::parse(API_HOST).map_err(|e| e.to_string())?;
    let glob = |p: &str| PathGlob::parse(p).map_err(|e| format!("{p}: {e}"));
    let expand = |p: &str| -> Vec<String> {
        if p.contains("{repo}") {
            REPO_PREFIXES
                .iter()
                .map(|r| p.replace("{repo}", r))
                .collect()
        } else {
            vec![p.to_owned()]
        }
    };
    let mut deny = Vec::new();
    for (m, path, what) in DENY {
        let methods = match m {
            M::Writes => Methods::writes(),
            M::Any => Methods::Any,
            M::NotPost => Methods::Except(vec!["POST".into()]),
            M::WritesButPutDelete => Methods::Except(
                ["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]
                    .map(String::from)
                    .to_vec(),
            ),
        };
        for p in expand(path) {
            deny.push(L7Rule {
                name: Some(format!("github: {what} ({methods} {p})")),
                host: host.clone(),
                methods: methods.clone(),
                path: glob(&p)?,
                action: Action::Deny,
            });
        }
    }
    let mut body = vec![BodyRule {
        name: "github: GraphQL".into(),
        host: host.clone(),
        methods: Methods::Only(vec!["POST".into()]),
        path: glob("/graphql")?,
        cap: GRAPHQL_BODY_CAP,
        judge: BodyJudge::GithubGraphql,
    }];
    for (path, methods, cap, judge, what) in [
        (
            "{repo}/contents/**",
            vec!["PUT", "DELETE"],
            CONTENTS_BODY_CAP,
            BodyJudge::GithubContents,
            "write contents",
        ),
        (
            "{repo}/pulls/*/reviews",
            vec!["POST"],
            REVIEW_BODY_CAP,
            BodyJudge::GithubReview,
            "review",
        ),
        (
            "{repo}/pulls/*/reviews/*/events",
            vec!["POST"],
            REVIEW_BODY_CAP,
            BodyJudge::GithubReview,
            "review",
        ),
    ] {
        for p in expand(path) {
            body.push(BodyRule {
                name: format!("github: {what} ({p})"),
                host: host.clone(),
                methods: Methods::Only(methods.iter().map(|m| (*m).to_owned()).collect()),
                path: glob(&p)?,
                cap,
                judge,
            });
        }
    }
    Ok((deny, body))
}

/// The GraphQL judge: `Err(why)` denies.
pub(crate) fn judge_graphql(body: &[u8]) -> Result<(), String> {
    let value = parse_strict(body).map_err(|e| format!("body is not strict JSON ({e})"))?;
    let requests: Vec<&Value> = match &value {
        Value::Array(batch) if !batch.is_empty() => batch.iter().collect(),
        Value::Object(_) => vec![&value],
        _ => return Err("body is not a GraphQL request object or batch".into()),
    };
    for request in requests {
        let obj = request
            .as_object()
            .ok_or("a batch entry is not a GraphQL request object")?;
        let Some(Value::String(query)) = obj.get("query") else {
            return Err("no \"query\" string".into());
        };
        let variables = match obj.get("variables") {
            None | Some(Value::Null) => Value::Null,
            Some(Value::String(s)) => parse_strict(s.as_bytes())
                .map_err(|e| format!("\"variables\" is not strict JSON ({e})"))?,
            Some(v) => v.clone(),
        };
        let fields = mutation_fields(query).map_err(|e| e.to_string())?;
        for field in &fields {
            let name = field.name.as_str();
            let denied = DENIED_MUTATIONS
                .iter()
                .any(|d| d.eq_ignore_ascii_case(name))
                || DENIED_MUTATION_PREFIXES.iter().any(|p| {
                    name.get(..p.len())
                        .is_some_and(|h| h.eq_ignore_ascii_case(p))
                });
            if denied {
                return Err(format!("GraphQL mutation {name}"));
            }
            let approving = APPROVING_MUTATIONS
                .iter()
                .any(|a| a.eq_ignore_ascii_case(name));
            if approving && (mentions(query, "APPROVE") || contains_string(&variables, "APPROVE")) {
                return Err(format!("GraphQL mutation {name} with event APPROVE"));
            }
        }
    }
    Ok(())
}

/// Whether a name or string token of the document equals `word` (ASCII case-insensitive):
/// catches an `APPROVE` given as an argument, a variable default or a string.
fn mentions(document: &str, word: &str) -> bool {
    tokenize(document).map_or(true, |tokens| {
        tokens.iter().any(|t| match t {
            Token::Name(s) | Token::Str(s) => s.trim().eq_ignore_ascii_case(word),
            _ => false,
        })
    })
}

/// The contents judge: `Err(why)` denies. `glob` is the rule's path glob (ending in
/// `/contents/**`), used to find the file path in every reading of the request path.
pub(crate) fn judge_contents(
    git: &GitRules,
    glob: &PathGlob,
    forms: &PathForms,
    body: &[u8],
) -> Result<(), String> {
    let value = parse_strict(body).map_err(|e| format!("body is not strict JSON ({e})"))?;
    let branch = match value.get("branch") {
        Some(Value::String(b)) => b.as_str(),
        None => {
            return Err(
                "no \"branch\": the default branch cannot be checked against git.protected_branches"
                    .into(),
            );
        }
        Some(_) => return Err("\"branch\" is not a string".into()),
    };
    if !value.is_object() {
        return Err("body is not a JSON object".into());
    }
    let branch = branch.strip_prefix("refs/heads/").unwrap_or(branch);
    if let Some(p) = git.protected_branches.first_match(branch) {
        return Err(format!("branch {branch:?} is protected ({p})"));
    }
    if !git.push_branches.matches(branch) {
        return Err(format!("branch {branch:?} is not in git.push_branches"));
    }
    let mut files = 0;
    for form in forms.all() {
        let Some(tail) = glob.tail(form) else {
            continue;
        };
        files += 1;
        let file = tail.join("/");
        if let Some(r) = git.restricted_paths.first_match(&file) {
            return Err(format!("path {file:?} is restricted ({r})"));
        }
    }
    if files == 0 {
        return Err("cannot find the file path".into());
    }
    Ok(())
}

/// The review judge: `Err(why)` denies an approval.
pub(crate) fn judge_review(body: &[u8]) -> Result<(), String> {
    let value = parse_strict(body).map_err(|e| format!("body is not strict JSON ({e})"))?;
    if !value.is_object() {
        return Err("body is not a JSON object".into());
    }
    match value.get("event") {
        None => Ok(()),
        Some(Value::String(e)) if !e.trim().eq_ignore_ascii_case("APPROVE") => Ok(()),
        Some(Value::String(_)) => Err("approving a pull request".into()),
        Some(_) => Err("\"event\" is not a string".into()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::host::Host;
    use crate::l7::{L7Verdict, RequestView};
    use crate::model::Policy;
    use crate::reason::Reason;

    fn policy() -> Policy {
        let text = r#"
[sandbox]
name = "demo"
[l7]
presets = ["github"]
[git]
repositories = ["github.com/o/r"]
protected_branches = ["main", "release/*"]
"#;
        Policy::parse(text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn view<'a>(host: &'a Host, method: &'a str, target: &'a str) -> RequestView<'a> {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        RequestView {
            host,
            method,
            path,
            query,
        }
    }

    fn api() -> Host {
        Host::parse(API_HOST).unwrap()
    }

    /// The verdict on a request with an optional body (judge, then body_needed/judge_body
    /// exactly as the proxy calls them).
    fn verdict(p: &Policy, method: &str, target: &str, body: Option<&str>) -> L7Verdict {
        let h = api();
        let req = view(&h, method, target);
        let head = p.judge(&req);
        match p.body_needed(&req) {
            None => head,
            Some(cap) => {
                let body = body.unwrap_or("").as_bytes();
                if body.len() > cap {
                    return L7Verdict::deny("body over cap");
                }
                p.judge_body(&req, body)
            }
        }
    }

    #[track_caller]
    fn denied(p: &Policy, method: &str, target: &str, body: Option<&str>) -> String {
        match verdict(p, method, target, body) {
            L7Verdict::Deny { reason, rule } => {
                assert_eq!(reason, Reason::RequestDeniedByRule);
                rule
            }
            v => panic!("{method} {target} {body:?} passed: {v:?}"),
        }
    }

    #[track_caller]
    fn passes(p: &Policy, method: &str, target: &str, body: Option<&str>) {
        let v = verdict(p, method, target, body);
        assert!(v.is_pass(), "{method} {target} {body:?}: {v:?}");
    }

    #[test]
    fn every_table_entry_parses() {
        let (deny, body) = rules().unwrap();
        assert_eq!(
            deny.len(),
            DENY.iter()
                .map(|(_, p, _)| if p.contains("{repo}") { 2 } else { 1 })
                .sum::<usize>()
        );
        assert_eq!(body.len(), 7);
        let p = policy();
        assert!(p.intercepts(&api()));
        assert!(p.intercepts(&Host::parse("github.com").unwrap()));
    }

    #[test]
    fn attack_the_token_cannot_merge_update_refs_or_administer() {
        let p = policy();
        for (m, t) in [
            ("PUT", "/repos/o/r/pulls/1/merge"),
            ("PUT", "/repositories/123/pulls/1/merge"),
            ("PUT", "/repos/o/r/pulls/1/merge.json"),
            ("PUT", "//repos/o/r/pulls/1/merge/"),
            ("PUT", "/repos/o/r/pulls%2F1%2Fmerge"),
            ("POST", "/repos/o/r/merges"),
            ("POST", "/repos/o/r/merge-upstream"),
            ("PUT", "/repos/o/r/pulls/1/reviews/2/dismissals"),
            ("DELETE", "/repos/o/r/git/refs/heads/main"),
            ("PATCH", "/repos/o/r/git/refs/heads/main"),
            ("PATCH", "/repos/o/r/git/refs/heads/sandbox/demo/x"),
            ("POST", "/repos/o/r/git/refs"),
            ("DELETE", "/repos/o/r/git/refs/tags/v1"),
            ("DELETE", "/repos/o/r"),
            ("PATCH", "/repos/o/r"),
            ("PATCH", "/repos/o/r/"),
            ("PATCH", "/REPOS/O/R"),
            ("DELETE", "/repositories/123"),
            ("POST", "/repos/o/r/transfer"),
            ("PUT", "/repos/o/r/branches/main/protection"),
            (
                "DELETE",
                "/repos/o/r/branches/release/v1/protection/enforce_admins",
            ),
            ("POST", "/repos/o/r/branches/main/rename"),
            ("POST", "/repos/o/r/rulesets"),
            ("PUT", "/repos/o/r/rulesets/1"),
            ("POST", "/repos/o/r/actions/workflows/ci.yml/dispatches"),
            ("PUT", "/repos/o/r/actions/workflows/1/disable"),
            ("POST", "/repos/o/r/actions/runs/1/rerun"),
            ("POST", "/repos/o/r/actions/runs/1/approve"),
            ("POST", "/repos/o/r/actions/runs/1/pending_deployments"),
            ("PUT", "/repos/o/r/actions/permissions/workflow"),
            ("POST", "/repos/o/r/actions/runners/registration-token"),
            ("POST", "/repos/o/r/actions/variables"),
            ("POST", "/repos/o/r/dispatches"),
            ("PUT", "/repos/o/r/actions/secrets/X"),
            ("GET", "/repos/o/r/actions/secrets/public-key"),
            ("GET", "/repos/o/r/environments/prod/secrets"),
            ("GET", "/repos/o/r/dependabot/secrets"),
            ("DELETE", "/repos/o/r/codespaces/secrets/X"),
            ("PUT", "/repos/o/r/environments/prod"),
            ("POST", "/repos/o/r/deployments"),
            ("POST", "/repos/o/r/releases"),
            ("POST", "/repos/o/r/statuses/abc"),
            ("POST", "/repos/o/r/check-runs"),
            ("POST", "/repos/o/r/keys"),
            ("PUT", "/repos/o/r/collaborators/evil"),
            ("POST", "/repos/o/r/hooks"),
            ("PATCH", "/repos/o/r/hooks/1/config"),
            ("DELETE", "/repos/o/r/vulnerability-alerts"),
            ("POST", "/orgs/o/repos"),
            ("PUT", "/orgs/o/memberships/evil"),
            ("POST", "/user/keys"),
            ("POST", "/user/repos"),
            ("PATCH", "/user"),
            ("POST", "/gists"),
            ("POST", "/authorizations"),
            ("GET", "/graphql"),
            ("DELETE", "/applications/x/token"),
            ("POST", "/repos/o/r/contents/x"),
            ("PATCH", "/repos/o/r/contents/x"),
        ] {
            let rule = denied(&p, m, t, None);
            assert!(rule.starts_with("github: "), "{m} {t}: {rule}");
        }
        // Method overrides do not help.
        denied(&p, "POST", "/repos/o/r/pulls/1/merge?_method=PUT", None);
    }

    #[test]
    fn ordinary_work_passes() {
        let p = policy();
        for (m, t) in [
            ("GET", "/repos/o/r"),
            ("GET", "/repos/o/r/pulls/1/merge"),
            ("GET", "/repos/o/r/git/refs/heads/main"),
            ("GET", "/repos/o/r/branches/main/protection"),
            ("GET", "/repos/o/r/actions/runs"),
            ("GET", "/repos/o/r/contents/README.md"),
            ("POST", "/repos/o/r/pulls"),
            ("PATCH", "/repos/o/r/pulls/1"),
            ("POST", "/repos/o/r/issues"),
            ("POST", "/repos/o/r/issues/1/comments"),
            ("POST", "/repos/o/r/pulls/1/comments"),
            ("POST", "/repos/o/r/forks"),
            ("POST", "/repos/o/r/git/blobs"),
            ("POST", "/repos/o/r/git/trees"),
            ("GET", "/user"),
            ("GET", "/orgs/o"),
        ] {
            passes(&p, m, t, None);
        }
    }

    fn gql(query: &str) -> String {
        serde_json::json!({ "query": query }).to_string()
    }

    #[test]
    fn attack_graphql_mutations_are_denied_however_written() {
        let p = policy();
        let h = api();
        assert_eq!(
            p.body_needed(&view(&h, "POST", "/graphql")),
            Some(GRAPHQL_BODY_CAP)
        );
        assert_eq!(
            p.body_needed(&view(&h, "POST", "/graphql.json")),
            Some(GRAPHQL_BODY_CAP)
        );
        assert_eq!(p.body_needed(&view(&h, "GET", "/repos/o/r")), None);
        // A query string could override the judged body (Rails merges params).
        let ok = gql("{ viewer { login } }");
        passes(&p, "POST", "/graphql", Some(&ok));
        let rule = denied(
            &p,
            "POST",
            "/graphql?query=mutation%7BmergePullRequest%7D",
            Some(&ok),
        );
        assert!(rule.contains("query string"), "{rule}");
        denied(
            &p,
            "POST",
            "/repos/o/r/pulls/1/reviews?event=APPROVE",
            Some(r#"{"event":"COMMENT"}"#),
        );
        denied(
            &p,
            "PUT",
            "/repos/o/r/contents/a?branch=main",
            Some(r#"{"branch":"sandbox/demo/x"}"#),
        );
        for q in [
            "mutation { mergePullRequest(input: {pullRequestId: \"x\"}) { clientMutationId } }",
            "mutation M { ok: mergePullRequest(input: {pullRequestId: \"x\"}) { clientMutationId } }",
            "mutation { ...F } fragment F on Mutation { enablePullRequestAutoMerge(input: {}) { x } }",
            "mutation { ... on Mutation { updateRef(input: {}) { x } } }",
            "mutation { updateRefs(input: {}) { x } }",
            "mutation { deleteRef(input: {}) { x } }",
            "mutation { createRef(input: {}) { x } }",
            "mutation { createCommitOnBranch(input: $i) { x } }",
            "mutation { deleteRepository(input: {}) { x } }",
            "mutation { updateRepository(input: {}) { x } }",
            "mutation { archiveRepository(input: {}) { x } }",
            "mutation { createBranchProtectionRule(input: {}) { x } }",
            "mutation { deleteRepositoryRuleset(input: {}) { x } }",
            "mutation { updateOrganizationAllowPrivateRepositoryForkingSetting(input: {}) { x } }",
            "query { viewer { login } } mutation { addComment(input: {}) { x } } mutation B { mergeBranch(input: {}) { x } }",
            "mutation { # a comment\n mergePullRequest(input: {}) { x } }",
            "mutation { MergePullRequest(input: {}) { x } }",
        ] {
            let rule = denied(&p, "POST", "/graphql", Some(&gql(q)));
            assert!(rule.starts_with("github: GraphQL"), "{q}: {rule}");
        }
        // Approvals, however the APPROVE gets there.
        for (q, vars) in [
            (
                "mutation { addPullRequestReview(input: {pullRequestId: \"x\", event: APPROVE}) { x } }",
                "null",
            ),
            (
                "mutation($e: PullRequestReviewEvent = APPROVE) { addPullRequestReview(input: {event: $e}) { x } }",
                "null",
            ),
            (
                "mutation($i: AddPullRequestReviewInput!) { addPullRequestReview(input: $i) { x } }",
                r#"{"i": {"event": "APPROVE"}}"#,
            ),
            (
                "mutation($i: SubmitPullRequestReviewInput!) { submitPullRequestReview(input: $i) { x } }",
                r#""{\"i\": {\"event\": \"APPROVE\"}}""#,
            ),
        ] {
            let body = format!(
                "{{\"query\": {}, \"variables\": {vars}}}",
                serde_json::json!(q)
            );
            denied(&p, "POST", "/graphql", Some(&body));
        }
        // Batches: one bad entry denies the lot.
        let batch = format!(
            "[{}, {}]",
            gql("query { viewer { login } }"),
            gql("mutation { mergePullRequest(input: {}) { x } }")
        );
        denied(&p, "POST", "/graphql", Some(&batch));
    }

    #[test]
    fn attack_unparseable_graphql_bodies_are_denied() {
        let p = policy();
        for body in [
            "",
            "not json",
            "[]",
            "{}",
            r#"{"query": 1}"#,
            r#"{"query": "query { a }", "query": "mutation { mergePullRequest { x } }"}"#,
            r#"{"query": "mutation { mergePullRequest { x }"}"#,
            r#"{"query": "Mutation { mergePullRequest { x } }"}"#,
            r#"{"query": "query { a }", "variables": "{not json"}"#,
            "[1]",
            "\u{feff}{\"query\": \"{ a }\"}",
        ] {
            denied(&p, "POST", "/graphql", Some(body));
        }
        let big = gql(&format!(
            "query {{ a(x: \"{}\") }}",
            "a".repeat(GRAPHQL_BODY_CAP)
        ));
        denied(&p, "POST", "/graphql", Some(&big));
    }

    #[test]
    fn graphql_reads_and_harmless_mutations_pass() {
        let p = policy();
        for q in [
            "query { repository(owner: \"o\", name: \"r\") { pullRequest(number: 1) { mergeable } } }",
            "{ search(query: \"mergePullRequest deleteRef\", type: ISSUE) { issueCount } }",
            "mutation { addComment(input: {subjectId: \"x\", body: \"please mergePullRequest and deleteRef\"}) { clientMutationId } }",
            "mutation { addComment(input: {body: \"\"\"\nmutation { mergePullRequest }\n\"\"\"}) { x } }",
            "mutation { createPullRequest(input: {repositoryId: \"x\", baseRefName: \"main\", headRefName: \"sandbox/demo/a\", title: \"t\"}) { x } }",
            "mutation { mergePullRequest: addComment(input: {}) { x } }",
            "mutation { addPullRequestReview(input: {pullRequestId: \"x\", event: COMMENT, body: \"nit\"}) { x } }",
        ] {
            passes(&p, "POST", "/graphql", Some(&gql(q)));
        }
        let batch = format!(
            "[{}, {}]",
            gql("{ viewer { login } }"),
            gql("{ rateLimit { remaining } }")
        );
        passes(&p, "POST", "/graphql", Some(&batch));
    }

    #[test]
    fn contents_writes_follow_the_push_rules() {
        let p = policy();
        let put = |t: &str, body: &str| verdict(&p, "PUT", t, Some(body));
        assert!(
            put(
                "/repos/o/r/contents/src/a.rs",
                r#"{"message":"m","content":"eA==","branch":"sandbox/demo/x"}"#
            )
            .is_pass()
        );
        assert!(
            put(
                "/repositories/1/contents/src/a.rs",
                r#"{"message":"m","content":"eA==","branch":"refs/heads/sandbox/demo/x"}"#
            )
            .is_pass()
        );
        for (t, body, why) in [
            (
                "/repos/o/r/contents/src/a.rs",
                r#"{"message":"m","content":"eA=="}"#,
                "no \"branch\"",
            ),
            (
                "/repos/o/r/contents/src/a.rs",
                r#"{"branch":"main"}"#,
                "protected",
            ),
            (
                "/repos/o/r/contents/src/a.rs",
                r#"{"branch":"MAIN"}"#,
                "protected",
            ),
            (
                "/repos/o/r/contents/src/a.rs",
                r#"{"branch":"refs/heads/main"}"#,
                "protected",
            ),
            (
                "/repos/o/r/contents/src/a.rs",
                r#"{"branch":"release/1/x"}"#,
                "protected",
            ),
            (
                "/repos/o/r/contents/src/a.rs",
                r#"{"branch":"feature/x"}"#,
                "not in git.push_branches",
            ),
            (
                "/repos/o/r/contents/src/a.rs",
                r#"{"branch":"sandbox/demo/x","branch":"main"}"#,
                "strict JSON",
            ),
            (
                "/repos/o/r/contents/src/a.rs",
                r#"{"branch":["main"]}"#,
                "not a string",
            ),
            (
                "/repos/o/r/contents/.github/workflows/ci.yml",
                r#"{"branch":"sandbox/demo/x"}"#,
                "restricted",
            ),
            (
                "/repos/o/r/contents/.GitHub/Workflows/ci.yml",
                r#"{"branch":"sandbox/demo/x"}"#,
                "restricted",
            ),
            (
                "/repos/o/r/contents/src/../.github/workflows/ci.yml",
                r#"{"branch":"sandbox/demo/x"}"#,
                "restricted",
            ),
            (
                "/repos/o/r/contents/.github%2Fworkflows%2Fci.yml",
                r#"{"branch":"sandbox/demo/x"}"#,
                "restricted",
            ),
        ] {
            let v = put(t, body);
            match &v {
                L7Verdict::Deny { rule, .. } => assert!(rule.contains(why), "{t} {body}: {rule}"),
                L7Verdict::Pass { .. } | L7Verdict::Ask { .. } => panic!("{t} {body} passed"),
            }
        }
        let v = verdict(
            &p,
            "DELETE",
            "/repos/o/r/contents/a",
            Some(r#"{"sha":"x","message":"m"}"#),
        );
        assert!(!v.is_pass());
    }

    /// `**` components match zero directories too, as the git API's push judge reads them
    /// (issue 20: `**/secrets.env` was refused by `git push` but let through here).
    #[test]
    fn attack_double_star_git_globs_match_at_every_depth_including_none() {
        let text = r#"
[sandbox]
name = "demo"
[l7]
presets = ["github"]
[git]
repositories = ["github.com/o/r"]
push_branches = ["sandbox/demo/*", "main", "x/main"]
protected_branches = ["**/main"]
restricted_paths = ["**/secrets.env", "src/**/*.pem"]
"#;
        let p = Policy::parse(text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
        let ok = r#"{"message":"m","content":"eA==","branch":"sandbox/demo/x"}"#;
        for (file, restricted) in [
            ("secrets.env", true),
            ("Secrets.ENV", true),
            ("a/secrets.env", true),
            ("a/b/secrets.env", true),
            ("src/a.pem", true),
            ("src/x/y/a.pem", true),
            ("notsecrets.env", false),
            ("src/a.pemx", false),
            ("lib/a.pem", false),
        ] {
            let v = verdict(&p, "PUT", &format!("/repos/o/r/contents/{file}"), Some(ok));
            match (&v, restricted) {
                (L7Verdict::Deny { rule, .. }, true) => {
                    assert!(rule.contains("restricted"), "{file}: {rule}");
                }
                (L7Verdict::Pass { .. }, false) => {}
                _ => panic!("{file}: {v:?}"),
            }
        }
        for branch in ["main", "x/main", "refs/heads/main"] {
            let body = format!(r#"{{"message":"m","content":"eA==","branch":"{branch}"}}"#);
            let rule = denied(&p, "PUT", "/repos/o/r/contents/a.rs", Some(&body));
            assert!(rule.contains("protected"), "{branch}: {rule}");
        }
    }

    #[test]
    fn attack_reviews_may_comment_never_approve() {
        let p = policy();
        let t = "/repos/o/r/pulls/1/reviews";
        passes(
            &p,
            "POST",
            t,
            Some(r#"{"body":"looks off","event":"COMMENT"}"#),
        );
        passes(
            &p,
            "POST",
            t,
            Some(r#"{"body":"x","event":"REQUEST_CHANGES"}"#),
        );
        passes(&p, "POST", t, Some(r#"{"body":"APPROVE"}"#));
        for body in [
            r#"{"event":"APPROVE"}"#,
            r#"{"event":"approve "}"#,
            r#"{"event":"\u0041PPROVE"}"#,
            r#"{"event":"COMMENT","event":"APPROVE"}"#,
            r#"{"event":["APPROVE"]}"#,
            "not json",
        ] {
            denied(&p, "POST", t, Some(body));
            denied(
                &p,
                "POST",
                "/repos/o/r/pulls/1/reviews/9/events",
                Some(body),
            );
        }
    }
}
