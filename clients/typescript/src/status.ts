/**
 * A governor's state as a status reply reports it, read into the Python
 * client's Status (governor/replies.py): the same fields, camel-cased,
 * times in seconds (Unix seconds for points in time, null for "none"),
 * flags as booleans.
 */
import { SCHEMA_VERSION, type STATUS_FIELDS } from "./generated.js";

/** An active budget in a status reply. */
export interface BudgetStatus {
  /** "requests", "tokens", "input_tokens" or "output_tokens" */
  readonly kind: string;
  /** per minute: the refill rate, and the ceiling of the burst */
  readonly limit: number;
  /** what the bucket holds at most */
  readonly burst: number;
  /** what it holds now (below zero: charged beyond a reservation) */
  readonly level: number;
  /** tokens (or requests) the live leases reserved */
  readonly reserved: number;
  /** where the limit came from: "configured", "header" or "learned" */
  readonly source: string;
}

/** A status reply's fields, as {@link Status} holds them. */
export interface StatusFields {
  /** the governor */
  readonly name: string;
  /** the current adaptive limit (0 only while paused) */
  readonly capacity: number;
  /** the configured ceiling */
  readonly maxCapacity: number;
  /** new admissions stopped */
  readonly paused: boolean;
  /** why paused ("" when not) */
  readonly pauseReason: string;
  /** "policy", "operator" or "" */
  readonly pauseKind: string;
  /** an operator pause's end (Unix seconds), if it has one */
  readonly pausedUntil: number | null;
  /** admissions held until then (Unix seconds): a provider's Retry-After, or the recovery hold */
  readonly notBefore: number | null;
  /** live leases */
  readonly inFlight: number;
  /** live waiters */
  readonly queued: number;
  /** rate-limited attempts in the window */
  readonly windowRateLimited: number;
  /** all attempts in the window */
  readonly windowAttempts: number;
  /** the window's length, seconds */
  readonly window: number;
  /** the policy's name ("adaptive", "seed", "fixed") */
  readonly policy: string;
  /** adaptive: the in-flight level of the last pushback (0 unknown) */
  readonly ceiling: number;
  /** adaptive: the estimated share of the provider's refusals that no load of this fleet explains (0 to 1) */
  readonly background: number;
  /** successes in a row since the last change */
  readonly streak: number;
  /** the last fence handed out */
  readonly fence: number;
  /** quota-exhausted reports since creation */
  readonly quotaExhausted: number;
  /** when the last one came (Unix seconds) */
  readonly quotaAt: number | null;
  /** when the last exhausted quota comes back, as the provider said (Unix seconds; null: unknown or none) */
  readonly quotaUntil: number | null;
  /** the id of this incarnation of the state (it changes when the state is lost) */
  readonly epoch: string;
  /** when this incarnation was created (Unix seconds) */
  readonly created: number;
  /** the clock the functions used (Unix seconds) */
  readonly now: number;
  /** why a new caller would wait now, in the admission rule's words ("" if it would not) */
  readonly blocked: string;
  /** while a new caller of the default class and tenant would be admitted: who would not be, "; "-separated ("" nobody) */
  readonly heldBack: string;
  /** slots of capacity only the highest class takes (0: none) */
  readonly reserve: number;
  /** the active budgets, in the order requests, tokens, input_tokens, output_tokens */
  readonly budgets: readonly BudgetStatus[];
  /** the schema of the state and replies */
  readonly schema: number;
  /** the recovery hold's end after a loss (Unix seconds; null: none): only resume(true) ends it */
  readonly holdUntil: number | null;
  /** why the recovery hold runs ("" none) */
  readonly holdReason: string;
  /** the longest lease TTL a client announced, seconds: the length of a recovery hold */
  readonly ttlMax: number;
}

/** A governor's state, as `status()` and every operator call answer it (frozen). */
export class Status implements StatusFields {
  declare readonly name: string;
  declare readonly capacity: number;
  declare readonly maxCapacity: number;
  declare readonly paused: boolean;
  declare readonly pauseReason: string;
  declare readonly pauseKind: string;
  declare readonly pausedUntil: number | null;
  declare readonly notBefore: number | null;
  declare readonly inFlight: number;
  declare readonly queued: number;
  declare readonly windowRateLimited: number;
  declare readonly windowAttempts: number;
  declare readonly window: number;
  declare readonly policy: string;
  declare readonly ceiling: number;
  declare readonly background: number;
  declare readonly streak: number;
  declare readonly fence: number;
  declare readonly quotaExhausted: number;
  declare readonly quotaAt: number | null;
  declare readonly quotaUntil: number | null;
  declare readonly epoch: string;
  declare readonly created: number;
  declare readonly now: number;
  declare readonly blocked: string;
  declare readonly heldBack: string;
  declare readonly reserve: number;
  declare readonly budgets: readonly BudgetStatus[];
  declare readonly schema: number;
  declare readonly holdUntil: number | null;
  declare readonly holdReason: string;
  declare readonly ttlMax: number;

  constructor(fields: StatusFields) {
    Object.assign(this, fields, { budgets: Object.freeze(fields.budgets.map((b) => Object.freeze({ ...b }))) });
    Object.freeze(this);
  }

  /** The active budget of `kind`, or undefined when that kind is not governed. */
  budget(kind: string): BudgetStatus | undefined {
    return this.budgets.find((b) => b.kind === kind);
  }

  /** The rate-limited share of the attempts in the window (0 when empty). */
  get rateLimitedShare(): number {
    return this.windowAttempts > 0 ? this.windowRateLimited / this.windowAttempts : 0;
  }

  /** True while a provider's Retry-After or the recovery hold holds new admissions. */
  get holding(): boolean {
    return this.notBefore !== null && this.notBefore > this.now;
  }

  /** True while the recovery hold runs (`holdUntil`). */
  get recoveryHold(): boolean {
    return this.holdUntil !== null && this.holdUntil > this.now;
  }
}

type Field = Exclude<(typeof STATUS_FIELDS)[number], "budgets">;
type Read = "count" | "text" | "flag" | "duration" | "time" | "timeOrNull" | "perMillion";

/**
 * How each field of a status reply is read: its name here and its unit
 * there (count; text; flag "0"/"1"; duration in ms; Unix ms; Unix ms with 0
 * for none). Typed against the generated STATUS_FIELDS: a field the
 * protocol adds fails the type check until it is read here.
 */
export const STATUS_READ = {
  now: ["now", "time"],
  epoch: ["epoch", "text"],
  policy: ["policy", "text"],
  capacity: ["capacity", "count"],
  max_capacity: ["maxCapacity", "count"],
  reserve: ["reserve", "count"],
  paused: ["paused", "flag"],
  pause_kind: ["pauseKind", "text"],
  pause_reason: ["pauseReason", "text"],
  paused_until: ["pausedUntil", "timeOrNull"],
  not_before: ["notBefore", "timeOrNull"],
  in_flight: ["inFlight", "count"],
  queued: ["queued", "count"],
  window_rate_limited: ["windowRateLimited", "count"],
  window_attempts: ["windowAttempts", "count"],
  window_ms: ["window", "duration"],
  streak: ["streak", "count"],
  fence: ["fence", "count"],
  ceiling: ["ceiling", "count"],
  background_ppm: ["background", "perMillion"],
  quota_exhausted: ["quotaExhausted", "count"],
  quota_at: ["quotaAt", "timeOrNull"],
  quota_until: ["quotaUntil", "timeOrNull"],
  created: ["created", "time"],
  blocked: ["blocked", "text"],
  hold_until: ["holdUntil", "timeOrNull"],
  hold_reason: ["holdReason", "text"],
  ttl_max: ["ttlMax", "duration"],
  held_back: ["heldBack", "text"],
} as const satisfies Record<Field, readonly [keyof StatusFields, Read]>;

function reading(field: string, raw: string, how: Read): string | number | boolean | null {
  if (how === "text") return raw;
  if (how === "flag") {
    if (raw !== "0" && raw !== "1") throw new Error(`${field} is ${JSON.stringify(raw)}, not 0 or 1`);
    return raw === "1";
  }
  const value = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(value)) throw new Error(`${field} is ${JSON.stringify(raw)}, not a number`);
  if (how === "count") return value;
  if (how === "perMillion") return value / 1_000_000;
  if (how === "timeOrNull") return value > 0 ? value / 1000 : null;
  return value / 1000;
}

/**
 * A Status (of the schema this client speaks: the reply's was checked) from a status reply's field/value pairs (text values) and its
 * flat budget section; throws an Error naming the field it cannot read.
 */
export function readStatus(name: string, fields: ReadonlyMap<string, string>, budgetSection: readonly string[]): Status {
  const out: Record<string, unknown> = { name, schema: SCHEMA_VERSION };
  for (const [field, [key, how]] of Object.entries(STATUS_READ)) {
    const raw = fields.get(field);
    if (raw === undefined) throw new Error(`the field ${field} is missing`);
    out[key] = reading(field, raw, how);
  }
  if (budgetSection.length % 6 !== 0) throw new Error(`the budget section has ${budgetSection.length} items, not a multiple of 6`);
  const budgets: BudgetStatus[] = [];
  for (let j = 0; j < budgetSection.length; j += 6) {
    const [kind, limit, burst, level, reserved, source] = budgetSection.slice(j, j + 6) as [string, string, string, string, string, string];
    const numbers = [limit, burst, level, reserved].map((v) => reading(`budget ${kind}`, v, "count") as number);
    budgets.push({ kind, limit: numbers[0]!, burst: numbers[1]!, level: numbers[2]!, reserved: numbers[3]!, source });
  }
  out["budgets"] = budgets;
  return new Status(out as unknown as StatusFields);
}
