--[[ lib/common.lua: the prelude of every governor script.

governor/scripts.py builds each script from this file, the fragments of
lua/lib/ that the operation names on its "Uses" line, and the operation's
own file, then registers it with register_script.

KEYS (every script receives all of them, in this order; built by
governor.keys.governor_keys, all under one hash tag so they share a slot)
  KEYS[1] state     hash    config, policy state and counters (see HOT)
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

Cost. Every call runs the whole prelude (each function definition is a
closure made anew) and each redis.call from Lua costs about as much as a
small command, so the hot paths (acquire, release, report, renew, refresh)
count both: a script loads only the fragments it uses; the state is read
with one HMGET of the HOT fields, which init writes first so the lookups
stay short (others are read on first use); every count is derived with
ZCOUNT over the live range, so expired leases, dead waiters and old window
events never count even before they are removed; removal (reclaim) runs at
most once per RECLAIM_MS and removes at most BATCH entries of each kind;
all keys' expiry is pushed back at most once per idle_ms / 8, and at once
only for a key this call may have created. Each script is O(log N) in
leases, waiters and window events, amortised.

Wrong key types. Redis keeps a script's writes when it then fails, so a
key another program wrote must stop a script before its first write. The
rarely run scripts (init, reset, set_max, pause, resume, probe, refresh,
report) and every reclaim check every key's type first (check_types); the
hot paths (acquire, release, cancel, renew) read each key they will touch
before their first write, or guard() it, which costs them 0 to 3 calls.
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

-- The state hash. HOT fields are read by one HMGET when the state is
-- loaded, any other on first use (or with preload); each value is parsed
-- on first use (the LAZY metatable), so a call pays only for what it looks
-- at. Strings stay strings; everything else is a number.
local HOT = {'schema', 'epoch', 'cap', 'paused', 'not_before', 'fence', 'touch_due', 'reclaim_due'}
local STRING_FIELDS = {epoch = true, policy = true, reason = true, pause_kind = true}

local S = nil       -- the state, or nil when the governor does not exist
local RAW = {}      -- field -> the string read from Redis (false: absent), not yet parsed
local DIRTY = {}    -- field -> true: changed by this call, written back by save()
local STORE = {}    -- field -> the exact string to store instead of the number (config)
local CREATED = {}  -- keys this call may have created: they get their expiry at once

local LAZY = {
  __index = function(t, f)
    local raw = RAW[f]
    if raw == nil then
      raw = redis.call('HGET', K.state, f)
      RAW[f] = raw
    end
    if not raw then return nil end
    local v = raw
    if not STRING_FIELDS[f] then v = tonumber(raw) end
    rawset(t, f, v)
    return v
  end,
}

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

-- Load the state; nil when the governor does not exist. `readonly` scripts
-- (status) leave expiries alone.
local function load_state(readonly)
  local values = redis.call('HMGET', K.state, unpack(HOT))
  if not values[1] then
    S = nil
    return nil
  end
  if values[1] ~= tostring(SCHEMA) then
    fail('SCHEMA', values[1] .. ' (this client speaks ' .. SCHEMA .. ')')
  end
  for i, f in ipairs(HOT) do RAW[f] = values[i] end
  S = setmetatable({}, LAZY)
  if not readonly and NOW >= (S.touch_due or 0) then touch_all() end
  return S
end

-- Read several fields with one call (they are parsed on first use).
local function preload(fields)
  local missing = {}
  for _, f in ipairs(fields) do
    if RAW[f] == nil and rawget(S, f) == nil then missing[#missing + 1] = f end
  end
  if #missing == 0 then return end
  local values = redis.call('HMGET', K.state, unpack(missing))
  for i, f in ipairs(missing) do RAW[f] = values[i] end
end

local function set(field, value)
  if rawget(S, field) ~= value then
    rawset(S, field, value)
    DIRTY[field] = true
  end
end

-- Numbers go to Redis as numbers (converted exactly); STORE overrides.
local function save()
  local args = {}
  for f in pairs(DIRTY) do
    args[#args + 1] = f
    args[#args + 1] = STORE[f] or rawget(S, f)
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
