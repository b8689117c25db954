//! `airlock top`: every running sandbox on one screen, fed by their admin APIs: the
//! counters and the inbox (asked every `--interval`) and the denials (each sandbox's event
//! stream, filtered to `deny` by the proxy); the inbox's items are answered from it (`o`,
//! `s`, `d`) through the same admin API call as `airlock approve|deny`. The screen itself is
//! `airlock_cli::top`.

use super::Ctx;
use airlock_audit_schema::Timestamp;
use airlock_cli::admin::{Client, live};
use airlock_cli::audit_view::stream::{Item, Seen, StreamFollower};
use airlock_cli::audit_view::{self, Source, View};
use airlock_cli::cli::TopArgs;
use airlock_cli::exit::{Code, Failure};
use airlock_cli::term;
use airlock_cli::top::{self, Denial, Model, Step};
use airlock_control::admin::{AnswerRequest, EventsQuery, Log};
use anyhow::Result;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::time::Duration;
use tokio::sync::mpsc;

/// What the tasks tell the screen.
enum Msg {
    Keys(Vec<u8>),
    Live(String, Box<Result<live::Live, String>>),
    Denial(Denial),
    /// An answer's outcome, for the status line; then that sandbox is asked again.
    Answered(String, String),
}

/// The alternate screen while `top` runs; left on drop (also on an error path).
struct Screen;

impl Screen {
    fn enter() -> std::io::Result<Screen> {
        let mut out = std::io::stdout().lock();
        out.write_all(top::ENTER)?;
        out.flush()?;
        Ok(Screen)
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(top::LEAVE);
        let _ = out.flush();
    }
}

/// How often the screen is drawn at most (a burst of denials is one frame).
const FRAME: Duration = Duration::from_millis(100);

pub async fn run(ctx: &Ctx, args: &TopArgs) -> Result<i32> {
    if !term::interactive() {
        return Err(Failure::new(
            Code::Usage,
            "airlock top needs a terminal on stdin and stdout: `airlock status NAME --json` gives the same numbers",
        )
        .into());
    }
    let interval = Duration::from_secs_f64(args.interval.clamp(0.1, 3600.0));
    let (tx, mut rx) = mpsc::channel::<Msg>(1024);
    read_keys(tx.clone());
    let _raw = term::RawGuard::enter()?;
    let _screen = Screen::enter()?;
    let mut term_sig = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;

    let mut model = Model::default();
    let mut feeds = Feeds {
        ctx,
        tx,
        streams: HashMap::new(),
        asking: HashSet::new(),
    };
    let mut ticker = tokio::time::interval(interval);
    let mut frame = tokio::time::interval(FRAME);
    let mut dirty = true;
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                feeds.refresh(&mut model);
                dirty = true;
            }
            _ = frame.tick() => {
                if dirty {
                    draw(&model)?;
                    dirty = false;
                }
            }
            _ = term_sig.recv() => break,
            _ = hup.recv() => break,
            Some(msg) = rx.recv() => match msg {
                Msg::Keys(b) => {
                    if !feeds.keys(&mut model, &b) {
                        return Ok(0);
                    }
                    // A key is answered at once, not at the next frame.
                    draw(&model)?;
                    dirty = false;
                }
                Msg::Live(name, got) => {
                    feeds.asking.remove(&name);
                    model.set_live(&name, *got);
                    dirty = true;
                }
                Msg::Denial(d) => {
                    model.deny(d);
                    dirty = true;
                }
                Msg::Answered(name, said) => {
                    model.answered = Some(said);
                    feeds.ask_live(&name);
                    dirty = true;
                }
            },
        }
    }
    Ok(0)
}

/// The terminal's bytes, read on a thread of their own (a closed stdin quits).
fn read_keys(keys: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 64];
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = keys.blocking_send(Msg::Keys(b"q".to_vec()));
                    return;
                }
                Ok(n) => n,
            };
            if keys.blocking_send(Msg::Keys(buf[..n].to_vec())).is_err() {
                return;
            }
        }
    });
}

/// What feeds the screen: each running sandbox's event stream, and its admin API asked
/// for the numbers (one question at a time per sandbox). The streams end with it.
struct Feeds<'a> {
    ctx: &'a Ctx,
    tx: mpsc::Sender<Msg>,
    streams: HashMap<String, tokio::task::JoinHandle<()>>,
    asking: HashSet<String>,
}

impl Feeds<'_> {
    fn client(&self, name: &str) -> Client {
        Client::new(name, &self.ctx.checkout(name).control())
    }

    /// The running sandboxes again: streams opened for new ones and closed for gone ones,
    /// every one asked for its numbers.
    fn refresh(&mut self, model: &mut Model) {
        let names = match self.ctx.running() {
            Ok(n) => {
                model.status = None;
                n
            }
            Err(e) => {
                model.status = Some(format!("the registry cannot be read: {e}"));
                Vec::new()
            }
        };
        model.set_names(&names);
        self.streams.retain(|name, task| {
            let keep = names.contains(name);
            if !keep {
                task.abort();
            }
            keep
        });
        for name in &names {
            if !self.streams.contains_key(name) {
                let task = tokio::spawn(denials(self.client(name), self.tx.clone()));
                self.streams.insert(name.clone(), task);
            }
            self.ask_live(name);
        }
    }

    /// Ask `name`'s admin API for its numbers, unless a question is under way.
    fn ask_live(&mut self, name: &str) {
        if !self.asking.insert(name.to_owned()) {
            return;
        }
        let (client, tx, name) = (self.client(name), self.tx.clone(), name.to_owned());
        tokio::spawn(async move {
            let got = live::gather(&client).await.map_err(|e| e.to_string());
            let _ = tx.send(Msg::Live(name, Box::new(got))).await;
        });
    }

    /// Act on the keys in `bytes`; `false` to quit.
    fn keys(&mut self, model: &mut Model, bytes: &[u8]) -> bool {
        for k in top::keys(bytes) {
            match model.key(k) {
                Step::Go => {}
                Step::Quit => return false,
                Step::Answer { sandbox, id, scope } => {
                    tokio::spawn(answer(self.client(&sandbox), id, scope, self.tx.clone()));
                }
            }
        }
        true
    }
}

impl Drop for Feeds<'_> {
    fn drop(&mut self) {
        for t in self.streams.values() {
            t.abort();
        }
    }
}

/// Answers the item `id` (approve with `scope`, or deny with [`top::DENY_REASON`]); tells
/// the screen how it went.
async fn answer(client: Client, id: String, scope: Option<&'static str>, tx: mpsc::Sender<Msg>) {
    let request = AnswerRequest {
        id: id.clone(),
        approve: scope.is_some(),
        scope: scope.map(str::to_owned),
        reason: scope.is_none().then(|| top::DENY_REASON.to_owned()),
        ..AnswerRequest::default()
    };
    let name = client.name().to_owned();
    let said = match client.answer(request).await {
        Ok(a) => match (&a.scope, a.state.as_str()) {
            (Some(s), state) => format!("{name}/{id}: {state} ({s})"),
            (None, state) => format!("{name}/{id}: {state}"),
        },
        Err(e) => format!("{name}/{id}: not answered: {e}"),
    };
    let _ = tx.send(Msg::Answered(name, said)).await;
}

/// One sandbox's denials from its event stream, as `logs --audit` prints them.
async fn denials(client: Client, tx: mpsc::Sender<Msg>) {
    let name = client.name().to_owned();
    let query = EventsQuery {
        decision: Some("deny".into()),
        ..EventsQuery::default()
    };
    let view = View {
        denied: true,
        ..View::default()
    };
    let mut f = StreamFollower::new(client, query, Seen::default());
    let mut n = 0u64;
    loop {
        let Item::Record(log, raw) = f.next().await else {
            // Why it does not answer is on its row (the counters' error).
            continue;
        };
        let source = match log {
            Log::Audit => Source::Proxy,
            Log::GitApi => Source::GitApi,
            Log::Unknown => continue,
        };
        n += 1;
        if let Some(text) = audit_view::render(source, &raw, "the event stream", n, &view) {
            let d = Denial {
                sandbox: name.clone(),
                text,
            };
            if tx.send(Msg::Denial(d)).await.is_err() {
                return;
            }
        }
    }
}

fn draw(model: &Model) -> Result<()> {
    let size = term::size().unwrap_or(term::Size { rows: 24, cols: 80 });
    let now = Timestamp::now().to_string();
    let clock = format!("{} UTC", now.get(11..19).unwrap_or(&now));
    let lines = model.frame(usize::from(size.cols), usize::from(size.rows), &clock);
    let mut out = std::io::stdout().lock();
    out.write_all(&top::paint(&lines))?;
    out.flush()?;
    Ok(())
}
