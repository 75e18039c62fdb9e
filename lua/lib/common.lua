--[[ lib/common.lua: the prelude of every governor script.

governor/scripts.py builds each script from this file, the fragments of
lua/lib/ that the operation names on its "Uses" line, and the operation's
own file, then registers it with register_script.

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
  GOVERNOR_BADSTATE <what>  a stored state value is missing or out of range

Cost. Every call runs the whole prelude (each function definition is a
closure made anew) and each redis.call from Lua costs about as much as a
small command, so the hot paths (acquire, release, report, renew, refresh)
count both: a script loads only the fragments it uses; the state is read
with one HMGET of the fields it wants (see want) and checked field by
field; every count is derived with
ZCOUNT over the live range, so expired leases, dead waiters and old window
events never count even before they are removed; removal (reclaim) runs at
most once per RECLAIM_MS and removes at most BATCH entries of each kind;
all keys' expiry is pushed back at most once per idle_ms / 8, and at once
only for a key this call may have created. Each script is O(log N) in
leases, waiters and window events, amortised.

No write and then a failure. Redis keeps a script's writes when it then
fails, so everything that could stop a script is checked before its first
write: every argument (arg_int, arg_id, ...), every stored state value
(load_state: GOVERNOR_BADSTATE), and the type of every key it touches. The
rarely run scripts (init, reset, set_max, pause, resume, probe, refresh,
report) and every reclaim check every key's type first (check_types); the
hot paths (acquire, release, cancel, renew) read each key they will touch
before their first write, or guard() it, which costs them 0 to 3 calls.
Each script also declares its flags (the "#!lua" line governor/scripts.py
puts first), so a Redis out of memory refuses a writing script before it
runs instead of failing it at its first write.
]]

local SCHEMA = 1
local BATCH = 64
local RECLAIM_MS = 1000

local K = {
  state = KEYS[1], leases = KEYS[2], holders = KEYS[3], queue = KEYS[4],
  waiters = KEYS[5], attempts = KEYS[6], limited = KEYS[7], events = KEYS[8],
}

local function fail(code, detail)
  error('GOVERNOR_' .. code .. ' ' .. detail, 0)
end

-- An integer inside a string: Lua's own conversion turns a fence (above
-- 1e14) into "1.7e+15". Numbers passed to redis.call or returned in a reply
-- need no conversion: Redis converts them exactly.
local function int(x)
  return string.format('%d', x)
end

-- 2^53: above it a Lua number is no longer an exact integer (and 1e400 is inf).
local MAX_INT = 9007199254740992

local function arg_int(i, what, min)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= v or v ~= math.floor(v) or v < (min or 0) or v > MAX_INT then
    fail('BADARG', what .. ' must be an integer in [' .. (min or 0) .. ', 2^53], got ' .. tostring(ARGV[i]))
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

-- NOW is an integer of ms; LIVE is the ZCOUNT bound "after NOW". Built from
-- TIME's strings with one tonumber: each conversion costs (see the header).
-- Type checks: a key another program wrote stops a script before it writes
-- anything. guard() checks the keys a script will touch after its first
-- write and has not read before it; check_types() checks them all.
local EXPECTED = {
  [KEYS[1]] = 'hash', [KEYS[2]] = 'zset', [KEYS[3]] = 'hash', [KEYS[4]] = 'zset',
  [KEYS[5]] = 'zset', [KEYS[6]] = 'zset', [KEYS[7]] = 'zset', [KEYS[8]] = 'stream',
}

local function guard(...)
  for _, key in ipairs({...}) do
    local t = redis.call('TYPE', key)['ok']
    if t ~= 'none' and t ~= EXPECTED[key] then
      fail('WRONGTYPE', key .. ' is a ' .. t .. ', expected a ' .. EXPECTED[key])
    end
  end
end

local function check_types()
  guard(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
end

local NOW, LIVE
if ARGV[1] == '' then
  local t = redis.call('TIME')
  local text = t[1] .. string.sub('00000' .. t[2], -6, -4)
  NOW, LIVE = tonumber(text), '(' .. text
else
  NOW = arg_int(1, 'now')
  LIVE = '(' .. ARGV[1]
end
local CHANNEL = ARGV[2]

-- The state hash: every field a script may use, each checked when the
-- state is loaded, before any write, so a bad stored value stops a script
-- with GOVERNOR_BADSTATE instead of failing it half-way. A kind is 'str'
-- (a string, one of `values` when given), 'int' or 'num' (in [min, max]).
-- CONFIG names the fields a client's config sets (lib/config.lua checks
-- them with the same table); init writes every field.
-- Kinds shared by many fields: one table each, made once per call.
local COUNT = {'int', 0, MAX_INT}       -- a counter, a fence or a time in ms (0: none)
local LEVEL = {'int', 0, 1000000}       -- a capacity
local FLAG = {'int', 0, 1}
local SHARE = {'num', 0, 1}
local STR = {'str'}
local FIELDS = {
  schema = {'int', 1, 1000000}, epoch = STR, created = COUNT,
  policy = {'str', values = {adaptive = true, seed = true}},
  cap = LEVEL, paused = FLAG, reason = STR,
  pause_kind = {'str', values = {[''] = true, policy = true, operator = true}},
  paused_until = COUNT, saved_cap = LEVEL, not_before = COUNT,
  fence = COUNT, ticket = COUNT, evseq = COUNT, quota_count = COUNT, quota_at = COUNT,
  touch_due = COUNT, reclaim_due = COUNT,
  streak = COUNT, ceiling = COUNT, cut_fence = COUNT,
  probe_at = COUNT, probe_step = {'int', 1, MAX_INT}, probe_wait = COUNT,
  climb = FLAG,
  -- the config
  max = {'int', 1, 1000000},          -- max_capacity
  window_ms = {'int', 1, 86400000},   -- sliding window
  dec_count = {'int', 1, 1000000},    -- seed: rate-limited attempts that halve
  dec_ratio = SHARE,                  -- seed: rate-limited share that halves
  ratio_min = {'int', 1, 1000000},    -- seed: attempts needed for the share rule
  dec_factor = SHARE,                 -- seed: multiplicative decrease
  pause_count = {'int', 1, 1000000},  -- rate-limited attempts that pause
  pause_ratio = SHARE,                -- adaptive: share that must also be reached to pause
  resume_frac = SHARE,                -- resume at max(1, floor(max * resume_frac))
  inc_succ = {'int', 1, 1000000},     -- successes in a row per additive step
  cut_factor = SHARE,                 -- adaptive: cut to this share of the pushback level
  probe_ms = {'int', 0, 86400000},    -- adaptive: time between probes above the pushback level
  ra_cap_ms = {'int', 0, 86400000},   -- cap on a reported retry-after
  idle_ms = {'int', 1000, 2592000000},-- every key expires after this long idle
  log_len = {'int', 1, 10000000},     -- decision log length (approximate cap)
}
local CONFIG = {'policy', 'max', 'window_ms', 'dec_count', 'dec_ratio', 'ratio_min', 'dec_factor',
  'pause_count', 'pause_ratio', 'resume_frac', 'inc_succ', 'cut_factor', 'probe_ms', 'ra_cap_ms',
  'idle_ms', 'log_len'}

-- A value as its field's kind, or nil when it is not one.
local function field_value(spec, raw)
  if spec[1] == 'str' then
    if spec.values and not spec.values[raw] then return nil end
    return raw
  end
  local v = tonumber(raw)
  if v == nil or v ~= v or v < spec[2] or v > spec[3] or (spec[1] == 'int' and v % 1 ~= 0) then
    return nil
  end
  return v
end

-- The fields a script reads: lib/common.lua, each fragment and each
-- operation name theirs with want() (a fragment that may touch any field
-- says want_all()), and load_state reads and checks just those with one
-- HMGET, or the whole hash with HGETALL. tests/test_packaging.py checks
-- that every field a script mentions is wanted.
local WANT, WANT_LIST, WANT_ALL = {}, {}, false
local function want(...)
  for _, f in ipairs({...}) do
    if not WANT[f] then
      WANT[f] = true
      WANT_LIST[#WANT_LIST + 1] = f
    end
  end
end
local function want_all()
  WANT_ALL = true
end
want('schema', 'epoch', 'touch_due', 'idle_ms', 'log_len', 'cap', 'paused')

local S = nil       -- the state, or nil when the governor does not exist
local RAW = {}      -- field -> the string stored in Redis
local DIRTY = {}    -- field -> true: changed by this call, written back by save()
local STORE = {}    -- field -> the exact string to store instead of the number (config)
local CREATED = {}  -- keys this call may have created: they get their expiry at once

-- Every key expires when the governor is idle for about idle_ms. At most
-- every idle_ms / 8 (touch_due) a writing script checks every key's type and
-- pushes every key's expiry back, before it writes anything; a key a call
-- may have created gets its expiry at once (finish). Writes keep an expiry.
local function touch_all()
  check_types()
  for i = 1, 8 do redis.call('PEXPIRE', KEYS[i], S.idle_ms) end
  S.touch_due = NOW + math.floor(S.idle_ms / 8)
  DIRTY.touch_due = true
end

-- Load the state and check every field (see FIELDS); nil when the
-- governor does not exist. `readonly` scripts (status) leave expiries alone.
local function check_field(f, raw)
  if not raw then fail('BADSTATE', 'field ' .. f .. ' is missing') end
  local v = field_value(FIELDS[f], raw)
  if f == 'schema' and v ~= SCHEMA then fail('SCHEMA', raw .. ' (this client speaks ' .. SCHEMA .. ')') end
  if v == nil then fail('BADSTATE', 'field ' .. f .. ' holds ' .. string.format('%q', raw)) end
  S[f] = v
end

local function load_state(readonly)
  if WANT_ALL then
    local flat = redis.call('HGETALL', K.state)
    if #flat == 0 then
      S = nil
      return nil
    end
    for i = 1, #flat, 2 do RAW[flat[i]] = flat[i + 1] end
    S = {}
    check_field('schema', RAW.schema)  -- another schema's state says so, first
    for f in pairs(FIELDS) do check_field(f, RAW[f]) end
  else
    local values = redis.call('HMGET', K.state, unpack(WANT_LIST))
    if not values[1] and redis.call('EXISTS', K.state) == 0 then
      S = nil
      return nil
    end
    S = {}
    for i, f in ipairs(WANT_LIST) do
      RAW[f] = values[i]
      check_field(f, values[i])
    end
  end
  if not readonly and NOW >= S.touch_due then touch_all() end
  return S
end

local function set(field, value)
  if S[field] ~= value then
    S[field] = value
    DIRTY[field] = true
  end
end

-- Numbers go to Redis as numbers (converted exactly); STORE overrides.
local function save()
  local args = {}
  for f in pairs(DIRTY) do
    args[#args + 1] = f
    args[#args + 1] = STORE[f] or S[f]
  end
  if #args > 0 then
    redis.call('HSET', K.state, unpack(args))
  end
  DIRTY = {}
end

-- A write that may create `key` (it was not known to hold entries).
local function created(key)
  CREATED[key] = true
end

-- The expiry of the keys this call may have created (see touch_all).
local function touch()
  for key in pairs(CREATED) do redis.call('PEXPIRE', key, S.idle_ms) end
end

-- The decision log: what changed, why, and the figures behind it.
local function log(kind, ...)
  redis.call('XADD', K.events, 'MAXLEN', '~', S.log_len, '*',
    'kind', kind, 'at', NOW, 'capacity', S.cap, 'paused', S.paused, ...)
end

local function missing_reply()
  return {SCHEMA, 'missing'}
end

-- Push expiries back, write the changed state, reply.
local function finish(reply)
  touch()
  save()
  return reply
end
