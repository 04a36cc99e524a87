#!/usr/bin/env node
// Offline check of Grafana dashboard files against Grafana's published dashboard schema, plus a
// lint for what a schema cannot see.
//
// Usage: node scripts/check_dashboard.mjs DASHBOARD.json...
//   The pinned packages come from target/dashboard-env (scripts/dashboard-env.sh creates it), or
//   from the directory in DASHBOARD_ENV.
//
// 1. Schema: the file is type-checked, with the pinned TypeScript compiler, as object literals of
//    the types in scripts/dashboard/schema.ts, i.e. @grafana/schema (Grafana's own types, generated
//    from its CUE kinds) with each panel's options bound to its plugin's published types and targets
//    to the published Prometheus query: the top-level keys, each top-level value, and each panel
//    (the compiler hides an unknown key behind an error elsewhere in the same literal). Object
//    literals get TypeScript's excess-property check at every depth, so an unknown or misspelt
//    field fails, as do missing required fields, wrong types and values outside an enum.
//    schemaVersion must be the one the pinned schema describes.
// 2. Lint: uid and title set, no numeric id; every panel but a row has a datasource that names a
//    datasource variable of the dashboard, and at least one target with a non-empty expr and a
//    unique refId; panel ids are unique; gridPos fits the 24-column grid, panels do not overlap,
//    and they are listed in layout order; every $variable used is defined; every metric name in an
//    expr is one the controller exports (METRICS below) and every label matcher one of its labels;
//    every function is a PromQL function.
// Prints every problem (file:line:col, the panel and the field), or one OK line per file; exits 1
// on any problem, 2 on a usage error.

import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..");
const SCHEMA_TS = path.join(here, "dashboard", "schema.ts");

// The metrics trainyard's controller exports (all with the trainyard_ prefix), their kind and
// their labels. A histogram is queried through its _bucket (with le), _sum and _count series.
const METRICS = {
  trainyard_queue_pending: { kind: "gauge", labels: ["queue"] },
  trainyard_admissions_total: { kind: "counter", labels: [] },
  trainyard_preemptions_total: { kind: "counter", labels: [] },
  trainyard_launch_latency_seconds: { kind: "histogram", labels: [] },
  trainyard_admission_latency_seconds: { kind: "histogram", labels: [] },
  trainyard_pending: { kind: "gauge", labels: ["queue", "reason"] },
  trainyard_queue_used_gpus: { kind: "gauge", labels: ["queue"] },
  trainyard_queue_nominal_gpus: { kind: "gauge", labels: ["queue"] },
  trainyard_cluster_gpus: { kind: "gauge", labels: [] },
  trainyard_cluster_free_gpus: { kind: "gauge", labels: [] },
  trainyard_worker_gpus: { kind: "gauge", labels: ["cluster"] },
  trainyard_worker_free_gpus: { kind: "gauge", labels: ["cluster"] },
  trainyard_hosts_eligible: { kind: "gauge", labels: [] },
  trainyard_hosts_unusable: { kind: "gauge", labels: [] },
  trainyard_foreign_gpus: { kind: "gauge", labels: [] },
  trainyard_cycle_duration_seconds: { kind: "histogram", labels: [] },
  trainyard_reconcile_errors_total: { kind: "counter", labels: [] },
  trainyard_leader: { kind: "gauge", labels: [] },
  trainyard_engine_builds_total: { kind: "counter", labels: [] },
  trainyard_slurm_up: { kind: "gauge", labels: [] },
};
// Labels Prometheus adds when it scrapes the controller (kubernetes service discovery).
const TARGET_LABELS = ["job", "instance", "namespace", "pod", "service", "container", "endpoint"];
// Series name -> labels a matcher may use.
const SERIES = new Map();
for (const [name, { kind, labels }] of Object.entries(METRICS)) {
  const all = [...labels, ...TARGET_LABELS];
  if (kind === "histogram") {
    SERIES.set(`${name}_bucket`, [...all, "le"]);
    SERIES.set(`${name}_sum`, all);
    SERIES.set(`${name}_count`, all);
  } else {
    SERIES.set(name, all);
  }
}

const AGGREGATORS = new Set(["sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
  "bottomk", "topk", "quantile", "limitk", "limit_ratio"]);
const FUNCTIONS = new Set(["abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
  "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time",
  "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg", "delta", "deriv",
  "double_exponential_smoothing", "end", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
  "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta",
  "increase", "info", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
  "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear",
  "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh",
  "sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt", "start", "stddev_over_time",
  "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year"]);
// Followed by a parenthesised list of label names.
const LABEL_LISTS = new Set(["by", "without", "on", "ignoring", "group_left", "group_right"]);
const KEYWORDS = new Set(["and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "Inf", "NaN"]);
// Variables Grafana defines itself.
const BUILTIN_VARS = new Set(["__interval", "__interval_ms", "__rate_interval", "__rate_interval_ms", "__range",
  "__range_s", "__range_ms", "__from", "__to", "__now", "__dashboard", "__user", "__org", "__name", "__timezone",
  "__all_variables", "__url_time_range", "__auto"]);
const VAR_RE = /\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]/g;

function fail(message) {
  console.error(message);
  process.exit(2);
}

const envDir = path.resolve(process.env.DASHBOARD_ENV || path.join(root, "target", "dashboard-env"));
const modules = path.join(envDir, "node_modules");
if (!fs.existsSync(path.join(modules, "typescript"))) {
  fail(`${envDir}: no pinned packages; run scripts/dashboard-env.sh first`);
}
const require = createRequire(path.join(envDir, "package.json"));
const ts = require("typescript");
const grafanaSchema = require("@grafana/schema");
const version = (name) => JSON.parse(fs.readFileSync(path.join(modules, name, "package.json"), "utf8")).version;
const SCHEMA_VERSION = grafanaSchema.defaultDashboard.schemaVersion;
const USING = `@grafana/schema ${version("@grafana/schema")}, @grafana/grafana-foundation-sdk `
  + `${version("@grafana/grafana-foundation-sdk")}, typescript ${ts.version}`;

// ---------------------------------------------------------------------------------------------
// 1. The schema, through the TypeScript compiler.

const COMPILER_OPTIONS = {
  strict: true,
  noEmit: true,
  skipLibCheck: true, // the published declaration files are theirs; scripts/dashboard/schema.ts is checked
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.CommonJS,
  moduleResolution: ts.ModuleResolutionKind.Node10,
  lib: ["lib.es2022.d.ts"],
  types: [],
  baseUrl: modules,
  paths: { "*": ["*"] },
};

/**
 * Type-checks every file in one program; returns {file: [problems]}. Each file is checked in parts
 * (see the end of scripts/dashboard/schema.ts): the compiler reports an unknown field of an object
 * literal only while no other field of it has an error, so one literal for the whole file could
 * hide a misspelt top-level key behind an error in a panel.
 */
function schemaCheck(files) {
  const virtual = new Map(); // virtual .ts path -> {file, text, parsed, json: its AST, source: the .ts, segments}
  files.forEach((f, i) => {
    const json = ts.parseJsonText(f.file, f.text);
    const top = json.statements[0]?.expression;
    const parts = [];
    if (top && ts.isObjectLiteralExpression(top)) {
      parts.push(["Keys<Dashboard>", top]);
      for (const prop of top.properties) {
        if (!ts.isPropertyAssignment(prop)) continue;
        if (prop.name.text === "panels" && ts.isArrayLiteralExpression(prop.initializer)) {
          for (const panel of prop.initializer.elements) parts.push(["Panel | RowPanel", panel]);
        } else {
          parts.push([`Field<${JSON.stringify(prop.name.text)}>`, prop.initializer]);
        }
      }
    } else if (top) {
      parts.push(["Dashboard", top]);
    }
    let source = `import type { Dashboard, Field, Keys, Panel, RowPanel } from ${JSON.stringify(SCHEMA_TS.replace(/\.ts$/, ""))};\n`;
    const segments = [];
    parts.forEach(([type, node], k) => {
      // An error on the declaration (a missing field, a wrong scalar) is the value's.
      const declaration = source.length;
      source += `export const part${k}: ${type} =\n`;
      const jsonStart = node.getStart(json);
      segments.push({ declaration, start: source.length, jsonStart, length: node.end - jsonStart });
      source += `${f.text.slice(jsonStart, node.end)};\n`;
    });
    virtual.set(path.join(envDir, "check", `dashboard${i}.ts`), { ...f, json, source, segments });
  });
  const host = ts.createCompilerHost(COMPILER_OPTIONS);
  const sourceOf = (name) => virtual.get(path.resolve(name))?.source;
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, lang, ...rest) => {
    const text = sourceOf(name);
    return text !== undefined ? ts.createSourceFile(name, text, lang, true) : getSourceFile.call(host, name, lang, ...rest);
  };
  host.fileExists = (name) => virtual.has(path.resolve(name)) || fileExists.call(host, name);
  host.readFile = (name) => sourceOf(name) ?? readFile.call(host, name);
  const program = ts.createProgram([...virtual.keys()], COMPILER_OPTIONS, host);
  const out = Object.fromEntries(files.map((f) => [f.file, []]));
  const setup = [];
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const message = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    const v = d.file && virtual.get(path.resolve(d.file.fileName));
    const seg = v?.segments.find((s) => s.declaration <= d.start && d.start <= s.start + s.length);
    if (!seg) {
      const where = d.file ? `${path.relative(root, d.file.fileName)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}` : "typescript";
      setup.push(`${where}: ${message}`);
      continue;
    }
    const offset = seg.jsonStart + Math.max(0, d.start - seg.start);
    const { line, col } = lineCol(v.text, offset);
    const steps = jsonPath(v.json, offset);
    out[v.file].push(`${v.file}:${line}:${col}: ${describePath(v.parsed, steps)}: schema: ${tidy(message)}`);
  }
  if (setup.length) {
    fail(`the schema check itself does not compile (${USING}):\n${setup.join("\n")}`);
  }
  return out;
}

function lineCol(text, offset) {
  const before = text.slice(0, Math.max(0, offset));
  const lines = before.split("\n");
  return { line: lines.length, col: lines[lines.length - 1].length + 1 };
}

/** The JSON path (keys and indices) of the innermost value around an offset of the JSON text. */
function jsonPath(json, pos) {
  const inside = (n) => n.getStart(json) <= pos && pos < n.end;
  let node = json.statements[0]?.expression;
  const steps = [];
  while (node) {
    let next = null;
    if (ts.isObjectLiteralExpression(node)) {
      for (const p of node.properties) {
        if (inside(p) && ts.isPropertyAssignment(p)) {
          steps.push(p.name.text);
          next = pos >= p.initializer.getStart(json) ? p.initializer : null;
        }
      }
    } else if (ts.isArrayLiteralExpression(node)) {
      node.elements.forEach((e, i) => {
        if (inside(e)) {
          steps.push(i);
          next = e;
        }
      });
    }
    node = next;
  }
  return steps;
}

/** "panel 12 "Title" (panels.3) at options.legend" for a JSON path. */
function describePath(dash, steps) {
  let i = 0;
  let panel = null;
  let where = "";
  if (steps[0] === "panels" && typeof steps[1] === "number") {
    panel = dash?.panels?.[steps[1]];
    where = `panels.${steps[1]}`;
    i = 2;
    if (steps[2] === "panels" && typeof steps[3] === "number") {
      panel = panel?.panels?.[steps[3]];
      where += `.panels.${steps[3]}`;
      i = 4;
    }
  }
  const rest = steps.slice(i).join(".");
  if (!panel) return rest || "(top)";
  return `${panelName(panel, where)}${rest ? ` at ${rest}` : ""}`;
}

function panelName(panel, where) {
  const id = panel && panel.id !== undefined ? ` ${panel.id}` : "";
  const title = panel && typeof panel.title === "string" ? ` ${JSON.stringify(panel.title)}` : "";
  return `${panel?.type === "row" ? "row" : "panel"}${id}${title} (${where})`;
}

/** Long compiler chains: keep each line short, and at most six of them. */
function tidy(message) {
  const lines = message.split("\n").map((l) => l.trim()).filter(Boolean)
    .map((l) => (l.length > 240 ? `${l.slice(0, 237)}...` : l));
  const kept = lines.length > 6 ? [...lines.slice(0, 3), "...", ...lines.slice(-2)] : lines;
  return kept.join("\n    ");
}

// ---------------------------------------------------------------------------------------------
// 2. The lint.

function lint(file, text, dash) {
  const problems = [];
  const at = (where, message) => problems.push(`${file}: ${where}: ${message}`);
  if (!dash || typeof dash !== "object" || Array.isArray(dash)) {
    at("(top)", "the dashboard must be a JSON object");
    return problems;
  }
  if (dash.schemaVersion !== SCHEMA_VERSION) {
    at("schemaVersion", `is ${JSON.stringify(dash.schemaVersion)}, but the pinned @grafana/schema `
      + `${version("@grafana/schema")} describes schemaVersion ${SCHEMA_VERSION}`);
  }
  for (const key of ["uid", "title"]) {
    if (typeof dash[key] !== "string" || !dash[key].trim()) at(key, "must be a non-empty string");
  }
  if (dash.id !== undefined && dash.id !== null) {
    at("id", "must be null or absent: Grafana assigns it; a provisioned dashboard is keyed by uid");
  }

  const vars = new Map();
  const list = Array.isArray(dash.templating?.list) ? dash.templating.list : [];
  list.forEach((v, i) => {
    if (!v || typeof v.name !== "string") return;
    if (vars.has(v.name)) at(`templating.list.${i}`, `variable ${v.name} is defined twice`);
    vars.set(v.name, v);
  });
  const checkVars = (where, value) => {
    if (typeof value !== "string") return;
    for (const m of value.matchAll(VAR_RE)) {
      const name = m[1] ?? m[2] ?? m[3];
      if (!vars.has(name) && !BUILTIN_VARS.has(name)) at(where, `uses $${name}, which is no variable of the dashboard`);
    }
  };
  // A datasource is a reference to a datasource variable, so the dashboard works with any Prometheus.
  const checkDatasource = (where, ds) => {
    if (!ds || typeof ds !== "object" || typeof ds.uid !== "string" || !ds.uid) {
      at(where, "has no datasource (want {\"type\": \"prometheus\", \"uid\": \"${datasource}\"})");
      return;
    }
    const m = /^\$\{([A-Za-z0-9_]+)\}$|^\$([A-Za-z0-9_]+)$/.exec(ds.uid);
    const v = m && vars.get(m[1] ?? m[2]);
    if (!m) {
      at(`${where}.uid`, `is the fixed uid ${JSON.stringify(ds.uid)}; use a datasource variable such as \${datasource}`);
    } else if (!v) {
      at(`${where}.uid`, `names ${ds.uid}, which is no variable of the dashboard`);
    } else if (v.type !== "datasource" || v.query !== "prometheus") {
      at(`${where}.uid`, `names ${ds.uid}, which is not a datasource variable of type prometheus`);
    } else if (ds.type !== "prometheus") {
      at(`${where}.type`, `is ${JSON.stringify(ds.type)}, want "prometheus"`);
    }
  };
  list.forEach((v, i) => {
    if (v?.type === "query") {
      checkDatasource(`templating.list.${i} (${v.name}).datasource`, v.datasource);
      const query = typeof v.query === "string" ? v.query : v.query?.query;
      checkVars(`templating.list.${i} (${v.name}).query`, query);
      if (typeof query === "string") checkVariableQuery(`templating.list.${i} (${v.name}).query`, query, at);
    }
  });

  const top = Array.isArray(dash.panels) ? dash.panels : [];
  const ids = new Map();
  const layouts = [{ name: "panels", items: [] }];
  top.forEach((p, i) => {
    const where = `panels.${i}`;
    visitPanel(p, where, layouts[0].items);
    if (p?.type === "row") {
      const nested = Array.isArray(p.panels) ? p.panels : [];
      if (!p.collapsed && nested.length) {
        at(panelName(p, where), "an expanded row must list its panels after it in panels, not inside it");
      }
      const layout = { name: `${where}.panels`, items: [] };
      nested.forEach((q, j) => visitPanel(q, `${where}.panels.${j}`, layout.items));
      layouts.push(layout);
    }
  });

  function visitPanel(p, where, layout) {
    if (!p || typeof p !== "object") {
      at(where, "is not a panel object");
      return;
    }
    const name = panelName(p, where);
    if (!Number.isInteger(p.id) || p.id < 1) {
      at(name, "needs an id, a positive integer");
    } else if (ids.has(p.id)) {
      at(name, `has the id ${p.id} of ${ids.get(p.id)}`);
    } else {
      ids.set(p.id, name);
    }
    if (typeof p.title !== "string" || !p.title.trim()) at(name, "needs a title");
    checkVars(`${name} at title`, p.title);
    const g = p.gridPos;
    const ints = g && ["x", "y", "w", "h"].every((k) => Number.isInteger(g[k]));
    if (!ints) {
      at(name, "needs a gridPos with integer x, y, w and h");
    } else if (g.x < 0 || g.y < 0 || g.w < 1 || g.h < 1 || g.x + g.w > 24) {
      at(`${name} at gridPos`, `${JSON.stringify(g)} does not fit the 24-column grid`);
    } else if (p.type === "row" && (g.x !== 0 || g.w !== 24 || g.h !== 1)) {
      at(`${name} at gridPos`, "a row spans the grid: x 0, w 24, h 1");
    } else {
      for (const other of layout) {
        const o = other.g;
        if (g.x < o.x + o.w && o.x < g.x + g.w && g.y < o.y + o.h && o.y < g.y + g.h) {
          at(`${name} at gridPos`, `${JSON.stringify(g)} overlaps ${other.name} ${JSON.stringify(o)}`);
        }
      }
      const last = layout[layout.length - 1];
      if (last && (g.y < last.g.y || (g.y === last.g.y && g.x < last.g.x))) {
        at(name, `is listed after ${last.name}, which comes later on the grid: keep panels in layout order (y, then x)`);
      }
      layout.push({ name, g });
    }
    if (p.type === "row") return;

    checkDatasource(`${name} at datasource`, p.datasource);
    checkVars(`${name} at datasource.uid`, p.datasource?.uid);
    const targets = Array.isArray(p.targets) ? p.targets : [];
    if (!targets.length) at(name, "has no targets");
    const refIds = new Set();
    targets.forEach((t, k) => {
      const tw = `${name} at targets.${k}`;
      if (!t || typeof t !== "object") {
        at(tw, "is not a query object");
        return;
      }
      if (typeof t.refId !== "string" || !t.refId) at(tw, "needs a refId");
      else if (refIds.has(t.refId)) at(`${tw}.refId`, `${t.refId} is used twice in the panel`);
      refIds.add(t.refId);
      if (typeof t.expr !== "string" || !t.expr.trim()) {
        at(`${tw}.expr`, "is empty");
      } else {
        checkVars(`${tw}.expr`, t.expr);
        checkExpr(`${tw}.expr`, t.expr, at);
      }
      if (t.datasource !== undefined && JSON.stringify(t.datasource) !== JSON.stringify(p.datasource)) {
        at(`${tw}.datasource`, `${JSON.stringify(t.datasource)} differs from the panel's ${JSON.stringify(p.datasource)}`);
      }
    });
  }
  return problems;
}

/** A Prometheus query variable: label_values(SELECTOR, LABEL), label_values(LABEL), label_names(),
 *  metrics(REGEX) or query_result(EXPR); the selector or expression is checked like a target's. */
function checkVariableQuery(where, query, at) {
  const q = query.trim();
  let m;
  if ((m = /^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$/s.exec(q))) {
    checkExpr(where, m[1], at);
    const metric = /^\s*([A-Za-z_:][A-Za-z0-9_:]*)/.exec(m[1])?.[1];
    const labels = metric && SERIES.get(metric);
    if (labels && !labels.includes(m[2])) at(where, `${metric} has no label ${m[2]}`);
  } else if ((m = /^query_result\((.+)\)$/s.exec(q))) {
    checkExpr(where, m[1], at);
  } else if (!/^(label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)|label_names\(\s*\)|metrics\(.*\))$/s.test(q)) {
    at(where, "is none of label_values(), label_names(), metrics() or query_result()");
  }
}

/** Metric names, label matchers and functions of one PromQL expression. */
function checkExpr(where, expr, at) {
  const tokens = tokenize(expr);
  for (let k = 0; k < tokens.length; k++) {
    const t = tokens[k];
    const next = tokens[k + 1];
    if (t.kind === "selector") {
      at(where, `the selector {${t.text}} names no metric: write the metric name before it`);
      continue;
    }
    if (t.kind !== "ident") continue;
    if (LABEL_LISTS.has(t.text) && next?.text === "(") {
      while (k < tokens.length && tokens[k].text !== ")") k++;
      continue;
    }
    if (AGGREGATORS.has(t.text) || FUNCTIONS.has(t.text)) continue;
    if (KEYWORDS.has(t.text)) continue;
    if (next?.text === "(") {
      at(where, `${t.text}() is no PromQL function or aggregation`);
      continue;
    }
    const labels = SERIES.get(t.text);
    if (!labels) {
      const base = METRICS[t.text];
      at(where, base?.kind === "histogram"
        ? `${t.text} is a histogram: query ${t.text}_bucket, _sum or _count`
        : `${t.text} is no metric trainyard exports (see METRICS in scripts/check_dashboard.mjs)`);
    }
    if (next?.kind === "selector") {
      k++;
      for (const m of next.text.matchAll(/([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)/g)) {
        if (labels && !labels.includes(m[1])) at(where, `${t.text} has no label ${m[1]}`);
      }
    }
  }
}

function tokenize(expr) {
  const tokens = [];
  let i = 0;
  // The index after the string literal that starts at `start`.
  const endOfString = (start) => {
    const q = expr[start];
    let j = start + 1;
    while (j < expr.length && expr[j] !== q) j += expr[j] === "\\" && q !== "`" ? 2 : 1;
    return j + 1;
  };
  while (i < expr.length) {
    const c = expr[i];
    if (/\s/.test(c)) {
      i++;
    } else if (c === "#") {
      while (i < expr.length && expr[i] !== "\n") i++;
    } else if (c === '"' || c === "'" || c === "`") {
      i = endOfString(i);
      tokens.push({ kind: "string" });
    } else if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      let j = i + 1;
      while (j < expr.length && expr[j] !== close) {
        j = expr[j] === '"' || expr[j] === "'" || expr[j] === "`" ? endOfString(j) : j + 1;
      }
      tokens.push({ kind: c === "{" ? "selector" : "range", text: expr.slice(i + 1, j) });
      i = j + 1;
    } else if (c === "$") {
      const m = /^\$\{[^}]*\}|^\$[A-Za-z0-9_]+/.exec(expr.slice(i));
      i += m ? m[0].length : 1;
      tokens.push({ kind: "variable" });
    } else if (/[A-Za-z_:]/.test(c)) {
      const m = /^[A-Za-z_:][A-Za-z0-9_:]*/.exec(expr.slice(i));
      tokens.push({ kind: "ident", text: m[0] });
      i += m[0].length;
    } else if (/[0-9.]/.test(c)) {
      const m = /^[0-9.][0-9A-Za-z_.]*/.exec(expr.slice(i));
      tokens.push({ kind: "number" });
      i += m[0].length;
    } else {
      tokens.push({ kind: "op", text: c });
      i++;
    }
  }
  return tokens;
}

// ---------------------------------------------------------------------------------------------

const args = process.argv.slice(2);
if (!args.length || args.some((a) => a.startsWith("-"))) {
  fail("usage: node scripts/check_dashboard.mjs DASHBOARD.json...");
}
const files = [];
let failed = 0;
for (const file of args) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    fail(`${file}: ${e.message}`);
  }
  try {
    files.push({ file, text, parsed: JSON.parse(text) });
  } catch (e) {
    console.log(`${file}: not JSON: ${e.message}`);
    console.log(`FAIL: ${file}`);
    failed++;
  }
}
const schemaProblems = files.length ? schemaCheck(files) : {};
for (const { file, text, parsed } of files) {
  const problems = [...schemaProblems[file], ...lint(file, text, parsed)];
  if (problems.length) {
    console.log(problems.join("\n"));
    console.log(`FAIL: ${problems.length} problem(s) in ${file}`);
    failed++;
    continue;
  }
  const all = (parsed.panels ?? []).flatMap((p) => (p.type === "row" ? [p, ...(p.panels ?? [])] : [p]));
  const targets = all.flatMap((p) => p.targets ?? []);
  const used = new Set(targets.flatMap((t) => tokenize(t.expr).filter((x) => SERIES.has(x.text)).map((x) => x.text)));
  console.log(`OK: ${file}: schemaVersion ${parsed.schemaVersion}, ${all.filter((p) => p.type === "row").length} rows, `
    + `${all.filter((p) => p.type !== "row").length} panels, ${targets.length} queries over ${used.size} series `
    + `(${USING})`);
}
process.exit(failed ? 1 : 0);
