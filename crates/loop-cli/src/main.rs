//! `loop` — Loop Engine's command line. Argument parsing and presentation
//! only; the work happens in the library crates.

/// `println!` for text that may hold what a model or a command wrote (a
/// reason, an instruction, a check's output): defanged for the terminal.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", $crate::screen::defang(&format!($($arg)*)))
    };
}

mod demo;
mod exec_cmd;
mod failure;
mod files_cmd;
mod live;
mod logging;
mod prompt;
mod replay;
mod screen;
mod show_cmd;
mod story;
mod tasks_cmd;
mod verify_cmd;

use clap::{Parser, Subcommand};
use loop_protocol::{Contract, OutcomeKind};
use loop_runtime::{Runtime, TaskReport, TaskRequest, interrupt, task::adapters as wiring};
use std::path::PathBuf;
use std::process::ExitCode;

/// A failure the binary reports: an exit code and a message with a hint.
#[derive(Debug)]
pub struct CliError {
    code: u8,
    message: String,
}

impl From<loop_runtime::Error> for CliError {
    fn from(e: loop_runtime::Error) -> Self {
        match e.kind {
            loop_runtime::error::ErrorKind::Usage
            | loop_runtime::error::ErrorKind::NotFound
            | loop_runtime::error::ErrorKind::Conflict => CliError::usage(e.message),
            loop_runtime::error::ErrorKind::Unavailable
            | loop_runtime::error::ErrorKind::Internal => CliError::internal(e.message),
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl CliError {
    /// Bad usage, configuration or input (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
        }
    }
    /// An internal failure (exit 3).
    pub fn internal(message: impl Into<String>) -> Self {
        CliError {
            code: 3,
            message: message.into(),
        }
    }
}

#[derive(Parser)]
#[command(
    name = "loop",
    version,
    about = "Loop Engine: agent loops that stop only on evidence",
    long_about = "Loop Engine turns one instruction into an acceptance contract, drives a model through plan → act → observe → verify inside a sandbox, and stops only when every check passes on a fresh snapshot — or when a budget, a stall or a person stops it. Every run ends with a hash-chained receipt.\n\nExit codes: 0 verified / success; 1 finished but not verified, or a receipt that does not hold; 2 bad usage, config or input; 3 internal error."
)]
struct Cli {
    /// Diagnostics on stderr: -v info, -vv debug, -vvv trace (LOOP_LOG
    /// chooses by target instead, e.g. `LOOP_LOG=loop_sandbox=debug`).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Machine-readable output, on every command: JSON (a running task's
    /// events as JSON lines), and a failure as
    /// `{"error":{"kind","message","location","hint"}}` on stderr with the
    /// same exit code.
    #[arg(long, global = true)]
    json: bool,
    /// Where the project's tasks are kept: `postgres://USER@HOST/DB` (one
    /// store shared by servers and workers on many machines) or an SQLite
    /// file. Default: LOOP_STORE_URL, else the Loopfile's `store:`, else
    /// `.loop/loop.db`.
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    Worker {
        /// The queue: `redis://HOST:PORT` (default: LOOP_QUEUE_URL).
        #[arg(long, value_name = "URL")]
        queue: Option<String>,
        /// The queue's name.
        #[arg(long, value_name = "NAME", default_value = "default")]
        queue_name: String,
        /// Tasks run at once.
        #[arg(long, value_name = "N", default_value_t = 4)]
        jobs: usize,
        /// A message idle this long (its worker died) is taken over.
        #[arg(long, value_name = "SECS", default_value_t = 60)]
        visibility_secs: u64,
        /// Deliveries before a task goes to the dead-letter stream.
        #[arg(long, value_name = "N", default_value_t = 5)]
        max_attempts: u64,
        /// On SIGTERM, how long running tasks may take to end before they
        /// are handed back.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        grace: u64,
        /// Serve /metrics here (e.g. 127.0.0.1:9700).
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
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
    Resume {
        /// The task id.
        id: String,
        /// More model turns.
        #[arg(long, value_name = "N")]
        add_steps: Option<u32>,
        /// More tokens.
        #[arg(long, value_name = "N")]
        add_tokens: Option<u64>,
        /// More dollars.
        #[arg(long, value_name = "X")]
        add_usd: Option<f64>,
        /// More wall-clock seconds.
        #[arg(long, value_name = "S")]
        add_secs: Option<u64>,
        /// The project (default: the current directory).
        #[arg(long, default_value = ".")]
        project: PathBuf,
        /// Who answers the task's questions when no terminal can: `deny`
        /// (the default without a terminal), `allow`, or `wait`.
        #[arg(long, value_enum)]
        on_prompt: Option<OnPromptArg>,
        /// Wait for this process to end first (a run detached with Ctrl-C
        /// hands its task over this way).
        #[arg(long, value_name = "PID", hide = true)]
        after_pid: Option<u32>,
    },
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
        /// The receipt (`<task>.receipt.json`).
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
    Exec(exec_cmd::ExecArgs),
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
    /// Re-run a receipt's checks on the tree it verified, without a model.
    Replay {
        /// The receipt.
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
                  loop_runtime::contract::patterns::PATTERNS.iter().map(|(name, _)| *name)))]
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
    Eval {
        /// The suite (a directory of cases, each with a case.yaml).
        suite: PathBuf,
        /// `scripted`, or a model spec (openai:MODEL, anthropic:MODEL, …).
        #[arg(long, value_name = "SPEC")]
        model: String,
        /// Runs per case (and solution).
        #[arg(long, value_name = "N", default_value_t = 1)]
        repeat: u32,
        /// Cases run at once.
        #[arg(long, value_name = "J", default_value_t = 1)]
        jobs: usize,
        /// An earlier report (--json or --out): show what changed; more
        /// false acceptances than it had is an error exit.
        #[arg(long, value_name = "OLD.json")]
        compare: Option<PathBuf>,
        /// Write the report as JSON here too.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// A Loopfile put in every case's starting project: a real model's
        /// settings (`models:` only: base URL, stream, tool choice, …; any
        /// other section is refused, since it would change what the checks
        /// mean). Its SHA-256 is in the report.
        #[arg(long, value_name = "FILE")]
        loopfile: Option<PathBuf>,
        /// Keep the cases' projects (their stores, ledgers and receipts)
        /// and say where; by default they are removed.
        #[arg(long)]
        keep: bool,
    },
    /// Print the JSON Schema of a format: `contract` or `loopfile`.
    Schema {
        /// The format.
        #[arg(value_enum)]
        format: SchemaFormat,
    },
    /// Serve the project's tasks over HTTP: the API (/api/v1, documented at
    /// /openapi.json), live events, /metrics. Every route but /healthz and
    /// /readyz needs a token (`loop tokens create`).
    Serve {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:7700")]
        addr: std::net::SocketAddr,
        /// Requests a token may make per minute.
        #[arg(long, value_name = "N", default_value_t = 600)]
        rate: u32,
        /// Tasks run at once; more wait their turn (a task waiting for an
        /// answer keeps its place).
        #[arg(long, value_name = "N", default_value_t = 32)]
        jobs: usize,
        /// Hand tasks to `loop worker` processes through this queue
        /// (`redis://HOST:PORT`; default: LOOP_QUEUE_URL) instead of
        /// running them here.
        #[arg(long, value_name = "URL")]
        queue: Option<String>,
        /// The queue's name.
        #[arg(long, value_name = "NAME", default_value = "default")]
        queue_name: String,
        /// Also take up the interrupted tasks the command line started
        /// (by default only those an earlier server ran; the rest are
        /// counted and left for `loop resume`).
        #[arg(long)]
        adopt_cli_tasks: bool,
        /// The project.
        #[arg(long, default_value = ".")]
        project: PathBuf,
    },
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
struct RunArgs {
    /// The instruction (optional with --task, which has its own).
    instruction: Option<String>,
    /// An acceptance check (a shell command that must exit 0); repeatable.
    #[arg(long = "check", value_name = "CMD")]
    checks: Vec<String>,
    /// A file that must exist at the end; repeatable.
    #[arg(long = "artifact", value_name = "PATH")]
    artifacts: Vec<String>,
    /// A contract file (YAML).
    #[arg(long, value_name = "FILE")]
    task: Option<PathBuf>,
    /// Run a pattern `loop init --pattern NAME` wrote (its contract
    /// template, its SKILL.md given to the model); it takes no other
    /// instruction.
    #[arg(long, value_name = "NAME", conflicts_with = "task")]
    pattern: Option<String>,
    /// With an instruction and no --check or --task, the contract is
    /// drafted by the model and judged by the critic; this locks the
    /// draft the critic accepts without asking (needed without a terminal).
    #[arg(long)]
    accept_contract: bool,
    /// The model: scripted:PATH, openai:MODEL, anthropic:MODEL or replay:FILE
    /// (default: `models.maker` in the project's Loopfile.yaml).
    #[arg(long, value_name = "SPEC")]
    model: Option<String>,
    /// Save every model exchange to FILE (secrets redacted) for `--model replay:FILE`.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Model turns allowed.
    #[arg(long)]
    max_steps: Option<u32>,
    /// Tokens allowed.
    #[arg(long)]
    max_tokens: Option<u64>,
    /// Dollars allowed.
    #[arg(long)]
    budget_usd: Option<f64>,
    /// Wall-clock seconds allowed.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// The project directory (default: the current directory).
    #[arg(long, default_value = ".")]
    project: PathBuf,
    /// Answer yes to every question the task asks (exec-policy prompts,
    /// checkpoints); the same as `--on-prompt allow`.
    #[arg(long)]
    yes: bool,
    /// Who answers the task's questions when no terminal can: `deny`
    /// (the default without a terminal), `allow`, or `wait` for `loop
    /// approve`. On a terminal the question is asked inline.
    #[arg(long, value_enum)]
    on_prompt: Option<OnPromptArg>,
    /// Carry your uncommitted changes into the task's worktree.
    #[arg(long)]
    include_dirty: bool,
    /// Keep a written contract's checks that pass on an empty workspace
    /// (they prove nothing about the project; without this they are
    /// refused). Each is marked `allow_vacuous` in the locked contract.
    #[arg(long)]
    allow_vacuous: bool,
    /// Also verify after every change, not only when the model claims finish.
    #[arg(long)]
    verify_on_change: bool,
    /// `preferred` runs commands with the isolation the kernel offers and
    /// records it; `required` fails closed when a layer is missing.
    #[arg(long, value_enum, default_value_t = IsolationArg::Preferred)]
    isolation: IsolationArg,
    /// First continue this project's interrupted tasks (whose runtime
    /// died); with no instruction, only that.
    #[arg(long)]
    resume_interrupted: bool,
}

/// What `loop tokens` does.
#[derive(Debug, Subcommand)]
enum TokensAction {
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
enum ScopeArg {
    /// Read its owner's tasks.
    Read,
    /// Start, steer and settle them too.
    Run,
    /// Every task of the project.
    Admin,
}

/// Who answers a task's questions when no terminal can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnPromptArg {
    /// Deny (the default without a terminal).
    Deny,
    /// Answer yes.
    Allow,
    /// Wait for `loop approve`, until the approval timeout.
    Wait,
}

impl OnPromptArg {
    fn mode(self) -> wiring::OnPrompt {
        match self {
            OnPromptArg::Deny => wiring::OnPrompt::Deny,
            OnPromptArg::Allow => wiring::OnPrompt::Allow,
            OnPromptArg::Wait => wiring::OnPrompt::Wait,
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
enum KeysAction {
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
enum SchemaFormat {
    /// The task contract (task.yaml).
    Contract,
    /// The project's Loopfile.yaml.
    Loopfile,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // `loop exec` with bad flags is our failure, not the command's.
            // (args_os: an argument that is not UTF-8 is an error to report,
            // not a panic.)
            let exec = std::env::args_os().nth(1).is_some_and(|a| a == "exec");
            let json = std::env::args_os().any(|a| a == "--json");
            if json && e.use_stderr() {
                let code = if exec { 125 } else { e.exit_code() };
                let code = code.clamp(0, 255) as u8;
                let mut text = e.render().to_string();
                // clap's own "For more information, try '--help'." is a hint.
                text = text.replace("For more information, try", "hint: for more, try");
                failure::tell(true, code, text.trim_start_matches("error: "));
                return ExitCode::from(code);
            }
            let _ = e.print();
            // The command goes after `--`: say so when it was left out.
            if exec
                && !std::env::args_os().any(|a| a == "--")
                && matches!(
                    e.kind(),
                    clap::error::ErrorKind::UnknownArgument
                        | clap::error::ErrorKind::MissingRequiredArgument
                )
            {
                eprintln!("hint: give the command after `--`, e.g. `loop exec -- echo hi`");
            }
            let code = if exec && e.use_stderr() {
                125
            } else {
                e.exit_code()
            };
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
    };
    // Output into a closed pipe (`loop demo | head`) ends the process
    // quietly, as it does for other command-line tools, not with a panic.
    // Not the long-lived ones: a server, a worker or an MCP server whose
    // reader went away (a supervisor that read the first line, a client
    // that left) must not die with the tasks it runs; to them a closed
    // pipe is an error they handle.
    if !matches!(
        cli.command,
        Command::Serve { .. } | Command::Worker { .. } | Command::Mcp { .. }
    ) {
        // SAFETY: restoring the default disposition of one signal at start-up.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // The server ends on SIGTERM leaving its tasks resumable; everything
    // else turns Ctrl-C and SIGTERM into a cancel.
    if !matches!(
        cli.command,
        Command::Serve { .. } | Command::Worker { .. } | Command::Mcp { .. }
    ) {
        interrupt::install();
    }
    if let Err(e) = logging::init(cli.verbose) {
        // As for its flags: `loop exec`'s own failures are not the command's.
        let code = if matches!(cli.command, Command::Exec(_)) {
            125
        } else {
            2
        };
        failure::tell(cli.json, code, &e.to_string());
        return ExitCode::from(code);
    }
    // Whatever credentials this process was given (provider keys, tokens)
    // are scrubbed, by value, from every record it writes.
    loop_sandbox::redact::register_environment();
    let json = cli.json;
    if let Some(url) = &cli.store {
        loop_runtime::project::locate::set_store_url(url);
    }
    match dispatch(cli.command, json) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            failure::tell(json, e.code, &e.message);
            ExitCode::from(e.code)
        }
    }
}

/// The full id of the task `id` names in `project` (a unique prefix, or
/// `last`).
fn full_id(project: &std::path::Path, id: &str) -> Result<String, CliError> {
    Ok(Runtime::open(project)?.resolve_id(id)?)
}

fn dispatch(command: Command, json: bool) -> Result<u8, CliError> {
    match command {
        Command::Demo { dir } => Ok(if demo::demo(dir, json)? { 0 } else { 1 }),
        Command::Verify {
            receipt,
            pubkey,
            artifacts,
            integrity_only,
            allow_extra,
        } => {
            let ok = verify_cmd::verify(
                &receipt,
                artifacts.as_deref(),
                pubkey.as_deref(),
                json,
                (integrity_only, allow_extra),
            )?;
            Ok(if ok { 0 } else { 1 })
        }
        // `loop exec` passes the command's code through: its own failures
        // are 125 (126/127 for a command it cannot run or find).
        Command::Exec(args) => exec_cmd::exec(args, json).map_err(|e| match e.code {
            2 | 3 => CliError {
                code: 125,
                message: e.message,
            },
            _ => e,
        }),
        Command::Doctor { project } => exec_cmd::doctor(&project, json),
        Command::Replay { receipt } => replay::replay(&receipt, json),
        Command::Keys {
            action: KeysAction::Rotate,
            project,
            yes,
        } => {
            // Said plainly when the project does not exist: nothing revoked.
            let mut story = story::Story::new(json);
            let s = loop_runtime::ops::changes::rotate_key(&project, yes, &mut story)?;
            settled(s, &story, "rotate", None)
        }
        Command::Keys { action, .. } => files_cmd::keys(action == KeysAction::Show, json),
        Command::Apply {
            id,
            recover: true,
            project,
            ..
        } => {
            let id = full_id(&project, &id)?;
            let mut story = story::Story::new(json);
            let s = Runtime::open(&project)?.recover(&id, &mut story)?;
            settled(s, &story, "recover", Some(&id))
        }
        Command::Apply {
            id,
            yes,
            trust_host_files,
            project,
            ..
        } => {
            let id = full_id(&project, &id)?;
            let mut story = story::Story::new(json);
            let s = Runtime::open(&project)?.apply(&id, yes, trust_host_files, &mut story)?;
            settled(s, &story, "apply", Some(&id))
        }
        Command::Undo {
            id,
            forget,
            project,
        } => {
            let id = full_id(&project, &id)?;
            let runtime = Runtime::open(&project)?;
            let mut story = story::Story::new(json);
            if forget {
                let s = runtime.forget(&id, &mut story)?;
                return settled(s, &story, "forget", Some(&id));
            }
            let s = runtime.undo(&id, &mut story)?;
            settled(s, &story, "undo", Some(&id))
        }
        Command::Discard { id, project } => {
            let id = full_id(&project, &id)?;
            let mut story = story::Story::new(json);
            let s = Runtime::open(&project)?.discard(&id, &mut story)?;
            settled(s, &story, "discard", Some(&id))
        }
        Command::List { project } => tasks_cmd::list(&project, json),
        Command::Gc { project, dry_run } => tasks_cmd::gc(&project, dry_run, json),
        Command::Diff {
            id,
            stat,
            no_pager,
            project,
        } => show_cmd::diff(&project, &full_id(&project, &id)?, stat, !no_pager, json),
        Command::Show { id, project } => show_cmd::show(&project, &full_id(&project, &id)?, json),
        Command::Status { id, project } => {
            tasks_cmd::status(&project, &full_id(&project, &id)?, json)
        }
        Command::Logs {
            id,
            follow,
            project,
        } => tasks_cmd::logs(&project, &full_id(&project, &id)?, follow, json),
        Command::Cancel { id, project } => {
            tasks_cmd::cancel(&project, &full_id(&project, &id)?, json)
        }
        Command::Approve {
            id,
            deny,
            message,
            project,
        } => tasks_cmd::approve(
            &project,
            &full_id(&project, &id)?,
            deny,
            message.as_deref(),
            json,
        ),
        Command::Resume {
            id,
            add_steps,
            add_tokens,
            add_usd,
            add_secs,
            project,
            on_prompt,
            after_pid,
        } => {
            let on_prompt = wiring::OnPrompt::choose(on_prompt.map(OnPromptArg::mode), false);
            let extension = extension_of(add_steps, add_tokens, add_usd, add_secs)?;
            if let Some(pid) = after_pid
                && !wait_for_exit(pid)
            {
                return Err(CliError::usage(format!(
                    "process {pid}, which detached from the task, has not ended after a minute; the task was not taken over (loop resume {id} takes it over once it has)"
                )));
            }
            let runtime = Runtime::open(&project)?;
            let id = runtime.resolve_id(&id)?;
            let mut story = story::Story::watching(json, Some(runtime.project()), on_prompt);
            let report = match extension {
                Some(ext) => runtime.extend(&id, ext, on_prompt, &mut story)?,
                None => runtime.run(&id, on_prompt, &mut story)?,
            };
            Ok(report_end(&report, &story))
        }
        Command::Manifest { dir } => files_cmd::manifest(&dir, json),
        Command::Audit { project } => files_cmd::audit(&project, json),
        Command::Eval {
            suite,
            model,
            repeat,
            jobs,
            compare,
            out,
            loopfile,
            keep,
        } => eval_cmd(
            loop_runtime::ops::eval::EvalOptions {
                suite,
                model,
                repeat: repeat.max(1),
                jobs: jobs.max(1),
                work: std::env::temp_dir().join(format!(
                    "loop-eval-{}-{}",
                    std::process::id(),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos())
                )),
                loopfile,
            },
            compare.as_deref(),
            out.as_deref(),
            keep,
            json,
        ),
        Command::Schema { format } => files_cmd::schema(match format {
            SchemaFormat::Contract => "contract",
            SchemaFormat::Loopfile => "loopfile",
        }),
        Command::Serve {
            addr,
            rate,
            jobs,
            queue,
            queue_name,
            adopt_cli_tasks,
            project,
        } => {
            let queue = queue
                .or_else(|| {
                    std::env::var("LOOP_QUEUE_URL")
                        .ok()
                        .filter(|u| !u.is_empty())
                })
                .map(|url| {
                    (
                        url,
                        loop_store::QueueOptions {
                            name: queue_name,
                            ..Default::default()
                        },
                    )
                });
            loop_server::serve(&loop_server::ServeOptions {
                project,
                addr,
                rate_per_minute: rate.max(1),
                jobs: jobs.max(1),
                queue,
                adopt_cli_tasks,
            })?;
            // Tasks still running are left interrupted; the next serve (or
            // `loop resume`) takes them up.
            std::process::exit(0);
        }
        Command::Mcp { jobs, project } => {
            loop_server::mcp::serve_stdio(&project, jobs.max(1))?;
            // Tasks still running are left interrupted; `loop resume`
            // takes them up.
            std::process::exit(0);
        }
        Command::Tokens { action } => tokens_cmd(action, json),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "loop", &mut out);
            print_generated(&out, json, "script")
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .map_err(|e| CliError::internal(format!("the man page: {e}")))?;
            print_generated(&out, json, "man")
        }
        Command::Cost {
            model,
            per_day,
            project,
        } => {
            if !per_day.is_finite() || per_day < 0.0 {
                return Err(CliError::usage("--per-day must be a non-negative number"));
            }
            files_cmd::cost(&project, model.as_deref(), per_day * 30.0, json)
        }
        Command::Init {
            pattern,
            force,
            project,
        } => files_cmd::init(&project, pattern.as_deref(), force, json),
        Command::Validate { file, loopfile }
            if loopfile || file.file_name().is_some_and(|n| n == "Loopfile.yaml") =>
        {
            files_cmd::validate_loopfile(&file, json)
        }
        Command::Validate { file, .. } => files_cmd::validate_contract(&file, json),
        Command::Run(run) => run_command(run, None, json),
        Command::Submit {
            run,
            queue,
            queue_name,
        } => run_command(run, Some((queue_url(queue)?, queue_name)), json),
        Command::Worker {
            queue,
            queue_name,
            jobs,
            visibility_secs,
            max_attempts,
            grace,
            metrics_addr,
            project,
        } => {
            loop_server::worker::work(&loop_server::worker::WorkerOptions {
                project,
                queue_url: queue_url(queue)?,
                queue: loop_store::QueueOptions {
                    name: queue_name,
                    visibility: std::time::Duration::from_secs(visibility_secs.max(1)),
                    max_attempts: max_attempts.max(1),
                },
                jobs: jobs.max(1),
                grace: std::time::Duration::from_secs(grace),
                metrics_addr,
            })?;
            std::process::exit(0);
        }
    }
}

/// `loop tokens create|list|revoke`.
fn tokens_cmd(action: TokensAction, json: bool) -> Result<u8, CliError> {
    use loop_runtime::ops::tokens::Scope;
    match action {
        TokensAction::Create {
            owner,
            scope,
            project,
        } => {
            let scope = match scope {
                ScopeArg::Read => Scope::Read,
                ScopeArg::Run => Scope::Run,
                ScopeArg::Admin => Scope::Admin,
            };
            let t = Runtime::open(&project)?.create_token(&owner, scope)?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"token": t.token, "id": t.record.id, "owner": t.record.owner, "scope": t.record.scope})
                );
            } else {
                println!("{}", t.token);
                eprintln!(
                    "token {} for {} ({}); it is shown this once: only its hash is kept",
                    t.record.id, t.record.owner, t.record.scope
                );
            }
            Ok(0)
        }
        TokensAction::List { project } => {
            let list = Runtime::open(&project)?.tokens()?;
            if json {
                println!("{}", serde_json::json!({"tokens": list}));
                return Ok(0);
            }
            if list.is_empty() {
                println!("no tokens (loop tokens create --owner NAME makes one)");
            }
            for t in list {
                say!(
                    "{}  {:<20} {:<6} created {}{}",
                    t.id,
                    t.owner,
                    t.scope,
                    loop_protocol::time::rfc3339_millis(t.created_ms),
                    t.revoked_ms
                        .map(|r| format!("  revoked {}", loop_protocol::time::rfc3339_millis(r)))
                        .unwrap_or_default()
                );
            }
            Ok(0)
        }
        TokensAction::Revoke { id, project } => {
            let done = Runtime::open(&project)?.revoke_token(&id)?;
            if json {
                println!("{}", serde_json::json!({"id": id, "revoked": done}));
            } else if done {
                println!("revoked {id}");
            }
            if done {
                Ok(0)
            } else {
                Err(CliError::usage(format!("no live token `{id}`")))
            }
        }
    }
}

/// Print generated text (a completion script, a man page), or with
/// `json` an object holding it under `key`.
fn print_generated(out: &[u8], json: bool, key: &str) -> Result<u8, CliError> {
    use std::io::Write;
    if json {
        println!(
            "{}",
            serde_json::json!({ key: String::from_utf8_lossy(out) })
        );
    } else {
        let _ = std::io::stdout().write_all(out);
    }
    Ok(0)
}

/// Wait until process `pid` has ended (at most a minute); whether it has.
fn wait_for_exit(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    for _ in 0..600 {
        // SAFETY: signal 0 only asks whether the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}

/// The exit code of a settled change (0 done, 1 anything else), said as
/// JSON with `json` (the story told it otherwise).
fn settled(
    s: loop_runtime::Settled,
    story: &story::Story,
    action: &str,
    task: Option<&str>,
) -> Result<u8, CliError> {
    let (result, code) = match s {
        loop_runtime::Settled::Done => ("done", 0),
        loop_runtime::Settled::NothingChanged => ("nothing_changed", 1),
        loop_runtime::Settled::DoneButDiffers => ("done_but_differs", 1),
    };
    if story.json() {
        println!(
            "{}",
            serde_json::json!({"action": action, "task_id": task, "result": result, "notes": story.notes()})
        );
    }
    Ok(code)
}

/// More budget from `loop resume`'s flags, if any was given.
fn extension_of(
    add_steps: Option<u32>,
    add_tokens: Option<u64>,
    add_usd: Option<f64>,
    add_secs: Option<u64>,
) -> Result<Option<loop_core::Extension>, CliError> {
    if add_usd.is_some_and(|x| !x.is_finite() || x < 0.0) {
        return Err(CliError::usage("--add-usd must be a non-negative number"));
    }
    Ok(
        (add_steps.is_some() || add_tokens.is_some() || add_usd.is_some() || add_secs.is_some())
            .then(|| loop_core::Extension {
                add_steps: add_steps.unwrap_or(0),
                add_tokens: add_tokens.unwrap_or(0),
                add_usd: add_usd.unwrap_or(0.0),
                add_secs: add_secs.unwrap_or(0),
            }),
    )
}

/// `loop run`: resume interrupted tasks if asked, compile the contract from
/// the file and the flags, run it, and say how it ended.
fn run_command(run: RunArgs, queue: Option<(String, String)>, json: bool) -> Result<u8, CliError> {
    let RunArgs {
        instruction,
        checks,
        artifacts,
        task,
        pattern,
        accept_contract,
        model,
        record,
        max_steps,
        max_tokens,
        budget_usd,
        timeout,
        project,
        yes,
        on_prompt,
        include_dirty,
        allow_vacuous,
        verify_on_change,
        isolation,
        resume_interrupted,
    } = run;
    if queue.is_some() && (resume_interrupted || record.is_some()) {
        return Err(CliError::usage(
            "loop submit queues one new task: --resume-interrupted and --record belong to loop run",
        ));
    }
    let on_prompt = wiring::OnPrompt::choose(on_prompt.map(OnPromptArg::mode), yes);
    let mut resumed_code = 0;
    if resume_interrupted {
        let runtime = Runtime::open(&project)?;
        for id in runtime.interrupted()? {
            let mut story = story::Story::watching(json, Some(runtime.project()), on_prompt);
            let report = runtime.run(&id, on_prompt, &mut story)?;
            resumed_code = resumed_code.max(report_end(&report, &story));
        }
        if instruction.is_none() && task.is_none() {
            return Ok(resumed_code);
        }
    }
    let runtime = Runtime::open(&project)?;
    let mut story = story::Story::watching(json, Some(runtime.project()), on_prompt);
    let request = TaskRequest {
        instruction,
        contract: match (pattern, task) {
            (Some(name), _) => loop_runtime::ContractInput::Pattern(name),
            (None, Some(file)) => loop_runtime::ContractInput::File(file),
            (None, None) => loop_runtime::ContractInput::None,
        },
        checks,
        artifacts,
        limits: loop_runtime::LimitOverrides {
            max_steps,
            max_tokens,
            budget_usd,
            timeout_secs: timeout,
        },
        accept_draft: accept_contract,
        model,
        record,
        verify_on_change,
        isolation: isolation.level(),
        include_dirty,
        on_prompt: Some(on_prompt),
        allow_vacuous,
        owner: None,
        trigger: None,
        via: loop_runtime::Via::Cli,
    };
    if let Some((url, name)) = queue {
        // The queue must answer before the task is stored.
        let q = loop_store::RedisQueue::open(
            &url,
            loop_store::QueueOptions {
                name: name.clone(),
                ..Default::default()
            },
        )
        .map_err(|e| CliError::usage(e.to_string()))?;
        let id = runtime.submit(request, &mut story)?;
        q.enqueue(&id, &id).map_err(|e| {
            CliError::usage(format!(
                "task {id} is stored but not queued ({e}); `loop resume {id}` runs it here"
            ))
        })?;
        if json {
            println!(
                "{}",
                serde_json::json!({"kind": "submitted", "task_id": id, "queue": name})
            );
        } else {
            println!("{id}");
        }
        return Ok(0);
    }
    let report = runtime.start(request, &mut story)?;
    Ok(report_end(&report, &story).max(resumed_code))
}

/// The queue `--queue` or LOOP_QUEUE_URL names.
fn queue_url(flag: Option<String>) -> Result<String, CliError> {
    flag.or_else(|| std::env::var("LOOP_QUEUE_URL").ok().filter(|u| !u.is_empty()))
        .ok_or_else(|| {
            CliError::usage(
                "no queue: give --queue redis://HOST:PORT or set LOOP_QUEUE_URL (loop run runs a task here, without one)",
            )
        })
}

fn read_contract(file: &std::path::Path) -> Result<Contract, CliError> {
    let text = loop_workspace::door::read_named_text(file, loop_workspace::door::MAX_PROJECT_FILE)
        .map_err(|e| CliError::usage(format!("cannot read the contract: {e}")))?;
    Contract::from_yaml(&text, &file.display().to_string())
        .map_err(|e| CliError::usage(e.to_string()))
}

/// Print how a task ended; its exit code (0 verified, 1 otherwise). With
/// JSON, the notes the run made (its warnings) are in the last line.
fn report_end(report: &TaskReport, story: &story::Story) -> u8 {
    if story.json() {
        println!(
            "{}",
            serde_json::json!({"kind": "receipt", "task_id": report.task_id, "path": report.receipt, "workspace": report.workspace, "outcome": report.outcome, "notes": story.notes()})
        );
    } else {
        println!("receipt {}", report.receipt.display());
    }
    if report.outcome.kind == OutcomeKind::Verified {
        0
    } else {
        1
    }
}

/// `loop eval`.
#[allow(clippy::disallowed_methods)] // loop eval's own scratch directory and report, named by the person
fn eval_cmd(
    opts: loop_runtime::ops::eval::EvalOptions,
    compare: Option<&std::path::Path>,
    out: Option<&std::path::Path>,
    keep: bool,
    json: bool,
) -> Result<u8, CliError> {
    use loop_runtime::ops::eval;
    let old: Option<eval::EvalReport> = match compare {
        Some(p) => {
            let text = loop_workspace::door::read_named_text(p, 64 << 20)
                .map_err(|e| CliError::usage(format!("--compare: {e}")))?;
            Some(serde_json::from_str(&text).map_err(|e| {
                CliError::usage(format!("{}: not an eval report: {e}", p.display()))
            })?)
        }
        None => None,
    };
    let work = opts.work.clone();
    // A directory of this run's own (a leftover of the same name, from a
    // process that had this id before, is never reused or removed).
    std::fs::create_dir_all(work.parent().unwrap_or(std::path::Path::new("/")))
        .and_then(|_| std::fs::create_dir(&work))
        .map_err(|e| CliError::usage(format!("{}: {e}", work.display())))?;
    let report = eval::run(&opts);
    if keep {
        eprintln!(
            "loop eval: the cases' projects are kept in {}",
            work.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    let report = report?;
    let text = serde_json::to_string_pretty(&report)
        .map_err(|e| CliError::internal(format!("the report: {e}")))?;
    if let Some(p) = out {
        std::fs::write(p, &text).map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?;
    }
    let mut failed =
        report.false_acceptances > 0 || report.right_unsolved > 0 || report.wrong_solved > 0;
    let mut changes = String::new();
    if let Some(old) = &old {
        let key = |r: &eval::CaseRun| (r.case.clone(), r.solution.clone(), r.repeat);
        for r in &report.runs {
            let before = old
                .runs
                .iter()
                .find(|o| key(o) == key(r))
                .map(|o| o.verdict);
            if before != Some(r.verdict) {
                changes.push_str(&format!(
                    "{} {} #{}: {:?} -> {:?}\n",
                    r.case,
                    r.solution.as_deref().unwrap_or("-"),
                    r.repeat,
                    before,
                    r.verdict
                ));
            }
        }
        changes.push_str(&format!(
            "false acceptances: {} -> {}; solved: {} -> {}\n",
            old.false_acceptances, report.false_acceptances, old.solved, report.solved
        ));
        if old.model != report.model || old.loopfile_sha256 != report.loopfile_sha256 {
            changes.push_str(&format!(
                "note: the runs differ in their model or its settings ({} {} -> {} {})\n",
                old.model,
                old.loopfile_sha256
                    .as_deref()
                    .map_or("-", |s| &s[..12.min(s.len())]),
                report.model,
                report
                    .loopfile_sha256
                    .as_deref()
                    .map_or("-", |s| &s[..12.min(s.len())]),
            ));
        }
        failed = report.false_acceptances > old.false_acceptances;
    }
    if json {
        println!("{text}");
    } else {
        print!("{}", report.markdown());
        if !changes.is_empty() {
            print!(
                "\ncompared with {}:\n{changes}",
                compare.map(|p| p.display().to_string()).unwrap_or_default()
            );
        }
    }
    Ok(u8::from(failed))
}
