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
  const message = d.message || "refused";
  // A problem the message already says is said once, in the message.
  return { message, problems: (d.problems || []).filter((p) => !message.includes(p)) };
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

function words(state) { return String(state).replace(/_/g, " "); }

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
    // An optional role nobody set up is neutral, not a fault: it says so in plain words.
    if (r.serving.length === 0 && r.configured === false) {
      serving.append(el("span", { class: "muted not-configured", text: "not configured",
        title: "optional: serve it from a sidecar, or push an OpenRouter key" }));
    } else if (r.serving.length === 0) serving.append(el("span", { class: "bad", text: "none" }));
    for (const p of r.providers) {
      const tag = el("span", {
        class: "provider " + p.kind + (p.serving ? " serving" : " idle"),
        "data-provider": p.id,
        title: (p.reason || p.health) + (p.cleared === false ? "; not cleared by the gate" : ""),
      }, el("span", { class: "pid", text: p.id }));
      // A cloud route is only as good as what its calls found: say it beside the id.
      if (p.kind === "cloud") tag.append(el("span", { class: "health health-" + p.health, text: words(p.health) }));
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
    tbody.append(el("tr", {}, el("td", { colspan: "11", class: "muted", text: "no sidecar has joined yet" })));
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
      cloudCell(s.cloud || []),
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

function cloudCell(routes) {
  const td = el("td", { class: "cloud-health" });
  if (routes.length === 0) { td.textContent = "—"; return td; }
  for (const r of routes) {
    td.append(el("div", { class: "health-" + r.state, "data-provider": r.provider,
      title: r.advice + (r.detail ? " — " + r.detail : "") + (r.at ? " (" + r.at + ")" : ""),
      text: words(r.state) + (routes.length > 1 ? ": " + r.provider : "") }));
  }
  return td;
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
      el("td", { text: j.state === "running" && j.eta_s !== null ? secs(j.eta_s) : "—" }),
      actions));
  }
}

function renderTokens(data) {
  const tbody = $("tokens").tBodies[0];
  tbody.replaceChildren();
  $("index-roots").textContent = data.index_roots.length ? data.index_roots.join(", ")
    : "no folder (FATHOM_INDEX_ROOTS is not set)";
  if (data.tokens.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: "5", class: "muted", text: "no MCP token yet" })));
  }
  for (const t of data.tokens) {
    tbody.append(el("tr", { "data-token": t.name },
      el("th", { text: t.name }),
      el("td", { text: t.projects ? t.projects.join(", ") : "every project" }),
      el("td", { text: t.can_index ? "yes" : "no" }),
      el("td", { text: t.created_at }),
      el("td", {}, el("button", { type: "button", class: "danger", text: "Revoke", onclick: () => {
        if (confirm("Revoke the MCP token " + t.name + "? Its next request is refused.")) revokeToken(t.name);
      } }))));
  }
}

function renderOAuth(data) {
  const tbody = $("oauth-mapping").tBodies[0];
  tbody.replaceChildren();
  const statics = data.static_mcp_tokens ? "static MCP tokens on" : "static MCP tokens off (OAuth only)";
  $("oauth-state").textContent = data.enabled
    ? "Issuer " + data.issuer + " for the resource " + data.resource + " (tokens checked " + (data.validation === "jwt" ? "as signed JWTs" : "by introspection") + "; scopes: "
      + (data.scopes.length ? data.scopes.join(" ") : "none required") + "); " + statics + "."
    : "OAuth is off (set FATHOM_OAUTH_ISSUER and FATHOM_OAUTH_RESOURCE); " + statics + ".";
  $("oauth-mapping").hidden = !data.enabled;
  const rules = data.enabled ? data.mapping.rules : [];
  if (data.enabled && rules.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: "4", class: "muted", text: "no rule: everyone who signs in is refused" })));
  }
  rules.forEach((rule, n) => {
    tbody.append(el("tr", {},
      el("td", { text: String(n + 1) }),
      el("td", { text: rule.describes }),
      el("td", { text: rule.projects ? rule.projects.join(", ") : "every project" }),
      el("td", { text: rule.can_index ? "yes" : "no" })));
  });
}

function renderAudit(entries) {
  const tbody = $("audit").tBodies[0];
  tbody.replaceChildren();
  if (entries.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: "4", class: "muted", text: "no admin action yet" })));
  }
  for (const e of entries.slice().reverse()) {
    tbody.append(el("tr", {},
      el("td", { text: e.at || "—" }),
      el("td", { text: e.who }),
      el("td", { class: "mono", text: e.what }),
      el("td", { class: e.outcome === "ok" ? "good" : "bad", text: e.outcome })));
  }
}

// A section the server could not read comes as {error: {message, problems}}: say so in its
// card, and render every other section as usual.
function renderSectionError(box, error) {
  box.hidden = !error;
  if (error) showResult(box, false, error.message, error.problems.filter((p) => p !== error.message));
}

function lastRunText(run) {
  if (!run) return "—";
  const skipped = Object.entries(run.skipped || {});
  const dirs = Object.values(run.skipped_dirs || {}).reduce((a, l) => a + l.length, 0);
  let text = run.outcome;
  if (run.files !== undefined && run.files !== null) text += ", " + run.files + " files, " + run.embedded + " embedded";
  if (skipped.length) text += "; skipped " + skipped.map(([k, n]) => k + " " + n).join(", ");
  if (dirs) text += "; " + dirs + " folder" + (dirs === 1 ? "" : "s") + " left out";
  return text;
}

function projectDetails(p) {
  const dl = el("dl");
  for (const [table, d] of Object.entries(p.details || {})) {
    const prov = Object.entries(d.provenance || {}).map(([k, n]) => {
      const [pid, verdict] = k.split("|");
      return pid + " (verdict " + verdict + "): " + n;
    }).join("; ");
    dl.append(el("dt", { text: table }), el("dd", { "data-table": table,
      text: d.rows + " rows, " + (d.model || "no model") + ", width " + (d.width === null ? "—" : d.width)
        + (d.shadow_rows !== null ? "; unfinished full run: " + d.shadow_rows + " rows (the next full run resumes it)" : "") }));
    dl.append(el("dt", { text: table + " provenance" }), el("dd", { class: "mono", text: prov || "—" }));
  }
  const run = p.last_run;
  if (run && run.skipped_dirs) {
    const named = Object.entries(run.skipped_dirs).map(([why, l]) => l.join(", ") + " (" + why + ")").join("; ");
    if (named) dl.append(el("dt", { text: "folders left out" }), el("dd", { class: "mono", text: named }));
  }
  if (p.watch && p.watch.last_error) dl.append(el("dt", { text: "sync error" }), el("dd", { class: "bad", text: p.watch.last_error }));
  if (p.git) gitDetails(dl, p.name, p.git);
  if (p.branch_of) dl.append(el("dt", { text: "branch" }), el("dd", { class: "mono",
    text: p.branch_of.branch + " of " + p.branch_of.project + " at " + short(p.branch_of.commit)
      + ": only the files that differ from the default branch" }));
  return dl;
}

function short(commit) { return commit ? String(commit).slice(0, 12) : "—"; }

// A project from git: its remote, its branches (each but the default can be untracked), its
// webhook (the secret was shown once, when it was added) and its syncs.
function gitDetails(dl, name, g) {
  dl.append(el("dt", { text: "remote" }), el("dd", { class: "mono", text: g.url }));
  const branches = el("dd", { class: "git-branches" });
  const order = Object.entries(g.branches).sort(([a], [b]) => (b === g.default) - (a === g.default) || a.localeCompare(b));
  for (const [branch, commit] of order) {
    const line = el("div", { "data-branch": branch }, el("span", { class: "mono",
      text: branch + (branch === g.default ? " (default)" : "") + " at " + short(commit) }));
    if (branch !== g.default) {
      line.append(el("button", { type: "button", class: "danger", text: "Untrack", onclick: () => untrackBranch(name, branch) }));
    }
    branches.append(line);
  }
  dl.append(el("dt", { text: "branches" }), branches);
  dl.append(el("dt", { text: "webhook" }), el("dd", { class: "mono",
    text: "POST " + location.origin + g.webhook + " (application/json, signed with the secret shown when it was added)" }));
  const s = g.sync;
  const last = s.last;
  let text = s.running ? "syncing now" : "idle";
  if (s.queued.length) text += "; pushed since: " + s.queued.join(", ");
  if (last) {
    text += "; last sync (" + last.trigger + ", " + (last.finished_at || last.started_at) + "): "
      + (last.error ? "failed: " + last.error
        : Object.entries(last.branches).map(([b, w]) => b + " " + w).join("; ") || "nothing to do");
  } else text += "; no sync since the server started";
  dl.append(el("dt", { text: "git sync" }), el("dd", { class: "git-sync" + (last && last.error ? " bad" : ""), text }));
}

function gitFollows(p) {
  if (p.branch_of) return "follows " + p.branch_of.project;
  const g = p.git;
  const how = "webhook" + (g.poll_s ? ", poll every " + secs(g.poll_s) : "");
  if (g.sync.running) return how + "; syncing";
  const last = g.sync.last;
  return how + (last ? "; last " + (last.error ? "failed" : "ok") + " " + (last.finished_at || "") : "");
}

function renderProjects(projects) {
  const tbody = $("projects").tBodies[0];
  tbody.replaceChildren();
  if (projects.length === 0) {
    tbody.append(el("tr", {}, el("td", { colspan: "8", class: "muted", text: "no project is indexed yet" })));
  }
  const select = $("sf-project");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "", text: "every project" }),
    ...projects.map((p) => el("option", { value: p.name, text: p.name })));
  select.value = projects.some((p) => p.name === chosen) ? chosen : "";
  const fromGit = projects.filter((p) => p.git).map((p) => p.name);
  const gitSelect = $("gb-project");
  const gitChosen = gitSelect.value;
  gitSelect.replaceChildren(...fromGit.map((n) => el("option", { value: n, text: n })));
  if (fromGit.includes(gitChosen)) gitSelect.value = gitChosen;
  $("branch-form").hidden = fromGit.length === 0;
  for (const p of projects) {
    const w = p.watch || {};
    const git = p.git || p.branch_of;
    const sync = git ? gitFollows(p) : w.enabled ? w.state + (w.last_sync ? ", last " + w.last_sync : "") : "off";
    const actions = el("td");
    const parent = p.branch_of && projects.find((q) => q.name === p.branch_of.project);
    if (parent && parent.git && p.branch_of.branch in parent.git.branches) {
      // A tracked branch's index goes with its branch, never on its own.
      actions.append(el("button", { type: "button", class: "danger", text: "Untrack",
        disabled: busy.has("untrack " + p.name) ? "" : null,
        onclick: () => untrackBranch(p.branch_of.project, p.branch_of.branch) }));
    } else if (p.branch_of) {
      // Indexed by a track that failed (or is still running): not tracked, so it may be dropped.
      actions.append(el("button", { type: "button", class: "danger", text: "Drop", onclick: () => dropProject(p.name) }));
    } else {
      if (p.git) actions.append(el("button", { type: "button", text: "Sync now",
        disabled: busy.has("sync " + p.name) ? "" : null, onclick: () => syncGit(p.name) }));
      else actions.append(el("button", { type: "button", text: w.enabled ? "Stop sync" : "Sync",
        onclick: () => setWatch(p.name, !w.enabled) }));
      actions.append(el("button", { type: "button", class: "danger", text: "Drop",
        onclick: () => dropProject(p.name) }));
    }
    const state = p.damaged ? " (damaged)" : p.indexing ? " (indexing)" : "";
    const syncError = git ? p.git && p.git.sync.last && p.git.sync.last.error : w.last_error;
    tbody.append(el("tr", { "data-project": p.name },
      el("th", { class: p.damaged ? "bad" : "", title: p.damaged || "", text: p.name + state }),
      el("td", { class: "num", text: String(p.tables.code || 0) }),
      el("td", { class: "num", text: String(p.tables.docs || 0) }),
      el("td", { text: p.last_indexed || "—" }),
      el("td", { class: "last-run" + (p.last_run && p.last_run.outcome !== "done" ? " warn" : ""), text: lastRunText(p.last_run) }),
      el("td", { class: "watch " + (syncError ? "bad" : ""), title: syncError || w.detail || "", text: sync }),
      el("td", { class: "mono", text: p.git ? "git " + p.git.url : p.branch_of ? "git, branch " + p.branch_of.branch : p.root || "—" }),
      actions));
    tbody.append(el("tr", { class: "project-details", "data-project-details": p.name },
      el("td", { colspan: "8" }, projectDetails(p))));
  }
}

function whyRanked(h) {
  const parts = [];
  if (h.match) parts.push("named by the query (" + h.match + ")");
  if (h.rerank_score !== null) parts.push("rerank " + fmt(h.rerank_score, 3) + (h.retrieval_rank ? " (was #" + h.retrieval_rank + ")" : ""));
  if (h.vector_rank !== null) parts.push("meaning #" + h.vector_rank + (h.cosine !== null ? " (cosine " + fmt(h.cosine, 3) + ")" : ""));
  if (h.keyword_rank !== null) parts.push("keywords #" + h.keyword_rank);
  if (h.fused_score !== null) parts.push("fused " + fmt(h.fused_score, 4));
  return parts.join("; ");
}

async function runSearch(ev) {
  ev.preventDefault();
  const body = { query: $("sf-query").value.trim(), table: $("sf-table").value, k: 10 };
  if ($("sf-project").value) body.project = $("sf-project").value;
  const box = $("search-result");
  const table = $("search-results");
  const tbody = table.tBodies[0];
  tbody.replaceChildren();
  const r = await api("POST", "/admin/search", body);
  if (!r.ok) {
    table.hidden = true;
    const p = problemsOf(r.data);
    showResult(box, false, "Refused: " + p.message, p.problems);
    return;
  }
  const d = r.data;
  showResult(box, true, d.results.length + " hit" + (d.results.length === 1 ? "" : "s") + " in " + d.table
    + " for \u201c" + d.query + "\u201d, ordered by " + d.ordered_by
    + (d.reranked ? " (reranked by " + d.reranker + ")" : "") + (d.reason ? "; " + d.reason : ""), d.notes);
  for (const h of d.results) {
    tbody.append(el("tr", { class: "hit" },
      el("td", { class: "num", text: String(h.rank) }),
      el("td", { class: "mono", text: (h.project ? h.project + "/" : "") + h.path + ":" + h.start_line + "-" + h.end_line }),
      el("td", { class: "mono", text: h.symbol || "—" }),
      el("td", { class: "why", text: whyRanked(h) }),
      el("td", { class: "snippet mono", text: h.snippet })));
  }
  table.hidden = d.results.length === 0;
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
    const [tokens, audit] = await Promise.all([api("GET", "/admin/tokens"), api("GET", "/admin/audit?limit=20")]);
    if (tokens.ok) renderTokens(tokens.data);
    if (audit.ok) renderAudit(audit.data.entries);
    const oauth = await api("GET", "/admin/oauth");
    if (oauth.ok) renderOAuth(oauth.data);
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
  if (r.ok) {
    showResult(box, true, value === null ? "Override removed." : "Override set to " + value + ".", []);
    $("bf-override").value = "";
    await refresh();
  }
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

function failed(box, r) {
  const p = problemsOf(r.data);
  showResult(box, false, "Refused: " + p.message, p.problems);
}

// Git actions under way (a sync, a track, an untrack): their buttons stay disabled until they
// answer, through the re-renders meanwhile, so a second click never queues a second one.
const busy = new Set();

async function whileBusy(key, box, work) {
  if (busy.has(key)) return;
  busy.add(key);
  try { await work(); }
  catch (e) { showResult(box, false, "The server could not be reached: " + e, []); }
  finally { busy.delete(key); await refresh(); }
}

function branchWords(done) {
  if (!done.commit) return "deleted on the remote: untracked";  // a report's "deleted" counts rows
  if (done.unchanged) return "unchanged at " + short(done.commit);
  return "indexed " + short(done.commit) + " (" + (done.embedded || 0) + " chunks embedded"
    + (done.carried ? ", " + done.carried + " carried from other branches" : "") + ")";
}

async function addGitProject(ev) {
  ev.preventDefault();
  const branches = $("gf-branches").value.split(",").map((b) => b.trim()).filter((b) => b);
  const poll = $("gf-poll").value.trim();
  const body = { name: $("gf-name").value.trim(), url: $("gf-url").value.trim(), branches,
    poll_s: poll === "" ? null : Number(poll) };
  const box = $("git-result");
  const button = $("gf-add");
  showResult(box, true, "Cloning " + body.url + " and indexing " + (branches.length ? branches.join(", ") : "its default branch")
    + " as " + body.name + "… (this answers when every branch is indexed; the Index jobs card shows the progress)", []);
  button.disabled = true;
  await whileBusy("add", box, async () => {
    const r = await api("POST", "/admin/projects/git", body);
    if (!r.ok) { failed(box, r); return; }
    const d = r.data;
    const embedded = Object.values(d.reports).reduce((a, rep) => a + (rep.embedded || 0), 0);
    showResult(box, true, "Added " + d.project + " from " + d.url + ": "
      + Object.entries(d.branches).map(([b, c]) => b + (b === d.default ? " (default)" : "") + " at " + short(c)).join(", ")
      + "; " + embedded + " chunks embedded. Give the forge this push webhook (content type application/json); its secret is shown once, copy it now:", []);
    box.append(el("p", { class: "mono", text: "POST " + location.origin + d.webhook }));
    box.append(el("p", {}, el("code", { class: "mono secret", text: d.webhook_secret })));
    for (const id of ["gf-name", "gf-url", "gf-branches", "gf-poll"]) $(id).value = "";
  });
  button.disabled = false;
}

async function trackBranch(ev) {
  ev.preventDefault();
  const project = $("gb-project").value;
  const branch = $("gb-branch").value.trim();
  const box = $("git-result");
  const button = $("branch-form").querySelector("button");
  showResult(box, true, "Fetching " + branch + " of " + project + " and indexing what differs…", []);
  button.disabled = true;
  await whileBusy("track", box, async () => {
    const r = await api("POST", "/admin/projects/" + encodeURIComponent(project) + "/branches", { branch });
    if (r.ok) {
      showResult(box, true, "Tracking " + branch + " of " + project + ": " + branchWords(r.data) + ".", []);
      $("gb-branch").value = "";
    } else failed(box, r);
  });
  button.disabled = false;
}

async function untrackBranch(project, branch) {
  if (!confirm("Stop tracking " + branch + " of " + project + "? Its index is removed.")) return;
  const box = $("git-result");
  await whileBusy("untrack " + project + "@" + branch, box, async () => {
    const r = await api("DELETE", "/admin/projects/" + encodeURIComponent(project) + "/branches/"
      + branch.split("/").map(encodeURIComponent).join("/"));
    if (r.ok) showResult(box, true, "Untracked " + branch + " of " + project + ".", []);
    else failed(box, r);
  });
}

async function syncGit(project) {
  const box = $("git-result");
  showResult(box, true, "Fetching " + project + " and re-indexing what changed…", []);
  await whileBusy("sync " + project, box, async () => {
    const r = await api("POST", "/admin/projects/" + encodeURIComponent(project) + "/sync");
    if (r.ok) {
      const lines = Object.entries(r.data.branches).map(([b, done]) => b + " " + branchWords(done));
      showResult(box, true, "Synced " + project + ": " + (lines.join("; ") || "nothing to do") + ".", []);
    } else failed(box, r);
  });
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

async function createToken(ev) {
  ev.preventDefault();
  const projects = $("tf-projects").value.split(",").map((p) => p.trim()).filter((p) => p);
  const body = { name: $("tf-name").value.trim(), projects: projects.length ? projects : null, can_index: $("tf-index").checked };
  const r = await api("POST", "/admin/tokens", body);
  const box = $("token-result");
  if (r.ok) {
    // Shown once, here only: the server keeps its hash.
    showResult(box, true, "MCP token for " + r.data.name + " (shown once; copy it now):", []);
    box.append(el("p", {}, el("code", { class: "mono secret", text: r.data.token })));
    box.append(el("p", { class: "muted", text: "claude mcp add --transport http fathom " + location.origin
      + "/mcp --header \"Authorization: Bearer " + r.data.token + "\"" }));
    $("tf-name").value = "";
    $("tf-projects").value = "";
    $("tf-index").checked = false;
  } else {
    const p = problemsOf(r.data);
    showResult(box, false, "Refused: " + p.message, p.problems);
  }
  await refresh();
}

async function revokeToken(name) {
  const r = await api("POST", "/admin/tokens/" + encodeURIComponent(name) + "/revoke");
  const box = $("token-result");
  if (r.ok) showResult(box, true, "Revoked " + name + ".", []);
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
  $("token-form").addEventListener("submit", createToken);
  $("git-form").addEventListener("submit", addGitProject);
  $("branch-form").addEventListener("submit", trackBranch);
  $("search-form").addEventListener("submit", runSearch);
  if (token()) start();
});
