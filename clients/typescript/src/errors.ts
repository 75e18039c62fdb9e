/** The errors of the Node client: the same family as the Python package's governor.errors. */

export class GovernorError extends Error {
  /** the governor the error is about, when known */
  readonly governor: string | undefined;

  constructor(message: string, governor?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.governor = governor;
  }
}

/** A config or an argument is invalid: fix the call, nothing was sent. */
export class ConfigError extends GovernorError {}

/** Redis could not be reached or did not answer in time. */
export class GovernorUnavailable extends GovernorError {}

/** The stored state or a reply cannot be used by this client. */
export class StateError extends GovernorError {}

/** No lease within the acquire's timeout. */
export class AcquireTimeout extends GovernorError {}

/** A report found its lease expired: its outcome was not counted. */
export class LeaseLost extends GovernorError {}

/** The provider says the quota or spend limit is used up: an operator must act. */
export class QuotaExhausted extends GovernorError {}

/** The cost is above a budget's whole limit: it can never be admitted. */
export class CostTooLarge extends GovernorError {}

/** The AbortSignal fired: what the caller waited for was given back. */
export class AbortError extends GovernorError {}

/**
 * A spend (usd) budget cannot afford the call before its timeout: it fails at
 * once rather than queue. Keyed on the reply code `spend_exhausted`; the
 * figures are micro-dollars (1e-6 USD), `resetsAt` Unix seconds (null: a
 * budget that never resets by itself).
 */
export class SpendExhausted extends GovernorError {
  static readonly code = "spend_exhausted";
  /** the budget used up (the fleet's, or a tenant's) */
  readonly budget: string;
  /** micro-dollars spent (and reserved) in its window */
  readonly spent: number;
  /** its limit, micro-dollars per window */
  readonly limit: number;
  /** Unix seconds when its window resets */
  readonly resetsAt: number | null;
  /** whose limit: "*" the fleet's, else a tenant's */
  readonly scope: string;
  /** "limit", "threshold" (paused at the soft threshold until approved) or "never" (above the whole limit) */
  readonly why: string;

  constructor(
    message: string,
    figures: { budget: string; spent: number; limit: number; resetsAt: number | null; scope?: string; why?: string },
    governor?: string,
    options?: { cause?: unknown },
  ) {
    super(message, governor, options);
    this.budget = figures.budget;
    this.spent = figures.spent;
    this.limit = figures.limit;
    this.resetsAt = figures.resetsAt;
    this.scope = figures.scope ?? "*";
    this.why = figures.why ?? "limit";
  }
}
