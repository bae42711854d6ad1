//! Adapters that plug the component crates into the Director's traits.

use loop_core::{BoundaryError, Clock, Ledger, Model, Tools, Verifier};
use loop_models::Provider;
use loop_protocol::{
    CallLimits, Context, Contract, Event, ModelInfo, ModelReply, Price, ToolCall, ToolOutcome,
    ToolSpec, VerificationReport,
};
use loop_receipt::FileLedger;
use loop_tools::ToolBox;
use loop_verifier::SnapshotVerifier;

/// Any provider (scripted, network, fallback chain, recorder, replay).
pub struct ProviderAdapter(pub Box<dyn Provider>);

impl Model for ProviderAdapter {
    fn info(&self) -> ModelInfo {
        self.0.info()
    }
    fn next_turn(
        &mut self,
        context: &Context,
        limits: CallLimits,
    ) -> Result<ModelReply, BoundaryError> {
        Ok(self.0.next_turn(context, limits))
    }
    fn price(&self) -> Option<Price> {
        self.0.price()
    }
    fn max_output_tokens(&self) -> u64 {
        self.0.max_output_tokens()
    }
    fn estimate_prompt_tokens(&self, context: &Context) -> u64 {
        self.0.estimate_prompt_tokens(context)
    }
}

/// The tool box.
pub struct ToolsAdapter<'a> {
    /// The tools.
    pub tools: ToolBox,
    /// The change so far as a unified diff, for the checker.
    pub diff: Option<Box<dyn FnMut() -> String + 'a>>,
}

impl Tools for ToolsAdapter<'_> {
    fn specs(&self) -> Vec<ToolSpec> {
        self.tools.specs()
    }
    fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError> {
        Ok(self.tools.execute(call))
    }
    fn workspace_root(&mut self) -> Result<String, BoundaryError> {
        self.tools
            .workspace_root()
            .map_err(|e| BoundaryError(e.to_string()))
    }
    fn effect(&self, call: &ToolCall) -> loop_protocol::Effect {
        use loop_protocol::Effect;
        match call.tool.as_str() {
            "read_file" | "list_files" | "finish" => Effect::Pure,
            // All-or-nothing through the edit journal; a completed one shows
            // in the workspace root.
            "write_file" | "edit_file" | "apply_patch" => Effect::Idempotent,
            // A command may have effects beyond its output.
            _ => Effect::AtMostOnce,
        }
    }
    fn change_summary(&mut self) -> String {
        self.diff.as_mut().map(|d| d()).unwrap_or_default()
    }
}

/// The snapshot verifier.
pub struct VerifierAdapter(pub SnapshotVerifier);

impl Verifier for VerifierAdapter {
    fn verify(
        &mut self,
        contract: &Contract,
        contract_sha256: &str,
        attempt: u32,
    ) -> Result<VerificationReport, BoundaryError> {
        self.0
            .verify(contract, contract_sha256, attempt)
            .map_err(|e| BoundaryError(e.to_string()))
    }
}

/// The file ledger, timestamped by a clock.
pub struct LedgerAdapter<'c> {
    /// The ledger.
    pub ledger: FileLedger,
    /// Time source for `at`.
    pub clock: &'c dyn Clock,
}

impl Ledger for LedgerAdapter<'_> {
    fn append(&mut self, event: &Event) -> Result<(), BoundaryError> {
        self.ledger
            .append(event, self.clock.now_ms())
            .map(|_| ())
            .map_err(|e| BoundaryError(e.to_string()))
    }
}
