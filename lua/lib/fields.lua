--[[ lib/fields.lua: the stored fields: read, checked, changed, written back.

Uses lib/common.lua, lib/numbers.lua, lib/call.lua.
Defines: fields_of, check_type, guard, check_types, kind_value, value_of, CHECKED, checked,
read, read_all, hash_missing, read_more_list, read_more, set, stored, repair, save, check_all,
touch_all, keep_alive, created, missing_reply, raise_layout, finish.

A call reads the fields a path needs of the state, config and policy
hashes (one HMGET per hash, each field checked against its kind before the
call's first write: value_of, GOVERNOR_BADSTATE), keeps them in STATE,
CONFIG and POLICY, changes them with set() and writes the changed ones back
with save() when it finishes. The keys a call touches after its first write that no read
has told are type-checked first (guard, check_types). load() of
lib/origin.lua reads the state itself, with its origin stamp.
]]

-- The call's table of a hash ('state', 'config' or 'policy'), made on
-- first use, afresh for each call. (A table kept across calls and emptied
-- costs more: its fields cleared to nil go on the next call's first writes
-- as insertions anew, after the clearing loop's own calls of next.)
local function fields_of(hash)
  if hash == 'state' then
    if not STATE then STATE = {} end
    return STATE
  elseif hash == 'config' then
    if not CONFIG then CONFIG = {} end
    return CONFIG
  end
  if not POLICY then POLICY = {} end
  return POLICY
end

-- Type checks for the keys a script touches after its first write that no
-- read has told: guard(KEY.waiters, ...) for the keys named, check_types()
-- for all of them. A zset is asked its length (ZCARD: a key of another
-- type answers WRONGTYPE): an integer reply, where TYPE's status reply
-- costs Redis a table (scripts/lua_costs.py), and Redis deletes an
-- emptied zset, so 0 is no key. The hashes and the stream are asked TYPE (HLEN and XLEN are not
-- among the commands the workers' ACL grants, docs/operating.md).
local function check_type(key, want)
  if want == 'zset' then
    local n = redis.pcall('ZCARD', key)
    if type(n) == 'number' then return n == 0 and 'none' or want end
  end
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    fail('WRONGTYPE', key .. ' is a ' .. t .. ', expected a ' .. want)
  end
  return t
end

local function guard(...)
  for j = 1, select('#', ...) do
    local key = select(j, ...)
    check_type(key, TYPE_OF[key])
  end
end

local function check_types()
  for i = 1, #KEY_NAMES do check_type(KEYS[i], TYPES[i]) end
end

-- A stored value as its field's kind (FIELDS, generated from
-- governor/protocol.py), or a GOVERNOR_BADSTATE error. A number out of its
-- field's range (stored by an older library, or by hand) is no reason to
-- stop a fleet: it is read as the nearest value in range (an int's
-- fraction dropped), and the second value returned is true; the next
-- writing call stores that value and logs the repair (save()). What is
-- not a number at all is GOVERNOR_BADSTATE, and so is a `fresh` field out
-- of range (the fence, the window's sequence number: HINCRBY moves them on
-- within the call, and a fence moved by a repair could repeat one handed out).
-- A field a later version added (ABSENT: a state or config an older one
-- created lacks it) reads as its default when absent; any other absent is
-- GOVERNOR_BADSTATE.
local function kind_value(field, raw)
  local kind = FIELDS[field]
  if not raw then
    raw = ABSENT[field]
    if not raw then fail('BADSTATE', 'field ' .. field .. ' is missing') end
  end
  if kind[1] == 'str' then
    if kind[2] and not kind[2][raw] then fail('BADSTATE', 'field ' .. field .. ' holds ' .. string.format('%q', raw)) end
    return raw
  end
  local v
  if kind.fresh then v = tonumber(raw) else v = num(raw) end
  if v == nil or v ~= v or (kind.fresh and (v < kind[2] or v > kind[3] or v % 1 ~= 0)) then
    fail('BADSTATE', 'field ' .. field .. ' holds ' .. string.format('%q', raw) .. ', not '
      .. (kind[1] == 'int' and 'an integer' or 'a number') .. ' in [' .. kind[2] .. ', ' .. kind[3] .. ']')
  end
  if v < kind[2] or v > kind[3] or (kind[1] == 'int' and v % 1 ~= 0) then
    if kind[1] == 'int' then v = math.floor(v) end
    return math.min(math.max(v, kind[2]), kind[3]), true
  end
  return v
end

-- Stored strings already checked: CHECKED[field][raw] is value_of(field,
-- raw). A field's string recurs call after call (a capacity, a policy's
-- name, a due time), and the readers below look it up (a few bytecodes,
-- where value_of runs about sixty) before they check it; at most 4,096 are
-- kept. A field whose every write stores a new value (its kind's `fresh`:
-- the fence, the window's sequence number) is checked without either
-- memo: remembered, it would only fill them and start them again sooner.
-- value_of(field, raw): kind_value's value; one out of range (a repair)
-- is noted in CALL.repairs (field, the stored string, the value read) and
-- never remembered (checked): every call that reads it notes it until a
-- writing call stores the repaired value.
local function value_of(field, raw)
  local v, repaired = kind_value(field, raw)
  if repaired then
    local found = CALL.repairs or {}
    CALL.repairs = found
    found[#found + 1], found[#found + 2], found[#found + 3] = field, raw, v
  end
  return v, repaired
end

local CHECKED, remember_checked = memo(4096)
local function checked(field, raw)
  local v, repaired = value_of(field, raw)
  if repaired or FIELDS[field].fresh then return v end
  return remember_checked(v, field, raw)
end

-- Read `fields` of hash `key` (KEY.state, KEY.config or KEY.policy) into `into`
-- with one HMGET, each checked against its kind; false when the hash does
-- not exist. A state written by another schema says so first.
local function read(key, into, fields)
  local raw = redis.call('HMGET', key, unpack(fields))
  if not raw[1] then
    if redis.call('EXISTS', key) == 0 then return false end
    if key == KEY.state then
      local schema = redis.call('HGET', key, 'schema')
      if schema and tonumber(schema) ~= SCHEMA then fail('SCHEMA', schema .. ' (this client speaks ' .. SCHEMA .. ')') end
    end
  end
  for i = 1, #fields do
    local field, r = fields[i], raw[i]
    local seen = r and CHECKED[field]
    into[field] = seen and seen[r] or checked(field, r)
  end
  return true
end

-- Every field of a hash (HGETALL) the script knows, each checked.
local function read_all(key, into)
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    local f = flat[i]
    if FIELDS[f] then into[f] = value_of(f, flat[i + 1]) end
  end
  return #flat > 0
end

-- A config or policy hash gone while the state is there (evicted, deleted
-- alone): the client stores its config again (init.lua) and calls again.
local function hash_missing(hash)
  if hash == 'config' or hash == 'policy' then fail('MISSING', hash) end
  fail('BADSTATE', 'the ' .. hash .. ' hash is missing')
end

-- More fields of the state, config or policy, read when a path needs them:
-- read_more_list(hash, list), the hot paths' way (their lists are made once, at
-- load, and never changed), or read_more(hash, field, ...). (A vararg function
-- and select() cost Lua several times a table walk.)
local function read_more_list(hash, fields)
  local into = fields_of(hash)
  local n, unknown = #fields, 0
  for i = 1, n do
    if into[fields[i]] == nil then unknown = unknown + 1 end
  end
  if unknown == 0 then return into end
  if unknown < n then
    local missing = {}
    for i = 1, n do
      if into[fields[i]] == nil then missing[#missing + 1] = fields[i] end
    end
    fields = missing
  end
  if not read(KEY[hash], into, fields) then hash_missing(hash) end
  return into
end

local function read_more(hash, ...)
  return read_more_list(hash, {...})
end

local function set(hash, field, value)
  local into = fields_of(hash)
  if into[field] ~= value then
    into[field] = value
    if not DIRTY then DIRTY = {} end
    local dirty = DIRTY[hash]
    if not dirty then
      dirty = {}
      DIRTY[hash] = dirty
    end
    dirty[field] = true
  end
end

-- A value as save() stores it: STORE's string for the field, an integer
-- as its digits (what Redis would make of the number, for less: see int()),
-- else the number itself (converted exactly).
local function stored(f, v)
  if STORE and STORE[f] then return STORE[f] end
  if type(v) == 'number' and v % 1 == 0 and v >= -MAX_INT and v <= MAX_INT then return int(v) end
  return v
end

-- The fields the call read out of range (CALL.repairs), stored as read,
-- each with a 'repair' entry in the decision log (lib/decisions.lua's
-- fields, written here: save() runs before any of its callers could).
local function repair()
  local found = CALL.repairs
  CALL.repairs = false
  for i = 1, #found, 3 do
    local field, raw, v = found[i], found[i + 1], found[i + 2]
    local hash = (STATE and STATE[field] ~= nil and 'state') or (CONFIG and CONFIG[field] ~= nil and 'config') or 'policy'
    if not DIRTY then DIRTY = {} end
    if not DIRTY[hash] then DIRTY[hash] = {} end
    DIRTY[hash][field] = true
    local capacity = STATE and STATE.capacity or num(redis.call('HGET', KEY.state, 'capacity')) or 0
    local length = CONFIG and CONFIG.log_length or num(redis.call('HGET', KEY.config, 'log_length')) or 1000
    local kind = FIELDS[field]
    redis.call('XADD', KEY.events, 'MAXLEN', '~', length, '*', 'kind', 'repair', 'at', NOW or clock(),
      'capacity', capacity, 'paused', capacity == 0 and 1 or 0,
      'why', 'field ' .. field .. ' held ' .. raw .. ', outside its range [' .. kind[2] .. ', ' .. kind[3]
        .. ']: stored as ' .. stored(field, v))
  end
end

-- A config or policy hash the call created (init, a config stored afresh)
-- stores the hot paths' fields first (HOT): a small hash is a listpack,
-- which a lookup scans from its start (the state turns into a hash table
-- when its origin stamp is written: its order changes nothing).
local function save()
  if CALL.repairs and not READ_ONLY then repair() end
  if not DIRTY then return end
  for hash, dirty in pairs(DIRTY) do
    local args, into, hot = {}, fields_of(hash), HOT[hash]
    if hot and CREATED and CREATED[KEY[hash]] then
      for _, f in ipairs(hot) do
        if dirty[f] then
          args[#args + 1] = f
          args[#args + 1] = stored(f, into[f])
          dirty[f] = nil
        end
      end
    end
    for f in pairs(dirty) do
      args[#args + 1] = f
      args[#args + 1] = stored(f, into[f])
    end
    if #args > 0 then redis.call('HSET', KEY[hash], unpack(args)) end
  end
  DIRTY = nil
end

-- Every field of the three hashes, each checked, and every field every
-- governor holds (REQUIRED) present: for the scripts that may touch any
-- field (the operator scripts, init), and for any script before it pushes
-- expiries back (touch_all), so that nothing it reads later can fail it.
local function check_all()
  read_all(KEY.state, fields_of('state'))
  if not read_all(KEY.config, fields_of('config')) then hash_missing('config') end
  if not read_all(KEY.policy, fields_of('policy')) then hash_missing('policy') end
  for hash, names in pairs(REQUIRED) do
    local into = fields_of(hash)
    for _, name in ipairs(names) do
      if into[name] == nil then value_of(name, nil) end
    end
  end
end

-- Every key expires when the governor is idle for about idle_ms. At most
-- every idle_ms / 8 (touch_due) a writing script checks every key's type
-- and every stored field and pushes every key's expiry back, before it
-- writes anything; a key a call may have created gets its expiry at once
-- (finish).
local function touch_all()
  check_types()
  check_all()
  redis.call('ZADD', KEY.leases, 'NX', 0, SENTINEL)
  redis.call('HSETNX', KEY.holders, SENTINEL, '')
  -- (the spend key lives until its longest window ends: lib/spending.lua spend_keep)
  for i = 1, #KEY_NAMES do if KEY_NAMES[i] ~= 'spend' then redis.call('PEXPIRE', KEYS[i], CONFIG.idle_ms) end end
  set('state', 'touch_due', NOW + math.floor(CONFIG.idle_ms / 8))
end

-- For every writing script, after load(..., 'touch_due') and clock().
local function keep_alive()
  if NOW >= STATE.touch_due then touch_all() end
end

-- A write that may create `key` (it was not known to hold entries).
local function created(key)
  if not CREATED then CREATED = {} end
  CREATED[key] = true
end

local function missing_reply()
  return {SCHEMA, 'missing'}
end

-- A call that wrote what a client of a layout before TIERS_LAYOUT would
-- misread (CALL.tiers: a record of a tier, a tier's budget active) stamps
-- the state as one only clients of TIERS_LAYOUT on may use: the origin's
-- min_layout (lib/origin.lua; never lowered), which such a client refuses
-- (GOVERNOR_LAYOUT). A state without a stamp (a Redis without INFO: the
-- handshake is off) stays as it is.
local function raise_layout()
  local origin = STATE.origin or CALL.origin
  local layout, min_layout, rest = string.match(origin or '', '^(%d+):(%d+):(.*)$')
  if layout and tonumber(min_layout) < TIERS_LAYOUT then
    set('state', 'origin', layout .. ':' .. TIERS_LAYOUT .. ':' .. rest)
  end
end

-- Push the expiry of created keys, write the changed fields, announce a
-- longer lease TTL than any before (note_ttl of lib/origin.lua: the wake
-- word '~<ms>'), reply.
local function finish(reply)
  if CREATED then
    for key in pairs(CREATED) do redis.call('PEXPIRE', key, CONFIG.idle_ms) end
  end
  if CALL.tiers then raise_layout() end
  save()
  if CALL.ttl_rose then redis.call('PUBLISH', CHANNEL, STATE.epoch .. ' ~' .. int(STATE.ttl_max)) end
  return reply
end
