//! The operator's commands against a sandbox on Kubernetes, named `k8s:NAMESPACE/POD`
//! where a sandbox's NAME goes ([`airlock_cli::kube`]): `status`, `logs --audit [-f]`,
//! `policy show|check|reload`, `approvals`, `approve`, `deny`, spoken through `kubectl exec`
//! of the in-pod relay with the same code as for a local sandbox. No engine and no
//! registry: the pod is the sandbox. The lifecycle commands are kubectl's (`attach`,
//! `exec`, `delete`), and say so.

use super::{approvals, audit, policy};
use airlock_cli::admin::{Client, live};
use airlock_cli::cli::{ApprovalsCmd, Command, PolicyCmd};
use airlock_cli::exit::{Code, Failure};
use airlock_cli::kube::{self, Pod};
use anyhow::Result;

/// Runs `command` when it names a pod; `None` when it does not (a local sandbox's).
///
/// # Errors
/// A pod target that does not read, a command a pod has no use for, or the command's own.
pub async fn run(command: &Command) -> Result<Option<i32>> {
    let code = match command {
        Command::Status(a) => match pod(&a.name)? {
            Some(c) => status(&c, a.json).await?,
            None => return Ok(None),
        },
        Command::Logs(a) => match pod(&a.name)? {
            Some(c) if a.audit => audit::stream_logs(c, a).await?,
            Some(_) => {
                return Err(usage(&a.name, "logs without --audit", |p| {
                    format!(
                        "kubectl -n {} logs {} -c {} (its output), or airlock logs {} --audit (its decisions)",
                        p.namespace,
                        p.name,
                        airlock_cli::flags::k8s::CONTAINER,
                        a.name
                    )
                }));
            }
            None => return Ok(None),
        },
        Command::Policy(a) => {
            let (PolicyCmd::Show { name, .. }
            | PolicyCmd::Reload { name, .. }
            | PolicyCmd::Check { name, .. }
            | PolicyCmd::Suggest { name, .. }) = &a.command;
            match pod(name)? {
                Some(c) => policy::on(&c, a).await?,
                None => return Ok(None),
            }
        }
        Command::Approvals(a) => {
            if let Some(ApprovalsCmd::Show { id, json }) = &a.show {
                match item(id)? {
                    Some((c, bare)) => {
                        approvals::show(approvals::find_in(vec![c], bare, id).await?, *json).await?
                    }
                    None => return Ok(None),
                }
            } else {
                match a.name.as_deref().map(pod).transpose()?.flatten() {
                    Some(c) if a.watch => {
                        approvals::watch(|| Ok(vec![c.clone()]), a.notify.as_deref(), a.json)
                            .await?
                    }
                    Some(c) => approvals::inbox(vec![c], false, a.json).await?,
                    None => return Ok(None),
                }
            }
        }
        Command::Approve(a) if a.all => {
            match a.sandbox.as_deref().map(pod).transpose()?.flatten() {
                Some(c) => approvals::approve_all(vec![c], approvals::approval(a)?).await?,
                None => return Ok(None),
            }
        }
        Command::Approve(a) => match item(a.id.as_deref().unwrap_or_default())? {
            Some((c, bare)) => {
                let answer = approvals::approval(a)?;
                let id = a.id.as_deref().unwrap_or_default();
                approvals::respond(approvals::find_in(vec![c], bare, id).await?, answer).await?
            }
            None => return Ok(None),
        },
        Command::Deny(a) => match item(&a.id)? {
            Some((c, bare)) => {
                let answer = approvals::denial(a)?;
                approvals::respond(approvals::find_in(vec![c], bare, &a.id).await?, answer).await?
            }
            None => return Ok(None),
        },
        Command::Revoke(a) => match item(&a.id)? {
            Some((c, bare)) => approvals::revoke_in(vec![c], bare, &a.id).await?,
            None => return Ok(None),
        },
        Command::Attach(a)
        | Command::Stop(a)
        | Command::Start(a)
        | Command::Rescan(a)
        | Command::Fetch(a) => {
            refuse_lifecycle(&a.name, "this command")?;
            return Ok(None);
        }
        Command::Exec(a) => {
            refuse_lifecycle(&a.name, "exec")?;
            return Ok(None);
        }
        Command::Destroy(a) => {
            refuse_lifecycle(&a.name, "destroy")?;
            return Ok(None);
        }
        _ => return Ok(None),
    };
    Ok(Some(code))
}

/// The client of the pod `name` names; `None` for a local sandbox's name.
fn pod(name: &str) -> Result<Option<Client>> {
    match kube::target(name) {
        None => Ok(None),
        Some(Ok(p)) => Ok(Some(client(&p))),
        Some(Err(e)) => Err(Failure::new(Code::Usage, e).into()),
    }
}

fn client(p: &Pod) -> Client {
    Client::relay(&p.to_string(), kube::relay_argv(&kube::kubectl(), p))
}

/// The pod's client and the bare id of an item named `k8s:NAMESPACE/POD/ID`; `None` for an
/// item of a local sandbox.
fn item(id: &str) -> Result<Option<(Client, &str)>> {
    if !id.starts_with(kube::PREFIX) {
        return Ok(None);
    }
    let Some((name, bare)) = id.rsplit_once('/') else {
        return Err(Failure::new(
            Code::Usage,
            format!(
                "{id:?} names no item: write {}NAMESPACE/POD/ID",
                kube::PREFIX
            ),
        )
        .into());
    };
    Ok(pod(name)?.map(|c| (c, bare)))
}

/// A command a pod has no use for: what does the job there.
fn usage(name: &str, what: &str, hint: impl Fn(&Pod) -> String) -> anyhow::Error {
    let line = match kube::target(name) {
        Some(Ok(p)) => format!(
            "{what} works on the sandboxes of this host; for the pod {name}: {}",
            hint(&p)
        ),
        Some(Err(e)) => e,
        None => format!("{name} is not a pod"),
    };
    Failure::new(Code::Usage, line).into()
}

fn refuse_lifecycle(name: &str, what: &str) -> Result<()> {
    match kube::target(name) {
        None => Ok(()),
        Some(_) => Err(usage(name, what, |p| {
            let (ns, pod) = (&p.namespace, &p.name);
            format!(
                "kubectl -n {ns} attach -it {pod} (the agent), kubectl -n {ns} exec -it {pod} -c {c} -- airlock-entrypoint __session (a second session), kubectl -n {ns} delete pod {pod}",
                c = airlock_cli::flags::k8s::CONTAINER
            )
        })),
    }
}

/// `status k8s:NAMESPACE/POD`: what its proxy says (readiness, policy revision, counters,
/// pending approvals).
async fn status(client: &Client, as_json: bool) -> Result<i32> {
    let l = live::gather(client).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&l)?);
        return Ok(0);
    }
    println!("name        {}", client.name());
    for line in live::lines(&l) {
        println!("{line}");
    }
    Ok(0)
}
