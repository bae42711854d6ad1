//! `loop skills sign|verify|install|list|show|remove`: skill bundles.

use crate::CliError;
use crate::cli::SkillsAction;
use std::path::{Path, PathBuf};

pub(crate) fn project_of(project: &Path) -> Result<PathBuf, CliError> {
    project
        .canonicalize()
        .map_err(|e| CliError::usage(format!("project {}: {e}", project.display())))
}

/// `loop skills …`: each action its own function.
pub(crate) fn skills_cmd(action: SkillsAction, json: bool) -> Result<u8, CliError> {
    match action {
        SkillsAction::Sign { dir } => sign(&dir, json),
        SkillsAction::Verify { dir, project } => verify(&dir, &project, json),
        SkillsAction::Install {
            path,
            user,
            allow_older,
            project,
        } => install(&path, (user, allow_older), &project, json),
        SkillsAction::List { project } => list(&project, json),
        SkillsAction::Show { name, project } => show(&name, &project, json),
        SkillsAction::Remove {
            name,
            user,
            project,
        } => {
            let gone = loop_runtime::remove_skill(&project_of(&project)?, &name, user)?;
            if json {
                crate::ui::say_json(&serde_json::json!({"removed": name, "path": gone}))?;
            } else {
                println!("removed {name} ({})", gone.display());
            }
            Ok(0)
        }
    }
}

fn sign(dir: &Path, json: bool) -> Result<u8, CliError> {
    let r = loop_runtime::sign_skill(dir)?;
    if json {
        crate::ui::say_json(&r)?;
    } else {
        println!(
            "signed {} ({} files, {}) with key {}: {}",
            r.name,
            r.files,
            r.digest,
            r.keyid,
            dir.join(loop_runtime::SKILL_SIGNATURE_FILE).display()
        );
    }
    Ok(0)
}

fn verify(dir: &Path, project: &Path, json: bool) -> Result<u8, CliError> {
    let project = project_of(project)?;
    let loopfile = loop_runtime::Loopfile::load(&project)?;
    let trusted = loop_runtime::trusted_skill_keys(&project, &loopfile)?;
    match loop_runtime::verify_skill(dir, &trusted) {
        Ok(v) => {
            if json {
                crate::ui::say_json(&serde_json::json!({
                    "ok": true, "name": v.bundle.name, "digest": v.bundle.digest,
                    "signer": v.signer, "files": v.bundle.files.len(),
                }))?;
            } else {
                println!(
                    "ok: {} holds ({} files, {}), signed by {}",
                    v.bundle.name,
                    v.bundle.files.len(),
                    v.bundle.digest,
                    v.signer
                );
            }
            Ok(0)
        }
        Err(e) => {
            if json {
                crate::ui::say_json(&serde_json::json!({"ok": false, "reason": e.message}))?;
            } else {
                println!("refused: {}", crate::ui::screen::defang(&e.message));
            }
            Ok(1)
        }
    }
}

fn install(
    path: &Path,
    (user, allow_older): (bool, bool),
    project: &Path,
    json: bool,
) -> Result<u8, CliError> {
    let i = loop_runtime::install_skill(&project_of(project)?, path, (user, allow_older))?;
    if json {
        crate::ui::say_json(&i)?;
    } else {
        println!(
            "installed {} ({}, signed by {}) at {}",
            i.name,
            i.digest,
            i.signer,
            i.path.display()
        );
    }
    Ok(0)
}

fn list(project: &Path, json: bool) -> Result<u8, CliError> {
    let list = loop_runtime::list_skills(&project_of(project)?)?;
    if json {
        for l in &list {
            crate::ui::say_json(l)?;
        }
    } else if list.is_empty() {
        println!("no skills (loop-skills/, your skills and loop-patterns/ are empty)");
    } else {
        for l in &list {
            let place = match l.place {
                loop_runtime::SkillPlace::Project => "project",
                loop_runtime::SkillPlace::User => "user",
                loop_runtime::SkillPlace::Pattern => "pattern",
            };
            println!(
                "{:<24} {:<8} {}",
                l.name,
                place,
                crate::ui::screen::defang(&l.state)
            );
        }
    }
    Ok(0)
}

fn show(name: &str, project: &Path, json: bool) -> Result<u8, CliError> {
    let project = project_of(project)?;
    let loopfile = loop_runtime::Loopfile::load(&project)?;
    let (b, signer) = loop_runtime::resolve_skill(&project, &loopfile, name)?;
    let vouched = signer.map_or("unsigned, project-local".to_string(), |k| {
        format!("signed by {k}")
    });
    if json {
        return crate::ui::say_json(&serde_json::json!({
            "name": b.name, "path": b.dir, "digest": b.digest, "vouched": vouched,
            "description": b.description, "capabilities": b.capabilities,
            "dropped": b.widening, "files": b.files, "guidance": b.guidance,
        }))
        .map(|_| 0);
    }
    let d = crate::ui::screen::defang;
    println!("{} ({})", b.name, d(&vouched));
    println!("  path     {}", b.dir.display());
    println!("  digest   {}", b.digest);
    if let Some(t) = &b.description {
        println!("  about    {}", d(t));
    }
    let caps = serde_json::to_string(&b.capabilities).unwrap_or_default();
    println!("  asks     {}", d(&caps));
    for w in &b.widening {
        println!("  dropped  {}", d(w));
    }
    println!("  files    {}", b.files.len());
    println!("\n{}", d(&b.guidance));
    Ok(0)
}
