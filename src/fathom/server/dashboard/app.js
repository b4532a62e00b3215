// Fathom operator dashboard. Reads GET /admin/overview every two seconds and changes things
// through the same admin endpoints the CLI uses. Builds the page with textContent only:
// no server text is ever interpreted as markup.
"use strict";

const TOKEN_KEY = "fathom.admin-token";
const POLL_MS = 2000;
let overview = null;
let timer = null;
let formRole = null;

const $ = (id) => document.getElementById(id);

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function token() { return sessionStorage.getItem(TOKEN_KEY); }

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + token() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store",
  });
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (res.status === 401) { logout("The server refused this token; paste the admin token again."); }
  return { ok: res.ok, status: res.status, data };
}

function problemsOf(data) {
  const d = data && data.detail;
  if (!d) return { message: "the server gave no reason", problems: [] };
  if (typeof d === "string") return { message: d, problems: [] };
  return { message: d.message || "refused", problems: d.problems || [] };
}

function showResult(box, ok, message, problems) {
  box.replaceChildren();
  box.className = "result " + (ok ? "ok" : "error");
  box.append(el("p", { text: message }));
  if (problems && problems.length) {
    const ul = el("ul", { class: "problem-list" });
    for (const p of problems) ul.append(el("li", { text: p }));
    box.append(ul);
  }
}

function fmt(n, digits) {
  if (n === null || n === undefined) return "—";
  return Number(n).toFixed(digits);
}

function secs(s) {
  if (s === null || s === undefined) return "—";
  if (s < 60) return fmt(s, s < 10 ? 1 : 0) + " s";
  const m = Math.floor(s / 60);
  return m + " min " + Math.round(s - 60 * m) + " s";
}

// ---------------------------------------------------------------- rendering

function renderProblems(list) {
  const ul = $("problems");
  ul.replaceChildren(...list.map((p) => el("li", { text: p })));
  ul.hidden = list.length === 0;
}

function renderRoles(pol) {
  const tbody = $("roles").tBodies[0];
  tbody.replaceChildren();
  for (const [role, r] of Object.entries(pol.roles)) {
    const serving = el("td", { class: "providers" });
    if (r.serving.length === 0) serving.append(el("span", { class: "bad", text: "none" }));
    for (const p of r.providers) {
      const tag = el("span", {
        class: "provider " + p.kind + (p.serving ? " serving" : " idle"),
        title: (p.reason || p.health) + (p.cleared === false ? "; not cleared by the gate" : ""),
        text: p.id,
      });
      serving.append(tag, " ");
    }
    const notes = el("td", { class: "notes" });
    for (const w of [...r.warnings, ...r.unavailable]) notes.append(el("div", { text: w }));
    tbody.append(el("tr", { "data-role": role },
      el("th", { text: role }),
      el("td", { text: r.table || "—" }),
      el("td", { class: "policy", text: r.policy, title: r.behaviour }),
      el("td", { text: r.model || "—" }),
      el("td", { text: r.upstream || "—" }),
      el("td", { text: r.width === null ? "—" : String(r.width) }),
      el("td", { text: r.fallback }),
      serving, notes));
  }
}

function fillPolicyForm(pol) {
  const roleSel = $("pf-role");
  if (roleSel.options.length === 0) {
    for (const role of Object.keys(pol.roles)) roleSel.append(el("option", { value: role, text: role }));
    for (const p of Object.keys(pol.policies)) $("pf-policy").append(el("option", { value: p, text: p, title: pol.policies[p] }));
    for (const f of pol.fallbacks) $("pf-fallback").append(el("option", { value: f, text: f }));
    roleSel.addEventListener("change", () => { formRole = null; loadRoleIntoForm(); });
  }
  if (formRole === null) loadRoleIntoForm();
}

function loadRoleIntoForm() {
  if (!overview || !overview.policies.roles) return;
  const role = $("pf-role").value;
  const r = overview.policies.roles[role];
  formRole = role;
  $("pf-policy").value = r.policy;
  $("pf-model").value = r.model || "";
  $("pf-upstream").value = r.upstream || "";
  $("pf-width").value = r.width === null ? "" : String(r.width);
  $("pf-width").disabled = !r.stateful;
  $("pf-fallback").value = r.fallback;
}

function renderFleet(fleet) {
  const tbody = $("fleet").tBodies[0];
  tbody.replaceChildren();
  if (fleet.sidecars.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: "10", class: "muted", text: "no sidecar has joined yet" })));
  }
  for (const s of fleet.sidecars) {
    const key = s.key_present === null ? "—" : (s.key_present ? "present" : "missing");
    const action = el("td");
    if (s.state === "pending" && s.claimed) {
      // Another host's credential holds this name: handing it over is a deliberate act.
      action.append(el("button", { type: "button", class: "danger", text: "Give this host the name", onclick: () => {
        if (confirm(s.name + " belongs to another host. Give the name to the host connected now? The other host is locked out.")) fleetAction(s.name, "approve?rebind=true");
      } }));
    } else if (s.state === "pending") action.append(el("button", { type: "button", text: "Approve", onclick: () => fleetAction(s.name, "approve") }));
    else if (s.state === "approved") action.append(el("button", { type: "button", class: "danger", text: "Revoke", onclick: () => fleetAction(s.name, "revoke") }));
    tbody.append(el("tr", { "data-sidecar": s.name },
      el("th", { text: s.name }),
      el("td", { class: "state-" + s.state, text: s.state }),
      el("td", { class: s.connected ? "good" : "bad", text: s.connected ? "yes" : "no" }),
      el("td", { class: s.key_present === false ? "bad" : "", text: key }),
      el("td", { text: s.last_seen_s === null ? "—" : secs(s.last_seen_s) + " ago" }),
      el("td", { text: s.load === null ? "—" : fmt(s.load, 2) }),
      el("td", { text: String(s.in_flight) }),
      el("td", { text: s.routes.map((r) => r.role + "=" + r.backend).join(", ") || "—" }),
      el("td", { class: "bad", text: s.problems.join("; ") }),
      action));
  }
  const lp = fleet.last_push;
  $("last-push").textContent = lp
    ? "Last key push " + lp.at + ": " + (lp.pushed ? "acknowledged by " + lp.acked.join(", ") : "nobody acknowledged")
      + (lp.offline.length ? "; offline: " + lp.offline.join(", ") : "")
    : "No key has been pushed yet (fathom key push).";
}

function renderVerdicts(gate) {
  const tbody = $("verdicts").tBodies[0];
  tbody.replaceChildren();
  if (!gate) return;
  const c = gate.counts;
  $("verdict-counts").textContent = c.cleared + " cleared, " + c.refused + " refused, " + c.quarantined + " quarantined";
  if (gate.verdicts.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: "8", class: "muted", text: "no verdict yet (fathom gate verify PROVIDER)" })));
  }
  for (const v of gate.verdicts) {
    const coverage = el("td", { class: "coverage" });
    if (v.reduced_coverage) {
      coverage.append(el("strong", { class: "warn", text: "REDUCED COVERAGE" }), el("div", { class: "note", text: v.coverage_note }));
    } else {
      coverage.append(v.coverage);
    }
    const probes = Object.keys(v.cosines).length;
    tbody.append(el("tr", { class: "verdict " + v.status + (v.reduced_coverage ? " reduced" : ""), "data-provider": v.provider },
      el("td", { text: v.table }),
      el("th", { text: v.provider, title: v.model + (v.upstream ? " @" + v.upstream : "") }),
      el("td", { class: "status-" + v.status, text: v.status }),
      el("td", { text: v.regime }),
      coverage,
      el("td", { class: "num min-cosine", text: v.min_cosine === null ? "— (no peer)" : fmt(v.min_cosine, 4) }),
      el("td", { class: "num", text: probes ? probes + " compared" : (v.count_ok ? "shape only" : "—") }),
      el("td", { class: "reason", text: v.revoked_reason ? "revoked: " + v.revoked_reason : v.reason })));
  }
}

function renderBudget(b) {
  const dl = $("budget");
  dl.replaceChildren();
  if (!b) { dl.append(el("dt", { text: "not configured" })); return; }
  const facts = [
    ["Ceiling", b.ceiling + " (" + b.ceiling_source + ")"],
    ["Effective limit", String(b.effective)],
    ["In flight", String(b.in_flight)],
    ["Waiting", String(Object.values(b.waiting).reduce((a, n) => a + n, 0))],
    ["RPM window", b.window.armed ? b.window.count + " / " + b.window.allowance + " in " + b.window.seconds + " s" : "not armed"],
    ["Cooldown left", b.in_cooldown ? secs(b.cooldown_left_s) : "none"],
    ["Last 429", b.last_429 ? b.last_429.kind + ", " + secs(b.last_429.ago_s) + " ago" + (b.last_429.halved ? " (halved)" : "") : "never"],
  ];
  for (const [k, v] of facts) dl.append(el("dt", { text: k }), el("dd", { "data-fact": k, text: v }));
}

function renderJobs(jobs) {
  const tbody = $("jobs").tBodies[0];
  tbody.replaceChildren();
  if (jobs.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: "8", class: "muted", text: "no job has run on this server yet" })));
  }
  for (const j of jobs.slice().reverse()) {
    const bar = el("progress", { max: "100", value: String(j.percent) });
    const actions = el("td");
    if (!j.finished) {
      if (j.state === "paused" || j.state === "interrupted") actions.append(el("button", { type: "button", text: "Resume", onclick: () => jobAction(j.id, "resume") }));
      else actions.append(el("button", { type: "button", text: "Pause", onclick: () => jobAction(j.id, "pause") }));
      actions.append(el("button", { type: "button", class: "danger", text: "Cancel", onclick: () => jobAction(j.id, "cancel") }));
    }
    tbody.append(el("tr", { "data-job": j.id },
      el("td", { class: "mono", text: j.id }),
      el("td", { text: j.project }),
      el("td", { class: "state-" + j.state, text: j.state + (j.error ? ": " + j.error : "") }),
      el("td", { text: j.phase }),
      el("td", {}, bar, " " + j.chunks_done + " / " + j.chunks_total + " (" + fmt(j.percent, 0) + "%)"),
      el("td", { text: j.rate ? fmt(j.rate, 1) + " chunks/s" : "—" }),
      el("td", { text: j.eta_s === null ? "—" : secs(j.eta_s) }),
      actions));
  }
}

// A section the server could not read comes as {error: {message, problems}}: say so in its
// card, and render every other section as usual.
function renderSectionError(box, error) {
  box.hidden = !error;
  if (error) showResult(box, false, error.message, error.problems.filter((p) => p !== error.message));
}

function renderProjects(projects) {
  const tbody = $("projects").tBodies[0];
  tbody.replaceChildren();
  if (projects.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: "7", class: "muted", text: "no project is indexed yet" })));
  }
  for (const p of projects) {
    const w = p.watch;
    const sync = w.enabled ? w.state + (w.last_sync ? ", last " + w.last_sync : "") : "off";
    const actions = el("td");
    actions.append(el("button", { type: "button", text: w.enabled ? "Stop sync" : "Sync",
      onclick: () => setWatch(p.name, !w.enabled) }));
    actions.append(el("button", { type: "button", class: "danger", text: "Drop",
      onclick: () => dropProject(p.name) }));
    tbody.append(el("tr", { "data-project": p.name },
      el("th", { text: p.name + (p.indexing ? " (indexing)" : "") }),
      el("td", { class: "num", text: String(p.tables.code || 0) }),
      el("td", { class: "num", text: String(p.tables.docs || 0) }),
      el("td", { text: p.last_indexed || "—" }),
      el("td", { class: "watch " + (w.last_error ? "bad" : ""), title: w.last_error || w.detail || "", text: sync }),
      el("td", { class: "mono", text: p.root || "—" }),
      actions));
  }
}

function render(o) {
  renderProblems(o.problems);
  renderSectionError($("roles-error"), o.policies.error);
  if (!o.policies.error) {
    renderRoles(o.policies);
    fillPolicyForm(o.policies);
  }
  renderFleet(o.fleet);
  renderVerdicts(o.gate);
  renderBudget(o.budget);
  renderJobs(o.jobs);
}

// ---------------------------------------------------------------- polling

async function refresh() {
  if (!token()) return;
  try {
    const r = await api("GET", "/admin/overview");
    if (!r.ok) {
      if (r.status !== 401) $("status").textContent = "server answered " + r.status + ": " + problemsOf(r.data).message;
      return;
    }
    overview = r.data;
    render(overview);
    const projects = await api("GET", "/admin/projects");
    if (projects.ok) renderProjects(projects.data.projects);
    $("status").textContent = "connected, fathom " + overview.version + ", updated " + new Date().toLocaleTimeString();
    $("status").className = "status good";
  } catch (e) {
    $("status").textContent = "server unreachable: " + e;
    $("status").className = "status bad";
  }
}

function start() {
  $("login").hidden = true;
  $("app").hidden = false;
  $("forget").hidden = false;
  refresh();
  if (timer === null) timer = setInterval(refresh, POLL_MS);
}

function logout(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (timer !== null) { clearInterval(timer); timer = null; }
  $("app").hidden = true;
  $("forget").hidden = true;
  $("login").hidden = false;
  $("status").textContent = "not connected";
  $("status").className = "status";
  const err = $("login-error");
  err.hidden = !message;
  err.textContent = message || "";
}

// ---------------------------------------------------------------- actions

async function applyPolicy(ev) {
  ev.preventDefault();
  const role = $("pf-role").value;
  const box = $("policy-result");
  if (!overview.policies.roles) { showResult(box, false, overview.policies.error.message, []); return; }
  const cur = overview.policies.roles[role];
  const change = {};
  const policy = $("pf-policy").value;
  if (policy !== cur.policy) change.policy = policy;
  const fallback = $("pf-fallback").value;
  if (fallback !== cur.fallback) change.fallback = fallback;
  for (const field of ["model", "upstream"]) {
    const v = $("pf-" + field).value.trim();
    const now = cur[field] || "";
    if (v !== now) change[field] = v === "" ? null : v;
  }
  if (cur.stateful) {
    const w = $("pf-width").value.trim();
    const now = cur.width === null ? "" : String(cur.width);
    if (w !== now) change.width = w === "" ? null : Number(w);
  }
  if (Object.keys(change).length === 0) { showResult(box, false, "Nothing changed for " + role + ".", []); return; }
  const r = await api("PUT", "/admin/policies", { [role]: change });
  if (r.ok) {
    const push = r.data.push;
    const fields = Object.entries(change).map(([k, v]) => k + " = " + (v === null ? "none" : v)).join(", ");
    showResult(box, true, "Applied to " + role + ": " + fields + ". Pushed to "
      + (push.acked.length ? push.acked.join(", ") : "no sidecar")
      + (push.offline.length ? "; offline: " + push.offline.join(", ") : "") + ".", []);
    formRole = null;
    await refresh();
  } else {
    const p = problemsOf(r.data);
    showResult(box, false, "Refused: " + p.message, p.problems);
  }
}

async function setOverride(value) {
  const r = await api("PUT", "/admin/budget", { override: value });
  const box = $("budget-result");
  if (r.ok) { showResult(box, true, value === null ? "Override removed." : "Override set to " + value + ".", []); await refresh(); }
  else { const p = problemsOf(r.data); showResult(box, false, "Refused: " + p.message, p.problems); }
}

async function fleetAction(name, action) {
  const r = await api("POST", "/admin/fleet/" + encodeURIComponent(name) + "/" + action);
  if (!r.ok) alert(action + " " + name + " failed: " + problemsOf(r.data).message);
  await refresh();
}

async function jobAction(id, action) {
  const r = await api("POST", "/admin/jobs/" + encodeURIComponent(id) + "/" + action);
  const box = $("job-result");
  if (!r.ok) { const p = problemsOf(r.data); showResult(box, false, p.message, p.problems); }
  await refresh();
}

async function dropProject(name) {
  // Destructive: the operator confirms, naming the project.
  if (!confirm("Remove project " + name + " and all of its index? Its folder is not touched.")) return;
  const r = await api("DELETE", "/admin/projects/" + encodeURIComponent(name));
  const box = $("project-result");
  if (r.ok) showResult(box, true, "Dropped " + name + ".", []);
  else { const p = problemsOf(r.data); showResult(box, false, "Refused: " + p.message, p.problems); }
  await refresh();
}

async function setWatch(name, enabled) {
  const r = await api("PUT", "/admin/projects/" + encodeURIComponent(name) + "/watch", { enabled });
  const box = $("project-result");
  if (r.ok) showResult(box, true, "Live sync of " + name + (enabled ? " on." : " off."), []);
  else { const p = problemsOf(r.data); showResult(box, false, "Refused: " + p.message, p.problems); }
  await refresh();
}

async function startJob(ev) {
  ev.preventDefault();
  const body = { path: $("jf-path").value.trim(), project: $("jf-project").value.trim(), full: $("jf-full").checked };
  const r = await api("POST", "/admin/jobs", body);
  const box = $("job-result");
  if (r.ok) showResult(box, true, "Started job " + r.data.id + " for " + r.data.project + ".", []);
  else { const p = problemsOf(r.data); showResult(box, false, "Refused: " + p.message, p.problems); }
  await refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    $("token").value = "";
    $("login-error").hidden = true;
    start();
  });
  $("forget").addEventListener("click", () => logout(""));
  $("policy-form").addEventListener("submit", applyPolicy);
  $("budget-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("bf-override").value.trim();
    if (v !== "") setOverride(Number(v));
  });
  $("bf-clear").addEventListener("click", () => setOverride(null));
  $("job-form").addEventListener("submit", startJob);
  if (token()) start();
});
