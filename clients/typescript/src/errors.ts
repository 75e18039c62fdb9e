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
