/**
 * The governor's config: the Python GovernorConfig's fields, camel-cased,
 * durations in seconds. The stored part (the first client to create a
 * governor stores it; every later one learns it) is written by
 * {@link scriptFields} in exactly the strings the Python client writes.
 */
import { BUDGET_CONFIG_FIELDS, BUDGET_KINDS, CONFIG_DEFAULTS, DEFAULT_TENANT, MAX_CLASSES, POLICIES } from "./generated.js";
import { ConfigError } from "./errors.js";
import { PriceBook } from "./prices.js";
import { budgetsArgs, type SpendBudget } from "./spend.js";

export type BudgetKind = (typeof BUDGET_KINDS)[number];

export interface GovernorConfig {
  /** the fleet's ceiling of calls in flight */
  maxCapacity?: number;
  /** "adaptive", "seed" or "fixed" */
  policy?: string;
  /** the policy's own stored fields (e.g. { pause_count: 4 }); unset ones take their defaults */
  policyFields?: Record<string, string | number>;
  window?: number;
  resumeFraction?: number;
  retryAfterCap?: number;
  /** seconds a lease lives unrenewed; the heartbeat renews every leaseTtl / 3 */
  leaseTtl?: number;
  /** seconds between refreshes of this process's waiters (the pub/sub safety net) */
  poll?: number;
  /** seconds a waiter keeps its place unrefreshed */
  queueTtl?: number;
  idleExpiry?: number;
  logLength?: number;
  /** seconds a Redis command may take */
  redisTimeout?: number;
  restartHold?: boolean;
  keyPrefix?: string;
  requestsPerMinute?: number | null;
  tokensPerMinute?: number | null;
  inputTokensPerMinute?: number | null;
  outputTokensPerMinute?: number | null;
  /** Anthropic's fast mode, limited apart: a lease whose tokens name tier "fast" counts here, not in the standard kinds */
  fastInputTokensPerMinute?: number | null;
  fastOutputTokensPerMinute?: number | null;
  priorities?: readonly string[];
  defaultPriority?: string;
  /** seconds after which a lower class's waiter goes ahead of every class (null: never) */
  aging?: number | null;
  tenantWeights?: Readonly<Record<string, number>>;
  defaultWeight?: number;
  tenantCaps?: Readonly<Record<string, number>>;
  reserve?: number;
  /** an injected clock in seconds (tests, simulations); default: Redis TIME */
  clock?: () => number;
  /**
   * dollar budgets (GovernorConfig.spend): each a limit per window for the
   * fleet and per tenant; governedFetch reserves each call's most before it
   * is sent and settles its charge when it is answered
   */
  spend?: readonly SpendBudget[];
  /** what prices each call for the spend budgets (a governedFetch's own prices win) */
  prices?: PriceBook;
}

export interface ResolvedConfig {
  readonly maxCapacity: number;
  readonly policy: string;
  readonly policyFields: Readonly<Record<string, string>>;
  readonly window: number;
  readonly resumeFraction: number;
  readonly retryAfterCap: number;
  readonly leaseTtl: number;
  readonly poll: number;
  readonly queueTtl: number;
  readonly idleExpiry: number;
  readonly logLength: number;
  readonly redisTimeout: number;
  readonly restartHold: boolean;
  readonly keyPrefix: string;
  readonly budgets: Readonly<Record<BudgetKind, number>>;
  readonly priorities: readonly string[];
  readonly defaultPriority: string;
  readonly aging: number | null;
  readonly tenantWeights: Readonly<Record<string, number>>;
  readonly defaultWeight: number;
  readonly tenantCaps: Readonly<Record<string, number>>;
  readonly reserve: number;
  readonly clock: (() => number) | undefined;
  readonly spend: readonly SpendBudget[];
  readonly prices: PriceBook | undefined;
}

const TENANT = /^[A-Za-z0-9_.:-]{1,64}$/;
const CLASS = /^[a-z0-9_-]{1,32}$/;

/** seconds to whole milliseconds, as the functions count time */
export function ms(seconds: number): number {
  return Math.round(seconds * 1000);
}

/** a float as Python's repr writes it ("0.5", "1.0") */
function pyFloat(value: number): string {
  return Number.isInteger(value) ? `${value}.0` : String(value);
}

function positive(name: string, value: number, low = 0): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < low) {
    throw new ConfigError(`${name} must be a finite number >= ${low}, got ${String(value)}`);
  }
  return value;
}

function integer(name: string, value: number, low: number, high = 1_000_000): number {
  if (!Number.isInteger(value) || value < low || value > high) {
    throw new ConfigError(`${name} must be an integer in [${low}, ${high}], got ${String(value)}`);
  }
  return value;
}

export function validateTenant(tenant: string): string {
  if (typeof tenant !== "string" || !TENANT.test(tenant)) {
    throw new ConfigError(`tenant ${JSON.stringify(tenant)} is invalid: use 1-64 characters of letters, digits and _ . : -`);
  }
  return tenant;
}

function pairs(name: string, value: Readonly<Record<string, number>>, high: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [tenant, n] of Object.entries(value)) {
    validateTenant(tenant);
    out[tenant] = integer(`${name}[${tenant}]`, n, 1, high);
  }
  return out;
}

export function resolveConfig(config: GovernorConfig = {}): ResolvedConfig {
  const d = CONFIG_DEFAULTS;
  const policy = config.policy ?? d.policy;
  const known = (POLICIES as Record<string, { fields: Record<string, string>; followsWindow: Record<string, number> }>)[policy];
  if (known === undefined) {
    throw new ConfigError(`unknown policy ${JSON.stringify(policy)}: use one of ${Object.keys(POLICIES).join(", ")}`);
  }
  const window = positive("window", config.window ?? d.window, 0.001);
  const policyFields: Record<string, string> = { ...known.fields };
  for (const [field, share] of Object.entries(known.followsWindow)) {
    policyFields[field] = String(ms(share * window));
  }
  for (const [field, value] of Object.entries(config.policyFields ?? {})) {
    if (!(field in known.fields)) {
      throw new ConfigError(`the ${policy} policy has no field ${JSON.stringify(field)}: use ${Object.keys(known.fields).join(", ")}`);
    }
    policyFields[field] = String(value);
  }
  const priorities = [...(config.priorities ?? d.priorities)];
  if (priorities.length < 1 || priorities.length > MAX_CLASSES || new Set(priorities).size !== priorities.length) {
    throw new ConfigError(`priorities must be 1 to ${MAX_CLASSES} distinct class names, got ${priorities.join(",")}`);
  }
  for (const name of priorities) {
    if (!CLASS.test(name)) throw new ConfigError(`priority class ${JSON.stringify(name)} is invalid: use 1-32 characters of a-z, 0-9, _ and -`);
  }
  const defaultPriority = config.defaultPriority ?? (priorities.includes(d.defaultPriority) ? d.defaultPriority : priorities[0]!);
  if (!priorities.includes(defaultPriority)) {
    throw new ConfigError(`defaultPriority ${defaultPriority} is not one of the priorities ${priorities.join(",")}`);
  }
  const budgets = {} as Record<BudgetKind, number>;
  const perMinute: Record<BudgetKind, number | null | undefined> = {
    requests: config.requestsPerMinute,
    tokens: config.tokensPerMinute,
    input_tokens: config.inputTokensPerMinute,
    output_tokens: config.outputTokensPerMinute,
    fast_input_tokens: config.fastInputTokensPerMinute,
    fast_output_tokens: config.fastOutputTokensPerMinute,
  };
  for (const kind of BUDGET_KINDS) {
    const value = perMinute[kind];
    budgets[kind] = value === undefined || value === null ? 0 : integer(BUDGET_CONFIG_FIELDS[kind], value, 1, 2 ** 53);
  }
  const maxCapacity = integer("maxCapacity", config.maxCapacity ?? d.maxCapacity, 1);
  const reserve = integer("reserve", config.reserve ?? d.reserve, 0);
  if (reserve > 0 && reserve >= maxCapacity) throw new ConfigError(`reserve must be below maxCapacity, got ${reserve}`);
  const leaseTtl = positive("leaseTtl", config.leaseTtl ?? d.leaseTtl, 0.001);
  return {
    maxCapacity,
    policy,
    policyFields,
    window,
    resumeFraction: positive("resumeFraction", config.resumeFraction ?? d.resumeFraction),
    retryAfterCap: positive("retryAfterCap", config.retryAfterCap ?? d.retryAfterCap),
    leaseTtl,
    poll: positive("poll", config.poll ?? d.poll, 0.001),
    queueTtl: positive("queueTtl", config.queueTtl ?? d.queueTtl, 0.001),
    idleExpiry: positive("idleExpiry", config.idleExpiry ?? d.idleExpiry, 1),
    logLength: integer("logLength", config.logLength ?? d.logLength, 1, 10_000_000),
    redisTimeout: positive("redisTimeout", config.redisTimeout ?? d.redisTimeout, 0.001),
    restartHold: config.restartHold ?? d.restartHold,
    keyPrefix: config.keyPrefix ?? d.keyPrefix,
    budgets,
    priorities,
    defaultPriority,
    aging: config.aging === undefined ? d.aging : config.aging === null ? null : positive("aging", config.aging),
    tenantWeights: pairs("tenantWeights", config.tenantWeights ?? {}, 1000),
    defaultWeight: integer("defaultWeight", config.defaultWeight ?? d.defaultWeight, 1, 1000),
    tenantCaps: pairs("tenantCaps", config.tenantCaps ?? {}, 1_000_000),
    reserve,
    clock: config.clock,
    spend: spendBudgets(config.spend),
    prices: priceBook("prices", config.prices),
  };
}

function spendBudgets(value: readonly SpendBudget[] | undefined): readonly SpendBudget[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new ConfigError("spend must be an array of spend budgets ({ name, window, limit, tenants })");
  if (value.length > 0) budgetsArgs(value, 0); // each budget checked as the spend function will take it
  return Object.freeze([...value]);
}

/** A PriceBook, or undefined; a ConfigError naming `what` otherwise. */
export function priceBook(what: string, value: unknown): PriceBook | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof PriceBook)) throw new ConfigError(`${what} must be a PriceBook (new PriceBook([...])) or undefined, got ${String(value)}`);
  return value;
}

function formatPairs(value: Readonly<Record<string, number>>): string {
  return Object.entries(value)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
}

function parsePairs(stored: string): Record<string, number> {
  const out: Record<string, number> = {};
  if (stored === "") return out;
  for (const part of stored.split(",")) {
    const [tenant, n] = part.split("=");
    if (tenant !== undefined && n !== undefined) out[tenant] = Number(n);
  }
  return out;
}

/** The stored config as init.lua takes it: name, value pairs (governor.protocol CONFIG, then the policy's). */
export function scriptFields(c: ResolvedConfig): string[] {
  const fields: [string, string][] = [
    ["policy", c.policy],
    ["max_capacity", String(c.maxCapacity)],
    ["window_ms", String(ms(c.window))],
    ["resume_fraction", pyFloat(c.resumeFraction)],
    ["retry_after_cap_ms", String(ms(c.retryAfterCap))],
    ["idle_ms", String(Math.max(1000, ms(c.idleExpiry)))],
    ["log_length", String(c.logLength)],
    ["priorities", c.priorities.join(",")],
    ["default_priority", c.defaultPriority],
    ["aging_ms", String(c.aging === null ? 0 : Math.max(1, ms(c.aging)))],
    ["tenant_weights", formatPairs(c.tenantWeights)],
    ["default_weight", String(c.defaultWeight)],
    ["tenant_caps", formatPairs(c.tenantCaps)],
    ["reserve", String(c.reserve)],
    ...BUDGET_KINDS.map((k): [string, string] => [BUDGET_CONFIG_FIELDS[k], String(c.budgets[k])]),
    ...Object.entries(c.policyFields),
  ];
  return fields.flat();
}

/** Where a caller waits: its class's rank and its tenant's weight, by the fleet's stored config. */
export interface Place {
  readonly priority: string;
  readonly rank: number;
  readonly tenant: string;
  readonly weight: number;
}

export function place(
  stored: Readonly<Record<string, string>> | null,
  config: ResolvedConfig,
  priority?: string,
  tenant?: string,
): Place {
  const priorities = stored?.["priorities"] !== undefined ? stored["priorities"].split(",") : config.priorities;
  const defaultPriority = stored?.["default_priority"] ?? config.defaultPriority;
  const weights = stored?.["tenant_weights"] !== undefined ? parsePairs(stored["tenant_weights"]) : config.tenantWeights;
  const defaultWeight = stored?.["default_weight"] !== undefined ? Number(stored["default_weight"]) : config.defaultWeight;
  const name = priority ?? defaultPriority;
  const rank = priorities.indexOf(name);
  if (rank < 0) {
    throw new ConfigError(`unknown priority class ${JSON.stringify(name)}: the fleet's classes are ${priorities.join(", ")}`);
  }
  const who = tenant === undefined ? DEFAULT_TENANT : validateTenant(tenant);
  return { priority: name, rank, tenant: who, weight: weights[who] ?? defaultWeight };
}
