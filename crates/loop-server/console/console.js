// The console: the API, read by a person. Everything a task's record holds
// is put on the page as text (textContent), never as markup, and never with
// a path of the server's own disk in it (see `unpath`).
"use strict";

const $ = (sel) => document.querySelector(sel);
let token = sessionStorage.getItem("loop-token") || "";
let stopView = () => {};
// The task whose page is shown: paths in its workspace are said relative
// to the workspace.
let here = null;

// What text cannot show as itself is shown as its code point: controls,
// bidirectional overrides and isolates, zero-width characters.
function visible(s) {
  return String(s).replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g,
    (c) => "\\u{" + c.codePointAt(0).toString(16) + "}");
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === "string" || typeof c === "number" ? visible(c) : c);
  }
  return e;
}

// ---- the server's paths stay on the server ----
// Where the server keeps a task (its workspace, the check snapshots beside
// it, the project) is its own business: an absolute path in a record's
// text is shown relative to the task's workspace when it is in it, as
// "…/" and what follows the task's own directory when it is beside it,
// and as "…/" and its last name otherwise. The system's own places
// (/usr, /bin, /dev/null, …) are said as they are.
const SYSTEM = /^\/(usr|bin|sbin|lib|lib32|lib64|libx32|etc|dev|proc|sys|nix)(\/|$)/;
const PATHLIKE = /(^|[\s'"`(\[{=:,;<>|])(\/(?!\/)[^\s'"`()\[\]{},;:<>|]*)/g;

function shortPath(p) {
  if (p === "/" || SYSTEM.test(p)) return p;
  const inside = (rest) => {
    if (rest === "workspace" || rest === "workspace/") return ".";
    if (rest.startsWith("workspace/")) return rest.slice(10) || ".";
    return rest ? "…/" + rest : "…";
  };
  if (here) {
    const at = p.indexOf("/" + here + "/");
    if (at >= 0) return inside(p.slice(at + here.length + 2));
    if (p.endsWith("/" + here)) return "…";
  }
  // ROOT-workspaces/NAME-KEY/TASK/…: some task's own directory.
  const near = /-workspaces\/[^/]+\/[^/]+\/?(.*)$/.exec(p);
  if (near) return inside(near[1]);
  const ws = p.indexOf("/workspace/");
  if (ws >= 0) return p.slice(ws + 11) || ".";
  if (p.endsWith("/workspace")) return ".";
  const name = p.replace(/\/+$/, "").split("/").pop();
  return name ? "…/" + name : "…";
}

function unpath(s) {
  if (s === null || s === undefined) return "";
  return String(s).replace(/file:\/\/(\/[^\s'"`()\[\]{},;:<>|]*)/g, (m, p) => "file://" + shortPath(p))
    .replace(PATHLIKE, (m, pre, p) => pre + shortPath(p));
}

// Children as el() takes them: nothing for null, undefined or false (never
// the text "null"), text as text.
function kids(xs) {
  return xs.flat().filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (typeof c === "string" || typeof c === "number" ? visible(c) : c));
}
function fill(parent, ...xs) { parent.replaceChildren(...kids(xs)); }
function add(parent, ...xs) { parent.append(...kids(xs)); }

function say(text) {
  const s = $("#status");
  const shown = visible(unpath(text));
  s.textContent = shown;
  if (shown) setTimeout(() => { if (s.textContent === shown) s.textContent = ""; }, 5000);
}

async function api(path, opts = {}) {
  const headers = { Authorization: "Bearer " + token };
  // A form (files uploaded) says its own type, with its boundary.
  if (opts.body !== undefined && !(opts.body instanceof FormData)) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method: opts.method || "GET",
    headers,
    body: opts.body === undefined ? undefined : opts.body instanceof FormData ? opts.body : JSON.stringify(opts.body),
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

// ---- words and figures ----
// `limit_reached{steps}` → `limit reached (steps)`.
function outcomeWords(name) {
  const m = /^([a-z_]+)(?:\{([a-z_]+)\})?$/.exec(String(name || ""));
  if (!m) return String(name || "");
  return m[1].replace(/_/g, " ") + (m[2] ? " (" + m[2] + ")" : "");
}

function stateWords(s) { return String(s || "").replace(/_/g, " "); }

// How a task stands, in words, and the kind of badge that says it.
function standing(t) {
  if (t.outcome) return { text: t.outcome_words || outcomeWords(t.outcome), kind: String(t.outcome).split("{")[0] };
  if (t.queued) return { text: "queued", kind: "queued" };
  if (t.dead_letter) return { text: "dead-lettered", kind: "failed" };
  if (t.interrupted) return { text: "interrupted (" + stateWords(t.state) + ")", kind: "interrupted" };
  if (t.state === "awaiting_approval") return { text: "waiting for approval", kind: "waiting" };
  if (t.state === "awaiting_input") return { text: "waiting for an answer", kind: "waiting" };
  return { text: stateWords(t.state) || "unknown", kind: "live" };
}

function badge(t) {
  const s = standing(t);
  return el("span", { class: "badge " + s.kind }, s.text);
}

const int = (n) => Number(n || 0).toLocaleString("en-US");

function money(x) {
  const v = Number(x || 0);
  if (v === 0) return "$0.00";
  return "$" + v.toFixed(v < 0.01 ? 4 : 2);
}

function lasting(ms) {
  if (!(ms >= 0)) return "—";
  if (ms < 10000) return (ms / 1000).toFixed(1) + " s";
  const s = Math.round(ms / 1000);
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + (s % 60) + " s";
  const h = Math.floor(m / 60);
  if (h < 24) return h + " h " + (m % 60) + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}

// Ended (or interrupted): from its start to its last change; live: to now.
function durationMs(t) {
  const from = Date.parse(t.created);
  const live = !t.outcome && !t.interrupted;
  const to = live ? Date.now() : Date.parse(t.updated);
  return Math.max(0, to - from);
}

function ago(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "—";
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  if (s < 86400) return Math.floor(s / 3600) + " h ago";
  if (s < 30 * 86400) return Math.floor(s / 86400) + " d ago";
  return new Date(t).toLocaleDateString();
}

function fullTime(iso) {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? String(iso || "") : new Date(t).toLocaleString();
}

function timeEl(iso) {
  return el("time", { datetime: iso || null, title: fullTime(iso) }, ago(iso));
}

function ownerOf(owner) {
  return owner ? el("span", {}, owner) : el("span", { class: "muted" }, "command line");
}

// The id's last part, unique enough in a list (the link's title has it whole).
function shortId(id) {
  const parts = String(id).split("-");
  return parts.length > 2 ? parts[parts.length - 1] : String(id);
}

// ---- the task list ----
const PAGE = 50;
const FILTERS = ["q", "state", "outcome", "owner"];
const STATES = [["", "Any state"], ["running", "Running"], ["waiting", "Waiting for a person"],
  ["interrupted", "Interrupted"], ["queued", "Queued"], ["ended", "Ended"]];
const OUTCOMES = [["", "Any outcome"], ["verified", "verified"], ["failed", "failed"], ["lost", "lost"],
  ["limit_reached", "limit reached"], ["cancelled", "cancelled"], ["error", "error"]];
const owners = new Set();

function hashParts() {
  const h = location.hash || "#/";
  const q = h.indexOf("?");
  return { path: q < 0 ? h : h.slice(0, q), params: new URLSearchParams(q < 0 ? "" : h.slice(q + 1)) };
}

function select(id, choices, value) {
  // A value the address asks for that is not a choice is shown as asked
  // (the server says what is wrong with it).
  const all = choices.some(([v]) => v === value) ? choices : choices.concat([[value, value]]);
  const s = el("select", { id, name: id.slice(2) },
    ...all.map(([v, label]) => el("option", { value: v }, label)));
  s.value = value;
  return s;
}

const COLUMNS = [["Task", "c-id"], ["Instruction", "c-instr"], ["State", "c-state"], ["Owner", "c-owner"],
  ["Created", "c-created"], ["Duration", "c-dur num"], ["Steps", "c-steps num"], ["Tokens", "c-tokens num"], ["Cost", "c-cost num"]];

function showList(view, params) {
  document.title = "Tasks · Loop Engine";
  const f = {};
  for (const k of FILTERS) f[k] = params.get(k) || "";
  if (f.owner) owners.add(f.owner);

  const q = el("input", { id: "f-q", name: "q", type: "search", placeholder: "id, instruction or reason", autocomplete: "off", spellcheck: "false" });
  q.value = f.q;
  const state = select("f-state", STATES, f.state);
  const outcome = select("f-outcome", OUTCOMES, f.outcome);
  const owner = el("select", { id: "f-owner", name: "owner" });
  const clear = el("button", { type: "button", id: "f-clear", class: "secondary" }, "Clear");
  const field = (label, input, cls) => el("div", { class: "field " + (cls || "") }, el("label", { for: input.id }, label), input);
  const bar = el("div", { class: "filters", role: "search", "aria-label": "Filter the tasks" },
    field("Search", q, "grow"), field("State", state), field("Outcome", outcome), field("Owner", owner),
    el("div", { class: "field end" }, clear));
  const shown = el("p", { id: "shown", class: "hint", "aria-live": "polite" }, "Loading…");
  const problem = el("p", { id: "list-error", class: "error", role: "alert", hidden: "" });
  const body = el("tbody");
  const foot = el("tfoot");
  const table = el("table", { id: "tasks", class: "tasks" },
    el("caption", { class: "sr-only" }, "Tasks, newest first; refreshed every two seconds."),
    el("thead", {}, el("tr", {}, ...COLUMNS.map(([name, cls]) => el("th", { scope: "col", class: cls }, name)))),
    body, foot);
  const more = el("button", { type: "button", id: "more", class: "secondary", hidden: "" }, "Load more");
  fill(view,
    el("h1", {}, "Tasks"),
    bar, el("div", { class: "summary-row" }, shown, problem), el("div", { class: "table-wrap" }, table),
    el("div", { class: "row more-row" }, more));

  let alive = true;
  let timer = null;
  let gen = 0;
  let rows = [];
  let next = null;
  let drawn = "";
  let clocks = [];
  stopView = () => { alive = false; clearTimeout(timer); clearTimeout(typing); };

  const drawOwners = () => {
    const want = ["", "-", ...[...owners].sort()];
    const have = [...owner.options].map((o) => o.value);
    if (want.join("\u0000") === have.join("\u0000")) return;
    fill(owner, el("option", { value: "" }, "Any owner"), el("option", { value: "-" }, "Command line"),
      ...[...owners].sort().map((o) => el("option", { value: o }, o)));
    owner.value = f.owner;
  };
  drawOwners();

  const filtered = () => FILTERS.some((k) => f[k]);
  const query = (limit, before) => {
    const p = new URLSearchParams();
    p.set("limit", String(limit));
    if (before) p.set("before", before);
    for (const k of FILTERS) if (f[k]) p.set(k, f[k]);
    return api("/api/v1/tasks?" + p.toString());
  };

  const row = (t) => {
    const used = t.used || {};
    const instruction = t.instruction ? unpath(t.instruction) : "";
    const created = timeEl(t.created);
    const dur = el("td", { class: "c-dur num", "data-label": "Duration" }, lasting(durationMs(t)));
    clocks.push(() => { created.textContent = ago(t.created); dur.textContent = lasting(durationMs(t)); });
    return el("tr", { "data-id": t.id },
      el("td", { class: "c-id" }, el("a", { href: "#/task/" + encodeURIComponent(t.id), title: t.id }, shortId(t.id))),
      el("td", { class: "c-instr" }, instruction
        ? el("span", { class: "clip", title: instruction }, instruction)
        : el("span", { class: "muted" }, "(no instruction)")),
      el("td", { class: "c-state" }, badge(t)),
      el("td", { class: "c-owner", "data-label": "Owner" }, ownerOf(t.owner)),
      el("td", { class: "c-created", "data-label": "Created" }, created),
      dur,
      el("td", { class: "c-steps num", "data-label": "Steps" }, int(used.steps)),
      el("td", { class: "c-tokens num", "data-label": "Tokens" }, int(used.tokens)),
      el("td", { class: "c-cost num", "data-label": "Cost" }, money(used.usd)));
  };

  const draw = () => {
    const sig = JSON.stringify([rows, next]);
    if (sig === drawn) { for (const c of clocks) c(); return; }
    drawn = sig;
    for (const t of rows) if (t.owner) owners.add(t.owner);
    drawOwners();
    // A redraw keeps the focus where it was.
    const focused = document.activeElement && body.contains(document.activeElement)
      ? document.activeElement.getAttribute("href") : null;
    clocks = [];
    fill(body, ...rows.map(row));
    if (!rows.length) {
      body.append(el("tr", { class: "empty" }, el("td", { colspan: String(COLUMNS.length) },
        filtered() ? "No task matches these filters." : "No tasks yet: start one with New task.")));
    }
    const totalTime = el("td", { class: "c-dur num", "data-label": "Duration" });
    const spent = () => { totalTime.textContent = lasting(rows.reduce((a, t) => a + durationMs(t), 0)); };
    spent();
    clocks.push(spent);
    const sum = (k) => rows.reduce((a, t) => a + Number((t.used && t.used[k]) || 0), 0);
    fill(foot, rows.length ? el("tr", { id: "totals", "data-count": String(rows.length) },
      el("th", { scope: "row", colspan: "3", class: "c-total" },
        "Total of ", el("span", { class: "total-count" }, String(rows.length)), rows.length === 1 ? " task shown" : " tasks shown"),
      el("td", { class: "c-owner" }), el("td", { class: "c-created" }),
      totalTime,
      el("td", { class: "c-steps num", "data-label": "Steps" }, int(sum("steps"))),
      el("td", { class: "c-tokens num", "data-label": "Tokens" }, int(sum("tokens"))),
      el("td", { class: "c-cost num", "data-label": "Cost" }, money(sum("usd")))) : null);
    shown.textContent = rows.length
      ? (rows.length === 1 ? "1 task" : rows.length + " tasks") + (filtered() ? (rows.length === 1 ? " matches" : " match") + " the filters" : "") +
        (next ? " · older ones follow (Load more)" : "") + "."
      : "";
    more.hidden = !next;
    if (focused) { const a = body.querySelector('a[href="' + CSS.escape(focused) + '"]'); if (a) a.focus(); }
  };

  const fail = (e) => { problem.textContent = visible(unpath(e.message)); problem.hidden = false; shown.textContent = ""; };

  // The first pages again, as many tasks as are shown (new ones on top,
  // each one's standing as it is now).
  const refresh = async () => {
    const g = gen;
    try {
      const page = await query(Math.min(Math.max(PAGE, rows.length), 1000));
      if (!alive || g !== gen) return;
      const fresh = page.tasks || [];
      const ids = new Set(fresh.map((t) => t.id));
      rows = rows.length > 1000 ? fresh.concat(rows.slice(1000).filter((t) => !ids.has(t.id))) : fresh;
      if (rows.length <= 1000) next = page.next || null;
      problem.hidden = true;
      draw();
    } catch (e) { if (alive && g === gen) fail(e); }
  };
  const tick = async () => {
    await refresh();
    if (alive) timer = setTimeout(tick, 2000);
  };

  more.onclick = async () => {
    if (!next) return;
    const g = gen;
    more.disabled = true;
    try {
      const page = await query(PAGE, next);
      if (!alive || g !== gen) return;
      const ids = new Set(rows.map((t) => t.id));
      rows = rows.concat((page.tasks || []).filter((t) => !ids.has(t.id)));
      next = page.next || null;
      draw();
    } catch (e) {
      // The task the next page starts after no longer matches: ask for
      // as many again from the top.
      try {
        const page = await query(Math.min(rows.length + PAGE, 1000));
        if (alive && g === gen) { rows = page.tasks || []; next = page.next || null; draw(); }
      } catch (e2) { say(e2.message); }
    } finally { more.disabled = false; }
  };

  // A change of filter is a new place in the tab's history (reload and
  // back keep it), and a new list.
  const apply = () => {
    const p = new URLSearchParams();
    for (const k of FILTERS) if (f[k]) p.set(k, f[k]);
    const h = "#/" + (p.toString() ? "?" + p.toString() : "");
    if (h !== (location.hash || "#/")) history.pushState(null, "", h);
    gen += 1;
    rows = []; next = null; drawn = "";
    shown.textContent = "Loading…";
    refresh();
  };
  let typing = null;
  q.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { if (f.q !== q.value.trim()) { f.q = q.value.trim(); apply(); } }, 300);
  });
  q.addEventListener("keydown", (e) => { if (e.key === "Enter") { clearTimeout(typing); f.q = q.value.trim(); apply(); } });
  state.onchange = () => { f.state = state.value; apply(); };
  outcome.onchange = () => { f.outcome = outcome.value; apply(); };
  owner.onchange = () => { f.owner = owner.value; apply(); };
  clear.onclick = () => {
    clearTimeout(typing);
    for (const k of FILTERS) f[k] = "";
    q.value = ""; state.value = ""; outcome.value = ""; owner.value = "";
    apply();
  };
  tick();
}

// ---- a new task ----
function showNew(view) {
  document.title = "New task · Loop Engine";
  const form = el("form", { class: "stack" },
    el("label", { for: "instruction" }, "Instruction"),
    el("textarea", { id: "instruction", name: "instruction", rows: "3", required: "" }),
    el("label", { for: "checks" }, "Acceptance checks"),
    el("textarea", { id: "checks", name: "checks", rows: "3", "aria-describedby": "checks-hint", spellcheck: "false" }),
    el("p", { id: "checks-hint", class: "hint" }, "One shell command per line; each must exit 0 on a fresh snapshot of the result. Leave empty to have the model draft the contract: you confirm or edit it before anything runs."),
    el("label", { for: "model" }, "Model (optional)"),
    el("input", { id: "model", name: "model", placeholder: "the Loopfile's maker" }),
    el("label", { for: "max_steps" }, "Most model turns (optional)"),
    el("input", { id: "max_steps", name: "max_steps", type: "number", min: "1" }),
    el("label", { for: "skills" }, "Skills (optional)"),
    el("input", { id: "skills", name: "skills", list: "skills-known", placeholder: "names, separated by commas", "aria-describedby": "skills-hint", spellcheck: "false" }),
    el("datalist", { id: "skills-known" }),
    el("p", { id: "skills-hint", class: "hint" }, "Each is verified (signed by a key the project trusts, or the project's own pattern) and gives no more than the project gives a task."),
    el("label", { for: "inputs" }, "Files given with the task (optional)"),
    el("input", { id: "inputs", name: "inputs", type: "file", multiple: "", "aria-describedby": "inputs-hint" }),
    el("p", { id: "inputs-hint", class: "hint" }, "Put in the task's workspace as inputs/NAME before it starts, each with its digest in the record: at most 16 files, 16 MiB together."),
    el("div", { class: "row" }, el("button", { type: "submit" }, "Start the task")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = {
      instruction: form.instruction.value.trim(),
      checks: form.checks.value.split("\n").map((l) => l.trim()).filter(Boolean),
    };
    if (form.model.value.trim()) body.model = form.model.value.trim();
    if (form.max_steps.value) body.max_steps = Number(form.max_steps.value);
    const skills = form.skills.value.split(",").map((n) => n.trim()).filter(Boolean);
    if (skills.length) body.skills = skills;
    // With files: one upload, the task as JSON beside them.
    let sent = body;
    if (form.inputs.files.length) {
      sent = new FormData();
      sent.append("task", new Blob([JSON.stringify(body)], { type: "application/json" }));
      for (const f of form.inputs.files) sent.append("input", f, f.name);
    }
    try {
      const made = await api("/api/v1/tasks", { method: "POST", body: sent });
      location.hash = made.draft
        ? "#/draft/" + encodeURIComponent(made.draft)
        : "#/task/" + encodeURIComponent(made.id);
    } catch (e) { say(e.message); }
  });
  fill(view, el("h1", {}, "New task"), form);
  form.instruction.focus();
  // The skills a task may use, offered as the name is typed.
  api("/api/v1/skills").then((r) => {
    const known = document.getElementById("skills-known");
    if (!known) return;
    for (const k of r.skills.filter((k) => k.usable)) {
      known.append(el("option", { value: k.name }, k.description || k.state));
    }
  }).catch(() => {});
}

// ---- a drafted contract, waiting for its answer ----
function showDraft(view, id) {
  document.title = "Drafted contract · Loop Engine";
  let alive = true;
  let timer = null;
  stopView = () => { alive = false; clearTimeout(timer); };
  const box = el("div", {});
  fill(view, el("h1", {}, "Drafted contract"), box);
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
      const notes = (d.notes || []).length
        ? el("ul", { class: "hint notes" }, ...d.notes.map((n) => el("li", {}, unpath(n)))) : null;
      if (d.state === "started" && d.task_id) { location.hash = "#/task/" + encodeURIComponent(d.task_id); return; }
      if (d.state === "ended") {
        fill(box, el("p", {}, d.reason ? "No task started: " + unpath(d.reason) : "No task started."), notes);
        return;
      }
      if (d.state === "drafting") {
        fill(box, el("p", {}, "The model is drafting the contract; the critic judges each draft."), notes);
        shown = null;
      } else if (d.state === "proposed" && shown !== d.contract) {
        // The contract is YAML text, shown and edited as it is.
        const yaml = typeof d.contract === "string" ? d.contract : "";
        shown = d.contract;
        const text = el("textarea", { id: "contract", class: "code", rows: String(Math.min(30, Math.max(10, yaml.split("\n").length + 1))), spellcheck: "false", "aria-describedby": "contract-hint" });
        text.value = yaml;
        fill(box,
          el("p", { id: "contract-hint" }, "The critic accepted this contract (YAML). Lock it and start, send it back edited (it is judged again), or reject it."),
          el("label", { for: "contract" }, "Contract"), text,
          el("div", { class: "row" },
            el("button", { type: "button", onclick: () => send(text.value === yaml ? {} : { contract: text.value }) }, "Accept and start"),
            el("button", { type: "button", class: "secondary", onclick: () => send({ reject: true }) }, "Reject")),
          notes);
      }
    } catch (e) { say(e.message); }
    if (alive) timer = setTimeout(draw, 1000);
  };
  draw();
}

// ---- one task ----
// The first line, marked when anything is left out (more lines, or past
// `n` characters): a command's later lines are never silently hidden.
function firstLine(s, n = 140) {
  const lines = String(s || "").replace(/\n+$/, "").split("\n");
  const l = lines[0];
  const more = lines.length > 1 && lines.slice(1).some((x) => x.trim() !== "");
  return (l.length > n ? l.slice(0, n) + "…" : l) + (more ? " …(+" + (lines.length - 1) + " lines)" : "");
}

// Text of the record under a line of the story: as it is when short, else
// its first line, opening to the whole (scrolled within when very long).
function output(text, label) {
  const s = unpath(text).replace(/\s+$/, "");
  if (!s) return null;
  if (!s.includes("\n") && s.length <= 160 && !label) return el("span", { class: "detail" }, s);
  return el("details", { class: "out" },
    el("summary", {}, label ? el("span", { class: "out-label" }, label) : null, firstLine(s, 160)),
    el("pre", { tabindex: "0" }, s));
}

function describeCall(c) {
  const a = c.args || {};
  if (a.command) return c.tool + " `" + firstLine(unpath(a.command), 80) + "`";
  if (a.path) return c.tool + " " + unpath(a.path);
  if (a.summary) return c.tool + " \"" + firstLine(unpath(a.summary), 80) + "\"";
  return c.tool;
}

function describeCheck(k) {
  const c = k || {};
  switch (c.kind) {
    case "run": return "`" + firstLine(unpath(c.command), 80) + "`";
    case "file_exists": return unpath(c.path) + " exists";
    case "file_contains": return unpath(c.path) + " contains \"" + firstLine(unpath(c.text), 60) + "\"";
    case "file_matches": return unpath(c.path) + " matches /" + firstLine(unpath(c.regex), 60) + "/";
    case "json_equals": return unpath(c.path) + " " + (c.pointer || "/") + " = " + firstLine(JSON.stringify(c.value), 60);
    default: return c.kind || "";
  }
}

function commandFailed(content) {
  const first = String(content || "").split("\n")[0];
  if (first.startsWith("exit ")) return !(first.startsWith("exit 0 ") || first === "exit 0");
  return /^(killed by signal|timed out|cancelled)/.test(first);
}

function endWords(o) {
  if (!o || !o.kind) return "";
  return String(o.kind).replace(/_/g, " ") + (o.limit ? " (" + o.limit + ")" : "");
}

// One recorded event as a line of the story (null: nothing to show).
function storyLine(ev, calls, id) {
  const li = (cls, text, ...detail) => el("li", { class: cls }, text, ...detail);
  const plain = (s) => (s ? el("span", { class: "detail" }, unpath(s)) : null);
  switch (ev.kind) {
    case "task_started": {
      const l = ev.limits || (ev.contract && ev.contract.limits) || {};
      const n = ev.contract && ev.contract.criteria ? ev.contract.criteria.length : 0;
      const m = ev.model || {};
      return li("", "Task started: " + n + (n === 1 ? " criterion" : " criteria"),
        plain("limits " + int(l.max_steps) + " steps, " + int(l.max_tokens) + " tokens, " + int(l.timeout_secs) + " s · model " + m.provider + ":" + m.name));
    }
    case "model_turn":
      for (const c of ev.calls || []) calls[c.id] = describeCall(c);
      return li("cycle", "Cycle " + ev.step, ev.thought ? output(ev.thought) : ((ev.calls || []).length ? null : plain("no action proposed")));
    case "model_malformed": return li("bad", "Cycle " + ev.step + ": the model's answer was malformed", output(ev.error), output(ev.excerpt, "answer"));
    case "model_failed": return li("bad", "Cycle " + ev.step + ": no model answered", output(ev.error));
    case "model_silent": return li("bad", "Cycle " + ev.step + ": the model said nothing", output(ev.reason));
    case "observed": {
      const o = ev.observation || {};
      const what = calls[o.call_id] || o.tool;
      if (o.status === "refused") return li("bad", "⛔ " + what, output("refused by " + o.rule + ": " + (o.content || "")));
      const failed = o.status === "error" || (o.tool === "run_command" && commandFailed(o.content));
      const shot = o.image && String(o.image.path || "").startsWith("evidence/") && /^[0-9a-f]{64}$/.test(o.image.sha256 || "")
        ? screenshot(id, o.image.sha256) : null;
      return li(failed ? "bad" : "good", (failed ? "✗ " : "✓ ") + what, output(o.content), shot);
    }
    case "approval_requested": return li("ask", "Waiting for a person: `" + firstLine(unpath(ev.detail), 100) + "` (rule " + ev.rule + ")");
    case "approval_decided": return li("ask", "Approval: " + ev.decision + (ev.by ? " (by " + unpath(ev.by) + ")" : ""), ev.message ? output(ev.message) : null);
    case "checkpoint_requested": return li("ask", "Checkpoint: " + firstLine(unpath(ev.reason), 200), output(ev.reason && ev.reason.includes("\n") ? ev.reason : ""));
    case "checkpoint_decided": return li("ask", "Checkpoint: " + ev.decision, ev.message ? output(ev.message) : null);
    case "budget_extended":
      return li("ask", "More budget: +" + int(ev.add_steps) + " steps, +" + int(ev.add_tokens) + " tokens, +" + money(ev.add_usd) + ", +" + int(ev.add_secs) + " s");
    case "recovery": return li("", "Retried (" + ev.policy + ", attempt " + ev.attempt + ")", output(ev.detail));
    case "resumed": return li("cycle", "Resumed", output(ev.reason));
    case "reviewed": return li(ev.verdict === "approve" ? "good" : "bad", "Review of verification #" + ev.attempt + ": " + ev.verdict, output(ev.reasons));
    case "verified": {
      const r = ev.report || {};
      const item = el("li", { class: ev.accepted ? "good" : "bad" },
        "Verification #" + r.attempt + ": " + (ev.accepted ? "accepted" : "rejected"),
        plain("sealed " + int(r.files) + " files, each check on a fresh " + r.snapshot_method));
      const list = el("ul", { class: "checks" });
      for (const c of r.criteria || []) for (const k of c.checks || []) {
        const status = k.failure || (k.exit_code !== null && k.exit_code !== undefined ? "exit " + k.exit_code : "ok");
        const row = el("li", { class: k.passed ? "pass" : "fail" },
          (k.passed ? "✓ " : "✗ ") + c.id + " · " + describeCheck(k.check) + " · " + unpath(status) + " · " + int(k.duration_ms) + " ms");
        const streams = [["stderr", k.stderr], ["stdout", k.stdout]]
          .filter(([, s]) => s && s.excerpt && s.excerpt.trim());
        if (streams.length) {
          const whole = streams.map(([name, s]) => (streams.length > 1 ? "── " + name + " ──\n" : "") + s.excerpt.replace(/\s+$/, "") +
            (s.truncated ? "\n… (" + int(s.bytes) + " bytes in all; the receipt has their digest)" : "")).join("\n\n");
          // What a failed check said last is what tells why.
          const last = streams[0][1].excerpt.trim().split("\n").pop();
          add(row, el("details", { class: "out" + (k.passed ? "" : " evidence") },
            el("summary", {}, el("span", { class: "out-label" }, streams.map(([n]) => n).join(" + ")), k.passed ? firstLine(unpath(whole), 120) : firstLine(unpath(last), 160)),
            el("pre", { tabindex: "0" }, unpath(whole))));
        }
        add(list, row);
      }
      add(item, list);
      for (const v of r.protected_violations || []) add(item, plain("protected path changed: " + v));
      for (const a of r.artifacts || []) if (!a.present) add(item, plain("missing artifact: " + a.path));
      if (!ev.accepted && ev.rejection) add(item, output("rejected: " + ev.rejection));
      return item;
    }
    case "feedback": return li("", "↩ Feedback to the model", output(ev.text));
    case "transition": return ev.to === "terminal" ? li("cycle", "■ " + firstLine(unpath(ev.reason), 300), ev.reason && ev.reason.includes("\n") ? output(ev.reason) : null) : null;
    case "finished": {
      const u = ev.used || {};
      return li("", "Ended " + endWords(ev.outcome) + ": used " + int(u.steps) + " steps, " + int(u.tokens) + " tokens, " + money(u.usd) + ", " + int(u.verifications) + " verification(s), " + lasting(u.elapsed_ms));
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

// The task's standing at a glance: a definition list, a fact only when
// there is one to say.
function facts(t, limits) {
  const u = t.used || {};
  const of = (n, max, fmt) => fmt(n) + (max !== null && max !== undefined ? " of " + fmt(max) : "");
  const items = [
    ["State", badge(t)],
    ["Owner", ownerOf(t.owner)],
    ["Created", el("time", { datetime: t.created, title: t.created }, fullTime(t.created) + " (" + ago(t.created) + ")"), "two"],
    ["Duration", lasting(durationMs(t))],
    ["Steps", of(u.steps, limits && limits.max_steps, int)],
    ["Tokens", of(u.tokens, limits && limits.max_tokens, int)],
    ["Cost", of(u.usd, limits && limits.budget_usd, money)],
    ["Verifications", int(u.verifications)],
    t.model ? ["Model", unpath(t.model), "two"] : null,
    t.apply && t.apply !== "not applied" ? ["Change set", t.apply] : null,
    t.reason ? ["Reason", unpath(t.reason), "wide"] : null,
    t.dead_letter ? ["Queue", "`" + t.dead_letter.queue + "` gave up on it: " + unpath(t.dead_letter.reason), "wide"] : null,
    t.parent ? ["Parent", el("a", { href: "#/task/" + encodeURIComponent(t.parent) }, t.parent), "two"] : null,
    t.children && t.children.length ? ["Children", childList(t.children), "wide"] : null,
  ];
  return items.filter(Boolean).map(([k, v, cls]) => el("div", { class: "fact " + (cls || "") }, el("dt", {}, k), el("dd", {}, v)));
}

// The child tasks it delegated to: each its state or outcome, the paths
// it may change and what it used (counted in this task's figures too).
function childList(list) {
  return el("ul", { class: "children" }, ...list.map((c) => el("li", {},
    el("a", { href: "#/task/" + encodeURIComponent(c.id) }, c.id),
    " " + (c.outcome || c.state) + " · writes " + (c.writable || []).join(", ") +
      " · " + int((c.used || {}).steps) + " steps, " + int((c.used || {}).tokens) + " tokens, " + money((c.used || {}).usd))));
}

async function showTask(view, id) {
  document.title = "Task " + id + " · Loop Engine";
  here = id;
  const ctrl = new AbortController();
  let alive = true;
  let clock = null;
  stopView = () => { alive = false; ctrl.abort(); clearInterval(clock); };
  const lead = el("p", { class: "lead" });
  const dl = el("dl", { id: "facts", class: "facts", "aria-live": "polite" });
  const ctl = el("div", { class: "controls" });
  const asks = el("div", {});
  const trace = el("ol", { class: "trace", "aria-label": "What happened" });
  const receipt = el("div", {}, el("p", { class: "hint" }, "Written when the task ends."));
  const change = el("div", {});
  fill(view,
    el("p", { class: "crumbs" }, el("a", { href: "#/" }, "← Tasks")),
    el("h1", { class: "task-title" }, "Task ", el("span", { class: "id" }, id)), lead, dl, ctl, asks,
    el("h2", {}, "Story"), trace, el("h2", {}, "Receipt"), receipt, el("h2", {}, "Change set"), change);
  const calls = {};
  let limits = null;
  let last = null;
  let controlsKey = null;

  const drawFacts = () => { if (last) fill(dl, ...facts(last, limits)); };
  // The task as the server has it now: facts, buttons and questions (not
  // the receipt or the diff). One read at a time; a reply older than the
  // last one drawn is dropped.
  let asked = 0;
  let drawn = 0;
  const readTask = async () => {
    const n = ++asked;
    const t = await api("/api/v1/tasks/" + encodeURIComponent(id));
    if (!alive || n < drawn) return null;
    drawn = n;
    last = t;
    if (t.instruction) lead.textContent = visible(unpath(t.instruction));
    lead.hidden = !t.instruction;
    drawFacts();
    // The buttons (and a half-filled budget form) stay as they are
    // while what they act on does not change.
    const key = [t.outcome, t.interrupted, t.running, t.queued].join("|");
    if (key !== controlsKey) { controlsKey = key; fill(ctl, controls(id, t)); }
    // Its own questions, then its children's (asked of the same person).
    const pending = [
      ...(t.approvals || []).filter((a) => a.status === "pending").map((a) => [id, a]),
      ...(t.children || []).flatMap((c) => (c.asking || []).map((a) => [c.id, a])),
    ];
    // A card already shown for the same question stays as it is (a
    // redraw never moves a new question under the cursor).
    const shownIds = [...asks.children].map((c) => c.getAttribute("data-approval")).join(",");
    if (shownIds !== pending.map(([task, a]) => task + "/" + a.id).join(",")) {
      fill(asks, ...pending.map(([task, a]) => answerCard(task, a, task !== id)));
    }
    return t;
  };
  const refresh = async () => {
    try {
      const t = await readTask();
      if (!t) return null;
      if (t.receipt) { await showReceipt(receipt, id); }
      await showChange(change, id, t);
      return t;
    } catch (e) { say(e.message); return null; }
  };
  const t = await refresh();
  if (!t) return;
  let ticks = 0;
  let polling = false;
  clock = setInterval(() => {
    if (!last || last.outcome || last.interrupted) return;
    drawFacts();
    // A child's question is not in this task's story: while it runs,
    // the task is read again every 2 s (facts and questions only).
    ticks += 1;
    if (ticks % 2 === 0 && !polling) {
      polling = true;
      readTask().catch(() => null).finally(() => { polling = false; });
    }
  }, 1000);
  follow(id, (ev) => {
    if (!alive) return;
    if (ev.kind === "task_started") { limits = ev.limits || (ev.contract && ev.contract.limits) || null; drawFacts(); }
    if (ev.kind === "budget_extended" && limits) {
      limits = { ...limits, max_steps: limits.max_steps + ev.add_steps, max_tokens: limits.max_tokens + ev.add_tokens,
        budget_usd: limits.budget_usd === null || limits.budget_usd === undefined ? limits.budget_usd : limits.budget_usd + ev.add_usd };
    }
    const line = storyLine(ev, calls, id);
    if (line) add(trace, line);
    if (["approval_requested", "checkpoint_requested", "approval_decided", "checkpoint_decided", "verified", "finished", "resumed", "budget_extended"].includes(ev.kind)) refresh();
  }, ctrl.signal).then(() => {
    // The whole story is there (what a reader, or a test, may wait for).
    trace.setAttribute("data-complete", "");
    if (alive) refresh();
  }).catch((e) => { if (alive) say(e.message); });
}

// Stop a task, take up an interrupted one, or give one that reached a
// limit more budget and let it go on.
function controls(id, t) {
  const post = async (what, body) => {
    try {
      const r = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/" + what, { method: "POST", body });
      say(what === "cancel" ? "cancel: " + String(r.result || "").replace(/_/g, " ") + (r.outcome ? " (" + outcomeWords(r.outcome) + ")" : "") : "resumed");
    } catch (e) { say(e.message); }
  };
  const row = el("div", { class: "row" });
  if (!t.outcome) {
    add(row, el("button", { type: "button", class: "secondary", onclick: () => {
      if (window.confirm("Stop task " + id + "? It ends cancelled, with a receipt.")) post("cancel", {});
    } }, "Cancel the task"));
  }
  if (t.interrupted && !t.running && !t.queued && !t.outcome) {
    add(row, el("button", { type: "button", onclick: () => post("resume", {}) }, "Resume"));
  }
  if (t.outcome && t.outcome.startsWith("limit_reached")) {
    const field = (name, label) => {
      const input = el("input", { id: "add-" + name, name, type: "number", min: "0", step: name === "usd" ? "0.01" : "1", inputmode: "decimal" });
      return el("div", { class: "field" }, el("label", { for: "add-" + name }, label), input);
    };
    const form = el("form", { class: "more card", "aria-label": "Give more budget" },
      el("p", {}, "It reached a limit. Give it more and let it go on:"),
      el("div", { class: "grid4" }, field("steps", "More steps"), field("tokens", "More tokens"),
        field("usd", "More dollars"), field("secs", "More seconds")),
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

function answerCard(id, a, child) {
  const message = el("input", { id: "answer-" + id + "-" + a.id, name: "message" });
  const send = async (deny) => {
    try {
      await api("/api/v1/tasks/" + encodeURIComponent(id) + "/approve", { method: "POST", body: { deny, message: message.value || null, approval_id: a.id } });
      say(deny ? "Denied." : "Approved.");
    } catch (e) { say(e.message); }
  };
  const p = a.payload || {};
  // The command whole, as code, apart from the runtime's own words.
  const what = p.kind === "checkpoint"
    ? el("p", {}, "Checkpoint: ", el("span", { class: "cmd" }, unpath(p.detail)))
    : el("div", {}, el("p", {}, "May it run this command?" + (p.rule ? " (rule " + p.rule + ")" : "")),
      el("pre", { class: "cmd" }, unpath(p.detail)));
  return el("div", { class: "card ask", role: "group", "aria-label": "A question for you", "data-approval": id + "/" + a.id },
    child ? el("p", {}, "Child task ", el("a", { href: "#/task/" + encodeURIComponent(id) }, id), " asks:") : null,
    what,
    el("label", { for: "answer-" + id + "-" + a.id }, "Message to the model (optional)"), message,
    el("div", { class: "row" },
      el("button", { type: "button", onclick: () => send(false) }, "Approve"),
      el("button", { type: "button", class: "secondary", onclick: () => send(true) }, "Deny")));
}

async function showReceipt(box, id) {
  try {
    const v = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/verify");
    const mark = (ok) => (ok ? "✓ " : "✗ ");
    const problems = (xs) => xs.map(unpath).join("; ");
    fill(box, el("ul", { class: "layers" },
      el("li", {}, mark(v.signature.valid) + "signature " + (v.signature.valid ? "valid (key " + String(v.signature.keyid).slice(0, 16) + "…)" : "does not verify")),
      el("li", {}, mark(!v.statement_problems.length) + "statement " + (v.statement_problems.length ? problems(v.statement_problems) : "ok")),
      el("li", {}, mark(!v.ledger.problems.length) + "ledger " + (v.ledger.problems.length ? problems(v.ledger.problems) : v.ledger.entries + " entries, chained")),
      el("li", {}, mark(!v.artifacts.problems.length) + "artifacts " + (v.artifacts.problems.length ? problems(v.artifacts.problems) : v.artifacts.checked + " re-hashed")),
      el("li", {}, el("strong", {}, v.intact && v.verified ? "The receipt holds and the task was verified." : v.intact ? "The receipt holds; the task was not verified." : "The receipt does not hold."))),
      el("p", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); download(id); } }, "Download the receipt")));
  } catch (e) { fill(box, el("p", { class: "hint" }, unpath(e.message))); }
}

async function download(id) {
  try {
    const r = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/receipt");
    const blob = new Blob([JSON.stringify(r, null, 2)], { type: "application/json" });
    const a = el("a", { href: URL.createObjectURL(blob), download: id + ".receipt.json" });
    document.body.append(a); a.click(); a.remove();
  } catch (e) { say(e.message); }
}

// A file the ended task made, fetched with the token and saved under its
// name; the digest the receipt signs is checked before it is offered.
async function downloadFile(id, path) {
  try {
    const r = await fetch("/api/v1/tasks/" + encodeURIComponent(id) + "/files/" + path.split("/").map(encodeURIComponent).join("/"),
      { headers: { Authorization: "Bearer " + token } });
    if (r.status === 401) { signOut(); throw new Error("the token was refused: sign in again"); }
    if (!r.ok) {
      let m = "HTTP " + r.status;
      try { m = (await r.json()).error.message; } catch (_) { /* not JSON */ }
      throw new Error(m);
    }
    const bytes = await r.arrayBuffer();
    const said = r.headers.get("x-loop-sha256") || "";
    // (A page served over plain HTTP from another host has no digest
    // function: the server checked the bytes, and that is said.)
    let words = "checked by the server against the receipt";
    if (window.crypto && crypto.subtle) {
      const got = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)))
        .map((b) => b.toString(16).padStart(2, "0")).join("");
      if (said !== got) throw new Error(path + " did not arrive as the receipt signs it");
      words = "SHA-256 " + got.slice(0, 16) + "…, as the receipt signs it";
    }
    const a = el("a", { href: URL.createObjectURL(new Blob([bytes])), download: path.split("/").pop() });
    document.body.append(a); a.click(); a.remove();
    say("downloaded " + unpath(path) + " (" + words + ")");
  } catch (e) { say(unpath(e.message)); }
}

// A screenshot the task's browser kept as evidence: fetched with the
// token, shown only once its bytes have the digest the ledger records.
function screenshot(id, sha) {
  const fig = el("figure", { class: "shot" }, el("figcaption", {}, "screenshot, SHA-256 " + sha.slice(0, 16) + "…"));
  (async () => {
    try {
      const r = await fetch("/api/v1/tasks/" + encodeURIComponent(id) + "/evidence/" + sha,
        { headers: { Authorization: "Bearer " + token } });
      if (!r.ok) throw new Error("HTTP " + r.status);
      const bytes = await r.arrayBuffer();
      if (window.crypto && crypto.subtle) {
        const got = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)))
          .map((b) => b.toString(16).padStart(2, "0")).join("");
        if (got !== sha) throw new Error("it did not arrive as the ledger records it");
      }
      const type = r.headers.get("content-type") === "image/jpeg" ? "image/jpeg" : "image/png";
      fig.prepend(el("img", { src: URL.createObjectURL(new Blob([bytes], { type })), alt: "A screenshot the task's browser took", "data-sha256": sha }));
    } catch (e) { add(fig, el("span", { class: "hint" }, "the screenshot could not be shown: " + unpath(e.message))); }
  })();
  return fig;
}

async function showChange(box, id, t) {
  try {
    const d = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/diff");
    const pre = el("pre", { class: "diff", tabindex: "0", "aria-label": "The change as a diff" });
    let hunk = false;
    let shortened = false;
    for (const raw of String(d.patch || "").split("\n")) {
      const line = unpath(raw);
      if (line !== raw) shortened = true;
      if (line.startsWith("diff --git")) hunk = false;
      if (line.startsWith("@@")) hunk = true;
      const cls = line.startsWith("@@") ? "hunk" : hunk && line.startsWith("+") ? "add" : hunk && line.startsWith("-") ? "del" : "";
      add(pre, el("span", { class: cls || null }, line + "\n"));
    }
    const act = async (what, body = {}) => {
      try {
        const r = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/" + what, { method: "POST", body });
        say(what + ": " + String(r.result || "").replace(/_/g, " ") + ((r.notes || []).length ? " — " + r.notes.join(" ") : ""));
        showChange(box, id, await api("/api/v1/tasks/" + encodeURIComponent(id)));
      } catch (e) { say(e.message); }
    };
    const files = d.files || [];
    const buttons = el("div", { class: "row" });
    // Host-executable files (a git hook, a build script the host runs)
    // are applied only with an administrator's consent.
    const trust = el("input", { id: "trust-host", type: "checkbox" });
    if (t.outcome === "verified" && t.apply !== "applied") {
      // The click, after the diff is shown and the question below is
      // answered, is the person's confirmation (an apply checkpoint's too).
      add(buttons, el("button", { type: "button", onclick: () => {
        if (window.confirm("Apply " + files.length + " file(s) to the project?")) act("apply", { confirm: true, trust_host_files: trust.checked });
      } }, "Apply to the project"),
      el("button", { type: "button", class: "secondary", onclick: () => {
        if (window.confirm("Discard the change set of task " + id + "? The receipt stays.")) act("discard");
      } }, "Discard"),
      el("span", { class: "check" }, trust, el("label", { for: "trust-host" }, " also files that run on the host (admin token)")));
    }
    if (t.apply === "applied") add(buttons, el("button", { type: "button", class: "secondary", onclick: () => act("undo") }, "Undo the apply"));
    // Once the receipt is signed: the whole change set as a patch, and
    // every artifact it ships (those the change set lists too).
    const whole = el("p", { class: "downloads" });
    if (t.receipt) {
      add(whole, el("a", { href: "#", class: "download", onclick: (e) => {
        e.preventDefault();
        const a = el("a", { href: URL.createObjectURL(new Blob([String(d.patch || "")], { type: "text/x-diff" })), download: id + ".changes.patch" });
        document.body.append(a); a.click(); a.remove();
      } }, "Download the change set (.patch)"));
      try {
        const env = await api("/api/v1/tasks/" + encodeURIComponent(id) + "/receipt");
        const bytes = Uint8Array.from(atob(env.payload || ""), (c) => c.charCodeAt(0));
        const statement = JSON.parse(new TextDecoder().decode(bytes));
        const listed = new Set(files.map((x) => x.path));
        for (const a of (statement.predicate && statement.predicate.artifacts) || []) {
          if (listed.has(a)) continue;
          add(whole, " · ", el("a", { href: "#", class: "download", onclick: (e) => { e.preventDefault(); downloadFile(id, a); } }, "artifact " + unpath(a)));
        }
      } catch (_) { /* the receipt cannot be read here: the patch is still offered */ }
    }
    const source = d.source && d.source.receipt ? "from the receipt" : "the workspace as it is now";
    fill(box,
      el("p", {}, files.length + " file(s) · " + source + (t.apply === "applied" ? " · applied" : "")),
      files.length ? el("ul", { class: "files" }, ...files.map((x) => el("li", {}, el("span", { class: "change " + (x.change || "") }, x.change || ""), " ", unpath(x.path),
        // Once the receipt signs them, what the task made downloads.
        t.receipt && x.change !== "deleted"
          ? el("span", {}, " · ", el("a", { href: "#", class: "download", onclick: (e) => { e.preventDefault(); downloadFile(id, x.path); } }, "download"))
          : null))) : null,
      t.receipt ? whole : null,
      buttons, files.length ? pre : null,
      shortened ? el("p", { class: "hint" }, "Paths of the server's disk are shown shortened (…/name); `loop diff " + id + "` on the server shows them whole.") : null);
  } catch (e) { fill(box, el("p", { class: "hint" }, unpath(e.message))); }
}

// ---- memory: the notes later tasks are given ----
async function showMemory(view) {
  document.title = "Memory · Loop Engine";
  const list = el("div", { id: "notes" });
  const text = el("textarea", { id: "note-text", name: "text", rows: "2", maxlength: "500", required: "" });
  const about = el("input", { id: "note-about", name: "about", placeholder: "tests/test_hash.py, ci" });
  const form = el("form", { class: "stack" },
    el("label", { for: "note-text" }, "A note for later tasks"), text,
    el("label", { for: "note-about" }, "About (paths or topics, comma-separated; optional)"), about,
    el("div", { class: "row" }, el("button", { type: "submit" }, "Add the note")));
  const draw = async () => {
    try {
      const r = await api("/api/v1/memory");
      const notes = r.notes || [];
      if (!notes.length) { fill(list, el("p", { class: "hint" }, "No notes yet: a verified task's `remember` calls and the notes added here make them.")); return; }
      fill(list, ...notes.map((n) => noteCard(n, draw)));
    } catch (e) { say(e.message); }
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { text: text.value.trim(), about: about.value.split(",").map((a) => a.trim()).filter(Boolean) };
    try {
      await api("/api/v1/memory", { method: "POST", body });
      text.value = ""; about.value = "";
      say("Noted.");
      await draw();
    } catch (e) { say(e.message); }
  });
  fill(view, el("h1", {}, "Memory"),
    el("p", { class: "lead" }, "Notes later tasks of this project are given as untrusted guidance (they change no contract, limit or rule). A task's note is usable once its task ended verified; otherwise it waits here for a person."),
    form, el("h2", {}, "Notes"), list);
  await draw();
}

function noteCard(n, redraw) {
  const b = n.body || {};
  const from = b.source_task
    ? el("span", {}, "from task ", el("a", { href: "#/task/" + encodeURIComponent(b.source_task) }, b.source_task), " (" + (b.outcome || "?") + ")")
    : el("span", {}, "by " + (b.by || "a person"));
  const act = async (what) => {
    try {
      await api("/api/v1/memory/" + encodeURIComponent(n.id) + "/" + what, { method: "POST" });
      say(what === "approve" ? "Approved." : "Forgotten.");
      await redraw();
    } catch (e) { say(e.message); }
  };
  return el("div", { class: "card", "data-note": n.id },
    el("p", {}, el("strong", {}, n.id), " · " + n.status + " · ", from),
    el("p", {}, visible(n.text)),
    (n.about || []).length ? el("p", { class: "hint" }, "About: " + visible(n.about.join(", "))) : null,
    el("div", { class: "row" },
      n.status === "quarantined" ? el("button", { type: "button", onclick: () => act("approve") }, "Approve") : null,
      n.status !== "forgotten" ? el("button", { type: "button", class: "secondary", onclick: () => act("forget") }, "Forget") : null));
}

// ---- routing ----
function route() {
  stopView();
  stopView = () => {};
  here = null;
  const signedIn = Boolean(token);
  $("#signin").hidden = signedIn;
  $("#signout").hidden = !signedIn;
  const view = $("#view");
  fill(view);
  if (!signedIn) { document.title = "Sign in · Loop Engine"; $("#token").focus(); return; }
  const { path, params } = hashParts();
  if (path === "#/new") showNew(view);
  else if (path === "#/memory") showMemory(view);
  else if (path.startsWith("#/task/")) showTask(view, decodeURIComponent(path.slice(7)));
  else if (path.startsWith("#/draft/")) showDraft(view, decodeURIComponent(path.slice(8)));
  else showList(view, params);
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  // Back from GitHub: the session's token is in the fragment (never sent
  // to a server); kept in this tab, and taken out of the address.
  // Only a token this tab asked for (its nonce comes back with it): a link
  // with someone else's token in it signs nobody in.
  if (location.hash.startsWith("#signed-in=")) {
    const back = new URLSearchParams(location.hash.slice(1));
    const asked = sessionStorage.getItem("loop-signin-nonce");
    sessionStorage.removeItem("loop-signin-nonce");
    if (asked && back.get("nonce") === asked && back.get("signed-in")) {
      token = back.get("signed-in");
      sessionStorage.setItem("loop-token", token);
    } else {
      say("that sign-in was not asked for in this tab: sign in again");
    }
    history.replaceState(null, "", location.pathname + "#/");
  }
  fetch("/auth/providers").then((r) => (r.ok ? r.json() : {})).then((p) => {
    if (p && p.github) $("#signin-github").hidden = false;
  }).catch(() => null);
  $("#signin-github-link").addEventListener("click", (ev) => {
    ev.preventDefault();
    const nonce = Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
    sessionStorage.setItem("loop-signin-nonce", nonce);
    location.href = "/auth/github?nonce=" + nonce;
  });
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
