/**
 * Spend budgets (governor/spend.py): dollars per window for the fleet and
 * per tenant, reserved before a call and settled after it by the library's
 * spend function, the same as the Python client's. This client computes
 * rolling windows and calendar windows (day, ISO week, month) in a named
 * time zone (UTC by default; "day@America/Los_Angeles"), their boundaries
 * the Python client's (zoneinfo) for the same instant: both checked
 * against tests/conformance/calendar.json.
 */
import { ConfigError, SpendExhausted } from "./errors.js";

/** A dollar budget, as governor.spend.SpendBudget. */
export interface SpendBudget {
  readonly name: string;
  /** "10m", "1h", "30s" (rolling, 10 slots), or "day", "week", "month" in UTC or "day@Europe/Paris" (an IANA zone) */
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

const ZONE = /^[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z0-9_+-]+)*$/;
const formats = new Map<string, Intl.DateTimeFormat>();

/** The formatter of wall-clock fields in `zone`; a ConfigError for a zone that is no IANA name. */
function wallClock(zone: string): Intl.DateTimeFormat {
  let format = formats.get(zone);
  if (format === undefined) {
    const unknown = new ConfigError(`time zone ${JSON.stringify(zone)} is unknown: use an IANA name such as UTC or America/Los_Angeles`);
    if (!ZONE.test(zone)) throw unknown;
    try {
      format = new Intl.DateTimeFormat("en-US", {
        timeZone: zone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", second: "numeric",
      });
    } catch {
      throw unknown;
    }
    // Intl reads names in any case; zoneinfo (the Python client) only as spelled: "europe/paris" is no zone there
    const resolved = format.resolvedOptions().timeZone;
    if (resolved !== zone && resolved.toLowerCase() === zone.toLowerCase()) throw unknown;
    formats.set(zone, format);
  }
  return format;
}

/** The wall clock in `zone` at instant `t` (ms), as if it were UTC: ms of the same fields (seconds resolution). */
function wall(zone: string, t: number): number {
  const f: Record<string, number> = {};
  for (const part of wallClock(zone).formatToParts(new Date(t))) if (part.type !== "literal") f[part.type] = Number(part.value);
  return Date.UTC(f["year"]!, f["month"]! - 1, f["day"]!, f["hour"]!, f["minute"]!, f["second"]!);
}

/** `zone`'s offset from UTC at instant `t` (ms). */
function offset(zone: string, t: number): number {
  const whole = Math.floor(t / 1000) * 1000;
  return wall(zone, whole) - whole;
}

/**
 * The instant of wall time `local` (ms of its fields as if UTC) in `zone`,
 * as Python's zoneinfo reads it (fold 0): a repeated time is its first
 * occurrence; a skipped one is read with the offset before the change
 * (the moment of the change, for a skipped midnight).
 */
function instant(zone: string, local: number): number {
  const before = offset(zone, local - DAY_MS);
  const after = offset(zone, local + DAY_MS);
  const valid = [before, after].map((o) => local - o).filter((t) => offset(zone, t) === local - t);
  return valid.length > 0 ? Math.min(...valid) : local - before;
}

/** The start (a civil date: ms of its midnight as if UTC) of the `kind` window holding civil date `date`. */
function windowStart(kind: string, date: number): number {
  const d = new Date(date);
  if (kind === "day") return date;
  if (kind === "week") return date - ((d.getUTCDay() + 6) % 7) * DAY_MS; // ISO: from Monday
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** The start of the window after the one starting at civil date `start`. */
function windowNext(kind: string, start: number): number {
  if (kind === "day") return start + DAY_MS;
  if (kind === "week") return start + 7 * DAY_MS;
  const d = new Date(start);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}

/**
 * A calendar window's starts around instant `t` (ms) in `zone`: the
 * previous window's, the current one's, the next one's and the one after
 * (governor.spend.Window.boundaries), so a script whose clock is up to a
 * window away finds its own.
 */
export function calendarBoundaries(kind: "day" | "week" | "month", zone: string, t: number): [number, number, number, number] {
  const local = wall(zone, t);
  const start = windowStart(kind, local - (((local % DAY_MS) + DAY_MS) % DAY_MS));
  const before = windowStart(kind, start - DAY_MS);
  const next = windowNext(kind, start);
  const after = windowNext(kind, next);
  return [instant(zone, before), instant(zone, start), instant(zone, next), instant(zone, after)];
}

/** The window's label and its script form at `nowMs` (governor.spend.Window.label and spec). */
export function windowArgs(window: string, nowMs: number): [label: string, spec: string] {
  const text = window.trim();
  const at = text.indexOf("@");
  const [kind, given] = at < 0 ? [text, undefined] : [text.slice(0, at), text.slice(at + 1)];
  if (kind === "day" || kind === "week" || kind === "month") {
    const zone = given === undefined || given === "" ? "UTC" : given;
    return [`${kind}@${zone}`, `c:${calendarBoundaries(kind, zone, nowMs).join(":")}`];
  }
  const zone = given;
  const found = DURATION.exec(kind ?? "");
  if (found === null || zone !== undefined) throw new ConfigError(`window ${JSON.stringify(window)}: use a duration ('10m', '1h', '30s') or day, week, month[@zone]`);
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
