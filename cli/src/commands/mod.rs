//! One function per subcommand; each returns the process exit code.

mod approvals;
mod audit;
mod build;
mod doctor;
mod gc;
mod lifecycle;
mod new;
mod pod;
mod policy;
mod render;
mod rescan;
mod run;
mod secret;
mod top;
mod view;

use airlock_cli::checkout::Checkout;
use airlock_cli::cli::{Cli, Command};
use airlock_cli::engine::Engine;
use airlock_cli::exit::{Code, Failure};
use airlock_cli::paths::Paths;
use airlock_cli::registry::{Registry, Sandbox};
use anyhow::{Context, Result};

/// What most commands need: the directories, the registry and the engine.
pub struct Ctx {
    pub paths: Paths,
    pub registry: Registry,
    pub engine: Engine,
    pub image: String,
}

impl Ctx {
    async fn open(cli: &Cli) -> Result<Ctx> {
        let paths = Paths::resolve(cli.data_dir.as_deref())?;
        let registry = Registry::open(&paths.registry())?;
        let engine = Engine::connect().await?;
        Ok(Ctx {
            paths,
            registry,
            engine,
            image: cli.image.clone(),
        })
    }

    /// The registered sandbox `name`, or exit 3.
    pub fn sandbox(&self, name: &str) -> Result<Sandbox> {
        self.registry.get(name)?.ok_or_else(|| {
            Failure::new(
                Code::NotFound,
                format!("no sandbox named {name:?}: `airlock list` shows the sandboxes"),
            )
            .into()
        })
    }

    /// The object stores sandboxes borrow from.
    pub fn stores(&self) -> airlock_cli::checkout::store::Stores {
        airlock_cli::checkout::store::Stores::new(&self.paths.data)
    }

    /// The sandboxes the registry says run, by name.
    pub fn running(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .registry
            .list()?
            .into_iter()
            .filter(|r| r.state == airlock_cli::registry::State::Running)
            .map(|r| r.name)
            .collect();
        names.sort();
        Ok(names)
    }

    /// The admin API client of the registered sandbox `name`, or exit 3.
    pub fn admin(&self, name: &str) -> Result<airlock_cli::admin::Client> {
        self.sandbox(name)?;
        Ok(airlock_cli::admin::Client::new(
            name,
            &self.checkout(name).control(),
        ))
    }

    /// The admin API clients of the sandbox `name`, or of every running one.
    pub fn admins(&self, name: Option<&str>) -> Result<Vec<airlock_cli::admin::Client>> {
        match name {
            Some(n) => Ok(vec![self.admin(n)?]),
            None => Ok(self
                .running()?
                .iter()
                .map(|n| airlock_cli::admin::Client::new(n, &self.checkout(n).control()))
                .collect()),
        }
    }

    /// A sandbox's checkout.
    pub fn checkout(&self, name: &str) -> Checkout {
        Checkout {
            dir: self.paths.sandbox(name),
        }
    }
}

/// The container name of a sandbox.
pub fn container_name(name: &str) -> String {
    format!("airlock-{name}")
}

/// Unix seconds now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Run the parsed command line.
pub fn run(cli: Cli) -> Result<i32> {
    match &cli.command {
        Command::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut cmd, "airlock", &mut std::io::stdout());
            return Ok(0);
        }
        Command::Render(a) => return render::run(&cli, a),
        Command::Secret(a) => return secret::run(&cli, a),
        Command::Build(a) => return build::run(&cli, a),
        Command::Devcontainer(a) => return render::devcontainer_file(&cli, a),
        Command::K8s(a) => return render::k8s_cmd(&cli, a),
        Command::Audit(a) => return audit::run(a),
        _ => {}
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if let Command::Doctor(a) = &cli.command {
        return rt.block_on(doctor::run(&cli, a.json));
    }
    rt.block_on(dispatch(cli))
}

async fn dispatch(cli: Cli) -> Result<i32> {
    // A pod (`k8s:NAMESPACE/POD`) needs neither the engine nor the registry.
    if let Some(code) = pod::run(&cli.command).await? {
        return Ok(code);
    }
    let ctx = Ctx::open(&cli).await?;
    match cli.command {
        Command::Run(a) => run::run(&ctx, &a).await,
        Command::New(a) => new::run(&ctx, &a).await,
        Command::List(a) => view::list(&ctx, a.json).await,
        Command::Status(a) => view::status(&ctx, &a.name, a.json).await,
        Command::Logs(a) if a.audit => audit::logs(&ctx, &a).await,
        Command::Logs(a) => view::logs(&ctx, &a.name, a.tail).await,
        Command::Exec(a) => lifecycle::exec(&ctx, &a.name, &a.command).await,
        Command::Attach(a) => lifecycle::attach(&ctx, &a.name).await,
        Command::Stop(a) => lifecycle::stop(&ctx, &a.name).await,
        Command::Start(a) => lifecycle::start(&ctx, &a.name).await,
        Command::Rescan(a) => rescan::run(&ctx, &a.name).await,
        Command::Destroy(a) => lifecycle::destroy(&ctx, &a.name, a.force).await,
        Command::Fetch(a) => lifecycle::fetch(&ctx, &a.name).await,
        Command::Gc(a) => gc::run(&ctx, a.dry_run, a.json).await,
        Command::Policy(a) => policy::run(&ctx, &a).await,
        Command::Approvals(a) => approvals::list(&ctx, &a).await,
        Command::Approve(a) => approvals::approve(&ctx, &a).await,
        Command::Deny(a) => approvals::deny(&ctx, &a).await,
        Command::Revoke(a) => approvals::revoke(&ctx, &a.id).await,
        Command::Top(a) => top::run(&ctx, &a).await,
        Command::Completions(_)
        | Command::Render(_)
        | Command::Doctor(_)
        | Command::Secret(_)
        | Command::Devcontainer(_)
        | Command::K8s(_)
        | Command::Audit(_)
        | Command::Build(_) => Ok(0),
    }
}
