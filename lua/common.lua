--[[ common.lua: the prelude of every governor script.

governor/scripts.py prepends this file to each lua/<operation>.lua before
register_script, so every operation sees the names defined here.

KEYS (every script receives all of them, in this order; built by
governor.keys.governor_keys, all under one hash tag so they share a slot)
  KEYS[1] state     hash    config, policy state and counters (see FIELDS)
  KEYS[2] leases    zset    lease id -> expiry, ms
  KEYS[3] holders   hash    lease or waiter id -> "fence|ttl_ms|since_ms|holder"
  KEYS[4] queue     zset    waiter id -> ticket (arrival order, FIFO)
  KEYS[5] waiters   zset    waiter id -> deadline, ms (dropped unless refreshed)
  KEYS[6] attempts  zset    "seq:o" -> time, ms: every attempt in the window
  KEYS[7] limited   zset    "seq:o" -> time, ms: rate-limited attempts in window
  KEYS[8] events    stream  decision log, capped at about state.log_len entries

ARGV (common to every script)
  ARGV[1] now       int ms  injected clock, or '' for Redis TIME
  ARGV[2] channel   string  pub/sub channel on which grants are announced
  ARGV[3..]                 the operation's own arguments (see its header)

Clock: Redis TIME, unless a test or simulation injects one in ARGV[1].
Replies: flat arrays whose first element is the schema version, SCHEMA.
Error replies (raised with error(msg, 0), mapped by governor/errors.py):
  GOVERNOR_WRONGTYPE <key>  a key of this governor holds another Redis type
  GOVERNOR_BADARG <what>    a malformed argument (client bug or tampering)
  GOVERNOR_SCHEMA <found>   the state hash was written by another schema
Cost: O(log N) per call in leases, waiters and window events, amortised:
expired leases and dead waiters are reclaimed at most BATCH per call, and
every count is derived with ZCOUNT, so stale entries never count.
]]

local SCHEMA = 1
local BATCH = 64

local K = {
  state = KEYS[1], leases = KEYS[2], holders = KEYS[3], queue = KEYS[4],
  waiters = KEYS[5], attempts = KEYS[6], limited = KEYS[7], events = KEYS[8],
}
local KEY_TYPES = {
  {K.state, 'hash'}, {K.leases, 'zset'}, {K.holders, 'hash'}, {K.queue, 'zset'},
  {K.waiters, 'zset'}, {K.attempts, 'zset'}, {K.limited, 'zset'}, {K.events, 'stream'},
}

local function fail(code, detail)
  error('GOVERNOR_' .. code .. ' ' .. detail, 0)
end

-- Integers go to Redis through here: tostring() of a large Lua number
-- loses digits ("1.7e+15").
local function int(x)
  return string.format('%d', x)
end

-- Any number, exactly: integers as integers, fractions with 17 digits.
local function num(x)
  if x == math.floor(x) then return int(x) end
  return string.format('%.17g', x)
end

local function arg_int(i, what, min)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= v or v ~= math.floor(v) or v < (min or 0) then
    fail('BADARG', what .. ' must be an integer >= ' .. (min or 0) .. ', got ' .. tostring(ARGV[i]))
  end
  return v
end

local function arg_num(i, what, min, max)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= v or v < min or v > max then
    fail('BADARG', what .. ' must be a number in [' .. min .. ', ' .. max .. '], got ' .. tostring(ARGV[i]))
  end
  return v
end

local function arg_id(i, what)
  local v = ARGV[i]
  if v == nil or not string.match(v, '^[%w%-_.:]+$') or #v > 128 then
    fail('BADARG', what .. ' must be 1-128 characters of [A-Za-z0-9-_.:], got ' .. tostring(v))
  end
  return v
end

for _, kt in ipairs(KEY_TYPES) do
  local t = redis.call('TYPE', kt[1])['ok']
  if t ~= 'none' and t ~= kt[2] then
    fail('WRONGTYPE', kt[1] .. ' is a ' .. t .. ', expected a ' .. kt[2])
  end
end

local NOW
if ARGV[1] == '' then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  NOW = arg_int(1, 'now')
end
local CHANNEL = ARGV[2]

-- The state hash. Strings are kept as strings, everything else is a number.
local STRING_FIELDS = {epoch = true, policy = true, reason = true, pause_kind = true}

local S = nil       -- the loaded state, or nil when the governor does not exist
local DIRTY = {}    -- fields of S changed by this call, written back by save()

local function load_state()
  local flat = redis.call('HGETALL', K.state)
  if #flat == 0 then
    S = nil
    return nil
  end
  S = {}
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    if STRING_FIELDS[f] then S[f] = v else S[f] = tonumber(v) end
  end
  if S.schema ~= SCHEMA then
    fail('SCHEMA', tostring(S.schema) .. ' (this client speaks ' .. SCHEMA .. ')')
  end
  return S
end

local function set(field, value)
  if S[field] ~= value then
    S[field] = value
    DIRTY[field] = true
  end
end

local function save()
  local args = {}
  for f in pairs(DIRTY) do
    local v = S[f]
    args[#args + 1] = f
    if type(v) == 'number' then args[#args + 1] = num(v) else args[#args + 1] = v end
  end
  if #args > 0 then
    redis.call('HSET', K.state, unpack(args))
  end
  DIRTY = {}
end

-- Every key expires when the governor is idle for idle_ms; each writing
-- call pushes the expiry back (a missing key is a no-op).
local function touch()
  for _, kt in ipairs(KEY_TYPES) do
    redis.call('PEXPIRE', kt[1], S.idle_ms)
  end
end

-- The decision log: why capacity, pause or not_before changed.
local function log(kind, ...)
  redis.call('XADD', K.events, 'MAXLEN', '~', S.log_len, '*',
    'kind', kind, 'at', int(NOW), 'capacity', int(S.cap), 'paused', int(S.paused), ...)
end

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
  return redis.call('ZCOUNT', K.leases, '(' .. int(NOW), '+inf')
end

local function queued()
  return redis.call('ZCOUNT', K.waiters, '(' .. int(NOW), '+inf')
end

-- Expired leases and waiters that stopped refreshing, at most BATCH of each.
local function reclaim()
  local expired = redis.call('ZRANGEBYSCORE', K.leases, '-inf', int(NOW), 'LIMIT', 0, BATCH)
  if #expired > 0 then
    redis.call('ZREM', K.leases, unpack(expired))
    redis.call('HDEL', K.holders, unpack(expired))
  end
  local dead = redis.call('ZRANGEBYSCORE', K.waiters, '-inf', int(NOW), 'LIMIT', 0, BATCH)
  if #dead > 0 then
    redis.call('ZREM', K.waiters, unpack(dead))
    redis.call('ZREM', K.queue, unpack(dead))
    redis.call('HDEL', K.holders, unpack(dead))
  end
end

-- The window: drop old attempts, return (rate-limited, all) attempts.
local function window()
  local horizon = '(' .. int(NOW - S.window_ms)
  redis.call('ZREMRANGEBYSCORE', K.attempts, '-inf', horizon)
  redis.call('ZREMRANGEBYSCORE', K.limited, '-inf', horizon)
  return redis.call('ZCARD', K.limited), redis.call('ZCARD', K.attempts)
end

local function resume_level()
  return math.max(1, math.floor(S.max * S.resume_frac))
end

local function pause(kind, reason, until_ms)
  if S.paused == 0 then
    set('saved_cap', S.cap)
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

-- Admit waiters from the head of the queue while there is room, and
-- announce the grants on CHANNEL as "epoch id:fence id:fence ..." (all but
-- `caller`, who learns of its grant from the reply). Returns id -> fence.
local function grant(caller)
  local granted = {}
  if S.paused == 1 or NOW < S.not_before then return granted end
  local live = in_flight()
  local words = {}
  local skipped = 0
  while live < S.cap and skipped <= BATCH do
    local head = redis.call('ZRANGE', K.queue, 0, 0)[1]
    if not head then break end
    local deadline = tonumber(redis.call('ZSCORE', K.waiters, head))
    redis.call('ZREM', K.queue, head)
    redis.call('ZREM', K.waiters, head)
    local m = meta_parse(redis.call('HGET', K.holders, head))
    if deadline and deadline > NOW and m then
      set('fence', S.fence + 1)
      redis.call('ZADD', K.leases, int(NOW + m.ttl), head)
      redis.call('HSET', K.holders, head, meta_format(S.fence, m.ttl, NOW, m.holder))
      granted[head] = S.fence
      if head ~= caller then words[#words + 1] = head .. ':' .. int(S.fence) end
      live = live + 1
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

-- The adaptive policy: the seed's rules (policy 'seed') or the default
-- ('adaptive'). `fence` is the reporting lease's fence, or nil.
local function set_cap(cap, why, rl, total)
  cap = math.max(0, math.min(cap, S.max))
  if cap ~= S.cap then
    local before = S.cap
    set('cap', cap)
    log('capacity', 'from', int(before), 'why', why, 'window_limited', int(rl), 'window_attempts', int(total))
  end
end

local function on_limited_seed(rl, total)
  if rl >= S.pause_count then
    pause('policy', 'waiting for provider rate-limit recovery', 0)
    log('pause', 'why', int(rl) .. ' rate-limited attempts in the window', 'window_limited', int(rl), 'window_attempts', int(total))
  elseif rl >= S.dec_count or (total >= S.ratio_min and rl / total > S.dec_ratio) then
    set_cap(math.max(1, math.floor(S.cap * S.dec_factor)), 'rate-limited: decrease', rl, total)
  end
end

local function on_limited_adaptive(rl, total, fence)
  -- One decision per congestion episode: a lease admitted before the last
  -- cut was sized for the old capacity, so its 429 is no news.
  if fence ~= nil and fence <= S.cut_fence then return end
  if rl >= S.pause_count and rl >= S.pause_ratio * total then
    pause('policy', 'waiting for provider rate-limit recovery', 0)
    set('cut_fence', S.fence)
    log('pause', 'why', 'rate-limited share ' .. string.format('%.2f', rl / total) .. ' of ' .. int(total) .. ' attempts', 'window_limited', int(rl), 'window_attempts', int(total))
    return
  end
  local level = math.max(1, math.min(in_flight(), S.cap))
  set('ceiling', level)
  set('cut_fence', S.fence)
  set('probe_step', 1)
  set('probe_at', NOW)
  set_cap(math.max(1, math.floor(level * S.cut_factor)), 'rate-limited at ' .. int(level) .. ' in flight: cut', rl, total)
end

local function on_success_seed(rl, total)
  set('streak', S.streak + 1)
  if S.streak >= S.inc_succ then
    set('streak', 0)
    set_cap(S.cap + 1, int(S.inc_succ) .. ' successes in a row: increase', rl, total)
  end
end

local function on_success_adaptive(rl, total)
  set('streak', S.streak + 1)
  if S.cap >= S.max then
    set('streak', 0)
    return
  end
  if S.ceiling == 0 or S.cap + 1 < S.ceiling then
    -- Below the level of the last pushback: climb back at once.
    set('streak', 0)
    set_cap(S.cap + 1, 'success below the last pushback level: increase', rl, total)
  elseif S.streak >= S.inc_succ and NOW - S.probe_at >= S.probe_ms then
    -- At or above it: probe carefully, a step per probe interval, the step
    -- doubling while the provider keeps accepting.
    set('streak', 0)
    set('probe_at', NOW)
    local step = S.probe_step
    set('probe_step', math.min(S.probe_step * 2, S.max))
    set_cap(S.cap + step, 'probe above the last pushback level', rl, total)
  end
end

-- Record one reported attempt and apply the policy. outcome is 's'
-- (success), 'r' (rate-limited) or 'e' (other error).
local function record(outcome, fence)
  set('evseq', S.evseq + 1)
  local member = int(S.evseq) .. ':' .. outcome
  redis.call('ZADD', K.attempts, int(NOW), member)
  if outcome == 'r' then
    redis.call('ZADD', K.limited, int(NOW), member)
  end
  local rl, total = window()
  if outcome == 'r' then
    set('streak', 0)
    if S.paused == 1 then return end       -- further 429s while paused change nothing
    if S.policy == 'seed' then on_limited_seed(rl, total) else on_limited_adaptive(rl, total, fence) end
  elseif outcome == 's' then
    if S.paused == 1 then
      recover(rl)
    elseif S.policy == 'seed' then
      on_success_seed(rl, total)
    else
      on_success_adaptive(rl, total)
    end
  else
    recover(rl)
  end
end

local function status_reply()
  local rl = redis.call('ZCOUNT', K.limited, '(' .. int(NOW - S.window_ms), '+inf')
  local total = redis.call('ZCOUNT', K.attempts, '(' .. int(NOW - S.window_ms), '+inf')
  return {
    SCHEMA, 'status',
    'now', int(NOW), 'epoch', S.epoch, 'policy', S.policy,
    'capacity', int(S.cap), 'max_capacity', int(S.max),
    'paused', int(S.paused), 'pause_kind', S.pause_kind, 'reason', S.reason,
    'paused_until', int(S.paused_until), 'not_before', int(S.not_before),
    'in_flight', int(in_flight()), 'queued', int(queued()),
    'window_limited', int(rl), 'window_attempts', int(total),
    'window_ms', int(S.window_ms), 'streak', int(S.streak), 'fence', int(S.fence),
    'ceiling', int(S.ceiling), 'quota_exhausted', int(S.quota_count),
    'quota_at', int(S.quota_at), 'created', int(S.created),
  }
end

local function missing_reply()
  return {SCHEMA, 'missing'}
end

-- Config fields, as sent by governor/core.py (name value pairs): type and range.
local CONFIG_FIELDS = {
  max = {'int', 1, 1000000},          -- max_capacity
  window_ms = {'int', 1, 86400000},   -- sliding window
  dec_count = {'int', 1, 1000000},    -- seed: rate-limited attempts that halve
  dec_ratio = {'num', 0, 1},          -- seed: rate-limited share that halves
  ratio_min = {'int', 1, 1000000},    -- seed: attempts needed for the share rule
  dec_factor = {'num', 0, 1},         -- seed: multiplicative decrease
  pause_count = {'int', 1, 1000000},  -- rate-limited attempts that pause
  pause_ratio = {'num', 0, 1},        -- adaptive: share that must also be reached to pause
  resume_frac = {'num', 0, 1},        -- resume at max(1, floor(max * resume_frac))
  inc_succ = {'int', 1, 1000000},     -- successes in a row per additive step
  cut_factor = {'num', 0, 1},         -- adaptive: cut to this share of the pushback level
  probe_ms = {'int', 0, 86400000},    -- adaptive: time between probes above the pushback level
  ra_cap_ms = {'int', 0, 86400000},   -- cap on a reported retry-after
  idle_ms = {'int', 1000, 2592000000},-- every key expires after this long idle
  log_len = {'int', 1, 10000000},     -- decision log length (approximate cap)
}

-- Read name/value config pairs from ARGV[first..]; returns a table.
local function parse_config(first)
  local cfg = {}
  local i = first
  while i <= #ARGV do
    local name, raw = ARGV[i], ARGV[i + 1]
    if name == 'policy' then
      if raw ~= 'adaptive' and raw ~= 'seed' then
        fail('BADARG', 'policy must be adaptive or seed, got ' .. tostring(raw))
      end
      cfg.policy = raw
    else
      local spec = CONFIG_FIELDS[name]
      if not spec then fail('BADARG', 'unknown config field ' .. tostring(name)) end
      if spec[1] == 'int' then cfg[name] = arg_int(i + 1, name, spec[2]) else cfg[name] = arg_num(i + 1, name, spec[2], spec[3]) end
      if cfg[name] > spec[3] then fail('BADARG', name .. ' must be <= ' .. spec[3]) end
    end
    i = i + 2
  end
  for name in pairs(CONFIG_FIELDS) do
    if cfg[name] == nil then fail('BADARG', 'config field ' .. name .. ' is missing') end
  end
  if not cfg.policy then fail('BADARG', 'config field policy is missing') end
  return cfg
end

-- Put a fresh policy state (capacity at max, nothing learnt) into S.
local function apply_config(cfg)
  for name, value in pairs(cfg) do set(name, value) end
  set('paused', 0)
  set('pause_kind', '')
  set('reason', '')
  set('paused_until', 0)
  set('saved_cap', 0)
  set('not_before', 0)
  set('cap', cfg.max)
  set('streak', 0)
  set('ceiling', 0)
  set('cut_fence', S.fence)
  set('probe_at', NOW)
  set('probe_step', 1)
end

-- Write the changed state back, push every key's expiry, reply.
local function finish(reply)
  save()
  touch()
  return reply
end
