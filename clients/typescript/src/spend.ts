/**
 * Spend budgets (governor/spend.py): dollars per window for the fleet and
 * per tenant, reserved before a call and settled after it by the library's
 * spend function, the same as the Python client's. This client computes
 * rolling windows and calendar windows (day, ISO week, month) in UTC; a
 * calendar window in another time zone is the Python client's
 * (zoneinfo) and is refused here.
 */
import { ConfigError, SpendExhausted } from "./errors.js";

/** A dollar budget, as governor.spend.SpendBudget. */
export interface SpendBudget {
  readonly name: string;
  /** "10m", "1h", "30s" (rolling, 10 slots), or "day", "week", "month" (UTC) */
  readonly window: string;
  /** dollars per window for the fleet (undefined: no fleet limit) */
  readonly limit?: number;
  /** tenant -> dollars per window */
  readonly tenants?: Readonly<Record<string, number>>;
  /** the soft threshold's share of a limit (default 0.8; 0: none) */
  readonly threshold?: number;
  /** refuse past the threshold until an operator approves more */
  readonly pause?: boolean;
  /** what it counts: "usd" (the default; limits in dollars), "requests" or "tokens" (whole counts) */
  readonly unit?: "usd" | "requests" | "tokens";
}

const NAME = /^[A-Za-z0-9_.-]{1,64}$/;
const DURATION = /^(\d+(?:\.\d+)?)(s|m|h|d)$/;
const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };
const SLOTS = 10;
const DAY_MS = 86_400_000;

function micros(what: string, dollars: number): number {
  if (!Number.isFinite(dollars) || dollars < 0 || dollars > 9e9) throw new ConfigError(`${what} must be dollars in [0, 9e9], got ${dollars}`);
  return Math.floor(Math.round(dollars * 1e12) / 1e6);
}

/** The start of the UTC calendar window holding `t` (ms), and the next window's. */
function calendar(kind: string, t: number): [number, number] {
  const d = new Date(t);
  const y = d.getUTCFullYear(), m = d.getUTCMonth(), day = d.getUTCDate();
  if (kind === "day") {
    const start = Date.UTC(y, m, day);
    return [start, start + DAY_MS];
  }
  if (kind === "week") {
    const start = Date.UTC(y, m, day) - ((d.getUTCDay() + 6) % 7) * DAY_MS; // ISO: from Monday
    return [start, start + 7 * DAY_MS];
  }
  return [Date.UTC(y, m, 1), Date.UTC(y, m + 1, 1)];
}

/** The window's label and its script form at `nowMs` (governor.spend.Window.label and spec). */
export function windowArgs(window: string, nowMs: number): [label: string, spec: string] {
  const [kind, zone] = window.trim().split("@");
  if (kind === "day" || kind === "week" || kind === "month") {
    if (zone !== undefined && zone !== "UTC") {
      throw new ConfigError(`window ${JSON.stringify(window)}: this client computes calendar windows in UTC only; use the Python client for time zone ${zone}`);
    }
    const [start, next] = calendar(kind, nowMs);
    const [before] = calendar(kind, start - 1);
    const [, after] = calendar(kind, next);
    return [`${kind}@UTC`, `c:${before}:${start}:${next}:${after}`];
  }
  const found = DURATION.exec(kind ?? "");
  if (found === null || zone !== undefined) throw new ConfigError(`window ${JSON.stringify(window)}: use a duration ('10m', '1h', '30s') or day, week, month`);
  const length = Math.round(Number(found[1]) * UNITS[found[2]!]! * 1000);
  if (length < 1000 || length > 31 * DAY_MS || length % SLOTS !== 0) throw new ConfigError(`window ${window}: a rolling window lasts 1 s to 31 days, in whole ms per slot`);
  return [`rolling:${length}:${SLOTS}`, `r:${length / SLOTS}:${SLOTS}`];
}

/** The spend function's arguments for `budgets` at `nowMs`: the count, then 8 per budget. */
export function budgetsArgs(budgets: readonly SpendBudget[], nowMs: number): string[] {
  const out = [String(budgets.length)];
  const names = new Set<string>();
  for (const b of budgets) {
    if (!NAME.test(b.name) || names.has(b.name)) throw new ConfigError(`spend budget name ${JSON.stringify(b.name)} is invalid or repeated: 1-64 of letters, digits and _ . -`);
    names.add(b.name);
    if (b.limit === undefined && (b.tenants === undefined || Object.keys(b.tenants).length === 0)) {
      throw new ConfigError(`spend budget ${b.name}: give a limit, tenants' limits, or both`);
    }
    const threshold = b.threshold ?? 0.8;
    if (!(threshold >= 0 && threshold <= 1)) throw new ConfigError(`spend budget ${b.name}: threshold must be a share in [0, 1], got ${threshold}`);
    const unit = b.unit ?? "usd";
    if (!["usd", "requests", "tokens"].includes(unit)) throw new ConfigError(`spend budget ${b.name}: unit must be usd, requests or tokens, got ${unit}`);
    const amount = (what: string, v: number): number => {
      if (unit === "usd") return micros(what, v);
      if (!Number.isInteger(v) || v < 0) throw new ConfigError(`${what} must be a whole number of ${unit}, got ${v}`);
      return v;
    };
    const tenants = Object.entries(b.tenants ?? {}).sort(([a], [c]) => (a < c ? -1 : a > c ? 1 : 0))
      .map(([t, v]) => `${t}=${amount(`the limit of tenant ${t}`, v)}`).join(",");
    const [label, spec] = windowArgs(b.window, nowMs);
    out.push(b.name, String(b.limit === undefined ? 0 : amount("limit", b.limit)), tenants, spec, String(Math.round(threshold * 1e6)), b.pause === true ? "1" : "0", label, unit);
  }
  return out;
}

/** The SpendExhausted of a `spend_exhausted` reply (its elements after the kind). */
export function spendExhausted(governor: string, rest: readonly string[]): SpendExhausted {
  const [budget = "", scope = "*", spent = "0", limit = "0", resets = "0", why = "limit"] = rest;
  const resetsAt = Number(resets) > 0 ? Number(resets) / 1000 : null;
  const whose = scope === "*" ? "the fleet's" : `tenant ${scope}'s`;
  const when = resetsAt === null ? "" : `, resets at ${new Date(resetsAt * 1000).toISOString()}`;
  const hint = why === "never" ? "the call costs more than the whole limit"
    : why === "threshold" ? "paused at the soft threshold: approve more (governor spend approve) or wait for the window to reset"
    : "wait for the window to reset, or raise the limit (governor spend approve --add DOLLARS)";
  return new SpendExhausted(
    `governor ${JSON.stringify(governor)}: spend budget ${JSON.stringify(budget)} (${whose} limit) cannot afford the call: ${Number(spent) / 1e6} of ${Number(limit) / 1e6} dollars spent${when}; ${hint}`,
    { budget, spent: Number(spent), limit: Number(limit), resetsAt, scope, why },
    governor,
  );
}
