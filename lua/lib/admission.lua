--[[ lib/admission.lua: the one admission rule, leases, the FIFO queue, grants,
pauses and holds.

Uses the names of lib/common.lua. Defines: record_parse, record_format,
in_flight, PAUSE_FIELDS, prepare, reclaim, window, resume_level, pause, resume, recover, BUDGETS,
blocked, add_lease, grant.

The rule (SPEC §3): a caller is admitted when the governor is not paused,
no hold runs (not_before), every budget has room for the lease's cost, and
nobody is queued ahead of it. blocked() is the rule, and the only place
the reason a caller waits is worded; acquire, refresh and grant ask it.
]]

-- holders entries: "fence|ttl_ms|since_ms|cost|holder" (governor.protocol.HolderRecord)
local function record_parse(raw)
  if not raw then return nil end
  local fence, ttl, since, cost, holder = string.match(raw, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  if not fence then return nil end
  return {fence = tonumber(fence), ttl = tonumber(ttl), since = tonumber(since), cost = tonumber(cost), holder = holder}
end

local function record_format(fence, ttl, since, cost, holder)
  return int(fence) .. '|' .. int(ttl) .. '|' .. int(since) .. '|' .. cost .. '|' .. holder
end

local function in_flight()
  return redis.call('ZCOUNT', K.leases, LIVE, '+inf')
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
    local first = record_parse(redis.call('HGET', K.holders, expired[1]))
    redis.call('ZREM', K.leases, unpack(expired))
    redis.call('HDEL', K.holders, unpack(expired))
    log('expire', 'leases', #expired, 'holder', first and first.holder or '',
      'why', 'holders stopped renewing (crashed or stalled past their TTL)')
  end
  local dead = redis.call('ZRANGEBYSCORE', K.waiters, '-inf', NOW, 'LIMIT', 0, BATCH)
  if #dead > 0 then
    redis.call('ZREM', K.waiters, unpack(dead))
    redis.call('ZREM', K.queue, unpack(dead))
    redis.call('HDEL', K.holders, unpack(dead))
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
local ADMIT = {'epoch', 'capacity', 'not_before', 'touch_due'}
local WRITE = {'epoch', 'capacity', 'not_before', 'touch_due', 'reclaim_due'}
local REPORT = {'epoch', 'capacity', 'not_before', 'touch_due', 'reclaim_due', 'event_seq'}

-- Read every field reclaim, recover, blocked, grant, pause and log may use,
-- before a script's first write (reads after a write could fail it
-- half-way). Capacity is 0 only while paused: the pause's own fields are
-- read only then.
local function prepare()
  more('state', 'reclaim_due')
  more('config', 'policy', 'window_ms', 'log_length', 'max_capacity', 'idle_ms')
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

-- The budgets a lease takes from, in order. Each kind answers room(cost):
-- nil when a lease of that cost fits, else why not and a hint (ms until
-- asking again may pay off, 0: no idea). Concurrency: the live leases
-- (each counted once, cost 1) against capacity; capacity is 0 while paused.
local live_count = nil  -- in-flight, once read by this call
RESETS[#RESETS + 1] = function() live_count = nil end
local BUDGETS = {
  {name = 'concurrency', room = function(cost)
    if live_count == nil then live_count = in_flight() end
    if live_count + cost > S.capacity then
      return 'at capacity: ' .. live_count .. ' in flight of ' .. S.capacity, 0
    end
    return nil, 0
  end},
}

-- The admission rule: nil when a lease of `cost` may be admitted now (the
-- queue aside: the callers decide FIFO), else why not and a hint (ms).
-- Needs S.capacity and S.not_before (load them).
local function blocked(cost)
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
  for _, budget in ipairs(BUDGETS) do
    local why, hint = budget.room(cost)
    if why then return why, hint end
  end
  return nil, 0
end

-- A new lease: the fence (HINCRBY, the first write), then its holder
-- record, then its expiry. A holders key of another type undoes the fence
-- and fails, so nothing is left written.
local function add_lease(id, ttl, holder)
  local fence = redis.call('HINCRBY', K.state, 'fence', 1)
  local ok = redis.pcall('HSET', K.holders, id, record_format(fence, ttl, NOW, 1, holder))
  if type(ok) == 'table' and ok.err then
    redis.call('HINCRBY', K.state, 'fence', -1)
    fail('WRONGTYPE', K.holders .. ' is not a hash')
  end
  redis.call('ZADD', K.leases, NOW + ttl, id)
  S.fence = fence
  if live_count then live_count = live_count + 1 end
  return fence
end

-- Admit waiters from the head of the queue while the rule lets them in, at
-- most BATCH per call (a capacity rise under a long queue is admitted over
-- the next calls: every refresh, release and report grants), and announce
-- the grants on CHANNEL as "epoch id:fence id:fence ..." (all but
-- `caller`, who learns of its grant from the reply). Returns id -> fence.
-- Held back by a hold or a timed pause with callers queued, it announces
-- "epoch @ms" instead: ask again in ms, when the time is up (nothing else
-- may happen then to grant them: the holders may all be done by then).
local function grant(caller)
  local granted = {}
  local words = {}
  local skipped, admitted = 0, 0
  while skipped <= BATCH and admitted < BATCH do
    local head = redis.call('ZRANGE', K.queue, 0, 0)[1]
    if not head then break end
    local why, hint = blocked(1)
    if why then
      if hint > 0 and admitted == 0 then redis.call('PUBLISH', CHANNEL, S.epoch .. ' @' .. int(hint)) end
      break
    end
    local deadline = tonumber(redis.call('ZSCORE', K.waiters, head))
    local m = record_parse(redis.call('HGET', K.holders, head))
    redis.call('ZREM', K.queue, head)
    redis.call('ZREM', K.waiters, head)
    if deadline and deadline > NOW and m then
      granted[head] = add_lease(head, m.ttl, m.holder)
      if head ~= caller then words[#words + 1] = head .. ':' .. int(granted[head]) end
      admitted = admitted + 1
    else
      redis.call('HDEL', K.holders, head)
      skipped = skipped + 1
    end
  end
  if #words > 0 then
    redis.call('PUBLISH', CHANNEL, S.epoch .. ' ' .. table.concat(words, ' '))
  end
  return granted
end
