//! The models a task runs with: the maker from `--model`, the Loopfile
//! and the environment, and the checker if one is configured — each a
//! provider or a fallback chain, recorded if asked, and redacted before
//! anything records its words.

use crate::Error;
use loop_core::Model;
use loop_models::config::{Env, ModelsConfig};
use loop_models::http::UreqTransport;
use loop_models::retry::ThreadSleeper;
use loop_models::{Fallback, HttpModel, ModelSpec, Recorder, Redacted, ReplayModel, ScriptedModel};
use std::path::Path;

/// One provider, or a fallback chain of them.
fn chain_of(configs: Vec<loop_models::EndpointConfig>) -> Box<dyn Model + Send> {
    let mut chain: Vec<Box<dyn Model + Send>> = configs
        .into_iter()
        .map(|c| {
            let timeouts = c.timeouts;
            // A cancel or SIGTERM stops an in-flight call at once.
            Box::new(
                HttpModel::new(
                    c,
                    Box::new(UreqTransport::new(timeouts)),
                    Box::new(ThreadSleeper),
                )
                .with_cancel(crate::interrupt::flag()),
            ) as Box<dyn Model + Send>
        })
        .collect();
    if chain.len() == 1 {
        chain.remove(0)
    } else {
        Box::new(Fallback::new(chain))
    }
}

/// The maker from `--model`, the Loopfile and the environment, and the
/// checker if the Loopfile configures one.
pub(crate) type Models = (Box<dyn Model + Send>, Option<Box<dyn Model + Send>>);

/// A model whose words are redacted before anything records them.
fn redacted(model: Box<dyn Model + Send>) -> Box<dyn Model + Send> {
    Box::new(Redacted::new(model, loop_sandbox::redact::redact))
}

/// The `--model` spec parsed, and the models it and the Loopfile configure.
pub(crate) fn resolve(
    spec: Option<&str>,
    loopfile: &crate::loopfile::Loopfile,
) -> Result<(Option<ModelSpec>, ModelsConfig), Error> {
    let mut spec = spec
        .map(ModelSpec::parse)
        .transpose()
        .map_err(|e| Error::usage(e.to_string()))?;
    // A Loopfile whose maker is a script or a recording: its path is the
    // Loopfile's directory's when relative.
    if spec.is_none()
        && let Some(offline) = loopfile.models.as_ref().and_then(|m| m.offline_maker())
    {
        let base = loopfile
            .path
            .as_ref()
            .and_then(|p| p.parent())
            .map(Path::to_path_buf)
            .unwrap_or_default();
        // A project's file, through the door: a script or recording the
        // Loopfile names that is a link (or a FIFO, or huge) is refused by
        // name, never read through.
        let at = |p: &str| -> Result<String, Error> {
            if Path::new(p).is_relative() {
                match loop_workspace::door::node(&base, p) {
                    Ok(loop_workspace::Node::File { size, .. })
                        if size <= 64 * loop_workspace::door::MAX_PROJECT_FILE => {}
                    Ok(loop_workspace::Node::Missing) => {}
                    Ok(other) => {
                        return Err(Error::usage(format!(
                            "the Loopfile's model file {}: {}",
                            base.join(p).display(),
                            match other {
                                loop_workspace::Node::Symlink(_) =>
                                    "a symlink (the runtime does not read a project's files through links)",
                                loop_workspace::Node::Dir => "a directory",
                                loop_workspace::Node::Special(what) => what,
                                _ => "too large",
                            }
                        )));
                    }
                    Err(e) => return Err(Error::usage(format!("the Loopfile's model file: {e}"))),
                }
            }
            Ok(base.join(p).display().to_string())
        };
        spec = Some(match offline {
            ModelSpec::Scripted(p) => ModelSpec::Scripted(at(&p)?),
            ModelSpec::Replay(p) => ModelSpec::Replay(at(&p)?),
            other => other,
        });
    }
    let origin = loopfile
        .path
        .as_ref()
        .map_or("Loopfile.yaml".to_string(), |p| p.display().to_string());
    let config = ModelsConfig::resolve(
        spec.as_ref(),
        loopfile.models.as_ref(),
        &Env::from_process(),
        &origin,
    )
    .map_err(|e| Error::usage(e.to_string()))?;
    Ok((spec, config))
}

/// `path` relative to `project` when it lies inside it, else as given: a
/// scripted model's name as events and receipts show it (a server's disk
/// layout is nobody's business).
fn shown_path(path: &str, project: &Path) -> String {
    Path::new(path)
        .strip_prefix(project)
        .ok()
        .filter(|r| !r.as_os_str().is_empty())
        .map_or_else(|| path.to_string(), |r| r.display().to_string())
}

pub(crate) fn load_model(
    spec: Option<&str>,
    loopfile: &crate::loopfile::Loopfile,
    record: Option<&Path>,
    project: &Path,
) -> Result<Models, Error> {
    load_model_for(spec, loopfile, record, project, None)
}

/// [`load_model`], for the `child`th child of a task (from 1), when it is
/// one: a scripted model plays the script's `children:` list for it.
pub(crate) fn load_model_for(
    spec: Option<&str>,
    loopfile: &crate::loopfile::Loopfile,
    record: Option<&Path>,
    project: &Path,
    child: Option<u32>,
) -> Result<Models, Error> {
    let (spec, config) = resolve(spec, loopfile)?;
    // Every configured key, wherever it came from (`api_key_env` may name
    // any variable), is scrubbed by value from every record.
    for e in config.maker.iter().chain(&config.checker) {
        if let Some(k) = &e.api_key {
            loop_sandbox::redact::register_literal(k.expose());
        }
    }
    let checker = (!config.checker.is_empty()).then(|| redacted(chain_of(config.checker)));
    let provider: Box<dyn Model + Send> = match &spec {
        // A child task's model, where the Loopfile names one.
        _ if child.is_some() && !config.delegate.is_empty() => {
            for e in &config.delegate {
                if let Some(k) = &e.api_key {
                    loop_sandbox::redact::register_literal(k.expose());
                }
            }
            chain_of(config.delegate)
        }
        Some(ModelSpec::Scripted(path)) => {
            let text = loop_workspace::door::read_named_text(
                Path::new(path),
                loop_workspace::door::MAX_PROJECT_FILE,
            )
            .map_err(|e| Error::usage(format!("cannot read script: {e}")))?;
            let script = ScriptedModel::from_yaml(&text, &shown_path(path, project))
                .map_err(|e| Error::usage(e.to_string()))?;
            match child {
                Some(n) => Box::new(script.child(n as usize)),
                None => Box::new(script),
            }
        }
        Some(ModelSpec::Replay(path)) => {
            Box::new(ReplayModel::open(Path::new(path)).map_err(|e| Error::usage(e.to_string()))?)
        }
        _ => {
            if config.maker.is_empty() {
                return Err(Error::usage(
                    "no model given: use --model scripted:FILE | openai:MODEL | anthropic:MODEL | replay:FILE, or `models.maker` in Loopfile.yaml",
                ));
            }
            chain_of(config.maker)
        }
    };
    let provider = match record {
        None => provider,
        Some(path) => Box::new(
            Recorder::create(provider, path, Box::new(loop_sandbox::redact::redact))
                .map_err(|e| Error::usage(e.to_string()))?,
        ),
    };
    Ok((redacted(provider), checker))
}

/// The contract's drafter: `models.drafter` in the Loopfile if set, else
/// the maker (`--model`, or `models.maker`). A scripted model drafts with
/// its script's `draft:` turns.
/// The checker the Loopfile configures (`models.checker`), to review
/// drafts; `None` without one.
pub(crate) fn load_checker(
    spec: Option<&str>,
    loopfile: &crate::loopfile::Loopfile,
) -> Result<Option<Box<dyn Model + Send>>, Error> {
    let (_, config) = resolve(spec, loopfile)?;
    for e in config.checker.iter() {
        if let Some(k) = &e.api_key {
            loop_sandbox::redact::register_literal(k.expose());
        }
    }
    Ok((!config.checker.is_empty()).then(|| redacted(chain_of(config.checker))))
}

pub(crate) fn load_drafter(
    spec: Option<&str>,
    loopfile: &crate::loopfile::Loopfile,
    project: &Path,
) -> Result<Box<dyn Model + Send>, Error> {
    let (parsed, config) = resolve(spec, loopfile)?;
    for e in config.drafter.iter() {
        if let Some(k) = &e.api_key {
            loop_sandbox::redact::register_literal(k.expose());
        }
    }
    if !config.drafter.is_empty() {
        return Ok(redacted(chain_of(config.drafter)));
    }
    if let Some(ModelSpec::Scripted(path)) = &parsed {
        let text = loop_workspace::door::read_named_text(
            Path::new(path),
            loop_workspace::door::MAX_PROJECT_FILE,
        )
        .map_err(|e| Error::usage(format!("cannot read script: {e}")))?;
        let script = ScriptedModel::from_yaml(&text, &shown_path(path, project))
            .map_err(|e| Error::usage(e.to_string()))?;
        return Ok(redacted(Box::new(script.drafting())));
    }
    let (maker, _) = load_model(spec, loopfile, None, project)?;
    Ok(maker)
}
