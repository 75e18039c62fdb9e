--[[ reset.lua: forget what the policy learnt; optionally store a new config.

Clears the window, pause, hold and adaptive memory, counts the longest
lease TTL (ttl_max) again from the live leases, and sets capacity to
max_capacity (the adaptive policy: its slow start from the resume level,
lib/policy.lua). With config pairs, they replace the stored config first
(GovernorConfig of the caller: ``configure()``); without, the stored config
stays (``reset()``). Leases and the queue are kept: holders keep running,
waiters keep their places.

Uses    lib/common.lua, lib/call.lua, lib/fields.lua, lib/decisions.lua, lib/records.lua,
        lib/upkeep.lua, lib/queue.lua, lib/admin.lua, lib/config.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3..] config name, value pairs (lib/config.lua), or none
Reply
  the status reply of status.lua, after the reset
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

local cfg, raw = nil, nil
if #ARGV >= 3 then cfg, raw = parse_config(3) end
-- step: the state
clock()
check_types()
if not load_all() then return missing_reply() end
keep_alive()
local rate_limited, total = window()
-- step: the writes
local before = {'from', STATE.capacity, 'was_paused', STATE.paused, 'window_rate_limited', rate_limited,
  'window_attempts', total}
redis.call('DEL', KEY.attempts, KEY.limited)
-- The longest lease TTL (ttl_max, the length of a recovery hold) counted
-- again from the live leases: their holders are the clients that may
-- believe in a lease now (a lease that ended, or a one-off client's, is
-- forgotten); every holder's next renewal announces its own again. No
-- live lease: the lowest TTL, raised by the next lease granted.
local ids, longest = redis.call('ZRANGEBYSCORE', KEY.leases, LIVE, '+inf'), FIELDS.ttl_max[2]
for i = 1, #ids, 1000 do
  local chunk = {unpack(ids, i, math.min(i + 999, #ids))}
  local records = redis.call('HMGET', KEY.holders, unpack(chunk))
  for j = 1, #chunk do  -- (the record's TTL alone: "fence|ttl_ms|...", records.lua)
    local lease_ttl = tonumber(records[j] and string.match(records[j], '^%d+|(%d+)|'))
    if lease_ttl and lease_ttl > longest then longest = lease_ttl end
  end
end
before[#before + 1] = 'ttl_max_was'
before[#before + 1] = STATE.ttl_max or 0
set('state', 'ttl_max', longest)
set('state', 'ttl_cur', longest)
set('state', 'ttl_since', NOW)
if cfg then
  apply_config(cfg, raw)
  log('reset', 'why', 'operator: new config stored, learnt state cleared', unpack(before))
  redis.call('PUBLISH', CHANNEL, STATE.epoch .. ' !config')  -- clients learn the stored config anew
else
  clear_learnt()
  log('reset', 'why', 'operator: learnt state cleared', unpack(before))
end
reclaim(true)
grant()
return finish(status_reply())
