--[[ set_max.lua: change max_capacity at run time.

Not paused: the policy's new_max (lib/policy.lua): the adaptive policy
keeps what it learnt, lowers capacity to a lower n at once and approaches a
higher n as it approaches any ceiling (its slow start, its probes); seed
and fixed set capacity = n at once, up or down. Paused: capacity stays 0
and the resume uses the new n; a pause is never lifted by this. A reserve
(config reserve) of n or more is lowered to n - 1.

Uses    lib/common.lua, lib/args.lua, lib/call.lua, lib/fields.lua, lib/decisions.lua,
        lib/shares.lua, lib/upkeep.lua, lib/queue.lua, lib/policy.lua, lib/admin.lua
KEYS    the governor's keys, see lib/common.lua
ARGV
  ARGV[1] now      int ms or ''  injected clock, '' for Redis TIME
  ARGV[2] channel  string        where grants to waiters are announced
  ARGV[3] n        int >= 1      the new max_capacity
Reply
  the status reply of status.lua, after the change
  {SCHEMA, 'missing'}   no such governor: run init.lua, then call again
]]

local n = arg_int(3, 'max_capacity', 1)
if n > MAX_CAPACITY then fail('BADARG', 'max_capacity must be <= ' .. MAX_CAPACITY) end
-- step: the state
clock()
check_types()
if not load_all() then return missing_reply() end
keep_alive()

-- step: the writes
local before, capacity_before = CONFIG.max_capacity, STATE.capacity
set('config', 'max_capacity', n)
local reserve = CONFIG.reserve
if reserve >= n then set('config', 'reserve', n - 1) end  -- a reserve stays below the ceiling
if STATE.paused == 1 then
  if STATE.saved_capacity > n then set('state', 'saved_capacity', n) end
else
  POLICIES[CONFIG.policy].new_max(before)
end
log('set_max', 'from', before, 'to', n, 'capacity_from', capacity_before, 'why', 'operator')
redis.call('PUBLISH', CHANNEL, STATE.epoch .. ' !config')  -- clients learn the stored config anew
reclaim(true)
if CONFIG.reserve ~= reserve then recount(false) end
grant()
return finish(status_reply())
