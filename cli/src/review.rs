//! What a sandbox's branch brings back, judged for the operator: every path in the fetched
//! range that a tool, an editor, a coding agent or a shell hook runs (or reads to decide
//! what to run) without the operator asking, listed before anything else is said about the
//! branch, each with the reason; and how any path is shown on a terminal ([`escape`]).
//!
//! One table ([`RULES`]) says what is listed and why. Names are compared folded
//! ([`fold`]: case, the code points macOS ignores in names, Windows' trailing dots and
//! spaces), as the checkout that will read them may be on a case-insensitive file system. A
//! symlink is judged by its own path and by where it points (outside the repository is a
//! finding of its own), and a changed path is judged again as every path a symlink of the
//! branch makes it reachable as (`editor/tasks.json` behind a symlink `.vscode -> editor`).
//! Modes come from git's tree, never from a file system. [`review`] is pure; the git side
//! that gathers its input is `checkout::range`.

use std::collections::{BTreeMap, BTreeSet};

/// A tree entry's mode for a symlink.
pub const MODE_SYMLINK: u32 = 0o120000;
/// A tree entry's mode for a gitlink (a submodule's commit).
pub const MODE_GITLINK: u32 = 0o160000;

/// What a [`Rule`] matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// These folded components, `/`-separated, one after the other anywhere in the path
    /// (`.vscode` matches `.vscode/x` and `a/.VSCode`; `.cargo/config.toml` that file).
    Seq(&'static str),
    /// Any component that starts with this (`.devcontainer` matches `.devcontainer.json`).
    Prefix(&'static str),
    /// A last component that ends with this (`.code-workspace`).
    Suffix(&'static str),
    /// A gitlink entry (a submodule's commit).
    Gitlink,
    /// A directory shaped like a git dir: `HEAD` beside `objects/`, `refs/` or `commondir`.
    GitDir,
    /// A `.gitattributes` that names a filter, diff or merge driver.
    AttributeDriver,
    /// A symlink that points out of the repository (absolute, or above its top).
    SymlinkOutside,
}

/// One row of the table: what is listed, and why it runs without being asked.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// What it matches.
    pub matches: Match,
    /// Why such a path is listed (what runs it, and when).
    pub why: &'static str,
}

const fn r(matches: Match, why: &'static str) -> Rule {
    Rule { matches, why }
}

use Match::{AttributeDriver, GitDir, Gitlink, Prefix, Seq, Suffix, SymlinkOutside};

const NESTED: &str = "a repository inside the repository: git run in or below it uses its config (fsmonitor, filters, hooks)";
const HOOKS: &str = "git hooks a setup step installs: they run on commit, checkout, merge and push";
const VIM: &str = "Vim and Neovim run it on opening the folder when 'exrc' is set";
const EMACS: &str = "Emacs applies it on opening a file below it (eval forms once marked safe)";
const EDITOR_LSP: &str =
    "the editor reads it on opening the folder: language servers and tasks it starts";
const AGENT: &str = "a coding agent's project config: commands it runs (hooks, MCP servers) and permissions it grants when it starts here";
const AGENT_TEXT: &str = "instructions a coding agent on your machine follows when it starts here";
const CI: &str = "CI configuration: runs on push, with the CI's secrets";
const MISE: &str = "mise/asdf read it on entering the directory: tools installed, environment set, hooks and tasks";
const GRADLE: &str = "Gradle build logic: IDEs run it when they import the project (on opening it)";
const CARGO_CONFIG: &str = "cargo reads it for every build below it: runner, rustc-wrapper, linker and aliases name programs";
const TOOLCHAIN: &str = "rustup takes the toolchain from it for every cargo and rustc below it, a path to any binary included";
const YARN: &str =
    "yarn reads it for every command: yarnPath runs a JavaScript file as yarn itself, plugins load";
const DOTENV: &str = "loaded into the environment by direnv's dotenv, compose and many tools; autoenv runs it as shell";

/// The table: every kind of path listed, with its reason. Names are written folded.
pub const RULES: &[Rule] = &[
    // git
    r(Seq(".git"), NESTED),
    r(Seq("git~1"), NESTED),
    r(
        GitDir,
        "an embedded repository (HEAD with objects/, refs/ or commondir): git run inside this directory takes it for its repository and runs its config (core.fsmonitor, hooks)",
    ),
    r(
        Gitlink,
        "a submodule entry: git with --recurse-submodules (or submodule.recurse) clones and enters it",
    ),
    r(
        Seq(".gitmodules"),
        "submodule URLs and update commands (update = !cmd) that git submodule update runs",
    ),
    r(
        AttributeDriver,
        "names filter, diff or merge drivers: git runs the configured programs on these files at checkout, add, diff and merge",
    ),
    r(
        Seq(".lfsconfig"),
        "git-lfs reads it at checkout and push: where large files are fetched from and sent to",
    ),
    r(
        Seq(".gitconfig"),
        "projects include it into .git/config (include.path): it can set hooks, fsmonitor and filters",
    ),
    r(Seq(".githooks"), HOOKS),
    r(Seq(".git-hooks"), HOOKS),
    r(Seq(".husky"), HOOKS),
    r(Prefix("lefthook"), HOOKS),
    r(Prefix(".lefthook"), HOOKS),
    r(Seq(".pre-commit-config.yaml"), HOOKS),
    r(Seq(".overcommit.yml"), HOOKS),
    r(Prefix(".simple-git-hooks"), HOOKS),
    // editors
    r(
        Seq(".vscode"),
        "VS Code reads it on opening the folder: tasks that run on open, settings that name programs (terminal, linters, formatters)",
    ),
    r(
        Suffix(".code-workspace"),
        "a VS Code workspace: its tasks and settings apply when it is opened",
    ),
    r(
        Seq(".idea"),
        "JetBrains IDEs read it on opening the project: run configurations, startup tasks, external tools",
    ),
    r(Seq(".fleet"), EDITOR_LSP),
    r(Seq(".zed"), EDITOR_LSP),
    r(Seq(".helix"), EDITOR_LSP),
    r(Seq(".nvim.lua"), VIM),
    r(Seq(".nvimrc"), VIM),
    r(Seq(".exrc"), VIM),
    r(Seq(".lvimrc"), VIM),
    r(Seq(".dir-locals.el"), EMACS),
    r(Seq(".dir-locals-2.el"), EMACS),
    r(
        Prefix(".devcontainer"),
        "a dev container: initializeCommand runs on your machine, the other commands in the container it builds",
    ),
    // coding agents
    r(Seq(".claude"), AGENT),
    r(Seq(".mcp.json"), AGENT),
    r(Seq(".cursor"), AGENT),
    r(Seq(".windsurf"), AGENT),
    r(Seq(".continue"), AGENT),
    r(Seq(".codex"), AGENT),
    r(Seq(".gemini"), AGENT),
    r(Seq(".amazonq"), AGENT),
    r(Seq(".roo"), AGENT),
    r(Seq(".aider.conf.yml"), AGENT),
    r(Seq("claude.md"), AGENT_TEXT),
    r(Seq("claude.local.md"), AGENT_TEXT),
    r(Seq("agents.md"), AGENT_TEXT),
    r(Seq("gemini.md"), AGENT_TEXT),
    r(Seq(".cursorrules"), AGENT_TEXT),
    r(Seq(".windsurfrules"), AGENT_TEXT),
    r(Seq(".clinerules"), AGENT_TEXT),
    r(Seq(".github/copilot-instructions.md"), AGENT_TEXT),
    // the shell
    r(
        Seq(".envrc"),
        "direnv runs it as shell code on entering the directory (once allowed)",
    ),
    r(Seq(".env"), DOTENV),
    r(
        Seq(".env.leave"),
        "autoenv runs it as shell code on leaving the directory",
    ),
    r(Seq(".tool-versions"), MISE),
    r(Seq("mise.toml"), MISE),
    r(Seq(".mise.toml"), MISE),
    r(Seq(".mise"), MISE),
    r(Prefix("mise."), MISE),
    r(Prefix(".mise."), MISE),
    r(Seq(".rtx.toml"), MISE),
    // builds and toolchains
    r(Seq(".cargo/config.toml"), CARGO_CONFIG),
    r(Seq(".cargo/config"), CARGO_CONFIG),
    r(Seq("rust-toolchain.toml"), TOOLCHAIN),
    r(Seq("rust-toolchain"), TOOLCHAIN),
    r(
        Seq("build.rs"),
        "cargo runs it before every build, and rust-analyzer on opening the folder",
    ),
    r(
        Seq("cargo.toml"),
        "its build script and its dependencies' build scripts and proc macros run when rust-analyzer opens the folder and on every build",
    ),
    r(
        Seq(".npmrc"),
        "npm reads it for every command below it: script-shell, node-options, git and ignore-scripts change what runs",
    ),
    r(Seq(".yarnrc.yml"), YARN),
    r(Seq(".yarnrc"), YARN),
    r(
        Seq(".yarn"),
        "yarn's release and plugins: the JavaScript every yarn command runs when .yarnrc.yml points here",
    ),
    r(Seq(".pnpmfile.cjs"), "pnpm runs its hooks on every install"),
    r(Seq("bunfig.toml"), "bun preloads the scripts it names"),
    r(
        Seq("package.json"),
        "install scripts (preinstall, install, postinstall, prepare) run on npm, yarn and pnpm install",
    ),
    r(
        Seq("setup.py"),
        "pip runs it to build or install the project",
    ),
    r(
        Seq("pyproject.toml"),
        "pip runs the build backend it names to install the project",
    ),
    r(
        Seq("conftest.py"),
        "pytest imports it on every run, an editor's test discovery on opening the folder included",
    ),
    r(
        Seq("sitecustomize.py"),
        "Python imports it at every start when its directory is on the path",
    ),
    r(
        Seq("usercustomize.py"),
        "Python imports it at every start when its directory is on the path",
    ),
    r(
        Seq("gradle/wrapper"),
        "the Gradle wrapper: the distribution every ./gradlew and IDE import downloads and runs",
    ),
    r(Seq("gradlew"), GRADLE),
    r(Seq("gradlew.bat"), GRADLE),
    r(Suffix(".gradle"), GRADLE),
    r(Suffix(".gradle.kts"), GRADLE),
    r(
        Seq(".mvn"),
        "Maven's wrapper, extensions and JVM options: loaded by ./mvnw and by IDE imports",
    ),
    r(
        Seq("mvnw"),
        "the Maven wrapper script IDEs run when they import the project",
    ),
    // CI
    r(Seq(".github/workflows"), CI),
    r(Seq(".github/actions"), CI),
    r(Seq(".gitlab-ci.yml"), CI),
    r(Seq(".gitlab"), CI),
    r(Seq(".circleci"), CI),
    r(Seq(".buildkite"), CI),
    r(Seq("jenkinsfile"), CI),
    r(Seq(".travis.yml"), CI),
    r(Seq("azure-pipelines.yml"), CI),
    r(Seq("bitbucket-pipelines.yml"), CI),
    r(Seq(".drone.yml"), CI),
    r(Seq(".woodpecker"), CI),
    r(Seq(".woodpecker.yml"), CI),
    // symlinks
    r(
        SymlinkOutside,
        "a symlink out of the repository: what follows it reads or writes there",
    ),
];

/// One path the branch changed (added, modified or deleted), as git's tree has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Change {
    /// The path, as git stores it (bytes).
    pub path: Vec<u8>,
    /// Its mode in the newer tree (its older one when deleted).
    pub mode: u32,
    /// Deleted by the branch.
    pub deleted: bool,
    /// A symlink's target (the blob), when it is one.
    pub target: Option<Vec<u8>>,
    /// A `.gitattributes`'s content (the blob), when it is one.
    pub content: Option<Vec<u8>>,
}

/// One entry of the branch's tree (its tip), for the shapes a single path does not show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    /// The path.
    pub path: Vec<u8>,
    /// Its mode.
    pub mode: u32,
    /// A symlink's target.
    pub target: Option<Vec<u8>>,
}

/// A listed path: why it is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The path (a directory ends with `/`).
    pub path: Vec<u8>,
    /// The branch deletes it.
    pub deleted: bool,
    /// Why, one entry per rule that matched.
    pub reasons: Vec<String>,
}

/// Code points macOS ignores in file names (HFS+), so `.g\u{200c}it` is `.git` there.
fn ignorable(c: char) -> bool {
    matches!(c as u32, 0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff)
}

/// A path component as a case-insensitive, HFS+ or NTFS file system sees it: lowercase,
/// without the code points HFS+ ignores, without trailing dots and spaces (NTFS).
pub fn fold(component: &[u8]) -> String {
    let text = String::from_utf8_lossy(component);
    let folded: String = text
        .chars()
        .filter(|c| !ignorable(*c))
        .flat_map(char::to_lowercase)
        .collect();
    folded.trim_end_matches(['.', ' ']).to_string()
}

fn components(path: &[u8]) -> Vec<&[u8]> {
    path.split(|b| *b == b'/')
        .filter(|c| !c.is_empty())
        .collect()
}

fn folded(path: &[u8]) -> Vec<String> {
    components(path).into_iter().map(fold).collect()
}

/// Whether the path rule `m` matches the folded components `comps`.
fn path_match(m: Match, comps: &[String]) -> bool {
    match m {
        Seq(s) => {
            let want: Vec<&str> = s.split('/').collect();
            comps
                .windows(want.len())
                .any(|w| w.iter().zip(&want).all(|(a, b)| a == b))
        }
        Prefix(p) => comps.iter().any(|c| c.starts_with(p)),
        Suffix(x) => comps.last().is_some_and(|c| c.ends_with(x)),
        Gitlink | GitDir | AttributeDriver | SymlinkOutside => false,
    }
}

/// The reasons the path rules give `path`.
fn path_reasons(path: &[u8]) -> Vec<&'static str> {
    let comps = folded(path);
    RULES
        .iter()
        .filter(|r| path_match(r.matches, &comps))
        .map(|r| r.why)
        .collect()
}

fn why(m: Match) -> &'static str {
    RULES.iter().find(|r| r.matches == m).map_or("", |r| r.why)
}

/// Where the symlink at `link` pointing to `target` leads, as a path in the repository;
/// `None` when it leads out of it (absolute, or above the top).
pub fn resolve(link: &[u8], target: &[u8]) -> Option<Vec<u8>> {
    if target.starts_with(b"/") {
        return None;
    }
    let mut at: Vec<&[u8]> = components(link);
    at.pop();
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                at.pop()?;
            }
            c => at.push(c),
        }
    }
    Some(at.join(&b'/'))
}

/// Whether a `.gitattributes` text names a filter, diff or merge driver (`* filter=lfs`,
/// `[attr]x diff=y`), not just a setting (`-diff`, `text`).
pub fn names_driver(text: &[u8]) -> bool {
    String::from_utf8_lossy(text).lines().any(|line| {
        let line = line.trim();
        !line.starts_with('#')
            && line.split_whitespace().skip(1).any(|attr| {
                ["filter=", "diff=", "merge="]
                    .iter()
                    .any(|k| attr.to_ascii_lowercase().starts_with(k))
            })
    })
}

/// The directories of `paths` shaped like a git dir ([`Match::GitDir`]).
fn git_dirs<'a>(paths: impl Iterator<Item = &'a [u8]>) -> BTreeSet<Vec<u8>> {
    let mut children: BTreeMap<Vec<u8>, BTreeSet<String>> = BTreeMap::new();
    for path in paths {
        let comps = components(path);
        for i in 0..comps.len() {
            children
                .entry(comps[..i].join(&b'/'))
                .or_default()
                .insert(fold(comps[i]));
        }
    }
    children
        .into_iter()
        .filter(|(_, names)| {
            names.contains("head")
                && ["objects", "refs", "commondir"]
                    .iter()
                    .any(|n| names.contains(*n))
        })
        .map(|(dir, _)| dir)
        .collect()
}

fn under(path: &[u8], dir: &[u8]) -> bool {
    dir.is_empty() || (path.starts_with(dir) && path.get(dir.len()) == Some(&b'/'))
}

/// Judge what a branch brings back: `changes` (the paths of the fetched range) against the
/// [`RULES`], with `tree` (the tip's entries) for embedded repositories and symlinks. One
/// [`Finding`] per listed path, sorted by path.
pub fn review(changes: &[Change], tree: &[Entry]) -> Vec<Finding> {
    let mut found: BTreeMap<(Vec<u8>, bool), Vec<String>> = BTreeMap::new();
    let mut add = |path: &[u8], deleted: bool, reason: String| {
        let reasons = found.entry((path.to_vec(), deleted)).or_default();
        if !reasons.contains(&reason) {
            reasons.push(reason);
        }
    };
    // Where the tip's symlinks lead inside the repository: (link, target path).
    let links: Vec<(&[u8], Vec<u8>)> = tree
        .iter()
        .filter(|e| e.mode == MODE_SYMLINK)
        .filter_map(|e| Some((e.path.as_slice(), resolve(&e.path, e.target.as_deref()?)?)))
        .collect();
    for c in changes {
        for w in path_reasons(&c.path) {
            add(&c.path, c.deleted, w.into());
        }
        if c.mode == MODE_GITLINK && !c.deleted {
            add(&c.path, false, why(Gitlink).into());
        }
        if let Some(text) = &c.content
            && !c.deleted
            && fold(components(&c.path).last().copied().unwrap_or_default()) == ".gitattributes"
            && names_driver(text)
        {
            add(&c.path, false, why(AttributeDriver).into());
        }
        if c.mode == MODE_SYMLINK
            && !c.deleted
            && let Some(target) = &c.target
        {
            match resolve(&c.path, target) {
                None => add(&c.path, false, why(SymlinkOutside).into()),
                Some(to) => {
                    for w in path_reasons(&to) {
                        add(
                            &c.path,
                            false,
                            format!("{w} (it points to {})", escape(&to)),
                        );
                    }
                }
            }
        }
        // The same path reached through a symlink of the tip (`.vscode -> editor`).
        if !c.deleted {
            for (link, to) in &links {
                if to.as_slice() != c.path.as_slice() && !under(&c.path, to) || to.is_empty() {
                    continue;
                }
                let mut alias = link.to_vec();
                alias.extend_from_slice(&c.path[to.len()..]);
                for w in path_reasons(&alias) {
                    add(
                        &c.path,
                        false,
                        format!("{w} (reached as {} through a symlink)", escape(&alias)),
                    );
                }
            }
        }
    }
    // Embedded repositories: judged on the tip's tree with what the range added.
    let shapes = git_dirs(
        tree.iter().map(|e| e.path.as_slice()).chain(
            changes
                .iter()
                .filter(|c| !c.deleted)
                .map(|c| c.path.as_slice()),
        ),
    );
    for dir in &shapes {
        if changes.iter().any(|c| !c.deleted && under(&c.path, dir)) {
            let mut shown = dir.clone();
            shown.push(b'/');
            add(&shown, false, why(GitDir).into());
        }
    }
    found
        .into_iter()
        .map(|((path, deleted), reasons)| Finding {
            path,
            deleted,
            reasons,
        })
        .collect()
}

/// The operator's lines for `findings` (none when there are none): a heading, then one line
/// per path, every path escaped.
pub fn lines(findings: &[Finding]) -> Vec<String> {
    if findings.is_empty() {
        return Vec::new();
    }
    let mut out = vec![format!(
        "review first: {} path(s) on this branch can run something on your machine without you asking (opening the folder, entering it, git, a build or an install):",
        findings.len()
    )];
    for f in findings {
        let path = if f.path == b"/" {
            "./".to_string()
        } else {
            escape(&f.path)
        };
        let deleted = if f.deleted { " (deleted)" } else { "" };
        out.push(format!("  {path}{deleted}: {}", f.reasons.join("; ")));
    }
    out
}

/// `bytes` for a terminal: printable text as it is, a backslash doubled, every control
/// character (C0, DEL, C1), every bidirectional override and isolate, and every byte that is
/// not UTF-8 written as an escape (`\n`, `\t`, `\x1b`, `\u{202e}`), so a name can neither move
/// the cursor, erase a line, nor reorder what is shown around it.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    out.push_str(&format!("\\x{:02x}", c as u32));
                }
                c if (0x80..0xa0).contains(&(c as u32)) || bidi(c) => {
                    out.push_str(&format!("\\u{{{:x}}}", c as u32));
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Bidirectional embeddings, overrides and isolates, and the marks that reorder text.
fn bidi(c: char) -> bool {
    matches!(c as u32, 0x200e | 0x200f | 0x061c | 0x202a..=0x202e | 0x2066..=0x2069)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &[u8]) -> Change {
        Change {
            path: path.to_vec(),
            mode: 0o100644,
            ..Change::default()
        }
    }

    fn link(path: &[u8], target: &[u8]) -> Change {
        Change {
            path: path.to_vec(),
            mode: MODE_SYMLINK,
            target: Some(target.to_vec()),
            ..Change::default()
        }
    }

    fn attributes(path: &[u8], text: &[u8]) -> Change {
        Change {
            content: Some(text.to_vec()),
            ..file(path)
        }
    }

    fn entry(c: &Change) -> Entry {
        Entry {
            path: c.path.clone(),
            mode: c.mode,
            target: c.target.clone(),
        }
    }

    /// 45 paths planted to run something on the operator's machine, each of which must be
    /// listed, and the harmless ones beside them, which must not.
    fn corpus() -> (Vec<Change>, Vec<&'static [u8]>, Vec<Entry>) {
        let planted = vec![
            file(b".vscode/tasks.json"),
            file(b".VSCode/settings.json"),
            link(b".vscode", b"editor"),
            file(b"editor/launch.json"),
            file(b".devcontainer.json"),
            file(b".devcontainer/devcontainer.json"),
            file(b".claude/settings.json"),
            file(b".cursor/mcp.json"),
            file(b".mcp.json"),
            file(b".idea/workspace.xml"),
            file(b"app.code-workspace"),
            file(b".githooks/pre-commit"),
            file(b".husky/pre-push"),
            file(b"lefthook.yml"),
            file(b".pre-commit-config.yaml"),
            Change {
                mode: MODE_GITLINK,
                ..file(b"sub")
            },
            file(b".gitmodules"),
            attributes(b".gitattributes", b"*.bin filter=x\n"),
            attributes(b"docs/.GitAttributes", b"# drivers\n*.md diff=md -text\n"),
            file(b".cargo/config.toml"),
            file(b"crates/x/.cargo/config"),
            file(b"rust-toolchain.toml"),
            file(b"rust-toolchain"),
            file(b"build.rs"),
            file(b".envrc"),
            file(b"web/.env"),
            file(b"tools/HEAD"),
            file(b"tools/objects/info/keep"),
            file(b"tools/refs/heads/keep"),
            file(b"tools/config"),
            file(b"vendor/lib/.git/config"),
            file(b"third/.git"),
            file(b".GIT/hooks/post-checkout"),
            file(b"x/.git./config"),
            file(b"y/.g\xe2\x80\x8cit/config"),
            file(b".npmrc"),
            file(b".yarnrc.yml"),
            file(b"web/package.json"),
            file(b".github/workflows/ci-\xc3\xa9.yml"),
            file(b".lfsconfig"),
            file(b".nvim.lua"),
            file(b".dir-locals.el"),
            file(b"mise.toml"),
            file(b"gradle/wrapper/gradle-wrapper.properties"),
            link(b"docs/notes", b"/home/user/.bashrc"),
        ];
        let mut all = planted.clone();
        all.push(link(b"up", b"../../.ssh"));
        all.push(file(b".vscode/\x1b[2K\x1b[1Aevil.json"));
        all.push(Change {
            deleted: true,
            ..file(b".npmrc.d/x")
        });
        let harmless: Vec<&'static [u8]> = vec![
            b"src/main.rs",
            b"docs/vscode.md",
            b"README.md",
            b"Makefile",
            b"src/git.rs",
            b".github/dependabot.yml",
            b"docs/env.md",
            b".gitignore",
            b"text.gitattributes.md",
        ];
        for h in &harmless {
            all.push(file(h));
        }
        all.push(attributes(
            b"sub2/.gitattributes",
            b"*.txt text eol=lf\n*.png -diff\n",
        ));
        all.push(link(b"docs/same", b"../src/main.rs"));
        let tree = all.iter().filter(|c| !c.deleted).map(entry).collect();
        (all, harmless, tree)
    }

    #[test]
    fn every_planted_path_is_listed_and_nothing_harmless() {
        let (all, harmless, tree) = corpus();
        let found = review(&all, &tree);
        let listed: Vec<Vec<u8>> = found.iter().map(|f| f.path.clone()).collect();
        let planted: Vec<&Change> = all[..45].iter().collect();
        assert_eq!(planted.len(), 45);
        let mut missed = Vec::new();
        for c in planted {
            let in_repo = c.path.starts_with(b"tools/");
            let hit = if in_repo {
                listed.contains(&b"tools/".to_vec())
            } else {
                listed.contains(&c.path)
            };
            if !hit {
                missed.push(escape(&c.path));
            }
        }
        assert_eq!(
            missed,
            Vec::<String>::new(),
            "not listed; listed: {:?}",
            lines(&found)
        );
        for h in harmless {
            assert!(!listed.contains(&h.to_vec()), "{} listed", escape(h));
        }
        assert!(
            !listed.contains(&b"sub2/.gitattributes".to_vec()),
            "no driver named"
        );
        assert!(
            !listed.contains(&b"docs/same".to_vec()),
            "a symlink inside, to a plain file"
        );
        assert!(listed.contains(&b"up".to_vec()), "a symlink above the top");
        assert!(listed.contains(&b".vscode/\x1b[2K\x1b[1Aevil.json".to_vec()));
        assert!(!found.iter().any(|f| f.reasons.is_empty()));
    }

    #[test]
    fn the_reasons_say_how_a_path_was_reached() {
        let (all, _, tree) = corpus();
        let found = review(&all, &tree);
        let of = |p: &[u8]| {
            found
                .iter()
                .find(|f| f.path == p)
                .map(|f| f.reasons.join("; "))
                .unwrap_or_default()
        };
        assert!(
            of(b"editor/launch.json").contains("reached as .vscode/launch.json through a symlink")
        );
        assert!(of(b".vscode").contains("VS Code"), "{}", of(b".vscode"));
        assert!(of(b"docs/notes").contains("out of the repository"));
        assert!(of(b"tools/").contains("embedded repository"));
        assert!(of(b"sub").contains("submodule"));
        assert!(of(b".gitattributes").contains("drivers"));
        assert!(of(b"y/.g\xe2\x80\x8cit/config").contains("repository inside"));
        let deleted = found.iter().find(|f| f.path == b".npmrc.d/x");
        assert!(
            deleted.is_none(),
            "a deleted path no rule names is not listed"
        );
        let mut gone = file(b".npmrc");
        gone.deleted = true;
        let f = review(&[gone], &[]);
        assert!(f[0].deleted && f[0].reasons[0].contains("npm"), "{f:?}");
    }

    #[test]
    fn the_printed_list_escapes_every_path_and_comes_with_a_heading() {
        let (all, _, tree) = corpus();
        let out = lines(&review(&all, &tree));
        assert!(out[0].starts_with("review first:"), "{}", out[0]);
        for line in &out {
            assert!(
                !line.chars().any(|c| c.is_control()),
                "a control character reaches the terminal: {line:?}"
            );
        }
        assert!(
            out.iter()
                .any(|l| l.contains(".vscode/\\x1b[2K\\x1b[1Aevil.json"))
        );
        assert!(lines(&[]).is_empty());
    }

    #[test]
    fn the_table_is_written_folded_and_every_rule_has_a_reason() {
        for rule in RULES {
            assert!(!rule.why.is_empty());
            if let Seq(t) | Suffix(t) = rule.matches {
                for part in t.split('/') {
                    assert_eq!(fold(part.as_bytes()), part, "{t} is not folded");
                }
            }
            if let Prefix(t) = rule.matches {
                assert_eq!(t.to_lowercase(), t, "{t} is not lowercase");
            }
        }
        assert_eq!(fold(".VSCode ".as_bytes()), ".vscode");
        assert_eq!(fold(".git.".as_bytes()), ".git");
        assert_eq!(fold(".g\u{200c}IT".as_bytes()), ".git");
    }

    #[test]
    fn symlinks_resolve_inside_or_not_at_all() {
        assert_eq!(resolve(b".vscode", b"editor"), Some(b"editor".to_vec()));
        assert_eq!(resolve(b"a/b/l", b"../c/./d"), Some(b"a/c/d".to_vec()));
        assert_eq!(resolve(b"a/l", b"../../x"), None);
        assert_eq!(resolve(b"l", b"/etc"), None);
        assert_eq!(resolve(b"a/l", b".."), Some(Vec::new()));
    }

    #[test]
    fn attribute_lines_with_drivers_are_told_from_settings() {
        assert!(names_driver(b"* filter=lfs diff=lfs merge=lfs -text\n"));
        assert!(names_driver(b"[attr]bin filter=x\n"));
        assert!(names_driver(b"*.x   DIFF=y\n"));
        assert!(!names_driver(
            b"*.png -diff binary\n# * filter=x\n*.sh text eol=lf\n"
        ));
    }

    #[test]
    fn control_characters_bidi_and_bad_bytes_are_escaped() {
        assert_eq!(escape(b"src/main.rs"), "src/main.rs");
        assert_eq!(escape("ci-\u{e9}.yml".as_bytes()), "ci-\u{e9}.yml");
        assert_eq!(
            escape(b"a\x1b[2K\x1b[1Ab\r\n\t\x7f"),
            "a\\x1b[2K\\x1b[1Ab\\r\\n\\t\\x7f"
        );
        assert_eq!(escape(b"x\\y"), "x\\\\y");
        assert_eq!(escape(b"\xff\xfe.vscode"), "\\xff\\xfe.vscode");
        assert_eq!(escape("\u{9b}2K".as_bytes()), "\\u{9b}2K");
        assert_eq!(escape("a\u{202e}txt.exe".as_bytes()), "a\\u{202e}txt.exe");
    }
}
