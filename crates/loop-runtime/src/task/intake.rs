//! The one intake: what any front end asks for ([`TaskRequest`]) becomes
//! the task the runtime prepares ([`Admitted`]) here and nowhere else.
//!
//! The command line, the HTTP API, MCP, triggers and eval each translate
//! their own input into a [`TaskRequest`]; [`Runtime::admit`] assembles the
//! contract (a contract given, a pattern's, one made from checks, or an
//! instruction whose contract is to be drafted), applies the Loopfile's
//! defaults, checks every limit override, and resolves the model spec as
//! far as the front end is trusted to name a file. Two front ends given the
//! same request get the same contract.

#[cfg(test)]
use crate::ErrorKind;
use crate::task::request::ContractSource;
use crate::{Error, OnPrompt, Runtime};
use loop_protocol::Contract;
use std::path::PathBuf;

pub use loop_protocol::contract::MAX_TIMEOUT_SECS;

/// The front end a request came through: it decides how a field is
/// spelled in a refusal and how far a model spec may name a file. A
/// request that does not say is taken as the least trusted: a remote one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Via {
    /// The `loop` command (a person who can read the project).
    Cli,
    /// `POST /api/v1/tasks` (a token's owner, possibly remote).
    #[default]
    Http,
    /// The MCP endpoint's `loop_run` tool (a token's owner).
    Mcp,
    /// A Loopfile trigger (a webhook or a schedule).
    Trigger,
    /// `loop eval` running a suite's case.
    Eval,
    /// A program using the runtime as a library (the demo, tests).
    Library,
}

impl Via {
    /// Remote callers: a model file they name must be the project's.
    fn remote(self) -> bool {
        matches!(self, Via::Http | Via::Mcp)
    }

    /// How this front end spells a request field (`--max-steps` on the
    /// command line, `max_steps` in a body or a Loopfile).
    fn field(self, name: &'static str) -> String {
        match self {
            Via::Cli => match name {
                "timeout_secs" => "--timeout".into(),
                "contract" => "--task".into(),
                other => format!("--{}", other.replace('_', "-")),
            },
            _ => name.into(),
        }
    }
}

/// Where the contract comes from, before the intake.
#[derive(Debug, Clone, Default)]
pub enum ContractInput {
    /// None: the checks make one, or (without checks) it is drafted from
    /// the instruction.
    #[default]
    None,
    /// A contract in YAML, with where it came from (for its diagnostics).
    Yaml {
        /// The text.
        text: String,
        /// A file name or "contract", named in each diagnostic.
        origin: String,
    },
    /// A contract file the caller names (read through the door: no link).
    File(PathBuf),
    /// A contract already read.
    Given(Box<Contract>),
    /// A pattern of the project (`loop-patterns/NAME/`): its contract and
    /// its `SKILL.md` as guidance.
    Pattern(String),
}

/// Limits a request sets over the contract's (or the Loopfile's).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LimitOverrides {
    /// Steps (at least 1).
    pub max_steps: Option<u32>,
    /// Tokens (at least 1).
    pub max_tokens: Option<u64>,
    /// Dollars (finite, not negative).
    pub budget_usd: Option<f64>,
    /// Seconds of wall time (at most [`MAX_TIMEOUT_SECS`]; 0 is 1).
    pub timeout_secs: Option<u64>,
}

impl LimitOverrides {
    /// Any override at all.
    pub fn any(&self) -> bool {
        *self != LimitOverrides::default()
    }
}

/// What a front end asks for: the typed request every front end translates
/// its input into.
#[derive(Debug, Clone, Default)]
pub struct TaskRequest {
    /// The instruction (replacing a given contract's, when both are given).
    pub instruction: Option<String>,
    /// The contract, if one is given.
    pub contract: ContractInput,
    /// `--check` commands: one criterion each.
    pub checks: Vec<String>,
    /// `--artifact` paths.
    pub artifacts: Vec<String>,
    /// Limits over the contract's.
    pub limits: LimitOverrides,
    /// A drafted contract is locked as soon as the critic accepts it
    /// (`--accept-contract`), instead of being confirmed by a person.
    pub accept_draft: bool,
    /// The model spec (else the Loopfile's maker).
    pub model: Option<String>,
    /// `--record FILE`.
    pub record: Option<PathBuf>,
    /// `--verify-on-change`.
    pub verify_on_change: bool,
    /// `--isolation`.
    pub isolation: loop_sandbox::IsolationLevel,
    /// `--include-dirty`.
    pub include_dirty: bool,
    /// The commit the task starts from instead of the project's `HEAD`
    /// (a pull request's head a GitHub trigger fetched).
    pub base_commit: Option<String>,
    /// Who answers the questions the task asks.
    pub on_prompt: Option<OnPrompt>,
    /// `--allow-vacuous`: a written contract's checks that pass on an
    /// empty workspace are kept, each marked `allow_vacuous`.
    pub allow_vacuous: bool,
    /// Who asked (an API token's owner; `None` from the command line,
    /// which belongs to whoever can read the project).
    pub owner: Option<String>,
    /// What started it, when not a person at a front end.
    pub trigger: Option<loop_protocol::TriggerRecord>,
    /// The front end it came through.
    pub via: Via,
    /// Skills the task uses (`--skill NAME`): each verified, its guidance
    /// given to the model, its asks intersected with the task's authority.
    pub skills: Vec<String>,
    /// Files given with the task (`--input`, the API's upload): put in
    /// its workspace as `inputs/NAME` before it starts.
    pub inputs: Vec<InputFile>,
}

/// A file given with a task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputFile {
    /// Its name: a plain file name, put at `inputs/NAME`.
    pub name: String,
    /// Its content.
    pub bytes: Vec<u8>,
}

/// Files a task may be given.
pub const MAX_INPUTS: usize = 32;
/// The largest file a task may be given, in bytes.
pub const MAX_INPUT_BYTES: usize = 32 * 1024 * 1024;
/// What the files a task is given may add up to, in bytes.
pub const MAX_INPUTS_BYTES: usize = 128 * 1024 * 1024;

/// The given files, or the first reason they cannot be given: too many,
/// too large, a name that is not a plain file name (no `/`, no `..`, no
/// control character, not hidden), or a name given twice.
fn check_inputs(inputs: &[InputFile]) -> Result<(), Error> {
    if inputs.len() > MAX_INPUTS {
        return Err(Error::usage(format!(
            "{} input files: a task takes at most {MAX_INPUTS}",
            inputs.len()
        )));
    }
    let total: usize = inputs.iter().map(|f| f.bytes.len()).sum();
    if total > MAX_INPUTS_BYTES {
        return Err(Error::usage(format!(
            "the input files add up to {total} bytes: a task takes at most {MAX_INPUTS_BYTES}"
        )));
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in inputs {
        let n = &f.name;
        if n.is_empty()
            || n.len() > 255
            || n.contains('/')
            || n.contains('\\')
            || n.starts_with('.')
            || n.chars().any(char::is_control)
        {
            return Err(Error::usage(format!(
                "input file name {n:?}: a plain file name is needed (no folder, not hidden, no control characters)"
            )));
        }
        if f.bytes.len() > MAX_INPUT_BYTES {
            return Err(Error::usage(format!(
                "input file {n} is {} bytes: a task takes files of at most {MAX_INPUT_BYTES}",
                f.bytes.len()
            )));
        }
        if !seen.insert(n.as_str()) {
            return Err(Error::usage(format!("input file {n} is given twice")));
        }
    }
    Ok(())
}

/// Skills one task may use.
pub const MAX_SKILLS: usize = 8;

/// A request the intake accepted: the contract assembled (or the
/// instruction its draft starts from), ready to prepare. Only
/// [`Runtime::admit`] makes one.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The locked contract (with [`ContractSource::Draft`], the instruction
    /// and limits the draft gets).
    pub(crate) contract: Contract,
    /// Where the contract comes from.
    pub(crate) source: ContractSource,
    /// Guidance for the model beyond the project's `LOOP.md`/`AGENTS.md`
    /// (a pattern's `SKILL.md`): (name, text).
    pub(crate) guidance: Vec<(String, String)>,
    /// The model spec, resolved.
    pub(crate) model: Option<String>,
    pub(crate) record: Option<PathBuf>,
    /// The project (the runtime's, canonical).
    pub(crate) project: PathBuf,
    pub(crate) verify_on_change: bool,
    pub(crate) isolation: loop_sandbox::IsolationLevel,
    pub(crate) include_dirty: bool,
    pub(crate) base_commit: Option<String>,
    pub(crate) on_prompt: OnPrompt,
    pub(crate) owner: Option<String>,
    pub(crate) trigger: Option<loop_protocol::TriggerRecord>,
    pub(crate) allow_vacuous: bool,
    /// For a child task: its parent, its grant and its place, and what
    /// of its parent's it keeps.
    pub(crate) delegation: Option<Inherited>,
    /// A directory whose content the workspace takes once it is made (a
    /// child's: its parent's workspace as it is now).
    pub(crate) start_from: Option<PathBuf>,
    /// The skills it uses, as judged and narrowed.
    pub(crate) skills: Vec<loop_protocol::skill::SkillRecord>,
    /// The files given with it.
    pub(crate) inputs: Vec<InputFile>,
}

/// What a child task is given by its parent beyond its contract.
#[derive(Debug, Clone)]
pub(crate) struct Inherited {
    /// Its parent, its grant and its place among the parent's children.
    pub child: crate::task::request::ChildOf,
    /// The parent's exec policy, which the child's grant tightens.
    pub exec: Option<loop_tools::exec_policy::ExecPolicy>,
    /// The parent's check-integrity set: the files that decide what the
    /// parent's checks mean stay protected for the child too (lifted as
    /// they were for the parent, by the `allow_check_changes` it keeps).
    pub integrity: Vec<loop_protocol::IntegrityRule>,
}

impl Admitted {
    /// The contract as assembled (before drafting, when it is drafted).
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// The model spec, resolved (`None`: the Loopfile's maker).
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Whether the contract is still to be drafted from the instruction.
    pub fn is_draft(&self) -> bool {
        matches!(self.source, ContractSource::Draft { .. })
    }

    /// The skills it uses, by name.
    pub fn skill_names(&self) -> Vec<String> {
        self.skills.iter().map(|s| s.name.clone()).collect()
    }

    /// What started it, when a trigger did.
    pub fn trigger(&self) -> Option<&loop_protocol::TriggerRecord> {
        self.trigger.as_ref()
    }

    /// The commit it starts from, when one was named.
    pub fn base_commit(&self) -> Option<&str> {
        self.base_commit.as_deref()
    }
}

impl Runtime {
    /// Take `req` in: assemble its contract, apply the Loopfile's
    /// defaults and the request's limits, resolve its model. The one place
    /// a front end's input becomes a task's contract.
    pub fn admit(&self, req: TaskRequest) -> Result<Admitted, Error> {
        let via = req.via;
        let loopfile = crate::loopfile::Loopfile::load(self.project())?;
        let instruction = req.instruction.filter(|i| !i.trim().is_empty());
        let flags = |e: loop_protocol::ContractErrors| Error::usage(e.to_string());
        let mut guidance = Vec::new();
        let mut source = ContractSource::Given;
        let mut contract = match req.contract {
            ContractInput::Pattern(name) => {
                // Another instruction would keep the template's checks,
                // which judge the pattern's work, not the new one's.
                if instruction.is_some() {
                    return Err(Error::usage(format!(
                        "a pattern runs its own instruction; to change it, edit loop-patterns/{name}/contract.yaml (or run the instruction without {})",
                        via.field("pattern")
                    )));
                }
                let (mut c, skill) = crate::contract::patterns::load(self.project(), &name)?;
                c.extend_with_flags(&req.checks, &req.artifacts)
                    .map_err(flags)?;
                if !skill.trim().is_empty() {
                    guidance.push((
                        format!("{}the {name} pattern", loop_core::prompt::SKILL_GUIDANCE),
                        skill,
                    ));
                }
                c
            }
            given @ (ContractInput::Yaml { .. }
            | ContractInput::File(_)
            | ContractInput::Given(_)) => {
                let mut c = read_given(given)?;
                if let Some(i) = &instruction {
                    c.instruction = i.clone();
                }
                c.extend_with_flags(&req.checks, &req.artifacts)
                    .map_err(flags)?;
                c
            }
            // A skill alone runs its contract template (as a pattern does).
            ContractInput::None if instruction.is_none() && !req.skills.is_empty() => {
                let name = &req.skills[0];
                let (bundle, signer) =
                    crate::skills::resolve_for_task(self.project(), &loopfile, name)?;
                let mut c = crate::skills::contract_template(&bundle)?.ok_or_else(|| {
                    Error::usage(format!(
                        "give an instruction: the skill {name} has no contract.yaml to run"
                    ))
                })?;
                // One from outside the project (signed) gives no more than
                // the project gives a task; the project's own pattern is
                // its own contract.
                if signer.is_some() {
                    crate::skills::template_within(name, &c, &loopfile)?;
                }
                c.extend_with_flags(&req.checks, &req.artifacts)
                    .map_err(flags)?;
                // A template from elsewhere keeps the project's defaults
                // (its protected paths, its limits) like any new contract.
                loopfile.defaults.apply(&mut c);
                c
            }
            ContractInput::None => {
                let Some(i) = &instruction else {
                    return Err(Error::usage(match via {
                        Via::Cli => "give an instruction (loop run \"…\" --check CMD) or a contract (--task FILE)".to_string(),
                        _ => "give an instruction (with checks, or alone to draft its contract) or a contract".to_string(),
                    }));
                };
                // A trigger's task has nobody to confirm a draft, but
                // GitHub's: the draft is posted where it was asked, for a
                // person's answer there or in the console (or its trigger
                // locks what the critic accepted, `auto_confirm`).
                let answerable =
                    via != Via::Trigger || req.trigger.as_ref().is_some_and(|t| t.github.is_some());
                let mut c = if req.checks.is_empty() && answerable {
                    // The instruction alone: the contract is drafted.
                    source = ContractSource::Draft {
                        accept: req.accept_draft,
                    };
                    let mut c = Contract::instruction_only(i).map_err(flags)?;
                    c.extend_with_flags(&[], &req.artifacts).map_err(flags)?;
                    c
                } else {
                    Contract::from_flags(i, &req.checks, &req.artifacts).map_err(flags)?
                };
                loopfile.defaults.apply(&mut c);
                c
            }
        };
        override_limits(&mut contract.limits, &req.limits, via)?;
        check_inputs(&req.inputs)?;
        // Each named once, a few at most (every one is read and hashed).
        let mut named: Vec<&String> = Vec::new();
        for n in &req.skills {
            if named.contains(&n) {
                return Err(Error::usage(format!("skill `{n}` is named twice")));
            }
            named.push(n);
        }
        if named.len() > MAX_SKILLS {
            return Err(Error::usage(format!(
                "{} skills are named: a task uses at most {MAX_SKILLS}",
                named.len()
            )));
        }
        let mut skills = Vec::new();
        for name in &req.skills {
            let (bundle, signer) =
                crate::skills::resolve_for_task(self.project(), &loopfile, name)?;
            let grants = crate::skills::TaskGrants::of(&loopfile);
            let record = crate::skills::narrow(&bundle, signer, &mut contract, &grants);
            if !bundle.guidance.trim().is_empty() {
                guidance.push((
                    format!(
                        "{}the {name} skill ({})",
                        loop_core::prompt::SKILL_GUIDANCE,
                        record.vouched()
                    ),
                    bundle.guidance.clone(),
                ));
            }
            // Its resources, as verified (a user's skill is in no
            // workspace, and a committed copy may differ).
            for (path, text) in crate::skills::resources(&bundle) {
                let named = format!(
                    "{}the {name} skill: {path}",
                    loop_core::prompt::SKILL_GUIDANCE
                );
                guidance.push((named, text));
            }
            skills.push(record);
        }
        let model = req.model.map(|m| self.resolve_model(&m, via)).transpose()?;
        Ok(Admitted {
            contract,
            source,
            guidance,
            model,
            record: req.record,
            project: self.project().to_path_buf(),
            verify_on_change: req.verify_on_change,
            isolation: req.isolation,
            include_dirty: req.include_dirty,
            base_commit: req.base_commit,
            on_prompt: req.on_prompt.unwrap_or(OnPrompt::Deny),
            owner: req.owner,
            trigger: req.trigger,
            allow_vacuous: req.allow_vacuous,
            delegation: None,
            start_from: None,
            skills,
            inputs: req.inputs,
        })
    }

    /// A model spec as the runtime is to read it. From a remote front end
    /// a script or recording must be a file inside the project (a
    /// relative path, outside `.loop/`, through no link); from a trigger a
    /// relative one is the project's; elsewhere it is taken as given.
    #[allow(clippy::disallowed_methods)] // canonical path equal to the joined one: no link on the way; existence only
    fn resolve_model(&self, spec: &str, via: Via) -> Result<String, Error> {
        let split = spec.split_once(':');
        if via == Via::Trigger {
            return Ok(match split {
                Some((p @ ("scripted" | "replay"), path)) if !path.starts_with('/') => {
                    format!("{p}:{}", self.project().join(path).display())
                }
                _ => spec.to_string(),
            });
        }
        if !via.remote() {
            return Ok(spec.to_string());
        }
        let Some((provider, rest)) = split else {
            return Err(Error::usage(format!("model `{spec}` is not PROVIDER:NAME")));
        };
        match provider {
            "openai" | "anthropic" => Ok(spec.to_string()),
            "scripted" | "replay" => {
                // A plain path inside the project, outside the runtime's
                // own `.loop/` (other owners' tasks live there), through no
                // link and no `..`: what it names is what is read.
                // (An absolute path into the project is taken as the
                // relative one it names: a draft kept by the server holds
                // the resolved spec.)
                let rel = std::path::Path::new(rest);
                let rel = rel.strip_prefix(self.project()).unwrap_or(rel);
                let rest = rel.to_str().unwrap_or_default();
                let plain = !rest.is_empty()
                    && rel
                        .components()
                        .all(|c| matches!(c, std::path::Component::Normal(_)))
                    && rel
                        .components()
                        .next()
                        .is_some_and(|c| c.as_os_str() != ".loop");
                let path = self.project().join(rel);
                // Not a file git ignores, nor one named like a secret: an
                // error reading it (a key it does not know) told a caller
                // over the network what an untracked `secrets.json` held.
                let hidden = || {
                    let secret = loop_workspace::Protected::new(
                        &loop_protocol::contract::DEFAULT_PROTECTED
                            .iter()
                            .map(|g| g.to_string())
                            .collect::<Vec<_>>(),
                    )
                    .map_or(true, |p| p.matching(rest).is_some());
                    // (Asked only of a project that is a repository's
                    // top: one inside another's tree is not its files.)
                    secret
                        || loop_workspace::door::node(self.project(), ".git")
                            .is_ok_and(|n| !matches!(n, loop_workspace::Node::Missing))
                            && crate::project::commits::git_output(
                                self.project(),
                                &["check-ignore", "-q", "--no-index", "--", rest],
                            )
                            .is_ok()
                };
                match path.canonicalize() {
                    Ok(p) if plain && p == path && p.is_file() && !hidden() => {
                        Ok(format!("{provider}:{}", p.display()))
                    }
                    _ => Err(Error::usage(format!(
                        "model `{spec}`: the file must be inside the project (a relative path, outside .loop/, through no link, not one git ignores or named like a secret)"
                    ))),
                }
            }
            other => Err(Error::usage(format!(
                "unknown model provider `{other}` (openai, anthropic, scripted, replay)"
            ))),
        }
    }
}

/// A contract given as text, a file or already read.
fn read_given(given: ContractInput) -> Result<Contract, Error> {
    let (text, origin) = match given {
        ContractInput::Given(c) => return Ok(*c),
        ContractInput::Yaml { text, origin } => (text, origin),
        ContractInput::File(file) => (
            loop_workspace::door::read_named_text(&file, loop_workspace::door::MAX_PROJECT_FILE)
                .map_err(|e| Error::usage(format!("cannot read the contract: {e}")))?,
            file.display().to_string(),
        ),
        ContractInput::None | ContractInput::Pattern(_) => {
            return Err(Error::internal("no contract was given to read"));
        }
    };
    Contract::from_yaml(&text, &origin).map_err(|e| Error::usage(e.to_string()))
}

/// Set `over` on `limits`, refusing a limit no task can run under.
fn override_limits(
    limits: &mut loop_protocol::Limits,
    over: &LimitOverrides,
    via: Via,
) -> Result<(), Error> {
    if over.max_steps == Some(0) {
        return Err(Error::usage(format!(
            "{} 0 leaves the model no step at all; give at least 1",
            via.field("max_steps")
        )));
    }
    if over.max_tokens == Some(0) {
        return Err(Error::usage(format!(
            "{} 0 leaves the model no tokens at all; give at least 1",
            via.field("max_tokens")
        )));
    }
    if let Some(x) = over.budget_usd
        && (!x.is_finite() || x < 0.0)
    {
        return Err(Error::usage(format!(
            "{} must be a non-negative number",
            via.field("budget_usd")
        )));
    }
    if let Some(n) = over.timeout_secs
        && n > MAX_TIMEOUT_SECS
    {
        return Err(Error::usage(format!(
            "{} is at most {MAX_TIMEOUT_SECS} (a week)",
            via.field("timeout_secs")
        )));
    }
    if let Some(n) = over.max_steps {
        limits.max_steps = n;
    }
    if let Some(n) = over.max_tokens {
        limits.max_tokens = n;
    }
    if let Some(x) = over.budget_usd {
        limits.budget_usd = Some(x);
    }
    if let Some(n) = over.timeout_secs {
        limits.timeout_secs = n.max(1);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    /// A project with a script, a script outside it, a link to that one
    /// and a script under `.loop/`: (its runtime, the outside script).
    fn project(name: &str) -> (Runtime, PathBuf) {
        let base = std::env::temp_dir().join(format!("loop-intake-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let project = base.join("project");
        std::fs::create_dir_all(project.join(".loop")).unwrap();
        std::fs::write(project.join("script.yaml"), "turns: []\n").unwrap();
        std::fs::write(project.join(".loop/other.yaml"), "turns: []\n").unwrap();
        let outside = base.join("outside.yaml");
        std::fs::write(&outside, "turns: []\n").unwrap();
        std::os::unix::fs::symlink(&outside, project.join("link.yaml")).unwrap();
        (Runtime::open_at(&project).unwrap(), outside)
    }

    #[test]
    fn a_remote_caller_names_a_script_only_inside_the_project() {
        let (rt, outside) = project("remote");
        let p = rt.project().to_path_buf();
        // Honest: a relative path, or the absolute path it names (a draft
        // kept by the server holds the resolved spec), inside the project.
        let inside = format!("scripted:{}", p.join("script.yaml").display());
        for spec in ["scripted:script.yaml", inside.as_str()] {
            assert_eq!(rt.resolve_model(spec, Via::Http).unwrap(), inside, "{spec}");
            assert_eq!(rt.resolve_model(spec, Via::Mcp).unwrap(), inside, "{spec}");
        }
        // Refused: outside, through a link, under `.loop/`, with `..`.
        let refused = [
            format!("scripted:{}", outside.display()),
            "scripted:/etc/passwd".to_string(),
            "replay:link.yaml".to_string(),
            format!("scripted:{}", p.join("link.yaml").display()),
            "scripted:.loop/other.yaml".to_string(),
            format!("scripted:{}", p.join(".loop/other.yaml").display()),
            "scripted:../outside.yaml".to_string(),
            format!("scripted:{}/../outside.yaml", p.display()),
            "scripted:".to_string(),
            "local:thing".to_string(),
            "no-provider".to_string(),
        ];
        for spec in &refused {
            let e = rt.resolve_model(spec, Via::Http).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Usage, "{spec}: {}", e.message);
        }
        // The command line and a library caller take the spec as given; a
        // request that does not say where it came from is a remote one.
        let given = format!("scripted:{}", outside.display());
        assert_eq!(rt.resolve_model(&given, Via::Cli).unwrap(), given);
        assert_eq!(Via::default(), Via::Http);
    }
}
