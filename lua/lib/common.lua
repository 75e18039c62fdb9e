--[[ lib/common.lua: the prelude of the governor's functions library.

governor/scripts.py builds one Redis Functions library from: the
blueprint generated from governor/protocol.py, governor/budgets.py and
governor/policies.py (SCHEMA, the keys' names and types, the budget kinds
and their costs, each class's vtime field, the base config fields, the
status fields, HOT, FIELDS: every stored field's kind, REQUIRED: see
field_table() there), this file, the fragments of lua/lib/ (one per concern, in the order of
governor/scripts.py FRAGMENTS: budgets, shares, capacity, upkeep,
admission, queue, policy, admin, config), then each operation's file as
the body of OPS.<operation>, registered as a function. Each file's "Uses"
line names the fragments it relies on, all above it. Redis runs the
library's top level once, when it loads it; each call runs begin(keys,
argv), then the operation. This file also holds the holder records and the
arguments every operation parses.

KEYS: on a standalone Redis a function receives one key, the governor's
state key (governor.protocol.GovernorKeys.script_keys): "<base>state".
Its other keys are "<base><name>" for each name of governor.protocol.KEYS
(its docstring says what each holds), all in the state key's hash slot
(the hash tag {<governor name>}); the library derives them once per state
key and reaches them by name, K.<name> (KEY_NAMES and TYPES are
generated), never by position. Each key passed costs an FCALL about 1,300
server instructions, so a call passes one, not fourteen. On a Redis
Cluster a call passes every key, in the order of KEYS: a slot that is
migrating may hold some of them and not others, and only keys the call
declares make Redis refuse it (TRYAGAIN, ASK) before it runs; a function
given the state key alone there answers GOVERNOR_KEYS before anything.

ARGV (common to every script)
  ARGV[1] now       int ms or ''  injected clock, or '' for Redis TIME
  ARGV[2] channel   string        pub/sub channel on which grants are announced
  ARGV[3..]                       the operation's own arguments (see its header)

Replies: flat arrays whose first element is the schema version, SCHEMA.
Error replies (raised with error(msg, 0), mapped by governor/errors.py):
  GOVERNOR_WRONGTYPE <key>  a key of this governor holds another Redis type
  GOVERNOR_BADARG <what>    a malformed argument (client bug or tampering)
  GOVERNOR_SCHEMA <found>   the state hash was written by another schema
  GOVERNOR_BADSTATE <what>  a stored state value is missing or out of range
  GOVERNOR_MISSING <hash>   the config or policy hash is gone while the state
                            is there: the client runs init.lua (which stores
                            its config again) and calls again
  GOVERNOR_LAYOUT <l> <min> the state's layout l admits clients of layout min
                            and up only (lib/origin.lua)
  GOVERNOR_KEYS <why>       a call passed the state key alone to a Redis
                            Cluster node: the client sends it again with
                            every key (see KEYS)

Cost. The library's tables and helpers are built once, at load; a call
pays for each redis.call (about 5,000 server instructions), each stored
field it reads and checks (a small hash is a listpack, scanned from its
start for each field: a new config or policy hash stores the hot paths'
fields first, HOT; the state, whose origin stamp is longer than a
listpack's values may be, is a hash table) and each table it builds
(about 1,500), so the hot paths read only the fields a path needs, with
one HMGET per hash, decide what they read before their first write (a
report's read plan: the_policy() of lib/policy.lua tells a quiet
success, which reads the policy's streak alone, no config beyond
max_capacity and the idle time and no window count) and let reads of a
key tell its type. The hot operations mark their steps ("-- step: ..."
lines at their top level): scripts/report_stages.py counts each step
under callgrind.
Every count is derived with ZCOUNT over the live range, so expired
leases, dead waiters and old window events never count even before they
are removed; removal (reclaim) runs at most once per RECLAIM_MS and
removes at most BATCH entries of each kind; all keys' expiry is pushed
back at most once per idle_ms / 8, and at once only for a key this call
may have created. Each script is O(log N) in leases, waiters and window
events, amortised.

Schema. The schema version is in every key's name (governor.protocol
SCHEMA_VERSION) and in the state's schema field, which init and the
operator scripts check (GOVERNOR_SCHEMA), and so does any script that
finds the state unreadable. Within the schema, the state's origin stamp
(the field origin, read by load() with the fields it reads anyway) holds
its layout and the oldest client layout that may use it, and the server it
was written under: lib/origin.lua checks it on every call.

No write and then a failure. Redis keeps a script's writes when it then
fails, so everything that could stop a script is checked before its first
write: every argument (arg_int, arg_id, ...), every stored value it reads
(load: GOVERNOR_BADSTATE), and the type of every key it touches: a read of
the key tells it (a command on a key of another type fails before
anything is written), else guard() or check_types() checks it. Each
function is registered with its flags (status: no-writes), so a Redis out
of memory refuses a writing one before it runs.
]]

-- Redis's API and Lua's standard library as upvalues of the library's
-- functions. A function reaches a global through its environment, an empty
-- table whose metatable's __index is Redis's globals: about 200 server
-- instructions a lookup, an upvalue about 70 (scripts/lua_costs.py), and a
-- call looks up a few dozen globals. While Redis loads the library only
-- the loading API exists (the registrations at the end use it): the first
-- call binds the rest (begin).
local function runtime_globals()
  return redis, tonumber, type, pairs, ipairs, select, unpack, string, math, table
end
local redis, tonumber, type, pairs, ipairs, select, unpack, string, math, table = redis

local BATCH = 64
local RECLAIM_MS = 1000

-- Per call. The library's top level runs once, when Redis loads it; each
-- call of an operation starts with begin(keys, argv), which binds the
-- call's KEYS and ARGV and clears what the previous call left.
local KEYS, ARGV = {}, {}  -- the governor's keys in KEY_NAMES' order, the call's ARGV
local K = {}            -- the governor's keys by name
local TYPE_OF = {}      -- key -> its Redis type
local OPS = {}
-- What the fragments learnt during this call, cleared by begin() (one
-- table kept across calls: a table made per call costs Redis more than
-- clearing four fields):
--   active  the active budget kinds, their fields read (lib/budgets.lua)
--   caps    tenant -> {cap, slot} or false, as this call found them (lib/shares.lua)
--   held    field of held -> leases in flight, as this call read and changed them (lib/shares.lua)
--   live    the leases in flight, once counted (lib/admission.lua)
--   foreign why a read-only call found the state written by another server (lib/origin.lua)
local CALL = {}
local NOW, NOW_S, LIVE, CHANNEL
local READ_ONLY     -- the call may not write (status.lua sets it): a state that came back is only reported
-- Where the state came from (lib/origin.lua sets both): STAMP() is this
-- server's origin stamp, learnt once per library load; CHECK(raw) handles a
-- state stamped otherwise (raw false: an older layout's state, unstamped).
local ORIGIN = {}
local S, C, P       -- the state, config and policy hashes as the call read them (nil: none yet)
local DIRTY         -- hash name -> field -> true: changed by the call, written back by save()
local STORE         -- field -> the exact string to store instead of the number (a config as sent)
local CREATED       -- keys the call may have created: they get their expiry at once
-- leases and holders each keep a sentinel entry (never live, never a
-- valid id), so they are not deleted when the last lease goes and keep the
-- expiry touch_all gave them: acquiring into an empty fleet sets none.
local SENTINEL = '~'

local function fail(code, detail)
  error('GOVERNOR_' .. code .. ' ' .. detail, 0)
end

-- State key -> {K, KEYS, TYPE_OF} of its governor (TYPE_OF: key -> its
-- Redis type), derived once (at most 1,024 governors kept, then derived again).
local DERIVED, DERIVED_KEPT = {}, 0

local function derive(state)
  if string.sub(state, -6) ~= ':state' then
    fail('BADARG', 'the first key must be the governor\'s state key ("<prefix>:v<schema>:{<name>}:state"), got '
      .. state)
  end
  local base, named, list, types = string.sub(state, 1, -6), {}, {}, {}
  for i = 1, #KEY_NAMES do
    list[i] = base .. KEY_NAMES[i]
    named[KEY_NAMES[i]] = list[i]
    types[list[i]] = TYPES[i]
  end
  if DERIVED_KEPT >= 1024 then DERIVED, DERIVED_KEPT = {}, 0 end
  local entry = {named, list, types}
  DERIVED[state], DERIVED_KEPT = entry, DERIVED_KEPT + 1
  return entry
end

-- Whether this server runs in cluster mode (INFO cluster), learnt once per library load.
local CLUSTER = nil
local function clustered()
  local info = redis.pcall('INFO', 'cluster')
  return type(info) == 'string' and string.match(info, 'cluster_enabled:1') ~= nil
end

local function begin(keys, argv)
  if not string then redis, tonumber, type, pairs, ipairs, select, unpack, string, math, table = runtime_globals() end
  local entry = DERIVED[keys[1]] or derive(keys[1] or '')
  if #keys == 1 then
    if CLUSTER == nil then CLUSTER = clustered() end
    if CLUSTER then
      fail('KEYS', 'this Redis is a cluster node: a call passes every key of the governor, in the order of KEYS, '
        .. 'so that a migrating slot is refused before the call runs')
    end
  else
    local list = entry[2]
    if #keys ~= #list then
      fail('BADARG', 'a function takes the governor\'s state key (standalone) or all ' .. #list
        .. ' of its keys in order (a cluster), got ' .. #keys .. ' keys')
    end
    for i = 2, #list do
      if keys[i] ~= list[i] then
        fail('BADARG', 'key ' .. i .. ' must be ' .. list[i] .. ' (the state key\'s ' .. KEY_NAMES[i] .. '), got '
          .. tostring(keys[i]))
      end
    end
  end
  K, KEYS, TYPE_OF, ARGV = entry[1], entry[2], entry[3], argv
  NOW, LIVE, CHANNEL, READ_ONLY = nil, nil, argv[2], false
  S, C, P, DIRTY, STORE, CREATED = nil, nil, nil, nil, nil, nil
  CALL.active, CALL.caps, CALL.held, CALL.live = nil, nil, nil, nil
end

-- The call's table of a hash ('state', 'config' or 'policy'), made on
-- first use. The state's is kept across calls and emptied: a call reads
-- about the same fields of it as the last, eight or more, and a table
-- filled afresh grows its hash part step by step, each step a new part
-- (emptied, a table keeps its size; the config's and the policy's, a few
-- fields on the hot paths, cost less made afresh).
local values
do
  local kept = {}
  values = function(hash)
    if hash == 'state' then
      if not S then
        S = kept
        for k in pairs(S) do S[k] = nil end
      end
      return S
    elseif hash == 'config' then
      if not C then C = {} end
      return C
    end
    if not P then P = {} end
    return P
  end
end

-- A stored or sent number as Lua's number, or nil: tonumber() remembered.
-- Lua converts with the C library's strtod (about 2,000 server
-- instructions, scripts/lua_costs.py), and the same few strings (a capacity, a TTL, a rank) come
-- back call after call; at most 4,096 are kept, then the memo starts again.
local NUMBERS, NUMBERS_KEPT = {}, 0
local function num(s)
  if s == nil then return nil end
  local v = NUMBERS[s]
  if v == nil then
    v = tonumber(s) or false
    if NUMBERS_KEPT >= 4096 then NUMBERS, NUMBERS_KEPT = {}, 0 end
    NUMBERS[s], NUMBERS_KEPT = v, NUMBERS_KEPT + 1
  end
  return v or nil
end

-- An integer inside a string: Lua's own conversion turns a fence (above
-- 1e14) into "1.7e+15". Redis converts a number passed to redis.call
-- exactly, but with "%.17g", about 4,000 server instructions more than a
-- string costs it (scripts/lua_costs.py): the hot paths pass their scores
-- and deadlines as int(x). A reply may hold numbers. string.format costs
-- about 2,200; the integers the hot paths format (times in ms, deadlines,
-- fences) share all but their last four digits with the last few they
-- formatted: those are remembered (at most 4,096, then started again),
-- the last four made of two pairs of digits (PAIRS), one concatenation.
local int
do
  local HIGH, HIGH_KEPT, PAIRS = {}, 0, {}
  for i = 0, 99 do PAIRS[i] = (i < 10 and '0' or '') .. i end
  int = function(x)
    if x < 10000 or x > MAX_INT or x % 1 ~= 0 then return string.format('%d', x) end
    local low = x % 10000
    local high = (x - low) / 10000
    local head = HIGH[high]
    if not head then
      head = string.format('%d', high)
      if HIGH_KEPT >= 4096 then HIGH, HIGH_KEPT = {}, 0 end
      HIGH[high], HIGH_KEPT = head, HIGH_KEPT + 1
    end
    local tens = low % 100
    return head .. PAIRS[(low - tens) / 100] .. PAIRS[tens]
  end
end

-- ARGV[i] as an integer >= min (0); `unique`: a value that never recurs
-- (a fence), converted without the memo.
local function arg_int(i, what, min, unique)
  local v
  if unique then v = tonumber(ARGV[i]) else v = num(ARGV[i]) end
  if v == nil or v ~= v or v % 1 ~= 0 or v < (min or 0) or v > MAX_INT then
    fail('BADARG', what .. ' must be an integer in [' .. (min or 0) .. ', 2^53], got ' .. tostring(ARGV[i]))
  end
  return v
end

-- (An id of letters and digits alone, as the clients make them, is told
-- by a one-class pattern first: a quarter cheaper than the set's,
-- scripts/lua_costs.py.)
local function arg_id(i, what)
  local v = ARGV[i]
  if v == nil or #v > 128 or not (string.find(v, '^%w+$') or string.find(v, '^[%w%-_.:]+$')) then
    fail('BADARG', what .. ' must be 1-128 characters of [A-Za-z0-9-_.:], got ' .. tostring(v))
  end
  return v
end

local function arg_label(i)
  local v = ARGV[i]
  if v == nil or #v > 200 then fail('BADARG', 'holder label must be at most 200 bytes') end
  return v
end

-- The clock: NOW, an integer of ms, NOW_S, the same as a string (a score
-- for ZADD), and LIVE, the ZCOUNT bound "after NOW". Read when a script
-- first needs it (release without waiters never does): Redis TIME, unless
-- ARGV[1] injects a clock.
local function clock()
  if NOW then return NOW end
  if ARGV[1] == '' then
    local t = redis.call('TIME')
    local us = tonumber(t[2])  -- (the second recurs, remembered; the microseconds do not)
    NOW = num(t[1]) * 1000 + (us - us % 1000) / 1000
    NOW_S = int(NOW)
  else
    NOW = arg_int(1, 'now')
    NOW_S = string.match(ARGV[1], '^%d+$') and ARGV[1] or int(NOW)  -- (its digits alone: a holder record's)
  end
  LIVE = '(' .. NOW_S
  return NOW
end

-- Type checks for the keys a script touches after its first write that no
-- read has told: guard(K.waiters, ...) for the keys named, check_types()
-- for all of them. A zset is asked its length (ZCARD: a key of another
-- type answers WRONGTYPE): an integer reply, where TYPE's status reply
-- costs Redis a table (about 3,000 server instructions against 5,000,
-- scripts/lua_costs.py), and Redis deletes an emptied zset, so 0 is no
-- key. The hashes and the stream are asked TYPE (HLEN and XLEN are not
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
-- governor/protocol.py), or a GOVERNOR_BADSTATE error.
local function value_of(field, raw)
  local kind = FIELDS[field]
  if not raw then fail('BADSTATE', 'field ' .. field .. ' is missing') end
  if kind[1] == 'str' then
    if kind[2] and not kind[2][raw] then fail('BADSTATE', 'field ' .. field .. ' holds ' .. string.format('%q', raw)) end
    return raw
  end
  local v
  if kind.fresh then v = tonumber(raw) else v = num(raw) end
  if v == nil or v ~= v or v < kind[2] or v > kind[3] or (kind[1] == 'int' and v % 1 ~= 0) then
    fail('BADSTATE', 'field ' .. field .. ' holds ' .. string.format('%q', raw))
  end
  return v
end

-- Stored strings already checked: CHECKED[field][raw] is value_of(field,
-- raw). A field's string recurs call after call (a capacity, a policy's
-- name, a due time), and the readers below look it up (a few bytecodes;
-- value_of runs about sixty, each some 30 server instructions) before they
-- check it; at most 4,096 are kept, then they are checked again. A
-- field whose every write stores a new value (its kind's `fresh`: the
-- fence, the window's sequence number) is checked without either memo:
-- remembered, it would only fill them and start them again sooner (about
-- 3,500 server instructions a governed call, the instructions benchmark's
-- plain row).
local CHECKED, CHECKED_KEPT = {}, 0
local function checked(field, raw)
  local v = value_of(field, raw)
  if FIELDS[field].fresh then return v end
  if CHECKED_KEPT >= 4096 then CHECKED, CHECKED_KEPT = {}, 0 end
  local seen = CHECKED[field]
  if not seen then
    seen = {}
    CHECKED[field] = seen
  end
  seen[raw], CHECKED_KEPT = v, CHECKED_KEPT + 1
  return v
end

-- Read `fields` of hash `key` (K.state, K.config or K.policy) into `into`
-- with one HMGET, each checked against its kind; false when the hash does
-- not exist. A state written by another schema says so first.
local function read(key, into, fields)
  local raw = redis.call('HMGET', key, unpack(fields))
  if not raw[1] then
    if redis.call('EXISTS', key) == 0 then return false end
    if key == K.state then
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

-- The state: `fields`, a list whose first is 'epoch' (it tells whether
-- the state exists), read with its origin stamp in the same HMGET. Nil
-- when the governor does not exist. A stamp other than this server's
-- goes to ORIGIN.check (a layout this client may not use fails; a state
-- that came back is handled as a loss), after the fields are read.
local function load(fields)
  S = nil
  values('state')
  local raw = redis.call('HMGET', K.state, 'origin', unpack(fields))
  if not raw[2] then
    if redis.call('EXISTS', K.state) == 0 then
      S = nil
      return nil
    end
    local schema = redis.call('HGET', K.state, 'schema')
    if schema and tonumber(schema) ~= SCHEMA then fail('SCHEMA', schema .. ' (this client speaks ' .. SCHEMA .. ')') end
  end
  for i = 1, #fields do
    local field, r = fields[i], raw[i + 1]
    local seen = r and CHECKED[field]
    S[field] = seen and seen[r] or checked(field, r)
  end
  if raw[1] ~= (ORIGIN.STAMP or ORIGIN.stamp()) then ORIGIN.check(raw[1]) end
  return S
end

-- A config or policy hash gone while the state is there (evicted, deleted
-- alone): the client stores its config again (init.lua) and calls again.
local function hash_missing(hash)
  if hash == 'config' or hash == 'policy' then fail('MISSING', hash) end
  fail('BADSTATE', 'the ' .. hash .. ' hash is missing')
end

-- More fields of the state, config or policy, read when a path needs them:
-- more_of(hash, list), the hot paths' way (their lists are made once, at
-- load, and never changed), or more(hash, field, ...). (A vararg function
-- and select() cost Lua several times a table walk.)
local function more_of(hash, fields)
  local into = values(hash)
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
  if not read(K[hash], into, fields) then hash_missing(hash) end
  return into
end

local function more(hash, ...)
  return more_of(hash, {...})
end

local function set(hash, field, value)
  local into = values(hash)
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

-- A hash the call created (init, a config stored afresh) stores the hot
-- paths' fields first (HOT): a small hash is a listpack, which a lookup
-- scans from its start (the config and the policy; the state turns into a
-- hash table when its origin stamp is written).
local function save()
  if not DIRTY then return end
  for hash, dirty in pairs(DIRTY) do
    local args, into = {}, values(hash)
    if CREATED and CREATED[K[hash]] then
      for _, f in ipairs(HOT[hash]) do
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
    if #args > 0 then redis.call('HSET', K[hash], unpack(args)) end
  end
  DIRTY = nil
end

-- Every field of the three hashes, each checked, and every field every
-- governor holds (REQUIRED) present: for the scripts that may touch any
-- field (the operator scripts, init), and for any script before it pushes
-- expiries back (touch_all), so that nothing it reads later can fail it.
local function check_all()
  read_all(K.state, values('state'))
  if not read_all(K.config, values('config')) then hash_missing('config') end
  if not read_all(K.policy, values('policy')) then hash_missing('policy') end
  for hash, names in pairs(REQUIRED) do
    local into = values(hash)
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
  redis.call('ZADD', K.leases, 'NX', 0, SENTINEL)
  redis.call('HSETNX', K.holders, SENTINEL, '')
  for i = 1, #KEY_NAMES do redis.call('PEXPIRE', KEYS[i], C.idle_ms) end
  set('state', 'touch_due', NOW + math.floor(C.idle_ms / 8))
end

-- For every writing script, after load(..., 'touch_due') and clock().
local function keep_alive()
  if NOW >= S.touch_due then touch_all() end
end

-- A write that may create `key` (it was not known to hold entries).
local function created(key)
  if not CREATED then CREATED = {} end
  CREATED[key] = true
end

-- The decision log: what changed, why, and the figures behind it.
-- Needs C.log_length (prepare() of lib/upkeep.lua reads it).
local function log(kind, ...)
  redis.call('XADD', K.events, 'MAXLEN', '~', C.log_length, '*',
    'kind', kind, 'at', NOW, 'capacity', S.capacity, 'paused', S.capacity == 0 and 1 or 0, ...)
end

local function missing_reply()
  return {SCHEMA, 'missing'}
end

-- Push the expiry of created keys, write the changed fields, reply.
local function finish(reply)
  if CREATED then
    for key in pairs(CREATED) do redis.call('PEXPIRE', key, C.idle_ms) end
  end
  save()
  return reply
end

-- Records and arguments.

local NO_TOKENS = {input = 0, output = 0}

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
  -- (the fence and the time never recur: converted, not remembered; no
  -- tokens, the common case, is the one NO_TOKENS, never changed)
  local tokens = NO_TOKENS
  if input ~= '0' or output ~= '0' then tokens = {input = num(input), output = num(output)} end
  return {fence = tonumber(fence), ttl = num(ttl), since = tonumber(since), tokens = tokens, level = num(level),
    rank = num(rank), tenant = tenant, holder = holder}
end

-- An integer that recurs (a TTL, a token count, a level, a rank) as a
-- decimal string, remembered (at most 4,096): string.format costs about
-- 2,300 server instructions (scripts/lua_costs.py), a lookup a few dozen.
local DECIMALS, DECIMALS_KEPT = {}, 0
local function dec(x)
  local s = DECIMALS[x]
  if not s then
    s = int(x)
    if DECIMALS_KEPT >= 4096 then DECIMALS, DECIMALS_KEPT = {}, 0 end
    DECIMALS[x], DECIMALS_KEPT = s, DECIMALS_KEPT + 1
  end
  return s
end

-- (One concatenation: Lua builds the record once. The fence comes as its
-- digits, which the caller makes once (a grant announces them too); the
-- time rarely recurs, so it is formatted, not remembered.)
local function record_format(fence, ttl, since, input, output, level, rank, tenant, holder)
  return fence .. '|' .. dec(ttl) .. '|' .. (since == NOW and NOW_S or int(since)) .. '|' .. dec(input) .. '|' .. dec(output) .. '|'
    .. dec(level) .. '|' .. dec(rank) .. '|' .. tenant .. '|' .. holder
end

local NO_LIMITS = {}  -- a report that announces no rate-limit figures (never changed)

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

-- ARGV[i], ARGV[i + 1], ARGV[i + 2]: a caller's class rank (0: the
-- highest), tenant and the tenant's weight (GovernorConfig.weight_of). A
-- place is never changed once made: each is remembered by the strings sent
-- (tenant, rank, weight; at most 1,024), so a caller's next call makes none.
local PLACES, PLACES_KEPT = {}, 0
local function arg_place(i)
  local ranks = PLACES[ARGV[i + 1]]
  local weights = ranks and ranks[ARGV[i]]
  local known = weights and weights[ARGV[i + 2]]
  if known then return known end
  local rank, weight = num(ARGV[i]), num(ARGV[i + 2])
  if rank == nil or rank ~= math.floor(rank) or rank < 0 or rank >= MAX_CLASSES then
    fail('BADARG', 'rank must be an integer in [0, ' .. (MAX_CLASSES - 1) .. '], got ' .. tostring(ARGV[i]))
  end
  local tenant = ARGV[i + 1]
  if tenant == nil or #tenant > 64 or not string.find(tenant, '^[%w%-_.:]+$') then
    fail('BADARG', 'tenant must be 1-64 characters of [A-Za-z0-9-_.:], got ' .. tostring(tenant))
  end
  if weight == nil or weight ~= math.floor(weight) or weight < 1 or weight > MAX_WEIGHT then
    fail('BADARG', 'weight must be an integer in [1, ' .. MAX_WEIGHT .. '], got ' .. tostring(ARGV[i + 2]))
  end
  if PLACES_KEPT >= 1024 then PLACES, PLACES_KEPT = {}, 0 end
  ranks = PLACES[tenant] or {}
  PLACES[tenant] = ranks
  weights = ranks[ARGV[i]] or {}
  ranks[ARGV[i]] = weights
  -- (with the fair queue's share name and tag step: enqueue's, made once)
  known = {rank = rank, tenant = tenant, weight = weight, share = rank .. ':' .. tenant,
    step = math.ceil(QUANTUM / weight)}
  weights[ARGV[i + 2]], PLACES_KEPT = known, PLACES_KEPT + 1
  return known
end

local function in_flight()
  return redis.call('ZCOUNT', K.leases, LIVE, '+inf')
end

-- The window: (rate-limited, all) attempts of the last window_ms.
local function window()
  local horizon = '(' .. int(NOW - C.window_ms)
  return redis.call('ZCOUNT', K.limited, horizon, '+inf'), redis.call('ZCOUNT', K.attempts, horizon, '+inf')
end
