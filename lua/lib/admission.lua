--[[ lib/admission.lua: leases, the FIFO queue, grants, pauses and holds.

Uses the names of lib/common.lua. Defines: meta_parse, meta_format,
in_flight, queued, reclaim, window, resume_level, pause, resume, recover,
blocked, add_lease, grant.
]]

want('fence', 'max', 'not_before', 'pause_kind', 'paused_until', 'reason', 'reclaim_due', 'resume_frac',
  'saved_cap', 'streak', 'window_ms')

-- holders entries: "fence|ttl_ms|since_ms|holder"
local function meta_parse(raw)
  if not raw then return nil end
  local fence, ttl, since, holder = string.match(raw, '^(%d+)|(%d+)|(%d+)|(.*)$')
  if not fence then return nil end
  return {fence = tonumber(fence), ttl = tonumber(ttl), since = tonumber(since), holder = holder}
end

local function meta_format(fence, ttl, since, holder)
  return int(fence) .. '|' .. int(ttl) .. '|' .. int(since) .. '|' .. holder
end

local function in_flight()
  return redis.call('ZCOUNT', K.leases, LIVE, '+inf')
end

local function queued()
  return redis.call('ZCOUNT', K.waiters, LIVE, '+inf')
end

-- Remove what no longer counts: expired leases and waiters that stopped
-- refreshing (at most BATCH of each), window events older than the window.
-- At most once per RECLAIM_MS; `force` for the scripts that run rarely.
local function reclaim(force)
  if not force and NOW < (S.reclaim_due or 0) then return end
  check_types()
  set('reclaim_due', NOW + RECLAIM_MS)
  local expired = redis.call('ZRANGEBYSCORE', K.leases, '-inf', NOW, 'LIMIT', 0, BATCH)
  if #expired > 0 then
    local first = meta_parse(redis.call('HGET', K.holders, expired[1]))
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
  local horizon = '(' .. (NOW - S.window_ms)
  redis.call('ZREMRANGEBYSCORE', K.attempts, '-inf', horizon)
  redis.call('ZREMRANGEBYSCORE', K.limited, '-inf', horizon)
end

-- The window: (rate-limited, all) attempts of the last window_ms.
local function window()
  local horizon = '(' .. (NOW - S.window_ms)
  return redis.call('ZCOUNT', K.limited, horizon, '+inf'), redis.call('ZCOUNT', K.attempts, horizon, '+inf')
end

local function resume_level()
  return math.max(1, math.floor(S.max * S.resume_frac))
end

local function pause(kind, reason, until_ms)
  if S.paused == 0 then
    set('saved_cap', S.cap)
  elseif S.pause_kind == 'policy' then
    -- An operator takes over a policy pause: the storm is not over, so the
    -- resume starts at the resume level, not where capacity was before it.
    set('saved_cap', resume_level())
  end
  set('paused', 1)
  set('pause_kind', kind)
  set('reason', reason)
  set('paused_until', until_ms)
  set('cap', 0)
  set('streak', 0)
end

local function resume(cap)
  set('paused', 0)
  set('pause_kind', '')
  set('reason', '')
  set('paused_until', 0)
  set('saved_cap', 0)
  set('cap', math.max(1, math.min(cap, S.max)))
  set('streak', 0)
end

-- Time-driven recovery, run by every report, probe and waiter refresh:
-- a policy pause lifts once no rate-limited attempt is left in the window,
-- an operator pause lifts when its duration is over.
local function recover(rl)
  if S.paused == 0 then return end
  if S.pause_kind == 'policy' then
    if rl == nil then rl = window() end
    if rl == 0 then
      resume(resume_level())
      log('resume', 'why', 'no rate-limited attempt left in the window')
    end
  elseif S.paused_until > 0 and NOW >= S.paused_until then
    resume(S.saved_cap > 0 and S.saved_cap or resume_level())
    log('resume', 'why', 'operator pause duration over')
  end
end

-- Why a caller is not admitted now, and when it is worth asking again.
local function blocked()
  if S.paused == 1 then
    local hint = 0
    if S.paused_until > 0 then hint = S.paused_until - NOW end
    return 'paused: ' .. S.reason, hint
  end
  if NOW < S.not_before then
    return 'holding until the provider\'s retry-after', S.not_before - NOW
  end
  return nil, 0
end

-- A new lease: holders first, then leases, so a holders key of the wrong
-- type stops the call before anything is written.
local function add_lease(id, ttl, holder, live)
  set('fence', S.fence + 1)
  redis.call('HSET', K.holders, id, meta_format(S.fence, ttl, NOW, holder))
  redis.call('ZADD', K.leases, NOW + ttl, id)
  if live == 0 then created(K.leases) created(K.holders) end
  return S.fence
end

-- Admit waiters from the head of the queue while there is room, at most
-- BATCH per call (a capacity rise under a long queue is admitted over the
-- next calls: every refresh, release and report grants), and announce the
-- grants on CHANNEL as "epoch id:fence id:fence ..." (all but `caller`,
-- who learns of its grant from the reply). Returns id -> fence.
-- Held back by a hold or a timed pause with callers queued, it announces
-- "epoch @ms" instead: ask again in ms, when the time is up (nothing else
-- may happen then to grant them: the holders may all be done by then).
local function grant(caller)
  local granted = {}
  if S.paused == 1 or NOW < S.not_before then
    local _, hint = blocked()
    if hint > 0 and redis.call('ZRANGE', K.queue, 0, 0)[1] then
      redis.call('PUBLISH', CHANNEL, S.epoch .. ' @' .. int(hint))
    end
    return granted
  end
  local live = nil
  local words = {}
  local skipped, admitted = 0, 0
  while skipped <= BATCH and admitted < BATCH do
    local head = redis.call('ZRANGE', K.queue, 0, 0)[1]
    if not head then break end
    if live == nil then live = in_flight() end
    if live >= S.cap then break end
    local deadline = tonumber(redis.call('ZSCORE', K.waiters, head))
    local m = meta_parse(redis.call('HGET', K.holders, head))
    redis.call('ZREM', K.queue, head)
    redis.call('ZREM', K.waiters, head)
    if deadline and deadline > NOW and m then
      granted[head] = add_lease(head, m.ttl, m.holder, live)
      if head ~= caller then words[#words + 1] = head .. ':' .. int(S.fence) end
      live = live + 1
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

