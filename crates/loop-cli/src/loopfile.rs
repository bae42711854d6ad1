//! The project's `Loopfile.yaml`: the sections this build reads. Unknown
//! top-level keys are refused with their position, so a typo never
//! silently drops a setting.

use crate::CliError;
use loop_models::config::ModelsSection;
use loop_protocol::yaml::{self, Value};
use std::path::{Path, PathBuf};

/// A loaded Loopfile.
#[derive(Debug, Default)]
pub struct Loopfile {
    /// Where it was read from.
    pub path: Option<PathBuf>,
    /// `models:`.
    pub models: Option<ModelsSection>,
}

impl Loopfile {
    /// Read `dir/Loopfile.yaml` if it exists.
    pub fn load(dir: &Path) -> Result<Loopfile, CliError> {
        let path = dir.join("Loopfile.yaml");
        if !path.exists() {
            return Ok(Loopfile::default());
        }
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| CliError::usage(format!("{origin}: {e}")))?;
        Self::parse(&text, &origin).map(|mut l| {
            l.path = Some(path);
            l
        })
    }

    /// Parse Loopfile text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Loopfile, CliError> {
        let root = yaml::parse(text)
            .map_err(|e| CliError::usage(format!("{origin}:{}: {}", e.pos, e.message)))?;
        let mut out = Loopfile::default();
        let entries = match &root.value {
            Value::Map(m) => m.as_slice(),
            Value::Null => &[],
            other => {
                return Err(CliError::usage(format!(
                    "{origin}:{}: a Loopfile is a mapping, not {}",
                    root.pos,
                    other.type_name()
                )));
            }
        };
        for (k, v) in entries {
            match k.name.as_str() {
                "version" => {}
                "models" => {
                    out.models = Some(
                        ModelsSection::parse(v, origin)
                            .map_err(|e| CliError::usage(e.to_string()))?,
                    )
                }
                other => {
                    return Err(CliError::usage(format!(
                        "{origin}:{}: unknown Loopfile section `{other}` (this build reads: version, models)",
                        k.pos
                    )));
                }
            }
        }
        Ok(out)
    }
}
