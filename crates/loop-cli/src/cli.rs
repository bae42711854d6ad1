//! The `loop` command line as clap reads it: every subcommand, its flags
//! and their help. Nothing here does any work.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "loop",
    version,
    about = "Loop Engine: agent loops that stop only on evidence",
    long_about = "Loop Engine turns one instruction into an acceptance contract, drives a model through plan → act → observe → verify inside a sandbox, and stops only when every check passes on a fresh snapshot — or when a budget, a stall or a person stops it. Every run ends with a hash-chained receipt.\n\nExit codes: 0 verified / success; 1 finished but not verified, or a receipt that does not hold; 2 bad usage, config or input; 3 internal error."
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) globals: Globals,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The options every subcommand takes.
#[derive(clap::Args)]
pub(crate) struct Globals {
    /// Diagnostics on stderr: -v info, -vv debug, -vvv trace (LOOP_LOG
    /// chooses by target instead, e.g. `LOOP_LOG=loop_sandbox=debug`).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    /// Machine-readable output, on every command: JSON (a running task's
    /// events as JSON lines), and a failure as
    /// `{"error":{"kind","message","location","hint"}}` on stderr with the
    /// same exit code.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Where the project's tasks are kept: `postgres://USER@HOST/DB` (one
    /// store shared by servers and workers on many machines) or an SQLite
    /// file. Default: LOOP_STORE_URL, else the Loopfile's `store:`, else
    /// `.loop/loop.db`.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) store: Option<String>,
}

/// `loop exec` alone: the global options and `exec`'s own, parsed without
/// building every other subcommand's (most of a one-command `loop exec`'s
/// parsing). Only a line it accepts is taken from it: anything else
/// (help, a version, a mistake) is parsed again by [`Cli`], whose answer
/// is the one given.
#[derive(Parser)]
#[command(name = "loop")]
pub(crate) struct ExecCli {
    #[command(flatten)]
    pub(crate) globals: Globals,
    #[command(subcommand)]
    pub(crate) command: ExecOnly,
}

/// [`ExecCli`]'s one subcommand.
#[derive(Subcommand)]
pub(crate) enum ExecOnly {
    Exec(ExecArgs),
}

impl ExecCli {
    /// `args` parsed as `loop exec`, if [`ExecCli`] accepts them.
    pub(crate) fn parse_from(args: impl IntoIterator<Item = std::ffi::OsString>) -> Option<Cli> {
        let parsed = <ExecCli as Parser>::try_parse_from(args).ok()?;
        let ExecOnly::Exec(args) = parsed.command;
        Some(Cli {
            globals: parsed.globals,
            command: Command::Exec(args),
        })
    }
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the built-in example end to end, offline.
    Demo {
        /// Directory for the demo project (default: a new one under the temp dir).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run a task until its contract is verified or a limit stops it.
    Run(RunArgs),
    /// Store a task and put it on a queue for `loop worker` (prints its
    /// id; `loop status`, `logs --follow` and `approve` follow it from
    /// anywhere the store is).
    Submit {
        #[command(flatten)]
        run: RunArgs,
        /// The queue: `redis://HOST:PORT` (default: LOOP_QUEUE_URL).
        #[arg(long, value_name = "URL")]
        queue: Option<String>,
        /// The queue's name (workers take from the one they are given).
        #[arg(long, value_name = "NAME", default_value = "default")]
        queue_name: String,
    },
    /// Run tasks from a queue, N at a time, until SIGTERM (which drains:
    /// no new task, running ones get --grace to end, the rest are handed
    /// back to other workers). Tasks whose worker died are resumed from
    /// their last committed step.
    Worker(WorkerArgs),
    /// Apply a verified task's change set to the project (nothing if anything changed since).
    Apply {
        /// The task id.
        id: String,
        /// Confirm, where the Loopfile's `checkpoints.before_apply` asks a
        /// person to review the change first.
        #[arg(long)]
        yes: bool,
        /// Consent to files that would run code on this machine once
        /// applied (hooks, `.envrc`, editor tasks, git configuration).
        #[arg(long)]
        trust_host_files: bool,
        /// Where the project's HEAD moved since the task began, apply it on
        /// HEAD all the same, when every file it changes is as it was then
        /// (its checks ran on the commit it began from).
        #[arg(long)]
        onto_head: bool,
        /// Only settle an interrupted apply or undo of the task (every
        /// command that touches the task does this first).
        #[arg(long)]
        recover: bool,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Reverse an applied change set exactly.
    Undo {
        /// The task id.
        id: String,
        /// Touch no file: only stop counting the change set as applied
        /// (its files were put back by other means, e.g. `git checkout`).
        #[arg(long)]
        forget: bool,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// The project's tasks, newest first, with their branches.
    List {
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Remove what no task needs: branches of tasks gone, applied or
    /// without a workspace, stale worktree records, scratch of tasks not
    /// running, setup layers a dead run left half made.
    Gc {
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// List the task workspaces kept for projects no longer where they
        /// were (deleted or moved), instead.
        #[arg(long, conflicts_with_all = ["forget_project", "dry_run", "project"])]
        gone_projects: bool,
        /// Remove the task workspaces kept for the project that was at
        /// PATH (no project may be there now), instead.
        #[arg(long, value_name = "PATH", conflicts_with = "project")]
        forget_project: Option<PathBuf>,
    },
    /// One task: state or outcome, budgets used, receipt.
    Status {
        /// The task id.
        id: String,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// A task's change set: from its receipt once it has ended, else its
    /// workspace now (coloured and paged on a terminal, exact when piped).
    Diff {
        /// The task id (a unique prefix, or `last`).
        id: String,
        /// Only the files and their lines added and removed.
        #[arg(long)]
        stat: bool,
        /// Print straight to the terminal, not through `$PAGER`.
        #[arg(long)]
        no_pager: bool,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// A task in one place: its story, its change set and its receipt's
    /// verdict.
    Show {
        /// The task id (a unique prefix, or `last`).
        id: String,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// A task's story, from the store.
    Logs {
        /// The task id.
        id: String,
        /// Keep printing as the task goes on, until it ends.
        #[arg(long, short = 'f')]
        follow: bool,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Stop a running task (within a second; its commands are killed).
    Cancel {
        /// The task id.
        id: String,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Answer a task waiting for a person: a command under a `prompt` rule,
    /// or a checkpoint.
    Approve {
        /// The task id.
        id: String,
        /// Deny instead (at a checkpoint: stop the task).
        #[arg(long)]
        deny: bool,
        /// Guidance for the model (at a checkpoint).
        #[arg(long, value_name = "TEXT")]
        message: Option<String>,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Continue a task whose runtime stopped, from its last committed step;
    /// with --add-*, give a task that reached a limit more budget.
    Resume(ResumeArgs),
    /// Drop a task's workspace (worktree and branch, or copy).
    Discard {
        /// The task id.
        id: String,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Check a receipt offline: statement, ledger chain, artifacts.
    Verify {
        /// The receipt (`<task>.receipt.json`); inside its project, a
        /// task's id (or a unique prefix, or `last`) names its receipt.
        receipt: PathBuf,
        /// Require a signature by this public key.
        #[arg(long, value_name = "FILE")]
        pubkey: Option<PathBuf>,
        /// Where the artifacts are (default: `<task>.artifacts` beside the receipt).
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
        /// Check only that the receipt holds (signature, ledger,
        /// artifacts): exit 0 for an intact receipt of a task that ended
        /// failed, lost, limit_reached or cancelled too.
        #[arg(long)]
        integrity_only: bool,
        /// Accept files in the artifacts' directory that the receipt does
        /// not attest (they are still listed).
        #[arg(long)]
        allow_extra: bool,
    },
    /// Run one command in the sandbox; the exit code mirrors the command's
    /// (loop exec's own failures: 125; 126 cannot run, 127 not found).
    Exec(ExecArgs),
    /// Print the content manifest of a directory: its Merkle root, files and bytes.
    Manifest {
        /// The directory (default: the current one).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// This machine's receipt-signing key (created on first use).
    Keys {
        /// `show` (id, hex and PEM), `export` (PEM only), or `rotate`
        /// (revoke the key, make a new one, and add a signed addendum to every
        /// receipt of the project that the old key signed).
        #[arg(value_enum, default_value_t = KeysAction::Show)]
        action: KeysAction,
        /// The project whose receipts `rotate` annotates.
        #[arg(long, default_value = ".")]
        project: PathBuf,
        /// Rotate without asking (on a terminal, `rotate` asks first).
        #[arg(long)]
        yes: bool,
    },
    /// Show what the sandbox can enforce on this machine, and for the
    /// project: its stacks' toolchains, its store, the signing key and
    /// whether its model endpoint answers.
    Doctor {
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Check the receipts a pull request brings (under `.loop-receipts/`):
    /// each verified offline against the keys the base commit trusts, its
    /// change set exactly the pull request's diff for the paths it covers.
    CiCheck {
        /// The pull request's base (commit, branch or tag).
        #[arg(long, value_name = "REV")]
        base: String,
        /// Its head.
        #[arg(long, value_name = "REV", default_value = "HEAD")]
        head: String,
        /// Trust this public key too (PEM; repeatable), besides the base
        /// commit's Loopfile `receipts.trust`.
        #[arg(long, value_name = "FILE")]
        pubkey: Vec<PathBuf>,
        /// Accept paths the diff changes that no receipt covers (they are
        /// still listed).
        #[arg(long)]
        allow_uncovered: bool,
        /// Run each verified receipt's checks again, in the sandbox with
        /// no network and no model, on the pull request's head tree.
        #[arg(long)]
        replay: bool,
        /// The repository.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Re-run a receipt's checks on the tree it verified, without a model.
    Replay {
        /// The receipt; inside its project, a task's id (or a unique
        /// prefix, or `last`) names its receipt.
        receipt: PathBuf,
    },
    /// Check a contract file and print its hash (a file named
    /// Loopfile.yaml is checked as a Loopfile).
    Validate {
        /// The contract (default: task.yaml).
        #[arg(default_value = "task.yaml")]
        file: PathBuf,
        /// Read FILE as a Loopfile whatever its name.
        #[arg(long)]
        loopfile: bool,
    },
    /// What a task in this project would share of its dependency
    /// environments (a venv, node_modules, target/, vendor/), and how, and
    /// the project's readiness score (every point a check run now).
    Audit {
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Write a Loopfile from what the project is (its build, test and lint
    /// commands, protected paths, a budget) and, with --pattern, a task
    /// pattern's SKILL.md and contract template in loop-patterns/NAME/.
    Init {
        /// The task pattern to write.
        #[arg(long, value_name = "NAME",
              value_parser = clap::builder::PossibleValuesParser::new(
                  loop_runtime::PATTERNS.iter().map(|(name, _)| *name)))]
        pattern: Option<String>,
        /// Write over an existing Loopfile (and pattern files).
        #[arg(long)]
        force: bool,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// What a run costs here: at most (the price table and the limits
    /// tasks get) and as recorded, and a month of runs at a cadence.
    Cost {
        /// The model to price (default: the Loopfile's maker).
        #[arg(long, value_name = "SPEC")]
        model: Option<String>,
        /// Runs a day (a month is 30 days).
        #[arg(long, value_name = "N", default_value_t = 1.0)]
        per_day: f64,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Run a suite of cases and judge each verified result by an oracle
    /// the agent never sees: solved, false acceptance, safe failure, with
    /// steps, tokens, dollars, wall time, receipt and replay (a Markdown
    /// table; --json the report). `--model scripted` runs every case's
    /// scripted solutions: a `right*` one must be solved, none may be a
    /// false acceptance.
    Eval(EvalArgs),
    /// Print the JSON Schema of a format: `contract` or `loopfile`.
    Schema {
        /// The format.
        #[arg(value_enum)]
        format: SchemaFormat,
    },
    /// Serve the project's tasks over HTTP: the API (/api/v1, documented at
    /// /openapi.json), live events, /metrics. Every route but /healthz and
    /// /readyz needs a token (`loop tokens create`).
    Serve(ServeArgs),
    /// Serve the project's tasks to an MCP client over stdio (add
    /// `loop mcp --project DIR` to the client's configuration): tools
    /// run_task, task_status, task_events, approve, answer, verify_receipt,
    /// diff; each task's receipt, ledger and change set as resources.
    /// `loop serve` offers the same at /mcp (streamable HTTP, with a token).
    Mcp {
        /// Tasks run at once; more wait their turn.
        #[arg(long, value_name = "N", default_value_t = 4)]
        jobs: usize,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// The API's bearer tokens: `create` prints one once (only its hash is
    /// kept), `list`, `revoke ID`.
    Tokens {
        #[command(subcommand)]
        action: TokensAction,
    },
    /// Skill bundles: `sign DIR`, `verify DIR`, `install PATH`, `list`,
    /// `show NAME`, `remove NAME` (`loop run --skill NAME` uses one).
    Skills {
        #[command(subcommand)]
        action: SkillsAction,
    },
    /// The project's memory: notes later tasks are given (`add TEXT`,
    /// `list`, `show ID`, `approve ID`, `forget ID`).
    Memory {
        #[command(subcommand)]
        action: MemoryAction,
    },
    /// Print a shell's completion script for `loop` (e.g.
    /// `loop completions bash > /etc/bash_completion.d/loop`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page of `loop` (roff; `loop man | man -l -`).
    Man,
}

/// What a task is and how it runs (`loop run`, `loop submit`).
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The instruction (optional with --task, which has its own).
    pub(crate) instruction: Option<String>,
    /// An acceptance check (a shell command that must exit 0); repeatable.
    #[arg(long = "check", value_name = "CMD")]
    pub(crate) checks: Vec<String>,
    /// A file that must exist at the end; repeatable.
    #[arg(long = "artifact", value_name = "PATH")]
    pub(crate) artifacts: Vec<String>,
    /// A contract file (YAML).
    #[arg(long, value_name = "FILE")]
    pub(crate) task: Option<PathBuf>,
    /// Run a pattern `loop init --pattern NAME` wrote (its contract
    /// template, its SKILL.md given to the model); it takes no other
    /// instruction.
    #[arg(long, value_name = "NAME", conflicts_with = "task")]
    pub(crate) pattern: Option<String>,
    /// Use a skill (`loop skills list`): its SKILL.md is given to the
    /// model and what it asks is intersected with the task's authority
    /// (an installed one must verify against `skills.trust`); repeatable.
    #[arg(long = "skill", value_name = "NAME")]
    pub(crate) skills: Vec<String>,
    /// A file given with the task: put in its workspace as
    /// `inputs/NAME` before it starts, its digest in the ledger's first
    /// entry (at most 32 files of 32 MiB each); repeatable.
    #[arg(long = "input", value_name = "PATH")]
    pub(crate) inputs: Vec<std::path::PathBuf>,
    /// With an instruction and no --check or --task, the contract is
    /// drafted by the model and judged by the critic; this locks the
    /// draft the critic accepts without asking (needed without a terminal).
    #[arg(long)]
    pub(crate) accept_contract: bool,
    /// The model: scripted:PATH, openai:MODEL, anthropic:MODEL or replay:FILE
    /// (default: `models.maker` in the project's Loopfile.yaml).
    #[arg(long, value_name = "SPEC")]
    pub(crate) model: Option<String>,
    /// Save every model exchange to FILE (secrets redacted) for `--model replay:FILE`.
    #[arg(long, value_name = "FILE")]
    pub(crate) record: Option<PathBuf>,
    /// Model turns allowed.
    #[arg(long)]
    pub(crate) max_steps: Option<u32>,
    /// Tokens allowed.
    #[arg(long)]
    pub(crate) max_tokens: Option<u64>,
    /// Dollars allowed.
    #[arg(long)]
    pub(crate) budget_usd: Option<f64>,
    /// Wall-clock seconds allowed.
    #[arg(long, value_name = "SECS")]
    pub(crate) timeout: Option<u64>,
    /// The project directory (default: the current directory).
    #[arg(long, default_value = ".")]
    pub(crate) project: PathBuf,
    /// Answer yes to every question the task asks (exec-policy prompts,
    /// checkpoints); the same as `--on-prompt allow`.
    #[arg(long)]
    pub(crate) yes: bool,
    /// Who answers the task's questions when no terminal can: `deny`
    /// (the default without a terminal), `allow`, or `wait` for `loop
    /// approve`. On a terminal the question is asked inline.
    #[arg(long, value_enum)]
    pub(crate) on_prompt: Option<OnPromptArg>,
    /// Carry your uncommitted changes into the task's worktree.
    #[arg(long)]
    pub(crate) include_dirty: bool,
    /// Keep a written contract's checks that pass on an empty workspace
    /// (they prove nothing about the project; without this they are
    /// refused). Each is marked `allow_vacuous` in the locked contract.
    #[arg(long)]
    pub(crate) allow_vacuous: bool,
    /// Also verify after every change, not only when the model claims finish.
    #[arg(long)]
    pub(crate) verify_on_change: bool,
    /// `preferred` runs commands with the isolation the kernel offers and
    /// records it; `required` fails closed when a layer is missing.
    #[arg(long, value_enum, default_value_t = IsolationArg::Preferred)]
    pub(crate) isolation: IsolationArg,
    /// First continue this project's interrupted tasks (whose runtime
    /// died); with no instruction, only that.
    #[arg(long)]
    pub(crate) resume_interrupted: bool,
}

/// What `loop skills` does.
#[derive(Debug, Subcommand)]
pub(crate) enum SkillsAction {
    /// Sign the bundle in DIR with your signing key (writes DIR/SKILL.sig.json).
    Sign {
        /// The bundle's folder.
        dir: PathBuf,
    },
    /// Check the bundle in DIR: signed by a key the Loopfile's
    /// `skills.trust` lists, and not one byte changed since.
    Verify {
        /// The bundle's folder.
        dir: PathBuf,
        /// The project whose Loopfile lists the trusted keys.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Verify the bundle at PATH (a folder, or a git repository's working
    /// tree) and copy it into the project's `loop-skills/` (or, with
    /// `--user`, your own skills).
    Install {
        /// The bundle.
        path: PathBuf,
        /// Into your skills (`$LOOP_STATE_DIR/skills`), for every project.
        #[arg(long)]
        user: bool,
        /// Accept a bundle signed before a copy of it this machine already
        /// took (refused otherwise: an older bundle put back).
        #[arg(long)]
        allow_older: bool,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Every skill the project can use or refuses, and why.
    List {
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// One skill: where it is, who signed it, what it asks, its guidance.
    Show {
        /// The skill's name.
        name: String,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Remove an installed skill (the project's, or with `--user` yours).
    Remove {
        /// The skill's name.
        name: String,
        /// Yours, not the project's.
        #[arg(long)]
        user: bool,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
}

/// What `loop memory` does.
#[derive(Debug, Subcommand)]
pub(crate) enum MemoryAction {
    /// Add a note (usable at once by later tasks whose words it shares).
    Add {
        /// The note (at most 500 characters).
        text: String,
        /// A path or topic it is about; repeatable.
        #[arg(long = "about", value_name = "WHAT")]
        about: Vec<String>,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// The notes, oldest first, each with its status and where it came from.
    List {
        /// Forgotten ones too.
        #[arg(long)]
        all: bool,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// One note in full.
    Show {
        /// The note's id (`n-…`).
        id: String,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Approve a quarantined note (from a task that did not end verified).
    Approve {
        /// The note's id.
        id: String,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Forget a note: no task is given it again.
    Forget {
        /// The note's id.
        id: String,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
}

/// What `loop tokens` does.
#[derive(Debug, Subcommand)]
pub(crate) enum TokensAction {
    /// Make a token for OWNER and print it (once).
    Create {
        /// Who the token acts for: the tasks it starts belong to them.
        #[arg(long)]
        owner: String,
        /// `read` its owner's tasks, `run` (start and steer them too), or
        /// `admin` (every task of the project, the command line's too).
        #[arg(long, value_enum, default_value_t = ScopeArg::Run)]
        scope: ScopeArg,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// The tokens (ids, owners, scopes; never the secret).
    List {
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
    /// Revoke a token by its id (`tok-…`).
    Revoke {
        /// The token's id.
        id: String,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
}

/// A token's scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ScopeArg {
    /// Read its owner's tasks.
    Read,
    /// Start, steer and settle them too.
    Run,
    /// Every task of the project.
    Admin,
}

/// Who answers a task's questions when no terminal can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OnPromptArg {
    /// Deny (the default without a terminal).
    Deny,
    /// Answer yes.
    Allow,
    /// Wait for `loop approve`, until the approval timeout.
    Wait,
}

impl OnPromptArg {
    pub(crate) fn mode(self) -> loop_runtime::OnPrompt {
        match self {
            OnPromptArg::Deny => loop_runtime::OnPrompt::Deny,
            OnPromptArg::Allow => loop_runtime::OnPrompt::Allow,
            OnPromptArg::Wait => loop_runtime::OnPrompt::Wait,
        }
    }
}

/// How strictly commands are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum IsolationArg {
    /// What the kernel offers, recorded.
    Preferred,
    /// Fail closed when a layer is missing.
    Required,
}

impl IsolationArg {
    pub(crate) fn level(self) -> loop_sandbox::IsolationLevel {
        match self {
            IsolationArg::Preferred => loop_sandbox::IsolationLevel::Preferred,
            IsolationArg::Required => loop_sandbox::IsolationLevel::Required,
        }
    }
}

/// What `loop keys` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KeysAction {
    /// The key's id, hex and PEM.
    Show,
    /// The public key as PEM only.
    Export,
    /// Revoke the key, make a new one, and add a signed addendum to every
    /// receipt of the project the old key signed.
    Rotate,
}

/// A format with a JSON Schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SchemaFormat {
    /// The task contract (task.yaml).
    Contract,
    /// The project's Loopfile.yaml.
    Loopfile,
}

// `loop resume`'s flags (no doc comment: the subcommand's help is its variant's).
#[derive(Debug, clap::Args)]
pub(crate) struct ResumeArgs {
    /// The task id.
    pub(crate) id: String,
    /// More model turns.
    #[arg(long, value_name = "N")]
    pub(crate) add_steps: Option<u32>,
    /// More tokens.
    #[arg(long, value_name = "N")]
    pub(crate) add_tokens: Option<u64>,
    /// More dollars.
    #[arg(long, value_name = "X")]
    pub(crate) add_usd: Option<f64>,
    /// More wall-clock seconds.
    #[arg(long, value_name = "S")]
    pub(crate) add_secs: Option<u64>,
    /// The project (default: the current directory).
    #[arg(long, default_value = ".")]
    pub(crate) project: PathBuf,
    /// Who answers the task's questions when no terminal can: `deny`
    /// (the default without a terminal), `allow`, or `wait`.
    #[arg(long, value_enum)]
    pub(crate) on_prompt: Option<OnPromptArg>,
    /// Wait for this process to end first (a run detached with Ctrl-C
    /// hands its task over this way).
    #[arg(long, value_name = "PID", hide = true)]
    pub(crate) after_pid: Option<u32>,
}

// `loop eval`'s flags (no doc comment: the subcommand's help is its variant's).
#[derive(Debug, clap::Args)]
pub(crate) struct EvalArgs {
    /// The suite (a directory of cases, each with a case.yaml).
    pub(crate) suite: PathBuf,
    /// `scripted`, or a model spec (openai:MODEL, anthropic:MODEL, …).
    #[arg(long, value_name = "SPEC")]
    pub(crate) model: String,
    /// Runs per case (and solution).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) repeat: u32,
    /// Cases run at once.
    #[arg(long, value_name = "J", default_value_t = 1)]
    pub(crate) jobs: usize,
    /// An earlier report (--json or --out): show what changed; more
    /// false acceptances than it had is an error exit.
    #[arg(long, value_name = "OLD.json")]
    pub(crate) compare: Option<PathBuf>,
    /// Write the report as JSON here too.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// A Loopfile put in every case's starting project: a real model's
    /// settings (`models:` only: base URL, stream, tool choice, …; any
    /// other section is refused, since it would change what the checks
    /// mean). Its SHA-256 is in the report.
    #[arg(long, value_name = "FILE")]
    pub(crate) loopfile: Option<PathBuf>,
    /// Keep the cases' projects (their stores, ledgers and receipts)
    /// and say where; by default they are removed.
    #[arg(long)]
    pub(crate) keep: bool,
}

// `loop serve`'s flags (no doc comment: the subcommand's help is its variant's).
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub(crate) addr: std::net::SocketAddr,
    /// Requests a token may make per minute.
    #[arg(long, value_name = "N", default_value_t = 600)]
    pub(crate) rate: u32,
    /// Tasks run at once; more wait their turn (a task waiting for an
    /// answer keeps its place).
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub(crate) jobs: usize,
    /// Hand tasks to `loop worker` processes through this queue
    /// (`redis://HOST:PORT`; default: LOOP_QUEUE_URL) instead of
    /// running them here.
    #[arg(long, value_name = "URL")]
    pub(crate) queue: Option<String>,
    /// The queue's name.
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub(crate) queue_name: String,
    /// Also take up the interrupted tasks the command line started
    /// (by default only those an earlier server ran; the rest are
    /// counted and left for `loop resume`).
    #[arg(long)]
    pub(crate) adopt_cli_tasks: bool,
    /// The project.
    #[arg(long, default_value = ".")]
    pub(crate) project: PathBuf,
}

// `loop worker`'s flags (no doc comment: the subcommand's help is its variant's).
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The queue: `redis://HOST:PORT` (default: LOOP_QUEUE_URL).
    #[arg(long, value_name = "URL")]
    pub(crate) queue: Option<String>,
    /// The queue's name.
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub(crate) queue_name: String,
    /// Tasks run at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) jobs: usize,
    /// A message idle this long (its worker died) is taken over.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) visibility_secs: u64,
    /// Deliveries before a task goes to the dead-letter stream.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub(crate) max_attempts: u64,
    /// On SIGTERM, how long running tasks may take to end before they
    /// are handed back.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub(crate) grace: u64,
    /// Serve /metrics here (e.g. 127.0.0.1:9700).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// The project.
    #[arg(long, default_value = ".")]
    pub(crate) project: PathBuf,
}

/// `loop exec` arguments.
#[derive(clap::Args)]
pub(crate) struct ExecArgs {
    /// `none` (own network namespace, loopback only) or `host`.
    #[arg(long, value_enum, default_value_t = NetArg::None)]
    pub(crate) net: NetArg,
    /// A host the command may reach through the runtime's egress proxy
    /// (`host`, `host:port`, `*.domain`); repeatable. The network stays
    /// otherwise denied; every attempt is reported.
    #[arg(long = "allow", value_name = "HOST")]
    pub(crate) allow: Vec<String>,
    /// Reach HOST at ADDR (`ip:port`) instead of resolving it; repeatable.
    #[arg(long = "resolve", value_name = "HOST=ADDR")]
    pub(crate) resolve: Vec<String>,
    /// Memory limit in MiB.
    #[arg(long, value_name = "MB")]
    pub(crate) mem: Option<u64>,
    /// CPU seconds.
    #[arg(long, value_name = "S")]
    pub(crate) cpu_secs: Option<u64>,
    /// Largest file the command may write, in MiB.
    #[arg(long, value_name = "MB")]
    pub(crate) fsize: Option<u64>,
    /// What the command may write, in MiB: its /tmp and its layer over the
    /// workspace share one tmpfs of this size (default 2048).
    #[arg(long, value_name = "MB")]
    pub(crate) disk: Option<u64>,
    /// A glob inside the workspace to make read-only, besides the defaults
    /// (.git/**, .env*, secrets/**, *.pem, *.key); repeatable.
    #[arg(long = "protect", value_name = "GLOB")]
    pub(crate) protect: Vec<String>,
    /// Wall-clock seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub(crate) timeout: u64,
    /// Bytes of output kept, both streams together (every byte is hashed).
    #[arg(long, value_name = "BYTES", default_value_t = loop_sandbox::DEFAULT_MAX_OUTPUT)]
    pub(crate) max_output: usize,
    /// The read-write directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) workspace: Option<PathBuf>,
    /// `preferred` runs with what the kernel offers; `required` fails closed.
    #[arg(long, value_enum, default_value_t = crate::cli::IsolationArg::Preferred)]
    pub(crate) isolation: crate::cli::IsolationArg,
    /// See the workspace through an overlay: the command may write, the
    /// workspace never changes (what each verification check gets).
    #[arg(long)]
    pub(crate) overlay: bool,
    /// Run the command on a pseudo-terminal the runtime makes for it, for
    /// a command that will not run without one (never this terminal); its
    /// output is both streams together.
    #[arg(long)]
    pub(crate) tty: bool,
    /// Turn a layer off (namespaces, landlock, seccomp, cgroups), for
    /// measurement and diagnosis; repeatable. Reported as not enforced.
    #[arg(long = "without", value_name = "LAYER",
          value_parser = clap::builder::PossibleValuesParser::new(["namespaces", "landlock", "seccomp", "cgroups"]))]
    pub(crate) without: Vec<String>,
    /// Run the command N times in this process and report the last run
    /// (for measuring the per-command cost inside a long-lived runtime).
    #[arg(long, default_value_t = 1, hide = true)]
    pub(crate) repeat: u32,
    /// Pause this many milliseconds between those runs (a task's commands
    /// come apart, not back to back).
    #[arg(long, default_value_t = 0, hide = true)]
    pub(crate) pause_ms: u64,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

/// The network a command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum NetArg {
    /// Its own network namespace, loopback only.
    None,
    /// The host's network.
    Host,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument's raw values in `m` and its subcommand's, by id.
    fn values(m: &clap::ArgMatches) -> Vec<(String, Option<Vec<String>>)> {
        let mut out = Vec::new();
        let mut at = Some(("".to_string(), m));
        while let Some((name, m)) = at {
            for id in m.ids() {
                let raw = m.get_raw(id.as_str()).map(|v| {
                    v.map(|s| s.to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                });
                out.push((format!("{name}/{id}"), raw));
            }
            at = m.subcommand().map(|(n, sub)| (format!("{name}/{n}"), sub));
        }
        out.sort();
        out
    }

    #[test]
    fn exec_alone_parses_a_line_as_the_whole_command_line_does() {
        let lines: &[&[&str]] = &[
            &["loop", "exec", "--", "true"],
            &["loop", "--json", "exec", "--", "sh", "-c", "exit 3"],
            &["loop", "exec", "--json", "-vv", "--", "true"],
            &[
                "loop",
                "exec",
                "--repeat",
                "3",
                "--pause-ms",
                "5",
                "--",
                "true",
            ],
            &[
                "loop",
                "exec",
                "--without",
                "cgroups",
                "--without",
                "seccomp",
                "--",
                "true",
            ],
            &["loop", "exec", "--store", "x.db", "--", "echo", "--json"],
            &["loop", "exec", "true", "--version"],
        ];
        let mut taken = 0;
        for line in lines {
            let full = Cli::command().try_get_matches_from(line.iter());
            let alone = ExecCli::command().try_get_matches_from(line.iter());
            match (full, alone) {
                (Ok(f), Ok(a)) => {
                    assert_eq!(values(&f), values(&a), "{line:?}");
                    taken += 1;
                }
                (full, alone) => {
                    assert!(alone.is_err(), "only exec alone took {line:?}: {full:?}");
                }
            }
        }
        assert!(taken >= 5, "{taken}");
        // What exec alone does not take is the whole line's to answer.
        for line in [
            &["loop", "exec", "--help"][..],
            &["loop", "exec", "--bogus", "--", "true"],
            &["loop", "exec"],
            &["loop", "-V", "exec"],
        ] {
            let args = line.iter().map(std::ffi::OsString::from);
            assert!(ExecCli::parse_from(args).is_none(), "{line:?}");
        }
    }
}
