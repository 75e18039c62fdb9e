--[[ lib/admission.lua: the one admission rule, leases, the queue, grants,
pauses and holds.

Uses the names of lib/common.lua. Defines: record_parse, record_format,
NO_TOKENS, arg_tokens, VTIMES, arg_place, in_flight, PAUSE_FIELDS, prepare, reclaim, window,
resume_level, pause, resume, recover, BUDGET_KINDS, budget_fields, active_budgets, budget_level,
settle, refused, reborn, oversize, announced_budgets, calibrate, CAPS_CONFIG, caps_config, cap_of, held, unhold, unpark, BUDGETS, never, blocked, add_lease, enqueue,
guard_grant, grant, waiting_on.

The rule (SPEC §3, §9): a caller is admitted when the governor is not
paused, no hold runs (not_before), every budget has room for the lease's
cost, and nobody is queued ahead of it. blocked() is the rule, and the
only place the reason a caller waits is worded; acquire, refresh and grant
ask it. never() tells a cost no budget can ever hold.

The queue (governor.protocol.QUEUE_BAND): a waiter's score is band *
QUEUE_BAND + tag, band 0 for the aged, rank + 1 for its class, so the head
is the highest class's smallest tag. Tags are start-time fair queueing
within each class: a waiter of tenant t (weight w) in class r starts at
max(vtime_r, F), F the finish tag of "r:t" in the shares zset (scored r *
QUEUE_BAND + F), which moves on by ceil(QUANTUM / w), and a grant moves
its class's vtime_r up to its tag: FIFO within a class and tenant, tenants
granted in proportion to their weights, an idle tenant back at vtime_r (no
credit hoarded). Each class keeps its own virtual time, so one class's
grants never reset another's shares. A waiter of a
lower class that waited aging_ms goes to band 0 with its tag (age()).

Caps and the reserve (governor.protocol.PARK_SLOT): a tenant with a cap
holds at most that many leases; the classes below the highest hold at most
capacity - reserve (an aged waiter may take the reserve). A waiter at the
head whose tenant is at its cap is parked (the next one is asked), and
each of the tenant's leases that ends puts its first parked waiter back at
the front of its class (unpark), so a capped tenant never holds up the others.
]]

-- holders entries: "fence|ttl_ms|since_ms|input|output|level|rank|tenant|holder"
-- (governor.protocol.HolderRecord): input and output are the tokens the
-- lease reserved, {input = , output = } as a table ("tokens"); level is
-- the leases in flight when it was granted, itself included (0: a waiter);
-- rank and tenant its place ({rank = , tenant = }, arg_place).
local function record_parse(raw)
  if not raw then return nil end
  local fence, ttl, since, input, output, level, rank, tenant, holder =
    string.match(raw, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
  if not fence then return nil end
  return {fence = tonumber(fence), ttl = tonumber(ttl), since = tonumber(since),
    tokens = {input = tonumber(input), output = tonumber(output)}, level = tonumber(level),
    rank = tonumber(rank), tenant = tenant, holder = holder}
end

local function record_format(fence, ttl, since, input, output, level, rank, tenant, holder)
  return int(fence) .. '|' .. int(ttl) .. '|' .. int(since) .. '|' .. int(input) .. '|' .. int(output) .. '|'
    .. int(level) .. '|' .. int(rank) .. '|' .. tenant .. '|' .. holder
end

local NO_TOKENS = {input = 0, output = 0}

-- ARGV[i]: tokens as "input,output" (governor.budgets.Tokens.arg), '' for none.
local function arg_tokens(i, what)
  local v = ARGV[i]
  if v == nil or v == '' then return NO_TOKENS end
  local input, output = string.match(v, '^(%d+),(%d+)$')
  local a, b = tonumber(input), tonumber(output)
  if not a or a > MAX_INT or b > MAX_INT then
    fail('BADARG', what .. ' must be "input,output" integer tokens in [0, 2^53], got ' .. tostring(v))
  end
  return {input = a, output = b}
end

-- Each class's virtual time, by rank + 1: one state field per class (MAX_CLASSES).
local VTIMES = {'vtime_0', 'vtime_1', 'vtime_2', 'vtime_3', 'vtime_4', 'vtime_5', 'vtime_6'}

-- ARGV[i], ARGV[i + 1], ARGV[i + 2]: a caller's class rank (0: the
-- highest), tenant and the tenant's weight (GovernorConfig.weight_of).
local function arg_place(i)
  local rank, weight = tonumber(ARGV[i]), tonumber(ARGV[i + 2])
  if rank == nil or rank ~= math.floor(rank) or rank < 0 or rank >= MAX_CLASSES then
    fail('BADARG', 'rank must be an integer in [0, ' .. (MAX_CLASSES - 1) .. '], got ' .. tostring(ARGV[i]))
  end
  local tenant = ARGV[i + 1]
  if tenant == nil or #tenant > 64 or not string.match(tenant, '^[%w%-_.:]+$') then
    fail('BADARG', 'tenant must be 1-64 characters of [A-Za-z0-9-_.:], got ' .. tostring(tenant))
  end
  if weight == nil or weight ~= math.floor(weight) or weight < 1 or weight > MAX_WEIGHT then
    fail('BADARG', 'weight must be an integer in [1, ' .. MAX_WEIGHT .. '], got ' .. tostring(ARGV[i + 2]))
  end
  return {rank = rank, tenant = tenant, weight = weight}
end

local function in_flight()
  return redis.call('ZCOUNT', K.leases, LIVE, '+inf')
end

-- Budgets beside concurrency (governor/budgets.py): token buckets in the
-- state hash, <kind>_limit per minute (the refill rate; 0: not governed),
-- <kind>_burst (what the bucket holds at most; 0: no header seen yet, the
-- limit), <kind>_level at <kind>_at ms, <kind>_source. S.budgets lists the
-- active kinds; a call reads their fields once (active_budgets), only when
-- some are active, so a governor without budgets pays one field.
local BUDGET_KINDS = {'requests', 'tokens', 'input_tokens', 'output_tokens'}
local KIND_OF = {}
for i = 1, #BUDGET_KINDS do KIND_OF[BUDGET_KINDS[i]] = true end  -- (no ipairs at load time)

local function budget_fields(kind)
  return kind .. '_limit', kind .. '_burst', kind .. '_level', kind .. '_at', kind .. '_source'
end

-- What one lease of `tokens` takes from budget `kind`.
local function budget_cost(kind, tokens)
  if kind == 'requests' then return 1 end
  if kind == 'tokens' then return tokens.input + tokens.output end
  if kind == 'input_tokens' then return tokens.input end
  return tokens.output
end

local active = nil  -- the active kinds, once read by this call
RESETS[#RESETS + 1] = function() active = nil end

-- The active kinds, their fields read (needs S.budgets: load it).
local function active_budgets()
  if active then return active end
  active = {}
  if S.budgets == '' then return active end
  local names = {}
  for kind in string.gmatch(S.budgets, '[^,]+') do
    if not KIND_OF[kind] then fail('BADSTATE', 'field budgets holds ' .. string.format('%q', S.budgets)) end
    active[#active + 1] = kind
    local limit, burst, level, at, source = budget_fields(kind)
    for _, f in ipairs({limit, burst, level, at, source}) do names[#names + 1] = f end
  end
  more('state', unpack(names))
  return active
end

local function capacity_of(kind)
  local burst = S[kind .. '_burst']
  if burst > 0 then return burst end
  return S[kind .. '_limit']
end

-- A bucket's level now: refilled at its limit per minute since <kind>_at,
-- never above its capacity.
local function budget_level(kind)
  local limit = S[kind .. '_limit']
  local level = S[kind .. '_level'] + math.max(0, NOW - S[kind .. '_at']) * limit / 60000
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
  for _, kind in ipairs(active_budgets()) do
    local delta = budget_cost(kind, reserved) - budget_cost(kind, used)
    if spent then delta = math.min(delta, 0) end
    if delta ~= 0 then set_level(kind, math.min(budget_level(kind) + delta, capacity_of(kind))) end
  end
end

-- A rate-limited outcome: the provider's bucket is empty, so each active
-- bucket whose level the report's headers did not announce (`announced`:
-- kind -> true) is clamped to 0, as a remaining of 0 would. A refusal
-- never raises a level, so refusals cannot admit one another in a loop.
-- Needs C.log_length and the events key's type checked.
local function refused(announced)
  for _, kind in ipairs(active_budgets()) do
    local level = budget_level(kind)
    if not announced[kind] and level > 0 then
      set_level(kind, 0)
      log('budget', 'budget', kind, 'limit', S[kind .. '_limit'], 'burst', S[kind .. '_burst'], 'level', 0,
        'source', S[kind .. '_source'], 'why', 'rate-limited: clamped to 0')
    end
  end
end

-- A state created after a loss (init.lua): each active bucket starts empty,
-- not full, since what the fleet spent in the last minute is not known;
-- it refills at its limit. Needs C.log_length and the events key's type checked.
local function reborn()
  for _, kind in ipairs(active_budgets()) do
    set_level(kind, 0)
    log('budget', 'budget', kind, 'limit', S[kind .. '_limit'], 'burst', S[kind .. '_burst'], 'level', 0,
      'source', S[kind .. '_source'], 'why', 'state lost: the bucket starts empty (the fleet\'s spending is not known)')
  end
end

-- The first active budget whose limit a header announced (not a
-- configured ceiling) and that a lease of `tokens` costs more than:
-- kind, cost, limit; else nil. Such a lease goes in when the bucket is
-- full (the provider's answer to it is the only way a higher limit is
-- heard of), at most once per refill of the whole bucket.
local function oversize(tokens)
  for _, kind in ipairs(active_budgets()) do
    local cost, limit = budget_cost(kind, tokens), S[kind .. '_limit']
    if cost > limit and S[kind .. '_source'] ~= 'configured' then return kind, cost, limit end
  end
  return nil
end

-- Whether some active budget's limit came from a header (an admission may
-- then log an oversize lease: its caller guards events).
local function announced_budgets()
  for _, kind in ipairs(active_budgets()) do
    if S[kind .. '_source'] ~= 'configured' then return true end
  end
  return false
end

-- A response's rate-limit figures for one kind (limit and remaining, nil
-- when not announced): the provider's limit is taken (a configured ceiling
-- below it wins), the burst is the highest remaining seen, and the level
-- is clamped to the provider's remaining. Needs the kind's fields and
-- config <kind>_per_minute read, and C.log_length (prepare).
local function calibrate(kind, limit_h, remaining)
  local f_limit, f_burst, f_level, f_at, f_source = budget_fields(kind)
  local was_limit, was_burst, was_source = S[f_limit], S[f_burst], S[f_source]
  local ceiling = C[kind .. '_per_minute']
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
    set('state', 'budgets', (function()
      local on = {}
      for _, k in ipairs(BUDGET_KINDS) do
        if k == kind or (S[k .. '_limit'] or 0) > 0 then on[#on + 1] = k end
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
  if was_limit == 0 then active = nil end  -- a new kind: the next active_budgets() lists it
  if limit ~= was_limit or source ~= was_source or burst > was_burst * 1.1 or dropped >= capacity_of(kind) / 10 then
    log('budget', 'budget', kind, 'limit', limit, 'burst', burst, 'level', math.floor(level), 'source', source,
      'why', (limit ~= was_limit or source ~= was_source) and ('limit from ' .. source)
        or (dropped > 0 and 'clamped to the provider\'s remaining' or 'burst from the provider\'s remaining'))
  end
end

-- What the caps and the reserve need of the config (and finish() of a
-- call that may create held), for the paths that admit without prepare().
local CAPS_CONFIG = {'tenant_caps', 'reserve', 'idle_ms'}

-- The caps and the reserve (for prepare(), and for acquire's admission
-- without it): read from the config while state capped says some are set
-- (recount() keeps it), else none, without reading them. Needs S.capped.
local function caps_config()
  if S.capped == 1 then
    more('config', unpack(CAPS_CONFIG))
  else
    local into = values('config')
    into.tenant_caps, into.reserve = '', 0
  end
end

-- The cap of `tenant` and its slot (its place in config tenant_caps, from
-- 1), or nil: one plain search of the stored "tenant=cap,..." per tenant
-- and call. Needs C.tenant_caps.
local caps_of = nil  -- tenant -> {cap, slot} or false, as this call found them
RESETS[#RESETS + 1] = function() caps_of = nil end
local function cap_of(tenant)
  if C.tenant_caps == '' then return nil end
  caps_of = caps_of or {}
  local found = caps_of[tenant]
  if found == nil then
    local list = ',' .. C.tenant_caps .. ','
    local at = string.find(list, ',' .. tenant .. '=', 1, true)
    local cap = at and tonumber(string.match(list, '^(%d+),', at + #tenant + 2))
    found = false
    if cap then found = {cap, select(2, string.gsub(string.sub(list, 1, at), ',', ''))} end
    caps_of[tenant] = found
  end
  if not found then return nil end
  return found[1], found[2]
end

-- The leases in flight counted under `field` of held (a capped tenant, or
-- LOWER_HELD: the classes below the highest while a reserve is set), as
-- this call read and changed them; count() moves one and writes it (a
-- field goes at 0).
-- A call that reads held after its first write has guarded it (13).
local counts = nil
RESETS[#RESETS + 1] = function() counts = nil end
local function held(field)
  counts = counts or {}
  if counts[field] == nil then counts[field] = tonumber(redis.call('HGET', K.held, field)) or 0 end
  return counts[field]
end

local function count(field, delta)
  local n = held(field) + delta
  counts[field] = n
  if n > 0 then
    redis.call('HSET', K.held, field, n)
    if n == delta then created(K.held) end
  else
    redis.call('HDEL', K.held, field)
  end
end

-- A new lease of `place` counts in its tenant's cap and, below the highest
-- class, in the lower classes' leases while a reserve is set. Needs CAPS_CONFIG.
local function hold(place)
  if cap_of(place.tenant) then count(place.tenant, 1) end
  if place.rank > 0 and C.reserve > 0 then count(LOWER_HELD, 1) end
end

-- A waiter parked at its tenant's cap goes back to the queue, at the front
-- of its class (its class's vtime: every tag queued there is at least
-- that), in band 0 if it aged meanwhile (age() found it parked). Needs
-- prepare(); the caller has guarded queue, aging, parked.
local function requeue(id)
  local m = record_parse(redis.call('HGET', K.holders, id))
  local rank = m and m.rank or 0
  local band = rank + 1
  if rank > 0 and C.aging_ms > 0 and not redis.call('ZSCORE', K.aging, id) then band = 0 end
  redis.call('ZADD', K.queue, band * QUEUE_BAND + S[VTIMES[rank + 1]], id)
end

-- Tenant `tenant` has room under its cap again: its first parked waiter
-- that still waits goes back to the queue (dead ones go; at most BATCH).
-- Needs prepare().
local function unpark(tenant)
  local cap, slot = cap_of(tenant)
  if not cap or held(tenant) >= cap then return end
  for _ = 1, BATCH do
    local id = redis.call('ZRANGEBYSCORE', K.parked, slot * PARK_SLOT, (slot + 1) * PARK_SLOT - 1, 'LIMIT', 0, 1)[1]
    if not id then return end
    redis.call('ZREM', K.parked, id)
    local deadline = tonumber(redis.call('ZSCORE', K.waiters, id))
    if deadline and deadline > NOW then
      requeue(id)
      return
    end
    redis.call('ZREM', K.waiters, id)
    redis.call('ZREM', K.aging, id)
    redis.call('HDEL', K.holders, id)
  end
end

-- A lease (its record m) ended, counted once: by whoever removed it from
-- leases. Its tenant's count and the lower classes' go down; with `waiting`,
-- the tenant's first parked waiter goes back to the queue (unpark: needs
-- prepare()). The caller has read held's type (EXISTS) or guarded it.
local function unhold(m, waiting)
  if not m then return end
  if held(m.tenant) > 0 then
    count(m.tenant, -1)
    if waiting then unpark(m.tenant) end
  end
  if m.rank > 0 and held(LOWER_HELD) > 0 then count(LOWER_HELD, -1) end
end

-- The caps or the reserve changed (set_shares, a config stored afresh):
-- held counted again from the records of the leases in leases (expired
-- ones not yet reclaimed included: reclaim() takes them off when it
-- removes them); each parked waiter
-- whose tenant still has a cap moves to its new slot, keeping its order,
-- the others go back to the queue (all of them when `fresh`: a new state,
-- whose tags start again), and each capped tenant's room is filled from
-- its parked waiters. O(leases + parked): for the operator scripts only.
-- Needs prepare() (or a config stored); every key's type checked.
local function recount(fresh)
  redis.call('DEL', K.held)
  counts, caps_of = {}, nil
  local shaped = C.tenant_caps ~= '' or C.reserve > 0
  set('state', 'capped', shaped and 1 or 0)
  if shaped then
    -- every lease still in leases, expired or not: each counts until it leaves
    -- leases (reclaim, release, report, cancel, renew unhold it then)
    local ids = redis.call('ZRANGEBYSCORE', K.leases, '(0', '+inf')  -- not the sentinel
    for i = 1, #ids, 1000 do
      local chunk = {unpack(ids, i, math.min(i + 999, #ids))}
      local records = redis.call('HMGET', K.holders, unpack(chunk))
      for j = 1, #chunk do
        local m = record_parse(records[j])
        if m then hold(m) end
      end
    end
  end
  local parked = redis.call('ZRANGE', K.parked, 0, -1, 'WITHSCORES')
  local tenants = {}
  for i = 1, #parked, 2 do
    local id = parked[i]
    local m = record_parse(redis.call('HGET', K.holders, id))
    local cap, slot = nil, nil
    if m and not fresh then cap, slot = cap_of(m.tenant) end
    if cap then
      redis.call('ZADD', K.parked, slot * PARK_SLOT + tonumber(parked[i + 1]) % PARK_SLOT, id)
      tenants[m.tenant] = cap
    else
      redis.call('ZREM', K.parked, id)
      requeue(id)
    end
  end
  for tenant, cap in pairs(tenants) do
    for _ = 1, cap - held(tenant) do unpark(tenant) end
  end
end

-- Remove what no longer counts: expired leases and waiters that stopped
-- refreshing (at most BATCH of each), window events older than the window.
-- At most once per RECLAIM_MS; `force` for the scripts that run rarely.
-- Needs S.reclaim_due (load it).
local function reclaim(force)
  if not force and NOW < S.reclaim_due then return end
  check_types()
  set('state', 'reclaim_due', NOW + RECLAIM_MS)
  local expired = redis.call('ZRANGEBYSCORE', K.leases, '(0', NOW, 'LIMIT', 0, BATCH)  -- not the sentinel
  if #expired > 0 then
    local counted = redis.call('EXISTS', K.held) == 1  -- each lease's record is read only then
    local records = redis.call('HMGET', K.holders, unpack(counted and expired or {expired[1]}))
    local first = record_parse(records[1])
    redis.call('ZREM', K.leases, unpack(expired))
    redis.call('HDEL', K.holders, unpack(expired))
    if counted then
      for i = 1, #expired do unhold(record_parse(records[i]), true) end
    end
    log('expire', 'leases', #expired, 'holder', first and first.holder or '',
      'why', 'holders stopped renewing (crashed or stalled past their TTL)')
  end
  local dead = redis.call('ZRANGEBYSCORE', K.waiters, '-inf', NOW, 'LIMIT', 0, BATCH)
  if #dead > 0 then
    redis.call('ZREM', K.waiters, unpack(dead))
    redis.call('ZREM', K.queue, unpack(dead))
    redis.call('ZREM', K.parked, unpack(dead))
    if (S.aging_due or 1) > 0 then redis.call('ZREM', K.aging, unpack(dead)) end
    redis.call('HDEL', K.holders, unpack(dead))
  end
  -- A tenant whose finish tag is behind its class's vtime starts there
  -- anyway: its entry says nothing, so idle tenants leave no trace (when
  -- the call read the queue's fields: a call that knows nobody waits leaves
  -- this to the next).
  for rank = 0, MAX_CLASSES - 1 do
    local vtime = S[VTIMES[rank + 1]]
    if vtime and vtime > 0 then
      redis.call('ZREMRANGEBYSCORE', K.shares, rank * QUEUE_BAND, rank * QUEUE_BAND + vtime)
    end
  end
  local horizon = '(' .. (NOW - C.window_ms)
  redis.call('ZREMRANGEBYSCORE', K.attempts, '-inf', horizon)
  redis.call('ZREMRANGEBYSCORE', K.limited, '-inf', horizon)
end

-- The window: (rate-limited, all) attempts of the last window_ms.
local function window()
  local horizon = '(' .. (NOW - C.window_ms)
  return redis.call('ZCOUNT', K.limited, horizon, '+inf'), redis.call('ZCOUNT', K.attempts, horizon, '+inf')
end

local function resume_level()
  return math.max(1, math.floor(C.max_capacity * C.resume_fraction))
end

local PAUSE_FIELDS = {'paused', 'pause_kind', 'pause_reason', 'paused_until', 'saved_capacity'}
-- What the operations load first (load): acquire's admission fields, and
-- with reclaim's due time for those that reclaim.
local ADMIT = {'epoch', 'capacity', 'not_before', 'touch_due', 'budgets', 'capped'}
local WRITE = {'epoch', 'capacity', 'not_before', 'touch_due', 'reclaim_due', 'budgets'}
local REPORT = {'epoch', 'capacity', 'not_before', 'touch_due', 'reclaim_due', 'event_seq', 'budgets'}

-- Read every field reclaim, recover, blocked, grant, pause and log may use,
-- before a script's first write (reads after a write could fail it
-- half-way). Capacity is 0 only while paused: the pause's own fields are
-- read only then; the queue's aging unless `queued` is false (then the
-- call must not enqueue or grant); the vtime of class `rank` (a caller
-- joining it), and every class's when reclaim() is due (grant() only
-- writes them).
local function prepare(queued, rank)
  local fields = {'reclaim_due', 'capped'}
  if queued ~= false then fields[#fields + 1] = 'aging_due' end  -- unless nobody waits (a report's hot path)
  if rank then fields[#fields + 1] = VTIMES[rank + 1] end  -- the class a caller joins
  more('state', unpack(fields))
  more('config', 'policy', 'window_ms', 'log_length', 'max_capacity', 'idle_ms', 'aging_ms')
  caps_config()
  if C.tenant_caps ~= '' then
    more('state', 'park_seq', unpack(VTIMES))  -- grant() parks, unpark() puts back at a class's vtime
  elseif NOW >= S.reclaim_due then
    more('state', unpack(VTIMES))  -- reclaim() prunes the shares by them
  end
  active_budgets()
  if S.capacity == 0 then
    more('state', unpack(PAUSE_FIELDS))
    more('config', 'resume_fraction')
  end
end

local function pause(kind, reason, until_ms)
  if S.capacity > 0 then  -- not paused yet
    set('state', 'saved_capacity', S.capacity)
  elseif S.pause_kind == 'policy' then
    -- An operator takes over a policy pause: the storm is not over, so the
    -- resume starts at the resume level, not where capacity was before it.
    set('state', 'saved_capacity', resume_level())
  end
  set('state', 'paused', 1)
  set('state', 'pause_kind', kind)
  set('state', 'pause_reason', reason)
  set('state', 'paused_until', until_ms)
  set('state', 'capacity', 0)
  set('policy', 'streak', 0)
end

local function resume(capacity)
  set('state', 'paused', 0)
  set('state', 'pause_kind', '')
  set('state', 'pause_reason', '')
  set('state', 'paused_until', 0)
  set('state', 'saved_capacity', 0)
  set('state', 'capacity', math.max(1, math.min(capacity, C.max_capacity)))
  set('policy', 'streak', 0)
end

-- Time-driven recovery, run by every report, probe and waiter refresh:
-- a policy pause lifts once no rate-limited attempt is left in the window,
-- an operator pause lifts when its duration is over. Capacity is 0 only
-- while paused, so a running governor pays nothing here.
local function recover(rl)
  if S.capacity > 0 or S.paused == 0 then return end
  if S.pause_kind == 'policy' then
    if rl == nil then rl = window() end
    if rl == 0 then
      resume(resume_level())
      log('resume', 'why', 'no rate-limited attempt left in the window')
    end
  elseif S.paused_until > 0 and NOW >= S.paused_until then
    resume(S.saved_capacity > 0 and S.saved_capacity or resume_level())
    log('resume', 'why', 'operator pause duration over')
  end
end

-- The budgets a lease takes from, in order. Each kind answers room(tokens):
-- nil when a lease of those tokens fits, else why not and a hint (ms until
-- asking again may pay off, 0: no idea); take(tokens) takes its cost.
-- Concurrency: the live leases (each counted once, cost 1) against
-- capacity; capacity is 0 while paused. Each token bucket: room when its
-- level holds the cost (or, for a cost above its burst, when it is full);
-- never when the cost is above its limit (a minute's worth). The buckets
-- (bucket = true) are asked only while some budget is active.
local live_count = nil  -- in-flight, once read by this call
RESETS[#RESETS + 1] = function() live_count = nil end
local BUDGETS = {
  {name = 'concurrency',
    room = function(tokens, place)
      if live_count == nil then live_count = in_flight() end
      if live_count + 1 > S.capacity then
        return 'at capacity: ' .. live_count .. ' in flight of ' .. S.capacity, 0
      end
      if place and place.rank > 0 and not place.aged and C.reserve > 0 then
        -- (counted until reclaimed: a lease expired meanwhile keeps the reserve safe)
        local others = held(LOWER_HELD)
        if others + 1 > S.capacity - C.reserve then
          return 'at capacity below the highest class: ' .. others .. ' in flight of ' .. S.capacity .. ' - '
            .. C.reserve .. ' reserved', 0
        end
      end
      return nil, 0
    end,
    take = function(tokens) if live_count then live_count = live_count + 1 end end,
    never = function(tokens) return nil end},
}
for i = 1, #BUDGET_KINDS do
  local kind = BUDGET_KINDS[i]
  local function on() for _, k in ipairs(active_budgets()) do if k == kind then return true end end return false end
  BUDGETS[#BUDGETS + 1] = {name = kind, bucket = true,
    room = function(tokens)
      if not on() then return nil, 0 end
      local cost = budget_cost(kind, tokens)
      local level, capacity = budget_level(kind), capacity_of(kind)
      if level >= math.min(cost, capacity) then return nil, 0 end
      local need = math.min(cost, capacity) - level
      return kind .. ' budget: ' .. cost .. ' wanted, ' .. math.floor(level) .. ' left of ' .. capacity,
        math.max(1, math.ceil(need * 60000 / S[kind .. '_limit']))
    end,
    take = function(tokens)
      if on() then set_level(kind, budget_level(kind) - budget_cost(kind, tokens)) end
    end,
    never = function(tokens)
      -- (a header's limit may rise again: a cost above it waits for a full bucket, oversize())
      if not on() or S[kind .. '_source'] ~= 'configured' then return nil end
      local cost = budget_cost(kind, tokens)
      if cost > S[kind .. '_limit'] then
        return 'a cost of ' .. cost .. ' is above the ' .. kind .. ' budget\'s whole limit of '
          .. S[kind .. '_limit'] .. ' per minute (configured)'
      end
      return nil
    end}
end

-- A tenant's cap: its waiter does not hold up the queue (park = true:
-- grant() parks it and asks the next).
BUDGETS[#BUDGETS + 1] = {name = 'tenant', park = true,
  room = function(tokens, place)
    local cap = place and place.tenant and cap_of(place.tenant)
    if cap and held(place.tenant) + 1 > cap then
      return 'tenant ' .. place.tenant .. ' at its cap: ' .. held(place.tenant) .. ' in flight of ' .. cap, 0
    end
    return nil, 0
  end,
  take = function(tokens) end,
  never = function(tokens) return nil end}

-- Why a lease of `tokens` can never be admitted (its cost is above a
-- budget's limit), or nil.
local function never(tokens)
  local buckets = S.budgets ~= ''
  for _, budget in ipairs(BUDGETS) do
    if buckets or not budget.bucket then
      local why = budget.never(tokens)
      if why then return why end
    end
  end
  return nil
end

-- The admission rule: nil when a lease of `tokens` for `place` ({rank, tenant,
-- aged}; nil: any caller) may be admitted now (the queue aside: the
-- callers decide FIFO), else why not, a hint (ms) and the budget that
-- said so. Needs S.capacity, S.not_before, S.budgets (load them) and
-- CAPS_CONFIG.
local function blocked(tokens, place)
  if S.capacity == 0 then
    if S.paused == 1 then
      local hint = 0
      if S.paused_until > 0 then hint = S.paused_until - NOW end
      return 'paused: ' .. S.pause_reason, hint
    end
  end
  if NOW < S.not_before then
    return 'holding until the provider\'s retry-after', S.not_before - NOW
  end
  local buckets = S.budgets ~= ''  -- none active: the token buckets are not asked
  for _, budget in ipairs(BUDGETS) do
    if buckets or not budget.bucket then
      local why, hint = budget.room(tokens, place)
      if why then return why, hint, budget end
    end
  end
  return nil, 0
end

-- What holds waiter `id` (queued or parked): the admission rule's reason
-- for its own cost and place, else 'behind N earlier waiters' (its rank in
-- the queue), and a hint (ms). Needs prepare().
local function waiting_on(id)
  local m = record_parse(redis.call('HGET', K.holders, id))
  local score = tonumber(redis.call('ZSCORE', K.queue, id))
  local tokens, place = NO_TOKENS, nil
  if m then
    local aged = score ~= nil and score < QUEUE_BAND
    tokens, place = m.tokens, {rank = m.rank, tenant = m.tenant, aged = aged}
  end
  local why, hint = blocked(tokens, place)
  if why then return why, hint end
  local ahead = redis.call('ZRANK', K.queue, id) or 0
  return 'behind ' .. ahead .. ' earlier waiter(s) of its class or above', 0
end

-- A new lease: the fence (HINCRBY, the first write), then its holder
-- record, then its expiry; it takes its cost from every budget. A holders
-- key of another type undoes the fence and fails, so nothing is left written.
-- A lease of a cost above a header's limit is logged ('oversize': the
-- caller has guarded events when announced_budgets()), unless `adopted`.
local function add_lease(id, ttl, holder, tokens, place, adopted)
  if live_count == nil then live_count = in_flight() end
  local fence = redis.call('HINCRBY', K.state, 'fence', 1)
  local level = live_count + 1
  local ok = redis.pcall('HSET', K.holders, id, record_format(fence, ttl, NOW, tokens.input, tokens.output, level,
    place.rank, place.tenant, holder))
  if type(ok) == 'table' and ok.err then
    redis.call('HINCRBY', K.state, 'fence', -1)
    fail('WRONGTYPE', K.holders .. ' is not a hash')
  end
  redis.call('ZADD', K.leases, NOW + ttl, id)
  hold(place)
  S.fence = fence
  local buckets = S.budgets ~= ''
  if buckets and not adopted then
    local kind, cost, limit = oversize(tokens)
    if kind then
      log('oversize', 'budget', kind, 'cost', cost, 'limit', limit, 'holder', holder,
        'why', 'a cost above the announced limit: admitted on a full bucket, its response may raise the limit')
    end
  end
  for _, budget in ipairs(BUDGETS) do
    if buckets or not budget.bucket then budget.take(tokens) end
  end
  return fence
end

-- A new waiter joins the queue (the caller has guarded queue, aging and
-- shares): its tag starts at max(vtime, the finish tag of its tenant in
-- its class), which moves on by the tenant's quantum; a waiter of a lower
-- class waits to age.
local function enqueue(id, place)
  local vtime = VTIMES[place.rank + 1]
  more('state', vtime)  -- read by prepare(_, rank) already; before the call's first write, as every read
  local share, base = place.rank .. ':' .. place.tenant, place.rank * QUEUE_BAND  -- fair within a class
  local finish = tonumber(redis.call('ZSCORE', K.shares, share))  -- the first write: the read tells the type
  local start = math.max(S[vtime], (finish or base) - base)
  redis.call('ZADD', K.shares, base + start + math.ceil(QUANTUM / place.weight), share)
  if not finish then created(K.shares) end
  redis.call('ZADD', K.queue, (place.rank + 1) * QUEUE_BAND + start, id)
  if place.rank > 0 and C.aging_ms > 0 then
    local due = NOW + C.aging_ms
    redis.call('ZADD', K.aging, due, id)
    if S.aging_due == 0 then created(K.aging) end
    if S.aging_due == 0 or due < S.aging_due then set('state', 'aging_due', due) end
  end
end

-- guard(...), and the keys grant() may write beyond them: aging while some
-- waiter waits to age (or when `ages`: the call adds one), events when one
-- is due now (age() logs) or a header's limit may make a grant oversize
-- (add_lease logs). Needs prepare().
local function guard_grant(ages, ...)
  local keys = {...}
  if ages or S.aging_due > 0 then keys[#keys + 1] = 11 end
  if C.tenant_caps ~= '' or C.reserve > 0 then  -- held; parked and the aging parked waiters leave
    keys[#keys + 1] = 13
    keys[#keys + 1] = 14
    keys[#keys + 1] = 11
  end
  if (S.aging_due > 0 and NOW >= S.aging_due) or announced_budgets() then keys[#keys + 1] = 10 end
  guard(unpack(keys))
end

-- Waiters that waited aging_ms go ahead of every class (band 0), keeping
-- their tags, at most BATCH per call; one decision-log entry says so.
-- Needs prepare().
local function age()
  if S.aging_due == 0 or NOW < S.aging_due then return end
  local due = redis.call('ZRANGEBYSCORE', K.aging, '-inf', NOW, 'LIMIT', 0, BATCH)
  local moved, first = 0, nil
  for _, id in ipairs(due) do
    local score = tonumber(redis.call('ZSCORE', K.queue, id))
    if score and score >= QUEUE_BAND then
      redis.call('ZADD', K.queue, score % QUEUE_BAND, id)
      moved = moved + 1
      first = first or id
    end
  end
  if #due > 0 then redis.call('ZREM', K.aging, unpack(due)) end
  local next_due = redis.call('ZRANGE', K.aging, 0, 0, 'WITHSCORES')[2]
  set('state', 'aging_due', next_due and tonumber(next_due) or 0)
  if moved > 0 then
    local m = record_parse(redis.call('HGET', K.holders, first))
    log('age', 'waiters', moved, 'holder', m and m.holder or '', 'after_ms', C.aging_ms,
      'why', 'waited aging_ms: ahead of every class now')
  end
end

-- Admit waiters from the head of the queue while the rule lets them in, at
-- most BATCH per call (a capacity rise under a long queue is admitted over
-- the next calls: every refresh, release and report grants), and announce
-- the grants on CHANNEL as "epoch id:fence id:fence ..." (all but
-- `caller`, who learns of its grant from the reply). Returns id -> fence.
-- Held back by a hold or a timed pause with callers queued, it announces
-- "epoch @ms" instead: ask again in ms, when the time is up (nothing else
-- may happen then to grant them: the holders may all be done by then).
-- Needs prepare(); the caller has guarded waiters, holders, leases, aging.
local function grant(caller)
  age()
  local granted = {}
  local words = {}
  local skipped, admitted = 0, 0
  local capped = C.tenant_caps ~= ''
  while skipped <= BATCH and admitted < BATCH do
    local first = redis.call('ZRANGE', K.queue, 0, 0, 'WITHSCORES')
    local head = first[1]
    if not head then break end
    local score = tonumber(first[2])
    -- pause, hold, concurrency (the class from the band): no record needed
    local band = math.floor(score / QUEUE_BAND)
    local why, hint, budget = blocked(NO_TOKENS, {rank = math.max(band - 1, 0), aged = band == 0})
    local m, impossible = nil, nil
    if not why then
      m = record_parse(redis.call('HGET', K.holders, head))
      if m and (capped or #active_budgets() > 0) then
        impossible = never(m.tokens)
        if not impossible then
          why, hint, budget = blocked(m.tokens, {rank = m.rank, tenant = m.tenant, aged = band == 0})
        end
      end
    end
    if why and budget and budget.park then
      -- Its tenant is at its cap: it waits parked, the next is asked.
      local _, slot = cap_of(m.tenant)
      set('state', 'park_seq', S.park_seq + 1)
      redis.call('ZREM', K.queue, head)
      redis.call('ZADD', K.parked, slot * PARK_SLOT + S.park_seq, head)
      created(K.parked)
      skipped = skipped + 1
    elseif why then
      if hint > 0 and admitted == 0 then redis.call('PUBLISH', CHANNEL, S.epoch .. ' @' .. int(hint)) end
      break
    else
      local deadline = tonumber(redis.call('ZSCORE', K.waiters, head))
      redis.call('ZREM', K.queue, head)
      redis.call('ZREM', K.waiters, head)
      if score >= QUEUE_BAND and m and m.rank > 0 and S.aging_due > 0 then redis.call('ZREM', K.aging, head) end
      if impossible then
        -- A budget's limit fell below its cost: its refresh is refused (acquire again).
        redis.call('HDEL', K.holders, head)
        redis.call('PUBLISH', CHANNEL, S.epoch .. ' @' .. 1)  -- ask again now
        skipped = skipped + 1
      elseif deadline and deadline > NOW and m then
        granted[head] = add_lease(head, m.ttl, m.holder, m.tokens, m)
        -- A class's grants come in tag order (the head is its smallest tag, and
        -- a newcomer starts at vtime at least), so its vtime is the last one's
        -- tag, written without a read; an aged waiter's older tag leaves it.
        local vtime = VTIMES[m.rank + 1]
        if vtime and score >= QUEUE_BAND then set('state', vtime, score % QUEUE_BAND) end
        if head ~= caller then words[#words + 1] = head .. ':' .. int(granted[head]) end
        admitted = admitted + 1
      else
        redis.call('HDEL', K.holders, head)
        skipped = skipped + 1
      end
    end
  end
  if #words > 0 then
    redis.call('PUBLISH', CHANNEL, S.epoch .. ' ' .. table.concat(words, ' '))
  end
  return granted
end
