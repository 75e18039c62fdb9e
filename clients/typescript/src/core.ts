/**
 * The sans-IO core: every function's ARGV built and every reply parsed, as
 * docs/protocol.md describes them (the Python package's governor/core.py).
 */
import { randomBytes } from "node:crypto";
import { BACKGROUND_REFUSAL, BUDGET_KINDS, DEFAULT_PREFIX, KEYS, LIBRARY_NAME, NOTICE_HOLD, OUTCOMES, SCHEMA_VERSION, WAKE_CONFIG, WAKE_RETRY, WAKE_TTL } from "./generated.js";
import { ConfigError, CostTooLarge, StateError } from "./errors.js";
import { budgetsArgs, spendExhausted, type SpendBudget } from "./spend.js";
import { readStatus, type Status } from "./status.js";
import { ms, place, scriptFields, validateTenant, type BudgetKind, type Place, type ResolvedConfig } from "./config.js";

/** A change of the tenants' shares (set_shares): what is not given stays as stored. */
export interface SharesChange {
  tenantWeights?: Readonly<Record<string, number>>;
  defaultWeight?: number;
  /** seconds; null: never */
  aging?: number | null;
  tenantCaps?: Readonly<Record<string, number>>;
  reserve?: number;
}

export type Operation =
  | "acquire" | "cancel" | "init" | "pause" | "probe" | "refresh" | "release"
  | "renew" | "report" | "reset" | "resume" | "set_max" | "set_shares" | "spend" | "status";

const NAME = /^[A-Za-z0-9_.:\-/@]{1,200}$/;
const PREFIX = /^[A-Za-z0-9_.:-]{1,64}$/;

export interface GovernorKeys {
  readonly name: string;
  /** every key of the governor, in KEYS order */
  readonly keys: readonly string[];
  /** KEYS of every function call: the state key alone (the library derives the others from it) */
  readonly scriptKeys: readonly string[];
  readonly channel: string;
  readonly byName: Readonly<Record<string, string>>;
}

export function governorKeys(name: string, prefix: string = DEFAULT_PREFIX): GovernorKeys {
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new ConfigError(`governor name ${JSON.stringify(name)} is invalid: use 1-200 characters of letters, digits and _ . : - / @ (no braces, no spaces)`);
  }
  if (!PREFIX.test(prefix)) throw new ConfigError(`key prefix ${JSON.stringify(prefix)} is invalid: use 1-64 characters of letters, digits and _ . : -`);
  const base = `${prefix}:v${SCHEMA_VERSION}:{${name}}`;
  const byName: Record<string, string> = {};
  for (const [key] of KEYS) byName[key] = `${base}:${key}`;
  return { name, keys: KEYS.map(([key]) => `${base}:${key}`), scriptKeys: [`${base}:state`], channel: `${base}:wake`, byName };
}

export function functionName(op: Operation): string {
  return `${LIBRARY_NAME}_${op}`;
}

/** An unguessable lease id (128 random bits). */
export function newId(): string {
  return randomBytes(16).toString("hex");
}

/**
 * Input and output tokens a lease reserves or a call used, and the service
 * tier they are asked or served in ("fast": Anthropic's fast mode, counted in
 * its own budgets; undefined: a lease's the standard tier, a usage's the tier
 * its lease asked for), as governor.budgets.Tokens.
 */
export interface Tokens {
  readonly input: number;
  readonly output: number;
  readonly tier?: string;
}

const TIER = /^[a-z][a-z0-9_]{0,31}$/;

export function tokensOf(tokens: Tokens | number | undefined): Tokens {
  if (tokens === undefined) return { input: 0, output: 0 };
  const t = typeof tokens === "number" ? { input: tokens, output: 0 } : tokens;
  for (const v of [t.input, t.output]) {
    if (!Number.isInteger(v) || v < 0 || v > 2 ** 53) throw new ConfigError(`tokens must be integers >= 0, got ${JSON.stringify(tokens)}`);
  }
  if (t.tier !== undefined && !TIER.test(t.tier)) {
    throw new ConfigError(`tokens.tier must be a tier name such as "fast" or "standard" (1-32 of a-z, 0-9 and _, a letter first), got ${JSON.stringify(t.tier)}`);
  }
  return t;
}

/** The scripts' form: "input,output", or "input,output,tier" when a tier is said. */
function tokensText(t: Tokens): string {
  return t.tier === undefined ? `${t.input},${t.output}` : `${t.input},${t.output},${t.tier}`;
}

function tokensArg(t: Tokens): string {
  return t.input === 0 && t.output === 0 ? "" : tokensText(t);
}

export const MISSING = Symbol("missing");
export type Missing = typeof MISSING;

export interface Call<T> {
  readonly op: Operation;
  readonly args: readonly string[];
  readonly parse: (reply: unknown) => T | Missing;
  /** re-create the state and call again on 'missing' (else answer ifMissing) */
  readonly recreate: boolean;
  readonly ifMissing?: T;
}

export interface Granted { readonly kind: "granted"; readonly fence: number; readonly epoch: string; readonly remaining: number | null }
export interface Queued { readonly kind: "queued"; readonly position: number; readonly reason: string; readonly hint: number; readonly epoch: string }
export interface Denied { readonly kind: "denied"; readonly reason: string; readonly hint: number; readonly epoch: string }
export interface Refreshed {
  readonly epoch: string;
  readonly reason: string;
  readonly hint: number;
  readonly granted: Map<string, { fence: number; remaining: number }>;
  /** id -> [waiters ahead of it (-1: parked at its tenant's cap), what holds it] */
  readonly queued: Map<string, [number, string]>;
  readonly unknown: string[];
}
/** A lease to renew: its id, the epoch it was granted in, its holder label, and the place and tokens it was granted with. */
export interface RenewedLease {
  readonly id: string;
  readonly epoch: string;
  readonly holder: string;
  readonly place?: Place;
  readonly tokens?: Tokens;
}
export interface Renewed { readonly epoch: string; readonly ok: string[]; readonly adopted: Map<string, number>; readonly lost: string[] }
export interface Wake {
  readonly epoch: string;
  readonly grants: Map<string, number>;
  /** seconds until a hold that kept queued callers out ends */
  readonly retryIn: number | null;
  readonly configChanged: boolean;
  /** ms: the longest lease TTL announced rose to this (null: not told) */
  readonly ttlMax: number | null;
}

export function parseWake(data: string): Wake {
  const words = data.split(/\s+/).filter((w) => w !== "");
  const grants = new Map<string, number>();
  let retryIn: number | null = null;
  let configChanged = false;
  let ttlMax: number | null = null;
  for (const word of words.slice(1)) {
    if (word.startsWith(WAKE_RETRY) && /^\d+$/.test(word.slice(1))) retryIn = Number(word.slice(1)) / 1000;
    else if (word === WAKE_CONFIG) configChanged = true;
    else if (word.startsWith(WAKE_TTL) && /^\d+$/.test(word.slice(1))) ttlMax = Number(word.slice(1));
    else {
      const at = word.lastIndexOf(":");
      const fence = word.slice(at + 1);
      if (at > 0 && /^\d+$/.test(fence)) grants.set(word.slice(0, at), Number(fence));
    }
  }
  return { epoch: words[0] ?? "", grants, retryIn, configChanged, ttlMax };
}

function text(value: unknown): string {
  if (Buffer.isBuffer(value)) return value.toString("utf8");
  return String(value);
}

function int(value: unknown): number {
  return Number(text(value));
}

/** How a provider call went, as report() takes it: the Python Outcome's names, lower-cased. */
export type Outcome = Lowercase<keyof typeof OUTCOMES>;
/** What report() accepts: an Outcome, or its name as the Python Outcome spells it ("SUCCESS"); any case. */
export type OutcomeName = Outcome | keyof typeof OUTCOMES;

/** The outcomes by name, as in Python: `Outcome.SUCCESS` is "success", `Outcome.RATE_LIMITED` "rate_limited"... */
export const Outcome = Object.freeze(Object.fromEntries(Object.keys(OUTCOMES).map((k) => [k, k.toLowerCase()]))) as {
  readonly [K in keyof typeof OUTCOMES]: Lowercase<K>;
};

/**
 * report.lua's outcome code of a RATE_LIMITED report that is no load signal
 * (`report(outcome, { load: false })`: an overload, a 529, headers showing
 * requests and tokens remaining): the adaptive policy weighs it as the
 * provider's background; a policy without a rule for it reads it as "r".
 */
export { BACKGROUND_REFUSAL };

/** report's outcome code for `outcome` (a name, any case); a ConfigError listing the names for anything else. */
export function outcomeCode(outcome: unknown): (typeof OUTCOMES)[keyof typeof OUTCOMES] {
  const name = typeof outcome === "string" ? outcome.toUpperCase() : "";
  if (Object.hasOwn(OUTCOMES, name)) return OUTCOMES[name as keyof typeof OUTCOMES];
  const names = Object.keys(OUTCOMES).map((k) => `"${k.toLowerCase()}"`).join(", ");
  throw new ConfigError(`outcome ${typeof outcome === "string" ? JSON.stringify(outcome) : String(outcome)} is not one of ${names} (Outcome.SUCCESS, Outcome.RATE_LIMITED...; any case)`);
}

/** Arguments and replies of every function, for one governor (governor/core.py's GovernorCore). */
export class Core {
  readonly keys: GovernorKeys;
  /** the highest fence seen: a re-created state never hands out a lower one */
  fenceFloor = 0;
  /** local time of the last reply that showed the state existed */
  lastSeen: number | null = null;
  /** the stored config as init last answered it: a lost state is re-created from it */
  storedConfig: Record<string, string> | null = null;
  /** the longest lease TTL the state recorded (ms): a state this client re-creates holds that long */
  ttlMaxMs: number;
  /** local time of the last acquire that announced the lease TTL (null: none yet) */
  announcedAt: number | null = null;
  /** the epoch of the state it was announced to (a new state has not heard it) */
  announcedTo = "";
  private readonly ttlMs: string;
  private readonly queueTtlMs: string;

  constructor(readonly name: string, readonly config: ResolvedConfig) {
    this.keys = governorKeys(name, config.keyPrefix);
    this.ttlMs = String(ms(config.leaseTtl));
    this.queueTtlMs = String(ms(config.queueTtl));
    this.ttlMaxMs = ms(config.leaseTtl);
  }

  sawTtl(value: unknown): void {
    const raw = text(value);
    // it follows the state (which forgets a TTL no client announced for a while), never below this client's own
    if (/^\d+$/.test(raw)) this.ttlMaxMs = Math.max(Number(raw), ms(this.config.leaseTtl));
  }

  nowArg(): string {
    const clock = this.config.clock;
    if (clock === undefined) return "";
    const now = clock();
    if (!Number.isFinite(now) || now < 0) throw new ConfigError(`clock returned ${now}; it must return non-negative seconds`);
    return String(ms(now));
  }

  /** the clock of local deadlines: the injected clock, else a monotonic one (seconds) */
  localNow(): number {
    return this.config.clock !== undefined ? this.config.clock() : performance.now() / 1000;
  }

  private call<T>(op: Operation, args: readonly string[], parse: (reply: unknown) => T | Missing, recreate = true, ifMissing?: T): Call<T> {
    const full = [this.nowArg(), this.keys.channel, ...args];
    return ifMissing === undefined ? { op, args: full, parse, recreate } : { op, args: full, parse, recreate, ifMissing };
  }

  private check(reply: unknown, op: string): [string, unknown[]] {
    if (!Array.isArray(reply) || reply.length < 2) throw new StateError(`governor ${JSON.stringify(this.name)}: unreadable ${op} reply ${JSON.stringify(reply)}`, this.name);
    const schema = int(reply[0]);
    if (schema !== SCHEMA_VERSION) {
      throw new StateError(`governor ${JSON.stringify(this.name)}: ${op} answered in schema ${schema}, this client speaks ${SCHEMA_VERSION}: upgrade the client`, this.name);
    }
    return [text(reply[1]), reply.slice(2)];
  }

  private unexpected(op: string, kind: string): StateError {
    return new StateError(`governor ${JSON.stringify(this.name)}: ${op} gave an unexpected reply ${JSON.stringify(kind)}`, this.name);
  }

  private seen(): void {
    this.lastSeen = this.localNow();
  }

  sawFence(fence: number): void {
    if (fence > this.fenceFloor) this.fenceFloor = fence;
  }

  init(holdsLeases: boolean, listening: boolean): Call<string> {
    const recovered = holdsLeases || (this.lastSeen !== null && this.localNow() - this.lastSeen < this.config.idleExpiry);
    const args = [
      randomBytes(8).toString("hex"),
      recovered ? "1" : "0",
      String(this.fenceFloor),
      String(this.ttlMaxMs),
      listening ? "1" : "0",
      String(ms(Math.min(this.config.poll, NOTICE_HOLD))),
      this.config.restartHold ? "1" : "0",
      ...(this.storedConfig !== null ? Object.entries(this.storedConfig).flat() : scriptFields(this.config)),
    ];
    return this.call("init", args, (reply) => {
      const [kind, rest] = this.check(reply, "init");
      if (kind !== "created" && kind !== "exists") throw this.unexpected("init", kind);
      this.seen();
      const stored: Record<string, string> = {};
      // rest: epoch, ttl_max (the longest lease TTL recorded), then the stored config's pairs
      this.sawTtl(rest[1]);
      for (let i = 2; i + 1 < rest.length; i += 2) stored[text(rest[i])] = text(rest[i + 1]);
      this.storedConfig = stored;
      return kind;
    });
  }

  learnStoredConfig(stored: Record<string, string>): void {
    if (Object.keys(stored).length > 0) this.storedConfig = { ...stored };
  }

  place(priority?: string, tenant?: string): Place {
    return place(this.storedConfig, this.config, priority, tenant);
  }

  acquire(id: string, holder: string, mode: "wait" | "again" | "try", tokens: Tokens, where: Place): Call<Granted | Queued | Denied> {
    // the lease TTL is announced at most once a third of it (the state counts an announcement for
    // twice the TTL): an acquire between announcements reads nothing of it
    const now = this.localNow();
    const announce = this.announcedAt === null || now - this.announcedAt >= this.config.leaseTtl / 3;
    const args = [id, holder, this.ttlMs, this.queueTtlMs, mode, tokensArg(tokens), String(where.rank), where.tenant, String(where.weight), announce ? "1" : "0"];
    return this.call("acquire", args, (reply) => {
      const [kind, rest] = this.check(reply, "acquire");
      if (kind === "missing") return MISSING;
      this.seen();
      const epoch = text(rest[rest.length - 2]); // (the epoch, then ttl_max, last in each)
      if (announce) {
        this.announcedAt = now;
        this.announcedTo = epoch;
      } else if (epoch !== this.announcedTo) this.announcedAt = null; // a new state: the next acquire announces
      this.sawTtl(rest[rest.length - 1]); // the longest lease TTL, last in each reply
      if (kind === "granted") {
        const fence = int(rest[0]);
        this.sawFence(fence);
        return { kind, fence, epoch: text(rest[2]), remaining: int(rest[1]) / 1000 };
      }
      if (kind === "queued") return { kind, position: int(rest[0]), reason: text(rest[1]), hint: int(rest[2]) / 1000, epoch: text(rest[3]) };
      if (kind === "denied") return { kind, reason: text(rest[0]), hint: int(rest[1]) / 1000, epoch: text(rest[2]) };
      if (kind === "refused") throw new CostTooLarge(`governor ${JSON.stringify(this.name)}: ${text(rest[0])}; it can never be admitted: reserve fewer tokens or raise the budget`, this.name);
      throw this.unexpected("acquire", kind);
    });
  }

  release(id: string): Call<boolean> {
    return this.call("release", [id], (reply) => {
      const [kind, rest] = this.check(reply, "release");
      if (kind === "missing") return MISSING;
      if (kind !== "released") throw this.unexpected("release", kind);
      return text(rest[0]) === "1";
    }, false, false);
  }

  cancel(id: string): Call<string> {
    return this.call("cancel", [id], (reply) => {
      const [kind, rest] = this.check(reply, "cancel");
      if (kind === "missing") return MISSING;
      if (kind !== "cancelled") throw this.unexpected("cancel", kind);
      return text(rest[0]);
    }, false, "none");
  }

  /** Renew leases in one call: each with the place and tokens it was granted with, so a lease adopted by a new state keeps its tenant, class and reservation. */
  renew(leases: readonly RenewedLease[]): Call<Renewed> {
    const ids = leases.map((l) => l.id);
    const flat: string[] = [];
    for (const l of leases) {
      const where = l.place ?? this.place();
      flat.push(l.id, l.epoch, l.holder, String(where.rank), where.tenant, String(where.weight), tokensArg(l.tokens ?? { input: 0, output: 0 }));
    }
    return this.call("renew", [this.ttlMs, ...flat], (reply) => {
      const [kind, rest] = this.check(reply, "renew");
      if (kind === "missing") return MISSING;
      if (kind !== "renewed") throw this.unexpected("renew", kind);
      this.seen();
      if (rest.length - 1 !== 2 * ids.length) throw new StateError(`governor ${JSON.stringify(this.name)}: renew answered for ${(rest.length - 1) / 2} ids, asked for ${ids.length}`, this.name);
      const out: Renewed = { epoch: text(rest[0]), ok: [], adopted: new Map(), lost: [] };
      ids.forEach((id, n) => {
        const status = text(rest[1 + 2 * n]);
        const fence = int(rest[2 + 2 * n]);
        if (status === "ok") out.ok.push(id);
        else if (status === "adopted") {
          out.adopted.set(id, fence);
          this.sawFence(fence);
        } else if (status === "lost") out.lost.push(id);
        else throw this.unexpected("renew", status);
      });
      return out;
    });
  }

  refresh(ids: readonly string[]): Call<Refreshed> {
    return this.call("refresh", [this.queueTtlMs, ...ids], (reply) => {
      const [kind, rest] = this.check(reply, "refresh");
      if (kind === "missing") return MISSING;
      if (kind !== "refreshed") throw this.unexpected("refresh", kind);
      this.seen();
      if (rest.length - 3 !== 4 * ids.length) throw new StateError(`governor ${JSON.stringify(this.name)}: refresh answered for ${(rest.length - 3) / 4} ids, asked for ${ids.length}`, this.name);
      const out: Refreshed = { epoch: text(rest[0]), reason: text(rest[1]), hint: int(rest[2]) / 1000, granted: new Map(), queued: new Map(), unknown: [] };
      ids.forEach((id, n) => {
        const status = text(rest[3 + 4 * n]);
        const value = int(rest[4 + 4 * n]);
        const remaining = int(rest[5 + 4 * n]);
        if (status === "granted") {
          out.granted.set(id, { fence: value, remaining: remaining / 1000 });
          this.sawFence(value);
        } else if (status === "queued") out.queued.set(id, [value, text(rest[6 + 4 * n])]);
        else if (status === "unknown") out.unknown.push(id);
        else throw this.unexpected("refresh", status);
      });
      return out;
    });
  }

  report(
    outcome: OutcomeName,
    retryAfter: number | undefined,
    leaseId: string | undefined,
    fence: number | undefined,
    release: boolean,
    usage: Tokens | undefined,
    limits: Partial<Record<BudgetKind, [number | null, number | null]>> | undefined,
    refusalsCount = true,
    load = true,
  ): Call<boolean> {
    const named = outcomeCode(outcome);
    if (typeof load !== "boolean") throw new ConfigError(`load must be true or false (false: a refusal that is no load signal), got ${String(load)}`);
    const code = named === OUTCOMES.RATE_LIMITED && !load ? BACKGROUND_REFUSAL : named;
    let ra = "";
    if (retryAfter !== undefined) {
      if (!Number.isFinite(retryAfter) || retryAfter < 0) throw new ConfigError(`retryAfter must be finite seconds >= 0, got ${retryAfter}`);
      ra = String(ms(Math.min(retryAfter, 86400)));
    }
    // kind, "limit,remaining" pairs: only the kinds the response announced
    const figures: string[] = [];
    for (const kind of BUDGET_KINDS) {
      const [limit, remaining] = limits?.[kind] ?? [null, null];
      if (limit !== null || remaining !== null) figures.push(kind, `${limit ?? ""},${remaining ?? ""}`);
    }
    // '0': the provider does not count a refused call against its limits (its reservation given back)
    const refused = named === OUTCOMES.RATE_LIMITED && !refusalsCount ? "0" : "";
    let budgetArgs: string[] = [usage === undefined ? "" : tokensText(tokensOf(usage)), refused, ...figures];
    if (budgetArgs.length === 2 && budgetArgs[0] === "" && budgetArgs[1] === "") budgetArgs = []; // the common report
    const args = [code, ra, leaseId ?? "", fence === undefined ? "" : String(fence), release && leaseId !== undefined ? "1" : "0", ...budgetArgs];
    return this.call("report", args, (reply) => {
      const [kind] = this.check(reply, "report");
      if (kind === "missing") return MISSING;
      this.seen();
      if (kind === "reported") return true;
      if (kind === "lost") return false;
      throw this.unexpected("report", kind);
    });
  }

  /**
   * One call of the spend function (lua/spend.lua): reserve, settle or
   * approve `amounts` in `budgets`: micro-dollars, or [micro-dollars,
   * requests, tokens] for the budgets of each unit (one amount: no requests
   * or tokens); `extra` is the reservation's keep time (ms), the settled
   * call's reservation ("micros,requests,tokens"), or "". A
   * `spend_exhausted` reply throws SpendExhausted.
   */
  spend(op: "reserve" | "settle" | "approve", first: string, second: string, amounts: number | readonly number[], extra: string, budgets: readonly SpendBudget[], nowMs: number): Call<number | null> {
    const list = typeof amounts === "number" ? [amounts] : amounts;
    for (const amount of list) {
      if (!Number.isInteger(amount) || amount < 0 || amount > 2 ** 53) throw new ConfigError(`a spend amount must be an integer in [0, 2^53] (micro-dollars, requests, tokens), got ${amount}`);
    }
    return this.call("spend", [op, first, second, list.join(","), extra, ...budgetsArgs(budgets, nowMs)], (reply) => {
      const [kind, rest] = this.check(reply, "spend");
      if (kind === "missing") return MISSING;
      this.seen();
      if (kind === "reserved" || kind === "settled") return null;
      if (kind === "approved") return int(rest[0]) / 1000;
      if (kind === "spend_exhausted") throw spendExhausted(this.name, rest.map(text));
      throw this.unexpected("spend", kind);
    });
  }

  status(op: "status" | "probe" = "status", create = true): Call<Status> {
    return this.call(op, [], (reply) => this.parseStatus(reply, op), create);
  }

  /** Lift a pause and a Retry-After hold; the recovery hold only with liftRecoveryHold. */
  resume(liftRecoveryHold = false): Call<Status> {
    return this.call("resume", [liftRecoveryHold ? "lift-hold" : ""], (reply) => this.parseStatus(reply, "resume"));
  }

  setMax(n: number): Call<Status> {
    if (!Number.isInteger(n) || n < 1 || n > 1_000_000) throw new ConfigError(`max_capacity must be an integer in [1, 1000000], got ${n}`);
    return this.call("set_max", [String(n)], (reply) => this.parseStatus(reply, "set_max"));
  }

  /** Store new shares, each unchanged when not given (aging: null for never), on the fleet's stored config. */
  setShares(changes: SharesChange): Call<Status> {
    const stored = this.storedConfig;
    const own = scriptFields(this.config);
    const mine: Record<string, string> = {};
    for (let i = 0; i + 1 < own.length; i += 2) mine[own[i]!] = own[i + 1]!;
    const base = (field: string): string => stored?.[field] ?? mine[field] ?? "";
    const pairs = (value: Readonly<Record<string, number>>, high: number): string =>
      Object.entries(value)
        .map(([t, n]) => {
          validateTenant(t);
          if (!Number.isInteger(n) || n < 1 || n > high) throw new ConfigError(`${t} must have an integer in [1, ${high}], got ${n}`);
          return [t, n] as const;
        })
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([t, n]) => `${t}=${n}`)
        .join(",");
    const args = [
      changes.tenantWeights === undefined ? base("tenant_weights") : pairs(changes.tenantWeights, 1000),
      changes.defaultWeight === undefined ? base("default_weight") : String(changes.defaultWeight),
      changes.aging === undefined ? base("aging_ms") : String(changes.aging === null ? 0 : Math.max(1, ms(changes.aging))),
      changes.tenantCaps === undefined ? base("tenant_caps") : pairs(changes.tenantCaps, 1_000_000),
      changes.reserve === undefined ? base("reserve") : String(changes.reserve),
    ];
    return this.call("set_shares", args, (reply) => this.parseStatus(reply, "set_shares"));
  }

  /** Forget what the policy learnt; withConfig also stores this client's own config. */
  reset(withConfig: boolean): Call<Status> {
    return this.call("reset", withConfig ? scriptFields(this.config) : [], (reply) => this.parseStatus(reply, "reset"));
  }

  pause(reason: string, duration?: number): Call<Status> {
    if (reason.trim() === "" || Buffer.byteLength(reason) > 500) throw new ConfigError("pause reason must be a non-empty string of at most 500 bytes");
    return this.call("pause", [reason, String(duration === undefined ? 0 : ms(duration))], (reply) => this.parseStatus(reply, "pause"));
  }

  parseStatus(reply: unknown, op: string): Status | Missing {
    const [kind, rest] = this.check(reply, op);
    if (kind === "missing") return MISSING;
    if (kind !== "status") throw this.unexpected(op, kind);
    this.seen();
    const fields = new Map<string, string>();
    let budgets: string[] = [];
    for (let i = 0; i + 1 < rest.length; i += 2) {
      const name = text(rest[i]);
      const value = rest[i + 1];
      if (name === "budgets") budgets = Array.isArray(value) ? value.map(text) : [];
      else fields.set(name, text(value));
    }
    let status: Status;
    try {
      status = readStatus(this.name, fields, budgets);
    } catch (error) {
      throw new StateError(`governor ${JSON.stringify(this.name)}: unreadable ${op} reply (${error instanceof Error ? error.message : String(error)})`, this.name, { cause: error });
    }
    this.sawFence(status.fence);
    this.sawTtl(fields.get("ttl_max"));
    if (this.storedConfig !== null) {
      // the ceiling an operator may have changed; set_max lowers a reserve with it
      this.storedConfig["max_capacity"] = String(status.maxCapacity);
      this.storedConfig["reserve"] = String(status.reserve);
    }
    return status;
  }
}
