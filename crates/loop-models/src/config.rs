//! Model configuration: the `--model` spec, the environment, and the
//! Loopfile's `models:` section.
//!
//! ```yaml
//! models:
//!   maker:
//!     spec: openai:gpt-4o-mini        # provider:model
//!     base_url: http://127.0.0.1:8080/v1
//!     api_key_env: MY_KEY             # the variable holding the key (never the key)
//!     temperature: 0
//!     max_output_tokens: 1024
//!     context_tokens: 16000
//!     tool_protocol: native           # or json, for models without tool calling
//!     tool_choice: auto               # required, or a tool's name
//!     stream: true
//!     retries: 4                      # attempts in all
//!     timeout_secs: 600               # the whole call, streamed body included
//!     fallback: [ { spec: anthropic:claude-sonnet-4-20250514 } ]
//!   checker:                          # optional reviewer: another model, temperature, prompt
//!     spec: anthropic:claude-3-5-haiku-latest
//!     prompt: Review the change against the instruction; object to anything that games the checks.
//!   pricing:                          # USD per million tokens; overrides the built-in table
//!     gpt-4o-mini: { input: 0.15, cached_input: 0.075, output: 0.60 }
//! ```
//!
//! Keys come only from the environment: `LOOP_OPENAI_API_KEY`, else the
//! standard `OPENAI_API_KEY` (OpenAI dialect); `LOOP_ANTHROPIC_API_KEY`,
//! else `ANTHROPIC_API_KEY` (Anthropic); or the variable `api_key_env`
//! names. Base URLs: `LOOP_OPENAI_BASE_URL` else `OPENAI_BASE_URL`,
//! `LOOP_ANTHROPIC_BASE_URL` else `ANTHROPIC_BASE_URL`.

use crate::pricing::Pricing;
use crate::provider::{Dialect, EndpointConfig, Secret};
use crate::retry::RetryPolicy;
use crate::{ModelSpec, ToolChoice, ToolProtocol};
use loop_protocol::Price;
use loop_protocol::contract::Diagnostic;
use loop_protocol::yaml::{Node, Pos, Reader};

/// What the environment provides (read once, passed in, so tests need no globals).
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: std::collections::BTreeMap<String, String>,
}

impl Env {
    /// The process environment.
    pub fn from_process() -> Self {
        Env {
            vars: std::env::vars().collect(),
        }
    }
    /// A fixed set (tests).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Env {
            vars: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.vars
            .get(k)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// The configured models.
#[derive(Debug, Clone, Default)]
pub struct ModelsConfig {
    /// The maker (planner): primary endpoint, then fallbacks. Empty when
    /// the `--model` spec is not a network model.
    pub maker: Vec<EndpointConfig>,
    /// The checker (reviewer), if configured.
    pub checker: Vec<EndpointConfig>,
    /// The contract drafter, if configured (else the maker drafts).
    pub drafter: Vec<EndpointConfig>,
    /// The model of the child tasks a task delegates to, if configured
    /// (else a child gets its parent's).
    pub delegate: Vec<EndpointConfig>,
    /// Prices.
    pub pricing: Pricing,
}

/// A configuration that cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", loop_protocol::yaml::Diagnostics(.0.clone()))]
pub struct ConfigError(pub Vec<Diagnostic>);

#[derive(Debug, Clone, Default)]
struct EndpointDraft {
    spec: Option<(ModelSpec, Pos)>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    temperature: Option<f64>,
    max_output_tokens: Option<u64>,
    context_tokens: Option<u64>,
    tool_protocol: Option<ToolProtocol>,
    tool_choice: Option<ToolChoice>,
    stream: Option<bool>,
    images: Option<bool>,
    retries: Option<u32>,
    timeout_secs: Option<u64>,
    max_tokens_field: Option<String>,
    prompt: Option<String>,
    fallback: Vec<EndpointDraft>,
}

/// The Loopfile's `models:` section, parsed but not yet bound to a spec.
#[derive(Debug, Clone, Default)]
pub struct ModelsSection {
    maker: Option<EndpointDraft>,
    checker: Option<EndpointDraft>,
    drafter: Option<EndpointDraft>,
    delegate: Option<EndpointDraft>,
    pricing: Vec<(String, Price)>,
}

impl ModelsSection {
    /// The maker, when it makes no call: a `scripted:` or `replay:` spec
    /// (a Loopfile that runs offline, for demos and tests).
    pub fn offline_maker(&self) -> Option<ModelSpec> {
        match self.maker.as_ref()?.spec.as_ref()? {
            (s @ (ModelSpec::Scripted(_) | ModelSpec::Replay(_)), _) => Some(s.clone()),
            _ => None,
        }
    }
}

/// The keys of `models:`.
const MODELS_KEYS: &[&str] = &["maker", "checker", "drafter", "delegate", "pricing"];
/// A price's fields (USD per million tokens).
const PRICE_KEYS: &[&str] = &["input", "cached_input", "output"];
/// An endpoint's keys (`api_key` is refused with its own reason).
const ENDPOINT_KEYS: &[&str] = &[
    "spec",
    "base_url",
    "api_key_env",
    "api_key",
    "temperature",
    "max_output_tokens",
    "context_tokens",
    "tool_protocol",
    "tool_choice",
    "stream",
    "images",
    "retries",
    "timeout_secs",
    "max_tokens_field",
    "prompt",
    "fallback",
];

fn endpoint(r: &mut Reader, n: &Node, what: &str) -> Option<EndpointDraft> {
    let entries = r.mapping(n, &format!("`{what}`"), ENDPOINT_KEYS)?;
    let mut d = EndpointDraft::default();
    for (k, v) in entries {
        match k.name.as_str() {
            "spec" => {
                if let Some(s) = r.string(v, "`spec`") {
                    match ModelSpec::parse(&s) {
                        Ok(spec) => d.spec = Some((spec, v.pos)),
                        Err(e) => r.err(Some(v.pos), e.to_string(), None),
                    }
                }
            }
            "base_url" => d.base_url = r.string(v, "`base_url`"),
            "api_key_env" => d.api_key_env = r.string(v, "`api_key_env`"),
            "api_key" => r.err(
                Some(k.pos),
                "a key never goes in the Loopfile".into(),
                Some("put it in an environment variable and name it with `api_key_env`".into()),
            ),
            "temperature" => d.temperature = r.number(v, "`temperature`", 0.0),
            "max_output_tokens" => d.max_output_tokens = r.unsigned(v, "`max_output_tokens`", 1),
            "context_tokens" => d.context_tokens = r.unsigned(v, "`context_tokens`", 1),
            "retries" => d.retries = r.unsigned(v, "`retries`", 1).map(|n| n.min(20) as u32),
            "timeout_secs" => d.timeout_secs = r.unsigned(v, "`timeout_secs`", 1),
            "max_tokens_field" => {
                d.max_tokens_field = r
                    .one_of(
                        v,
                        "max_tokens_field",
                        &["max_tokens", "max_completion_tokens"],
                    )
                    .map(str::to_string)
            }
            "stream" => d.stream = r.boolean(v, "`stream`"),
            "images" => d.images = r.boolean(v, "`images`"),
            "tool_protocol" => {
                d.tool_protocol = r
                    .one_of(v, "tool_protocol", &["native", "json"])
                    .map(|p| match p {
                        "native" => ToolProtocol::Native,
                        _ => ToolProtocol::Json,
                    })
            }
            "tool_choice" => {
                d.tool_choice = r.string(v, "`tool_choice`").map(|s| match s.as_str() {
                    "auto" => ToolChoice::Auto,
                    "required" => ToolChoice::Required,
                    name => ToolChoice::Tool(name.to_string()),
                })
            }
            "prompt" => d.prompt = r.string(v, "`prompt`"),
            "fallback" if what == "fallback entry" => r.err(
                Some(k.pos),
                "a fallback cannot have fallbacks of its own".into(),
                None,
            ),
            _ => {
                for item in r.seq(v, "`fallback`").unwrap_or_default() {
                    if let Some(f) = endpoint(r, item, "fallback entry") {
                        d.fallback.push(f);
                    }
                }
            }
        }
    }
    Some(d)
}

/// `pricing:`: model names to USD per million tokens.
fn pricing(r: &mut Reader, v: &Node) -> Vec<(String, Price)> {
    let mut out = Vec::new();
    let Some(models) = r.entries(v, "`pricing`") else {
        return out;
    };
    for (name, price) in models {
        let what = format!("the price of `{}`", name.name);
        let Some(fields) = r.mapping(price, &what, PRICE_KEYS) else {
            continue;
        };
        let mut pr = Price::default();
        let mut cached = None;
        for (f, fv) in fields {
            let Some(x) = r.number(fv, &format!("`{}`", f.name), 0.0) else {
                continue;
            };
            match f.name.as_str() {
                "input" => pr.input_per_mtok = x,
                "cached_input" => cached = Some(x),
                _ => pr.output_per_mtok = x,
            }
        }
        pr.cached_input_per_mtok = cached.unwrap_or(pr.input_per_mtok);
        out.push((name.name.clone(), pr));
    }
    out
}

impl ModelsSection {
    /// Read the `models:` node of a Loopfile into `r`'s diagnostics.
    pub fn read(r: &mut Reader, node: &Node) -> Option<ModelsSection> {
        let entries = r.mapping(node, "`models`", MODELS_KEYS)?;
        let mut out = ModelsSection::default();
        for (k, v) in entries {
            match k.name.as_str() {
                "maker" => out.maker = endpoint(r, v, "maker"),
                "checker" => out.checker = endpoint(r, v, "checker"),
                "drafter" => out.drafter = endpoint(r, v, "drafter"),
                "delegate" => out.delegate = endpoint(r, v, "delegate"),
                _ => out.pricing = pricing(r, v),
            }
        }
        Some(out)
    }

    /// Parse the `models:` node of a Loopfile called `origin`.
    pub fn parse(node: &Node, origin: &str) -> Result<ModelsSection, ConfigError> {
        let mut r = Reader::new(origin);
        let section = Self::read(&mut r, node);
        r.finish(section).map_err(|d| ConfigError(d.0))
    }
}

fn bind(
    draft: &EndpointDraft,
    spec: Option<&ModelSpec>,
    env: &Env,
    pricing: &Pricing,
    role: &str,
    origin: &str,
) -> Result<Option<EndpointConfig>, Diagnostic> {
    let spec = match spec.or(draft.spec.as_ref().map(|(s, _)| s)) {
        Some(s) => s,
        None => {
            return Err(Diagnostic {
                origin: origin.to_string(),
                pos: None,
                message: format!("the {role} model has no `spec`"),
                hint: Some("give `spec: openai:MODEL` or `spec: anthropic:MODEL`".into()),
            });
        }
    };
    let (dialect, model) = match spec {
        ModelSpec::OpenAi(m) => (Dialect::OpenAi, m),
        ModelSpec::Anthropic(m) => (Dialect::Anthropic, m),
        _ => return Ok(None),
    };
    let mut c = EndpointConfig::new(dialect, model.clone());
    c.role = role.to_string();
    // The LOOP_ names first, then the names the providers' own tools use.
    let (url_vars, key_vars): (&[&str], &[&str]) = match dialect {
        Dialect::OpenAi => (
            &["LOOP_OPENAI_BASE_URL", "OPENAI_BASE_URL"],
            &["LOOP_OPENAI_API_KEY", "OPENAI_API_KEY"],
        ),
        Dialect::Anthropic => (
            &["LOOP_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL"],
            &["LOOP_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"],
        ),
    };
    let first = |vars: &[&str]| vars.iter().find_map(|v| env.get(v));
    if let Some(u) = draft
        .base_url
        .clone()
        .or_else(|| first(url_vars).map(str::to_string))
    {
        c.base_url = u;
    }
    c.api_key = match draft.api_key_env.as_deref() {
        Some(var) => env.get(var).map(Secret::new),
        None => first(key_vars).map(Secret::new),
    };
    c.temperature = draft.temperature;
    if let Some(n) = draft.max_output_tokens {
        c.max_output_tokens = n;
    }
    if let Some(n) = draft.context_tokens {
        c.context_tokens = n;
    }
    if let Some(p) = draft.tool_protocol {
        c.tool_protocol = p;
    }
    if let Some(t) = &draft.tool_choice {
        c.tool_choice = t.clone();
    }
    if let Some(s) = draft.stream {
        c.stream = s;
    }
    if let Some(i) = draft.images {
        c.images = i;
    }
    if let Some(r) = draft.retries {
        c.retry = RetryPolicy {
            max_attempts: r.max(1),
            ..RetryPolicy::default()
        };
    }
    if let Some(t) = draft.timeout_secs {
        c.timeouts.call = std::time::Duration::from_secs(t);
        c.timeouts.read = c.timeouts.read.min(c.timeouts.call);
    }
    c.role_prompt = draft.prompt.clone();
    // OpenAI's own endpoint takes the newer name; compatible servers the older.
    c.max_tokens_field = draft.max_tokens_field.clone().unwrap_or_else(|| {
        if dialect == Dialect::OpenAi && c.base_url.contains("api.openai.com") {
            "max_completion_tokens".into()
        } else {
            "max_tokens".into()
        }
    });
    c.price = pricing.lookup(model);
    Ok(Some(c))
}

impl ModelsConfig {
    /// Bind the `--model` spec (if any) and the Loopfile section (if any)
    /// with the environment. The spec, when given, names the maker's
    /// primary model; the section supplies its settings and fallbacks.
    pub fn resolve(
        spec: Option<&ModelSpec>,
        section: Option<&ModelsSection>,
        env: &Env,
        origin: &str,
    ) -> Result<ModelsConfig, ConfigError> {
        let mut pricing = Pricing::default();
        let empty = ModelsSection::default();
        let section = section.unwrap_or(&empty);
        for (name, price) in &section.pricing {
            pricing.set(name.clone(), *price);
        }
        let mut out = ModelsConfig {
            pricing: pricing.clone(),
            ..ModelsConfig::default()
        };
        let mut errors = Vec::new();
        let maker = section.maker.clone().unwrap_or_default();
        if spec.is_some() || section.maker.is_some() {
            match bind(&maker, spec, env, &pricing, "maker", origin) {
                Ok(Some(c)) => {
                    out.maker.push(c);
                    for f in &maker.fallback {
                        match bind(f, None, env, &pricing, "maker-fallback", origin) {
                            Ok(Some(c)) => out.maker.push(c),
                            Ok(None) => {}
                            Err(e) => errors.push(e),
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        for (role, draft, into) in [
            ("checker", &section.checker, &mut out.checker),
            ("drafter", &section.drafter, &mut out.drafter),
            ("delegate", &section.delegate, &mut out.delegate),
        ] {
            let Some(draft) = draft else { continue };
            match bind(draft, None, env, &pricing, role, origin) {
                Ok(Some(c)) => {
                    into.push(c);
                    let role = format!("{role}-fallback");
                    for f in &draft.fallback {
                        if let Ok(Some(c)) = bind(f, None, env, &pricing, &role, origin) {
                            into.push(c);
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(ConfigError(errors))
        }
    }
}

/// The JSON Schema of the Loopfile's `models:` section, from the key
/// tables the reader walks (`api_key` is left out: it is refused).
pub fn models_schema() -> serde_json::Value {
    use serde_json::json;
    let endpoint = |nested: bool| {
        let props: serde_json::Map<String, serde_json::Value> = ENDPOINT_KEYS
            .iter()
            .filter(|k| **k != "api_key" && !(nested && **k == "fallback"))
            .map(|k| {
                let v = match *k {
                    "spec" => json!({"type": "string", "pattern": "^(openai|anthropic|scripted|replay):.+$",
                        "description": "openai:MODEL, anthropic:MODEL, scripted:FILE or replay:FILE"}),
                    "temperature" => json!({"type": "number", "minimum": 0}),
                    "max_output_tokens" | "context_tokens" | "retries" | "timeout_secs" => {
                        json!({"type": "integer", "minimum": 1})
                    }
                    "max_tokens_field" => json!({"enum": ["max_tokens", "max_completion_tokens"]}),
                    "tool_protocol" => json!({"enum": ["native", "json"]}),
                    "stream" => json!({"type": "boolean"}),
                    "images" => json!({"type": "boolean", "description": "the model takes images (view_image, the images given with a task); default false"}),
                    "api_key_env" => json!({"type": "string",
                        "description": "the environment variable holding the key (never the key)"}),
                    "fallback" => json!({"type": "array", "items": {"$ref": "#/$defs/fallback"}}),
                    _ => json!({"type": "string"}),
                };
                (k.to_string(), v)
            })
            .collect();
        json!({"type": "object", "properties": props, "additionalProperties": false})
    };
    let price: serde_json::Map<String, serde_json::Value> = PRICE_KEYS
        .iter()
        .map(|k| (k.to_string(), json!({"type": "number", "minimum": 0})))
        .collect();
    let section: serde_json::Map<String, serde_json::Value> = MODELS_KEYS
        .iter()
        .map(|k| {
            let v = match *k {
                "pricing" => json!({"type": "object", "additionalProperties": {
                    "type": "object", "properties": price, "additionalProperties": false}}),
                _ => json!({"$ref": "#/$defs/endpoint"}),
            };
            (k.to_string(), v)
        })
        .collect();
    json!({
        "section": {"type": "object", "properties": section, "additionalProperties": false},
        "endpoint": endpoint(false),
        "fallback": endpoint(true),
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use loop_protocol::yaml::Value;

    fn section(src: &str) -> Result<ModelsSection, ConfigError> {
        let root = loop_protocol::yaml::parse(src).unwrap();
        let Value::Map(top) = &root.value else {
            panic!()
        };
        ModelsSection::parse(&top[0].1, "Loopfile.yaml")
    }

    #[test]
    fn the_section_binds_with_the_environment_and_never_holds_a_key() {
        let s = section(
            "models:\n  maker:\n    spec: openai:gpt-4o-mini\n    temperature: 0\n    tool_choice: write_file\n    fallback:\n      - spec: anthropic:claude-3-5-haiku-latest\n  pricing:\n    gpt-4o-mini: { input: 1, output: 2 }\n",
        )
        .unwrap();
        let env = Env::from_pairs(&[
            ("LOOP_OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
            ("LOOP_OPENAI_API_KEY", "sk-test-123"),
            ("ANTHROPIC_API_KEY", "sk-ant-456"),
        ]);
        let c = ModelsConfig::resolve(None, Some(&s), &env, "Loopfile.yaml").unwrap();
        assert_eq!(c.maker.len(), 2);
        let m = &c.maker[0];
        assert_eq!(m.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(m.api_key.as_ref().unwrap().expose(), "sk-test-123");
        assert_eq!(m.tool_choice, ToolChoice::Tool("write_file".into()));
        assert_eq!(
            m.price.unwrap().output_per_mtok,
            2.0,
            "the Loopfile overrides the table"
        );
        assert_eq!(c.maker[1].dialect, Dialect::Anthropic);
        assert_eq!(
            m.max_tokens_field, "max_tokens",
            "a compatible server takes max_tokens"
        );
        // OpenAI's own API takes the newer field name.
        let spec = ModelSpec::parse("openai:gpt-4.1").unwrap();
        let c = ModelsConfig::resolve(Some(&spec), None, &Env::default(), "Loopfile.yaml").unwrap();
        assert_eq!(c.maker[0].max_tokens_field, "max_completion_tokens");
        // The key is in no printed or recorded form.
        assert!(!format!("{m:?}").contains("sk-test"));
        assert!(!m.parameters().to_string().contains("sk-test"));
        // The command-line spec names the primary; the section's settings stay.
        let spec = ModelSpec::parse("openai:other").unwrap();
        let c = ModelsConfig::resolve(Some(&spec), Some(&s), &env, "Loopfile.yaml").unwrap();
        assert_eq!(c.maker[0].model, "other");
        assert_eq!(c.maker[0].temperature, Some(0.0));
    }

    #[test]
    fn a_delegate_model_binds_for_child_tasks_alone() {
        let s = section(
            "models:\n  maker:\n    spec: openai:big\n  delegate:\n    spec: openai:small\n    temperature: 0\n    fallback:\n      - spec: openai:smaller\n",
        )
        .unwrap();
        let env = Env::from_pairs(&[("LOOP_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]);
        let c = ModelsConfig::resolve(None, Some(&s), &env, "Loopfile.yaml").unwrap();
        assert_eq!(c.maker.len(), 1);
        assert_eq!(c.maker[0].model, "big");
        let names: Vec<&str> = c.delegate.iter().map(|e| e.model.as_str()).collect();
        assert_eq!(names, vec!["small", "smaller"]);
        assert_eq!(c.delegate[0].temperature, Some(0.0));
        // Without it, children get their parent's model.
        let plain = section("models:\n  maker:\n    spec: openai:big\n").unwrap();
        let c = ModelsConfig::resolve(None, Some(&plain), &env, "Loopfile.yaml").unwrap();
        assert!(c.delegate.is_empty());
    }

    #[test]
    fn the_standard_names_are_understood_and_the_loop_names_win() {
        let spec = ModelSpec::parse("openai:m").unwrap();
        let standard = Env::from_pairs(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:7/v1"),
            ("OPENAI_API_KEY", "sk-standard"),
        ]);
        let c = ModelsConfig::resolve(Some(&spec), None, &standard, "Loopfile.yaml").unwrap();
        assert_eq!(c.maker[0].base_url, "http://127.0.0.1:7/v1");
        assert_eq!(c.maker[0].api_key.as_ref().unwrap().expose(), "sk-standard");
        let both = Env::from_pairs(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:7/v1"),
            ("OPENAI_API_KEY", "sk-standard"),
            ("LOOP_OPENAI_BASE_URL", "http://127.0.0.1:8/v1"),
            ("LOOP_OPENAI_API_KEY", "sk-loop"),
        ]);
        let c = ModelsConfig::resolve(Some(&spec), None, &both, "Loopfile.yaml").unwrap();
        assert_eq!(c.maker[0].base_url, "http://127.0.0.1:8/v1");
        assert_eq!(c.maker[0].api_key.as_ref().unwrap().expose(), "sk-loop");
    }

    #[test]
    fn bad_sections_are_named_with_positions() {
        let e = section("models:\n  maker:\n    spec: openai:x\n    api_key: sk-oops\n    tool_protocol: xml\n  colour: red\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Loopfile.yaml:4:5: a key never goes in the Loopfile"),
            "{e}"
        );
        assert!(
            e.contains("Loopfile.yaml:5:20: unknown tool_protocol `xml`"),
            "{e}"
        );
        assert!(e.contains("Loopfile.yaml:6:3: unknown key `colour`"), "{e}");
    }

    #[test]
    fn the_schema_names_exactly_the_keys_the_reader_accepts() {
        let s = models_schema();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let mut want: Vec<String> = ENDPOINT_KEYS
            .iter()
            .filter(|k| **k != "api_key")
            .map(|k| k.to_string())
            .collect();
        want.sort();
        assert_eq!(keys(&s["endpoint"]["properties"]), want);
        assert_eq!(
            keys(&s["section"]["properties"]),
            vec!["checker", "delegate", "drafter", "maker", "pricing"]
        );
    }
}
