#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;
use clap::{Arg, ArgAction, CommandFactory};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn cli() -> Command {
    let mut c = crate::cli::Cli::command();
    c.build();
    c
}

/// The repository's top-level directories a path in the docs may start with (not build
/// output, not hidden).
fn top_dirs(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect()
}

/// The Markdown files the checks read: `(path, commands and variables too)`. The design
/// brief describes what is planned as well as what is built, and the benchmark notebook
/// keeps the commands of its day: links only for those two.
fn checked_files(root: &Path) -> Vec<(String, bool)> {
    let mut files = vec![
        ("README.md".to_owned(), true),
        ("CONTRIBUTING.md".to_owned(), true),
        ("bench/RESULTS.md".to_owned(), false),
    ];
    for e in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            files.push((format!("docs/{name}"), name != "design.md"));
        }
    }
    for dir in top_dirs(root) {
        if root.join(&dir).join("README.md").is_file() {
            files.push((format!("{dir}/README.md"), true));
        }
    }
    files.sort();
    files
}

/// The manual as committed: every command, option, variable, path and link it shows exists.
#[test]
fn the_manual_says_only_what_the_code_does() {
    let root = root();
    let cli = cli();
    let source = source_identifiers(&root);
    let dirs = top_dirs(&root);
    let files = checked_files(&root);
    assert!(
        files.iter().any(|(f, _)| f == "docs/security.md") && files.len() >= 10,
        "the checks read the manual: {files:?}"
    );
    let mut all = Vec::new();
    for (rel, commands_too) in &files {
        all.extend(check_file(&root, rel, &cli, &source, &dirs, *commands_too));
    }
    all.sort();
    assert!(
        all.is_empty(),
        "the documentation says what the code does not:\n{}",
        all.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn run_with_agent(with_agent: bool) -> Command {
    let mut run = Command::new("run").arg(Arg::new("path")).arg(
        Arg::new("last")
            .num_args(0..)
            .last(true)
            .action(ArgAction::Append),
    );
    if with_agent {
        run = run.arg(Arg::new("agent").long("agent"));
    }
    let mut c = Command::new("airlock")
        .arg(Arg::new("image").long("image").global(true))
        .subcommand(run);
    c.build();
    c
}

fn findings_in(markdown: &str, cli: &Command) -> Vec<String> {
    let doc = parse(markdown);
    let mut out = Vec::new();
    for (_, code) in &doc.code {
        for words in commands(code) {
            if let Some(args) = airlock_args(&words) {
                out.extend(check_command(cli, args));
            }
        }
    }
    out
}

/// A documented flag that disappears from the definitions fails the check: the same README
/// line passes while `run` has `--agent` and fails once it does not.
#[test]
fn a_documented_flag_that_disappears_fails() {
    let readme = "Run:\n\n```sh\nsudo scripts/airlock run ~/src/app --agent claude -- claude -p 'x --nope'\n```\n";
    assert_eq!(
        findings_in(readme, &run_with_agent(true)),
        Vec::<String>::new()
    );
    assert_eq!(
        findings_in(readme, &run_with_agent(false)),
        vec!["`airlock run` has no option --agent".to_owned()]
    );
}

/// Against the real definitions: a misspelt or invented option, an option of another
/// subcommand, an unknown subcommand and a short option are each found, in a shell block
/// and in a code span; what follows `--` is the agent's and is not read.
#[test]
fn doctored_commands_are_refused_by_the_real_definitions() {
    let cli = cli();
    let doc = "\
```sh
airlock new fix --repo . --secret github_token -- claude --agnet x
airlock logs fix -z
airlock list --json && airlock destroy fix --force
scripts/airlock run . \\
    --agnet claude
AIRLOCK_DATA_DIR=/tmp airlock --data-dir /d secret set github_token
airlock grants
```

Then `airlock list --jsn`, `airlock fetch NAME`, and `airlock <command> --help`.
";
    let found = findings_in(doc, &cli);
    assert_eq!(
        found,
        vec![
            "`airlock logs` has no option -z".to_owned(),
            "`airlock run` has no option --agnet".to_owned(),
            "`airlock` has no subcommand grants".to_owned(),
            "`airlock list` has no option --jsn".to_owned(),
        ]
    );
}

/// A variable no source file names fails; one the source names, or another program's, does
/// not; prose counts for `AIRLOCK_*`, code for any assignment.
#[test]
fn documented_variables_must_be_read_somewhere() {
    let doc = parse(
        "Set `AIRLOCK_NO_SUCH_KNOB=1`, or AIRLOCK_POLICY in prose.\n\n```sh\nFROBNICATE_LEVEL=3 ANTHROPIC_BASE_URL=x scripts/docker-run . -e OTHER_VAR\n```\n",
    );
    let names: Vec<String> = env_names(&doc).into_iter().map(|(_, n)| n).collect();
    assert_eq!(
        names,
        vec![
            "AIRLOCK_NO_SUCH_KNOB",
            "AIRLOCK_POLICY",
            "ANTHROPIC_BASE_URL",
            "FROBNICATE_LEVEL",
            "OTHER_VAR"
        ]
    );
    let source: HashSet<String> = ["AIRLOCK_POLICY", "OTHER_VAR"].map(String::from).into();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !source.contains(*n) && !EXTERNAL_ENV.iter().any(|(e, _)| e == n))
        .collect();
    assert_eq!(missing, ["AIRLOCK_NO_SUCH_KNOB", "FROBNICATE_LEVEL"]);
}

/// The real source index knows the CLI's variables and not this module's doctored ones.
#[test]
fn the_source_index_is_the_code_without_this_module() {
    let ids = source_identifiers(&root());
    assert!(ids.contains("AIRLOCK_DATA_DIR") && ids.contains("AIRLOCK_AUDIT_CAP"));
    assert!(!ids.contains("AIRLOCK_NO_SUCH_KNOB"));
}

/// Links: a missing file, a missing anchor and a good link, in a throwaway tree.
#[test]
fn relative_links_and_anchors_must_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(
        root.join("docs/b.md"),
        "# B\n\n## The `airlock` CLI (sandboxes per branch)\n\n## Again\n\n## Again\n",
    )
    .unwrap();
    let a = "[ok](docs/b.md#the-airlock-cli-sandboxes-per-branch) [dup](docs/b.md#again-1) \
             [self](#top) [gone](docs/c.md) [moved](docs/b.md#watching-a-session) \
             [web](https://example.com/x#y)\n\n# Top\n";
    std::fs::write(root.join("a.md"), a).unwrap();
    let doc = parse(a);
    let mut anchors_of = |p: &Path| std::fs::read_to_string(p).ok().map(|t| parse(&t).anchors);
    let found = check_links(&doc, &root.join("a.md"), root, &mut anchors_of);
    assert_eq!(
        found,
        vec![
            (1, "link to docs/c.md: docs/c.md does not exist".to_owned()),
            (
                1,
                "link to docs/b.md#watching-a-session: no heading #watching-a-session there"
                    .to_owned()
            ),
        ]
    );
}

/// Paths in code are the repository's: a script that is gone is found.
#[test]
fn documented_paths_must_exist() {
    let doc = parse(
        "Run `scripts/fuzz 60 gate` or `scripts/no-such-script`, see `docs/`, `agents/NAME.toml`.\n",
    );
    let dirs = vec!["scripts".to_owned(), "docs".to_owned()];
    let paths: Vec<String> = repo_paths(&doc, &dirs)
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    assert_eq!(paths, ["scripts/fuzz", "scripts/no-such-script", "docs/"]);
    let root = root();
    let missing: Vec<&String> = paths.iter().filter(|p| !root.join(p).exists()).collect();
    assert_eq!(missing, ["scripts/no-such-script"]);
    assert!(
        ignored(&root, "fuzz/target/x86_64-unknown-linux-gnu"),
        "build output"
    );
    assert!(ignored(&root, "target/release/airlock"));
    assert!(!ignored(&root, "scripts/no-such-script"));
}

/// Shell words: comments dropped, continuations joined, `&&`, `|` and `;` separate commands,
/// quotes hold spaces; a console block keeps only its prompts.
#[test]
fn commands_are_read_as_a_shell_would_split_them() {
    let cmds = commands("a b # c\nd 'e f' \\\n  g && h | i; j\n");
    assert_eq!(
        cmds,
        vec![
            vec!["a", "b"],
            vec!["d", "'e f'", "g"],
            vec!["h"],
            vec!["i"],
            vec!["j"]
        ]
    );
    let doc = parse("```console\n$ airlock list\nNAME STATE\n```\n");
    assert_eq!(doc.code, vec![(2, "airlock list\n".to_owned())]);
    let words: Vec<String> = ["sudo", "X_Y=1", "airlock", "list"]
        .map(String::from)
        .into();
    assert_eq!(airlock_args(&words).unwrap(), ["list".to_owned()]);
    let other: Vec<String> = ["docker", "exec", "airlock-session"]
        .map(String::from)
        .into();
    assert!(airlock_args(&other).is_none());
}
