--[[ lib/call.lua: a call's start: its keys, the cluster check, the clock.

Uses lib/common.lua, lib/numbers.lua, lib/args.lua.
Defines: derive, clustered, begin, clock.

begin(keys, argv) starts every call (the registrations of
governor/scripts.py call it before the operation): it derives the
governor's keys from the state key (once per state key, remembered), checks
the keys a cluster call passed, and clears what the previous call left in
the per-call state of lib/common.lua. clock() reads the time when a call
first needs it.
]]

-- State key -> {KEY, KEYS, TYPE_OF} of its governor (TYPE_OF: key -> its
-- Redis type), derived once (at most 1,024 governors kept, then derived again).
local DERIVED, remember_derived = memo(1024)

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
  return remember_derived({named, list, types}, state)
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
  KEY, KEYS, TYPE_OF, ARGV = entry[1], entry[2], entry[3], argv
  NOW, LIVE, CHANNEL, READ_ONLY = nil, nil, argv[2], false
  STATE, CONFIG, POLICY, DIRTY, STORE, CREATED = nil, nil, nil, nil, nil, nil
  CALL.active, CALL.caps, CALL.held, CALL.live, CALL.repairs, CALL.ttl_noted = false, false, false, false, false, false
  CALL.foreign, CALL.ttl_rose, CALL.origin, CALL.tiers = false, false, false, false
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
