--[[ lib/admission.lua: the one admission rule, and a new lease.

Uses lib/common.lua, lib/numbers.lua, lib/args.lua, lib/decisions.lua, lib/records.lua,
lib/budgets.lua, lib/shares.lua, lib/origin.lua.
Defines: BUDGETS, never_fits, alike, blocked, waiting_on, add_lease.

The rule: a caller is admitted when the governor is not paused, no hold
runs (not_before), every budget has room for the lease's cost, and nobody
is queued ahead of it. blocked() is the rule, and the only place the
reason a caller waits is worded; acquire, refresh and grant ask it.
never_fits() tells a cost no budget can ever hold.
]]

-- The budgets a lease takes from, in order. Each kind answers room(tokens):
-- nil when a lease of those tokens fits, else why not and a hint (ms until
-- asking again may pay off, 0: no idea); take(tokens) takes its cost.
-- Concurrency: the live leases (each counted once, cost 1) against
-- capacity; capacity is 0 while paused. Each token bucket: room when its
-- level holds the cost (or, for a cost above its burst, when it is full);
-- never when the cost is above its limit (a minute's worth). The buckets
-- (bucket = true) are asked only while some budget is active.
-- (The at-capacity reason is asked for on every hand-over, often more
-- than once: worded once per capacity and count, at most 4,096 kept.)
local WORDED, remember_wording = memo(4096)
local function at_capacity(live, capacity)
  local worded = WORDED[capacity]
  return worded and worded[live]
    or remember_wording('at capacity: ' .. dec(live) .. ' in flight of ' .. dec(capacity), capacity, live)
end
local CONCURRENCY = {name = 'concurrency',
    room = function(tokens, place)
      if not CALL.live then CALL.live = in_flight() end
      if CALL.live + 1 > STATE.capacity then return at_capacity(CALL.live, STATE.capacity), 0 end
      -- (no reserve while capped is 0: set_shares sets it with the reserve)
      if place and place.rank > 0 and not place.aged and STATE.capped ~= 0 and CONFIG.reserve > 0 then
        -- (counted until reclaimed: a lease expired meanwhile keeps the reserve safe)
        local others = held_of(LOWER_HELD)
        if others + 1 > STATE.capacity - CONFIG.reserve then
          return 'at capacity below the highest class: ' .. others .. ' in flight of ' .. STATE.capacity .. ' - '
            .. CONFIG.reserve .. ' reserved', 0
        end
      end
      return nil, 0
    end,
    take = function(tokens) if CALL.live then CALL.live = CALL.live + 1 end end,
    never = function(tokens) return nil end}
local BUDGETS = {CONCURRENCY}
for i = 1, #BUDGET_KINDS do
  local kind = BUDGET_KINDS[i]
  local function on() for _, k in ipairs(active_budgets()) do if k == kind then return true end end return false end
  BUDGETS[#BUDGETS + 1] = {name = kind, bucket = true,
    room = function(tokens)
      if not on() then return nil, 0 end
      local cost, counts = budget_cost(kind, tokens)
      if not counts then return nil, 0 end  -- (a bucket of another tier's: its debt holds no other lease)
      local level, capacity = budget_level(kind), capacity_of(kind)
      if level >= math.min(cost, capacity) then return nil, 0 end
      local need = math.min(cost, capacity) - level
      return kind .. ' budget: ' .. cost .. ' wanted, ' .. math.floor(level) .. ' left of ' .. capacity,
        math.max(1, math.ceil(need * 60000 / STATE[kind .. '_limit']))
    end,
    take = function(tokens)
      if on() then
        local cost, counts = budget_cost(kind, tokens)
        if counts then set_level(kind, budget_level(kind) - cost) end
      end
    end,
    never = function(tokens)
      -- (a header's limit may rise again: a cost above it waits for a full bucket, oversize())
      if not on() or STATE[kind .. '_source'] ~= 'configured' then return nil end
      local cost = budget_cost(kind, tokens)
      if cost > STATE[kind .. '_limit'] then
        return 'a cost of ' .. cost .. ' is above the ' .. kind .. ' budget\'s whole limit of '
          .. STATE[kind .. '_limit'] .. ' per minute (configured)'
      end
      return nil
    end}
end

-- A tenant's cap: its waiter does not hold up the queue (park = true:
-- grant() parks it and asks the next).
BUDGETS[#BUDGETS + 1] = {name = 'tenant', park = true,
  room = function(tokens, place)
    local cap = place and place.tenant and cap_of(place.tenant)
    if cap and held_of(place.tenant) + 1 > cap then
      return 'tenant ' .. place.tenant .. ' at its cap: ' .. held_of(place.tenant) .. ' in flight of ' .. cap, 0
    end
    return nil, 0
  end,
  take = function(tokens) end,
  never = function(tokens) return nil end}

-- Why a lease of `tokens` can never be admitted (its cost is above a
-- budget's limit), or nil.
local function never_fits(tokens)
  if STATE.budgets == '' then return nil end  -- only a token bucket can refuse a cost for good
  for _, budget in ipairs(BUDGETS) do
    local why = budget.never(tokens)
    if why then return why end
  end
  return nil
end

-- Whether the rule answers every caller alike: no budget is active and no
-- cap or reserve is set, so a caller's cost and place change nothing
-- (the pause, a hold and concurrency alone: the plain governor).
local function alike()
  return STATE.budgets == '' and STATE.capped == 0
end

-- The admission rule: nil when a lease of `tokens` for `place` ({rank, tenant,
-- aged}; nil: any caller) may be admitted now (the queue aside: the
-- callers decide FIFO), else why not, a hint (ms) and the budget that
-- said so. Needs STATE.capacity, STATE.not_before, STATE.budgets (load them) and
-- CAPS_CONFIG.
local function blocked(tokens, place)
  if STATE.capacity == 0 then
    if STATE.paused == 1 then
      local hint = 0
      if STATE.paused_until > 0 then hint = STATE.paused_until - NOW end
      return 'paused: ' .. STATE.pause_reason, hint
    end
  end
  if NOW < STATE.not_before then return why_held(), STATE.not_before - NOW end  -- a Retry-After or a recovery hold
  if alike() then
    -- No budget, cap or reserve switched on: concurrency alone (the plain governor's path).
    local why, hint = CONCURRENCY.room(tokens, place)
    if why then return why, hint, CONCURRENCY end
    return nil, 0
  end
  local buckets = STATE.budgets ~= ''  -- none active: the token buckets are not asked
  for _, budget in ipairs(BUDGETS) do
    if buckets or not budget.bucket then
      local why, hint = budget.room(tokens, place)
      if why then return why, hint, budget end
    end
  end
  return nil, 0
end

-- What holds waiter `id` (queued or parked): the admission rule's reason
-- for its own cost and place, else 'behind N earlier waiter(s)' (its rank
-- in the queue), and a hint (ms). Needs prepare().
local function waiting_on(id)
  local holder_record = record_parse(redis.call('HGET', KEY.holders, id))
  local score = tonumber(redis.call('ZSCORE', KEY.queue, id))
  local tokens, place = NO_TOKENS, nil
  if holder_record then
    tokens = holder_record.tokens
    place = {rank = holder_record.rank, tenant = holder_record.tenant, aged = score ~= nil and score < QUEUE_BAND}
  end
  local why, hint = blocked(tokens, place)
  if why then return why, hint end
  local ahead = redis.call('ZRANK', KEY.queue, id) or 0
  return 'behind ' .. ahead .. ' earlier waiter(s) of its class or above', 0
end

-- A new lease: the fence (HINCRBY, the first write), then its holder
-- record, then its expiry; it takes its cost from every budget. A holders
-- key of another type undoes the fence and fails, so nothing is left written.
-- A lease of a cost above a header's limit is logged ('oversize': the
-- caller has guarded events when announced_budgets()), unless `adopted`.
-- Returns the fence, and its digits.
local function add_lease(id, ttl, holder, tokens, place, adopted)
  if not CALL.live then CALL.live = in_flight() end
  local fence = redis.call('HINCRBY', KEY.state, 'fence', '1')
  local level = CALL.live + 1
  local digits = int(fence)
  local ok = redis.pcall('HSET', KEY.holders, id, record_format(digits, ttl, NOW, tokens, level,
    place.rank, place.tenant, holder))
  if ok ~= 1 and ok ~= 0 then  -- (HSET answers the fields it added; an error reply is a table)
    redis.call('HINCRBY', KEY.state, 'fence', '-1')
    fail('WRONGTYPE', KEY.holders .. ' is not a hash')
  end
  redis.call('ZADD', KEY.leases, int(NOW + ttl), id)
  if STATE.capped == 1 then held_add(place) end  -- (held counts leases only while caps or a reserve are set)
  STATE.fence = fence
  if STATE.budgets == '' then  -- no budget active: concurrency alone
    CONCURRENCY.take(tokens)
    return fence, digits
  end
  if not adopted then
    local kind, cost, limit = oversize(tokens)
    if kind then
      log('oversize', 'budget', kind, 'cost', cost, 'limit', limit, 'holder', holder,
        'why', 'a cost above the announced limit: admitted on a full bucket, its response may raise the limit')
    end
  end
  for _, budget in ipairs(BUDGETS) do budget.take(tokens) end
  return fence, digits
end
