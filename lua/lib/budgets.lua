--[[ lib/budgets.lua: the token buckets beside concurrency.

Uses lib/common.lua, lib/fields.lua, lib/decisions.lua.
Defines: KIND_OF, NO_LIMITS, budget_fields, budget_cost, active_budgets,
capacity_of, budget_level, set_level, settle, refused, reborn, oversize,
announced_budgets, calibrate.

Under faults and bad input: a level's debt is bounded to one capacity
below 0 (set_level); a refused call never raises a level (refused); a
state re-created after a loss starts each bucket empty (reborn); a cost
above a header-announced limit waits for a full bucket rather than being
refused for good (oversize; a configured ceiling still refuses it). A call reads the
active kinds' fields once (CALL.active), only when some are active, so a
governor without budgets pays one field (STATE.budgets).
]]

-- Budgets beside concurrency (governor/budgets.py): token buckets in the
-- state hash, <kind>_limit per minute (the refill rate; 0: not governed),
-- <kind>_burst (what the bucket holds at most; 0: no header seen yet, the
-- limit), <kind>_level at <kind>_at ms, <kind>_source. STATE.budgets lists the
-- active kinds; a call reads their fields once (active_budgets), only when
-- some are active, so a governor without budgets pays one field.
local KIND_OF = {}
for i = 1, #BUDGET_KINDS do KIND_OF[BUDGET_KINDS[i]] = true end  -- (no ipairs at load time)

local function budget_fields(kind)
  return kind .. '_limit', kind .. '_burst', kind .. '_level', kind .. '_at', kind .. '_source'
end

-- What one lease of `tokens` takes from budget `kind`, and whether the
-- kind counts it at all: its tokens count in the kinds of its tier alone
-- (tokens.tier, nil or '': the standard tier; BUDGET_COST's [4]), the
-- per-lease cost in every kind that has one.
local function budget_cost(kind, tokens)
  local cost = BUDGET_COST[kind]
  if cost[4] ~= (tokens.tier or '') then return cost[1], cost[1] > 0 end
  return cost[1] + cost[2] * tokens.input + cost[3] * tokens.output, true
end

-- The active kinds, their fields read (needs STATE.budgets: load it);
-- .apart when one of them is a tier's limited apart (fast mode's).
local NO_BUDGETS = {}  -- (never changed)
local NO_LIMITS = {}  -- a report that announces no rate-limit figures (never changed)
local function active_budgets()
  if CALL.active then return CALL.active end
  if STATE.budgets == '' then
    CALL.active = NO_BUDGETS
    return NO_BUDGETS
  end
  local active = {}
  CALL.active = active
  local names = {}
  for kind in string.gmatch(STATE.budgets, '[^,]+') do
    if not KIND_OF[kind] then fail('BADSTATE', 'field budgets holds ' .. string.format('%q', STATE.budgets)) end
    active[#active + 1] = kind
    if BUDGET_COST[kind][4] ~= '' then active.apart = true end
    local limit, burst, level, at, source = budget_fields(kind)
    for _, f in ipairs({limit, burst, level, at, source}) do names[#names + 1] = f end
  end
  read_more('state', unpack(names))
  return active
end

local function capacity_of(kind)
  local burst = STATE[kind .. '_burst']
  if burst > 0 then return burst end
  return STATE[kind .. '_limit']
end

-- A bucket's level now: refilled at its limit per minute since <kind>_at,
-- never above its capacity.
local function budget_level(kind)
  local limit = STATE[kind .. '_limit']
  local level = STATE[kind .. '_level'] + math.max(0, NOW - STATE[kind .. '_at']) * limit / 60000
  return math.min(level, capacity_of(kind))
end

-- A level is written here only: its debt is bounded to one capacity's
-- worth below 0 (a bucket in debt is full again within two of its refills),
-- so no charge, however large, stalls the fleet for longer.
local function set_level(kind, level)
  set('state', kind .. '_level', math.max(level, -capacity_of(kind)))
  set('state', kind .. '_at', NOW)
end

-- A lease's report settles its reservation: what it did not use goes back,
-- what it used beyond is charged (a level may go below 0, down to the
-- debt bound). `spent`: a refused call the provider counted keeps its
-- reservation (charged beyond it, never given back).
local function settle(reserved, used, spent)
  if used.tier == nil and reserved.tier then  -- (no tier said: served in the one asked for)
    used = {input = used.input, output = used.output, tier = reserved.tier}
  end
  for _, kind in ipairs(active_budgets()) do
    local delta = budget_cost(kind, reserved) - budget_cost(kind, used)
    if spent then delta = math.min(delta, 0) end
    if delta ~= 0 then set_level(kind, math.min(budget_level(kind) + delta, capacity_of(kind))) end
  end
end

-- A rate-limited outcome: the provider's bucket is empty, so each active
-- bucket of the refused call's tier (`tier`, '' the standard one: a fast
-- mode refusal says nothing of the standard limits, nor the other way)
-- whose level the report's headers did not announce (`announced`: kind ->
-- true) is clamped to 0, as a remaining of 0 would. A refusal never
-- raises a level, so refusals cannot admit one another in a loop.
-- Needs CONFIG.log_length and the events key's type checked.
local function refused(announced, tier)
  for _, kind in ipairs(active_budgets()) do
    if not announced[kind] and BUDGET_COST[kind][4] == tier and budget_level(kind) > 0 then
      set_level(kind, 0)
      log('budget', 'budget', kind, 'limit', STATE[kind .. '_limit'], 'burst', STATE[kind .. '_burst'], 'level', 0,
        'source', STATE[kind .. '_source'], 'why', 'rate-limited: clamped to 0')
    end
  end
end

-- A state created after a loss (init.lua): each active bucket starts empty,
-- not full, since what the fleet spent in the last minute is not known;
-- it refills at its limit. Needs CONFIG.log_length and the events key's type checked.
local function reborn()
  for _, kind in ipairs(active_budgets()) do
    set_level(kind, 0)
    log('budget', 'budget', kind, 'limit', STATE[kind .. '_limit'], 'burst', STATE[kind .. '_burst'], 'level', 0,
      'source', STATE[kind .. '_source'],
      'why', 'state lost: the bucket starts empty (the fleet\'s spending is not known)')
  end
end

-- The first active budget whose limit a header announced (not a
-- configured ceiling) and that a lease of `tokens` costs more than:
-- kind, cost, limit; else nil. Such a lease goes in when the bucket is
-- full (the provider's answer to it is the only way a higher limit is
-- heard of), at most once per refill of the whole bucket.
local function oversize(tokens)
  for _, kind in ipairs(active_budgets()) do
    local cost, limit = budget_cost(kind, tokens), STATE[kind .. '_limit']
    if cost > limit and STATE[kind .. '_source'] ~= 'configured' then return kind, cost, limit end
  end
  return nil
end

-- Whether some active budget's limit came from a header (an admission may
-- then log an oversize lease: its caller guards events).
local function announced_budgets()
  for _, kind in ipairs(active_budgets()) do
    if STATE[kind .. '_source'] ~= 'configured' then return true end
  end
  return false
end

-- A response's rate-limit figures for one kind (limit and remaining, nil
-- when not announced): the provider's limit is taken (a configured ceiling
-- below it wins), the burst is the highest remaining seen, and the level
-- is clamped to the provider's remaining. Needs the kind's fields and
-- config <kind>_per_minute read, and CONFIG.log_length (prepare).
local function calibrate(kind, limit_h, remaining)
  local f_limit, f_burst, f_level, f_at, f_source = budget_fields(kind)
  local was_limit, was_burst, was_source = STATE[f_limit], STATE[f_burst], STATE[f_source]
  local ceiling = CONFIG[kind .. '_per_minute']
  local limit, source = was_limit, was_source
  if limit_h and limit_h > 0 then
    limit, source = limit_h, 'header'
  elseif remaining and (source == '' or source == 'learned') then
    limit, source = math.max(was_limit, remaining), 'learned'
  end
  if ceiling > 0 and (limit == 0 or ceiling < limit) then limit, source = ceiling, 'configured' end
  if limit == 0 then return end
  local burst = was_burst
  if remaining then burst = math.max(burst, remaining) end
  burst = math.min(burst, limit)
  local level
  if was_limit == 0 then
    level = remaining or limit  -- new: what the provider says is left
    if BUDGET_COST[kind][4] ~= '' then CALL.tiers = true end  -- a tier's budget active (raise_layout)
    set('state', 'budgets', (function()
      local on = {}
      for _, k in ipairs(BUDGET_KINDS) do
        if k == kind or (STATE[k .. '_limit'] or 0) > 0 then on[#on + 1] = k end
      end
      return table.concat(on, ',')
    end)())
  else
    level = budget_level(kind)
    if remaining and remaining < level then level = remaining end
  end
  local before = (was_limit > 0) and budget_level(kind) or level
  set('state', f_limit, limit)
  set('state', f_burst, burst)
  set('state', f_source, source)
  level = math.min(level, capacity_of(kind))
  local dropped = before - level
  set_level(kind, level)
  if was_limit == 0 then CALL.active = false end  -- a new kind: the next active_budgets() lists it
  if limit ~= was_limit or source ~= was_source or burst > was_burst * 1.1 or dropped >= capacity_of(kind) / 10 then
    log('budget', 'budget', kind, 'limit', limit, 'burst', burst, 'level', math.floor(level), 'source', source,
      'why', (limit ~= was_limit or source ~= was_source) and ('limit from ' .. source)
        or (dropped > 0 and 'clamped to the provider\'s remaining' or 'burst from the provider\'s remaining'))
  end
end
