// The console: the API, read by a person. Everything a task's record holds
// is put on the page as text (textContent), never as markup.
"use strict";

const $ = (sel) => document.querySelector(sel);
let token = sessionStorage.getItem("loop-token") || "";
let stopView = () => {};

// What text cannot show as itself is shown as its code point: controls,
// bidirectional overrides and isolates, zero-width characters.
function visible(s) {
  return String(s).replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g,
    (c) => "\\u{" + c.codePointAt(0).toString(16) + "}");
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" || typeof c === "number" ? visible(c) : c);
  }
  return e;
}

function say(text) {
  const s = $("#status");
  s.textContent = text;
  if (text) setTimeout(() => { if (s.textContent === text) s.textContent = ""; }, 5000);
}

async function api(path, opts = {}) {
  const headers = { Authorization: "Bearer " + token };
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method: opts.method || "GET",
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  const text = await r.text();
  let body = text;
  try { body = JSON.parse(text); } catch (_) { /* text */ }
  if (r.status === 401) { signOut(); throw new Error("the token was refused: sign in again"); }
  if (!r.ok) throw new Error((body && body.error && body.error.message) || ("HTTP " + r.status));
  return body;
}

function signOut() {
  token = "";
  sessionStorage.removeItem("loop-token");
  route();
}

function outcomeBadge(t) {
  if (t.outcome) {
    const kind = t.outcome.split("{")[0];
    return el("span", { class: "badge " + kind }, t.outcome);
  }
  if (t.queued) return el("span", { class: "badge" }, "queued (waiting for a place to run)");
  if (t.dead_letter) return el("span", { class: "badge failed" }, "dead-lettered");
  const waiting = t.state === "awaiting_approval" || t.state === "awaiting_input";
  return el("span", { class: "badge" + (waiting ? " waiting" : "") },
    t.interrupted ? t.state + " (interrupted)" : t.state);
}

function money(x) { return "$" + Number(x || 0).toFixed(4); }

// ---- the task list ----
async function showList(view) {
  view.replaceChildren(el("h1", {}, "Tasks"));
  const table = el("table", {},
    el("caption", { class: "hint" }, "Live: refreshed every two seconds."),
    el("thead", {}, el("tr", {},
      el("th", { scope: "col" }, "Task"), el("th", { scope: "col" }, "Instruction"),
      el("th", { scope: "col" }, "State"), el("th", { scope: "col", class: "num opt" }, "Steps"),
      el("th", { scope: "col", class: "num" }, "Cost"))),
    el("tbody"));
  // A page at a time: the newest first, older ones on request.
  let before = null;
  const pages = [];
  const newer = el("button", { type: "button", class: "secondary", disabled: "" }, "Newer");
  const older = el("button", { type: "button", class: "secondary", disabled: "" }, "Older");
  view.append(table, el("div", { class: "row" }, newer, older));
  let alive = true;
  stopView = () => { alive = false; };
  let next = null;
  older.onclick = () => { if (next) { pages.push(before); before = next; draw(true); } };
  newer.onclick = () => { if (pages.length) { before = pages.pop(); draw(true); } };
  const draw = async (once) => {
    try {
      const page = await api("/api/v1/tasks?limit=50" + (before ? "&before=" + encodeURIComponent(before) : ""));
      const tasks = page.tasks;
      next = page.next;
      older.disabled = !next;
      newer.disabled = !pages.length;
      const rows = tasks.map((t) => el("tr", {},
        el("td", {}, el("a", { href: "#/task/" + encodeURIComponent(t.id) }, t.id)),
        el("td", {}, t.instruction || ""),
        el("td", {}, outcomeBadge(t)),
        el("td", { class: "num opt" }, t.used ? t.used.steps : ""),
        el("td", { class: "num" }, t.used ? money(t.used.usd) : "")));
      table.tBodies[0].replaceChildren(...rows);
      if (!tasks.length) table.tBodies[0].append(el("tr", {}, el("td", { colspan: "5" }, "No tasks yet.")));
    } catch (e) { say(e.message); }
    if (alive && !once) setTimeout(draw, 2000);
  };
  draw();
}

// ---- a new task ----
function showNew(view) {
  const form = el("form", { class: "stack" },
    el("label", { for: "instruction" }, "Instruction"),
    el("textarea", { id: "instruction", name: "instruction", rows: "3", required: "" }),
    el("label", { for: "checks" }, "Acceptance checks"),
    el("textarea", { id: "checks", name: "checks", rows: "3", "aria-describedby": "checks-hint" }),
    el("p", { id: "checks-hint", class: "hint" }, "One shell command per line; each must exit 0 on a fresh snapshot of the result. Leave empty to have the model draft the contract: you confirm or edit it before anything runs."),
    el("label", { for: "model" }, "Model (optional)"),
    el("input", { id: "model", name: "model", placeholder: "the Loopfile's maker" }),
    el("label", { for: "max_steps" }, "Most model turns (optional)"),
    el("input", { id: "max_steps", name: "max_steps", type: "number", min: "1" }),
    el("div", { class: "row" }, el("button", { type: "submit" }, "Start the task")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = {
      instruction: form.instruction.value.trim(),
      checks: form.checks.value.split("\n").map((l) => l.trim()).filter(Boolean),
    };
    if (form.model.value.trim()) body.model = form.model.value.trim();
    if (form.max_steps.value) body.max_steps = Number(form.max_steps.value);
    try {
      const made = await api("/api/v1/tasks", { method: "POST", body });
      location.hash = made.draft
        ? "#/draft/" + encodeURIComponent(made.draft)
        : "#/task/" + encodeURIComponent(made.id);
    } catch (e) { say(e.message); }
  });
  view.replaceChildren(el("h1", {}, "New task"), form);
  form.instruction.focus();
}

// ---- a drafted contract, waiting for its answer ----
function showDraft(view, id) {
  let alive = true;
  stopView = () => { alive = false; };
  const box = el("div", {});
  view.replaceChildren(el("h1", {}, "Drafted contract"), box);
  let shown = null;
  const send = async (body) => {
    try {
      await api("/api/v1/drafts/" + encodeURIComponent(id) + "/confirm", { method: "POST", body });
      shown = null;
      say("Sent.");
    } catch (e) { say(e.message); }
  };
  const draw = async () => {
    try {
      const d = await api("/api/v1/drafts/" + encodeURIComponent(id));
      const notes = el("ul", { class: "hint" }, ...d.notes.map((n) => el("li", {}, n)));
      if (d.state === "started") { location.hash = "#/task/" + encodeURIComponent(d.task_id); return; }
      if (d.state === "ended") { box.replaceChildren(el("p", {}, "No task started: " + d.reason), notes); return; }
      if (d.state === "drafting") {
        box.replaceChildren(el("p", {}, "The model is drafting the contract; the critic judges each draft."), notes);
        shown = null;
      } else if (d.state === "proposed" && shown !== d.contract) {
        shown = d.contract;
        const text = el("textarea", { id: "contract", rows: "18", spellcheck: "false" });
        text.value = d.contract;
        box.replaceChildren(
          el("p", {}, "The critic accepted this contract. Lock it and start, send it back edited (it is judged again), or reject it."),
          el("label", { for: "contract" }, "Contract"), text,
          el("div", { class: "row" },
            el("button", { type: "button", onclick: () => send(text.value === d.contract ? {} : { contract: text.value }) }, "Accept and start"),
            el("button", { type: "button", class: "secondary", onclick: () => send({ reject: true }) }, "Reject")),
          notes);
      }
    } catch (e) { say(e.message); }
    if (alive) setTimeout(draw, 1000);
  };
  draw();
}

// ---- one task ----
// The first line, marked when anything is left out (more lines, or past
// `n` characters): a command's later lines are never silently hidden.
function firstLine(s, n = 140) {
  const lines = String(s || "").split("\n");
  const l = lines[0];
  const more = lines.length > 1 && lines.slice(1).some((x) => x.trim() !== "");
  return (l.length > n ? l.slice(0, n) + "…" : l) + (more ? " …(+" + (lines.length - 1) + " lines)" : "");
}

function describeCall(c) {
  const a = c.args || {};
  if (a.command) return c.tool + " `" + firstLine(a.command, 80) + "`";
  if (a.path) return c.tool + " " + a.path;
  if (a.summary) return c.tool + " \"" + firstLine(a.summary, 80) + "\"";
  return c.tool;
}

function commandFailed(content) {
  const first = String(content || "").split("\n")[0];
  if (first.startsWith("exit ")) return !(first.startsWith("exit 0 ") || first === "exit 0");
  return /^(killed by signal|timed out|cancelled)/.test(first);
}

// One recorded event as a line of the story (null: nothing to show).
function storyLine(ev, calls) {
  const li = (cls, text, detail) => el("li", { class: cls }, text, detail ? el("span", { class: "detail" }, detail) : null);
  switch (ev.kind) {
    case "task_started": {
      const l = ev.contract.limits;
      return li("", "Task started: " + ev.contract.criteria.length + " criteria",
        "limits " + l.max_steps + " steps, " + l.max_tokens + " tokens, " + l.timeout_secs + " s · model " + ev.model.provider + ":" + ev.model.name);
    }
    case "model_turn":
      for (const c of ev.calls) calls[c.id] = describeCall(c);
      return li("cycle", "Cycle " + ev.step, ev.thought ? firstLine(ev.thought, 300) : (ev.calls.length ? null : "no action proposed"));
    case "model_malformed": return li("bad", "Cycle " + ev.step + ": the model's answer was malformed", ev.error);
    case "model_failed": return li("bad", "Cycle " + ev.step + ": no model answered", ev.error);
    case "observed": {
      const o = ev.observation;
      const what = calls[o.call_id] || o.tool;
      if (o.status === "refused") return li("bad", "⛔ " + what, "refused by " + o.rule + ": " + firstLine(o.content));
      const failed = o.status === "error" || (o.tool === "run_command" && commandFailed(o.content));
      return li(failed ? "bad" : "good", (failed ? "✗ " : "✓ ") + what, firstLine(o.content));
    }
    case "approval_requested": return li("ask", "Waiting for a person: `" + firstLine(ev.detail, 100) + "` (rule " + ev.rule + ")");
    case "approval_decided": return li("ask", "Approval: " + ev.decision + (ev.by ? " (by " + ev.by + ")" : ""), ev.message || null);
    case "checkpoint_requested": return li("ask", "Checkpoint: " + ev.reason);
    case "checkpoint_decided": return li("ask", "Checkpoint: " + ev.decision, ev.message || null);
    case "verified": {
      const r = ev.report;
      const item = el("li", { class: ev.accepted ? "good" : "bad" },
        "Verification #" + r.attempt + ": " + (ev.accepted ? "accepted" : "rejected"),
        el("span", { class: "detail" }, "sealed " + r.files + " files, each check on a fresh " + r.snapshot_method));
      const list = el("ul", {});
      for (const c of r.criteria) for (const k of c.checks) {
        const status = k.failure || (k.exit_code !== null && k.exit_code !== undefined ? "exit " + k.exit_code : "ok");
        const row = el("li", {}, (k.passed ? "✓ " : "✗ ") + c.id + " · " + status + " · " + k.duration_ms + " ms");
        if (!k.passed && k.stderr && k.stderr.excerpt && k.stderr.excerpt.trim()) {
          row.append(el("span", { class: "detail" }, k.stderr.excerpt.trim().split("\n").slice(-3).join("\n")));
        }
        list.append(row);
      }
      item.append(list);
      if (!ev.accepted && ev.rejection) item.append(el("span", { class: "detail" }, "rejected: " + ev.rejection));
      return item;
    }
    case "feedback": return li("", "↩ " + firstLine(ev.text, 160));
    case "transition": return ev.to === "terminal" ? li("cycle", "■ " + firstLine(ev.reason, 300)) : null;
    case "finished": {
      const u = ev.used;
      return li("", "Used " + u.steps + " steps, " + u.tokens + " tokens, " + money(u.usd) + ", " + u.verifications + " verification(s), " + (u.elapsed_ms / 1000).toFixed(1) + " s");
    }
    default: return null;
  }
}

// Read the task's server-sent events (fetch, so the token goes in a header).
async function follow(id, onEvent, signal) {
  let last = null;
  for (;;) {
    const headers = { Authorization: "Bearer " + token };
    if (last !== null) headers["Last-Event-ID"] = last;
    const r = await fetch("/api/v1/tasks/" + encodeURIComponent(id) + "/stream", { headers, signal });
    if (!r.ok) throw new Error("the event stream: HTTP " + r.status);
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "", ended = false;
    let ev = { id: null, event: null, data: "" };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (ev.event === "end") ended = true;
          else if (ev.data) { if (ev.id !== null) last = ev.id; onEvent(JSON.parse(ev.data)); }
          ev = { id: null, event: null, data: "" };
        } else if (line.startsWith("id:")) ev.id = line.slice(3).trim();
        else if (line.startsWith("event:")) ev.event = line.slice(6).trim();
        else if (line.startsWith("data:")) ev.data += line.slice(5).trim();
      }
    }
    if (ended) return;
  }
}

async function showTask(view, id) {
  const ctrl = new AbortController();
  let alive = true;
  stopView = () => { alive = false; ctrl.abort(); };
  const head = el("div", {});
  const budget = el("p", { class: "budget", "aria-live": "polite" });
  const asks = el("div", {});
  const trace = el("ol", { class: "trace", "aria-label": "What happened" });
  const receipt = el("div", {});
  const change = el("div", {});
  view.replaceChildren(el("h1", {}, "Task " + id), head, budget, asks,
    el("h2", {}, "Story"), trace, el("h2", {}, "Receipt"), receipt, el("h2", {}, "Change set"), change);
  const calls = {};
  let limits = null;

  const refresh = async () => {
    try {
      const t = await api("/api/v1/tasks/" + encodeURIComponent(id));
      head.replaceChildren(el("p", {}, outcomeBadge(t), " ", t.instruction || ""),
        t.reason ? el("p", { class: "hint" }, t.reason) : null,
        t.dead_letter ? el("p", { class: "hint" }, "The queue `" + t.dead_letter.queue + "` gave up on it: " + t.dead_letter.reason) : null,
        controls(id, t));
      const u = t.used;
      budget.textContent = "Used " + u.steps + (limits ? "/" + limits.max_steps : "") + " steps · " +
        u.tokens + (limits ? "/" + limits.max_tokens : "") + " tokens · " + money(u.usd) +
        (limits && limits.budget_usd !== null ? " of $" + limits.budget_usd : "") + " · " + u.verifications + " verification(s)";
      const pending = (t.approvals || []).filter((a) => a.status === "pending");
      // A card already shown for the same question stays as it is (a
      // redraw never moves a new question under the cursor).
      const shownIds = [...asks.children].map((c) => c.getAttribute("data-approval")).join(",");
      if (shownIds !== pending.map((a) => a.id).join(",")) {
        asks.replaceChildren(...pending.map((a) => answerCard(id, a)));
      }
      if (t.receipt) { await showReceipt(receipt, id); }
      await showChange(change, id, t);
      return t;
    } catch (e) { say(e.message); return null; }
  };
  const t = await refresh();
  if (!t) return;
  follow(id, (ev) => {
    if (ev.kind === "task_started") limits = ev.contract.limits;
    const line = storyLine(ev, calls);
    if (line) trace.append(line);
    if (["approval_requested", "checkpoint_requested", "approval_decided", "checkpoint_decided", "verified", "finished"].includes(ev.kind)) refresh();
  }, ctrl.signal).then(() => { if (alive) refresh(); }).catch((e) => { if (alive) say(e.message); });
}

// Stop a task, take up an interrupted one, or give one that reached a
// limit more budget and let it go on.
function controls(id, t) {
  const post = async (what, body) => {
    try {
      const r = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/" + what, { method: "POST", body });
      say(what === "cancel" ? "cancel: " + r.result + " (" + r.outcome + ")" : "resumed");
    } catch (e) { say(e.message); }
  };
  const row = el("div", { class: "row" });
  if (!t.outcome) {
    row.append(el("button", { type: "button", class: "secondary", onclick: () => {
      if (window.confirm("Stop task " + id + "? It ends cancelled, with a receipt.")) post("cancel", {});
    } }, "Cancel the task"));
  }
  if (t.interrupted && !t.running && !t.queued && !t.outcome) {
    row.append(el("button", { type: "button", onclick: () => post("resume", {}) }, "Resume"));
  }
  if (t.outcome && t.outcome.startsWith("limit_reached")) {
    const field = (name, label) => {
      const input = el("input", { id: "add-" + name, name, type: "number", min: "0", step: name === "usd" ? "0.01" : "1", inputmode: "decimal" });
      return [el("label", { for: "add-" + name }, label), input];
    };
    const form = el("form", { class: "more", "aria-label": "Give more budget" },
      el("p", {}, "It reached a limit. Give it more and let it go on:"),
      ...field("steps", "More steps"), ...field("tokens", "More tokens"),
      ...field("usd", "More dollars"), ...field("secs", "More seconds"),
      el("div", { class: "row" }, el("button", { type: "submit" }, "Resume with more")));
    form.onsubmit = (e) => {
      e.preventDefault();
      const body = {};
      for (const k of ["steps", "tokens", "usd", "secs"]) {
        const v = form.elements[k].value;
        if (v !== "") body["add_" + k] = k === "usd" ? Number(v) : parseInt(v, 10);
      }
      post("resume", body);
    };
    return el("div", {}, row, form);
  }
  return row;
}

function answerCard(id, a) {
  const message = el("input", { id: "answer-" + a.id, name: "message" });
  const send = async (deny) => {
    try {
      await api("/api/v1/tasks/" + encodeURIComponent(id) + "/approve", { method: "POST", body: { deny, message: message.value || null, approval_id: a.id } });
      say(deny ? "Denied." : "Approved.");
    } catch (e) { say(e.message); }
  };
  // The command whole, as code, apart from the runtime's own words.
  const what = a.payload.kind === "checkpoint"
    ? el("p", {}, "Checkpoint: ", el("span", { class: "cmd" }, a.payload.detail))
    : el("div", {}, el("p", {}, "May it run this command? (rule " + a.payload.rule + ")"),
      el("pre", { class: "cmd" }, a.payload.detail));
  return el("div", { class: "card", role: "group", "aria-label": "A question for you", "data-approval": a.id },
    what,
    el("label", { for: "answer-" + a.id }, "Message to the model (optional)"), message,
    el("div", { class: "row" },
      el("button", { type: "button", onclick: () => send(false) }, "Approve"),
      el("button", { type: "button", class: "secondary", onclick: () => send(true) }, "Deny")));
}

async function showReceipt(box, id) {
  try {
    const v = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/verify");
    const mark = (ok) => (ok ? "✓ " : "✗ ");
    box.replaceChildren(el("ul", { class: "layers" },
      el("li", {}, mark(v.signature.valid) + "signature " + (v.signature.valid ? "valid (key " + String(v.signature.keyid).slice(0, 16) + "…)" : "does not verify")),
      el("li", {}, mark(!v.statement_problems.length) + "statement " + (v.statement_problems.length ? v.statement_problems.join("; ") : "ok")),
      el("li", {}, mark(!v.ledger.problems.length) + "ledger " + (v.ledger.problems.length ? v.ledger.problems.join("; ") : v.ledger.entries + " entries, chained")),
      el("li", {}, mark(!v.artifacts.problems.length) + "artifacts " + (v.artifacts.problems.length ? v.artifacts.problems.join("; ") : v.artifacts.checked + " re-hashed")),
      el("li", {}, el("strong", {}, v.intact && v.verified ? "The receipt holds and the task was verified." : v.intact ? "The receipt holds; the task was not verified." : "The receipt does not hold."))),
      el("p", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); download(id); } }, "Download the receipt")));
  } catch (e) { box.replaceChildren(el("p", { class: "hint" }, e.message)); }
}

async function download(id) {
  try {
    const r = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/receipt");
    const blob = new Blob([JSON.stringify(r, null, 2)], { type: "application/json" });
    const a = el("a", { href: URL.createObjectURL(blob), download: id + ".receipt.json" });
    document.body.append(a); a.click(); a.remove();
  } catch (e) { say(e.message); }
}

async function showChange(box, id, t) {
  try {
    const d = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/diff");
    const pre = el("pre", { class: "diff", tabindex: "0", "aria-label": "The change as a diff" });
    let hunk = false;
    for (const line of String(d.patch).split("\n")) {
      if (line.startsWith("diff --git")) hunk = false;
      if (line.startsWith("@@")) hunk = true;
      const cls = line.startsWith("@@") ? "hunk" : hunk && line.startsWith("+") ? "add" : hunk && line.startsWith("-") ? "del" : "";
      pre.append(el("span", { class: cls }, line + "\n"));
    }
    const act = async (what, body = {}) => {
      try {
        const r = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/" + what, { method: "POST", body });
        say(what + ": " + r.result + (r.notes.length ? " — " + r.notes.join(" ") : ""));
        showChange(box, id, await api("/api/v1/tasks/" + encodeURIComponent(id)));
      } catch (e) { say(e.message); }
    };
    const buttons = el("div", { class: "row" });
    // Host-executable files (a git hook, a build script the host runs)
    // are applied only with an administrator's consent.
    const trust = el("input", { id: "trust-host", type: "checkbox" });
    if (t.outcome === "verified" && t.apply !== "applied") {
      // The click, after the diff is shown and the question below is
      // answered, is the person's confirmation (an apply checkpoint's too).
      buttons.append(el("button", { type: "button", onclick: () => {
        if (window.confirm("Apply " + d.files.length + " file(s) to the project?")) act("apply", { confirm: true, trust_host_files: trust.checked });
      } }, "Apply to the project"),
      el("button", { type: "button", class: "secondary", onclick: () => {
        if (window.confirm("Discard the change set of task " + id + "? The receipt stays.")) act("discard");
      } }, "Discard"),
      el("span", {}, trust, el("label", { for: "trust-host" }, " also files that run on the host (admin token)")));
    }
    if (t.apply === "applied") buttons.append(el("button", { type: "button", class: "secondary", onclick: () => act("undo") }, "Undo the apply"));
    box.replaceChildren(
      el("p", {}, d.files.length + " file(s) · " + (d.source.receipt ? "from the receipt" : "the workspace as it is now") + (t.apply === "applied" ? " · applied" : "")),
      buttons, d.files.length ? pre : null);
  } catch (e) { box.replaceChildren(el("p", { class: "hint" }, e.message)); }
}

// ---- routing ----
function route() {
  stopView();
  stopView = () => {};
  const signedIn = Boolean(token);
  $("#signin").hidden = signedIn;
  $("#signout").hidden = !signedIn;
  const view = $("#view");
  view.replaceChildren();
  if (!signedIn) { $("#token").focus(); return; }
  const h = location.hash || "#/";
  if (h === "#/new") showNew(view);
  else if (h.startsWith("#/task/")) showTask(view, decodeURIComponent(h.slice(7)));
  else if (h.startsWith("#/draft/")) showDraft(view, decodeURIComponent(h.slice(8)));
  else showList(view);
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  $("#signin-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("#token").value.trim();
    sessionStorage.setItem("loop-token", token);
    $("#token").value = "";
    route();
  });
  $("#signout").addEventListener("click", signOut);
  route();
});
