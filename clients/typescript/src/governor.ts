/**
 * The Node facade: one Governor object per governor name and process,
 * over ioredis (standalone or cluster). It runs the library's functions
 * (FCALL, loading the library on "Function not found"), keeps a
 * background worker (pub/sub wake, refresh every poll, heartbeat every
 * leaseTtl / 3) and gives every grant back when a caller gives up.
 */
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { Cluster, Redis, type ClusterNode } from "ioredis";
import { DEFAULT_TENANT, EVERY_KEY, HEADER_FIGURES, LIBRARY_NAME, MISSING_FUNCTION } from "./generated.js";
import { AbortError, AcquireTimeout, ConfigError, GovernorError, GovernorUnavailable, LeaseLost, StateError } from "./errors.js";
import { resolveConfig, type BudgetKind, type GovernorConfig, type Place, type ResolvedConfig } from "./config.js";
import {
  Core, MISSING, functionName, newId, parseWake, tokensOf,
  type Call, type Denied, type Granted, type Outcome, type OutcomeName, type Queued, type SharesChange, type Tokens,
} from "./core.js";
import type { Status } from "./status.js";
import type { SpendBudget } from "./spend.js";
import { callWithRetry, type CallOptions } from "./retry.js";

type Client = Redis | Cluster;

/** ids per refresh or renew call */
const BATCH = 500;

let libraryText: string | undefined;

/** The Functions library, the very text the Python package loads (library.lua of this package). */
export function library(): string {
  libraryText ??= readFileSync(new URL("../../library.lua", import.meta.url), "utf8");
  return libraryText;
}

function monotonic(): number {
  return performance.now() / 1000;
}

function abortError(signal: AbortSignal | undefined): AbortError {
  const reason: unknown = signal?.reason;
  return new AbortError(`acquire aborted${reason instanceof Error ? `: ${reason.message}` : ""}; nothing is held`, undefined, { cause: reason });
}

/** One slot of the fleet-wide limit, held until released or lost. */
export class Lease {
  private lostFlag = false;
  private releasedFlag = false;

  constructor(
    private readonly gov: Governor,
    /** unguessable lease id (its member in the leases key) */
    readonly id: string,
    /** the fencing token: unique, and growing with each grant */
    public fence: number,
    /** the state incarnation the lease belongs to */
    public epoch: string,
    /** the label operators see */
    readonly holder: string,
    /** local time by which the lease surely lives unless renewed */
    public deadline: number,
    readonly place: Place,
    readonly tokens: Tokens,
  ) {}

  /** True once the lease is known, or must be assumed, to have expired. */
  get lost(): boolean {
    if (!this.lostFlag && !this.releasedFlag && this.gov.core.localNow() > this.deadline) this.lostFlag = true;
    return this.lostFlag;
  }

  get released(): boolean {
    return this.releasedFlag;
  }

  /** @internal */
  markLost(): void {
    this.lostFlag = true;
  }

  /** @internal: false if it was released already */
  markReleased(): boolean {
    if (this.releasedFlag) return false;
    this.releasedFlag = true;
    return true;
  }

  /** Give the slot back (idempotent). */
  async release(): Promise<void> {
    await this.gov.releaseLease(this);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

class Waiter {
  enqueued = false;
  granted: Granted | null = null;
  /** local time by which a grant surely lives: a grant comes after the last request that found it queued */
  deadline = 0;
  confirmedAt = 0;
  retry = false;
  error: GovernorError | null = null;
  reason = "";
  position = -1;
  private flag = false;
  private wakeUp: (() => void) | null = null;

  constructor(readonly id: string) {}

  set(): void {
    this.flag = true;
    this.wakeUp?.();
  }

  /** until set(), at most `seconds`; rejects when the signal fires */
  wait(seconds: number, signal: AbortSignal | undefined): Promise<void> {
    if (this.flag) {
      this.flag = false;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        this.wakeUp = null;
        this.flag = false;
        resolve();
      };
      const onAbort = (): void => {
        clearTimeout(timer);
        this.wakeUp = null;
        reject(abortError(signal));
      };
      const timer = setTimeout(done, Math.max(0, seconds * 1000));
      this.wakeUp = done;
      if (signal?.aborted) onAbort();
      else signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}

export interface AcquireOptions {
  /** seconds to wait at most (undefined: as long as it takes) */
  timeout?: number;
  /** the label operators see (default: host/pid) */
  holder?: string;
  /** tokens reserved from the budgets (a number: input tokens) */
  tokens?: Tokens | number;
  /** the caller's priority class (default: the fleet's default class) */
  priority?: string;
  /** whose share the call counts in */
  tenant?: string;
  /** give up when it fires: whatever was taken is given back */
  signal?: AbortSignal;
}

export interface ReportOptions {
  /** seconds the provider asked to wait (rate-limited only): holds the whole fleet */
  retryAfter?: number;
  /** the lease the call ran under */
  lease?: Lease;
  /** also release the lease, in the same round trip */
  release?: boolean;
  /** the tokens the call used: settles the lease's reservation */
  usage?: Tokens;
  /** the response's headers: their rate-limit figures calibrate the budgets */
  headers?: Headers | Record<string, string | string[] | undefined>;
  /** whether the provider counts a refused (rate-limited) call against its limits (default true: its reservation is spent) */
  refusalsCount?: boolean;
  /**
   * whether a rate-limited outcome is a load signal (default true). false: an
   * overload, a 529, a refusal whose headers show requests and tokens
   * remaining; the adaptive policy neither cuts for it nor holds the fleet
   * (its retryAfter holds only its caller)
   */
  load?: boolean;
}

/** What reserveSpend took: settle it once. */
export interface SpendReservation {
  readonly id: string;
  readonly tenant: string;
  readonly micros: number;
  /** the requests it reserved (requests budgets; default 1) */
  readonly requests?: number;
  /** the tokens it reserved (tokens budgets; default 0) */
  readonly tokens?: number;
}

export interface FromUrlOptions {
  /** use a cluster client (also chosen by itself when a node answers MOVED) */
  cluster?: boolean;
}

let defaultHolder: string | undefined;

function holderLabel(holder: string | undefined): string {
  if (holder === undefined) return (defaultHolder ??= `${hostname()}/${process.pid}`);
  if (typeof holder !== "string" || Buffer.byteLength(holder) > 200) throw new ConfigError("holder must be a string of at most 200 bytes");
  return holder;
}

/** A response's rate-limit headers as budget kind -> [limit, remaining]. */
export function readLimits(headers: ReportOptions["headers"]): Partial<Record<BudgetKind, [number | null, number | null]>> | undefined {
  if (headers === undefined) return undefined;
  const get = (name: string): string | undefined => {
    if (headers instanceof Headers) return headers.get(name) ?? undefined;
    for (const [k, v] of Object.entries(headers)) {
      if (k.toLowerCase() === name) return Array.isArray(v) ? v[0] : v;
    }
    return undefined;
  };
  const out: Partial<Record<BudgetKind, [number | null, number | null]>> = {};
  for (const [name, [kind, what]] of Object.entries(HEADER_FIGURES)) {
    const raw = get(name)?.trim();
    if (raw === undefined || !/^\d+$/.test(raw) || raw.length > 16) continue;
    const value = Number(raw);
    if (!Number.isSafeInteger(value)) continue;
    const pair = out[kind as BudgetKind] ?? [null, null];
    if (what === "limit") pair[0] = value;
    else pair[1] = value;
    out[kind as BudgetKind] = pair;
  }
  return out;
}

export class Governor {
  readonly core: Core;
  readonly config: ResolvedConfig;
  private client: Client;
  /** a call passes every key: a cluster node said so (GOVERNOR_KEYS) */
  private everyKey = false;
  private closed = false;
  private readonly background: Background;

  constructor(client: Client, readonly name: string, config: GovernorConfig = {}, private readonly url?: string) {
    this.config = resolveConfig(config);
    this.core = new Core(name, this.config);
    this.client = client;
    this.watch(client);
    this.background = new Background(this);
  }

  /** the last connection error a client of this object saw: the cause a GovernorUnavailable names */
  private connectionError: Error | undefined;

  /**
   * Listen for a client's connection errors: kept as the cause of the next
   * GovernorUnavailable (an ioredis client without an "error" listener
   * prints every failed reconnection as an unhandled error event).
   */
  watch(client: Client): void {
    client.on("error", (error: unknown) => {
      if (error instanceof Error) this.connectionError = error;
    });
    client.on("ready", () => {
      this.connectionError = undefined;
    });
  }

  /** A governor on the Redis at `url` (redis:// or rediss://), with a connection of its own. */
  static fromUrl(url: string, name: string, config: GovernorConfig = {}, options: FromUrlOptions = {}): Governor {
    const resolved = resolveConfig(config);
    const client = options.cluster === true ? Governor.clusterClient(url, resolved) : new Redis(url, Governor.options(resolved));
    return new Governor(client, name, config, url);
  }

  private static options(config: ResolvedConfig): Record<string, unknown> {
    const timeout = Math.round(config.redisTimeout * 1000);
    // disconnectTimeout: close() waits at most this long for a socket to close (ioredis waits 2 s for one that failed to connect)
    return { commandTimeout: timeout, connectTimeout: timeout, maxRetriesPerRequest: 1, lazyConnect: false, disconnectTimeout: Math.min(timeout, 500) };
  }

  private static clusterClient(url: string, config: ResolvedConfig): Cluster {
    const parsed = new URL(url);
    const node: ClusterNode = { host: parsed.hostname, port: Number(parsed.port || 6379) };
    const redisOptions: Record<string, unknown> = { ...Governor.options(config) };
    if (parsed.password !== "") redisOptions["password"] = decodeURIComponent(parsed.password);
    if (parsed.username !== "") redisOptions["username"] = decodeURIComponent(parsed.username);
    if (parsed.protocol === "rediss:") redisOptions["tls"] = {};
    return new Cluster([node], { redisOptions });
  }

  get keys(): Core["keys"] {
    return this.core.keys;
  }

  /** @internal the client (the background worker duplicates it for pub/sub) */
  redis(): Client {
    return this.client;
  }

  // -- admission ----------------------------------------------------------------------

  /** Wait in the fleet-wide queue for a lease. */
  async acquire(options: AcquireOptions = {}): Promise<Lease> {
    this.checkOpen();
    const { timeout, signal } = options;
    if (timeout !== undefined && (!Number.isFinite(timeout) || timeout < 0)) throw new ConfigError(`timeout must be undefined or seconds >= 0, got ${timeout}`);
    if (signal?.aborted) throw abortError(signal);
    const label = holderLabel(options.holder);
    const tokens = tokensOf(options.tokens);
    const where = this.core.place(options.priority, options.tenant);
    const deadline = timeout === undefined ? null : monotonic() + timeout;
    for (;;) {
      const [id, granted, expires] = await this.waitForGrant(label, deadline, timeout, tokens, where, signal);
      let claimed: [Granted, number] | null;
      try {
        claimed = await this.claim(id, granted, expires, label, where, tokens);
      } catch (error) {
        if (!(error instanceof GovernorUnavailable)) await this.abandon(id);
        throw error;
      }
      if (claimed === null) continue; // it expired before this caller took it: queue again
      const lease = new Lease(this, id, claimed[0].fence, claimed[0].epoch, label, claimed[1], where, tokens);
      this.background.addLease(lease);
      if (signal?.aborted) {
        await this.releaseLease(lease); // aborted as the grant came: give it back
        throw abortError(signal);
      }
      return lease;
    }
  }

  /** A lease if one is free right now and nobody is queued, else null. */
  async tryAcquire(options: Omit<AcquireOptions, "timeout" | "signal"> = {}): Promise<Lease | null> {
    this.checkOpen();
    const label = holderLabel(options.holder);
    const tokens = tokensOf(options.tokens);
    const where = this.core.place(options.priority, options.tenant);
    const id = newId();
    const sentAt = this.core.localNow();
    const result = await this.execute(this.core.acquire(id, label, "try", tokens, where));
    if (result.kind !== "granted") return null;
    const lease = new Lease(this, id, result.fence, result.epoch, label, sentAt + (result.remaining ?? 0), where, tokens);
    this.background.addLease(lease);
    this.background.start();
    return lease;
  }

  private async waitForGrant(
    label: string, deadline: number | null, timeout: number | undefined, tokens: Tokens, where: Place, signal: AbortSignal | undefined,
  ): Promise<[string, Granted, number]> {
    const id = newId();
    const waiter = this.background.addWaiter(id);
    let inflight: Promise<unknown> | null = null;
    try {
      await this.background.start(true, timeout);
      const sentAt = this.core.localNow();
      const sent = this.execute(this.core.acquire(id, label, "wait", tokens, where));
      inflight = sent;
      let result: Granted | Queued | Denied = await raceAbort(sent, signal);
      inflight = null;
      waiter.enqueued = true;
      waiter.confirmedAt = sentAt;
      let expires = result.kind === "granted" ? sentAt + (result.remaining ?? 0) : 0;
      while (result.kind !== "granted") {
        if (result.kind === "queued") {
          waiter.reason = result.reason;
          waiter.position = result.position;
        }
        [result, expires] = await this.waitTurn(waiter, deadline, timeout, label, tokens, where, signal, (p) => {
          inflight = p;
        });
        inflight = null;
      }
      return [id, result, expires];
    } catch (error) {
      if (!(error instanceof GovernorUnavailable)) {
        // Give the place or a grant back. A request still on its way is let
        // finish first, so the cancel reaches Redis after it.
        const pending: Promise<unknown> | null = inflight;
        if (pending !== null) await pending.catch(() => undefined);
        await this.abandon(id);
      }
      throw error;
    } finally {
      this.background.removeWaiter(id);
    }
  }

  private async waitTurn(
    waiter: Waiter, deadline: number | null, timeout: number | undefined, label: string, tokens: Tokens, where: Place,
    signal: AbortSignal | undefined, track: (p: Promise<unknown>) => void,
  ): Promise<[Granted | Queued | Denied, number]> {
    const remaining = deadline === null ? null : deadline - monotonic();
    if (remaining !== null && remaining <= 0) {
      throw new AcquireTimeout(`governor ${JSON.stringify(this.name)}: no lease within ${timeout} s (${waiter.reason || "queued"}; ${waiter.position} ahead at last look)`, this.name);
    }
    await waiter.wait(remaining === null ? this.config.queueTtl : Math.min(remaining, this.config.queueTtl), signal);
    if (waiter.error !== null) throw waiter.error;
    if (waiter.granted !== null) return [waiter.granted, waiter.deadline];
    if (waiter.retry) {
      waiter.retry = false;
      const sentAt = this.core.localNow();
      const sent = this.execute(this.core.acquire(waiter.id, label, "again", tokens, where));
      track(sent);
      const result = await raceAbort(sent, signal);
      waiter.confirmedAt = sentAt;
      return [result, result.kind === "granted" ? sentAt + (result.remaining ?? 0) : 0];
    }
    this.background.start(); // a safety net if the worker stopped
    return [{ kind: "queued", position: waiter.position, reason: waiter.reason, hint: 0, epoch: "" }, 0];
  }

  /** Take a grant; one that may expire before the next heartbeat is renewed first (null: already lost). */
  private async claim(id: string, granted: Granted, expires: number, label: string, where: Place, tokens: Tokens): Promise<[Granted, number] | null> {
    if (expires - this.core.localNow() > this.config.leaseTtl / 3) return [granted, expires];
    const sentAt = this.core.localNow();
    const renewed = await this.execute(this.core.renew([{ id, epoch: granted.epoch, holder: label, place: where, tokens }]));
    const until = sentAt + this.config.leaseTtl;
    if (renewed.ok.includes(id)) return [granted, until];
    const fence = renewed.adopted.get(id);
    if (fence !== undefined) return [{ kind: "granted", fence, epoch: renewed.epoch, remaining: null }, until];
    return null;
  }

  /** Give up a place or a grant; never throws (the TTLs clean up after us). */
  private async abandon(id: string): Promise<string> {
    try {
      return await this.execute(this.core.cancel(id));
    } catch {
      return "failed";
    }
  }

  /** @internal */
  async releaseLease(lease: Lease): Promise<void> {
    if (!lease.markReleased()) return;
    this.background.dropLease(lease);
    await this.execute(this.core.release(lease.id));
  }

  // -- spend (usd) budgets: src/spend.ts ----------------------------------------------------

  private wallMs(): number {
    return Math.round((this.config.clock !== undefined ? this.config.clock() : Date.now() / 1000) * 1000);
  }

  /**
   * Reserve `micros` (micro-dollars; `requests`, default 1, and `tokens`,
   * default 0, for the budgets that count those) in every budget of
   * `budgets` the call counts in (the fleet's, its tenant's): SpendExhausted
   * at once when one cannot afford it. `keep`: seconds the reservation
   * waits to be settled before it is kept as spent (default: the lease TTL
   * plus a minute).
   */
  async reserveSpend(
    micros: number, budgets: readonly SpendBudget[], options: { tenant?: string; keep?: number; requests?: number; tokens?: number } = {},
  ): Promise<SpendReservation> {
    const id = newId();
    const tenant = options.tenant ?? DEFAULT_TENANT;
    const keep = options.keep ?? this.config.leaseTtl + 60;
    const requests = options.requests ?? 1;
    const tokens = options.tokens ?? 0;
    await this.execute(this.core.spend("reserve", id, tenant, [micros, requests, tokens], String(Math.round(keep * 1000)), budgets, this.wallMs()));
    return { id, tenant, micros, requests, tokens };
  }

  /** Settle a reservation with the call's charge (micro-dollars), and the requests and tokens it took (default: what it reserved). */
  async settleSpend(reservation: SpendReservation, micros: number, budgets: readonly SpendBudget[], options: { requests?: number; tokens?: number } = {}): Promise<void> {
    const requests = reservation.requests ?? 1;
    const tokens = reservation.tokens ?? 0;
    const took = [micros, options.requests ?? requests, options.tokens ?? tokens];
    const reserved = `${reservation.micros},${requests},${tokens}`;
    await this.execute(this.core.spend("settle", reservation.id, reservation.tenant, took, reserved, budgets, this.wallMs()));
  }

  // -- outcomes ----------------------------------------------------------------------

  /** Feed one provider outcome to the fleet's policy and budgets. */
  async report(outcome: OutcomeName, options: ReportOptions = {}): Promise<void> {
    const { lease, release = false } = options;
    if (release && lease === undefined) throw new ConfigError("report({ release: true }) needs the lease to release");
    let leaseId: string | undefined;
    let fence: number | undefined;
    if (lease !== undefined) {
      fence = lease.fence;
      if (!lease.released) leaseId = lease.id;
    }
    const releasing = release && lease !== undefined && !lease.released;
    // built before the lease is touched: a bad outcome or retryAfter throws with the lease still held
    const call = this.core.report(outcome, options.retryAfter, leaseId, fence, releasing, options.usage, readLimits(options.headers), options.refusalsCount ?? true, options.load ?? true);
    if (releasing) {
      lease.markReleased();
      this.background.dropLease(lease);
    }
    const recorded = await this.execute(call);
    if (!recorded && lease !== undefined) {
      lease.markLost();
      throw new LeaseLost(`governor ${JSON.stringify(this.name)}: lease ${lease.id} (fence ${lease.fence}) expired before this report; its outcome was not counted and its slot may be someone else's`, this.name);
    }
  }

  /** Run `fn` under the fleet limit: acquire, call, classify, report, release, retry throttled calls. */
  call<T>(fn: (lease: Lease) => Promise<T>, options: CallOptions<T> = {}): Promise<T> {
    return callWithRetry(this, fn, options);
  }

  // -- operators ---------------------------------------------------------------------

  status(): Promise<Status> {
    return this.execute(this.core.status("status"));
  }

  probe(): Promise<Status> {
    return this.execute(this.core.status("probe"));
  }

  /** Lift a pause and a Retry-After hold; the recovery hold after a loss only with liftRecoveryHold. */
  resume(liftRecoveryHold = false): Promise<Status> {
    return this.execute(this.core.resume(liftRecoveryHold));
  }

  setMaxCapacity(n: number): Promise<Status> {
    return this.execute(this.core.setMax(n));
  }

  pause(reason: string, duration?: number): Promise<Status> {
    return this.execute(this.core.pause(reason, duration));
  }

  /** Change the tenants' weights and caps, the reserve and the aging at run time (stored: every client learns them). */
  setShares(changes: SharesChange): Promise<Status> {
    return this.execute(this.core.setShares(changes));
  }

  /** Forget what the policy learnt (window, pause, hold); the stored config stays. */
  reset(): Promise<Status> {
    return this.execute(this.core.reset(false));
  }

  /** Store this object's config as the fleet's, then reset. */
  configure(): Promise<Status> {
    return this.execute(this.core.reset(true));
  }

  /** Renew every lease this object holds now (the heartbeat does it every leaseTtl / 3). */
  renew(): Promise<void> {
    return this.background.renew();
  }

  /** Stop the background worker and close the connections; leases still held expire by their TTL. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.background.stop();
    this.client.disconnect();
  }

  private checkOpen(): void {
    if (this.closed) throw new GovernorError(`governor ${JSON.stringify(this.name)} is closed`, this.name);
  }

  // -- plumbing ------------------------------------------------------------------------

  /** Run one function; when the state is missing, create it (init) and run it again. */
  async execute<T>(call: Call<T>): Promise<T> {
    if (call.recreate && this.core.storedConfig === null) await this.init();
    let result = await this.runRepaired(call);
    if (result === MISSING) {
      if (!call.recreate) return call.ifMissing as T;
      await this.init();
      result = await this.run(call);
      if (result === MISSING) throw new StateError(`governor ${JSON.stringify(this.name)}: state vanished right after creation`, this.name);
    }
    return result;
  }

  /** Run `call`; a config or policy hash lost while the state stayed (GOVERNOR_MISSING) is stored again (init) and the call made again. */
  private async runRepaired<T>(call: Call<T>): Promise<T | Missing> {
    try {
      return await this.run(call);
    } catch (error) {
      if (!(error instanceof StateError && error.message.includes("GOVERNOR_MISSING"))) throw error;
      await this.init();
      return this.run(call);
    }
  }

  private async init(): Promise<string> {
    const created = await this.run(this.core.init(this.background.holdsLeases(), this.background.listening));
    if (created === MISSING) throw new StateError(`governor ${JSON.stringify(this.name)}: init answered missing`, this.name);
    if (created === "created" && this.background.holdsLeases()) this.background.renewSoon();
    return created;
  }

  /** @internal the stored config anew (the "!config" wake): read, never created */
  async learnConfig(): Promise<void> {
    let stored: Record<string, string>;
    try {
      stored = await this.client.hgetall(this.keys.byName["config"]!);
    } catch (error) {
      throw this.mapError(error);
    }
    this.core.learnStoredConfig(stored);
  }

  private async run<T>(call: Call<T>): Promise<T | Missing> {
    const reply = await this.send(call, true);
    return call.parse(reply);
  }

  private async send(call: Call<unknown>, reload: boolean): Promise<unknown> {
    // A cluster call passes every key (a migrating slot is refused before it runs); standalone, the state key.
    const keys = this.everyKey || this.client instanceof Cluster ? this.keys.keys : this.keys.scriptKeys;
    try {
      return await this.client.fcall(functionName(call.op), keys.length, ...keys, ...call.args);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (message.includes(EVERY_KEY) && keys.length === 1) {
        this.everyKey = true; // a cluster node answered: nothing ran
        return this.send(call, reload);
      }
      if (reload && message.includes(MISSING_FUNCTION)) {
        await this.loadLibrary();
        return this.send(call, false);
      }
      if (message.startsWith("MOVED") && this.client instanceof Redis && this.url !== undefined) {
        const standalone = this.client;
        this.client = Governor.clusterClient(this.url, this.config);
        this.watch(this.client);
        standalone.disconnect();
        await this.background.restart();
        return this.send(call, reload);
      }
      throw this.mapError(error);
    }
  }

  /** The governor's error for a Redis client's: a refusal, a bad argument, or Redis out of reach (naming why). */
  mapError(error: unknown): GovernorError {
    if (error instanceof GovernorError) return error;
    const message = error instanceof Error ? error.message : String(error);
    const name = JSON.stringify(this.name);
    const layout = /GOVERNOR_LAYOUT (\d+) (\d+)/.exec(message);
    if (layout !== null) {
      return new StateError(`governor ${name}: the state has layout ${layout[1]} and admits clients of layout ${layout[2]} and later; this client's library is older. Nothing was changed: upgrade this client (docs/upgrade.md) and keep the state, the running fleet uses it`, this.name, { cause: error });
    }
    if (message.includes("GOVERNOR_BADARG")) return new ConfigError(`governor ${name}: invalid argument: ${message}`, this.name, { cause: error });
    if (/^(NOAUTH|WRONGPASS|NOPERM)/.test(message)) {
      return new GovernorUnavailable(`governor ${name}: Redis at ${where(this.client, this.url)} refused access (${message}); check the credentials and the ACL`, this.name, { cause: error });
    }
    if (/^(BUSY|LOADING|MASTERDOWN|READONLY|CLUSTERDOWN|NOREPLICAS|OOM)/.test(message)) {
      return new GovernorUnavailable(`governor ${name}: Redis at ${where(this.client, this.url)} cannot serve now: ${message}`, this.name, { cause: error });
    }
    if (/^(ERR|BADARG|WRONGTYPE|STATE)/.test(message) || message.includes("user_function")) {
      return new StateError(`governor ${name}: Redis refused the call: ${message}`, this.name, { cause: error });
    }
    if (/timed out/i.test(message)) {
      return new GovernorUnavailable(`governor ${name}: Redis at ${where(this.client, this.url)} did not answer within ${this.config.redisTimeout} s (redisTimeout); check that it is up and not overloaded`, this.name, { cause: error });
    }
    // ioredis gives up on a command with "max retries per request" or "Connection is closed": the cause is the connection's own error
    const cause = this.connectionError ?? (error instanceof Error ? error : new Error(message));
    return new GovernorUnavailable(`governor ${name}: Redis at ${where(this.client, this.url)} is unreachable (${cause.message}); check the URL and that Redis is up`, this.name, { cause });
  }

  /** Load the library (on every primary of a cluster) when Redis said a function is missing. */
  private async loadLibrary(): Promise<void> {
    const clients: Redis[] = this.client instanceof Cluster ? this.client.nodes("master") : [this.client];
    try {
      await Promise.all(clients.map((c) => c.call("FUNCTION", "LOAD", "REPLACE", library())));
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (message.startsWith("NOPERM")) {
        throw new GovernorUnavailable(`governor ${JSON.stringify(this.name)}: the functions library ${LIBRARY_NAME} is not loaded on this Redis and this user may not load it (ACL +function|load): an operator runs \`governor library --load\``, this.name, { cause: error });
      }
      throw this.mapError(error);
    }
  }
}

/** host:port of a client (a cluster's seed node, from its URL), without credentials */
function where(client: Client, url: string | undefined): string {
  if (client instanceof Redis) {
    const { host, port, path } = client.options;
    return path ? path : `${host}:${port}`;
  }
  if (url !== undefined && URL.canParse(url)) return new URL(url).host;
  return "the cluster";
}

type Missing = typeof MISSING;

function raceAbort<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return promise;
  if (signal.aborted) return Promise.reject(abortError(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortError(signal));
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}

/** Listens for grants, refreshes waiters, renews leases: one per Governor object. */
class Background {
  private readonly waiters = new Map<string, Waiter>();
  private readonly leases = new Map<string, Lease>();
  private subscriber: Client | null = null;
  listening = false;
  private subscribing: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private stopped = false;
  private nextRefresh = 0;
  private nextRenew = 0;
  private renewNow = false;
  private learnConfig = false;
  private failures = 0;
  private lastOk = monotonic();

  constructor(private readonly gov: Governor) {}

  addWaiter(id: string): Waiter {
    const waiter = new Waiter(id);
    this.waiters.set(id, waiter);
    return waiter;
  }

  removeWaiter(id: string): void {
    this.waiters.delete(id);
  }

  addLease(lease: Lease): void {
    this.leases.set(lease.id, lease);
    if (this.nextRenew === 0) this.nextRenew = monotonic() + this.gov.config.leaseTtl / 3;
    // The heartbeat runs while a lease is held: wake the worker if it stopped.
    if (this.timer === null && !this.running && !this.stopped) this.schedule(Math.max(0, this.nextRenew - monotonic()));
  }

  dropLease(lease: Lease): void {
    this.leases.delete(lease.id);
  }

  holdsLeases(): boolean {
    return this.leases.size > 0;
  }

  renewSoon(): void {
    this.renewNow = true;
    this.schedule(0);
  }

  /** Start listening if not yet; optionally wait (at most redisTimeout or `timeout`) until it listens. */
  async start(waitListening = false, timeout?: number): Promise<void> {
    this.stopped = false;
    if (this.subscriber === null) {
      this.subscribing = this.subscribe().catch(() => {
        this.subscribing = null; // the worker's loop tries again
      });
      this.schedule(0);
    } else if (this.timer === null && !this.running && (this.waiters.size > 0 || this.leases.size > 0)) {
      this.schedule(0); // the worker stopped when it had nothing to look after
    }
    if (waitListening && !this.listening && this.subscribing !== null && this.failures === 0) {
      const limit = Math.min(this.gov.config.redisTimeout, timeout ?? Infinity);
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.subscribing, new Promise<void>((resolve) => {
        timer = setTimeout(resolve, limit * 1000);
      })]);
      clearTimeout(timer);
    }
  }

  private async subscribe(): Promise<void> {
    const sub = this.gov.redis().duplicate();
    this.subscriber = sub;
    sub.on("message", (_channel: string, message: string) => this.dispatch(message));
    sub.on("error", () => {
      this.listening = false;
    });
    sub.on("close", () => {
      this.listening = false;
    });
    sub.on("ready", () => {
      // Contact was lost, and Redis may have restarted meanwhile: renew now
      // (a new state adopts these holders) and refresh (grants announced
      // while we did not listen).
      if (this.listening) return;
      this.listening = true;
      this.renewNow = this.leases.size > 0;
      this.nextRefresh = 0;
      this.schedule(0);
    });
    await sub.subscribe(this.gov.keys.channel);
    this.listening = true;
  }

  async restart(): Promise<void> {
    const sub = this.subscriber;
    this.subscriber = null;
    this.listening = false;
    sub?.disconnect();
    await this.start(false);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const sub = this.subscriber;
    this.subscriber = null;
    this.listening = false;
    sub?.disconnect();
  }

  private schedule(delay: number): void {
    if (this.stopped) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.tick();
    }, Math.max(0, delay * 1000));
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    if (this.running || this.stopped) return;
    this.running = true;
    const config = this.gov.config;
    let delay: number;
    try {
      if (this.subscriber === null) await this.start(false);
      if (this.learnConfig) {
        await this.gov.learnConfig();
        this.learnConfig = false;
      }
      let now = monotonic();
      if (now >= this.nextRefresh) this.nextRefresh = now + (await this.refresh());
      now = monotonic();
      if (this.leases.size > 0 && (this.renewNow || now >= this.nextRenew)) {
        await this.renew();
        this.renewNow = false;
        this.nextRenew = now + config.leaseTtl / 3;
      } else if (this.leases.size === 0) {
        this.nextRenew = now + config.leaseTtl / 3;
      }
      this.failures = 0;
      this.lastOk = monotonic();
      delay = Math.max(0, Math.min(this.nextRefresh, this.nextRenew) - monotonic());
    } catch (error) {
      this.failures += 1;
      this.failWaitersIfStale(error);
      const ceiling = Math.min(config.poll, 0.05 * 2 ** Math.min(this.failures - 1, 7));
      delay = Math.random() * ceiling;
    } finally {
      this.running = false;
    }
    if (this.waiters.size > 0 || this.leases.size > 0) this.schedule(delay);
  }

  private dispatch(data: string): void {
    const wake = parseWake(data);
    for (const fence of wake.grants.values()) this.gov.core.sawFence(fence);
    if (wake.ttlMax !== null) this.gov.core.sawTtl(String(wake.ttlMax));
    if (wake.configChanged) {
      this.learnConfig = true;
      this.schedule(0);
      return;
    }
    if (wake.retryIn !== null) {
      this.nextRefresh = Math.min(this.nextRefresh, monotonic() + wake.retryIn + 0.001);
      this.schedule(Math.max(0, this.nextRefresh - monotonic()));
      return;
    }
    if (wake.grants.size === 0) {
      if ([...this.leases.values()].some((l) => l.epoch !== wake.epoch)) this.renewSoon(); // a new state: re-register
      return;
    }
    for (const [id, fence] of wake.grants) {
      const waiter = this.waiters.get(id);
      if (waiter !== undefined) {
        waiter.granted = { kind: "granted", fence, epoch: wake.epoch, remaining: null };
        waiter.deadline = waiter.confirmedAt + this.gov.config.leaseTtl;
        waiter.set();
      }
    }
  }

  /** Refresh this process's queued callers; seconds until the next refresh. */
  private async refresh(): Promise<number> {
    const poll = this.gov.config.poll;
    const ids = [...this.waiters.values()].filter((w) => w.enqueued && w.granted === null).map((w) => w.id);
    let hint = poll;
    for (let start = 0; start < ids.length; start += BATCH) {
      const chunk = ids.slice(start, start + BATCH);
      const sentAt = this.gov.core.localNow();
      const result = await this.gov.execute(this.gov.core.refresh(chunk));
      if (result.hint > 0) hint = Math.min(hint, result.hint + 0.001);
      for (const [id, { fence, remaining }] of result.granted) {
        const waiter = this.waiters.get(id);
        if (waiter !== undefined) {
          waiter.granted = { kind: "granted", fence, epoch: result.epoch, remaining };
          waiter.deadline = sentAt + remaining;
          waiter.set();
        }
      }
      for (const id of result.queued.keys()) {
        const waiter = this.waiters.get(id);
        if (waiter !== undefined) {
          waiter.confirmedAt = sentAt;
          waiter.reason = result.reason;
        }
      }
      for (const id of result.unknown) {
        const waiter = this.waiters.get(id);
        if (waiter !== undefined) {
          waiter.retry = true;
          waiter.set();
        }
      }
    }
    return hint;
  }

  async renew(): Promise<void> {
    const leases = [...this.leases.values()].filter((l) => !l.lost && !l.released);
    const ttl = this.gov.config.leaseTtl;
    for (let start = 0; start < leases.length; start += BATCH) {
      const chunk = leases.slice(start, start + BATCH);
      const sentAt = this.gov.core.localNow();
      const result = await this.gov.execute(this.gov.core.renew(chunk.map((l) => ({ id: l.id, epoch: l.epoch, holder: l.holder, place: l.place, tokens: l.tokens }))));
      const byId = new Map(chunk.map((l) => [l.id, l]));
      for (const id of result.ok) byId.get(id)!.deadline = sentAt + ttl;
      for (const [id, fence] of result.adopted) {
        const lease = byId.get(id)!;
        if (lease.released) {
          // released while this renewal was on its way: undo the adoption
          await this.gov.execute(this.gov.core.release(id));
          continue;
        }
        lease.fence = fence;
        lease.epoch = result.epoch;
        lease.deadline = sentAt + ttl;
      }
      for (const id of result.lost) {
        const lease = byId.get(id)!;
        if (!lease.released) lease.markLost();
      }
    }
    for (const [id, lease] of this.leases) if (lease.lost || lease.released) this.leases.delete(id);
  }

  /** Fail closed: after queueTtl without reaching Redis the waiters' places are gone; tell them. */
  private failWaitersIfStale(error: unknown): void {
    let failure: GovernorError;
    if (error instanceof GovernorError && !(error instanceof GovernorUnavailable)) failure = error;
    else if (monotonic() - this.lastOk < this.gov.config.queueTtl) return;
    else failure = error instanceof GovernorUnavailable ? error : this.gov.mapError(error);
    for (const waiter of this.waiters.values()) {
      waiter.error = failure;
      waiter.set();
    }
  }
}

export type { Tokens, Outcome, OutcomeName };
