//! `airlock policy show|reload|check|suggest NAME`: the policy revision a running sandbox's
//! proxy enforces with its effective rules and where each came from, a new one loaded
//! without a restart, a dry run (through its admin API), and the lines that would have
//! allowed what it refused (from its audit log).

use super::Ctx;
use airlock_cli::admin::Client;
use airlock_cli::admin::live::{short_hash, when};
use airlock_cli::audit_view;
use airlock_cli::cli::{PolicyArgs, PolicyCmd};
use airlock_cli::exit::{Code, Failure};
use airlock_cli::suggest;
use airlock_control::admin::{CheckQuery, ReloadRequest};
use anyhow::{Context, Result};
use std::path::Path;

/// `airlock policy …`.
pub async fn run(ctx: &Ctx, args: &PolicyArgs) -> Result<i32> {
    match &args.command {
        PolicyCmd::Suggest { name, since, json } => {
            suggest(ctx, name, since.as_deref(), *json).await
        }
        PolicyCmd::Show { name, .. }
        | PolicyCmd::Reload { name, .. }
        | PolicyCmd::Check { name, .. } => on(&ctx.admin(name)?, args).await,
    }
}

/// `policy show|reload|check` through `client` (a sandbox's, or a pod's); `suggest` reads
/// the audit files on this host, which a pod does not have.
pub async fn on(client: &Client, args: &PolicyArgs) -> Result<i32> {
    match &args.command {
        PolicyCmd::Show { json, .. } => show(client, *json).await,
        PolicyCmd::Reload { file, .. } => reload(client, file.as_deref()).await,
        PolicyCmd::Check {
            url, method, json, ..
        } => check(client, url, method.as_deref(), *json).await,
        PolicyCmd::Suggest { name, .. } => Err(Failure::new(
            Code::Usage,
            format!(
                "policy suggest reads the audit files on this host, and {name} has none here: read its refusals with `airlock logs {name} --audit --denied --json`"
            ),
        )
        .into()),
    }
}

/// `airlock policy suggest`: the proxy's refusals since `since`, folded into policy lines
/// ([`airlock_cli::suggest`]).
async fn suggest(ctx: &Ctx, name: &str, since: Option<&str>, json: bool) -> Result<i32> {
    let now = airlock_audit_schema::Timestamp::now().0;
    let from = match since.map(|s| suggest::since_ms(s, now)).transpose() {
        Ok(f) => f.unwrap_or(0),
        Err(e) => return Err(Failure::new(Code::Usage, e).into()),
    };
    let lines = super::audit::proxy_lines(ctx, name).await?;
    let refused = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| suggest::Refused::from_line(&v))
        .filter(|r| r.ts_ms >= from);
    let s = suggest::suggest(refused);
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", suggest::render(&s, name));
    }
    Ok(0)
}

async fn show(client: &Client, json: bool) -> Result<i32> {
    let p = client.policy().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        println!(
            "revision {} ({}) loaded at {} from {}",
            p.revision,
            p.hash,
            when(p.loaded_at_ms),
            p.origin
        );
        print!("{}", rules_table(&p.rules));
    }
    Ok(0)
}

/// The effective rules, one per line: list, rule (escaped for the terminal), origin, in
/// aligned columns.
fn rules_table(rules: &[airlock_control::admin::EffectiveRule]) -> String {
    let shown: Vec<String> = rules
        .iter()
        .map(|r| airlock_cli::review::escape(r.rule.as_bytes()))
        .collect();
    let list_w = rules.iter().map(|r| r.list.len()).max().unwrap_or(0);
    let rule_w = shown
        .iter()
        .map(|r| r.chars().count())
        .max()
        .unwrap_or(0)
        .min(60);
    rules
        .iter()
        .zip(&shown)
        .map(|(r, rule)| format!("  {:list_w$}  {rule:rule_w$}  {}\n", r.list, r.origin))
        .collect()
}

async fn reload(client: &Client, file: Option<&Path>) -> Result<i32> {
    let request = match file {
        None => ReloadRequest::default(),
        Some(f) => {
            let abs = std::path::absolute(f)
                .with_context(|| format!("cannot resolve {}", f.display()))?;
            let text = std::fs::read_to_string(&abs)
                .with_context(|| format!("cannot read the policy {}", abs.display()))?;
            ReloadRequest {
                text: Some(text),
                origin: Some(abs.display().to_string()),
            }
        }
    };
    let r = client.reload(request).await?;
    if r.changed {
        println!(
            "revision {} ({}) loaded at {}; {} open connection{} it refuses closed",
            r.revision,
            short_hash(&r.hash),
            when(r.loaded_at_ms),
            r.closed,
            if r.closed == 1 { "" } else { "s" }
        );
    } else {
        println!(
            "unchanged: revision {} ({}) stays in force",
            r.revision,
            short_hash(&r.hash)
        );
    }
    Ok(0)
}

async fn check(client: &Client, url: &str, method: Option<&str>, json: bool) -> Result<i32> {
    let c = client
        .check(CheckQuery {
            url: url.to_owned(),
            method: method.map(str::to_owned),
        })
        .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&c)?);
        return Ok(0);
    }
    let mut head = c.decision.clone();
    if let Some(r) = &c.reason {
        head.push_str(&format!(" {r}"));
    }
    if let Some(rule) = &c.rule {
        head.push_str(&format!("  rule {rule:?}"));
    }
    head.push_str(&format!(
        "  (revision {}, {} step{})",
        c.revision,
        c.stage,
        if c.intercepted {
            ""
        } else {
            ", tunnelled unread"
        }
    ));
    println!("{head}");
    if !c.message.is_empty() {
        println!("  {}", c.message);
    }
    // The policy line that allows it, as logs --audit gives it under a refusal.
    if c.decision != "allow"
        && let Some(reason) = &c.reason
    {
        let (host, port, path) = target_of(url);
        let hint = audit_view::allow_hint(reason, Some(&host), port, method, path.as_deref());
        if let Some(hint) = hint {
            println!("  {hint}");
        }
    }
    Ok(0)
}

/// The host, port and path of a URL as `policy check` takes it (`https://host[:port]/path`,
/// `http://...`, `host:port`); the port is the scheme's when not given.
fn target_of(url: &str) -> (String, Option<u16>, Option<String>) {
    let (rest, default) = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (rest, Some(443)),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (rest, Some(80)),
        Some((_, rest)) => (rest, None),
        None => (url, None),
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], Some(rest[i..].to_owned())),
        None => (rest, None),
    };
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, p.parse().ok()),
        _ => (authority, None),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host.to_ascii_lowercase(), port.or(default), path)
}

#[cfg(test)]
mod tests {
    use super::target_of;

    #[test]
    fn urls_are_read_as_the_dry_run_takes_them() {
        assert_eq!(
            target_of("https://API.example/v1/x?y=1"),
            ("api.example".into(), Some(443), Some("/v1/x?y=1".into()))
        );
        assert_eq!(
            target_of("http://a.example:8080"),
            ("a.example".into(), Some(8080), None)
        );
        assert_eq!(
            target_of("evil.example:443"),
            ("evil.example".into(), Some(443), None)
        );
        assert_eq!(
            target_of("https://[2001:db8::1]:8443/"),
            ("2001:db8::1".into(), Some(8443), Some("/".into()))
        );
    }
}
